/**
 * TRP and RDMAP logic shared by the RDMA nodes, as plain functions over a Qp: building a data
 * packet's DDP/RDMAP bytes from its transmit slot (first transmission and retransmission are
 * the same code: rebuilt from the WR and offset), cumulative ACK and SACK processing with RTT
 * estimation (RFC 6298) and fast retransmission, send-queue completion in posting order, and
 * moving a QP to ERROR with its work requests flushed.
 */
import { chainCopier } from '../../graph/chain-copy.ts';
import { copyBytes, SMALL_COPY } from './copy.ts';
import { BufferFlag, type BufferPool } from '../../graph/index.ts';
import { type Qp, QpState, type RespSlot, type SendWr, TxFlag, TxKind } from './qp.ts';
import type { RdmaCore } from './core.ts';
import { ccOnAck, ccOnLoss, ccOnRtt, ccOnTimeout, ccSharePath, ccUndoTimeout } from './congestion.ts';
import {
  type Completion,
  type Cq,
  type Mr,
  type RecvWr,
  type SgList,
  WC_OPCODE_NAMES,
  WC_STATUS_NAMES,
  WcOpcode,
  WcStatus,
  WrOpcode,
  WR_WC_OPCODE,
  isAtomic,
  isSend,
} from './verbs.ts';
import {
  AR_COMPARE,
  AR_COMPARE_MASK,
  AR_OPCODE,
  AR_REQ_ID,
  AR_STAG,
  AR_SWAP,
  AR_SWAP_MASK,
  AR_TO,
  ARESP_ORIG,
  ARESP_REQ_ID,
  ATOMIC_REQUEST_BYTES,
  ATOMIC_RESPONSE_BYTES,
  AtomicOp,
  DDP_CTL,
  DDP_L,
  DDP_T,
  DDP_TAGGED_BYTES,
  DDP_UNTAGGED_BYTES,
  DDP_VERSION,
  IMM_DATA,
  IMMEDIATE_BYTES,
  Qn,
  RDMAP_CTL,
  RDMAP_CTL_BYTE,
  RdmapOp,
  READ_REQUEST_BYTES,
  RR_SINK_STAG,
  RR_SINK_TO,
  RR_SIZE,
  RR_SRC_STAG,
  RR_SRC_TO,
  T_STAG,
  T_TO,
  U_INV_STAG,
  U_MO,
  U_MSN,
  U_QN,
} from './wire.ts';

const TWO32 = 4294967296;
/** Packets sent after a hole that must arrive before it counts as lost (RFC 5681's 3). */
const DUP_THRESH = 3;

function untagged(
  v: DataView,
  o: number,
  last: boolean,
  op: number,
  inv: number,
  qn: number,
  msn: number,
  mo: number,
): number {
  v.setUint8(o + DDP_CTL, (last ? DDP_L : 0) | DDP_VERSION);
  v.setUint8(o + RDMAP_CTL_BYTE, RDMAP_CTL | op);
  v.setUint32(o + U_INV_STAG, inv);
  v.setUint32(o + U_QN, qn);
  v.setUint32(o + U_MSN, msn);
  v.setUint32(o + U_MO, mo);
  return DDP_UNTAGGED_BYTES;
}

function tagged(v: DataView, o: number, last: boolean, op: number, stag: number, to: number): number {
  v.setUint8(o + DDP_CTL, DDP_T | (last ? DDP_L : 0) | DDP_VERSION);
  v.setUint8(o + RDMAP_CTL_BYTE, RDMAP_CTL | op);
  v.setUint32(o + T_STAG, stag);
  v.setUint32(o + T_TO, Math.floor(to / TWO32));
  v.setUint32(o + T_TO + 4, to >>> 0);
  return DDP_TAGGED_BYTES;
}

/** The RDMAP opcode of each Send work request opcode, without and with the solicited event. */
const SEND_OP: readonly number[] = [RdmapOp.SEND, RdmapOp.SEND_SE, RdmapOp.SEND_INV, RdmapOp.SEND_IMM];
const SEND_SE_OP: readonly number[] = [RdmapOp.SEND_SE, RdmapOp.SEND_SE, RdmapOp.SEND_SE_INV, RdmapOp.SEND_SE_IMM];

/**
 * Payloads at least this long may be sent from the MR in place (BufferFlag.EXT_DATA) rather
 * than copied into the pool: below it the copy costs less than the buffer that describes it.
 */
export const EXT_MIN_BYTES = 512;

