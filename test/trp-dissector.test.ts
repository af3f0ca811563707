// nodes/rdma/trp.lua with Wireshark's iwarp_ddp_rdmap behind it, checked against messages built
// here byte by byte: the nodes/rdma/PROTOCOL.md section 3 test vectors and an RFC-conformant message of
// every type (RFC 5040 RDMAP, RFC 5041 DDP, RFC 7306 atomics and immediate data), the TRP
// control packets, and malformed packets the decode must flag. Each is checked field by field
// and must carry no malformed marker and no expert warning or error unless stated.
// Needs tshark with Lua (Debian 12: tshark 4.0); without it each test skips (fails under CI=true).
// Run: npm test -- trp-dissector
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { blocks, README } from './readme-helpers.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hex } from './l2l4-helpers.ts';
import {
  decodeTrp,
  TRP_LUA,
  tsharkEnv,
  tsharkAvailable,
  writeUdpPcap,
  type DdpHeader,
  type SidrDecoded,
  type RdmapHeader,
  type TrpDecoded,
  type TrpExpert,
  type TrpHeader,
} from './helpers-tshark.ts';

/** Two QP ports (the peer's and ours): every datagram goes from one to the other. */
const PEER_QP = 49200,
  OUR_QP = 49201;

// ------------------------------------------------------------------ bytes

const be16 = (x: number) => [(x >>> 8) & 0xff, x & 0xff];
const be32 = (x: number) => [(x >>> 24) & 0xff, (x >>> 16) & 0xff, (x >>> 8) & 0xff, x & 0xff];
const be64 = (x: bigint) => [...be32(Number(x >> 32n)), ...be32(Number(x & 0xffffffffn))];
const fromHex = (s: string) => Array.from(Buffer.from(s.replace(/\s+/g, ''), 'hex'));
const ascii = (s: string) => Array.from(Buffer.from(s, 'latin1'));

const TRP = {
  DATA: 0,
  REQ: 1,
  ACCEPT: 2,
  REJECT: 3,
  FIN: 4,
  SACK: 5,
  PROBE: 7,
  PROBE_ACK: 8,
  SIDR_REQ: 9,
  SIDR_REP: 10,
} as const;
const OP = {
  WRITE: 0,
  READ_REQ: 1,
  READ_RESP: 2,
  SEND: 3,
  SEND_INV: 4,
  SEND_SE: 5,
  SEND_SE_INV: 6,
  TERMINATE: 7,
  IMM: 8,
  IMM_SE: 9,
  ATOMIC_REQ: 10,
  ATOMIC_RESP: 11,
  SEND_IMM: 12,
  SEND_SE_IMM: 13,
} as const;

function trpHeader(psn: number, ack: number, opcode: number, reserved = 0): number[] {
  return [...be32(psn), ...be32(ack), ...be16((opcode << 12) | reserved)];
}

interface Untagged {
  op: number;
  last?: boolean;
  /** Bytes 2..5: reserved (0) or the Invalidate STag. */
  ulp?: number;
  qn: number;
  msn: number;
  mo?: number;
}

function untagged(u: Untagged): number[] {
  return [
    (u.last === false ? 0 : 0x40) | 0x01,
    0x40 | u.op,
    ...be32(u.ulp ?? 0),
    ...be32(u.qn),
    ...be32(u.msn),
    ...be32(u.mo ?? 0),
  ];
}

interface Tagged {
  op: number;
  last: boolean;
  stag: number;
  to: bigint;
}

function tagged(t: Tagged): number[] {
  return [0x80 | (t.last ? 0x40 : 0) | 0x01, 0x40 | t.op, ...be32(t.stag), ...be64(t.to)];
}

// What Wireshark should show for the headers built above.
const trpWant = (psn: number, ack: number, opcode: number, extra: Partial<TrpHeader> = {}): TrpHeader => ({
  psn,
  ack,
  opcode,
  reserved: 0,
  // DATA and SACK carry the CE echo in the low 12 bits (PROTOCOL.md section 5).
  ...(opcode === TRP.DATA || opcode === TRP.SACK || opcode === TRP.PROBE || opcode === TRP.PROBE_ACK
    ? { ceEcho: 0 }
    : {}),
  pureAck: false,
  ...extra,
});
const untaggedWant = (u: Untagged): DdpHeader => ({
  tagged: false,
  last: u.last !== false,
  rsvd: 0,
  dv: 1,
  rsvdulp: hex([0x40 | u.op, ...be32(u.ulp ?? 0)]),
  qn: u.qn,
  msn: u.msn,
  mo: u.mo ?? 0,
});
const taggedWant = (t: Tagged): DdpHeader => ({ tagged: true, last: t.last, rsvd: 0, dv: 1, stag: t.stag, to: t.to });
const rdmapWant = (opcode: number, extra: Partial<RdmapHeader> = {}): RdmapHeader => ({
  version: 1,
  rsv: 0,
  opcode,
  ...extra,
});

