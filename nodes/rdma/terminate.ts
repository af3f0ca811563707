/**
 * Terminate messages (RFC 5040 section 4.8): building one when a received segment violates the
 * protocol (the error code and, per hdrct, the segment length and the offending DDP and RDMAP
 * headers, with the RFC's M=0x80 D=0x40 R=0x20 bits, not urdma's), and taking one in: which of
 * our work requests it is about, and with which completion status.
 */
import type { RdmaCore } from './core.ts';
import { type Qp, QpState } from './qp.ts';
import { toError } from './transport.ts';
import { WcStatus, WrOpcode, isSend } from './verbs.ts';
import {
  DDP_T,
  DDP_TAGGED_BYTES,
  DDP_UNTAGGED_BYTES,
  HDRCT_D,
  HDRCT_M,
  HDRCT_R,
  Qn,
  RdmapOp,
  READ_REQUEST_BYTES,
  TERMINATE_CTL_BYTES,
  TermCode,
  termName,
} from './wire.ts';

const TERM_MAX = TERMINATE_CTL_BYTES + 2 + DDP_UNTAGGED_BYTES + READ_REQUEST_BYTES;

/**
 * The segment at `o` of `u8` (DDP header start, `segLen` bytes) of QP `qp` broke the protocol with
 * `code`: prepare the Terminate (sent by ddp-output as a reliable data packet) and move the QP
 * to ERROR. Later errors on the same QP change nothing (one Terminate per stream).
 *
 * `psn` is the offending segment's: the cumulative ACK goes back to it, so neither it nor
 * anything after it is acknowledged. Otherwise the ACK that trp-input already counted (carried
 * by the Terminate itself, or a pure ACK) would complete the peer's Send or Write successfully
 * before the Terminate naming it arrives, and the error would land on some other WR.
 */
export function raiseTerminate(
  core: RdmaCore,
  qp: Qp,
  code: number,
  u8: Uint8Array,
  o: number,
  segLen: number,
  why: string,
  psn?: number,
): void {
  if (qp.term !== null || qp.state === QpState.ERROR) return;
  if (psn !== undefined && ((psn - qp.deliverNext) | 0) >= 0 && ((psn - qp.rcvNxt) | 0) < 0) qp.rcvNxt = psn;
  const t = new Uint8Array(TERM_MAX);
  t[0] = code >>> 8; // layer << 4 | etype
  t[1] = code & 0xff;
  const tagged = (u8[o] & DDP_T) !== 0;
  const hlen = tagged ? DDP_TAGGED_BYTES : DDP_UNTAGGED_BYTES;
  let n = TERMINATE_CTL_BYTES;
  if (segLen >= hlen) {
    let hdrct = HDRCT_M | HDRCT_D;
    t[4] = segLen >>> 8;
    t[5] = segLen & 0xff;
    t.set(u8.subarray(o, o + hlen), 6);
    n = 6 + hlen;
    // RDMAP-layer errors about a Read Request carry its 28-byte RDMAP header as well.
    if (
      code >> 12 === 0 &&
      !tagged &&
      (u8[o + 1] & 0x0f) === RdmapOp.READ_REQUEST &&
      segLen >= hlen + READ_REQUEST_BYTES
    ) {
      t.set(u8.subarray(o + hlen, o + hlen + READ_REQUEST_BYTES), n);
      n += READ_REQUEST_BYTES;
      hdrct |= HDRCT_R;
    }
    t[2] = hdrct;
  }
  qp.term = t;
  qp.termLen = n;
  qp.termSent = false;
  core.counters.terminatesSent++;
  toError(core, qp, `terminate sent: ${termName(code)}: ${why}`);
  core.schedule(qp);
}

/** The completion status a Terminate with `code` gives the work request it names. */
export function termStatus(code: number): number {
  switch (code) {
    case TermCode.RDMAP_INVALID_STAG:
    case TermCode.RDMAP_BOUNDS:
    case TermCode.RDMAP_ACCESS:
    case TermCode.RDMAP_CANNOT_INVALIDATE:
    case TermCode.DDP_T_INVALID_STAG:
    case TermCode.DDP_T_BOUNDS:
      return WcStatus.REM_ACCESS_ERR;
    case TermCode.DDP_U_NO_BUFFER:
      return WcStatus.RNR_RETRY_EXC_ERR;
    case TermCode.RDMAP_CATASTROPHIC:
      return WcStatus.REM_OP_ERR;
    default:
      return WcStatus.REM_INV_REQ_ERR;
  }
}

/**
 * A Terminate arrived (in order): complete the WR its terminated header names (or the oldest
 * incomplete one when it names none of ours) with the mapped status, then the QP goes to
 * ERROR and everything else is flushed (RFC 5040: the stream is closed).
 */
export function receiveTerminate(core: RdmaCore, qp: Qp, body: Uint8Array): void {
  core.counters.terminatesReceived++;
  const code = body.length >= 2 ? (body[0] << 8) | body[1] : TermCode.RDMAP_CATASTROPHIC;
  const hdrct = body.length >= 3 ? body[2] : 0;
  const status = termStatus(code);
  const sq = qp.sq,
    nsq = sq.length;
  let target = -1;
  if (hdrct & HDRCT_D && body.length >= 6 + DDP_TAGGED_BYTES) {
    const h = 6;
    const dv = new DataView(body.buffer, body.byteOffset, body.byteLength);
    const isTagged = (body[h] & DDP_T) !== 0;
    const rop = body[h + 1] & 0x0f;
    for (let i = qp.sqHead; i !== qp.sqNext && target < 0; i++) {
      const wr = sq[i % nsq];
      if (wr.done) continue;
      if (isTagged && rop === RdmapOp.WRITE) {
        if ((wr.opcode === WrOpcode.WRITE || wr.opcode === WrOpcode.WRITE_WITH_IMM) && wr.rstag === dv.getUint32(h + 2))
          target = i;
      } else if (!isTagged && body.length >= 6 + DDP_UNTAGGED_BYTES) {
        const qn = dv.getUint32(h + 6),
          msn = dv.getUint32(h + 10);
        if (qn === Qn.SEND && (isSend(wr.opcode) || wr.opcode === WrOpcode.WRITE_WITH_IMM) && wr.msn === msn)
          target = i;
        if (qn === Qn.READ && wr.opcode >= WrOpcode.READ && wr.msn === msn) target = i;
      }
    }
    // A Terminate about one of our Read Responses names no WR of ours.
    if (isTagged && rop === RdmapOp.READ_RESPONSE) target = -2;
  }
  if (target === -1) {
    for (let i = qp.sqHead; i !== qp.sqNext; i++) {
      if (!sq[i % nsq].done) {
        target = i;
        break;
      }
    }
  }
  if (target >= 0) {
    const wr = sq[target % nsq];
    wr.done = true;
    wr.status = status;
  }
  qp.term = null;
  toError(core, qp, `terminate received: ${termName(code)}`);
}
