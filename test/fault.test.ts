import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { performance } from 'node:perf_hooks';
import { Graph, INVALID_INDEX, type Clock, type Frame, type NodeRuntime } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { createPipe } from '../drivers/pipe.ts';
import {
  FAULT_DEFAULTS,
  FaultInjector,
  validateFaultConfig,
  type FaultCounters,
  type FaultDirections,
} from '../drivers/fault.ts';
import { memPool, sleep } from './helpers.ts';
import { makeStack, manualClock, udpFrame } from './l2l4-helpers.ts';

// ------------------------------------------------------------------ a pipe rig

/** Packet `seq`: its number (big-endian) in the first 4 bytes, then a pattern of both. */
function frame(seq: number, len: number): Uint8Array {
  const b = new Uint8Array(len);
  new DataView(b.buffer).setUint32(0, seq);
  for (let k = 4; k < len; k++) b[k] = (k * 7 + seq * 13) & 0xff;
  return b;
}

const short = () => 64;
/** 60..4959 bytes: with 2048-byte buffers, chains of up to 3 segments. */
const mixed = (seq: number) => 60 + ((seq * 997) % 4900);

interface Got {
  seq: number;
  bi: number;
  bytes: Uint8Array | null;
  at: number;
}

interface RigOptions {
  fault0?: FaultDirections;
  fault1?: FaultDirections;
  poolCount?: number;
  clock?: Clock;
  len?: (seq: number) => number;
  keepBytes?: boolean;
  /** Packets the generator sends per pass. */
  burst?: number;
}

/**
 * gen --> pipe0-output --> pipe0-tx ==pipe==> pipe-input (pipe1) --> sink. Faults on pipe0's tx
 * (`fault0.tx`) and pipe1's rx (`fault1.rx`) both sit on this path.
 */
