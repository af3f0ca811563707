/**
 * The Dataplane facade: the one door from the control plane (api/, rdmactl through the API, an
 * embedding application) into the data plane (README: Architecture, Control plane).
 *
 *   const dp = await Dataplane.create(loadConfig('config/startup.yaml'));
 *   const pd = await dp.createPd();
 *   ...
 *   await dp.close();
 *
 * Every method is async and takes and returns plain JSON-able values (handles are numbers,
 * wrIds come back as sent, atomics are decimal strings), so the graph can move to a worker
 * thread without touching its callers. Failures are DataplaneErrors whose `kind` says what
 * kind of wrong it is (the API maps kinds to HTTP statuses); nothing a caller passes can throw
 * anything else or leave the data plane half-changed.
 */
import { loadCore } from '../native/addons.ts';
import { MemifLaneDriver } from '../drivers/memif-lane.ts';
import { RemoteDriver } from '../drivers/remote.ts';
import { acceptPorts, rejectPorts } from '../drivers/steer-bpf.ts';
import { macOption } from '../drivers/mac.ts';
import { handoffTable, registerWorkerHandoff, WORKER_HANDOFF } from '../nodes/handoff/worker-handoff.ts';
import { addHandoffInterface, registerHandoffInput } from '../nodes/handoff/handoff-input.ts';
import { setLoopbackNext } from '../nodes/ip4/ip4-loopback.ts';
import { HandoffInbox, HandoffProducer, type HandoffQueueMemory } from '../graph/handoff-queue.ts';
import { startVerbsSocket, VERBS_LIBRARY, type VerbsServed } from './verbs-server/connections.ts';
import { deviceView } from './rdma-devices.ts';
import type { HandoffPlan } from './workers/protocol.ts';
import { pinThread } from './pin.ts';
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
} from './api.ts';
import {
  Graph,
  GraphError,
  NodeFlag,
  createPool,
  BufferPool,
  type ErrorThreadSnapshot,
  type GraphThreadSnapshot,
  type RuntimeThreadSnapshot,
  type TraceThreadSnapshot,
} from '../graph/index.ts';
import { DEFAULT_MTU } from '../graph/link.ts';
import { type Capture, Interfaces } from '../drivers/interfaces.ts';
import { CaptureFileError, discardCaptureFile, openCaptureFile } from '../drivers/capture-file.ts';
import type { FaultConfig } from '../drivers/fault.ts';
import type { Driver, ProvidedMemory } from '../drivers/driver.ts';
import { driverUnavailable, openDriver } from '../drivers/open.ts';
import { DRIVER_KINDS, type Config, type InterfaceConfig } from '../config/types.ts';
import type { CongestionName } from '../nodes/rdma/congestion.ts';
import { registerL2L4, type Netstack } from '../nodes/netstack.ts';
import { parseIp4 } from '../nodes/net/address.ts';
import {
  type AtomicValue,
  type BufferView,
  VERSION,
  type ConnectIn,
  type CqView,
  DataplaneError,
  type DeviceView,
  type EventView,
  type HardwareView,
  type HealthView,
  type InterfaceView,
  type ListenerCreate,
  type ListenerView,
  type Logger,
  type MrView,
  type MwView,
  type NeighborView,
  type RxPlacementView,
  type ThreadView,
  type PdView,
  PING_LIMITS,
  type PingRequest,
  type PingResult,
  type PollResult,
  type QpCreate,
  type QpView,
  type RecvIn,
  type SendIn,
  type SgeIn,
  type SrqView,
  type VersionView,
  checkMrRange,
} from './views.ts';
import { currentThread } from './threads.ts';
import { registerRdma, VERBS_DEFAULTS, VERBS_LIMITS, type Rdma, type Sge } from '../nodes/rdma/stack.ts';
import type { RdmaEvent } from '../nodes/rdma/core.ts';
import { CmConnectError } from '../nodes/rdma/cm.ts';
import { QP_STATE_NAMES, type Qp } from '../nodes/rdma/qp.ts';
import {
  ACCESS_NAMES,
  accessNames,
  type Cq,
  type Mr,
  type Mw,
  type Pd,
  type Srq,
  VerbsError,
  API_WR_OPCODE_NAMES,
} from '../nodes/rdma/verbs.ts';

/** Dataplane.create's options beyond the configuration. */
export interface CreateOptions {
  log?: Logger;
  /** Set when this data plane is a worker's (dataplane/workers/thread.ts): its graph's thread. */
  thread?: { index: number; name: string; lcore?: number };
  /** A worker's handle range starts after this (dataplane/workers/facade.ts routes by it). */
  handleBase?: number;
  /** Each event as it is logged (a worker hands them to the main thread's event log). */
  onEvent?: (e: EventView) => void;
  /** cpu.workers >= 2 (dataplane/workers/facade.ts): how this worker reaches each interface, and the handoff queues. */
  handoff?: HandoffPlan;
}

const EVENT_LOG = 1024;
/** A repeated link event (same reason) is logged at most this often. */
const LINK_REPEAT_MS = 30_000;
const LINK_WATCH_MS = 200;

/**
 * What a failure is to the caller: the verbs' and the graph's refusals of what it asked become
 * DataplaneErrors of their kind (4xx through the API); anything else is a bug and goes on as it
 * was thrown, stack and all (500, logged).
 */
function asError(e: unknown): Error {
  if (e instanceof DataplaneError) return e;
  if (e instanceof VerbsError) return new DataplaneError(e.kind, e.message);
  if (e instanceof GraphError) return new DataplaneError('invalid', e.message);
  return e instanceof Error ? e : new Error(String(e));
}

/** Run `fn`, turning a refusal into a DataplaneError (asError). */
function guard<T>(fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw asError(e);
  }
}

function atomic64(v: AtomicValue | undefined, what: string): bigint | undefined {
  if (v === undefined) return undefined;
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v) || v < 0)
      throw new DataplaneError(
        'invalid',
        `atomic.${what} must be a non-negative safe integer or a decimal string, got ${v}`,
      );
    return BigInt(v);
  }
  if (typeof v !== 'string' || !/^[0-9]{1,20}$/.test(v) || BigInt(v) > 0xffffffffffffffffn) {
    throw new DataplaneError(
      'invalid',
      `atomic.${what} must be a decimal string of an unsigned 64-bit integer, got ${JSON.stringify(v)}`,
    );
  }
  return BigInt(v);
}

/**
 * The buffer pool for these interfaces' drivers: over the memory one of them provides (with its
 * allocator; several interfaces may name the same memory), else from the core addon. Two
 * different memories cannot both be the one pool: an error naming them. Exported for the tests.
 */
export function poolFor(
  interfaces: { name: string; driver: Driver }[],
  want: { count: number; dataSize: number },
): BufferPool {
  const provided = interfaces
    .map((i) => ({ name: i.name, p: i.driver.providesMemory?.(want) ?? null }))
    .filter((x): x is { name: string; p: ProvidedMemory } => x.p !== null);
  // Interfaces of one kind may share one provider's memory (DPDK ports share one mempool).
  if (provided.some((x) => x.p.memory.buffer !== provided[0].p.memory.buffer)) {
    throw new DataplaneError(
      'unavailable',
      `interfaces ${provided.map((x) => x.name).join(' and ')} each want the buffer pool in their own memory; one data plane has one pool: give one of them another driver`,
    );
  }
  if (provided.length > 0) return new BufferPool(provided[0].p.memory, provided[0].p.allocator);
  try {
    return createPool({ count: want.count, dataSize: want.dataSize });
  } catch (e) {
    throw new DataplaneError('resource', `buffers: ${(e as Error).message}`);
  }
}

/** Dataplane.internals: what tests and benchmarks that drive the nodes directly reach. */
export interface DataplaneInternals {
  graph: Graph;
  pool: BufferPool;
  net: Netstack;
  ifs: Interfaces;
  rdma: Rdma;
}

export class Dataplane implements DataplaneApi {
  readonly config: Config;
  private readonly graph: Graph;
  private readonly pool: BufferPool;
  private readonly net: Netstack;
  private readonly ifs: Interfaces;
  private readonly rdma: Rdma;
  private readonly log: Logger;
  private readonly startedMs = Date.now();
  private closed = false;