/**
 * The external segments transmit slot's payload (`kind`, `ref`, `off`, `len`, as takePsn
 * records them) would be attached as: one per piece of its SG list (one for a Read Response),
 * or 0 when it is copied instead: short, no driver transmits external segments
 * (pool.ext.wanted) or not the one of the QP's egress interface (txTakes), or an MR it reads is
 * no longer valid (a deregistered MR is never listed
 * again; its copy is what a resend of it sends, as before).
 */
export function extPieces(qp: Qp, pool: BufferPool, kind: number, ref: number, off: number, len: number): number {
  if (len < EXT_MIN_BYTES || !pool.ext.wanted || pool.ext.txTakes[qp.egress] === 0) return 0;
  if (kind === TxKind.SQ) return qp.sq[ref].sg.pieces(off, len);
  if (kind === TxKind.RESP) {
    const r = qp.resp[ref];
    return !r.atomic && r.src !== null && r.src.valid ? 1 : 0;
  }
  return 0;
}

/** The MR's id in the pool's external memory table, listed at its first use (deregMr retires it). */
function extIdOf(pool: BufferPool, mr: Mr): number {
  if (mr.extId === 0) mr.extId = pool.ext.add(mr.memory);
  return mr.extId;
}

/**
 * Write the DDP/RDMAP header and payload of transmit slot `psn` into fresh buffer `bi`: one
 * buffer, or a chain (allocSegment in ddp-output.ts) when header and payload do not fit in one
 * (a segment is as large as the path's MTU allows, whatever the pool's buffer size). With
 * `ext` (extPieces > 0, and the chain allocated as 1 + that many buffers) the payload is not
 * copied: the chain's tail buffers become windows of the MRs (attachPayload).
 */
