/**
 * udp4-encap: datagrams (data = the UDP payload, destination in the `Ip4Opaque` words) get
 * their UDP header prepended in the buffer's headroom, with the checksum over the pseudo-header
 * and the whole payload (every segment); a computed 0 is sent as 0xFFFF (RFC 768). The route
 * lookup happens here because the pseudo-header needs our source address: the chosen interface
 * goes into the L4 word for ip4-rewrite, and an unset source becomes that interface's address.
 * No fragmentation: a datagram that does not fit the interface's MTU is dropped ("exceeds MTU";
 * the layers above segment to the MTU).
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
import { type InterfaceTable, TxOffload } from '../net/interface-table.ts';
import {
  foldSum,
  IP4_HEADER_BYTES,
  Ip4Opaque,
  IP_PROTO_UDP,
  L4_TOS_ECT0,
  packetSum,
  pseudoHeaderSum,
} from '../ip4/ip4.ts';
import { formatUdpTrace, UDP_HEADER_BYTES, type UdpTrace } from './udp4-input.ts';

export const UDP4_ENCAP = 'udp4-encap';

const NEXT = nextTable({ DROP: 'error-drop', REWRITE: 'ip4-rewrite' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_REWRITE = NEXT.index.REWRITE;

const ERROR_TABLE = errorTable({
  NO_ROUTE: { name: 'no_route', description: 'no route to destination', severity: 'error' },
  TOO_BIG: { name: 'too_big', description: 'datagram exceeds MTU', severity: 'error' },
  NO_HEADROOM: { name: 'no_headroom', description: 'no headroom for UDP header', severity: 'error' },
});
export const UdpEncapError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export function registerUdp4Encap(graph: Graph, ifs: InterfaceTable): NodeRuntime {
  return graph.register({
    name: UDP4_ENCAP,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: ifs,
    fn: udp4Encap,
    formatTrace: formatUdpTrace,
  });
}

function udp4Encap(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const ifs = rt.runtimeData as InterfaceTable;
  const pool = rt.graph.pool;
  const v = pool.view,
    offset = pool.offset,
    length = pool.length,
    flags = pool.flags,
    error = pool.error,
    opaque = pool.opaque;
  const ifAddr = ifs.address,
    mtu = ifs.mtu,
    txOff = ifs.txOffload;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  // One route lookup per run of datagrams to the same destination from the same source.
  let lastDst = -1,
    lastSrc = -1,
    lastIx = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const w = bi * OPAQUE_WORDS;
    const dst = opaque[w + Ip4Opaque.REMOTE];
    let err = -1;
    if (dst !== lastDst || opaque[w + Ip4Opaque.LOCAL] !== lastSrc) {
      lastDst = dst;
      lastSrc = opaque[w + Ip4Opaque.LOCAL];
      lastIx = ifs.routeFrom(lastSrc, dst);
    }
    const ix = lastIx;
    const plen = flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi];
    const ulen = plen + UDP_HEADER_BYTES;
    if (ix === 0) err = UdpEncapError.NO_ROUTE;
    else if (ulen + IP4_HEADER_BYTES > mtu[ix]) err = UdpEncapError.TOO_BIG;
    else if (!pool.prepend(bi, UDP_HEADER_BYTES)) err = UdpEncapError.NO_HEADROOM;
    if (err >= 0) {
      error[bi] = eBase + err;
      nexts[i] = NEXT_DROP;
      if (rt.traceOn && flags[bi] & BufferFlag.TRACED)
        rt.addTrace(bi, `${ERRORS[err].description}: ${plen} bytes of payload`);
      continue;
    }
    let src = opaque[w + Ip4Opaque.LOCAL];
    if (src === 0) {
      src = ifAddr[ix];
      opaque[w + Ip4Opaque.LOCAL] = src;
    }
    const ports = opaque[w + Ip4Opaque.PORTS];
    opaque[w + Ip4Opaque.L4] = (IP_PROTO_UDP | (opaque[w + Ip4Opaque.L4] & L4_TOS_ECT0) | (ix << 16)) >>> 0;
    const o = offset[bi];
    v.setUint16(o, ports & 0xffff);
    v.setUint16(o + 2, ports >>> 16);
    v.setUint16(o + 4, ulen);
    v.setUint16(o + 6, 0);
    if (txOff[ix] & TxOffload.UDP_NONE) {
      // No checksum (0): the interface's link cannot corrupt the datagram (memif udp-checksum: false).
      flags[bi] &= ~BufferFlag.TX_UDP_CKSUM;
    } else if (txOff[ix] & TxOffload.UDP_CKSUM) {
      // The NIC sums the datagram over the pseudo-header sum left in the field.
      v.setUint16(o + 6, foldSum(pseudoHeaderSum(src, dst, IP_PROTO_UDP, ulen)));
      flags[bi] |= BufferFlag.TX_UDP_CKSUM;
    } else {
      const ck = ~foldSum(pseudoHeaderSum(src, dst, IP_PROTO_UDP, ulen) + packetSum(pool, bi)) & 0xffff;
      v.setUint16(o + 6, ck === 0 ? 0xffff : ck);
      flags[bi] &= ~BufferFlag.TX_UDP_CKSUM;
    }
    nexts[i] = NEXT_REWRITE;
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED) {
      rt.addTrace(bi, {
        src,
        dst,
        srcPort: ports & 0xffff,
        dstPort: ports >>> 16,
        length: ulen,
        checksum: v.getUint16(o + 6),
        note: `via ${ifs.names[ix]}`,
      } satisfies UdpTrace);
    }
  }
  rt.enqueue(vec, n);
  return n;
}