  /**
   * The insides, for tests and benchmarks that drive nodes and verbs directly. api/ and bin/
   * never use it (test/layout.test.ts checks): they go through the methods, the one door.
   */
  static internals(dp: DataplaneApi): DataplaneInternals {
    if (!(dp instanceof Dataplane))
      throw new DataplaneError(
        'unavailable',
        'Dataplane.internals: with cpu.workers the graphs live in worker threads',
      );
    return { graph: dp.graph, pool: dp.pool, net: dp.net, ifs: dp.ifs, rdma: dp.rdma };
  }
  private readonly listeners = new Map<number, ListenerView & { create: ListenerCreate }>();
  private readonly acceptedBy = new Map<number, number>();
  private readonly cqWaiters = new Map<number, Set<() => void>>();
  private readonly events: EventView[] = [];
  private eventSeq = 0;
  private eventHook: ((e: EventView) => void) | null = null;
  /** Interface index -> link up at the last look (for a gratuitous ARP when it comes up). */
  private readonly linkWasUp = new Map<number, boolean>();
  /** With workers: the interfaces (indices) this worker owns, the only ones whose link it logs and announces. */
  private ownLinks: Set<number> | null = null;
  /** Told when an interface's link goes up or down (the verbs sockets: async port events). */
  private readonly linkListeners = new Set<(ifname: string, up: boolean) => void>();
  /** "<interface index>/<drop|refusal>" -> what linkNews has seen and logged. */
  private readonly connectReason = new Map<string, string | null>();
  private readonly linkNewsSeen = new Map<string, { count: number; logged: number; text: string; at: number }>();
  private readonly linkWatch: ReturnType<typeof setInterval>;
  /** QPN -> the program that created it through a verbs socket (QpView.owner). */
  private readonly qpOwners = new Map<number, string>();
  /** MR handle -> the program that registered it through a verbs socket (MrView.owner). */
  private readonly mrOwners = new Map<number, string>();
  /** Memory window handle -> the program that allocated it through a verbs socket. */
  private readonly mwOwners = new Map<number, string>();
  /** Verbs sockets this data plane serves (serveVerbs), closed with it. */
  private readonly verbsSockets: VerbsSocket[] = [];

  private constructor(config: Config, graph: Graph, net: Netstack, ifs: Interfaces, rdma: Rdma, log: Logger) {
    this.config = config;
    this.graph = graph;
    this.pool = graph.pool;
    this.net = net;
    this.ifs = ifs;
    this.rdma = rdma;
    this.log = log;
    rdma.onEvent = (e) => this.onEvent(e);
    this.linkWatch = setInterval(() => this.watchLinks(), LINK_WATCH_MS);
    this.linkWatch.unref();
  }

  /** A link that comes up (a memif peer connecting, a pipe's other end created) gets a gratuitous ARP. */
  private watchLinks(): void {
    for (const itf of this.ifs.all()) {
      const up = itf.driver.linkUp();
      const was = this.linkWasUp.get(itf.index) ?? false;
      this.linkWasUp.set(itf.index, up);
      // Another worker's interface (a stand-in, "up" once open whatever its link, or a share of
      // its queues): its owner announces it and logs its true state, once.
      const own = this.ownLinks === null || this.ownLinks.has(itf.index);
      if (this.net.interfaces.isConfigured(itf.index)) {
        const before = this.net.interfaces.mtu[itf.index];
        const mtu = this.net.interfaces.refresh(itf.index);
        if (own && mtu !== before)
          this.log(
            'info',
            `interface ${itf.name}: mtu ${mtu}${mtu <= DEFAULT_MTU ? '' : itf.driver.kind === 'memif' ? ' (its peer is an rdma-graph data plane: no wire between them)' : " (the kernel interface's)"}`,
          );
      }
      if (own && up && !was && this.net.interfaces.isConfigured(itf.index)) this.net.announce(itf.index);
      if (up !== was) {
        if (own) this.log('info', `interface ${itf.name} is ${up ? 'up' : 'down'}`);
        for (const l of this.linkListeners) l(itf.name, up);
      }
      const drops = itf.driver.linkDrops?.();
      if (drops !== undefined) {
        const what =
          drops.wasUp === false && drops.byPeer === true ? 'the peer refused the connection' : 'connection dropped';
        this.linkNews(
          `${itf.index}/drop`,
          drops.count,
          `interface ${itf.name}: ${what}: ${drops.reason ?? 'no reason given'}`,
        );
      }
      const failed = itf.driver.connectFailures?.();
      if (failed !== undefined && own) this.connectNews(itf.name, failed);
      const refused = itf.driver.refusals?.();
      if (refused !== undefined) {
        this.linkNews(
          `${itf.index}/refusal`,
          refused.count,
          `interface ${itf.name}: refused a peer${refused.peer ? ` ("${refused.peer}")` : ''}: ${refused.reason ?? 'no reason given'}`,
        );
      }
    }
  }

  /**
   * A client that cannot reach its peer retries on its own (memif: every 250 ms): its first
   * failure is logged, then each change of reason, never the same reason again; a connection
   * that gets through forgets it, so that the next failure is logged again.
   */
  private connectNews(name: string, f: { count: number; reason: string | null; level: 'info' | 'warn' }): void {
    const was = this.connectReason.get(name) ?? null;
    if (f.reason === was) return;
    this.connectReason.set(name, f.reason);
    if (f.reason === null) return;
    this.log(
      f.level,
      `interface ${name}: ${f.reason}; retrying until it can (logged again only if the reason changes)`,
    );
  }

  /**
   * Log a counted link event (`count` so far; `text` describes the last one) once it happens,
   * and a peer that keeps retrying (a memif client every 250 ms against a taken id) at most once
   * per LINK_REPEAT_MS with the number since: a new reason is logged at once.
   */
  private linkNews(key: string, count: number, text: string): void {
    let s = this.linkNewsSeen.get(key);
    if (s === undefined) this.linkNewsSeen.set(key, (s = { count: 0, logged: 0, text: '', at: -Infinity }));
    if (count <= s.count) return;
    const now = performance.now();
    if (text === s.text && now - s.at < LINK_REPEAT_MS) {
      s.count = count;
      return;
    }
    const n = count - s.logged;
    this.log('warn', `${text}${n > 1 ? ` (${n} times${s.logged > 0 ? ` since the last report` : ''})` : ''}`);
    s.count = s.logged = count;
    s.text = text;
    s.at = now;
  }

