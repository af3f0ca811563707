/**
 * Memif queues spread over workers (rx-queues 2 with cpu.workers 2, VPP's rx-placement): data
 * planes A and B each run two workers over one memif link with two queue pairs; worker k of each
 * polls and transmits on queue k (worker 1 through a MemifLane, drivers/memif-lane.ts). QPs on
 * worker k of both sides talk over queue k with no handoff at all; a QP on A's worker 0 talking to
 * one on B's worker 1 arrives on B's queue 0 and crosses to worker 1 through worker-handoff.
 * Checked: SEND/WRITE/READ with the data compared, the handoff counters, each worker's lane
 * counters, and the link surviving the owner's restart.
 */
import { skip, test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { sleep } from './helpers.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { existsSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const HOSTILE = join(NATIVE_BUILD_DIR, 'memif-hostile');
import { connect, end, exchange, handed, memifPair, serverA } from './workers-helpers.ts';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { nextPort, runTool, serverListening } from './verbs-helpers.ts';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { bash, blocks, daemon, README } from './readme-helpers.ts';
import { formatRxPlacement } from '../api/render.ts';

let sockets = 0;

const pair = (workersB = 2, sock?: string, a?: DataplaneApi) => memifPair({ workersB, sock, a });

/** Vectors memif-input processed on each worker. */
async function memifVectors(dp: DataplaneApi): Promise<number[]> {
  const rt = await dp.runtime();
  return rt.map((t) => t.rows.find((r) => r.name === 'memif-input')?.vectors ?? 0);
}

test('each worker polls its own memif queue: QPs on worker k of both sides talk over queue k, no handoff', async () => {
  const p = await pair();
  try {
    await sleep(200); // past the gratuitous ARPs each worker sends when its queue comes up
    const ca0 = (await p.a.interface('m0')).counters,
      cb0 = (await p.b.interface('n0')).counters;
    const before = await memifVectors(p.a);
    // Frames B (the client, its queues over threads: copy mode) gathered from an MR, over the
    // owner's queue and worker 1's lane.
    const gathered = async () =>
      ((await p.b.hardware()).find((h) => h.name === 'n0')?.counters as { txGathered: number }).txGathered;
    for (const k of [0, 1]) {
      const x = await end(p.a, 'm0', k),
        y = await end(p.b, 'n0', k);
      assert.is(x.pd.pd > 1 << 24, k === 1, `A's PD on worker ${k}`);
      assert.is(y.pd.pd > 1 << 24, k === 1, `B's PD on worker ${k}`);
      await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
      const g0 = await gathered();
      await exchange(p.a, p.b, x, y, k, 30000);
      // B's 30000-byte WRITE and 20000-byte Read Response went from its MR straight into A's
      // buffers: on worker 1 through its lane, as on the owner's queue.
      const g = (await gathered()) - g0;
      assert.ok(
        g >= Math.ceil(30000 / 1448) + Math.ceil(20000 / 1448),
        `worker ${k}: ${g} frames gathered from B's MR`,
      );
    }
    assert.equal(await handed(p.a), [0, 0], "A handed nothing over: every frame came on its QP's worker's queue");
    assert.equal(await handed(p.b), [0, 0], 'nor did B');
    assert.is(
      formatRxPlacement(await p.a.rxPlacement()),
      'Thread 1 (rdma_wk_0):\n  node memif-input:\n    m0 queue 0 (adaptive)\n' +
        'Thread 2 (rdma_wk_1):\n  node memif-input:\n    m0 queue 1 (adaptive)\n',
      'show interface rx-placement: one queue per worker',
    );
    const after = await memifVectors(p.a);
    assert.ok(after[1] - before[1] > 10, `worker 1 received on its own queue: ${before} -> ${after}`);
    const hw = await p.a.hardware();
    const m0 = hw.find((h) => h.name === 'm0');
    assert.ok(m0 !== undefined);
    assert.is(m0.info['zero-copy'], 'no', 'queues over threads run in copy mode');
    // The interface's counters add both queues up (the owner's and worker 1's lane): what one
    // side sent the other received, over a link that loses nothing. The last ACKs may still be
    // on the rings when the exchange returns: read until the counters stop moving.
    let ca = (await p.a.interface('m0')).counters,
      cb = (await p.b.interface('n0')).counters;
    for (let i = 0; i < 200; i++) {
      await sleep(20);
      const na = (await p.a.interface('m0')).counters,
        nb = (await p.b.interface('n0')).counters;
      const still = JSON.stringify([na, nb]) === JSON.stringify([ca, cb]);
      ca = na;
      cb = nb;
      if (still) break;
    }
    const all = JSON.stringify([ca0, ca, cb0, cb]);
    assert.ok(ca.rxPackets - ca0.rxPackets > 40, all);
    assert.is(ca.rxPackets - ca0.rxPackets, cb.txPackets - cb0.txPackets, `A received what B sent: ${all}`);
    assert.is(cb.rxPackets - cb0.rxPackets, ca.txPackets - ca0.txPackets, `B received what A sent: ${all}`);
  } finally {
    await p.close();
  }
});

test('a QP whose peer sits on the other worker: its frames arrive on the wrong queue and are handed over', async () => {
  const p = await pair();
  try {
    const x = await end(p.a, 'm0', 0),
      y = await end(p.b, 'n0', 1);
    await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
    await exchange(p.a, p.b, x, y, 7, 30000);
    const [a0, a1] = await handed(p.a);
    const [b0, b1] = await handed(p.b);
    // A's worker 0 sends on queue 0 (the SEND, the READ request, ACKs): B's worker 0 gets them
    // and hands them to worker 1; B's worker 1 sends on queue 1 (the WRITE, the READ response),
    // which A's worker 1 polls and hands to worker 0.
    assert.ok(b0 >= 2 && a1 > 20, `handoff on B's worker 0 (${b0}) and A's worker 1 (${a1})`);
    assert.is(a0 + b1, 0, 'nothing the other way');
  } finally {
    await p.close();
  }
});

test('a peer with one worker: its single queue reaches worker 0, which hands worker 1 its frames', async () => {
  const p = await pair(0);
  try {
    const x = await end(p.a, 'm0', 1);
    const pd = await p.b.createPd({ interface: 'n0' });
    const cq = await p.b.createCq({ depth: 256, interface: 'n0' });
    const mr = await p.b.createMr({ pd: pd.pd, length: 65536, access: ['local-write', 'remote-write', 'remote-read'] });
    const qp = await p.b.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: 'n0' });
    const y = { pd, cq, mr, qp };
    await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
    await exchange(p.a, p.b, x, y, 3, 30000);
    assert.ok((await handed(p.a))[0] > 10, 'A worker 0 handed worker 1 its frames');
  } finally {
    await p.close();
  }
});

