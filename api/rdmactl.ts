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
import type {
  CqView,
  InterfaceView,
  ListenerView,
  MrView,
  PdView,
  PollResult,
  QpView,
  SrqView,
} from '../dataplane/views.ts';
import { formatCompletions } from './render.ts';
import {
  Args,
  base64,
  endpoint,
  hexBytes,
  hexdump,
  intOpt,
  numOpt,
  resolveWord,
  sges,
  toInt,
  UsageError,
  wrId,
} from './rdmactl-args.ts';
import { NotFound, showCommand } from './rdmactl-show.ts';
import { pingCommand } from './rdmactl-ping.ts';

export { NotFound, UsageError };

export const DEFAULT_API = 'http://127.0.0.1:7070';

/** One HTTP exchange with the API: JSON (or raw bytes) out, parsed JSON (or bytes) back. */
export type Call = (
  method: string,
  path: string,
  body?: unknown,
  opts?: { raw?: boolean; bytes?: Uint8Array; timeoutMs?: number },
) => Promise<unknown>;

/** The API answered, but not what rdma-graph answers (another server on that port?): exit 3. */
export class ForeignAnswerError extends Error {}

export interface CtlOutput {
  out(s: string): void;
  bytes(b: Uint8Array): void;
}

export const HELP = `usage: rdmactl [--api URL] [--token TOKEN] [--timeout MS] [--json] [--quiet] COMMAND
  (URL defaults to $RDMACTL_API or ${DEFAULT_API}; TOKEN to $RDMACTL_TOKEN; MS to $RDMACTL_TIMEOUT or 10000)
  rdmactl -h|--help | -V|--version     this text | rdmactl's own version
  Words may be cut to a unique prefix, as in VPP: sh int, sh run, sh hard.

show:
  show runtime [verbose] [total] [max]   per-node calls, vectors, clocks (VPP layout); total: + the sums over worker threads; max: each node's slowest call
  show errors [verbose]               per-node error counters
  show interfaces [addr] [NAME...]    interfaces with counters / addresses (also: show interface); NAME: those only
  show interface rx-placement         which thread polls which interface queue, and its rx-mode (VPP's)
  show hardware [NAME...]             driver details: memif role, socket, peer, rings, last disconnect; af_packet rings; ibverbs/mlx5dv device, firmware, port, mode, queues, flags; driver counters
  show memif                          the memif interfaces, as VPP's show memif
  show threads                        the main thread and the workers: LWP, scheduling policy, pinned CPU, core, socket
  show buffers                        the packet buffer pool
  show ip neighbors | show neighbors  the neighbor (ARP) table
  show trace [max N]                  traced packets (see trace add), at most N per thread (50)
  show qps | show qp QPN              queue pairs
  show listeners | mrs | cqs | srqs | pds | events
  show device [NAME]                  the RDMA devices (one per interface with an address) as ibv_devinfo -v prints them
  show version | show health
  ping IP [repeat N] [interval SECONDS] [size BYTES] [timeout SECONDS]   ICMP echo from the data plane (5 by default; count N = repeat N)
  monitor interface NAME [interval SECONDS] [count N]   rx/tx packets and bits per second, VPP's live rates (interval 1, count 1)
  clear interfaces|runtime|errors|trace
  trace add NODE COUNT                trace the next COUNT packets from input node NODE
  capture IF rx|tx|both NAME [count N] | capture IF off   (a new file NAME in the daemon's capture.dir)
  fault IF rx|tx|both [seed N] [loss P] [reorder P] [duplicate P] [corrupt P] [ce P] [reorder-depth N] [reorder-delay-us N] | fault IF off

verbs (handles are numbers; sge is MR:OFFSET:LENGTH[,MR:OFFSET:LENGTH...]):
  create pd [interface IF] [worker K]  (with cpu.workers: made on worker K, else on IF's)
  create mr pd PD length N [access local-write,remote-write,remote-read,remote-atomic,remote-invalidate]   -> "MR STAG" (STAG in hex; STAGs are taken in hex or decimal)
  create cq [depth N] [interface IF] [worker K]
  create srq pd PD max-wr N [max-sge N]
  create qp pd PD send-cq CQ recv-cq CQ [srq SRQ] [max-send-wr N] [max-recv-wr N] [max-sge N] [max-inline N] [ird N] [ord N] [interface IF] [type rc|ud]   -> "QPN PSN"
  connect QPN IP:PORT psn PSN [ird N] [ord N]          manual: PSN is the peer QP's (its create qp or show qp)
  connect QPN IP:PORT cm [private-data HEX] [ird N] [ord N] [timeout-ms N]
  listen PORT pd PD send-cq CQ recv-cq CQ [srq SRQ] [max-send-wr N] [max-recv-wr N] [private-data HEX]
  unlisten PORT
  modify qp QPN STATE [remote IP:PORT] [rq-psn N] [sq-psn N] [ird N] [ord N] [qkey N]   STATE: reset|init|rtr|rts|sqd|sqe|error
  post recv QPN wr-id ID [sge SGE]
  post srq-recv SRQ wr-id ID [sge SGE]
  post send QPN OPCODE wr-id ID [sge SGE] [remote STAG:OFFSET] [imm N] [invalidate STAG] [ud IP:QPN:QKEY]
       [add N] [swap N] [compare N] [unsignaled] [solicited] [inline]
       OPCODE: send send-with-solicited send-with-invalidate send-with-imm write write-with-imm read fetch-add swap cmp-swap
  poll CQ [max N] [wait MS]
  mr write MR OFFSET (text STRING | hex HEX)
  mr read MR OFFSET LENGTH [hex|text|raw]
  destroy pd|mr|cq|srq|qp N
`;

