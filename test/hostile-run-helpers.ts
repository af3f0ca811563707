/**
 * The run of test/hostile-frames.test.ts, in a worker thread (so a frame that never ends can be
 * stopped and shown): one stack with a connected QP, a listener and work in flight takes
 * seeded hostile frames (test/hostile-helpers.ts) one at a time, each followed by graph passes
 * until the stack is idle. Each frame must be taken without an exception and end counted, and
 * the work it causes is counted, never timed: frames transmitted, pool allocations, completions,
 * packets through nodes and node dispatches, timers started and graph passes. Each count must
 * stay within a bound computed, before the frame, from the stack's own state (its QPs' windows
 * and queues, its IRD, its MRs, the neighbor table's hold limit, the graph's nodes), never
 * from anything the peer sent: a frame over one fails with its hex dump and which count went
 * over which bound. A UD QP beside it takes hostile datagrams, its receives now posted, now run
 * out; each datagram ud-input takes must end in exactly one of its counters. Afterwards the stack
 * answers a ping and a good RDMA exchange, the UD QP takes a good datagram (GRH, message,
 * source QPN and immediate checked), and every buffer is back in the pool. Before each frame the worker writes the frame and its index into
 * the shared `beat` buffer.
 *
 * bench/hostile.ts times the same stack and frames (HostileRig) against good frames.
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import * as assert from 'uvu/assert';
import { FRAME_SIZE, Graph, type NodeRuntime } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { registerL2L4, type Netstack } from '../nodes/netstack.ts';
import { registerRdma, type Rdma } from '../nodes/rdma/stack.ts';
import { QpState, RxEvent, type Qp } from '../nodes/rdma/qp.ts';
import { Access, WrOpcode, type Cq, type Mr, type Pd } from '../nodes/rdma/verbs.ts';
import type { Listener } from '../nodes/rdma/cm.ts';
import { sidrAnswer } from '../nodes/rdma/sidr.ts';
import { memPool } from './helpers.ts';
import { ListDriver, manualClock, PEER_IP, PEER_MAC, US_IP, US_MAC } from './l2l4-helpers.ts';
import {
  ethFrame,
  hexDump,
  hostileFrame,
  ip4Packet,
  Rng,
  udpDgram,
  type Hostile,
  type Target,
} from './hostile-helpers.ts';

export interface HostileRun {
  seed: number;
  frames: number;
  /** BEAT_BYTES shared bytes: see Beat. */
  beat: SharedArrayBuffer;
}

/** The heartbeat: Int32 [0] frame index (-1 before, -2 the good exchange, -3 done), [1] its length, then its kind (64 bytes) and bytes. */
export const BEAT_BYTES = 8 + 64 + 2048;
export function readBeat(sab: SharedArrayBuffer): { index: number; kind: string; bytes: Uint8Array } {
  const h = new Int32Array(sab, 0, 2);
  const u8 = new Uint8Array(sab);
  const len = Math.min(Atomics.load(h, 1), 2048);
  return {
    index: Atomics.load(h, 0),
    kind: Buffer.from(u8.subarray(8, 72)).toString('utf8').replace(/\0+$/, ''),
    bytes: u8.slice(72, 72 + len),
  };
}
export const PEER_PORT = 31000;
const LISTEN = 25000;
/** A datagram service (SIDR) listener: holds some requests, refuses others (nodes/rdma/sidr.ts). */
const SIDR_LISTEN = 25001;
/** The group the rig's UD QP joins (hostile datagrams to it and to others). */
const MC_GROUP = '239.1.1.1';
const SIDR_BACKLOG = 8;
const RECEIVE_NODES = [
  'ethernet-input',
  'arp-input',
  'ip4-input',
  'igmp4-input',
  'icmp4-echo',
  'udp4-input',
  'trp-input',
  'cm-input',
  'ddp-input',
  'rdmap-input',
  'qp-dispatch',
  'ud-input',
];
/** The UD QP's Q_Key (the hostile datagrams carry it or another). */
const UD_QKEY = 0x1234abcd;
/** ud-input's counters: each datagram it takes ends in exactly one. */
const UD_ENDS = [
  'delivered',
  'not_ready',
  'bad_header',
  'bad_qkey',
  'no_receive',
  'too_long',
  'no_member',
  'truncated',
  'bad_opcode',
  'not_group',
];
const ALL = ['local-write', 'remote-write', 'remote-read', 'remote-atomic', 'remote-invalidate'];
const PEER_MAC_BYTES = Uint8Array.from(PEER_MAC.split(':').map((x) => parseInt(x, 16)));
const PEER_IP_BYTES = Uint8Array.from(PEER_IP.split('.').map(Number));

