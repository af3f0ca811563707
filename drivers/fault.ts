/**
 * A deterministic, seeded fault injector for one direction (rx or tx) of one interface: loss,
 * reordering, duplication and bit corruption, each with its own probability, all able to hit
 * the same packet. `Interfaces` puts it between the driver and the graph (`setFault`, or
 * `InterfaceOptions.fault` at `add`); without one the device nodes pay a null check.
 *
 * Determinism: a splitmix32-style generator over one u32 of state. Every packet draws exactly
 * six numbers (loss, corrupt, bit position, duplicate, reorder, overtake count) whatever the
 * outcome, so the same seed and the same packet sequence give the same decisions, and the
 * loss decisions of a seed do not change when another probability does. rx and tx of one
 * interface draw from different streams of the same seed. The one thing that depends on time
 * is when a held packet's `reorderDelayUs` runs out while no traffic follows.
 *
 * Per packet, in order: dropped with `loss` (freed to the pool, nothing else applies);
 * otherwise one uniformly chosen bit of the frame (any segment) is flipped with `corrupt`; an
 * ECN-capable IPv4 packet is marked CE with `ce` (decided by the bit position's draw, so no
 * seventh number: what a seed decides for the others does not change);
 * then with `duplicate` a copy (new buffers from the pool, whole chain, metadata included) is
 * made of the packet as it now is, and goes out right behind it (skipped when the pool cannot
 * supply it); then with `reorder` the original is held back: it goes out once k later packets
 * have gone out (k uniform in 1..reorderDepth), or when `reorderDelayUs` has passed, whichever
 * comes first. At most HOLD_MAX packets are held at once; a packet drawn for reordering while
 * that many are held goes out in order (and is not counted as reordered).
 *
 * Nothing on the data path allocates: decisions, held packets and the output vector live in
 * typed arrays owned by the injector (the output grows once if a burst larger than any before
 * comes).
 */
import { BufferFlag, OPAQUE_WORDS, type BufferPool } from '../graph/buffer-pool.ts';

export interface FaultConfig {
  /** Default 1; same seed + same traffic => same decisions. An integer in 0..2^32-1. */
  seed?: number;
  /** Probability 0..1 a packet is dropped. */
  loss?: number;
  /** Probability a packet is held back and released later (after later packets). */
  reorder?: number;
  /** At most this many later packets overtake a held one (default 8, 1..65535). */
  reorderDepth?: number;
  /** A held packet is released at the latest after this long even if no traffic follows (default 500). */
  reorderDelayUs?: number;
  /** Probability a packet is sent/received twice (the copy is a real separate buffer). */
  duplicate?: number;
  /** Probability one random bit of the packet (anywhere in the frame, any segment) is flipped. */
  corrupt?: number;
  /**
   * Probability an ECN-capable IPv4 packet (ECT(0) or ECT(1)) is marked CE (the header checksum
   * updated), as an AQM at a congested queue marks: for congestion-control tests and benches.
   */
  ce?: number;
}

export interface FaultCounters {
  /** Packets that entered the injector. */
  packets: number;
  dropped: number;
  /** Packets held back (each is released later, or freed when the injector goes away). */
  reordered: number;
  /** Copies made (each one more packet out). */
  duplicated: number;
  corrupted: number;
  /** ECN-capable packets marked CE. */
  marked: number;
}

/** Fault configurations of one interface, by direction (`InterfaceOptions.fault`). */
export interface FaultDirections {
  rx?: FaultConfig;
  tx?: FaultConfig;
}

export const FAULT_DEFAULTS = {
  seed: 1,
  loss: 0,
  reorder: 0,
  reorderDepth: 8,
  reorderDelayUs: 500,
  duplicate: 0,
  corrupt: 0,
  ce: 0,
} as const;

/** Most packets one injector holds back at once. */
export const HOLD_MAX = 64;

const PROBABILITIES = ['loss', 'reorder', 'duplicate', 'corrupt', 'ce'] as const;
const KEYS = Object.keys(FAULT_DEFAULTS);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Check a fault configuration (from code, the start-up YAML or the API). Returns a copy with
 * the keys that were given (undefined ones left out). Throws a RangeError naming `where` and
 * the key on anything else: an unknown key, a probability outside [0, 1], a seed that is not
 * an integer in 0..2^32-1, a reorderDepth that is not an integer in 1..65535, a reorderDelayUs
 * outside 1..10 000 000.
 */
