/**
 * cpu.workers: N worker threads (thread.ts), each running a whole data plane over the
 * interfaces placed on it (interfaces[].worker, else round robin in file order: VPP's
 * rx-placement at interface granularity), and this thread keeping the API, the configuration
 * and the log. The object returned by Dataplane.create has the Dataplane's methods; each call is
 * carried to the worker that owns what it names:
 *
 * - an interface by the worker it was placed on;
 * - a PD, MR, CQ or SRQ by its handle (worker i hands out handles in its own range,
 *   protocol.ts HANDLE_SPAN); a QP by its number (rdma.port-range is split in N slices);
 * - new objects: a PD or CQ on the worker the request names, else its interface's owner, else
 *   worker 0; an MR, SRQ, QP or listener on its PD's worker; a QP whose PD, CQs and SRQ are not
 *   all on one worker is refused saying so. A QP may use any interface: every worker has every
 *   interface (the same index everywhere), through its device where it owns it or polls a share
 *   of it, else through the handoff queue to its owner (placeWorkers makes the plans and the
 *   queues, one per ordered pair of workers);
 * - lists (QPs, show runtime, errors, trace...) from every worker, in worker order;
 *   `show runtime` gets one section per worker (Thread 1 rdma_wk_0 ...), as VPP prints them;
 *   an interface as its owner shows it, its counters summed over every worker's driver of it
 *   (interfaces, hardware), neighbors from each interface's owner;
 * - fault injection and capture on every worker with the interface's device.
 *
 * Results come back as one message per call (control plane; completions are polled through
 * calls, not pushed). A worker that throws or exits is reported and started again with its
 * interfaces; what it held (its QPs, CQs, MRs) is gone with it, and calls naming them say so.
 */
import { Worker } from 'node:worker_threads';
import type { Config } from '../../config/types.ts';
import { parseCoreList } from '../../config/schema.ts';
import { parseIp4Prefix } from '../../config/formats.ts';
import { ip4OrNull as parseIp4 } from '../../nodes/net/address.ts';
import type {
  CaptureRequest,
  DataplaneApi,
  MrCreate,
  MwCreate,
  Placement,
  QpModifyIn,
  ServeVerbsOptions,
  SrqCreate,
  VerbsSocket,
} from '../api.ts';
import type { FaultConfig, FaultCounters } from '../../drivers/fault.ts';
import { pinThread } from '../pin.ts';
import { currentThread } from '../threads.ts';
import { handoffQueue } from '../../graph/handoff-queue.ts';
import { DEFAULT_MTU, MTU_MIN } from '../../graph/link.ts';
import { macOption } from '../../drivers/mac.ts';
import { formatMac } from '../../nodes/net/address.ts';
import { loadCore } from '../../native/addons.ts';
import {
  type BufferView,
  type ConnectIn,
  type CqView,
  DataplaneError,
  type DeviceView,
  type EventView,
  type HardwareView,
  type HealthView,
  type InterfaceView,
  type ListenerCreate,
  type Logger,
  type MrView,
  type MwView,
  type NeighborView,
  type PdView,
  type PingRequest,
  type PingResult,
  type PollResult,
  type QpCreate,
  type QpView,
  type RecvIn,
  type SendIn,
  type SrqView,
  type VersionView,
} from '../views.ts';
import { WorkerLedger } from './ledger.ts';
import { VerbsAdmission, verbsLimits } from '../verbs-server/admission.ts';
import { listenVerbs } from '../verbs-server/listener.ts';
import {
  type CallArgs,
  type CallName,
  type CallResult,
  type FromWorker,
  HANDLE_SPAN,
  type InterfaceReach,
  type SignalMarker,
  type ToWorker,
  type WorkerInit,
} from './protocol.ts';

/** Arguments as they travel: an AbortSignal becomes a marker the worker turns back into one. */
type Wire<T> = { [K in keyof T]: T[K] extends AbortSignal | undefined ? SignalMarker | undefined : T[K] };
const marker = (signal: AbortSignal | undefined): SignalMarker | undefined =>
  signal === undefined ? undefined : { __signal: true };
/** The calls whose result is a list (each worker's, concatenated). */
type ListMethod = {
  [M in CallName]: CallResult<M> extends readonly unknown[] ? (CallArgs<M> extends [] ? M : never) : never;
}[CallName];
type ListOf<M extends CallName> = CallResult<M> extends readonly unknown[] ? CallResult<M> : never;

const BOOT = new URL('./boot.mjs', import.meta.url);
const EVENT_LOG = 1024;
/** Handles a worker's thread numbers from before a restart (HANDLE_SPAN holds 16 such blocks). */
const EPOCH_SPAN = 2 ** 20;

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

class WorkerHandle {
  worker!: Worker;
  ready!: Promise<void>;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private stopping = false;
  restarts = 0;
  /** Verbs connections handed to this worker and not handed back: closed here if it dies. */
  readonly verbsFds = new Set<number>();
  /** Told of each verbs connection before this thread closes it (the listener's admission counts). */
  verbsClosing: (fd: number) => void = () => {};

