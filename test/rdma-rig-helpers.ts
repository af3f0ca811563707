/**
 * One RDMA stack with a test-played peer, for the node tests (test/rdma-nodes.test.ts) and the
 * spoofing tests (test/rdma-spoof.test.ts): a list driver and a manual clock, one QP put in RTS
 * by hand on a known port, frames built here from nodes/rdma/PROTOCOL.md with l2l4-helpers' independent
 * builders and checksums, and what the stack transmits parsed (and checksum-checked) from the
 * bytes by code that shares nothing with nodes/rdma.
 */ import * as assert from 'uvu/assert';
import { Graph, type BufferPool } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import {
  type QpInit,
  type Rdma,
  registerRdma,
  type RdmaOptions,
  type RecvRequest,
  type SendRequest,
} from '../nodes/rdma/stack.ts';
import type { Qp } from '../nodes/rdma/qp.ts';
import type { Completion, Cq, Mr, Pd } from '../nodes/rdma/verbs.ts';
import { memPool } from './helpers.ts';
import {
  hex,
  ListDriver,
  manualClock,
  parseEth,
  parseIp4,
  parseUdp,
  PEER_IP,
  PEER_MAC,
  udpFrame,
  US_IP,
  US_MAC,
} from './l2l4-helpers.ts';

// ------------------------------------------------------------------ wire, from nodes/rdma/PROTOCOL.md

export const QPN = 20001;
export const PEER_PORT = 31000;
export const TRP = { DATA: 0, REQ: 1, ACCEPT: 2, REJECT: 3, FIN: 4, SACK: 5, PROBE: 7, PROBE_ACK: 8 };
export const OP = {
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
};
export const M = 0x80,
  D = 0x40,
  R = 0x20;

export const be16 = (x: number) => [(x >>> 8) & 0xff, x & 0xff];
export const be32 = (x: number) => [(x >>> 24) & 0xff, (x >>> 16) & 0xff, (x >>> 8) & 0xff, x & 0xff];
export const be64 = (x: bigint) => [...be32(Number((x >> 32n) & 0xffffffffn)), ...be32(Number(x & 0xffffffffn))];
export const fromHex = (s: string) => (s.replace(/\s+/g, '').match(/../g) ?? []).map((b) => parseInt(b, 16));
export const bytes = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (i * 31 + seed * 7 + 1) & 0xff);

export function trpHeader(psn: number, ack: number, op = TRP.DATA, low = 0): number[] {
  return [...be32(psn), ...be32(ack), ...be16((op << 12) | low)];
}

export interface TaggedH {
  op?: number;
  last?: boolean;
  stag: number;
  to: number | bigint;
  dv?: number;
  rv?: number;
}
export interface UntaggedH {
  op: number;
  last?: boolean;
  inv?: number;
  qn: number;
  msn: number;
  mo?: number;
  dv?: number;
  rv?: number;
}

export function tagged(h: TaggedH): number[] {
  return [
    0x80 | (h.last === false ? 0 : 0x40) | (h.dv ?? 1),
    ((h.rv ?? 1) << 6) | (h.op ?? OP.WRITE),
    ...be32(h.stag),
    ...be64(BigInt(h.to)),
  ];
}

export function untagged(h: UntaggedH): number[] {
  return [
    (h.last === false ? 0 : 0x40) | (h.dv ?? 1),
    ((h.rv ?? 1) << 6) | h.op,
    ...be32(h.inv ?? 0),
    ...be32(h.qn),
    ...be32(h.msn),
    ...be32(h.mo ?? 0),
  ];
}

export function readRequestBody(r: {
  sinkStag: number;
  sinkTo: bigint;
  size: number;
  srcStag: number;
  srcTo: bigint;
}): number[] {
  return [...be32(r.sinkStag), ...be64(r.sinkTo), ...be32(r.size), ...be32(r.srcStag), ...be64(r.srcTo)];
}

export function atomicBody(
  aop: number,
  id: number,
  stag: number,
  to: bigint,
  d1: bigint,
  m1: bigint,
  d2: bigint,
  m2: bigint,
): number[] {
  return [...be32(aop), ...be32(id), ...be32(stag), ...be64(to), ...be64(d1), ...be64(m1), ...be64(d2), ...be64(m2)];
}

/** One transmitted frame, parsed. */
export interface Out {
  /** Clock (ns) when the driver took it. */
  t: number;
  sport: number;
  dport: number;
  dst: string;
  psn: number;
  ack: number;
  op: number;
  low: number;
  /** Bytes after the TRP header. */
  body: Uint8Array;
}

export interface Seg {
  tagged: boolean;
  last: boolean;
  dv: number;
  rv: number;
  op: number;
  stag: number;
  to: bigint;
  inv: number;
  qn: number;
  msn: number;
  mo: number;
  /** After the 14- or 18-byte DDP header. */
  data: Uint8Array;
}