// ------------------------------------------------------------------ the messages

interface Case {
  name: string;
  bytes: number[];
  /** Absent when the packet is too short for one. */
  trp?: TrpHeader;
  datagram?: { qkey: number; imm: number; flags: number; data: string };
  sidr?: SidrDecoded;
  ddp?: DdpHeader;
  rdmap?: RdmapHeader;
  /** What goes to Wireshark's "data" dissector (hex), if anything. */
  payload?: string;
  /** Experts this packet must carry (checked as a set: each given one present, no other). */
  experts?: Partial<TrpExpert>[];
  /** Must carry a malformed marker (a Wireshark exception, or an expert info of group Malformed). */
  malformed?: boolean;
  /** Why a case's decode is not what the RFC would have (printed, and shown in the test name). */
  note?: string;
}

const cases: Case[] = [];

/** A DDP segment after TRP: untagged or tagged header, then body. */
function data(
  name: string,
  psn: number,
  ack: number,
  h: Untagged | Tagged,
  body: number[],
  want: { rdmap: RdmapHeader; payload?: string; note?: string },
): void {
  const isTagged = 'stag' in h;
  cases.push({
    name,
    bytes: [...trpHeader(psn, ack, TRP.DATA), ...(isTagged ? tagged(h) : untagged(h)), ...body],
    trp: trpWant(psn, ack, TRP.DATA),
    ddp: isTagged ? taggedWant(h) : untaggedWant(h),
    ...want,
  });
}

// nodes/rdma/PROTOCOL.md section 3, verbatim (the test below checks the document still has them).
const PROTOCOL_VECTORS = [
  '00000007 00000003 0000 41 43 00000000 00000000 00000001 00000000 6869',
  '00000008 00000003 0000 81 40 00abcdef 0000000000001000 aa',
  '00000009 00000005 0000',
  '0000000c 0000000f 5000',
  '11111111 abcdef01 6003 7564',
  '00000009 00000005 0025',
  '00000009 00000005 7000',
  '00000005 00000009 8002',
];
cases.push({
  name: 'vector: SEND, last segment, PSN 7, ACK 3, MSN 1, MO 0, "hi"',
  bytes: fromHex(PROTOCOL_VECTORS[0]),
  trp: trpWant(7, 3, TRP.DATA),
  ddp: untaggedWant({ op: OP.SEND, qn: 0, msn: 1, mo: 0 }),
  rdmap: rdmapWant(OP.SEND, { reserved: '00000000' }),
  payload: '6869',
});
cases.push({
  name: 'vector: RDMA WRITE middle segment, PSN 8, STag 0x00ABCDEF, TO 0x1000, 0xaa',
  bytes: fromHex(PROTOCOL_VECTORS[1]),
  trp: trpWant(8, 3, TRP.DATA),
  ddp: taggedWant({ op: OP.WRITE, last: false, stag: 0x00abcdef, to: 0x1000n }),
  rdmap: rdmapWant(OP.WRITE),
  payload: 'aa',
});
cases.push({
  name: 'vector: pure ACK, next PSN 9, cumulative ack 5',
  bytes: fromHex(PROTOCOL_VECTORS[2]),
  trp: trpWant(9, 5, TRP.DATA, { pureAck: true }),
});
cases.push({
  name: 'vector: SACK of [12,15)',
  bytes: fromHex(PROTOCOL_VECTORS[3]),
  trp: trpWant(12, 15, TRP.SACK, { sack: '[12, 15)' }),
});
cases.push({
  name: 'vector: pure ACK echoing 37 CE-marked packets (no reserved-bits warning)',
  bytes: fromHex(PROTOCOL_VECTORS[5]),
  trp: trpWant(9, 5, TRP.DATA, { pureAck: true, ceEcho: 37 }),
});
cases.push({
  name: 'vector: PROBE (a timeout asks), next PSN 9, cumulative ACK 5',
  bytes: fromHex(PROTOCOL_VECTORS[6]),
  trp: trpWant(9, 5, TRP.PROBE),
});
cases.push({
  name: 'vector: PROBE_ACK (the answer), next PSN 5, cumulative ACK 9, 2 CE-marked packets echoed',
  bytes: fromHex(PROTOCOL_VECTORS[7]),
  trp: trpWant(5, 9, TRP.PROBE_ACK, { ceEcho: 2 }),
});
cases.push({
  name: 'SACK echoing 4095 CE-marked packets',
  bytes: trpHeader(12, 15, TRP.SACK, 0xfff),
  trp: trpWant(12, 15, TRP.SACK, { sack: '[12, 15)', ceEcho: 4095 }),
});