  constructor(
    readonly init: WorkerInit,
    private readonly log: Logger,
    private readonly onEvent: (e: EventView) => void,
    /** Told when the thread died (not stopped by us), before it starts again. */
    private readonly onStopped: (k: number, why: string) => void,
  ) {
    this.spawn();
  }

  get name(): string {
    return `worker ${this.init.index} (rdma_wk_${this.init.index})`;
  }

  private spawn(): void {
    // A restarted worker numbers its objects from a new 2^20 block of its range, so none takes
    // the handle of one the dead thread had (those answer as dead until destroyed).
    const handleBase = this.init.handleBase + (this.restarts % (HANDLE_SPAN / EPOCH_SPAN)) * EPOCH_SPAN;
    const w = new Worker(BOOT, { workerData: { ...this.init, handleBase } });
    this.worker = w;
    let ok: () => void, fail: (e: Error) => void;
    this.ready = new Promise<void>((res, rej) => ((ok = res), (fail = rej)));
    this.ready.catch(() => {});
    w.on('message', (m: FromWorker) => {
      switch (m.t) {
        case 'ready':
          return ok();
        case 'fatal':
          return fail(new DataplaneError(m.kind, m.message));
        case 'log':
          return this.log(m.level, `rdma_wk_${this.init.index}: ${m.msg}`);
        case 'event':
          return this.onEvent(m.e);
        case 'closeFd':
          if (this.verbsFds.delete(m.fd)) {
            this.verbsClosing(m.fd);
            loadCore().closeFd(m.fd);
          }
          return;
        case 'result': {
          const p = this.pending.get(m.id);
          if (p === undefined) return;
          this.pending.delete(m.id);
          if (m.e === undefined) return p.resolve(m.r);
          return p.reject(
            m.e.kind !== null ? new DataplaneError(m.e.kind, m.e.message) : new Error(`${this.name}: ${m.e.stack}`),
          );
        }
      }
    });
    const died = (why: string) => {
      if (this.worker !== w) return;
      fail(new DataplaneError('unavailable', `${this.name} stopped while starting: ${why}`));
      for (const p of this.pending.values())
        p.reject(new DataplaneError('unavailable', `${this.name} stopped: ${why}`));
      this.pending.clear();
      // Its verbs programs see the end of file (their library flushes what they posted).
      for (const fd of this.verbsFds) {
        this.verbsClosing(fd);
        loadCore().closeFd(fd);
      }
      this.verbsFds.clear();
      if (this.stopping) return;
      this.restarts++;
      this.log('error', `${this.name} stopped: ${why}; starting it again (restart ${this.restarts})`);
      this.onStopped(this.init.index, why);
      this.spawn();
      this.ready.then(
        () => this.log('info', `${this.name} running again`),
        (e: Error) => this.log('error', `${this.name} did not start again: ${e.message}`),
      );
    };
    w.on('error', (e) => died(e.stack ?? e.message));
    w.on('exit', (code) => died(`exited with code ${code}`));
  }

  async call(method: CallName, args: readonly unknown[], signal?: AbortSignal): Promise<unknown> {
    await this.ready;
    const id = this.nextId++;
    const w = this.worker;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (signal !== undefined) {
        if (signal.aborted) queueMicrotask(() => w.postMessage({ t: 'abort', id } satisfies ToWorker));
        else
          signal.addEventListener('abort', () => w.postMessage({ t: 'abort', id } satisfies ToWorker), { once: true });
      }
      w.postMessage({ t: 'call', id, method, args: [...args] } satisfies ToWorker);
    });
  }

  crash(): void {
    this.worker.postMessage({ t: 'crash' } satisfies ToWorker);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.worker.terminate();
  }
}

/** An af_packet interface's kernel MAC (every worker must use the owner's), or null. */
function kernelMac(c: Config['interfaces'][number]): string | null {
  if (c.driver !== 'af_packet' || c.afPacket === undefined) return null;
  try {
    return formatMac(loadCore().afPacketIfInfo(c.afPacket.hostInterface).mac);
  } catch {
    return null; // no such interface: opening it says so
  }
}

/** Makes each laneKey unique in the process (several data planes may run in one, as in the tests). */
let laneKeys = 0;

/**
 * What each worker gets: every interface (how it reaches each: owner, lane or remote), its slice
 * of the QP numbers, its handle range, and with two or more workers the handoff queues.
 */
