/**
 * The wire format of nodes/rdma/PROTOCOL.md: the 10-byte TRP header, the DDP/RDMAP headers of RFC 5041 /
 * RFC 5040 / RFC 7306, the Terminate error codes, and PSN serial arithmetic (RFC 1982). Offsets
 * are relative to the start of the TRP header or of the DDP header; every field big-endian.
 */

export const TRP_HEADER_BYTES = 10;
/** TRP header fields (offsets from its start): PSN, cumulative ACK, opcode (high nibble of 16 bits). */
export const TRP_PSN = 0;
export const TRP_ACK = 4;
export const TRP_OPCODE = 8;
export const TRP_OP_SHIFT = 12;
/** CM messages (REQ, ACCEPT, REJECT) after the TRP header: private-data length, IRD, ORD, data. */
export const CM_PD_LEN = 10;
export const CM_IRD = 12;
export const CM_ORD = 14;
export const CM_PRIVATE_DATA = 16;
/** TRP opcodes (the high nibble of the 16-bit opcode field). */
/** PROBE and PROBE_ACK are rdma-graph's (PROTOCOL.md section 5): a timeout's question and its answer. */
export const TrpOp = {
  DATA: 0,
  REQ: 1,
  ACCEPT: 2,
  REJECT: 3,
  FIN: 4,
  SACK: 5,
  DATAGRAM: 6,
  PROBE: 7,
  PROBE_ACK: 8,
  SIDR_REQ: 9,
  SIDR_REP: 10,
} as const;
export const TRP_OP_NAMES = [
  'DATA',
  'REQ',
  'ACCEPT',
  'REJECT',
  'FIN',
  'SACK',
  'DATAGRAM',
  'PROBE',
  'PROBE_ACK',
  'SIDR_REQ',
  'SIDR_REP',
] as const;

/**
 * A datagram to a UD QP (PROTOCOL.md section 9): the TRP header's layout with opcode DATAGRAM,
 * the Q_Key where the PSN is, the immediate where the ACK is, flags in the low 12 bits; the
 * message follows. No sequence, no acknowledgement, no retransmission.
 */
export const DG_QKEY = 0;
export const DG_IMM = 4;
export const DG_FLAGS_MASK = 0x0fff;
export const DgFlag = { IMM: 0x001, SOLICITED: 0x002 } as const;
/** The 40 bytes in front of a UD receive: RoCE v2's GRH area, the IPv4 header in its last 20. */
export const GRH_BYTES = 40;

/**
 * The largest UD message on a link of IP MTU `mtu`: the largest InfiniBand MTU (256..4096) the
 * room after the IPv4, UDP and TRP headers holds, the port's active_mtu (dataplane/rdma-devices.ts
 * computes it from the same room). A datagram longer than a buffer is a chain of them.
 */
export function udMessageLimit(mtu: number): number {
  const room = mtu - 20 - 8 - TRP_HEADER_BYTES;
  let m = 256;
  while (m < 4096 && m * 2 <= room) m *= 2;
  return m;
}

export const DDP_TAGGED_BYTES = 14;
export const DDP_UNTAGGED_BYTES = 18;
/** DDP control byte: T (tagged), L (last), DV = 1. */
export const DDP_T = 0x80;
export const DDP_L = 0x40;
export const DDP_VERSION = 1;
/** RDMAP control byte: RV = 1 in the top two bits, then the opcode in the low nibble. */
export const RDMAP_VERSION = 1;
export const RDMAP_CTL = 0x40;

export const RdmapOp = {
  WRITE: 0,
  READ_REQUEST: 1,
  READ_RESPONSE: 2,
  SEND: 3,
  SEND_INV: 4,
  SEND_SE: 5,
  SEND_SE_INV: 6,
  TERMINATE: 7,
  IMMEDIATE: 8,
  IMMEDIATE_SE: 9,
  ATOMIC_REQUEST: 10,
  ATOMIC_RESPONSE: 11,
  /** rdma-graph's extension (PROTOCOL.md section 4): a Send carrying a 32-bit immediate in U_INV_STAG. */
  SEND_IMM: 12,
  SEND_SE_IMM: 13,
} as const;
export const RDMAP_OP_NAMES = [
  'Write',
  'Read Request',
  'Read Response',
  'Send',
  'Send with Invalidate',
  'Send with SE',
  'Send with SE and Invalidate',
  'Terminate',
  'Immediate Data',
  'Immediate Data with SE',
  'Atomic Request',
  'Atomic Response',
  'Send with Immediate',
  'Send with SE and Immediate',
] as const;

