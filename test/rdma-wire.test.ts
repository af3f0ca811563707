/**
 * What two real stacks put on the wire, decoded by Wireshark: traffic between two stacks
 * (rdma-helpers' twoStacks) covering every message type the RDMA layer sends, both sides'
 * transmit captured (Interfaces.capture) and decoded with tshark through nodes/rdma/trp.lua and
 * Wireshark's own iwarp_ddp_rdmap (helpers-tshark's decodeTrp). Every frame must decode without
 * a malformed marker or an expert warning/error (tshark 4.0's documented limitations aside:
 * Immediate Data shown as an unknown opcode, Swap's operands under compare labels), and the
 * decoded fields must equal what the work requests posted call for, computed here from them:
 * MSNs 1, 2, 3... per queue, MO and TO advancing by the segment payload of the MTU, the STags,
 * offsets, sizes and operands given, the original values the atomics must return.
 *
 * Needs tshark with Lua (Debian 12: tshark 4.0); without it the test skips (fails under CI=true).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Qp } from '../nodes/rdma/qp.ts';
import type { SendRequest } from '../nodes/rdma/stack.ts';
import type { Mr } from '../nodes/rdma/verbs.ts';
import { hex } from './l2l4-helpers.ts';
import {
  decodeTrp,
  tsharkAvailable,
  type DdpHeader,
  type RdmapHeader,
  type TrpDecoded,
  type TrpExpert,
} from './helpers-tshark.ts';
import { IP_B, makeEnds, pattern, settle, twoStacks, waitCompletions, type Pair } from './rdma-helpers.ts';

const TRP = { DATA: 0, REQ: 1, ACCEPT: 2, REJECT: 3, FIN: 4, SACK: 5, PROBE: 7, PROBE_ACK: 8 } as const;
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
} as const;
const ONES = 0xffff_ffff_ffff_ffffn;
const MTU = 1500;
/** Payload bytes per segment: MTU - IPv4 20 - UDP 8 - TRP 10 - DDP header (18 untagged, 14 tagged). */
const UNTAGGED = MTU - 20 - 8 - 10 - 18;
const TAGGED = MTU - 20 - 8 - 10 - 14;

const be32 = (x: number) => [(x >>> 24) & 0xff, (x >>> 16) & 0xff, (x >>> 8) & 0xff, x & 0xff];
const be64 = (x: bigint) => [...be32(Number(x >> 32n)), ...be32(Number(x & 0xffffffffn))];
const ascii = (s: string) => Uint8Array.from(Buffer.from(s, 'latin1'));

const untaggedWant = (op: number, last: boolean, ulp: number, qn: number, msn: number, mo: number): DdpHeader => ({
  tagged: false,
  last,
  rsvd: 0,
  dv: 1,
  rsvdulp: hex([0x40 | op, ...be32(ulp)]),
  qn,
  msn,
  mo,
});
const taggedWant = (last: boolean, stag: number, to: bigint): DdpHeader => ({
  tagged: true,
  last,
  rsvd: 0,
  dv: 1,
  stag,
  to,
});
const rdmapWant = (opcode: number, extra: Partial<RdmapHeader> = {}): RdmapHeader => ({
  version: 1,
  rsv: 0,
  opcode,
  ...extra,
});

const bad = (e: TrpExpert) => e.severity === 'error' || e.severity === 'warning' || e.group === 'malformed';

/** Every frame: TRP over UDP, no malformed marker, no expert warning or error. */
function clean(frames: TrpDecoded[], where: string): void {
  for (const d of frames) {
    const at = `${where} frame ${d.frame} (${d.info})`;
    assert.ok(d.protocols.join(':').startsWith('eth:ethertype:ip:udp:urdma_trp'), `${at}: ${d.protocols.join(':')}`);
    assert.equal(d.malformed, [], `${at}: malformed`);
    assert.equal(d.experts.filter(bad), [], `${at}: expert warnings/errors`);
    if (d.ddp) assert.ok(d.protocols.includes('iwarp_ddp_rdmap'), `${at}: handed to iwarp_ddp_rdmap`);
  }
}

