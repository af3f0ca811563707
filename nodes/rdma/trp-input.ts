/**
 * trp-input: the TRP layer of every datagram to a QP's port (udp4-input sends them here).
 *
 * Per packet: find the QP by local port, accept only its peer's (address, port), then by TRP
 * opcode. Every packet is treated as possibly spoofed (UDP has no authentication) and costs
 * one packet's work: loops run over our own window, never over a distance the packet names.
 *
 * - REQ/ACCEPT/REJECT go to cm-input.
 * - DATA and pure ACK: the cumulative ACK must lie in [snd_una - W, snd_nxt] (RFC 5961 5),
 *   else the packet is dropped; it frees acknowledged transmit slots and completes Sends and
 *   Writes. Data is checked against the receive window with serial arithmetic: a duplicate is
 *   dropped and re-acknowledged (urdma does not, and loses idle connections when a final ACK is
 *   lost), a packet above a hole is accepted at once (out-of-order placement is safe for DDP),
 *   and accepted data goes on to ddp-input.
 * - SACK: a range inside [snd_una, snd_nxt] only (transport.ts onSack).
 * - DATAGRAM to a UD QP goes to ud-input, from any address (a group's datagrams go there
 *   straight from udp4-input: multicast.ts binds the multicast port to it); SIDR_REP (the
 *   answer to a datagram service request the QP sent) to cm-input; anything else to a UD QP,
 *   and a DATAGRAM or SIDR message to an RC QP, is an unknown opcode.
 * - FIN: taken only at exactly the expected PSN with an acceptable ACK (RFC 5961's rule for
 *   RST); one elsewhere in the window draws a challenge ACK, which tells an honest closer where
 *   to send its FIN again (and makes it do so, a few times at most).
 *
 * The first acceptable packet from the peer of a passively accepted QP shows the peer saw our
 * ACCEPT (only it knows our initial PSN): the QP stops being half-open. ACKs are sent by
 * ddp-output, once per QP per pass (not per packet).
 */
import {
  BufferFlag,
  type Frame,
  type Graph,
  NodeFlag,
  type NodeRuntime,
  OPAQUE_WORDS,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { Ecn, Ip4Opaque } from '../ip4/ip4.ts';
import { CE_MASK, ccOnEcho } from './congestion.ts';
import { formatIp4 } from '../net/address.ts';
import type { RdmaCore } from './core.ts';
import { type Qp, QpState } from './qp.ts';
import { onAck, onSack, probeFoundLoss, toError } from './transport.ts';
import { TRP_ACK, TRP_HEADER_BYTES, TRP_OP_NAMES, TRP_OP_SHIFT, TRP_OPCODE, TRP_PSN, TrpOp } from './wire.ts';

export const TRP_INPUT = 'trp-input';

/** Opaque words the RDMA receive nodes use (after the IPv4/UDP words). */
export const RdmaOpaque = { QP: 4, PSN: 5, INFO: 6, AUX: 7 } as const;

const NEXT = nextTable({ DROP: 'error-drop', DDP: 'ddp-input', CM: 'cm-input', UD: 'ud-input' });
const PEER_OK = NodeFlag.PEER_DATA_OK | NodeFlag.IS_DROP;
const NEXT_DROP = NEXT.index.DROP,
  NEXT_DDP = NEXT.index.DDP,
  NEXT_CM = NEXT.index.CM,
  NEXT_UD = NEXT.index.UD;
/** FINs sent again to challenge ACKs, at most (per QP). */
const FIN_RESENDS = 3;

const ERROR_TABLE = errorTable({
  NO_QP: { name: 'no_qp', description: 'no QP on this port', severity: 'error' },
  WRONG_PEER: { name: 'wrong_peer', description: 'datagram not from the connected peer', severity: 'error' },
  TRUNCATED: { name: 'truncated', description: 'shorter than the TRP header', severity: 'error' },
  BAD_OPCODE: { name: 'bad_opcode', description: 'unknown TRP opcode', severity: 'error' },
  NOT_READY: { name: 'not_ready', description: 'data for a QP not in RTR/RTS/SQD', severity: 'warn' },
  DUPLICATE: { name: 'duplicate', description: 'duplicate data packet (re-acknowledged)', severity: 'info' },
  OUT_OF_WINDOW: { name: 'out_of_window', description: 'data beyond the receive window', severity: 'warn' },
  ACK: { name: 'ack', description: 'pure ACKs processed', severity: 'info' },
  PROBE: { name: 'probe', description: "PROBEs answered (the peer's retransmission timeouts)", severity: 'info' },
  SACK: { name: 'sack', description: 'SACKs processed', severity: 'info' },
  FIN: { name: 'fin', description: 'FINs received', severity: 'info' },
  BAD_ACK: { name: 'bad_ack', description: 'ACK outside [snd_una - window, snd_nxt] (dropped)', severity: 'warn' },
  BAD_SACK: { name: 'bad_sack', description: 'SACK range outside [snd_una, snd_nxt] (ignored)', severity: 'warn' },
  FIN_REJECTED: {
    name: 'fin_rejected',
    description: 'FIN not at the expected PSN (challenge ACK sent)',
    severity: 'warn',
  },
});
export const TrpInputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export interface TrpTrace {
  qpn: number;
  op: number;
  psn: number;
  ack: number;
  len: number;
  note: string;
}

export function formatTrpTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as TrpTrace;
  const name = TRP_OP_NAMES[t.op] ?? `opcode ${t.op}`;
  return `TRP: qp ${t.qpn} ${name} psn ${t.psn} ack ${t.ack} length ${t.len}${t.note ? `\n  ${t.note}` : ''}`;
}

