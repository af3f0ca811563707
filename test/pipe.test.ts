import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import type { BufferPool } from '../graph/buffer-pool.ts';
import { memPool } from './helpers.ts';
import { createPipe, pipeEnd } from '../drivers/pipe.ts';

/** Allocate `n` packets of distinct lengths and contents; returns their head indices. */
function packets(pool: BufferPool, n: number, seed: number): Uint32Array {
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const len = 60 + ((i * 997 + seed * 131) % 3000); // some over 2048: chains
    const data = new Uint8Array(len);
    for (let k = 0; k < len; k++) data[k] = (k * 7 + i * 13 + seed) & 0xff;
    out[i] = pool.writePacket(data, 0, len);
    assert.ok(pool.isAllocated(out[i]));
  }
  return out;
}

function snapshot(pool: BufferPool, bufs: ArrayLike<number>): Uint8Array[] {
  return Array.from(bufs, (bi) => pool.packetBytes(bi));
}

test('both directions move the same indices, zero-copy, with counters', () => {
  const pool = memPool();
  const [a, b] = createPipe();
  assert.is(a.name, 'pipe0');
  assert.is(b.name, 'pipe1');
  assert.is(a.kind, 'pipe');
  assert.not.equal(Array.from(a.mac), Array.from(b.mac));
  a.open(pool);
  assert.not.ok(a.linkUp(), 'down until both ends are open');
  b.open(pool);
  assert.ok(a.linkUp() && b.linkUp());
  assert.is(a.rxWaitFd(0), -1);

  for (const [tx, rx, seed] of [
    [a, b, 1],
    [b, a, 2],
  ] as const) {
    const sent = packets(pool, 10, seed);
    const before = snapshot(pool, sent);
    const offsets = Array.from(sent, (bi) => pool.offset[bi]);
    const bytes = before.reduce((s, p) => s + p.length, 0);
    assert.ok(
      before.some((p) => p.length > pool.dataSize),
      'some packets are chains',
    );
    const txBefore = tx.counters(),
      rxBefore = rx.counters();

    assert.is(tx.txBurst(0, sent, 0, 10), 10);
    assert.is(rx.rxPending(), 10);
    const out = new Uint32Array(256);
    const n = rx.rxBurst(0, out, 256);
    assert.is(n, 10);
    assert.equal(Array.from(out.subarray(0, n)), Array.from(sent), 'same indices, same order');
    assert.equal(
      Array.from(out.subarray(0, n), (bi) => pool.offset[bi]),
      offsets,
      'same data offsets',
    );
    assert.equal(snapshot(pool, out.subarray(0, n)), before, 'bytes unchanged');
    assert.is(rx.rxBurst(0, out, 256), 0);

    const tc = tx.counters(),
      rc = rx.counters();
    assert.is(tc.txPackets - txBefore.txPackets, 10);
    assert.is(tc.txBytes - txBefore.txBytes, bytes);
    assert.is(rc.rxPackets - rxBefore.rxPackets, 10);
    assert.is(rc.rxBytes - rxBefore.rxBytes, bytes);
    assert.is(rc.txPackets - rxBefore.txPackets, 0, 'rx end transmitted nothing');
    pool.free(out, 0, n);
  }
  a.close();
  b.close();
  assert.is(pool.available(), pool.count, 'no leak');
});

test('the shared buffer really is shared: a write at A is seen at B', () => {
  const pool = memPool();
  const [a, b] = createPipe('x0', 'x1');
  a.open(pool);
  b.open(pool);
  const bi = pool.allocOne();
  pool.length[bi] = 4;
  pool.u8.set([1, 2, 3, 4], pool.offset[bi]);
  assert.is(a.txBurst(0, Uint32Array.of(bi), 0, 1), 1);
  pool.u8[pool.offset[bi]] = 99; // after tx: no copy was taken
  const out = new Uint32Array(1);
  assert.is(b.rxBurst(0, out, 1), 1);
  assert.is(out[0], bi);
  assert.equal(Array.from(pool.packetBytes(out[0])), [99, 2, 3, 4]);
  pool.freeOne(bi);
  a.close();
  b.close();
  assert.is(pool.available(), pool.count);
});

