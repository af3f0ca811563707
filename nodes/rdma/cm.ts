/**
 * The connection manager (nodes/rdma/PROTOCOL.md section 6), in band on UDP. REQ/ACCEPT/REJECT carry,
 * after the TRP header: private-data length(2) ird(2) ord(2) and up to 512 bytes of private
 * data; the datagram length must be exactly 16 + that length.
 *
 * Sequence numbers and the connection id (our extension of urdma's exchange, where both TRP
 * fields were 0): REQ's psn is the active QP's random initial PSN, which also names this
 * connection attempt; ACCEPT's psn is the passive QP's random initial PSN and its ack echoes
 * the REQ's psn (the next PSN the acceptor expects); REJECT's ack echoes it too. An ACCEPT or
 * REJECT that does not echo it is not an answer to our REQ (a spoofer must guess 32 random
 * bits), whatever address and port it comes from.
 *
 * Active side: `connect` sends REQ from the QP's port to the listener and resends it every
 * `retryMs` until ACCEPT or REJECT arrives or `timeoutMs` passes (urdma sends it once). The
 * ACCEPT's source port is the peer QP's port; IRD/ORD are settled, the QP goes to RTS and a
 * pure ACK goes back at once (the handshake's third packet: it shows the acceptor that we
 * got its ACCEPT).
 *
 * Passive side: a listener port is bound to cm-input. A REQ makes the listener's `accept`
 * callback create a QP (on a new port), IRD := REQ.ord and ORD := REQ.ird (REJECT if either
 * is over the limit), the QP goes to RTS and ACCEPT goes out from its port. Until something
 * from the peer acknowledges within its window (only who got the ACCEPT knows its initial
 * PSN) the QP is half-open: a listener holds at most `backlog` of those (further REQs are
 * dropped unanswered, as a full SYN queue does), and one still half-open after
 * `halfOpenTimeoutNs` is destroyed (reaped). A repeated REQ (our ACCEPT was lost) gets the same
 * ACCEPT again, not a second QP, and only while half-open, at most every REACCEPT_NS and
 * REACCEPT_MAX times: spoofed REQs cannot turn us into an amplifier.
 *
 * SIDR_REQ and SIDR_REP (a UD QP's datagram service request and its answer, PROTOCOL.md
 * section 6.1) have the same layout and go to sidr.ts.
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, OPAQUE_WORDS, errorTable } from '../../graph/index.ts';
import { Ip4Opaque } from '../ip4/ip4.ts';
import { formatIp4 } from '../net/address.ts';
import type { RdmaCore } from './core.ts';
import { MAX_RD_ATOMIC, type Qp, QpState } from './qp.ts';
import { type PendingSidr, type SidrListener, sidrReplyInput, sidrRequestInput, sidrTimer } from './sidr.ts';
import {
  CM_PRIVATE_DATA,
  CM_IRD,
  CM_MAX_PRIVATE_DATA,
  CM_ORD,
  CM_PARAMS_BYTES,
  CM_PD_LEN,
  CM_REJECT_REASON_NAMES,
  CmRejectReason,
  TRP_ACK,
  TRP_HEADER_BYTES,
  TRP_OP_NAMES,
  TRP_OP_SHIFT,
  TRP_OPCODE,
  TRP_PSN,
  TrpOp,
} from './wire.ts';

export const CM_INPUT = 'cm-input';

const ERROR_TABLE = errorTable({
  MALFORMED: { name: 'malformed', description: 'CM message with a bad length or values', severity: 'error' },
  NO_LISTENER: {
    name: 'no_listener',
    description: 'REQ or SIDR_REQ to a port with no listener for it (REJECT or SIDR_REP sent)',
    severity: 'warn',
  },
  UNEXPECTED: {
    name: 'unexpected',
    description: 'ACCEPT/REJECT/SIDR_REP for a QP not asking, or from another host or port',
    severity: 'info',
  },
  REQUESTS: { name: 'requests', description: 'connection and datagram service requests received', severity: 'info' },
  BACKLOG_FULL: {
    name: 'backlog_full',
    description: "request beyond the listener's backlog (a REQ dropped or REJECTed, a SIDR_REQ refused)",
    severity: 'warn',
  },
  REPEATED: {
    name: 'repeated',
    description: 'repeated REQ or SIDR_REQ not answered (held, connection up, or re-answer limit)',
    severity: 'info',
  },
  REAPED: {
    name: 'reaped',
    description: 'half-open connections destroyed (no traffic after ACCEPT)',
    severity: 'warn',
  },
  WRONG_ID: {
    name: 'wrong_id',
    description: 'ACCEPT/REJECT/SIDR_REP not echoing our request (spoofed or stale)',
    severity: 'warn',
  },
  RELISTEN: {
    name: 'relisten',
    description: 'REQ to a port whose listener closed within a second (dropped: the requester resends)',
    severity: 'info',
  },
});
export const CmError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

/**
 * A REQ to a port whose listener closed less than this ago is dropped, not REJECTed: a program
 * may take its listener down and up again between two connections (perftest's -R servers do,
 * between the handshake's connection and the test's), and the requester resends its REQ every
 * rdma.cm-retry-ms. After it, a REQ there is REJECTed at once, as to any closed port.
 */