/** Untagged queue numbers. */
export const Qn = { SEND: 0, READ: 1, TERMINATE: 2, ATOMIC_RESPONSE: 3 } as const;

/** DDP/RDMAP control bytes (offsets from the DDP header): DDP's T|L|DV, then RDMAP's RV|opcode. */
export const DDP_CTL = 0;
export const RDMAP_CTL_BYTE = 1;
/** Untagged header fields (offsets from the DDP header). */
export const U_INV_STAG = 2;
export const U_QN = 6;
export const U_MSN = 10;
export const U_MO = 14;
/** Tagged header fields (the 64-bit tagged offset: high word at T_TO, low word at T_TO + 4). */
export const T_STAG = 2;
export const T_TO = 6;
/** Read Request body (after the untagged header): sink STag, sink TO (64), size, source STag, source TO (64). */
export const RR_SINK_STAG = 0;
export const RR_SINK_TO = 4;
export const RR_SIZE = 12;
export const RR_SRC_STAG = 16;
export const RR_SRC_TO = 20;
/** Immediate Data body: 4 reserved bytes, then the 32-bit immediate. */
export const IMM_DATA = 4;
/** Atomic Request body (RFC 7306): AOpCode, request id, remote STag, remote TO, then add-or-swap data and mask, compare data and mask (64 bits each). */
export const AR_OPCODE = 0;
export const AR_REQ_ID = 4;
export const AR_STAG = 8;
export const AR_TO = 12;
export const AR_SWAP = 20;
export const AR_SWAP_MASK = 28;
export const AR_COMPARE = 36;
export const AR_COMPARE_MASK = 44;
/** Atomic Response body: request id, original value (64). */
export const ARESP_REQ_ID = 0;
export const ARESP_ORIG = 4;

/** Bodies after the untagged header. */
export const READ_REQUEST_BYTES = 28;
export const ATOMIC_REQUEST_BYTES = 52;
export const ATOMIC_RESPONSE_BYTES = 12;
export const IMMEDIATE_BYTES = 8;
export const TERMINATE_CTL_BYTES = 4;
/** Atomic Request AOpCodes (RFC 7306). */
export const AtomicOp = { FETCH_ADD: 0, SWAP: 1, CMP_SWAP: 2 } as const;

/** Terminate hdrct bits (RFC 5040): segment length valid, DDP header included, RDMAP header included. */
export const HDRCT_M = 0x80;
export const HDRCT_D = 0x40;
export const HDRCT_R = 0x20;

/** Terminate error codes: layer << 12 | etype << 8 | code. */
export const TermCode = {
  RDMAP_INVALID_STAG: 0x0100,
  RDMAP_BOUNDS: 0x0101,
  RDMAP_ACCESS: 0x0102,
  /** Send with Invalidate naming an STag not registered as remotely invalidatable. */
  RDMAP_CANNOT_INVALIDATE: 0x0109,
  RDMAP_VERSION: 0x0205,
  RDMAP_UNEXPECTED_OPCODE: 0x0206,
  RDMAP_CATASTROPHIC: 0x0207,
  DDP_T_INVALID_STAG: 0x1100,
  DDP_T_BOUNDS: 0x1101,
  DDP_T_VERSION: 0x1104,
  DDP_U_INVALID_QN: 0x1201,
  DDP_U_NO_BUFFER: 0x1202,
  DDP_U_INVALID_MSN: 0x1203,
  DDP_U_INVALID_MO: 0x1204,
  DDP_U_TOO_LONG: 0x1205,
  DDP_U_VERSION: 0x1206,
} as const;

/** Layer, error type and code names of RFC 5040 section 7 (RDMAP) and RFC 5041 section 7 (DDP). */
const TERM_LAYERS: Record<
  number,
  { name: string; etypes: Record<number, { name: string; codes: Record<number, string> }> }
