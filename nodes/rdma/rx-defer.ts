/**
 * The frames a memif server may receive with their payload left in the client's memory
 * (graph/peer-windows.ts): TRP DATA packets of at least MIN_BYTES (DDP segments: ddp-input places
 * a Write into its MR, and a Send or a Read Response into the work request's list, with ChainCopy,
 * which reads such bytes where they are; a segment that straddles two SG entries is copied in
 * first), in an unfragmented IPv4 header without options, with no UDP checksum (udp4-input would
 * read every byte to check one; two rdma-graph data planes over memif send none,
 * drivers/memif.ts `udpChecksum`). Everything else is copied whole, as before. The first
 * HEAD_BYTES of a frame are copied in any case: every header a node reads (from the Ethernet header
 * to the end of an Atomic Request, the longest, 122 bytes; a Terminate's, 120).
 */
import type { RxDeferPattern } from '../../graph/peer-windows.ts';
import { ETH_HEADER_BYTES, ETHERTYPE_IP4 } from '../ethernet/ethernet.ts';
import { IP4_FRAG, IP4_HEADER_BYTES, IP_PROTO_UDP } from '../ip4/ip4.ts';
import { TRP_OP_SHIFT, TRP_OPCODE, TrpOp } from './wire.ts';

const HEAD_BYTES = 128;
/** Shorter frames are copied whole: leaving a few hundred bytes in place saves less than it costs. */
const MIN_BYTES = 512;

const IP = ETH_HEADER_BYTES;
const UDP = IP + IP4_HEADER_BYTES;
const TRP = UDP + 8; // the UDP header's 8 bytes

/** (offset, mask, value) triples: core.RxWindows.setPattern's rules. */
const RULES = [
  [12, 0xff, ETHERTYPE_IP4 >> 8],
  [13, 0xff, ETHERTYPE_IP4 & 0xff],
  [IP, 0xff, 0x45], // version 4, 20-byte header
  [IP + IP4_FRAG, 0x3f, 0], // more fragments, fragment offset (high bits) ...
  [IP + IP4_FRAG + 1, 0xff, 0], // ... and low bits: 0
  [IP + 9, 0xff, IP_PROTO_UDP],
  [UDP + 6, 0xff, 0], // UDP checksum 0 (none)
  [UDP + 7, 0xff, 0],
  [TRP + TRP_OPCODE, 0xf0, (TrpOp.DATA << TRP_OP_SHIFT) >> 8],
];

export const RX_DEFER_PATTERN: RxDeferPattern = {
  headBytes: HEAD_BYTES,
  minBytes: MIN_BYTES,
  rules: Uint8Array.from(RULES.flat()),
};
