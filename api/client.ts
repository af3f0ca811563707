/**
 * A small typed client of the REST API over node:http: one method a route, JSON in and out (raw
 * bytes for MR data), failures thrown as ApiError {statusCode, error, message}. node:http rather
 * than the global fetch: fetch's first call loads undici (~45 ms), which was a third of each
 * rdmactl command's time.
 *
 *   const api = new ApiClient('http://127.0.0.1:7070', token);
 *   const { pd } = await api.createPd();
 *
 * It imports only types, so rdmactl and scripts load it without the data plane.
 */
import type {
  BufferView,
  ConnectIn,
  CqView,
  Endpoint,
  EventView,
  HealthView,
  InterfaceView,
  ListenerView,
  MrView,
  NeighborView,
  PdView,
  PollResult,
  QpCreate,
  QpView,
  RecvIn,
  SendIn,
  SrqView,
  WrId,
} from '../dataplane/views.ts';
import type { ErrorThreadSnapshot, RuntimeThreadSnapshot, TraceThreadSnapshot } from '../graph/format.ts';
import { request as httpRequest, STATUS_CODES } from 'node:http';

export type QpStateName = QpView['state'];
export type Direction = 'rx' | 'tx' | 'both';
export type AtomicValue = string | number;

/** Bytes travel in JSON as base64 (privateData). */
export type Base64 = string;

export type ConnectRequest = Omit<ConnectIn, 'privateData'> & { privateData?: Base64 };
export type ConnectResult = QpView & { privateData?: Base64 };
export type ListenerRequest = Omit<QpCreate, 'port'> & { port: number; privateData?: Base64 };
export type RecvRequest = RecvIn;
/** SendIn as JSON: atomic operands are decimal strings or safe integers (no bigint). */
export type SendRequest = Omit<SendIn, 'atomic'> & {
  atomic?: { add?: AtomicValue; swap?: AtomicValue; compare?: AtomicValue };
};
export interface FaultSettings {
  seed?: number;
  loss?: number;
  reorder?: number;
  reorderDepth?: number;
  reorderDelayUs?: number;
  duplicate?: number;
  corrupt?: number;
  ce?: number;
}
export interface Posted {
  wrId: WrId;
}

/** What the API answered with when it refused a request (or statusCode 0: no answer). */
export class ApiError extends Error {
  readonly statusCode: number;
  readonly error: string;
  constructor(statusCode: number, error: string, message: string) {
    super(message);
    this.statusCode = statusCode;
    this.error = error;
    this.name = 'ApiError';
  }
}

/** The API could not be reached at all (statusCode 0; `code` is the system error, e.g. ECONNREFUSED). */
export class ApiConnectionError extends ApiError {
  readonly code: string;
  constructor(url: string, code: string, message?: string) {
    super(
      0,
      'Connection Failed',
      message ??
        (code.startsWith('HPE_') || code === 'UND_ERR_SOCKET'
          ? `${url} did not answer in HTTP (${code}): is --api pointing at the rdma-graph API?`
          : `cannot reach the rdma-graph API at ${url}: is the daemon running? (${code})`),
    );
    this.code = code;
    this.name = 'ApiConnectionError';
  }
}

/** Something answered that is not the rdma-graph API (an HTML page, another server's error). */
export class ApiForeignError extends ApiError {
  constructor(statusCode: number, message: string) {
    super(statusCode, 'Not rdma-graph', message);
    this.name = 'ApiForeignError';
  }
}

/** One line of at most `n` printable characters of a body (for messages about foreign answers). */
function snippet(text: string, n = 80): string {
  const one = text
    .replace(/\s+/g, ' ')
    .replace(/[^\x20-\x7e]/g, '?')
    .trim();
  return one.length > n ? `${one.slice(0, n)}...` : one;
}

type Query = Record<string, string | number | boolean | undefined>;

/** Largest answer read (MR data comes in pieces of at most 64 MiB): a foreign server cannot fill memory. */
const ANSWER_MAX = 128 * 2 ** 20;

interface Answer {
  status: number;
  statusText: string;
  type: string;
  body: Buffer;
}

class Timeout extends Error {}

