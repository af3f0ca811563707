#!/usr/bin/env node
// rdmactl: the command-line client of the rdma-graph REST API (api/rdmactl.ts), through tsx.
import { register } from 'tsx/esm/api';
register();
const { main } = await import('../api/rdmactl-cli.ts');
process.exitCode = await main(process.argv.slice(2));