const RELISTEN_GRACE_NS = 1000e6;
/** Closed ports remembered for that (the oldest forgotten first). */
const RELISTEN_MAX = 1024;

/** A repeated REQ of a half-open connection gets its ACCEPT again at most this often / this many times. */
const REACCEPT_NS = 20e6;
const REACCEPT_MAX = 8;
/** Timer user ids at and above this are half-open checks of the QP at (id - REAP_TIMER). */
const REAP_TIMER = 1 << 20;
/** And at and above this, SIDR_REQ retries of the UD QP at (id - SIDR_TIMER). */
const SIDR_TIMER = 2 << 20;

export interface ConnectRequest {
  /** The peer's address and (data) port. */
  address: string;
  port: number;
  listenPort: number;
  ird: number;
  ord: number;
  privateData: Uint8Array;
}

/** Why an active connect failed: the code says what happened, the message says it in words. */
export type CmFailure = 'rejected' | 'timeout' | 'cancelled' | 'refused-parameters';

/** A failed `connect`: `code` is what callers branch on (never the message text). */
export class CmConnectError extends Error {
  readonly code: CmFailure;
  /** The REJECT's private data (code 'rejected'). */
  readonly privateData?: Uint8Array;
  /** The REJECT's reason (code 'rejected'): a `CmRejectReason`. */
  readonly rejectReason: number;
  constructor(code: CmFailure, message: string, privateData?: Uint8Array, rejectReason = 0) {
    super(message);
    this.code = code;
    this.privateData = privateData;
    this.rejectReason = rejectReason;
    this.name = 'CmConnectError';
  }
}

/**
 * What a listener's accept callback returns: a QP in INIT to connect, a rejection, or `defer`:
 * the request is held (counted in the backlog, not answered) until `acceptDeferred` or
 * `rejectDeferred` names its answer (librdmacm's passive side creates its QP after it has seen
 * the request).
 */
export type AcceptDecision =
  { qp: Qp; privateData?: Uint8Array } | { reject: true; privateData?: Uint8Array; reason?: string } | { defer: true };

/** A request held for a deferred answer (Listener.deferred), by the requester's "address:port". */
export interface DeferredRequest {
  src: number;
  srcPort: number;
  listenPort: number;
  peerIsn: number;
  ird: number;
  ord: number;
  atNs: number;
}

