/**
 * Buffer memory from the core addon: one memfd-backed region (2 MiB hugepages when the system
 * has them reserved, normal pages otherwise) that memif can share with a peer process.
 */
import { loadCore } from '../native/addons.ts';
import { BufferPool, type BufferMemory, type PoolOptions, poolLayout } from './buffer-pool.ts';

export type HugepageMode = 'auto' | 'never' | 'require';

export function allocBufferMemory(opts: PoolOptions & { hugepages?: HugepageMode; name?: string } = {}): BufferMemory {
  const l = poolLayout(opts);
  const m = loadCore().allocMemory(l.bytes, {
    hugepages: opts.hugepages ?? 'auto',
    name: opts.name ?? 'rdma-graph-buffers',
  });
  return {
    buffer: m.buffer,
    count: l.count,
    stride: l.stride,
    firstOffset: 0,
    headroom: l.headroom,
    dataSize: l.dataSize,
    hugepages: m.hugepages,
    fd: m.fd,
    owner: 'core',
  };
}

/** A pool in memory from the core addon. */
export function createPool(opts: PoolOptions & { hugepages?: HugepageMode; name?: string } = {}): BufferPool {
  return new BufferPool(allocBufferMemory(opts));
}
