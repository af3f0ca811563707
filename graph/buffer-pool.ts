/**
 * The packet buffer pool: u32 buffer indices over one block of memory, with per-buffer
 * metadata held in parallel typed arrays (struct of arrays). No JavaScript object exists per
 * buffer. Allocation and free are batch operations on a free-list stack.
 *
 * Memory layout: buffer i starts at `firstOffset + i * stride` in `u8`; its first `headroom`
 * bytes are headroom (so transmit nodes prepend headers in place), then `dataSize` data bytes.
 * The memory comes from whoever provides it: the core addon (hugepages when reserved, a memfd
 * that memif can share with a peer), or a driver that owns the buffers itself (DPDK: the
 * mempool's single memory chunk, one buffer per mbuf, allocation through the driver).
 */

import { ExtMemories } from './ext-memory.ts';

export const INVALID_INDEX = 0xffffffff;

/** Per-buffer flag bits (`BufferPool.flags`). Bits 16..31 are for nodes. */
export const BufferFlag = {
  /** `next` holds a further segment of this packet. */
  NEXT_PRESENT: 1 << 0,
  /** The packet is being traced (`trace add`). */
  TRACED: 1 << 1,
  /** `tsSec`/`tsNsec` hold the packet's receive (or capture) time. */
  TIMESTAMP_VALID: 1 << 2,
  /** The driver/NIC verified the IPv4 header checksum. */
  IP4_CKSUM_OK: 1 << 3,
  /** The driver/NIC verified the L4 checksum. */
  L4_CKSUM_OK: 1 << 4,
  /** Transmit: the NIC computes the IPv4 header checksum (the field is 0; L2 14, L3 20 bytes). */
  TX_IP4_CKSUM: 1 << 5,
  /** Transmit: the NIC computes the UDP checksum (the field holds the pseudo-header sum). */
  TX_UDP_CKSUM: 1 << 6,
  /**
   * External payload (graph/ext-memory.ts): this buffer's `offset` and `length` are a window of
   * memory `extId` of the pool's `ext` table, not of the pool. Never a packet's head.
   */
  EXT_DATA: 1 << 7,
  /** On a packet's head: some buffer of its chain is EXT_DATA (materialize copies them in). */
  EXT_CHAIN: 1 << 8,
  /**
   * Received payload still in a memif peer's memory (graph/peer-windows.ts): this buffer's bytes
   * are not in the pool yet. Only native code reads them (ChainCopy); `settlePeer` copies them in
   * for anything else, and the driver does before the peer gets the memory back.
   */
  PEER_DATA: 1 << 9,
  /** On a packet's head: some buffer of its chain may be PEER_DATA. */
  PEER_CHAIN: 1 << 10,
  /** Transmit: a multicast datagram not to be looped back to this data plane's members (ip4-rewrite). */
  NO_MCAST_LOOP: 1 << 11,
  /** The buffer is in the pool (free). Set by free, cleared by alloc: catches double frees. */
  FREE: 1 << 15,
} as const;

/**
 * Flags a received buffer turned around for transmit must not carry on (what the receive side
 * verified or stamped: checksums, the timestamp).
 */
export const RX_ONLY_FLAGS = BufferFlag.IP4_CKSUM_OK | BufferFlag.L4_CKSUM_OK | BufferFlag.TIMESTAMP_VALID;

/** Number of opaque u32 words per buffer for the nodes (QP index, PSN, ...). */
export const OPAQUE_WORDS = 8;

/** Memory a pool lives in. Provided by the core addon or by a driver. */
export interface BufferMemory {
  /** The whole region as seen by JavaScript. */
  buffer: ArrayBuffer;
  /** Number of buffers in the region. */
  count: number;
  /** Bytes from one buffer's start (its headroom) to the next one's. */
  stride: number;
  /** Byte offset of buffer 0's start within `buffer`. */
  firstOffset: number;
  /** Headroom bytes before each buffer's data. */
  headroom: number;
  /** Data bytes per buffer. */
  dataSize: number;
  /** Backed by hugepages. */
  hugepages: boolean;
  /** File descriptor of the memory (memfd) so it can be shared with a peer; -1 if none. */
  fd: number;
  /** Who owns the memory, for `show buffers`: "core", "dpdk", ... */
  owner: string;
}

