/**
 * The data path of verbs programs (librdmagraph-verbs.so): their work queues and CQs are rings
 * in memfds the program and this daemon both map. Layouts: native/verbs-lib/proto.h, through
 * abi.generated.ts; the rings, their indices, doorbells and the sleep handshake:
 * docs/VERBS-PROTOCOL.md section 4.
 *
 * The `verbs-input` node (an input node beside memif-input) polls every attached send, receive
 * and shared receive ring each pass and posts what it finds through the same verbs the REST API
 * uses (postSend / postRecv / postSrqRecv): an SGE's lkey must be an MR of the QP's PD and its
 * [addr, addr + length) inside that MR, else the work request completes with a local protection
 * error. A CQ with a ring gets its completions written there as they happen (Cq.sink), and its
 * completion channel's eventfd is written when the program armed it.
 *
 * Sleeping: while programs are attached the engine keeps polling for HOLD_MS after the last
 * work request or completion; then, before it sleeps, it sets need_kick in every ring and looks
 * once more (a program that posts after that writes its doorbell eventfd, which wakes it).
 *
 * Everything in the rings is the program's to scribble on: indices are checked against the ring
 * size, every WQE field is read once and validated, a burst is bounded by our own queue room;
 * a ring whose producer index is impossible is refused for good (the QP goes to error).
 */
import type { Graph, NodeRuntime } from '../../graph/index.ts';
import { widenNumberFields } from '../../graph/number-fields.ts';
import type { Qp, RecvSource } from '../../nodes/rdma/qp.ts';
import { QpState } from '../../nodes/rdma/qp.ts';
import {
  Access,
  type Completion,
  type CompletionSink,
  type Cq,
  Mr,
  Pd,
  type Srq,
  type WrOpcodeName,
} from '../../nodes/rdma/verbs.ts';
import { type Rdma, type RecvRequest, type SendRequest, type Sge, VERBS_LIMITS } from '../../nodes/rdma/stack.ts';
import { loadCore } from '../../native/addons.ts';
import {
  RGV_CQ_ARM_NEXT,
  RGV_CQ_ARMED,
  RGV_CQ_CONS,
  RGV_CQ_EVENTS,
  RGV_CQ_OVERFLOW,
  RGV_CQ_PROD,
  RGV_CQ_SIGNALLED,
  RGV_CQ_SLEEPERS,
  RGV_CQ_WAKE,
  RGV_INLINE_ALIGN,
  RGV_QP_NEED_KICK,
  RGV_QP_RQ_CONS,
  RGV_QP_RQ_DONE,
  RGV_QP_RQ_PROD,
  RGV_QP_SQ_CONS,
  RGV_QP_SQ_DONE,
  RGV_QP_SQ_PROD,
  RGV_QP_STATE,
  RGV_RING_HDR,
  RGV_SEND_INLINE,
  RGV_SEND_SIGNALED,
  RGV_SEND_SOLICITED,
  RGV_SRQ_CONS,
  RGV_SRQ_DONE,
  RGV_SRQ_NEED_KICK,
  RGV_SRQ_PROD,
  RGV_WC_COMP_SWAP,
  RGV_WC_FETCH_ADD,
  RGV_WC_BIND_MW,
  RGV_WC_LOCAL_INV,
  RGV_WC_MW_BIND_ERR,
  RGV_WC_GRH,
  RGV_ACCESS_REMOTE_READ,
  RGV_ACCESS_REMOTE_WRITE,
  RGV_ACCESS_REMOTE_ATOMIC,
  RGV_WC_GENERAL_ERR,
  RGV_WC_LOC_LEN_ERR,
  RGV_WC_LOC_PROT_ERR,
  RGV_WC_LOC_QP_OP_ERR,
  RGV_WC_RDMA_READ,
  RGV_WC_RDMA_WRITE,
  RGV_WC_RECV,
  RGV_WC_RECV_RDMA_WITH_IMM,
  RGV_WC_REM_ACCESS_ERR,
  RGV_WC_REM_INV_REQ_ERR,
  RGV_WC_REM_OP_ERR,
  RGV_WC_RETRY_EXC_ERR,
  RGV_WC_RNR_RETRY_EXC_ERR,
  RGV_WC_SEND,
  RGV_WC_SUCCESS,
  RGV_WC_WITH_IMM,
  RGV_WC_WITH_INV,
  RGV_WC_WR_FLUSH_ERR,
  RGV_WR_ATOMIC_CMP_AND_SWP,
  RGV_WR_ATOMIC_FETCH_AND_ADD,
  RGV_WR_BIND_MW,
  RGV_WR_LOCAL_INV,
  RGV_WR_RDMA_READ,
  RGV_WR_RDMA_WRITE,
  RGV_WR_RDMA_WRITE_WITH_IMM,
  RGV_WR_SEND,
  RGV_WR_SEND_WITH_IMM,
  RGV_WR_SEND_WITH_INV,
  rgv_cqe,
  rgv_recv_wqe,
  rgv_send_wqe,
  rgv_sge,
} from './abi.generated.ts';

export const VERBS_INPUT = 'verbs-input';
/** A byte offset of the ABI as an index into a ring's Uint32Array (every word is 4-aligned). */
const word = (byteOffset: number) => byteOffset >>> 2;
/** Bytes of a ring's header (two cache lines: the program's, then ours). */
export const RING_HDR = RGV_RING_HDR;
/** Word offsets in the headers. */
const QP_SQ_PROD = word(RGV_QP_SQ_PROD),
  QP_RQ_PROD = word(RGV_QP_RQ_PROD),
  QP_SQ_CONS = word(RGV_QP_SQ_CONS),
  QP_RQ_CONS = word(RGV_QP_RQ_CONS),
  QP_SQ_DONE = word(RGV_QP_SQ_DONE),
  QP_RQ_DONE = word(RGV_QP_RQ_DONE),
  QP_NEED_KICK = word(RGV_QP_NEED_KICK),
  QP_STATE = word(RGV_QP_STATE);
