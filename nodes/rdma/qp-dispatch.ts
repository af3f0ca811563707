/**
 * qp-dispatch: in-order delivery. For every QP a vector touched, walks the receive window from
 * the last delivered PSN up to the cumulative ACK point (so never past a hole) and does what
 * each message asks, in the order the RFCs require: receive completions in MSN order (with
 * immediate data, the invalidated STag, the solicited flag), Read Requests queued for
 * ddp-output to answer (within IRD), Atomics executed at the remote TO with 64-bit operands in
 * host byte order (as verbs atomics) and answered, Read and Atomic Responses completing our
 * Reads and Atomics (send-queue completions stay in posting order). Completion queues are
 * woken once per pass (core.complete). Then the vector's buffers go back to the pool at once.
 */
import type { Frame, Graph, NodeRuntime } from '../../graph/index.ts';
import { BufferFlag, OPAQUE_WORDS } from '../../graph/index.ts';
import { RdmaCore } from './core.ts';
import { type Qp, QpState, RX_WORDS, RxEvent } from './qp.ts';
import { RdmaOpaque } from './trp-input.ts';
import { raiseTerminate } from './terminate.ts';
import { completeRecv, completeSq, takeResp, toError } from './transport.ts';
import { WcOpcode, WcStatus } from './verbs.ts';
import {
  AtomicOp,
  DDP_L,
  DDP_UNTAGGED_BYTES,
  DDP_VERSION,
  Qn,
  RDMAP_CTL,
  RDMAP_OP_NAMES,
  RdmapOp,
  TermCode,
} from './wire.ts';

export const QP_DISPATCH = 'qp-dispatch';

export function registerQpDispatch(graph: Graph, core: RdmaCore): NodeRuntime {
  return graph.register({ name: QP_DISPATCH, runtimeData: core, fn: qpDispatch, formatTrace: (r) => String(r) });
}

let mark = 1;
const touched: Qp[] = [];
const result = new Uint8Array(8);
const resultView = new DataView(result.buffer);
const hdr = new Uint8Array(DDP_UNTAGGED_BYTES);
const hdrView = new DataView(hdr.buffer);

/**
 * Receives complete strictly in MSN order: a Send (or Immediate Data) delivered in order must
 * carry the next MSN. One that skips MSNs (or repeats one) would complete the wrong receive
 * and leave another never completed: the peer gets a Terminate (invalid MSN range) naming the
 * message, rebuilt from what rdmap-input recorded.
 */
function msnOutOfOrder(core: RdmaCore, qp: Qp, op: number, msn: number, inv: number): void {
  hdr[0] = DDP_L | DDP_VERSION;
  hdr[1] = RDMAP_CTL | op;
  hdrView.setUint32(2, inv);
  hdrView.setUint32(6, Qn.SEND);
  hdrView.setUint32(10, msn);
  hdrView.setUint32(14, 0);
  const why = `qp-dispatch on qp ${qp.qpn}: ${RDMAP_OP_NAMES[op]} with MSN ${msn}, expected ${(qp.rqDone + 1) >>> 0}`;
  raiseTerminate(core, qp, TermCode.DDP_U_INVALID_MSN, hdr, 0, DDP_UNTAGGED_BYTES, why);
}

function qpDispatch(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const core = rt.runtimeData as RdmaCore;
  const pool = rt.graph.pool;
  const opaque = pool.opaque;
  const vec = f.vec,
    n = f.n;
  const m = ++mark;
  let nt = 0;
  for (let i = 0; i < n; i++) {
    const qp = core.qps[opaque[vec[i] * OPAQUE_WORDS + RdmaOpaque.QP]];
    if (qp !== null && qp.dispatchMark !== m) {
      qp.dispatchMark = m;
      touched[nt++] = qp;
    }
  }
  // show trace: per QP, what this pass delivers (the PSNs and what they asked for), before
  // deliver() consumes the window.
  const did = rt.traceOn ? new Map<Qp, { from: number; what: string }>() : null;
  for (let k = 0; k < nt; k++) {
    if (did !== null) did.set(touched[k], { from: touched[k].deliverNext, what: pending(touched[k]) });
    deliver(core, touched[k]);
    touched[k] = null as unknown as Qp;
  }
  if (did !== null)
    for (let i = 0; i < n; i++) {
      const bi = vec[i];
      if (!(pool.flags[bi] & BufferFlag.TRACED)) continue;
      const w = bi * OPAQUE_WORDS;
      const qp = core.qps[opaque[w + RdmaOpaque.QP]];
      const d = qp === null ? undefined : did.get(qp);
      if (qp === null || d === undefined) {
        rt.addTrace(bi, 'no QP any more: freed');
        continue;
      }
      const psn = opaque[w + RdmaOpaque.PSN];
      const upTo = qp.deliverNext;
      rt.addTrace(
        bi,
        d.from === upTo
          ? `qp ${qp.qpn} psn ${psn}: held, psn ${upTo} (a hole) comes first`
          : `qp ${qp.qpn} psn ${psn}: delivered psn ${d.from}..${(upTo - 1) >>> 0} in order: ${d.what}`,
      );
    }
  pool.free(vec, 0, n);
  return n;
}