// Sends (QN 0). Wireshark shows bytes 2..5 as "Reserved" for Send and Send with SE, as the
// Invalidate STag for the two invalidating ones.
const hello = ascii('hello, world');
data('Send', 20, 4, { op: OP.SEND, qn: 0, msn: 2, mo: 0 }, hello, {
  rdmap: rdmapWant(OP.SEND, { reserved: '00000000' }),
  payload: hex(hello),
});
data(
  'Send, first of two segments (L clear, MSN 3)',
  21,
  4,
  { op: OP.SEND, last: false, qn: 0, msn: 3, mo: 0 },
  [1, 2, 3, 4],
  { rdmap: rdmapWant(OP.SEND, { reserved: '00000000' }), payload: '01020304' },
);
data('Send, second segment at MO 4', 22, 4, { op: OP.SEND, qn: 0, msn: 3, mo: 4 }, [5, 6], {
  rdmap: rdmapWant(OP.SEND, { reserved: '00000000' }),
  payload: '0506',
});
data('Send with Invalidate', 23, 4, { op: OP.SEND_INV, ulp: 0x12345678, qn: 0, msn: 4 }, [0xde, 0xad], {
  rdmap: rdmapWant(OP.SEND_INV, { invalidateStag: 0x12345678 }),
  payload: 'dead',
});
data('Send with SE', 24, 4, { op: OP.SEND_SE, qn: 0, msn: 5 }, [0xbe, 0xef], {
  rdmap: rdmapWant(OP.SEND_SE, { reserved: '00000000' }),
  payload: 'beef',
});
data('Send with SE and Invalidate', 25, 4, { op: OP.SEND_SE_INV, ulp: 0xfedcba98, qn: 0, msn: 6 }, [0x42], {
  rdmap: rdmapWant(OP.SEND_SE_INV, { invalidateStag: 0xfedcba98 }),
  payload: '42',
});

// RDMA Write and Read (tagged; Read Request untagged on QN 1 with the RFC's 28-byte body).
const wbody = Array.from({ length: 64 }, (_, i) => i);
data('RDMA Write, middle segment', 30, 4, { op: OP.WRITE, last: false, stag: 0x01020304, to: 0x7f0000001000n }, wbody, {
  rdmap: rdmapWant(OP.WRITE),
  payload: hex(wbody),
});
data(
  'RDMA Write, last segment (TO advanced by 64)',
  31,
  4,
  { op: OP.WRITE, last: true, stag: 0x01020304, to: 0x7f0000001040n },
  [0xff],
  { rdmap: rdmapWant(OP.WRITE), payload: 'ff' },
);
const rr = {
  sinkStag: 0x0000abcd,
  sinkTo: 0x0000_7fff_0000_2000n,
  size: 4096,
  srcStag: 0x00001234,
  srcTo: 0xffff_0000_0000_3000n,
};
const rrBody = [...be32(rr.sinkStag), ...be64(rr.sinkTo), ...be32(rr.size), ...be32(rr.srcStag), ...be64(rr.srcTo)];
const rrHeader: Untagged = { op: OP.READ_REQ, qn: 1, msn: 1 };
data('RDMA Read Request (28-byte RFC body)', 32, 4, rrHeader, rrBody, {
  rdmap: rdmapWant(OP.READ_REQ, { reserved: '00000000', readRequest: rr }),
});
data(
  'RDMA Read Response, last segment',
  33,
  4,
  { op: OP.READ_RESP, last: true, stag: rr.sinkStag, to: rr.sinkTo },
  [9, 8, 7],
  { rdmap: rdmapWant(OP.READ_RESP), payload: '090807' },
);