export function placeWorkers(config: Config): WorkerInit[] {
  const n = config.cpu.workers;
  const cores = config.cpu.corelistWorkers === null ? null : (parseCoreList(config.cpu.corelistWorkers) as number[]);
  const [lo, hi] = config.rdma.portRange;
  const span = Math.floor((hi - lo + 1) / n);
  if (span < 1)
    throw new DataplaneError('invalid', `rdma.port-range [${lo}, ${hi}] has fewer QP numbers than cpu.workers ${n}`);
  let rr = 0;
  const owner = config.interfaces.map((c) => c.worker ?? c.rxPlacement?.[0] ?? rr++ % n);
  // The worker receiving each rx queue: rx-placement, else round robin from the interface's
  // worker for the drivers whose share can be received by several threads (memif queues,
  // af_packet sockets split by UDP port).
  const spread = (c: Config['interfaces'][number]) => n >= 2 && (c.driver === 'memif' || c.driver === 'af_packet');
  const queueWorker = config.interfaces.map(
    (c, i) =>
      c.rxPlacement ?? Array.from({ length: c.rxQueues }, (_, q) => (spread(c) ? (owner[i] + q) % n : owner[i])),
  );
  const ranges = Array.from(
    { length: n },
    (_, k) => [lo + k * span, k === n - 1 ? hi : lo + (k + 1) * span - 1] as [number, number],
  );
  // One MAC per interface on every worker: an af_packet interface's kernel interface's, else
  // drawn here when the file gives none.
  const interfaces = config.interfaces.map((c) =>
    c.mac !== null ? c : { ...c, mac: kernelMac(c) ?? formatMac(macOption('', undefined, c.name)) },
  );
  const reach: InterfaceReach[][] = ranges.map(() => []);
  interfaces.forEach((c, i) => {
    const o = owner[i];
    if (n < 2) return;
    const queues = (k: number): number[] => queueWorker[i].flatMap((w, q) => (w === k ? [q] : []));
    const key = `rdma-graph-${process.pid}-${++laneKeys}-${c.name}`;
    const lanes = ranges.map((_, k) => (k !== o && queues(k).length > 0 ? k : -1)).filter((k) => k >= 0);
    const afp = c.driver === 'af_packet';
    // af_packet: the workers with a socket of their own take their QP numbers' datagrams; the
    // owner's socket everything else.
    reach[o][i] =
      lanes.length === 0
        ? { via: 'owner' }
        : afp
          ? { via: 'owner', reject: lanes.map((k) => ranges[k]) }
          : { via: 'owner', memifKey: key, pollQueues: queues(o) };
    for (let k = 0; k < n; k++) {
      if (k === o) continue;
      reach[k][i] = !lanes.includes(k)
        ? { via: 'remote', owner: o }
        : afp
          ? { via: 'lane', owner: o, queues: queues(k), accept: [ranges[k]] }
          : { via: 'lane', owner: o, queues: queues(k), memifKey: key };
    }
  });
  // One queue per ordered pair of workers, for frames of any interface (its largest MTU plus
  // the Ethernet header and a VLAN tag), kicking the consumer's one eventfd.
  const core = loadCore();
  const maxFrame = Math.max(MTU_MIN, ...config.interfaces.map((c) => c.mtu ?? DEFAULT_MTU)) + 18;
  const kickFds = n >= 2 ? ranges.map(() => core.eventfd()) : [];
  const queues = kickFds.map((_, i) => kickFds.map((fd, j) => (i === j ? null : handoffQueue(maxFrame, fd))));
  const groups = new SharedArrayBuffer(4 * n);
  return ranges.map((range, k) => ({
    index: k,
    cpu: cores === null ? null : cores[k],
    handleBase: k * HANDLE_SPAN,
    ...(n >= 2 ? { handoff: { self: k, ranges, interfaces: reach[k], queues, groups } } : {}),
    config: {
      ...config,
      cpu: { ...config.cpu, workers: 0, mainCore: null, corelistWorkers: null },
      // Every interface on every worker, in file order: the same index everywhere.
      interfaces,
      rdma: { ...config.rdma, portRange: range },
    },
  }));
}

/** The workers' eventfds placeWorkers made (the queues into worker j kick its one), once they are stopped. */
function closeKickFds(inits: WorkerInit[]): void {
  const queues = inits[0]?.handoff?.queues ?? [];
  for (let j = 0; j < queues.length; j++) {
    const fd = queues[(j + 1) % queues.length][j]?.kickFd ?? -1;
    if (fd >= 0) loadCore().closeFd(fd);
  }
}

/** The worker that owns each configured interface (its control channel, its queue 0). */
function owners(inits: WorkerInit[], nIf: number): number[] {
  return Array.from({ length: nIf }, (_, i) => {
    const k = inits.findIndex((w) => (w.handoff?.interfaces[i].via ?? 'owner') === 'owner');
    return k < 0 ? 0 : k;
  });
}

/** Counter sets added up, key by key: the keys of `sets[first]` (the owner's), each set once. */
function sumCounters<T extends object>(sets: T[], first = 0): T {
  const c = { ...sets[first] } as Record<string, unknown>;
  sets.forEach((o, k) => {
    if (k === first) return;
    for (const [key, x] of Object.entries(o))
      if (typeof x === 'number' && typeof c[key] === 'number') c[key] = (c[key] as number) + x;
  });
  return c as T;
}