const EVENT_NAMES: Record<number, string> = {
  [RxEvent.WRITE]: 'write segment',
  [RxEvent.SEND_LAST]: 'receive completion',
  [RxEvent.IMMEDIATE]: 'immediate data',
  [RxEvent.READ_REQUEST]: 'read request answered',
  [RxEvent.ATOMIC_REQUEST]: 'atomic executed',
  [RxEvent.READ_RESPONSE_LAST]: 'read completed',
  [RxEvent.ATOMIC_RESPONSE]: 'atomic completed',
  [RxEvent.TERMINATE]: 'terminate',
};

/** What deliver() is about to do for `qp`: its events from deliverNext to the ACK point, counted by kind. */
function pending(qp: Qp): string {
  const counts = new Map<string, number>();
  let segments = 0;
  for (let psn = qp.deliverNext; psn !== qp.rcvNxt; psn = (psn + 1) >>> 0) {
    const ev = qp.rxEv[psn & qp.wMask];
    if (ev === RxEvent.NONE) segments++;
    else counts.set(EVENT_NAMES[ev] ?? `event ${ev}`, (counts.get(EVENT_NAMES[ev] ?? `event ${ev}`) ?? 0) + 1);
  }
  if (segments > 0) counts.set('segment already placed by ddp-input', segments);
  return [...counts].map(([what, c]) => `${what} (${c})`).join(', ') || 'nothing';
}