export interface Listener {
  port: number;
  accept: (req: ConnectRequest) => AcceptDecision;
  /** Most half-open connections at once. */
  backlog: number;
  /** Accepted QPs that may still be half-open (pruned as they open, at most `backlog`). */
  readonly halfOpen: Set<Qp>;
  /** Told when a half-open QP it accepted was reaped (destroyed). */
  onReap?: (qp: Qp, reason: string) => void;
  /** Requests whose answer was deferred (counted in the backlog), by "address:port". */
  deferred?: Map<string, DeferredRequest>;
  /** Answer a request beyond the backlog with REJECT (default: drop it, as a full SYN queue does). */
  rejectWhenFull?: boolean;
  /** A listener for datagram service requests (SIDR_REQ, sidr.ts); its REQs are refused. */
  sidr?: SidrListener;
}

export interface PendingConnect {
  qp: Qp;
  startNs: number;
  timeoutNs: number;
  retryNs: number;
  req: Uint8Array;
  resolve: (r: { privateData: Uint8Array }) => void;
  reject: (e: Error) => void;
  /**
   * A deferred connect (librdmacm's active side): the ACCEPT is handed here with what the QP
   * needs, and the program moves the QP itself (to RTR and RTS); the handshake's third packet is
   * sent when it says so (`core.sendAck`). Without it the QP goes to RTS at once.
   */
  deferred?: (a: { src: number; srcPort: number; ird: number; ord: number; psn: number }) => void;
}

/** Hooks the verbs layer gives the CM (QP state changes live there). */
export interface CmHooks {
  /** To RTS toward the peer, receiving from `peerIsn`; throws (a VerbsError) when it cannot (no route). */
  established(qp: Qp, peerAddr: number, peerPort: number, ird: number, ord: number, peerIsn: number): void;
  failed(qp: Qp, reason: string): void;
  /** Destroy a half-open QP (no traffic after our ACCEPT). */
  reap(qp: Qp, reason: string): void;
}

export class ConnectionManager {
  readonly core: RdmaCore;
  readonly listeners = new Map<number, Listener>();
  readonly pending = new Map<number, PendingConnect>(); // by QP index
  /** Datagram service requests under way (sidr.ts), by their UD QP's index. */
  readonly sidrPending = new Map<number, PendingSidr>();
  /**
   * QPs this side accepted, by their requester's "address:port" (repeated REQs), whichever
   * listener made them and whether it still listens: a program that accepts one connection and
   * closes its listener (perftest's servers) must still see the requester's repeated REQ (our
   * ACCEPT was late or lost) as the same request, not as a REQ to a closed port (REJECT: the
   * requester gives up on a connection the other side holds). An entry goes with its QP
   * (forget); at most one per QP, so never more than rdma.max-qps.
   */
  readonly accepted = new Map<string, Qp>();
  /** Ports whose listener closed lately, with when (RELISTEN_GRACE_NS); at most RELISTEN_MAX. */
  readonly closedAt = new Map<number, number>();
  hooks!: CmHooks;
  rt!: NodeRuntime;
  /** How long an accepted connection may stay half-open before it is reaped. */
  halfOpenTimeoutNs = 5000e6;

  constructor(core: RdmaCore) {
    this.core = core;
  }

  /** A CM message: TRP header (psn, ack, opcode), then the parameters and private data. */
  static message(op: number, ird: number, ord: number, pd: Uint8Array, psn = 0, ack = 0): Uint8Array {
    const m = new Uint8Array(TRP_HEADER_BYTES + CM_PARAMS_BYTES + pd.length);
    const v = new DataView(m.buffer);
    v.setUint32(TRP_PSN, psn);
    v.setUint32(TRP_ACK, ack);
    v.setUint16(TRP_OPCODE, op << TRP_OP_SHIFT);
    v.setUint16(CM_PD_LEN, pd.length);
    v.setUint16(CM_IRD, ird);
    v.setUint16(CM_ORD, ord);
    m.set(pd, CM_PRIVATE_DATA);
    return m;
  }

  send(msg: Uint8Array, dst: number, dstPort: number, srcPort: number): void {
    this.core.net.udp.sendTo(msg, dst, dstPort, srcPort);
  }

