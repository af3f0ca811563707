/**
 * core.ChainCopy (native/core/chain_copy.cc): a received chain's bytes into memory in one call
 * (ddp-input's placement of payloads longer than SMALL_COPY, nodes/rdma/copy.ts). The bytes
 * against the chain's own, from every starting offset; the bounds it refuses; a looped chain.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { chainCopier } from '../nodes/rdma/copy.ts';
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

test.run();
