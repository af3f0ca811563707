/**
 * A queue pair: RC over TRP. Everything the RDMA nodes keep per connection lives here, in typed
 * arrays and preallocated slots sized at creation (no allocation per packet):
 *
 * - the send queue: a ring of SendWr slots, posted at `sqTail`, segmented from `sqNext`,
 *   completed in order from `sqHead`;
 * - the receive queue (or the SRQ it draws from), with the MSN of each posted receive;
 * - the transmit window: per PSN slot what the packet was (which WR or response, byte offset,
 *   length, flags), so a retransmission is rebuilt from the WR and offset, never from a kept
 *   packet;
 * - the receive window: per PSN slot whether it arrived and what in-order delivery must do
 *   when no hole precedes it (complete a receive, answer a Read or Atomic, take a Terminate);
 * - the responder's ring of Read/Atomic responses in progress (IRD), the requester's
 *   outstanding Reads/Atomics (ORD);
 * - TRP sequence state, RTT estimate (RFC 6298) and retry counter.
 */
import { widenNumberFields } from '../../graph/number-fields.ts';
import { ccInit, Congestion } from './congestion.ts';
import { Mr, type Mw, Pd, type Cq, RecvWr, SgList, type Srq, WcStatus } from './verbs.ts';

/** Receives a program posted that the data plane has not taken in yet (Qp.recvSource). */
export interface RecvSource {
  /** Takes them in; how many it took (0: none waiting). */
  refill(): number;
}

export const QpState = { RESET: 0, INIT: 1, RTR: 2, RTS: 3, SQD: 4, SQE: 5, ERROR: 6 } as const;
export const QP_STATE_NAMES = ['reset', 'init', 'rtr', 'rts', 'sqd', 'sqe', 'error'] as const;
export type QpStateName = (typeof QP_STATE_NAMES)[number];

/** Transitions ibv_modify_qp allows for RC (IB spec table, simplified to what RC uses). */
export function transitionAllowed(from: number, to: number): boolean {
  if (to === QpState.RESET || to === QpState.ERROR) return true;
  switch (from) {
    case QpState.RESET:
      return to === QpState.INIT;
    case QpState.INIT:
      return to === QpState.INIT || to === QpState.RTR;
    case QpState.RTR:
      return to === QpState.RTS;
    case QpState.RTS:
      return to === QpState.RTS || to === QpState.SQD;
    case QpState.SQD:
      return to === QpState.SQD || to === QpState.RTS;
    case QpState.SQE:
      return to === QpState.RTS;
    default:
      return false;
  }
}

/** A posted send work request (one preallocated slot of the send queue). */
export class SendWr {
  wrId: unknown = null;
  opcode = 0;
  signaled = true;
  solicited = false;
  readonly sg: SgList;
  length = 0;
  rstag = 0;
  roff = 0;
  imm = 0;
  invStag = 0;
  /** Atomic operands as 32-bit halves: add/swap and compare. */
  swapHi = 0;
  swapLo = 0;
  cmpHi = 0;
  cmpLo = 0;
  /** Send MSN (sends, immediate data) or read/atomic MSN. */
  msn = 0;
  /** Bytes segmented so far; `immSent` for write-with-imm's trailing message. */
  sent = 0;
  immSent = false;
  started = false;
  /** PSN of the last packet of this WR (valid once `emitted`). */
  lastPsn = 0;
  emitted = false;
  /** Completed (successfully or not): may leave the queue once it is the head. */
  done = false;
  status: number = WcStatus.SUCCESS;
  /** Set at post when a local SGE is invalid: completes with this status when reached. */
  postError = -1;
  /** A bind's memory window (ibv_mw), else null; its new STag is `rstag`, its address `roff`. */
  mw: Mw | null = null;
  /** A bind's remote access rights (Access bits). */
  mwAccess = 0;
  /** A UD send's destination: IPv4 address, QPN (UDP port) and Q_Key. */
  dstAddr = 0;
  dstQpn = 0;
  qkey = 0;

  constructor(maxSge: number) {
    this.sg = new SgList(Math.max(1, maxSge));
    widenNumberFields(this); // rstag, roff, imm, dstAddr...: any u32 or address
  }