const SRQ_PROD = word(RGV_SRQ_PROD),
  SRQ_CONS = word(RGV_SRQ_CONS),
  SRQ_DONE = word(RGV_SRQ_DONE),
  SRQ_NEED_KICK = word(RGV_SRQ_NEED_KICK);
const CQ_CONS = word(RGV_CQ_CONS),
  CQ_ARMED = word(RGV_CQ_ARMED),
  CQ_PROD = word(RGV_CQ_PROD),
  CQ_SLEEPERS = word(RGV_CQ_SLEEPERS),
  CQ_WAKE = word(RGV_CQ_WAKE),
  CQ_EVENTS = word(RGV_CQ_EVENTS),
  CQ_SIGNALLED = word(RGV_CQ_SIGNALLED),
  CQ_OVERFLOW = word(RGV_CQ_OVERFLOW);
export const CQE_BYTES = rgv_cqe.size;
const SEND_WQE_HDR = rgv_send_wqe.size;
const RECV_WQE_HDR = rgv_recv_wqe.size;
const SGE_BYTES = rgv_sge.size;
/** Word offsets of the members of a send WQE, a receive WQE, an SGE and a CQE. */
const SW = rgv_send_wqe.fields,
  SW_WR_ID = word(SW.wr_id.offset),
  SW_OPCODE = word(SW.opcode.offset),
  SW_FLAGS = word(SW.flags.offset),
  SW_NUM_SGE = word(SW.num_sge.offset),
  SW_IMM = word(SW.imm.offset),
  SW_REMOTE_ADDR = word(SW.remote_addr.offset),
  SW_RKEY = word(SW.rkey.offset),
  SW_INLINE_LEN = word(SW.inline_len.offset),
  SW_COMPARE_ADD = word(SW.compare_add.offset),
  SW_SWAP = word(SW.swap.offset),
  SW_BIND_LKEY = word(SW.bind_lkey.offset);
const RW_WR_ID = word(rgv_recv_wqe.fields.wr_id.offset),
  RW_NUM_SGE = word(rgv_recv_wqe.fields.num_sge.offset);
const SGE_ADDR = word(rgv_sge.fields.addr.offset),
  SGE_LENGTH = word(rgv_sge.fields.length.offset),
  SGE_LKEY = word(rgv_sge.fields.lkey.offset);
const CQE = rgv_cqe.fields,
  CQE_WR_ID = word(CQE.wr_id.offset),
  CQE_STATUS = word(CQE.status.offset),
  CQE_OPCODE = word(CQE.opcode.offset),
  CQE_BYTE_LEN = word(CQE.byte_len.offset),
  CQE_IMM = word(CQE.imm.offset),
  CQE_QP_NUM = word(CQE.qp_num.offset),
  CQE_WC_FLAGS = word(CQE.wc_flags.offset),
  CQE_SRC_QP = word(CQE.src_qp.offset);
/** Work requests one ring gives per pass at most (the rest waits for the next pass). */
const BURST = 64;
/** The engine stays awake this long after the last verbs work (ms). */
const HOLD_MS = 1;
/** SGEs in one work request, at most (the devices' max_sge: what the daemon's QPs are made with). */
const MAX_SGE = VERBS_LIMITS.maxSge;

/** enum rgv_wr_opcode -> ours (undefined: not supported, completes in error). */
const WR_OPCODE: (WrOpcodeName | undefined)[] = (() => {
  const ours: [number, WrOpcodeName | undefined][] = [
    [RGV_WR_RDMA_WRITE, 'write'],
    [RGV_WR_RDMA_WRITE_WITH_IMM, 'write-with-imm'],
    [RGV_WR_SEND, 'send'],
    [RGV_WR_SEND_WITH_IMM, 'send-with-imm'],
    [RGV_WR_RDMA_READ, 'read'],
    [RGV_WR_ATOMIC_CMP_AND_SWP, 'cmp-swap'],
    [RGV_WR_ATOMIC_FETCH_AND_ADD, 'fetch-add'],
    [RGV_WR_LOCAL_INV, 'local-invalidate'],
    [RGV_WR_BIND_MW, 'bind-mw'],
    [RGV_WR_SEND_WITH_INV, 'send-with-invalidate'],
  ];
  const table: (WrOpcodeName | undefined)[] = Array.from(
    { length: Math.max(...ours.map(([v]) => v)) + 1 },
    () => undefined,
  );
  for (const [v, name] of ours) table[v] = name;
  return table;
})();
/** Ours -> enum rgv_wc_status. */
const WC_STATUS: Record<string, number> = {
  success: RGV_WC_SUCCESS,
  'local-length-error': RGV_WC_LOC_LEN_ERR,
  'local-qp-operation-error': RGV_WC_LOC_QP_OP_ERR,
  'local-protection-error': RGV_WC_LOC_PROT_ERR,
  flushed: RGV_WC_WR_FLUSH_ERR,
  'memory-window-bind-error': RGV_WC_MW_BIND_ERR,
  'remote-invalid-request': RGV_WC_REM_INV_REQ_ERR,
  'remote-access-error': RGV_WC_REM_ACCESS_ERR,
  'remote-operation-error': RGV_WC_REM_OP_ERR,
  'retry-exceeded': RGV_WC_RETRY_EXC_ERR,
  'rnr-retry-exceeded': RGV_WC_RNR_RETRY_EXC_ERR,
};
/** Ours -> enum rgv_wc_opcode (swap has no verbs opcode: a verbs program cannot post it). */
const WC_OPCODE: Record<string, number> = {
  send: RGV_WC_SEND,
  write: RGV_WC_RDMA_WRITE,
  read: RGV_WC_RDMA_READ,
  'cmp-swap': RGV_WC_COMP_SWAP,
  'fetch-add': RGV_WC_FETCH_ADD,
  swap: RGV_WC_FETCH_ADD,
  'bind-mw': RGV_WC_BIND_MW,
  'local-invalidate': RGV_WC_LOCAL_INV,
  recv: RGV_WC_RECV,
  'recv-with-imm': RGV_WC_RECV_RDMA_WITH_IMM,
};

