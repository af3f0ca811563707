/**
 * ip4-rewrite: the IPv4 and Ethernet headers of locally originated packets, then the
 * interface's `<if>-output`.
 *
 * In: data = the L4 header, `Ip4Opaque` words REMOTE (destination), LOCAL (source, 0 = the
 * interface's), L4 (protocol; TOS in bits 8..15; interface index in the high half, 0 = route
 * by destination). The IPv4 header is prepended in the headroom: version 4, IHL 5, the TOS
 * given (0 but ECT(0) on RDMA data under congestion control), DF, TTL 64, an identification from a per-graph counter, the unrolled header checksum. The next hop is the
 * destination when on-link, else the interface's gateway. Its MAC comes from the neighbor
 * table (broadcast and multicast map directly). When it is unresolved the packet is held by
 * the neighbor table, which sends an ARP request at once and again every retransmit interval
 * (one per neighbor per interval: that is the rate limit), and sends the held packets back
 * here when the reply comes, or drops them ("no ARP reply") when the probes run out.
 *
 * A destination that is one of our own addresses (on any interface) is the local adjacency:
 * no route, next hop or ARP (nothing on the wire could answer for us), the destination MAC is
 * the owning interface's, `pool.rxIf` names that interface, and the frame goes to
 * ip4-loopback, which takes it in as received there. Decided once per run of packets to one
 * destination, like the neighbor lookup.
 *
 * A multicast destination maps to its MAC directly; when the interface has joined the group
 * (a UD QP of ours is attached to it), a copy of the frame also goes to ip4-loopback, as a host
 * loops its multicast back to its own members (`mcast_loop`; made through a scratch buffer:
 * multicast is not the data path's common case).
 */
