/**
 * ud-input: datagrams to UD QPs (from trp-input; PROTOCOL.md section 9) and to multicast groups
 * (from udp4-input; section 9.1). trp-input sends those with TRP opcode DATAGRAM to a UD QP's
 * port here; udp4-input what comes to the multicast port (multicast.ts binds it), which must be
 * at least a TRP header long, a DATAGRAM, to a group's address, else it is dropped and counted
 * (truncated, bad_opcode, not_group). Per datagram: the QP must be in RTR, RTS or SQD; the
 * header's reserved flag bits must be zero and its Q_Key the QP's (else dropped and counted:
 * bad_header, bad_qkey); the next posted receive (the QP's queue, or its SRQ) takes it, with
 * RoCE v2's 40-byte GRH area in front filled as a NIC fills it for IPv4 (20 bytes of zeros,
 * then the IPv4 header: version 4, IHL 5, the datagram's total length, TTL 64, UDP, a valid
 * checksum, source and destination), so ibv_init_ah_from_wc and programs that read the source
 * from the GRH work. The completion carries byte_len = 40 + the message, the source QPN (its
 * UDP port), the immediate and the solicited flag. No receive posted: dropped and counted
 * (no_receive: UD has no receiver-not-ready retry). A message longer than the receive (with its
 * GRH) completes that receive with local-length-error; the QP stays up (a peer cannot end it).
 * A datagram to a multicast group (PROTOCOL.md section 9.1) goes to every QP attached to the
 * group on the receiving interface, each a copy with its own checks (what one member lacks is
 * counted for it; the others still take it): `multicast` counts such datagrams, `no_member`
 * those that found no member. Each datagram costs its own bytes of work times the group's
 * members (at most MCAST_QPS_PER_GROUP), nothing a field of it names.
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
import { Ip4Opaque, IP_PROTO_UDP, ip4SetChecksum20 } from '../ip4/ip4.ts';
import type { RdmaCore } from './core.ts';
import { place } from './ddp-input.ts';
import { type Qp, QpState } from './qp.ts';
import { formatIp4, isIp4Multicast } from '../net/address.ts';
import { completeRecv } from './transport.ts';
import { RdmaOpaque } from './trp-input.ts';
import { WcStatus } from './verbs.ts';
import {
  DG_FLAGS_MASK,
  DG_IMM,
  DG_QKEY,
  DgFlag,
  GRH_BYTES,
  TRP_HEADER_BYTES,
  TRP_OP_SHIFT,
  TRP_OPCODE,
  TrpOp,
} from './wire.ts';

export const UD_INPUT = 'ud-input';

const NEXT = nextTable({ DROP: 'error-drop' });
const NEXT_DROP = NEXT.index.DROP;

const ERROR_TABLE = errorTable({
  DELIVERED: { name: 'delivered', description: 'datagrams delivered to a receive', severity: 'info' },
  NOT_READY: { name: 'not_ready', description: 'datagram for a UD QP not in RTR/RTS/SQD', severity: 'warn' },
  BAD_HEADER: { name: 'bad_header', description: 'datagram header with reserved bits set', severity: 'error' },
  BAD_QKEY: { name: 'bad_qkey', description: "datagram Q_Key is not the QP's (dropped)", severity: 'warn' },
  NO_RECEIVE: { name: 'no_receive', description: 'datagram with no receive posted (dropped)', severity: 'warn' },
  TOO_LONG: {
    name: 'too_long',
    description: 'datagram longer than its receive (local-length-error)',
    severity: 'warn',
  },
  TRUNCATED: {
    name: 'truncated',
    description: 'datagram to the multicast port shorter than its header',
    severity: 'error',
  },
  BAD_OPCODE: { name: 'bad_opcode', description: 'not a DATAGRAM, to the multicast port', severity: 'error' },
  NOT_GROUP: {
    name: 'not_group',
    description: 'to the multicast port, not to a multicast group',
    severity: 'error',
  },
  MULTICAST: { name: 'multicast', description: 'datagrams to a multicast group with members', severity: 'info' },
  NO_MEMBER: { name: 'no_member', description: 'datagram to a group no QP here is attached to', severity: 'warn' },
});
export const UdInputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export function registerUdInput(graph: Graph, core: RdmaCore): NodeRuntime {
  return graph.register({
    name: UD_INPUT,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: core,
    fn: udInput,
    formatTrace: (r) => String(r),
  });
}

/** The GRH area of one receive, rebuilt per datagram (no allocation). */
const grh = new Uint8Array(GRH_BYTES);
const grhView = new DataView(grh.buffer);

function fillGrh(src: number, dst: number, udpBytes: number): void {
  grh.fill(0, 0, 20);
  const o = 20;
  grhView.setUint32(o, 0x45000000 | (20 + udpBytes)); // version 4, IHL 5, TOS 0, total length
  grhView.setUint32(o + 4, 0); // identification, flags, fragment offset
  grhView.setUint32(o + 8, (64 << 24) | (IP_PROTO_UDP << 16)); // TTL 64, UDP, checksum 0
  grhView.setUint32(o + 12, src);
  grhView.setUint32(o + 16, dst);
  ip4SetChecksum20(grhView, o);
}

/**
 * Datagram `bi` (data at its TRP header, `len` bytes after it) to UD QP `qp`: -1 when a receive
 * took it (or completed with local-length-error, counted here), else the error that drops it.
 */