  /** Start an active connect (the QP is bound to its port and in INIT). */
  connect(p: PendingConnect, dst: number, dstPort: number): void {
    this.pending.set(p.qp.index, p);
    this.send(p.req, dst, dstPort, p.qp.qpn);
    this.core.graph.startTimer(this.rt, p.retryNs, p.qp.index);
  }

  cancel(qp: Qp, reason: string): void {
    this.forget(qp);
    const ps = this.sidrPending.get(qp.index);
    if (ps !== undefined && ps.qp === qp) {
      this.sidrPending.delete(qp.index);
      ps.done(new CmConnectError('cancelled', reason));
    }
    const p = this.pending.get(qp.index);
    if (!p) return;
    this.pending.delete(qp.index);
    p.reject(new CmConnectError('cancelled', reason));
  }

  /** The listener on `port` closed (unlisten). */
  listenerClosed(port: number): void {
    this.closedAt.delete(port);
    this.closedAt.set(port, this.core.graph.clock.nowNs());
    if (this.closedAt.size > RELISTEN_MAX) this.closedAt.delete(this.closedAt.keys().next().value as number);
  }

  /** QP `qp` (going: destroyed, reset, in ERROR) is no longer the answer to its requester's REQ. */
  forget(qp: Qp): void {
    if (qp.cmRole !== 'passive') return;
    const key = `${qp.remoteAddr}:${qp.remotePort}`;
    if (this.accepted.get(key) === qp) this.accepted.delete(key);
  }

  /** The QP accepted for requester `key` on listening port `port`, if it is still there. */
  private acceptedFrom(key: string, port: number): Qp | undefined {
    const qp = this.accepted.get(key);
    return qp !== undefined && qp.listenPort === port ? qp : undefined;
  }

  /** The timer id of UD QP `index`'s SIDR_REQ retries. */
  sidrTimerId(index: number): number {
    return SIDR_TIMER + index;
  }

  /** REQ retransmission timer, half-open checks (user >= REAP_TIMER) and SIDR_REQ retries. */
  timer(user: number): void {
    if (user >= SIDR_TIMER) return sidrTimer(this, user - SIDR_TIMER);
    if (user >= REAP_TIMER) return this.reapCheck(user - REAP_TIMER);
    const index = user;
    const p = this.pending.get(index);
    if (!p) return;
    const now = this.core.graph.clock.nowNs();
    if (now - p.startNs >= p.timeoutNs) {
      this.pending.delete(index);
      const why = `connect to ${formatIp4(p.qp.remoteAddr)}:${p.qp.remotePort} timed out after ${Math.round(p.timeoutNs / 1e6)} ms`;
      this.hooks.failed(p.qp, why);
      p.reject(new CmConnectError('timeout', why));
      return;
    }
    this.send(p.req, p.qp.remoteAddr, p.qp.remotePort, p.qp.qpn);
    this.core.graph.startTimer(this.rt, p.retryNs, index);
  }

  /** Reap the passive QP at `index` if it is still half-open after the timeout. */
  private reapCheck(index: number): void {
    const qp = this.core.qps[index];
    if (qp === null || !qp.halfOpen || qp.destroyed) return;
    const left = qp.acceptedNs + this.halfOpenTimeoutNs - this.core.graph.clock.nowNs();
    if (left > 0) {
      // Another QP took this index since the timer was set: check it when its own time is up.
      this.core.graph.startTimer(this.rt, left, REAP_TIMER + index);
      return;
    }
    const why = `half-open connection from ${formatIp4(qp.remoteAddr)}:${qp.remotePort} reaped: no traffic ${Math.round(this.halfOpenTimeoutNs / 1e6)} ms after ACCEPT`;
    this.rt.countError(CmError.REAPED);
    const l = this.listeners.get(qp.listenPort);
    if (l) l.halfOpen.delete(qp);
    this.hooks.reap(qp, why);
    l?.onReap?.(qp, why);
  }

