import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { BufferFlag, BufferPool, INVALID_INDEX, poolLayout, type ExternalAllocator } from '../graph/buffer-pool.ts';
import { memPool } from './helpers.ts';

test('alloc hands out distinct reset buffers and free returns them', () => {
  const pool = memPool(64);
  const a = new Uint32Array(64);
  assert.is(pool.alloc(a, 0, 10), 10);
  assert.is(pool.available(), 54);
  const seen = new Set(a.subarray(0, 10));
  assert.is(seen.size, 10);
  for (const bi of a.subarray(0, 10)) {
    assert.is(pool.offset[bi], pool.dataStart(bi));
    assert.is(pool.length[bi], 0);
    assert.is(pool.next[bi], INVALID_INDEX);
    assert.ok(pool.isAllocated(bi));
  }
  // Dirty a buffer, free, realloc: metadata reset.
  pool.flags[a[0]] = BufferFlag.TRACED;
  pool.length[a[0]] = 99;
  pool.free(a, 0, 10);
  assert.is(pool.available(), 64);
  assert.is(pool.alloc(a, 0, 64), 64);
  for (let i = 0; i < 64; i++) {
    assert.is(pool.flags[a[i]], 0);
    assert.is(pool.length[a[i]], 0);
  }
  assert.is(new Set(a).size, 64);
  pool.free(a, 0, 64);
});

test('alloc returns fewer when the pool runs dry', () => {
  const pool = memPool(8);
  const a = new Uint32Array(16);
  assert.is(pool.alloc(a, 0, 16), 8);
  assert.is(pool.alloc(a, 8, 4), 0);
  assert.is(pool.allocOne(), INVALID_INDEX);
  pool.free(a, 0, 8);
  assert.is(pool.available(), 8);
});

test('double free and out-of-range free throw', () => {
  const pool = memPool(8);
  const bi = pool.allocOne();
  pool.freeOne(bi);
  assert.throws(() => pool.freeOne(bi), /double free of buffer/);
  assert.throws(() => pool.freeOne(99), /out of range/);
  assert.is(pool.available(), 8);
});

test('buffers do not overlap and data lies after the headroom', () => {
  const pool = memPool(16, 256, 128);
  const a = new Uint32Array(16);
  pool.alloc(a, 0, 16);
  for (let i = 0; i < 16; i++) pool.u8.fill(i + 1, pool.offset[a[i]], pool.offset[a[i]] + 256);
  for (let i = 0; i < 16; i++) {
    const o = pool.offset[a[i]];
    assert.ok(
      pool.u8.subarray(o, o + 256).every((v) => v === i + 1),
      `buffer ${a[i]} intact`,
    );
    assert.ok(pool.prepend(a[i], 128), 'headroom available');
    assert.not.ok(pool.prepend(a[i], 1), 'no more than the headroom');
  }
  pool.free(a, 0, 16);
});

test('chained buffers: writePacket splits, readPacket and packetLength join, free returns all segments', () => {
  const pool = memPool(32, 2048);
  const src = new Uint8Array(5000).map((_, i) => (i * 7) & 0xff);
  const head = pool.writePacket(src, 0, src.length);
  assert.is(pool.segments(head), 3);
  assert.is(pool.packetLength(head), 5000);
  assert.ok(pool.flags[head] & BufferFlag.NEXT_PRESENT);
  assert.is(pool.length[head], 2048);
  assert.equal(pool.packetBytes(head), src);
  assert.is(pool.available(), 29);
  pool.freeOne(head);
  assert.is(pool.available(), 32);
});