  reset(): void {
    this.sg.clear();
    this.wrId = null;
    this.sent = 0;
    this.immSent = false;
    this.started = false;
    this.emitted = false;
    this.done = false;
    this.status = WcStatus.SUCCESS;
    this.postError = -1;
    this.mw = null;
    this.solicited = false;
    this.lastPsn = 0;
  }
}

/** A Read or Atomic the responder is answering (IRD slot). */
export class RespSlot {
  atomic = false;
  src: Mr | null = null;
  srcOff = 0;
  length = 0;
  sinkStag = 0;
  sinkTo = 0;
  sent = 0;
  emitted = false;
  lastPsn = 0;
  /** Atomic response: request id, QN 3 MSN and the original value. */
  reqId = 0;
  msn = 0;
  origHi = 0;
  origLo = 0;
  constructor() {
    widenNumberFields(this); // srcOff, sinkTo, PSNs, atomic operands: any u32 or offset
  }
}

/** Transmit window slot kinds and flags. */
export const TxKind = { FREE: 0, SQ: 1, RESP: 2, TERM: 3 } as const;
export const TxFlag = { LAST: 1, SACKED: 2, RETRANSMITTED: 4, IMM: 8 } as const;

/** Receive window: what in-order delivery does with a slot. */
export const RxEvent = {
  NONE: 0,
  WRITE: 1, // a tagged Write segment (its length counts for write-with-imm's byte length)
  SEND_LAST: 2,
  IMMEDIATE: 3,
  READ_REQUEST: 4,
  ATOMIC_REQUEST: 5,
  READ_RESPONSE_LAST: 6,
  ATOMIC_RESPONSE: 7,
  TERMINATE: 8,
} as const;
/** u32 words of event parameters per receive slot. */
export const RX_WORDS = 16;
const EMPTY_U8 = new Uint8Array(0),
  EMPTY_U32 = new Uint32Array(0),
  EMPTY_F64 = new Float64Array(0);

/** Largest IRD/ORD a QP can have (urdma's limit too); the rings are this size. */
export const MAX_RD_ATOMIC = 128;

export interface QpConfig {
  maxSendWr: number;
  maxRecvWr: number;
  maxSge: number;
  maxInline: number;
  ird: number;
  ord: number;
  window: number;
  /** An unreliable datagram QP (ud-output.ts, ud-input.ts): no peer, no TRP state. */
  ud: boolean;
  /** The TRP window (rdma.trp.window) cwnd stays within. */
  sendWindow?: number;
  /** A UD QP's datagrams to a group are looped back to this data plane's members (multicast.ts). */
  mcastLoop?: boolean;
}

function pow2(n: number): number {
  let p = 1;
  while (p < n) p <<= 1;
  return p;
}

export class Qp {
  /** Index in the RDMA context's QP table (the opaque word the nodes carry). */
  readonly index: number;
  /** = the local UDP port. */
  readonly qpn: number;
  readonly pd: Pd;
  readonly sendCq: Cq;
  readonly recvCq: Cq;
  readonly srq: Srq | null;
  readonly cfg: QpConfig;
  state: number = QpState.RESET;
  /** Our address (0 until connected: the interface's) and the peer's. */
  localAddr = 0;
  remoteAddr = 0;
  remotePort = 0;
  /** The interface its peer is reached through (setPeer): whether its payloads may go in place (transport.ts extPieces). */
  egress = 0;
  /** A UD QP's Q_Key: datagrams carrying another are dropped (ud-input's bad_qkey). */
  qkey = 0;
  /** DDP payload bytes per segment (from the interface MTU). */
  mtuUntagged = 1024;
  mtuTagged = 1024;
  ird: number;
  ord: number;
  destroyed = false;

  // ------------------------------------------------------------ send queue
  /** Slots are made at their first post (sendSlot): creating a QP of 16384 WRs costs no time. */
  readonly sq: SendWr[];
  /** Inline data of every send slot, maxInline bytes each, made at the first inline post. */
  private inline: Mr | null = null;
  sqHead = 0; // oldest not yet completed
  sqNext = 0; // next to start segmenting
  sqAcked = 0; // next whose acknowledgement is awaited (sends and writes complete on ACK)
  sqTail = 0; // next free slot (counters are free-running; slot = counter % maxSendWr)
  sendMsn = 1; // next QN 0 MSN
  readMsn = 1; // next QN 1 MSN
  /** Outstanding Reads/Atomics by read MSN (ORD ring). */
  readonly ordRing: (SendWr | null)[];
  readonly ordMask: number;
  ordOut = 0;

