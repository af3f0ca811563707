/**
 * The datagram service's connection manager (PROTOCOL.md section 6.1): InfiniBand's SIDR, "service
 * ID resolution", which rdma_cm runs for a UD port space (RDMA_PS_UDP: udaddy). A UD QP has no
 * peer, so nothing is connected: the requester asks a listening port which QP and Q_Key serve it
 * and gets them (or a status) back. Both messages have the CM layout (cm.ts):
 *
 * - SIDR_REQ, from the requester's UD QP port to the listener's: PSN = a random request id,
 *   ACK = 0, IRD = ORD = 0, private data. Resent every `retryNs` until an answer or `timeoutNs`.
 * - SIDR_REP, from the listener's port to the requester's: PSN = the Q_Key, ACK = the request id
 *   echoed, IRD = the status (wire.ts SidrStatus), ORD = the serving QP (its port; 0 unless the
 *   status is success), private data. Only the host and port a request went to, echoing its id,
 *   answer it.
 *
 * The listener side keeps no state per requester beyond the requests its program has not
 * answered yet (at most its backlog; one nobody answers within the half-open timeout is
 * rejected by the caller) and the last answers it sent (at most its backlog, the oldest
 * forgotten): a repeated request (our answer was lost) gets the same answer again, at most
 * REANSWER_MAX times and not more often than every REANSWER_NS. A request to a port with no
 * datagram listener is answered NO_LISTENER, never longer than the request (nothing to amplify).
 */
import type { NodeRuntime } from '../../graph/index.ts';
import { formatIp4 } from '../net/address.ts';
import { CmConnectError, CmError, ConnectionManager, counted, type Listener } from './cm.ts';
import type { Qp } from './qp.ts';
import { SidrStatus, TrpOp } from './wire.ts';

/** A repeated SIDR_REQ gets its answer again at most this often / this many times. */
const REANSWER_NS = 20e6;
const REANSWER_MAX = 8;

/** A datagram service request, as the listener's program sees it. */
export interface SidrRequest {
  src: number;
  srcPort: number;
  listenPort: number;
  reqId: number;
  privateData: Uint8Array;
}

/** A SIDR_REP as the requester gets it. */
export interface SidrAnswer {
  status: number;
  /** The serving QP (its port) and its Q_Key. */
  qpn: number;
  qkey: number;
  privateData: Uint8Array;
}

/** An active request: sent from `qp` (a UD QP's port) to `dst`:`dstPort`. */
export interface PendingSidr {
  qp: Qp;
  reqId: number;
  dst: number;
  dstPort: number;
  startNs: number;
  timeoutNs: number;
  retryNs: number;
  msg: Uint8Array;
  done: (a: SidrAnswer | CmConnectError) => void;
}

/** What a listener keeps for SIDR (Listener.sidr). */
export interface SidrListener {
  /** A new request (not a repeat): false refuses it (REJECTED), true holds it for `sidrAnswer`. */
  request: (req: SidrRequest) => boolean;
  /** Requests held for the program's answer, by "address:port". */
  held: Map<string, SidrRequest>;
  /** The last answers sent, by "address:port" (at most the backlog). */
  answered: Map<string, { reqId: number; msg: Uint8Array; sent: number; lastNs: number }>;
}

function key(src: number, srcPort: number): string {
  return `${src}:${srcPort}`;
}

/** A SIDR_REQ to `dstPort`; returns what it did (show trace). */
export function sidrRequestInput(
  cm: ConnectionManager,
  rt: NodeRuntime,
  src: number,
  srcPort: number,
  dstPort: number,
  reqId: number,
  pd: Uint8Array,
): string {
  rt.countError(CmError.REQUESTS);
  const l = cm.listeners.get(dstPort);
  const s = l?.sidr;
  if (l === undefined || s === undefined) {
    cm.send(sidrReply(SidrStatus.NO_LISTENER, 0, 0, new Uint8Array(0), reqId), src, srcPort, dstPort);
    rt.countError(CmError.NO_LISTENER);
    return `SIDR_REQ to port ${dstPort}, where nobody listens for datagram requests: SIDR_REP (no listener) sent`;
  }
  const k = key(src, srcPort);
  const had = s.answered.get(k);
  if (had !== undefined && had.reqId === reqId) {
    const now = cm.core.graph.clock.nowNs();
    if (had.sent > REANSWER_MAX || now - had.lastNs < REANSWER_NS) return counted(rt, CmError.REPEATED);
    had.sent++;
    had.lastNs = now;
    cm.send(had.msg, src, srcPort, dstPort);
    return `repeated SIDR_REQ: the same SIDR_REP sent again`;
  }
  if (s.held.has(k)) return counted(rt, CmError.REPEATED);
  if (s.held.size >= l.backlog) {
    cm.send(sidrReply(SidrStatus.REJECTED, 0, 0, new Uint8Array(0), reqId), src, srcPort, dstPort);
    return `${counted(rt, CmError.BACKLOG_FULL)}; SIDR_REP (rejected) sent`;
  }
  const req: SidrRequest = { src, srcPort, listenPort: dstPort, reqId, privateData: pd };
  let take = false;
  try {
    take = s.request(req);
  } catch {
    take = false;
  }
  if (!take) {
    answer(cm, l, s, req, SidrStatus.REJECTED, 0, 0, new Uint8Array(0));
    return 'SIDR_REQ refused by the listener: SIDR_REP (rejected) sent';
  }
  s.held.set(k, req);
  return `SIDR_REQ held on port ${dstPort} for the program to accept or reject`;
}