export const u32 = (b: Uint8Array, o: number) => ((b[o] << 24) | (b[o + 1] << 16) | (b[o + 2] << 8) | b[o + 3]) >>> 0;
export const u64 = (b: Uint8Array, o: number) => (BigInt(u32(b, o)) << 32n) | BigInt(u32(b, o + 4));

export function seg(p: Out): Seg {
  const b = p.body;
  assert.ok(p.op === TRP.DATA && b.length >= 14, `a DDP segment (TRP opcode ${p.op}, ${b.length} bytes)`);
  const t = (b[0] & 0x80) !== 0;
  const s: Seg = {
    tagged: t,
    last: (b[0] & 0x40) !== 0,
    dv: b[0] & 3,
    rv: b[1] >> 6,
    op: b[1] & 15,
    stag: 0,
    to: 0n,
    inv: 0,
    qn: -1,
    msn: -1,
    mo: -1,
    data: b.subarray(t ? 14 : 18),
  };
  assert.is(b[0] & 0x3c, 0, 'DDP reserved bits');
  assert.is(b[1] & 0x30, 0, 'RDMAP reserved bits');
  if (t) {
    s.stag = u32(b, 2);
    s.to = u64(b, 6);
  } else {
    s.inv = u32(b, 2);
    s.qn = u32(b, 6);
    s.msn = u32(b, 10);
    s.mo = u32(b, 14);
  }
  return s;
}

/** A parsed Terminate (QN 2): its control word and the headers hdrct says it carries. */
export function terminate(p: Out) {
  const s = seg(p);
  assert.is(s.tagged, false);
  assert.is(s.op, OP.TERMINATE);
  assert.is(s.qn, 2);
  assert.is(s.last, true);
  const b = s.data;
  const r = {
    msn: s.msn,
    code: (b[0] << 8) | b[1],
    hdrct: b[2],
    reserved: b[3],
    segLen: -1,
    ddp: '',
    rdmap: '',
    rest: b.length,
  };
  let at = 4;
  if (r.hdrct & M) {
    r.segLen = (b[4] << 8) | b[5];
    at = 6;
  }
  if (r.hdrct & D) {
    const n = b[at] & 0x80 ? 14 : 18;
    r.ddp = hex(b.subarray(at, at + n));
    at += n;
  }
  if (r.hdrct & R) {
    r.rdmap = hex(b.subarray(at, at + 28));
    at += 28;
  }
  r.rest = b.length - at;
  return r;
}

// ------------------------------------------------------------------ the rig

export interface Rig {
  g: Graph;
  pool: BufferPool;
  clock: ReturnType<typeof manualClock>;
  drv: ListDriver;
  ifs: Interfaces;
  rdma: Rdma;
  pd: Pd;
  scq: Cq;
  rcq: Cq;
  qp: Qp;
  mtu: number;
  /** Frames in (each is its own rx burst when given in separate calls), passes until idle; the packets out. */
  feed(...dgrams: (number[] | { payload: number[]; src?: string; sport?: number; dport?: number })[]): Out[];
  /** Run passes until idle (after posting work requests); the packets out. */
  run(): Out[];
  /** Move the clock by `ms` in `stepMs` steps, running the graph after each; the packets out. */
  advance(ms: number, stepMs?: number): Out[];
  mr(len: number, access: string[]): Mr;
  post(req: SendRequest): void;
  recv(req: RecvRequest): void;
  err(node: string, name: string): number;
  close(): void;
}

