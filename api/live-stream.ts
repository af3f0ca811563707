/**
 * One page's Server-Sent Events stream (GET /live/events): frames from the sampler written as
 * `event: frame` messages, with a bound on what may wait unsent for the page. A page that does
 * not read (a stalled tab, a client that never reads its socket) lets frames pile up in the
 * socket's buffer: past `maxBuffered` bytes the stream is cut and the page dropped, so memory
 * never grows with a slow reader. At most `maxStreams` streams at once (more are told 503).
 */
import type { ServerResponse } from 'node:http';
import { HttpError } from './errors.ts';
import type { LiveSampler } from './live-sampler.ts';

/** Bytes a stream may hold unsent before its page is dropped: a few hundred frames. */
export const LIVE_MAX_BUFFERED = 1024 * 1024;
/** Streams served at once. */
export const LIVE_MAX_STREAMS = 16;

export interface LiveStreamOptions {
  maxBuffered?: number;
  maxStreams?: number;
}

export class LiveStreams {
  private open = 0;
  private readonly responses = new Set<ServerResponse>();
  /** Streams cut because their page stopped reading (tests and the log read it). */
  dropped = 0;
  readonly maxBuffered: number;
  readonly maxStreams: number;

  constructor(
    private readonly sampler: LiveSampler,
    opts: LiveStreamOptions = {},
    private readonly report: (message: string) => void = () => {},
  ) {
    this.maxBuffered = opts.maxBuffered ?? LIVE_MAX_BUFFERED;
    this.maxStreams = opts.maxStreams ?? LIVE_MAX_STREAMS;
  }

  get streams(): number {
    return this.open;
  }

  /** 503 when the streams are all taken (checked before the response starts). */
  reserve(): void {
    if (this.open >= this.maxStreams)
      throw new HttpError(
        503,
        `${this.open} live views are open, the most this daemon serves at once (${this.maxStreams}): close one and retry`,
      );
  }

  /** End every stream (the server closes: it waits for no page). */
  close(): void {
    for (const res of [...this.responses]) res.end();
  }

  /** Serve `res` until the page goes, the server closes it, or it stops reading. */
  serve(res: ServerResponse): void {
    this.open++;
    this.responses.add(res);
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      connection: 'keep-alive',
    });
    // The page's EventSource reconnects by itself 2 s after a cut.
    res.write('retry: 2000\n\n');
    let done = false;
    const stop = this.sampler.subscribe({
      frame: (json) => {
        if (done) return;
        if (res.writableLength + json.length > this.maxBuffered) {
          this.dropped++;
          this.report(
            `live view: dropped a page that stopped reading (${res.writableLength} bytes unsent, at most ${this.maxBuffered})`,
          );
          end();
          res.destroy();
          return;
        }
        res.write(`event: frame\ndata: ${json}\n\n`);
      },
    });
    const end = () => {
      if (done) return;
      done = true;
      this.open--;
      this.responses.delete(res);
      stop();
    };
    res.once('close', end);
  }
}
