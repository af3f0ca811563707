/**
 * Per-node runtime counters and per-error counters, kept in SharedArrayBuffers so the control
 * plane (or another thread) reads them while the loop runs. `clear` never resets in place: it
 * snapshots the totals and every reading subtracts the snapshot (VPP's stats_last_clear).
 */

/** Slots per node in the runtime counter array. */
export const RT_CALLS = 0;
export const RT_VECTORS = 1;
export const RT_SUSPENDS = 2;
export const RT_CLOCKS = 3;
/** The most clocks one call took since the last clear, and the vectors of that call (show runtime max). */
export const RT_MAX_CLOCKS = 4;
export const RT_MAX_VECTORS = 5;
export const RT_STRIDE = 6;

export class RuntimeCounters {
  /** `counts[node * RT_STRIDE + RT_*]`: totals since start. */
  counts: Float64Array;
  private lastClear: Float64Array;
  capacity: number;
  /** Main-loop passes since start. */
  loops = 0;
  private loopsAtClear = 0;
  clearTimeNs: number;

  constructor(capacity: number, nowNs: number) {
    this.capacity = capacity;
    this.counts = new Float64Array(new SharedArrayBuffer(capacity * RT_STRIDE * 8));
    this.lastClear = new Float64Array(capacity * RT_STRIDE);
    this.clearTimeNs = nowNs;
  }

  /** Make room for `n` nodes (copying; the shared array is replaced). */
  ensure(n: number): void {
    if (n <= this.capacity) return;
    let cap = this.capacity;
    while (cap < n) cap *= 2;
    const c = new Float64Array(new SharedArrayBuffer(cap * RT_STRIDE * 8));
    c.set(this.counts);
    const l = new Float64Array(cap * RT_STRIDE);
    l.set(this.lastClear);
    this.counts = c;
    this.lastClear = l;
    this.capacity = cap;
  }

  /** Value since the last clear. */
  get(node: number, slot: number): number {
    const i = node * RT_STRIDE + slot;
    return this.counts[i] - this.lastClear[i];
  }

  loopsSinceClear(): number {
    return this.loops - this.loopsAtClear;
  }

  clear(nowNs: number): void {
    this.lastClear.set(this.counts);
    // A maximum is not a sum: it starts again from zero (the loop may raise it again at once).
    for (let i = 0; i < this.capacity; i++) {
      const b = i * RT_STRIDE;
      this.counts[b + RT_MAX_CLOCKS] = this.counts[b + RT_MAX_VECTORS] = 0;
      this.lastClear[b + RT_MAX_CLOCKS] = this.lastClear[b + RT_MAX_VECTORS] = 0;
    }
    this.loopsAtClear = this.loops;
    this.clearTimeNs = nowNs;
  }
}

export class ErrorCounters {
  counts: Float64Array;
  private lastClear: Float64Array;
  capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.counts = new Float64Array(new SharedArrayBuffer(capacity * 8));
    this.lastClear = new Float64Array(capacity);
  }

  ensure(n: number): void {
    if (n <= this.capacity) return;
    let cap = this.capacity;
    while (cap < n) cap *= 2;
    const c = new Float64Array(new SharedArrayBuffer(cap * 8));
    c.set(this.counts);
    const l = new Float64Array(cap);
    l.set(this.lastClear);
    this.counts = c;
    this.lastClear = l;
    this.capacity = cap;
  }

  get(index: number): number {
    return this.counts[index] - this.lastClear[index];
  }

  clear(): void {
    this.lastClear.set(this.counts);
  }
}
