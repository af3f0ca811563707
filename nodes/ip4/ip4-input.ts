/**
 * ip4-input: validates IPv4 for a host and hands local traffic to its protocol.
 *
 * Checks, in order: a whole header in the first segment, version 4, IHL >= 5, total length
 * between the header length and the frame (Ethernet padding past the total length is trimmed),
 * the header checksum (unrolled 32-bit word sum; skipped when the driver set IP4_CKSUM_OK),
 * then what a host without reassembly or option processing refuses: options, fragments (each
 * with its own counter), TTL 0 (a host may accept TTL 1, it does not forward; TTL 0 was never
 * valid to send), a multicast/broadcast/loopback source. Options are taken on IGMP only (its
 * Router Alert), whose messages to all systems (224.0.0.1) and to joined groups go to
 * igmp4-input. The destination must be one of our
 * addresses, on any interface (the weak host model, as Linux), or a multicast group the
 * receiving interface joined (net/ip4-groups.ts); other broadcasts and multicasts are counted
 * apart from unicast for someone else (we are a host, not a router).
 *
 * Local packets go on with the data start at the L4 header; the IPv4 header (always 20 bytes:
 * options were refused) sits just before it.
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, errorTable, nextTable } from '../../graph/index.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import {
  IP4_FLAG_MF,
  IP4_FRAG,
  IP4_FRAG_OFFSET_MASK,
  IP4_HEADER_BYTES,
  IP_PROTO_ICMP,
  IP_PROTO_TCP,
  IP_PROTO_UDP,
  ip4HeaderSum,
  ip4HeaderSum20,
} from './ip4.ts';
import { formatIp4, isIp4Multicast } from '../net/address.ts';
import { ALL_SYSTEMS, IP_PROTO_IGMP } from './igmp4-input.ts';

export const IP4_INPUT = 'ip4-input';

const NEXT = nextTable({ DROP: 'error-drop', ICMP: 'icmp4-echo', UDP: 'udp4-input', IGMP: 'igmp4-input' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_ICMP = NEXT.index.ICMP,
  NEXT_UDP = NEXT.index.UDP,
  NEXT_IGMP = NEXT.index.IGMP;

const ERROR_TABLE = errorTable({
  TOO_SHORT: { name: 'too_short', description: 'shorter than an IPv4 header', severity: 'error' },
  BAD_VERSION: { name: 'bad_version', description: 'IP version is not 4', severity: 'error' },
  BAD_IHL: { name: 'bad_ihl', description: 'IPv4 header length < 20', severity: 'error' },
  BAD_LENGTH: { name: 'bad_length', description: 'total length < header length', severity: 'error' },
  TRUNCATED: { name: 'truncated', description: 'total length exceeds frame', severity: 'error' },
  BAD_CHECKSUM: { name: 'bad_checksum', description: 'bad IPv4 header checksum', severity: 'error' },
  OPTIONS: { name: 'options', description: 'IPv4 options (not supported)', severity: 'warn' },
  FRAGMENT: { name: 'fragment', description: 'IPv4 fragment (no reassembly)', severity: 'warn' },
  TTL0: { name: 'ttl0', description: 'TTL 0', severity: 'error' },
  MARTIAN_SOURCE: { name: 'martian_source', description: 'source multicast/bcast/loopback', severity: 'error' },
  NOT_FOR_US: { name: 'not_for_us', description: 'not our address (host, no fwd)', severity: 'warn' },
  BROADCAST: { name: 'broadcast', description: 'broadcast/multicast destination', severity: 'info' },
  UNKNOWN_PROTOCOL: { name: 'unknown_protocol', description: 'unknown IP protocol', severity: 'warn' },
});
export const Ip4InputError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

export function ipProtoName(p: number): string {
  return p === IP_PROTO_UDP ? 'UDP' : p === IP_PROTO_ICMP ? 'ICMP' : p === IP_PROTO_TCP ? 'TCP' : `protocol ${p}`;
}

export interface Ip4HeaderTrace {
  src: number;
  dst: number;
  proto: number;
  tos: number;
  ttl: number;
  length: number;
  checksum: number;
  id: number;
  frag: number;
  note: string;
}

/** VPP's format_ip4_header, with a note (checksum status, where the packet went). */
export function formatIp4HeaderTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as Ip4HeaderTrace;
  const fl: string[] = [];
  if (t.frag & 0x4000) fl.push('DONT_FRAGMENT');
  if (t.frag & IP4_FLAG_MF) fl.push('MORE_FRAGMENTS');
  const off = t.frag & IP4_FRAG_OFFSET_MASK;
  return (
    `${ipProtoName(t.proto)}: ${formatIp4(t.src)} -> ${formatIp4(t.dst)}\n` +
    `  tos 0x${hex2(t.tos)}, ttl ${t.ttl}, length ${t.length}, checksum 0x${t.checksum.toString(16).padStart(4, '0')}\n` +
    `  fragment id 0x${t.id.toString(16).padStart(4, '0')}${off ? ` offset ${off * 8}` : ''}${fl.length ? `, flags ${fl.join(' ')}` : ''}` +
    (t.note ? `\n  ${t.note}` : '')
  );
}