function rig(o: RigOptions = {}) {
  const pool = memPool(o.poolCount ?? 4096);
  const g = new Graph({ pool, clock: o.clock });
  const len = o.len ?? short;
  const got: Got[] = [];
  let next = 0,
    end = 0;
  g.register({
    name: 'sink',
    fn: (rt: NodeRuntime, fr: Frame | null) => {
      const f = fr as Frame;
      const at = performance.now();
      for (let i = 0; i < f.n; i++) {
        const bi = f.vec[i];
        got.push({
          seq: pool.view.getUint32(pool.offset[bi]),
          bi,
          bytes: o.keepBytes ? pool.packetBytes(bi) : null,
          at,
        });
      }
      pool.free(f.vec, 0, f.n);
      return f.n;
    },
  });
  g.register({
    name: 'gen',
    type: 'input',
    next: ['pipe0-output'],
    fn: (rt: NodeRuntime) => {
      let n = 0;
      while (next < end && n < (o.burst ?? 128)) {
        const b = frame(next++, len(next - 1));
        const bi = pool.writePacket(b, 0, b.length);
        if (bi === INVALID_INDEX) throw new Error('test pool exhausted');
        rt.scratch[n++] = bi;
      }
      if (n > 0) rt.graph.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  const [a, b] = createPipe('pipe0', 'pipe1', { ringSize: 4096 });
  const ifs = new Interfaces(g);
  const i0 = ifs.add(a, { next: 'error-drop', fault: o.fault0 });
  const i1 = ifs.add(b, { next: 'sink', fault: o.fault1 });
  g.build();
  const r = {
    pool,
    g,
    ifs,
    a,
    b,
    i0,
    i1,
    got,
    /** Queue `n` more packets for the generator. */
    send(n: number) {
      end += n;
    },
    get sent() {
      return next;
    },
    /** Passes until everything is sent and nothing moves any more. */
    run() {
      for (let k = 0; k < 1e6; k++) {
        if (g.runPass() === 0 && next === end && b.rxPending() === 0) return;
      }
      throw new Error('the graph never went idle');
    },
    seqs: () => got.map((x) => x.seq),
    close() {
      ifs.closeAll();
      assert.is(pool.available(), pool.count, 'every buffer is back in the pool');
    },
  };
  return r;
}

/** FNV-1a of a packet's bytes. */
function hash(b: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i], 0x01000193);
  return h >>> 0;
}

/** Bits in which two equally long byte arrays differ, and the byte index of the last one. */
function bitDiff(x: Uint8Array, y: Uint8Array): { bits: number; at: number } {
  let bits = 0,
    at = -1;
  for (let i = 0; i < x.length; i++) {
    let d = x[i] ^ y[i];
    if (d !== 0) at = i;
    while (d) {
      bits += d & 1;
      d >>>= 1;
    }
  }
  return { bits, at };
}

/** For each delivered packet, how many packets sent after it were delivered before it. */
function overtakes(seqs: number[], n: number): number[] {
  const fen = new Int32Array(n + 1);
  const out: number[] = [];
  seqs.forEach((s, seen) => {
    let lower = 0;
    for (let i = s + 1; i > 0; i -= i & -i) lower += fen[i];
    out.push(seen - lower);
    for (let i = s + 1; i <= n; i += i & -i) fen[i]++;
  });
  return out;
}

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

// ------------------------------------------------------------------ tests

test('loss: the drop rate is close to the probability, rx and tx, and the counters say exactly what was lost', () => {
  const N = 20000;
  for (const [dir, p, seed] of [
    ['rx', 0.05, 1],
    ['rx', 0.05, 2],
    ['tx', 0.3, 3],
    ['rx', 0.01, 4],
  ] as const) {
    const cfg = { loss: p, seed };
    const r = rig(dir === 'rx' ? { fault1: { rx: cfg } } : { fault0: { tx: cfg } });
    r.send(N);
    r.run();
    const lost = N - r.got.length;
    const c = r.ifs.faultCounters(dir === 'rx' ? 'pipe1' : 'pipe0')[dir] as FaultCounters;
    assert.equal(c, { packets: N, dropped: lost, reordered: 0, duplicated: 0, corrupted: 0, marked: 0 });
    const sigma = Math.sqrt((p * (1 - p)) / N);
    assert.ok(Math.abs(lost / N - p) < 4 * sigma, `${dir} loss ${p}: lost ${lost} of ${N}`);
    const s = r.seqs();
    assert.ok(
      s.every((x, i) => i === 0 || x > s[i - 1]),
      'loss alone keeps the order',
    );
    assert.is(r.i0.counters().txPackets, dir === 'tx' ? N - lost : N, 'tx losses never reach the driver');
    r.close();
  }
});

test('determinism: the same seed gives the same delivered sequence, another seed another one', () => {
  const all = (seed: number) => ({ seed, loss: 0.1, reorder: 0.1, duplicate: 0.1, corrupt: 0.1, reorderDelayUs: 1000 });
  const N = 5000;
  const once = (seed: number) => {
    const clock = manualClock();
    const r = rig({ clock, len: mixed, keepBytes: true, fault0: { tx: all(seed) }, fault1: { rx: all(seed + 100) } });
    r.send(N);
    r.run();
    clock.advance(2e6); // past every reorder delay: the last held packets go
    r.run();
    const out = r.got.map((x) => `${x.seq}:${(x.bytes as Uint8Array).length}:${hash(x.bytes as Uint8Array)}`);
    const c0 = r.ifs.faultCounters('pipe0').tx as FaultCounters,
      c1 = r.ifs.faultCounters('pipe1').rx as FaultCounters;
    // Every packet accounted for: what tx let through is what rx saw; what rx let through arrived.
    assert.is(c0.packets, N);
    assert.is(c1.packets, c0.packets - c0.dropped + c0.duplicated);
    assert.is(r.got.length, c1.packets - c1.dropped + c1.duplicated);
    assert.is(r.i0.counters().txDrops, 0);
    for (const c of [c0, c1]) {
      for (const k of ['dropped', 'reordered', 'duplicated', 'corrupted'] as const) {
        assert.ok(Math.abs(c[k] / c.packets - 0.1) < 0.025, `${k}: ${c[k]} of ${c.packets}`);
      }
    }
    r.close();
    return { out, c0, c1 };
  };
  const a = once(7),
    b = once(7),
    c = once(8);
  assert.equal(a.out, b.out, 'same seed: the same packets, bytes and order');
  assert.equal([a.c0, a.c1], [b.c0, b.c1]);
  assert.not.equal(a.out, c.out, 'another seed: another sequence');
  // Something of every kind happened: out of order, copies, corrupted bytes.
  const seqs = a.out.map((x) => Number(x.split(':')[0]));
  assert.ok(
    overtakes(
      seqs.filter((s) => s < N),
      N,
    ).some((k) => k > 0),
  );
  assert.ok(new Set(a.out).size < a.out.length, 'duplicates present');
});

test('determinism: the loss decisions of a seed do not depend on the other faults', () => {
  const delivered = (cfg: object) => {
    const clock = manualClock();
    const r = rig({ clock, fault1: { rx: { seed: 9, loss: 0.1, ...cfg } } });
    r.send(3000);
    r.run();
    clock.advance(1e9);
    r.run();
    const set = [...new Set(r.seqs())].sort((x, y) => x - y);
    r.close();
    return set;
  };
  const plain = delivered({});
  assert.ok(plain.length > 2500 && plain.length < 2900);
  assert.equal(delivered({ reorder: 0.3, duplicate: 0.3 }), plain);
  // rx and tx of one interface draw from different streams of the same seed.
  const pool = memPool(64);
  const pattern = (stream: number) => {
    const f = new FaultInjector({ seed: 9, loss: 0.5 }, stream);
    const v = new Uint32Array(32);
    pool.alloc(v, 0, 32);
    const n = f.process(pool, v, 0, 32, 0);
    const kept = Array.from(f.out.subarray(0, n));
    pool.free(f.out, 0, n);
    return kept.map((bi) => v.indexOf(bi));
  };
  assert.equal(pattern(0), pattern(0));
  assert.not.equal(pattern(0), pattern(1));
  assert.is(pool.available(), pool.count);
});

test('reorder: held packets are overtaken by at most reorderDepth later ones; all arrive exactly once', () => {
  const N = 10000;
  for (const depth of [1, 4]) {
    const clock = manualClock();
    const r = rig({ clock, fault1: { rx: { seed: 3, reorder: 0.2, reorderDepth: depth } } });
    r.send(N);
    r.run();
    const heldAtEnd = (r.i1.rxFault as FaultInjector).held;
    assert.ok(heldAtEnd <= depth);
    assert.is(r.got.length, N - heldAtEnd, 'held packets are still held while time stands still');
    clock.advance(500_000); // the default reorderDelayUs
    r.run();
    const s = r.seqs();
    assert.equal(
      [...s].sort((x, y) => x - y),
      range(N),
      'every packet exactly once',
    );
    const ov = overtakes(s, N);
    const c = r.ifs.faultCounters('pipe1').rx as FaultCounters;
    assert.is(Math.max(...ov), depth, `at most ${depth} later packets overtake a held one, and that happens`);
    const overtaken = ov.filter((k) => k > 0).length;
    assert.ok(
      overtaken <= c.reordered && overtaken >= c.reordered - heldAtEnd,
      `${overtaken} overtaken, ${c.reordered} held`,
    );
    assert.ok(Math.abs(c.reordered / N - 0.2) < 0.02, `reordered ${c.reordered}`);
    assert.equal([c.packets, c.dropped, c.duplicated, c.corrupted], [N, 0, 0, 0]);
    r.close();
  }
});

test('reorder: with no traffic after it a held packet arrives within reorderDelayUs, the loop sleeping meanwhile', async () => {
  const DELAY_MS = 100;
  for (const dir of ['rx', 'tx'] as const) {
    const cfg = { reorder: 1, reorderDelayUs: DELAY_MS * 1000 };
    const r = rig(dir === 'rx' ? { fault1: { rx: cfg } } : { fault0: { tx: cfg } });
    const name = dir === 'rx' ? 'pipe1' : 'pipe0';
    const inj = (dir === 'rx' ? r.i1.rxFault : r.i0.txFault) as FaultInjector;
    r.send(1);
    const t0 = performance.now();
    r.g.start();
    try {
      // The packet gets held and the loop goes to sleep (it does not poll its way to the deadline).
      while (!(inj.held === 1 && r.g.isSleeping) && performance.now() - t0 < DELAY_MS * 0.8) await sleep(1);
      assert.is(inj.held, 1, `${dir}: held`);
      assert.ok(r.g.isSleeping, `${dir}: the loop sleeps while it holds the packet`);
      assert.is(r.got.length, 0, `${dir}: not delivered yet`);
      const calls = r.g.nodeCounters('pipe-input').calls;
      for (let k = 0; k < 200 && r.got.length === 0; k++) await sleep(5);
      assert.is(r.got.length, 1, `${dir}: the held packet arrived`);
      assert.ok(r.g.nodeCounters('pipe-input').calls - calls < 100, `${dir}: woken for it, not polling`);
      const dt = r.got[0].at - t0;
      // Never before the delay (when after it is the scheduler's business, not the injector's).
      assert.ok(dt >= DELAY_MS, `${dir}: arrived after ${dt.toFixed(2)} ms for a ${DELAY_MS} ms delay`);
      assert.is(r.got[0].seq, 0);
      assert.is(inj.held, 0);
      assert.is((r.ifs.faultCounters(name)[dir] as FaultCounters).reordered, 1);
      // The default delay (500 µs) too.
      r.ifs.setFault(name, dir, { reorder: 1 });
      r.send(1);
      r.g.wake();
      const t1 = performance.now();
      while (r.got.length === 1) await sleep(1);
      assert.is(r.got.length, 2);
      const d2 = r.got[1].at - t1;
      assert.ok(d2 >= FAULT_DEFAULTS.reorderDelayUs / 1000, `default delay: held ${d2.toFixed(2)} ms, not less`);
      assert.is((r.ifs.faultCounters(name)[dir] as FaultCounters).reordered, 2);
    } finally {
      r.g.close();
    }
    r.close();
  }
});

test('duplicate: the copy is a separate buffer chain, byte-identical, right behind the original (rx and tx)', () => {
  for (const dir of ['rx', 'tx'] as const) {
    const cfg = { duplicate: 1 };
    const r = rig({
      len: mixed,
      keepBytes: true,
      ...(dir === 'rx' ? { fault1: { rx: cfg } } : { fault0: { tx: cfg } }),
    });
    const N = 50;
    r.send(N);
    r.run();
    assert.is(r.got.length, 2 * N);
    for (let i = 0; i < N; i++) {
      const x = r.got[2 * i],
        y = r.got[2 * i + 1];
      assert.is(x.seq, i);
      assert.is(y.seq, i);
      assert.equal(x.bytes, frame(i, mixed(i)), 'the original is intact');
      assert.equal(y.bytes, x.bytes, 'the copy is byte-identical');
      assert.is.not(y.bi, x.bi, 'the copy is another buffer');
    }
    assert.ok(
      r.got.some((x) => (x.bytes as Uint8Array).length > 2 * r.pool.dataSize),
      'chains of three segments were copied',
    );
    const c = r.ifs.faultCounters(dir === 'rx' ? 'pipe1' : 'pipe0')[dir] as FaultCounters;
    assert.equal(c, { packets: N, dropped: 0, reordered: 0, duplicated: N, corrupted: 0, marked: 0 });
    r.close();
  }
});

test('duplicate: with the pool short of buffers the copy is skipped, counted only when made, nothing leaks', () => {
  // 40 buffers; 10 packets of 3 segments take 30: room for exactly 3 copies.
  const r = rig({ poolCount: 40, len: () => 5000, fault1: { rx: { duplicate: 1 } } });
  r.send(10);
  r.run();
  assert.equal(r.seqs(), [0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.is((r.ifs.faultCounters('pipe1').rx as FaultCounters).duplicated, 3);
  r.close();
});

test('corrupt: exactly one bit of the frame flips, in any segment; the counter matches what changed', () => {
  for (const p of [1, 0.1]) {
    const r = rig({ len: mixed, keepBytes: true, fault1: { rx: { corrupt: p, seed: 11 } } });
    const N = p === 1 ? 300 : 3000;
    r.send(N);
    r.run();
    assert.is(r.got.length, N);
    let changed = 0;
    const where: number[] = [];
    r.got.forEach((x, i) => {
      const want = frame(i, mixed(i));
      const bytes = x.bytes as Uint8Array;
      assert.is(bytes.length, want.length);
      const d = bitDiff(bytes, want);
      assert.ok(d.bits <= 1, `packet ${i}: ${d.bits} bits changed`);
      if (d.bits === 1) {
        changed++;
        where.push(d.at);
      }
    });
    const c = r.ifs.faultCounters('pipe1').rx as FaultCounters;
    assert.is(c.corrupted, changed);
    if (p === 1) assert.is(changed, N);
    else assert.ok(Math.abs(changed / N - 0.1) < 0.025, `${changed} of ${N}`);
    assert.ok(
      where.some((at) => at < r.pool.dataSize) && where.some((at) => at >= r.pool.dataSize),
      'first and later segments both hit',
    );
    r.close();
  }
});

test('corrupt: through the L2-L4 stack, a corrupted frame is dropped or (header bits only) arrives with intact data', () => {
  const s = makeStack();
  const got: number[][] = [];
  s.net.udp.listen(4791, (bufs, n, pool) => {
    for (let i = 0; i < n; i++) got.push(Array.from(pool.packetBytes(bufs[i])));
    pool.free(bufs, 0, n);
  });
  const payload = (k: number) => Array.from({ length: 100 }, (_, i) => (i * 3 + k) & 0xff);
  const frames = range(300).map((k) => udpFrame({ dport: 4791, payload: payload(k) }));
  s.run(...frames);
  assert.is(got.length, 300, 'without faults everything arrives');
  got.length = 0;
  const dropsBefore = s.drops();
  s.ifs.setFault('tst0', 'rx', { corrupt: 1, seed: 5 });
  s.run(...frames);
  const c = s.ifs.faultCounters('tst0').rx as FaultCounters;
  assert.is(c.corrupted, 300);
  const byteOf = new Map(range(300).map((k) => [payload(k).join(','), k]));
  for (const p of got) assert.ok(byteOf.has(p.join(',')), 'no corrupted payload is ever delivered');
  assert.ok(got.length < 30, `${got.length} of 300 delivered (only an Ethernet-address bit can go unnoticed)`);
  assert.is(got.length + s.drops() - dropsBefore, 300, 'every other one dropped and counted');
  assert.ok(s.err('udp4-input', 'bad_checksum') > 100, 'most by the UDP checksum');
  s.ifs.closeAll();
  assert.is(s.pool.available(), s.pool.count);
});

test('all faults at once over both directions: counters match what arrived, no buffer leaks', () => {
  const clock = manualClock();
  const cfg = { loss: 0.1, reorder: 0.1, duplicate: 0.1, corrupt: 0.1 };
  const r = rig({
    clock,
    len: mixed,
    keepBytes: true,
    fault0: { tx: { ...cfg, seed: 21 } },
    fault1: { rx: { ...cfg, seed: 22 } },
  });
  r.send(4000);
  r.run();
  clock.advance(1e9);
  r.run();
  const c0 = r.ifs.faultCounters('pipe0').tx as FaultCounters,
    c1 = r.ifs.faultCounters('pipe1').rx as FaultCounters;
  assert.is(r.a.counters().txPackets, c0.packets - c0.dropped + c0.duplicated);
  assert.is(r.b.counters().rxPackets, c1.packets);
  assert.is(r.got.length, c1.packets - c1.dropped + c1.duplicated);
  let bad = 0;
  for (const x of r.got) {
    const b = x.bytes as Uint8Array;
    const ok = x.seq < 4000 && b.length === mixed(x.seq) && bitDiff(b, frame(x.seq, mixed(x.seq))).bits === 0;
    if (!ok) bad++;
  }
  // A packet is corrupted before it is copied, so a corrupted packet counts once but can arrive
  // twice (tx copy) and each of those twice again (rx copy).
  assert.ok(bad >= c1.corrupted - c0.corrupted && bad <= 4 * c0.corrupted + 2 * c1.corrupted, `${bad} damaged`);
  assert.ok(bad > 0);
  r.close();
});

test('one burst stays one burst: a faulty tx vector reaches the driver in a single txBurst', () => {
  const r = rig({ fault0: { tx: { duplicate: 1, seed: 2 } }, burst: 200 });
  const sizes: number[] = [];
  const tx = r.a.txBurst.bind(r.a);
  r.a.txBurst = (q, bufs, off, n) => {
    sizes.push(n);
    return tx(q, bufs, off, n);
  };
  r.send(400);
  r.run();
  assert.equal(sizes, [400, 400], 'each 200-packet vector went out doubled in one call');
  assert.is(r.got.length, 800);
  r.close();
});

test('setFault at run time: add, change (counters kept; reseed only with a seed), remove (held packets freed)', () => {
  const clock = manualClock();
  const r = rig({ clock });
  const batch = (n: number) => {
    const from = r.sent,
      before = r.got.length;
    r.send(n);
    r.run();
    return r.got.slice(before).map((x) => x.seq - from);
  };
  assert.equal(r.ifs.faultCounters('pipe1'), { rx: null, tx: null });
  assert.equal(batch(100), range(100));

  r.ifs.setFault('pipe1', 'rx', { loss: 0.5, seed: 5 });
  const p1 = batch(200);
  assert.ok(p1.length > 60 && p1.length < 140);
  r.ifs.setFault('pipe1', 'rx', { loss: 0.5, seed: 5 });
  assert.equal(batch(200), p1, 'the same seed given again restarts the same decisions');
  assert.is((r.ifs.faultCounters('pipe1').rx as FaultCounters).packets, 400, 'counters kept across changes');
  // No seed: the generator goes on from where it stands.
  const ref = new FaultInjector({ loss: 0.5, seed: 5 }, 0);
  const refPool = memPool(256);
  const v = new Uint32Array(200);
  const kept = () => {
    refPool.alloc(v, 0, 200);
    const n = ref.process(refPool, v, 0, 200, 0);
    const k = Array.from(ref.out.subarray(0, n), (bi) => v.indexOf(bi));
    refPool.free(ref.out, 0, n);
    return k;
  };
  assert.equal(kept(), p1, 'the reference injector decides as the interface did');
  // The interface was reseeded after its first 200: it stands where the reference stands now.
  const p3 = kept();
  r.ifs.setFault('pipe1', 'rx', { loss: 0.5 });
  const got3 = batch(200);
  assert.not.equal(got3, p1);
  assert.equal(got3, p3, 'no seed: the generator goes on');
  r.ifs.setFault('pipe1', 'rx', { loss: 1 });
  assert.equal(batch(50), []);
  let c = r.ifs.faultCounters('pipe1').rx as FaultCounters;
  assert.is(c.packets, 650);
  assert.is(c.dropped, 650 - (r.got.length - 100), 'what did not arrive was dropped');

  // A bad configuration changes nothing.
  assert.throws(
    () => r.ifs.setFault('pipe1', 'rx', { loss: 2 }),
    /interface pipe1 fault\.rx\.loss must be a probability in \[0, 1\], got 2/,
  );
  assert.equal(batch(10), [], 'loss 1 still in force');
  assert.throws(() => r.ifs.setFault('nope', 'rx', { loss: 0 }), /no interface named "nope" \(have: pipe0, pipe1\)/);
  assert.throws(() => r.ifs.setFault('pipe1', 'up' as 'rx', { loss: 0 }), /direction must be rx, tx or both/);

  // Held packets (whole chains) go back to the pool when the injector is removed.
  r.ifs.setFault('pipe1', 'both', { reorder: 1, seed: 1 });
  c = r.ifs.faultCounters('pipe1').rx as FaultCounters;
  assert.is(c.packets, 660, 'rx changed in place');
  assert.equal(
    r.ifs.faultCounters('pipe1').tx,
    { packets: 0, dropped: 0, reordered: 0, duplicated: 0, corrupted: 0, marked: 0 },
    'tx new',
  );
  assert.equal(batch(20), []);
  assert.is(r.pool.available(), r.pool.count - 20, 'twenty held');
  r.ifs.setFault('pipe1', 'rx', null);
  assert.is(r.pool.available(), r.pool.count, 'freed on removal');
  assert.equal(r.ifs.faultCounters('pipe1').rx, null);
  assert.ok(r.ifs.faultCounters('pipe1').tx !== null, 'the other direction stays');
  assert.equal(batch(5), range(5));
  r.close();
});

test('no leaks: packets held on rx and tx (chains) return to the pool at closeAll', () => {
  const clock = manualClock();
  const r = rig({
    clock,
    len: () => 5000,
    fault0: { tx: { reorder: 0.5, seed: 1 } },
    fault1: { rx: { reorder: 1, seed: 2 } },
  });
  r.send(30);
  r.run();
  const held0 = (r.i0.txFault as FaultInjector).held,
    held1 = (r.i1.rxFault as FaultInjector).held;
  assert.ok(held0 > 0 && held1 > 0, `held tx ${held0}, rx ${held1}`);
  assert.is(r.got.length, 0);
  assert.is(r.pool.available(), r.pool.count - 3 * (held0 + held1));
  r.close();
  assert.equal(r.ifs.faultCounters('pipe0'), { rx: null, tx: null });
});

test('validation: errors name the key and where it is', () => {
  const w = 'interfaces.pipe1.fault.rx';
  const bad: [unknown, RegExp][] = [
    [
      { los: 0.1 },
      /^interfaces\.pipe1\.fault\.rx\.los: unknown key \(known: seed, loss, reorder, reorderDepth, reorderDelayUs, duplicate, corrupt, ce\)$/,
    ],
    [{ loss: 1.5 }, /\.rx\.loss must be a probability in \[0, 1\], got 1\.5/],
    [{ corrupt: -0.1 }, /\.rx\.corrupt must be a probability/],
    [{ duplicate: NaN }, /\.rx\.duplicate must be a finite number, got NaN/],
    [{ reorder: '0.1' }, /\.rx\.reorder must be a finite number, got "0\.1"/],
    [{ seed: 1.5 }, /\.rx\.seed must be an integer in 0\.\.4294967295, got 1\.5/],
    [{ seed: -1 }, /\.rx\.seed must be an integer/],
    [{ seed: 2 ** 32 }, /\.rx\.seed must be an integer/],
    [{ reorderDepth: 0 }, /\.rx\.reorderDepth must be an integer in 1\.\.65535, got 0/],
    [{ reorderDepth: 2.5 }, /\.rx\.reorderDepth/],
    [{ reorderDelayUs: 0 }, /\.rx\.reorderDelayUs must be a number of microseconds/],
    [null, /^interfaces\.pipe1\.fault\.rx: a fault configuration must be an object/],
    [[0.1], /a fault configuration must be an object .* got an array/],
  ];
  for (const [cfg, re] of bad) {
    try {
      validateFaultConfig(cfg, w);
      assert.unreachable(`accepted ${JSON.stringify(cfg)}`);
    } catch (e) {
      assert.instance(e, RangeError);
      assert.match((e as Error).message, re);
    }
  }
  assert.equal(validateFaultConfig({ loss: 0, corrupt: 1, seed: 0, reorder: undefined }, w), {
    loss: 0,
    corrupt: 1,
    seed: 0,
  });

  // At interface creation: nothing is left behind, the same driver can be added right after.
  const g = new Graph({ pool: memPool(64) });
  const ifs = new Interfaces(g);
  const [a, b] = createPipe();
  assert.throws(
    () => ifs.add(b, { fault: { rx: { loss: 2 } } }),
    /^interface pipe1 fault\.rx\.loss must be a probability/,
  );
  assert.throws(
    () => ifs.add(b, { fault: { rxx: {} } as FaultDirections }),
    /^interface pipe1 fault\.rxx: unknown key \(known: rx, tx\)$/,
  );
  assert.throws(() => ifs.add(b, { fault: 3 as FaultDirections }), /^interface pipe1 fault: must be an object/);
  ifs.add(a, { next: 'error-drop' });
  ifs.add(b, { next: 'error-drop', fault: { tx: { loss: 0.5 } } });
  assert.equal(ifs.faultCounters('pipe1'), {
    rx: null,
    tx: { packets: 0, dropped: 0, reordered: 0, duplicated: 0, corrupted: 0, marked: 0 },
  });
  assert.throws(
    () => ifs.setFault('pipe1', 'tx', { corupt: 0.1 } as object),
    /^interface pipe1 fault\.tx\.corupt: unknown key/,
  );
  assert.throws(() => ifs.faultCounters('pipe9'), /no interface named "pipe9"/);
  ifs.closeAll();
});

test.run();