/**
 * Allocation done elsewhere (DPDK: rte_pktmbuf_alloc_bulk / free_bulk through one native call
 * per batch). When a driver provides one, the pool's own free-list is not used.
 */
export interface ExternalAllocator {
  alloc(out: Uint32Array, off: number, n: number): number;
  free(src: Uint32Array, off: number, n: number): void;
  available(): number;
}

export interface BufferPoolStats {
  count: number;
  free: number;
  used: number;
  dataSize: number;
  headroom: number;
  hugepages: boolean;
  owner: string;
  bytes: number;
}

export class BufferPool {
  readonly memory: BufferMemory;
  readonly count: number;
  readonly headroom: number;
  readonly dataSize: number;
  readonly stride: number;
  readonly firstOffset: number;

  /** The whole buffer memory. */
  readonly u8: Uint8Array;
  readonly view: DataView;

  /** Absolute byte offset (into `u8`) of the current data start of each buffer. */
  readonly offset: Uint32Array;
  /** Bytes of this segment from `offset`. */
  readonly length: Uint32Array;
  readonly flags: Uint32Array;
  /** Next segment of a chained packet (valid when NEXT_PRESENT). */
  readonly next: Uint32Array;
  readonly rxIf: Uint32Array;
  readonly txIf: Uint32Array;
  /** Global error index, consumed by `error-drop`. */
  readonly error: Uint32Array;
  /** OPAQUE_WORDS u32 words per buffer for the nodes: `opaque[bi * OPAQUE_WORDS + k]`. */
  readonly opaque: Uint32Array;
  readonly tsSec: Uint32Array;
  readonly tsNsec: Uint32Array;
  /** Index into the trace buffer, valid when TRACED. */
  readonly traceIndex: Uint32Array;
  /** The external memory of an EXT_DATA buffer (its id in `ext`). */
  readonly extId: Uint32Array;
  /** External payload memories (graph/ext-memory.ts). */
  readonly ext = new ExtMemories();
  /** Received payload left in a memif peer's memory (graph/peer-windows.ts), once made. */
  peerWindows: { settle(head: number): number } | null = null;

  private readonly freeStack: Uint32Array;
  private nFree: number;
  private readonly external: ExternalAllocator | null;

  constructor(memory: BufferMemory, external: ExternalAllocator | null = null) {
    validateMemory(memory);
    this.memory = memory;
    this.count = memory.count;
    this.headroom = memory.headroom;
    this.dataSize = memory.dataSize;
    this.stride = memory.stride;
    this.firstOffset = memory.firstOffset;
    this.u8 = new Uint8Array(memory.buffer);
    this.view = new DataView(memory.buffer);
    const n = memory.count;
    this.offset = new Uint32Array(n);
    this.length = new Uint32Array(n);
    this.flags = new Uint32Array(n);
    this.next = new Uint32Array(n).fill(INVALID_INDEX);
    this.rxIf = new Uint32Array(n);
    this.txIf = new Uint32Array(n);
    this.error = new Uint32Array(n);
    this.opaque = new Uint32Array(n * OPAQUE_WORDS);
    this.tsSec = new Uint32Array(n);
    this.tsNsec = new Uint32Array(n);
    this.traceIndex = new Uint32Array(n);
    this.extId = new Uint32Array(n);
    this.external = external;
    this.freeStack = new Uint32Array(external ? 0 : n);
    this.flags.fill(BufferFlag.FREE);
    if (external) {
      this.nFree = 0;
    } else {
      // Lowest indices on top of the stack: first allocations are the first buffers in memory.
      for (let i = 0; i < n; i++) this.freeStack[i] = n - 1 - i;
      this.nFree = n;
    }
  }