const pow2AtLeast = (n: number) => {
  let p = 1;
  while (p < n) p *= 2;
  return p;
};
/** The strides the library uses (proto.h rgv_sq_stride / rgv_rq_stride; test/verbs-abi.test.ts compares). */
export const sqStride = (maxSge: number, maxInline: number) =>
  SEND_WQE_HDR + Math.max(maxSge * SGE_BYTES, (maxInline + RGV_INLINE_ALIGN - 1) & ~(RGV_INLINE_ALIGN - 1));
export const rqStride = (maxSge: number) => RECV_WQE_HDR + maxSge * SGE_BYTES;

export interface Channel {
  /** The eventfd or socket; -1 once closed (a signal queued for the end of the pass then goes nowhere). */
  fd: number;
  /** fd is the daemon's end of a stream socketpair (channelSignal), not an eventfd (eventfdSignal). */
  stream: boolean;
  users: number;
  /** Being signalled at the end of this pass (VerbsRings.flushEvents). */
  pending?: boolean;
}

/**
 * A connection's async-event eventfd (ASYNC_FD; -1 none): written when one of its QPs goes to
 * ERROR or one of its CQs overflows; the library then reads the rings' state words and tells
 * the program (ibv_get_async_event). One holder per connection, shared by its rings.
 */
export interface AsyncFd {
  fd: number;
}

/**
 * The CQ rings of one connection (one program's context): a completion written to any of them
 * wakes the threads asleep on each (the library sleeps only when all are empty, and its next
 * completion may come on another CQ than the one it slept at: VERBS-PROTOCOL.md 4.6).
 */
export class CqGroup {
  readonly rings: CqRing[] = [];
  /** Its sleepers are woken at the end of this pass (VerbsRings.wakeSoon). */
  waking = false;
  /** The graph's pass (runtime.loops) whose first CQE to the group looked for sleepers. */
  lookedInPass = -1;
  /** A sleeper was seen once: from then on every CQE looks (the program sleeps: opt-in). */
  sleepy = false;
}

export class CqRing {
  readonly u32: Uint32Array;
  prod = 0;
  /** Events of this pass not yet counted in the ring (VerbsRings.eventSoon). */
  owed = 0;
  constructor(
    readonly cq: Cq,
    mem: ArrayBuffer,
    readonly entries: number,
    readonly channel: Channel | null,
    readonly async: AsyncFd | null = null,
    /** The connection's CQ rings, this one among them once attached (VerbsRings.attachCq). */
    readonly group: CqGroup = new CqGroup(),
  ) {
    this.u32 = new Uint32Array(mem);
    widenNumberFields(this); // prod: a free-running u32
  }
}

export class SrqRing {
  readonly u32: Uint32Array;
  readonly bytes: Uint8Array;
  cons = 0;
  done = 0;
  readonly lo: Uint32Array;
  readonly hi: Uint32Array;
  dead = false;
  constructor(
    readonly srq: Srq,
    mem: ArrayBuffer,
    readonly entries: number,
    readonly stride: number,
  ) {
    this.u32 = new Uint32Array(mem);
    this.bytes = new Uint8Array(mem);
    this.lo = new Uint32Array(entries);
    this.hi = new Uint32Array(entries);
    widenNumberFields(this); // cons, done: free-running u32s
  }
}

export class QpRing {
  readonly u32: Uint32Array;
  readonly bytes: Uint8Array;
  sqCons = 0;
  rqCons = 0;
  readonly sqLo: Uint32Array;
  readonly sqHi: Uint32Array;
  readonly rqLo: Uint32Array;
  readonly rqHi: Uint32Array;
  /** The send ring as an MR of the QP's PD (inline data is gathered from it at post). */
  readonly inlineMr: Mr;
  readonly rqBase: number;
  lastState = -1;
  dead = false;
  constructor(
    readonly qp: Qp,
    mem: ArrayBuffer,
    readonly sqEntries: number,
    readonly rqEntries: number,
    readonly sqStride: number,
    readonly rqStride: number,
    readonly srq: SrqRing | null,
    readonly async: AsyncFd | null = null,
  ) {
    this.u32 = new Uint32Array(mem);
    this.bytes = new Uint8Array(mem);
    this.sqLo = new Uint32Array(sqEntries);
    this.sqHi = new Uint32Array(sqEntries);
    this.rqLo = new Uint32Array(rqEntries);
    this.rqHi = new Uint32Array(rqEntries);
    this.inlineMr = new Mr(-1, qp.pd, 0, this.bytes, Access.LOCAL_WRITE);
    this.rqBase = RING_HDR + sqEntries * sqStride;
    widenNumberFields(this); // sqCons, rqCons: free-running u32s
  }
}

/** An MR no lkey resolves to: an SGE that names it completes with a local protection error. */
/** A window's rights: ibv_mw_bind_info.mw_access_flags bits -> ours (others grant nothing to a window). */
const MW_ACCESS: [number, number][] = [
  [RGV_ACCESS_REMOTE_READ, Access.REMOTE_READ],
  [RGV_ACCESS_REMOTE_WRITE, Access.REMOTE_WRITE],
  [RGV_ACCESS_REMOTE_ATOMIC, Access.REMOTE_ATOMIC],
];
const NO_MR = new Mr(-1, new Pd(-1), 0, new Uint8Array(0), 0);
NO_MR.valid = false;

/** A CQ ring's completions, written as they happen (Cq.sink): one class for every CQ. */
class CqSink implements CompletionSink {
  constructor(
    private readonly rings: VerbsRings,
    private readonly ring: CqRing,
  ) {}

  take(c: Completion): boolean {
    return this.rings.writeCqe(this.ring, c);
  }
}

/** A Send that finds no receive takes in what the program posted since this pass's poll (Qp.recvSource). */
class QpRecvSource implements RecvSource {
  constructor(
    private readonly rings: VerbsRings,
    private readonly ring: QpRing,
  ) {}