/** A fault direction's counters over the workers that have an injector there (null: none has). */
function sumFault(sets: (FaultCounters | null)[]): FaultCounters | null {
  const have = sets.filter((x): x is FaultCounters => x !== null);
  return have.length === 0 ? null : sumCounters(have);
}

/** One interface's views from every worker: the owner's, with the counters summed over all. */
function combine(views: InterfaceView[], owner: number): InterfaceView {
  const v = views[owner];
  return {
    ...v,
    counters: sumCounters(
      views.map((x) => x.counters),
      owner,
    ),
    fault: { rx: sumFault(views.map((x) => x.fault.rx)), tx: sumFault(views.map((x) => x.fault.tx)) },
  };
}

export async function startWorkers(config: Config, log: Logger): Promise<WorkerDataplane> {
  if (config.cpu.mainCore !== null) pinThread(config.cpu.mainCore, 'cpu.main-core');
  const inits = placeWorkers(config);
  const wd = new WorkerDataplane(config, inits, log);
  try {
    await Promise.all(wd.workers.map((w) => w.ready));
  } catch (e) {
    await Promise.all(wd.workers.map((w) => w.stop()));
    closeKickFds(inits);
    throw e;
  }
  return wd;
}

/** The data plane's methods over worker threads (see the file comment). */
export class WorkerDataplane implements DataplaneApi {
  readonly workers: WorkerHandle[];
  private readonly ifWorker = new Map<string, number>();
  /** Per configured interface, its owner. */
  private readonly owner: number[];
  /** Interface name -> the workers with its device: the owner and those polling a share of it. */
  private readonly deviceWorkers = new Map<string, number[]>();
  private readonly subnets: { worker: number; prefix: { network: number; bits: number } }[] = [];
  private readonly events: EventView[] = [];
  private eventSeq = 0;
  private readonly startedMs = Date.now();
  private closed = false;
  private final: { buffers: BufferView; qps: QpView[] } | null = null;
  private readonly ledger = new WorkerLedger();

  constructor(
    readonly config: Config,
    inits: WorkerInit[],
    private readonly log: Logger,
  ) {
    this.owner = owners(inits, config.interfaces.length);
    config.interfaces.forEach((c, i) => {
      const k = this.owner[i];
      this.ifWorker.set(c.name, k);
      if (c.address !== null) {
        const p = parseIp4Prefix(c.address);
        if (p !== null) this.subnets.push({ worker: k, prefix: { network: p.network, bits: p.prefix } });
      }
      this.deviceWorkers.set(
        c.name,
        inits.filter((w) => w.handoff?.interfaces[i].via !== 'remote').map((w) => w.index),
      );
    });
    this.workers = inits.map(
      (init) =>
        new WorkerHandle(
          init,
          log,
          (e) => {
            this.event(e);
            // A QP a listener accepted: into the ledger too (its requests flush if the worker dies).
            if (e.type === 'qp-established' && e.qpn !== undefined && !this.ledger.knows(e.qpn))
              this.on(init.index, 'getQp', [e.qpn]).then(
                (v: QpView) => this.ledger.qpCreated(v, init.index, true),
                () => {},
              );
          },
          (k, why) => {
            const r = this.ledger.stopped(k, why);
            for (const e of r.events) this.event(e);
            if (r.qps.length > 0)
              log(
                'error',
                `worker ${k}: ${r.qps.length} QP${r.qps.length === 1 ? '' : 's'} (${r.qps.join(', ')}) in error, ${r.flushed} work request${r.flushed === 1 ? '' : 's'} flushed to their CQs`,
              );
          },
        ),
    );
  }

  private event(e: Omit<EventView, 'seq'>): void {
    this.events.push({ ...e, seq: ++this.eventSeq });
    if (this.events.length > EVENT_LOG) this.events.shift();
  }

  // ------------------------------------------------------------------ routing

  private on<M extends CallName>(
    k: number,
    method: M,
    args: Wire<CallArgs<M>>,
    signal?: AbortSignal,
  ): Promise<CallResult<M>> {
    if (this.closed && method !== 'buffers' && method !== 'qps')
      return Promise.reject(new DataplaneError('unavailable', 'the data plane is shut down'));
    return this.workers[k].call(method, args, signal) as Promise<CallResult<M>>;
  }

  private async all<M extends CallName>(method: M, args: Wire<CallArgs<M>>): Promise<CallResult<M>[]> {
    return Promise.all(this.workers.map((_, k) => this.on(k, method, args)));
  }

  /** Every worker's list, one after another (in worker order). */
  private async concat<M extends ListMethod>(method: M): Promise<ListOf<M>> {
    return (await this.all(method, [] as Wire<CallArgs<M>>)).flat() as ListOf<M>;
  }