  // ------------------------------------------------------------ receive queue
  readonly rq: RecvWr[];
  rqPosted = 0; // receives posted (the MSN of the latest)
  rqDone = 0; // receives completed (MSNs 1..rqDone)
  /** SRQ receives assigned to MSNs (rqAssigned..), by MSN. */
  srqRing: (RecvWr | null)[];
  readonly srqMask: number;
  srqAssigned = 0;
  /**
   * Receives its program posted that the data plane has not taken in yet (a verbs ring in shared
   * memory, read once per pass): called when a Send finds no receive, before the peer is told
   * there is none. Null: receives come by postRecv. An object, not a closure (see Cq.sink).
   */
  recvSource: RecvSource | null = null;
  /** Bytes placed so far per receive MSN slot (for "message too long" and byte counts). */
  lastWriteLen = 0;
  writeAcc = 0;

  // ------------------------------------------------------------ responder (IRD)
  resp: RespSlot[];
  readonly respMask: number;
  respHead = 0; // oldest response not yet acknowledged
  respNext = 0; // next response to segment
  respTail = 0;
  readExpect = 1; // next QN 1 MSN we expect
  atomicRespMsn = 1; // next QN 3 MSN we send
  termMsn = 1;
  /** A Terminate to send (its bytes: control, hdrct, segment length, offending headers). */
  term: Uint8Array | null = null;
  termLen = 0;
  termSent = false;
  /** The PSN the Terminate first went out with. */
  termPsn = 0;

  // ------------------------------------------------------------ TRP send side
  /**
   * Our initial send PSN: random (a blind spoofer must guess it), drawn at creation and at
   * reset, shown to the application (manual connect hands it to the peer) and sent in REQ /
   * ACCEPT by the connection manager. `sndUna`/`sndNxt` start from it at RTS.
   */
  isn = 0;
  readonly W: number;
  readonly wMask: number;
  sndUna = 0;
  sndNxt = 0;
  txKind: Uint8Array;
  txFlags: Uint8Array;
  txRef: Uint32Array;
  txOff: Uint32Array;
  txLen: Uint32Array;
  txSeq: Float64Array;
  txTime: Float64Array;
  txCounter = 0;
  /** PSNs to retransmit at the next opportunity (a small ring). */
  rtx: Uint32Array;
  rtxHead = 0;
  rtxCount = 0;
  /** Per slot: 0, 1 queued to resend (counted in lostOut), 2 queued but SACKed since (not counted). */
  rtxQueued: Uint8Array;
  srttNs = 0;
  rttvarNs = 0;
  /** The smallest RTT sample (ns; 0 before the first: no ACK is sooner than that). */
  minRttNs = 0;
  rtoNs: number;
  /** Absolute deadline of the retransmission timer (0 = not armed) and its wheel handle. */
  rtoDeadline = 0;
  rtoTimer = -1;
  retries = 0;

