/**
 * A hashed timing wheel for protocol timers (retransmission, connection setup, neighbor
 * aging). Timers live in parallel typed arrays; each slot is a doubly linked list so start and
 * stop are O(1). A timer further away than one rotation stays in its slot and is skipped until
 * its absolute expiry tick comes round. Handles carry a generation so stopping a timer that
 * already expired (and whose slot was reused) is harmless.
 */

const NONE = 0xffffffff;
const ID_BITS = 2 ** 22;

export interface TimerWheelOptions {
  /** Tick length in nanoseconds (default 100 µs). */
  tickNs?: number;
  /** Slots per rotation, a power of two (default 2048: ~205 ms per rotation at 100 µs). */
  slots?: number;
  /** Initial capacity in timers; grows by doubling. */
  capacity?: number;
}

export class TimerWheel {
  readonly tickNs: number;
  readonly nSlots: number;
  private readonly mask: number;
  private readonly head: Uint32Array;
  private expiry: Float64Array;
  private user: Uint32Array;
  private owner: Uint32Array;
  private nextT: Uint32Array;
  private prevT: Uint32Array;
  private gen: Uint32Array;
  private active: Uint8Array;
  private freeIds: Uint32Array;
  private nFree: number;
  private cap: number;
  /** Last tick processed. */
  private curTick: number;
  private readonly originNs: number;
  private nActive = 0;
  /**
   * When the tick after the last one processed begins: advance() before then does nothing, so a
   * loop that polls the wheel every pass compares the time with this first, and passes the time
   * on (a heap number, as a call's argument) only once a tick.
   */
  nextTickNs: number;

  constructor(nowNs: number, opts: TimerWheelOptions = {}) {
    this.tickNs = opts.tickNs ?? 100_000;
    this.nSlots = opts.slots ?? 2048;
    if (!(this.tickNs > 0)) throw new RangeError(`timer wheel: tick must be > 0 ns, got ${this.tickNs}`);
    if (this.nSlots < 2 || (this.nSlots & (this.nSlots - 1)) !== 0)
      throw new RangeError(`timer wheel: slots must be a power of two >= 2, got ${this.nSlots}`);
    this.mask = this.nSlots - 1;
    this.head = new Uint32Array(this.nSlots).fill(NONE);
    this.cap = 0;
    this.expiry = new Float64Array(0);
    this.user = new Uint32Array(0);
    this.owner = new Uint32Array(0);
    this.nextT = new Uint32Array(0);
    this.prevT = new Uint32Array(0);
    this.gen = new Uint32Array(0);
    this.active = new Uint8Array(0);
    this.freeIds = new Uint32Array(0);
    this.nFree = 0;
    this.grow(opts.capacity ?? 1024);
    this.originNs = nowNs;
    this.curTick = 0;
    this.nextTickNs = nowNs + this.tickNs;
  }

  /** Timers currently running. */
  get size(): number {
    return this.nActive;
  }

  /** Tick number for a monotonic time. */
  tickOf(ns: number): number {
    return Math.floor((ns - this.originNs) / this.tickNs);
  }

  /** Monotonic time at which `tick` begins. */
  nsOfTick(tick: number): number {
    return this.originNs + tick * this.tickNs;
  }

  /**
   * Start a timer that expires `delayNs` from `nowNs` (rounded up to whole ticks, at least one).
   * `owner` and `user` come back on expiry. Returns a handle for stop().
   */
  start(nowNs: number, delayNs: number, owner: number, user: number): number {
    if (!(delayNs >= 0)) throw new RangeError(`timer wheel: delay must be >= 0 ns, got ${delayNs}`);
    if (this.nFree === 0) this.grow(this.cap * 2);
    const id = this.freeIds[--this.nFree];
    let t = Math.ceil((nowNs + delayNs - this.originNs) / this.tickNs);
    if (t <= this.curTick) t = this.curTick + 1;
    this.expiry[id] = t;
    this.owner[id] = owner;
    this.user[id] = user;
    this.active[id] = 1;
    const slot = t & this.mask;
    const h = this.head[slot];
    this.nextT[id] = h;
    this.prevT[id] = NONE;
    if (h !== NONE) this.prevT[h] = id;
    this.head[slot] = id;
    this.nActive++;
    return this.gen[id] * ID_BITS + id;
  }