  private byInterface(name: unknown): number {
    const k = typeof name === 'string' ? this.ifWorker.get(name) : undefined;
    if (k === undefined) throw new DataplaneError('not-found', `no interface "${String(name)}"`);
    return k;
  }

  private byHandle(h: unknown, what: string): number {
    const k = typeof h === 'number' && h > 0 ? Math.floor(h / HANDLE_SPAN) : -1;
    if (!(k >= 0 && k < this.workers.length)) throw new DataplaneError('not-found', `no ${what} ${String(h)}`);
    return k;
  }

  private byQpn(qpn: unknown): number {
    for (const w of this.workers) {
      const [lo, hi] = w.init.config.rdma.portRange;
      if (typeof qpn === 'number' && qpn >= lo && qpn <= hi) return w.init.index;
    }
    throw new DataplaneError('not-found', `no QP ${String(qpn)}`);
  }

  /** The worker of a new QP or listener: its PD's, checked against its CQs, SRQ and interface. */
  private qpWorker(
    req: { pd: number; sendCq?: number; recvCq?: number; srq?: number | null; interface?: string },
    what: string,
  ): number {
    const k = this.byHandle(req.pd, 'protection domain');
    const check = (h: number | null | undefined, name: string) => {
      if (h === undefined || h === null) return;
      const j = this.byHandle(h, name);
      if (j !== k)
        throw new DataplaneError(
          'invalid',
          `${what}: pd ${String(req.pd)} is on worker ${k} but ${name} ${String(h)} on worker ${j}: a QP's PD, CQs and SRQ must be on one worker (create them for the same interface)`,
        );
    };
    check(req.sendCq, 'send-cq');
    check(req.recvCq, 'recv-cq');
    check(req.srq, 'srq');
    // Any worker may use any interface: through its device, or through the handoff queue to its owner.
    if (typeof req.interface === 'string') this.byInterface(req.interface);
    return k;
  }

  /** A new PD or CQ: on `worker` when the request names one, else on its interface's owner, else 0. */
  private placed(req: Placement | undefined): number {
    if (req !== undefined && req.worker !== undefined) {
      const k = req.worker;
      if (typeof k !== 'number' || !Number.isInteger(k) || k < 0 || k >= this.workers.length)
        throw new DataplaneError(
          'invalid',
          `worker ${String(k)}: cpu.workers is ${this.workers.length} (workers 0..${this.workers.length - 1})`,
        );
      if (typeof req.interface === 'string') this.byInterface(req.interface);
      return k;
    }
    return req !== undefined && typeof req.interface === 'string' ? this.byInterface(req.interface) : 0;
  }

  /** The request without `worker` (the worker's own data plane has none). */
  private local<T extends Placement>(req: T | undefined): Omit<T, 'worker'> {
    const { worker: _, ...rest } = req ?? ({} as T);
    return rest;
  }

  /** Per worker, only the views of interfaces it owns (its neighbor table of them). */
  private async owned<M extends 'neighbors'>(method: M): Promise<ListOf<M>> {
    const per = (await this.all(method, [] as Wire<CallArgs<M>>)) as { interface: string }[][];
    return per.flatMap((list, k) => list.filter((v) => this.ifWorker.get(v.interface) === k)) as ListOf<M>;
  }

  /** Test hook (test/workers.test.ts): worker k throws an exception nobody catches. */
  crashWorker(k: number): void {
    this.workers[k].crash();
  }

  // ------------------------------------------------------------------ status

  async health(): Promise<HealthView> {
    const h = await this.all('health', []);
    return {
      status: 'ok',
      version: h[0].version,
      uptime: (Date.now() - this.startedMs) / 1000,
      interfaces: this.config.interfaces.length,
      qps: h.reduce((n, x) => n + x.qps, 0),
    };
  }

  async buffers(): Promise<BufferView> {
    if (this.final !== null) return this.final.buffers;
    const b = await this.all('buffers', []);
    return {
      count: b.reduce((n, x) => n + x.count, 0),
      free: b.reduce((n, x) => n + x.free, 0),
      dataSize: b[0].dataSize,
      hugepages: b.some((x) => x.hugepages),
    };
  }

  async devices(): Promise<DeviceView[]> {
    const d = await this.all('devices', []);
    // Every worker lists every interface in file order; each device as its interface's owner shows it.
    const index = new Map(this.config.interfaces.map((c, i) => [c.name, i]));
    return d[0].map(
      (dev) => d[this.owner[index.get(dev.interface) ?? 0]].find((x) => x.interface === dev.interface) ?? dev,
    );
  }

  async version(): Promise<VersionView> {
    return this.on(0, 'version', []);
  }