  /** Half-open QPs of `l` right now (prunes those that opened or went away). */
  private halfOpenCount(l: Listener): number {
    for (const q of l.halfOpen) if (!q.halfOpen || q.destroyed || q.state === QpState.ERROR) l.halfOpen.delete(q);
    return l.halfOpen.size;
  }

  /**
   * One CM message (REQ, ACCEPT, REJECT, SIDR_REQ or SIDR_REP; data at the TRP header) from `src`:`srcPort` to
   * `dstPort`; returns what it did (show trace). `unbound`: the datagram came to a port nobody
   * bound (udp4-input counted it `no_listener`): a REQ there is answered with REJECT, anything
   * else is dropped without another count.
   */
  input(
    rt: NodeRuntime,
    bytes: Uint8Array,
    src: number,
    srcPort: number,
    dstPort: number,
    qpIndex: number,
    unbound = false,
  ): string {
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const op = bytes.length >= TRP_HEADER_BYTES ? v.getUint16(TRP_OPCODE) >>> TRP_OP_SHIFT : -1;
    if (unbound && op !== TrpOp.REQ && op !== TrpOp.SIDR_REQ) return 'dropped: no listener on the UDP port';
    if (bytes.length < TRP_HEADER_BYTES + CM_PARAMS_BYTES) return counted(rt, CmError.MALFORMED);
    if (op < TrpOp.REQ || (op > TrpOp.REJECT && op !== TrpOp.SIDR_REQ && op !== TrpOp.SIDR_REP))
      return counted(rt, CmError.MALFORMED);
    const psn = v.getUint32(TRP_PSN),
      ack = v.getUint32(TRP_ACK);
    const pdLen = v.getUint16(CM_PD_LEN),
      ird = v.getUint16(CM_IRD),
      ord = v.getUint16(CM_ORD);
    if (bytes.length !== TRP_HEADER_BYTES + CM_PARAMS_BYTES + pdLen || pdLen > CM_MAX_PRIVATE_DATA)
      return counted(rt, CmError.MALFORMED);
    if (op === TrpOp.SIDR_REQ || op === TrpOp.SIDR_REP) {
      const pd = bytes.slice(CM_PRIVATE_DATA, CM_PRIVATE_DATA + pdLen);
      // A SIDR_REQ comes to a listener's port (or one nobody bound), never to a QP's.
      if (op === TrpOp.SIDR_REQ)
        return qpIndex >= 0
          ? counted(rt, CmError.UNEXPECTED)
          : sidrRequestInput(this, rt, src, srcPort, dstPort, psn, pd);
      return sidrReplyInput(this, rt, src, srcPort, qpIndex, psn, ack, ird, ord, pd);
    }
    if (op === TrpOp.REQ) return this.request(rt, bytes, src, srcPort, dstPort, psn, ird, ord, pdLen);
    const p = qpIndex >= 0 ? this.pending.get(qpIndex) : undefined;
    // Only the host we sent the REQ to answers it (from the port of the QP it made), and only
    // an answer that echoes our REQ's initial PSN is one.
    if (!p || src !== p.qp.remoteAddr) return counted(rt, CmError.UNEXPECTED);
    if (ack !== p.qp.isn) return counted(rt, CmError.WRONG_ID);
    this.pending.delete(qpIndex);
    const pd = bytes.slice(CM_PRIVATE_DATA, CM_PRIVATE_DATA + pdLen);
    if (op === TrpOp.ACCEPT && p.deferred) {
      p.deferred({ src, srcPort, ird, ord, psn });
      p.resolve({ privateData: pd });
      return `ACCEPT of qp ${p.qp.qpn}'s REQ: handed to the program to establish`;
    } else if (op === TrpOp.ACCEPT) {
      // Our ORD may not exceed the peer's IRD; our IRD serves the peer's ORD.
      try {
        this.hooks.established(
          p.qp,
          src,
          srcPort,
          Math.max(p.qp.ird, Math.min(ord, p.qp.cfg.ird)),
          Math.min(p.qp.ord, ird) || 1,
          psn,
        );
      } catch (e) {
        const why = `connect to ${formatIp4(src)}: ${(e as Error).message}`;
        this.hooks.failed(p.qp, why);
        p.reject(new CmConnectError('refused-parameters', why));
        return `qp ${p.qp.qpn} failed: ${why}`;
      }
      // The handshake's third packet: a pure ACK shows the acceptor we have its ACCEPT.
      p.qp.ackNeeded = true;
      this.core.schedule(p.qp);
      p.resolve({ privateData: pd });
      return `qp ${p.qp.qpn} connected to ${formatIp4(src)}:${srcPort} (ird ${p.qp.ird} ord ${p.qp.ord}), ACK scheduled`;
    }
    // A REJECT's IRD field says why (wire.ts CmRejectReason); one we do not know is a refusal.
    const reason = ird < CM_REJECT_REASON_NAMES.length ? ird : CmRejectReason.REFUSED;
    const why = `connection rejected by ${formatIp4(src)}:${srcPort}${reason === CmRejectReason.REFUSED ? '' : `: ${CM_REJECT_REASON_NAMES[reason]}`}`;
    this.hooks.failed(p.qp, why);
    p.reject(new CmConnectError('rejected', why, pd, reason));
    return `qp ${p.qp.qpn} failed: ${why}`;
  }

