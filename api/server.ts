/**
 * The REST API server (fastify): the route table of api/routes/ over a Dataplane, with request
 * validation against api/schemas.ts, bearer-token authentication, `{statusCode, error,
 * message}` errors, GET /metrics and GET /v1/openapi.json.
 *
 *   const api = await startApi(dp, { host: '127.0.0.1', port: 7070, token: null });
 *   console.log(api.url);
 *   await api.close();
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { DataplaneApi } from '../dataplane/api.ts';
import { DataplaneError } from '../dataplane/views.ts';
import { EXPECTED, HttpError, KIND_STATUS, describeValidation, errorBody } from './errors.ts';
import { Socket } from 'node:net';
import { type Caller, LocalAccess, type AccessOptions } from './access.ts';
import { checkPostType, isLoopback, makeOriginCheck } from './guard.ts';
import { tcpPeerUid } from './peer.ts';
import { TransferSlots } from './mr-data.ts';
import { LiveSampler } from './live-sampler.ts';
import { LiveStreams, type LiveStreamOptions } from './live-stream.ts';
import { metricsRoute } from './metrics.ts';
import { openApiRoute } from './openapi.ts';
import { qpRoutes } from './routes/qps.ts';
import { liveRoutes } from './routes/live.ts';
import { JSON_TYPE, OCTETS, fastifyPath, type RouteDef } from './routes/route.ts';
import { statusRoutes } from './routes/status.ts';
import { verbsRoutes } from './routes/verbs-objects.ts';
import { ErrorResponse, type JsonSchema } from './schemas.ts';

/** Largest JSON body (MR bytes go as raw octets, up to 64 MiB a request). */
export const JSON_BODY_LIMIT = 1024 * 1024;

export interface ServerOptions {
  /** When set, every request needs `Authorization: Bearer <token>`. */
  token?: string | null;
  /** The listen address: the Host header must name it (or localhost, 127.0.0.1, [::1]); default 127.0.0.1. */
  host?: string;
  /** fastify's request log (pino, to stdout). */
  logger?: boolean;
  /** Where a 500 (a bug) is reported; default: fastify's log when `logger`, else stderr. */
  log?: (level: 'error' | 'warn' | 'info', message: string) => void;
  /** Check every JSON response against its declared schema (a mismatch is a 500): for tests. */
  checkResponses?: boolean;
  /**
   * Without a token, the local users served (api/access.ts): by default the daemon's own user
   * and root, known by the uid owning the connecting socket.
   */
  access?: AccessOptions;
  /** The live view (GET / and /live/events): sampling interval and per-stream bounds (api/live-stream.ts). */
  live?: LiveStreamOptions & { intervalMs?: number };
}

export interface RouteEntry {
  method: string;
  url: string;
  /** The schemas fastify validates the route's request parts with. */
  schema: { params?: unknown; querystring?: unknown; body?: unknown };
}

/** Every route the API serves, in the order they are registered (the OpenAPI route last). */
export function apiRoutes(opts: { token: boolean }): RouteDef[] {
  const routes: RouteDef[] = [...statusRoutes, ...verbsRoutes, ...qpRoutes, metricsRoute, ...liveRoutes];
  routes.push(openApiRoute(() => routes, opts));
  return routes;
}

/** Routes without a body schema take none, or {}; routes without a query schema take no query. */
const NO_BODY: JsonSchema = { type: 'object', additionalProperties: false, properties: {} };
const NO_QUERY: JsonSchema = { type: 'object', additionalProperties: false, properties: {} };

function newAjv(): Ajv {
  const ajv = new Ajv({
    allErrors: false,
    verbose: true,
    strict: true,
    coerceTypes: false,
    useDefaults: false,
    removeAdditional: false,
  });
  ajv.addKeyword({ keyword: EXPECTED, schemaType: 'string' });
  return ajv;
}