/** `monitor interface`: packets and bits per second each way between two samples `seconds` apart. */
export function monitorRates(
  a: InterfaceView,
  b: InterfaceView,
  seconds: number,
): { rxPps: number; rxBps: number; txPps: number; txBps: number } {
  const rate = (x: number, y: number) => Math.max(0, y - x) / seconds;
  return {
    rxPps: rate(a.counters.rxPackets, b.counters.rxPackets),
    rxBps: rate(a.counters.rxBytes, b.counters.rxBytes) * 8,
    txPps: rate(a.counters.txPackets, b.counters.txPackets),
    txBps: rate(a.counters.txBytes, b.counters.txBytes) * 8,
  };
}

/** A rate as VPP's format_base10 prints it: 950, 1.23k, 45.60M, 9.99G. */
export function base10(n: number): string {
  for (const [d, u] of [
    [1e9, 'G'],
    [1e6, 'M'],
    [1e3, 'k'],
  ] as const)
    if (n >= d) return `${(n / d).toFixed(2)}${u}`;
  return String(Math.round(n));
}

/** One line of `monitor interface`, as VPP prints it: `rx: 1.20kpps 9.83Mbps tx: ...`. */
export function formatMonitor(r: ReturnType<typeof monitorRates>): string {
  return `rx: ${base10(r.rxPps)}pps ${base10(r.rxBps)}bps tx: ${base10(r.txPps)}pps ${base10(r.txBps)}bps\n`;
}

export interface CtlOptions {
  json: boolean;
  /** No confirmation lines (create still prints its handles). */
  quiet?: boolean;
}

/** Accepted command words (aliases included) to their canonical command. */
const COMMANDS: Record<string, string> = {
  show: 'show',
  clear: 'clear',
  trace: 'trace',
  capture: 'capture',
  fault: 'fault',
  create: 'create',
  connect: 'connect',
  listen: 'listen',
  unlisten: 'unlisten',
  modify: 'modify',
  post: 'post',
  poll: 'poll',
  mr: 'mr',
  destroy: 'destroy',
  ping: 'ping',
  monitor: 'monitor',
  help: 'help',
};

