/**
 * The handoff queue between two worker threads (graph/handoff-queue.ts), both ends on this
 * thread: frames and their headers across the wrap of the slots and of the 32-bit indices, a
 * full queue refusing until the consumer hands slots back, an empty one, and the need-kick
 * handshake counted in real eventfd writes (the counter read back), never in time: a consumer
 * that armed is kicked exactly once by the next publish, a busy one never.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import {
  HANDOFF_RX,
  HANDOFF_SLOT_HEADER,
  HANDOFF_TX,
  HandoffConsumer,
  HandoffProducer,
  type HandoffQueueMemory,
  handoffQueue,
} from '../graph/handoff-queue.ts';
import { loadCore } from '../native/addons.ts';
import { memPool } from './helpers.ts';

const core = loadCore();

/** A packet of `len` bytes, each byte `seed + i`. */
function packet(pool: ReturnType<typeof memPool>, len: number, seed: number): number {
  const bytes = Uint8Array.from({ length: len }, (_, i) => (seed + i) & 0xff);
  return pool.writePacket(bytes, 0, len);
}

/** Take one slot: its length, interface, kind and bytes. */
function take(c: HandoffConsumer): { len: number; ifIndex: number; kind: number; bytes: number[] } {
  const w = c.slot();
  const len = c.u32[w];
  const at = (w << 2) + HANDOFF_SLOT_HEADER;
  const r = {
    len,
    ifIndex: c.u32[w + 1] & 0xffffff,
    kind: c.u32[w + 1] >>> 24,
    bytes: [...c.u8.subarray(at, at + len)],
  };
  c.pop();
  return r;
}

/** A queue of `slots` slots whose shared indices both start at `at` (as after 2^32 - 2 frames). */
function queueAt(slots: number, at: number, kickFd = -1): HandoffQueueMemory {
  const m = handoffQueue(200, kickFd, slots);
  const ctl = new Uint32Array(m.sab, 0, 48);
  ctl[0] = at; // head
  ctl[16] = at; // tail
  return m;
}

test('layout: the indices and need-kick on their own cache lines, slots a multiple of 64 bytes from byte 192', () => {
  const m = handoffQueue(1518, -1);
  assert.is(m.slotSize, 1536, '8-byte header + 1518 bytes, rounded up to 64');
  assert.is(m.slots, 1024);
  assert.is(m.sab.byteLength, 192 + 1024 * 1536);
  const big = handoffQueue(9018, -1);
  assert.is(big.slots, 256, 'jumbo slots: fewer of them (4 MiB a queue)');
  assert.throws(() => handoffQueue(100, -1, 3), /power of two/);
  assert.throws(() => handoffQueue(0, -1), /maxFrame/);
});

test('frames go through in order with their headers, across the end of the slots and the wrap of the 32-bit indices', () => {
  const pool = memPool(64);
  const m = queueAt(4, 0xfffffffe);
  const p = new HandoffProducer(m),
    c = new HandoffConsumer(m);
  let sent = 0,
    got = 0;
  for (let round = 0; round < 5; round++) {
    for (let i = 0; i < 3; i++, sent++) {
      const bi = packet(pool, 60 + sent, sent);
      assert.ok(p.putPacket(pool, bi, 1 + (sent % 3), sent % 2 === 0 ? HANDOFF_RX : HANDOFF_TX), `frame ${sent}`);
      pool.freeOne(bi);
    }
    assert.is(c.available(), 0, 'nothing visible before publish');
    p.publish();
    assert.is(c.available(), 3);
    for (let i = 0; i < 3; i++, got++) {
      const r = take(c);
      assert.is(r.len, 60 + got);
      assert.is(r.ifIndex, 1 + (got % 3));
      assert.is(r.kind, got % 2 === 0 ? HANDOFF_RX : HANDOFF_TX);
      assert.equal(
        r.bytes,
        Array.from({ length: r.len }, (_, k) => (got + k) & 0xff),
      );
    }
    c.release();
  }
  assert.is(new Uint32Array(m.sab, 0, 48)[0], (0xfffffffe + 15) >>> 0, 'head wrapped past 2^32');
  assert.is(pool.available(), pool.count);
});