/** Query and path values arrive as strings: those that are written as numbers become numbers. */
function coerceNumbers(data: Record<string, unknown>, schema: JsonSchema): Record<string, unknown> {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  // No prototype: a key "__proto__" (?__proto__=1) is a key like any other, refused by the
  // schema, instead of an assignment to the prototype that leaves the object empty and valid.
  const out: Record<string, unknown> = Object.create(null);
  for (const [k, v] of Object.entries(data)) {
    const type = Object.hasOwn(props, k) ? props[k].type : undefined;
    out[k] =
      (type === 'integer' || type === 'number') && typeof v === 'string' && /^-?[0-9]+(\.[0-9]+)?$/.test(v)
        ? Number(v)
        : v;
  }
  return out;
}

function validatorFor(ajv: Ajv, schema: JsonSchema, part: string) {
  const validate = ajv.compile(schema);
  const fn = (data: unknown): boolean | { value: unknown } => {
    if (part === 'body') {
      // No body at all, or a JSON null: fine for routes that take none, else say what is wanted.
      // A body whose keys are all optional (POST /v1/pds) may be left out too.
      if (data === null && (schema === NO_BODY || schema.required === undefined)) return true;
      if (data === null) {
        fn.errors = [
          {
            instancePath: '',
            keyword: 'type',
            params: {},
            message: 'is required: send a JSON object with Content-Type: application/json',
            schemaPath: '#',
          },
        ];
        return false;
      }
      const ok = validate(data);
      fn.errors = validate.errors ?? null;
      return ok;
    }
    const value = data === null ? {} : coerceNumbers(data as Record<string, unknown>, schema);
    const ok = validate(value);
    fn.errors = validate.errors ?? null;
    return ok ? { value } : false;
  };
  fn.errors = null as ErrorObject[] | null;
  return fn;
}

function defOf(req: FastifyRequest): RouteDef | undefined {
  return (req.routeOptions.config as { def?: RouteDef } | undefined)?.def;
}

function describeContentType(req: FastifyRequest): string {
  const ct = req.headers['content-type'];
  return ct === undefined ? 'no Content-Type' : `Content-Type ${JSON.stringify(ct)}`;
}

function takes(def: RouteDef | undefined): string {
  if (!def) return 'application/json';
  if (def.consumes) return def.consumes;
  return def.body ? JSON_TYPE : 'no body (or an empty JSON object)';
}

/** The status and message of any error a request ran into; `bug` when it is none of the known kinds. */
function classify(err: FastifyError | Error, req: FastifyRequest): { status: number; message: string; bug: boolean } {
  const def = defOf(req);
  const where = def ? `${def.method} ${def.path}` : `${req.method} ${req.url}`;
  if (err instanceof DataplaneError) return { status: KIND_STATUS[err.kind], message: err.message, bug: false };
  if (err instanceof HttpError) return { status: err.statusCode, message: err.message, bug: false };
  const fe = err as FastifyError;
  if (fe.validation) return { status: 400, message: fe.message, bug: false };
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return {
        status: 413,
        message: `body too large: ${where} takes at most ${req.routeOptions.bodyLimit} bytes${def?.consumes === OCTETS ? ' a request (write in pieces with ?offset=)' : ''}`,
        bug: false,
      };
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { status: 415, message: `${where} takes ${takes(def)}, got ${describeContentType(req)}`, bug: false };
  }
  if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500)
    return { status: fe.statusCode, message: fe.message, bug: false };
  return { status: 500, message: `internal error in ${where}: ${err.message}`, bug: true };
}

