/**
 * ddp-output: the transmit side of every QP with something to send (an input node: it runs
 * each pass while QPs are queued on core.txq, round robin, up to one frame per pass).
 *
 * Per QP, in this order: retransmissions (rebuilt from the WR or response and the offset in
 * their transmit slot), a pending Terminate, Read/Atomic responses, then the send queue: each
 * work request segmented to the path MTU (Sends and Immediate Data on QN 0 with their MSN and
 * MO, Writes and Read Responses tagged with the TO advancing per segment, one packet per Read
 * or Atomic Request), as far as the TRP window, the congestion window, pacing (a paced QP
 * waits for a wheel timer, congestion.ts) and ORD allow. Then, if data arrived since the
 * last ACK and nothing carried one, a pure ACK (a lone packet's after rdma.trp.ack-delay-us,
 * unless data going back carries it first), and one SACK per received range above the
 * cumulative ACK. trp-output puts the TRP header on.
 */
import {
  FRAME_SIZE,
  type Graph,
  INVALID_INDEX,
  type NodeRuntime,
  OPAQUE_WORDS,
  errorTable,
} from '../../graph/index.ts';
import type { RdmaCore } from './core.ts';
import { type Qp, QpState, TxFlag, TxKind } from './qp.ts';
import { RdmaOpaque } from './trp-input.ts';
import { buildSegment, completeSq, extPieces, sqAcknowledged, takePsn, toError } from './transport.ts';
import { isLocal, WcStatus, WrOpcode } from './verbs.ts';
import { localFailure, runLocal } from './windows.ts';
import { serveUd, type UdOut } from './ud-output.ts';
import { mayAdd, mayResend, paceSent, paceWait, resent, sendLimit } from './congestion.ts';
import { DDP_UNTAGGED_BYTES } from './wire.ts';

export const DDP_OUTPUT = 'ddp-output';
/** What trp-output puts in front (the INFO opaque word on transmit). */
export const TxPacket = { DATA: 0, ACK: 1, SACK: 2, PROBE: 3, PROBE_ACK: 4 } as const;
/** At most this many SACK packets per QP per pass. */
const MAX_SACKS = 16;

const ERROR_TABLE = errorTable({
  NO_BUFFERS: { name: 'no_buffers', description: 'no buffers for transmit (retried next pass)', severity: 'error' },
  ACKS: { name: 'acks', description: 'pure ACKs sent', severity: 'info' },
  SACKS: { name: 'sacks', description: 'SACKs sent', severity: 'info' },
  UD_NO_ROUTE: { name: 'ud_no_route', description: 'UD datagrams with no route (sent nowhere)', severity: 'warn' },
});
export const DdpOutputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export function registerDdpOutput(graph: Graph, core: RdmaCore): NodeRuntime {
  const rt = graph.register({
    name: DDP_OUTPUT,
    type: 'input',
    // Called only when a QP was scheduled (core.schedule interrupts it), not every pass.
    state: 'interrupt',
    pollPhase: 'transmit',
    next: ['trp-output', 'udp4-encap'],
    errors: ERRORS,
    runtimeData: core,
    fn: ddpOutput,
    formatTrace: (r) => String(r),
  });
  core.txNode = rt;
  return rt;
}

let nOut = 0;
let out: Uint32Array;
let starved = false;
/** UD QPs' datagrams of this pass (ud-output.ts), straight to udp4-encap. */
const ud: UdOut = { bufs: new Uint32Array(FRAME_SIZE), n: 0, max: FRAME_SIZE, starved: false, noRoute: 0 };

function ddpOutput(rt: NodeRuntime): number {
  const core = rt.runtimeData as RdmaCore;
  if (core.txCount === 0) return 0;
  out = rt.scratch;
  nOut = 0;
  starved = false;
  ud.n = 0;
  ud.starved = false;
  ud.noRoute = 0;
  let rounds = core.txCount;
  while (nOut < FRAME_SIZE && ud.n < FRAME_SIZE && core.txCount > 0 && rounds-- > 0) {
    const qp = core.qps[core.nextTx()];
    if (qp === null) continue;
    qp.inTxQueue = false;
    if (qp.cfg.ud ? serveUd(rt, core, qp, ud) : serve(rt, core, qp)) core.schedule(qp);
    if (starved || ud.starved) break;
  }
  if (starved || ud.starved) rt.countError(DdpOutputError.NO_BUFFERS);
  if (ud.noRoute > 0) rt.countError(DdpOutputError.UD_NO_ROUTE, ud.noRoute);
  // QPs left for the next pass (a full frame, no buffers): called again then.
  if (core.txCount > 0) rt.graph.interrupt(rt);
  const n = nOut;
  if (n > 0) rt.graph.enqueueToSingleNext(rt, 0, out, 0, n);
  if (ud.n > 0) rt.graph.enqueueToSingleNext(rt, 1, ud.bufs, 0, ud.n);
  return n + ud.n;
}

