/**
 * A pool's packet bytes copied to or from other memory, a chain in one native call
 * (core.ChainCopy, native/core/chain_copy.cc): no view object per buffer, as
 * `dst.set(u8.subarray(...))` makes, and reading payload a memif server left in its peer's memory
 * (graph/peer-windows.ts) in place. One copier per pool (each thread has its own pools).
 */
import type { BufferPool } from './buffer-pool.ts';
import { BufferFlag } from './buffer-pool.ts';
import { loadCore, type ChainCopyNative } from '../native/addons.ts';
import { peerWindowsOf } from './peer-windows.ts';

export type ChainCopier = ChainCopyNative;

const copiers = new WeakMap<BufferPool, ChainCopyNative>();

/** The chain copier over `pool`, made on first use. */
export function chainCopier(pool: BufferPool): ChainCopier {
  let c = copiers.get(pool);
  if (c === undefined) {
    c = new (loadCore().ChainCopy)({
      memory: pool.memory.buffer,
      count: pool.count,
      dataSize: pool.dataSize,
      offset: pool.offset,
      length: pool.length,
      flags: pool.flags,
      next: pool.next,
      flagNext: BufferFlag.NEXT_PRESENT,
      windows: peerWindowsOf(pool),
    });
    copiers.set(pool, c);
  }
  return c;
}