test('ring full: partial accept, the rest stays with the caller; wrap-around keeps order', () => {
  const pool = memPool();
  const [a, b] = createPipe('p0', 'p1', { ringSize: 8 });
  a.open(pool);
  b.open(pool);
  const bufs = new Uint32Array(12);
  assert.is(pool.alloc(bufs, 0, 12), 12);
  assert.is(a.txBurst(0, bufs, 0, 12), 8);
  assert.is(a.counters().txDrops, 4);
  assert.is(a.counters().txPackets, 8);
  for (let i = 8; i < 12; i++) assert.ok(pool.isAllocated(bufs[i]), "rejected buffers are the caller's");
  assert.is(a.txBurst(0, bufs, 8, 4), 0, 'still full');
  const out = new Uint32Array(16);
  assert.is(b.rxBurst(0, out, 5), 5);
  assert.equal(Array.from(out.subarray(0, 5)), Array.from(bufs.subarray(0, 5)));
  // 5 slots free now; the head wraps past the end of the ring.
  assert.is(a.txBurst(0, bufs, 8, 4), 4);
  assert.is(b.rxBurst(0, out, 16), 7);
  assert.equal(Array.from(out.subarray(0, 7)), Array.from(bufs.subarray(5, 12)));
  pool.free(bufs, 0, 12);
  a.close();
  b.close();
  assert.is(pool.available(), pool.count);
});

test('wakeup is called when the peer enqueues, not when nothing moved', () => {
  const pool = memPool();
  const [a, b] = createPipe('w0', 'w1', { ringSize: 2 });
  let wakesA = 0,
    wakesB = 0;
  a.setWakeup(() => wakesA++);
  b.setWakeup(() => wakesB++);
  a.open(pool);
  b.open(pool);
  const bufs = new Uint32Array(3);
  pool.alloc(bufs, 0, 3);
  assert.is(a.txBurst(0, bufs, 0, 1), 1);
  assert.is(wakesB, 1);
  assert.is(wakesA, 0, 'the sender is not woken');
  assert.is(a.txBurst(0, bufs, 1, 2), 1);
  assert.is(wakesB, 2);
  assert.is(a.txBurst(0, bufs, 2, 1), 0, 'ring full');
  assert.is(wakesB, 2, 'no wakeup when nothing was enqueued');
  assert.is(a.txBurst(0, bufs, 0, 0), 0);
  assert.is(wakesB, 2);
  pool.freeOne(bufs[2]);
  a.close();
  b.close(); // frees the two in its ring
  assert.is(pool.available(), pool.count);
});

test('close frees the ring contents (also wrapped); the peer then refuses tx; idempotent', () => {
  const pool = memPool();
  const [a, b] = createPipe('c0', 'c1', { ringSize: 4 });
  a.open(pool);
  b.open(pool);
  const bufs = packets(pool, 6, 3);
  // Move the ring's tail to 3 so the 4 queued buffers wrap: slots 3, 0, 1, 2.
  assert.is(a.txBurst(0, bufs, 0, 3), 3);
  const out = new Uint32Array(4);
  assert.is(b.rxBurst(0, out, 4), 3);
  pool.free(out, 0, 3);
  assert.is(a.txBurst(0, bufs, 3, 3), 3);
  const extra = packets(pool, 1, 9);
  assert.is(a.txBurst(0, extra, 0, 1), 1);
  assert.is(b.rxPending(), 4);
  const used = pool.count - pool.available();
  assert.ok(used >= 4);
  b.close();
  assert.is(pool.available(), pool.count, 'every segment of every queued packet is back');
  assert.not.ok(a.linkUp());
  assert.not.ok(b.linkUp());
  b.close();
  assert.is(pool.available(), pool.count, 'second close frees nothing twice');
  const more = new Uint32Array(2);
  pool.alloc(more, 0, 2);
  assert.is(a.txBurst(0, more, 0, 2), 0);
  assert.is(a.counters().txDrops, 2);
  assert.is(b.rxBurst(0, out, 4), 0);
  pool.free(more, 0, 2);
  a.close();
  assert.is(pool.available(), pool.count);
});

