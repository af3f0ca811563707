#!/usr/bin/env node
// Runs bin/main.ts through tsx (TypeScript without a build step).
import { register } from 'tsx/esm/api';
register();
await import('./main.ts');