export interface Stack {
  g: Graph;
  clock: ReturnType<typeof manualClock>;
  drv: ListDriver;
  net: Netstack;
  rdma: Rdma;
  pd: Pd;
  scq: Cq;
  rcq: Cq;
  mrs: Mr[];
  rbuf: Mr;
  src: Mr;
  /** The UD QP's receive buffers (16 of 2048 bytes). */
  udBuf: Mr;
  /**
   * Counted since creation: pool allocations (calls and buffers; not those of the driver
   * receiving a frame, which are the frame itself) and timers started (the graph's wheel).
   */
  work: { allocCalls: number; allocBuffers: number; timers: number };
}

export function stack(): Stack {
  const clock = manualClock();
  const pool = memPool(4096, 2048);
  const work = { allocCalls: 0, allocBuffers: 0, timers: 0 };
  // Every allocation goes through pool.alloc (allocOne and writePacket call it too).
  let inRx = false;
  const alloc = pool.alloc.bind(pool);
  pool.alloc = (out, off, n) => {
    const got = alloc(out, off, n);
    if (!inRx) {
      work.allocCalls++;
      work.allocBuffers += got;
    }
    return got;
  };
  const g = new Graph({ pool, clock, timerTickNs: 100_000 });
  const startTimer = g.timers.start.bind(g.timers);
  g.timers.start = (nowNs, delayNs, owner, user) => {
    work.timers++;
    return startTimer(nowNs, delayNs, owner, user);
  };
  const net = registerL2L4(g);
  const ifs = new Interfaces(g);
  const drv = new ListDriver('tst0', US_MAC, 1500);
  const rxBurst = drv.rxBurst.bind(drv);
  drv.rxBurst = (q, out, max) => {
    inRx = true;
    try {
      return rxBurst(q, out, max);
    } finally {
      inRx = false;
    }
  };
  const itf = ifs.add(drv);
  net.addInterface({
    index: itf.index,
    name: 'tst0',
    mac: US_MAC,
    address: `${US_IP}/24`,
    mtu: 1500,
    output: itf.output.name,
    neighbors: [{ address: PEER_IP, mac: PEER_MAC }],
  });
  const rdma = registerRdma(g, net, { portRange: [20000, 20099], cmBacklog: 16 });
  g.build();
  const pd = rdma.createPd();
  const s: Stack = {
    g,
    clock,
    drv,
    net,
    rdma,
    pd,
    scq: rdma.createCq(4096),
    rcq: rdma.createCq(4096),
    mrs: [
      rdma.regMr(pd, 65536, ALL),
      rdma.regMr(pd, 4096, ['local-write']),
      rdma.regMr(pd, 8192, ['local-write', 'remote-read']),
    ],
    rbuf: rdma.regMr(pd, 64 * 2048, ['local-write']),
    src: rdma.regMr(pd, 65536, ['local-write']),
    udBuf: rdma.regMr(pd, 16 * 2048, ['local-write']),
    work,
  };
  rdma.listen(LISTEN, () => ({
    qp: rdma.createQp({ pd, sendCq: s.scq, recvCq: s.rcq, maxSendWr: 16, maxRecvWr: 16 }),
  }));
  // Every other request held for the application (answered in app()), the rest refused.
  let flip = 0;
  rdma.listen(SIDR_LISTEN, () => ({ reject: true }), { backlog: SIDR_BACKLOG, sidr: () => (flip++ & 1) === 0 });
  return s;
}

/** A QP in RTS toward PEER_IP:`peerPort` on a free port, receive and send PSNs as given. */
export function rtsQp(s: Stack, peerPort: number, rq: number, sq: number, port?: number): Qp {
  const qp = s.rdma.createQp({
    pd: s.pd,
    sendCq: s.scq,
    recvCq: s.rcq,
    maxSendWr: 16,
    maxRecvWr: 16,
    ...(port === undefined ? {} : { port }),
  });
  s.rdma.modifyQp(qp, { state: 'init' });
  s.rdma.modifyQp(qp, { state: 'rtr', remote: { address: PEER_IP, port: peerPort }, rqPsn: rq });
  s.rdma.modifyQp(qp, { state: 'rts', sqPsn: sq });
  return qp;
}

/** A UD QP in RTS with Q_Key UD_QKEY, its completions on the stack's CQs. */
export function udQp(s: Stack): Qp {
  const qp = s.rdma.createQp({ pd: s.pd, sendCq: s.scq, recvCq: s.rcq, type: 'ud', maxSendWr: 16, maxRecvWr: 16 });
  s.rdma.modifyQp(qp, { state: 'init', qkey: UD_QKEY });
  s.rdma.modifyQp(qp, { state: 'rtr' });
  s.rdma.modifyQp(qp, { state: 'rts' });
  return qp;
}

/**
 * The UD QP's receives: half the time topped up to 8 (mostly room for a full datagram, now and
 * then a small one a long message overflows), else left to run out (datagrams then find none).
 */
