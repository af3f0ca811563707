/**
 * rdmactl: the command-line client of the rdma-graph REST API.
 *
 *   rdmactl [--api URL] [--token T] [--json] COMMAND ...
 *
 * Show commands print VPP-layout tables; create commands print the new object's handle (create
 * mr prints "MR STAG") so shell scripts can capture them; --json prints the API's JSON instead.
 * Exit status: 0 done, 1 the API refused (its message is printed), 2 bad command line, 3 the
 * daemon cannot be reached.
 */
import { formatErrors, formatRuntime, formatTrace, type ErrorThreadSnapshot, type RuntimeThreadSnapshot, type TraceThreadSnapshot } from '../graph/format.ts';
import type { CqView, EventView, InterfaceView, ListenerView, MrView, NeighborView, PdView, PollResult, QpView, SrqView } from '../dataplane.ts';
import { formatCompletions, formatInterfaceAddresses, formatInterfaces, formatListeners, formatNeighbors, formatQp, formatQps } from './render.ts';

export const DEFAULT_API = 'http://127.0.0.1:7070';

/** One HTTP exchange with the API: JSON (or raw bytes) out, parsed JSON (or bytes) back. */
export type Call = (method: string, path: string, body?: unknown, opts?: { raw?: boolean; bytes?: Uint8Array }) => Promise<unknown>;

export class UsageError extends Error {}

export interface CtlOutput {
  out(s: string): void;
  bytes(b: Uint8Array): void;
}

const HELP = `usage: rdmactl [--api URL] [--token TOKEN] [--json] COMMAND
  (URL defaults to $RDMACTL_API or ${DEFAULT_API}; TOKEN to $RDMACTL_TOKEN)

show:
  show runtime [verbose]              per-node calls, vectors, clocks (VPP layout)
  show errors [verbose]               per-node error counters
  show interfaces [addr]              interfaces with counters / addresses
  show neighbors                      the neighbour (ARP) table
  show trace                          traced packets (see trace add)
  show qps | show qp QPN              queue pairs
  show listeners | mrs | cqs | srqs | pds | events
  show health
  clear runtime|errors|trace
  trace add NODE COUNT                trace the next COUNT packets from input node NODE
  capture IF rx|tx|both NAME [count N] | capture IF off   (a new file NAME in the daemon's capture.dir)
  fault IF rx|tx|both [seed N] [loss P] [reorder P] [duplicate P] [corrupt P] [reorder-depth N] [reorder-delay-us N] | fault IF off

verbs (handles are numbers; sge is MR:OFFSET:LENGTH[,MR:OFFSET:LENGTH...]):
  create pd
  create mr pd PD length N [access local-write,remote-write,remote-read,remote-atomic]   -> "MR STAG"
  create cq [depth N]
  create srq pd PD max-wr N [max-sge N]
  create qp pd PD send-cq CQ recv-cq CQ [srq SRQ] [max-send-wr N] [max-recv-wr N] [max-sge N] [max-inline N] [ird N] [ord N] [interface IF]   -> "QPN PSN"
  connect QPN IP:PORT psn PSN [ird N] [ord N]          manual: PSN is the peer QP's (its create qp or show qp)
  connect QPN IP:PORT cm [private-data HEX] [ird N] [ord N] [timeout-ms N]
  listen PORT pd PD send-cq CQ recv-cq CQ [srq SRQ] [max-send-wr N] [max-recv-wr N] [private-data HEX]
  unlisten PORT
  modify qp QPN STATE [remote IP:PORT] [rq-psn N] [sq-psn N] [ird N] [ord N]   STATE: reset|init|rtr|rts|sqd|sqe|error
  post recv QPN wr-id ID [sge SGE]
  post srq-recv SRQ wr-id ID [sge SGE]
  post send QPN OPCODE wr-id ID [sge SGE] [remote STAG:OFFSET] [imm N] [invalidate STAG]
       [add N] [swap N] [compare N] [unsignaled] [solicited] [inline]
       OPCODE: send send-with-solicited send-with-invalidate write write-with-imm read fetch-add swap cmp-swap
  poll CQ [max N] [wait MS]
  mr write MR OFFSET (text STRING | hex HEX)
  mr read MR OFFSET LENGTH [hex|text|raw]
  destroy pd|mr|cq|srq|qp N
`;

/** Words after a command, as `key value` pairs and bare flags. */
class Args {
  private i = 0;
  constructor(private readonly words: string[], private readonly what: string) {}

  get done(): boolean {
    return this.i >= this.words.length;
  }