test('both ends must share one pool', () => {
  const [a, b] = createPipe('s0', 's1');
  a.open(memPool(64));
  assert.throws(() => b.open(memPool(64)), /s1.*different buffer pool.*s0.*share one pool/);
});

test('named ends pair across two pools: bytes copied into the peer pool, ours freed, chains re-cut', () => {
  const poolA = memPool(256, 2048);
  const poolB = memPool(256, 1024); // smaller buffers: a 3000-byte packet becomes 3 segments at B
  const a = pipeEnd('xa', 'xb', { mtu: 9000 });
  assert.not.ok(a.linkUp(), 'no peer yet');
  a.open(poolA);
  const lone = Uint32Array.of(poolA.allocOne());
  assert.is(a.txBurst(0, lone, 0, 1), 0, 'no peer: refused');
  assert.is(a.counters().txDrops, 1);
  poolA.free(lone, 0, 1);
  const b = pipeEnd('xb', 'xa', { mtu: 9000 });
  b.open(poolB);
  assert.ok(a.linkUp() && b.linkUp());
  const freeA = poolA.available(),
    freeB = poolB.available();
  const sent = packets(poolA, 20, 3);
  const want = snapshot(poolA, sent);
  assert.is(a.txBurst(0, sent, 0, sent.length), 20);
  assert.is(poolA.available(), freeA, 'A got its buffers back');
  const out = new Uint32Array(32);
  assert.is(b.rxBurst(0, out, 32), 20);
  for (let i = 0; i < 20; i++) {
    assert.equal(poolB.packetBytes(out[i]), want[i], `packet ${i}`);
    assert.is(poolB.segments(out[i]), Math.max(1, Math.ceil(want[i].length / 1024)));
  }
  poolB.free(out, 0, 20);
  assert.is(poolB.available(), freeB);
  // Peer pool exhausted: the packet is dropped and counted, ours still freed.
  const hog = new Uint32Array(poolB.available());
  poolB.alloc(hog, 0, hog.length);
  const one = packets(poolA, 1, 9);
  assert.is(a.txBurst(0, one, 0, 1), 1);
  assert.is(a.counters().txDrops, 2);
  assert.is(poolA.available(), freeA);
  poolB.free(hog, 0, hog.length);
  // B goes away and comes back: a new end with that name pairs again.
  b.close();
  assert.not.ok(a.linkUp());
  assert.throws(() => pipeEnd('xa', 'xb'), /already exists in this process/);
  const b2 = pipeEnd('xb', 'xa');
  b2.open(poolB);
  assert.ok(a.linkUp());
  a.close();
  b2.close();
  assert.throws(() => pipeEnd('same', 'same'), /its peer must be another interface/);
});

test('option checks', () => {
  assert.throws(() => createPipe('a', 'b', { ringSize: 1000 }), /power of 2/);
  assert.throws(() => createPipe('a', 'a'), /different names/);
  assert.throws(() => createPipe('a', 'b', { macA: '01:02' }), /mac/);
  const [a, b] = createPipe('a', 'b', { macA: '02:00:00:00:00:01', macB: Uint8Array.of(2, 0, 0, 0, 0, 2), mtu: 9000 });
  assert.equal(Array.from(a.mac), [2, 0, 0, 0, 0, 1]);
  assert.equal(Array.from(b.mac), [2, 0, 0, 0, 0, 2]);
  assert.is(a.mtu, 9000);
  assert.is(b.mtu, 9000);
  // Defaults are random per interface (two daemons' "memif0" must not share an address), in
  // 02:fe:xx:xx:xx:xx: locally administered unicast.
  const macs = new Set<string>();
  for (let k = 0; k < 32; k++) {
    const [c] = createPipe('a', 'z');
    assert.equal(Array.from(c.mac.subarray(0, 2)), [0x02, 0xfe]);
    macs.add(Array.from(c.mac).join(':'));
  }
  assert.is(macs.size, 32, 'the same name got 32 different addresses');
});

test.run();
