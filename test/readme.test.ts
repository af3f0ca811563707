/**
 * The README's command blocks, run as written. Two daemons start the way the README says (the
 * embedded default and config/examples/peer.yaml, from the repository directory); then the
 * rdmactl session and the curl session run in bash, line for line, and what they print is
 * checked. Every other indented block of the README must be one this file knows is run by
 * another test (named below): a new block nobody runs fails here.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { skipOrFail } from './helpers.ts';
import { bash, blocks, daemon, README, RDMACTL } from './readme-helpers.ts';

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
  'modprobe mlx5_ib && modprobe ib_uverbs': 'test/hw/mlx5.test.ts (npm run test:hw; never run here: no RDMA device)',
  "import { Dataplane, loadConfig } from 'rdma-graph';":
    'test/dataplane.test.ts (the embedding API); loadConfig() is checked below',
};

const VERBS = 'node bin/rdma-graph.mjs exec -- ibv_devinfo -v';
const CURL = 'A=http://127.0.0.1:7070/v1; B=http://127.0.0.1:7071/v1';

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
  if (spawnSync('jq', ['--version']).status !== 0 || spawnSync('curl', ['--version']).status !== 0) {
    skipOrFail('jq and curl are needed (Debian packages jq, curl)');
    return;
  }
  const a = await daemon([]);
  const b = await daemon(['--config', 'config/examples/peer.yaml']);
  try {
    const all = blocks(README);
    // The memif link comes up within a second (the client retries every 250 ms).
    const up = bash(
      'for i in $(seq 50); do node bin/rdmactl.mjs show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1',
    );
    assert.is(up.code, 0, `memif link up:\n${up.out}`);
    const ctl = bash(all.find((x) => x.startsWith(RDMACTL)) as string);
    assert.is(ctl.code, 0, ctl.out);
    assert.match(ctl.out, /wr-id "s1" qpn \d+ send success byte-len 5/);
    assert.match(ctl.out, /wr-id "r1" qpn \d+ recv success byte-len 5/);
    assert.match(ctl.out, /^hello$/m);
    for (const w of ['w1', 'r2', 'f1']) assert.match(ctl.out, new RegExp(`wr-id "${w}" qpn \\d+ \\S+ success`));
    assert.match(ctl.out, /Time [\d.]+, 10\.000000 sec internal node vector rate/, 'show runtime');
    assert.match(ctl.out, /Packet 1\n/, 'show trace has the packets armed before the traffic');
    // The verbs block: A's run/verbs.sock and B's run/verbs-peer.sock, the programs unmodified.
    if (spawnSync('ibv_devinfo', ['--help']).error) skipOrFail('ibverbs-utils is not installed (ibv_devinfo)');
    else if (spawnSync('ib_write_bw', ['--help']).error) skipOrFail('perftest is not installed (ib_write_bw)');
    else {
      const verbs = bash(all.find((x) => x.startsWith(VERBS)) as string);
      assert.is(verbs.code, 0, verbs.out);
      assert.match(verbs.out, /^hca_id:\s+rdmagraph_memif0$/m);
      assert.match(verbs.out, /GID\[\s*0\]:\s+::ffff:10\.10\.0\.1, RoCE v2/);
      assert.is(
        verbs.out.match(/1000 iters in [\d.]+ seconds = [\d.]+ usec\/iter/g)?.length,
        2,
        'both pingpong sides report',
      );
      assert.ok(
        (verbs.out.match(/^ 65536\s+2000\s+[\d.]+\s+[\d.]+/gm)?.length ?? 0) === 2,
        `ib_write_bw reports:\n${verbs.out}`,
      );
    }
    const curl = bash(all.find((x) => x.startsWith(CURL)) as string);
    assert.is(curl.code, 0, curl.out);
    assert.match(curl.out, /\{"qpn":\d+,"state":"rts"\}\n\{"qpn":\d+,"state":"rts"\}/);
    assert.match(curl.out, /"wrId":"w1".*"status":"success"/);
    assert.match(curl.out, /^hello$/m);
    assert.match(curl.out, /^rdmagraph_qp_tx_packets_total\{.*\} [1-9]\d*$/m, "the QP's counters in /metrics");
  } finally {
    a.proc.kill('SIGTERM');
    b.proc.kill('SIGTERM');
    assert.is(await a.exit, 0, a.out);
    assert.is(await b.exit, 0, b.out);
  }
});

test.run();