function udReceives(s: Stack, ud: Qp, rng: Rng): void {
  if (rng.chance(0.5)) return;
  while (ud.rqPosted - ud.rqDone < 8) {
    const length = rng.chance(0.8) ? 2048 : 40 + rng.int(200);
    // The wrId is the receive's offset (the good datagram afterwards is checked where it landed).
    const offset = (ud.rqPosted % 16) * 2048;
    s.rdma.postRecv(ud, { wrId: offset, sg: [{ mr: s.udBuf, offset, length }] });
  }
}

/** Passes spin() runs at most before it gives up (a frame whose work never ends). */
const SPIN_MAX = 100;

/** Run passes until the graph is idle (a frame in, what it causes out); returns the passes run. */
export function spin(s: Stack): number {
  for (let k = 0; k < SPIN_MAX; k++) if (s.g.runPass() === 0 && s.drv.rx.length === 0) return k + 1;
  throw new Error(`the graph did not go idle in ${SPIN_MAX} passes`);
}

/** The application's side: completions taken, receives and sends kept posted, a QP in ERROR replaced. */
function app(s: Stack, qp: Qp, rng: Rng, seq: { n: number }): Qp {
  s.scq.poll(4096);
  s.rcq.poll(4096);
  // The datagram service requests held: served by the UD QP, or refused (their answers are
  // remembered for repeats, at most the backlog of them).
  const l = s.rdma.cm.listeners.get(SIDR_LISTEN);
  for (const key of [...(l?.sidr?.held.keys() ?? [])])
    sidrAnswer(
      s.rdma.cm,
      l as Listener,
      key,
      rng.chance(0.5) ? 0 : 2,
      1 + rng.int(65535),
      UD_QKEY,
      new Uint8Array(rng.int(8)),
    );
  if (qp.destroyed || qp.state === QpState.ERROR) {
    if (!qp.destroyed) s.rdma.destroyQp(qp);
    qp = rtsQp(s, PEER_PORT, rng.u32(), rng.u32());
    seq.n++;
  }
  while (qp.rqPosted - qp.rqDone < 8)
    s.rdma.postRecv(qp, { wrId: 0, sg: [{ mr: s.rbuf, offset: (qp.rqPosted % 16) * 2048, length: 2048 }] });
  if (qp.sqTail - qp.sqHead < 8) {
    const len = 1 + rng.int(3000);
    if (rng.chance(0.5)) s.rdma.postSend(qp, { wrId: 0, opcode: 'send', sg: [{ mr: s.src, offset: 0, length: len }] });
    else
      s.rdma.postSend(qp, {
        wrId: 0,
        opcode: 'write',
        sg: [{ mr: s.src, offset: 0, length: len }],
        remote: { stag: rng.u32(), offset: 0 },
      });
  }
  return qp;
}

function aim(t: Target, qp: Qp): void {
  t.qpn = qp.qpn;
  t.rcvNxt = qp.rcvNxt;
  t.sndUna = qp.sndUna;
  t.sndNxt = qp.sndNxt;
  t.window = qp.W;
  t.sendMsn = qp.rqDone + 1;
  t.readMsn = qp.readExpect;
}

/** ud-input's counters, in UD_ENDS's order. */
const udEnds = (s: Stack) => UD_ENDS.map((n) => s.g.errorCount('ud-input', n));

/**
 * One stack taking seeded hostile frames: `next(i)` does the application's side (every 32
 * frames) and moves the clock so timers run (every 64), then makes frame `i` aimed at the QP as
 * it is now; `feed` gives it to the stack and runs passes until it is idle.
 */
export class HostileRig {
  readonly s: Stack;
  readonly rng: Rng;
  qp: Qp;
  /** A UD QP the datagrams aim at (a peer cannot end it). */
  readonly ud: Qp;
  /** QPs replaced (the hostile frames put them in ERROR). */
  readonly replaced = { n: 0 };
  private readonly t: Target;

  constructor(seed: number) {
    this.s = stack();
    this.rng = new Rng(seed);
    this.qp = rtsQp(this.s, PEER_PORT, this.rng.u32(), this.rng.u32());
    this.ud = udQp(this.s);
    this.s.rdma.attachMcast(this.ud, MC_GROUP);
    this.t = {
      qpn: 0,
      peerPort: PEER_PORT,
      rcvNxt: 0,
      sndUna: 0,
      sndNxt: 0,
      window: 0,
      sendMsn: 1,
      readMsn: 1,
      stags: this.s.mrs.map((m) => m.stag),
      mrLen: 65536,
      listenPort: LISTEN,
      sidrPort: SIDR_LISTEN,
      mcGroup: Uint8Array.from(MC_GROUP.split('.').map(Number)),
      mcPort: this.s.rdma.deviceAttr().multicastPort,
      udQpn: this.ud.qpn,
      udQkey: UD_QKEY,
    };
  }