export function validateFaultConfig(cfg: unknown, where: string): FaultConfig {
  if (!isRecord(cfg))
    throw new RangeError(
      `${where}: a fault configuration must be an object (keys: ${KEYS.join(', ')}), got ${describe(cfg)}`,
    );
  const out: FaultConfig = {};
  for (const [key, v] of Object.entries(cfg)) {
    if (!KEYS.includes(key)) throw new RangeError(`${where}.${key}: unknown key (known: ${KEYS.join(', ')})`);
    if (v === undefined) continue;
    const bad = (want: string) => new RangeError(`${where}.${key} must be ${want}, got ${describe(v)}`);
    if (typeof v !== 'number' || !Number.isFinite(v)) throw bad('a finite number');
    if ((PROBABILITIES as readonly string[]).includes(key)) {
      if (v < 0 || v > 1) throw bad('a probability in [0, 1]');
    } else if (key === 'seed') {
      if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw bad('an integer in 0..4294967295');
    } else if (key === 'reorderDepth') {
      if (!Number.isInteger(v) || v < 1 || v > 65535) throw bad('an integer in 1..65535');
    } else if (v < 1 || v > 1e7) {
      throw bad('a number of microseconds in 1..10000000');
    }
    (out as Record<string, number>)[key] = v;
  }
  return out;
}

/** Check `InterfaceOptions.fault`: an object with rx and/or tx configurations. */
export function validateFaultDirections(v: unknown, where: string): FaultDirections {
  if (!isRecord(v))
    throw new RangeError(`${where}: must be an object with rx and/or tx fault configurations, got ${describe(v)}`);
  const out: FaultDirections = {};
  for (const [key, c] of Object.entries(v)) {
    if (key !== 'rx' && key !== 'tx') throw new RangeError(`${where}.${key}: unknown key (known: rx, tx)`);
    if (c !== undefined) out[key] = validateFaultConfig(c, `${where}.${key}`);
  }
  return out;
}

function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object' && v !== null) return 'an object';
  return String(v);
}

/** Odd constant that separates the rx and tx streams of one seed (the golden ratio). */
const STREAM_STEP = 0x9e3779b9;
const TWO_32 = 4294967296;

export class FaultInjector {
  /** Which stream of the seed this injector draws from (0 rx, 1 tx). */
  readonly stream: number;
  // The configuration in force.
  private loss = 0;
  private reorder = 0;
  private depth: number = FAULT_DEFAULTS.reorderDepth;
  private delayNs: number = FAULT_DEFAULTS.reorderDelayUs * 1000;
  private duplicate = 0;
  private corrupt = 0;
  private ce = 0;
  /** Generator state (u32, kept as a signed int32). */
  private state = 0;

  // Counters.
  private nPackets = 0;
  private nDropped = 0;
  private nReordered = 0;
  private nDuplicated = 0;
  private nCorrupted = 0;
  private nMarked = 0;

  /** Held packets, oldest first: buffer, later packets still to go out before it, deadline (ns). */
  private readonly heldBi = new Uint32Array(HOLD_MAX);
  private readonly heldLeft = new Int32Array(HOLD_MAX);
  private readonly heldDue = new Float64Array(HOLD_MAX);
  /** Packets held now. */
  held = 0;

  /** The output vector of the last `process`/`release` call. */
  out = new Uint32Array(2 * 256 + HOLD_MAX);
  private m = 0;
  private drops = new Uint32Array(256);
  private segs = new Uint32Array(16);

  constructor(cfg: FaultConfig, stream = 0) {
    this.stream = stream;
    this.configure(cfg);
    this.reseed(cfg.seed ?? FAULT_DEFAULTS.seed);
  }

  /**
   * Take a new configuration (validated). Keys left out take their defaults; counters and held
   * packets stay (a held packet waits at most the new reorderDepth from now on). The generator
   * restarts only when `cfg.seed` is given, otherwise it goes on where it was.
   */
  configure(cfg: FaultConfig): void {
    this.loss = cfg.loss ?? 0;
    this.reorder = cfg.reorder ?? 0;
    this.depth = cfg.reorderDepth ?? FAULT_DEFAULTS.reorderDepth;
    this.delayNs = (cfg.reorderDelayUs ?? FAULT_DEFAULTS.reorderDelayUs) * 1000;
    this.duplicate = cfg.duplicate ?? 0;
    this.corrupt = cfg.corrupt ?? 0;
    this.ce = cfg.ce ?? 0;
    for (let j = 0; j < this.held; j++) if (this.heldLeft[j] > this.depth) this.heldLeft[j] = this.depth;
    if (cfg.seed !== undefined) this.reseed(cfg.seed);
  }