/** One HTTP exchange; rejects with the socket's error (its `code`) or a Timeout after `timeoutMs` (0: none). */
function exchange(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  timeoutMs: number,
): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const fail = (e: Error) => {
      clearTimeout(timer);
      req.destroy();
      reject(e);
    };
    const req = httpRequest(
      url,
      {
        method,
        headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > ANSWER_MAX)
            fail(Object.assign(new Error(`answer larger than ${ANSWER_MAX} bytes`), { code: 'ETOOBIG' }));
          else chunks.push(c);
        });
        res.on('error', fail);
        res.on('end', () => {
          clearTimeout(timer);
          const status = res.statusCode ?? 0;
          resolve({
            status,
            statusText: res.statusMessage || STATUS_CODES[status] || '',
            type: String(res.headers['content-type'] ?? ''),
            body: Buffer.concat(chunks),
          });
        });
      },
    );
    req.on('error', fail);
    if (timeoutMs > 0) timer = setTimeout(() => fail(new Timeout()), timeoutMs);
    req.end(body);
  });
}

export class ApiClient {
  readonly url: string;
  private readonly token: string | null;
  /** How long a request may wait for its answer (ms); 0: no limit. */
  readonly timeoutMs: number;

  constructor(url: string, token?: string | null, opts: { timeoutMs?: number } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.token = token ?? null;
    this.timeoutMs = opts.timeoutMs ?? 0;
  }