  private request(
    rt: NodeRuntime,
    bytes: Uint8Array,
    src: number,
    srcPort: number,
    dstPort: number,
    peerIsn: number,
    ird: number,
    ord: number,
    pdLen: number,
  ): string {
    rt.countError(CmError.REQUESTS);
    const reject = (reason: number, pd?: Uint8Array) =>
      this.send(
        ConnectionManager.message(TrpOp.REJECT, reason, 0, pd ?? new Uint8Array(0), 0, peerIsn),
        src,
        srcPort,
        dstPort,
      );
    // A listener for datagram service requests (SIDR) takes no REQ: none listens for it here.
    const found = this.listeners.get(dstPort);
    const l = found?.sidr === undefined ? found : undefined;
    const now = this.core.graph.clock.nowNs();
    const key = `${src}:${srcPort}`;
    // A request we accepted already (its listener may be gone since): the same request again.
    const have = this.acceptedFrom(key, dstPort);
    if (!l && have === undefined) {
      const closed = this.closedAt.get(dstPort);
      if (closed !== undefined) {
        if (now - closed < RELISTEN_GRACE_NS) return counted(rt, CmError.RELISTEN);
        this.closedAt.delete(dstPort);
      }
      // As TCP answers a SYN to a closed port with RST: the requester learns at once. No
      // amplification: the REJECT is no longer than the REQ.
      reject(CmRejectReason.NO_LISTENER);
      rt.countError(CmError.NO_LISTENER);
      return `REQ to port ${dstPort}, where nobody listens: REJECT sent`;
    }
    if (have && !have.destroyed && have.state !== QpState.ERROR) {
      // The same attempt again (our ACCEPT was lost): the same ACCEPT, while the peer has shown
      // nothing of having it, and not too often. Another attempt from the same address and
      // port while this connection is up is stale or spoofed: not answered.
      if (
        have.peerIsn !== peerIsn ||
        !have.halfOpen ||
        have.cmAccepts > REACCEPT_MAX ||
        now - have.cmAcceptNs < REACCEPT_NS
      )
        return counted(rt, CmError.REPEATED);
      have.cmAccepts++;
      have.cmAcceptNs = now;
      this.send(
        ConnectionManager.message(TrpOp.ACCEPT, have.ird, have.ord, have.privateData, have.isn, peerIsn),
        src,
        srcPort,
        have.qpn,
      );
      return `repeated REQ of a half-open connection: ACCEPT sent again from qp ${have.qpn}`;
    }
    if (!l) {
      // Its QP is gone or failed, and so is the listener: a REQ to a closed port.
      reject(CmRejectReason.NO_LISTENER);
      rt.countError(CmError.NO_LISTENER);
      return `REQ to port ${dstPort}, where nobody listens any more: REJECT sent`;
    }
    if (have) this.accepted.delete(key);
    const held = l.deferred?.get(key);
    if (held !== undefined) {
      // Still waiting for the program's answer: the same attempt again is not answered; another
      // attempt from the same address and port replaces nothing (the first one is answered).
      return counted(rt, CmError.REPEATED);
    }
    if (this.halfOpenCount(l) + (l.deferred?.size ?? 0) >= l.backlog) {
      const why = counted(rt, CmError.BACKLOG_FULL);
      if (!l.rejectWhenFull) return why;
      reject(CmRejectReason.BACKLOG_FULL);
      return `${why}; REJECT sent`;
    }
    if (ird > MAX_RD_ATOMIC || ord > MAX_RD_ATOMIC) {
      reject(CmRejectReason.PARAMETERS);
      return `REJECT sent: IRD ${ird} / ORD ${ord} above ${MAX_RD_ATOMIC}`;
    }
    let d: AcceptDecision;
    try {
      d = l.accept({
        address: formatIp4(src),
        port: srcPort,
        listenPort: dstPort,
        ird,
        ord,
        privateData: bytes.slice(CM_PRIVATE_DATA, CM_PRIVATE_DATA + pdLen),
      });
    } catch (e) {
      d = { reject: true, reason: (e as Error).message };
    }
    if ('reject' in d) {
      reject(CmRejectReason.REFUSED, d.privateData);
      return `REJECT sent: ${d.reason ?? 'the listener refused it'}`;
    }
    if ('defer' in d) {
      l.deferred ??= new Map();
      l.deferred.set(key, { src, srcPort, listenPort: dstPort, peerIsn, ird, ord, atNs: now });
      return `held on port ${dstPort} for the program to accept or reject`;
    }
    const qp = d.qp;
    // Passive side: IRD := REQ.ord, ORD := REQ.ird, each within what the QP allows.
    try {
      this.hooks.established(qp, src, srcPort, Math.min(ord, qp.cfg.ird) || 1, Math.min(ird, qp.cfg.ord) || 1, peerIsn);
    } catch (e) {
      // No route back to the requester: nobody to accept. The QP goes (as if reaped).
      const why = `connection request from ${formatIp4(src)}:${srcPort}: ${(e as Error).message}`;
      this.hooks.reap(qp, why);
      l.onReap?.(qp, why);
      return `qp ${qp.qpn} destroyed: ${why}`;
    }
    qp.privateData = d.privateData ?? new Uint8Array(0);
    qp.cmRole = 'passive';
    qp.halfOpen = true;
    qp.acceptedNs = qp.cmAcceptNs = now;
    qp.cmAccepts = 1;
    qp.listenPort = dstPort;
    qp.peerIsn = peerIsn;
    this.accepted.set(key, qp);
    l.halfOpen.add(qp);
    this.core.graph.startTimer(this.rt, this.halfOpenTimeoutNs, REAP_TIMER + qp.index);
    this.send(
      ConnectionManager.message(TrpOp.ACCEPT, qp.ird, qp.ord, qp.privateData, qp.isn, peerIsn),
      src,
      srcPort,
      qp.qpn,
    );
    return `ACCEPT sent from qp ${qp.qpn} (ird ${qp.ird} ord ${qp.ord}), half-open until the peer's first packet`;
  }
}

