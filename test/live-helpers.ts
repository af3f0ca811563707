/**
 * Live view test helpers: read GET /live/events as a page would, frame by frame, with the time
 * each arrived.
 */
import { request, type IncomingMessage } from 'node:http';
import type { LiveFrame } from '../api/live-frame.ts';

export interface EventStream {
  res: IncomingMessage;
  /** Every frame so far, with its arrival (performance.now()). */
  frames: { at: number; frame: LiveFrame }[];
  /** Resolves with the first frame arriving from now on that `pred` accepts; rejects after `ms`. */
  until(pred: (f: LiveFrame) => boolean, ms: number, what: string): Promise<LiveFrame>;
  close(): void;
}

/** Open `url`/live/events with these headers; rejects with the status and body unless 200. */
export function openEvents(url: string, headers: Record<string, string> = {}): Promise<EventStream> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/live/events`, { headers }, (res) => {
      if (res.statusCode !== 200) {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => reject(new Error(`${res.statusCode} ${body}`)));
        return;
      }
      const frames: EventStream['frames'] = [];
      const waiters: (() => void)[] = [];
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buf += d;
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const msg = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const lines = msg.split('\n');
          if (!lines.includes('event: frame')) continue;
          const data = lines.find((l) => l.startsWith('data: '));
          if (data === undefined) throw new Error(`a frame without data: ${msg.slice(0, 200)}`);
          frames.push({ at: performance.now(), frame: JSON.parse(data.slice(6)) as LiveFrame });
          for (const w of waiters.splice(0)) w();
        }
      });
      res.on('error', () => {});
      resolve({
        res,
        frames,
        until(pred, ms, what) {
          return new Promise((ok, fail) => {
            const timer = setTimeout(() => fail(new Error(`no frame within ${ms} ms: ${what}`)), ms);
            const look = (from: number) => {
              for (let i = from; i < frames.length; i++)
                if (pred(frames[i].frame)) {
                  clearTimeout(timer);
                  ok(frames[i].frame);
                  return;
                }
              const next = frames.length;
              waiters.push(() => look(next));
            };
            look(frames.length);
          });
        },
        close: () => req.destroy(),
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** A GET through node:http, which sends the Host header given (fetch sets its own). */
export function getWith(
  url: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** One thread's node of a frame (the total when there are several threads). */
export function nodeOf(f: LiveFrame, name: string) {
  const t = f.threads.at(-1)!;
  const n = t.nodes.find((x) => x.name === name);
  if (n === undefined) throw new Error(`no node ${name} in ${t.nodes.map((x) => x.name).join(' ')}`);
  return n;
}