  // ------------------------------------------------------------ congestion control (congestion.ts)
  /** Congestion.* chosen when the peer was set (its interface's, else the stack's), in force from startSend. */
  ccChoice: number = Congestion.NONE;
  ccAlgo = 0;
  /** Congestion window and slow-start threshold, in segments (cwnd fractional in avoidance). */
  cwnd = 0;
  ssthresh = 0;
  /** A reduction covers the window up to ccRecover; none again before the ACK passes it. */
  ccInRecovery = false;
  ccRecover = 0;
  /** The window before a timeout (F-RTO's undo), 0 when none. */
  ccUndoCwnd = 0;
  ccUndoSsthresh = 0;
  /** DCTCP: alpha, the current window of observation (ends at ccWinEnd), its acked and marked segments. */
  ccAlpha = 1;
  ccWinEnd = 0;
  ccWinAcked = 0;
  ccWinMarked = 0;
  /** CUBIC: the window before the last reduction, the epoch (ns, 0 = none yet), K (s), Reno's estimate. */
  cubicWmax = 0;
  cubicEpochNs = 0;
  cubicK = 0;
  cubicWest = 0;
  /** Segments in flight the peer SACKed (congestion control counts what is in the network: RFC 6675's pipe). */
  sacked = 0;
  /**
   * Segments found lost and queued to be resent, not resent yet (rtxQueued 1): no longer in the
   * network, so out of the pipe until they go again (RFC 6675: a lost segment counts 0, its
   * retransmission 1).
   */
  lostOut = 0;
  /**
   * HyStart++ (congestion.ts): the current round ends when sndUna reaches hsRoundEnd; the
   * smallest RTT of this round and the last (ns, Infinity: none), this round's samples, rounds
   * in Conservative Slow Start (0: not in it) and its baseline RTT; slow starts it ended.
   */
  hsRoundEnd = 0;
  hsCurMinNs = Infinity;
  hsLastMinNs = Infinity;
  hsSamples = 0;
  hsCssRounds = 0;
  hsCssBaseNs = Infinity;
  hystartExits = 0;
  /**
   * Cwnd validation (RFC 7661): the most segments in the network (the pipe) since the round
   * that ends when sndUna reaches ccUseEnd began, and in the round before it.
   */
  ccUsed = 0;
  ccUsedLast = 0;
  ccUseEnd = 0;
  /** The window went to 1 in this series of timeouts (transport.ts onTimeout); cleared by an ACK of new data. */
  ccRtoDone = false;
  /** Resends that may go whatever the window (RFC 6675 (4.3): the first of a recovery; a timeout's). */
  rtxForce = 0;
  /** Pacing: when the next new segment may go (ns, congestion.ts paceWait), and its wheel timer (-1 none). */
  paceNs = 0;
  paceTimer = -1;
  /** The peer's echoed CE counter as last taken (12 bits). */
  ccEchoSeen = 0;
  /** Receive side: CE-marked data packets received (echoed, 12 bits on the wire). */
  ceReceived = 0;
  /** Counters: marks the peer echoed, losses seen (fast retransmits and timeouts), window reductions. */
  ceMarks = 0;
  lossEvents = 0;
  ccReductions = 0;
  ecnReductions = 0;
  /** Window reductions for a queue building up on the path (congestion.ts's delay component). */
  delayReductions = 0;
  /** The smoothed RTT at the last loss behind a queue: the bottleneck queue full (0: none yet). */
  fullRttNs = 0;

  // ------------------------------------------------------------ TRP receive side
  rcvNxt = 0; // cumulative: every PSN below arrived
  deliverNext = 0; // every PSN below was delivered in order
  rcvHigh = 0; // one past the highest PSN received
  rxGot: Uint8Array;
  rxEv: Uint8Array;
  rxW: Uint32Array;
  /** Terminates received, by PSN slot (rare; kept as bytes). */
  rxTerm: (Uint8Array | null)[];
  ackNeeded = false;
  /** A lone in-order data packet's ACK is held for data going back to carry it, until ackDue (ns). */
  ackHeld = false;
  ackDue = 0;
  /**
   * SACK pacing: the range of PSNs newly received above a hole since the last SACKs went out
   * (only ranges touching it are reported again at once), and when every range was last
   * reported (all of them again at most once per RTT, in case SACKs were lost).
   */
  sackDirty = false;
  sackLo = 0;
  sackHi = 0;
  sackAllNs = 0;

  // ------------------------------------------------------------ scheduling, FIN, CM
  inTxQueue = false;
  dispatchMark = 0;
  finSent = false;
  /** The PSN our FIN carried, and how often it was sent again to a challenge ACK. */
  finPsn = 0;
  finResends = 0;
  /** Connection manager state (cm.ts). */
  cmRole: 'none' | 'active' | 'passive' = 'none';
  privateData: Uint8Array = new Uint8Array(0);
  /**
   * Passive side: accepted, but nothing from the peer has shown it saw our ACCEPT (a packet
   * acknowledging within our window: only who got the ACCEPT knows our initial PSN). Such a QP
   * counts against its listener's backlog and is reaped if it stays so (cm.ts).
   */
  halfOpen = false;
  acceptedNs = 0;
  /** ACCEPTs sent for this connection, and when the last one went (repeated REQs). */
  cmAccepts = 0;
  cmAcceptNs = 0;
  /** The listener that accepted it (passive side), and the peer's initial PSN from its REQ. */
  listenPort = 0;
  peerIsn = 0;

