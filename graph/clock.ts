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
  /** Cycles per nanosecond, measured. */
  clocksPerNs(): number;
  /** What `tsc` reads: "rdtsc", "cntvct", "clock_monotonic" or "performance.now". */
  readonly source: string;
}

export function nowNs(): number {
  return performance.now() * 1e6;
}

class CalibratedClock implements Clock {
  readonly tsc: () => number;
  readonly tick: () => void;
  readonly slot: Float64Array;
  readonly nowNs = nowNs;
  readonly source: string;
  private readonly tsc0: number;
  private readonly ns0: number;

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