/** Data frames (TRP opcode 0 with a DDP segment) by PSN; retransmissions must decode the same. */
function byPsn(frames: TrpDecoded[], where: string): Map<number, TrpDecoded> {
  const m = new Map<number, TrpDecoded>();
  for (const d of frames) {
    if (!d.trp || d.trp.opcode !== TRP.DATA || d.trp.pureAck) continue;
    const have = m.get(d.trp.psn);
    if (have) {
      const same = (x: TrpDecoded) =>
        JSON.stringify({ ddp: x.ddp, rdmap: x.rdmap, payload: x.payload }, (_, v) =>
          typeof v === 'bigint' ? v.toString() : v,
        );
      assert.is(same(d), same(have), `${where}: PSN ${d.trp.psn} retransmitted as it was`);
    } else m.set(d.trp.psn, d);
  }
  return m;
}

/** What one data segment must decode as. */
interface Want {
  ddp: DdpHeader;
  rdmap: RdmapHeader;
  payload?: string;
  note?: string;
}

/** A PSN relative to a side's initial PSN (PSNs are 32-bit and wrap). */
const rel = (psn: number, isn: number) => (psn - isn) >>> 0;

/** The data frames are PSNs isn, isn+1... one per wanted segment, each decoding as wanted. */
function expectSegments(data: Map<number, TrpDecoded>, want: Want[], who: string, isn: number): void {
  assert.equal(
    [...data.keys()].map((k) => rel(k, isn)).sort((x, y) => x - y),
    want.map((_, i) => i),
    `${who} sent PSNs isn.. one per segment`,
  );
  want.forEach((w, psn) => {
    const d = data.get((isn + psn) >>> 0) as TrpDecoded;
    const at = `${who} PSN ${psn} (${d.info})`;
    assert.equal(d.ddp, w.ddp, `${at}: DDP`);
    assert.equal(d.rdmap, w.rdmap, `${at}: RDMAP`);
    assert.is(d.payload, w.payload, `${at}: payload`);
    assert.is(d.trp?.reserved, 0, `${at}: TRP reserved bits`);
  });
}

interface Posted {
  req: SendRequest;
  /** The segments it must produce, in order. */
  want: Want[];
}

interface Files {
  a: string;
  b: string;
}

function capture(p: Pair, dir: string, phase: string): Files {
  const f = { a: join(dir, `${phase}-a.pcap`), b: join(dir, `${phase}-b.pcap`) };
  p.a.ifs.capture(p.a.ifName, { tx: f.a });
  p.b.ifs.capture(p.b.ifName, { tx: f.b });
  return f;
}

function stop(p: Pair): void {
  p.a.ifs.stopCapture(p.a.ifName);
  p.b.ifs.stopCapture(p.b.ifName);
}

