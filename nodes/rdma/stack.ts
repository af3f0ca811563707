/**
 * The RDMA layer on one data-plane thread: registers the RDMA nodes on a graph that already has
 * the L2–L4 nodes, and is the verbs API the Dataplane facade drives (rdma-core's names in
 * brackets): PDs [ibv_alloc_pd], MRs [ibv_reg_mr], CQs [ibv_create_cq, ibv_poll_cq], SRQs
 * [ibv_create_srq, ibv_post_srq_recv], QPs [ibv_create_qp, ibv_modify_qp, ibv_destroy_qp],
 * work requests [ibv_post_send, ibv_post_recv], and connections [rdma_connect, rdma_listen].
 *
 *   udp4-input -> trp-input -> ddp-input -> rdmap-input -> qp-dispatch
 *                           -> cm-input (REQ/ACCEPT/REJECT)
 *   ddp-output (input node) -> trp-output -> udp4-encap -> ip4-rewrite -> <if>-output
 *
 * A QP's number is its local UDP port, allocated from `portRange`. Errors a caller can cause
 * throw a VerbsError whose kind says which (invalid, not-found, state, busy, too-large,
 * resource); nothing a caller passes can break the data path.
 */
import { ccJoinPath, Congestion, CONGESTION_NAMES, type CongestionName, sendLimit } from './congestion.ts';
import type { Graph } from '../../graph/index.ts';
import type { Netstack } from '../netstack.ts';
import { formatIp4, isIp4Multicast, parseIp4 } from '../net/address.ts';
import { DEFAULT_MCAST_PORT, MCAST_GROUPS, MCAST_QPN, MCAST_QPS_PER_GROUP } from './multicast.ts';
import { PortQuarantine } from './port-quarantine.ts';
import { Budget, type BudgetLimits, qpSlots } from './budget.ts';
import { type AcceptDecision, type ConnectRequest, ConnectionManager, type Listener, registerCmInput } from './cm.ts';
import type { SidrRequest } from './sidr.ts';
import { MAX_MRS, type RdmaEvent, RdmaCore, type TrpSettings } from './core.ts';
import { peerWindowsOf } from '../../graph/peer-windows.ts';
import { registerDdpInput } from './ddp-input.ts';
import { registerDdpOutput } from './ddp-output.ts';
import { registerQpDispatch } from './qp-dispatch.ts';
import { MAX_RD_ATOMIC, Qp, QP_STATE_NAMES, type QpStateName, QpState, transitionAllowed } from './qp.ts';
import { randomBelow, randomU32 } from './random.ts';
import { registerRdmapInput } from './rdmap-input.ts';
import { RX_DEFER_PATTERN } from './rx-defer.ts';
import { completeRecv, completeSq, toError } from './transport.ts';
import { registerTrpInput } from './trp-input.ts';
import { registerTrpOutput } from './trp-output.ts';
import { registerUdInput } from './ud-input.ts';
import {
  Access,
  accessFromNames,
  Cq,
  isLocal,
  Mr,
  Mw,
  Pd,
  type SgList,
  Srq,
  VerbsError,
  WcStatus,
  WR_OPCODE_NAMES,
  WrOpcode,
  type WrOpcodeName,
} from './verbs.ts';
import { CM_MAX_PRIVATE_DATA, segmentPayload, TrpOp, udMessageLimit } from './wire.ts';

/** Budgets (budget.ts): maxMrBytes, maxCqEntries, maxWrSlots, maxPds, maxCqs, maxSrqs. */
export interface RdmaOptions extends Partial<BudgetLimits> {
  /** UDP ports QPs get (their QPNs), inclusive; default [20000, 29999]. */
  portRange?: [number, number];
  /** Handles (PD, MR, CQ, SRQ) count up from here + 1 (a worker's own range; default 0). */
  handleBase?: number;
  maxQps?: number;
  maxMrs?: number;
  trp?: Partial<TrpSettings>;
  /** Congestion control of an RC QP's sender (congestion.ts; default none: the embedded stacks' links are dedicated). */
  congestion?: CongestionName;
  /** Per interface name, overriding `congestion` for QPs whose peer is reached through it (chosen at connect). */
  interfaceCongestion?: Record<string, CongestionName>;
  /** Connection manager: REQ resend interval and connect timeout (ms). */
  cmRetryMs?: number;
  cmTimeoutMs?: number;
  /** Half-open connections a listener holds at most (default 64), and how long one may stay so (ms, default 5000). */
  cmBacklog?: number;
  cmHalfOpenMs?: number;
  /** Largest message a work request may carry (bytes, default 2^31). */
  maxMessage?: number;
  /** The UDP port datagrams to multicast groups use (default 19999; outside portRange). */
  multicastPort?: number;
}

export interface Sge {
  mr: Mr;
  offset: number;
  length: number;
}

export interface SendRequest {
  wrId: unknown;
  opcode: WrOpcodeName;
  sg?: Sge[];
  /** Copy the data at post time (its MRs may be reused at once); up to the QP's maxInline. */
  inline?: boolean;
  signaled?: boolean;
  solicited?: boolean;
  /** Write / read / atomic target: the peer's STag and byte offset in its MR. */
  remote?: { stag: number; offset: number };
  imm?: number;
  invalidateStag?: number;
  /** fetch-add: {add}; swap: {swap}; cmp-swap: {compare, swap}; 64-bit. */
  atomic?: { add?: bigint; swap?: bigint; compare?: bigint };
  /**
   * bind-mw: the window, its new STag (the same table index: ibv_inc_rkey's), the remote rights
   * (Access bits) and the tagged offset of the window's first byte; `sg` is the range of the MR
   * (zero or one SGE; none or zero length unbinds a type 1 window). local-invalidate names the
   * STag in `invalidateStag`.
   */
  bind?: { mw: Mw; rkey: number; access: number; address: number };
  /** A UD QP's send: the destination's IPv4 address (dotted or a 32-bit number), QPN and Q_Key. */
  ud?: { address: string | number; qpn: number; qkey: number };
}

export interface RecvRequest {
  wrId: unknown;
  sg?: Sge[];
}

export interface QpInit {
  pd: Pd;
  sendCq: Cq;
  recvCq: Cq;
  srq?: Srq | null;
  /** Default VERBS_DEFAULTS (as every other optional field). */
  maxSendWr?: number;
  maxRecvWr?: number;
  maxSge?: number;
  maxInline?: number;
  ird?: number;
  ord?: number;
  /** A specific local port (QPN); default the next free one in the range. */
  port?: number;
  /** 'rc' (default): reliable connected; 'ud': unreliable datagram (ud-output.ts, ud-input.ts). */
  type?: 'rc' | 'ud';
  /** Our address for this QP (default: any of ours; the route picks the source). */
  address?: string;
  /**
   * A UD QP's datagrams to a multicast group are looped back to this data plane's members too
   * (default true, as a NIC does; false: IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, mckey's -l).
   */
  multicastLoopback?: boolean;
}

export interface QpModify {
  state: QpStateName;
  /** RTR: the peer QP's address and port (manual connect). */
  remote?: { address: string; port: number };
  /** RTR: the peer QP's initial send PSN (its `psn`; ibv_modify_qp's rq_psn). Required for RTR. */
  rqPsn?: number;
  /** RTS: our initial send PSN (ibv_modify_qp's sq_psn); default the random one the QP got at creation. */
  sqPsn?: number;
  ird?: number;
  ord?: number;
  /** RTR: the largest payload of one segment (ibv_modify_qp's path_mtu: 256..4096), at most the link's; the port's active_mtu or more: the whole link. */
  pathMtu?: number;
  /** The initial retransmission timeout in µs (ibv_modify_qp's timeout: 4.096 µs x 2^timeout), within rdma.trp's bounds. */
  ackTimeoutUs?: number;
  /** Retransmissions of one segment before the QP fails (ibv_modify_qp's retry_cnt, 0..7); default rdma.trp.max-retries. */
  retryCount?: number;
  /** A UD QP's Q_Key (any state); datagrams with another are dropped. */
  qkey?: number;
}