  /**
   * Each interface as its owner shows it, with the counters (and the fault injectors' counters)
   * summed over every worker: what each one's driver did on the device (the owner's, and a
   * worker's own queues or socket of it; another worker's remote stand-in counts no traffic).
   */
  async hardware(): Promise<HardwareView[]> {
    const per = await this.all('hardware', []);
    return this.config.interfaces.map((_, i) => {
      const v = per[this.owner[i]][i];
      return {
        ...v,
        counters: sumCounters(
          per.map((list) => list[i].counters),
          this.owner[i],
        ),
      };
    });
  }

  async interfaces(): Promise<InterfaceView[]> {
    const per = await this.all('interfaces', []);
    return this.config.interfaces.map((_, i) =>
      combine(
        per.map((list) => list[i]),
        this.owner[i],
      ),
    );
  }

  async interface(name: string): Promise<InterfaceView> {
    const owner = this.byInterface(name);
    return combine(await this.all('interface', [name]), owner);
  }

  neighbors = async (): Promise<NeighborView[]> => this.owned('neighbors');
  runtime = async () => this.concat('runtime');
  nodeGraph = async () => this.concat('nodeGraph');
  rxPlacement = async () => this.concat('rxPlacement');
  /** This (the main) thread, then what each worker says of its own. */
  threads = async () => [currentThread(0, 'main', '', this.config.cpu.mainCore), ...(await this.concat('threads'))];
  errors = async () => this.concat('errors');
  trace = async () => this.concat('trace');
  traceNodes = async () => this.on(0, 'traceNodes', []);
  clearRuntime = async () => void (await this.all('clearRuntime', []));
  clearErrors = async () => void (await this.all('clearErrors', []));
  clearInterfaces = async () => void (await this.all('clearInterfaces', []));
  clearTrace = async () => void (await this.all('clearTrace', []));
  /** On every worker that has the node (a worker without a memif interface has no memif-input). */
  traceAdd = async (node: string, count: number) => this.onAny('traceAdd', [node, count]);

  /**
   * On every worker with the interface's device (the owner first): its capture runs where
   * frames meet the device, so a worker polling a share of the interface writes its own files,
   * named as the owner's with `-wk<k>` before `.pcap`. One refusing takes back the others'.
   */
  async capture(name: string, opts: CaptureRequest): Promise<InterfaceView> {
    const [owner, ...lanes] = this.workersWithDevice(name);
    await this.on(owner, 'capture', [name, opts]);
    const done = [owner];
    try {
      for (const k of lanes) {
        const file = typeof opts.file === 'string' ? opts.file.replace(/(\.pcap)?$/, `-wk${k}$1`) : opts.file;
        await this.on(k, 'capture', [name, { ...opts, file }]);
        done.push(k);
      }
    } catch (e) {
      await Promise.allSettled(done.map((k) => this.on(k, 'stopCapture', [name])));
      throw e;
    }
    return this.interface(name);
  }

  async stopCapture(name: string): Promise<InterfaceView> {
    for (const k of this.workersWithDevice(name)) await this.on(k, 'stopCapture', [name]);
    return this.interface(name);
  }

  /** On every worker with the interface's device (the owner's queues and each lane's injector). */
  async setFault(name: string, direction: 'rx' | 'tx' | 'both', cfg: FaultConfig | null): Promise<InterfaceView> {
    const [owner, ...lanes] = this.workersWithDevice(name);
    await this.on(owner, 'setFault', [name, direction, cfg]);
    await Promise.all(lanes.map((k) => this.on(k, 'setFault', [name, direction, cfg])));
    return this.interface(name);
  }

  /** The workers with interface `name`'s device, its owner first. */
  private workersWithDevice(name: unknown): number[] {
    const owner = this.byInterface(name);
    return [owner, ...(this.deviceWorkers.get(name as string) ?? []).filter((k) => k !== owner)];
  }

  /** To the worker with an interface on the target's subnet (else worker 0). */
  async ping(req: PingRequest, signal?: AbortSignal): Promise<PingResult> {
    let k = 0;
    const a = typeof req.address === 'string' ? parseIp4(req.address) : null;
    if (a !== null)
      for (const s of this.subnets) {
        const mask = s.prefix.bits === 0 ? 0 : (~0 << (32 - s.prefix.bits)) >>> 0;
        if ((a & mask) >>> 0 === s.prefix.network) k = s.worker;
      }
    return this.on(k, 'ping', [req, marker(signal)], signal);
  }

  async recentEvents(since = 0): Promise<EventView[]> {
    return this.events.filter((e) => e.seq > since);
  }

  // ------------------------------------------------------------------ verbs objects

  async createPd(req?: Placement): Promise<PdView> {
    const k = this.placed(req);
    const v = await this.on(k, 'createPd', [this.local(req)]);
    this.ledger.created('protection domain', v.pd, k);
    return v;
  }
  async createCq(req: { depth: number } & Placement): Promise<CqView> {
    const k = this.placed(req);
    const v = await this.on(k, 'createCq', [this.local(req)]);
    this.ledger.cqCreated(v, k);
    return v;
  }
  pds = async () => this.concat('pds');
  mrs = async () => this.concat('mrs');
  async cqs(): Promise<CqView[]> {
    return [...(await this.concat('cqs')), ...this.ledger.deadCqViews()];
  }
  srqs = async () => this.concat('srqs');
  async qps(): Promise<QpView[]> {
    return this.final !== null ? this.final.qps : [...(await this.concat('qps')), ...this.ledger.deadQpViews()];
  }
  listenersList = async () => this.concat('listenersList');