  /**
   * Build the graph, open the configured interfaces and start the loop on this thread. A
   * failure closes whatever was opened and rejects with a DataplaneError naming the interface.
   */
  static async create(config: Config, opts: CreateOptions = {}): Promise<Dataplane> {
    const log = opts.log ?? (() => {});
    // cpu.workers: the graphs run on worker threads (dataplane/workers/facade.ts), started by
    // createDataplane (create.ts); a Dataplane is always one graph on the calling thread.
    if (config.cpu.workers > 0 && opts.thread === undefined)
      throw new DataplaneError(
        'invalid',
        `cpu.workers ${config.cpu.workers}: the data plane runs on worker threads: use createDataplane() (Dataplane.create makes one graph on this thread)`,
      );
    if (opts.thread === undefined && config.cpu.mainCore !== null) pinThread(config.cpu.mainCore, 'cpu.main-core');
    // The drivers first: one of them may provide the pool's memory (DPDK's mempool).
    const plan = opts.handoff;
    const self = plan?.self ?? 0;
    // cpu.workers >= 2: the queues to every other worker (what this one hands over or transmits
    // on another's interface) and from them.
    const toWorker = plan?.queues[self].map((m) => (m === null ? null : new HandoffProducer(m))) ?? [];
    const drivers: Driver[] = [];
    let pool: BufferPool;
    try {
      config.interfaces.forEach((c, k) => drivers.push(Dataplane.driverFor(c, k, config, plan, toWorker)));
      pool = poolFor(
        config.interfaces.map((c, k) => ({ name: c.name, driver: drivers[k] })),
        config.buffers,
      );
    } catch (e) {
      for (const d of drivers) d.close();
      throw e instanceof DataplaneError ? e : new DataplaneError('unavailable', (e as Error).message);
    }
    const cpu = config.cpu;
    const graph = new Graph({
      pool,
      threadIndex: opts.thread?.index ?? 0,
      threadName: opts.thread?.name ?? 'main',
      lcore: opts.thread?.lcore,
      traceMaxPackets: config.trace.maxPackets,
      mode: cpu.poll === 'polling' ? 'polling' : 'adaptive',
      idlePollUs: cpu.poll === 'interrupt' ? 0 : cpu.idlePollUs,
      // Up to 50 µs of passes per event-loop turn while polling: the API waits at most that.
      spinUs: 50,
      idleYield: cpu.idleYield ? loadCore().yieldCpu : undefined,
    });
    const net = registerL2L4(graph);
    const ifs = new Interfaces(graph);
    let inbox: HandoffInbox | null = null;
    let adding = 0;
    try {
      if (plan !== undefined) {
        // Frames from the device for another worker's QPs go to it (worker-handoff); frames the
        // other workers hand here are drained by handoff-input.
        // A group's datagrams go to the workers whose interfaces joined a group: each counts its own.
        const groups = new Int32Array(plan.groups);
        net.interfaces.groups.shareCounts(groups, self);
        registerWorkerHandoff(graph, handoffTable(self, plan.ranges, toWorker, groups, config.rdma.multicastPort));
        // A frame to one of our own addresses for another worker's QP goes to it the same way.
        setLoopbackNext(graph, WORKER_HANDOFF);
        const from: { mem: HandoffQueueMemory; worker: number }[] = [];
        plan.queues.forEach((row, i) => {
          const mem = row[self];
          if (mem !== null) from.push({ mem, worker: i });
        });
        inbox = new HandoffInbox(
          graph,
          from.map((x) => x.mem),
          from.map((x) => x.worker),
          from[0]?.mem.kickFd ?? -1,
        );
      }
      const next = plan === undefined ? 'ethernet-input' : WORKER_HANDOFF;
      for (; adding < drivers.length; adding++)
        Dataplane.addInterface(config.interfaces[adding], drivers[adding], config, net, ifs, next, plan !== undefined);
      if (inbox !== null) {
        const rt = registerHandoffInput(graph, inbox, drivers.length);
        for (const itf of ifs.all())
          addHandoffInterface(graph, rt, itf.index, itf.driver.remote === true ? null : itf.tx.name);
      }
      const r = config.rdma;
      const rdma = registerRdma(graph, net, {
        portRange: r.portRange,
        multicastPort: r.multicastPort,
        handleBase: opts.handleBase ?? 0,
        maxQps: r.maxQps,
        maxMrs: r.maxMrs,
        cmRetryMs: r.cmRetryMs,
        cmTimeoutMs: r.cmTimeoutMs,
        cmBacklog: r.cmBacklog,
        cmHalfOpenMs: r.cmHalfOpenMs,
        ...congestionOptions(config),
        maxPds: r.maxPds,
        maxCqs: r.maxCqs,
        maxSrqs: r.maxSrqs,
        maxMrBytes: r.maxMrBytes,
        maxCqEntries: r.maxCqEntries,
        maxWrSlots: r.maxWrSlots,
        trp: {
          window: r.trp.window,
          rtoMinMs: r.trp.rtoMinMs,
          rtoMaxMs: r.trp.rtoMaxMs,
          maxRetries: r.trp.maxRetries,
          ackDelayUs: r.trp.ackDelayUs,
          ...(r.trp.rtoInitMs === null ? {} : { rtoInitMs: r.trp.rtoInitMs }),
        },
      });
      // An interface in polling mode keeps the graph from sleeping (VPP: a thread with a polling
      // interface polls) where this thread has its device; the graph's own mode covers cpu.poll: polling.
      if (config.interfaces.some((c, k) => c.rxMode === 'polling' && drivers[k].remote !== true))
        graph.addSleepGuard(() => true);
      graph.build();
      const dp = new Dataplane(config, graph, net, ifs, rdma, log);
      if (plan !== undefined)
        dp.ownLinks = new Set(
          config.interfaces.flatMap((_, k) => ((plan.interfaces[k]?.via ?? 'owner') === 'owner' ? [k + 1] : [])),
        );
      dp.eventHook = opts.onEvent ?? null;
      graph.start();
      dp.watchLinks();
      return dp;
    } catch (e) {
      inbox?.close();
      graph.close();
      ifs.closeAll();
      // Drivers after the one that failed were made but never added.
      for (const d of drivers.slice(adding + 1)) d.close();
      throw e instanceof DataplaneError ? e : new DataplaneError('unavailable', (e as Error).message);
    }
  }

  /**
   * The driver of configured interface `k` on this thread: its device's (the whole device, or
   * with workers the share `plan` gives this one: memif queues, an af_packet socket taking some
   * UDP ports), or, where another worker owns it and this one has no share, the stand-in that
   * hands what this worker transmits to the owner (drivers/remote.ts).
   */
  private static driverFor(
    c: InterfaceConfig,
    k: number,
    config: Config,
    plan: HandoffPlan | undefined,
    toWorker: (HandoffProducer | null)[],
  ): Driver {
    const reach = plan?.interfaces[k] ?? { via: 'owner' };
    const where = `interface ${c.name} (line ${c.line})`;
    if (reach.via === 'owner') {
      // memif keeps its peers' kicks off as long as the engine polls idle (one setting), by the
      // interface's rx-mode, cpu.poll's when it has none.
      const mode = c.rxMode ?? config.cpu.poll;
      const idle = mode === 'polling' ? Infinity : mode === 'interrupt' ? 0 : config.cpu.idlePollUs;
      return openDriver(
        c,
        idle,
        reach.reject !== undefined
          ? { filter: rejectPorts(reach.reject) }
          : reach.memifKey !== undefined
            ? { key: reach.memifKey, pollQueues: reach.pollQueues }
            : undefined,
      );
    }
    const mac = macOption(`interface ${c.name}`, c.mac ?? undefined, c.name);
    if (reach.via === 'remote') {
      const q = toWorker[reach.owner];
      if (q === null || q === undefined) throw new DataplaneError('invalid', `${where}: no handoff queue to its owner`);
      return new RemoteDriver(
        c.name,
        mac,
        c.mtu ?? DEFAULT_MTU,
        k + 1,
        q,
        c.driver === 'memif' && c.memif?.udpChecksum === false,
      );
    }
    try {
      return reach.memifKey !== undefined
        ? new MemifLaneDriver(c.name, mac, c.mtu ?? DEFAULT_MTU, {
            key: reach.memifKey,
            queues: reach.queues,
            udpChecksum: c.memif?.udpChecksum ?? true,
          })
        : openDriver(c, config.cpu.idlePollUs, { filter: acceptPorts(reach.accept ?? []), queue: reach.queues[0] });
    } catch (e) {
      throw new DataplaneError('unavailable', `${where}: ${(e as Error).message}`);
    }
  }