test('a full queue refuses (the buffer stays the caller’s) until the consumer releases slots; an empty one has nothing', () => {
  const pool = memPool(16);
  const m = queueAt(4, 7);
  const p = new HandoffProducer(m),
    c = new HandoffConsumer(m);
  assert.is(c.available(), 0);
  const bi = packet(pool, 64, 1);
  for (let i = 0; i < 4; i++) assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX));
  assert.not.ok(p.putPacket(pool, bi, 1, HANDOFF_RX), 'full');
  assert.is(p.reserve(), -1);
  p.publish();
  take(c);
  assert.not.ok(p.putPacket(pool, bi, 1, HANDOFF_RX), 'popped but not released: still full');
  c.release();
  assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX), 'room again after release');
  p.publish();
  assert.is(c.available(), 4);
  for (let i = 0; i < 4; i++) take(c);
  c.release();
  assert.is(c.available(), 0);
  const long = packet(pool, p.maxFrame + 1, 0);
  assert.not.ok(p.putPacket(pool, long, 1, HANDOFF_RX), 'longer than a slot');
  pool.free(new Uint32Array([bi, long]), 0, 2);
  assert.is(pool.available(), pool.count);
});

test('need-kick: an armed consumer is kicked exactly once by the next publish; a busy one is never kicked (eventfd writes counted)', () => {
  const fd = core.eventfd();
  try {
    const pool = memPool(16);
    const m = handoffQueue(200, fd, 8);
    const p = new HandoffProducer(m),
      c = new HandoffConsumer(m);
    const bi = packet(pool, 60, 3);
    const drainAll = () => {
      for (let n = c.available(); n > 0; n = c.available()) for (let i = 0; i < n; i++) take(c);
      c.release();
    };
    // Busy: the consumer never arms; 40 publishes, no eventfd write.
    for (let i = 0; i < 40; i++) {
      assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX));
      p.publish();
      drainAll();
    }
    assert.is(core.eventfdRead(fd), 0, 'a busy consumer is never kicked');
    // About to sleep with nothing waiting: armed, and told to sleep.
    assert.is(c.arm(), false);
    assert.ok(c.needKick);
    p.publish(); // nothing committed: nothing published, no kick
    assert.is(core.eventfdRead(fd), 0);
    assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX));
    p.publish();
    assert.is(core.eventfdRead(fd), 1, 'one kick');
    assert.not.ok(c.needKick, 'the producer took the flag');
    for (let i = 0; i < 3; i++) {
      assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX));
      p.publish();
    }
    assert.is(core.eventfdRead(fd), 0, 'exactly once per arming');
    // Armed while frames wait: the second look says stay awake (and a publish still kicks once).
    assert.is(c.arm(), true);
    c.disarm();
    assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX));
    p.publish();
    assert.is(core.eventfdRead(fd), 0, 'disarmed (awake again): no kick');
    drainAll();
    assert.is(c.arm(), false);
    assert.ok(p.putPacket(pool, bi, 1, HANDOFF_RX));
    p.publish();
    assert.is(core.eventfdRead(fd), 1);
    pool.freeOne(bi);
  } finally {
    core.closeFd(fd);
  }
});

test('a restarted end goes on from the shared indices: frames published before are still read once', () => {
  const pool = memPool(16);
  const m = queueAt(8, 100);
  const p = new HandoffProducer(m);
  const bi = packet(pool, 50, 9);
  for (let i = 0; i < 3; i++) assert.ok(p.putPacket(pool, bi, 2, HANDOFF_RX));
  p.publish();
  const c1 = new HandoffConsumer(m);
  take(c1);
  c1.release();
  // The consumer's thread died after one frame; a new one reads the other two, once.
  const c2 = new HandoffConsumer(m);
  assert.is(c2.available(), 2);
  // And a new producer appends after them.
  const p2 = new HandoffProducer(m);
  assert.ok(p2.putPacket(pool, bi, 2, HANDOFF_RX));
  p2.publish();
  assert.is(c2.available(), 2, 'the cached head: the shared one is read only when that runs out');
  take(c2);
  take(c2);
  assert.is(c2.available(), 1, 'then the new frame');
  assert.is(take(c2).ifIndex, 2);
  pool.freeOne(bi);
});

test.run();