> = {
  0: {
    name: 'RDMAP',
    etypes: {
      0: { name: 'local catastrophic error', codes: {} },
      1: {
        name: 'remote protection error',
        codes: {
          0x00: 'invalid STag',
          0x01: 'base or bounds violation',
          0x02: 'access rights violation',
          0x03: 'STag not associated with the RDMAP stream',
          0x04: 'tagged offset wrap',
          0x09: 'STag cannot be invalidated',
          0xff: 'unspecified',
        },
      },
      2: {
        name: 'remote operation error',
        codes: {
          0x05: 'invalid RDMAP version',
          0x06: 'unexpected opcode',
          0x07: 'catastrophic error, local to the RDMAP stream',
          0x08: 'catastrophic error, global',
          0x09: 'STag cannot be invalidated',
          0xff: 'unspecified',
        },
      },
    },
  },
  1: {
    name: 'DDP',
    etypes: {
      0: { name: 'local catastrophic error', codes: {} },
      1: {
        name: 'tagged buffer error',
        codes: {
          0x00: 'invalid STag',
          0x01: 'base or bounds violation',
          0x02: 'STag not associated with the DDP stream',
          0x03: 'tagged offset wrap',
          0x04: 'invalid DDP version',
        },
      },
      2: {
        name: 'untagged buffer error',
        codes: {
          0x01: 'invalid queue number',
          0x02: 'no receive buffer posted',
          0x03: 'MSN out of range',
          0x04: 'invalid message offset',
          0x05: 'message too long for the receive buffer',
          0x06: 'invalid DDP version',
        },
      },
    },
  },
  2: { name: 'LLP', etypes: {} },
};

/**
 * A Terminate code in words, e.g. 0x0100 -> "remote protection error: invalid STag (0x0100)";
 * codes the RFCs do not name keep what can be named and the hex.
 */
export function termName(code: number): string {
  const hex = `0x${(code & 0xffff).toString(16).padStart(4, '0')}`;
  const layer = TERM_LAYERS[(code >>> 12) & 0xf];
  const etype = layer?.etypes[(code >>> 8) & 0xf];
  if (etype === undefined) return `${layer ? `${layer.name} ` : ''}error (${hex})`;
  const what = etype.codes[code & 0xff];
  const layerName = layer.name === 'DDP' ? 'DDP ' : '';
  return `${layerName}${etype.name}${what ? `: ${what}` : ''} (${hex})`;
}

/**
 * PSNs and MSNs are 32-bit serial numbers (RFC 1982): the nodes compare them inline as
 * `((a - b) | 0) < 0` (a before b), which stays monomorphic and allocation-free.
 */

/** Maximum DDP payload per segment for an interface MTU (IPv4 20 + UDP 8 + TRP 10 + header). */
export function segmentPayload(mtu: number, tagged: boolean): number {
  return mtu - 20 - 8 - TRP_HEADER_BYTES - (tagged ? DDP_TAGGED_BYTES : DDP_UNTAGGED_BYTES);
}

/** CM (REQ/ACCEPT/REJECT) body after the TRP header: pdlen(2) ird(2) ord(2) + private data. */
export const CM_PARAMS_BYTES = 6;
export const CM_MAX_PRIVATE_DATA = 512;

/**
 * Why a REJECT was sent, in its CM_IRD field (IRD means nothing in a REJECT; CM_ORD is 0).
 * A sender that predates the reasons sends 0, which reads as REFUSED.
 */
export const CmRejectReason = {
  /** The listener (its accept callback, or the program) refused the request. */
  REFUSED: 0,
  /** Nobody listens on the port the REQ was sent to (TCP's RST, IB CM's invalid service ID). */
  NO_LISTENER: 1,
  /** The listener has its backlog of requests not yet answered or confirmed. */
  BACKLOG_FULL: 2,
  /** The REQ's IRD or ORD is above what we serve. */
  PARAMETERS: 3,
} as const;
/**
 * A SIDR_REP's status, in its CM_IRD field (PROTOCOL.md section 6.1): InfiniBand's SIDR REP
 * status values, which librdmacm programs see as an UNREACHABLE event's status.
 */
export const SidrStatus = {
  SUCCESS: 0,
  /** Nobody listens for datagram requests on the port (IB_SIDR_UNSUPPORTED). */
  NO_LISTENER: 1,
  /** The listener (the program) refused it, or holds too many requests (IB_SIDR_REJECT). */
  REJECTED: 2,
} as const;

export const CM_REJECT_REASON_NAMES = [
  'refused by the listener',
  'no listener on the port',
  "listener's backlog full",
  'IRD/ORD out of range',
];
