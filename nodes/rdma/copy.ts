/**
 * Byte copies between typed arrays over different buffers (pool <-> MR) without garbage:
 * `dst.set(src.subarray(...))` makes a view object per call (a heap allocation), which per
 * 64-byte message was the most of what a latency run allocated, and per 2 KiB buffer of a 32 KiB
 * segment ~1.6 KB of garbage per segment received. Up to SMALL_COPY bytes a loop copies in
 * place; a received chain's payload goes to memory in one native call (core.ChainCopy, one per
 * pool); other longer copies take the view (its cost spread over the bytes).
 */
import type { BufferPool } from '../../graph/buffer-pool.ts';
import { BufferFlag } from '../../graph/buffer-pool.ts';
import { loadCore, type ChainCopyNative } from '../../native/addons.ts';

export const SMALL_COPY = 64;

const copiers = new WeakMap<BufferPool, ChainCopyNative>();

/** The chain copier over `pool` (made once per pool: each thread has its own pools). */
export function chainCopier(pool: BufferPool): ChainCopyNative {
  let c = copiers.get(pool);
  if (c === undefined) {
    c = new (loadCore().ChainCopy)({
      memory: pool.memory.buffer,
      count: pool.count,
      offset: pool.offset,
      length: pool.length,
      flags: pool.flags,
      next: pool.next,
      flagNext: BufferFlag.NEXT_PRESENT,
    });
    copiers.set(pool, c);
  }
  return c;
}

export function copyBytes(dst: Uint8Array, dstOff: number, src: Uint8Array, srcOff: number, len: number): void {
  if (len <= SMALL_COPY) {
    for (let k = 0; k < len; k++) dst[dstOff + k] = src[srcOff + k];
  } else dst.set(src.subarray(srcOff, srcOff + len), dstOff);
}