/** Run one rdmactl command (words after the global options). */
export async function runCommand(words: string[], call: Call, io: CtlOutput, opts: CtlOptions): Promise<void> {
  const [first, sub, ...rest] = words;
  const json = (v: unknown) => io.out(JSON.stringify(v, null, 2) + '\n');
  const show = async (path: string | string[], render: (v: never) => string) => {
    const v = typeof path === 'string' ? await call('GET', path) : await Promise.all(path.map((p) => call('GET', p)));
    if (opts.json) return json(v);
    let text: string;
    try {
      text = render(v as never);
    } catch (e) {
      if (e instanceof NotFound) throw e;
      // Not the shape rdma-graph sends: another server (or another version) answered.
      throw new ForeignAnswerError(
        `GET ${path}: the answer is not what rdma-graph sends (${(e as Error).message}): is --api pointing at an rdma-graph daemon?`,
      );
    }
    io.out(text);
  };
  const created = (v: unknown, line: string) => (opts.json ? json(v) : io.out(line + '\n'));
  /** A one-line confirmation (or the JSON answer with --json; nothing with --quiet). */
  const done = (v: unknown, line: string) => {
    if (opts.json) json(v ?? {});
    else if (!opts.quiet) io.out(line + '\n');
  };
  if (first === undefined || first === 'help' || first === '-h') {
    io.out(HELP);
    return;
  }
  const cmd = resolveWord(first, COMMANDS, '');
  switch (cmd) {
    case 'help':
      io.out(HELP);
      return;
    case 'show':
      return showCommand(sub === undefined ? [] : [sub, ...rest], show);
    case 'ping':
      return pingCommand(sub === undefined ? [] : [sub, ...rest], call, io, opts.json);
    case 'monitor': {
      resolveWord(sub, { interface: 'interface', interfaces: 'interface' }, 'monitor');
      const a = new Args(rest, 'monitor interface');
      const name = a.word('NAME');
      const o = a.options(['interval', 'count']);
      const interval = numOpt(o, 'interval', 'monitor interface') ?? 1;
      const count = intOpt(o, 'count', 'monitor interface') ?? 1;
      if (!(interval >= 0.1 && interval <= 3600))
        throw new UsageError(`monitor interface: interval must be 0.1..3600 seconds, got ${interval}`);
      if (count < 1) throw new UsageError(`monitor interface: count must be at least 1, got ${count}`);
      const path = `/v1/interfaces/${encodeURIComponent(name)}`;
      const sample = async () => ({ at: performance.now(), v: (await call('GET', path)) as InterfaceView });
      let last = await sample();
      for (let i = 0; i < count; i++) {
        await new Promise((r) => setTimeout(r, interval * 1000));
        const now = await sample();
        const rates = monitorRates(last.v, now.v, (now.at - last.at) / 1000);
        if (opts.json) json(rates);
        else io.out(formatMonitor(rates));
        last = now;
      }
      return;
    }
    case 'clear': {
      const what = resolveWord(
        sub,
        { interfaces: 'interfaces', interface: 'interfaces', runtime: 'runtime', errors: 'errors', trace: 'trace' },
        'clear',
      );
      new Args(rest, `clear ${what}`).end();
      if (what === 'trace') await call('DELETE', '/v1/trace');
      else if (what === 'interfaces') await call('POST', '/v1/interfaces/clear');
      else await call('POST', `/v1/${what}/clear`);
      return done(null, `cleared ${what}`);
    }
    case 'trace': {
      resolveWord(sub, { add: 'add' }, 'trace');
      const a = new Args(rest, 'trace add');
      const node = a.word('NODE');
      const count = a.int('COUNT');
      a.end();
      await call('POST', '/v1/trace', { node, count });
      return done(null, `tracing the next ${count} packet${count === 1 ? '' : 's'} from ${node} (show trace)`);
    }
    case 'capture': {
      const ifName = sub ?? '';
      if (!ifName) throw new UsageError('capture: missing interface');
      const a = new Args(rest, `capture ${ifName}`);
      const dir = a.word('rx|tx|both|off');
      if (dir === 'off') {
        a.end();
        await call('DELETE', `/v1/interfaces/${encodeURIComponent(ifName)}/capture`);
        return done(null, `capture on ${ifName} stopped`);
      }
      const file = a.word('NAME');
      const o = a.options(['count']);
      const v = (await call('POST', `/v1/interfaces/${encodeURIComponent(ifName)}/capture`, {
        direction: dir,
        file,
        ...(o.has('count') ? { count: intOpt(o, 'count', 'capture') } : {}),
      })) as InterfaceView;
      const files = [v?.capture?.rx ? `rx into ${v.capture.rx}` : '', v?.capture?.tx ? `tx into ${v.capture.tx}` : '']
        .filter((x) => x !== '')
        .join(', ');
      return done(v, `capturing on ${ifName}: ${files || dir}`);
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
        const o = a.options([
          'seed',
          'loss',
          'reorder',
          'duplicate',
          'corrupt',
          'ce',
          'reorder-depth',
          'reorder-delay-us',
        ]);
        body = { direction: dir };
        const w = `fault ${ifName}`;
        for (const [k, key] of [
          ['seed', 'seed'],
          ['reorder-depth', 'reorderDepth'],
          ['reorder-delay-us', 'reorderDelayUs'],
        ] as const)
          if (o.has(k)) body[key] = intOpt(o, k, w);
        for (const k of ['loss', 'reorder', 'duplicate', 'corrupt', 'ce']) if (o.has(k)) body[k] = numOpt(o, k, w);
      }
      const v = await call('POST', `/v1/interfaces/${encodeURIComponent(ifName)}/fault`, body);
      return done(
        v,
        dir === 'off'
          ? `fault injection on ${ifName} off`
          : `fault injection on ${ifName} ${dir}: ${
              Object.entries(body)
                .filter(([k]) => k !== 'direction')
                .map(([k, x]) => `${k} ${x}`)
                .join(', ') || 'nothing set'
            }`,
      );
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
      for (const [k, key] of [
        ['ird', 'ird'],
        ['ord', 'ord'],
        ['timeout-ms', 'timeoutMs'],
      ] as const)
        if (o.has(k)) body[key] = intOpt(o, k, 'connect');
      const v = (await call('POST', `/v1/qps/${qpn}/connect`, body)) as QpView & { privateData?: string };
      if (opts.json) json(v);
      else
        io.out(
          `qp ${v.qpn} ${v.state} ${v.local.ip}:${v.local.port} -> ${v.remote ? `${v.remote.ip}:${v.remote.port}` : '-'}${v.privateData ? ` private-data ${Buffer.from(v.privateData, 'base64').toString('hex')}` : ''}\n`,
        );
      return;
    }
    case 'listen': {
      const a = new Args(sub === undefined ? [] : [sub, ...rest], 'listen');
      const port = a.int('PORT');
      const o = a.options([
        'pd',
        'send-cq',
        'recv-cq',
        'srq',
        'max-send-wr',
        'max-recv-wr',
        'max-sge',
        'max-inline',
        'ird',
        'ord',
        'interface',
        'private-data',
      ]);
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
      return done(null, `listener ${port} closed`);
    }
    case 'modify': {
      resolveWord(sub, { qp: 'qp' }, 'modify');
      const a = new Args(rest, 'modify qp');
      const qpn = a.int('QPN');
      const state = a.word('STATE');
      const o = a.options(['remote', 'ird', 'ord', 'rq-psn', 'sq-psn', 'qkey']);
      const body: Record<string, unknown> = { state };
      if (o.has('remote')) body.remote = endpoint(o.get('remote')!, 'modify qp: remote');
      for (const k of ['ird', 'ord']) if (o.has(k)) body[k] = intOpt(o, k, 'modify qp');
      if (o.has('rq-psn')) body.rqPsn = intOpt(o, 'rq-psn', 'modify qp');
      if (o.has('sq-psn')) body.sqPsn = intOpt(o, 'sq-psn', 'modify qp');
      if (o.has('qkey')) body.qkey = intOpt(o, 'qkey', 'modify qp');
      const v = (await call('POST', `/v1/qps/${qpn}/modify`, body)) as QpView;
      created(v, `qp ${v.qpn} ${v.state}`);
      return;
    }
    case 'post': {
      const r = await post(sub, rest, call);
      return done(r.answer, r.line);
    }
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
      const op = resolveWord(sub, { write: 'write', read: 'read' }, 'mr');
      if (op === 'write') {
        const mr = a.int('MR');
        const offset = a.int('OFFSET');
        const o = a.options(['text', 'hex']);
        if (o.has('text') === o.has('hex')) throw new UsageError('mr write: give the data as text STRING or hex HEX');
        const bytes = o.has('text')
          ? new TextEncoder().encode(o.get('text'))
          : hexBytes(o.get('hex')!, 'mr write: hex');
        const v = (await call('PUT', `/v1/mrs/${mr}/data?offset=${offset}`, undefined, { bytes })) as {
          written?: number;
        };
        return done(v, `wrote ${v?.written ?? bytes.length} bytes to mr ${mr} at offset ${offset}`);
      }
      if (op === 'read') {
        const mr = a.int('MR');
        const offset = a.int('OFFSET');
        const length = a.int('LENGTH');
        const o = a.options([], ['hex', 'text', 'raw']);
        const b = (await call('GET', `/v1/mrs/${mr}/data?offset=${offset}&length=${length}`, undefined, {
          raw: true,
        })) as Uint8Array;
        if (o.has('raw')) io.bytes(b);
        else if (o.has('text')) io.out(new TextDecoder().decode(b) + '\n');
        else io.out(hexdump(b, offset));
        return;
      }
      throw new UsageError(`mr: expected write or read, got "${sub ?? ''}"`);
    }
    case 'destroy': {
      const kinds: Record<string, string> = { pd: 'pds', mr: 'mrs', cq: 'cqs', srq: 'srqs', qp: 'qps' };
      const kind = resolveWord(sub, { pd: 'pd', mr: 'mr', cq: 'cq', srq: 'srq', qp: 'qp' }, 'destroy');
      const a = new Args(rest, `destroy ${kind}`);
      const h = a.int(kind === 'qp' ? 'QPN' : 'N');
      a.end();
      await call('DELETE', `/v1/${kinds[kind]}/${h}`);
      return done(null, `destroyed ${kind} ${h}`);
    }
    default:
      throw new UsageError(`unknown command "${cmd}"`);
  }
}