  private reseed(seed: number): void {
    this.state = (seed + Math.imul(this.stream, STREAM_STEP)) | 0;
  }

  /** Next number in [0, 1) (splitmix32: a Weyl sequence through a mixing function). */
  private next(): number {
    let z = (this.state = (this.state + STREAM_STEP) | 0);
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return ((z ^ (z >>> 16)) >>> 0) / TWO_32;
  }

  counters(): FaultCounters {
    return {
      packets: this.nPackets,
      dropped: this.nDropped,
      reordered: this.nReordered,
      duplicated: this.nDuplicated,
      corrupted: this.nCorrupted,
      marked: this.nMarked,
    };
  }

  /** Monotonic ns at which the oldest held packet is due, or -1 when none is held. */
  nextDueNs(): number {
    let due = -1;
    for (let j = 0; j < this.held; j++) if (due < 0 || this.heldDue[j] < due) due = this.heldDue[j];
    return due;
  }

  /**
   * Run `vec[off..off+n)` through the faults. The packets that go out now (in their new order,
   * with held ones whose time came) are in `out[0..returned)`; dropped ones are back in the pool.
   */
  process(pool: BufferPool, vec: Uint32Array, off: number, n: number, nowNs: number): number {
    if (this.out.length < 2 * n + HOLD_MAX) this.out = new Uint32Array(2 * n + HOLD_MAX);
    if (this.drops.length < n) this.drops = new Uint32Array(n);
    this.m = 0;
    if (this.held > 0) this.releaseDue(nowNs);
    const drops = this.drops;
    let nDrop = 0;
    for (let i = 0; i < n; i++) {
      const bi = vec[off + i];
      // Always six draws: decisions of one kind do not depend on the others.
      const rLoss = this.next(),
        rCorrupt = this.next(),
        rBit = this.next();
      const rDup = this.next(),
        rReorder = this.next(),
        rDepth = this.next();
      this.nPackets++;
      if (rLoss < this.loss) {
        drops[nDrop++] = bi;
        this.nDropped++;
        continue;
      }
      if (rCorrupt < this.corrupt && flipBit(pool, bi, rBit)) this.nCorrupted++;
      // CE marking draws no number of its own (the seed's other decisions stay as they were):
      // it takes the bit position's draw, which is independent of whether the packet is corrupted.
      if (rBit < this.ce && markCe(pool, bi)) this.nMarked++;
      const dup = rDup < this.duplicate ? this.copy(pool, bi) : -1;
      if (dup >= 0) this.nDuplicated++;
      if (rReorder < this.reorder && this.held < HOLD_MAX) {
        const j = this.held++;
        this.heldBi[j] = bi;
        this.heldLeft[j] = 1 + Math.floor(rDepth * this.depth);
        this.heldDue[j] = nowNs + this.delayNs;
        this.nReordered++;
      } else {
        this.emit(bi);
      }
      if (dup >= 0) this.emit(dup);
    }
    if (nDrop > 0) pool.free(drops, 0, nDrop);
    return this.m;
  }

  /** Only the held packets whose delay has run out (no traffic); they are in `out[0..returned)`. */
  release(nowNs: number): number {
    this.m = 0;
    if (this.held > 0) this.releaseDue(nowNs);
    return this.m;
  }

  /** Give every held packet back to the pool (the injector is removed or the interface closed). */
  freeHeld(pool: BufferPool): void {
    if (this.held > 0) pool.free(this.heldBi, 0, this.held);
    this.held = 0;
  }

  private releaseDue(nowNs: number): void {
    let j = 0;
    while (j < this.held) {
      if (this.heldDue[j] <= nowNs) {
        this.emit(this.unhold(j));
        j = 0; // emitting may have released others; rescan (at most HOLD_MAX)
      } else {
        j++;
      }
    }
  }

  /** Put `bi` out; one more packet has now overtaken each held one, which goes out when its count runs out. */
  private emit(bi: number): void {
    this.out[this.m++] = bi;
    const left = this.heldLeft;
    for (let j = 0; j < this.held; j++) left[j]--;
    let j = 0;
    while (j < this.held) {
      if (left[j] <= 0) {
        // Oldest first; its going out counts against the ones still held.
        this.out[this.m++] = this.unhold(j);
        for (let q = 0; q < this.held; q++) left[q]--;
        j = 0;
      } else {
        j++;
      }
    }
  }