  destroyPd = async (h: number) => this.destroy(h, 'protection domain', 'destroyPd');
  async createMr(req: MrCreate): Promise<MrView> {
    this.ledger.refuseDead(req.pd);
    const k = this.byHandle(req.pd, 'protection domain');
    const v = await this.on(k, 'createMr', [req]);
    this.ledger.created('memory region', v.mr, k);
    return v;
  }
  getMr = async (h: number) => this.onLive(h, 'memory region', 'getMr', [h]);
  destroyMr = async (h: number) => this.destroy(h, 'memory region', 'destroyMr');
  async createMw(req: MwCreate): Promise<MwView> {
    this.ledger.refuseDead(req.pd);
    const k = this.byHandle(req.pd, 'protection domain');
    const v = await this.on(k, 'createMw', [req]);
    this.ledger.created('memory window', v.mw, k);
    return v;
  }
  mws = async () => this.concat('mws');
  destroyMw = async (h: number) => this.destroy(h, 'memory window', 'destroyMw');
  writeMr = async (h: number, offset: number, data: Uint8Array) =>
    this.onLive(h, 'memory region', 'writeMr', [h, offset, data]);
  readMr = async (h: number, offset?: number, length?: number) =>
    this.onLive(h, 'memory region', 'readMr', [h, offset, length]);
  getCq = async (h: number) => this.ledger.deadCq(h) ?? this.on(this.byHandle(h, 'completion queue'), 'getCq', [h]);
  destroyCq = async (h: number) => this.destroy(h, 'completion queue', 'destroyCq');
  async pollCq(h: number, max?: number, waitMs?: number, signal?: AbortSignal): Promise<PollResult> {
    const dead = this.ledger.pollDead(h, max);
    if (dead !== undefined) return dead;
    const r = await this.on(this.byHandle(h, 'completion queue'), 'pollCq', [h, max, waitMs, marker(signal)], signal);
    this.ledger.polled(r.completions);
    return r;
  }
  async createSrq(req: SrqCreate): Promise<SrqView> {
    this.ledger.refuseDead(req.pd);
    const k = this.byHandle(req.pd, 'protection domain');
    const v = await this.on(k, 'createSrq', [req]);
    this.ledger.created('shared receive queue', v.srq, k);
    return v;
  }
  modifySrq = async (h: number, limit: number) => this.onLive(h, 'shared receive queue', 'modifySrq', [h, limit]);
  postSrqRecv = async (h: number, req: RecvIn) => this.onLive(h, 'shared receive queue', 'postSrqRecv', [h, req]);
  destroySrq = async (h: number) => this.destroy(h, 'shared receive queue', 'destroySrq');

  async createQp(req: QpCreate): Promise<QpView> {
    for (const h of [req.pd, req.sendCq, req.recvCq, req.srq]) this.ledger.refuseDead(h);
    const k = this.qpWorker(req, 'create qp');
    const v = await this.on(k, 'createQp', [req]);
    this.ledger.qpCreated(v, k);
    return v;
  }
  getQp = async (qpn: number) => this.ledger.deadQp(qpn) ?? this.on(this.byQpn(qpn), 'getQp', [qpn]);
  async connect(qpn: number, req: ConnectIn): Promise<QpView & { privateData?: Uint8Array }> {
    this.ledger.refuseDead(qpn, true);
    const v = await this.on(this.byQpn(qpn), 'connect', [qpn, req]);
    this.ledger.qpUpdated(v);
    return v;
  }
  async modifyQp(qpn: number, req: QpModifyIn): Promise<QpView> {
    this.ledger.refuseDead(qpn, true);
    const v = await this.on(this.byQpn(qpn), 'modifyQp', [qpn, req]);
    this.ledger.qpUpdated(v);
    return v;
  }
  // The QP's worker joins the group; a group's datagrams (the multicast port is in no worker's
  // slice) are copied by whichever worker receives them to every worker with members
  // (worker-handoff, HandoffPlan.groups).
  async attachMcast(qpn: number, group: string): Promise<string[]> {
    this.ledger.refuseDead(qpn, true);
    return this.on(this.byQpn(qpn), 'attachMcast', [qpn, group]);
  }
  async detachMcast(qpn: number, group: string): Promise<string[]> {
    this.ledger.refuseDead(qpn, true);
    return this.on(this.byQpn(qpn), 'detachMcast', [qpn, group]);
  }
  async destroyQp(qpn: number, opts?: { quiet?: boolean }): Promise<void> {
    if (this.ledger.forget(qpn, true)) return;
    await this.on(this.byQpn(qpn), 'destroyQp', [qpn, opts]);
    this.ledger.destroyed(qpn);
  }
  async postRecv(qpn: number, req: RecvIn): Promise<void> {
    this.ledger.refuseDead(qpn, true);
    await this.on(this.byQpn(qpn), 'postRecv', [qpn, req]);
    this.ledger.posted(qpn, req, false);
  }
  async postSend(qpn: number, req: SendIn): Promise<void> {
    this.ledger.refuseDead(qpn, true);
    await this.on(this.byQpn(qpn), 'postSend', [qpn, req]);
    this.ledger.posted(qpn, req, true);
  }
  noteQpOwner(qpn: number, owner: string): void {
    this.on(this.byQpn(qpn), 'noteQpOwner', [qpn, owner]).catch(() => {});
  }

