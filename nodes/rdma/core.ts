/**
 * The RDMA state every RDMA node shares on one data-plane thread: the QP table (by index, and
 * by local UDP port), the MR table (by STag), TRP settings, the queue of QPs with something to
 * transmit, completion delivery and asynchronous events. The verbs API (nodes/rdma/stack.ts) creates and
 * destroys what lives here; the nodes only read and update it.
 */
import { type Graph, type NodeRuntime, throwLater } from '../../graph/index.ts';
import type { Netstack } from '../netstack.ts';
import type { Qp } from './qp.ts';
import { DEFAULT_MCAST_PORT, McastTable } from './multicast.ts';
import { Access, type Completion, type Cq, type Mr, type Pd } from './verbs.ts';
import { TRP_HEADER_BYTES, TrpOp } from './wire.ts';

export interface TrpSettings {
  /** Data packets in flight per QP (default 256). */
  window: number;
  rtoMinMs: number;
  rtoMaxMs: number;
  /** RTO before the first RTT sample (nodes/rdma/stack.ts default: max(rtoMin, 10 ms)). */
  rtoInitMs: number;
  /** Retransmissions of one packet before the QP fails with retry-exceeded (default 7). */
  maxRetries: number;
  /**
   * How long the ACK of a lone in-order data packet waits for data going back to carry it (µs,
   * default 100; 0: every pass that takes data acknowledges it). Below rtoMinMs.
   */
  ackDelayUs: number;
}

export interface RdmaEvent {
  type:
    'qp-error' | 'qp-established' | 'qp-disconnected' | 'cq-error' | 'srq-limit' | 'connect-failed' | 'connect-request';
  qpn?: number;
  cq?: number;
  srq?: number;
  reason?: string;
}

export interface RdmaCounters {
  badAck: number;
  retryExceeded: number;
  terminatesSent: number;
  terminatesReceived: number;
}

/**
 * STag = MR table index << keyBits | key. The index takes the bits max-mrs needs and the key
 * the rest (at least MIN_STAG_KEY_BITS): keys are random, so a stale or guessed STag names a
 * live MR only by a 1 in 2^keyBits chance, and a reused slot does not bring an old STag back.
 */
export const MIN_STAG_KEY_BITS = 12;
export const MAX_MRS = 2 ** (32 - MIN_STAG_KEY_BITS) - 1;

/** Key bits of the STags of a table of `maxMrs` regions (index 1..maxMrs). */
export function stagKeyBits(maxMrs: number): number {
  return 32 - (32 - Math.clz32(maxMrs));
}

export class RdmaCore {
  readonly graph: Graph;
  readonly net: Netstack;
  readonly qps: (Qp | null)[];
  /** QP table index by local UDP port, -1 = none. */
  readonly qpByPort = new Int32Array(65536).fill(-1);
  readonly mrs: (Mr | null)[];
  /** STag = index << stagKeyBits | key. */
  readonly stagKeyBits: number;
  readonly window: number;
  /** How long an in-order data packet's ACK may wait for data going back to carry it (ns; 0: none). */
  readonly ackDelayNs: number;
  /** Congestion.* every new RC QP gets (rdma.congestion). */
  congestion = 0;
  readonly rtoMinNs: number;
  readonly rtoMaxNs: number;
  readonly rtoInitNs: number;
  readonly maxRetries: number;
  readonly timerTickNs: number;
  readonly counters: RdmaCounters = { badAck: 0, retryExceeded: 0, terminatesSent: 0, terminatesReceived: 0 };
  /** QPs with something to transmit (ring of QP indices). */
  readonly txq: Int32Array;
  txHead = 0;
  txCount = 0;
  /** ddp-output, which serves txq: interrupted by schedule() (null: only the loop is woken). */
  txNode: NodeRuntime | null = null;
  /** The node that owns the retransmission timers (set when registered). */
  trpOutput!: NodeRuntime;
  onEvent: ((e: RdmaEvent) => void) | null = null;
  /** UD QPs attached to multicast groups (multicast.ts). */
  readonly mcast: McastTable;
  // CQs with completions to announce: the first nDirty of `dirty` (cleared entries are null, never
  // trimmed: setting an array's length is a runtime call, ~1 % of a latency run's time).
  private dirty: (Cq | null)[] = [];
  private nDirty = 0;
  private dirtySpare: (Cq | null)[] = [];
  private notifyScheduled = false;

  constructor(
    graph: Graph,
    net: Netstack,
    maxQps: number,
    maxMrs: number,
    trp: TrpSettings,
    mcastPort = DEFAULT_MCAST_PORT,
  ) {
    this.graph = graph;
    this.net = net;
    this.mcast = new McastTable(net, mcastPort);
    this.qps = new Array<Qp | null>(maxQps).fill(null);
    this.mrs = new Array<Mr | null>(maxMrs + 1).fill(null); // index 0 unused: STag 0 is never valid
    this.stagKeyBits = stagKeyBits(maxMrs);
    this.window = trp.window;
    this.rtoMinNs = trp.rtoMinMs * 1e6;
    this.rtoMaxNs = trp.rtoMaxMs * 1e6;
    this.rtoInitNs = trp.rtoInitMs * 1e6;
    this.maxRetries = trp.maxRetries;
    this.ackDelayNs = trp.ackDelayUs * 1e3;
    this.timerTickNs = graph.timers.tickNs;
    // Room for every QP twice: a destroyed QP's stale entry and its index's next owner.
    this.txq = new Int32Array(2 * maxQps);
  }

