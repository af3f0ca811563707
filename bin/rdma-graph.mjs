#!/usr/bin/env node
// rdma-graph: runs bin/main.ts through tsx (TypeScript without a build step). `exec` goes
// straight to the compiled bin/dist/exec.mjs (bin/build-cli.mjs) while it is newer than its
// sources: it replaces this process with the program, so it starts without the TypeScript loader.
import { isFresh } from './fresh.mjs';

const root = new URL('../', import.meta.url);
if (process.argv[2] === 'exec' && isFresh(root, 'bin/dist/exec.mjs', 'bin/dist/exec.inputs.json')) {
  const { exec } = await import(new URL('bin/dist/exec.mjs', root).href);
  exec(process.argv.slice(3));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('./main.ts');
}