/** A SIDR_REP to UD QP `qpIndex`; returns what it did. */
export function sidrReplyInput(
  cm: ConnectionManager,
  rt: NodeRuntime,
  src: number,
  srcPort: number,
  qpIndex: number,
  qkey: number,
  reqId: number,
  status: number,
  qpn: number,
  pd: Uint8Array,
): string {
  const p = qpIndex >= 0 ? cm.sidrPending.get(qpIndex) : undefined;
  if (p === undefined || src !== p.dst || srcPort !== p.dstPort) return counted(rt, CmError.UNEXPECTED);
  if (reqId !== p.reqId) return counted(rt, CmError.WRONG_ID);
  cm.sidrPending.delete(qpIndex);
  // A success must name a QP (else it is a refusal); other statuses reach the program as sent,
  // as the kernel passes a SIDR REP's status on.
  const st = status === SidrStatus.SUCCESS && qpn === 0 ? SidrStatus.REJECTED : status;
  p.done({ status: st, qpn: st === SidrStatus.SUCCESS ? qpn : 0, qkey, privateData: pd });
  return `SIDR_REP to qp ${p.qp.qpn}: status ${st}${st === SidrStatus.SUCCESS ? `, qp ${qpn} qkey 0x${(qkey >>> 0).toString(16)}` : ''}`;
}

/** Send a SIDR_REQ from UD QP `p.qp` and resend it until answered (ConnectionManager.timer). */
export function sidrConnect(cm: ConnectionManager, p: PendingSidr): void {
  if (cm.sidrPending.has(p.qp.index)) throw new Error(`qp ${p.qp.qpn} has a datagram service request under way`);
  cm.sidrPending.set(p.qp.index, p);
  cm.send(p.msg, p.dst, p.dstPort, p.qp.qpn);
  cm.core.graph.startTimer(cm.rt, p.retryNs, cm.sidrTimerId(p.qp.index));
}

/** The retry timer of the request from QP `index`. */
export function sidrTimer(cm: ConnectionManager, index: number): void {
  const p = cm.sidrPending.get(index);
  if (p === undefined) return;
  if (cm.core.graph.clock.nowNs() - p.startNs >= p.timeoutNs) {
    cm.sidrPending.delete(index);
    p.done(
      new CmConnectError(
        'timeout',
        `datagram service request to ${formatIp4(p.dst)}:${p.dstPort} unanswered after ${Math.round(p.timeoutNs / 1e6)} ms`,
      ),
    );
    return;
  }
  cm.send(p.msg, p.dst, p.dstPort, p.qp.qpn);
  cm.core.graph.startTimer(cm.rt, p.retryNs, cm.sidrTimerId(index));
}

/** The request from QP `qp` is given up (its id or QP went). */
export function sidrCancel(cm: ConnectionManager, qp: Qp): void {
  cm.sidrPending.delete(qp.index);
}

/** A SIDR_REQ message (request id `reqId`). */
export function sidrRequestMessage(reqId: number, pd: Uint8Array): Uint8Array {
  return ConnectionManager.message(TrpOp.SIDR_REQ, 0, 0, pd, reqId, 0);
}

function sidrReply(status: number, qpn: number, qkey: number, pd: Uint8Array, reqId: number): Uint8Array {
  return ConnectionManager.message(TrpOp.SIDR_REP, status, qpn, pd, qkey >>> 0, reqId);
}

function answer(
  cm: ConnectionManager,
  l: Listener,
  s: SidrListener,
  req: SidrRequest,
  status: number,
  qpn: number,
  qkey: number,
  pd: Uint8Array,
): void {
  const msg = sidrReply(status, qpn, qkey, pd, req.reqId);
  const k = key(req.src, req.srcPort);
  s.answered.delete(k);
  if (s.answered.size >= l.backlog) s.answered.delete(s.answered.keys().next().value as string);
  s.answered.set(k, { reqId: req.reqId, msg, sent: 1, lastNs: cm.core.graph.clock.nowNs() });
  cm.send(msg, req.src, req.srcPort, req.listenPort);
}

/**
 * The program's answer to the held request from `k` ("address:port") on listener `l`: QP `qpn`
 * with Q_Key `qkey` serves it (status SUCCESS) or it is refused. Throws when no such request is
 * held.
 */
export function sidrAnswer(
  cm: ConnectionManager,
  l: Listener,
  k: string,
  status: number,
  qpn: number,
  qkey: number,
  pd: Uint8Array,
): void {
  const s = l.sidr;
  const req = s?.held.get(k);
  if (s === undefined || req === undefined)
    throw new Error(`no datagram service request from ${k} is waiting on port ${l.port}`);
  s.held.delete(k);
  answer(cm, l, s, req, status, qpn, qkey, pd);
}

/** "address:port" of a request (SidrListener.held's key). */
export function sidrKey(src: number, srcPort: number): string {
  return key(src, srcPort);
}
