/**
 * IPv4 helpers shared by the L3/L4 nodes: addresses (u32, host order), the header checksum
 * (unrolled 32-bit word sum over DataView, as the spike measured fastest), the one's complement
 * sum over a whole (possibly chained) packet for ICMP and UDP, and the per-buffer opaque words
 * the L3/L4 nodes and the layers above them share.
 */
import { BufferFlag, type BufferPool, OPAQUE_WORDS } from '../../graph/buffer-pool.ts';

export const IP4_HEADER_BYTES = 20;
export const IP_PROTO_ICMP = 1;
export const IP_PROTO_TCP = 6;
export const IP_PROTO_UDP = 17;
/** The 16-bit flags + fragment offset field (offset from the IPv4 header). */
export const IP4_FRAG = 6;
export const IP4_FLAG_DF = 0x4000;
export const IP4_FLAG_MF = 0x2000;
export const IP4_FRAG_OFFSET_MASK = 0x1fff;
export const IP4_DEFAULT_TTL = 64;

/**
 * Opaque words of a buffer (`pool.opaque[bi * OPAQUE_WORDS + w]`) used by the IPv4/UDP nodes.
 * The same layout serves both directions, so a received datagram sent back as it is goes back
 * to its sender (that is all the UDP echo service does):
 *
 *   REMOTE  the peer's address: rx = IPv4 source, tx = IPv4 destination
 *   LOCAL   our address: rx = IPv4 destination, tx = IPv4 source (0 = the tx interface's)
 *   PORTS   UDP ports: (remote port << 16) | local port
 *   L4      bits 0..7 the IP protocol; bits 8..15 the TOS byte: rx = the received one (udp4-input
 *           sets it; the ECN field is its low 2 bits), tx = the one ip4-rewrite writes (0 unless
 *           a producer sets it: trp-output marks ECT(0) there, udp4-encap passes on only the
 *           ECT(0) bit so an echoed datagram never carries a CE on); bits 16..31 an interface
 *           index: rx = where it came in, tx = where to send it (0 = by route; udp4-encap fills
 *           it in from its route lookup)
 *
 * Words FIRST_FREE.. (4..7) belong to the layers above UDP (QP index, PSN...). A producer of
 * datagrams sets all four words (the pool does not clear them): `setUdpDestination` does.
 */
export const Ip4Opaque = {
  REMOTE: 0,
  LOCAL: 1,
  PORTS: 2,
  L4: 3,
  FIRST_FREE: 4,
} as const;

/** ECN codepoints (RFC 3168), the low 2 bits of the TOS byte. */
export const Ecn = { NOT_ECT: 0, ECT1: 1, ECT0: 2, CE: 3 } as const;
/** The ECT(0) codepoint where the `Ip4Opaque.L4` word holds the TOS byte (bits 8..15). */
export const L4_TOS_ECT0 = Ecn.ECT0 << 8;
export { OPAQUE_WORDS };

/** Fold a sum of 16- or 32-bit big-endian words (any non-negative integer < 2^53) to 16 bits. */
export function foldSum(s: number): number {
  // 2^32 = 1 in one's complement arithmetic mod 0xffff: the part above 32 bits adds as is.
  const lo = s >>> 0;
  // (s - lo) * 2^-32 is exact (a power of two) and cheaper than a division.
  let x = (lo >>> 16) + (lo & 0xffff) + (s - lo) * 2.3283064365386963e-10;
  x = (x >>> 16) + (x & 0xffff);
  return (x >>> 16) + (x & 0xffff);
}

/**
 * One's complement sum (folded to 16 bits) of the 20-byte IPv4 header at `o`: five 32-bit
 * loads, unrolled. A valid header sums to 0xffff; for a new header, write `~sum & 0xffff` with
 * the checksum field zero.
 */
export function ip4HeaderSum20(v: DataView, o: number): number {
  return foldSum(v.getUint32(o) + v.getUint32(o + 4) + v.getUint32(o + 8) + v.getUint32(o + 12) + v.getUint32(o + 16));
}

/** Same for a header with options (`bytes` a multiple of 4). */
export function ip4HeaderSum(v: DataView, o: number, bytes: number): number {
  let s = 0;
  for (let i = 0; i < bytes; i += 4) s += v.getUint32(o + i);
  return foldSum(s);
}

/** Write the checksum of the 20-byte header at `o` (its checksum field is overwritten). */
export function ip4SetChecksum20(v: DataView, o: number): void {
  v.setUint16(o + 10, 0);
  v.setUint16(o + 10, ~ip4HeaderSum20(v, o) & 0xffff);
}

/**
 * One's complement sum (folded) of `len` bytes at `o`, taking byte `o` as the high byte of a
 * 16-bit word. 32-bit loads for the bulk; an odd last byte is padded with a zero low byte.
 */
export function rangeSum(v: DataView, u8: Uint8Array, o: number, len: number): number {
  let s = 0;
  const end = o + len;
  let i = o;
  // Four words per step: keeps the running sum far below 2^53 and the loop short.
  for (; i + 16 <= end; i += 16) s += v.getUint32(i) + v.getUint32(i + 4) + v.getUint32(i + 8) + v.getUint32(i + 12);
  for (; i + 4 <= end; i += 4) s += v.getUint32(i);
  if (i + 2 <= end) {
    s += v.getUint16(i);
    i += 2;
  }
  if (i < end) s += u8[i] << 8;
  return foldSum(s);
}

/**
 * One's complement sum (folded) of a whole packet from its current offset, every segment of
 * its chain. A segment that starts on an odd byte of the packet has its sum byte-swapped
 * (RFC 1071: the sum is byte-order independent).
 */
export function packetSum(pool: BufferPool, bi: number): number {
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    flags = pool.flags,
    next = pool.next;
  let sum = 0;
  let odd = false;
  for (;;) {
    const l = length[bi];
    // An external segment (BufferFlag.EXT_DATA) is summed where its bytes are.
    let s =
      flags[bi] & BufferFlag.EXT_DATA
        ? rangeSum(pool.ext.view[pool.extId[bi]] as DataView, pool.ext.mem[pool.extId[bi]] as Uint8Array, offset[bi], l)
        : rangeSum(v, u8, offset[bi], l);
    if (odd) s = ((s & 0xff) << 8) | (s >>> 8);
    sum += s;
    if (l & 1) odd = !odd;
    if (!(flags[bi] & BufferFlag.NEXT_PRESENT)) break;
    bi = next[bi];
  }
  return foldSum(sum);
}

/** Sum of the UDP/TCP pseudo-header (source, destination, protocol, L4 length). */
export function pseudoHeaderSum(src: number, dst: number, proto: number, l4Length: number): number {
  return (src >>> 16) + (src & 0xffff) + (dst >>> 16) + (dst & 0xffff) + proto + l4Length;
}