/** 404 for a path no route has; 405 with the methods it has (its Allow header) for a known path. */
function noRoute(
  req: FastifyRequest,
  routes: RouteDef[],
): { status: 404 | 405; allow: string | null; message: string } {
  const path = (req.url.split('?')[0] ?? '').replace(/\/+$/, '') || '/';
  const same = routes.filter((r) => new RegExp(`^${r.path.replace(/\{\w+\}/g, '[^/]+')}$`).test(path));
  if (same.length === 0)
    return {
      status: 404,
      allow: null,
      message: `no route ${req.method} ${path} (GET /v1/openapi.json lists the routes)`,
    };
  const order = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE'];
  const allow = [...new Set(same.flatMap((r) => (r.method === 'GET' ? ['GET', 'HEAD'] : [r.method])))]
    .sort((x, y) => order.indexOf(x) - order.indexOf(y))
    .join(', ');
  return { status: 405, allow, message: `${req.method} is not a method of ${path}: it takes ${allow}` };
}

export async function buildServer(dp: DataplaneApi, opts: ServerOptions = {}): Promise<FastifyInstance> {
  const token = opts.token ?? null;
  const routes = apiRoutes({ token: token !== null });
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: JSON_BODY_LIMIT,
    // HEAD on every GET route (health checks, metrics scrapers probing): the GET's status and
    // headers, no body.
    exposeHeadRoutes: true,
    // Long path values reach the schema (and its message) instead of failing to route.
    routerOptions: { maxParamLength: 1024 },
    forceCloseConnections: true,
    schemaErrorFormatter: (errors, dataVar) => new Error(describeValidation(errors as ErrorObject[], dataVar)),
    // Errors before routing (a URL that does not decode) in the same shape as the rest.
    frameworkErrors: (err, _req, reply) => {
      const status =
        typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 400;
      (reply as FastifyReply).code(status).type(JSON_TYPE).send(errorBody(status, err.message));
    },
  });
  const report =
    opts.log ??
    ((level: 'error' | 'warn' | 'info', message: string) =>
      opts.logger ? app.log[level](message) : level === 'error' && console.error(`rdma-graph api: ${message}`));
  const ajv = newAjv();
  app.setValidatorCompiler(
    ({ schema, httpPart }) =>
      validatorFor(ajv, schema as JsonSchema, httpPart ?? 'body') as unknown as ValidateFunction,
  );

  // Only JSON and raw octets; the JSON parser says what is wrong with malformed text.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(JSON_TYPE, { parseAs: 'string' }, (_req, text, done) => {
    // Empty: no body (routes that take none accept it; the others say a body is required).
    if (text === '') return done(null, null);
    try {
      done(null, JSON.parse(text as string));
    } catch (e) {
      done(new HttpError(400, `body is not valid JSON: ${(e as Error).message}`), undefined);
    }
  });
  // Raw octets (MR data) stay a stream: the route writes them into the MR as they arrive.
  app.addContentTypeParser(OCTETS, (_req, payload, done) => done(null, payload));

  // Web pages stay out (api/guard.ts): the Host must name us, no foreign Origin, POSTs are JSON.
  const originCheck = makeOriginCheck({
    host: opts.host ?? '127.0.0.1',
    port: () => {
      const a = app.server.listening ? app.server.address() : null;
      return typeof a === 'object' && a !== null ? a.port : null;
    },
  });
  app.addHook('onRequest', async (req) => originCheck(req.headers));

  // Who is calling. In-process requests (app.inject) come from code that holds the data plane
  // already; a real connection is its token, or the local user owning the connecting socket.
  const access = new LocalAccess(opts.access);
  const callers = new WeakMap<object, Caller>();
  const transfers = new TransferSlots();
  const socketUid = new WeakMap<Socket, number | null>();
  app.addHook('onRequest', async (req) => {
    let caller: Caller;
    if (!(req.raw.socket instanceof Socket)) caller = { kind: 'owner', uid: access.ownerUid };
    else if (token !== null)
      caller = { kind: 'token' }; // checked by the next hook
    else {
      const s = req.raw.socket;
      let uid = socketUid.get(s);
      if (uid === undefined) socketUid.set(s, (uid = tcpPeerUid(s)));
      caller = access.caller(uid);
      if (caller.kind === 'refused') throw new HttpError(403, caller.why);
    }
    callers.set(req, caller);
  });

  // Authentication: constant-time comparison of digests (equal length whatever was sent).
  if (token !== null) {
    const want = createHash('sha256').update(token).digest();
    app.addHook('onRequest', async (req) => {
      const h = req.headers.authorization;
      const how = ' (rdmactl: --token TOKEN or RDMACTL_TOKEN; curl: -H "Authorization: Bearer TOKEN")';
      if (h === undefined)
        throw new HttpError(401, `missing Authorization header: this API needs "Authorization: Bearer <token>"${how}`);
      const m = /^Bearer +(.+)$/i.exec(h);
      if (!m) throw new HttpError(401, `the Authorization header must be "Bearer <token>"${how}`);
      if (!timingSafeEqual(createHash('sha256').update(m[1]).digest(), want))
        throw new HttpError(401, `wrong token${how}`);
    });
  }

  app.addHook('onRequest', async (req) => {
    const def = defOf(req);
    if (def && def.method === 'POST' && def.consumes === undefined)
      checkPostType(req.headers['content-type'], `${def.method} ${def.path}`);
  });

  // A body of the wrong media type for the route (the parsers accepted it: JSON or octets).
  app.addHook('preValidation', async (req) => {
    const def = defOf(req);
    if (!def || req.body === undefined || req.body === null) return;
    const isOctets = typeof (req.body as { pipe?: unknown }).pipe === 'function';
    if (isOctets !== (def.consumes === OCTETS))
      throw new HttpError(415, `${def.method} ${def.path} takes ${takes(def)}, got ${describeContentType(req)}`);
  });

  if (opts.checkResponses) {
    const checks = new Map<JsonSchema, ValidateFunction>();
    const check = (schema: JsonSchema, payload: unknown, what: string) => {
      let v = checks.get(schema);
      if (!v) checks.set(schema, (v = ajv.compile(schema)));
      if (!v(payload))
        throw new Error(`${what} does not match its schema: ${describeValidation(v.errors ?? [], 'response')}`);
    };
    app.addHook('preSerialization', async (req, reply, payload) => {
      const def = defOf(req);
      if (reply.statusCode >= 400) check(ErrorResponse, payload, `the ${reply.statusCode} response`);
      else if (def?.response && reply.statusCode === def.status)
        check(def.response, payload, `the response of ${def.method} ${def.path}`);
      return payload;
    });
  }

  app.setErrorHandler((err: FastifyError, req, reply) => {
    const { status, message, bug } = classify(err, req);
    if (bug) report('error', `${message}\n${err.stack ?? ''}`);
    if (status === 401) reply.header('www-authenticate', 'Bearer');
    reply.code(status).type(JSON_TYPE).send(errorBody(status, message));
  });
  app.setNotFoundHandler((req, reply) => {
    const r = noRoute(req, routes);
    if (r.allow !== null) reply.header('allow', r.allow);
    reply.code(r.status).type(JSON_TYPE).send(errorBody(r.status, r.message));
  });

  // JSON bodies end with a newline (curl leaves the prompt on its own line).
  app.addHook('onSend', async (_req, reply, payload) => {
    if (
      typeof payload === 'string' &&
      !payload.endsWith('\n') &&
      String(reply.getHeader('content-type') ?? '').startsWith('application/json')
    )
      return `${payload}\n`;
    return payload;
  });

  // The live view samples only while a page has its event stream open.
  const sampler = new LiveSampler(dp, opts.live?.intervalMs, (m) => report('warn', m));
  const live = new LiveStreams(sampler, opts.live, (m) => report('info', m));
  app.decorate('liveStreams', live);
  app.decorate('liveSampler', sampler);

  // Requests waiting in the data plane (a poll with waitMs) end when the server closes; so do live streams.
  const closing = new AbortController();
  app.addHook('preClose', async () => {
    closing.abort();
    live.close();
    sampler.close();
  });

  const registered: RouteEntry[] = [];
  app.addHook('onRoute', (r) => {
    // The HEAD twins fastify makes of GET routes are not routes of their own (OpenAPI lists GET).
    for (const method of [r.method].flat())
      if (method !== 'HEAD') registered.push({ method, url: r.url, schema: (r.schema ?? {}) as RouteEntry['schema'] });
  });
  app.decorate('registeredRoutes', registered);

  for (const def of routes) {
    app.route({
      method: def.method,
      url: fastifyPath(def.path),
      bodyLimit: def.bodyLimit,
      config: { def },
      schema: {
        ...(def.params ? { params: def.params } : {}),
        querystring: def.querystring ?? NO_QUERY,
        ...(def.method !== 'GET' && def.consumes === undefined ? { body: def.body ?? NO_BODY } : {}),
      },
      handler: async (req: FastifyRequest, reply: FastifyReply) => {
        let signal: AbortSignal | null = null;
        const result = await def.handler({
          dp,
          reply,
          params: req.params,
          query: req.query,
          body: req.body,
          caller: callers.get(req) ?? { kind: 'refused', why: 'no caller' },
          transfers,
          live,
          // Made for the handlers that wait (a poll): aborts when the client goes or the server closes.
          get signal() {
            if (signal === null) {
              const gone = new AbortController();
              reply.raw.once('close', () => {
                if (!reply.raw.writableFinished) gone.abort();
              });
              signal = AbortSignal.any([gone.signal, closing.signal]);
            }
            return signal;
          },
        });
        // A stream that took the response over (GET /live/events) answers by itself.
        if (reply.sent) return reply;
        reply.code(def.status);
        return def.status === 204 ? reply.send() : reply.send(result);
      },
    });
  }
  await app.ready();
  return app;
}