  /** Byte offset of buffer `bi`'s data area (after the headroom). */
  dataStart(bi: number): number {
    return this.firstOffset + bi * this.stride + this.headroom;
  }

  /** Buffers currently free. */
  available(): number {
    return this.external ? this.external.available() : this.nFree;
  }

  /**
   * Allocate up to `n` buffers into `out[off..]`. Returns how many were allocated (fewer when
   * the pool runs low: the caller counts that as a buffer allocation error). Each buffer comes
   * back reset: offset at the data start, length 0, no flags, no chain, error 0 (unset).
   */
  alloc(out: Uint32Array, off: number, n: number): number {
    let got: number;
    if (this.external) {
      got = this.external.alloc(out, off, n);
    } else {
      got = n <= this.nFree ? n : this.nFree;
      let top = this.nFree;
      const stack = this.freeStack;
      for (let i = 0; i < got; i++) out[off + i] = stack[--top];
      this.nFree = top;
    }
    const hr = this.headroom,
      base = this.firstOffset,
      stride = this.stride;
    const offset = this.offset,
      length = this.length,
      flags = this.flags,
      error = this.error;
    // `next` is left as it was: it means nothing without NEXT_PRESENT.
    for (let i = 0; i < got; i++) {
      const bi = out[off + i];
      offset[bi] = base + bi * stride + hr;
      length[bi] = 0;
      flags[bi] = 0;
      error[bi] = 0;
    }
    return got;
  }

  /** Allocate one buffer, or return INVALID_INDEX when the pool is empty. */
  allocOne(): number {
    const tmp = this.one;
    return this.alloc(tmp, 0, 1) === 1 ? tmp[0] : INVALID_INDEX;
  }
  private readonly one = new Uint32Array(1);

  /**
   * Return `n` packets (`src[off..]`) to the pool, each with every segment of its chain.
   * Freeing a buffer that is already free throws: that is a bug in a node, never input.
   */
  free(src: Uint32Array, off: number, n: number): void {
    const flags = this.flags,
      next = this.next,
      count = this.count;
    if (this.external) {
      // Gather every segment, then one call into the driver for the whole batch.
      let m = 0;
      for (let i = 0; i < n; i++) {
        let bi = src[off + i];
        for (;;) {
          const f = flags[bi];
          if (bi >= count || f & BufferFlag.FREE) this.badFree(bi);
          if (f & BufferFlag.EXT_DATA) this.ext.unref(this.extId[bi]);
          flags[bi] = BufferFlag.FREE;
          if (m === this.gather.length) this.gather = growU32(this.gather);
          this.gather[m++] = bi;
          if (!(f & BufferFlag.NEXT_PRESENT)) break;
          bi = next[bi];
        }
      }
      this.external.free(this.gather, 0, m);
      return;
    }
    const stack = this.freeStack;
    let top = this.nFree;
    for (let i = 0; i < n; i++) {
      let bi = src[off + i];
      for (;;) {
        const f = flags[bi];
        if (bi >= count || f & BufferFlag.FREE) {
          this.nFree = top; // what was freed before the bad one stays freed
          this.badFree(bi);
        }
        if (f & BufferFlag.EXT_DATA) this.ext.unref(this.extId[bi]);
        flags[bi] = BufferFlag.FREE;
        stack[top++] = bi;
        if (!(f & BufferFlag.NEXT_PRESENT)) break;
        bi = next[bi];
      }
    }
    this.nFree = top;
  }
  private gather: Uint32Array = new Uint32Array(256);

  /** Free one packet (with its chain). */
  freeOne(bi: number): void {
    this.one[0] = bi;
    this.free(this.one, 0, 1);
  }