  next(i: number): Hostile {
    const s = this.s;
    if ((i & 31) === 0) {
      this.qp = app(s, this.qp, this.rng, this.replaced);
      udReceives(s, this.ud, this.rng);
      spin(s);
    }
    if ((i & 63) === 0) {
      s.clock.advance(200_000);
      spin(s);
      s.drv.tx.length = 0;
      s.drv.txSegments.length = 0;
      s.drv.txFlags.length = 0;
    }
    aim(this.t, this.qp);
    return hostileFrame(this.rng, this.t);
  }

  /** One frame in, passes until idle; returns the passes. */
  feed(h: Hostile): number {
    this.s.drv.rx.push({ bytes: h.bytes, segments: h.segments });
    return spin(this.s);
  }
}

export const frameText = (h: Hostile, i: number, seed: number) =>
  `frame ${i} of seed ${seed} (${h.kind}, ${h.bytes.length} bytes${h.segments ? `, chain cuts ${h.segments.join(',')}` : ''}):\n${hexDump(h.bytes)}`;

// ---------------------------------------------------------------- good frames (the exchange, the benchmark's baseline)

/** An ARP reply from the peer (who it is: hostile ARPs may have moved a dynamic entry). */
export function arpReplyFrame(s: Stack): Uint8Array {
  const a = Uint8Array.from([0, 1, 8, 0, 6, 4, 0, 2, ...PEER_MAC_BYTES, ...PEER_IP_BYTES, ...s.drv.mac]);
  const b = new Uint8Array(28);
  b.set(a, 0);
  b.set(US_IP.split('.').map(Number), 24);
  return ethFrame(s.drv.mac, PEER_MAC_BYTES, 0x0806, b);
}

/** An ICMP echo request from the peer (identifier 7, sequence `seq`). */
export function pingFrame(s: Stack, seq = 1): Uint8Array {
  const echo = Uint8Array.from([8, 0, 0, 0, 0, 7, (seq >> 8) & 0xff, seq & 0xff, 1, 2, 3, 4]);
  let ck = 0;
  for (let k = 0; k < echo.length; k += 2) ck += (echo[k] << 8) | echo[k + 1];
  while (ck > 0xffff) ck = (ck & 0xffff) + (ck >>> 16);
  echo[2] = (~ck >> 8) & 0xff;
  echo[3] = ~ck & 0xff;
  return ethFrame(s.drv.mac, PEER_MAC_BYTES, 0x0800, ip4Packet(1, echo));
}

const be32 = (x: number) => [(x >>> 24) & 0xff, (x >>> 16) & 0xff, (x >>> 8) & 0xff, x & 0xff];

/** A TRP datagram from the peer's `peerPort` to `qpn`: PSN, cumulative ACK and the DDP/RDMAP bytes. */
export function trpFrame(
  s: Stack,
  peerPort: number,
  qpn: number,
  psn: number,
  ack: number,
  body: number[],
): Uint8Array {
  const p = new Uint8Array(10 + body.length);
  new DataView(p.buffer).setUint32(0, psn);
  new DataView(p.buffer).setUint32(4, ack);
  p.set(body, 10);
  return ethFrame(s.drv.mac, PEER_MAC_BYTES, 0x0800, ip4Packet(17, udpDgram(PEER_IP_BYTES, peerPort, qpn, p)));
}

/** A DATAGRAM from the peer's `sport` to UD QP `qpn`: Q_Key, the immediate (flag IMM) and the message. */
export function datagramFrame(s: Stack, sport: number, qpn: number, qkey: number, imm: number, message: number[]) {
  const p = new Uint8Array(10 + message.length);
  const dv = new DataView(p.buffer);
  dv.setUint32(0, qkey);
  dv.setUint32(4, imm);
  dv.setUint16(8, (6 << 12) | 0x001);
  p.set(message, 10);
  return ethFrame(s.drv.mac, PEER_MAC_BYTES, 0x0800, ip4Packet(17, udpDgram(PEER_IP_BYTES, sport, qpn, p)));
}

/** A tagged RDMA Write segment (last) of `payload` at `to` in `stag`. */
export function writeBody(stag: number, to: number, payload: number[]): number[] {
  return [0xc1, 0x40, ...be32(stag), 0, 0, 0, 0, ...be32(to), ...payload];
}

/** An untagged Send segment (last) of `payload`, message `msn`, offset 0. */
export function sendBody(msn: number, payload: number[]): number[] {
  return [0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, ...be32(msn), 0, 0, 0, 0, ...payload];
}

// ---------------------------------------------------------------- the work of one frame, and its bounds

/** What one frame made the stack do. */
export interface Work {
  /** Frames the driver transmitted. */
  tx: number;
  /** pool.alloc calls and the buffers they gave (the frame's own receive not counted). */
  allocCalls: number;
  allocBuffers: number;
  /** Completions added to the CQs. */
  completions: number;
  /** Packets through nodes (the runtime counters' vectors, every node) and dispatches of internal nodes (calls). */
  packets: number;
  dispatches: number;
  /** Timers started on the graph's wheel. */
  timers: number;
  /** Graph passes until idle (the last one found nothing). */
  passes: number;
}
const COUNTS = [
  'tx',
  'allocCalls',
  'allocBuffers',
  'completions',
  'packets',
  'dispatches',
  'timers',
  'passes',
] as const;

