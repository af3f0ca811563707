/**
 * The transmit half of UD QPs, called by ddp-output for a UD QP it serves: each send work
 * request (Send, Send with immediate, with or without the solicited flag) becomes one datagram
 * (PROTOCOL.md section 9: the TRP header's layout with opcode DATAGRAM, the Q_Key and the
 * immediate in it, then the message) to the address, QPN (UDP port) and Q_Key the work request
 * names, and completes as soon as it is handed to udp4-encap: there is no acknowledgement. A
 * work request whose Q_Key has the high bit set sends the QP's own Q_Key instead (InfiniBand's
 * rule for privileged Q_Keys). The multicast QPN (0xFFFFFF, with a group's address) sends to the
 * group: the stack's multicast port, out of the QP's own interface (multicast.ts). A message
 * longer than the egress port's active MTU (udMessageLimit) completes with local-length-error
 * and the QP goes to error, as on a NIC; a
 * destination no interface routes to is sent nowhere, completes with success and is counted
 * (`ddp-output ud_no_route`): datagrams may be lost.
 */
import { BufferFlag, type BufferPool, INVALID_INDEX, type NodeRuntime } from '../../graph/index.ts';
import { setUdpDestination } from '../udp/udp-ports.ts';
import type { RdmaCore } from './core.ts';
import { MCAST_QPN } from './multicast.ts';
import { type Qp, QpState } from './qp.ts';
import { completeSq, toError } from './transport.ts';
import { type SgList, WcStatus, WrOpcode } from './verbs.ts';
import { DG_IMM, DG_QKEY, DgFlag, TRP_HEADER_BYTES, TRP_OPCODE, TRP_OP_SHIFT, TrpOp, udMessageLimit } from './wire.ts';

/** Where serveUd puts the datagrams it made (ddp-output hands them to udp4-encap). */
export interface UdOut {
  bufs: Uint32Array;
  n: number;
  max: number;
  /** Set when no buffer was left (the rest waits for the next pass). */
  starved: boolean;
  /** Datagrams with no route (sent nowhere). */
  noRoute: number;
}

/**
 * The `len` bytes of `sg` in a new packet: one buffer, or a chain of them when the message is
 * longer than a buffer (the TRP header goes into the first one's headroom). INVALID_INDEX, and
 * nothing held, when the pool cannot supply them all.
 */
function datagram(pool: BufferPool, sg: SgList, len: number): number {
  const ds = pool.dataSize;
  const head = len <= ds ? pool.allocOne() : pool.allocChain(Math.ceil(len / ds));
  if (head === INVALID_INDEX) return INVALID_INDEX;
  let pos = 0;
  for (let bi = head; ; bi = pool.next[bi]) {
    const take = len - pos < ds ? len - pos : ds;
    if (take > 0) sg.gather(pos, pool.u8, pool.view, pool.offset[bi], take);
    pool.length[bi] = take;
    pos += take;
    if (!(pool.flags[bi] & BufferFlag.NEXT_PRESENT)) break;
  }
  return head;
}

/** Send what UD QP `qp` has posted, as far as `out` has room; true when work is left. */
export function serveUd(rt: NodeRuntime, core: RdmaCore, qp: Qp, out: UdOut): boolean {
  if (qp.state !== QpState.RTS && qp.state !== QpState.SQD) return false;
  const pool = rt.graph.pool,
    ifs = core.net.interfaces,
    v = pool.view,
    sq = qp.sq,
    nsq = sq.length;
  while (qp.sqNext !== qp.sqTail) {
    const wr = sq[qp.sqNext % nsq];
    let status: number = wr.postError >= 0 ? wr.postError : WcStatus.SUCCESS;
    if (status === WcStatus.SUCCESS) {
      const ix = ifs.routeFrom(qp.localAddr, wr.dstAddr);
      if (ix === 0) out.noRoute++;
      else if (wr.length > udMessageLimit(ifs.mtu[ix])) status = WcStatus.LOC_LEN_ERR;
      else {
        if (out.n === out.max) return true;
        const bi = datagram(pool, wr.sg, wr.length);
        if (bi === INVALID_INDEX) {
          out.starved = true;
          return true;
        }
        pool.prepend(bi, TRP_HEADER_BYTES);
        const o = pool.offset[bi];
        const imm = wr.opcode === WrOpcode.SEND_WITH_IMM;
        v.setUint32(o + DG_QKEY, wr.qkey & 0x80000000 ? qp.qkey : wr.qkey);
        v.setUint32(o + DG_IMM, imm ? wr.imm : 0);
        v.setUint16(
          o + TRP_OPCODE,
          (TrpOp.DATAGRAM << TRP_OP_SHIFT) | (imm ? DgFlag.IMM : 0) | (wr.solicited ? DgFlag.SOLICITED : 0),
        );
        // A group's datagrams go to the stack's multicast port (multicast.ts).
        const port = wr.dstQpn === MCAST_QPN ? core.mcast.port : wr.dstQpn;
        setUdpDestination(pool, bi, wr.dstAddr, port, qp.qpn, qp.localAddr);
        if (qp.cfg.mcastLoop === false) pool.flags[bi] |= BufferFlag.NO_MCAST_LOOP;
        out.bufs[out.n++] = bi;
        qp.txPackets++;
        qp.txBytes += wr.length;
      }
    }
    wr.done = true;
    wr.status = status;
    qp.sqNext++;
    qp.sqAcked = qp.sqNext;
    if (status !== WcStatus.SUCCESS) {
      completeSq(core, qp);
      toError(
        core,
        qp,
        status === WcStatus.LOC_LEN_ERR
          ? 'UD message longer than the path MTU'
          : 'local protection error in a send work request',
      );
      return false;
    }
  }
  completeSq(core, qp);
  return false;
}