// Terminate (QN 2): control word layer(4) etype(4) code(8) hdrct(8) reserved(8).
const term = (code: number, hdrct: number) => [...be16(code), hdrct, 0];
{
  // DDP untagged "invalid MSN range" on the Read Request above: M|D|R, the DDP segment length,
  // its 18-byte untagged DDP header and its 28-byte Read Request header.
  const ddpH = untagged(rrHeader);
  data(
    'Terminate M|D|R: DDP untagged 0x1203, 18-byte DDP header, 28-byte Read Request header',
    34,
    4,
    { op: OP.TERMINATE, qn: 2, msn: 1 },
    [...term(0x1203, 0xe0), ...be16(ddpH.length + rrBody.length), ...ddpH, ...rrBody],
    {
      rdmap: rdmapWant(OP.TERMINATE, {
        reserved: '00000000',
        terminate: {
          layer: 1,
          etype: 2,
          errcode: 3,
          m: true,
          d: true,
          r: true,
          rsvd: 0,
          ddpSegLen: 46,
          ddpHeader: hex(ddpH),
          rdmaHeader: hex(rrBody),
        },
      }),
    },
  );
}
{
  // DDP tagged "invalid STag" on a Write segment: M|D, the segment length and its 14-byte header.
  const ddpH = tagged({ op: OP.WRITE, last: true, stag: 0x00000bad, to: 0x2000n });
  data(
    'Terminate M|D: DDP tagged 0x1100, 14-byte tagged DDP header',
    35,
    4,
    { op: OP.TERMINATE, qn: 2, msn: 2 },
    [...term(0x1100, 0xc0), ...be16(ddpH.length + 100), ...ddpH],
    {
      rdmap: rdmapWant(OP.TERMINATE, {
        reserved: '00000000',
        terminate: {
          layer: 1,
          etype: 1,
          errcode: 0,
          m: true,
          d: true,
          r: false,
          rsvd: 0,
          ddpSegLen: 114,
          ddpHeader: hex(ddpH),
        },
      }),
    },
  );
}
{
  // RDMAP access rights violation (0x0102) on a Write: Wireshark sizes the terminated DDP header
  // by the error type (1 = protection error: tagged, 14 bytes), which fits a tagged message.
  const ddpH = tagged({ op: OP.WRITE, last: false, stag: 0x00000c00, to: 0n });
  data(
    'Terminate M|D: RDMAP 0x0102 on a Write, 14-byte tagged DDP header',
    36,
    4,
    { op: OP.TERMINATE, qn: 2, msn: 3 },
    [...term(0x0102, 0xc0), ...be16(ddpH.length), ...ddpH],
    {
      rdmap: rdmapWant(OP.TERMINATE, {
        reserved: '00000000',
        terminate: {
          layer: 0,
          etype: 1,
          errcode: 2,
          m: true,
          d: true,
          r: false,
          rsvd: 0,
          ddpSegLen: 14,
          ddpHeader: hex(ddpH),
        },
      }),
    },
  );
}
{
  // RDMAP invalid STag (0x0100) on the Read Request above, M|D|R: Wireshark 4.0 takes error type
  // 1 to mean a tagged header, so it shows the first 14 of the 18 DDP header bytes and the
  // "RDMA header" 4 bytes early (the last 4 bytes go undissected). No marker, no expert info.
  const ddpH = untagged(rrHeader);
  data(
    'Terminate M|D|R: RDMAP 0x0100 on a Read Request',
    38,
    4,
    { op: OP.TERMINATE, qn: 2, msn: 5 },
    [...term(0x0100, 0xe0), ...be16(ddpH.length + rrBody.length), ...ddpH, ...rrBody],
    {
      rdmap: rdmapWant(OP.TERMINATE, {
        reserved: '00000000',
        terminate: {
          layer: 0,
          etype: 1,
          errcode: 0,
          m: true,
          d: true,
          r: true,
          rsvd: 0,
          ddpSegLen: 46,
          ddpHeader: hex(ddpH.slice(0, 14)),
          rdmaHeader: hex([...ddpH.slice(14), ...rrBody.slice(0, 24)]),
        },
      }),
      note: 'Wireshark 4.0 sizes the terminated DDP header by error type (1: tagged, 14 bytes), not by its T bit',
    },
  );
}
{
  // Terminate with no headers (hdrct 0): RDMAP catastrophic error 0x0207.
  data('Terminate, no headers: RDMAP 0x0207', 37, 4, { op: OP.TERMINATE, qn: 2, msn: 4 }, term(0x0207, 0x00), {
    rdmap: rdmapWant(OP.TERMINATE, {
      reserved: '00000000',
      terminate: { layer: 0, etype: 2, errcode: 7, m: false, d: false, r: false, rsvd: 0 },
    }),
  });
}

