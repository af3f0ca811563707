// A worker thread's entry (dataplane/workers/facade.ts starts it): TypeScript through tsx, as the main
// thread runs it, then the worker itself.
import { register } from 'tsx/esm/api';

register();
await import('./thread.ts');
