import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  Graph,
  createPool,
  type Frame,
  type NodeRuntime,
  formatRuntime,
  formatTrace,
  formatErrors,
} from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { createPipe } from '../drivers/pipe.ts';
import { PcapDriver } from '../drivers/pcap.ts';
import { memPool, sleep } from './helpers.ts';

/** A node that records (rxIf, index, bytes) of what it gets and frees it. */
function capture(g: Graph, name: string, log: { rxIf: number; bi: number; bytes: number[] }[]) {
  g.register({
    name,
    fn: (rt: NodeRuntime, fr: Frame | null) => {
      const f = fr as Frame,
        pool = rt.graph.pool;
      for (let i = 0; i < f.n; i++)
        log.push({ rxIf: pool.rxIf[f.vec[i]], bi: f.vec[i], bytes: Array.from(pool.packetBytes(f.vec[i])) });
      pool.free(f.vec, 0, f.n);
      return f.n;
    },
  });
}

/** An input node that sends queued byte arrays to `next`. */
function generator(g: Graph, name: string, next: string, queue: number[][], sent: number[]) {
  g.register({
    name,
    type: 'input',
    next: [next],
    fn: (rt: NodeRuntime) => {
      let n = 0;
      while (queue.length && n < 256) {
        const b = Uint8Array.from(queue.shift() as number[]);
        const bi = rt.graph.pool.writePacket(b, 0, b.length);
        sent.push(bi);
        rt.scratch[n++] = bi;
      }
      rt.graph.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
}

test('pipe through the graph: both directions, zero-copy, counters, runtime rows and trace', () => {
  const pool = memPool(512);
  const g = new Graph({ pool });
  const at0: { rxIf: number; bi: number; bytes: number[] }[] = [],
    at1: typeof at0 = [];
  const q0: number[][] = [],
    q1: number[][] = [],
    sent0: number[] = [],
    sent1: number[] = [];
  capture(g, 'cap0', at0);
  capture(g, 'cap1', at1);
  generator(g, 'gen0', 'pipe0-output', q0, sent0);
  generator(g, 'gen1', 'pipe1-output', q1, sent1);
  const [a, b] = createPipe('pipe0', 'pipe1');
  const ifs = new Interfaces(g);
  const i0 = ifs.add(a, { next: 'cap0' });
  const i1 = ifs.add(b, { next: 'cap1' });
  g.build();
  for (let k = 0; k < 5; k++) q0.push([0xa0, k, 1, 2, 3]);
  for (let k = 0; k < 3; k++) q1.push([0xb0, k]);
  g.traceAdd('pipe-input', 1);
  g.runPass(); // gen -> output -> tx -> peer ring
  g.runPass(); // pipe-input -> capture
  assert.equal(
    at1.map((x) => x.bytes),
    [0, 1, 2, 3, 4].map((k) => [0xa0, k, 1, 2, 3]),
  );
  assert.equal(
    at0.map((x) => x.bytes),
    [0, 1, 2].map((k) => [0xb0, k]),
  );
  assert.equal(
    at1.map((x) => x.bi),
    sent0,
    'same buffer indices arrive: nothing copied',
  );
  assert.ok(at1.every((x) => x.rxIf === i1.index) && at0.every((x) => x.rxIf === i0.index));
  const c0 = i0.counters(),
    c1 = i1.counters();
  assert.is(c0.txPackets, 5);
  assert.is(c0.txBytes, 25);
  assert.is(c0.rxPackets, 3);
  assert.is(c1.rxPackets, 5);
  assert.is(c1.txPackets, 3);
  const text = formatRuntime([g.runtimeSnapshot()]);
  for (const n of ['pipe-input', 'pipe0-output', 'pipe0-tx', 'pipe1-output', 'pipe1-tx', 'cap0', 'cap1'])
    assert.match(text, new RegExp(`^${n} `, 'm'));
  const tr = g.traceSnapshot();
  assert.is(tr.packets.length, 1);
  assert.equal(
    tr.packets[0].entries.map((e) => e.node),
    ['pipe-input', 'cap0'],
    'pipe0 is polled first',
  );
  assert.match(tr.packets[0].entries[0].text, 'pipe: pipe0 (1) queue 0 len 2 next-node cap0');
  assert.match(formatTrace([tr]), /Packet 1\n\n\d\d:\d\d:\d\d:\d{6}: pipe-input\n  pipe: pipe0/);
  ifs.closeAll();
  assert.is(pool.available(), pool.count, 'no buffer leaked');
});

test('tx ring full with no backlog (txBacklog 0): the rest is dropped as "no free tx slots" and counted', () => {
  const pool = memPool(512);
  const g = new Graph({ pool });
  const q: number[][] = [],
    sent: number[] = [];
  generator(g, 'gen', 'p0-output', q, sent);
  const [a, b] = createPipe('p0', 'p1', { ringSize: 4 });
  const ifs = new Interfaces(g);
  const i0 = ifs.add(a, { next: 'error-drop', txBacklog: 0 });
  ifs.add(b, { next: 'error-drop' });
  g.build();
  for (let k = 0; k < 10; k++) q.push([k]);
  g.runPass();
  assert.is(g.errorCount('p0-tx', 'no_tx_slots'), 6);
  assert.is(i0.counters().txDrops, 6, 'the driver counts the same 6, once');
  assert.match(formatErrors([g.errorSnapshot()]), /\s+6\s+p0-tx\s+no free tx slots\s+error/);
  ifs.closeAll();
  assert.is(pool.available(), pool.count);
});

test('tx ring full: the backlog holds the rest, in order, and sends it as the ring frees; only past its room is a drop', () => {
  const pool = memPool(512);
  const g = new Graph({ pool });
  const q: number[][] = [],
    sent: number[] = [],
    got: { rxIf: number; bi: number; bytes: number[] }[] = [];
  generator(g, 'gen', 'p0-output', q, sent);
  capture(g, 'cap1', got);
  const [a, b] = createPipe('p0', 'p1', { ringSize: 4 });
  const ifs = new Interfaces(g);
  const i0 = ifs.add(a, { next: 'error-drop', txBacklog: 8 });
  ifs.add(b, { next: 'cap1' });
  g.build();
  // 14 packets into a ring of 4 with a backlog of 8: 4 sent, 8 held, 2 dropped.
  for (let k = 0; k < 14; k++) q.push([k]);
  g.runPass();
  assert.is(g.errorCount('p0-tx', 'no_tx_slots'), 2);
  assert.equal([i0.counters().txDrops, i0.counters().txHeld, i0.txBlCount], [2, 8, 8]);
  // The peer takes 4 a pass; the backlog goes out behind them, oldest first, with no new traffic.
  for (let k = 0; k < 6 && got.length < 12; k++) g.runPass();
  assert.equal(
    got.map((x) => x.bytes[0]),
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    'every held packet, in order',
  );
  assert.is(i0.txBlCount, 0);
  assert.is(i0.counters().txDrops, 2, 'no drop but the two past the backlog');
  // A new packet behind a backlog waits its turn: 6 more, the ring takes 4, then the rest.
  for (let k = 20; k < 26; k++) q.push([k]);
  for (let k = 0; k < 6 && got.length < 18; k++) g.runPass();
  assert.equal(
    got.slice(12).map((x) => x.bytes[0]),
    [20, 21, 22, 23, 24, 25],
  );
  ifs.closeAll();
  assert.is(pool.available(), pool.count, 'no buffer lost');
});

test('a backlog on a link that goes down is dropped (counted, freed), not sent later', () => {
  const pool = memPool(512);
  const g = new Graph({ pool });
  const q: number[][] = [],
    sent: number[] = [];
  generator(g, 'gen', 'p0-output', q, sent);
  const [a, b] = createPipe('p0', 'p1', { ringSize: 4 });
  const ifs = new Interfaces(g);
  const i0 = ifs.add(a, { next: 'error-drop', txBacklog: 16 });
  ifs.add(b, { next: 'error-drop' });
  g.build();
  for (let k = 0; k < 10; k++) q.push([k]);
  // p1 is not polled this pass (the generator runs after pipe-input): 6 wait.
  g.runPass();
  assert.is(i0.txBlCount, 6);
  b.close(); // the peer goes away: p0's link is down
  assert.is(a.linkUp(), false);
  g.runPass();
  assert.equal([i0.txBlCount, i0.counters().txDrops, g.errorCount('p0-tx', 'no_tx_slots')], [0, 6, 6]);
  ifs.closeAll();
  assert.is(pool.available(), pool.count);
});

test('pcap in, pcap out through the graph on native buffer memory: byte-identical, no leak', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rg-pcap-'));
  try {
    // A capture written by hand: µs, little-endian, 3 frames (one needs a chain of buffers).
    const frames = [60, 1514, 5000].map((len, k) => Uint8Array.from({ length: len }, (_, i) => (i * 13 + k) & 0xff));
    const parts: Uint8Array[] = [];
    const gh = new DataView(new ArrayBuffer(24));
    gh.setUint32(0, 0xa1b2c3d4, true);
    gh.setUint16(4, 2, true);
    gh.setUint16(6, 4, true);
    gh.setUint32(16, 262144, true);
    gh.setUint32(20, 1, true);
    parts.push(new Uint8Array(gh.buffer));
    frames.forEach((fr, k) => {
      const rh = new DataView(new ArrayBuffer(16));
      rh.setUint32(0, 1700000000 + k, true);
      rh.setUint32(4, 1000 * k + 7, true);
      rh.setUint32(8, fr.length, true);
      rh.setUint32(12, fr.length, true);
      parts.push(new Uint8Array(rh.buffer), fr);
    });
    const inFile = join(dir, 'in.pcap'),
      outFile = join(dir, 'out.pcap');
    writeFileSync(inFile, Buffer.concat(parts));

    const pool = createPool({ count: 256 });
    const g = new Graph({ pool });
    // Cross-connect: whatever pcap0 receives goes out of pcap1.
    g.register({
      name: 'xc',
      next: ['pcap1-output'],
      fn: (rt, fr) => {
        rt.graph.enqueueToSingleNext(rt, 0, fr!.vec, 0, fr!.n);
        return fr!.n;
      },
    });
    const ifs = new Interfaces(g);
    const rx = new PcapDriver('pcap0', { rxFile: inFile });
    ifs.add(rx, { next: 'xc' });
    ifs.add(new PcapDriver('pcap1', { txFile: outFile, rxFile: undefined, txSnaplen: 262144 }), { next: 'error-drop' });
    g.build();
    for (let k = 0; k < 5; k++) g.runPass();
    ifs.closeAll();
    assert.equal(new Uint8Array(readFileSync(outFile)), new Uint8Array(readFileSync(inFile)));
    assert.is(g.nodeCounters('pcap1-tx').vectors, 3);
    assert.is(pool.available(), pool.count, 'every buffer back in the pool');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a running graph sleeps, and a packet sent into a pipe from outside wakes it', async () => {
  const pool = memPool(64);
  const g = new Graph({ pool, idlePollUs: 100 });
  const got: { rxIf: number; bi: number; bytes: number[] }[] = [];
  capture(g, 'cap', got);
  const [a, b] = createPipe('w0', 'w1');
  const ifs = new Interfaces(g);
  ifs.add(a, { next: 'error-drop' });
  ifs.add(b, { next: 'cap' });
  g.start();
  try {
    // Idle for 100 µs, it sleeps: waited for with a deadline (a loaded machine may take a while
    // to give the loop its turns), never assumed after a fixed time.
    for (let t = 0; t < 200 && !g.isSleeping; t++) await sleep(10);
    assert.ok(g.isSleeping, 'the idle loop went to sleep within 2 s');
    const bi = pool.writePacket(Uint8Array.of(1, 2, 3), 0, 3);
    const v = Uint32Array.of(bi);
    assert.is(a.txBurst(0, v, 0, 1), 1);
    await sleep(10);
    assert.equal(
      got.map((x) => x.bytes),
      [[1, 2, 3]],
    );
  } finally {
    g.close();
    ifs.closeAll();
  }
  assert.is(pool.available(), pool.count);
});

test("pcap capture of an interface's rx and tx, bounded by max", () => {
  const dir = mkdtempSync(join(tmpdir(), 'rg-cap-'));
  try {
    const pool = memPool(256);
    const g = new Graph({ pool });
    const q: number[][] = [],
      sent: number[] = [];
    const got: { rxIf: number; bi: number; bytes: number[] }[] = [];
    capture(g, 'cap', got);
    generator(g, 'gen', 'c0-output', q, sent);
    const [a, b] = createPipe('c0', 'c1');
    const ifs = new Interfaces(g);
    ifs.add(a, { next: 'error-drop' });
    ifs.add(b, { next: 'cap' });
    g.build();
    assert.throws(() => ifs.capture('c0', {}), /give an rx file, a tx file or both/);
    ifs.capture('c0', { tx: join(dir, 'c0-tx.pcap') });
    ifs.capture('c1', { rx: join(dir, 'c1-rx.pcap'), max: 2 });
    for (let k = 0; k < 3; k++) q.push([0xee, k, 7]);
    g.runPass();
    g.runPass();
    ifs.closeAll();
    const records = (file: string) => {
      const d = readFileSync(file);
      const out: number[][] = [];
      for (let o = 24; o < d.length;) {
        const l = d.readUInt32LE(o + 8);
        out.push([...d.subarray(o + 16, o + 16 + l)]);
        o += 16 + l;
      }
      assert.is(d.readUInt32LE(0), 0xa1b23c4d, 'nanosecond pcap');
      return out;
    };
    assert.equal(records(join(dir, 'c0-tx.pcap')), [
      [0xee, 0, 7],
      [0xee, 1, 7],
      [0xee, 2, 7],
    ]);
    assert.equal(
      records(join(dir, 'c1-rx.pcap')),
      [
        [0xee, 0, 7],
        [0xee, 1, 7],
      ],
      'max 2',
    );
    assert.is(got.length, 3, 'capturing does not take packets away');
    assert.is(pool.available(), pool.count);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('adding an interface whose node names are taken fails cleanly and closes the driver', () => {
  const pool = memPool(64);
  const g = new Graph({ pool });
  const ifs = new Interfaces(g);
  const [a, b] = createPipe('d0', 'd1');
  ifs.add(a, { next: 'error-drop' });
  assert.throws(() => ifs.add(a, { next: 'error-drop' }), /interface "d0" already exists/);
  assert.throws(() => ifs.add(b, { next: 'nowhere' }), /next node "nowhere" does not exist/);
  assert.not.ok(b.linkUp());
  assert.throws(() => ifs.get('zz'), /no interface named "zz" \(have: d0\)/);
});

test.run();
