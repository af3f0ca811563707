/**
 * core.ChainCopy (native/core/chain_copy.cc, graph/chain-copy.ts): a chain's bytes to memory
 * (ddp-input places payloads longer than SMALL_COPY with it) and from memory into a chain (the
 * transport fills a segment from one piece of memory with it), one call each. The bytes against
 * the chain's own from every starting offset, lengths and the last buffer, the bounds refused
 * before a byte moves, a looped chain.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { chainCopier } from '../graph/chain-copy.ts';
import { memPool } from './helpers.ts';

/** A chain of `lens.length` buffers holding bytes 0, 1, 2, ... (mod 251) in order. */
function chain(lens: number[]) {
  const pool = memPool(64, 256, 32);
  const head = pool.allocChain(lens.length);
  let bi = head,
    k = 0;
  for (const l of lens) {
    pool.length[bi] = l;
    for (let i = 0; i < l; i++) pool.u8[pool.offset[bi] + i] = k++ % 251;
    bi = pool.next[bi];
  }
  return { pool, head, total: k };
}

test('toMem: any span of a chain lands byte for byte where it is asked', () => {
  const { pool, head, total } = chain([100, 256, 7, 256, 40]);
  const c = chainCopier(pool);
  for (const skip of [0, 1, 99, 100, 355, 356, 362, 600])
    for (const len of [0, 1, 65, 200, total - skip]) {
      if (skip + len > total) continue;
      const dst = new Uint8Array(total + 16).fill(0xee);
      const n = c.toMem(head, skip, dst, 5, len);
      assert.is(n, len, `skip ${skip} len ${len}`);
      for (let i = 0; i < len; i++)
        if (dst[5 + i] !== (skip + i) % 251) assert.unreachable(`skip ${skip} len ${len}: byte ${i}`);
      assert.is(dst[4], 0xee, 'nothing before dstOff');
      assert.is(dst[5 + len], 0xee, 'nothing after the span');
    }
  // Asking for more than the chain holds copies what it holds.
  const dst = new Uint8Array(total + 100);
  assert.is(c.toMem(head, 10, dst, 0, total + 50), total - 10);
});

test('toMem: refuses an index outside the pool and a range outside dst, before copying', () => {
  const { pool, head } = chain([64, 64]);
  const c = chainCopier(pool);
  const dst = new Uint8Array(100).fill(7);
  assert.throws(() => c.toMem(pool.count, 0, dst, 0, 10), /bi/);
  assert.throws(() => c.toMem(head, 0, dst, 50, 51), /outside dst/);
  assert.throws(() => c.toMem(head, 0, new Uint16Array(10) as unknown as Uint8Array, 0, 1), /Uint8Array/);
  assert.ok(
    dst.every((b) => b === 7),
    'dst untouched',
  );
  // A buffer whose offset and length point past the pool's memory.
  pool.offset[head] = pool.u8.length - 10;
  assert.throws(() => c.toMem(head, 0, dst, 0, 20), /outside the pool/);
});

test('toMem: a chain that loops back on itself is followed at most count buffers', () => {
  const { pool, head } = chain([10]);
  pool.flags[head] |= BufferFlag.NEXT_PRESENT;
  pool.next[head] = head;
  const dst = new Uint8Array(64 * 10 + 100);
  assert.is(chainCopier(pool).toMem(head, 0, dst, 0, dst.length), pool.count * 10);
});

test('fromMem: a payload after an h-byte header fills the chain buffer by buffer, lengths set, the last returned', () => {
  const pool = memPool(64, 256, 32);
  const src = new Uint8Array(2000);
  for (let i = 0; i < src.length; i++) src[i] = (i * 7) % 253;
  const c = chainCopier(pool);
  for (const [h, len, bufs] of [
    [40, 100, 1],
    [40, 216, 1],
    [40, 217, 2],
    [0, 700, 3],
    [66, 1000, 5],
  ]) {
    const head = pool.allocChain(bufs);
    pool.u8.fill(0xaa, pool.offset[head], pool.offset[head] + h);
    const last = c.fromMem(head, h, src, 13, len);
    // Walk the chain as a receiver would: the header untouched, then the payload in order.
    const got: number[] = [];
    let bi = head,
      k = 0,
      seen = 0;
    for (;;) {
      const from = k === 0 ? h : 0;
      assert.ok(pool.length[bi] <= 256, `buffer ${k} length ${pool.length[bi]}`);
      for (let i = from; i < pool.length[bi]; i++) got.push(pool.u8[pool.offset[bi] + i]);
      seen = bi;
      if (!(pool.flags[bi] & BufferFlag.NEXT_PRESENT) || got.length >= len) break;
      bi = pool.next[bi];
      k++;
    }
    assert.is(last, seen, `h ${h} len ${len}: the last buffer written`);
    assert.is(got.length, len, `h ${h} len ${len}: bytes in the chain`);
    assert.ok(
      got.every((b, i) => b === src[13 + i]),
      `h ${h} len ${len}: the bytes`,
    );
    if (h > 0) assert.is(pool.u8[pool.offset[head] + h - 1], 0xaa, 'the header kept');
    pool.free(Uint32Array.of(head), 0, 1);
  }
});

test('fromMem: a chain too short, or a range outside src, is refused before a byte is written', () => {
  const pool = memPool(64, 256, 32);
  const c = chainCopier(pool);
  const head = pool.allocChain(2);
  pool.u8.fill(0x55, pool.offset[head], pool.offset[head] + 256);
  const src = new Uint8Array(1000).fill(1);
  assert.throws(() => c.fromMem(head, 10, src, 0, 600), /too short/);
  assert.throws(() => c.fromMem(head, 10, src, 500, 501), /outside src/);
  assert.throws(() => c.fromMem(head, 300, src, 0, 10), /h/);
  assert.ok(
    pool.u8.subarray(pool.offset[head], pool.offset[head] + 256).every((b) => b === 0x55),
    'nothing written',
  );
});

test.run();