  word(name: string): string {
    if (this.i >= this.words.length) throw new UsageError(`${this.what}: missing ${name}`);
    return this.words[this.i++];
  }

  int(name: string): number {
    const w = this.word(name);
    return toInt(w, `${this.what}: ${name}`);
  }

  /** The remaining words as options: `key value` for keys in `valued`, bare flags for `flags`. */
  options(valued: string[], flags: string[] = []): Map<string, string> {
    const m = new Map<string, string>();
    while (this.i < this.words.length) {
      const k = this.words[this.i++];
      if (flags.includes(k)) m.set(k, 'true');
      else if (valued.includes(k)) {
        if (this.i >= this.words.length) throw new UsageError(`${this.what}: ${k} needs a value`);
        m.set(k, this.words[this.i++]);
      } else throw new UsageError(`${this.what}: unknown word "${k}" (expected ${[...valued, ...flags].join(', ') || 'nothing more'})`);
    }
    return m;
  }

  end(): void {
    if (this.i < this.words.length) throw new UsageError(`${this.what}: unexpected "${this.words[this.i]}"`);
  }
}

function toInt(w: string, what: string): number {
  if (!/^(0|[1-9][0-9]*|0x[0-9a-fA-F]+)$/.test(w)) throw new UsageError(`${what} must be a non-negative integer, got "${w}"`);
  const n = Number(w);
  if (!Number.isSafeInteger(n)) throw new UsageError(`${what} is too large: ${w}`);
  return n;
}

function intOpt(m: Map<string, string>, key: string, what: string): number | undefined {
  const v = m.get(key);
  return v === undefined ? undefined : toInt(v, `${what}: ${key}`);
}

function numOpt(m: Map<string, string>, key: string, what: string): number | undefined {
  const v = m.get(key);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new UsageError(`${what}: ${key} must be a number, got "${v}"`);
  return n;
}

/** wr-id: an integer when it looks like one, else the string. */
function wrId(w: string): string | number {
  return /^(0|[1-9][0-9]{0,14})$/.test(w) ? Number(w) : w;
}

function sges(s: string | undefined, what: string): { mr: number; offset: number; length: number }[] | undefined {
  if (s === undefined) return undefined;
  return s.split(',').map((e, i) => {
    const p = e.split(':');
    if (p.length !== 3) throw new UsageError(`${what}: sge ${i} must be MR:OFFSET:LENGTH, got "${e}"`);
    return { mr: toInt(p[0], `${what}: sge ${i} mr`), offset: toInt(p[1], `${what}: sge ${i} offset`), length: toInt(p[2], `${what}: sge ${i} length`) };
  });
}

function endpoint(s: string, what: string): { ip: string; port: number } {
  const m = /^(\d+\.\d+\.\d+\.\d+):(\d+)$/.exec(s);
  if (!m) throw new UsageError(`${what}: expected IP:PORT, got "${s}"`);
  return { ip: m[1], port: toInt(m[2], `${what}: port`) };
}

function hexBytes(s: string, what: string): Uint8Array {
  const h = s.startsWith('0x') ? s.slice(2) : s;
  if (!/^([0-9a-fA-F]{2})*$/.test(h)) throw new UsageError(`${what}: expected hex bytes (an even number of hex digits), got "${s}"`);
  return Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
}

function base64(b: Uint8Array): string {
  return Buffer.from(b).toString('base64');
}

