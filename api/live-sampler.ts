/**
 * The live view's sampler: reads the data plane through the facade every `intervalMs` while at
 * least one page is subscribed, and never otherwise (no timer, no call: a daemon with no page
 * open pays nothing). Each sample becomes one frame (api/live-frame.ts), serialised once and
 * handed to every subscriber.
 */
import type { DataplaneApi } from '../dataplane/api.ts';
import { liveFrame, takeSample, type LiveSample } from './live-frame.ts';

/** Samples a second at the default interval: the page is pushed at least one frame a second. */
export const LIVE_INTERVAL_MS = 500;

export interface LiveSubscriber {
  /** One frame, as the text of its JSON. */
  frame(json: string): void;
}

export class LiveSampler {
  private readonly subs = new Set<LiveSubscriber>();
  private timer: NodeJS.Timeout | null = null;
  private first: LiveSample | null = null;
  private prev: LiveSample | null = null;
  private last: string | null = null;
  private busy = false;
  /** The last failure said, so that one failing every tick is said once. */
  private failed: string | null = null;
  /** Samples taken since start (tests read it: none without a subscriber). */
  samples = 0;

  constructor(
    private readonly dp: DataplaneApi,
    private readonly intervalMs = LIVE_INTERVAL_MS,
    private readonly report: (message: string) => void = () => {},
  ) {}

  get subscribers(): number {
    return this.subs.size;
  }

  /** Start receiving frames: the latest one at once when there is one; returns the unsubscribe. */
  subscribe(s: LiveSubscriber): () => void {
    this.subs.add(s);
    if (this.last !== null) s.frame(this.last);
    if (this.timer === null) {
      this.timer = setInterval(() => void this.tick(), this.intervalMs);
      void this.tick();
    }
    return () => this.unsubscribe(s);
  }

  private unsubscribe(s: LiveSubscriber): void {
    this.subs.delete(s);
    if (this.subs.size > 0 || this.timer === null) return;
    // The last page went: stop sampling and forget, so the next one starts afresh.
    clearInterval(this.timer);
    this.timer = null;
    this.first = this.prev = null;
    this.last = null;
  }

  /** Stop for good (the server closes). */
  close(): void {
    for (const s of [...this.subs]) this.unsubscribe(s);
  }

  private async tick(): Promise<void> {
    // A sample slower than the interval (a busy worker) is not stacked behind another.
    if (this.busy) return;
    this.busy = true;
    try {
      const cur = await takeSample(this.dp);
      this.samples++;
      if (this.timer === null) return; // the last page went while we sampled
      this.first ??= cur;
      const json = JSON.stringify(liveFrame(this.prev, cur, this.first));
      this.prev = cur;
      this.last = json;
      for (const s of [...this.subs]) s.frame(json);
      this.failed = null;
    } catch (e) {
      const why = (e as Error).message;
      if (why !== this.failed) this.report(`live view: sampling failed: ${why}`);
      this.failed = why;
    } finally {
      this.busy = false;
    }
  }
}