  private static addInterface(
    c: InterfaceConfig,
    drv: Driver,
    config: Config,
    net: Netstack,
    ifs: Interfaces,
    next = 'ethernet-input',
    handoff = false,
  ): void {
    // A remote interface's injector is the device's, on the workers that have it.
    const fault =
      c.fault === null || drv.remote === true
        ? undefined
        : c.fault.direction === 'both'
          ? { rx: c.fault.config, tx: c.fault.config }
          : { [c.fault.direction]: c.fault.config };
    let itf;
    try {
      itf = ifs.add(drv, { next, fault });
    } catch (e) {
      drv.close();
      throw new DataplaneError('unavailable', `interface ${c.name} (line ${c.line}): ${(e as Error).message}`);
    }
    if (c.address === null) return;
    net.addInterface({
      index: itf.index,
      name: c.name,
      mac: drv.mac,
      address: c.address,
      gateway: c.gateway ?? undefined,
      mtu: c.mtu ?? DEFAULT_MTU,
      output: itf.output.name,
      txChecksumOffload: drv.txChecksumOffload?.(),
      neighbors: config.neighbors
        .filter((n) => n.interface === c.name)
        .map((n) => ({ address: n.address, mac: n.mac })),
    });
    // What follows the link: with no MTU configured, the link's own where the driver knows one
    // (a memif link to another rdma-graph data plane, an af_packet socket's kernel interface),
    // 1500 otherwise; the driver's checksum
    // choice (memif's follows its peer). Not with workers: frames between them are handed off
    // in slots sized by the configured MTUs (workers/facade.ts), and their choices stay put; the
    // device's multicast filter does follow this worker's groups where it has the device (its
    // own, or its share: an af_packet socket's memberships go to the kernel interface's list).
    if (handoff) {
      if (drv.multicastFilter !== undefined)
        net.interfaces.follow(itf.index, { multicast: drv.multicastFilter.bind(drv) });
      return;
    }
    const linkMtu = drv.linkMtu?.bind(drv);
    net.interfaces.follow(itf.index, {
      mtu: c.mtu === null && linkMtu !== undefined ? () => linkMtu() ?? DEFAULT_MTU : undefined,
      offload: drv.txChecksumOffload?.bind(drv),
      multicast: drv.multicastFilter?.bind(drv),
    });
  }

  /** Destroy every QP (each sends FIN), stop the loop, close the interfaces. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.linkWatch);
    // Verbs sockets first: their applications' objects go while the verbs still work.
    for (const vs of this.verbsSockets.splice(0)) vs.close();
    // Shutting down is not an error of each QP: no qp-error events for the destroys below.
    this.rdma.onEvent = null;
    for (const port of [...this.listeners.keys()]) guard(() => this.rdma.unlisten(port));
    this.listeners.clear();
    const qps = [...this.rdma.qpsByQpn.values()];
    for (const qp of qps) guard(() => this.rdma.destroyQp(qp));
    // Let the FINs leave: one pass moves them from the UDP send queue through to the drivers.
    if (qps.length > 0) this.graph.runPass();
    for (const set of this.cqWaiters.values()) for (const wake of set) wake();
    this.graph.close();
    this.ifs.closeAll();
  }

  private live(): void {
    if (this.closed) throw new DataplaneError('unavailable', 'the data plane is shut down');
  }

  private onEvent(e: RdmaEvent): void {
    const ev: EventView = { seq: ++this.eventSeq, time: new Date().toISOString(), ...e };
    this.events.push(ev);
    this.eventHook?.(ev);
    if (this.events.length > EVENT_LOG) this.events.shift();
    this.log(
      e.type === 'qp-error' || e.type === 'cq-error' ? 'warn' : 'info',
      `${e.type}${e.qpn !== undefined ? ` qp ${e.qpn}` : ''}${e.cq !== undefined ? ` cq ${e.cq}` : ''}${e.srq !== undefined ? ` srq ${e.srq}` : ''}${e.reason ? `: ${e.reason}` : ''}`,
    );
  }

  // ------------------------------------------------------------------ status

  async health(): Promise<HealthView> {
    return {
      status: 'ok',
      version: VERSION,
      uptime: (Date.now() - this.startedMs) / 1000,
      interfaces: this.ifs.all().length,
      qps: this.rdma.qpsByQpn.size,
    };
  }

  async buffers(): Promise<BufferView> {
    return {
      count: this.pool.count,
      free: this.pool.available(),
      dataSize: this.pool.dataSize,
      hugepages: this.pool.stats().hugepages,
    };
  }

  async hardware(): Promise<HardwareView[]> {
    return this.ifs.all().map((itf) => {
      const d = itf.driver;
      const hw = d.hardware?.() ?? { info: {}, counters: {} };
      const ip = this.net.interfaces.isConfigured(itf.index) ? this.net.interfaces.info(itf.index) : null;
      return {
        name: itf.name,
        index: itf.index,
        driver: d.kind,
        mac: itf.macString,
        mtu: ip?.mtu ?? d.mtu,
        state: d.linkUp() ? 'up' : 'down',
        rxQueues: d.rxQueues,
        txQueues: d.txQueues,
        counters: hw.counters,
        info: Object.fromEntries(
          Object.entries(hw.info).map(([k, v]) => [
            k,
            v === null ? null : typeof v === 'boolean' ? (v ? 'yes' : 'no') : String(v),
          ]),
        ),
      };
    });
  }

  async devices(): Promise<DeviceView[]> {
    const attr = this.rdma.deviceAttr();
    return (await this.interfaces())
      .filter((i) => i.addresses.length > 0)
      .map((i) =>
        deviceView(
          { name: i.name, mac: i.mac, mtu: i.mtu, up: i.state === 'up', address: i.addresses[0].split('/')[0] },
          attr,
          VERSION,
        ),
      );
  }

  async version(): Promise<VersionView> {
    const drivers = DRIVER_KINDS.map((name) => {
      const why = driverUnavailable(name);
      return { name, available: why === null, why };
    });
    return {
      version: VERSION,
      node: process.version,
      platform: `${process.platform} ${process.arch}`,
      drivers,
      startedAt: new Date(this.startedMs).toISOString(),
    };
  }

  async interfaces(): Promise<InterfaceView[]> {
    return this.ifs.all().map((itf) => this.interfaceView(itf.name));
  }

  async interface(name: string): Promise<InterfaceView> {
    return this.interfaceView(name);
  }

  private interfaceView(name: string): InterfaceView {
    const itf = this.ifs.all().find((x) => x.name === name);
    if (!itf)
      throw new DataplaneError(
        'not-found',
        `no interface "${name}" (have: ${
          this.ifs
            .all()
            .map((x) => x.name)
            .join(', ') || 'none'
        })`,
      );
    const ip = this.net.interfaces.isConfigured(itf.index) ? this.net.interfaces.info(itf.index) : null;
    return {
      name: itf.name,
      index: itf.index,
      driver: itf.driver.kind,
      mac: itf.macString,
      addresses: ip ? [`${ip.address}/${ip.prefix}`] : [],
      gateway: ip?.gateway ?? null,
      mtu: ip?.mtu ?? itf.driver.mtu,
      state: itf.driver.linkUp() ? 'up' : 'down',
      rxQueues: itf.driver.rxQueues,
      groups: ip ? this.net.interfaces.groups.list(itf.index) : [],
      counters: itf.counters(),
      fault: this.ifs.faultCounters(itf.name),
      capture: {
        rx: itf.rxCapture?.path ?? null,
        tx: itf.txCapture?.path ?? null,
        rxStopped: itf.rxCapture?.stopped ?? null,
        txStopped: itf.txCapture?.stopped ?? null,
      },
    };
  }

  /**
   * `ping`: ICMP echo requests from the data plane to `address` (routed, ARP-resolved, sent by
   * the graph as any packet), `count` of them `intervalMs` apart; resolves when each has its
   * reply or `timeoutMs` has passed. `signal` stops sending more (a client that went away).
   */
  async ping(req: PingRequest, signal?: AbortSignal): Promise<PingResult> {
    this.live();
    const count = req.count ?? 1,
      intervalMs = req.intervalMs ?? 1000,
      size = req.size ?? 56,
      timeoutMs = req.timeoutMs ?? 1000;
    const L = PING_LIMITS;
    const int = (v: number, lo: number, hi: number, what: string) => {
      if (!Number.isInteger(v) || v < lo || v > hi)
        throw new DataplaneError('invalid', `ping ${what} must be an integer in ${lo}..${hi}, got ${v}`);
    };
    int(count, 1, L.maxCount, 'count');
    int(intervalMs, L.minIntervalMs, L.maxWaitMs, 'intervalMs');
    int(size, 0, L.maxSize, 'size');
    int(timeoutMs, 1, L.maxWaitMs, 'timeoutMs');
    if (req.seq !== undefined) int(req.seq, 1, 0xffff, 'seq');
    if ((count - 1) * intervalMs + timeoutMs > L.maxWaitMs)
      throw new DataplaneError(
        'invalid',
        `ping: ${count} requests ${intervalMs} ms apart waited ${timeoutMs} ms take longer than ${L.maxWaitMs} ms`,
      );
    let dst: number;
    try {
      dst = parseIp4(req.address, 'ping');
    } catch (e) {
      throw new DataplaneError('invalid', (e as Error).message);
    }
    if (this.net.interfaces.route(dst) === 0)
      throw new DataplaneError(
        'not-found',
        `ping: no route to ${req.address} (no interface address or gateway covers it)`,
      );
    const r = await this.net.pinger.series(
      { dst, count, intervalMs, size, timeoutMs, ...(req.seq !== undefined ? { seq: req.seq } : {}) },
      signal,
    );
    if (r.sent === 0 && r.stopped !== null) throw new DataplaneError('busy', `ping: ${r.stopped}`);
    return {
      address: req.address,
      size,
      sent: r.sent,
      received: r.replies.length,
      replies: r.replies.map((x) => ({ seq: x.seq, bytes: x.bytes, ttl: x.ttl, from: x.from, timeMs: x.rttNs / 1e6 })),
      lost: r.lost,
      stopped: r.stopped,
    };
  }