  private badFree(bi: number): never {
    throw new Error(
      bi >= this.count
        ? `buffer pool: index ${bi} is out of range (pool has ${this.count} buffers)`
        : `buffer pool: double free of buffer ${bi}`,
    );
  }

  /** True while `bi` is allocated (not in the pool). */
  isAllocated(bi: number): boolean {
    return bi < this.count && (this.flags[bi] & BufferFlag.FREE) === 0;
  }

  /** Total bytes of a packet across its chain. */
  packetLength(bi: number): number {
    let len = this.length[bi];
    while (this.flags[bi] & BufferFlag.NEXT_PRESENT) {
      bi = this.next[bi];
      len += this.length[bi];
    }
    return len;
  }

  /** Number of segments in a packet's chain. */
  segments(bi: number): number {
    let n = 1;
    while (this.flags[bi] & BufferFlag.NEXT_PRESENT) {
      bi = this.next[bi];
      n++;
    }
    return n;
  }

  /**
   * Copy `len` bytes from `src[srcOff..]` into a new packet, chaining buffers when it does not
   * fit in one. Returns the head buffer index, or INVALID_INDEX (nothing allocated) when the
   * pool cannot supply every segment.
   */
  writePacket(src: Uint8Array, srcOff: number, len: number): number {
    const ds = this.dataSize;
    const head = this.allocChain(len === 0 ? 1 : Math.ceil(len / ds));
    if (head === INVALID_INDEX) return INVALID_INDEX;
    let done = 0;
    for (let bi = head; ; bi = this.next[bi]) {
      const n = len - done < ds ? len - done : ds;
      this.u8.set(src.subarray(srcOff + done, srcOff + done + n), this.offset[bi]);
      this.length[bi] = n;
      done += n;
      if (!(this.flags[bi] & BufferFlag.NEXT_PRESENT)) break;
    }
    return head;
  }

  /**
   * Allocate one packet of `n` buffers, linked in order (NEXT_PRESENT on all but the last), each
   * reset as `alloc` leaves it (length 0). Returns its head, or INVALID_INDEX (nothing held) when
   * the pool cannot supply them all.
   */
  allocChain(n: number): number {
    const segs = n <= this.segScratch.length ? this.segScratch : new Uint32Array(n);
    const got = this.alloc(segs, 0, n);
    if (got !== n) {
      // Partial allocation: give back what we got (unchained singles).
      if (got > 0) this.free(segs, 0, got);
      return INVALID_INDEX;
    }
    const flags = this.flags,
      next = this.next;
    for (let s = 0; s + 1 < n; s++) {
      flags[segs[s]] |= BufferFlag.NEXT_PRESENT;
      next[segs[s]] = segs[s + 1];
    }
    return segs[0];
  }
  /** Room for the largest IP packet (65535 bytes) in the smallest buffers (256 bytes): no allocation on the data path. */
  private readonly segScratch = new Uint32Array(257);

  /**
   * Packet `head` (PEER_CHAIN) with every byte in the pool: what a memif server's receive left
   * in the peer's memory is copied in. For a node about to read past the packet's first buffer
   * anything but a placement (ChainCopy reads such bytes where they are).
   */
  settlePeer(head: number): void {
    if (this.flags[head] & BufferFlag.PEER_CHAIN) (this.peerWindows as { settle(h: number): number }).settle(head);
  }

  /** Copy a packet's bytes (all segments) into `dst[dstOff..]`; returns bytes copied. */
  readPacket(bi: number, dst: Uint8Array, dstOff: number): number {
    this.settlePeer(bi);
    let pos = dstOff;
    for (;;) {
      const o = this.offset[bi],
        l = this.length[bi];
      const from = this.flags[bi] & BufferFlag.EXT_DATA ? (this.ext.mem[this.extId[bi]] as Uint8Array) : this.u8;
      dst.set(from.subarray(o, o + l), pos);
      pos += l;
      if (!(this.flags[bi] & BufferFlag.NEXT_PRESENT)) break;
      bi = this.next[bi];
    }
    return pos - dstOff;
  }

