/**
 * ARP (RFC 826) for Ethernet/IPv4: the packet layout, building requests, and the error
 * counters of `arp-input` (shared with the neighbor table, whose timers run on that node).
 *
 *   0 htype(2)=1  2 ptype(2)=0x0800  4 hlen(1)=6  5 plen(1)=4  6 op(2)
 *   8 sha(6)  14 spa(4)  18 tha(6)  24 tpa(4)     (28 bytes)
 */
import { type BufferPool, INVALID_INDEX, errorTable } from '../../graph/index.ts';
import { BROADCAST_HI, BROADCAST_LO, ETH_HEADER_BYTES, ETHERTYPE_ARP, ETHERTYPE_IP4 } from './ethernet.ts';

export const ARP_BYTES = 28;
export const ARP_OP_REQUEST = 1;
export const ARP_OP_REPLY = 2;
export const ARP_HTYPE_ETHERNET = 1;
export const ARP_SHA = 8;
export const ARP_SPA = 14;
export const ARP_THA = 18;
export const ARP_TPA = 24;
/** htype, ptype, hlen, plen of Ethernet/IPv4 ARP as one big-endian u32 + u16. */
export const ARP_ETH_IP4_HEAD = ((ARP_HTYPE_ETHERNET << 16) | ETHERTYPE_IP4) >>> 0;
export const ARP_ETH_IP4_LENS = (6 << 8) | 4;

/** arp-input's error counters (the neighbor table counts on them too). */
const ARP_ERROR_TABLE = errorTable({
  TRUNCATED: { name: 'truncated', description: 'ARP packet truncated', severity: 'error' },
  BAD_FORMAT: { name: 'bad_format', description: 'ARP not Ethernet/IPv4', severity: 'warn' },
  BAD_OPCODE: { name: 'bad_opcode', description: 'ARP unknown opcode', severity: 'warn' },
  BAD_SENDER: { name: 'bad_sender', description: 'ARP sender MAC is multicast', severity: 'error' },
  CONFLICT: { name: 'conflict', description: 'ARP our address from another MAC', severity: 'warn' },
  REPLIES_SENT: { name: 'replies_sent', description: 'ARP replies sent', severity: 'info' },
  REPLY_RECEIVED: { name: 'reply_received', description: 'ARP replies received', severity: 'info' },
  NOT_FOR_US: { name: 'not_for_us', description: 'ARP for another address', severity: 'info' },
  LEARNED: { name: 'learned', description: 'neighbors learned', severity: 'info' },
  STATIC_KEPT: { name: 'static_kept', description: 'ARP ignored: static neighbor', severity: 'warn' },
  REQUESTS_SENT: { name: 'requests_sent', description: 'ARP requests sent', severity: 'info' },
  GRATUITOUS_SENT: { name: 'gratuitous_sent', description: 'gratuitous ARPs sent', severity: 'info' },
  RESOLUTION_FAILED: { name: 'resolution_failed', description: 'held packet dropped: no ARP reply', severity: 'error' },
  EVICTED_HELD: { name: 'evicted_held', description: 'held packet dropped: entry removed', severity: 'error' },
  AGED: { name: 'aged', description: 'neighbors aged out', severity: 'info' },
  EVICTED: { name: 'evicted', description: 'neighbors evicted (table full)', severity: 'warn' },
  NO_BUFFER: { name: 'no_buffer', description: 'no buffer for an ARP request', severity: 'error' },
});
export const ArpError = ARP_ERROR_TABLE.code;
export const ARP_ERRORS = ARP_ERROR_TABLE.list;

/**
 * A new buffer holding an Ethernet broadcast ARP request from interface MAC (hi, lo) and
 * sender address `spa` for `tpa` (a gratuitous ARP when spa === tpa). INVALID_INDEX when the
 * pool is empty.
 */
export function buildArpRequest(pool: BufferPool, srcHi: number, srcLo: number, spa: number, tpa: number): number {
  const bi = pool.allocOne();
  if (bi === INVALID_INDEX) return bi;
  const v = pool.view,
    o = pool.offset[bi];
  v.setUint32(o, BROADCAST_HI);
  v.setUint16(o + 4, BROADCAST_LO);
  v.setUint32(o + 6, srcHi);
  v.setUint16(o + 10, srcLo);
  v.setUint16(o + 12, ETHERTYPE_ARP);
  const a = o + ETH_HEADER_BYTES;
  v.setUint32(a, ARP_ETH_IP4_HEAD);
  v.setUint16(a + 4, ARP_ETH_IP4_LENS);
  v.setUint16(a + 6, ARP_OP_REQUEST);
  v.setUint32(a + ARP_SHA, srcHi);
  v.setUint16(a + ARP_SHA + 4, srcLo);
  v.setUint32(a + ARP_SPA, spa);
  v.setUint32(a + ARP_THA, 0);
  v.setUint16(a + ARP_THA + 4, 0);
  v.setUint32(a + ARP_TPA, tpa);
  pool.length[bi] = ETH_HEADER_BYTES + ARP_BYTES;
  return bi;
}