function hex2(x: number): string {
  return x.toString(16).padStart(2, '0');
}

/** A trace record of the 20-byte header at `o`. */
export function ip4HeaderRecord(v: DataView, o: number, note: string): Ip4HeaderTrace {
  return {
    src: v.getUint32(o + 12),
    dst: v.getUint32(o + 16),
    proto: v.getUint8(o + 9),
    tos: v.getUint8(o + 1),
    ttl: v.getUint8(o + 8),
    length: v.getUint16(o + 2),
    checksum: v.getUint16(o + 10),
    id: v.getUint16(o + 4),
    frag: v.getUint16(o + 6),
    note,
  };
}

export function registerIp4Input(graph: Graph, ifs: InterfaceTable): NodeRuntime {
  return graph.register({
    name: IP4_INPUT,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: ifs,
    fn: ip4Input,
    formatTrace: formatIp4HeaderTrace,
  });
}

function ip4Input(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const ifs = rt.runtimeData as InterfaceTable;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    flags = pool.flags,
    rxIf = pool.rxIf,
    error = pool.error;
  const ifAddr = ifs.address;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = offset[bi];
    const len0 = length[bi];
    const fl = flags[bi];
    let err = -1;
    let next = NEXT_DROP;
    if (len0 < IP4_HEADER_BYTES) err = Ip4InputError.TOO_SHORT;
    else {
      const w0 = v.getUint32(o);
      const ihl = (w0 >>> 24) & 0xf;
      const tl = w0 & 0xffff;
      const hl = ihl << 2;
      const plen = fl & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : len0;
      if (w0 >>> 28 !== 4) err = Ip4InputError.BAD_VERSION;
      else if (ihl < 5) err = Ip4InputError.BAD_IHL;
      else if (tl < hl) err = Ip4InputError.BAD_LENGTH;
      else if (tl > plen) err = Ip4InputError.TRUNCATED;
      else if (hl > len0) err = Ip4InputError.TOO_SHORT;
      else if (
        !(fl & BufferFlag.IP4_CKSUM_OK) &&
        (hl === IP4_HEADER_BYTES ? ip4HeaderSum20(v, o) : ip4HeaderSum(v, o, hl)) !== 0xffff
      ) {
        err = Ip4InputError.BAD_CHECKSUM;
      } else if (hl !== IP4_HEADER_BYTES && u8[o + 9] !== IP_PROTO_IGMP) err = Ip4InputError.OPTIONS;
      else if (v.getUint16(o + IP4_FRAG) & (IP4_FLAG_MF | IP4_FRAG_OFFSET_MASK)) err = Ip4InputError.FRAGMENT;
      else if (u8[o + 8] === 0) err = Ip4InputError.TTL0;
      else {
        const src = v.getUint32(o + 12),
          dst = v.getUint32(o + 16);
        const ix = rxIf[bi];
        if (src >>> 28 >= 0xe || src >>> 24 === 127) err = Ip4InputError.MARTIAN_SOURCE;
        else if (
          dst === ifAddr[ix] ||
          ifs.localInterface(dst) !== 0 ||
          (isIp4Multicast(dst) && ifs.groups.member(ix, dst))
        ) {
          const proto = u8[o + 9];
          if (proto === IP_PROTO_UDP) next = NEXT_UDP;
          else if (proto === IP_PROTO_ICMP) next = NEXT_ICMP;
          else if (proto === IP_PROTO_IGMP) next = NEXT_IGMP;
          else err = Ip4InputError.UNKNOWN_PROTOCOL;
        } else if (dst === ALL_SYSTEMS && u8[o + 9] === IP_PROTO_IGMP) next = NEXT_IGMP;
        else if (isIp4Multicast(dst) || ifs.isBroadcast(ix, dst)) err = Ip4InputError.BROADCAST;
        else err = Ip4InputError.NOT_FOR_US;
      }
      if (err < 0) {
        if (tl < plen) pool.trim(bi, tl);
        pool.advance(bi, hl); // 20 but for IGMP (its Router Alert option)
      }
    }
    if (err >= 0) error[bi] = eBase + err;
    nexts[i] = next;
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED) {
      if (err === Ip4InputError.TOO_SHORT && len0 < IP4_HEADER_BYTES)
        rt.addTrace(bi, `${ERRORS[err].description}: ${len0} bytes`);
      else
        rt.addTrace(
          bi,
          ip4HeaderRecord(
            v,
            o,
            err >= 0
              ? ERRORS[err].description
              : `${fl & BufferFlag.IP4_CKSUM_OK ? 'checksum offloaded' : 'checksum ok'}, next ${NEXT.names[next]}`,
          ),
        );
    }
  }
  rt.enqueue(vec, n);
  return n;
}