  /**
   * What a peer's STag names for QP `qp`: a valid MR or bound memory window of `pd` (a type 2
   * window only through the QP it was bound to), else null.
   */
  mrFor(stag: number, pd: Pd, qp: object): Mr | null {
    const mr = this.mrs[stag >>> this.stagKeyBits];
    if (mr === undefined || mr === null || mr.stag !== stag || !mr.valid || mr.pd !== pd) return null;
    if (mr.boundQp !== null && mr.boundQp !== qp) return null;
    return mr;
  }

  /** The MR an lkey names if it is valid and in `pd` (never a window: windows are remote only), else null. */
  localMr(lkey: number, pd: Pd): Mr | null {
    const mr = this.mrs[lkey >>> this.stagKeyBits];
    if (mr === undefined || mr === null || mr.stag !== lkey || !mr.valid || mr.pd !== pd || mr.mw !== null) return null;
    return mr;
  }

  /**
   * Whether a peer's Send with Invalidate may invalidate `mr`: an MR registered remote-invalidate
   * (RFC 5040 6.1: an STag the ULP let the peer invalidate), or a type 2 memory window (IBTA:
   * type 1 windows cannot be invalidated).
   */
  static remotelyInvalidatable(mr: Mr): boolean {
    return mr.mw !== null ? mr.mw.type === 2 : (mr.access & Access.REMOTE_INVALIDATE) !== 0;
  }

  /** Invalidate `mr` (an MR or a bound window: the window is freed from its MR). */
  static invalidate(mr: Mr): void {
    mr.valid = false;
    const mw = mr.mw;
    if (mw !== null && mw.parent !== null) {
      mw.parent.windows--;
      mw.parent = null;
    }
  }

  /** Put a QP on the transmit queue (ddp-output serves it on the next pass). */
  schedule(qp: Qp): void {
    if (qp.inTxQueue) return;
    qp.inTxQueue = true;
    this.txq[(this.txHead + this.txCount) % this.txq.length] = qp.index;
    this.txCount++;
    if (this.txNode !== null) this.graph.interrupt(this.txNode);
    else this.graph.wake();
  }

  /** Take the next QP to serve, or -1. */
  nextTx(): number {
    if (this.txCount === 0) return -1;
    const ix = this.txq[this.txHead];
    this.txHead = (this.txHead + 1) % this.txq.length;
    this.txCount--;
    return ix;
  }

  complete(cq: Cq, c: Completion): void {
    if (cq.sink !== null) {
      if (!cq.sink.take(c) && !cq.error) {
        cq.error = true;
        this.event({
          type: 'cq-error',
          cq: cq.handle,
          reason: `completion queue ${cq.handle} overflowed (depth ${cq.depth})`,
        });
      }
      return;
    }
    // Reported once, when the CQ goes to error (later completions go to cq.overflowed too).
    const wasError = cq.error;
    if (!cq.push(c) && !wasError)
      this.event({
        type: 'cq-error',
        cq: cq.handle,
        reason: `completion queue ${cq.handle} overflowed (depth ${cq.depth})`,
      });
    if (cq.dirty && !cq.notifyQueued) {
      cq.notifyQueued = true;
      if (this.nDirty === this.dirty.length) this.dirty.push(cq);
      else this.dirty[this.nDirty] = cq;
      this.nDirty++;
      if (!this.notifyScheduled) {
        this.notifyScheduled = true;
        this.graph.defer(this.notify);
      }
    }
  }

  private readonly notify = (): void => {
    this.notifyScheduled = false;
    // Two lists, swapped: a callback's completions (on another CQ) queue into the other one.
    const list = this.dirty,
      n = this.nDirty;
    this.dirty = this.dirtySpare;
    this.nDirty = 0;
    this.dirtySpare = list;
    for (let i = 0; i < n; i++) {
      const cq = list[i] as Cq;
      list[i] = null;
      cq.notifyQueued = false;
      cq.dirty = false;
      try {
        cq.onCompletion?.(cq);
      } catch (e) {
        // The application's error, thrown again as its own (uncaught); the other CQs still hear.
        throwLater(e);
      }
    }
  };

  event(e: RdmaEvent): void {
    this.onEvent?.(e);
  }

  /**
   * FIN at `psn` (our next PSN, or the one a challenge ACK says the peer expects) with our
   * cumulative ACK, straight out through UDP. The peer takes it only at its expected PSN.
   */
  sendFin(qp: Qp, psn: number): void {
    qp.finPsn = psn;
    this.sendHeader(qp, TrpOp.FIN, psn);
  }

  /** A pure ACK (our cumulative ACK at our next PSN), straight out through UDP. */
  sendAck(qp: Qp): void {
    this.sendHeader(qp, TrpOp.DATA, qp.sndNxt);
  }

  private sendHeader(qp: Qp, op: number, psn: number): void {
    const m = new Uint8Array(TRP_HEADER_BYTES);
    const v = new DataView(m.buffer);
    v.setUint32(0, psn);
    v.setUint32(4, qp.rcvNxt);
    // DATA (a pure ACK) carries the CE echo in the low bits (PROTOCOL.md section 5), FIN none.
    v.setUint16(8, (op << 12) | (op === TrpOp.DATA ? qp.ceReceived & 0xfff : 0));
    this.net.udp.sendTo(m, qp.remoteAddr, qp.remotePort, qp.qpn, qp.localAddr);
  }

  /** Arm the retransmission timer of a QP (lazy: one wheel timer per QP, re-armed on expiry). */
  armRto(qp: Qp, nowNs: number): void {
    if (qp.rtoDeadline === 0) qp.rtoDeadline = nowNs + qp.rtoNs;
    if (qp.rtoTimer < 0) qp.rtoTimer = this.graph.startTimer(this.trpOutput, qp.rtoDeadline - nowNs, qp.index);
  }
}