export function buildSegment(qp: Qp, psn: number, pool: BufferPool, bi: number, ext = false): void {
  const s = psn & qp.wMask;
  const kind = qp.txKind[s],
    fl = qp.txFlags[s],
    off = qp.txOff[s],
    len = qp.txLen[s];
  const last = (fl & TxFlag.LAST) !== 0;
  const v = pool.view,
    u8 = pool.u8,
    o = pool.offset[bi];
  let bytes: number;
  if (kind === TxKind.SQ) bytes = buildRequest(qp.sq[qp.txRef[s]], fl, off, len, last, v, pool, bi, ext);
  else if (kind === TxKind.RESP) {
    const r = qp.resp[qp.txRef[s]];
    if (r.atomic) {
      const h = untagged(v, o, true, RdmapOp.ATOMIC_RESPONSE, 0, Qn.ATOMIC_RESPONSE, r.msn, 0);
      v.setUint32(o + h + ARESP_REQ_ID, r.reqId);
      v.setUint32(o + h + ARESP_ORIG, r.origHi);
      v.setUint32(o + h + ARESP_ORIG + 4, r.origLo);
      bytes = h + ATOMIC_RESPONSE_BYTES;
    } else {
      const h = tagged(v, o, last, RdmapOp.READ_RESPONSE, r.sinkStag, r.sinkTo + off);
      if (ext) attachPayload(pool, bi, h, len, null, r.src as Mr, r.srcOff + off);
      else if (len > 0) fillPayload(pool, bi, h, len, null, r.src as Mr, r.srcOff + off);
      bytes = h + len;
    }
  } else {
    // Terminate: its bytes were prepared when the error was found.
    const h = untagged(v, o, true, RdmapOp.TERMINATE, 0, Qn.TERMINATE, qp.termMsn, 0);
    u8.set((qp.term as Uint8Array).subarray(0, qp.termLen), o + h);
    bytes = h + qp.termLen;
  }
  // A chain's lengths were set by fillPayload.
  if (!(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) pool.length[bi] = bytes;
}

/**
 * The payload of the segment whose header of `h` bytes is in buffer `bi` as windows of the MRs
 * (`sg`'s pieces from byte `pos`, or `mr` at `pos`): each buffer after `bi` in its chain (as
 * many as extPieces counted) becomes one (BufferPool.attachExt), and the head says so
 * (EXT_CHAIN). Nothing is copied: the driver reads the MR when it transmits.
 */
function attachPayload(
  pool: BufferPool,
  bi: number,
  h: number,
  len: number,
  sg: SgList | null,
  mr: Mr | null,
  pos: number,
): void {
  const next = pool.next;
  pool.length[bi] = h;
  pool.flags[bi] |= BufferFlag.EXT_CHAIN;
  let e = bi;
  if (sg === null) {
    e = next[e];
    pool.attachExt(e, extIdOf(pool, mr as Mr), pos, len);
    return;
  }
  let i = 0;
  while (i < sg.n && pos >= sg.len[i]) pos -= sg.len[i++];
  while (len > 0) {
    const take = Math.min(len, sg.len[i] - pos);
    e = next[e];
    pool.attachExt(e, extIdOf(pool, sg.mr[i] as Mr), sg.off[i] + pos, take);
    len -= take;
    pos = 0;
    i++;
  }
}

/**
 * Copy `len` payload bytes into the segment whose header of `h` bytes starts buffer `bi`: from
 * `sg` at byte `pos` of the list, or from MR `mr` at `pos`. A chain is filled buffer by buffer
 * (each buffer's length set) and cut after the last byte (allocSegment counts on the longest
 * header, so a shorter one may leave the last buffer unused).
 */
function fillPayload(
  pool: BufferPool,
  bi: number,
  h: number,
  len: number,
  sg: SgList | null,
  mr: Mr | null,
  pos: number,
): void {
  const u8 = pool.u8,
    pv = pool.view,
    ds = pool.dataSize;
  const head = bi;
  // A chain from one piece of memory (a single-SGE WRITE or SEND, a READ response): one native
  // call fills it, no view per buffer (copy.ts). A single buffer keeps the one view below: the
  // native call costs more than it at 1448 bytes (MTU 1500, measured).
  const src =
    len <= SMALL_COPY || !(pool.flags[bi] & BufferFlag.NEXT_PRESENT)
      ? null
      : sg !== null
        ? sg.span(pos, len)
        : (mr as Mr).memory;
  if (src !== null) {
    const last = chainCopier(pool).fromMem(bi, h, src, sg !== null ? sg.spanAt : pos, len);
    if (pool.flags[last] & BufferFlag.NEXT_PRESENT) pool.trim(head, h + len);
    return;
  }
  let at = pool.offset[bi] + h,
    room = ds - h;
  if (len <= room && !(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) {
    if (len === 0) return;
    if (sg !== null) sg.gather(pos, u8, pv, at, len);
    else copyBytes(u8, pv, at, (mr as Mr).memory, (mr as Mr).view, pos, len);
    return;
  }
  let left = len,
    used = h;
  for (;;) {
    const take = left < room ? left : room;
    if (take > 0) {
      if (sg !== null) sg.gather(pos, u8, pv, at, take);
      else copyBytes(u8, pv, at, (mr as Mr).memory, (mr as Mr).view, pos, take);
    }
    pos += take;
    left -= take;
    pool.length[bi] = used + take;
    if (left === 0 || !(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) break;
    bi = pool.next[bi];
    at = pool.offset[bi];
    room = ds;
    used = 0;
  }
  // Buffers past the last byte go back (the longest header was counted when allocating).
  if (pool.flags[bi] & BufferFlag.NEXT_PRESENT) pool.trim(head, h + len);
}

/** The segment of send work request `wr` at byte `off` into buffer `bi`; returns its DDP length. */
function buildRequest(
  wr: SendWr,
  fl: number,
  off: number,
  len: number,
  last: boolean,
  v: DataView,
  pool: BufferPool,
  bi: number,
  ext: boolean,
): number {
  const op = wr.opcode;
  const o = pool.offset[bi];
  if (isSend(op)) {
    const rop = wr.solicited ? SEND_SE_OP[op] : SEND_OP[op];
    // The Invalidate STag field: Send with Invalidate's STag, Send with Immediate's immediate.
    const field = op === WrOpcode.SEND_WITH_INV ? wr.invStag : op === WrOpcode.SEND_WITH_IMM ? wr.imm : 0;
    const h = untagged(v, o, last, rop, field, Qn.SEND, wr.msn, off);
    if (ext) attachPayload(pool, bi, h, len, wr.sg, null, off);
    else fillPayload(pool, bi, h, len, wr.sg, null, off);
    return h + len;
  }
  if (op === WrOpcode.WRITE || op === WrOpcode.WRITE_WITH_IMM) {
    if (fl & TxFlag.IMM) {
      const h = untagged(v, o, true, wr.solicited ? RdmapOp.IMMEDIATE_SE : RdmapOp.IMMEDIATE, 0, Qn.SEND, wr.msn, 0);
      v.setUint32(o + h, 0);
      v.setUint32(o + h + IMM_DATA, wr.imm);
      return h + IMMEDIATE_BYTES;
    }
    const h = tagged(v, o, last, RdmapOp.WRITE, wr.rstag, wr.roff + off);
    if (ext) attachPayload(pool, bi, h, len, wr.sg, null, off);
    else fillPayload(pool, bi, h, len, wr.sg, null, off);
    return h + len;
  }
  if (op === WrOpcode.READ) {
    const h = untagged(v, o, true, RdmapOp.READ_REQUEST, 0, Qn.READ, wr.msn, 0);
    // sink STag = our read MSN (names the outstanding Read), sink TO = 0: offset in its SG list
    v.setUint32(o + h + RR_SINK_STAG, wr.msn);
    v.setUint32(o + h + RR_SINK_TO, 0);
    v.setUint32(o + h + RR_SINK_TO + 4, 0);
    v.setUint32(o + h + RR_SIZE, wr.length);
    v.setUint32(o + h + RR_SRC_STAG, wr.rstag);
    v.setUint32(o + h + RR_SRC_TO, Math.floor(wr.roff / TWO32));
    v.setUint32(o + h + RR_SRC_TO + 4, wr.roff >>> 0);
    return h + READ_REQUEST_BYTES;
  }
  const h = untagged(v, o, true, RdmapOp.ATOMIC_REQUEST, 0, Qn.READ, wr.msn, 0);
  const b = o + h;
  v.setUint32(
    b + AR_OPCODE,
    op === WrOpcode.FETCH_ADD ? AtomicOp.FETCH_ADD : op === WrOpcode.SWAP ? AtomicOp.SWAP : AtomicOp.CMP_SWAP,
  );
  v.setUint32(b + AR_REQ_ID, wr.msn);
  v.setUint32(b + AR_STAG, wr.rstag);
  v.setUint32(b + AR_TO, Math.floor(wr.roff / TWO32));
  v.setUint32(b + AR_TO + 4, wr.roff >>> 0);
  v.setUint32(b + AR_SWAP, wr.swapHi);
  v.setUint32(b + AR_SWAP + 4, wr.swapLo);
  // masks: all ones = the plain (unmasked) operation; fetch-add's add mask 0 = no carry breaks
  const m = op === WrOpcode.FETCH_ADD ? 0 : 0xffffffff;
  v.setUint32(b + AR_SWAP_MASK, m);
  v.setUint32(b + AR_SWAP_MASK + 4, m);
  v.setUint32(b + AR_COMPARE, wr.cmpHi);
  v.setUint32(b + AR_COMPARE + 4, wr.cmpLo);
  const cm = op === WrOpcode.CMP_SWAP ? 0xffffffff : 0;
  v.setUint32(b + AR_COMPARE_MASK, cm);
  v.setUint32(b + AR_COMPARE_MASK + 4, cm);
  return h + ATOMIC_REQUEST_BYTES;
}

/** Take the next PSN for a new data packet and describe it in its transmit slot. */
export function takePsn(qp: Qp, kind: number, ref: number, off: number, len: number, flags: number): number {
  const psn = qp.sndNxt;
  const s = psn & qp.wMask;
  qp.txKind[s] = kind;
  qp.txRef[s] = ref;
  qp.txOff[s] = off;
  qp.txLen[s] = len;
  qp.txFlags[s] = flags;
  qp.rtxQueued[s] = 0;
  qp.sndNxt = (psn + 1) >>> 0;
  return psn;
}

/** Segment `psn` (in flight, not SACKed) is lost: queue it to be resent; it leaves the pipe until it goes. */
export function queueRetransmit(qp: Qp, psn: number): void {
  const s = psn & qp.wMask;
  // The ring holds W entries; resends held back by the window keep theirs (and stale entries
  // of PSNs acknowledged since) until they go, so it can fill: then this one waits for the next
  // SACK or the timer to find it again rather than overwrite the ring's oldest.
  if (qp.rtxQueued[s] || qp.rtxCount >= qp.W) return;
  qp.rtxQueued[s] = 1;
  qp.lostOut++;
  qp.rtx[(qp.rtxHead + qp.rtxCount) & qp.wMask] = psn;
  qp.rtxCount++;
}

/** Cumulative ACK `ack` (the next PSN the peer expects). Returns true if it acknowledged anything. */
export function onAck(core: RdmaCore, qp: Qp, ack: number, nowNs: number): boolean {
  const d = (ack - qp.sndUna) | 0;
  if (d <= 0) return false;
  if (((ack - qp.sndNxt) | 0) > 0) {
    core.counters.badAck++;
    return false;
  }
  const mask = qp.wMask;
  // A timeout's resend (F-RTO below): still queued, or when it went (before its slot is freed).
  const probe = qp.rtoProbe ? qp.rtoProbePsn & mask : 0;
  const probeUnsent = qp.rtoProbe && qp.rtxQueued[probe] === 1;
  const probeNs = qp.rtoProbe ? qp.txTime[probe] : 0;
  let sampleNs = -1;
  for (let p = qp.sndUna; p !== ack; p = (p + 1) >>> 0) {
    const s = p & mask;
    if (!(qp.txFlags[s] & TxFlag.RETRANSMITTED)) sampleNs = qp.txTime[s];
    if (qp.txFlags[s] & TxFlag.SACKED) qp.sacked--;
    if (qp.rtxQueued[s] === 1) qp.lostOut--;
    qp.txKind[s] = TxKind.FREE;
    qp.txFlags[s] = 0;
    qp.rtxQueued[s] = 0;
  }
  qp.sndUna = ack;
  qp.retries = 0;
  qp.ccRtoDone = false;
  if (sampleNs > 0) rttSample(core, qp, nowNs - sampleNs);
  if (qp.probeOut) {
    // An ACK past snd_una after a timeout's PROBE (nothing was resent): the segments were
    // arriving, the timeout was spurious (onTimeout).
    qp.probeOut = false;
    qp.spuriousTimeouts++;
    ccUndoTimeout(qp);
  }
  if (qp.rtoProbe) {
    // The ACK after a timeout's single retransmission (F-RTO, RFC 5682): one that acknowledges
    // past the resent segment took packets we never resent, so the originals arrived and the
    // timeout was spurious (a late ACK: the peer was not scheduled): nothing more is resent.
    // One that stops right after it: what it leaves of what was out at the timeout (and not
    // SACKed) the peer does not have: resend that now. Unless the ACK cannot be for the resend
    // (Eifel's question, answered without timestamps as Linux's RACK does): it came before the
    // resend went, or sooner after it than the smallest round trip ever seen: it acknowledges
    // the original, which was late, not lost (with one segment in flight, the only test).
    qp.rtoProbe = false;
    if (((ack - qp.rtoProbePsn - 1) | 0) > 0 || probeUnsent || nowNs - probeNs < qp.minRttNs) {
      qp.spuriousTimeouts++;
      ccUndoTimeout(qp);
    } else
      for (let p = qp.sndUna; p !== qp.rtoProbeHigh && ((p - qp.sndNxt) | 0) < 0; p = (p + 1) >>> 0) {
        const s = p & mask;
        if (qp.txKind[s] !== TxKind.FREE && !(qp.txFlags[s] & TxFlag.SACKED)) queueRetransmit(qp, p);
      }
  }
  ccOnAck(qp, d, core.window, nowNs);
  qp.rtoDeadline = qp.inFlight > 0 ? nowNs + qp.rtoNs : 0;
  // Responses fully acknowledged leave the IRD ring.
  while (qp.respHead !== qp.respNext) {
    const r = qp.resp[qp.respHead & qp.respMask];
    if (!r.emitted || !(((r.lastPsn - ack) | 0) < 0)) break;
    r.src = null;
    qp.respHead++;
  }
  sqAcknowledged(core, qp, ack);
  return true;
}

/**
 * The send queue up to cumulative ACK `ack`: Sends and Writes complete when all their bytes are
 * acknowledged, a local operation (lastPsn: the packet before it) when everything before it is.
 */
export function sqAcknowledged(core: RdmaCore, qp: Qp, ack: number): void {
  const sq = qp.sq,
    nsq = sq.length;
  while (qp.sqAcked !== qp.sqNext) {
    const wr = sq[qp.sqAcked % nsq];
    if (!wr.emitted || !(((wr.lastPsn - ack) | 0) < 0)) break;
    if (wr.opcode < WrOpcode.READ) wr.done = true;
    qp.sqAcked++;
  }
  completeSq(core, qp);
}

function rttSample(core: RdmaCore, qp: Qp, r: number): void {
  if (qp.minRttNs === 0 || r < qp.minRttNs) qp.minRttNs = r;
  ccOnRtt(qp, r);
  if (qp.srttNs === 0) {
    qp.srttNs = r;
    qp.rttvarNs = r / 2;
  } else {
    qp.rttvarNs = 0.75 * qp.rttvarNs + 0.25 * Math.abs(qp.srttNs - r);
    qp.srttNs = 0.875 * qp.srttNs + 0.125 * r;
  }
  const rto = qp.srttNs + Math.max(core.timerTickNs, 4 * qp.rttvarNs);
  qp.rtoNs = Math.min(core.rtoMaxNs, Math.max(core.rtoMinNs, rto));
}

/**
 * SACK of [start, end): mark those received, retransmit at once the holes sent before them.
 * The range is taken only inside [snd_una, snd_nxt] (offsets from snd_una, unsigned, so a
 * value half the sequence space away cannot pass a serial comparison): the walk is bounded by
 * what we have in flight, never by the numbers the packet carries. A start at most a window
 * below snd_una (a SACK overtaken by a cumulative ACK) is clipped to it. Returns false when the
 * range is refused.
 */
export function onSack(core: RdmaCore, qp: Qp, start: number, end: number): boolean {
  const flight = (qp.sndNxt - qp.sndUna) >>> 0;
  const endOff = (end - qp.sndUna) >>> 0;
  const back = (start - qp.sndUna) | 0;
  if (back < 0 && back >= -qp.W) start = qp.sndUna;
  const startOff = (start - qp.sndUna) >>> 0;
  if (endOff > flight || startOff >= endOff) {
    core.counters.badAck++;
    return false;
  }
  const mask = qp.wMask;
  let maxSeq = -1,
    newly = 0;
  for (let p = start; p !== end; p = (p + 1) >>> 0) {
    const s = p & mask;
    if (qp.txKind[s] === TxKind.FREE) continue;
    if (!(qp.txFlags[s] & TxFlag.SACKED)) {
      newly++;
      // Queued to be resent but it arrived after all: it stays queued (ddp-output skips it) but
      // is no longer a lost segment of the pipe.
      if (qp.rtxQueued[s] === 1) {
        qp.rtxQueued[s] = 2;
        qp.lostOut--;
      }
    }
    qp.txFlags[s] |= TxFlag.SACKED;
    if (qp.txSeq[s] > maxSeq) maxSeq = qp.txSeq[s];
  }
  qp.sacked += newly;
  let queued = 0;
  for (let p = qp.sndUna; p !== start; p = (p + 1) >>> 0) {
    const s = p & mask;
    if (qp.txKind[s] === TxKind.FREE || qp.txFlags[s] & TxFlag.SACKED || qp.rtxQueued[s]) continue;
    // Lost when DUP_THRESH packets sent after it arrived (TCP's reordering tolerance), or when
    // the newest packet sent arrived and nothing more is coming to tell (early retransmit).
    if (maxSeq - qp.txSeq[s] >= DUP_THRESH || (maxSeq === qp.txCounter && qp.txSeq[s] < maxSeq)) {
      queueRetransmit(qp, p);
      queued++;
    }
  }
  if (queued > 0) {
    qp.fastRetransmits += queued;
    if (ccOnLoss(qp)) ccSharePath(core.qps, qp);
  }
  // Segments left the network (SACKed) or were found lost: the window may let more go.
  if (queued > 0 || newly > 0) core.schedule(qp);
  return true;
}

/** The retransmission timer expired: back off and resend what is not known to have arrived. */
export function onTimeout(core: RdmaCore, qp: Qp): void {
  qp.timeouts++;
  qp.retries++;
  // In ERROR only a Terminate is still retransmitted (its WRs are gone; the peer takes a
  // Terminate as soon as it arrives, holes or not).
  const onlyTerm = qp.state === QpState.ERROR;
  if (qp.retries > (qp.maxRetries >= 0 ? qp.maxRetries : core.maxRetries)) {
    if (onlyTerm) qp.rtoDeadline = 0;
    else retryExceeded(core, qp);
    return;
  }
  qp.rtoNs = Math.min(core.rtoMaxNs, qp.rtoNs * 2);
  const mask = qp.wMask;
  const sacked = onlyTerm || anySacked(qp);
  // The window goes to 1 (RFC 5681) once per series of timeouts, at the first that resends
  // (a timeout with SACKs, or one the peer's PROBE answers did not settle), and at the second of
  // a series at the latest. Not at one that only asks: most are a late ACK (spurious), and a loss
  // its answer finds is taken as a fast retransmission's (probeFoundLoss).
  if (!onlyTerm && !qp.ccRtoDone && (sacked || qp.retries >= 2 || !(qp.retries === 1 || qp.peerProbes))) {
    qp.ccRtoDone = true;
    ccOnTimeout(qp, qp.inFlight);
  }
  if (!sacked) {
    // A timeout with no SACK from the peer: silence is most often a late ACK (the peer not
    // scheduled for a while), not a loss. So it asks first, as QUIC's probe timeout does (RFC
    // 9002 6.2: a timeout declares nothing lost): a PROBE, which the peer answers with a
    // PROBE_ACK and SACKs saying what it has. Any ACK past snd_una shows the timeout spurious
    // (onAck), nothing resent; a PROBE_ACK that acknowledges nothing finds the oldest lost
    // (probeFoundLoss). Every timeout of a series asks once the peer answered a PROBE; a peer
    // that never did (urdma, an older rdma-graph) gets the second timeout's resend.
    if (qp.retries === 1 || qp.peerProbes) {
      qp.probeNeeded = true;
      qp.probeOut = true;
      core.schedule(qp);
      return;
    }
    qp.probeOut = false;
    resendOldest(qp);
    core.schedule(qp);
    return;
  }
  qp.rtoProbe = false;
  qp.probeOut = false;
  let queued = 0;
  for (let p = qp.sndUna; p !== qp.sndNxt; p = (p + 1) >>> 0) {
    const s = p & mask;
    const k = qp.txKind[s];
    if (k === TxKind.FREE || qp.txFlags[s] & TxFlag.SACKED) continue;
    if (onlyTerm) {
      if (qp.term === null) continue;
      // The peer takes a Terminate only at the PSN it expects next, and the data we sent
      // before ours is gone (its WRs were flushed): every hole gets a copy of the Terminate,
      // so whichever PSN the peer is missing, what it finds there is the Terminate.
      qp.txKind[s] = TxKind.TERM;
      qp.txFlags[s] = TxFlag.LAST;
    }
    queueRetransmit(qp, p);
    queued++;
  }
  if (queued === 0 && onlyTerm) qp.rtoDeadline = 0;
  core.schedule(qp);
}

/**
 * The oldest segment not SACKed resent, whatever the window (RFC 5681: the timeout's
 * retransmission); the next ACK decides about the rest up to snd_nxt (F-RTO, onAck).
 */
function resendOldest(qp: Qp): void {
  const mask = qp.wMask;
  for (let p = qp.sndUna; p !== qp.sndNxt; p = (p + 1) >>> 0) {
    const s = p & mask;
    if (qp.txKind[s] === TxKind.FREE || qp.txFlags[s] & TxFlag.SACKED) continue;
    queueRetransmit(qp, p);
    qp.rtxForce = 1;
    qp.rtoProbe = true;
    qp.rtoProbePsn = p;
    qp.rtoProbeHigh = qp.sndNxt;
    return;
  }
}

/**
 * The peer's PROBE_ACK acknowledged nothing new: the timeout was a loss after all. The peer
 * answered, so the ACK clock runs: the loss is taken as a fast retransmission's (the window
 * reduced once per window, the oldest resent at once), as TCP takes one its tail loss probe
 * reveals (RFC 8985 7.4; Linux's TLP), not as a timeout's collapse to 1. Before any RTT sample
 * the timer ran on rto-init's guess: a timeout's restart then (cwnd 1, ssthresh kept).
 */
export function probeFoundLoss(core: RdmaCore, qp: Qp): void {
  qp.probeOut = false;
  if (qp.state === QpState.ERROR || qp.sndUna === qp.sndNxt) return;
  if (!qp.ccRtoDone) {
    if (qp.srttNs > 0) {
      if (ccOnLoss(qp)) ccSharePath(core.qps, qp);
    } else {
      qp.ccRtoDone = true;
      ccOnTimeout(qp, qp.inFlight);
    }
  }
  resendOldest(qp);
  core.schedule(qp);
}

/** Whether the peer SACKed anything we have outstanding. */
function anySacked(qp: Qp): boolean {
  const mask = qp.wMask;
  for (let p = qp.sndUna; p !== qp.sndNxt; p = (p + 1) >>> 0) if (qp.txFlags[p & mask] & TxFlag.SACKED) return true;
  return false;
}

function retryExceeded(core: RdmaCore, qp: Qp): void {
  core.counters.retryExceeded++;
  // The oldest incomplete WR fails with retry-exceeded (the one being sent, partly out, too);
  // the QP goes to ERROR, the rest flush.
  const sq = qp.sq,
    nsq = sq.length;
  const end = qp.sqNext !== qp.sqTail && sq[qp.sqNext % nsq].started ? qp.sqNext + 1 : qp.sqNext;
  for (let i = qp.sqHead; i !== end; i++) {
    const wr = sq[i % nsq];
    if (!wr.done) {
      wr.done = true;
      wr.status = WcStatus.RETRY_EXC_ERR;
      break;
    }
  }
  qp.term = null;
  toError(core, qp, 'retry-exceeded');
}

/** Completions of the send queue, strictly in posting order. */
export function completeSq(core: RdmaCore, qp: Qp): void {
  const sq = qp.sq,
    nsq = sq.length;
  while (qp.sqHead !== qp.sqTail) {
    const wr = sq[qp.sqHead % nsq];
    if (!wr.done) break;
    if (wr.signaled || wr.status !== WcStatus.SUCCESS) {
      core.complete(qp.sendCq, {
        wrId: wr.wrId,
        qpn: qp.qpn,
        status: WC_STATUS_NAMES[wr.status],
        opcode: WC_OPCODE_NAMES[WR_WC_OPCODE[wr.opcode]],
        byteLen: wr.status !== WcStatus.SUCCESS ? 0 : isAtomic(wr.opcode) ? 8 : wr.length,
      });
    }
    wr.reset();
    qp.sqHead++;
  }
  if (qp.sqAcked - qp.sqHead < 0) qp.sqAcked = qp.sqHead;
}

/** A receive completed (or failed): its completion, in MSN order. */
export interface RecvResult {
  byteLen: number;
  /** UD: the sender's QPN (its UDP port); the completion then says a GRH is in front. */
  srcQp?: number;
  opcode?: number;
  imm?: number;
  invalidatedStag?: number;
  solicited?: boolean;
}

export function completeRecv(core: RdmaCore, qp: Qp, wr: RecvWr, status: number, c: RecvResult): void {
  const cq: Cq = qp.recvCq;
  const out: Completion = {
    wrId: wr.wrId,
    qpn: qp.qpn,
    status: WC_STATUS_NAMES[status],
    opcode: WC_OPCODE_NAMES[c.opcode ?? WcOpcode.RECV],
    byteLen: c.byteLen,
  };
  if (c.imm !== undefined) out.imm = c.imm;
  if (c.invalidatedStag !== undefined) out.invalidatedStag = c.invalidatedStag;
  if (c.solicited) out.solicited = true;
  if (c.srcQp !== undefined) out.srcQp = c.srcQp;
  core.complete(cq, out);
  qp.rqDone++;
  if (qp.srq !== null) {
    qp.srqRing[qp.rqDone & qp.srqMask] = null;
    qp.srq.release(wr);
  } else {
    wr.sg.clear();
    wr.wrId = null;
  }
}

/**
 * Move the QP to ERROR: every incomplete send WR completes (those already marked with an error
 * keep their status, the rest `flushed`), then every posted receive is flushed. A Terminate
 * still to be sent (or unacknowledged) keeps the transmit side alive until it is acknowledged.
 * `why` is the qp-error event's reason; null for a destroy, which is no error (no event).
 */
export function toError(core: RdmaCore, qp: Qp, why: string | null): void {
  const was = qp.state;
  qp.state = QpState.ERROR;
  const sq = qp.sq,
    nsq = sq.length;
  for (let i = qp.sqHead; i !== qp.sqTail; i++) {
    const wr = sq[i % nsq];
    if (!wr.done) {
      wr.done = true;
      wr.status = WcStatus.WR_FLUSH_ERR;
    }
  }
  qp.sqNext = qp.sqTail;
  qp.sqAcked = qp.sqTail;
  qp.ordRing.fill(null);
  qp.ordOut = 0;
  completeSq(core, qp);
  flushRecv(core, qp);
  qp.respNext = qp.respTail = qp.respHead;
  // Nothing but a pending Terminate is transmitted any more.
  if (qp.term === null) {
    qp.rtxCount = 0;
    qp.rtxQueued.fill(0);
    qp.lostOut = 0;
    qp.rtoDeadline = 0;
  }
  if (was !== QpState.ERROR && why !== null) core.event({ type: 'qp-error', qpn: qp.qpn, reason: why });
}

export function flushRecv(core: RdmaCore, qp: Qp): void {
  if (qp.srq === null) {
    while (qp.rqDone !== qp.rqPosted)
      completeRecv(core, qp, qp.rq[qp.rqDone % qp.rq.length], WcStatus.WR_FLUSH_ERR, { byteLen: 0 });
  } else {
    while (((qp.srqAssigned - qp.rqDone) | 0) > 0) {
      const wr = qp.srqRing[(qp.rqDone + 1) & qp.srqMask] as RecvWr;
      completeRecv(core, qp, wr, WcStatus.WR_FLUSH_ERR, { byteLen: 0 });
    }
  }
}

/**
 * Take back the acceptance of data packet `psn` (trp-input marked it received): it is dropped
 * unacknowledged, as if it had been lost, and the peer sends it again. The cumulative ACK point
 * goes back to it if it had passed it; ACKs go out only after the receive path has run, so
 * none has acknowledged it yet.
 */
export function unreceive(core: RdmaCore, qp: Qp, psn: number): void {
  const s = psn & qp.wMask;
  qp.rxGot[s] = 0;
  qp.rxEv[s] = 0;
  if (((psn - qp.deliverNext) | 0) >= 0 && ((psn - qp.rcvNxt) | 0) < 0) qp.rcvNxt = psn;
  qp.ackNeeded = true;
  core.schedule(qp);
}

/** Reserve the next IRD slot for a Read or Atomic response; null when IRD is exhausted. */
export function takeResp(qp: Qp): RespSlot | null {
  if (qp.respTail - qp.respHead >= qp.ird) return null;
  const r = qp.resp[qp.respTail & qp.respMask];
  r.sent = 0;
  r.emitted = false;
  r.src = null;
  qp.respTail++;
  return r;
}
