/**
 * trp-output: puts the 10-byte TRP header in front of what ddp-output built and addresses the
 * datagram to the QP's peer. Data packets carry their PSN and the current cumulative ACK (so
 * every data packet is also an ACK); their transmit slot gets the send time (RTT samples) and a
 * transmission sequence number (fast retransmission decides with it), and the QP's
 * retransmission timer is armed. Pure ACKs carry the next PSN we will send; SACKs carry their
 * range. Then udp4-encap.
 *
 * The retransmission timers belong to this node (graph timer wheel, one lazy timer per QP), and
 * the pacing timers ddp-output arms (user word QP index + max-qps): they only schedule the QP.
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, OPAQUE_WORDS } from '../../graph/index.ts';
import { setUdpDestination } from '../udp/udp-ports.ts';
import { Ip4Opaque, L4_TOS_ECT0 } from '../ip4/ip4.ts';
import { CE_MASK, Congestion } from './congestion.ts';
import type { RdmaCore } from './core.ts';
import type { Qp } from './qp.ts';
import { TxPacket } from './ddp-output.ts';
import { RdmaOpaque } from './trp-input.ts';
import { onTimeout } from './transport.ts';
import { TRP_ACK, TRP_HEADER_BYTES, TRP_OP_NAMES, TRP_OP_SHIFT, TRP_OPCODE, TRP_PSN, TrpOp } from './wire.ts';

export const TRP_OUTPUT = 'trp-output';

export function registerTrpOutput(graph: Graph, core: RdmaCore): NodeRuntime {
  const rt = graph.register({
    name: TRP_OUTPUT,
    next: ['udp4-encap'],
    runtimeData: core,
    fn: trpOutput,
    timer: rtoExpired,
    formatTrace: (r) => String(r),
  });
  core.trpOutput = rt;
  return rt;
}

function trpOutput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const core = rt.runtimeData as RdmaCore;
  const pool = rt.graph.pool;
  const v = pool.view,
    opaque = pool.opaque,
    offset = pool.offset,
    flags = pool.flags;
  const vec = f.vec,
    n = f.n;
  const now = rt.graph.clock.tickNs();
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    // ddp-output queued it in this same pass: the QP exists (destroy runs between passes).
    const qp = core.qps[opaque[w + RdmaOpaque.QP]] as Qp;
    const kind = opaque[w + RdmaOpaque.INFO];
    pool.prepend(bi, TRP_HEADER_BYTES);
    const o = offset[bi];
    let psn: number, ack: number, op: number;
    let ect = false;
    if (kind === TxPacket.DATA) {
      psn = opaque[w + RdmaOpaque.PSN];
      ack = qp.rcvNxt;
      op = TrpOp.DATA;
      const s = psn & qp.wMask;
      qp.txTime[s] = now;
      qp.txSeq[s] = ++qp.txCounter;
      qp.txPackets++;
      core.armRto(qp, now);
      ect = qp.ccAlgo !== Congestion.NONE;
    } else if (kind !== TxPacket.SACK) {
      // A pure ACK, a PROBE or a PROBE_ACK: our next PSN and our cumulative ACK.
      psn = qp.sndNxt;
      ack = qp.rcvNxt;
      op = kind === TxPacket.ACK ? TrpOp.DATA : kind === TxPacket.PROBE ? TrpOp.PROBE : TrpOp.PROBE_ACK;
    } else {
      psn = opaque[w + RdmaOpaque.PSN];
      ack = opaque[w + RdmaOpaque.AUX];
      op = TrpOp.SACK;
    }
    v.setUint32(o + TRP_PSN, psn);
    v.setUint32(o + TRP_ACK, ack);
    // The low 12 bits: the count of CE-marked data packets received, echoed (section 5).
    v.setUint16(o + TRP_OPCODE, (op << TRP_OP_SHIFT) | (qp.ceReceived & CE_MASK));
    setUdpDestination(pool, bi, qp.remoteAddr, qp.remotePort, qp.qpn, qp.localAddr);
    // Data of a QP under congestion control is ECN-capable (ECT(0)); ACKs are not (RFC 3168).
    if (ect) opaque[w + Ip4Opaque.L4] |= L4_TOS_ECT0;
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED)
      rt.addTrace(bi, `TRP: qp ${qp.qpn} ${kind === TxPacket.ACK ? 'ACK' : TRP_OP_NAMES[op]} psn ${psn} ack ${ack}`);
  }
  rt.graph.enqueueToSingleNext(rt, 0, vec, 0, n);
  return n;
}

function rtoExpired(rt: NodeRuntime, index: number): void {
  const core = rt.runtimeData as RdmaCore;
  if (index >= core.qps.length) {
    // A pacing timer (ddp-output): the QP may send its next segments now.
    const paced = core.qps[index - core.qps.length];
    if (paced === null) return;
    paced.paceTimer = -1;
    core.schedule(paced);
    return;
  }
  const qp = core.qps[index];
  if (qp === null) return;
  qp.rtoTimer = -1;
  if (qp.rtoDeadline === 0) return;
  const now = rt.graph.clock.nowNs();
  if (now < qp.rtoDeadline) {
    qp.rtoTimer = rt.graph.startTimer(rt, qp.rtoDeadline - now, index);
    return;
  }
  onTimeout(core, qp);
  if (qp.rtoDeadline !== 0) {
    qp.rtoDeadline = now + qp.rtoNs;
    qp.rtoTimer = rt.graph.startTimer(rt, qp.rtoNs, index);
  }
}
