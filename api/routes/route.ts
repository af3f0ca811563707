/**
 * A route of the REST API as data: method, path, schemas, success status and handler. The
 * server registers these with fastify and api/openapi.ts documents the very same list.
 */
import type { FastifyReply } from 'fastify';
import type { DataplaneApi } from '../../dataplane/api.ts';
import type { Caller } from '../access.ts';
import type { TransferSlots } from '../mr-data.ts';
import type { LiveStreams } from '../live-stream.ts';
import { HttpError } from '../errors.ts';
import { PRIVATE_DATA_MAX, type JsonSchema } from '../schemas.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

export const JSON_TYPE = 'application/json';
export const OCTETS = 'application/octet-stream';
export const PROMETHEUS = 'text/plain; version=0.0.4; charset=utf-8';

/** What a handler gets: the facade and the validated request parts. */
export interface Ctx<P = Record<string, never>, Q = Record<string, never>, B = undefined> {
  dp: DataplaneApi;
  params: P;
  query: Q;
  body: B;
  /** Aborts when the client goes away or the server closes. */
  signal: AbortSignal;
  reply: FastifyReply;
  /** Who sent the request (api/access.ts): the token's holder, the daemon's user or root, or another allowed user. */
  caller: Caller;
  /** The server's MR data transfers under way (api/mr-data.ts). */
  transfers: TransferSlots;
  /** The live view's event streams (api/live-stream.ts). */
  live: LiveStreams;
}

export interface RouteDef<P = unknown, Q = unknown, B = unknown> {
  method: Method;
  /** OpenAPI style: /v1/qps/{qpn}. */
  path: string;
  summary: string;
  tag: string;
  params?: JsonSchema;
  querystring?: JsonSchema;
  /** JSON body schema; without one the route takes no body (nothing, or {}). */
  body?: JsonSchema;
  /** Media type of the body (default application/json). */
  consumes?: string;
  bodyLimit?: number;
  /** Success status: 200, 201 (created), 202 (work request accepted), 204 (no body). */
  status: 200 | 201 | 202 | 204;
  response?: JsonSchema;
  /** Media type of the success response (default application/json). */
  produces?: string;
  /** Error statuses this route can answer besides 400, 401 and 500. */
  errors: number[];
  handler(ctx: Ctx<P, Q, B>): Promise<unknown>;
}

/**
 * A verbs program's own object (`owner`: made through the verbs socket): users api.users or
 * api.group let in may look at it, not change it or touch its memory (README "Security").
 */
export async function mayTouch(caller: Caller, what: string, owner: () => Promise<string | null>): Promise<void> {
  if (caller.kind !== 'user') return;
  const o = await owner();
  if (o !== null)
    throw new HttpError(
      403,
      `${what} belongs to ${o}, a verbs program: only the daemon's user, root or a holder of api.token may change it or touch its memory`,
    );
}

/** The fastify spelling of a path: /v1/qps/:qpn. */
export function fastifyPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ':$1');
}

/** Decode `privateData` (schema-checked base64); more than PRIVATE_DATA_MAX bytes is 413. */
export function privateData(b64: string | undefined, where: string): Uint8Array | undefined {
  if (b64 === undefined) return undefined;
  const bytes = Buffer.from(b64, 'base64');
  if (bytes.length > PRIVATE_DATA_MAX)
    throw new HttpError(
      413,
      `${where} is ${bytes.length} bytes decoded; private data is at most ${PRIVATE_DATA_MAX} bytes`,
    );
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
}

export function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('base64');
}