  /** A copy of a packet's bytes (control plane and tests; allocates). */
  packetBytes(bi: number): Uint8Array {
    const out = new Uint8Array(this.packetLength(bi));
    this.readPacket(bi, out, 0);
    return out;
  }

  /**
   * Make buffer `bi` (allocated, not a packet's head) a window of external memory `id` (of
   * `ext`): `len` bytes at `off`, read in place until it is freed. The caller puts EXT_CHAIN on
   * the packet's head. The window must lie inside the memory (the memif gather checks it again).
   */
  attachExt(bi: number, id: number, off: number, len: number): void {
    this.ext.ref(id);
    this.flags[bi] |= BufferFlag.EXT_DATA;
    this.extId[bi] = id;
    this.offset[bi] = off;
    this.length[bi] = len;
  }

  /**
   * Copy the external segments of packet `head` (EXT_CHAIN) into pool buffers spliced into the
   * chain in their place, for whoever reads its bytes from the pool (a driver without external
   * transmit, a capture, a fault injector, the local adjacency). False when the pool ran short
   * (the packet stays valid, with what was not copied yet still external): drop it.
   */
  materialize(head: number): boolean {
    const flags = this.flags,
      next = this.next,
      length = this.length,
      offset = this.offset,
      ds = this.dataSize;
    if (!(flags[head] & BufferFlag.EXT_CHAIN)) return true;
    if (flags[head] & BufferFlag.EXT_DATA) return false; // never made: a head holds the headers
    let prev = head;
    while (flags[prev] & BufferFlag.NEXT_PRESENT) {
      const e = next[prev];
      if (!(flags[e] & BufferFlag.EXT_DATA)) {
        prev = e;
        continue;
      }
      const len = length[e];
      const c = this.allocChain(len === 0 ? 1 : Math.ceil(len / ds));
      if (c === INVALID_INDEX) return false;
      const mem = this.ext.mem[this.extId[e]] as Uint8Array;
      let src = offset[e],
        left = len,
        t = c;
      for (;;) {
        const take = left < ds ? left : ds;
        this.u8.set(mem.subarray(src, src + take), offset[t]);
        length[t] = take;
        src += take;
        left -= take;
        if (!(flags[t] & BufferFlag.NEXT_PRESENT)) break;
        t = next[t];
      }
      if (flags[e] & BufferFlag.NEXT_PRESENT) {
        flags[t] |= BufferFlag.NEXT_PRESENT;
        next[t] = next[e];
      }
      next[prev] = c;
      flags[e] &= ~BufferFlag.NEXT_PRESENT;
      this.freeOne(e);
      prev = t;
    }
    flags[head] &= ~BufferFlag.EXT_CHAIN;
    return true;
  }

  /**
   * materialize every packet of `vec[0..n)`: those it succeeds for stay, closed up at the front
   * (their count is returned); the others (the pool ran short) go to `drop[0..n - kept)`.
   */
  materializeVector(vec: Uint32Array, n: number, drop: Uint32Array): number {
    const flags = this.flags;
    let kept = 0,
      dropped = 0;
    for (let i = 0; i < n; i++) {
      const bi = vec[i];
      if (!(flags[bi] & BufferFlag.EXT_CHAIN) || this.materialize(bi)) vec[kept++] = bi;
      else drop[dropped++] = bi;
    }
    return kept;
  }

  /** Move the current data start back by `n` bytes (prepend a header into the headroom). */
  prepend(bi: number, n: number): boolean {
    const start = this.firstOffset + bi * this.stride;
    if (this.offset[bi] - n < start) return false;
    this.offset[bi] -= n;
    this.length[bi] += n;
    return true;
  }

