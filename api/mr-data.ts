/**
 * MR bytes over HTTP without holding them (issue 26): GET /v1/mrs/{mr}/data streams the range
 * from the data plane a chunk at a time as the client takes it, PUT writes the request body
 * into the MR as it arrives. A transfer holds at most about two chunks, and at most
 * MR_DATA_STREAMS run at once (more: 503 with Retry-After), so the bytes in flight are bounded
 * by our own numbers whatever clients ask for, and nothing big outlives a request.
 */
import { Readable } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import type { DataplaneApi } from '../dataplane/api.ts';
import { checkMrRange } from '../dataplane/views.ts';
import { HttpError } from './errors.ts';

/** Bytes read from or written to the data plane in one call. */
export const MR_DATA_CHUNK = 1024 * 1024;
/** MR data transfers (reads and writes) served at once; more are told to retry. */
export const MR_DATA_STREAMS = 16;

/** Counts the transfers under way (one per server). */
export class TransferSlots {
  private used = 0;
  constructor(readonly max = MR_DATA_STREAMS) {}

  /** A slot, or a 503 saying to retry; `release` is idempotent. */
  take(what: string): () => void {
    if (this.used >= this.max)
      throw new HttpError(
        503,
        `${what}: ${this.max} MR data transfers are under way, the most served at once: retry shortly`,
      );
    this.used++;
    let done = false;
    return () => {
      if (!done) {
        done = true;
        this.used--;
      }
    };
  }

  get inUse(): number {
    return this.used;
  }
}

/** The range's bytes, a chunk per pull: `release` runs when the stream ends, fails or is dropped. */
export function mrReadStream(
  dp: DataplaneApi,
  mr: number,
  offset: number,
  length: number,
  release: () => void,
): Readable {
  let at = offset;
  const end = offset + length;
  const s = new Readable({
    highWaterMark: MR_DATA_CHUNK,
    read() {
      if (at >= end) return void this.push(null);
      const n = Math.min(MR_DATA_CHUNK, end - at);
      dp.readMr(mr, at, n).then(
        (bytes) => {
          at += n;
          this.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length));
        },
        // The MR went away in the middle: the response is cut short (its length said more).
        (e: Error) => this.destroy(e),
      );
    },
  });
  s.once('close', release);
  return s;
}

/** Check a read's range against the MR before any byte goes (the same errors a whole read gives). */
export async function checkRead(dp: DataplaneApi, mr: number, offset: number, length: number): Promise<void> {
  checkMrRange(mr, (await dp.getMr(mr)).length, offset, length, `read mr ${mr}`);
}

/**
 * Write the body of `req` (Content-Length bytes) into the MR at `offset` as it arrives. The
 * range is checked from Content-Length before anything is written.
 */
export async function writeFromBody(
  dp: DataplaneApi,
  mr: number,
  offset: number,
  req: IncomingMessage,
  max: number,
  where: string,
): Promise<{ written: number }> {
  const header = req.headers['content-length'];
  const declared = header === undefined ? NaN : Number(header);
  if (req.headers['transfer-encoding'] !== undefined || !Number.isSafeInteger(declared))
    throw new HttpError(411, `${where} needs a Content-Length (the bytes are written as they arrive)`);
  if (declared > max)
    throw new HttpError(
      413,
      `body too large: ${where} takes at most ${max} bytes a request (write in pieces with ?offset=)`,
    );
  checkMrRange(mr, (await dp.getMr(mr)).length, offset, declared, `write mr ${mr}`);
  let written = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    if (written + chunk.length > declared)
      throw new HttpError(400, `${where}: the body is longer than its Content-Length`);
    await dp.writeMr(mr, offset + written, new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length));
    written += chunk.length;
  }
  if (written !== declared)
    throw new HttpError(400, `${where}: the body ended after ${written} of its ${declared} bytes`);
  return { written };
}