export function registerTrpInput(graph: Graph, core: RdmaCore): NodeRuntime {
  return graph.register({
    name: TRP_INPUT,
    // Reads a DDP segment's headers only; ddp-input places its payload where it is.
    flags: NodeFlag.PEER_DATA_OK,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: core,
    fn: trpInput,
    formatTrace: formatTrpTrace,
  });
}

function trpInput(rt: NodeRuntime, frame: Frame | null): number {
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
  const qps = core.qps,
    byPort = core.qpByPort;
  const now = rt.graph.clock.tickNs();
  const free = rt.scratch;
  let nFree = 0,
    nAck = 0,
    nSack = 0,
    nDup = 0,
    nProbe = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    const ports = opaque[w + Ip4Opaque.PORTS];
    const ix = byPort[ports & 0xffff];
    const o = offset[bi],
      len = flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi];
    let err = -1,
      next = NEXT_DROP,
      note = '';
    const qp = ix < 0 ? null : qps[ix];
    let op = -1,
      psn = 0,
      ack = 0,
      low = 0;
    if (qp === null) err = TrpInputError.NO_QP;
    else if (len < TRP_HEADER_BYTES || length[bi] < TRP_HEADER_BYTES) err = TrpInputError.TRUNCATED;
    else {
      psn = v.getUint32(o + TRP_PSN);
      ack = v.getUint32(o + TRP_ACK);
      low = v.getUint16(o + TRP_OPCODE);
      op = low >>> TRP_OP_SHIFT;
      low &= CE_MASK;
      const fromPeer =
        opaque[w + Ip4Opaque.REMOTE] === qp.remoteAddr && ports >>> 16 === qp.remotePort && qp.remotePort !== 0;
      if (qp.cfg.ud) {
        // A UD QP takes datagrams from anyone (ud-input checks the Q_Key), and the answer to a
        // SIDR_REQ it sent (cm-input checks that it is one); nothing else.
        if (op === TrpOp.SIDR_REP) {
          next = NEXT_CM;
          opaque[w + RdmaOpaque.QP] = qp.index;
        } else if (op !== TrpOp.DATAGRAM) err = TrpInputError.BAD_OPCODE;
        else {
          next = NEXT_UD;
          opaque[w + RdmaOpaque.QP] = qp.index;
        }
      } else if (op === TrpOp.ACCEPT || op === TrpOp.REJECT || op === TrpOp.REQ) {
        next = NEXT_CM;
        opaque[w + RdmaOpaque.QP] = qp.index;
      } else if (!fromPeer) err = TrpInputError.WRONG_PEER;
      else if (op > TrpOp.PROBE_ACK || op === TrpOp.DATAGRAM) err = TrpInputError.BAD_OPCODE;
      else if (op === TrpOp.SACK) {
        nSack++;
        if (!onSack(core, qp, psn, ack)) err = TrpInputError.BAD_SACK;
        else {
          ccOnEcho(qp, low);
          free[nFree++] = bi;
          next = -1;
        }
      } else if (op === TrpOp.FIN) {
        rt.countError(TrpInputError.FIN);
        if (psn === qp.rcvNxt && qp.ackAcceptable(ack)) {
          if (qp.state !== QpState.ERROR) {
            // What the FIN acknowledges completes first (the peer took it before it closed):
            // only what is still unacknowledged is flushed.
            onAck(core, qp, ack, now);
            qp.term = null;
            // The peer closed cleanly: the QP goes to ERROR (its work flushed) and that is said
            // once, as qp-disconnected; a clean close is no qp-error.
            toError(core, qp, null);
            core.event({ type: 'qp-disconnected', qpn: qp.qpn, reason: 'FIN received' });
          }
          free[nFree++] = bi;
          next = -1;
        } else {
          err = TrpInputError.FIN_REJECTED;
          if (qp.state !== QpState.ERROR) {
            qp.ackNeeded = true;
            core.schedule(qp);
          }
        }
      } else if (!qp.ackAcceptable(ack) && !adoptSendPsn(qp, psn, ack)) err = TrpInputError.BAD_ACK;
      else {
        // DATA or pure ACK (or PROBE, PROBE_ACK: a pure ACK that asks, one that answers): all
        // carry a cumulative ACK.
        qp.halfOpen = false;
        ccOnEcho(qp, low);
        const acked = onAck(core, qp, ack, now);
        if (acked) core.schedule(qp);
        if (op === TrpOp.PROBE) {
          // The peer's timeout asks what we have: a PROBE_ACK (and SACKs) this pass, one per
          // pass however many PROBEs came (never more out than in).
          nProbe++;
          qp.probeAnswer = true;
          qp.ackNeeded = true;
          core.schedule(qp);
        } else if (op === TrpOp.PROBE_ACK) {
          qp.peerProbes = true;
          // The answer acknowledged nothing new: the oldest segment is lost (the PROBE, sent
          // after it, got there first), resent now. The SACKs behind it tell about the rest.
          if (!acked && qp.probeOut) probeFoundLoss(core, qp);
        }
        if (len === TRP_HEADER_BYTES || op !== TrpOp.DATA) {
          nAck++;
          free[nFree++] = bi;
          next = -1;
          // We closed with a FIN the peer did not take (not at its expected PSN): its
          // challenge ACK says which PSN it expects; send the FIN again there (a few times).
          if (qp.finSent && qp.state === QpState.ERROR && ack !== qp.finPsn && qp.finResends < FIN_RESENDS) {
            qp.finResends++;
            core.sendFin(qp, ack);
          }
        } else if (qp.state !== QpState.RTR && qp.state !== QpState.RTS && qp.state !== QpState.SQD) {
          err = TrpInputError.NOT_READY;
          // In ERROR, a repeat of what we already took (a Terminate) is still acknowledged.
          if (qp.state === QpState.ERROR && ((psn - qp.rcvNxt) | 0) < 0) {
            qp.ackNeeded = true;
            core.schedule(qp);
          }
        } else {
          qp.rxPackets++;
          // ECN: a CE mark on a data packet is counted and echoed (trp-output, section 5).
          if (((opaque[w + Ip4Opaque.L4] >>> 8) & 3) === Ecn.CE) qp.ceReceived++;
          const d = (psn - qp.rcvNxt) | 0;
          const s = psn & qp.wMask;
          if (d < 0 || (qp.rxGot[s] && ((psn - qp.deliverNext) | 0) < qp.W)) {
            nDup++;
            qp.duplicates++;
            qp.ackNeeded = true;
            core.schedule(qp);
            free[nFree++] = bi;
            next = -1;
            note = 'duplicate, re-acknowledged';
          } else if (((psn - qp.deliverNext) | 0) >= qp.W) {
            err = TrpInputError.OUT_OF_WINDOW;
            qp.ackNeeded = true;
            core.schedule(qp);
          } else {
            qp.rxGot[s] = 1;
            qp.rxEv[s] = 0;
            if (((psn + 1 - qp.rcvHigh) | 0) > 0) qp.rcvHigh = (psn + 1) >>> 0;
            if (d === 0) {
              let r = (qp.rcvNxt + 1) >>> 0;
              while (((r - qp.deliverNext) | 0) < qp.W && qp.rxGot[r & qp.wMask]) r = (r + 1) >>> 0;
              qp.rcvNxt = r;
            } else if (!qp.sackDirty) {
              // Above a hole: the SACK of the range it joins goes out with the next ACK.
              qp.sackDirty = true;
              qp.sackLo = qp.sackHi = psn;
            } else if (((psn - qp.sackLo) | 0) < 0) qp.sackLo = psn;
            else if (((psn - qp.sackHi) | 0) > 0) qp.sackHi = psn;
            // Acknowledged this pass, unless it is a lone packet in order (it moves the
            // cumulative ACK by one, no ACK held before it, nothing received above it): then
            // data going back within rdma.trp.ack-delay-us (a reply, a Read's response) carries
            // the ACK, and no pure ACK is sent (ddp-output).
            if (
              d === 0 &&
              qp.rcvNxt === (psn + 1) >>> 0 &&
              qp.rcvHigh === qp.rcvNxt &&
              !qp.ackNeeded &&
              !qp.ackHeld &&
              core.ackDelayNs > 0
            ) {
              qp.ackHeld = true;
              qp.ackDue = now + core.ackDelayNs;
            } else qp.ackNeeded = true;
            core.schedule(qp);
            opaque[w + RdmaOpaque.QP] = qp.index;
            opaque[w + RdmaOpaque.PSN] = psn;
            pool.advance(bi, TRP_HEADER_BYTES);
            next = NEXT_DDP;
          }
        }
      }
    }
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED) {
      if (qp === null) rt.addTrace(bi, `TRP: no QP on port ${ports & 0xffff}`);
      else {
        if (err >= 0) note = ERRORS[err].description;
        if (err === TrpInputError.WRONG_PEER) note += ` (${formatIp4(opaque[w + Ip4Opaque.REMOTE])}:${ports >>> 16})`;
        rt.addTrace(bi, { qpn: qp.qpn, op, psn, ack, len, note } satisfies TrpTrace);
      }
    }
    if (next < 0) continue;
    // Bytes a memif server left in its peer's memory: in the pool for a next node that does not
    // read them there (NodeFlag.PEER_DATA_OK).
    if (flags[bi] & BufferFlag.PEER_CHAIN && !(rt.nextNodes[next].flags & PEER_OK)) pool.settlePeer(bi);
    if (err >= 0) error[bi] = eBase + err;
    vec[i - nFree] = bi;
    nexts[i - nFree] = next;
  }
  if (nAck > 0) rt.countError(TrpInputError.ACK, nAck);
  if (nProbe > 0) rt.countError(TrpInputError.PROBE, nProbe);
  if (nSack > 0) rt.countError(TrpInputError.SACK, nSack);
  if (nDup > 0) rt.countError(TrpInputError.DUPLICATE, nDup);
  if (nFree > 0) pool.free(free, 0, nFree);
  if (n - nFree > 0) rt.enqueue(vec, n - nFree);
  return n;
}

/**
 * A verbs QP that stays in RTR (a passive side: perftest's write_bw server) never got its send
 * PSN (ibv_modify_qp gives sq_psn only at RTS), yet the peer ACKs from the PSN it was told. The
 * first in-order packet from the peer then sets it; RTS, if it comes, sets it again.
 */
function adoptSendPsn(qp: Qp, psn: number, ack: number): boolean {
  if (qp.state !== QpState.RTR || qp.sendStarted || psn !== qp.rcvNxt) return false;
  qp.startSend(ack);
  return true;
}
