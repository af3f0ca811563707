/**
 * The data plane's contract: what the control plane (api/, bin/, an embedding application) may
 * ask of it. Two implementations: `Dataplane` (dataplane.ts: the graph on this thread) and the
 * facade over worker threads (workers/facade.ts, cpu.workers >= 1), which carries each call to
 * the worker that owns what it names. `createDataplane()` (create.ts) picks one. The worker
 * protocol (workers/protocol.ts) is typed from this interface: a method missing on either
 * side, or misspelt, fails `tsc`.
 *
 * Every method takes and returns structured-clone data (views, Uint8Arrays). Failures the caller
 * caused are DataplaneErrors whose `kind` says what kind of wrong (the API maps kinds to 4xx);
 * anything else is a bug and reaches the caller as it was thrown (the API answers 500 and logs
 * the stack).
 */
import type { Config } from '../config/types.ts';
import type { FaultConfig } from '../drivers/fault.ts';
import type {
  ErrorThreadSnapshot,
  GraphThreadSnapshot,
  RuntimeThreadSnapshot,
  TraceThreadSnapshot,
} from '../graph/index.ts';
import type { QpModify } from '../nodes/rdma/stack.ts';
import type {
  BufferView,
  ConnectIn,
  CqView,
  DeviceView,
  Endpoint,
  EventView,
  HardwareView,
  HealthView,
  InterfaceView,
  ListenerCreate,
  ListenerView,
  MrView,
  MwView,
  NeighborView,
  PdView,
  PingRequest,
  PingResult,
  PollResult,
  QpCreate,
  QpView,
  RecvIn,
  RxPlacementView,
  SendIn,
  ThreadView,
  SrqView,
  VersionView,
} from './views.ts';

/** Where a PD or CQ goes: its interface's worker, or a worker by number (cpu.workers). */
export interface Placement {
  interface?: string;
  worker?: number;
}

/** A memory window (verbs' ibv_alloc_mw): bound by a bind-mw work request. */
export interface MwCreate {
  pd: number;
  /** 1 or 2. */
  type: number;
  /** The program that allocated it through a verbs socket (MwView.owner). */
  owner?: string;
}

export interface MrCreate {
  pd: number;
  length: number;
  /** Default ['local-write'] (VERBS_DEFAULTS.access). */
  access?: string[];
  /** Register this memory (the verbs socket's program pages) instead of allocating `length`. */
  memory?: Uint8Array;
  /** The address the program knows the memory by (its iova). */
  base?: number;
  /** The program that registered it through a verbs socket (MrView.owner). */
  owner?: string;
}

export interface SrqCreate {
  pd: number;
  maxWr: number;
  maxSge?: number;
  limit?: number;
}

export interface CaptureRequest {
  direction: 'rx' | 'tx' | 'both';
  /** A file name in capture.dir, never a path. */
  file: string;
  count?: number;
}

export type QpModifyIn = Omit<QpModify, 'remote'> & { remote?: Endpoint };

/** What one program may hold on the verbs socket (config `verbs:` without the path). */
export type VerbsLimits = Omit<Config['verbs'], 'socket' | 'warmUp' | 'wireWarmUp'>;

export interface ServeVerbsOptions {
  /** Path of the socket (a relative one against the working directory), or "@name" (abstract). */
  path: string;
  log?: (level: 'info' | 'warn', msg: string) => void;
  /** What one program may hold; default the data plane's `verbs:` configuration. */
  limits?: Partial<VerbsLimits>;
}

export interface VerbsSocket {
  path: string;
  /** Connected applications (device contexts and device-list queries in progress). */
  connections(): number;
  close(): void;
}

export interface DataplaneApi {
  readonly config: Config;

  close(): Promise<void>;
  health(): Promise<HealthView>;
  buffers(): Promise<BufferView>;
  hardware(): Promise<HardwareView[]>;
  /** The RDMA devices: one per interface with an IPv4 address (dataplane/rdma-devices.ts). */
  devices(): Promise<DeviceView[]>;
  version(): Promise<VersionView>;