  /** One exchange: `json` or `bytes` out; parsed JSON, text or bytes back (as the response says). */
  async request<T>(
    method: string,
    path: string,
    opts: { json?: unknown; bytes?: Uint8Array; query?: Query; timeoutMs?: number } = {},
  ): Promise<T> {
    const headers: Record<string, string> = {};
    if (this.token !== null) headers.authorization = `Bearer ${this.token}`;
    let body: string | Uint8Array | undefined;
    if (opts.bytes !== undefined) {
      headers['content-type'] = 'application/octet-stream';
      body = opts.bytes;
    } else if (opts.json !== undefined || method === 'POST') {
      // Every POST is JSON, {} when there is nothing to say: the API refuses others (api/guard.ts).
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.json ?? {});
    }
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) qs.set(k, String(v));
    const url = `${this.url}${path}${qs.size ? `?${qs}` : ''}`;
    const timeoutMs = opts.timeoutMs ?? this.timeoutMs;
    let res: Answer;
    try {
      res = await exchange(url, method, headers, body, timeoutMs);
    } catch (e) {
      if (e instanceof Timeout) {
        throw new ApiConnectionError(
          this.url,
          'ETIMEDOUT',
          `no answer from ${this.url} within ${timeoutMs} ms (${method} ${path}): is --api pointing at the rdma-graph API? (--timeout MS waits longer)`,
        );
      }
      const err = e as NodeJS.ErrnoException;
      if (err.code === 'ETOOBIG')
        throw new ApiForeignError(
          0,
          `${this.url} answered ${method} ${path} with more than ${ANSWER_MAX} bytes, which the rdma-graph API never does: is --api right?`,
        );
      throw new ApiConnectionError(this.url, err.code ?? err.message);
    }
    return this.answer<T>(res, method, path);
  }

  /** The body of `res` as the API sends it (JSON, bytes, text), or the error it says. */
  private answer<T>(res: Answer, method: string, path: string): T {
    const type = res.type;
    if (res.status < 200 || res.status > 299) {
      const text = res.body.toString('utf8');
      let parsed: { statusCode?: unknown; error?: unknown; message?: unknown } | null = null;
      try {
        parsed = type.startsWith('application/json') ? JSON.parse(text) : null;
      } catch {
        parsed = null;
      }
      if (parsed && typeof parsed.message === 'string')
        throw new ApiError(
          res.status,
          typeof parsed.error === 'string' ? parsed.error : res.statusText,
          parsed.message,
        );
      throw new ApiForeignError(
        res.status,
        `${this.url} answered ${method} ${path} with HTTP ${res.status} ${res.statusText} (${type || 'no content type'}${text ? `: ${snippet(text)}` : ''}), not as the rdma-graph API does: is --api right?`,
      );
    }
    if (res.status === 204) return undefined as T;
    if (type.startsWith('application/json')) {
      try {
        return JSON.parse(res.body.toString('utf8')) as T;
      } catch (e) {
        throw new ApiForeignError(
          res.status,
          `${this.url} answered ${method} ${path} with malformed JSON (${(e as Error).message}): is --api right?`,
        );
      }
    }
    if (type.startsWith('application/octet-stream'))
      return new Uint8Array(res.body.buffer, res.body.byteOffset, res.body.byteLength) as T;
    return res.body.toString('utf8') as T;
  }

  private get<T>(path: string, query?: Query): Promise<T> {
    return this.request<T>('GET', path, { query });
  }

  private post<T>(path: string, json?: unknown): Promise<T> {
    return this.request<T>('POST', path, { json });
  }

  private del(path: string): Promise<void> {
    return this.request<void>('DELETE', path);
  }

  // ---------------------------------------------------------------- status

  health(): Promise<HealthView> {
    return this.get('/v1/health');
  }
  buffers(): Promise<BufferView> {
    return this.get('/v1/buffers');
  }
  interfaces(): Promise<InterfaceView[]> {
    return this.get('/v1/interfaces');
  }
  interface(name: string): Promise<InterfaceView> {
    return this.get(`/v1/interfaces/${encodeURIComponent(name)}`);
  }
  neighbors(): Promise<NeighborView[]> {
    return this.get('/v1/neighbors');
  }
  runtime(opts: { verbose?: boolean } = {}): Promise<{ threads: RuntimeThreadSnapshot[] }> {
    return this.get('/v1/runtime', { verbose: opts.verbose ? 1 : undefined });
  }
  clearRuntime(): Promise<void> {
    return this.post('/v1/runtime/clear');
  }
  errors(): Promise<{ threads: ErrorThreadSnapshot[] }> {
    return this.get('/v1/errors');
  }
  clearErrors(): Promise<void> {
    return this.post('/v1/errors/clear');
  }
  clearInterfaces(): Promise<void> {
    return this.post('/v1/interfaces/clear');
  }
  traceAdd(node: string, count: number): Promise<void> {
    return this.post('/v1/trace', { node, count });
  }
  trace(): Promise<{ threads: TraceThreadSnapshot[] }> {
    return this.get('/v1/trace');
  }
  clearTrace(): Promise<void> {
    return this.del('/v1/trace');
  }
  traceNodes(): Promise<string[]> {
    return this.get('/v1/trace/nodes');
  }
  capture(name: string, req: { direction: Direction; file: string; count?: number }): Promise<InterfaceView> {
    return this.post(`/v1/interfaces/${encodeURIComponent(name)}/capture`, req);
  }
  stopCapture(name: string): Promise<void> {
    return this.del(`/v1/interfaces/${encodeURIComponent(name)}/capture`);
  }
  /** `settings` null removes the injector. */
  setFault(name: string, direction: Direction, settings: FaultSettings | null): Promise<InterfaceView> {
    return this.post(
      `/v1/interfaces/${encodeURIComponent(name)}/fault`,
      settings === null ? { direction, off: true } : { direction, ...settings },
    );
  }
  events(since?: number): Promise<EventView[]> {
    return this.get('/v1/events', { since });
  }
  /** Prometheus text. */
  metrics(): Promise<string> {
    return this.get('/metrics');
  }
  openapi(): Promise<Record<string, unknown>> {
    return this.get('/v1/openapi.json');
  }

  // ---------------------------------------------------------------- PD, MR

  createPd(req: { interface?: string; worker?: number } = {}): Promise<PdView> {
    return this.post('/v1/pds', req);
  }
  pds(): Promise<PdView[]> {
    return this.get('/v1/pds');
  }
  destroyPd(pd: number): Promise<void> {
    return this.del(`/v1/pds/${pd}`);
  }
  createMr(req: { pd: number; length: number; access?: string[] }): Promise<MrView> {
    return this.post('/v1/mrs', req);
  }
  mrs(): Promise<MrView[]> {
    return this.get('/v1/mrs');
  }
  getMr(mr: number): Promise<MrView> {
    return this.get(`/v1/mrs/${mr}`);
  }
  destroyMr(mr: number): Promise<void> {
    return this.del(`/v1/mrs/${mr}`);
  }
  writeMr(mr: number, offset: number, data: Uint8Array): Promise<{ written: number }> {
    return this.request('PUT', `/v1/mrs/${mr}/data`, { bytes: data, query: { offset } });
  }
  /** `length` bytes at `offset` (default: to the MR's end). */
  readMr(mr: number, offset = 0, length?: number): Promise<Uint8Array> {
    return this.get(`/v1/mrs/${mr}/data`, { offset, length });
  }

  // ---------------------------------------------------------------- CQ, SRQ

  createCq(req: { depth: number; interface?: string; worker?: number }): Promise<CqView> {
    return this.post('/v1/cqs', req);
  }
  cqs(): Promise<CqView[]> {
    return this.get('/v1/cqs');
  }
  getCq(cq: number): Promise<CqView> {
    return this.get(`/v1/cqs/${cq}`);
  }
  /** Take up to `max` completions (default 64), waiting up to `waitMs` (default 0) for the first. */
  pollCq(cq: number, opts: { max?: number; waitMs?: number } = {}): Promise<PollResult> {
    return this.get(`/v1/cqs/${cq}/completions`, opts);
  }
  destroyCq(cq: number): Promise<void> {
    return this.del(`/v1/cqs/${cq}`);
  }
  createSrq(req: { pd: number; maxWr: number; maxSge?: number; limit?: number }): Promise<SrqView> {
    return this.post('/v1/srqs', req);
  }
  srqs(): Promise<SrqView[]> {
    return this.get('/v1/srqs');
  }
  modifySrq(srq: number, limit: number): Promise<SrqView> {
    return this.post(`/v1/srqs/${srq}/modify`, { limit });
  }
  postSrqRecv(srq: number, req: RecvRequest): Promise<Posted> {
    return this.post(`/v1/srqs/${srq}/recv`, req);
  }
  destroySrq(srq: number): Promise<void> {
    return this.del(`/v1/srqs/${srq}`);
  }

  // ---------------------------------------------------------------- QP, listeners

  createQp(req: QpCreate): Promise<QpView> {
    return this.post('/v1/qps', req);
  }
  qps(): Promise<QpView[]> {
    return this.get('/v1/qps');
  }
  getQp(qpn: number): Promise<QpView> {
    return this.get(`/v1/qps/${qpn}`);
  }
  connect(qpn: number, req: ConnectRequest): Promise<ConnectResult> {
    return this.post(`/v1/qps/${qpn}/connect`, req);
  }
  modifyQp(
    qpn: number,
    req: {
      state: QpStateName;
      remote?: Endpoint;
      rqPsn?: number;
      sqPsn?: number;
      ird?: number;
      ord?: number;
      qkey?: number;
    },
  ): Promise<QpView> {
    return this.post(`/v1/qps/${qpn}/modify`, req);
  }
  destroyQp(qpn: number): Promise<void> {
    return this.del(`/v1/qps/${qpn}`);
  }
  /** Attach UD QP `qpn` to IPv4 multicast `group`; the QP's groups after. */
  attachMcast(qpn: number, group: string): Promise<{ groups: string[] }> {
    return this.post(`/v1/qps/${qpn}/multicast`, { group });
  }
  detachMcast(qpn: number, group: string): Promise<{ groups: string[] }> {
    return this.request('DELETE', `/v1/qps/${qpn}/multicast/${encodeURIComponent(group)}`);
  }
  postRecv(qpn: number, req: RecvRequest): Promise<Posted> {
    return this.post(`/v1/qps/${qpn}/recv`, req);
  }
  postSend(qpn: number, req: SendRequest): Promise<Posted> {
    return this.post(`/v1/qps/${qpn}/send`, req);
  }
  listen(req: ListenerRequest): Promise<ListenerView> {
    return this.post('/v1/listeners', req);
  }
  listeners(): Promise<ListenerView[]> {
    return this.get('/v1/listeners');
  }
  unlisten(port: number): Promise<void> {
    return this.del(`/v1/listeners/${port}`);
  }
}