test("a peer with one queue pair: worker 1's queue has no rings, so it sends on the owner's (one thread at a time) and receives through handoff", async () => {
  const p = await memifPair({ workersB: 0, queuesB: 1 });
  try {
    const x = await end(p.a, 'm0', 1);
    const y = await end(p.b, 'n0');
    await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
    await exchange(p.a, p.b, x, y, 11, 30000);
    assert.ok((await handed(p.a))[0] > 10, "worker 0 handed worker 1 its QP's frames");
    const hw = (await p.a.hardware()).find((h) => h.name === 'm0');
    assert.match(String(hw?.info.rings), /^1 rx, 1 tx/, 'the peer took one ring each way');
  } finally {
    await p.close();
  }
});

test("the owner of the link crashes and comes back: worker 1's queue attaches to the new owner and carries traffic again", async () => {
  const p = await pair();
  try {
    const workers = (p.a as unknown as { crashWorker(k: number): void }).crashWorker;
    assert.type(workers, 'function', 'the crash hook exists');
    (p.a as unknown as { crashWorker(k: number): void }).crashWorker(0);
    // A new worker thread loads the data plane's modules: up to 10 s on a loaded machine.
    for (let i = 0; i < 500 && !p.logs.some((l) => /rdma_wk_0\) running again/.test(l)); i++) await sleep(20);
    assert.ok(
      p.logs.some((l) => /rdma_wk_0\) running again/.test(l)),
      `worker 0 restarted: ${p.logs.join(' | ')}`,
    );
    for (let i = 0; i < 300; i++) {
      const all = [...(await p.a.interfaces()), ...(await p.b.interfaces())];
      if (all.every((x) => x.state === 'up')) break;
      await sleep(20);
    }
    const x = await end(p.a, 'm0', 1),
      y = await end(p.b, 'n0', 1);
    await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
    await exchange(p.a, p.b, x, y, 9, 30000);
    assert.equal(await handed(p.a), [0, 0], 'worker 1 kept its own queue');
  } finally {
    await p.close();
  }
});

