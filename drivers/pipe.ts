/**
 * A pipe: two interfaces back to back in one process (VPP's `create pipe`). What one end
 * transmits the other receives. Both ends share one buffer pool, so a packet crosses by moving
 * its buffer index into the peer's receive ring; no byte is copied.
 *
 * Each end owns its receive ring: a power-of-two Uint32Array with free-running u32 head (written
 * by the peer's txBurst) and tail (read by this end's rxBurst) counters. Single thread, so no
 * atomics: the engine runs both ends on the same data-plane thread.
 *
 * Two data planes in one process (two graphs, two pools, one thread) can be joined by a pipe
 * too: `pipeEnd(name, peer)` makes one end per data plane and pairs them by name. Their pools
 * differ, so txBurst then copies each packet into buffers of the peer's pool and frees ours
 * (one view per segment copied; zero-copy needs one pool).
 */
import { checkMtu } from '../graph/link.ts';
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { zeroCounters } from './driver.ts';
import { macOption } from './mac.ts';

export interface PipeOptions {
  /** Slots in each end's receive ring; a power of 2, default 1024. */
  ringSize?: number;
  /** "aa:bb:cc:dd:ee:ff" or 6 bytes; default a locally administered address derived from the name. */
  macA?: string | Uint8Array;
  macB?: string | Uint8Array;
  /** Both ends; default 1500. */
  mtu?: number;
}

export class PipeDriver implements Driver {
  readonly kind = 'pipe';
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues = 1;
  readonly txQueues = 1;

  /** The other end (null: a named end whose peer has not been created yet). */
  peer: PipeDriver | null = null;
  pool: BufferPool | null = null;
  private state: 'new' | 'open' | 'closed' = 'new';

  /** This end's receive ring, filled by the peer's txBurst. */
  private readonly ring: Uint32Array;
  private readonly mask: number;
  private head = 0;
  private tail = 0;
  private wake: (() => void) | null = null;
  private readonly stats: DriverCounters = zeroCounters();

  constructor(name: string, ringSize: number, mac: Uint8Array, mtu: number) {
    this.name = name;
    this.ring = new Uint32Array(ringSize);
    this.mask = ringSize - 1;
    this.mac = mac;
    this.mtu = mtu;
  }

  open(pool: BufferPool): void {
    if (this.state !== 'new')
      throw new Error(`pipe interface ${this.name}: already ${this.state === 'open' ? 'open' : 'closed'}`);
    const other = this.peer?.pool ?? null;
    if (other !== null && other !== pool && !this.named) {
      throw new Error(
        `pipe interface ${this.name}: opened with a different buffer pool (${pool.memory.owner}, ${pool.count} buffers) than its peer ` +
          `${this.peer!.name} (${other.memory.owner}, ${other.count} buffers); both ends of a pipe must share one pool (same data-plane thread)`,
      );
    }
    this.pool = pool;
    this.state = 'open';
  }

  /** Packets waiting in this end's receive ring. */
  rxPending(): number {
    return (this.head - this.tail) >>> 0;
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    if (queue !== 0) throw new RangeError(`pipe interface ${this.name}: no rx queue ${queue}`);
    const pool = this.pool;
    if (this.state !== 'open' || pool === null) return 0;
    const avail = (this.head - this.tail) >>> 0;
    if (max > out.length) max = out.length;
    const n = avail < max ? avail : max;
    if (n === 0) return 0;
    const ring = this.ring,
      mask = this.mask;
    let t = this.tail;
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      const bi = ring[t & mask];
      out[i] = bi;
      bytes += pool.packetLength(bi);
      t = (t + 1) >>> 0;
    }
    this.tail = t;
    this.stats.rxPackets += n;
    this.stats.rxBytes += bytes;
    return n;
  }

  /** Move up to the peer's free ring space into its ring; the rest stay with the caller. */
  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    if (queue !== 0) throw new RangeError(`pipe interface ${this.name}: no tx queue ${queue}`);
    const peer = this.peer;
    const pool = this.pool;
    if (this.state !== 'open' || peer === null || peer.state !== 'open' || pool === null) {
      this.stats.txDrops += n;
      return 0;
    }
    const ring = peer.ring,
      mask = peer.mask;
    const space = ring.length - ((peer.head - peer.tail) >>> 0);
    const m = n < space ? n : space;
    const dst = peer.pool!;
    let h = peer.head;
    let bytes = 0;
    let moved = 0;
    for (let i = 0; i < m; i++) {
      const bi = bufs[off + i];
      const len = pool.packetLength(bi);
      let to = bi;
      if (dst !== pool) {
        // Another data plane's pool: copy, then ours goes back (the caller frees only what we refuse).
        to = copyAcross(pool, bi, dst, len);
        if (to < 0) {
          this.stats.txDrops++;
          pool.freeOne(bi);
          continue;
        }
        pool.freeOne(bi);
      }
      ring[h & mask] = to;
      bytes += len;
      moved++;
      h = (h + 1) >>> 0;
    }
    peer.head = h;
    this.stats.txPackets += moved;
    this.stats.txBytes += bytes;
    this.stats.txDrops += n - m;
    if (moved > 0 && peer.wake !== null) peer.wake();
    return m;
  }

  /** Up while both ends are open. */
  linkUp(): boolean {
    return this.state === 'open' && this.peer !== null && this.peer.state === 'open';
  }

  rxWaitFd(_queue: number): number {
    return -1;
  }

  /** Called when the peer puts packets into this end's ring. */
  setWakeup(wake: () => void): void {
    this.wake = wake;
  }

  counters(): DriverCounters {
    return { ...this.stats };
  }

  /** Give every buffer still in this end's ring back to the pool. Idempotent. */
  close(): void {
    if (this.state === 'closed') return;
    const pool = this.pool;
    const n = (this.head - this.tail) >>> 0;
    if (pool !== null && n > 0) {
      // The occupied slots are at most two runs: tail..end of array, then 0..head.
      const t = this.tail & this.mask;
      const first = Math.min(n, this.ring.length - t);
      pool.free(this.ring, t, first);
      if (n > first) pool.free(this.ring, 0, n - first);
    }
    this.tail = this.head;
    this.state = 'closed';
    this.wake = null;
    if (this.named) {
      if (waiting.get(this.name) === this) waiting.delete(this.name);
      // The peer's end can be made again (a data plane restarted) and pair with a new one.
      if (this.peer !== null && this.peer.peer === this) this.peer.peerGone();
    }
  }

  /** Made by `pipeEnd` (pairs by name, may cross pools). */
  named = false;
  /** The name of the peer a named end pairs with. */
  peerName = '';

  private peerGone(): void {
    this.peer = null;
    if (this.state !== 'closed') waiting.set(this.name, this);
  }

  /** @internal pipeEnd's pairing. */
  static pair(end: PipeDriver, peerName: string): void {
    end.named = true;
    end.peerName = peerName;
    const other = waiting.get(peerName);
    if (other !== undefined && other.peerName === end.name) {
      waiting.delete(peerName);
      other.peer = end;
      end.peer = other;
    } else waiting.set(end.name, end);
  }
}