/** Count error `code` of cm-input; its description says what happened to the message. */
export function counted(rt: NodeRuntime, code: number): string {
  rt.countError(code);
  return `dropped: ${ERRORS[code].description}`;
}

/**
 * The answer to a deferred request of listener `l` (`key` its requester's "address:port"): QP
 * `qp`, which the program moved to RTR toward the requester (and to RTS), accepts it: the
 * listener holds it as half-open (its backlog) until the peer's first packet, and ACCEPT goes
 * out from its port. Throws when there is no such request or the QP does not point at it.
 */
export function acceptDeferred(cm: ConnectionManager, l: Listener, key: string, qp: Qp, privateData: Uint8Array): void {
  const d = l.deferred?.get(key);
  if (d === undefined) throw new Error(`no connection request from ${key} is waiting on port ${l.port}`);
  if (qp.remoteAddr !== d.src || qp.remotePort !== d.srcPort || qp.state !== QpState.RTS)
    throw new Error(`qp ${qp.qpn} is not in RTS toward ${formatIp4(d.src)}:${d.srcPort} (the request it would accept)`);
  l.deferred?.delete(key);
  const now = cm.core.graph.clock.nowNs();
  qp.privateData = privateData;
  qp.cmRole = 'passive';
  qp.halfOpen = true;
  qp.acceptedNs = qp.cmAcceptNs = now;
  qp.cmAccepts = 1;
  qp.listenPort = d.listenPort;
  qp.peerIsn = d.peerIsn;
  cm.accepted.set(key, qp);
  l.halfOpen.add(qp);
  cm.send(
    ConnectionManager.message(TrpOp.ACCEPT, qp.ird, qp.ord, privateData, qp.isn, d.peerIsn),
    d.src,
    d.srcPort,
    qp.qpn,
  );
}