  refill(): number {
    const srq = this.ring.srq;
    return srq === null ? this.rings.pollRecvRing(this.ring) : this.rings.pollSrq(srq);
  }
}

/** The rings of one data plane's verbs programs and the node that polls them. */
export class VerbsRings {
  private readonly core = loadCore();
  private readonly qps: QpRing[] = [];
  private readonly srqs: SrqRing[] = [];
  private readonly byQpn = new Map<number, QpRing>();
  /** The attached programs' doorbells, each with the release of its idle-yield request. */
  private readonly doorbells = new Map<number, () => void>();
  private kickArmed = false;
  /** A CQE was written since the node last ran. */
  private completed = false;
  private lastWorkMs = 0;
  private readonly removeGuard: () => void;
  private readonly rt: NodeRuntime;
  /** One SG list per length, reused for every post (no allocation per work request). */
  private readonly sgs: Sge[][] = [];
  private readonly send: SendRequest & { sg: Sge[]; remote: { stag: number; offset: number } } = {
    wrId: 0,
    opcode: 'send',
    sg: [],
    inline: false,
    signaled: true,
    solicited: false,
    remote: { stag: 0, offset: 0 },
    imm: 0,
    invalidateStag: 0,
  };
  private readonly recv: RecvRequest & { sg: Sge[] } = { wrId: 0, sg: [] };
  /** A UD send's destination (reused: no allocation per work request). */
  private readonly udDest = { address: 0, qpn: 0, qkey: 0 };
  /** Messages about misbehaving programs, at most this many (then counted). */
  private warned = 0;

  constructor(
    private readonly graph: Graph,
    private readonly rdma: Rdma,
    private readonly log: (msg: string) => void,
  ) {
    for (let n = 0; n <= MAX_SGE; n++)
      this.sgs.push(Array.from({ length: n }, () => ({ mr: NO_MR, offset: 0, length: 0 })));
    this.rt = graph.register({
      name: VERBS_INPUT,
      type: 'input',
      pollPhase: 'work',
      errors: [
        {
          name: 'bad_wqes',
          description: 'work requests of verbs programs refused (completed in error)',
          severity: 'error',
        },
      ],
      fn: () => this.poll(),
      formatTrace: (r) => String(r),
    });
    this.removeGuard = graph.addSleepGuard(() => this.keepAwake());
  }

  /**
   * A program's context: its doorbell wakes the sleeping loop, and while it is attached the
   * polling loop gives its CPU up after idle turns (a program spinning on its CQ may share it).
   */
  attachDoorbell(fd: number): void {
    if (this.doorbells.has(fd)) return;
    this.doorbells.set(fd, this.graph.addIdleYieldUser());
    this.graph.addWaitFd(fd);
  }

  detachDoorbell(fd: number): void {
    const release = this.doorbells.get(fd);
    if (release === undefined) return;
    this.doorbells.delete(fd);
    release();
    this.graph.removeWaitFd(fd);
  }

  /** Completions of `cq` go to the ring from now on. */
  attachCq(ring: CqRing): void {
    // Nothing signalled yet (the library made the word RGV_CQ_SIGNALLED_UNSET: no daemon says).
    Atomics.store(ring.u32, CQ_SIGNALLED, Atomics.load(ring.u32, CQ_EVENTS));
    ring.cq.sink = new CqSink(this, ring);
    if (ring.channel) ring.channel.users++;
    ring.group.rings.push(ring);
  }

  detachCq(ring: CqRing): void {
    ring.cq.sink = null;
    if (ring.channel) ring.channel.users--;
    const i = ring.group.rings.indexOf(ring);
    if (i >= 0) ring.group.rings.splice(i, 1);
  }

  attachQp(ring: QpRing): void {
    this.qps.push(ring);
    this.byQpn.set(ring.qp.qpn, ring);
    ring.qp.recvSource = new QpRecvSource(this, ring);
  }

  detachQp(ring: QpRing): void {
    const i = this.qps.indexOf(ring);
    if (i >= 0) this.qps.splice(i, 1);
    if (this.byQpn.get(ring.qp.qpn) === ring) this.byQpn.delete(ring.qp.qpn);
    ring.qp.recvSource = null;
  }

  /**
   * Before a UD QP is destroyed (ibv_destroy_qp): what its program posted goes out first, as a
   * NIC transmits the WQEs it was handed before it takes a destroy. Without this, a datagram
   * posted just before the destroy (libfabric's ofi_rxd acknowledging its peer's last message as
   * it closes) was still in the ring or the send queue and was dropped, and the peer waited for it
   * for ever. Takes what the send ring holds and waits for the data path to hand it to the wire,
   * at most `limitMs` (a starved pool or a QP in error sends nothing more; the destroy goes on).
   */
  async sendPosted(r: QpRing, limitMs: number): Promise<void> {
    const qp = r.qp;
    const deadline = performance.now() + limitMs;
    while (qp.cfg.ud && !r.dead && !qp.destroyed && (qp.state === QpState.RTS || qp.state === QpState.SQD)) {
      this.pollQp(r);
      if (Atomics.load(r.u32, QP_SQ_PROD) === r.sqCons && qp.sqNext === qp.sqTail) return;
      if (performance.now() >= deadline) return;
      await new Promise((res) => setTimeout(res, 1));
    }
  }

  attachSrq(ring: SrqRing): void {
    this.srqs.push(ring);
  }

  detachSrq(ring: SrqRing): void {
    const i = this.srqs.indexOf(ring);
    if (i >= 0) this.srqs.splice(i, 1);
  }

  close(): void {
    this.removeGuard();
    for (const [fd, release] of this.doorbells) {
      release();
      this.graph.removeWaitFd(fd);
    }
    this.doorbells.clear();
  }

  private warn(msg: string): void {
    if (this.warned < 100) this.log(msg);
    else if (this.warned === 100) this.log('verbs: more misbehaving work requests; not logging them any more');
    this.warned++;
  }

  // ------------------------------------------------------------------ the node

