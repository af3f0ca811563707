/**
 * The RDMA tests with one side on DPDK: A is the dpdk driver's net_memif client on the
 * process's mbuf mempool (zero copy), B our memif server (twoStacks({ link: 'dpdk' })): every
 * rdma-ops test (every opcode, sizes up to 16 MiB both ways, gather/scatter, SRQ, bursts, the
 * connection manager). Skips (fails under CI=true) without dpdk.node.
 */
import { existsSync } from 'node:fs';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { rdmaOpsSuite } from './rdma-ops-helpers.ts';
import { skip } from './harness.ts';

if (!existsSync(`${NATIVE_BUILD_DIR}dpdk.node`)) skip('dpdk.node was not built (install libdpdk-dev, npm run build)');
rdmaOpsSuite('dpdk').run();