  // ------------------------------------------------------------ counters
  txPackets = 0;
  rxPackets = 0;
  retransmits = 0;
  fastRetransmits = 0;
  timeouts = 0;
  duplicates = 0;
  txBytes = 0;
  rxBytes = 0;

  constructor(
    index: number,
    qpn: number,
    pd: Pd,
    sendCq: Cq,
    recvCq: Cq,
    srq: Srq | null,
    cfg: QpConfig,
    rtoInitNs: number,
  ) {
    this.index = index;
    this.qpn = qpn;
    this.pd = pd;
    this.sendCq = sendCq;
    this.recvCq = recvCq;
    this.srq = srq;
    this.cfg = cfg;
    this.ird = cfg.ird;
    this.ord = cfg.ord;
    this.sq = new Array<SendWr>(cfg.maxSendWr);
    this.rq = srq ? [] : new Array<RecvWr>(cfg.maxRecvWr);
    this.ordMask = MAX_RD_ATOMIC - 1;
    this.ordRing = new Array<SendWr | null>(this.ordMask + 1).fill(null);
    const W = pow2(cfg.window);
    this.W = W;
    this.wMask = W - 1;
    this.srqMask = srq ? W - 1 : 0;
    // IRD slots: the most this QP can ever be given (ibv_modify_qp lowers, never raises it).
    this.respMask = pow2(cfg.ird) - 1;
    // The window's arrays come with a peer (window()): a QP that never connects costs little.
    this.srqRing = [];
    this.resp = [];
    this.txKind = this.txFlags = this.rtxQueued = this.rxGot = this.rxEv = EMPTY_U8;
    this.txRef = this.txOff = this.txLen = this.rtx = this.rxW = EMPTY_U32;
    this.txSeq = this.txTime = EMPTY_F64;
    this.rxTerm = [];
    this.rtoNs = rtoInitNs;
    // A UD QP has no window (no peer); from an SRQ it still binds receives in order.
    if (cfg.ud && srq) this.srqRing = new Array<RecvWr | null>(W).fill(null);
    widenNumberFields(this); // PSNs, times in ns, byte counts: one map for every QP
  }

  /**
   * Allocate the send and receive windows and the IRD slots (at RTR or when the connection
   * manager connects it: before that no packet of the QP is sent or taken). Idempotent.
   */
  window(): void {
    if (this.txKind.length !== 0) return;
    const W = this.W;
    if (this.srq) this.srqRing = new Array<RecvWr | null>(W).fill(null);
    this.resp = Array.from({ length: this.respMask + 1 }, () => new RespSlot());
    this.txKind = new Uint8Array(W);
    this.txFlags = new Uint8Array(W);
    this.txRef = new Uint32Array(W);
    this.txOff = new Uint32Array(W);
    this.txLen = new Uint32Array(W);
    this.txSeq = new Float64Array(W);
    this.txTime = new Float64Array(W);
    this.rtx = new Uint32Array(W);
    this.rtxQueued = new Uint8Array(W);
    this.rxGot = new Uint8Array(W);
    this.rxEv = new Uint8Array(W);
    this.rxW = new Uint32Array(W * RX_WORDS);
    this.rxTerm = new Array<Uint8Array | null>(W).fill(null);
  }

  /** The send slot of sqTail, made at its first use (posting is not the data path). */
  sendSlot(): SendWr {
    const i = this.sqTail % this.sq.length;
    return this.sq[i] ?? (this.sq[i] = new SendWr(this.cfg.maxSge));
  }

  /** The receive slot of rqPosted, made at its first use. */
  recvSlot(): RecvWr {
    const i = this.rqPosted % this.rq.length;
    return this.rq[i] ?? (this.rq[i] = new RecvWr(this.cfg.maxSge));
  }

  /** Send and receive slots made so far, and whether the inline area exists (made lazily; tests). */
  slotsMade(): { send: number; recv: number; inlineBytes: number } {
    let send = 0,
      recv = 0;
    for (const w of this.sq) if (w !== undefined) send++;
    for (const w of this.rq) if (w !== undefined) recv++;
    return { send, recv, inlineBytes: this.inline === null ? 0 : this.inline.memory.byteLength };
  }