function alloc(rt: NodeRuntime): number {
  const bi = rt.graph.pool.allocOne();
  if (bi === INVALID_INDEX) starved = true;
  return bi;
}

/** allocSegment's answer for buildSegment: the payload is attached from the MRs, not copied. */
let ext = false;

/**
 * The buffers of a segment of `len` payload bytes (transmit slot `kind`, `ref`, `off`): a
 * buffer for the headers and one per MR piece of a payload sent in place (extPieces: `ext`
 * set), else one buffer, or a chain when the longest DDP header and the payload do not fit in
 * one (buildSegment fills it and cuts what a shorter header leaves unused). INVALID_INDEX (and
 * nothing held) when the pool cannot supply them all.
 */
function allocSegment(rt: NodeRuntime, qp: Qp, kind: number, ref: number, off: number, len: number): number {
  const pool = rt.graph.pool,
    ds = pool.dataSize;
  const pieces = extPieces(qp, pool, kind, ref, off, len);
  ext = pieces > 0;
  if (ext) {
    const bi = pool.allocChain(1 + pieces);
    if (bi === INVALID_INDEX) starved = true;
    return bi;
  }
  const bytes = len + DDP_UNTAGGED_BYTES;
  if (bytes <= ds) return alloc(rt);
  const bi = pool.allocChain(Math.ceil(bytes / ds));
  if (bi === INVALID_INDEX) starved = true;
  return bi;
}

function emit(rt: NodeRuntime, qp: Qp, bi: number, kind: number, psn: number, end: number): void {
  const w = bi * OPAQUE_WORDS,
    op = rt.graph.pool.opaque;
  op[w + RdmaOpaque.QP] = qp.index;
  op[w + RdmaOpaque.PSN] = psn;
  op[w + RdmaOpaque.INFO] = kind;
  op[w + RdmaOpaque.AUX] = end;
  out[nOut++] = bi;
}

/** A new data packet: PSN, slot, bytes. Returns false when no buffer was left. */
function emitNew(rt: NodeRuntime, qp: Qp, kind: number, ref: number, off: number, len: number, flags: number): number {
  const bi = allocSegment(rt, qp, kind, ref, off, len);
  if (bi === INVALID_INDEX) return -1;
  const psn = takePsn(qp, kind, ref, off, len, flags);
  buildSegment(qp, psn, rt.graph.pool, bi, ext);
  qp.txBytes += len;
  emit(rt, qp, bi, TxPacket.DATA, psn, 0);
  return psn;
}

