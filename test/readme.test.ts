/**
 * The README's command blocks, run as written. Two daemons start the way the README says (the
 * embedded default and config/examples/peer.yaml, from the repository directory); then the
 * rdmactl session and the curl session run in bash, line for line, and what they print is
 * checked. Every other indented block of the README must be one this file knows is run by
 * another test (named below): a new block nobody runs fails here.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  bash,
  blocks,
  CURL,
  DPDK_LINE,
  EMBED,
  PROBES,
  RDMACM,
  README,
  RDMACTL,
  ROOT,
  runSessions,
  VERBS,
} from './readme-helpers.ts';

/**
 * Every block of the README and how it is known to run as written: `whole` blocks are found by
 * their first line and run in full (every line) by the named test; `exact` blocks are run by the
 * named test from a copy, so the README must show exactly that copy.
 */
const CI_RUN = readFileSync(join(ROOT, '.ci/run'), 'utf8');
const CLAIMS: Record<string, { where: string; whole: true } | { where: string; exact: string }> = {
  [RDMACTL]: { where: 'this file (checkSessions), and test/workers.test.ts with A on workers', whole: true },
  [CURL]: { where: 'this file (checkSessions), and test/workers.test.ts with A on workers', whole: true },
  [VERBS]: { where: 'this file (checkSessions), and test/workers.test.ts with A on workers', whole: true },
  [PROBES]: { where: 'test/verbs-probes.test.ts (against the two daemons the README starts)', whole: true },
  [RDMACM]: { where: 'this file (checkSessions), and test/workers.test.ts with A on workers', whole: true },
  'npm ci && npm start': {
    where: '.ci/run runs npm ci; test/daemon.test.ts runs npm start (SIGTERM to its PID) and the two daemons below',
    exact: 'npm ci && npm start',
  },
  'npm ci && npm test': {
    where: '.ci/run runs exactly this line',
    // The line of .ci/run that runs the tests.
    exact: CI_RUN.split('\n').find((l) => l.startsWith('npm ci')) ?? '(.ci/run has no npm ci line)',
  },
  "new MemifDriver('memif0', { socket: 'run/memif.sock', role: 'server', id: 0, secret: 'k',": {
    where: 'this file (the snippet evaluated)',
    whole: true,
  },
  'tshark -X lua_script:nodes/rdma/trp.lua -d udp.port==49200,urdma_trp \\': {
    where: 'test/trp-dissector.test.ts (the block run in a folder with capture.pcap and the script)',
    whole: true,
  },
  [DPDK_LINE]: { where: 'test/dpdk-daemon.test.ts (beside the embedded default)', exact: DPDK_LINE },
  'modprobe vfio-pci && dpdk-devbind.py --bind=vfio-pci 0000:3b:00.0': {
    where: 'test/hw/dpdk-nic.test.ts (npm run test:hw; never run here: no NIC for DPDK)',
    whole: true,
  },
  'modprobe mlx5_ib && modprobe ib_uverbs': {
    where: 'test/hw/mlx5.test.ts (npm run test:hw; never run here: no RDMA device)',
    whole: true,
  },
  'npm start -- --config config/examples/workers.yaml': { where: 'test/workers.test.ts', whole: true },
  'npm start -- --config config/examples/memif-queues.yaml': { where: 'test/worker-lanes.test.ts', whole: true },
  [EMBED]: { where: "test/package.test.ts (run with the '...' line as a print)", whole: true },
};

test('every README block is run as written, by this file or a named test', () => {
  const all = blocks(README);
  assert.ok(all.length >= 12, `found ${all.length} blocks`);
  const firsts = all.map((b) => b.split('\n')[0]);
  for (const [i, b] of all.entries()) {
    const claim = CLAIMS[firsts[i]];
    assert.ok(claim, `README block nobody runs:\n${b}`);
    if ('exact' in claim) assert.is(b, claim.exact, `the README block ${claim.where} runs`);
  }
  for (const f of Object.keys(CLAIMS)) assert.ok(firsts.includes(f), `a claimed block is gone from the README: "${f}"`);
});

test("the README's MemifDriver snippet, evaluated as written, makes the interface it describes", async () => {
  const block = blocks(README).find((b) => b.startsWith('new MemifDriver('));
  assert.ok(block, 'the README shows the snippet');
  const { MemifDriver } = await import('../drivers/memif.ts');
  // The point is to run the README's text as code: the one eval of the project, on our own file.
  // oxlint-disable-next-line typescript/no-implied-eval
  const d = new Function('MemifDriver', `return ${block};`)(MemifDriver) as InstanceType<typeof MemifDriver>;
  assert.instance(d, MemifDriver);
  assert.is(d.name, 'memif0');
  assert.is(d.socket, 'run/memif.sock');
  assert.is(d.role, 'server');
  assert.is(d.id, 0);
  assert.equal([d.mtu, d.rxQueues, d.txQueues, d.ringSize, d.bufferSize], [1500, 1, 1, 1024, 2048]);
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
  await runSessions([], undefined, () => {
    // Daemon A is the memif server: the verbs block's ib_write_bw (towards it) and
    // ibv_rc_pingpong's Sends were received with their payload left in B's memory until placed.
    const hw = bash('node bin/rdmactl.mjs show hardware memif0');
    const m = /rxDeferred\s+(\d+)/.exec(hw.out);
    assert.ok(m !== null && Number(m[1]) >= 2000, `A received the Writes in place:\n${hw.out}`);
    // Daemon B, the zero-copy memif client, copied those Writes' payloads from ib_write_bw's MR
    // straight into its own transmit slots.
    const hwb = bash('node bin/rdmactl.mjs --api http://127.0.0.1:7071 show hardware memif0');
    const g = /txGathered\s+(\d+)/.exec(hwb.out);
    assert.ok(g !== null && Number(g[1]) >= 2000, `B gathered the Writes from the MR:\n${hwb.out}`);
  });
});

test.run();