/** The routes fastify registered (method and URL in fastify's spelling), from its onRoute hook. */
export function registeredRoutes(app: FastifyInstance): RouteEntry[] {
  return (app as FastifyInstance & { registeredRoutes: RouteEntry[] }).registeredRoutes;
}

/** The live view's streams and sampler of a server (tests read their counts). */
export function liveOf(app: FastifyInstance): { streams: LiveStreams; sampler: LiveSampler } {
  const a = app as FastifyInstance & { liveStreams: LiveStreams; liveSampler: LiveSampler };
  return { streams: a.liveStreams, sampler: a.liveSampler };
}

export interface RunningApi {
  /** http://HOST:PORT (the port actually bound when 0 was asked for). */
  url: string;
  server: FastifyInstance;
  /** Stop listening; requests waiting in the data plane answer at once. Idempotent. */
  close(): Promise<void>;
}

/** Why `host` cannot be listened on without a token, or undefined when it can. */
export function listenRefusal(host: string, token: string | null | undefined): string | undefined {
  if (isLoopback(host) || (token ?? null) !== null) return undefined;
  return `api.listen ${host} is not a loopback address and api.token is not set: anyone who can reach it would control the data plane; listen on 127.0.0.1 (or ::1, localhost), or set api.token`;
}

/** Build the server and listen on host:port (port 0: an ephemeral one). A non-loopback host needs a token. */
export async function startApi(dp: DataplaneApi, opts: ServerOptions & { port?: number } = {}): Promise<RunningApi> {
  const host = opts.host ?? '127.0.0.1';
  const refusal = listenRefusal(host, opts.token);
  if (refusal !== undefined) throw new Error(refusal);
  const server = await buildServer(dp, { ...opts, host });
  await server.listen({ host, port: opts.port ?? 7070 });
  const addr = server.server.address();
  const port = typeof addr === 'object' && addr !== null ? addr.port : opts.port;
  const shown = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return { url: `http://${shown}:${port}`, server, close: () => (closing ??= server.close()) };
}