  /**
   * Serve the verbs control socket (dataplane/verbs-server/connections.ts) at `opts.path`: unmodified
   * libibverbs programs run with `rdma-graph exec` find this data plane's devices through it.
   */
  /** What a verbs server of this thread reaches: the graph, the RDMA stack, link changes. */
  verbsServed(): VerbsServed {
    return {
      graph: this.graph,
      rdma: this.rdma,
      onLink: (cb) => {
        this.linkListeners.add(cb);
        return () => this.linkListeners.delete(cb);
      },
    };
  }

  serveVerbs(opts: ServeVerbsOptions): VerbsSocket {
    this.live();
    const vs = startVerbsSocket(this, this.verbsServed(), opts);
    this.verbsSockets.push(vs);
    return vs;
  }

  /**
   * `show interface rx-placement`: per thread, what each input node polls (interface, the
   * device's queue number, its rx-mode), as VPP prints it.
   */
  async threads(): Promise<ThreadView[]> {
    const g = this.graph;
    const main = g.threadIndex === 0;
    return [
      currentThread(
        g.threadIndex,
        g.threadName,
        main ? '' : 'workers',
        g.lcore ?? (main ? this.config.cpu.mainCore : null),
      ),
    ];
  }

  async rxPlacement(): Promise<RxPlacementView[]> {
    const modes = new Map(this.config.interfaces.map((c) => [c.name, c.rxMode ?? this.config.cpu.poll]));
    const nodes = this.ifs
      .placement()
      .map(({ node, queues }) => ({
        node,
        queues: queues.flatMap(({ itf, queue }) => {
          const q = itf.driver.deviceQueue?.(queue) ?? queue;
          return q < 0 ? [] : [{ interface: itf.name, queue: q, mode: modes.get(itf.name) ?? this.config.cpu.poll }];
        }),
      }))
      .filter((n) => n.queues.length > 0);
    return [{ index: this.graph.threadIndex, name: this.graph.threadName, nodes }];
  }

  async neighbors(): Promise<NeighborView[]> {
    return this.net.neighbors
      .entries()
      .map((n) => ({ ...n, interface: this.ifs.byIndex(n.interface)?.name ?? `if${n.interface}` }));
  }

  async runtime(): Promise<RuntimeThreadSnapshot[]> {
    return [this.graph.runtimeSnapshot()];
  }

  async nodeGraph(): Promise<GraphThreadSnapshot[]> {
    return [this.graph.graphSnapshot()];
  }

  async clearRuntime(): Promise<void> {
    this.graph.clearRuntime();
  }

  async errors(): Promise<ErrorThreadSnapshot[]> {
    return [this.graph.errorSnapshot()];
  }

  async clearErrors(): Promise<void> {
    this.graph.clearErrors();
  }

  async clearInterfaces(): Promise<void> {
    this.live();
    for (const itf of this.ifs.all()) itf.clearCounters();
  }

  async traceAdd(node: string, count: number): Promise<void> {
    this.live();
    guard(() => {
      this.graph.node(node);
      this.graph.traceAdd(node, count);
    });
  }

  async trace(): Promise<TraceThreadSnapshot[]> {
    return [this.graph.traceSnapshot()];
  }

  async clearTrace(): Promise<void> {
    this.graph.clearTrace();
  }

  /** Nodes `trace add` accepts. */
  async traceNodes(): Promise<string[]> {
    return this.graph.nodes.filter((n) => n.type === 'input' && n.flags & NodeFlag.TRACE_SUPPORTED).map((n) => n.name);
  }

  /**
   * Capture into new files of the configured directory (capture.dir): `file` is a name, never a
   * path, and never an existing file ('busy'). Each direction stops by itself after `count`
   * packets or before its file passes capture.max-bytes (logged; the view's rxStopped/txStopped
   * say why).
   */
  async capture(name: string, opts: CaptureRequest): Promise<InterfaceView> {
    this.live();
    this.interfaceView(name);
    const d = opts.direction;
    if (d !== 'rx' && d !== 'tx' && d !== 'both')
      throw new DataplaneError('invalid', `capture direction must be rx, tx or both, got ${JSON.stringify(d)}`);
    const count = opts.count ?? Infinity;
    if (!(count >= 1)) throw new DataplaneError('invalid', `capture count must be at least 1, got ${opts.count}`);
    // Both directions in one file would interleave two writers: give the tx side its own name.
    const rxName = d === 'tx' ? undefined : opts.file;
    const txName =
      d === 'rx' ? undefined : d === 'both' ? String(opts.file).replace(/(\.pcap)?$/, '-tx.pcap') : opts.file;
    const opened: { fd: number; path: string }[] = [];
    try {
      const rx = rxName === undefined ? undefined : openCaptureFile(this.config.capture.dir, rxName);
      if (rx) opened.push(rx);
      const tx = txName === undefined ? undefined : openCaptureFile(this.config.capture.dir, txName);
      if (tx) opened.push(tx);
      const onStop = (c: Capture) => this.log('warn', `capture on ${name}: ${c.path}: ${c.stopped}`);
      this.ifs.capture(name, { rx, tx, max: count, maxBytes: this.config.capture.maxBytes, onStop });
    } catch (e) {
      for (const f of opened) discardCaptureFile(f);
      if (e instanceof CaptureFileError) throw new DataplaneError(e.kind === 'exists' ? 'busy' : e.kind, e.message);
      throw asError(e);
    }
    return this.interfaceView(name);
  }

  async stopCapture(name: string): Promise<InterfaceView> {
    this.interfaceView(name);
    guard(() => this.ifs.stopCapture(name));
    return this.interfaceView(name);
  }

  async setFault(name: string, direction: 'rx' | 'tx' | 'both', cfg: FaultConfig | null): Promise<InterfaceView> {
    this.live();
    this.interfaceView(name);
    try {
      this.ifs.setFault(name, direction, cfg);
    } catch (e) {
      // Interfaces.setFault refuses a bad direction or configuration with a RangeError: the caller's.
      if (e instanceof RangeError) throw new DataplaneError('invalid', e.message);
      throw asError(e);
    }
    return this.interfaceView(name);
  }

  /** `interface` must exist; `worker` can only be 0 here (with cpu.workers the facade takes it). */
  private checkPlacement(req: Placement): void {
    if (req.interface !== undefined && !this.ifs.all().some((i) => i.name === req.interface))
      throw new DataplaneError('not-found', `no interface "${req.interface}"`);
    if (req.worker !== undefined && req.worker !== 0)
      throw new DataplaneError('invalid', `worker ${req.worker}: cpu.workers is 0 (no worker threads)`);
  }

  async recentEvents(since = 0): Promise<EventView[]> {
    return this.events.filter((e) => e.seq > since);
  }

  // ------------------------------------------------------------------ lookups

  private pd(h: number): Pd {
    const pd = this.rdma.pds.get(h);
    if (!pd) throw new DataplaneError('not-found', `no protection domain ${h}`);
    return pd;
  }