function qpBody(o: Map<string, string>, what: string): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const map: [string, string][] = [
    ['pd', 'pd'],
    ['send-cq', 'sendCq'],
    ['recv-cq', 'recvCq'],
    ['srq', 'srq'],
    ['max-send-wr', 'maxSendWr'],
    ['max-recv-wr', 'maxRecvWr'],
    ['max-sge', 'maxSge'],
    ['max-inline', 'maxInline'],
    ['ird', 'ird'],
    ['ord', 'ord'],
  ];
  for (const [k, key] of map) if (o.has(k)) body[key] = intOpt(o, k, what);
  for (const k of ['pd', 'send-cq', 'recv-cq']) if (!o.has(k)) throw new UsageError(`${what}: missing ${k}`);
  // Sizes left out take the data plane's defaults (the same for REST and the embedding API).
  if (o.has('interface')) body.interface = o.get('interface');
  return body;
}

async function create(
  word: string | undefined,
  rest: string[],
  call: Call,
  created: (v: unknown, line: string) => void,
): Promise<void> {
  const what = resolveWord(word, { pd: 'pd', mr: 'mr', cq: 'cq', srq: 'srq', qp: 'qp' }, 'create');
  const a = new Args(rest, `create ${what}`);
  switch (what) {
    case 'pd': {
      const o = a.options(['interface', 'worker']);
      const v = (await call('POST', '/v1/pds', {
        ...(o.has('interface') ? { interface: o.get('interface') } : {}),
        ...(o.has('worker') ? { worker: intOpt(o, 'worker', 'create pd') } : {}),
      })) as PdView;
      return created(v, String(v.pd));
    }
    case 'mr': {
      const o = a.options(['pd', 'length', 'access']);
      if (!o.has('pd') || !o.has('length')) throw new UsageError('create mr: needs pd PD and length N');
      const access = o.has('access')
        ? {
            access: o
              .get('access')!
              .split(',')
              .filter((x) => x !== ''),
          }
        : {};
      const v = (await call('POST', '/v1/mrs', {
        pd: intOpt(o, 'pd', 'create mr'),
        length: intOpt(o, 'length', 'create mr'),
        ...access,
      })) as MrView;
      return created(v, `${v.mr} 0x${v.stag.toString(16)}`);
    }
    case 'cq': {
      const o = a.options(['depth', 'interface', 'worker']);
      const v = (await call('POST', '/v1/cqs', {
        depth: intOpt(o, 'depth', 'create cq') ?? 1024,
        ...(o.has('interface') ? { interface: o.get('interface') } : {}),
        ...(o.has('worker') ? { worker: intOpt(o, 'worker', 'create cq') } : {}),
      })) as CqView;
      return created(v, String(v.cq));
    }
    case 'srq': {
      const o = a.options(['pd', 'max-wr', 'max-sge']);
      if (!o.has('pd') || !o.has('max-wr')) throw new UsageError('create srq: needs pd PD and max-wr N');
      const body: Record<string, unknown> = {
        pd: intOpt(o, 'pd', 'create srq'),
        maxWr: intOpt(o, 'max-wr', 'create srq'),
      };
      if (o.has('max-sge')) body.maxSge = intOpt(o, 'max-sge', 'create srq');
      const v = (await call('POST', '/v1/srqs', body)) as SrqView;
      return created(v, String(v.srq));
    }
    case 'qp': {
      const o = a.options([
        'pd',
        'send-cq',
        'recv-cq',
        'srq',
        'max-send-wr',
        'max-recv-wr',
        'max-sge',
        'max-inline',
        'ird',
        'ord',
        'interface',
        'type',
      ]);
      const body = qpBody(o, 'create qp');
      if (o.has('type')) {
        const t = o.get('type');
        if (t !== 'rc' && t !== 'ud') throw new UsageError(`create qp: type must be rc or ud, got "${t}"`);
        body.type = t;
      }
      const v = (await call('POST', '/v1/qps', body)) as QpView;
      return created(v, `${v.qpn} ${v.psn}`);
    }
    default:
      throw new UsageError(`create: expected pd, mr, cq, srq or qp, got "${what ?? ''}"`);
  }
}

