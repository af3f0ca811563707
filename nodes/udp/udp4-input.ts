/**
 * udp4-input: UDP for our addresses (ip4-input sends it only local unicast, data at the UDP
 * header, the 20-byte IPv4 header just before).
 *
 * Checks the UDP length against the IP payload (a shorter UDP length trims the packet, a longer
 * one is an error) and the checksum over the pseudo-header (0 = the sender sent none: accepted
 * and counted; skipped when the driver set L4_CKSUM_OK), then demultiplexes by destination
 * (address, port) to whatever bound it (see udp-ports.ts). The bound node gets the data at the
 * UDP payload and the `Ip4Opaque` words filled in.
 *
 * A datagram to a port nobody bound is counted ("no listener") and dropped, or handed to the
 * node `UdpApi.punt` named (the RDMA connection manager, which answers a REQ with REJECT); no
 * ICMP port unreachable is sent (no reflection or flood to rate-limit; the kernel's default
 * rate-limited reply would be the optional extra).
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
import { foldSum, IP4_HEADER_BYTES, Ip4Opaque, IP_PROTO_UDP, packetSum, pseudoHeaderSum } from '../ip4/ip4.ts';
import { formatIp4 } from '../net/address.ts';
import type { UdpApi } from './udp-ports.ts';

export const UDP4_INPUT = 'udp4-input';
export const UDP_HEADER_BYTES = 8;
/** Next nodes a packet left partly in a memif peer's memory goes to as it is. */
const PEER_OK = NodeFlag.PEER_DATA_OK | NodeFlag.IS_DROP;

const NEXT = nextTable({ DROP: 'error-drop' });
const NEXT_DROP = NEXT.index.DROP;

const ERROR_TABLE = errorTable({
  TRUNCATED: { name: 'truncated', description: 'UDP header truncated', severity: 'error' },
  BAD_LENGTH: { name: 'bad_length', description: 'UDP length exceeds IP payload', severity: 'error' },
  BAD_CHECKSUM: { name: 'bad_checksum', description: 'bad UDP checksum', severity: 'error' },
  NO_LISTENER: { name: 'no_listener', description: 'no listener on UDP port', severity: 'warn' },
  NO_CHECKSUM: { name: 'no_checksum', description: 'UDP without checksum (accepted)', severity: 'info' },
});
export const UdpInputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export interface UdpTrace {
  src: number;
  dst: number;
  srcPort: number;
  dstPort: number;
  length: number;
  checksum: number;
  note: string;
}

/** `UDP: 10.0.0.1:1234 -> 10.0.0.2:7 length 36 checksum 0x1a2b` and a note. */
export function formatUdpTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as UdpTrace;
  return (
    `UDP: ${formatIp4(t.src)}:${t.srcPort} -> ${formatIp4(t.dst)}:${t.dstPort} length ${t.length} checksum 0x${t.checksum.toString(16).padStart(4, '0')}` +
    (t.note ? `\n  ${t.note}` : '')
  );
}

export function registerUdp4Input(graph: Graph, api: UdpApi): NodeRuntime {
  return graph.register({
    name: UDP4_INPUT,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: api,
    fn: udp4Input,
    formatTrace: formatUdpTrace,
  });
}

function udp4Input(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const api = rt.runtimeData as UdpApi;
  const pool = rt.graph.pool;
  const v = pool.view,
    offset = pool.offset,
    length = pool.length,
    flags = pool.flags,
    rxIf = pool.rxIf,
    error = pool.error,
    opaque = pool.opaque;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  let noCksum = 0,
    punted = 0;
  const puntArc = api.unboundArc;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = offset[bi];
    const fl = flags[bi];
    const len = fl & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi];
    const ip = o - IP4_HEADER_BYTES;
    let err = -1;
    let next = NEXT_DROP;
    if (len < UDP_HEADER_BYTES || length[bi] < UDP_HEADER_BYTES) err = UdpInputError.TRUNCATED;
    else {
      const ulen = v.getUint16(o + 4);
      const ck = v.getUint16(o + 6);
      const src = v.getUint32(ip + 12),
        dst = v.getUint32(ip + 16);
      if (ulen < UDP_HEADER_BYTES || ulen > len) err = UdpInputError.BAD_LENGTH;
      else {
        if (ulen < len) pool.trim(bi, ulen);
        if (ck === 0) noCksum++;
        else if (
          !(fl & BufferFlag.L4_CKSUM_OK) &&
          foldSum(pseudoHeaderSum(src, dst, IP_PROTO_UDP, ulen) + packetSum(pool, bi)) !== 0xffff
        ) {
          err = UdpInputError.BAD_CHECKSUM;
        }
        if (err < 0) {
          const sport = v.getUint16(o),
            dport = v.getUint16(o + 2);
          let arc = api.lookup(dst, dport);
          if (arc < 0 && puntArc >= 0) {
            arc = puntArc;
            punted++;
          }
          if (arc < 0) err = UdpInputError.NO_LISTENER;
          else {
            next = arc;
            // Bytes a memif server left in its peer's memory (graph/peer-windows.ts): in the pool
            // for a bound node that does not read them there (NodeFlag.PEER_DATA_OK).
            if (fl & BufferFlag.PEER_CHAIN && !(rt.nextNodes[arc].flags & PEER_OK)) pool.settlePeer(bi);
            const w = bi * OPAQUE_WORDS;
            opaque[w + Ip4Opaque.REMOTE] = src;
            opaque[w + Ip4Opaque.LOCAL] = dst;
            opaque[w + Ip4Opaque.PORTS] = ((sport << 16) | dport) >>> 0;
            // The TOS byte (ECN: trp-input counts CE marks) from the IPv4 header ip4-input left before the data.
            opaque[w + Ip4Opaque.L4] = (IP_PROTO_UDP | (v.getUint8(ip + 1) << 8) | (rxIf[bi] << 16)) >>> 0;
          }
        }
      }
    }
    if (err >= 0) error[bi] = eBase + err;
    nexts[i] = next;
    if (rt.traceOn && fl & BufferFlag.TRACED) {
      if (err === UdpInputError.TRUNCATED) rt.addTrace(bi, `UDP header truncated: ${len} bytes`);
      else {
        rt.addTrace(bi, {
          src: v.getUint32(ip + 12),
          dst: v.getUint32(ip + 16),
          srcPort: v.getUint16(o),
          dstPort: v.getUint16(o + 2),
          length: v.getUint16(o + 4),
          checksum: v.getUint16(o + 6),
          note: err >= 0 ? ERRORS[err].description : `next ${rt.nextNames[next]}`,
        } satisfies UdpTrace);
      }
    }
    if (err < 0) pool.advance(bi, UDP_HEADER_BYTES);
  }
  if (noCksum > 0) rt.countError(UdpInputError.NO_CHECKSUM, noCksum);
  if (punted > 0) rt.countError(UdpInputError.NO_LISTENER, punted);
  rt.enqueue(vec, n);
  return n;
}