/** Counters now (passes are spin()'s answer). */
function workNow(s: Stack): Work {
  let packets = 0,
    dispatches = 0;
  for (const rt of s.g.nodes) {
    const c = s.g.nodeCounters(rt.name);
    packets += c.vectors;
    if (rt.type === 'internal') dispatches += c.calls;
  }
  return {
    tx: s.drv.tx.length,
    allocCalls: s.work.allocCalls,
    allocBuffers: s.work.allocBuffers,
    completions: s.scq.length + s.scq.overflowed.length + s.rcq.length + s.rcq.overflowed.length,
    packets,
    dispatches,
    timers: s.work.timers,
    passes: 0,
  };
}

/** What the transmit bound of one QP is made of. */
interface QpOut {
  qpn: number;
  /** Sent and not acknowledged: each may go again once (a SACK, the ACK after a timeout's probe). */
  inFlight: number;
  /** Segments still to send: of the send queue's work requests, of the Read Responses under way. */
  sq: number;
  resp: number;
  /**
   * Of the responses this frame may start: the Read/Atomic Requests waiting above a hole it may
   * fill and its own, within free IRD slots, each at most the PD's largest remote-readable MR.
   */
  newResp: number;
  /** New data is also held to the TRP window (packets in flight; qp.W is the ring, window + 1 rounded up). */
  window: number;
  /** Received ranges above the cumulative ACK (a SACK each; the frame may add one). */
  ranges: number;
  /** inFlight + min(window, sq + resp + newResp + 1) + 1 ACK + ranges + 1. */
  out: number;
}

/** The bounds of one frame, from the stack's state before it. */
interface Bounds {
  work: Work;
  /** The QP with the largest transmit bound (the frame reaches one QP: it may be that one). */
  qp: QpOut | null;
  holdMax: number;
  longestPath: number;
  inputs: number;
  timerOwners: number;
  sqRq: number;
}

/** Most nodes one packet can pass through: the longest path of the node graph with no node twice. */
function longestPath(g: Graph): number {
  let best = 0;
  const on = new Set<NodeRuntime>();
  const walk = (rt: NodeRuntime, depth: number): void => {
    on.add(rt);
    if (depth > best) best = depth;
    for (const nx of rt.nextNodes) if (!on.has(nx)) walk(nx, depth + 1);
    on.delete(rt);
  };
  for (const rt of g.nodes) walk(rt, 1);
  return best;
}
const pathCache = { arcs: -1, length: 0 };
function pathLength(g: Graph): number {
  let arcs = 0;
  for (const rt of g.nodes) arcs += rt.nextNodes.length;
  if (arcs !== pathCache.arcs) {
    pathCache.arcs = arcs;
    pathCache.length = longestPath(g);
  }
  return pathCache.length;
}

/** Segments of the largest Read Response the QP can owe: its PD's largest remote-readable MR (an Atomic: one). */
function readSegments(s: Stack, qp: Qp): number {
  let len = 0;
  for (const mr of s.rdma.mrsByHandle.values())
    if (mr.pd === qp.pd && mr.valid && mr.access & Access.REMOTE_READ) len = Math.max(len, mr.length);
  return Math.max(1, Math.ceil(len / qp.mtuTagged));
}

function qpOut(s: Stack, qp: Qp): QpOut {
  const inFlight = Math.max(0, qp.inFlight);
  let sq = 0;
  for (let i = qp.sqNext; i !== qp.sqTail; i++) {
    const wr = qp.sq[i % qp.sq.length];
    if (wr.opcode >= WrOpcode.READ) sq++;
    else {
      const tagged = wr.opcode === WrOpcode.WRITE || wr.opcode === WrOpcode.WRITE_WITH_IMM;
      sq += Math.max(1, Math.ceil((wr.length - wr.sent) / (tagged ? qp.mtuTagged : qp.mtuUntagged)));
      if (wr.opcode === WrOpcode.WRITE_WITH_IMM && !wr.immSent) sq++;
    }
  }
  let resp = 0;
  for (let r = qp.respNext; r !== qp.respTail; r++) {
    const x = qp.resp[r & qp.respMask];
    resp += x.atomic ? 1 : Math.max(1, Math.ceil((x.length - x.sent) / qp.mtuTagged));
  }
  // The receive window above the delivery point: requests waiting for a hole to fill (this
  // frame may fill it and start them, IRD permitting) and the ranges a SACK reports.
  let pending = 0,
    ranges = 0,
    inRange = false;
  for (let p = qp.deliverNext; p !== qp.rcvHigh; p = (p + 1) >>> 0) {
    const sl = p & qp.wMask;
    const got = qp.rxGot[sl] === 1;
    if (got && (qp.rxEv[sl] === RxEvent.READ_REQUEST || qp.rxEv[sl] === RxEvent.ATOMIC_REQUEST)) pending++;
    if (((p - qp.rcvNxt) | 0) >= 0) {
      if (got && !inRange) ranges++;
      inRange = got;
    }
  }
  const freeIrd = Math.max(0, qp.ird - (qp.respTail - qp.respHead));
  const newResp = Math.min(freeIrd, pending + 1) * readSegments(s, qp);
  const window = s.rdma.core.window;
  return {
    qpn: qp.qpn,
    inFlight,
    sq,
    resp,
    newResp,
    window,
    ranges,
    out: inFlight + Math.min(window, sq + resp + newResp + 1) + 1 + ranges + 1,
  };
}