  /**
   * Cut a packet to `len` bytes (Ethernet padding after the IPv4 total length, a UDP length
   * shorter than the IP payload). Segments past the new end go back to the pool. A `len` at or
   * beyond the packet's length changes nothing.
   */
  trim(bi: number, len: number): void {
    const length = this.length,
      flags = this.flags,
      next = this.next;
    for (;;) {
      const l = length[bi];
      if (len <= l) {
        length[bi] = len;
        if (flags[bi] & BufferFlag.NEXT_PRESENT) {
          flags[bi] &= ~BufferFlag.NEXT_PRESENT;
          this.freeOne(next[bi]);
        }
        return;
      }
      len -= l;
      if (!(flags[bi] & BufferFlag.NEXT_PRESENT)) return;
      bi = next[bi];
    }
  }

  /** Advance the current data start by `n` bytes (strip a header). */
  advance(bi: number, n: number): void {
    this.offset[bi] += n;
    this.length[bi] -= n;
  }

  stats(): BufferPoolStats {
    const free = this.available();
    return {
      count: this.count,
      free,
      used: this.count - free,
      dataSize: this.dataSize,
      headroom: this.headroom,
      hugepages: this.memory.hugepages,
      owner: this.memory.owner,
      bytes: this.memory.buffer.byteLength,
    };
  }
}

function growU32(a: Uint32Array): Uint32Array {
  const b = new Uint32Array(a.length * 2);
  b.set(a);
  return b;
}

function validateMemory(m: BufferMemory): void {
  const where = `buffer memory from ${m.owner}`;
  if (!Number.isInteger(m.count) || m.count <= 0)
    throw new RangeError(`${where}: count must be a positive integer, got ${m.count}`);
  if (m.count >= INVALID_INDEX) throw new RangeError(`${where}: count ${m.count} exceeds the u32 index space`);
  if (!Number.isInteger(m.headroom) || m.headroom < 0)
    throw new RangeError(`${where}: headroom must be >= 0, got ${m.headroom}`);
  if (!Number.isInteger(m.dataSize) || m.dataSize < 64)
    throw new RangeError(`${where}: data size must be >= 64, got ${m.dataSize}`);
  if (m.stride < m.headroom + m.dataSize)
    throw new RangeError(
      `${where}: stride ${m.stride} is smaller than headroom + data size (${m.headroom + m.dataSize})`,
    );
  const end = m.firstOffset + (m.count - 1) * m.stride + m.stride;
  if (m.firstOffset < 0 || end > m.buffer.byteLength) {
    throw new RangeError(
      `${where}: ${m.count} buffers of ${m.stride} bytes at offset ${m.firstOffset} need ${end} bytes, region has ${m.buffer.byteLength}`,
    );
  }
}

export interface PoolOptions {
  count?: number;
  dataSize?: number;
  headroom?: number;
}

export const DEFAULT_POOL = { count: 16384, dataSize: 2048, headroom: 128 } as const;

/** Layout for a pool that owns its memory: buffers back to back, cache-line aligned. */
export function poolLayout(opts: PoolOptions = {}): {
  count: number;
  dataSize: number;
  headroom: number;
  stride: number;
  bytes: number;
} {
  const count = opts.count ?? DEFAULT_POOL.count;
  const dataSize = opts.dataSize ?? DEFAULT_POOL.dataSize;
  const headroom = opts.headroom ?? DEFAULT_POOL.headroom;
  if (!Number.isInteger(count) || count < 1 || count > 16 * 1024 * 1024)
    throw new RangeError(`buffers.count must be an integer in 1..16777216, got ${count}`);
  if (!Number.isInteger(dataSize) || dataSize < 128 || dataSize > 65535)
    throw new RangeError(`buffers.data-size must be an integer in 128..65535, got ${dataSize}`);
  if (!Number.isInteger(headroom) || headroom < 0 || headroom > 1024)
    throw new RangeError(`buffers.headroom must be an integer in 0..1024, got ${headroom}`);
  const stride = (headroom + dataSize + 63) & ~63;
  return { count, dataSize, headroom, stride, bytes: stride * count };
}