test('a peer breaking the ring of the queue worker 1 polls: the owner drops the link with the reason, and the queue works again after', async () => {
  if (!existsSync(HOSTILE)) skip(`${HOSTILE} not built (npm run build)`);
  const sock = `@rg-lanes-${process.pid}-${++sockets}`;
  const logs: string[] = [];
  const a = await serverA(sock, 2, 2, logs);
  let p: Awaited<ReturnType<typeof pair>> | null = null;
  try {
    // Its rings are queue 1 only: worker 1's lane finds head 0x8000 past tail.
    const h = await new Promise<string>((resolve) => {
      const c = spawn(HOSTILE, ['jump1', sock], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      c.stdout.on('data', (d) => (out += d));
      c.stderr.on('data', (d) => (out += d));
      c.on('exit', () => resolve(out));
    });
    assert.match(h, /connected/, h);
    assert.match(h, /disconnect: Ring index beyond the ring size/, h);
    const hw = (await a.hardware()).find((x) => x.name === 'm0');
    assert.match(String(hw?.info['last disconnect']), /Ring index beyond the ring size \(by us\)/);
    assert.is((await a.health()).status, 'ok', 'the data plane serves on');
    p = await pair(2, sock, a);
    const x = await end(p.a, 'm0', 1),
      y = await end(p.b, 'n0', 1);
    await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
    await exchange(p.a, p.b, x, y, 5, 30000);
  } finally {
    if (p !== null) await p.close();
    else await a.close();
  }
});

/**
 * Two 2-worker data planes over a memif link of two queue pairs, each serving a verbs socket
 * (sa: A's, sb: B's), for `tool` (skipped, or failed under CI=true, without it or the library).
 */
async function withVerbs(
  tool: string,
  pkg: string,
  body: (p: Awaited<ReturnType<typeof pair>>, sa: string, sb: string) => Promise<void>,
): Promise<void> {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync(tool, ['--help']).error) skip(`${pkg} is not installed (${tool})`);
  const p = await pair();
  const dir = mkdtempSync(join(tmpdir(), 'lanes-verbs-'));
  const sa = join(dir, 'a.sock'),
    sb = join(dir, 'b.sock');
  const va = p.a.serveVerbs({ path: sa }),
    vb = p.b.serveVerbs({ path: sb });
  try {
    await body(p, sa, sb);
  } finally {
    va.close();
    vb.close();
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

test('unmodified verbs programs go to the workers round robin: two ibv_rc_pingpong pairs at once, each on its own worker and queue, nothing handed over', () =>
  withVerbs('ibv_rc_pingpong', 'ibverbs-utils', async (p, sa, sb) => {
    const runs = [];
    for (let i = 0; i < 2; i++) {
      const port = String(nextPort());
      const cmd = ['ibv_rc_pingpong', '-g', '0', '-c', '-n', '1000'];
      const server = runTool(sb, [...cmd, '-p', port]);
      await serverListening(server, Number(port));
      const client = runTool(sa, [...cmd, '-p', port, '127.0.0.1']);
      runs.push(server.done, client.done);
    }
    // While they run: A's two QPs, one in each worker's half of the port range.
    const seen = new Set<number>();
    for (let i = 0; i < 300 && seen.size < 2; i++) {
      for (const q of await p.a.qps()) if (q.owner?.includes('ibv_rc_pingpong')) seen.add(q.qpn >= 25000 ? 1 : 0);
      await sleep(10);
    }
    const results = await Promise.all(runs);
    for (const r of results) {
      assert.is(r.code, 0, `${r.signal} ${r.out}`);
      assert.match(r.out, /1000 iters in [\d.]+ seconds/);
    }
    assert.equal([...seen].sort(), [0, 1], 'one program on each worker');
    assert.equal(await handed(p.a), [0, 0], "A's programs' frames came on their workers' queues");
    assert.equal(await handed(p.b), [0, 0], "and B's");
  }));

test('a worker dies under a verbs program: the program sees its connection close and its work requests flushed, it does not hang', () =>
  withVerbs('ib_send_lat', 'perftest', async (p, sa, sb) => {
    const port = String(nextPort());
    const cmd = ['ib_send_lat', '-x', '0', '-F', '-n', '100000000'];
    const server = runTool(sb, [...cmd, '-p', port]);
    await serverListening(server, Number(port));
    const client = runTool(sa, [...cmd, '-p', port, '127.0.0.1']);
    let qpn = -1;
    for (let i = 0; i < 1000 && qpn < 0; i++) {
      const q = (await p.a.qps()).find((x) => x.owner?.includes('ib_send_lat') && x.counters.txPackets > 100);
      if (q !== undefined) qpn = q.qpn;
      else await sleep(20);
    }
    assert.ok(qpn > 0, 'the ping-pong runs');
    const k = qpn >= 25000 ? 1 : 0;
    const t0 = Date.now();
    (p.a as unknown as { crashWorker(k: number): void }).crashWorker(k);
    const c = await client.done;
    assert.is(c.signal, null, `the client is not killed by the timeout\n${c.out}`);
    assert.not.equal(c.code, 0, 'it exits with an error');
    assert.ok(Date.now() - t0 < 10_000, `within 10 s (took ${Date.now() - t0} ms)`);
    assert.match(c.out, /rdma-graph verbs: the daemon closed the connection: the posted work requests are flushed/);
    // The peer on B: its QP notices only if it had something outstanding (retry exceeded); one
    // waiting to receive waits, as for a peer that vanished on a real network (the dead QP could
    // not say goodbye). Not asserted; ended here.
    server.kill();
    await server.done;
  }));

test("frames handed to a worker passed the receiving worker's fault injector once, not again on the way in", async () => {
  const p = await pair();
  try {
    // A's worker 1 QP talks to B's worker 0 QP: B sends on queue 0, which A's worker 0 receives
    // (its injector duplicates every frame) and hands to worker 1.
    const x = await end(p.a, 'm0', 1),
      y = await end(p.b, 'n0', 0);
    await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
    await p.a.setFault('m0', 'rx', { seed: 3, duplicate: 1 });
    const msg = new Uint8Array(100).fill(7);
    await p.b.writeMr(y.mr.mr, 0, msg);
    const N = 20;
    for (let i = 0; i < N; i++)
      await p.a.postRecv(x.qp.qpn, { wrId: i, sge: [{ mr: x.mr.mr, offset: 0, length: 4096 }] });
    for (let i = 0; i < N; i++)
      await p.b.postSend(y.qp.qpn, { wrId: i, opcode: 'send', sge: [{ mr: y.mr.mr, offset: 0, length: msg.length }] });
    let got = 0;
    while (got < N) {
      const r = await p.a.pollCq(x.cq.cq, 64, 3000);
      assert.ok(r.completions.length > 0, `receives stalled at ${got}`);
      got += r.completions.length;
    }
    await sleep(100);
    const q = await p.a.getQp(x.qp.qpn);
    const sb = (await p.b.getQp(y.qp.qpn)).counters;
    // Each segment B sent (N SENDs of one segment, plus what it retransmitted: a loaded machine
    // can delay ACKs past an RTO) arrives twice, the original and the injector's copy: every
    // arrival but the first of each SEND is a duplicate. Were the handed frames run through
    // worker 1's injector as well, each would arrive four times.
    const segments = N + sb.retransmits + sb.fastRetransmits;
    const what = JSON.stringify({ a: q.counters, b: sb });
    assert.ok(q.counters.duplicates >= N, what);
    assert.ok(q.counters.duplicates <= 2 * segments - N, `at most two arrivals per segment sent: ${what}`);
  } finally {
    await p.close();
  }
});

/** Records in a pcap file (24-byte header, then a 16-byte header and the bytes per record). */
function pcapRecords(file: string): number {
  const b = readFileSync(file);
  let n = 0;
  for (let o = 24; o + 16 <= b.length; o += 16 + b.readUInt32LE(o + 8)) n++;
  return n;
}

test('capture and faults where frames meet the device: the owner and worker 1 each capture their own queue, once; fault counters add up', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'lanes-capture-'));
  const sock = `@rg-lanes-${process.pid}-${++sockets}`;
  const a = await serverA(sock, 2, 2, [], {}, false, { capture: { dir, maxBytes: 1 << 24 } });
  const p = await pair(2, sock, a);
  try {
    await sleep(200); // past the gratuitous ARPs
    const v = await p.a.capture('m0', { direction: 'both', file: 'm0.pcap' });
    assert.is(v.capture.rx, join(dir, 'm0.pcap'));
    await p.a.setFault('m0', 'rx', { seed: 1, duplicate: 0.05 });
    const c0 = (await p.a.interface('m0')).counters;
    for (const k of [0, 1]) {
      const x = await end(p.a, 'm0', k),
        y = await end(p.b, 'n0', k);
      await connect(p.a, p.b, x, y, '10.70.0.1', '10.70.0.2');
      await exchange(p.a, p.b, x, y, k, 30000);
    }
    await sleep(100);
    // The last ACKs may still be on the rings (the workers are other threads, late on a loaded
    // machine): stop the captures once the counters stop moving, not after a fixed wait alone.
    for (let i = 0, last = ''; i < 200; i++) {
      const now = JSON.stringify([(await p.a.interface('m0')).counters, (await p.b.interface('n0')).counters]);
      if (now === last) break;
      last = now;
      await sleep(20);
    }
    const stopped = await p.a.stopCapture('m0');
    assert.is(stopped.capture.rx, null);
    const c1 = (await p.a.interface('m0')).counters;
    const files = ['m0.pcap', 'm0-tx.pcap', 'm0-wk1.pcap', 'm0-wk1-tx.pcap'].map((f) => pcapRecords(join(dir, f)));
    assert.ok(
      files[0] > 10 && files[2] > 10 && files[1] > 0 && files[3] > 0,
      `each worker captured what its own queue carried, both ways: ${files}`,
    );
    // Every frame was received on one queue and met one injector: the injectors together saw
    // what the interface received, and the two rx files hold that (each once) with the copies
    // the injectors added (a capture sees what "arrived"); the two tx files what it sent.
    const f = (await p.a.interface('m0')).fault.rx;
    const what = `${files} ${JSON.stringify([c0, c1, f])}`;
    assert.ok(f !== null && f.packets === c1.rxPackets - c0.rxPackets, `both injectors counted: ${what}`);
    assert.is(files[0] + files[2], c1.rxPackets - c0.rxPackets + f.duplicated, `rx: ${what}`);
    assert.is(files[1] + files[3], c1.txPackets - c0.txPackets, `tx: ${what}`);
  } finally {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the README's memif-queues block: the daemon, and show interface rx-placement as written", async () => {
  const block = blocks(README).find((b) => b.startsWith('npm start -- --config config/examples/memif-queues.yaml'));
  assert.ok(block, 'the README shows the block');
  // Every line of it runs: the start, then the rdmactl line.
  const lines = block.split('\n');
  assert.is(lines.length, 2, `the block is a start line and an rdmactl line:\n${block}`);
  const [start, show] = lines;
  const d = await daemon([], start);
  try {
    assert.match(d.out, /2 worker threads/);
    const r = bash(show);
    assert.is(r.code, 0, r.out);
    assert.is(
      r.out,
      'Thread 1 (rdma_wk_0):\n  node memif-input:\n    memif0 queue 0 (adaptive)\n' +
        'Thread 2 (rdma_wk_1):\n  node memif-input:\n    memif0 queue 1 (adaptive)\n',
    );
  } finally {
    d.proc.kill('SIGTERM');
  }
  assert.is(await d.exit, 0, d.out);
  await d.closed;
});

test.run();
