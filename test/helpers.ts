/** Shared test helpers. */
import { BufferPool, poolLayout } from '../graph/buffer-pool.ts';

/** A pool over plain JS memory (no native addon). */
export function memPool(count = 1024, dataSize = 2048, headroom = 128): BufferPool {
  const l = poolLayout({ count, dataSize, headroom });
  return new BufferPool({
    buffer: new ArrayBuffer(l.bytes),
    count: l.count,
    stride: l.stride,
    firstOffset: 0,
    headroom: l.headroom,
    dataSize: l.dataSize,
    hugepages: false,
    fd: -1,
    owner: 'test',
  });
}

/** Fill a new buffer with `bytes`; returns its index. */
export function packet(pool: BufferPool, bytes: number[] | Uint8Array): number {
  const b = bytes instanceof Uint8Array ? bytes : Uint8Array.from(bytes);
  const bi = pool.writePacket(b, 0, b.length);
  if (bi === 0xffffffff) throw new Error('pool exhausted');
  return bi;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** In CI every skip is a failure; elsewhere it prints the reason. */
export function skipOrFail(reason: string): boolean {
  if (process.env.CI === 'true') throw new Error(`required test could not run in CI: ${reason}`);
  console.log(`  SKIP: ${reason}`);
  return true;
}