  private poll(): number {
    if (this.kickArmed) {
      this.kickArmed = false;
      for (const r of this.qps) Atomics.store(r.u32, QP_NEED_KICK, 0);
      for (const s of this.srqs) Atomics.store(s.u32, SRQ_NEED_KICK, 0);
      for (const fd of this.doorbells.keys()) this.core.eventfdDrain(fd);
    }
    let work = 0;
    for (let i = 0; i < this.qps.length; i++) work += this.pollQp(this.qps[i]);
    for (let i = 0; i < this.srqs.length; i++) work += this.pollSrq(this.srqs[i]);
    // Completions written since the last pass count as work too (the program will post again).
    if (work > 0 || this.completed) {
      this.completed = false;
      this.lastWorkMs = performance.now();
    }
    return work;
  }

  /** The sleep guard: stay awake a little after verbs work, then arm the doorbells and look again. */
  private keepAwake(): boolean {
    if (this.qps.length === 0 && this.srqs.length === 0) return false;
    if (this.completed || performance.now() - this.lastWorkMs < HOLD_MS) return true;
    for (const r of this.qps) Atomics.store(r.u32, QP_NEED_KICK, 1);
    for (const s of this.srqs) Atomics.store(s.u32, SRQ_NEED_KICK, 1);
    this.kickArmed = true;
    // After need_kick is visible: anything posted before it is in the rings now.
    for (const r of this.qps) {
      if (r.dead) continue;
      if (Atomics.load(r.u32, QP_SQ_PROD) !== r.sqCons || Atomics.load(r.u32, QP_RQ_PROD) !== r.rqCons) return true;
    }
    for (const s of this.srqs) if (!s.dead && Atomics.load(s.u32, SRQ_PROD) !== s.cons) return true;
    return false;
  }

  /**
   * A ring that cannot be right: refused for good, its QP to error, and the state word of each
   * QP ring concerned says so at once (a refused ring is not polled again, its state included).
   */
  private refuse(r: QpRing | SrqRing, why: string): void {
    r.dead = true;
    this.warn(`verbs: ${why}: the ring is refused from now on`);
    const rings = r instanceof QpRing ? [r] : this.qps.filter((q) => q.srq === r);
    for (const q of rings) {
      this.toError(q.qp);
      this.syncState(q);
    }
  }

  /** The QP's state into its ring now (a MODIFY_QP): its word, and the async fd for ERROR. */
  sync(r: QpRing): void {
    if (!r.qp.destroyed) this.syncState(r);
  }

  /** The QP's state into its ring's state word, when it changed. */
  private syncState(r: QpRing): void {
    if (r.qp.state !== r.lastState) {
      r.lastState = r.qp.state;
      Atomics.store(r.u32, QP_STATE, r.qp.state);
      // An async event for the program (its library tells a QP it moved to ERROR itself apart).
      if (r.qp.state === QpState.ERROR && r.async !== null && r.async.fd >= 0) this.core.eventfdSignal(r.async.fd);
    }
  }

  private toError(qp: Qp): void {
    if (qp.destroyed || qp.state === QpState.ERROR) return;
    try {
      this.rdma.modifyQp(qp, { state: 'error' });
    } catch {
      // Already on its way out.
    }
  }

  private pollQp(r: QpRing): number {
    const qp = r.qp;
    // The state word first: a refused ring's QP still moves (ERROR, then destroyed).
    if (!qp.destroyed) this.syncState(r);
    if (r.dead || qp.destroyed) return 0;
    const u = r.u32;
    let work = 0;
    // Sends once the QP may send (the library refuses earlier posts; a hostile one waits).
    if (qp.state >= QpState.RTS) {
      const n = this.toTake(r, QP_SQ_PROD, r.sqCons, r.sqEntries, qp.cfg.maxSendWr - qp.sqDepth, 'send');
      if (n < 0) return 0;
      for (let k = 0; k < n; k++) {
        this.postSend(r, r.sqCons);
        r.sqCons = (r.sqCons + 1) >>> 0;
      }
      if (n > 0) Atomics.store(u, QP_SQ_CONS, r.sqCons);
      work += n;
    }
    return work + this.pollRecvRing(r);
  }

  /** The receives waiting in QP ring r's receive ring (its own, not an SRQ's): how many taken. */
  pollRecvRing(r: QpRing): number {
    const qp = r.qp;
    if (r.srq !== null || r.dead || qp.state === QpState.RESET || qp.destroyed) return 0;
    const n = this.toTake(r, QP_RQ_PROD, r.rqCons, r.rqEntries, qp.cfg.maxRecvWr - qp.rqDepth, 'receive');
    if (n < 0) return 0;
    for (let k = 0; k < n; k++) {
      this.postRecv(r, r.rqCons);
      r.rqCons = (r.rqCons + 1) >>> 0;
    }
    if (n > 0) Atomics.store(r.u32, QP_RQ_CONS, r.rqCons);
    return n;
  }

  /**
   * How many WQEs to take from one of QP ring r's rings (producer word `prod`, consumer `cons`,
   * `entries` slots) when the QP has `room` for more: at most a burst. -1 (and the ring refused)
   * when the program's producer claims more than the ring holds.
   */
  private toTake(r: QpRing, prod: number, cons: number, entries: number, room: number, what: string): number {
    const ahead = (Atomics.load(r.u32, prod) - cons) >>> 0;
    if (ahead > entries) {
      this.refuse(r, `QP ${r.qp.qpn}: the ${what} ring's producer is ${ahead} ahead of a ring of ${entries}`);
      return -1;
    }
    return Math.min(ahead, BURST, room);
  }