export function rig(
  o: { rdma?: RdmaOptions; mtu?: number; qp?: Partial<QpInit>; psn?: { rq: number; sq?: number } } = {},
): Rig {
  const mtu = o.mtu ?? 1500;
  const clock = manualClock();
  const pool = memPool(1024, 2048);
  const g = new Graph({ pool, clock, timerTickNs: 100_000 });
  const net = registerL2L4(g);
  const ifs = new Interfaces(g);
  const drv = new ListDriver('tst0', US_MAC, mtu);
  const itf = ifs.add(drv);
  net.addInterface({
    index: itf.index,
    name: 'tst0',
    mac: US_MAC,
    address: `${US_IP}/24`,
    mtu,
    output: itf.output.name,
    neighbors: [{ address: PEER_IP, mac: PEER_MAC }],
  });
  // Every pass that takes data acknowledges it (ack-delay-us 0) unless the test says otherwise:
  // the tests read each pass's packets.
  const rdma = registerRdma(g, net, {
    portRange: [20000, 20099],
    ...o.rdma,
    trp: { ackDelayUs: 0, ...o.rdma?.trp },
  });
  g.build();
  const pd = rdma.createPd();
  const scq = rdma.createCq(1024),
    rcq = rdma.createCq(1024);
  const qp = rdma.createQp({ pd, sendCq: scq, recvCq: rcq, maxSendWr: 256, maxRecvWr: 256, port: QPN, ...o.qp });
  rdma.modifyQp(qp, { state: 'init' });
  // The test plays the peer from PSN 0 both ways (the QP's own initial PSN is random otherwise).
  rdma.modifyQp(qp, { state: 'rtr', remote: { address: PEER_IP, port: PEER_PORT }, rqPsn: o.psn?.rq ?? 0 });
  // With psn given but no sq, the QP keeps its own random initial PSN (qp.isn).
  rdma.modifyQp(qp, { state: 'rts', sqPsn: o.psn === undefined ? 0 : o.psn.sq });
  const collect = (from: number): Out[] =>
    drv.tx.slice(from).map((f, k) => {
      const e = parseEth(f);
      assert.is(e.type, 0x0800, 'IPv4');
      assert.is(e.dst, PEER_MAC);
      const ip = parseIp4(e.payload);
      assert.ok(ip.checksumOk, 'IPv4 header checksum');
      assert.is(ip.proto, 17);
      assert.is(ip.frag & 0x4000, 0x4000, 'DF set');
      assert.ok(ip.totalLength <= mtu, `datagram of ${ip.totalLength} bytes within the MTU ${mtu}`);
      const u = parseUdp(ip);
      assert.ok(u.checksumOk, 'UDP checksum');
      const p = u.payload;
      assert.ok(p.length >= 10, 'a TRP header');
      const op16 = (p[8] << 8) | p[9];
      return {
        t: stamps[from + k],
        sport: u.sport,
        dport: u.dport,
        dst: ip.dst,
        psn: u32(p, 0),
        ack: u32(p, 4),
        op: op16 >>> 12,
        low: op16 & 0xfff,
        body: p.subarray(10),
      };
    });
  const stamps: number[] = [];
  const spin = () => {
    for (let k = 0; k < 200; k++) {
      const w = g.runPass();
      while (stamps.length < drv.tx.length) stamps.push(clock.t);
      if (w === 0 && drv.rx.length === 0) return;
    }
    throw new Error('the graph did not go idle');
  };
  const r: Rig = {
    g,
    pool,
    clock,
    drv,
    ifs,
    rdma,
    pd,
    scq,
    rcq,
    qp,
    mtu,
    feed(...dgrams) {
      const before = drv.tx.length;
      for (const d of dgrams) {
        const x = Array.isArray(d) ? { payload: d } : d;
        drv.rx.push({
          bytes: udpFrame({
            src: x.src ?? PEER_IP,
            dst: US_IP,
            sport: x.sport ?? PEER_PORT,
            dport: x.dport ?? QPN,
            payload: x.payload,
          }),
        });
      }
      spin();
      return collect(before);
    },
    run() {
      const before = drv.tx.length;
      spin();
      return collect(before);
    },
    advance(ms, stepMs = 0.5) {
      const before = drv.tx.length;
      for (let t = 0; t < ms - 1e-9; t += stepMs) {
        clock.advance(stepMs * 1e6);
        spin();
      }
      return collect(before);
    },
    mr: (len, access) => rdma.regMr(pd, len, access),
    post: (req) => rdma.postSend(qp, req),
    recv: (req) => rdma.postRecv(qp, req),
    err: (node, name) => g.errorCount(node, name),
    close() {
      spin();
      ifs.closeAll();
      assert.is(pool.available(), pool.count, 'no buffer leaked');
    },
  };
  // RTS with nothing to do sends nothing.
  assert.equal(r.run(), []);
  return r;
}

/** Every packet goes from the QP's port to the peer's. */
export function fromQp(out: Out[]): void {
  for (const p of out) {
    assert.is(p.sport, QPN);
    assert.is(p.dport, PEER_PORT);
    assert.is(p.dst, PEER_IP);
    assert.is(p.low, 0, 'reserved opcode bits sent as 0');
  }
}

export function isPureAck(p: Out): boolean {
  return p.op === TRP.DATA && p.body.length === 0;
}

export const polls = (cq: Cq) => cq.poll(1000);
export const summary = (cs: Completion[]) => cs.map((c) => `${String(c.wrId)}:${c.opcode}:${c.status}:${c.byteLen}`);
export const ALL = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];

/** Segment payload bytes per datagram: MTU - IPv4 20 - UDP 8 - TRP 10 - DDP header. */
export const untaggedMtu = (mtu: number) => mtu - 20 - 8 - 10 - 18;
export const taggedMtu = (mtu: number) => mtu - 20 - 8 - 10 - 14;