  private mr(h: number): Mr {
    const mr = this.rdma.mrsByHandle.get(h);
    if (!mr) throw new DataplaneError('not-found', `no memory region ${h}`);
    return mr;
  }

  private cq(h: number): Cq {
    const cq = this.rdma.cqs.get(h);
    if (!cq) throw new DataplaneError('not-found', `no completion queue ${h}`);
    return cq;
  }

  private srq(h: number): Srq {
    const srq = this.rdma.srqs.get(h);
    if (!srq) throw new DataplaneError('not-found', `no shared receive queue ${h}`);
    return srq;
  }

  private qp(qpn: number): Qp {
    const qp = this.rdma.qpsByQpn.get(qpn);
    if (!qp) throw new DataplaneError('not-found', `no QP ${qpn}`);
    return qp;
  }

  private sges(list: SgeIn[] | undefined, what: string): Sge[] {
    if (list === undefined) return [];
    if (!Array.isArray(list)) throw new DataplaneError('invalid', `${what}: sge must be a list`);
    return list.map((e, i) => {
      if (e === null || typeof e !== 'object')
        throw new DataplaneError('invalid', `${what}: sge[${i}] must be {mr, offset, length}`);
      const mr = this.rdma.mrsByHandle.get(e.mr);
      if (!mr) throw new DataplaneError('not-found', `${what}: sge[${i}]: no memory region ${e.mr}`);
      return { mr, offset: e.offset, length: e.length };
    });
  }

  // ------------------------------------------------------------------ PD, MR

  /** `interface`: where the PD is for; it places the PD on that interface's worker (cpu.workers). */
  async createPd(req: Placement = {}): Promise<PdView> {
    this.live();
    this.checkPlacement(req);
    const pd = guard(() => this.rdma.createPd());
    return { pd: pd.handle, users: pd.users };
  }

  async pds(): Promise<PdView[]> {
    return [...this.rdma.pds.values()].map((pd) => ({ pd: pd.handle, users: pd.users }));
  }

  async destroyPd(h: number): Promise<void> {
    guard(() => this.rdma.destroyPd(this.pd(h)));
  }

  /**
   * `access` defaults to ['local-write'] (VERBS_DEFAULTS.access), as rdmactl's. `memory`: register
   * that memory (the verbs socket's, an application's shared pages) instead of allocating `length`.
   */
  async createMr(req: MrCreate): Promise<MrView> {
    this.live();
    return guard(() => {
      const pd = this.pd(req.pd);
      const access = req.access ?? VERBS_DEFAULTS.access;
      if (!Array.isArray(access))
        throw new DataplaneError('invalid', `access must be a list of ${ACCESS_NAMES.join(', ')}`);
      const mr = this.rdma.regMr(pd, req.memory ?? req.length, access, req.base);
      if (req.owner !== undefined) this.mrOwners.set(mr.handle, req.owner);
      return this.mrView(mr);
    });
  }

  private mrView(mr: Mr): MrView {
    return {
      mr: mr.handle,
      pd: mr.pd.handle,
      stag: mr.stag,
      length: mr.length,
      access: accessNames(mr.access),
      owner: this.mrOwners.get(mr.handle) ?? null,
    };
  }

  async getMr(h: number): Promise<MrView> {
    return this.mrView(this.mr(h));
  }

  async mrs(): Promise<MrView[]> {
    return [...this.rdma.mrsByHandle.values()].map((m) => this.mrView(m));
  }

  async destroyMr(h: number): Promise<void> {
    guard(() => this.rdma.deregMr(this.mr(h)));
    this.mrOwners.delete(h);
  }

  async createMw(req: MwCreate): Promise<MwView> {
    this.live();
    return guard(() => {
      const mw = this.rdma.allocMw(this.pd(req.pd), req.type);
      if (req.owner !== undefined) this.mwOwners.set(mw.handle, req.owner);
      return this.mwView(mw);
    });
  }

  private mwView(mw: Mw): MwView {
    const w = this.rdma.core.mrs[mw.index];
    const p = mw.parent;
    return {
      mw: mw.handle,
      pd: mw.pd.handle,
      type: mw.type,
      rkey: mw.rkey,
      bound:
        p !== null && w !== null && w.valid
          ? { mr: p.handle, address: w.base, length: w.length, access: accessNames(w.access) }
          : null,
      owner: this.mwOwners.get(mw.handle) ?? null,
    };
  }

  async mws(): Promise<MwView[]> {
    return [...this.rdma.mwsByHandle.values()].map((m) => this.mwView(m));
  }

  async destroyMw(h: number): Promise<void> {
    const mw = this.rdma.mwsByHandle.get(h);
    if (mw === undefined) throw new DataplaneError('not-found', `no memory window ${h}`);
    guard(() => this.rdma.deallocMw(mw));
    this.mwOwners.delete(h);
  }

  private range(mr: Mr, offset: number, length: number, what: string): void {
    checkMrRange(mr.handle, mr.length, offset, length, what);
  }

  /** Copy `data` into the MR at `offset`. */
  async writeMr(h: number, offset: number, data: Uint8Array): Promise<{ written: number }> {
    const mr = this.mr(h);
    this.range(mr, offset, data.length, `write mr ${h}`);
    mr.memory.set(data, offset);
    return { written: data.length };
  }

  /** A copy of `length` bytes of the MR at `offset` (default: to its end). */
  async readMr(h: number, offset = 0, length?: number): Promise<Uint8Array> {
    const mr = this.mr(h);
    const len = length ?? Math.max(0, mr.length - offset);
    this.range(mr, offset, len, `read mr ${h}`);
    return mr.memory.slice(offset, offset + len);
  }

  // ------------------------------------------------------------------ CQ, SRQ

  /** `interface`: as createPd's (a CQ lives on the worker of the QPs it serves). */
  async createCq(req: { depth: number } & Placement): Promise<CqView> {
    this.live();
    this.checkPlacement(req);
    const cq = guard(() => this.rdma.createCq(req.depth));
    cq.onCompletion = (c) => this.wakeCq(c.handle);
    return this.cqView(cq);
  }

  private cqView(cq: Cq): CqView {
    return { cq: cq.handle, depth: cq.depth, pending: cq.length, error: cq.error, users: cq.users };
  }

  async cqs(): Promise<CqView[]> {
    return [...this.rdma.cqs.values()].map((c) => this.cqView(c));
  }

  async getCq(h: number): Promise<CqView> {
    return this.cqView(this.cq(h));
  }

  private wakeCq(h: number): void {
    const set = this.cqWaiters.get(h);
    if (set) for (const wake of [...set]) wake();
  }

  /**
   * Take up to `max` completions; with `waitMs`, wait that long for the first one. When
   * `signal` aborts (the caller went away), the wait ends and nothing is taken from the CQ, so
   * no completion is lost to a caller that can no longer receive it.
   */
  async pollCq(h: number, max = 64, waitMs = 0, signal?: AbortSignal): Promise<PollResult> {
    let cq = this.cq(h);
    if (!Number.isInteger(max) || max < 1 || max > 65536)
      throw new DataplaneError('invalid', `max must be an integer in 1..65536, got ${max}`);
    if (!Number.isFinite(waitMs) || waitMs < 0 || waitMs > 60000)
      throw new DataplaneError('invalid', `waitMs must be a number in 0..60000, got ${waitMs}`);
    if (cq.length === 0 && !(cq.error && cq.overflowed.length > 0) && waitMs > 0 && !this.closed && !signal?.aborted) {
      await new Promise<void>((resolve) => {
        let set = this.cqWaiters.get(h);
        if (!set) this.cqWaiters.set(h, (set = new Set()));
        const s = set;
        const done = () => {
          clearTimeout(timer);
          s.delete(done);
          signal?.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, waitMs);
        s.add(done);
        signal?.addEventListener('abort', done);
      });
      // Destroyed while we waited: nothing to report but that.
      cq = this.cq(h);
    }
    const error = cq.error
      ? `cq ${h} overflowed (depth ${cq.depth}); it is in error: destroy it and use a deeper one`
      : null;
    if (signal?.aborted) return { completions: [], error };
    const out = cq.poll(max);
    if (out.length < max && cq.error && cq.overflowed.length > 0)
      out.push(...cq.overflowed.splice(0, max - out.length));
    return { completions: out, error };
  }

