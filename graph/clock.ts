/**
 * Time for the engine: CPU cycles (the TSC, read through the core addon once per node
 * dispatch, never per packet) for the runtime counters, and monotonic nanoseconds for timers
 * and trace timestamps. The TSC rate is calibrated against the monotonic clock over the life
 * of the clock, so `show runtime time` can print nanoseconds.
 */
import { performance } from 'node:perf_hooks';
import { loadCore } from '../native/addons.ts';

export interface Clock {
  /** CPU cycles (or another monotonic tick when the machine has no cycle counter). */
  readonly tsc: () => number;
  /**
   * The same counter into `slot[0]`, returning nothing: what the dispatch loop reads at every
   * node dispatch. A double returned from a call the compiler does not inline is a new heap
   * number, ~16 bytes per read, so an idle polling loop (5 million empty passes a second here)
   * made garbage enough for a scavenge every few tens of milliseconds; through the slot it makes
   * none.
   */
  readonly tick: () => void;
  readonly slot: Float64Array;
  /** Monotonic nanoseconds. */
  readonly nowNs: () => number;
  /**
   * Nanoseconds at the last `tick()`: the dispatch loop ticks at every node dispatch, so inside a
   * node this is the time its dispatch began, derived from the cycle counter it already read,
   * with no clock read of its own (VPP's vlib_time_now). Node code only: outside a pass the last
   * tick may be long ago. Monotonic, and kept on `nowNs` (rebased on it every millisecond of
   * ticks, so the rate's error never adds up).
   */
  readonly tickNs: () => number;
  /** Cycles per nanosecond, measured. */
  clocksPerNs(): number;
  /** What `tsc` reads: "rdtsc", "cntvct", "clock_monotonic" or "performance.now". */
  readonly source: string;
}

export function nowNs(): number {
  return performance.now() * 1e6;
}

/** tickNs: a tick and the monotonic reads around it closer than this pair well. */
const PAIR_NS = 20_000;
/** tickNs: rebased on the monotonic clock after this long in ticks. */
const REBASE_NS = 1e6;
/** tickNs: the tick rate is measured over at least this long (before: every call rebases). */
const CALIBRATED_NS = 5e6;
const TB_NS = 0,
  TB_TICK = 1,
  TB_NS_PER_TICK = 2,
  TB_LAST = 3,
  TB_SPAN = 4,
  TB_NS0 = 5,
  TB_TICK0 = 6;

class CalibratedClock implements Clock {
  readonly tsc: () => number;
  readonly tick: () => void;
  readonly slot: Float64Array;
  readonly nowNs = nowNs;
  readonly source: string;
  private readonly tsc0: number;
  private readonly ns0: number;
  /**
   * tickNs's state, in a typed array (a double field read through a call is a heap number):
   * [TB_NS] ns at [TB_TICK] ticks, [TB_NS_PER_TICK] (0 until calibrated), [TB_LAST] the last
   * value returned, [TB_SPAN] ticks after TB_TICK within which no rebase is needed, and the
   * first rebase's pair [TB_NS0] [TB_TICK0], the rate's origin (the constructor's pair is not:
   * the first reads of each clock in a process are slow, and ~4 % off here).
   */
  private readonly tb = new Float64Array(7);

  /** `through`: a tick that writes the counter into a slot itself (the addon's); else one over `tsc`. */
  constructor(tsc: () => number, source: string, through?: { tick: () => void; slot: Float64Array }) {
    this.tsc = tsc;
    if (through !== undefined) {
      this.tick = through.tick;
      this.slot = through.slot;
    } else {
      const own = new Float64Array(1);
      this.slot = own;
      this.tick = () => {
        own[0] = tsc();
      };
    }
    this.source = source;
    this.tsc0 = tsc();
    this.ns0 = nowNs();
  }

  readonly tickNs = (): number => {
    const b = this.tb;
    const d = this.slot[0] - b[TB_TICK];
    let ns = d >= 0 && d < b[TB_SPAN] ? b[TB_NS] + d * b[TB_NS_PER_TICK] : this.rebase();
    if (ns < b[TB_LAST]) ns = b[TB_LAST];
    b[TB_LAST] = ns;
    return ns;
  };

  /**
   * tickNs anew from a fresh tick paired with the monotonic clock read around it (again, up to
   * three times, when the two reads are apart: the thread stopped between them, which happens
   * for milliseconds in a VM); the rate once measured over CALIBRATED_NS.
   */
  private rebase(): number {
    const b = this.tb;
    let now = 0;
    for (let k = 0; k < 3; k++) {
      const t0 = nowNs();
      this.tick();
      const t1 = nowNs();
      now = (t0 + t1) / 2;
      if (t1 - t0 < PAIR_NS) break;
    }
    b[TB_NS] = now;
    b[TB_TICK] = this.slot[0];
    if (b[TB_NS0] === 0) {
      b[TB_NS0] = now;
      b[TB_TICK0] = this.slot[0];
    }
    const age = now - b[TB_NS0];
    if (age >= CALIBRATED_NS) {
      const perNs = (this.slot[0] - b[TB_TICK0]) / age;
      b[TB_NS_PER_TICK] = perNs > 0 ? 1 / perNs : 0;
      b[TB_SPAN] = perNs > 0 ? REBASE_NS * perNs : 0;
    }
    return now;
  }

  clocksPerNs(): number {
    let dt = nowNs() - this.ns0;
    if (dt < 5e6) {
      // Too young to be accurate: measure 5 ms now.
      const t0 = this.tsc(),
        n0 = nowNs();
      while (nowNs() - n0 < 5e6);
      return (this.tsc() - t0) / (nowNs() - n0);
    }
    const dc = this.tsc() - this.tsc0;
    dt = nowNs() - this.ns0;
    return dc / dt;
  }
}

let shared: Clock | null = null;

/** The process-wide clock over the core addon's cycle counter. */
export function systemClock(): Clock {
  if (shared === null) {
    const core = loadCore();
    // The addon writes the counter into the slot (rdtscStore): no heap number per read.
    const slot = new Float64Array(1);
    core.tscInto(slot);
    const tick = core.rdtscStore;
    shared = new CalibratedClock(
      () => {
        tick();
        return slot[0];
      },
      core.tscSource(),
      { tick, slot },
    );
  }
  return shared;
}

/** A clock over performance.now() alone (tests that must not depend on the addon). */
export function monotonicClock(): Clock {
  return new CalibratedClock(() => performance.now() * 1e6, 'performance.now');
}