import {
  BufferFlag,
  type BufferPool,
  type Frame,
  INVALID_INDEX,
  type Graph,
  type NodeRuntime,
  OPAQUE_WORDS,
  RX_ONLY_FLAGS,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { BROADCAST_HI, BROADCAST_LO, ETH_HEADER_BYTES, ETHERTYPE_IP4 } from '../ethernet/ethernet.ts';
import { formatIp4, formatMacHiLo, isIp4Multicast } from '../net/address.ts';
import { HoldResult, type NeighborTable } from '../ethernet/neighbor.ts';
import { formatIp4HeaderTrace, type Ip4HeaderTrace, ip4HeaderRecord } from './ip4-input.ts';
import { type InterfaceTable, TxOffload } from '../net/interface-table.ts';
import { IP4_DEFAULT_TTL, IP4_FLAG_DF, IP4_HEADER_BYTES, Ip4Opaque, ip4SetChecksum20 } from './ip4.ts';

export const IP4_REWRITE = 'ip4-rewrite';

const NEXT = nextTable({ DROP: 'error-drop', LOCAL: 'ip4-loopback' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_LOCAL = NEXT.index.LOCAL;

const ERROR_TABLE = errorTable({
  NO_ROUTE: { name: 'no_route', description: 'no route to destination', severity: 'error' },
  BAD_INTERFACE: { name: 'bad_interface', description: 'tx interface has no IPv4 config', severity: 'error' },
  TOO_BIG: { name: 'too_big', description: 'packet exceeds MTU', severity: 'error' },
  NO_HEADROOM: { name: 'no_headroom', description: 'no headroom for IPv4+Ethernet', severity: 'error' },
  HELD: { name: 'held', description: 'held awaiting ARP resolution', severity: 'info' },
  HOLD_QUEUE_FULL: { name: 'hold_queue_full', description: 'ARP hold queue full', severity: 'error' },
  NEIGHBOR_TABLE_FULL: { name: 'neighbor_table_full', description: 'neighbor table full (static)', severity: 'error' },
  MCAST_LOOP: {
    name: 'mcast_loop',
    description: 'multicast copies to this data plane (a group its interface joined)',
    severity: 'info',
  },
  MCAST_LOOP_NO_BUFFER: {
    name: 'mcast_loop_no_buffer',
    description: 'multicast copy to this data plane not made (no buffer)',
    severity: 'warn',
  },
});
export const Ip4RewriteError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

/** Room for the largest frame a multicast copy is made of (copied through it: a rare path). */
const loopScratch = new Uint8Array(65536 + ETH_HEADER_BYTES);

/** A copy of the whole frame `bi` to ip4-loopback, received on interface `ix` (the checksums its flags leave undone with it). */
function loopCopy(rt: NodeRuntime, pool: BufferPool, bi: number, ix: number): void {
  const len = pool.readPacket(bi, loopScratch, 0);
  const c = pool.writePacket(loopScratch, 0, len);
  if (c === INVALID_INDEX) {
    rt.countError(Ip4RewriteError.MCAST_LOOP_NO_BUFFER);
    return;
  }
  pool.flags[c] |= pool.flags[bi] & (BufferFlag.TX_IP4_CKSUM | BufferFlag.TX_UDP_CKSUM);
  pool.rxIf[c] = ix;
  rt.countError(Ip4RewriteError.MCAST_LOOP);
  rt.graph.enqueueOne(rt, NEXT_LOCAL, c);
}

interface RewriteData {
  ifs: InterfaceTable;
  table: NeighborTable;
  out: Int32Array;
  ident: number;
}

interface RewriteTrace {
  ip: Ip4HeaderTrace;
  dstHi: number;
  dstLo: number;
  srcHi: number;
  srcLo: number;
  via: number;
  ifName: string;
}

function formatRewriteTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as RewriteTrace;
  const head = `IP4: ${formatMacHiLo(t.srcHi, t.srcLo)} -> ${formatMacHiLo(t.dstHi, t.dstLo)} via ${formatIp4(t.via)} on ${t.ifName}`;
  return `${head}\n${formatIp4HeaderTrace(t.ip)}`;
}

export function registerIp4Rewrite(graph: Graph, ifs: InterfaceTable, table: NeighborTable): NodeRuntime {
  const data: RewriteData = { ifs, table, out: new Int32Array(0), ident: 0 };
  const rt = graph.register({
    name: IP4_REWRITE,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: data,
    fn: ip4Rewrite,
    formatTrace: formatRewriteTrace,
  });
  data.out = ifs.attach(rt);
  return rt;
}

function ip4Rewrite(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const d = rt.runtimeData as RewriteData;
  const { ifs, table, out } = d;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    flags = pool.flags,
    error = pool.error,
    rxIf = pool.rxIf,
    opaque = pool.opaque;
  const configured = ifs.configured,
    ifAddr = ifs.address,
    mtu = ifs.mtu,
    txOff = ifs.txOffload,
    ifHi = ifs.macHi,
    ifLo = ifs.macLo;
  const nMacHi = table.macHi,
    nMacLo = table.macLo,
    nUsed = table.used;
  const vec = f.vec,
    n = f.n;
  // Packets that go on (held ones do not) are compacted into scratch.
  const keep = rt.scratch,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  let k = 0,
    held = 0;
  let ident = d.ident;
  // Neighbor lookup cache for runs to the same next hop.
  let cIx = -1,
    cNh = -1,
    cE = -1;
  // Local adjacency cache: the interface owning the last destination (0: not ours).
  let cDst = -1,
    cLocal = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    const dst = opaque[w + Ip4Opaque.REMOTE];
    const l4 = opaque[w + Ip4Opaque.L4];
    const traced = rt.traceOn && (flags[bi] & BufferFlag.TRACED) !== 0;
    let ix = l4 >>> 16;
    let err = -1;
    let nh = 0,
      mHi = 0,
      mLo = 0;
    if (ix === 0) {
      ix = ifs.route(dst);
      if (ix === 0) err = Ip4RewriteError.NO_ROUTE;
    } else if (ix >= ifs.max || configured[ix] !== 1) err = Ip4RewriteError.BAD_INTERFACE;
    const plen = err < 0 ? (flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi]) : 0;
    if (err < 0 && plen + IP4_HEADER_BYTES > mtu[ix]) err = Ip4RewriteError.TOO_BIG;
    let local = 0;
    if (err < 0) {
      if (dst !== cDst) {
        cDst = dst;
        cLocal = ifs.localInterface(dst);
      }
      local = cLocal;
      if (local !== 0) {
        mHi = ifHi[local];
        mLo = ifLo[local];
      } else if (isIp4Multicast(dst)) {
        mHi = 0x01005e00 | ((dst >>> 16) & 0x7f);
        mLo = dst & 0xffff;
      } else if (ifs.isBroadcast(ix, dst)) {
        mHi = BROADCAST_HI;
        mLo = BROADCAST_LO;
      } else {
        nh = ifs.nextHop(ix, dst);
        if (nh === 0) err = Ip4RewriteError.NO_ROUTE;
        else {
          let e = cE;
          if (ix !== cIx || nh !== cNh) {
            e = table.lookup(ix, nh);
            cIx = ix;
            cNh = nh;
            cE = e;
          }
          if (e >= 0 && table.resolved(e)) {
            mHi = nMacHi[e];
            mLo = nMacLo[e];
            nUsed[e] = 1;
          } else {
            const r = table.hold(ix, nh, bi);
            cIx = -1; // the entry may have been created or evicted
            if (r === HoldResult.HELD) {
              held++;
              if (traced)
                rt.addTrace(
                  bi,
                  `held awaiting ARP for ${formatIp4(nh)} on ${ifs.names[ix]} (${table.held(table.lookup(ix, nh))} held)`,
                );
              continue;
            }
            err = r === HoldResult.QUEUE_FULL ? Ip4RewriteError.HOLD_QUEUE_FULL : Ip4RewriteError.NEIGHBOR_TABLE_FULL;
          }
        }
      }
    }
    if (err < 0 && !pool.prepend(bi, IP4_HEADER_BYTES + ETH_HEADER_BYTES)) err = Ip4RewriteError.NO_HEADROOM;
    if (err >= 0) {
      error[bi] = eBase + err;
      keep[k] = bi;
      nexts[k++] = NEXT_DROP;
      if (traced) rt.addTrace(bi, ERRORS[err].description);
      continue;
    }
    const o = offset[bi];
    const ip = o + ETH_HEADER_BYTES;
    let src = opaque[w + Ip4Opaque.LOCAL];
    if (src === 0) src = ifAddr[ix];
    ident = (ident + 1) & 0xffff;
    v.setUint32(ip, (0x45000000 | ((l4 & 0xff00) << 8) | (plen + IP4_HEADER_BYTES)) >>> 0);
    v.setUint32(ip + 4, (ident << 16) | IP4_FLAG_DF);
    u8[ip + 8] = IP4_DEFAULT_TTL;
    u8[ip + 9] = l4 & 0xff;
    v.setUint32(ip + 12, src);
    v.setUint32(ip + 16, dst);
    if (txOff[ix] & TxOffload.IP4_CKSUM) {
      v.setUint16(ip + 10, 0);
      flags[bi] |= BufferFlag.TX_IP4_CKSUM;
    } else {
      ip4SetChecksum20(v, ip);
      flags[bi] &= ~BufferFlag.TX_IP4_CKSUM;
    }
    v.setUint32(o, mHi);
    v.setUint16(o + 4, mLo);
    v.setUint32(o + 6, ifHi[ix]);
    v.setUint16(o + 10, ifLo[ix]);
    v.setUint16(o + 12, ETHERTYPE_IP4);
    flags[bi] &= ~RX_ONLY_FLAGS;
    // A group the interface joined (a UD QP of ours attached to it) takes a copy too, as a host
    // loops its multicast back to its own members (Linux's IP_MULTICAST_LOOP, on by default);
    // with workers, also when another worker joined a group (worker-handoff copies it there).
    if (
      local === 0 &&
      mHi !== BROADCAST_HI &&
      isIp4Multicast(dst) &&
      !(flags[bi] & BufferFlag.NO_MCAST_LOOP) &&
      (ifs.groups.member(ix, dst) || ifs.groups.joinedElsewhere())
    )
      loopCopy(rt, pool, bi, ix);
    keep[k] = bi;
    if (local !== 0) {
      rxIf[bi] = local;
      nexts[k++] = NEXT_LOCAL;
    } else nexts[k++] = out[ix];
    if (traced) {
      rt.addTrace(bi, {
        ip: ip4HeaderRecord(v, ip, ''),
        dstHi: mHi,
        dstLo: mLo,
        srcHi: ifHi[ix],
        srcLo: ifLo[ix],
        via: nh || dst,
        ifName: local !== 0 ? `${ifs.names[ix]}, local to ${ifs.names[local]}` : ifs.names[ix],
      } satisfies RewriteTrace);
    }
  }
  d.ident = ident;
  if (held > 0) rt.countError(Ip4RewriteError.HELD, held);
  if (k > 0) rt.graph.enqueueToNext(rt, keep, nexts, k);
  return n;
}