  pollSrq(s: SrqRing): number {
    if (s.dead || s.srq.destroyed) return 0;
    const ahead = (Atomics.load(s.u32, SRQ_PROD) - s.cons) >>> 0;
    if (ahead > s.entries) {
      this.refuse(s, `SRQ ${s.srq.handle}: the ring's producer is ${ahead} ahead of a ring of ${s.entries}`);
      return 0;
    }
    let n = 0;
    while (n < ahead && n < BURST && s.srq.hasRoom) {
      const seq = s.cons;
      const at = RING_HDR + (seq & (s.entries - 1)) * s.stride;
      const sg = this.recvSg(s.u32, s.stride, at, s.srq.pd);
      s.lo[seq & (s.entries - 1)] = s.u32[(at >>> 2) + RW_WR_ID];
      s.hi[seq & (s.entries - 1)] = s.u32[(at >>> 2) + RW_WR_ID + 1];
      try {
        if (sg === null) throw new Error('malformed receive WQE');
        this.recv.wrId = seq;
        this.recv.sg = sg;
        this.rdma.postSrqRecv(s.srq, this.recv);
      } catch (e) {
        this.rt.countError(0);
        this.refuse(s, `SRQ ${s.srq.handle}: work request ${seq}: ${(e as Error).message}`);
        return n;
      }
      s.cons = (seq + 1) >>> 0;
      n++;
    }
    if (n > 0) Atomics.store(s.u32, SRQ_CONS, s.cons);
    return n;
  }

  /** The SG list of a receive WQE at byte `at`, resolved in `pd`; null if malformed. */
  private recvSg(u: Uint32Array, stride: number, at: number, pd: Pd): Sge[] | null {
    const w = at >>> 2;
    const n = u[w + RW_NUM_SGE];
    if (n > MAX_SGE || RECV_WQE_HDR + n * SGE_BYTES > stride) return null;
    return this.resolve(u, w + word(RECV_WQE_HDR), n, pd);
  }

  /** n SGEs ({u64 addr, u32 length, u32 lkey}) from word w into a reused list. */
  private resolve(u: Uint32Array, w: number, n: number, pd: Pd): Sge[] {
    const list = this.sgs[n];
    for (let i = 0; i < n; i++, w += word(SGE_BYTES)) {
      const addr = u[w + SGE_ADDR + 1] * 2 ** 32 + u[w + SGE_ADDR],
        length = u[w + SGE_LENGTH],
        lkey = u[w + SGE_LKEY];
      const e = list[i];
      const mr = this.rdma.core.localMr(lkey, pd);
      const offset = mr === null ? -1 : addr - mr.base;
      if (mr === null || offset < 0 || offset + length > mr.length) {
        e.mr = NO_MR; // a local protection error, in order with the queue's other work
        e.offset = 0;
        e.length = length;
      } else {
        e.mr = mr;
        e.offset = offset;
        e.length = length;
      }
    }
    return list;
  }

  private postRecv(r: QpRing, seq: number): void {
    const at = r.rqBase + (seq & (r.rqEntries - 1)) * r.rqStride;
    r.rqLo[seq & (r.rqEntries - 1)] = r.u32[(at >>> 2) + RW_WR_ID];
    r.rqHi[seq & (r.rqEntries - 1)] = r.u32[(at >>> 2) + RW_WR_ID + 1];
    const sg = this.recvSg(r.u32, r.rqStride, at, r.qp.pd);
    try {
      if (sg === null) throw new Error(`${r.u32[(at >>> 2) + RW_NUM_SGE]} SGEs do not fit the ring's WQE`);
      this.recv.wrId = seq;
      this.recv.sg = sg;
      this.rdma.postRecv(r.qp, this.recv);
    } catch (e) {
      this.failed(r, seq, 'recv', e as Error);
    }
  }

  private postSend(r: QpRing, seq: number): void {
    const u = r.u32,
      at = RING_HDR + (seq & (r.sqEntries - 1)) * r.sqStride,
      w = at >>> 2,
      qp = r.qp,
      req = this.send;
    r.sqLo[seq & (r.sqEntries - 1)] = u[w + SW_WR_ID];
    r.sqHi[seq & (r.sqEntries - 1)] = u[w + SW_WR_ID + 1];
    const opcode = u[w + SW_OPCODE],
      flags = u[w + SW_FLAGS],
      nsge = u[w + SW_NUM_SGE],
      imm = u[w + SW_IMM],
      raddr = u[w + SW_REMOTE_ADDR + 1] * 2 ** 32 + u[w + SW_REMOTE_ADDR],
      rkey = u[w + SW_RKEY],
      inlineLen = u[w + SW_INLINE_LEN];
    try {
      const name = opcode < WR_OPCODE.length ? WR_OPCODE[opcode] : undefined;
      if (name === undefined) throw new Error(`opcode ${opcode} is not supported`);
      req.wrId = seq;
      req.opcode = name;
      req.signaled = (flags & RGV_SEND_SIGNALED) !== 0;
      req.solicited = (flags & RGV_SEND_SOLICITED) !== 0;
      req.remote.stag = rkey;
      req.remote.offset = raddr;
      req.imm = imm;
      req.invalidateStag = imm;
      req.bind = undefined;
      if (qp.cfg.ud) {
        // remote_addr's first 4 bytes: the IPv4 address in network order (read little-endian here).
        const a = u[w + SW_REMOTE_ADDR];
        this.udDest.address = (((a & 0xff) << 24) | ((a & 0xff00) << 8) | ((a >>> 8) & 0xff00) | (a >>> 24)) >>> 0;
        this.udDest.qpn = rkey;
        this.udDest.qkey = u[w + SW_COMPARE_ADD];
        req.ud = this.udDest;
      } else req.ud = undefined;
      if (name === 'bind-mw') {
        this.bindRequest(req, u, w, qp, raddr);
      } else if (name === 'fetch-add' || name === 'cmp-swap') {
        const cmpAdd = (BigInt(u[w + SW_COMPARE_ADD + 1]) << 32n) | BigInt(u[w + SW_COMPARE_ADD]),
          swap = (BigInt(u[w + SW_SWAP + 1]) << 32n) | BigInt(u[w + SW_SWAP]);
        req.atomic = name === 'fetch-add' ? { add: cmpAdd } : { compare: cmpAdd, swap };
      } else req.atomic = undefined;
      if (name === 'bind-mw') {
        // bindRequest set the range
      } else if (flags & RGV_SEND_INLINE) {
        if (inlineLen > r.sqStride - SEND_WQE_HDR)
          throw new Error(`${inlineLen} bytes of inline data do not fit the WQE`);
        const sg = this.sgs[1];
        sg[0].mr = r.inlineMr;
        sg[0].offset = at + SEND_WQE_HDR;
        sg[0].length = inlineLen;
        req.sg = inlineLen > 0 ? sg : this.sgs[0];
        req.inline = true;
      } else {
        if (nsge > MAX_SGE || SEND_WQE_HDR + nsge * SGE_BYTES > r.sqStride)
          throw new Error(`${nsge} SGEs do not fit the ring's WQE`);
        req.sg = this.resolve(u, w + word(SEND_WQE_HDR), nsge, qp.pd);
        req.inline = false;
      }
      this.rdma.postSend(qp, req);
    } catch (e) {
      this.failed(r, seq, WR_OPCODE[opcode] ?? 'send', e as Error);
    }
  }