function deliver(rt: NodeRuntime, core: RdmaCore, qp: Qp | null, bi: number, len: number, fl: number): number {
  if (qp === null || (qp.state !== QpState.RTR && qp.state !== QpState.RTS && qp.state !== QpState.SQD))
    return UdInputError.NOT_READY;
  const pool = rt.graph.pool,
    opaque = pool.opaque,
    v = pool.view;
  const w = bi * OPAQUE_WORDS,
    o = pool.offset[bi];
  if (v.getUint32(o + DG_QKEY) !== qp.qkey) return UdInputError.BAD_QKEY;
  const msn = (qp.rqDone + 1) >>> 0;
  let wr = qp.recvFor(msn);
  // A receive the program posted since this pass's ring poll: taken in before dropping.
  while (wr === null && qp.recvSource !== null && qp.recvSource.refill() > 0) wr = qp.recvFor(msn);
  if (wr === null) return UdInputError.NO_RECEIVE;
  const srcQp = opaque[w + Ip4Opaque.PORTS] >>> 16;
  const imm = fl & DgFlag.IMM ? v.getUint32(o + DG_IMM) : undefined;
  if (GRH_BYTES + len > wr.sg.total) {
    rt.countError(UdInputError.TOO_LONG);
    completeRecv(core, qp, wr, WcStatus.LOC_LEN_ERR, { byteLen: 0, srcQp });
    return -1;
  }
  fillGrh(opaque[w + Ip4Opaque.REMOTE], opaque[w + Ip4Opaque.LOCAL], 8 + TRP_HEADER_BYTES + len);
  wr.sg.scatter(0, grh, grhView, 0, GRH_BYTES);
  if (len > 0) place(pool, bi, TRP_HEADER_BYTES, null, wr.sg, GRH_BYTES, len);
  qp.rxPackets++;
  qp.rxBytes += len;
  completeRecv(core, qp, wr, WcStatus.SUCCESS, {
    byteLen: GRH_BYTES + len,
    imm,
    solicited: (fl & DgFlag.SOLICITED) !== 0,
    srcQp,
  });
  rt.countError(UdInputError.DELIVERED);
  return -1;
}

/**
 * A datagram to a group: a copy to each QP attached to it on the receiving interface (each
 * member's own checks; what one member lacks is counted and the others still take it). -1 when
 * at least one took it, else the error that drops it. Bounded by the group's member list.
 */
function deliverToGroup(rt: NodeRuntime, core: RdmaCore, bi: number, len: number, fl: number): number {
  const pool = rt.graph.pool;
  const members = core.mcast.members(pool.opaque[bi * OPAQUE_WORDS + Ip4Opaque.LOCAL], pool.rxIf[bi]);
  if (members === undefined || members.length === 0) return UdInputError.NO_MEMBER;
  rt.countError(UdInputError.MULTICAST);
  let last = -1,
    taken = 0;
  for (let k = 0; k < members.length; k++) {
    // (A member destroyed from a completion's callback leaves the list shorter: no crash.)
    const qp = members[k];
    if (qp === undefined) break;
    const err = deliver(rt, core, qp, bi, len, fl);
    if (err < 0) taken++;
    else {
      last = err;
      if (k < members.length - 1 || taken > 0) rt.countError(err);
    }
  }
  return taken > 0 ? -1 : last;
}

function udInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const core = rt.runtimeData as RdmaCore;
  const pool = rt.graph.pool;
  const v = pool.view,
    opaque = pool.opaque,
    error = pool.error,
    flags = pool.flags;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  const free = rt.scratch;
  let nFree = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    // From trp-input: it checked the QP, the header's length and opcode. On the multicast port
    // (no QP has it): straight from udp4-input, checked here.
    const group = (opaque[w + Ip4Opaque.PORTS] & 0xffff) === core.mcast.port;
    const qp = group ? null : core.qps[opaque[w + RdmaOpaque.QP]];
    const o = pool.offset[bi];
    const len = (flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : pool.length[bi]) - TRP_HEADER_BYTES;
    const short = group && (len < 0 || pool.length[bi] < TRP_HEADER_BYTES);
    const word = short ? 0 : v.getUint16(o + TRP_OPCODE);
    const fl = word & DG_FLAGS_MASK;
    const err = short
      ? UdInputError.TRUNCATED
      : group && word >>> TRP_OP_SHIFT !== TrpOp.DATAGRAM
        ? UdInputError.BAD_OPCODE
        : group && !isIp4Multicast(opaque[w + Ip4Opaque.LOCAL])
          ? UdInputError.NOT_GROUP
          : (fl & ~(DgFlag.IMM | DgFlag.SOLICITED)) !== 0
            ? UdInputError.BAD_HEADER
            : group
              ? deliverToGroup(rt, core, bi, len, fl)
              : deliver(rt, core, qp, bi, len, fl);
    const traced = rt.traceOn && (flags[bi] & BufferFlag.TRACED) !== 0;
    if (err < 0) {
      if (traced)
        rt.addTrace(
          bi,
          group
            ? `UD: datagram of ${len} bytes to group ${formatIp4(opaque[w + Ip4Opaque.LOCAL])}, taken`
            : `UD: qp ${qp?.qpn} datagram of ${len} bytes from QPN ${opaque[w + Ip4Opaque.PORTS] >>> 16} to a receive`,
        );
      free[nFree++] = bi;
      continue;
    }
    if (traced)
      rt.addTrace(
        bi,
        `UD: ${group ? `to ${formatIp4(opaque[w + Ip4Opaque.LOCAL])} on the multicast port,` : `qp ${qp?.qpn ?? '?'}`} datagram of ${short ? `${len + TRP_HEADER_BYTES}` : len} bytes${short ? ' in all' : ''}: ${ERRORS[err].description}`,
      );
    error[bi] = eBase + err;
    vec[i - nFree] = bi;
    nexts[i - nFree] = NEXT_DROP;
  }
  if (nFree > 0) pool.free(free, 0, nFree);
  if (n - nFree > 0) rt.enqueue(vec, n - nFree);
  return n;
}
