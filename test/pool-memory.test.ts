/**
 * The buffer pool a data plane gets (Dataplane's poolFor): over the memory one interface's
 * driver provides (DPDK's mempool), with that driver's allocator; from the core addon when none
 * does; refused, naming both, when two want it.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { poolFor } from '../dataplane/dataplane.ts';
import { DataplaneError } from '../dataplane/views.ts';
import type { Driver, ProvidedMemory } from '../drivers/driver.ts';
import type { BufferMemory, ExternalAllocator } from '../graph/buffer-pool.ts';

/** A driver that is only what poolFor asks of it. */
function fakeDriver(provides: ((want: { count: number; dataSize: number }) => ProvidedMemory | null) | null): Driver {
  return (provides === null ? {} : { providesMemory: provides }) as unknown as Driver;
}

function memory(count: number, dataSize: number): BufferMemory {
  const headroom = 128,
    stride = headroom + dataSize;
  return {
    buffer: new ArrayBuffer(64 + count * stride),
    count,
    stride,
    firstOffset: 64,
    headroom,
    dataSize,
    hugepages: false,
    fd: -1,
    owner: 'fake',
  };
}

/** An allocator over indices 0..count-1 that records its calls. */
function allocator(count: number): ExternalAllocator & { calls: string[] } {
  const free = Array.from({ length: count }, (_, i) => count - 1 - i);
  const calls: string[] = [];
  return {
    calls,
    alloc(out, off, n) {
      calls.push(`alloc ${n}`);
      let k = 0;
      for (; k < n && free.length > 0; k++) out[off + k] = free.pop()!;
      return k;
    },
    free(src, off, n) {
      calls.push(`free ${n}`);
      for (let k = 0; k < n; k++) free.push(src[off + k]);
    },
    available: () => free.length,
  };
}

test('one interface provides the memory: the pool lives in it and allocates through its allocator', () => {
  const wants: { count: number; dataSize: number }[] = [];
  const a = allocator(32);
  const pool = poolFor(
    [
      { name: 'plain0', driver: fakeDriver(null) },
      { name: 'dpdk0', driver: fakeDriver((w) => (wants.push(w), { memory: memory(32, 2048), allocator: a })) },
      { name: 'memif0', driver: fakeDriver(() => null) },
    ],
    { count: 4096, dataSize: 2048 },
  );
  assert.equal(wants, [{ count: 4096, dataSize: 2048 }], 'asked with the configured sizes');
  assert.is(pool.memory.owner, 'fake');
  assert.is(pool.count, 32);
  const out = new Uint32Array(3);
  assert.is(pool.alloc(out, 0, 3), 3);
  assert.is(pool.available(), 29);
  pool.free(out, 0, 3);
  assert.is(pool.available(), 32);
  assert.equal(a.calls, ['alloc 3', 'free 3'], 'one allocator call per batch');
});

test('no interface provides memory: the core addon makes the pool with the configured sizes', () => {
  const pool = poolFor([{ name: 'p0', driver: fakeDriver(() => null) }], { count: 64, dataSize: 1024 });
  assert.is(pool.count, 64);
  assert.is(pool.dataSize, 1024);
  assert.is.not(pool.memory.owner, 'fake');
});

test('two interfaces providing the same memory (DPDK ports sharing one mempool) share one pool', () => {
  const shared = { memory: memory(16, 2048), allocator: allocator(16) };
  const pool = poolFor(
    [
      { name: 'dpdk0', driver: fakeDriver(() => shared) },
      { name: 'dpdk1', driver: fakeDriver(() => shared) },
    ],
    { count: 16, dataSize: 2048 },
  );
  assert.is(pool.memory, shared.memory);
});

test('two interfaces that want the pool in two different memories: refused, naming both', () => {
  const p = () => ({ memory: memory(8, 2048), allocator: allocator(8) });
  const e = (() => {
    try {
      poolFor(
        [
          { name: 'dpdk0', driver: fakeDriver(p) },
          { name: 'dpdk1', driver: fakeDriver(p) },
        ],
        { count: 8, dataSize: 2048 },
      );
      return null;
    } catch (x) {
      return x;
    }
  })();
  assert.instance(e, DataplaneError);
  assert.match((e as Error).message, /^interfaces dpdk0 and dpdk1 each want the buffer pool in their own memory/);
});

test.run();