/**
 * The most work one frame may cause, from the state now. A frame reaches one QP (by its port)
 * and one protocol node; what it can make the stack send:
 * - one answer (ARP reply, echo reply, CM ACCEPT/REJECT, a FIN sent again) and an ARP request
 *   for that answer's next hop when unresolved;
 * - the packets held for one neighbor an ARP resolves (at most the table's holdMax);
 * - from the QP it reaches (the largest bound of any QP): QpOut.out.
 * Every packet it makes takes one pool allocation of one buffer (an MTU frame fits one
 * buffer), passes each node at most once (the longest path of the graph), and one dispatch
 * carries at least one packet. Completions: at most every work request the QP has
 * outstanding (a flush). Timers: one per node that owns timers (an RTO, a half-open reap, a
 * neighbor entry). Passes: one per input node a frame's effect is handed to, one more per
 * FRAME_SIZE packets ddp-output sends, and the idle pass.
 */
function frameBounds(s: Stack): Bounds {
  let qp: QpOut | null = null,
    sqRq = 0;
  for (const q of s.rdma.qpsByQpn.values()) {
    const o = qpOut(s, q);
    if (qp === null || o.out > qp.out) qp = o;
    sqRq = Math.max(sqRq, q.sqDepth + q.rqDepth);
  }
  const holdMax = s.net.neighbors.holdMax;
  const tx = 2 + holdMax + (qp?.out ?? 0);
  const bufs = Math.ceil((s.drv.mtu + 14) / s.g.pool.dataSize);
  const L = pathLength(s.g);
  const inputs = s.g.nodes.filter((rt) => rt.type === 'input').length;
  const timerOwners = s.g.nodes.filter((rt) => typeof rt.reg.timer === 'function').length;
  return {
    work: {
      tx,
      allocCalls: tx,
      allocBuffers: tx * bufs,
      completions: sqRq,
      packets: L * (1 + tx),
      dispatches: L * (1 + tx),
      timers: timerOwners,
      passes: inputs + Math.ceil(tx / FRAME_SIZE) + 1,
    },
    qp,
    holdMax,
    longestPath: L,
    inputs,
    timerOwners,
    sqRq,
  };
}

/** How a bound was computed (for a failure message). */
function boundText(b: Bounds, k: (typeof COUNTS)[number]): string {
  const q = b.qp;
  const qpText = q
    ? `QP ${q.qpn}: ${q.inFlight} in flight + min(window ${q.window}, ${q.sq} send-queue + ${q.resp} response + ${q.newResp} new-response segments + 1 Terminate) + 1 ACK + ${q.ranges} SACK ranges + 1`
    : 'no QP';
  const tx = `2 (an answer, an ARP request) + holdMax ${b.holdMax} + [${qpText}]`;
  switch (k) {
    case 'tx':
    case 'allocCalls':
      return tx;
    case 'allocBuffers':
      return `(${tx}) x buffers per MTU frame`;
    case 'packets':
    case 'dispatches':
      return `longest path ${b.longestPath} nodes x (1 + ${b.work.tx} packets made)`;
    case 'completions':
      return `most outstanding send + receive work requests of a QP (${b.sqRq})`;
    case 'timers':
      return `nodes owning timers (${b.timerOwners})`;
    case 'passes':
      return `${b.inputs} input nodes + ceil(${b.work.tx} / ${FRAME_SIZE}) + 1 idle pass`;
  }
}