  /** The inline area of the send slots (an MR of no PD): slot i has bytes [i * maxInline, (i + 1) * maxInline). */
  inlineArea(): Mr {
    return (this.inline ??= new Mr(-1, new Pd(-1), 0, new Uint8Array(this.cfg.maxSendWr * this.cfg.maxInline), 0));
  }

  /** RTS: our sequence numbers start at `psn` (nothing may be in flight yet). */
  startSend(psn: number): void {
    this.sndUna = this.sndNxt = psn >>> 0;
    this.sendStarted = true;
    ccInit(this, this.ccChoice, this.cfg.sendWindow ?? this.W);
  }

  /** A timeout sent only its oldest segment; the next ACK decides about the rest up to rtoProbeHigh. */
  rtoProbe = false;
  rtoProbePsn = 0;
  rtoProbeHigh = 0;
  /** Timeouts the next ACK showed were not losses (F-RTO): counted, nothing resent. */
  spuriousTimeouts = 0;
  /**
   * A timeout's question (QUIC's probe timeout, RFC 9002 section 6.2): a PROBE to send (ddp-output),
   * one out and not answered yet, PROBEs sent, whether the peer ever answered one with a
   * PROBE_ACK (then every timeout of a series asks, and nothing is resent until an answer says
   * what is missing; else the second timeout resends as F-RTO does), and a PROBE of the peer's
   * to answer.
   */
  probeNeeded = false;
  probeOut = false;
  probes = 0;
  peerProbes = false;
  probeAnswer = false;

  /** Retransmissions of one segment before the QP fails; -1: rdma.trp.max-retries. */
  maxRetries = -1;

  /** Whether our send PSN is set (RTS, a CM connect, or adopted in RTR: trp-input). */
  sendStarted = false;

  /** RTR: the peer's first data packet carries `psn`. */
  startRecv(psn: number): void {
    this.rcvNxt = this.deliverNext = this.rcvHigh = psn >>> 0;
  }

  /**
   * Whether `ack` (a cumulative ACK in a packet from the peer) is one the peer can honestly
   * send: within [snd_una - W, snd_nxt] (RFC 5961 section 5). Anything else is dropped: a blind
   * spoofer must then guess both a PSN in the receive window and an ACK in the send window.
   */
  ackAcceptable(ack: number): boolean {
    const d = (ack - this.sndUna) | 0;
    return d >= -this.W && d <= ((this.sndNxt - this.sndUna) | 0);
  }

  get stateName(): QpStateName {
    return QP_STATE_NAMES[this.state];
  }

  /** Send WRs posted and not yet completed. */
  get sqDepth(): number {
    return this.sqTail - this.sqHead;
  }

  /** Receives posted and not yet completed (own RQ). */
  get rqDepth(): number {
    return this.rqPosted - this.rqDone;
  }

  /** Data packets in flight (sent, not cumulatively acknowledged). */
  get inFlight(): number {
    return (this.sndNxt - this.sndUna) | 0;
  }

  /**
   * The receive WR that a Send segment with `msn` lands in: null when there is no buffer (the
   * peer gets a Terminate), SRQ_LATER when the QP draws from an SRQ and an earlier MSN has no
   * receive bound yet. SRQ receives are bound strictly in MSN order, one per message, as its
   * first segment arrives: a segment naming a later MSN cannot take receives for the messages
   * before it (one spoofed segment could otherwise take a whole window of receives from every
   * other QP of the SRQ). Such a segment is dropped unacknowledged and comes again.
   */
  recvFor(msn: number): RecvWr | null {
    if (((msn - this.rqDone) | 0) <= 0) return null;
    if (this.srq === null) {
      if (((msn - this.rqPosted) | 0) > 0) return null;
      return this.rq[(msn - 1) % this.rq.length];
    }
    if (((msn - this.rqDone) | 0) > this.W) return null;
    const ahead = (msn - this.srqAssigned) | 0;
    if (ahead <= 0) return this.srqRing[msn & this.srqMask];
    if (ahead > 1) return SRQ_LATER;
    const wr = this.srq.take();
    if (wr === null) return null;
    this.srqAssigned++;
    this.srqRing[this.srqAssigned & this.srqMask] = wr;
    return wr;
  }
}

/** recvFor's answer for an SRQ segment that must wait for the MSNs before it (never a real receive). */
export const SRQ_LATER = new RecvWr(1);
