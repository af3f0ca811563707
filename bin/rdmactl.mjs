#!/usr/bin/env node
// rdmactl is a client of the REST API, which does not exist yet (issue 5: control plane).
console.error('rdmactl: not available yet: it is a client of the rdma-graph REST API, which is not built yet. ' +
  '`rdma-graph start` prints show runtime / show errors on SIGUSR1 and at exit meanwhile.');
process.exit(1);
