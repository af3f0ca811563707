#!/usr/bin/env node
// rdmactl: the command-line client of the rdma-graph REST API (api/rdmactl.ts). Runs the
// compiled bin/dist/rdmactl.mjs (bin/build-cli.mjs) while it is newer than all its sources,
// otherwise the sources through tsx.
import { isFresh } from './fresh.mjs';

const root = new URL('../', import.meta.url);
let main;
if (isFresh(root, 'bin/dist/rdmactl.mjs', 'bin/dist/rdmactl.inputs.json')) {
  ({ main } = await import(new URL('bin/dist/rdmactl.mjs', root).href));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../api/rdmactl-cli.ts'));
}
process.exitCode = await main(process.argv.slice(2));