  private unhold(j: number): number {
    const bi = this.heldBi[j];
    const h = --this.held;
    this.heldBi.copyWithin(j, j + 1, h + 1);
    this.heldLeft.copyWithin(j, j + 1, h + 1);
    this.heldDue.copyWithin(j, j + 1, h + 1);
    return bi;
  }

  /**
   * A separate copy of packet `bi`: same segment lengths, bytes at the same offsets in their
   * buffers (headroom kept), same metadata (not traced). -1 when the pool cannot supply it.
   */
  private copy(pool: BufferPool, bi: number): number {
    const nseg = pool.segments(bi);
    if (nseg > this.segs.length) this.segs = new Uint32Array(Math.max(nseg, 2 * this.segs.length));
    const segs = this.segs;
    const got = pool.alloc(segs, 0, nseg);
    if (got < nseg) {
      if (got > 0) pool.free(segs, 0, got);
      return -1;
    }
    const u8 = pool.u8,
      offset = pool.offset,
      length = pool.length,
      flags = pool.flags;
    const base = pool.firstOffset,
      stride = pool.stride;
    let src = bi;
    for (let s = 0; s < nseg; s++) {
      const dst = segs[s];
      const o = offset[src],
        l = length[src];
      const at = base + dst * stride + (o - (base + src * stride));
      u8.copyWithin(at, o, o + l);
      offset[dst] = at;
      length[dst] = l;
      flags[dst] = flags[src] & ~BufferFlag.TRACED;
      pool.rxIf[dst] = pool.rxIf[src];
      pool.txIf[dst] = pool.txIf[src];
      pool.error[dst] = pool.error[src];
      pool.tsSec[dst] = pool.tsSec[src];
      pool.tsNsec[dst] = pool.tsNsec[src];
      pool.opaque.copyWithin(dst * OPAQUE_WORDS, src * OPAQUE_WORDS, (src + 1) * OPAQUE_WORDS);
      if (s + 1 < nseg) {
        pool.next[dst] = segs[s + 1];
        src = pool.next[src];
      }
    }
    return segs[0];
  }
}

/**
 * Mark packet `bi` CE if it is an ECN-capable IPv4 packet (Ethernet II, no VLAN tag; ECT(0) or
 * ECT(1)): the ECN bits to 11 and the header checksum updated (RFC 1624), unless the checksum
 * is left to the NIC (TX_IP4_CKSUM: the field is 0 and summed later). False when not marked.
 */
function markCe(pool: BufferPool, bi: number): boolean {
  if (pool.length[bi] < 14 + 20) return false;
  const u8 = pool.u8,
    o = pool.offset[bi];
  if (u8[o + 12] !== 0x08 || u8[o + 13] !== 0x00 || u8[o + 14] >>> 4 !== 4) return false;
  const tos = u8[o + 15];
  if ((tos & 3) === 0 || (tos & 3) === 3) return false;
  const now = tos | 3;
  u8[o + 15] = now;
  if (!(pool.flags[bi] & BufferFlag.TX_IP4_CKSUM)) {
    // HC' = ~(~HC + ~m + m') over the 16-bit word holding the TOS (version/IHL in its high byte).
    const hi = u8[o + 14] << 8;
    const hc = (u8[o + 24] << 8) | u8[o + 25];
    let x = (~hc & 0xffff) + (~(hi | tos) & 0xffff) + (hi | now);
    x = (x & 0xffff) + (x >>> 16);
    x = (x & 0xffff) + (x >>> 16);
    const nc = ~x & 0xffff;
    u8[o + 24] = nc >>> 8;
    u8[o + 25] = nc & 0xff;
  }
  return true;
}

/** Flip bit floor(r * bits) of packet `bi` (across its chain). False for an empty packet. */
function flipBit(pool: BufferPool, bi: number, r: number): boolean {
  let bit = Math.floor(r * pool.packetLength(bi) * 8);
  const length = pool.length;
  for (;;) {
    const l = length[bi] * 8;
    if (bit < l) {
      pool.u8[pool.offset[bi] + (bit >>> 3)] ^= 1 << (bit & 7);
      return true;
    }
    bit -= l;
    if (!(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) return false;
    bi = pool.next[bi];
  }
}