  interfaces(): Promise<InterfaceView[]>;
  interface(name: string): Promise<InterfaceView>;
  rxPlacement(): Promise<RxPlacementView[]>;
  /** `show threads`: the main thread, then each worker. */
  threads(): Promise<ThreadView[]>;
  neighbors(): Promise<NeighborView[]>;
  ping(req: PingRequest, signal?: AbortSignal): Promise<PingResult>;
  capture(name: string, opts: CaptureRequest): Promise<InterfaceView>;
  stopCapture(name: string): Promise<InterfaceView>;
  setFault(name: string, direction: 'rx' | 'tx' | 'both', cfg: FaultConfig | null): Promise<InterfaceView>;

  runtime(): Promise<RuntimeThreadSnapshot[]>;
  /** Each thread's node/next-node tables with the packets each arc carried (`show vlib graph`). */
  nodeGraph(): Promise<GraphThreadSnapshot[]>;
  clearRuntime(): Promise<void>;
  errors(): Promise<ErrorThreadSnapshot[]>;
  clearErrors(): Promise<void>;
  /** Zero every interface's counters (`clear interfaces`; show hardware's driver counters go on). */
  clearInterfaces(): Promise<void>;
  traceAdd(node: string, count: number): Promise<void>;
  trace(): Promise<TraceThreadSnapshot[]>;
  clearTrace(): Promise<void>;
  traceNodes(): Promise<string[]>;
  recentEvents(since?: number): Promise<EventView[]>;

  createPd(req?: Placement): Promise<PdView>;
  pds(): Promise<PdView[]>;
  destroyPd(h: number): Promise<void>;
  createMr(req: MrCreate): Promise<MrView>;
  getMr(h: number): Promise<MrView>;
  mrs(): Promise<MrView[]>;
  destroyMr(h: number): Promise<void>;
  createMw(req: MwCreate): Promise<MwView>;
  mws(): Promise<MwView[]>;
  destroyMw(h: number): Promise<void>;
  writeMr(h: number, offset: number, data: Uint8Array): Promise<{ written: number }>;
  readMr(h: number, offset?: number, length?: number): Promise<Uint8Array>;
  createCq(req: { depth: number } & Placement): Promise<CqView>;
  cqs(): Promise<CqView[]>;
  getCq(h: number): Promise<CqView>;
  pollCq(h: number, max?: number, waitMs?: number, signal?: AbortSignal): Promise<PollResult>;
  destroyCq(h: number): Promise<void>;
  createSrq(req: SrqCreate): Promise<SrqView>;
  srqs(): Promise<SrqView[]>;
  modifySrq(h: number, limit: number): Promise<SrqView>;
  postSrqRecv(h: number, req: RecvIn): Promise<void>;
  destroySrq(h: number): Promise<void>;

  createQp(req: QpCreate): Promise<QpView>;
  qps(): Promise<QpView[]>;
  getQp(qpn: number): Promise<QpView>;
  connect(qpn: number, req: ConnectIn): Promise<QpView & { privateData?: Uint8Array }>;
  modifyQp(qpn: number, req: QpModifyIn): Promise<QpView>;
  /** The program that created QP `qpn` through a verbs socket (QpView.owner). */
  noteQpOwner(qpn: number, owner: string): void;
  destroyQp(qpn: number, opts?: { quiet?: boolean }): Promise<void>;
  /** ibv_attach_mcast: UD QP `qpn` takes the datagrams to IPv4 multicast `group`; the QP's groups after. */
  attachMcast(qpn: number, group: string): Promise<string[]>;
  /** ibv_detach_mcast; the QP's groups after. */
  detachMcast(qpn: number, group: string): Promise<string[]>;
  postRecv(qpn: number, req: RecvIn): Promise<void>;
  postSend(qpn: number, req: SendIn): Promise<void>;
  listen(req: ListenerCreate): Promise<ListenerView>;
  listenersList(): Promise<ListenerView[]>;
  unlisten(port: number): Promise<void>;

  /** Serve the verbs control socket at `opts.path` (unmodified libibverbs programs). */
  serveVerbs(opts: ServeVerbsOptions): VerbsSocket;
}

/** Every method a worker thread serves for the facade: all of them but the two the main thread keeps. */
export type WorkerMethod = Exclude<keyof DataplaneApi, 'config' | 'serveVerbs'>;

/** The arguments and the awaited result of a worker method. */
export type ArgsOf<M extends WorkerMethod> = Parameters<DataplaneApi[M]>;
export type ResultOf<M extends WorkerMethod> = Awaited<ReturnType<DataplaneApi[M]>>;