/** One run; throws (an assertion) on the first failure; returns report lines. */
export function runHostile(o: HostileRun): string[] {
  const { seed: SEED, frames: FRAMES } = o;
  const report: string[] = [];
  const bh = new Int32Array(o.beat, 0, 2),
    bu8 = new Uint8Array(o.beat);
  const beat = (i: number, h: Hostile | null) => {
    if (h !== null) {
      bu8.fill(0, 8, 72);
      bu8.set(Buffer.from(h.kind.slice(0, 64), 'utf8').subarray(0, 64), 8);
      bu8.set(h.bytes.subarray(0, 2048), 72);
      Atomics.store(bh, 1, h.bytes.length);
    }
    Atomics.store(bh, 0, i);
  };
  const rig = new HostileRig(SEED);
  const s = rig.s;
  const pool = s.g.pool;
  const ethBefore = s.g.nodeCounters('ethernet-input').vectors;
  let fed = 0;
  let minFree = pool.available();
  const over: string[] = [];
  /** Per count: the most one frame did, the bound it had then, and the least room any frame left. */
  const seen = Object.fromEntries(COUNTS.map((k) => [k, { max: -1, boundAtMax: 0, minRoom: Infinity }]));
  const started = Date.now();
  for (let i = 0; i < FRAMES; i++) {
    const h = rig.next(i);
    beat(i, h);
    const b = frameBounds(s);
    const w0 = workNow(s);
    let passes: number;
    try {
      passes = rig.feed(h);
    } catch (e) {
      throw new Error(`${(e as Error).message}\n${frameText(h, i, SEED)}`);
    }
    fed++;
    if (pool.available() < minFree) minFree = pool.available();
    const w1 = workNow(s);
    const bad: string[] = [];
    for (const k of COUNTS) {
      const v = k === 'passes' ? passes : w1[k] - w0[k];
      const m = seen[k];
      if (v > m.max) {
        m.max = v;
        m.boundAtMax = b.work[k];
      }
      m.minRoom = Math.min(m.minRoom, b.work[k] - v);
      if (v > b.work[k]) bad.push(`${k} ${v} > bound ${b.work[k]} = ${boundText(b, k)}`);
    }
    if (bad.length > 0) {
      const qp = rig.qp;
      over.push(
        `${bad.join('; ')} (QP ${qp.qpn} state ${qp.state}${qp.destroyed ? ' destroyed' : ''}, ${qp.sqTail - qp.sqHead} sends, ${qp.rqPosted - qp.rqDone} receives outstanding): ${frameText(h, i, SEED)}`,
      );
      if (over.length >= 3) break;
    }
  }
  const ms = Date.now() - started;
  assert.ok(over.length === 0, `frames whose work went over its bound:\n${over.join('\n')}`);
  assert.is(s.drv.rx.length, 0);
  assert.is(s.g.nodeCounters('ethernet-input').vectors - ethBefore, fed, 'every frame entered the graph once');
  const perNode = RECEIVE_NODES.map((n) => [n, s.g.nodeCounters(n).vectors] as const);
  for (const [n, v] of perNode)
    assert.ok(v > 0, `${n} got frames (${perNode.map(([a, b]) => `${a} ${b}`).join(', ')})`);
  const errs = s.g
    .errorSnapshot()
    .rows.filter((r) => r.count > 0)
    .sort((a, b) => b.count - a.count);
  const counted = errs.reduce((a, r) => a + r.count, 0);
  report.push(
    `${fed} frames, seed ${SEED}, in ${ms} ms; ${rig.replaced.n} QPs replaced; fewest free buffers ${minFree} of ${pool.count}`,
  );
  report.push(
    `most work of one frame, of its bound then (least room any frame left): ${COUNTS.map((k) => `${k} ${seen[k].max} of ${seen[k].boundAtMax} (${seen[k].minRoom})`).join(', ')}`,
  );
  report.push(`per node: ${perNode.map(([a, b]) => `${a} ${b}`).join(', ')}`);
  report.push(
    `${counted} counted by ${errs.length} error counters, most: ${errs
      .slice(0, 8)
      .map((r) => `${r.node} "${r.reason}" ${r.count}`)
      .join('; ')}`,
  );
  assert.ok(counted > fed / 2, `most hostile frames are dropped and counted (${counted} of ${fed})`);
  // Every datagram ud-input took ended in exactly one of its counters.
  const ud = udEnds(s);
  const udIn = s.g.nodeCounters('ud-input').vectors;
  const toGroup = s.g.errorCount('ud-input', 'multicast');
  report.push(
    `ud-input: ${udIn} datagrams (${toGroup} to the joined group): ${UD_ENDS.map((n, k) => `${n} ${ud[k]}`).join(', ')}`,
  );
  // The rig's one member: a datagram to its group ends as one to the QP does.
  if (FRAMES >= 10_000) assert.ok(toGroup > 0, 'some datagrams reached the joined group');
  assert.is(
    ud.reduce((a, b) => a + b, 0),
    udIn,
    `each datagram ud-input took is counted once (${UD_ENDS.map((n, k) => `${n} ${ud[k]}`).join(', ')})`,
  );
  if (FRAMES >= 10_000)
    for (const n of [
      'delivered',
      'bad_header',
      'bad_qkey',
      'no_receive',
      'too_long',
      'truncated',
      'bad_opcode',
      'not_group',
    ])
      assert.ok(ud[UD_ENDS.indexOf(n)] > 0, `some datagrams ended as ${n}`);

  // ---------------------------------------------------------------- the stack still works
  s.drv.tx.length = 0;
  beat(-2, null);
  const good = (bytes: Uint8Array) => {
    s.drv.rx.push({ bytes });
    spin(s);
  };
  good(arpReplyFrame(s));
  good(pingFrame(s));
  assert.ok(
    s.drv.tx.some((f) => f[12] === 8 && f[13] === 0 && f[23] === 1 && f[34] === 0),
    'a ping is answered',
  );
  // RDMA: a fresh QP takes a Write and a Send from the peer and acknowledges both; our Send completes on the peer's ACK.
  if (!rig.qp.destroyed) s.rdma.destroyQp(rig.qp);
  const gq = rtsQp(s, PEER_PORT + 1, 1000, 5000);
  const target = s.rdma.regMr(s.pd, 4096, ['local-write', 'remote-write']);
  const inbox = s.rdma.regMr(s.pd, 4096, ['local-write']);
  s.rdma.postRecv(gq, { wrId: 'good-recv', sg: [{ mr: inbox, offset: 0, length: 4096 }] });
  s.scq.poll(4096);
  s.rcq.poll(4096);
  const trp = (psn: number, ack: number, body: number[]) => trpFrame(s, PEER_PORT + 1, gq.qpn, psn, ack, body);
  const payload = Array.from({ length: 100 }, (_, k) => (k * 7 + 3) & 0xff);
  good(trp(1000, 5000, writeBody(target.stag, 0, payload)));
  good(trp(1001, 5000, sendBody(1, payload.slice(0, 50))));
  s.rdma.postSend(gq, { wrId: 'good-send', opcode: 'send', sg: [{ mr: inbox, offset: 0, length: 10 }] });
  spin(s);
  s.clock.advance(2_000_000);
  spin(s);
  assert.equal(Array.from(target.memory.subarray(0, 100)), payload, 'the Write landed');
  const rc = s.rcq.poll(16);
  assert.equal(
    rc.map((c) => `${String(c.wrId)}:${c.status}:${c.byteLen}`),
    ['good-recv:success:50'],
  );
  const acks = s.drv.tx
    .filter((f) => f.length >= 52 && ((f[34] << 8) | f[35]) === gq.qpn)
    .map((f) => new DataView(f.buffer, f.byteOffset).getUint32(46));
  assert.ok(acks.includes(1002), `the QP acknowledged both segments (acks sent: ${acks.join(', ')})`);
  good(trp(1002, 5001, []));
  const sc = s.scq.poll(16);
  assert.equal(
    sc.map((c) => `${String(c.wrId)}:${c.status}`),
    ['good-send:success'],
  );

  // UD: the QP the datagrams aimed at takes a good one into a receive, GRH and all.
  const udq = rig.ud;
  assert.is(udq.state, QpState.RTS, 'no datagram ended the UD QP');
  s.rcq.poll(4096);
  if (udq.rqPosted - udq.rqDone === 0) {
    s.rdma.postRecv(udq, { wrId: 0, sg: [{ mr: s.udBuf, offset: 0, length: 2048 }] });
  }
  const message = Array.from({ length: 300 }, (_, k) => (k * 11 + 5) & 0xff);
  good(datagramFrame(s, PEER_PORT + 7, udq.qpn, UD_QKEY, 0xabcdef01, message));
  const uc = s.rcq.poll(16);
  assert.equal(
    uc.map((c) => [c.status, c.byteLen, c.srcQp, c.imm]),
    [['success', 40 + message.length, PEER_PORT + 7, 0xabcdef01]],
    'the UD QP took a good datagram',
  );
  const at = uc[0].wrId as number;
  assert.equal(Array.from(s.udBuf.memory.subarray(at + 40, at + 40 + message.length)), message, 'its message landed');
  assert.equal(
    Array.from(s.udBuf.memory.subarray(at + 32, at + 36)),
    Array.from(PEER_IP_BYTES),
    'the GRH names its source',
  );

  // ---------------------------------------------------------------- every buffer back
  s.rdma.destroyQp(udq);
  s.rdma.destroyQp(gq);
  s.rdma.unlisten(LISTEN);
  s.rdma.unlisten(SIDR_LISTEN);
  for (let k = 0; k < 100; k++) {
    s.clock.advance(100_000_000);
    spin(s);
  }
  s.drv.tx.length = 0;
  assert.is(pool.available(), pool.count, 'every buffer back in the pool');
  if (FRAMES >= 100_000) assert.ok(fed >= 100_000);
  beat(-3, null);
  return report;
}

if (!isMainThread && parentPort !== null && workerData?.hostile === true) {
  try {
    parentPort.postMessage({ ok: true, report: runHostile(workerData.run as HostileRun) });
  } catch (e) {
    parentPort.postMessage({ ok: false, message: (e as Error).message, stack: (e as Error).stack });
  }
}