  async destroyCq(h: number): Promise<void> {
    const cq = this.cq(h);
    guard(() => this.rdma.destroyCq(cq));
    cq.onCompletion = null;
    this.wakeCq(h);
    this.cqWaiters.delete(h);
  }

  async createSrq(req: SrqCreate): Promise<SrqView> {
    this.live();
    return guard(() => {
      const srq = this.rdma.createSrq(this.pd(req.pd), req.maxWr, req.maxSge);
      if (req.limit !== undefined) this.rdma.modifySrq(srq, req.limit);
      return this.srqView(srq);
    });
  }

  private srqView(s: Srq): SrqView {
    return { srq: s.handle, pd: s.pd.handle, maxWr: s.maxWr, maxSge: s.maxSge, posted: s.length, limit: s.limit };
  }

  async srqs(): Promise<SrqView[]> {
    return [...this.rdma.srqs.values()].map((s) => this.srqView(s));
  }

  async modifySrq(h: number, limit: number): Promise<SrqView> {
    const srq = this.srq(h);
    guard(() => this.rdma.modifySrq(srq, limit));
    return this.srqView(srq);
  }

  async postSrqRecv(h: number, req: RecvIn): Promise<void> {
    this.live();
    const srq = this.srq(h);
    guard(() => this.rdma.postSrqRecv(srq, { wrId: req.wrId, sg: this.sges(req.sge, 'srq recv') }));
  }

  async destroySrq(h: number): Promise<void> {
    guard(() => this.rdma.destroySrq(this.srq(h)));
  }

  // ------------------------------------------------------------------ QP

  private address(ifName: string | undefined): string | undefined {
    if (ifName === undefined) return undefined;
    const itf = this.ifs.all().find((x) => x.name === ifName);
    if (!itf) throw new DataplaneError('not-found', `no interface "${ifName}"`);
    if (!this.net.interfaces.isConfigured(itf.index))
      throw new DataplaneError('invalid', `interface ${ifName} has no IPv4 address`);
    return this.net.interfaces.info(itf.index).address;
  }

  async createQp(req: QpCreate): Promise<QpView> {
    this.live();
    return guard(() => this.qpView(this.createQpSync(req)));
  }

  private localIp(qp: Qp, info: { local: { address: string }; remote: { address: string } | null }): string {
    if (info.local.address !== '0.0.0.0') return info.local.address;
    const ips = this.net.interfaces;
    if (qp.remotePort !== 0) {
      const ix = ips.route(qp.remoteAddr);
      if (ix > 0) return ips.info(ix).address;
    }
    return ips.list.length === 1 ? ips.info(ips.list[0]).address : '0.0.0.0';
  }

  private qpView(qp: Qp): QpView {
    const q = this.rdma.queryQp(qp);
    return {
      qpn: q.qpn,
      type: q.type,
      qkey: q.qkey,
      state: q.state,
      psn: q.psn,
      local: { ip: this.localIp(qp, q), port: q.local.port },
      remote: q.remote ? { ip: q.remote.address, port: q.remote.port } : null,
      pd: qp.pd.handle,
      sendCq: qp.sendCq.handle,
      recvCq: qp.recvCq.handle,
      srq: q.srq,
      listener: this.acceptedBy.get(qp.qpn) ?? null,
      owner: this.qpOwners.get(qp.qpn) ?? null,
      ird: q.ird,
      ord: q.ord,
      maxSendWr: q.maxSendWr,
      maxRecvWr: q.maxRecvWr,
      maxSge: q.maxSge,
      maxInline: q.maxInline,
      segmentSize: q.segmentSize,
      multicast: this.rdma.mcastGroupsOf(qp),
      sqOutstanding: q.sqOutstanding,
      rqPosted: q.rqPosted,
      counters: q.counters,
      rtt: q.rtt,
      congestion: q.congestion,
    };
  }

  async qps(): Promise<QpView[]> {
    return [...this.rdma.qpsByQpn.values()].map((q) => this.qpView(q));
  }

  async getQp(qpn: number): Promise<QpView> {
    return this.qpView(this.qp(qpn));
  }

  async attachMcast(qpn: number, group: string): Promise<string[]> {
    this.live();
    const qp = this.qp(qpn);
    if (typeof group !== 'string') throw new DataplaneError('invalid', 'a multicast group is an IPv4 address string');
    guard(() => this.rdma.attachMcast(qp, group));
    return this.rdma.mcastGroupsOf(qp);
  }

  async detachMcast(qpn: number, group: string): Promise<string[]> {
    this.live();
    const qp = this.qp(qpn);
    if (typeof group !== 'string') throw new DataplaneError('invalid', 'a multicast group is an IPv4 address string');
    guard(() => this.rdma.detachMcast(qp, group));
    return this.rdma.mcastGroupsOf(qp);
  }

  /**
   * To RTS. manual: INIT (from RESET), RTR with the peer's address and port, RTS. cm: through
   * the peer's listener; resolves once accepted, rejects with kind 'rejected' or 'timeout'.
   */
  async connect(qpn: number, req: ConnectIn): Promise<QpView & { privateData?: Uint8Array }> {
    this.live();
    const qp = this.qp(qpn);
    const r = req.remote;
    if (r === null || typeof r !== 'object') throw new DataplaneError('invalid', 'connect needs remote {ip, port}');
    if (req.mode === 'manual') {
      guard(() => {
        const from = qp.stateName;
        if (from !== 'reset' && from !== 'init')
          throw new DataplaneError('state', `qp ${qpn} is in ${from}: a manual connect needs RESET or INIT`);
        if (req.remotePsn === undefined)
          throw new DataplaneError(
            'invalid',
            `qp ${qpn}: a manual connect needs remotePsn, the peer QP's psn (GET /v1/qps/{qpn} on the peer shows it)`,
          );
        if (from === 'reset') this.rdma.modifyQp(qp, { state: 'init' });
        try {
          this.rdma.modifyQp(qp, {
            state: 'rtr',
            remote: { address: r.ip, port: r.port },
            rqPsn: req.remotePsn,
            ird: req.ird,
            ord: req.ord,
          });
        } catch (e) {
          // All or nothing: a refused RTR (bad address, no route) leaves the QP as it was.
          if (from === 'reset') this.rdma.modifyQp(qp, { state: 'reset' });
          throw e;
        }
        this.rdma.modifyQp(qp, { state: 'rts' });
      });
      return this.qpView(qp);
    }
    if (req.mode !== 'cm')
      throw new DataplaneError('invalid', `mode must be manual or cm, got ${JSON.stringify(req.mode)}`);
    const p = guard(() => {
      if (req.ird !== undefined || req.ord !== undefined) {
        if (qp.stateName === 'reset') this.rdma.modifyQp(qp, { state: 'init' });
        if (qp.stateName === 'init') this.rdma.modifyQp(qp, { state: 'init', ird: req.ird, ord: req.ord });
      }
      return this.rdma.connect(qp, r.ip, r.port, { privateData: req.privateData, timeoutMs: req.timeoutMs });
    });
    try {
      const res = await p;
      return { ...this.qpView(qp), privateData: res.privateData };
    } catch (e) {
      const msg = `qp ${qpn}: ${(e as Error).message}`;
      const code = e instanceof CmConnectError ? e.code : null;
      if (code === 'rejected') throw new DataplaneError('rejected', msg);
      if (code === 'timeout') throw new DataplaneError('timeout', msg);
      throw new DataplaneError(qp.destroyed ? 'not-found' : 'state', msg);
    }
  }

