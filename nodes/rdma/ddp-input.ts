/**
 * ddp-input: DDP validation and placement (RFC 5041) of the segments trp-input accepted, in
 * arrival order (out-of-order segments are placed at once: the tagged offset and the MO say
 * where). Every violation sends a Terminate with the RFC's error code and the offending header.
 *
 * - Tagged (Write, Read Response): DV; the STag must exist in the QP's PD and allow the access
 *   (remote write for a Write; a Read Response must name one of our outstanding Reads); the
 *   range [TO, TO + length) must be inside the region. Data is copied into the MR (or the
 *   Read's scatter list).
 * - Untagged: DV; the QN must be one we take (0 sends, 1 read/atomic requests, 2 terminate,
 *   3 atomic responses); for QN 0 the MSN must name a posted receive (or one the SRQ gives),
 *   and MO + length must fit it; the payload is copied there.
 *
 * The segment then goes to rdmap-input with the DDP control bytes in the INFO opaque word.
 */
import { chainCopier } from '../../graph/chain-copy.ts';
import { copyBytes, SMALL_COPY } from './copy.ts';
import {
  BufferFlag,
  type BufferPool,
  type Frame,
  type Graph,
  NodeFlag,
  type NodeRuntime,
  OPAQUE_WORDS,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import type { RdmaCore } from './core.ts';
import { QpState, SRQ_LATER } from './qp.ts';
import { raiseTerminate } from './terminate.ts';
import { RdmaOpaque } from './trp-input.ts';
import { completeRecv, unreceive } from './transport.ts';
import { Access, type Mr, type SgList, WcStatus, WrOpcode } from './verbs.ts';
import {
  DDP_L,
  DDP_T,
  DDP_TAGGED_BYTES,
  DDP_UNTAGGED_BYTES,
  DDP_VERSION,
  Qn,
  RdmapOp,
  RDMAP_OP_NAMES,
  T_STAG,
  T_TO,
  TermCode,
  termName,
  U_MO,
  U_MSN,
  U_QN,
} from './wire.ts';

export const DDP_INPUT = 'ddp-input';
const NEXT = nextTable({ DROP: 'error-drop', RDMAP: 'rdmap-input' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_RDMAP = NEXT.index.RDMAP;

const ERROR_TABLE = errorTable({
  QP_ERROR: { name: 'qp_error', description: 'segment for a QP in ERROR', severity: 'warn' },
  TERMINATED: { name: 'terminated', description: 'DDP violation (Terminate sent)', severity: 'error' },
  TRUNCATED: { name: 'truncated', description: 'shorter than its DDP header', severity: 'error' },
  SRQ_ORDER: {
    name: 'srq_order',
    description: 'Send ahead of an earlier MSN without an SRQ receive (not acknowledged)',
    severity: 'info',
  },
});
export const DdpInputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export interface DdpTrace {
  qpn: number;
  psn: number;
  tagged: boolean;
  last: boolean;
  op: number;
  stag: number;
  to: number;
  qn: number;
  msn: number;
  mo: number;
  len: number;
  note: string;
}

export function formatDdpTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as DdpTrace;
  const where = t.tagged
    ? `stag 0x${t.stag.toString(16).padStart(8, '0')} to ${t.to}`
    : `qn ${t.qn} msn ${t.msn} mo ${t.mo}`;
  return `DDP: qp ${t.qpn} psn ${t.psn} ${RDMAP_OP_NAMES[t.op] ?? `opcode ${t.op}`} ${t.tagged ? 'tagged' : 'untagged'}${t.last ? ' last' : ''} ${where} payload ${t.len}${t.note ? `\n  ${t.note}` : ''}`;
}

export function registerDdpInput(graph: Graph, core: RdmaCore): NodeRuntime {
  return graph.register({
    name: DDP_INPUT,
    // Places a payload still in a memif peer's memory where it is (place(): ChainCopy).
    flags: NodeFlag.PEER_DATA_OK,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: core,
    fn: ddpInput,
    formatTrace: formatDdpTrace,
  });
}

/**
 * Copy `len` payload bytes of packet `bi` (a chain), from `skip` bytes into it, to position
 * `pos` of an MR's memory (`mr`) or, when `mr` is null, of a work request's SG list.
 */
export function place(
  pool: BufferPool,
  bi: number,
  skip: number,
  mr: Mr | null,
  sg: SgList | null,
  pos: number,
  len: number,
): void {
  const fl = pool.flags[bi];
  if ((len > SMALL_COPY && fl & BufferFlag.NEXT_PRESENT) || fl & BufferFlag.PEER_CHAIN) {
    // A chain into memory: one native call, no view per buffer. (A single buffer keeps the one
    // view: a native call costs more than it at 1448 bytes, MTU 1500, measured.) It reads the
    // bytes a memif server left in its peer's memory where they are (graph/peer-windows.ts).
    // Into an SG list when the bytes land in one of its entries (a Send, a Read Response).
    const mem = mr !== null ? mr.memory : (sg as SgList).span(pos, len);
    if (mem !== null) {
      chainCopier(pool).toMem(bi, skip, mem, mr !== null ? pos : (sg as SgList).spanAt, len);
      return;
    }
  }
  if (fl & BufferFlag.PEER_CHAIN) pool.settlePeer(bi);
  for (;;) {
    const l = pool.length[bi];
    if (skip < l) {
      const take = Math.min(len, l - skip);
      const o = pool.offset[bi] + skip;
      if (mr === null) (sg as SgList).scatter(pos, pool.u8, pool.view, o, take);
      else copyBytes(mr.memory, mr.view, pos, pool.u8, pool.view, o, take);
      pos += take;
      len -= take;
      skip = 0;
    } else skip -= l;
    if (len <= 0 || !(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) return;
    bi = pool.next[bi];
  }
}

function ddpInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const core = rt.runtimeData as RdmaCore;
  const pool = rt.graph.pool;
  const u8 = pool.u8,
    v = pool.view,
    offset = pool.offset,
    length = pool.length,
    opaque = pool.opaque,
    error = pool.error,
    flags = pool.flags;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  const qps = core.qps;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    const qp = qps[opaque[w + RdmaOpaque.QP]];
    const o = offset[bi];
    const segLen = flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi];
    let err = -1,
      code = 0;
    const b0 = u8[o],
      b1 = u8[o + 1];
    const tagged = (b0 & DDP_T) !== 0;
    const hlen = tagged ? DDP_TAGGED_BYTES : DDP_UNTAGGED_BYTES;
    const op = b1 & 0x0f;
    const plen = segLen - hlen;
    if (qp === null || qp.state === QpState.ERROR) err = DdpInputError.QP_ERROR;
    else if (segLen < 2 || length[bi] < Math.min(segLen, hlen)) err = DdpInputError.TRUNCATED;
    else if ((b0 & 3) !== DDP_VERSION) code = tagged ? TermCode.DDP_T_VERSION : TermCode.DDP_U_VERSION;
    else if (plen < 0) code = tagged ? TermCode.DDP_T_BOUNDS : TermCode.DDP_U_INVALID_MO;
    else if (tagged) {
      const stag = v.getUint32(o + T_STAG),
        toHi = v.getUint32(o + T_TO),
        to = toHi * 4294967296 + v.getUint32(o + T_TO + 4);
      if (op === RdmapOp.WRITE) {
        if (plen > 0) {
          const mr = core.mrFor(stag, qp.pd, qp);
          if (mr === null || !(mr.access & Access.REMOTE_WRITE)) code = TermCode.DDP_T_INVALID_STAG;
          else if (to < mr.base || to - mr.base + plen > mr.length) code = TermCode.DDP_T_BOUNDS;
          else place(pool, bi, hlen, mr, null, to - mr.base, plen);
        }
      } else if (op === RdmapOp.READ_RESPONSE) {
        const wr = qp.ordRing[stag & qp.ordMask];
        if (wr === null || wr.opcode !== WrOpcode.READ || wr.msn !== stag || wr.done)
          code = TermCode.DDP_T_INVALID_STAG;
        else if (to + plen > wr.length) code = TermCode.DDP_T_BOUNDS;
        else if (plen > 0) place(pool, bi, hlen, null, wr.sg, to, plen);
      }
      // Any other tagged opcode is rdmap-input's to reject.
    } else {
      const qn = v.getUint32(o + U_QN),
        msn = v.getUint32(o + U_MSN),
        mo = v.getUint32(o + U_MO);
      if (qn === Qn.SEND) {
        if (((msn - qp.rqDone) | 0) <= 0 || ((msn - qp.rqDone) | 0) > qp.W) code = TermCode.DDP_U_INVALID_MSN;
        else {
          let rwr = qp.recvFor(msn);
          // A receive posted just before this Send may still be in the program's ring: take the
          // ring in now (each call takes at least one entry or returns 0: bounded by the ring).
          while (rwr === null && qp.recvSource !== null && qp.recvSource.refill() > 0) rwr = qp.recvFor(msn);
          if (rwr === SRQ_LATER) {
            unreceive(core, qp, opaque[w + RdmaOpaque.PSN]);
            err = DdpInputError.SRQ_ORDER;
          } else if (rwr === null) code = TermCode.DDP_U_NO_BUFFER;
          else if (op === RdmapOp.IMMEDIATE || op === RdmapOp.IMMEDIATE_SE) {
            // Immediate Data uses the receive but places nothing in it.
          } else if (mo + plen > rwr.sg.total) {
            code = TermCode.DDP_U_TOO_LONG;
            // verbs: the receive completes with local-length-error (after those before it).
            if (msn === (qp.rqDone + 1) >>> 0) completeRecv(core, qp, rwr, WcStatus.LOC_LEN_ERR, { byteLen: 0 });
          } else if (plen > 0) place(pool, bi, hlen, null, rwr.sg, mo, plen);
        }
      } else if (qn !== Qn.READ && qn !== Qn.TERMINATE && qn !== Qn.ATOMIC_RESPONSE) code = TermCode.DDP_U_INVALID_QN;
    }
    if (code !== 0 && qp !== null) {
      raiseTerminate(core, qp, code, pool.u8, o, segLen, `ddp-input on qp ${qp.qpn}`, opaque[w + RdmaOpaque.PSN]);
      err = DdpInputError.TERMINATED;
    }
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED && qp !== null && err !== DdpInputError.TRUNCATED) {
      const full = segLen >= hlen;
      rt.addTrace(bi, {
        qpn: qp.qpn,
        psn: opaque[w + RdmaOpaque.PSN],
        tagged,
        last: (b0 & DDP_L) !== 0,
        op,
        stag: tagged && full ? v.getUint32(o + T_STAG) : 0,
        to: tagged && full ? v.getUint32(o + T_TO) * 4294967296 + v.getUint32(o + T_TO + 4) : 0,
        qn: !tagged && full ? v.getUint32(o + U_QN) : 0,
        msn: !tagged && full ? v.getUint32(o + U_MSN) : 0,
        mo: !tagged && full ? v.getUint32(o + U_MO) : 0,
        len: plen,
        note: code !== 0 ? `terminate ${termName(code)}` : err >= 0 ? ERRORS[err].description : '',
      } satisfies DdpTrace);
    }
    if (err >= 0) {
      error[bi] = eBase + err;
      nexts[i] = NEXT_DROP;
    } else {
      opaque[w + RdmaOpaque.INFO] = (b0 << 8) | b1;
      nexts[i] = NEXT_RDMAP;
    }
  }
  rt.enqueue(vec, n);
  return n;
}
