/**
 * The README's command blocks, run as written. Two daemons start the way the README says (the
 * embedded default and config/examples/peer.yaml, from the repository directory); then the
 * rdmactl session and the curl session run in bash, line for line, and what they print is
 * checked. Every other indented block of the README must be one this file knows is run by
 * another test (named below): a new block nobody runs fails here.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { blocks, CURL, README, RDMACTL, runSessions, VERBS } from './readme-helpers.ts';

/** Blocks other tests run, by their first line, and where. */
const ELSEWHERE: Record<string, string> = {
  'npm ci && npm start': 'test/daemon.test.ts (npm start, SIGTERM to its PID); the two-daemon set-up below',
  'npm ci && npm test': '.ci/run runs exactly this',
  "new MemifDriver('memif0', { socket: 'run/memif.sock', role: 'server', id: 0, secret: 'k',":
    'test/memif.test.ts (the driver with these options)',
  'tshark -X lua_script:nodes/rdma/trp.lua -d udp.port==49200,urdma_trp \\':
    'test/trp-dissector.test.ts (the same tshark options on hand-built messages)',
  'npm start -- --config config/examples/dpdk-memif.yaml':
    'test/dpdk-daemon.test.ts (beside the embedded default, the rdmactl session across them)',
  'modprobe vfio-pci && dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0':
    'test/hw/dpdk-nic.test.ts (npm run test:hw; never run here: no NIC for DPDK)',
  'npm start -- --config config/examples/workers.yaml':
    'test/workers.test.ts (the daemon with two workers, the rdmactl line as written, a clean stop)',
  'npm start -- --config config/examples/memif-queues.yaml':
    'test/worker-lanes.test.ts (the daemon, show interface rx-placement as written: one queue per worker)',
  'modprobe mlx5_ib && modprobe ib_uverbs': 'test/hw/mlx5.test.ts (npm run test:hw; never run here: no RDMA device)',
  "import { Dataplane, loadConfig } from 'rdma-graph';":
    'test/dataplane.test.ts (the embedding API); loadConfig() is checked below',
};

test('every README block is run by this file or a named test', () => {
  const firsts = blocks(README).map((b) => b.split('\n')[0]);
  for (const f of firsts)
    assert.ok(f === RDMACTL || f === CURL || f === VERBS || f in ELSEWHERE, `README block nobody runs: "${f}"`);
  assert.ok(firsts.includes(RDMACTL) && firsts.includes(CURL), 'the rdmactl and curl sessions are there');
});

test("the embedding snippet's loadConfig() loads the embedded default from anywhere", async () => {
  const { loadConfig } = await import('../index.ts');
  const c = loadConfig();
  assert.equal(
    c.interfaces.map((i) => [i.name, i.driver]),
    [['memif0', 'memif']],
  );
});

test('the rdmactl and curl sessions run as written against the two daemons the README starts', async () => {
  await runSessions([]);
});

test.run();