/** Serve one QP; true when it still has work that fits the window (budget ran out). */
function serve(rt: NodeRuntime, core: RdmaCore, qp: Qp): boolean {
  const pool = rt.graph.pool;
  const first = nOut;
  const mask = qp.wMask;
  const inError = qp.state === QpState.ERROR;
  // What may be in flight: the TRP window, or less under congestion control (congestion.ts),
  // and no sooner than pacing allows.
  const trpWindow = core.window,
    window = sendLimit(qp, trpWindow);
  const now = rt.graph.clock.tickNs(),
    slack = core.timerTickNs;
  // 1. Retransmissions, within the window and paced (RFC 6675's pipe: congestion.ts mayResend);
  // in ERROR only a Terminate's, whatever the window.
  while (qp.rtxCount > 0 && nOut < FRAME_SIZE) {
    const psn = qp.rtx[qp.rtxHead & mask];
    const s = psn & mask;
    // An entry for a PSN acknowledged since is stale: its slot may hold a newer segment, whose
    // own queued flag is not this entry's to clear.
    const live = ((psn - qp.sndUna) | 0) >= 0 && ((psn - qp.sndNxt) | 0) < 0;
    if (
      live &&
      qp.txKind[s] !== TxKind.FREE &&
      !(qp.txFlags[s] & TxFlag.SACKED) &&
      (!inError || qp.txKind[s] === TxKind.TERM)
    ) {
      if (!inError && !mayResend(qp, window, now, slack)) break;
      const bi = allocSegment(rt, qp, qp.txKind[s], qp.txRef[s], qp.txOff[s], qp.txLen[s]);
      if (bi === INVALID_INDEX) return true;
      buildSegment(qp, psn, pool, bi, ext);
      qp.txFlags[s] |= TxFlag.RETRANSMITTED;
      qp.retransmits++;
      emit(rt, qp, bi, TxPacket.DATA, psn, 0);
      if (!inError) resent(qp, now, slack);
    }
    if (live) {
      if (qp.rtxQueued[s] === 1) qp.lostOut--;
      qp.rtxQueued[s] = 0;
    }
    qp.rtxHead = (qp.rtxHead + 1) >>> 0;
    qp.rtxCount--;
  }
  // 2. A Terminate (sent even when the window is full).
  if (qp.term !== null && !qp.termSent && nOut < FRAME_SIZE) {
    const psn = emitNew(rt, qp, TxKind.TERM, 0, 0, 0, TxFlag.LAST);
    if (psn < 0) return true;
    qp.termSent = true;
    qp.termPsn = psn;
  }
  // RTR answers Reads and Atomics too (as an InfiniBand responder does) once its send PSN is set.
  const mayRespond =
    qp.state === QpState.RTR ? qp.sendStarted : qp.state !== QpState.RESET && qp.state !== QpState.INIT;
  if (!inError && mayRespond) {
    // 3. Responses to the peer's Reads and Atomics.
    while (
      qp.respNext !== qp.respTail &&
      nOut < FRAME_SIZE &&
      mayAdd(qp, trpWindow, window) &&
      paceWait(qp, now, slack) === 0
    ) {
      const ref = qp.respNext & qp.respMask;
      const r = qp.resp[ref];
      const len = r.atomic ? 0 : Math.min(qp.mtuTagged, r.length - r.sent);
      const last = r.atomic || r.sent + len === r.length;
      const psn = emitNew(rt, qp, TxKind.RESP, ref, r.sent, len, last ? TxFlag.LAST : 0);
      if (psn < 0) return true;
      paceSent(qp, now, slack);
      r.sent += len;
      if (last) {
        r.emitted = true;
        r.lastPsn = psn;
        qp.respNext++;
      }
    }
    // 4. The send queue.
    const sq = qp.sq,
      nsq = sq.length;
    while (
      qp.sqNext !== qp.sqTail &&
      nOut < FRAME_SIZE &&
      mayAdd(qp, trpWindow, window) &&
      paceWait(qp, now, slack) === 0
    ) {
      const ref = qp.sqNext % nsq;
      const wr = sq[ref];
      const op = wr.opcode;
      if (!wr.started) {
        if (qp.state !== QpState.RTS) break; // SQD: drain what started, start nothing new
        if (wr.postError >= 0) {
          // The WRs before it went out and complete on their own (ACK, response) first: the
          // error may not flush what the peer takes and completes as successful.
          if (qp.sqHead !== qp.sqNext) break;
          wr.done = true;
          wr.status = wr.postError;
          qp.sqNext++;
          toError(
            core,
            qp,
            wr.postError === WcStatus.MW_BIND_ERR
              ? "memory window bind: the MR is not valid in the QP's PD"
              : 'local protection error in a send work request',
          );
          return false;
        }
        if (isLocal(op)) {
          // A window bind or a local invalidate: done here, in order; it completes once
          // everything before it has (its "last PSN" is the packet before it).
          if (!runLocal(core, qp, wr)) {
            if (qp.sqHead !== qp.sqNext) break;
            wr.done = true;
            wr.status = localFailure.status;
            qp.sqNext++;
            toError(core, qp, localFailure.why);
            return false;
          }
          wr.started = wr.emitted = wr.done = true;
          wr.lastPsn = (qp.sndNxt - 1) >>> 0;
          qp.sqNext++;
          sqAcknowledged(core, qp, qp.sndUna);
          continue;
        }
        if (op >= WrOpcode.READ) {
          if (qp.ordOut >= qp.ord) break;
          wr.msn = qp.readMsn;
          qp.readMsn = (qp.readMsn + 1) >>> 0;
          qp.ordRing[wr.msn & qp.ordMask] = wr;
          qp.ordOut++;
        } else if (op !== WrOpcode.WRITE) {
          wr.msn = qp.sendMsn;
          qp.sendMsn = (qp.sendMsn + 1) >>> 0;
        }
        wr.started = true;
      }
      let psn: number, last: boolean;
      if (op >= WrOpcode.READ) {
        psn = emitNew(rt, qp, TxKind.SQ, ref, 0, 0, TxFlag.LAST);
        last = true;
      } else if (
        op === WrOpcode.WRITE_WITH_IMM &&
        wr.sent === wr.length &&
        wr.immSent === false &&
        (wr.length > 0 || wr.lastPsn === -1)
      ) {
        psn = emitNew(rt, qp, TxKind.SQ, ref, wr.length, 0, TxFlag.LAST | TxFlag.IMM);
        last = true;
        if (psn >= 0) wr.immSent = true;
      } else {
        const seg = op === WrOpcode.WRITE || op === WrOpcode.WRITE_WITH_IMM ? qp.mtuTagged : qp.mtuUntagged;
        const len = Math.min(seg, wr.length - wr.sent);
        const end = wr.sent + len === wr.length;
        const msgLast = end && op !== WrOpcode.WRITE_WITH_IMM;
        psn = emitNew(rt, qp, TxKind.SQ, ref, wr.sent, len, end ? TxFlag.LAST : 0);
        if (psn >= 0) {
          wr.sent += len;
          if (end && op === WrOpcode.WRITE_WITH_IMM) wr.lastPsn = -1; // data done: the Immediate Data follows
        }
        last = msgLast;
      }
      if (psn < 0) return true;
      paceSent(qp, now, slack);
      if (last) {
        wr.emitted = true;
        wr.lastPsn = psn;
        qp.sqNext++;
      }
    }
  }
  // Paced with resends or new segments waiting in the window: a wheel timer brings the QP back
  // (trp-output).
  if (
    !inError &&
    qp.paceTimer < 0 &&
    mayAdd(qp, trpWindow, window) &&
    (qp.lostOut > 0 || qp.respNext !== qp.respTail || qp.sqNext !== qp.sqTail)
  ) {
    const at = paceWait(qp, now, slack);
    if (at > 0) qp.paceTimer = rt.graph.startTimer(core.trpOutput, at - now, qp.index + core.qps.length);
  }
  // 5. A timeout's PROBE (transport.ts onTimeout; it carries our cumulative ACK too), ACK and
  // SACKs. The ACK that answers a PROBE is a PROBE_ACK, sent even beside data (it is the answer).
  if (qp.probeNeeded && nOut < FRAME_SIZE - 1) {
    const bi = alloc(rt);
    if (bi === INVALID_INDEX) return true;
    qp.probeNeeded = false;
    pool.length[bi] = 0;
    emit(rt, qp, bi, TxPacket.PROBE, 0, 0);
    qp.probes++;
  }
  // A held ACK (trp-input): carried by what this QP sent now (every packet carries our
  // cumulative ACK); else sent pure once its delay is over; else the QP stays queued for it.
  let hold = false;
  if (qp.ackHeld && !qp.ackNeeded) {
    if (nOut > first) qp.ackHeld = false;
    else if (now >= qp.ackDue) qp.ackNeeded = true;
    else hold = true;
  }
  if (qp.ackNeeded && nOut < FRAME_SIZE - 1) {
    qp.ackNeeded = false;
    qp.ackHeld = false;
    if (nOut === first || qp.probeAnswer) {
      const bi = alloc(rt);
      if (bi === INVALID_INDEX) {
        qp.ackNeeded = true;
        return true;
      }
      pool.length[bi] = 0;
      emit(rt, qp, bi, qp.probeAnswer ? TxPacket.PROBE_ACK : TxPacket.ACK, 0, 0);
      qp.probeAnswer = false;
      rt.countError(DdpOutputError.ACKS);
    }
    let sacks = 0;
    // SACKs only for what changed: the ranges that took new packets since the last SACKs;
    // every range again at most once per RTT (SACKs get lost too). A duplicate draws its ACK,
    // not a SACK per range (that was 17 datagrams out for one in).
    const all = now - qp.sackAllNs >= Math.max(qp.srttNs, core.timerTickNs);
    // A QP in ERROR takes no more data: no SACKs (after a Terminate, the cumulative ACK stops
    // before the offending segment, which a SACK must not report as received either).
    let p = inError || !(all || qp.sackDirty) ? qp.rcvHigh : qp.rcvNxt;
    while (p !== qp.rcvHigh && sacks < MAX_SACKS && nOut < FRAME_SIZE) {
      while (p !== qp.rcvHigh && !qp.rxGot[p & mask]) p = (p + 1) >>> 0;
      if (p === qp.rcvHigh) break;
      const start = p;
      while (p !== qp.rcvHigh && qp.rxGot[p & mask]) p = (p + 1) >>> 0;
      // [start, p) took new packets if it overlaps [sackLo, sackHi].
      if (!all && (((qp.sackHi - start) | 0) < 0 || ((p - 1 - qp.sackLo) | 0) < 0)) continue;
      const bi = alloc(rt);
      if (bi === INVALID_INDEX) break;
      pool.length[bi] = 0;
      emit(rt, qp, bi, TxPacket.SACK, start, p);
      sacks++;
    }
    if (sacks > 0) {
      rt.countError(DdpOutputError.SACKS, sacks);
      if (all) qp.sackAllNs = now;
    }
    qp.sackDirty = false;
  }
  completeSq(core, qp);
  if (nOut < FRAME_SIZE) return hold;
  // Out of budget: more to do if anything is queued and the window is open.
  if (inError) return qp.rtxCount > 0;
  return (
    (qp.rtxForce > 0 && qp.lostOut > 0) ||
    (mayAdd(qp, trpWindow, window) && (qp.lostOut > 0 || qp.respNext !== qp.respTail || qp.sqNext !== qp.sqTail))
  );
}
