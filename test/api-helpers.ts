/**
 * API test helpers: two data planes joined by a pipe, each behind a real API server listening
 * on 127.0.0.1 (an ephemeral port, responses checked against their schemas), a client for each,
 * and `raw` for requests a well-behaved client would never send.
 */
import * as assert from 'uvu/assert';
import type { DataplaneApi } from '../dataplane/api.ts';
import { ApiClient, ApiError } from '../api/client.ts';
import { startApi, type RunningApi } from '../api/server.ts';
import { twoDataplanes } from './dataplane-helpers.ts';

export interface ApiPair {
  a: DataplaneApi;
  b: DataplaneApi;
  apiA: RunningApi;
  apiB: RunningApi;
  ca: ApiClient;
  cb: ApiClient;
  close(): Promise<void>;
}

/** `captureDir`/`captureMaxBytes`: A's capture.dir and capture.max-bytes (default run/captures, 64 MiB). */
export async function apiPair(
  opts: { tokenA?: string; captureDir?: string; captureMaxBytes?: number } = {},
): Promise<ApiPair> {
  const capture = { dir: opts.captureDir ?? 'run/captures', maxBytes: opts.captureMaxBytes ?? 64 * 2 ** 20 };
  const dps = await twoDataplanes({ a: { capture } });
  const apiA = await startApi(dps.a, { host: '127.0.0.1', port: 0, token: opts.tokenA ?? null, checkResponses: true });
  const apiB = await startApi(dps.b, { host: '127.0.0.1', port: 0, checkResponses: true });
  return {
    a: dps.a,
    b: dps.b,
    apiA,
    apiB,
    ca: new ApiClient(apiA.url, opts.tokenA),
    cb: new ApiClient(apiB.url),
    async close() {
      await apiA.close();
      await apiB.close();
      await dps.close();
    },
  };
}

export interface RawResponse {
  status: number;
  type: string;
  text: string;
  json: unknown;
  headers: Headers;
}

/** A request exactly as given: `body` a string is sent as is, anything else as JSON; `bytes` as octets (unless a Content-Type is given). */
export async function raw(
  url: string,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string>; bytes?: Uint8Array } = {},
): Promise<RawResponse> {
  const headers: Record<string, string> = { ...opts.headers };
  let body: string | Uint8Array | undefined;
  const typed = Object.keys(headers).some((h) => h.toLowerCase() === 'content-type');
  if (opts.bytes !== undefined) {
    body = opts.bytes;
    if (!typed) headers['content-type'] = 'application/octet-stream';
  } else if (opts.body !== undefined) {
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
    if (!typed) headers['content-type'] = 'application/json';
  }
  const res = await fetch(url + path, { method, headers, body });
  const text = await res.text();
  const type = res.headers.get('content-type') ?? '';
  let json: unknown = null;
  if (type.startsWith('application/json')) json = JSON.parse(text);
  return { status: res.status, type, text, json, headers: res.headers };
}

/** `r` is an error response {statusCode, error, message} with this status and a message matching `message`. */
export function assertError(r: RawResponse, status: number, message: string | RegExp, what: string): void {
  assert.is(r.status, status, `${what}: status ${r.status} ${r.text}`);
  const body = r.json as { statusCode: number; error: string; message: string };
  assert.ok(body && typeof body === 'object', `${what}: JSON error body, got ${r.type} ${r.text}`);
  assert.equal(
    Object.keys(body).sort(),
    ['error', 'message', 'statusCode'],
    `${what}: exactly statusCode, error, message: ${r.text}`,
  );
  assert.is(body.statusCode, status, what);
  assert.type(body.error, 'string');
  if (typeof message === 'string') assert.is(body.message, message, what);
  else assert.match(body.message, message, `${what}: ${body.message}`);
}

/** The ApiError `p` rejects with. */
export async function apiError(p: Promise<unknown>): Promise<ApiError> {
  const e = await p.then(
    () => null,
    (x) => x,
  );
  assert.instance(e, ApiError, `expected an ApiError, got ${e}`);
  return e as ApiError;
}

/** An 8-byte little-endian (host order on x86/arm) u64. */
export function u64(v: bigint): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, v, true);
  return b;
}

export function readU64(b: Uint8Array): bigint {
  return new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, true);
}