// Immediate Data (RFC 7306): Wireshark 4.0 has no names or fields for opcodes 8 and 9. It shows
// "OpCode: Unknown (0x8)" and the DDP header, and leaves the 8 bytes of immediate data
// undissected (no "data" item); no malformed marker, no expert info.
const IMM_NOTE = 'Wireshark 4.0 shows opcode 8/9 as "Unknown", the immediate data undissected';
const imm = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
data('Immediate Data (opcode 8)', 40, 4, { op: OP.IMM, qn: 0, msn: 7 }, imm, {
  rdmap: rdmapWant(OP.IMM),
  note: IMM_NOTE,
});
data('Immediate Data with SE (opcode 9)', 41, 4, { op: OP.IMM_SE, qn: 0, msn: 8 }, imm, {
  rdmap: rdmapWant(OP.IMM_SE),
  note: IMM_NOTE,
});

// rdma-graph's Send with Immediate (PROTOCOL.md section 4): RDMAP opcodes 12 and 13, the immediate
// in the Invalidate STag field. Wireshark 4.0 does not know the opcodes ("Unknown"); trp.lua shows
// the immediate as trp.send_imm.
const SEND_IMM_NOTE = 'Wireshark 4.0 shows opcode 12/13 as "Unknown"; trp.lua adds the immediate';
for (const [name, op, psn] of [
  ['Send with Immediate (opcode 12)', OP.SEND_IMM, 42],
  ['Send with SE and Immediate (opcode 13)', OP.SEND_SE_IMM, 43],
] as const) {
  cases.push({
    name,
    bytes: [...trpHeader(psn, 4, TRP.DATA), ...untagged({ op, ulp: 0x8badf00d, qn: 0, msn: 9 }), 0x61, 0x62],
    trp: trpWant(psn, 4, TRP.DATA, { sendImm: 0x8badf00d }),
    ddp: untaggedWant({ op, ulp: 0x8badf00d, qn: 0, msn: 9 }),
    rdmap: rdmapWant(op),
    note: SEND_IMM_NOTE,
  });
}

// UD datagrams (PROTOCOL.md section 9): the vector, one without immediate, one empty, and one with
// reserved flag bits (a protocol warning from trp.lua).
cases.push({
  name: 'vector: DATAGRAM, Q_Key 0x11111111, immediate 0xabcdef01, solicited, "ud"',
  bytes: fromHex(PROTOCOL_VECTORS[4]),
  datagram: { qkey: 0x11111111, imm: 0xabcdef01, flags: 3, data: '7564' },
});
cases.push({
  name: 'DATAGRAM without immediate',
  bytes: [...be32(0x80010000), ...be32(0), ...be16(0x6000), 1, 2, 3],
  datagram: { qkey: 0x80010000, imm: 0, flags: 0, data: '010203' },
});
cases.push({
  name: 'DATAGRAM with no message',
  bytes: [...be32(7), ...be32(0), ...be16(0x6000)],
  datagram: { qkey: 7, imm: 0, flags: 0, data: '' },
});
cases.push({
  name: 'DATAGRAM with reserved flag bits',
  bytes: [...be32(7), ...be32(0), ...be16(0x6100), 9],
  datagram: { qkey: 7, imm: 0, flags: 0x100, data: '09' },
  experts: [{ severity: 'warning', group: 'protocol', message: 'Reserved datagram flag bits are not 0' }],
});