test('trim cuts a chained packet and returns the segments past the end', () => {
  const pool = memPool(32, 2048);
  const src = new Uint8Array(5000).map((_, i) => i & 0xff);
  const head = pool.writePacket(src, 0, src.length);
  assert.is(pool.available(), 29);
  pool.trim(head, 3000); // ends inside the second segment: the third goes back
  assert.is(pool.segments(head), 2);
  assert.is(pool.packetLength(head), 3000);
  assert.equal(pool.packetBytes(head), src.subarray(0, 3000));
  assert.is(pool.available(), 30);
  pool.trim(head, 9999); // longer than the packet: unchanged
  assert.is(pool.packetLength(head), 3000);
  pool.trim(head, 60); // inside the head: a single buffer remains
  assert.is(pool.segments(head), 1);
  assert.equal(pool.packetBytes(head), src.subarray(0, 60));
  assert.is(pool.available(), 31);
  pool.freeOne(head);
  assert.is(pool.available(), 32);
});

test('allocChain links n buffers in order; short of buffers it holds none', () => {
  const pool = memPool(300);
  const head = pool.allocChain(257); // 65535 bytes in 256-byte buffers: the scratch's size
  assert.is.not(head, INVALID_INDEX);
  assert.is(pool.segments(head), 257);
  assert.is(pool.available(), 300 - 257);
  const seen = new Set<number>();
  for (let bi = head; ; bi = pool.next[bi]) {
    seen.add(bi);
    assert.is(pool.length[bi], 0);
    if (!(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) break;
  }
  assert.is(seen.size, 257, 'distinct buffers');
  assert.is(pool.allocChain(44), INVALID_INDEX, '43 left: none taken');
  assert.is(pool.available(), 43);
  pool.freeOne(head);
  assert.is(pool.available(), 300, 'one free returns the whole chain');
});

test('writePacket with too few buffers allocates nothing', () => {
  const pool = memPool(2, 2048);
  const src = new Uint8Array(5000);
  assert.is(pool.writePacket(src, 0, src.length), INVALID_INDEX);
  assert.is(pool.available(), 2);
});

test('pool takes its memory and allocation from a driver when one provides them', () => {
  // A stand-in for DPDK: memory with a per-buffer header before the headroom, and a native
  // allocator that hands out indices from its own ring.
  const count = 32,
    stride = 128 + 128 + 2048,
    first = 64;
  const buffer = new ArrayBuffer(first + count * stride);
  const ring: number[] = Array.from({ length: count }, (_, i) => i);
  let calls = 0;
  const ext: ExternalAllocator = {
    alloc(out, off, n) {
      calls++;
      const k = Math.min(n, ring.length);
      for (let i = 0; i < k; i++) out[off + i] = ring.pop() as number;
      return k;
    },
    free(src, off, n) {
      calls++;
      for (let i = 0; i < n; i++) ring.push(src[off + i]);
    },
    available: () => ring.length,
  };
  const pool = new BufferPool(
    {
      buffer,
      count,
      stride,
      firstOffset: first,
      headroom: 128,
      dataSize: 2048,
      hugepages: false,
      fd: -1,
      owner: 'fake-dpdk',
    },
    ext,
  );
  const a = new Uint32Array(4);
  assert.is(pool.alloc(a, 0, 4), 4);
  assert.is(calls, 1, 'one call for the batch');
  assert.is(pool.offset[a[0]], first + a[0] * stride + 128);
  const chain = pool.writePacket(new Uint8Array(4096), 0, 4096);
  assert.is(pool.segments(chain), 2);
  assert.is(pool.available(), count - 6);
  calls = 0;
  pool.free(a, 0, 4);
  pool.freeOne(chain);
  assert.is(calls, 2, 'one call per free batch, chain segments included');
  assert.is(pool.available(), count);
  assert.is(pool.stats().owner, 'fake-dpdk');
});

test('memory that does not fit the layout is refused with the reason', () => {
  const l = poolLayout({ count: 8 });
  assert.throws(
    () =>
      new BufferPool({
        buffer: new ArrayBuffer(l.bytes - 1),
        count: 8,
        stride: l.stride,
        firstOffset: 0,
        headroom: 128,
        dataSize: 2048,
        hugepages: false,
        fd: -1,
        owner: 'x',
      }),
    /need \d+ bytes, region has/,
  );
  assert.throws(() => poolLayout({ count: 0 }), /buffers.count/);
  assert.throws(() => poolLayout({ dataSize: 100000 }), /data-size/);
});

test.run();