  async modifyQp(qpn: number, req: QpModifyIn): Promise<QpView> {
    this.live();
    const qp = this.qp(qpn);
    if (!(QP_STATE_NAMES as readonly string[]).includes(req.state))
      throw new DataplaneError(
        'invalid',
        `state must be one of ${QP_STATE_NAMES.join(', ')}, got ${JSON.stringify(req.state)}`,
      );
    guard(() =>
      this.rdma.modifyQp(qp, {
        state: req.state,
        remote: req.remote ? { address: req.remote.ip, port: req.remote.port } : undefined,
        rqPsn: req.rqPsn,
        sqPsn: req.sqPsn,
        ird: req.ird,
        ord: req.ord,
        pathMtu: req.pathMtu,
        ackTimeoutUs: req.ackTimeoutUs,
        retryCount: req.retryCount,
        qkey: req.qkey,
      }),
    );
    return this.qpView(qp);
  }

  /** The verbs socket's: which program created QP `qpn` (shown in its view until it is destroyed). */
  noteQpOwner(qpn: number, owner: string): void {
    this.qpOwners.set(qpn, owner);
  }

  /**
   * Send FIN, flush its work requests (their completions go to its CQs), free its port.
   * `quiet`: the peer is not sent a FIN, only a last ACK (ibv_destroy_qp's semantics; Rdma.destroyQp).
   */
  async destroyQp(qpn: number, opts: { quiet?: boolean } = {}): Promise<void> {
    guard(() => this.rdma.destroyQp(this.qp(qpn), opts.quiet === true));
    this.qpOwners.delete(qpn);
    this.forgetAccepted(qpn);
  }

  /** A QP a listener accepted is gone (destroyed, or reaped while half-open). */
  private forgetAccepted(qpn: number): void {
    const l = this.acceptedBy.get(qpn);
    if (l !== undefined) {
      const lv = this.listeners.get(l);
      if (lv) lv.accepted = lv.accepted.filter((q) => q !== qpn);
      this.acceptedBy.delete(qpn);
    }
  }

  async postRecv(qpn: number, req: RecvIn): Promise<void> {
    this.live();
    const qp = this.qp(qpn);
    guard(() => this.rdma.postRecv(qp, { wrId: req.wrId, sg: this.sges(req.sge, 'recv') }));
  }

  async postSend(qpn: number, req: SendIn): Promise<void> {
    this.live();
    const qp = this.qp(qpn);
    guard(() => {
      if (!(API_WR_OPCODE_NAMES as readonly string[]).includes(req.opcode))
        throw new DataplaneError(
          'invalid',
          `opcode must be one of ${API_WR_OPCODE_NAMES.join(', ')}, got ${JSON.stringify(req.opcode)}`,
        );
      const a = req.atomic;
      this.rdma.postSend(qp, {
        wrId: req.wrId,
        opcode: req.opcode,
        sg: this.sges(req.sge, req.opcode),
        remote: req.remote,
        imm: req.imm,
        invalidateStag: req.invalidateStag,
        signaled: req.signaled,
        solicited: req.solicited,
        inline: req.inline,
        ud: req.ud === undefined ? undefined : { address: req.ud.ip, qpn: req.ud.qpn, qkey: req.ud.qkey },
        atomic:
          a === undefined
            ? undefined
            : { add: atomic64(a.add, 'add'), swap: atomic64(a.swap, 'swap'), compare: atomic64(a.compare, 'compare') },
      });
    });
  }

  // ------------------------------------------------------------------ listeners

  /** Accept connection requests on `port`: each gets a new QP made from these parameters. */
  async listen(req: ListenerCreate): Promise<ListenerView> {
    this.live();
    return guard(() => {
      // Check the parameters now, not at the first request.
      this.pd(req.pd);
      this.cq(req.sendCq);
      this.cq(req.recvCq);
      if (req.srq !== undefined && req.srq !== null) this.srq(req.srq);
      this.address(req.interface);
      const maxPd = VERBS_LIMITS.maxPrivateData;
      if (req.privateData !== undefined && req.privateData.length > maxPd)
        throw new DataplaneError('too-large', `private data is at most ${maxPd} bytes, got ${req.privateData.length}`);
      const view: ListenerView & { create: ListenerCreate } = {
        port: req.port,
        pd: req.pd,
        sendCq: req.sendCq,
        recvCq: req.recvCq,
        srq: req.srq ?? null,
        maxSendWr: req.maxSendWr ?? VERBS_DEFAULTS.maxSendWr,
        maxRecvWr: req.maxRecvWr ?? VERBS_DEFAULTS.maxRecvWr,
        accepted: [],
        requests: 0,
        create: req,
      };
      this.rdma.listen(
        req.port,
        (cr) => {
          view.requests++;
          try {
            const { port: _p, privateData, ...init } = view.create;
            const q = this.createQpSync({
              ...init,
              ird: Math.min(init.ird ?? 16, cr.ord),
              ord: Math.min(init.ord ?? 16, cr.ird),
            });
            view.accepted.push(q.qpn);
            this.acceptedBy.set(q.qpn, view.port);
            this.log('info', `listener ${view.port}: accepted ${cr.address}:${cr.port} as qp ${q.qpn}`);
            return { qp: q, privateData };
          } catch (e) {
            this.log('warn', `listener ${view.port}: rejected ${cr.address}:${cr.port}: ${(e as Error).message}`);
            return { reject: true, reason: (e as Error).message };
          }
        },
        {
          onReap: (q, reason) => {
            this.forgetAccepted(q.qpn);
            this.log('warn', `listener ${view.port}: qp ${q.qpn}: ${reason}`);
          },
        },
      );
      this.listeners.set(req.port, view);
      return this.listenerView(view);
    });
  }

  private createQpSync(init: QpCreate): Qp {
    const srq = init.srq === undefined || init.srq === null ? null : this.srq(init.srq);
    return this.rdma.createQp({
      pd: this.pd(init.pd),
      sendCq: this.cq(init.sendCq),
      recvCq: this.cq(init.recvCq),
      srq,
      maxSendWr: init.maxSendWr,
      maxRecvWr: init.maxRecvWr ?? (srq ? 0 : undefined),
      maxSge: init.maxSge,
      maxInline: init.maxInline,
      ird: init.ird,
      ord: init.ord,
      port: init.port,
      address: this.address(init.interface),
      type: init.type,
      multicastLoopback: init.multicastLoopback,
    });
  }

  private listenerView(v: ListenerView): ListenerView {
    return {
      port: v.port,
      pd: v.pd,
      sendCq: v.sendCq,
      recvCq: v.recvCq,
      srq: v.srq,
      maxSendWr: v.maxSendWr,
      maxRecvWr: v.maxRecvWr,
      accepted: [...v.accepted],
      requests: v.requests,
    };
  }

  async listenersList(): Promise<ListenerView[]> {
    return [...this.listeners.values()].map((v) => this.listenerView(v));
  }

  /** Stop listening; QPs it accepted stay. */
  async unlisten(port: number): Promise<void> {
    if (!this.listeners.has(port)) throw new DataplaneError('not-found', `no listener on port ${port}`);
    guard(() => this.rdma.unlisten(port));
    this.listeners.delete(port);
  }
}

export * from './views.ts';
/** Why a driver cannot be opened here (start-up's words), or null: `rdma-graph check` asks before any data plane exists. */
export { driverUnavailable } from '../drivers/open.ts';

export { VERBS_LIBRARY, type VerbsSocket };
/** The daemon's warm-up through its own verbs socket (config verbs.warm-up), before it announces the API. */
export { warmUp, WARM_UP_PROGRAM } from './warm-up.ts';

/**
 * rdma.congestion and interfaces[].congestion as the stack takes them: `auto` is none on memif
 * and pipe interfaces (shared memory between two processes: a dedicated link) and reno on every
 * other driver (a network others share); an interface's own key wins.
 */
export function congestionOptions(config: Config): {
  congestion: CongestionName;
  interfaceCongestion: Record<string, CongestionName>;
} {
  const cc = config.rdma.congestion;
  const interfaceCongestion: Record<string, CongestionName> = {};
  for (const c of config.interfaces)
    interfaceCongestion[c.name] =
      c.congestion ?? (cc !== 'auto' ? cc : c.driver === 'memif' || c.driver === 'pipe' ? 'none' : 'reno');
  return { congestion: cc === 'auto' ? 'none' : cc, interfaceCongestion };
}