  /**
   * A BIND_MW WQE (proto.h: rkey the window's handle, imm its new rkey, remote_addr/compare_add
   * the range, swap the access flags, bind_lkey the MR) as a bind-mw request; a window that is
   * not this QP's PD's or an MR that is not valid fails the bind when the queue reaches it.
   */
  private bindRequest(req: SendRequest, u: Uint32Array, w: number, qp: Qp, addr: number): void {
    const mw = this.rdma.mwsByHandle.get(u[w + SW_RKEY]);
    if (mw === undefined) throw new Error(`memory window ${u[w + SW_RKEY]} does not exist`);
    const length = u[w + SW_COMPARE_ADD + 1] * 2 ** 32 + u[w + SW_COMPARE_ADD],
      lkey = u[w + SW_BIND_LKEY],
      flags = u[w + SW_SWAP];
    let access = 0;
    for (const [bit, a] of MW_ACCESS) if (flags & bit) access |= a;
    req.bind = { mw, rkey: u[w + SW_IMM], access, address: addr };
    req.inline = false;
    if (length === 0) {
      req.sg = this.sgs[0];
      return;
    }
    const e = this.sgs[1][0];
    const mr = this.rdma.core.localMr(lkey, qp.pd);
    const offset = mr === null ? -1 : addr - mr.base;
    if (mr === null || offset < 0 || length > 2 ** 32 - 1 || offset + length > mr.length) {
      e.mr = NO_MR; // fails the bind in order with the queue's other work
      e.offset = 0;
    } else {
      e.mr = mr;
      e.offset = offset;
    }
    e.length = Math.min(length, 2 ** 32 - 1);
    req.sg = this.sgs[1];
  }

  /** A work request the verbs refused: it completes in error and the QP goes to error. */
  private failed(r: QpRing, seq: number, op: string, e: Error): void {
    const qp = r.qp;
    this.rt.countError(0);
    this.warn(`verbs: QP ${qp.qpn}: a ${op} work request was refused: ${e.message}`);
    const recv = op === 'recv';
    const c: Completion = {
      wrId: seq,
      qpn: qp.qpn,
      status: 'local-qp-operation-error',
      opcode: recv ? 'recv' : op === 'read' ? 'read' : op.startsWith('write') ? 'write' : 'send',
      byteLen: 0,
    };
    this.rdma.core.complete(recv ? qp.recvCq : qp.sendCq, c);
    this.toError(qp);
  }

  // ------------------------------------------------------------------ completions

  /** One completion into the CQ's ring (and its channel, if armed); false when the ring is full. */
  writeCqe(ring: CqRing, c: Completion): boolean {
    const u = ring.u32;
    let lo = 0,
      hi = 0;
    const r = this.byQpn.get(c.qpn);
    if (r !== undefined && typeof c.wrId === 'number') {
      const seq = c.wrId;
      if (c.opcode === 'recv' || c.opcode === 'recv-with-imm') {
        const s = r.srq;
        if (s !== null) {
          lo = s.lo[seq & (s.entries - 1)];
          hi = s.hi[seq & (s.entries - 1)];
          s.done = (s.done + 1) >>> 0;
          Atomics.store(s.u32, SRQ_DONE, s.done);
        } else {
          lo = r.rqLo[seq & (r.rqEntries - 1)];
          hi = r.rqHi[seq & (r.rqEntries - 1)];
          Atomics.store(r.u32, QP_RQ_DONE, (seq + 1) >>> 0);
        }
      } else {
        lo = r.sqLo[seq & (r.sqEntries - 1)];
        hi = r.sqHi[seq & (r.sqEntries - 1)];
        Atomics.store(r.u32, QP_SQ_DONE, (seq + 1) >>> 0);
      }
    }
    const cons = Atomics.load(u, CQ_CONS);
    if ((ring.prod - cons) >>> 0 >= ring.entries) {
      if (Atomics.exchange(u, CQ_OVERFLOW, 1) === 0 && ring.async !== null && ring.async.fd >= 0)
        this.core.eventfdSignal(ring.async.fd); // IBV_EVENT_CQ_ERR
      this.warn(`verbs: CQ ${ring.cq.handle} overflowed (${ring.entries} entries): a completion is lost`);
      return false;
    }
    const w = word(RING_HDR) + (ring.prod & (ring.entries - 1)) * word(CQE_BYTES);
    u[w + CQE_WR_ID] = lo;
    u[w + CQE_WR_ID + 1] = hi;
    u[w + CQE_STATUS] = WC_STATUS[c.status] ?? RGV_WC_GENERAL_ERR;
    u[w + CQE_OPCODE] = WC_OPCODE[c.opcode] ?? RGV_WC_SEND;
    u[w + CQE_BYTE_LEN] = c.byteLen >>> 0;
    let flags = 0,
      imm = 0;
    if (c.imm !== undefined) {
      flags = RGV_WC_WITH_IMM;
      imm = c.imm;
    } else if (c.invalidatedStag !== undefined) {
      flags = RGV_WC_WITH_INV;
      imm = c.invalidatedStag;
    }
    u[w + CQE_IMM] = imm >>> 0;
    u[w + CQE_QP_NUM] = c.qpn;
    // A UD receive: the sender's QPN, and a GRH in front of the message.
    if (c.srcQp !== undefined) flags |= RGV_WC_GRH;
    u[w + CQE_WC_FLAGS] = flags;
    u[w + CQE_SRC_QP] = c.srcQp ?? 0;
    ring.prod = (ring.prod + 1) >>> 0;
    Atomics.store(u, CQ_PROD, ring.prod);
    this.completed = true;
    // Threads of the program asleep at an idle point of any of its CQs (lookForSleepers).
    const g = ring.group;
    if (!g.waking && (g.sleepy || g.lookedInPass !== this.graph.runtime.loops)) this.lookForSleepers(g);
    const armed = Atomics.load(u, CQ_ARMED);
    if (
      armed !== 0 &&
      ring.channel !== null &&
      (armed === RGV_CQ_ARM_NEXT || c.solicited === true || c.status !== 'success') &&
      Atomics.compareExchange(u, CQ_ARMED, armed, 0) === armed
    ) {
      this.eventSoon(ring);
    }
    return true;
  }