function hexdump(b: Uint8Array, base: number): string {
  let out = '';
  for (let o = 0; o < b.length; o += 16) {
    const row = b.subarray(o, o + 16);
    const hex = Array.from(row, (x) => x.toString(16).padStart(2, '0')).join(' ');
    const txt = Array.from(row, (x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
    out += `${(base + o).toString(16).padStart(8, '0')}  ${hex.padEnd(48)}  ${txt}\n`;
  }
  return out;
}

export interface CtlOptions {
  json: boolean;
}

/** Run one rdmactl command (words after the global options). */
export async function runCommand(words: string[], call: Call, io: CtlOutput, opts: CtlOptions): Promise<void> {
  const [cmd, sub, ...rest] = words;
  const json = (v: unknown) => io.out(JSON.stringify(v, null, 2) + '\n');
  const show = async (path: string, render: (v: never) => string, body?: unknown) => {
    const v = await call('GET', path, body);
    if (opts.json) json(v);
    else io.out(render(v as never));
  };
  const created = (v: unknown, line: string) => (opts.json ? json(v) : io.out(line + '\n'));
  switch (cmd) {
    case undefined:
    case 'help':
      io.out(HELP);
      return;
    case 'show': {
      const a = new Args(rest, `show ${sub ?? ''}`.trim());
      switch (sub) {
        case 'runtime': {
          const verbose = a.options([], ['verbose']).has('verbose');
          return show(`/v1/runtime${verbose ? '?verbose=1' : ''}`, (v: { threads: RuntimeThreadSnapshot[] }) => formatRuntime(v.threads, { verbose }));
        }
        case 'errors': {
          const verbose = a.options([], ['verbose']).has('verbose');
          return show('/v1/errors', (v: { threads: ErrorThreadSnapshot[] }) => formatErrors(v.threads, { verbose }));
        }
        case 'interfaces':
        case 'interface': {
          const addr = a.options([], ['addr']).has('addr');
          return show('/v1/interfaces', (v: InterfaceView[]) => (addr ? formatInterfaceAddresses(v) : formatInterfaces(v)));
        }
        case 'neighbors':
        case 'neighbours':
          a.end();
          return show('/v1/neighbors', (v: NeighborView[]) => formatNeighbors(v));
        case 'trace':
          a.end();
          return show('/v1/trace', (v: { threads: TraceThreadSnapshot[] }) => formatTrace(v.threads));
        case 'qps':
          a.end();
          return show('/v1/qps', (v: QpView[]) => formatQps(v));
        case 'qp': {
          const qpn = a.int('QPN');
          a.end();
          return show(`/v1/qps/${qpn}`, (v: QpView) => formatQp(v));
        }
        case 'listeners':
          a.end();
          return show('/v1/listeners', (v: ListenerView[]) => formatListeners(v));
        case 'mrs':
          a.end();
          return show('/v1/mrs', (v: MrView[]) => v.map((m) => `mr ${m.mr} pd ${m.pd} stag 0x${m.stag.toString(16)} length ${m.length} access ${m.access.join(',') || '-'}\n`).join(''));
        case 'cqs':
          a.end();
          return show('/v1/cqs', (v: CqView[]) => v.map((c) => `cq ${c.cq} depth ${c.depth} pending ${c.pending} users ${c.users}${c.error ? ' ERROR (overflowed)' : ''}\n`).join(''));
        case 'srqs':
          a.end();
          return show('/v1/srqs', (v: SrqView[]) => v.map((s) => `srq ${s.srq} pd ${s.pd} max-wr ${s.maxWr} max-sge ${s.maxSge} posted ${s.posted} limit ${s.limit}\n`).join(''));
        case 'pds':
          a.end();
          return show('/v1/pds', (v: PdView[]) => v.map((p) => `pd ${p.pd} users ${p.users}\n`).join(''));
        case 'events':
          a.end();
          return show('/v1/events', (v: EventView[]) => v.map((e) => `${e.time} #${e.seq} ${e.type}${e.qpn !== undefined ? ` qp ${e.qpn}` : ''}${e.cq !== undefined ? ` cq ${e.cq}` : ''}${e.srq !== undefined ? ` srq ${e.srq}` : ''}${e.reason ? `: ${e.reason}` : ''}\n`).join(''));
        case 'health':
          a.end();
          return show('/v1/health', (v: { status: string; version: string; uptime: number }) => `${v.status}: rdma-graph ${v.version}, up ${v.uptime.toFixed(1)} s\n`);
        default:
          throw new UsageError(`show: unknown object "${sub ?? ''}" (expected runtime, errors, interfaces, neighbors, trace, qps, qp, listeners, mrs, cqs, srqs, pds, events, health)`);
      }
    }
    case 'clear': {
      if (sub !== 'runtime' && sub !== 'errors' && sub !== 'trace') throw new UsageError(`clear: expected runtime, errors or trace, got "${sub ?? ''}"`);
      new Args(rest, `clear ${sub}`).end();
      if (sub === 'trace') await call('DELETE', '/v1/trace');
      else await call('POST', `/v1/${sub}/clear`);
      return;
    }
    case 'trace': {
      if (sub !== 'add') throw new UsageError(`trace: expected "trace add NODE COUNT", got "trace ${sub ?? ''}"`);
      const a = new Args(rest, 'trace add');
      const node = a.word('NODE');
      const count = a.int('COUNT');
      a.end();
      await call('POST', '/v1/trace', { node, count });
      return;
    }
    case 'capture': {
      const ifName = sub ?? '';
      if (!ifName) throw new UsageError('capture: missing interface');
      const a = new Args(rest, `capture ${ifName}`);
      const dir = a.word('rx|tx|both|off');
      if (dir === 'off') {
        a.end();
        await call('DELETE', `/v1/interfaces/${encodeURIComponent(ifName)}/capture`);
        return;
      }
      const file = a.word('NAME');
      const o = a.options(['count']);
      const v = await call('POST', `/v1/interfaces/${encodeURIComponent(ifName)}/capture`, { direction: dir, file, ...(o.has('count') ? { count: intOpt(o, 'count', 'capture') } : {}) });
      if (opts.json) json(v);
      return;
    }
    case 'fault': {
      const ifName = sub ?? '';
      if (!ifName) throw new UsageError('fault: missing interface');
      const a = new Args(rest, `fault ${ifName}`);
      const dir = a.word('rx|tx|both|off');
      let body: Record<string, unknown>;
      if (dir === 'off') {
        a.end();
        body = { direction: 'both', off: true };
      } else {
        const o = a.options(['seed', 'loss', 'reorder', 'duplicate', 'corrupt', 'reorder-depth', 'reorder-delay-us']);
        body = { direction: dir };
        const w = `fault ${ifName}`;
        for (const [k, key] of [['seed', 'seed'], ['reorder-depth', 'reorderDepth'], ['reorder-delay-us', 'reorderDelayUs']] as const) if (o.has(k)) body[key] = intOpt(o, k, w);
        for (const k of ['loss', 'reorder', 'duplicate', 'corrupt']) if (o.has(k)) body[k] = numOpt(o, k, w);
      }
      const v = await call('POST', `/v1/interfaces/${encodeURIComponent(ifName)}/fault`, body);
      if (opts.json) json(v);
      return;
    }
    case 'create':
      return create(sub, rest, call, created);
    case 'connect': {
      const a = new Args(sub === undefined ? [] : [sub, ...rest], 'connect');
      const qpn = a.int('QPN');
      const remote = endpoint(a.word('IP:PORT'), 'connect');
      const o = a.options(['private-data', 'ird', 'ord', 'timeout-ms', 'psn'], ['manual', 'cm']);
      const mode = o.has('cm') ? 'cm' : 'manual';
      const body: Record<string, unknown> = { remote, mode };
      if (o.has('psn')) body.remotePsn = intOpt(o, 'psn', 'connect');
      if (o.has('private-data')) body.privateData = base64(hexBytes(o.get('private-data')!, 'connect: private-data'));
      for (const [k, key] of [['ird', 'ird'], ['ord', 'ord'], ['timeout-ms', 'timeoutMs']] as const) if (o.has(k)) body[key] = intOpt(o, k, 'connect');
      const v = (await call('POST', `/v1/qps/${qpn}/connect`, body)) as QpView & { privateData?: string };
      if (opts.json) json(v);
      else io.out(`qp ${v.qpn} ${v.state} ${v.local.ip}:${v.local.port} -> ${v.remote ? `${v.remote.ip}:${v.remote.port}` : '-'}${v.privateData ? ` private-data ${Buffer.from(v.privateData, 'base64').toString('hex')}` : ''}\n`);
      return;
    }
    case 'listen': {
      const a = new Args(sub === undefined ? [] : [sub, ...rest], 'listen');
      const port = a.int('PORT');
      const o = a.options(['pd', 'send-cq', 'recv-cq', 'srq', 'max-send-wr', 'max-recv-wr', 'max-sge', 'max-inline', 'ird', 'ord', 'interface', 'private-data']);
      const body = qpBody(o, 'listen');
      if (o.has('private-data')) body.privateData = base64(hexBytes(o.get('private-data')!, 'listen: private-data'));
      const v = (await call('POST', '/v1/listeners', { port, ...body })) as ListenerView;
      created(v, String(v.port));
      return;
    }
    case 'unlisten': {
      const a = new Args(sub === undefined ? [] : [sub, ...rest], 'unlisten');
      const port = a.int('PORT');
      a.end();
      await call('DELETE', `/v1/listeners/${port}`);
      return;
    }
    case 'modify': {
      if (sub !== 'qp') throw new UsageError(`modify: expected "modify qp QPN STATE", got "modify ${sub ?? ''}"`);
      const a = new Args(rest, 'modify qp');
      const qpn = a.int('QPN');
      const state = a.word('STATE');
      const o = a.options(['remote', 'ird', 'ord', 'rq-psn', 'sq-psn']);
      const body: Record<string, unknown> = { state };
      if (o.has('remote')) body.remote = endpoint(o.get('remote')!, 'modify qp: remote');
      for (const k of ['ird', 'ord']) if (o.has(k)) body[k] = intOpt(o, k, 'modify qp');
      if (o.has('rq-psn')) body.rqPsn = intOpt(o, 'rq-psn', 'modify qp');
      if (o.has('sq-psn')) body.sqPsn = intOpt(o, 'sq-psn', 'modify qp');
      const v = (await call('POST', `/v1/qps/${qpn}/modify`, body)) as QpView;
      created(v, `qp ${v.qpn} ${v.state}`);
      return;
    }
    case 'post':
      return post(sub, rest, call);
    case 'poll': {
      const a = new Args(sub === undefined ? [] : [sub, ...rest], 'poll');
      const cq = a.int('CQ');
      const o = a.options(['max', 'wait']);
      const q = new URLSearchParams();
      if (o.has('max')) q.set('max', String(intOpt(o, 'max', 'poll')));
      if (o.has('wait')) q.set('waitMs', String(intOpt(o, 'wait', 'poll')));
      const v = (await call('GET', `/v1/cqs/${cq}/completions${q.size ? `?${q}` : ''}`)) as PollResult;
      if (opts.json) json(v);
      else io.out(formatCompletions(v.completions) + (v.error ? `error: ${v.error}\n` : ''));
      return;
    }
    case 'mr': {
      const a = new Args(rest, `mr ${sub ?? ''}`.trim());
      if (sub === 'write') {
        const mr = a.int('MR');
        const offset = a.int('OFFSET');
        const o = a.options(['text', 'hex']);
        if (o.has('text') === o.has('hex')) throw new UsageError('mr write: give the data as text STRING or hex HEX');
        const bytes = o.has('text') ? new TextEncoder().encode(o.get('text')) : hexBytes(o.get('hex')!, 'mr write: hex');
        const v = await call('PUT', `/v1/mrs/${mr}/data?offset=${offset}`, undefined, { bytes });
        if (opts.json) json(v);
        return;
      }
      if (sub === 'read') {
        const mr = a.int('MR');
        const offset = a.int('OFFSET');
        const length = a.int('LENGTH');
        const o = a.options([], ['hex', 'text', 'raw']);
        const b = (await call('GET', `/v1/mrs/${mr}/data?offset=${offset}&length=${length}`, undefined, { raw: true })) as Uint8Array;
        if (o.has('raw')) io.bytes(b);
        else if (o.has('text')) io.out(new TextDecoder().decode(b) + '\n');
        else io.out(hexdump(b, offset));
        return;
      }
      throw new UsageError(`mr: expected write or read, got "${sub ?? ''}"`);
    }
    case 'destroy': {
      const kinds: Record<string, string> = { pd: 'pds', mr: 'mrs', cq: 'cqs', srq: 'srqs', qp: 'qps' };
      const coll = kinds[sub ?? ''];
      if (!coll) throw new UsageError(`destroy: expected pd, mr, cq, srq or qp, got "${sub ?? ''}"`);
      const a = new Args(rest, `destroy ${sub}`);
      const h = a.int(sub === 'qp' ? 'QPN' : 'N');
      a.end();
      await call('DELETE', `/v1/${coll}/${h}`);
      return;
    }
    default:
      throw new UsageError(`unknown command "${cmd}" (try rdmactl help)`);
  }
}

function qpBody(o: Map<string, string>, what: string): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const map: [string, string][] = [['pd', 'pd'], ['send-cq', 'sendCq'], ['recv-cq', 'recvCq'], ['srq', 'srq'], ['max-send-wr', 'maxSendWr'], ['max-recv-wr', 'maxRecvWr'], ['max-sge', 'maxSge'], ['max-inline', 'maxInline'], ['ird', 'ird'], ['ord', 'ord']];
  for (const [k, key] of map) if (o.has(k)) body[key] = intOpt(o, k, what);
  for (const k of ['pd', 'send-cq', 'recv-cq']) if (!o.has(k)) throw new UsageError(`${what}: missing ${k}`);
  if (!o.has('max-send-wr')) body.maxSendWr = 256;
  if (o.has('interface')) body.interface = o.get('interface');
  return body;
}

async function create(what: string | undefined, rest: string[], call: Call, created: (v: unknown, line: string) => void): Promise<void> {
  const a = new Args(rest, `create ${what ?? ''}`.trim());
  switch (what) {
    case 'pd': {
      a.end();
      const v = (await call('POST', '/v1/pds', {})) as PdView;
      return created(v, String(v.pd));
    }
    case 'mr': {
      const o = a.options(['pd', 'length', 'access']);
      if (!o.has('pd') || !o.has('length')) throw new UsageError('create mr: needs pd PD and length N');
      const access = (o.get('access') ?? 'local-write').split(',').filter((x) => x !== '');
      const v = (await call('POST', '/v1/mrs', { pd: intOpt(o, 'pd', 'create mr'), length: intOpt(o, 'length', 'create mr'), access })) as MrView;
      return created(v, `${v.mr} ${v.stag}`);
    }
    case 'cq': {
      const o = a.options(['depth']);
      const v = (await call('POST', '/v1/cqs', { depth: intOpt(o, 'depth', 'create cq') ?? 1024 })) as CqView;
      return created(v, String(v.cq));
    }
    case 'srq': {
      const o = a.options(['pd', 'max-wr', 'max-sge']);
      if (!o.has('pd') || !o.has('max-wr')) throw new UsageError('create srq: needs pd PD and max-wr N');
      const body: Record<string, unknown> = { pd: intOpt(o, 'pd', 'create srq'), maxWr: intOpt(o, 'max-wr', 'create srq') };
      if (o.has('max-sge')) body.maxSge = intOpt(o, 'max-sge', 'create srq');
      const v = (await call('POST', '/v1/srqs', body)) as SrqView;
      return created(v, String(v.srq));
    }
    case 'qp': {
      const o = a.options(['pd', 'send-cq', 'recv-cq', 'srq', 'max-send-wr', 'max-recv-wr', 'max-sge', 'max-inline', 'ird', 'ord', 'interface']);
      const v = (await call('POST', '/v1/qps', qpBody(o, 'create qp'))) as QpView;
      return created(v, `${v.qpn} ${v.psn}`);
    }
    default:
      throw new UsageError(`create: expected pd, mr, cq, srq or qp, got "${what ?? ''}"`);
  }
}

async function post(kind: string | undefined, rest: string[], call: Call): Promise<void> {
  const a = new Args(rest, `post ${kind ?? ''}`.trim());
  if (kind === 'recv' || kind === 'srq-recv') {
    const h = a.int(kind === 'recv' ? 'QPN' : 'SRQ');
    const o = a.options(['wr-id', 'sge']);
    if (!o.has('wr-id')) throw new UsageError(`post ${kind}: missing wr-id`);
    const body = { wrId: wrId(o.get('wr-id')!), sge: sges(o.get('sge'), `post ${kind}`) ?? [] };
    await call('POST', kind === 'recv' ? `/v1/qps/${h}/recv` : `/v1/srqs/${h}/recv`, body);
    return;
  }
  if (kind !== 'send') throw new UsageError(`post: expected send, recv or srq-recv, got "${kind ?? ''}"`);
  const qpn = a.int('QPN');
  const opcode = a.word('OPCODE');
  const o = a.options(['wr-id', 'sge', 'remote', 'imm', 'invalidate', 'add', 'swap', 'compare'], ['unsignaled', 'solicited', 'inline']);
  if (!o.has('wr-id')) throw new UsageError('post send: missing wr-id');
  const body: Record<string, unknown> = { wrId: wrId(o.get('wr-id')!), opcode };
  const sg = sges(o.get('sge'), 'post send');
  if (sg) body.sge = sg;
  if (o.has('remote')) {
    const p = o.get('remote')!.split(':');
    if (p.length !== 2) throw new UsageError(`post send: remote must be STAG:OFFSET, got "${o.get('remote')}"`);
    body.remote = { stag: toInt(p[0], 'post send: remote stag'), offset: toInt(p[1], 'post send: remote offset') };
  }
  if (o.has('imm')) body.imm = intOpt(o, 'imm', 'post send');
  if (o.has('invalidate')) body.invalidateStag = intOpt(o, 'invalidate', 'post send');
  const atomic: Record<string, string> = {};
  for (const k of ['add', 'swap', 'compare']) {
    const v = o.get(k);
    if (v === undefined) continue;
    if (!/^[0-9]+$/.test(v)) throw new UsageError(`post send: ${k} must be an unsigned decimal integer, got "${v}"`);
    atomic[k] = v;
  }
  if (Object.keys(atomic).length > 0) body.atomic = atomic;
  if (o.has('unsignaled')) body.signaled = false;
  if (o.has('solicited')) body.solicited = true;
  if (o.has('inline')) body.inline = true;
  await call('POST', `/v1/qps/${qpn}/send`, body);
}