// Atomics (RFC 7306), Atomic Request on QN 1 with the 52-byte body, Atomic Response on QN 3.
{
  const ONES = 0xffff_ffff_ffff_ffffn;
  const atomic = (
    aop: number,
    id: number,
    stag: number,
    to: bigint,
    d1: bigint,
    m1: bigint,
    d2: bigint,
    m2: bigint,
  ) => [...be32(aop), ...be32(id), ...be32(stag), ...be64(to), ...be64(d1), ...be64(m1), ...be64(d2), ...be64(m2)];
  const base = (opcode: number, requestId: number) => ({
    reserved: 0,
    opcode,
    requestId,
    stag: 0x00c0ffee,
    to: 0x1000_0000_0008n,
  });
  data(
    'Atomic Request FetchAdd',
    42,
    4,
    { op: OP.ATOMIC_REQ, qn: 1, msn: 2 },
    atomic(0, 101, 0x00c0ffee, 0x1000_0000_0008n, 5n, ONES, 0n, 0n),
    {
      rdmap: rdmapWant(OP.ATOMIC_REQ, {
        atomicRequest: { ...base(0, 101), addData: 5n, addMask: ONES, compareData: 0n, compareMask: 0n },
      }),
    },
  );
  // Wireshark 4.0 dissects swap data/mask only for AOpCode 2 and compare data/mask always, from
  // wherever it stands: for Swap (1) the swap data and mask come out as "Compare Data/Mask".
  data(
    'Atomic Request Swap',
    43,
    4,
    { op: OP.ATOMIC_REQ, qn: 1, msn: 3 },
    atomic(1, 102, 0x00c0ffee, 0x1000_0000_0008n, 0x1122334455667788n, ONES, 0n, 0n),
    {
      rdmap: rdmapWant(OP.ATOMIC_REQ, {
        atomicRequest: { ...base(1, 102), compareData: 0x1122334455667788n, compareMask: ONES },
      }),
      note: "Wireshark 4.0 shows Swap's swap data/mask as compare data/mask",
    },
  );
  data(
    'Atomic Request CmpSwap',
    44,
    4,
    { op: OP.ATOMIC_REQ, qn: 1, msn: 4 },
    atomic(2, 103, 0x00c0ffee, 0x1000_0000_0008n, 99n, ONES, 7n, ONES),
    {
      rdmap: rdmapWant(OP.ATOMIC_REQ, {
        atomicRequest: { ...base(2, 103), swapData: 99n, swapMask: ONES, compareData: 7n, compareMask: ONES },
      }),
    },
  );
  data(
    'Atomic Response',
    45,
    4,
    { op: OP.ATOMIC_RESP, qn: 3, msn: 1 },
    [...be32(103), ...be64(0x8000_0000_0000_0007n)],
    { rdmap: rdmapWant(OP.ATOMIC_RESP, { atomicResponse: { requestId: 103, originalValue: 0x8000_0000_0000_0007n } }) },
  );
}

// Connection management: psn 0, ack 0, private-data-length(2) ird(2) ord(2) private data; a
// REJECT's reason stands where IRD does.
function cm(name: string, opcode: number, ird: number, ord: number, pd: number[]): void {
  const params = opcode === TRP.REJECT ? { rejectReason: ird } : { ird };
  cases.push({
    name,
    bytes: [...trpHeader(0, 0, opcode), ...be16(pd.length), ...be16(ird), ...be16(ord), ...pd],
    trp: trpWant(0, 0, opcode, { cm: { pdlen: pd.length, ...params, ord, privateData: hex(pd) } }),
  });
}
cm('REQ with private data', TRP.REQ, 16, 8, ascii('client says hi'));
cm('ACCEPT with private data', TRP.ACCEPT, 8, 16, ascii('ok'));
cm('REJECT with private data', TRP.REJECT, 0, 0, ascii('no'));
cm('REJECT: no listener on the port', TRP.REJECT, 1, 0, []);
cm(
  'REQ with 512 bytes of private data',
  TRP.REQ,
  1,
  1,
  Array.from({ length: 512 }, (_, i) => i & 0xff),
);
cm('ACCEPT without private data', TRP.ACCEPT, 4, 4, []);
cases.push({ name: 'FIN', bytes: trpHeader(50, 7, TRP.FIN), trp: trpWant(50, 7, TRP.FIN) });