/** Named pipe ends not yet paired, process-wide. */
const waiting = new Map<string, PipeDriver>();

let segs = new Uint32Array(64);

/** Copy packet `bi` of `src` (`len` bytes) into a new packet of `dst`; -1 when `dst` is out of buffers. */
function copyAcross(src: BufferPool, bi: number, dst: BufferPool, len: number): number {
  const nseg = len === 0 ? 1 : Math.ceil(len / dst.dataSize);
  if (nseg > segs.length) segs = new Uint32Array(nseg);
  const got = dst.alloc(segs, 0, nseg);
  if (got < nseg) {
    if (got > 0) dst.free(segs, 0, got);
    return -1;
  }
  for (let k = 0; k + 1 < nseg; k++) {
    dst.flags[segs[k]] |= BufferFlag.NEXT_PRESENT;
    dst.next[segs[k]] = segs[k + 1];
  }
  const out = segs[0];
  let d = out,
    dOff = dst.offset[d],
    dRoom = dst.dataSize;
  dst.length[d] = 0;
  for (let s = bi; ; s = src.next[s]) {
    let o = src.offset[s],
      l = src.length[s];
    while (l > 0) {
      if (dRoom === 0) {
        d = dst.next[d];
        dOff = dst.offset[d];
        dRoom = dst.dataSize;
        dst.length[d] = 0;
      }
      const k = l < dRoom ? l : dRoom;
      dst.u8.set(src.u8.subarray(o, o + k), dOff);
      dOff += k;
      dRoom -= k;
      dst.length[d] += k;
      o += k;
      l -= k;
    }
    if (!(src.flags[s] & BufferFlag.NEXT_PRESENT)) break;
  }
  return out;
}

/**
 * One end of a pipe named `name` whose other end is named `peer`: the two pair when both exist,
 * in one data plane or in two in this process (they then copy across their pools). The link is
 * down until the peer exists and is open. Names are unique process-wide while unpaired.
 */
export function pipeEnd(
  name: string,
  peer: string,
  opts: { ringSize?: number; mac?: string | Uint8Array; mtu?: number } = {},
): PipeDriver {
  const where = `pipe interface ${name}`;
  if (name === peer) throw new Error(`${where}: its peer must be another interface`);
  const w = waiting.get(name);
  if (w !== undefined)
    throw new Error(`${where}: a pipe end named ${name} already exists in this process (waiting for ${w.peerName})`);
  const { ringSize, mtu } = pipeSizes(where, opts.ringSize, opts.mtu);
  const end = new PipeDriver(name, ringSize, macOption(where, opts.mac, name), mtu);
  PipeDriver.pair(end, peer);
  return end;
}

function pipeSizes(where: string, ring: number | undefined, m: number | undefined): { ringSize: number; mtu: number } {
  const ringSize = ring ?? 1024;
  if (!Number.isInteger(ringSize) || ringSize < 1 || ringSize > 1 << 24 || (ringSize & (ringSize - 1)) !== 0) {
    throw new RangeError(`${where}: ringSize must be a power of 2 in 1..16777216, got ${ringSize}`);
  }
  const mtu = m ?? 1500;
  checkMtu(mtu, where);
  return { ringSize, mtu };
}

/** Create the two ends of a pipe. Open both with the same pool. */
export function createPipe(nameA = 'pipe0', nameB = 'pipe1', opts: PipeOptions = {}): [PipeDriver, PipeDriver] {
  const where = `pipe ${nameA}/${nameB}`;
  if (nameA === nameB) throw new Error(`${where}: the two ends need different names`);
  const { ringSize, mtu } = pipeSizes(where, opts.ringSize, opts.mtu);
  const a = new PipeDriver(nameA, ringSize, macOption(`pipe interface ${nameA}`, opts.macA, nameA), mtu);
  const b = new PipeDriver(nameB, ringSize, macOption(`pipe interface ${nameB}`, opts.macB, nameB), mtu);
  a.peer = b;
  b.peer = a;
  return [a, b];
}
