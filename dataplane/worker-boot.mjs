// A worker thread's entry (dataplane/workers.ts starts it): TypeScript through tsx, as the main
// thread runs it, then the worker itself.
import { register } from 'tsx/esm/api';

register();
await import('./worker-thread.ts');