  /** A call on a PD, MR, CQ or SRQ that is not one a dead worker had. */
  private onLive<M extends CallName>(
    h: number,
    what: string,
    method: M,
    args: Wire<CallArgs<M>>,
  ): Promise<CallResult<M>> {
    this.ledger.refuseDead(h);
    return this.on(this.byHandle(h, what), method, args);
  }

  /** Destroying a dead worker's object forgets it; a live one is destroyed on its worker. */
  private async destroy(
    h: number,
    what: string,
    method: 'destroyPd' | 'destroyMr' | 'destroyMw' | 'destroyCq' | 'destroySrq',
  ): Promise<void> {
    if (this.ledger.forget(h)) return;
    await this.on(this.byHandle(h, what), method, [h]);
    this.ledger.destroyed(h);
  }

  listen = async (req: ListenerCreate) => this.on(this.qpWorker(req, 'listen'), 'listen', [req]);
  unlisten = async (port: number) => this.onAny('unlisten', [port]);

  /** Every worker; done when one of them did it, else the first worker's error. */
  private async onAny<M extends 'traceAdd' | 'unlisten'>(method: M, args: Wire<CallArgs<M>>): Promise<void> {
    const r = await Promise.allSettled(this.workers.map((_, k) => this.on(k, method, args)));
    if (r.some((x) => x.status === 'fulfilled')) return;
    throw (r[0] as PromiseRejectedResult).reason;
  }

  /**
   * The verbs socket (unmodified verbs programs): this thread listens, and each program goes to
   * a worker, round robin by process (every connection of one pid to the same worker: its
   * device-list query and its contexts), where its objects live and its QPs run.
   */
  serveVerbs(opts: ServeVerbsOptions): VerbsSocket {
    const core = loadCore();
    const n = this.workers.length;
    const byPid = new Map<number, number>();
    let next = 0,
      count = 0;
    // verbs.max-connections* hold for the whole daemon: this thread accepts and counts, each
    // worker's closes come back here (closeFd, or the worker's death) and release theirs.
    const admission = new VerbsAdmission(verbsLimits(this.config.verbs));
    for (const w of this.workers) w.verbsClosing = (fd) => admission.release(fd);
    const log = (level: 'info' | 'warn', msg: string) => this.log(level, msg);
    return listenVerbs(
      opts.path,
      {
        adopt: (fd: number) => {
          const pid = core.seqpacketPeer(fd)?.pid ?? -1;
          let k = byPid.get(pid);
          if (k === undefined) {
            k = next++ % n;
            byPid.set(pid, k);
            if (byPid.size > 4096) byPid.delete(byPid.keys().next().value as number);
          }
          const w = this.workers[k];
          w.verbsFds.add(fd);
          // A worker that did not take it (stopped meanwhile): the program sees the socket close.
          this.on(k, 'adoptVerbs', [fd]).catch((e: Error) => {
            this.log('warn', `verbs socket: ${w.name} did not take a connection: ${e.message}`);
            if (w.verbsFds.delete(fd)) {
              admission.release(fd);
              core.closeFd(fd);
            }
          });
        },
        connections: () => {
          void this.all('verbsConnections', []).then(
            (c) => (count = c.reduce((s, x) => s + x, 0)),
            () => {},
          );
          return count;
        },
        close: () => {
          for (let k = 0; k < n; k++) void this.on(k, 'closeVerbs', []).catch(() => {});
        },
      },
      { admission, log },
    );
  }

  async close(): Promise<void> {
    if (this.closed) return;
    const qps = await this.concat('qps').catch(() => []);
    await Promise.allSettled(this.workers.map((_, k) => this.on(k, 'close', [])));
    const buffers = await this.buffers().catch(() => ({ count: 0, free: 0, dataSize: 0, hugepages: false }));
    this.final = { buffers, qps };
    this.closed = true;
    await Promise.all(this.workers.map((w) => w.stop()));
    closeKickFds(this.workers.map((w) => w.init));
  }
}