export interface QpInfo {
  qpn: number;
  /** rc: reliable connected; ud: unreliable datagram. */
  type: 'rc' | 'ud';
  /** A UD QP's Q_Key (null for RC). */
  qkey: number | null;
  state: QpStateName;
  /** The QP's initial send PSN: random; the peer's manual connect needs it. */
  psn: number;
  local: { address: string; port: number };
  remote: { address: string; port: number } | null;
  ird: number;
  ord: number;
  maxSendWr: number;
  maxRecvWr: number;
  maxSge: number;
  maxInline: number;
  /** Payload bytes of one untagged DDP segment (Send): the link MTU less IPv4, UDP, TRP and DDP headers. */
  segmentSize: number;
  sqOutstanding: number;
  rqPosted: number;
  srq: number | null;
  counters: {
    txPackets: number;
    rxPackets: number;
    txBytes: number;
    rxBytes: number;
    retransmits: number;
    fastRetransmits: number;
    timeouts: number;
    /** Timeouts found spurious (an ACK showed the segments were arriving); PROBEs sent by timeouts. */
    spuriousTimeouts: number;
    probes: number;
    duplicates: number;
  };
  rtt: { srttUs: number; rttvarUs: number; rtoUs: number };
  /** The sender's congestion control (congestion.ts). */
  congestion: {
    algorithm: CongestionName;
    /** Segments: the congestion window (the TRP window under `none`) and the slow-start threshold. */
    cwnd: number;
    ssthresh: number;
    /** DCTCP's estimate of the fraction of segments marked (1 until measured; reno and none: 0). */
    alpha: number;
    /** Segments the peer echoed as CE-marked; CE-marked data packets we received (and echo). */
    ceMarks: number;
    ceReceived: number;
    /** Losses seen (fast retransmissions, timeouts); window reductions for losses and for ECN marks. */
    losses: number;
    lossReductions: number;
    ecnReductions: number;
    /** Window reductions for a queue building on the path (congestion.ts's delay component). */
    delayReductions: number;
    /** The smoothed RTT (µs) when a full queue on the path last dropped a segment; 0: none seen (no delay component yet). */
    fullQueueRttUs: number;
    /** Slow starts ended by HyStart++ (RFC 9406: the round's smallest RTT rose), not by a loss. */
    hystartExits: number;
  };
}

/**
 * The verbs' fixed limits, once: the checks below, `deviceAttr()` (ibv_query_device's figures)
 * and the REST schemas (through the facade) all read them from here.
 */
export const VERBS_LIMITS = Object.freeze({
  /** Work requests of a send queue, a receive queue or an SRQ. */
  maxWr: 16384,
  maxSge: 32,
  maxInline: 4096,
  /** Entries of a CQ (rdma.max-cq-entries may lower it). */
  maxCqe: 1 << 20,
  /** Bytes of one MR the data plane allocates (rdma.max-mr-bytes bounds all together). */
  maxMrLength: 2 ** 31,
  /** IRD and ORD: RDMA READs / atomics in flight per QP, each way. */
  maxRdAtomic: MAX_RD_ATOMIC,
  /** Bytes of private data a connection request, accept or reject carries (the CM's wire limit). */
  maxPrivateData: CM_MAX_PRIVATE_DATA,
});

/**
 * What a verb takes when the caller leaves a value out: the embedding API, REST and rdmactl use
 * these same defaults.
 */
export const VERBS_DEFAULTS = Object.freeze({
  maxSendWr: 256,
  /** Without an SRQ (with one the QP has no receive queue of its own). */
  maxRecvWr: 256,
  maxSge: 4,
  maxInline: 64,
  ird: 16,
  ord: 16,
  access: Object.freeze(['local-write']) as readonly string[],
  srqMaxSge: 4,
});

const LIMIT_WR = VERBS_LIMITS.maxWr;
const LIMIT_SGE = VERBS_LIMITS.maxSge;
const LIMIT_INLINE = VERBS_LIMITS.maxInline;

/** What `ibv_query_device` would say of this device: its limits and capabilities. */
export interface DeviceAttr {
  maxQp: number;
  maxQpWr: number;
  maxSge: number;
  maxInline: number;
  maxCq: number;
  maxCqe: number;
  maxMr: number;
  maxMrSize: number;
  maxPd: number;
  maxSrq: number;
  maxSrqWr: number;
  maxSrqSge: number;
  maxQpRdAtom: number;
  maxQpInitRdAtom: number;
  /** RDMA READs and atomics in flight as a responder, all QPs together (maxQp x maxQpRdAtom, at most 2^31 - 1). */
  maxResRdAtom: number;
  /** SGEs of an RDMA READ. */
  maxSgeRd: number;
  /** Bytes of one message. */
  maxMsgSz: number;
  /** Page sizes an MR may be made of: 4 KiB (bit 12). */
  pageSizeCap: number;
  /** Atomics are carried out by the responder's data plane, one at a time: atomic w.r.t. this device (IBV_ATOMIC_HCA). */
  atomicCap: 'hca';
  /** Bits of an STag that are its key (the rest is the MR table index). */
  stagKeyBits: number;
  portRange: [number, number];
  /** The TRP window (packets in flight per QP). */
  window: number;
  /** Multicast groups with members, QPs attached to one group, attachments in all (multicast.ts). */
  maxMcastGrp: number;
  maxMcastQpAttach: number;
  maxTotalMcastQpAttach: number;
  /** The UDP port datagrams to multicast groups go to. */
  multicastPort: number;
}

const LIMIT_CQE = VERBS_LIMITS.maxCqe;

function int(v: unknown, lo: number, hi: number, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi)
    throw new VerbsError('invalid', `${what} must be an integer in ${lo}..${hi}, got ${String(v)}`);
  return v;
}

/** int() for an SGE's field, its name built only when it is wrong (every post reads two). */
function sgInt(v: unknown, what: string, i: number, field: 'offset' | 'length'): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 2 ** 32)
    int(v, 0, 2 ** 32, `${what}: sg[${i}].${field}`);
  return v as number;
}

export class Rdma {
  readonly graph: Graph;
  readonly net: Netstack;
  readonly core: RdmaCore;
  readonly cm: ConnectionManager;
  private readonly portLo: number;
  private readonly portHi: number;
  /** Ports destroyed QPs gave up, not drawn again soon (port-quarantine.ts). */
  private readonly retired: PortQuarantine;
  private readonly maxMessage: number;
  private handles = 0;
  readonly pds = new Map<number, Pd>();
  readonly mrsByHandle = new Map<number, Mr>();
  readonly mwsByHandle = new Map<number, Mw>();
  readonly cqs = new Map<number, Cq>();
  readonly srqs = new Map<number, Srq>();
  readonly qpsByQpn = new Map<number, Qp>();
  /** What the objects together may cost (the start-up file's rdma.max-*). */
  readonly budget: Budget;
  private readonly mrKeys: Uint32Array;
  private readonly cmBacklog: number;
  private mrCursor = 1;
  private readonly cmRetryNs: number;
  private readonly cmTimeoutNs: number;
  /** Congestion.* by interface name (rdma.congestion per interface), else core.congestion. */
  private readonly ccByInterface = new Map<string, number>();