// The datagram service's request and answers (PROTOCOL.md section 6.1).
cases.push({
  name: 'SIDR_REQ, request id 0x5eed0001, private data "udaddy"',
  bytes: [...trpHeader(0x5eed0001, 0, TRP.SIDR_REQ), ...be16(6), ...be16(0), ...be16(0), ...ascii('udaddy')],
  sidr: { requestId: 0x5eed0001, pdlen: 6, privateData: hex(ascii('udaddy')) },
});
cases.push({
  name: 'SIDR_REP success: QP 49152, Q_Key 0x01234567, private data "ok"',
  bytes: [...trpHeader(0x01234567, 0x5eed0001, TRP.SIDR_REP), ...be16(2), ...be16(0), ...be16(49152), ...ascii('ok')],
  sidr: { requestId: 0x5eed0001, qkey: 0x01234567, status: 0, qpn: 49152, pdlen: 2, privateData: hex(ascii('ok')) },
});
cases.push({
  name: 'SIDR_REP: no datagram listener on the port',
  bytes: [...trpHeader(0, 0x77, TRP.SIDR_REP), ...be16(0), ...be16(1), ...be16(0)],
  sidr: { requestId: 0x77, qkey: 0, status: 1, qpn: 0, pdlen: 0, privateData: '' },
});
cases.push({
  name: 'malformed: SIDR_REP whose length is not 16 + private-data-length',
  bytes: [...trpHeader(0, 0x77, TRP.SIDR_REP), ...be16(9), ...be16(2), ...be16(0), 1, 2],
  sidr: { requestId: 0x77, qkey: 0, status: 2, qpn: 0, pdlen: 9, privateData: '0102' },
  malformed: true,
  experts: [{ severity: 'error', group: 'malformed', message: 'Datagram length is not 16 + private data length' }],
});

// Packets that must be flagged.
cases.push({
  name: 'malformed: REQ whose length is not 16 + private-data-length',
  bytes: [...trpHeader(0, 0, TRP.REQ), ...be16(10), ...be16(4), ...be16(4), ...ascii('short')],
  trp: trpWant(0, 0, TRP.REQ, { cm: { pdlen: 10, ird: 4, ord: 4, privateData: hex(ascii('short')) } }),
  malformed: true,
  experts: [{ severity: 'error', group: 'malformed', message: 'Datagram length is not 16 + private data length' }],
});
{
  // urdma's Read Request: the sink STag in bytes 2..5 and a 24-byte body (nodes/rdma/PROTOCOL.md section 7).
  const h: Untagged = { op: OP.READ_REQ, ulp: 0xabcd, qn: 1, msn: 9 };
  const body = [...be64(0x2000n), ...be32(16), ...be32(0x1234), ...be64(0x3000n)];
  cases.push({
    name: "malformed: urdma's Read Request (24-byte body)",
    bytes: [...trpHeader(60, 4, TRP.DATA), ...untagged(h), ...body],
    trp: trpWant(60, 4, TRP.DATA),
    ddp: untaggedWant(h),
    // Read 4 bytes late, from the sink TO on, and cut short at the source TO.
    rdmap: rdmapWant(OP.READ_REQ, {
      reserved: '0000abcd',
      readRequest: {
        sinkStag: 0,
        sinkTo: 0x0000_2000_0000_0010n,
        size: 0x1234,
        srcStag: 0,
      } as RdmapHeader['readRequest'],
    }),
    malformed: true,
    experts: [{ severity: 'error', group: 'malformed' }],
  });
}
cases.push({
  name: 'flagged: unknown TRP opcode 11',
  bytes: trpHeader(0, 0, 11),
  trp: trpWant(0, 0, 11),
  experts: [{ severity: 'warning', group: 'undecoded', message: 'Unknown TRP opcode' }],
});
cases.push({
  name: 'flagged: reserved opcode bits set',
  bytes: trpHeader(61, 4, TRP.FIN, 0x123),
  trp: { ...trpWant(61, 4, TRP.FIN), reserved: 0x123 },
  experts: [{ severity: 'warning', group: 'protocol', message: 'Reserved opcode bits are not 0' }],
});
cases.push({
  name: 'malformed: shorter than the TRP header',
  bytes: [0, 0, 0, 1, 0, 0],
  malformed: true,
  experts: [{ severity: 'error', group: 'malformed', message: 'Shorter than its header' }],
});

// ------------------------------------------------------------------ decode once

let decoded: Promise<TrpDecoded[] | null> | null = null;

