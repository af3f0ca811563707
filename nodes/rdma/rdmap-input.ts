/**
 * rdmap-input: the RDMAP layer (RFC 5040, RFC 7306) of the segments ddp-input placed. Checks
 * the RDMAP version, that the opcode is one we take and travels the way the RFC says (tagged or
 * on the right QN), the body length of each message, and for requests the remote rights
 * (source STag in our PD, remote-read or remote-atomic access, bounds and alignment), the
 * Read/Atomic MSN within IRD, and the STag a Send with Invalidate names. Violations send a
 * Terminate with the RDMAP error code and the offending headers.
 *
 * What a message does to the application (a receive completing, a Read answered, an Atomic
 * executed) must happen in order, only when no hole precedes it: rdmap-input records it in the
 * QP's receive window slot for qp-dispatch. A Terminate is taken at once (the stream is over).
 */
import {
  BufferFlag,
  type Frame,
  type Graph,
  type NodeRuntime,
  OPAQUE_WORDS,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { RdmaCore } from './core.ts';
import { QpState, RX_WORDS, RxEvent } from './qp.ts';
import { raiseTerminate, receiveTerminate } from './terminate.ts';
import { unreceive } from './transport.ts';
import { RdmaOpaque } from './trp-input.ts';
import { Access, type Mr, WrOpcode } from './verbs.ts';
import {
  AR_OPCODE,
  AR_STAG,
  AR_TO,
  ARESP_ORIG,
  ARESP_REQ_ID,
  ATOMIC_REQUEST_BYTES,
  ATOMIC_RESPONSE_BYTES,
  AtomicOp,
  DDP_L,
  DDP_T,
  DDP_TAGGED_BYTES,
  DDP_UNTAGGED_BYTES,
  IMM_DATA,
  IMMEDIATE_BYTES,
  Qn,
  RDMAP_OP_NAMES,
  RDMAP_VERSION,
  RdmapOp,
  READ_REQUEST_BYTES,
  RR_SIZE,
  RR_SRC_STAG,
  RR_SRC_TO,
  T_STAG,
  TermCode,
  TERMINATE_CTL_BYTES,
  termName,
  U_INV_STAG,
  U_MO,
  U_MSN,
  U_QN,
} from './wire.ts';

export const RDMAP_INPUT = 'rdmap-input';
const NEXT = nextTable({ DROP: 'error-drop', DISPATCH: 'qp-dispatch' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_DISPATCH = NEXT.index.DISPATCH;

const ERROR_TABLE = errorTable({
  TERMINATED: { name: 'terminated', description: 'RDMAP violation (Terminate sent)', severity: 'error' },
  TERMINATE_RECEIVED: { name: 'terminate_received', description: 'Terminate received', severity: 'warn' },
  TERMINATE_EARLY: {
    name: 'terminate_early',
    description: 'Terminate above a hole (not taken, not acknowledged)',
    severity: 'warn',
  },
});
export const RdmapInputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

/** Which QN each untagged opcode must arrive on (-1: tagged only or not an opcode we take). */
const OP_QN = [
  -1,
  Qn.READ,
  -1,
  Qn.SEND,
  Qn.SEND,
  Qn.SEND,
  Qn.SEND,
  Qn.TERMINATE,
  Qn.SEND,
  Qn.SEND,
  Qn.READ,
  Qn.ATOMIC_RESPONSE,
  Qn.SEND,
  Qn.SEND,
  -1,
  -1,
];

export function registerRdmapInput(graph: Graph, core: RdmaCore): NodeRuntime {
  return graph.register({
    name: RDMAP_INPUT,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: core,
    fn: rdmapInput,
    formatTrace: (r) => String(r),
  });
}

function rdmapInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const core = rt.runtimeData as RdmaCore;
  const pool = rt.graph.pool;
  const v = pool.view,
    offset = pool.offset,
    length = pool.length,
    opaque = pool.opaque,
    error = pool.error,
    flags = pool.flags;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    const qp = core.qps[opaque[w + RdmaOpaque.QP]];
    const psn = opaque[w + RdmaOpaque.PSN];
    const info = opaque[w + RdmaOpaque.INFO];
    const b0 = info >>> 8,
      b1 = info & 0xff;
    const tagged = (b0 & DDP_T) !== 0,
      last = (b0 & DDP_L) !== 0;
    const op = b1 & 0x0f;
    const o = offset[bi];
    const segLen = flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi];
    const plen = segLen - (tagged ? DDP_TAGGED_BYTES : DDP_UNTAGGED_BYTES);
    const body = o + DDP_UNTAGGED_BYTES;
    let code = 0,
      err = -1;
    let note = '';
    if (qp === null || qp.state === QpState.ERROR) {
      nexts[i] = NEXT_DISPATCH;
      continue;
    }
    const s = psn & qp.wMask,
      rw = qp.rxW,
      b = s * RX_WORDS;
    if (b1 >>> 6 !== RDMAP_VERSION) code = TermCode.RDMAP_VERSION;
    else if (tagged) {
      if (op === RdmapOp.WRITE) {
        qp.rxEv[s] = RxEvent.WRITE;
        rw[b] = plen;
        rw[b + 1] = last ? 1 : 0;
        qp.rxBytes += plen;
      } else if (op === RdmapOp.READ_RESPONSE) {
        qp.rxBytes += plen;
        if (last) {
          qp.rxEv[s] = RxEvent.READ_RESPONSE_LAST;
          rw[b] = v.getUint32(o + T_STAG);
        }
      } else code = TermCode.RDMAP_UNEXPECTED_OPCODE;
    } else if (OP_QN[op] !== v.getUint32(o + U_QN)) code = TermCode.RDMAP_UNEXPECTED_OPCODE;
    else {
      const msn = v.getUint32(o + U_MSN);
      switch (op) {
        case RdmapOp.SEND:
        case RdmapOp.SEND_SE:
        case RdmapOp.SEND_INV:
        case RdmapOp.SEND_SE_INV:
        case RdmapOp.SEND_IMM:
        case RdmapOp.SEND_SE_IMM: {
          qp.rxBytes += plen;
          const inv = v.getUint32(o + U_INV_STAG);
          if (op === RdmapOp.SEND_INV || op === RdmapOp.SEND_SE_INV) {
            // Only an MR registered as remotely invalidatable (RFC 5040 6.1: an STag the ULP
            // let the peer invalidate); any other gets "STag cannot be invalidated".
            const mr = core.mrFor(inv, qp.pd, qp);
            if (mr === null) code = TermCode.RDMAP_INVALID_STAG;
            else if (!RdmaCore.remotelyInvalidatable(mr)) code = TermCode.RDMAP_CANNOT_INVALIDATE;
          }
          if (code === 0 && last) {
            qp.rxEv[s] = RxEvent.SEND_LAST;
            rw[b] = msn;
            rw[b + 1] = v.getUint32(o + U_MO) + plen;
            rw[b + 2] = op;
            rw[b + 3] = inv;
          }
          break;
        }
        case RdmapOp.IMMEDIATE:
        case RdmapOp.IMMEDIATE_SE:
          if (plen !== IMMEDIATE_BYTES || !last || v.getUint32(o + U_MO) !== 0) code = TermCode.RDMAP_CATASTROPHIC;
          else {
            qp.rxEv[s] = RxEvent.IMMEDIATE;
            rw[b] = msn;
            rw[b + 1] = v.getUint32(body);
            rw[b + 2] = v.getUint32(body + IMM_DATA);
            rw[b + 3] = op;
          }
          break;
        case RdmapOp.READ_REQUEST:
        case RdmapOp.ATOMIC_REQUEST: {
          const isRead = op === RdmapOp.READ_REQUEST;
          const d = (msn - qp.readExpect) | 0;
          if (plen < (isRead ? READ_REQUEST_BYTES : ATOMIC_REQUEST_BYTES) || !last) code = TermCode.RDMAP_CATASTROPHIC;
          // IRD counts the requests not yet delivered and the responses not yet acknowledged.
          else if (d < 0 || d + (qp.respTail - qp.respHead) >= qp.ird) code = TermCode.DDP_U_INVALID_MSN;
          else if (isRead) {
            const size = v.getUint32(body + RR_SIZE),
              stag = v.getUint32(body + RR_SRC_STAG);
            const to = v.getUint32(body + RR_SRC_TO) * 4294967296 + v.getUint32(body + RR_SRC_TO + 4);
            const mr = core.mrFor(stag, qp.pd, qp);
            if (size > 0 && mr === null) code = TermCode.RDMAP_INVALID_STAG;
            else if (size > 0 && !((mr as { access: number }).access & Access.REMOTE_READ))
              code = TermCode.RDMAP_ACCESS;
            else if (size > 0 && (to < (mr as Mr).base || to - (mr as Mr).base + size > (mr as Mr).length))
              code = TermCode.RDMAP_BOUNDS;
            else {
              qp.rxEv[s] = RxEvent.READ_REQUEST;
              rw[b] = msn;
              for (let k = 0; k < 7; k++) rw[b + 1 + k] = v.getUint32(body + 4 * k);
            }
          } else {
            const aop = v.getUint32(body + AR_OPCODE) & 0x0f,
              stag = v.getUint32(body + AR_STAG);
            const to = v.getUint32(body + AR_TO) * 4294967296 + v.getUint32(body + AR_TO + 4);
            const mr = core.mrFor(stag, qp.pd, qp);
            if (aop > AtomicOp.CMP_SWAP) code = TermCode.RDMAP_UNEXPECTED_OPCODE;
            else if (mr === null) code = TermCode.RDMAP_INVALID_STAG;
            else if (!(mr.access & Access.REMOTE_ATOMIC)) code = TermCode.RDMAP_ACCESS;
            else if (to % 8 !== 0 || to < mr.base || to - mr.base + 8 > mr.length) code = TermCode.RDMAP_BOUNDS;
            else {
              qp.rxEv[s] = RxEvent.ATOMIC_REQUEST;
              rw[b] = msn;
              for (let k = 0; k < 13; k++) rw[b + 1 + k] = v.getUint32(body + 4 * k);
            }
          }
          break;
        }
        case RdmapOp.ATOMIC_RESPONSE: {
          const reqId = plen >= ATOMIC_RESPONSE_BYTES ? v.getUint32(body + ARESP_REQ_ID) : 0;
          const wr = qp.ordRing[reqId & qp.ordMask];
          if (
            plen < ATOMIC_RESPONSE_BYTES ||
            wr === null ||
            wr.msn !== reqId ||
            wr.opcode < WrOpcode.FETCH_ADD ||
            wr.done
          ) {
            code = TermCode.RDMAP_UNEXPECTED_OPCODE;
          } else {
            qp.rxEv[s] = RxEvent.ATOMIC_RESPONSE;
            rw[b] = reqId;
            rw[b + 1] = v.getUint32(body + ARESP_ORIG);
            rw[b + 2] = v.getUint32(body + ARESP_ORIG + 4);
          }
          break;
        }
        case RdmapOp.TERMINATE: {
          // Taken only at the expected PSN, everything before it received (RFC 5961's rule for
          // RST): a blind spoofer must hit that one PSN, not just the window. One above a hole
          // is dropped unacknowledged; our ACK tells the peer where we are and it sends the
          // Terminate again at that PSN (transport.ts, termChallenged).
          if (((psn - qp.rcvNxt) | 0) >= 0) {
            unreceive(core, qp, psn);
            err = RdmapInputError.TERMINATE_EARLY;
            note = 'terminate above a hole: not taken';
            break;
          }
          const tb = pool.packetBytes(bi).subarray(DDP_UNTAGGED_BYTES);
          rt.countError(RdmapInputError.TERMINATE_RECEIVED);
          note = `terminate received: ${tb.length >= TERMINATE_CTL_BYTES ? termName((tb[0] << 8) | tb[1]) : 'truncated'}`;
          receiveTerminate(core, qp, tb); // reports qp-error (once) with the code
          break;
        }
        default:
          code = TermCode.RDMAP_UNEXPECTED_OPCODE;
      }
    }
    if (code !== 0) {
      raiseTerminate(
        core,
        qp,
        code,
        pool.u8,
        o,
        segLen,
        `rdmap-input on qp ${qp.qpn}: ${RDMAP_OP_NAMES[op] ?? op}`,
        psn,
      );
      err = RdmapInputError.TERMINATED;
      note = `terminate ${termName(code)}`;
    }
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED)
      rt.addTrace(
        bi,
        `RDMAP: qp ${qp.qpn} psn ${psn} ${RDMAP_OP_NAMES[op] ?? `opcode ${op}`}${last ? ' last' : ''}${note ? ` (${note})` : ''}`,
      );
    if (err >= 0) {
      error[bi] = eBase + err;
      nexts[i] = NEXT_DROP;
    } else nexts[i] = NEXT_DISPATCH;
  }
  rt.enqueue(vec, n);
  return n;
}