/** REJECT a deferred request of listener `l` (with private data), if it is still waiting. */
export function rejectDeferred(cm: ConnectionManager, l: Listener, key: string, privateData?: Uint8Array): void {
  const d = l.deferred?.get(key);
  if (d === undefined) return;
  l.deferred?.delete(key);
  cm.send(
    ConnectionManager.message(TrpOp.REJECT, CmRejectReason.REFUSED, 0, privateData ?? new Uint8Array(0), 0, d.peerIsn),
    d.src,
    d.srcPort,
    d.listenPort,
  );
}

export function registerCmInput(graph: Graph, cm: ConnectionManager): NodeRuntime {
  const rt = graph.register({
    name: CM_INPUT,
    errors: ERRORS,
    runtimeData: cm,
    fn: cmInput,
    timer: (r, user) => (r.runtimeData as ConnectionManager).timer(user),
    formatTrace: (r) => String(r),
  });
  cm.rt = rt;
  return rt;
}

function cmInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const cm = rt.runtimeData as ConnectionManager;
  const pool = rt.graph.pool;
  const op = pool.opaque;
  for (let i = 0; i < f.n; i++) {
    const bi = f.vec[i];
    const w = bi * OPAQUE_WORDS;
    const ports = op[w + Ip4Opaque.PORTS];
    // ACCEPT/REJECT concern the QP on the destination port (-1 on a listener's port, which
    // udp4-input hands over directly: no RDMA opaque word is set there).
    const dstPort = ports & 0xffff;
    const bytes = pool.packetBytes(bi);
    const src = op[w + Ip4Opaque.REMOTE];
    const qpIndex = cm.core.qpByPort[dstPort];
    const unbound = qpIndex < 0 && !cm.listeners.has(dstPort);
    const did = cm.input(rt, bytes, src, ports >>> 16, dstPort, qpIndex, unbound);
    if (rt.traceOn && pool.flags[bi] & BufferFlag.TRACED) {
      const kind =
        bytes.length >= TRP_HEADER_BYTES
          ? TRP_OP_NAMES[((bytes[TRP_OPCODE] << 8) | bytes[TRP_OPCODE + 1]) >>> TRP_OP_SHIFT]
          : undefined;
      rt.addTrace(bi, `CM: ${kind ?? 'message'} from ${formatIp4(src)}:${ports >>> 16} to port ${dstPort}: ${did}`);
    }
  }
  pool.free(f.vec, 0, f.n);
  return f.n;
}