  /** Stop a running timer. Returns false when it had already expired or been stopped. */
  stop(handle: number): boolean {
    const id = handle % ID_BITS;
    if (id >= this.cap || !this.active[id] || this.gen[id] !== Math.floor(handle / ID_BITS)) return false;
    this.unlink(id);
    this.release(id);
    return true;
  }

  /** True while the timer behind `handle` is running. */
  isRunning(handle: number): boolean {
    const id = handle % ID_BITS;
    return id < this.cap && this.active[id] === 1 && this.gen[id] === Math.floor(handle / ID_BITS);
  }

  /**
   * Expire every timer due at or before `nowNs`, calling `fire(owner, user)` for each (in
   * expiry-tick order). A timer started from inside `fire` expires in this same call when its
   * tick is already due. Returns how many fired.
   */
  advance(nowNs: number, fire: (owner: number, user: number) => void): number {
    const target = this.tickOf(nowNs);
    if (target <= this.curTick) return 0;
    let fired = 0;
    if (this.nActive === 0) {
      this.curTick = target;
      this.nextTickNs = this.nsOfTick(target + 1);
      return 0;
    }
    // Visit each slot at most once: a full rotation covers every slot.
    const steps = target - this.curTick > this.nSlots ? this.nSlots : target - this.curTick;
    const first = target - steps + 1;
    for (let t = first; t <= target; t++) {
      // Timers started from fire() land after t, in a slot this loop still visits or later.
      this.curTick = t;
      const slot = t & this.mask;
      let id = this.head[slot];
      while (id !== NONE) {
        const nx = this.nextT[id];
        if (this.expiry[id] <= target) {
          const o = this.owner[id],
            u = this.user[id];
          this.unlink(id);
          this.release(id);
          fired++;
          fire(o, u);
        }
        id = nx;
      }
    }
    this.curTick = target;
    this.nextTickNs = this.nsOfTick(target + 1);
    return fired;
  }

  /**
   * Monotonic time of the earliest running timer, or -1 when none. Scans at most one rotation;
   * a timer more than one rotation away is reported no later than one rotation from now.
   */
  nextDueNs(): number {
    if (this.nActive === 0) return -1;
    let best = Infinity;
    for (let d = 1; d <= this.nSlots; d++) {
      const t = this.curTick + d;
      if (t >= best) break;
      let id = this.head[t & this.mask];
      while (id !== NONE) {
        const e = this.expiry[id];
        if (e < best) best = e;
        id = this.nextT[id];
      }
    }
    const tick = best === Infinity ? this.curTick + this.nSlots : Math.min(best, this.curTick + this.nSlots);
    return this.nsOfTick(tick);
  }

  private unlink(id: number): void {
    const p = this.prevT[id],
      n = this.nextT[id];
    if (p !== NONE) this.nextT[p] = n;
    else this.head[this.expiry[id] & this.mask] = n;
    if (n !== NONE) this.prevT[n] = p;
  }

  private release(id: number): void {
    this.active[id] = 0;
    this.gen[id] = (this.gen[id] + 1) % 512;
    this.freeIds[this.nFree++] = id;
    this.nActive--;
  }

  private grow(newCap: number): void {
    if (newCap > ID_BITS) throw new RangeError(`timer wheel: more than ${ID_BITS} timers`);
    const old = this.cap;
    const cp = <T extends Float64Array | Uint32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(newCap);
      b.set(a);
      return b;
    };
    this.expiry = cp(this.expiry, (n) => new Float64Array(n));
    this.user = cp(this.user, (n) => new Uint32Array(n));
    this.owner = cp(this.owner, (n) => new Uint32Array(n));
    this.nextT = cp(this.nextT, (n) => new Uint32Array(n));
    this.prevT = cp(this.prevT, (n) => new Uint32Array(n));
    this.gen = cp(this.gen, (n) => new Uint32Array(n));
    this.active = cp(this.active, (n) => new Uint8Array(n));
    const free = new Uint32Array(newCap);
    free.set(this.freeIds.subarray(0, this.nFree));
    let nf = this.nFree;
    for (let id = newCap - 1; id >= old; id--) free[nf++] = id;
    this.freeIds = free;
    this.nFree = nf;
    this.cap = newCap;
  }
}