  constructor(graph: Graph, net: Netstack, opts: RdmaOptions = {}) {
    this.graph = graph;
    this.net = net;
    const [lo, hi] = opts.portRange ?? [20000, 29999];
    if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo >= 1 && hi <= 65535 && lo <= hi))
      throw new RangeError(`rdma port-range must be two ports lo <= hi in 1..65535, got [${lo}, ${hi}]`);
    this.portLo = lo;
    this.retired = new PortQuarantine(lo, hi);
    this.portHi = hi;
    this.handles = opts.handleBase ?? 0;
    const maxQps = opts.maxQps ?? 1024;
    const maxMrs = opts.maxMrs ?? 4096;
    if (!(Number.isInteger(maxMrs) && maxMrs >= 1 && maxMrs <= MAX_MRS))
      throw new RangeError(`rdma max-mrs must be 1..${MAX_MRS}, got ${maxMrs}`);
    const t = opts.trp ?? {};
    const rtoMinMs = t.rtoMinMs ?? 5;
    const trp: TrpSettings = {
      window: t.window ?? 512,
      rtoMinMs,
      rtoMaxMs: t.rtoMaxMs ?? 200,
      rtoInitMs: t.rtoInitMs ?? Math.max(rtoMinMs, 10),
      maxRetries: t.maxRetries ?? 7,
      ackDelayUs: t.ackDelayUs ?? 100,
    };
    if (!(Number.isInteger(trp.window) && trp.window >= 1 && trp.window <= 32768))
      throw new RangeError(`rdma trp window must be 1..32768, got ${trp.window}`);
    if (!(trp.rtoMinMs > 0 && trp.rtoMaxMs >= trp.rtoMinMs))
      throw new RangeError(`rdma trp: need 0 < rto-min-ms <= rto-max-ms, got ${trp.rtoMinMs} and ${trp.rtoMaxMs}`);
    if (!(Number.isInteger(trp.maxRetries) && trp.maxRetries >= 0))
      throw new RangeError(`rdma trp max-retries must be an integer >= 0, got ${trp.maxRetries}`);
    if (!(trp.ackDelayUs >= 0 && trp.ackDelayUs * 1e-3 < trp.rtoMinMs))
      throw new RangeError(
        `rdma trp ack-delay-us must be >= 0 and below rto-min-ms (${trp.rtoMinMs} ms), got ${trp.ackDelayUs}`,
      );
    const ccIndex = (v: unknown, what: string): number => {
      const k = (CONGESTION_NAMES as readonly unknown[]).indexOf(v);
      if (k < 0)
        throw new RangeError(`${what} must be one of ${CONGESTION_NAMES.join(', ')}, got ${JSON.stringify(v)}`);
      return k;
    };
    const mcPort = opts.multicastPort ?? DEFAULT_MCAST_PORT;
    if (!(Number.isInteger(mcPort) && mcPort >= 1 && mcPort <= 65535 && (mcPort < lo || mcPort > hi)))
      throw new RangeError(
        `rdma multicast-port must be a port in 1..65535 outside port-range [${lo}, ${hi}], got ${mcPort}`,
      );
    this.core = new RdmaCore(graph, net, maxQps, maxMrs, trp, mcPort);
    // A memif server may leave a Write's payload in the client's memory until DDP places it.
    peerWindowsOf(graph.pool).setPattern(RX_DEFER_PATTERN);
    this.core.congestion = ccIndex(opts.congestion ?? 'none', 'rdma congestion');
    for (const [name, v] of Object.entries(opts.interfaceCongestion ?? {}))
      this.ccByInterface.set(name, ccIndex(v, `rdma congestion of interface ${name}`));
    this.mrKeys = new Uint32Array(maxMrs + 1);
    this.maxMessage = opts.maxMessage ?? 2 ** 31;
    this.budget = new Budget(opts);
    this.cmRetryNs = (opts.cmRetryMs ?? 100) * 1e6;
    this.cmTimeoutNs = (opts.cmTimeoutMs ?? 5000) * 1e6;
    this.cm = new ConnectionManager(this.core);
    this.cmBacklog = opts.cmBacklog ?? 64;
    if (!(Number.isInteger(this.cmBacklog) && this.cmBacklog >= 1))
      throw new RangeError(`rdma cm-backlog must be an integer >= 1, got ${this.cmBacklog}`);
    this.cm.halfOpenTimeoutNs = (opts.cmHalfOpenMs ?? 5000) * 1e6;
    this.cm.hooks = {
      established: (qp, addr, port, ird, ord, peerIsn) => this.established(qp, addr, port, ird, ord, peerIsn),
      failed: (qp, reason) => {
        if (qp.state !== QpState.ERROR) toError(this.core, qp, reason);
        this.core.event({ type: 'connect-failed', qpn: qp.qpn, reason });
      },
      reap: (qp, reason) => {
        this.core.event({ type: 'connect-failed', qpn: qp.qpn, reason });
        if (!qp.destroyed) this.destroyQp(qp);
      },
    };
    // Registered after their next nodes (udp4-encap exists already).
    registerQpDispatch(graph, this.core);
    registerRdmapInput(graph, this.core);
    registerDdpInput(graph, this.core);
    registerCmInput(graph, this.cm);
    // A REQ to a port nobody listens on is answered with REJECT (reason "no listener").
    this.net.udp.punt('cm-input');
    registerUdInput(graph, this.core);
    registerTrpInput(graph, this.core);
    registerTrpOutput(graph, this.core);
    registerDdpOutput(graph, this.core);
  }

  set onEvent(fn: ((e: RdmaEvent) => void) | null) {
    this.core.onEvent = fn;
  }

  private handle(): number {
    return ++this.handles;
  }

  // ------------------------------------------------------------------ PD

  createPd(): Pd {
    this.budget.check('a protection domain', { pds: 1 });
    const pd = new Pd(this.handle());
    this.budget.charge(pd, { pds: 1 });
    this.pds.set(pd.handle, pd);
    return pd;
  }

  destroyPd(pd: Pd): void {
    if (pd.destroyed) throw new VerbsError('not-found', `pd ${pd.handle} is already destroyed`);
    if (pd.users > 0) throw new VerbsError('busy', `pd ${pd.handle} is in use by ${pd.users} MR/QP/SRQ`);
    pd.destroyed = true;
    this.pds.delete(pd.handle);
    this.budget.release(pd);
  }

  // ------------------------------------------------------------------ MR

  /** Register memory (a length: the data plane allocates it; or the application's bytes). */
  /**
   * `base`: the tagged offset of the MR's byte 0 (default 0: peers address it by offsets); a verbs
   * program's MR has its virtual address there, since its peers send remote_addr.
   */
  regMr(pd: Pd, memory: number | Uint8Array, access: number | readonly string[], base = 0): Mr {
    if (pd.destroyed) throw new VerbsError('not-found', `pd ${pd.handle} is destroyed`);
    if (
      !Number.isSafeInteger(base) ||
      base < 0 ||
      base + (typeof memory === 'number' ? memory : memory.byteLength) > 2 ** 53
    )
      throw new VerbsError('invalid', `mr base must be an integer in 0..2^53 - length, got ${base}`);
    const acc = typeof access === 'number' ? access : accessFromNames(access);
    if (typeof memory === 'number') {
      const max = VERBS_LIMITS.maxMrLength;
      if (!Number.isInteger(memory) || memory < 0 || memory > max)
        throw new VerbsError(
          memory > max ? 'too-large' : 'invalid',
          `mr length must be an integer in 0..2^31, got ${memory}`,
        );
    } else if (memory.byteLength > 2 ** 32 - 1) throw new VerbsError('too-large', 'mr larger than 4 GiB');
    const charge = typeof memory === 'number' ? { 'mr-bytes': memory } : {};
    // The length, never the bytes: a template string of a Uint8Array joins every byte (issue 26).
    const length = typeof memory === 'number' ? memory : memory.byteLength;
    this.budget.check(`mr of ${length} bytes`, charge);
    const stag = this.freeStag();
    // A plain ArrayBuffer: V8 copies between two of them with memmove, and between a
    // SharedArrayBuffer and anything word by word (relaxed atomics), about half as fast: every
    // segment's payload is copied from (gather) or into (place) this memory.
    const bytes = typeof memory === 'number' ? new Uint8Array(memory) : memory;
    const mr = new Mr(this.handle(), pd, stag, bytes, acc, base);
    this.core.mrs[stag >>> this.core.stagKeyBits] = mr;
    this.mrsByHandle.set(mr.handle, mr);
    this.budget.charge(mr, charge);
    pd.users++;
    return mr;
  }

  /** A free STag table slot with a random key, never the slot's previous one (a stale STag is dead). */
  private freeStag(): number {
    const mrs = this.core.mrs;
    let ix = -1;
    for (let k = 0; k < mrs.length - 1; k++) {
      const c = ((this.mrCursor + k - 1) % (mrs.length - 1)) + 1;
      if (mrs[c] === null) {
        ix = c;
        break;
      }
    }
    if (ix < 0) throw new VerbsError('resource', `no free memory region or window slot (max-mrs ${mrs.length - 1})`);
    this.mrCursor = ix + 1;
    const span = 2 ** this.core.stagKeyBits;
    const key = (this.mrKeys[ix] = (this.mrKeys[ix] + 1 + randomBelow(span - 1)) % span);
    return (ix * span + key) >>> 0;
  }

  // ------------------------------------------------------------------ memory windows

  /**
   * A memory window of `type` (1 or 2) in `pd`: an STag table slot of its own (windows and MRs
   * share rdma.max-mrs), unbound until a bind work request (windows.ts).
   */
  allocMw(pd: Pd, type: number): Mw {
    if (pd.destroyed) throw new VerbsError('not-found', `pd ${pd.handle} is destroyed`);
    if (type !== 1 && type !== 2) throw new VerbsError('invalid', `memory window type must be 1 or 2, got ${type}`);
    const stag = this.freeStag();
    const mw = new Mw(this.handle(), pd, type, stag >>> this.core.stagKeyBits, stag);
    // Its slot holds an invalid placeholder until the first bind (regMr must not take it).
    const slot = new Mr(mw.handle, pd, stag, new Uint8Array(0), 0);
    slot.valid = false;
    slot.mw = mw;
    this.core.mrs[mw.index] = slot;
    this.mwsByHandle.set(mw.handle, mw);
    pd.users++;
    return mw;
  }

  /** Deallocate a window: its binding goes at once (a peer's access through it fails from here). */
  deallocMw(mw: Mw): void {
    if (mw.destroyed || this.mwsByHandle.get(mw.handle) !== mw)
      throw new VerbsError('not-found', `memory window ${mw.handle} is not allocated`);
    const slot = this.core.mrs[mw.index];
    if (slot !== null && slot.mw === mw) {
      if (slot.valid) RdmaCore.invalidate(slot);
      this.core.mrs[mw.index] = null;
    }
    mw.destroyed = true;
    this.mwsByHandle.delete(mw.handle);
    mw.pd.users--;
  }

  deregMr(mr: Mr): void {
    if (!this.mrsByHandle.has(mr.handle)) throw new VerbsError('not-found', `mr ${mr.handle} is not registered`);
    if (mr.windows > 0)
      throw new VerbsError(
        'busy',
        `mr ${mr.handle} has ${mr.windows} memory window(s) bound: deallocate or invalidate them first`,
      );
    mr.valid = false;
    // Segments sent from it in place and still queued keep its memory until they are freed.
    if (mr.extId !== 0) {
      this.graph.pool.ext.retire(mr.extId);
      mr.extId = 0;
    }
    this.core.mrs[mr.stag >>> this.core.stagKeyBits] = null;
    this.mrsByHandle.delete(mr.handle);
    this.budget.release(mr);
    mr.pd.users--;
  }

  // ------------------------------------------------------------------ CQ

  /** The device's limits (`show device`, ibv_devinfo -v's figures). */
  deviceAttr(): DeviceAttr {
    const l = this.budget.limits;
    return {
      maxQp: this.core.qps.length,
      maxQpWr: LIMIT_WR,
      maxSge: LIMIT_SGE,
      maxInline: LIMIT_INLINE,
      maxCq: l.maxCqs,
      maxCqe: Math.min(LIMIT_CQE, l.maxCqEntries),
      maxMr: this.core.mrs.length - 1,
      // One MR: what regMr and REG_MR take (rdma.max-mr-bytes bounds the MRs the data plane allocates together).
      maxMrSize: VERBS_LIMITS.maxMrLength,
      maxPd: l.maxPds,
      maxSrq: l.maxSrqs,
      maxSrqWr: LIMIT_WR,
      maxSrqSge: LIMIT_SGE,
      maxQpRdAtom: MAX_RD_ATOMIC,
      maxQpInitRdAtom: MAX_RD_ATOMIC,
      maxResRdAtom: Math.min(2 ** 31 - 1, this.core.qps.length * MAX_RD_ATOMIC),
      maxSgeRd: LIMIT_SGE,
      maxMsgSz: this.maxMessage,
      pageSizeCap: 4096,
      atomicCap: 'hca',
      stagKeyBits: this.core.stagKeyBits,
      portRange: [this.portLo, this.portHi],
      window: this.core.window,
      maxMcastGrp: MCAST_GROUPS,
      maxMcastQpAttach: MCAST_QPS_PER_GROUP,
      maxTotalMcastQpAttach: MCAST_GROUPS * MCAST_QPS_PER_GROUP,
      multicastPort: this.core.mcast.port,
    };
  }

  createCq(depth: number): Cq {
    int(depth, 1, LIMIT_CQE, 'cq depth');
    this.budget.check(`cq depth ${depth}`, { cqs: 1, 'cq-entries': depth });
    const cq = new Cq(this.handle(), depth);
    this.budget.charge(cq, { cqs: 1, 'cq-entries': depth });
    this.cqs.set(cq.handle, cq);
    return cq;
  }

  destroyCq(cq: Cq): void {
    if (cq.destroyed) throw new VerbsError('not-found', `cq ${cq.handle} is already destroyed`);
    if (cq.users > 0) throw new VerbsError('busy', `cq ${cq.handle} is in use by ${cq.users} QP(s)`);
    cq.destroyed = true;
    this.cqs.delete(cq.handle);
    this.budget.release(cq);
  }

  // ------------------------------------------------------------------ SRQ

  createSrq(pd: Pd, maxWr: number, maxSge: number = VERBS_DEFAULTS.srqMaxSge): Srq {
    if (pd.destroyed) throw new VerbsError('not-found', `pd ${pd.handle} is destroyed`);
    int(maxWr, 1, LIMIT_WR, 'srq maxWr');
    int(maxSge, 1, LIMIT_SGE, 'srq maxSge');
    this.budget.check(`srq maxWr ${maxWr}`, { srqs: 1, 'wr-slots': maxWr });
    const srq = new Srq(this.handle(), pd, maxWr, maxSge);
    this.budget.charge(srq, { srqs: 1, 'wr-slots': maxWr });
    srq.onLimit = (s) =>
      this.core.event({
        type: 'srq-limit',
        srq: s.handle,
        reason: `fewer than the limit of receives left (${s.length})`,
      });
    this.srqs.set(srq.handle, srq);
    pd.users++;
    return srq;
  }

  /** Arm the SRQ limit event: it fires once when fewer than `limit` receives remain. */
  modifySrq(srq: Srq, limit: number): void {
    int(limit, 0, srq.maxWr, 'srq limit');
    srq.limit = limit;
  }

  postSrqRecv(srq: Srq, req: RecvRequest): void {
    if (srq.destroyed) throw new VerbsError('not-found', `srq ${srq.handle} is destroyed`);
    const wr = srq.slot();
    if (wr === null) throw new VerbsError('resource', `srq ${srq.handle} is full (maxWr ${srq.maxWr})`);
    try {
      this.fillSg(wr.sg, req.sg ?? [], srq.pd, srq.maxSge, true, 'srq recv');
    } catch (e) {
      srq.release(wr);
      throw e;
    }
    wr.wrId = req.wrId;
    srq.push(wr);
  }

  destroySrq(srq: Srq): void {
    if (srq.destroyed) throw new VerbsError('not-found', `srq ${srq.handle} is already destroyed`);
    if (srq.users > 0) throw new VerbsError('busy', `srq ${srq.handle} is in use by ${srq.users} QP(s)`);
    srq.destroyed = true;
    for (const wr of srq.drain()) srq.release(wr);
    this.srqs.delete(srq.handle);
    this.budget.release(srq);
    srq.pd.users--;
  }

  // ------------------------------------------------------------------ QP

  createQp(init: QpInit): Qp {
    const { pd, sendCq, recvCq } = init;
    const srq = init.srq ?? null;
    if (pd.destroyed) throw new VerbsError('not-found', `pd ${pd.handle} is destroyed`);
    if (sendCq.destroyed || recvCq.destroyed) throw new VerbsError('not-found', 'completion queue is destroyed');
    if (srq !== null && (srq.destroyed || srq.pd !== pd))
      throw new VerbsError('invalid', `srq ${srq.handle} is destroyed or in another PD`);
    const cfg = {
      maxSendWr: int(init.maxSendWr ?? VERBS_DEFAULTS.maxSendWr, 1, LIMIT_WR, 'maxSendWr'),
      maxRecvWr: srq ? 0 : int(init.maxRecvWr ?? VERBS_DEFAULTS.maxRecvWr, 1, LIMIT_WR, 'maxRecvWr'),
      maxSge: int(init.maxSge ?? VERBS_DEFAULTS.maxSge, 1, LIMIT_SGE, 'maxSge'),
      maxInline: int(init.maxInline ?? VERBS_DEFAULTS.maxInline, 0, LIMIT_INLINE, 'maxInline'),
      ird: int(init.ird ?? VERBS_DEFAULTS.ird, 1, MAX_RD_ATOMIC, 'ird'),
      ord: int(init.ord ?? VERBS_DEFAULTS.ord, 1, MAX_RD_ATOMIC, 'ord'),
      window: this.core.window + 1,
      ud: init.type === 'ud',
      sendWindow: this.core.window,
      mcastLoop: init.multicastLoopback !== false,
    };
    if (init.multicastLoopback !== undefined && typeof init.multicastLoopback !== 'boolean')
      throw new VerbsError('invalid', `multicastLoopback must be true or false, got ${String(init.multicastLoopback)}`);
    if (init.type !== undefined && init.type !== 'rc' && init.type !== 'ud')
      throw new VerbsError('invalid', `qp type must be rc or ud, got ${JSON.stringify(init.type)}`);
    const slots = { 'wr-slots': qpSlots(cfg.maxSendWr, cfg.maxRecvWr, cfg.maxInline) };
    this.budget.check(
      `qp of maxSendWr ${cfg.maxSendWr}, maxRecvWr ${cfg.maxRecvWr}, maxInline ${cfg.maxInline}`,
      slots,
    );
    const index = this.core.qps.indexOf(null);
    if (index < 0) throw new VerbsError('resource', `no free QP (max-qps ${this.core.qps.length})`);
    const port =
      init.port === undefined
        ? this.freePort()
        : int(init.port, this.portLo, this.portHi, `qp port (port-range ${this.portLo}..${this.portHi})`);
    if (this.core.qpByPort[port] >= 0) throw new VerbsError('busy', `port ${port} already has a QP`);
    const local = init.address === undefined ? 0 : this.parseAddr(init.address, 'qp address');
    try {
      this.net.udp.bind(port, 'trp-input', init.address);
    } catch (e) {
      throw new VerbsError('busy', (e as Error).message);
    }
    const qp = new Qp(index, port, pd, sendCq, recvCq, srq, cfg, this.core.rtoInitNs);
    qp.localAddr = local;
    qp.isn = randomU32();
    this.core.qps[index] = qp;
    this.core.qpByPort[port] = index;
    this.qpsByQpn.set(port, qp);
    this.budget.charge(qp, slots);
    pd.users++;
    // A CQ counts the QPs that use it, once each (send and receive CQ may be the same).
    sendCq.users++;
    if (recvCq !== sendCq) recvCq.users++;
    if (srq) srq.users++;
    return qp;
  }

  private parseAddr(s: string, where: string): number {
    try {
      return parseIp4(s, where);
    } catch (e) {
      throw new VerbsError('invalid', (e as Error).message);
    }
  }

  /** A free port of the range, from a random place in it (QPNs are not handed out in order: a spoofer must find them). */
  private freePort(): number {
    const span = this.portHi - this.portLo + 1;
    const from = randomBelow(span);
    // A port a destroyed QP gave up recently is drawn only when no other is free.
    for (const fresh of [true, false]) {
      for (let k = 0; k < span; k++) {
        const p = this.portLo + ((from + k) % span);
        if (fresh && this.retired.has(p)) continue;
        if (this.core.qpByPort[p] < 0 && this.net.udp.lookup(0, p) < 0) return p;
      }
    }
    throw new VerbsError('resource', `no free port in the QP port range ${this.portLo}..${this.portHi}`);
  }

  qp(qpn: number): Qp {
    const qp = this.qpsByQpn.get(qpn);
    if (!qp) throw new VerbsError('not-found', `no QP ${qpn}`);
    return qp;
  }

  modifyQp(qp: Qp, m: QpModify): void {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is destroyed`);
    const to = (QP_STATE_NAMES as readonly string[]).indexOf(m.state);
    if (to < 0)
      throw new VerbsError('invalid', `qp state must be one of ${QP_STATE_NAMES.join(', ')}, got "${m.state}"`);
    if (!transitionAllowed(qp.state, to))
      throw new VerbsError('state', `qp ${qp.qpn}: cannot go from ${qp.stateName} to ${m.state}`);
    if (m.ird !== undefined) qp.ird = int(m.ird, 1, qp.cfg.ird, 'ird');
    if (m.ord !== undefined) qp.ord = int(m.ord, 1, qp.cfg.ord, 'ord');
    if (m.qkey !== undefined) {
      if (!qp.cfg.ud) throw new VerbsError('invalid', `qp ${qp.qpn}: a Q_Key is for UD QPs`);
      qp.qkey = int(m.qkey, 0, 0xffffffff, 'qkey');
    }
    if (qp.cfg.ud) {
      // No peer, no sequence: the states only say what the QP may do.
      if (to === QpState.ERROR) {
        toError(this.core, qp, null); // the user's own doing: no qp-error (as a destroy)
        return;
      }
      if (to === QpState.RESET) {
        if (qp.state !== QpState.ERROR && qp.state !== QpState.RESET) toError(this.core, qp, null);
        this.resetQp(qp);
        return;
      }
      qp.state = to;
      if (to === QpState.RTS) this.core.schedule(qp);
      return;
    }
    if (to === QpState.RTR) {
      if (!m.remote) throw new VerbsError('invalid', `qp ${qp.qpn}: RTR needs remote {address, port}`);
      const addr = this.parseAddr(m.remote.address, 'remote address');
      const port = int(m.remote.port, 1, 65535, 'remote port');
      if (m.rqPsn === undefined)
        throw new VerbsError('invalid', `qp ${qp.qpn}: RTR needs rqPsn, the peer QP's initial PSN (its psn)`);
      const rqPsn = int(m.rqPsn, 0, 0xffffffff, 'rqPsn');
      this.setPeer(qp, addr, port);
      qp.startRecv(rqPsn);
      if (m.pathMtu !== undefined) {
        const mtu = int(m.pathMtu, 256, 4096, 'pathMtu');
        if ((mtu & (mtu - 1)) !== 0)
          throw new VerbsError('invalid', `pathMtu must be 256, 512, 1024, 2048 or 4096, got ${mtu}`);
        // The largest InfiniBand MTU the link holds is the port's active_mtu, what a program
        // asks for when it means "the path's": its segments then take the whole link (1444
        // bytes on 1500, not 1024). A smaller one (a path the program knows narrower) is kept.
        if (mtu < udMessageLimit(this.net.interfaces.mtu[qp.egress])) {
          qp.mtuUntagged = Math.min(qp.mtuUntagged, mtu);
          qp.mtuTagged = Math.min(qp.mtuTagged, mtu);
        }
      }
    }
    if (m.ackTimeoutUs !== undefined) {
      const ns = int(m.ackTimeoutUs, 1, 2 ** 40, 'ackTimeoutUs') * 1e3;
      qp.rtoNs = Math.min(this.core.rtoMaxNs, Math.max(this.core.rtoMinNs, ns));
    }
    if (m.retryCount !== undefined) qp.maxRetries = int(m.retryCount, 0, 7, 'retryCount');
    if (to === QpState.RTS && qp.state === QpState.RTR) {
      if (m.sqPsn !== undefined) qp.isn = int(m.sqPsn, 0, 0xffffffff, 'sqPsn');
      qp.startSend(qp.isn);
    }
    if (to === QpState.ERROR) {
      this.cm.cancel(qp, `qp ${qp.qpn} moved to ERROR`);
      this.lastAck(qp);
      toError(this.core, qp, null); // the user's own doing: no qp-error (as a destroy)
      return;
    }
    if (to === QpState.RESET) {
      this.cm.cancel(qp, `qp ${qp.qpn} reset`);
      this.lastAck(qp);
      if (qp.state !== QpState.ERROR && qp.state !== QpState.RESET) toError(this.core, qp, null);
      this.resetQp(qp);
      return;
    }
    qp.state = to;
    if (to === QpState.RTS) this.core.schedule(qp);
  }

  private setPeer(qp: Qp, addr: number, port: number): void {
    const ifs = this.net.interfaces;
    const ix = ifs.routeFrom(qp.localAddr, addr);
    if (ix === 0) throw new VerbsError('invalid', `qp ${qp.qpn}: no route to ${formatIp4(addr)}`);
    // The segment size of this path: the egress interface's MTU, whatever the buffer size (a
    // segment longer than a buffer is a chain, ddp-output's allocSegment); a link that sets its
    // own (a memif link to another rdma-graph data plane) read as it is now.
    const mtu = ifs.refresh(ix);
    qp.mtuUntagged = Math.max(1, segmentPayload(mtu, false));
    qp.mtuTagged = Math.max(1, segmentPayload(mtu, true));
    qp.remoteAddr = addr;
    qp.remotePort = port;
    qp.egress = ix;
    // Congestion control: the egress interface's choice, else the stack's (taken at startSend).
    qp.ccChoice = this.ccByInterface.get(ifs.names[ix]) ?? this.core.congestion;
    ccJoinPath(this.core.qps, qp);
    qp.window();
  }

  private resetQp(qp: Qp): void {
    if (qp.rtoTimer >= 0) this.graph.stopTimer(qp.rtoTimer);
    const fresh = new Qp(qp.index, qp.qpn, qp.pd, qp.sendCq, qp.recvCq, qp.srq, qp.cfg, this.core.rtoInitNs);
    fresh.localAddr = qp.localAddr;
    // Keep the object identity for callers: copy the fresh state over, with a new initial PSN.
    Object.assign(qp, fresh);
    qp.isn = randomU32();
  }

  private established(qp: Qp, addr: number, port: number, ird: number, ord: number, peerIsn: number): void {
    this.setPeer(qp, addr, port);
    qp.startSend(qp.isn);
    qp.startRecv(peerIsn);
    qp.ird = Math.min(ird, MAX_RD_ATOMIC);
    qp.ord = Math.min(ord, MAX_RD_ATOMIC);
    qp.state = QpState.RTS;
    this.core.schedule(qp);
    this.core.event({ type: 'qp-established', qpn: qp.qpn });
  }

  /** Active connect through the peer's listener (rdma_connect): resolves in RTS. */
  connect(
    qp: Qp,
    address: string,
    port: number,
    opts: { privateData?: Uint8Array; timeoutMs?: number; retryMs?: number } = {},
  ): Promise<{ privateData: Uint8Array }> {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is destroyed`);
    if (qp.state === QpState.RESET) qp.state = QpState.INIT;
    if (qp.state !== QpState.INIT)
      throw new VerbsError('state', `qp ${qp.qpn}: connect needs a QP in INIT, it is ${qp.stateName}`);
    if (this.cm.pending.has(qp.index)) throw new VerbsError('state', `qp ${qp.qpn} is already connecting`);
    const pd = opts.privateData ?? new Uint8Array(0);
    if (pd.length > VERBS_LIMITS.maxPrivateData)
      throw new VerbsError(
        'too-large',
        `private data is at most ${VERBS_LIMITS.maxPrivateData} bytes, got ${pd.length}`,
      );
    const addr = this.parseAddr(address, 'connect address');
    int(port, 1, 65535, 'connect port');
    this.setPeer(qp, addr, port);
    qp.cmRole = 'active';
    const now = this.graph.clock.nowNs();
    return new Promise((resolve, reject) => {
      this.cm.connect(
        {
          qp,
          startNs: now,
          timeoutNs: opts.timeoutMs !== undefined ? opts.timeoutMs * 1e6 : this.cmTimeoutNs,
          retryNs: opts.retryMs !== undefined ? opts.retryMs * 1e6 : this.cmRetryNs,
          req: ConnectionManager.message(TrpOp.REQ, qp.ird, qp.ord, pd, qp.isn, 0),
          resolve,
          reject,
        },
        addr,
        port,
      );
    });
  }

  /**
   * Listen for connection requests on `port` (rdma_listen); `accept` decides per request.
   * `backlog`: half-open connections held at most (default rdma cm-backlog); `onReap`: told
   * when a connection it accepted was destroyed for staying half-open. `sidr`: a listener for
   * datagram service requests instead (nodes/rdma/sidr.ts: `accept` is never called; REQs are
   * answered as to a port nobody listens on), told each new one: true holds it for `sidrAnswer`.
   */
  listen(
    port: number,
    accept: (req: ConnectRequest) => AcceptDecision,
    opts: { backlog?: number; onReap?: (qp: Qp, reason: string) => void; sidr?: (req: SidrRequest) => boolean } = {},
  ): void {
    int(port, 1, 65535, 'listen port');
    const backlog = opts.backlog === undefined ? this.cmBacklog : int(opts.backlog, 1, 65536, 'listen backlog');
    if (this.cm.listeners.has(port)) throw new VerbsError('busy', `already listening on port ${port}`);
    if (this.core.qpByPort[port] >= 0) throw new VerbsError('busy', `port ${port} has a QP`);
    try {
      this.net.udp.bind(port, 'cm-input');
    } catch (e) {
      throw new VerbsError('busy', (e as Error).message);
    }
    const l: Listener = { port, accept, backlog, halfOpen: new Set(), onReap: opts.onReap };
    if (opts.sidr !== undefined) l.sidr = { request: opts.sidr, held: new Map(), answered: new Map() };
    this.cm.listeners.set(port, l);
    this.cm.closedAt.delete(port);
  }

  unlisten(port: number): void {
    if (!this.cm.listeners.delete(port)) throw new VerbsError('not-found', `not listening on port ${port}`);
    this.net.udp.unbind(port);
    this.cm.listenerClosed(port);
  }

  /** Send FIN and move to ERROR (rdma_disconnect); completions are flushed. */
  disconnect(qp: Qp): void {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is destroyed`);
    this.sendFin(qp);
    this.cm.cancel(qp, `qp ${qp.qpn} disconnected`);
    if (qp.state !== QpState.ERROR) toError(this.core, qp, 'disconnected');
  }

  /**
   * An ACK for everything the QP took, as the program moves it out of a live connection (to
   * ERROR or RESET; a quiet destroy sends one too): an ACK held for a reply to carry
   * (rdma.trp.ack-delay-us) would otherwise never go, and the peer's last SEND, delivered here,
   * would end in its retry limit once this QP stops answering its retransmissions. Once only: a
   * QP already in ERROR sent it then (a second, after RESET, would reach a peer already reset).
   */
  private lastAck(qp: Qp): void {
    const s = qp.state;
    if (qp.remotePort !== 0 && s !== QpState.RESET && s !== QpState.INIT && s !== QpState.ERROR) this.core.sendAck(qp);
  }

  private sendFin(qp: Qp): void {
    if (qp.remotePort === 0 || qp.state === QpState.RESET || qp.state === QpState.INIT) return;
    if (qp.finSent) return;
    qp.finSent = true;
    this.core.sendFin(qp, qp.sndNxt);
  }

  /**
   * Destroy a QP. By default the peer is told with a FIN (its QP goes to error and flushes). A
   * `quiet` destroy is ibv_destroy_qp's: the peer is not told, as on InfiniBand, but gets a last
   * ACK for everything we took, so its sends complete.
   */
  destroyQp(qp: Qp, quiet = false): void {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is already destroyed`);
    if (!quiet) this.sendFin(qp);
    else if (qp.remotePort !== 0 && qp.state !== QpState.RESET && qp.state !== QpState.INIT) this.core.sendAck(qp);
    this.cm.cancel(qp, `qp ${qp.qpn} destroyed`);
    qp.term = null;
    if (qp.state !== QpState.ERROR) toError(this.core, qp, null); // flushed; a destroy is no qp-error
    if (qp.rtoTimer >= 0) this.graph.stopTimer(qp.rtoTimer);
    qp.rtoTimer = -1;
    qp.destroyed = true;
    this.net.udp.unbind(qp.qpn, qp.localAddr === 0 ? undefined : formatIp4(qp.localAddr));
    this.core.mcast.detachAll(qp);
    this.core.qps[qp.index] = null;
    this.core.qpByPort[qp.qpn] = -1;
    this.retired.retire(qp.qpn);
    this.qpsByQpn.delete(qp.qpn);
    this.budget.release(qp);
    for (const l of this.cm.listeners.values()) l.halfOpen.delete(qp); // cm.cancel above forgot its request
    qp.pd.users--;
    qp.sendCq.users--;
    if (qp.recvCq !== qp.sendCq) qp.recvCq.users--;
    if (qp.srq) qp.srq.users--;
  }

  /** ibv_attach_mcast: UD QP `qp` takes the datagrams sent to multicast `group` (multicast.ts). */
  attachMcast(qp: Qp, group: string | number): void {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is destroyed`);
    this.core.mcast.attach(qp, typeof group === 'number' ? group : this.parseAddr(group, 'multicast group'));
  }

  /** ibv_detach_mcast. */
  detachMcast(qp: Qp, group: string | number): void {
    this.core.mcast.detach(qp, typeof group === 'number' ? group : this.parseAddr(group, 'multicast group'));
  }

  /** The multicast groups `qp` is attached to. */
  mcastGroupsOf(qp: Qp): string[] {
    return this.core.mcast.groupsOf(qp).map(formatIp4);
  }

  queryQp(qp: Qp): QpInfo {
    return {
      qpn: qp.qpn,
      type: qp.cfg.ud ? 'ud' : 'rc',
      qkey: qp.cfg.ud ? qp.qkey : null,
      state: qp.stateName,
      psn: qp.isn,
      local: { address: qp.localAddr ? formatIp4(qp.localAddr) : '0.0.0.0', port: qp.qpn },
      remote: qp.remotePort ? { address: formatIp4(qp.remoteAddr), port: qp.remotePort } : null,
      ird: qp.ird,
      ord: qp.ord,
      maxSendWr: qp.cfg.maxSendWr,
      maxRecvWr: qp.cfg.maxRecvWr,
      maxSge: qp.cfg.maxSge,
      maxInline: qp.cfg.maxInline,
      segmentSize: qp.mtuUntagged,
      sqOutstanding: qp.sqDepth,
      rqPosted: qp.srq ? 0 : qp.rqDepth,
      srq: qp.srq ? qp.srq.handle : null,
      counters: {
        txPackets: qp.txPackets,
        rxPackets: qp.rxPackets,
        txBytes: qp.txBytes,
        rxBytes: qp.rxBytes,
        retransmits: qp.retransmits,
        fastRetransmits: qp.fastRetransmits,
        timeouts: qp.timeouts,
        spuriousTimeouts: qp.spuriousTimeouts,
        probes: qp.probes,
        duplicates: qp.duplicates,
      },
      rtt: { srttUs: qp.srttNs / 1e3, rttvarUs: qp.rttvarNs / 1e3, rtoUs: qp.rtoNs / 1e3 },
      congestion: {
        algorithm: CONGESTION_NAMES[qp.sendStarted ? qp.ccAlgo : qp.ccChoice],
        cwnd: qp.sendStarted ? sendLimit(qp, this.core.window) : 0,
        ssthresh: qp.ssthresh,
        alpha: qp.sendStarted && qp.ccAlgo === Congestion.DCTCP ? qp.ccAlpha : 0,
        ceMarks: qp.ceMarks,
        ceReceived: qp.ceReceived,
        losses: qp.lossEvents,
        lossReductions: qp.ccReductions,
        ecnReductions: qp.ecnReductions,
        delayReductions: qp.delayReductions,
        fullQueueRttUs: qp.fullRttNs / 1e3,
        hystartExits: qp.hystartExits,
      },
    };
  }

  // ------------------------------------------------------------------ work requests

  /**
   * Check an SG list against the PD and copy it into a slot's list. Receive buffers and read /
   * atomic destinations need local-write. Returns a WcStatus to complete with when the list is
   * well-formed but not allowed (local protection), else -1; throws for malformed requests.
   */
  private fillSg(
    sg: SgList,
    list: readonly Sge[],
    pd: Pd,
    maxSge: number,
    needWrite: boolean,
    what: string,
    throwProt = true,
  ): number {
    if (!Array.isArray(list)) throw new VerbsError('invalid', `${what}: sg must be a list`);
    if (list.length > maxSge)
      throw new VerbsError('invalid', `${what}: ${list.length} SGEs, the queue allows ${maxSge}`);
    sg.clear();
    let prot = -1;
    for (let i = 0; i < list.length; i++) {
      const e = list[i];
      const mr = e?.mr;
      if (!(mr instanceof Mr)) throw new VerbsError('invalid', `${what}: sg[${i}].mr is not a memory region`);
      const off = sgInt(e.offset, what, i, 'offset');
      const len = sgInt(e.length, what, i, 'length');
      const bad =
        !mr.valid || mr.pd !== pd
          ? `mr ${mr.handle} is not valid in this PD`
          : off + len > mr.length
            ? `[${off}, ${off + len}) is outside mr ${mr.handle} (length ${mr.length})`
            : needWrite && !(mr.access & Access.LOCAL_WRITE)
              ? `mr ${mr.handle} lacks local-write`
              : '';
      if (bad) {
        if (throwProt) throw new VerbsError('invalid', `${what}: sg[${i}]: ${bad}`);
        prot = WcStatus.LOC_PROT_ERR;
      }
      sg.mr[i] = mr;
      sg.off[i] = off;
      sg.len[i] = len;
      sg.total += len;
      sg.n = i + 1;
    }
    return prot;
  }

  postRecv(qp: Qp, req: RecvRequest): void {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is destroyed`);
    if (qp.srq) throw new VerbsError('invalid', `qp ${qp.qpn} receives from srq ${qp.srq.handle}: post there`);
    if (qp.state === QpState.RESET) throw new VerbsError('state', `qp ${qp.qpn} is in RESET`);
    if (qp.rqDepth >= qp.cfg.maxRecvWr)
      throw new VerbsError('resource', `qp ${qp.qpn}: receive queue full (${qp.cfg.maxRecvWr})`);
    const wr = qp.recvSlot();
    this.fillSg(wr.sg, req.sg ?? [], qp.pd, qp.cfg.maxSge, true, 'recv');
    wr.wrId = req.wrId;
    qp.rqPosted++;
    if (qp.state === QpState.ERROR) completeRecv(this.core, qp, wr, WcStatus.WR_FLUSH_ERR, { byteLen: 0 });
  }

  postSend(qp: Qp, req: SendRequest): void {
    if (qp.destroyed) throw new VerbsError('not-found', `qp ${qp.qpn} is destroyed`);
    const op = (WR_OPCODE_NAMES as readonly string[]).indexOf(req.opcode);
    if (op < 0)
      throw new VerbsError(
        'invalid',
        `opcode must be one of ${WR_OPCODE_NAMES.join(', ')}, got "${String(req.opcode)}"`,
      );
    if (qp.state !== QpState.RTS && qp.state !== QpState.SQD && qp.state !== QpState.ERROR) {
      throw new VerbsError('state', `qp ${qp.qpn} is in ${qp.stateName}: post send needs RTS`);
    }
    if (qp.sqDepth >= qp.cfg.maxSendWr)
      throw new VerbsError('resource', `qp ${qp.qpn}: send queue full (${qp.cfg.maxSendWr})`);
    const wr = qp.sendSlot();
    wr.reset();
    if (qp.cfg.ud) {
      if (op !== WrOpcode.SEND && op !== WrOpcode.SEND_WITH_SE && op !== WrOpcode.SEND_WITH_IMM)
        throw new VerbsError(
          'invalid',
          `qp ${qp.qpn} is a UD QP: it sends send, send-with-solicited and send-with-imm, not ${req.opcode}`,
        );
      const d = req.ud;
      if (d === undefined) throw new VerbsError('invalid', `qp ${qp.qpn}: a UD send needs ud {address, qpn, qkey}`);
      wr.dstAddr =
        typeof d.address === 'number'
          ? int(d.address, 1, 0xffffffff, 'ud.address')
          : this.parseAddr(d.address, 'ud.address');
      wr.dstQpn = d.qpn === MCAST_QPN && isIp4Multicast(wr.dstAddr) ? MCAST_QPN : int(d.qpn, 1, 65535, 'ud.qpn');
      wr.qkey = int(d.qkey, 0, 0xffffffff, 'ud.qkey');
    }
    const list = req.sg ?? [];
    const needWrite = op === WrOpcode.READ || op >= WrOpcode.FETCH_ADD;
    let prot: number;
    if (op === WrOpcode.BIND_MW) {
      const b = req.bind;
      if (b === undefined || !(b.mw instanceof Mw) || this.mwsByHandle.get(b.mw.handle) !== b.mw)
        throw new VerbsError('invalid', 'bind-mw needs bind {mw, rkey, access, address} naming an allocated window');
      if (list.length > 1)
        throw new VerbsError('invalid', `bind-mw takes at most one SGE (the MR's range), got ${list.length}`);
      wr.mw = b.mw;
      wr.rstag = int(b.rkey, 0, 0xffffffff, 'bind.rkey');
      wr.mwAccess = int(b.access, 0, 0xff, 'bind.access');
      wr.roff = int(b.address, 0, Number.MAX_SAFE_INTEGER, 'bind.address');
    }
    if (req.inline) {
      if (needWrite || isLocal(op)) throw new VerbsError('invalid', `${req.opcode} cannot be inline`);
      const total = list.reduce((a, e) => a + (e?.length ?? 0), 0);
      if (qp.cfg.maxInline === 0 || total > qp.cfg.maxInline)
        throw new VerbsError(
          'too-large',
          `inline data of ${total} bytes exceeds the QP's maxInline ${qp.cfg.maxInline}`,
        );
      prot = this.fillSg(wr.sg, list, qp.pd, qp.cfg.maxSge, false, req.opcode, false);
      if (prot < 0) {
        // This slot's part of the QP's inline area.
        const m = qp.inlineArea(),
          at = (qp.sqTail % qp.sq.length) * qp.cfg.maxInline;
        wr.sg.gather(0, m.memory, m.view, at, total);
        wr.sg.clear();
        wr.sg.mr[0] = m;
        wr.sg.off[0] = at;
        wr.sg.len[0] = total;
        wr.sg.total = total;
        wr.sg.n = 1;
      }
    } else prot = this.fillSg(wr.sg, list, qp.pd, qp.cfg.maxSge, needWrite, req.opcode, false);
    const length = wr.sg.total;
    if (length > this.maxMessage)
      throw new VerbsError('too-large', `message of ${length} bytes exceeds the maximum ${this.maxMessage}`);
    // A bind's MR that is not valid here fails the bind, not a local access.
    if (op === WrOpcode.BIND_MW && prot >= 0) prot = WcStatus.MW_BIND_ERR;
    if (op === WrOpcode.WRITE || op === WrOpcode.WRITE_WITH_IMM || op >= WrOpcode.READ) {
      const r = req.remote;
      if (!r) throw new VerbsError('invalid', `${req.opcode} needs remote {stag, offset}`);
      wr.rstag = int(r.stag, 0, 0xffffffff, 'remote.stag');
      wr.roff = int(r.offset, 0, Number.MAX_SAFE_INTEGER, 'remote.offset');
    }
    if (op >= WrOpcode.FETCH_ADD) {
      if (length !== 8)
        throw new VerbsError(
          'invalid',
          `${req.opcode} needs exactly 8 bytes of local buffer for the original value, got ${length}`,
        );
      if (wr.roff % 8 !== 0)
        throw new VerbsError('invalid', `${req.opcode}: remote.offset must be 8-byte aligned, got ${wr.roff}`);
      const a = req.atomic ?? {};
      const u64 = (x: unknown, what: string): bigint => {
        if (typeof x !== 'bigint' || x < 0n || x > 0xffffffffffffffffn)
          throw new VerbsError('invalid', `atomic.${what} must be a 64-bit unsigned integer`);
        return x;
      };
      const first = op === WrOpcode.FETCH_ADD ? u64(a.add, 'add') : u64(a.swap, 'swap');
      wr.swapHi = Number(first >> 32n);
      wr.swapLo = Number(first & 0xffffffffn);
      if (op === WrOpcode.CMP_SWAP) {
        const c = u64(a.compare, 'compare');
        wr.cmpHi = Number(c >> 32n);
        wr.cmpLo = Number(c & 0xffffffffn);
      } else wr.cmpHi = wr.cmpLo = 0;
    }
    if (op === WrOpcode.WRITE_WITH_IMM || op === WrOpcode.SEND_WITH_IMM) wr.imm = int(req.imm, 0, 0xffffffff, 'imm');
    if (op === WrOpcode.SEND_WITH_INV || op === WrOpcode.LOCAL_INV)
      wr.invStag = int(req.invalidateStag, 0, 0xffffffff, 'invalidateStag');
    wr.opcode = op;
    wr.wrId = req.wrId;
    wr.signaled = req.signaled !== false;
    wr.solicited = req.solicited === true || op === WrOpcode.SEND_WITH_SE;
    wr.length = op >= WrOpcode.FETCH_ADD ? 8 : isLocal(op) ? 0 : length;
    wr.postError = prot;
    qp.sqTail++;
    if (qp.state === QpState.ERROR) {
      wr.done = true;
      wr.status = WcStatus.WR_FLUSH_ERR;
      qp.sqNext = qp.sqTail;
      qp.sqAcked = qp.sqTail;
      completeSq(this.core, qp);
      return;
    }
    this.core.schedule(qp);
  }
}

export function registerRdma(graph: Graph, net: Netstack, opts: RdmaOptions = {}): Rdma {
  return new Rdma(graph, net, opts);
}

export { QpState };