function decodeAll(): Promise<TrpDecoded[] | null> {
  decoded ??= (async () => {
    const why = tsharkAvailable();
    if (why !== null) return null;
    const dir = mkdtempSync(join(tmpdir(), 'trp-dissector-'));
    try {
      const file = join(dir, 'trp.pcap');
      writeUdpPcap(
        file,
        cases.map((c) => ({ payload: c.bytes, sport: PEER_QP, dport: OUR_QP })),
      );
      return await decodeTrp(file, [PEER_QP, OUR_QP]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  })();
  return decoded;
}

async function frameOf(i: number): Promise<TrpDecoded> {
  const all = await decodeAll();
  if (all === null) skip(tsharkAvailable() as string);
  assert.is(all.length, cases.length, 'one decoded frame per packet written');
  return all[i];
}

const bad = (e: TrpExpert) => e.severity === 'error' || e.severity === 'warning' || e.group === 'malformed';

test('every packet decodes as TRP over UDP, frames in order', async () => {
  const all = await decodeAll();
  if (all === null) skip(tsharkAvailable() as string);
  assert.equal(
    all.map((d) => d.frame),
    cases.map((_, i) => i + 1),
  );
  for (const d of all)
    assert.ok(
      d.protocols.join(':').startsWith('eth:ethertype:ip:udp:urdma_trp'),
      `frame ${d.frame}: ${d.protocols.join(':')}`,
    );
});

cases.forEach((c, i) => {
  test(c.note ? `${c.name} (${c.note})` : c.name, async () => {
    const d = await frameOf(i);
    const where = `frame ${d.frame} (${d.info})`;
    assert.equal(d.trp, c.trp, `${where}: TRP`);
    assert.equal(d.datagram, c.datagram, `${where}: datagram`);
    assert.equal(d.sidr, c.sidr, `${where}: SIDR`);
    assert.equal(d.ddp, c.ddp, `${where}: DDP`);
    assert.equal(d.rdmap, c.rdmap, `${where}: RDMAP`);
    assert.is(d.payload, c.payload, `${where}: payload`);
    assert.is(
      d.malformed.length > 0,
      c.malformed === true,
      `${where}: malformed markers ${JSON.stringify(d.malformed)}`,
    );
    const wanted = c.experts ?? [];
    const flagged = d.experts.filter(bad);
    for (const w of wanted) {
      assert.ok(
        flagged.some((e) => Object.entries(w).every(([k, v]) => e[k as keyof TrpExpert] === v)),
        `${where}: expected expert ${JSON.stringify(w)}, got ${JSON.stringify(d.experts)}`,
      );
    }
    if (wanted.length === 0) assert.equal(flagged, [], `${where}: no expert warnings or errors`);
    if (d.ddp && !c.malformed)
      assert.ok(d.protocols.includes('iwarp_ddp_rdmap'), `${where}: handed to iwarp_ddp_rdmap`);
    if (c.note) console.log(`  ${c.name}: ${c.note}; info "${d.info}"`);
  });
});

test("the README's tshark block, as written, in a folder holding capture.pcap (these packets) and nodes/rdma/trp.lua: one TRP line per packet", () => {
  const why = tsharkAvailable();
  if (why !== null) skip(why);
  const block = blocks(README).find((b) => b.startsWith('tshark -X lua_script:nodes/rdma/trp.lua'));
  assert.ok(block, 'the README shows the block');
  const dir = mkdtempSync(join(tmpdir(), 'trp-readme-'));
  try {
    mkdirSync(join(dir, 'nodes/rdma'), { recursive: true });
    symlinkSync(TRP_LUA, join(dir, 'nodes/rdma/trp.lua'));
    writeUdpPcap(
      join(dir, 'capture.pcap'),
      cases.map((c) => ({ payload: c.bytes, sport: PEER_QP, dport: OUR_QP })),
    );
    const r = spawnSync('bash', ['-c', block], { cwd: dir, encoding: 'utf8', env: tsharkEnv(), timeout: 60_000 });
    assert.is(r.status, 0, r.stderr);
    const lines = r.stdout.split('\n').filter((l) => l.trim() !== '');
    assert.is(lines.length, cases.length, r.stdout);
    // Without the script and the port mapping tshark would say UDP for each of them.
    const trp = lines.filter((l) => /\bTRP\b|iWARP|DDP|RDMAP/i.test(l));
    assert.is(trp.length, cases.length, `every line decoded as TRP (or above):\n${r.stdout}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('nodes/rdma/PROTOCOL.md section 3 lists exactly the vectors decoded here', () => {
  const doc = readFileSync(new URL('../nodes/rdma/PROTOCOL.md', import.meta.url), 'utf8');
  const section3 = doc.slice(doc.indexOf('## 3.'), doc.indexOf('## 4.'));
  const listed = [...section3.matchAll(/\| `([0-9a-f ]+)` \|/g)].map((m) => m[1]);
  assert.equal(listed, PROTOCOL_VECTORS);
  for (const v of PROTOCOL_VECTORS)
    assert.ok(
      cases.some((c) => hex(c.bytes) === hex(fromHex(v))),
      `a case decodes ${v}`,
    );
});

test.run();