  /**
   * An event of `ring`'s CQ, counted in its ring and signalled on its channel when this pass
   * ends, not now: the program it wakes (asleep in ibv_get_cq_event) takes the CPU at once if it
   * shares this one, and a signal from inside a node left the rest of the pass (the ACK, the next
   * segments) waiting until it slept again. The count goes with the signal (the library finds
   * the CQ by it): a program that looked in between would take the event before its wake-up,
   * and that wake-up, come later, would find nothing.
   */
  private eventSoon(ring: CqRing): void {
    if (ring.owed++ > 0) return;
    if (this.owing.push(ring) === 1) this.graph.defer(this.flushEvents);
  }

  /**
   * After a store of RGV_CQ_PROD to one of `group`'s CQs: if any of them counts a sleeper, they
   * are woken when this pass ends (wakeSoon). The store comes before these loads of
   * RGV_CQ_SLEEPERS, all sequentially consistent, against the library's add to RGV_CQ_SLEEPERS
   * then look at every RGV_CQ_PROD: either we see the sleeper counted, or it sees the completion
   * and does not sleep. Looked at by the first CQE of each pass to the group, and by every CQE
   * once the group has had a sleeper; a program that never sleeps (the default) costs a load per
   * CQ of its connection per pass, and no deferred call (defer ends the graph's turn).
   */
  private lookForSleepers(group: CqGroup): void {
    group.lookedInPass = this.graph.runtime.loops;
    const rings = group.rings;
    for (let k = 0; k < rings.length; k++)
      if (Atomics.load(rings[k].u32, CQ_SLEEPERS) !== 0) {
        group.sleepy = true;
        this.wakeSoon(group);
        return;
      }
  }

  /**
   * The sleepers of `group`'s CQs woken when this pass ends (a wake-up from inside a node: see
   * eventSoon). The add to RGV_CQ_WAKE before each wake-up moves the word its futex wait
   * compares, so a wake-up that comes before the wait is not lost. Once per connection per pass,
   * over its own CQ rings.
   */
  private wakeSoon(group: CqGroup): void {
    group.waking = true;
    if (this.wakingGroups.push(group) === 1) this.graph.defer(this.flushWakes);
  }

  private readonly wakingGroups: CqGroup[] = [];
  private readonly flushWakes = (): void => {
    const list = this.wakingGroups;
    for (let i = 0; i < list.length; i++) {
      const g = list[i];
      g.waking = false;
      for (let k = 0; k < g.rings.length; k++) {
        const u = g.rings[k].u32;
        if (Atomics.load(u, CQ_SLEEPERS) === 0) continue;
        Atomics.add(u, CQ_WAKE, 1);
        this.core.futexWake(u, CQ_WAKE);
      }
    }
    list.length = 0;
  };

  private readonly owing: CqRing[] = [];
  private readonly signalling: Channel[] = [];
  private readonly flushEvents = (): void => {
    const list = this.owing,
      chans = this.signalling;
    for (let i = 0; i < list.length; i++) {
      const r = list[i];
      const n = r.owed;
      r.owed = 0;
      if (r.cq.sink === null) continue; // detached meanwhile: its program is gone
      Atomics.add(r.u32, CQ_EVENTS, n);
      const ch = r.channel as Channel;
      if (ch.pending !== true) {
        ch.pending = true;
        chans.push(ch);
      }
    }
    for (let i = 0; i < chans.length; i++) {
      const ch = chans[i];
      ch.pending = false;
      if (ch.fd < 0) continue;
      if (ch.stream) this.core.channelSignal(ch.fd);
      else this.core.eventfdSignal(ch.fd);
    }
    chans.length = 0;
    // The bytes are sent: the library may now empty the channel with the last of these events
    // taken and find none of their bytes still to come (docs/VERBS-PROTOCOL.md 4.7).
    for (let i = 0; i < list.length; i++) {
      const r = list[i];
      if (r.cq.sink !== null) Atomics.store(r.u32, CQ_SIGNALLED, Atomics.load(r.u32, CQ_EVENTS));
    }
    list.length = 0;
  };

  /** Sizes the rings must have for `qp` (what the library computes from the same numbers). */
  static qpRingBytes(
    qp: Qp,
    withSrq: boolean,
  ): { sq: number; rq: number; sqStride: number; rqStride: number; bytes: number } {
    const sq = pow2AtLeast(qp.cfg.maxSendWr),
      rq = withSrq ? 1 : pow2AtLeast(qp.cfg.maxRecvWr),
      ss = sqStride(qp.cfg.maxSge, qp.cfg.maxInline),
      rs = rqStride(qp.cfg.maxSge);
    return { sq, rq, sqStride: ss, rqStride: rs, bytes: RING_HDR + sq * ss + rq * rs };
  }

  static pow2AtLeast = pow2AtLeast;
}