async function post(word: string | undefined, rest: string[], call: Call): Promise<{ answer: unknown; line: string }> {
  const kind = resolveWord(word, { send: 'send', recv: 'recv', 'srq-recv': 'srq-recv' }, 'post');
  const a = new Args(rest, `post ${kind}`);
  if (kind === 'recv' || kind === 'srq-recv') {
    const h = a.int(kind === 'recv' ? 'QPN' : 'SRQ');
    const o = a.options(['wr-id', 'sge']);
    if (!o.has('wr-id')) throw new UsageError(`post ${kind}: missing wr-id`);
    const body = { wrId: wrId(o.get('wr-id')!), sge: sges(o.get('sge'), `post ${kind}`) ?? [] };
    const answer = await call('POST', kind === 'recv' ? `/v1/qps/${h}/recv` : `/v1/srqs/${h}/recv`, body);
    return { answer, line: `posted receive wr-id ${String(body.wrId)} on ${kind === 'recv' ? 'qp' : 'srq'} ${h}` };
  }
  const qpn = a.int('QPN');
  const opcode = a.word('OPCODE');
  const o = a.options(
    ['wr-id', 'sge', 'remote', 'imm', 'invalidate', 'add', 'swap', 'compare', 'ud'],
    ['unsignaled', 'solicited', 'inline'],
  );
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
  if (o.has('ud')) {
    const u = o.get('ud')!.split(':');
    if (u.length !== 3) throw new UsageError(`post send: ud must be IP:QPN:QKEY, got "${o.get('ud')}"`);
    body.ud = { ip: u[0], qpn: toInt(u[1], 'post send: ud qpn'), qkey: toInt(u[2], 'post send: ud qkey') };
  }
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
  const answer = await call('POST', `/v1/qps/${qpn}/send`, body);
  return { answer, line: `posted ${opcode} wr-id ${String(body.wrId)} on qp ${qpn}` };
}