test('every message type two stacks send decodes in Wireshark as what was posted', async () => {
  const why = tsharkAvailable();
  if (why !== null) skip(why);
  const dir = mkdtempSync(join(tmpdir(), 'rdma-wire-'));
  const p = twoStacks({ mtu: MTU });
  try {
    const { a, b } = p;
    // ---------------------------------------------------------------- B: listeners and memory
    const B = makeEnds(b, {}, 256);
    b.rdma.destroyQp(B.qp); // the listener makes the QP; only its PD and CQs are used
    const LISTEN = 25000,
      REFUSE = 25001;
    let bq: Qp | null = null;
    const reqs: { ird: number; ord: number; pd: string }[] = [];
    b.rdma.listen(LISTEN, (r) => {
      reqs.push({ ird: r.ird, ord: r.ord, pd: hex(r.privateData) });
      bq = b.rdma.createQp({ pd: B.pd, sendCq: B.scq, recvCq: B.rcq, maxSendWr: 256, maxRecvWr: 256 });
      return { qp: bq, privateData: ascii('welcome') };
    });
    b.rdma.listen(REFUSE, () => ({ reject: true, privateData: ascii('no') }));
    const target = b.rdma.regMr(B.pd, 65536, ['local-write', 'remote-write', 'remote-read', 'remote-atomic']);
    target.memory.set(pattern(65536, 11));
    const tdv = new DataView(target.memory.buffer, target.memory.byteOffset, target.memory.byteLength);
    const V_ADD = 0x0000_0001_ffff_fff0n,
      V_SWAP = 0x5555_6666_7777_8888n,
      V_CMP = 0x0102_0304_0506_0708n;
    tdv.setBigUint64(40000, V_ADD, true);
    tdv.setBigUint64(40008, V_SWAP, true);
    tdv.setBigUint64(40016, V_CMP, true);
    const inv1 = b.rdma.regMr(B.pd, 64, ['local-write', 'remote-write', 'remote-invalidate']);
    const inv2 = b.rdma.regMr(B.pd, 64, ['local-write', 'remote-read', 'remote-invalidate']);
    const rbuf = b.rdma.regMr(B.pd, 8 * 4096, ['local-write']);

    // ---------------------------------------------------------------- A: two QPs
    const A = makeEnds(a, { ird: 8, ord: 4 }, 256);
    const A2 = makeEnds(a, { pd: A.pd, sendCq: A.scq, recvCq: A.rcq });
    const src = a.rdma.regMr(A.pd, 16384, ['local-write']);
    src.memory.set(pattern(16384, 5));
    const sink = a.rdma.regMr(A.pd, 8192, ['local-write']);
    const ports = [A.qp.qpn, A2.qp.qpn, LISTEN, REFUSE];

    // ---------------------------------------------------------------- phase 1: CM, then every operation
    const f1 = capture(p, dir, 'ops');
    const accepted = await a.rdma.connect(A.qp, IP_B, LISTEN, { privateData: ascii('hello') });
    assert.is(hex(accepted.privateData), hex(ascii('welcome')));
    const refused = await a.rdma.connect(A2.qp, IP_B, REFUSE, { privateData: ascii('may I') }).then(
      () => null,
      (e: Error & { privateData?: Uint8Array }) => e,
    );
    assert.ok(refused instanceof Error && /rejected/.test(refused.message), String(refused));
    assert.is(hex(refused.privateData as Uint8Array), hex(ascii('no')));
    assert.ok(bq !== null, 'B made a QP for the request');
    const bqp = bq as unknown as Qp;
    ports.push(bqp.qpn);
    for (let k = 0; k < 6; k++)
      b.rdma.postRecv(bqp, { wrId: `r${k}`, sg: [{ mr: rbuf, offset: k * 4096, length: 4096 }] });

    const sendMsn = { n: 0 },
      readMsn = { n: 0 };
    const srcHex = (off: number, len: number) => hex(src.memory.subarray(off, off + len));
    /** A Send's segments: MSN fixed, MO advancing by the untagged payload, L on the last. */
    const sendSegs = (op: number, off: number, len: number, inv = 0): Want[] => {
      const msn = ++sendMsn.n;
      const n = Math.max(1, Math.ceil(len / UNTAGGED));
      const rd = op === OP.SEND || op === OP.SEND_SE ? { reserved: '00000000' } : { invalidateStag: inv };
      return Array.from({ length: n }, (_, k) => {
        const l = Math.min(UNTAGGED, len - k * UNTAGGED);
        return {
          ddp: untaggedWant(op, k === n - 1, inv, 0, msn, k * UNTAGGED),
          rdmap: rdmapWant(op, rd),
          payload: l > 0 ? srcHex(off + k * UNTAGGED, l) : undefined,
        };
      });
    };
    /** A Write's segments: TO = offset + k x tagged payload, L on the last. */
    const writeSegs = (stag: number, to: number, off: number, len: number): Want[] => {
      const n = Math.max(1, Math.ceil(len / TAGGED));
      return Array.from({ length: n }, (_, k) => ({
        ddp: taggedWant(k === n - 1, stag, BigInt(to + k * TAGGED)),
        rdmap: rdmapWant(OP.WRITE),
        payload: srcHex(off + k * TAGGED, Math.min(TAGGED, len - k * TAGGED)),
      }));
    };
    const immSeg = (op: number): Want => ({
      ddp: untaggedWant(op, true, 0, 0, ++sendMsn.n, 0),
      rdmap: rdmapWant(op),
      note: 'tshark 4.0: opcode 8/9 "Unknown", the 8 bytes of immediate data undissected',
    });
    const IMM1 = 0x12345678,
      IMM2 = 0x9abcdef0;
    const sg = (off: number, len: number, mr: Mr = src) => [{ mr, offset: off, length: len }];
    const posted: Posted[] = [
      { req: { wrId: 'send', opcode: 'send', sg: sg(0, 3000) }, want: sendSegs(OP.SEND, 0, 3000) },
      {
        req: { wrId: 'send-se', opcode: 'send-with-solicited', sg: sg(3000, 100) },
        want: sendSegs(OP.SEND_SE, 3000, 100),
      },
      {
        req: { wrId: 'send-inv', opcode: 'send-with-invalidate', sg: sg(3100, 50), invalidateStag: inv1.stag },
        want: sendSegs(OP.SEND_INV, 3100, 50, inv1.stag),
      },
      {
        req: {
          wrId: 'send-se-inv',
          opcode: 'send-with-invalidate',
          solicited: true,
          sg: sg(3150, 60),
          invalidateStag: inv2.stag,
        },
        want: sendSegs(OP.SEND_SE_INV, 3150, 60, inv2.stag),
      },
      {
        req: { wrId: 'write', opcode: 'write', sg: sg(4000, 4000), remote: { stag: target.stag, offset: 1000 } },
        want: writeSegs(target.stag, 1000, 4000, 4000),
      },
      {
        req: {
          wrId: 'write-imm',
          opcode: 'write-with-imm',
          sg: sg(8000, 2000),
          remote: { stag: target.stag, offset: 10000 },
          imm: IMM1,
        },
        want: [...writeSegs(target.stag, 10000, 8000, 2000), immSeg(OP.IMM)],
      },
      {
        req: {
          wrId: 'write-imm-se',
          opcode: 'write-with-imm',
          solicited: true,
          sg: sg(10000, 10),
          remote: { stag: target.stag, offset: 12000 },
          imm: IMM2,
        },
        want: [...writeSegs(target.stag, 12000, 10000, 10), immSeg(OP.IMM_SE)],
      },
    ];
    const READ = { off: 20000, len: 3000 };
    posted.push({
      req: { wrId: 'read', opcode: 'read', sg: sg(0, READ.len, sink), remote: { stag: target.stag, offset: READ.off } },
      want: [],
    });
    const readReqMsn = ++readMsn.n;
    const atomics = [
      {
        req: {
          wrId: 'fetch-add',
          opcode: 'fetch-add',
          sg: sg(4000, 8, sink),
          remote: { stag: target.stag, offset: 40000 },
          atomic: { add: 0x10n },
        },
        aop: 0,
        orig: V_ADD,
      },
      {
        req: {
          wrId: 'swap',
          opcode: 'swap',
          sg: sg(4008, 8, sink),
          remote: { stag: target.stag, offset: 40008 },
          atomic: { swap: 0xfeed_0000_0000_beefn },
        },
        aop: 1,
        orig: V_SWAP,
      },
      {
        req: {
          wrId: 'cmp-swap',
          opcode: 'cmp-swap',
          sg: sg(4016, 8, sink),
          remote: { stag: target.stag, offset: 40016 },
          atomic: { compare: V_CMP, swap: 0x0a0b_0c0d_0e0f_1011n },
        },
        aop: 2,
        orig: V_CMP,
      },
    ] as const;
    const atomicMsns = atomics.map(() => ++readMsn.n);
    for (const x of atomics) posted.push({ req: x.req as SendRequest, want: [] });
    for (const x of posted) a.rdma.postSend(A.qp, x.req);

    const aDone = await waitCompletions(A.scq, posted.length);
    assert.equal(
      aDone.map((c) => `${String(c.wrId)}:${c.status}`),
      posted.map((x) => `${String(x.req.wrId)}:success`),
    );
    const bDone = await waitCompletions(B.rcq, 6);
    assert.equal(
      bDone.map((c) => [
        c.wrId,
        c.status,
        c.opcode,
        c.byteLen,
        c.solicited ?? false,
        c.invalidatedStag ?? null,
        c.imm ?? null,
      ]),
      [
        ['r0', 'success', 'recv', 3000, false, null, null],
        ['r1', 'success', 'recv', 100, true, null, null],
        ['r2', 'success', 'recv', 50, false, inv1.stag, null],
        ['r3', 'success', 'recv', 60, true, inv2.stag, null],
        ['r4', 'success', 'recv-with-imm', 2000, false, null, IMM1],
        ['r5', 'success', 'recv-with-imm', 10, true, null, IMM2],
      ],
    );
    const adv = new DataView(sink.memory.buffer, sink.memory.byteOffset, sink.memory.byteLength);
    assert.equal(
      atomics.map((x, k) => adv.getBigUint64(4000 + 8 * k, true)),
      atomics.map((x) => x.orig),
      'original values returned',
    );
    assert.is(hex(sink.memory.subarray(0, READ.len)), hex(target.memory.subarray(READ.off, READ.off + READ.len)));
    await settle(50);
    stop(p);

    const [a1, b1] = await Promise.all([decodeTrp(f1.a, ports), decodeTrp(f1.b, ports)]);
    clean(a1, 'A phase 1');
    clean(b1, 'B phase 1');
    // CM: REQ from A's QP port to the listener, ACCEPT from B's new QP port (IRD := REQ.ord,
    // ORD := REQ.ird), REQ to the refusing listener and its REJECT. A REQ carries its QP's
    // random initial PSN; the ACCEPT carries the acceptor's and echoes the REQ's in ack; the
    // REJECT echoes it too.
    const aIsn = A.qp.isn,
      a2Isn = A2.qp.isn,
      bIsn = bqp.isn;
    assert.ok(new Set([aIsn, a2Isn, bIsn]).size === 3, `initial PSNs differ: ${aIsn} ${a2Isn} ${bIsn}`);
    const cm = (frames: TrpDecoded[], op: number) => frames.filter((d) => d.trp?.opcode === op);
    const reqFrames = cm(a1, TRP.REQ);
    assert.ok(reqFrames.length >= 2, 'two REQs');
    const reqKinds = [...new Set(reqFrames.map((d) => JSON.stringify(d.trp)))]
      .map((x) => JSON.parse(x))
      .sort((x, y) => x.cm.ird - y.cm.ird);
    assert.equal(
      reqKinds,
      [
        {
          psn: aIsn,
          ack: 0,
          opcode: TRP.REQ,
          reserved: 0,
          pureAck: false,
          cm: { pdlen: 5, ird: 8, ord: 4, privateData: hex(ascii('hello')) },
        },
        {
          psn: a2Isn,
          ack: 0,
          opcode: TRP.REQ,
          reserved: 0,
          pureAck: false,
          cm: { pdlen: 5, ird: 16, ord: 16, privateData: hex(ascii('may I')) },
        },
      ],
      'each REQ (repeats identical)',
    );
    assert.equal(reqs, [{ ird: 8, ord: 4, pd: hex(ascii('hello')) }], 'the listener saw the REQ once');
    const acc = cm(b1, TRP.ACCEPT);
    assert.ok(acc.length >= 1);
    for (const d of acc)
      assert.equal(d.trp, {
        psn: bIsn,
        ack: aIsn,
        opcode: TRP.ACCEPT,
        reserved: 0,
        pureAck: false,
        cm: { pdlen: 7, ird: 4, ord: 8, privateData: hex(ascii('welcome')) },
      });
    const rej = cm(b1, TRP.REJECT);
    assert.ok(rej.length >= 1);
    for (const d of rej)
      assert.equal(d.trp, {
        psn: 0,
        ack: a2Isn,
        opcode: TRP.REJECT,
        reserved: 0,
        pureAck: false,
        cm: { pdlen: 2, rejectReason: 0, ord: 0, privateData: hex(ascii('no')) }, // refused by the listener
      });

    // A's data: every segment of every WR, PSN aIsn, aIsn+1... in posting order.
    const aData = byPsn(a1, 'A phase 1');
    const aAt = (k: number) => aData.get((aIsn + k) >>> 0);
    const wantA: Want[] = posted.flatMap((x) => x.want);
    // The Read Request (QN 1, the first MSN there) and the Atomic Requests (the MSNs after it).
    const rrIndex = wantA.length;
    wantA.push({
      ddp: untaggedWant(OP.READ_REQ, true, 0, 1, readReqMsn, 0),
      rdmap: rdmapWant(OP.READ_REQ, { reserved: '00000000' }),
    });
    atomics.forEach((x, k) =>
      wantA.push({ ddp: untaggedWant(OP.ATOMIC_REQ, true, 0, 1, atomicMsns[k], 0), rdmap: rdmapWant(OP.ATOMIC_REQ) }),
    );
    const rr = aAt(rrIndex)?.rdmap?.readRequest;
    assert.ok(rr, 'the Read Request decoded its fields');
    assert.equal(
      { size: rr.size, srcStag: rr.srcStag, srcTo: rr.srcTo },
      { size: READ.len, srcStag: target.stag, srcTo: BigInt(READ.off) },
      'Read Request',
    );
    wantA[rrIndex].rdmap.readRequest = rr; // the sink STag/TO are the requester's choice; the response must use them
    const reqIds: number[] = [];
    atomics.forEach((x, k) => {
      const got = aAt(rrIndex + 1 + k)?.rdmap?.atomicRequest;
      assert.ok(got, `atomic ${x.req.wrId} decoded`);
      reqIds.push(got.requestId);
      const base = {
        reserved: 0,
        opcode: x.aop,
        requestId: got.requestId,
        stag: target.stag,
        to: BigInt(x.req.remote.offset),
      };
      const a = x.req.atomic as { add?: bigint; swap?: bigint; compare?: bigint };
      // tshark 4.0 shows add data/mask for FetchAdd (mask 0: one unpartitioned 64-bit add),
      // swap data/mask for CmpSwap, and compare data/mask always: for Swap, those are its swap data/mask.
      wantA[rrIndex + 1 + k].rdmap.atomicRequest =
        x.aop === 0
          ? { ...base, addData: a.add, addMask: 0n, compareData: 0n, compareMask: 0n }
          : x.aop === 1
            ? { ...base, compareData: a.swap, compareMask: ONES }
            : { ...base, swapData: a.swap, swapMask: ONES, compareData: a.compare, compareMask: ONES };
      if (x.aop === 1) wantA[rrIndex + 1 + k].note = "tshark 4.0: Swap's swap data/mask under compare labels";
    });
    assert.is(new Set(reqIds).size, atomics.length, 'distinct request ids');
    expectSegments(aData, wantA, 'A', aIsn);

    // B's data: the Read Response segments, then the Atomic Responses (QN 3, MSN 1, 2, 3).
    const bData = byPsn(b1, 'B phase 1');
    const nResp = Math.ceil(READ.len / TAGGED);
    const wantB: Want[] = Array.from({ length: nResp }, (_, k) => ({
      ddp: taggedWant(k === nResp - 1, rr.sinkStag, rr.sinkTo + BigInt(k * TAGGED)),
      rdmap: rdmapWant(OP.READ_RESP),
      payload: hex(target.memory.subarray(READ.off + k * TAGGED, READ.off + Math.min(READ.len, (k + 1) * TAGGED))),
    }));
    atomics.forEach((x, k) =>
      wantB.push({
        ddp: untaggedWant(OP.ATOMIC_RESP, true, 0, 3, k + 1, 0),
        rdmap: rdmapWant(OP.ATOMIC_RESP, { atomicResponse: { requestId: reqIds[k], originalValue: x.orig } }),
      }),
    );
    expectSegments(bData, wantB, 'B', bIsn);
    // Pure ACKs (data going back carries the ACK instead, so a side may send none): the next
    // PSN, and a cumulative ack no further than what the other side sent. In the end each side
    // acknowledged everything the other sent.
    for (const [frames, peerSent, ownSent, who, ownIsn, peerIsn] of [
      [a1, wantB.length, wantA.length, 'A', aIsn, bIsn],
      [b1, wantA.length, wantB.length, 'B', bIsn, aIsn],
    ] as const) {
      for (const d of frames.filter((x) => x.trp?.pureAck)) {
        assert.ok(
          d.trp &&
            d.trp.opcode === TRP.DATA &&
            rel(d.trp.ack, peerIsn) <= peerSent &&
            rel(d.trp.psn, ownIsn) <= ownSent &&
            !d.ddp,
          `${who} ACK ${JSON.stringify(d.trp)}`,
        );
      }
      assert.ok(
        frames.some((d) => d.trp?.opcode === TRP.DATA && d.trp.ack === (peerIsn + peerSent) >>> 0),
        `${who} acknowledged everything`,
      );
    }
    assert.ok(
      a1.some((d) => d.trp?.pureAck),
      'A acknowledged the responses with a pure ACK',
    );

    // ---------------------------------------------------------------- phase 2: SACKs (A's tx reorders and loses)
    const f2 = capture(p, dir, 'sack');
    a.ifs.setFault(a.ifName, 'tx', { seed: 7, reorder: 0.3, reorderDepth: 4, loss: 0.05 });
    const N = 48,
      BASE = 50000;
    for (let k = 0; k < N; k++)
      a.rdma.postSend(A.qp, {
        wrId: `w${k}`,
        opcode: 'write',
        sg: sg(k * 100, 100),
        remote: { stag: target.stag, offset: BASE + k * 100 },
      });
    const w2 = await waitCompletions(A.scq, N);
    assert.equal(
      w2.map((c) => `${String(c.wrId)}:${c.status}`),
      Array.from({ length: N }, (_, k) => `w${k}:success`),
    );
    const fc = a.ifs.faultCounters(a.ifName).tx;
    assert.ok(fc !== null && fc.reordered > 0, `reordered ${JSON.stringify(fc)}`);
    a.ifs.setFault(a.ifName, 'tx', null);
    await settle(50);
    stop(p);
    const [a2, b2] = await Promise.all([decodeTrp(f2.a, ports), decodeTrp(f2.b, ports)]);
    clean(a2, 'A phase 2');
    clean(b2, 'B phase 2');
    const sacks = b2.filter((d) => d.trp?.opcode === TRP.SACK);
    assert.ok(sacks.length > 0, 'B sent SACKs');
    const P0 = wantA.length;
    for (const d of sacks) {
      const t = d.trp as NonNullable<TrpDecoded['trp']>;
      const lo = rel(t.psn, aIsn),
        hi = rel(t.ack, aIsn);
      assert.ok(lo < hi && lo > P0 && hi <= P0 + N, `SACK [${lo}, ${hi}) (relative) within what A sent`);
      assert.is(t.sack, `[${t.psn}, ${t.ack})`);
      assert.is(d.ddp, undefined);
    }
    const aData2 = byPsn(a2, 'A phase 2');
    assert.equal(
      [...aData2.keys()].map((k) => rel(k, aIsn)).sort((x, y) => x - y),
      Array.from({ length: N }, (_, k) => P0 + k),
    );
    for (const [psn, d] of aData2) {
      const k = rel(psn, aIsn) - P0;
      assert.equal(d.ddp, taggedWant(true, target.stag, BigInt(BASE + k * 100)), `A PSN ${psn}`);
      assert.equal(d.rdmap, rdmapWant(OP.WRITE));
      assert.is(d.payload, srcHex(k * 100, 100));
    }

    // ---------------------------------------------------------------- phase 3: a Terminate, then FINs
    const f3 = capture(p, dir, 'term');
    const badStag = (target.stag & ~0xff) | ((target.stag + 1) & 0xff); // same MR index, another key
    a.rdma.postSend(A.qp, { wrId: 'bad', opcode: 'write', sg: sg(0, 100), remote: { stag: badStag, offset: 64 } });
    const t = await waitCompletions(A.scq, 1);
    assert.equal(
      t.map((c) => `${String(c.wrId)}:${c.status}`),
      ['bad:remote-access-error'],
    );
    await settle(30);
    const aPsnEnd = P0 + N + 1; // A's next PSN after the bad Write
    a.rdma.destroyQp(A.qp);
    b.rdma.destroyQp(bqp);
    await settle(50);
    stop(p);
    const [a3, b3] = await Promise.all([decodeTrp(f3.a, ports), decodeTrp(f3.b, ports)]);
    clean(a3, 'A phase 3');
    clean(b3, 'B phase 3');
    const badSeg = [0xc1, 0x40 | OP.WRITE, ...be32(badStag), ...be64(64n)];
    const aBad = byPsn(a3, 'A phase 3');
    assert.equal([...aBad.keys()], [(aIsn + P0 + N) >>> 0]);
    assert.equal(aBad.get((aIsn + P0 + N) >>> 0)?.ddp, taggedWant(true, badStag, 64n));
    const terms = [...byPsn(b3, 'B phase 3').values()];
    assert.is(terms.length, 1, 'one Terminate');
    assert.equal(terms[0].ddp, untaggedWant(OP.TERMINATE, true, 0, 2, 1, 0), 'Terminate: QN 2, MSN 1');
    assert.equal(
      terms[0].rdmap,
      rdmapWant(OP.TERMINATE, {
        reserved: '00000000',
        // DDP layer (1), tagged buffer error (1), invalid STag (0); M and D: the segment length and its 14-byte header.
        terminate: {
          layer: 1,
          etype: 1,
          errcode: 0,
          m: true,
          d: true,
          r: false,
          rsvd: 0,
          ddpSegLen: 14 + 100,
          ddpHeader: hex(badSeg),
        },
      }),
    );
    assert.is(terms[0].trp?.psn, (bIsn + wantB.length) >>> 0, "B's next PSN");
    const fins = (frames: TrpDecoded[]) => frames.filter((d) => d.trp?.opcode === TRP.FIN);
    const aFin = fins(a3),
      bFin = fins(b3);
    assert.is(aFin.length, 1);
    assert.is(bFin.length, 1);
    assert.equal(
      aFin[0].trp,
      {
        psn: (aIsn + aPsnEnd) >>> 0,
        ack: (bIsn + wantB.length + 1) >>> 0,
        opcode: TRP.FIN,
        reserved: 0,
        pureAck: false,
      },
      "A's FIN: its next PSN, everything of B's taken (the Terminate too)",
    );
    assert.is(bFin[0].trp?.psn, (bIsn + wantB.length + 1) >>> 0, "B's FIN: its next PSN");
    // Every frame of every phase decoded as one of the kinds covered above.
    const kinds = new Set<string>();
    for (const d of [...a1, ...b1, ...a2, ...b2, ...a3, ...b3]) {
      const trpOp = d.trp?.opcode ?? -1;
      kinds.add(trpOp === TRP.DATA ? (d.trp?.pureAck ? 'ACK' : `rdmap ${d.rdmap?.opcode}`) : `trp ${trpOp}`);
    }
    const want = [
      'ACK',
      ...Object.values(OP).map((o) => `rdmap ${o}`),
      ...[TRP.REQ, TRP.ACCEPT, TRP.REJECT, TRP.FIN, TRP.SACK].map((o) => `trp ${o}`),
    ];
    // A PROBE and its PROBE_ACK appear only when a retransmission timer fired during the capture
    // (seen once in CI on a slow machine): decoded as what they are, not one of the posted kinds.
    const probes = [`trp ${TRP.PROBE}`, `trp ${TRP.PROBE_ACK}`];
    const seen = [...kinds].filter((k) => !probes.includes(k));
    assert.equal(seen.sort(), want.sort(), 'every message type seen, nothing else');
    for (const x of wantA.concat(wantB).filter((w) => w.note)) console.log(`  ${x.note}`);
  } finally {
    p.close();
    rmSync(dir, { recursive: true, force: true });
  }
  assert.is(p.pool.available(), p.pool.count, 'no buffer leaked');
});

test.run();