/** Deliver every slot below the cumulative ACK point. */
export function deliver(core: RdmaCore, qp: Qp): void {
  const mask = qp.wMask,
    rw = qp.rxW;
  while (qp.deliverNext !== qp.rcvNxt) {
    const s = qp.deliverNext & mask;
    const ev = qp.rxEv[s],
      b = s * RX_WORDS;
    qp.rxGot[s] = 0;
    qp.rxEv[s] = RxEvent.NONE;
    qp.deliverNext = (qp.deliverNext + 1) >>> 0;
    if (qp.state === QpState.ERROR) continue;
    switch (ev) {
      case RxEvent.WRITE:
        qp.writeAcc += rw[b];
        if (rw[b + 1]) {
          qp.lastWriteLen = qp.writeAcc;
          qp.writeAcc = 0;
        }
        break;
      case RxEvent.SEND_LAST: {
        const op = rw[b + 2];
        if (rw[b] !== (qp.rqDone + 1) >>> 0) {
          msnOutOfOrder(core, qp, op, rw[b], rw[b + 3]);
          break;
        }
        const wr = qp.recvFor(rw[b]);
        if (wr === null) break;
        const inv = op === RdmapOp.SEND_INV || op === RdmapOp.SEND_SE_INV,
          imm = op === RdmapOp.SEND_IMM || op === RdmapOp.SEND_SE_IMM;
        if (inv) {
          const mr = core.mrFor(rw[b + 3], qp.pd, qp);
          if (mr !== null && RdmaCore.remotelyInvalidatable(mr)) RdmaCore.invalidate(mr);
        }
        // The last segment's immediate (each segment of the message carries it).
        completeRecv(core, qp, wr, WcStatus.SUCCESS, {
          byteLen: rw[b + 1],
          invalidatedStag: inv ? rw[b + 3] : undefined,
          imm: imm ? rw[b + 3] : undefined,
          solicited: op === RdmapOp.SEND_SE || op === RdmapOp.SEND_SE_INV || op === RdmapOp.SEND_SE_IMM,
        });
        break;
      }
      case RxEvent.IMMEDIATE: {
        if (rw[b] !== (qp.rqDone + 1) >>> 0) {
          msnOutOfOrder(core, qp, rw[b + 3], rw[b], 0);
          break;
        }
        const wr = qp.recvFor(rw[b]);
        if (wr === null) break;
        completeRecv(core, qp, wr, WcStatus.SUCCESS, {
          byteLen: qp.lastWriteLen,
          opcode: WcOpcode.RECV_WITH_IMM,
          imm: rw[b + 2],
          solicited: rw[b + 3] === RdmapOp.IMMEDIATE_SE,
        });
        qp.lastWriteLen = 0;
        break;
      }
      case RxEvent.READ_REQUEST: {
        const r = takeResp(qp);
        const size = rw[b + 4],
          stag = rw[b + 5];
        const mr = size > 0 ? core.mrFor(stag, qp.pd, qp) : null;
        if (r === null || (size > 0 && mr === null)) {
          toError(
            core,
            qp,
            r === null ? 'IRD exceeded' : `read source STag 0x${stag.toString(16)} invalidated before the read`,
          );
          break;
        }
        r.atomic = false;
        r.src = mr;
        r.srcOff = rw[b + 6] * 4294967296 + rw[b + 7] - (mr === null ? 0 : mr.base);
        r.length = size;
        r.sinkStag = rw[b + 1];
        r.sinkTo = rw[b + 2] * 4294967296 + rw[b + 3];
        qp.readExpect = (qp.readExpect + 1) >>> 0;
        core.schedule(qp);
        break;
      }
      case RxEvent.ATOMIC_REQUEST: {
        const r = takeResp(qp);
        const stag = rw[b + 3];
        const mr = core.mrFor(stag, qp.pd, qp);
        if (r === null || mr === null) {
          toError(
            core,
            qp,
            r === null ? 'IRD exceeded' : `atomic STag 0x${stag.toString(16)} invalidated before the atomic`,
          );
          break;
        }
        const to = rw[b + 4] * 4294967296 + rw[b + 5] - mr.base;
        const dv = mr.view;
        const oLo = dv.getUint32(to, true),
          oHi = dv.getUint32(to + 4, true);
        const aop = rw[b + 1] & 0x0f;
        let nLo = oLo,
          nHi = oHi;
        if (aop === AtomicOp.FETCH_ADD) {
          const lo = oLo + rw[b + 7];
          nLo = lo >>> 0;
          nHi = (oHi + rw[b + 6] + (lo > 0xffffffff ? 1 : 0)) >>> 0;
        } else {
          const swHi = rw[b + 6],
            swLo = rw[b + 7],
            smHi = rw[b + 8],
            smLo = rw[b + 9];
          const match =
            aop === AtomicOp.SWAP ||
            (((oHi ^ rw[b + 10]) & rw[b + 12]) === 0 && ((oLo ^ rw[b + 11]) & rw[b + 13]) === 0);
          if (match) {
            nHi = ((oHi & ~smHi) | (swHi & smHi)) >>> 0;
            nLo = ((oLo & ~smLo) | (swLo & smLo)) >>> 0;
          }
        }
        dv.setUint32(to, nLo, true);
        dv.setUint32(to + 4, nHi, true);
        r.atomic = true;
        r.reqId = rw[b + 2];
        r.msn = qp.atomicRespMsn;
        qp.atomicRespMsn = (qp.atomicRespMsn + 1) >>> 0;
        r.origHi = oHi;
        r.origLo = oLo;
        r.length = 0;
        qp.readExpect = (qp.readExpect + 1) >>> 0;
        core.schedule(qp);
        break;
      }
      case RxEvent.READ_RESPONSE_LAST:
      case RxEvent.ATOMIC_RESPONSE: {
        const msn = rw[b];
        const wr = qp.ordRing[msn & qp.ordMask];
        if (wr === null || wr.msn !== msn) break;
        if (ev === RxEvent.ATOMIC_RESPONSE) {
          // The original value lands in the local 8 bytes in host (little-endian) order.
          const hi = rw[b + 1],
            lo = rw[b + 2];
          for (let k = 0; k < 4; k++) {
            result[k] = (lo >>> (8 * k)) & 0xff;
            result[4 + k] = (hi >>> (8 * k)) & 0xff;
          }
          wr.sg.scatter(0, result, resultView, 0, 8);
        }
        wr.done = true;
        qp.ordRing[msn & qp.ordMask] = null;
        qp.ordOut--;
        completeSq(core, qp);
        core.schedule(qp);
        break;
      }
    }
  }
}
