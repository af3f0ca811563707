/**
 * Two RDMA stacks back to back in one process: two graphs (one per stack, both run by the
 * adaptive loop on this thread), each with the L2–L4 nodes and the RDMA layer, static
 * neighbors, joined by a pipe pair (one buffer pool) or by a memif pair (link 'memif': A is a
 * zero-copy client with a memfd pool, B a server with its own pool, on an abstract socket;
 * `ready` resolves once the link is up). Plus helpers to connect a QP pair, poll completions
 * with a deadline, and fill/compare memory.
 */
import { BufferPool, Graph } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { createPipe } from '../drivers/pipe.ts';
import { MemifDriver } from '../drivers/memif.ts';
import { DpdkDriver } from '../drivers/dpdk.ts';
import { VerbsDriver } from '../drivers/ibverbs.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Driver } from '../drivers/driver.ts';
import { createPool } from '../graph/memory.ts';
import type { FaultConfig } from '../drivers/fault.ts';
import { type Netstack, registerL2L4 } from '../nodes/netstack.ts';
import { type QpInit, type Rdma, registerRdma, type RdmaOptions } from '../nodes/rdma/stack.ts';
import type { Completion, Cq, Mr, Pd } from '../nodes/rdma/verbs.ts';
import type { Qp } from '../nodes/rdma/qp.ts';
import { memPool } from './helpers.ts';

export const IP_A = '10.0.0.1';
export const IP_B = '10.0.0.2';

export interface Stack {
  graph: Graph;
  ifs: Interfaces;
  rdma: Rdma;
  ifName: string;
  net: Netstack;
}

/**
 * What joins the two stacks. 'ibverbs' and 'mlx5dv': two NIC ports cabled together (or two
 * machines' ports on one segment), named by RDMA_GRAPH_HW_A and RDMA_GRAPH_HW_B (kernel
 * interfaces); npm run test:hw only.
 */
export type Link = 'pipe' | 'memif' | 'dpdk' | 'ibverbs' | 'mlx5dv';

export interface Pair {
  /** The pipe's pool; with memif, A's. */
  pool: BufferPool;
  /** Every pool (one with a pipe, A's and B's with memif). */
  pools: BufferPool[];
  a: Stack;
  b: Stack;
  link: Link;
  /** Resolves when the link is up (at once for a pipe). */
  ready: Promise<void>;
  /** Buffers not in their pool right now, summed over the pools. */
  lost(): number;
  close(): void;
}

let memifPairs = 0;

/** The two NIC ports of the hardware suite (kernel interfaces), or null when not given. */
export function hwPorts(): [string, string] | null {
  const a = process.env.RDMA_GRAPH_HW_A,
    b = process.env.RDMA_GRAPH_HW_B;
  return a && b ? [a, b] : null;
}

export function twoStacks(
  opts: {
    rdma?: RdmaOptions;
    mtu?: number;
    buffers?: number;
    faultA?: { rx?: FaultConfig; tx?: FaultConfig };
    link?: Link;
    /** memif: the drivers' udpChecksum (default null: on here, where no link watch turns it off when the peer is up). */
    udpChecksum?: boolean;
  } = {},
): Pair {
  const link = opts.link ?? 'pipe';
  const macA = '02:00:00:00:00:0a',
    macB = '02:00:00:00:00:0b';
  const mtu = opts.mtu ?? 1500;
  let pools: BufferPool[];
  let da: Driver, db: Driver;
  if (link === 'pipe') {
    pools = [memPool(opts.buffers ?? 8192, 2048)];
    [da, db] = createPipe('pa', 'pb', { mtu, ringSize: 4096, macA, macB });
  } else if (link === 'memif') {
    pools = [
      createPool({ count: opts.buffers ?? 8192, dataSize: 2048, hugepages: 'never', name: 'memif-pair-a' }),
      memPool(opts.buffers ?? 8192, 2048),
    ];
    const socket = `@rdma-graph-pair-${process.pid}-${memifPairs++}`;
    const udpChecksum = opts.udpChecksum;
    da = new MemifDriver('ma', { socket, role: 'client', mac: macA, mtu, udpChecksum });
    db = new MemifDriver('mb', { socket, role: 'server', mac: macB, mtu, udpChecksum });
  } else if (link === 'ibverbs' || link === 'mlx5dv') {
    const hw = hwPorts();
    if (hw === null) throw new Error('RDMA_GRAPH_HW_A and RDMA_GRAPH_HW_B name no NIC ports');
    const port = (name: string, hostInterface: string, mac: string) =>
      new VerbsDriver(name, {
        mode: link,
        device: null,
        hostInterface,
        port: 1,
        promisc: false,
        mac,
        mtu,
        rxQueues: 1,
        txQueues: 1,
        rxQueueSize: 1024,
        txQueueSize: 1024,
      });
    pools = [memPool(opts.buffers ?? 8192, 2048), memPool(opts.buffers ?? 8192, 2048)];
    da = port('na', hw[0], macA);
    db = port('nb', hw[1], macB);
  } else {
    // A: DPDK's net_memif client on the process's mempool (zero copy); B: our memif server.
    const socket = join(tmpdir(), `rdma-graph-dpdk-pair-${process.pid}-${memifPairs}.sock`);
    const device = `net_memif${memifPairs++},role=client,socket=${socket},socket-abstract=no`;
    db = new MemifDriver('mb', { socket, role: 'server', mac: macB, mtu });
    const dd = new DpdkDriver('da', {
      device,
      ealArgs: [],
      mac: macA,
      mtu,
      rxQueues: 1,
      txQueues: 1,
      rxQueueSize: 1024,
      txQueueSize: 1024,
    });
    const provided = dd.providesMemory({ count: opts.buffers ?? 8192, dataSize: 2048 });
    da = dd;
    pools = [new BufferPool(provided.memory, provided.allocator), memPool(opts.buffers ?? 8192, 2048)];
  }
  const mk = (
    name: string,
    pool: BufferPool,
    drv: Driver,
    ip: string,
    peerIp: string,
    peerMac: string,
    fault?: { rx?: FaultConfig; tx?: FaultConfig },
  ): Stack => {
    const graph = new Graph({ pool, threadName: name, idlePollUs: 20, timerTickNs: 50_000 });
    const net = registerL2L4(graph);
    const ifs = new Interfaces(graph);
    const itf = ifs.add(drv, { next: 'ethernet-input', fault });
    net.addInterface({
      index: itf.index,
      name: drv.name,
      mac: drv.mac,
      address: `${ip}/24`,
      mtu: drv.mtu,
      output: itf.output.name,
      neighbors: [{ address: peerIp, mac: peerMac }],
      txChecksumOffload: drv.txChecksumOffload?.(),
    });
    const rdma = registerRdma(graph, net, opts.rdma);
    graph.build();
    return { graph, ifs, rdma, ifName: drv.name, net };
  };
  // The server first, so that the client finds its socket at once.
  const b = mk('B', pools[pools.length - 1], db, IP_B, IP_A, macA);
  const a = mk('A', pools[0], da, IP_A, IP_B, macB, opts.faultA);
  a.graph.start();
  b.graph.start();
  const ready =
    link === 'pipe' ? Promise.resolve() : waitFor(`the ${link} link`, () => da.linkUp() && db.linkUp(), 5000);
  return {
    pool: pools[0],
    pools,
    a,
    b,
    link,
    ready,
    lost: () => pools.reduce((n, p) => n + p.count - p.available(), 0),
    close() {
      a.graph.close();
      b.graph.close();
      a.ifs.closeAll();
      b.ifs.closeAll();
    },
  };
}

export interface Ends {
  pd: Pd;
  scq: Cq;
  rcq: Cq;
  qp: Qp;
}

export function makeEnds(s: Stack, init: Partial<QpInit> = {}, cqDepth = 4096): Ends {
  const pd = init.pd ?? s.rdma.createPd();
  const scq = init.sendCq ?? s.rdma.createCq(cqDepth);
  const rcq = init.recvCq ?? s.rdma.createCq(cqDepth);
  const qp = s.rdma.createQp({ maxSendWr: 1024, maxRecvWr: 1024, ...init, pd, sendCq: scq, recvCq: rcq });
  return { pd, scq, rcq, qp };
}

/** Manual connect: both sides RTR with the other's address, port and initial PSN, then RTS. */
export function connectManual(x: Stack, qx: Qp, y: Stack, qy: Qp): void {
  for (const [s, q, peer, ip] of [
    [x, qx, qy, y === x ? IP_A : ipOf(y)],
    [y, qy, qx, ipOf(x)],
  ] as const) {
    s.rdma.modifyQp(q, { state: 'init' });
    s.rdma.modifyQp(q, { state: 'rtr', remote: { address: ip, port: peer.qpn }, rqPsn: peer.isn });
    s.rdma.modifyQp(q, { state: 'rts' });
  }
}

function ipOf(s: Stack): string {
  return s.graph.threadName === 'A' ? IP_A : IP_B;
}

/** Wait until `cq` holds `n` completions (or `ms` pass); returns them (taken from the CQ). */
export async function waitCompletions(cq: Cq, n: number, ms = 5000): Promise<Completion[]> {
  const out: Completion[] = [];
  const deadline = Date.now() + ms;
  while (out.length < n) {
    out.push(...cq.poll(n - out.length));
    if (out.length >= n) break;
    if (Date.now() > deadline)
      throw new Error(`timed out: ${out.length} of ${n} completions after ${ms} ms: ${JSON.stringify(out.slice(-3))}`);
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 20);
      cq.onCompletion = () => {
        clearTimeout(t);
        cq.onCompletion = null;
        resolve();
      };
    });
  }
  return out;
}

/** Let the loops run for `ms`. */
export const settle = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Deterministic bytes (xorshift) for payloads. */
export function pattern(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

/** Wait until `cond()` holds, checking every 2 ms; throws naming `what` after `ms`. */
export async function waitFor(what: string, cond: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await settle(2);
  }
}

/**
 * Stacks for tests that end with `finish`: a test that fails before it leaves its loops running
 * (the process would never exit), so register `closeLeftovers` with `test.after.each`.
 */
const unfinished = new Set<Pair>();

export function trackedStacks(opts: Parameters<typeof twoStacks>[0] = {}): Pair {
  const p = twoStacks(opts);
  unfinished.add(p);
  return p;
}

export function closeLeftovers(): void {
  for (const p of unfinished) p.close();
  unfinished.clear();
}

/** Let what is in flight land, close both stacks; throws unless every buffer is back in the pool. */
export async function finish(p: Pair): Promise<void> {
  await settle(10);
  unfinished.delete(p);
  p.close();
  const lost = p.lost();
  if (lost !== 0) throw new Error(`${lost} buffer(s) not back in the pool after close`);
}

/** A CM message as a peer may send it: TRP header (psn, ack, opcode), pdlen (which may lie), ird, ord, private data. */
export function cmMessage(
  op: number,
  ird: number,
  ord: number,
  pd: Uint8Array,
  pdLen = pd.length,
  psn = 0,
  ack = 0,
): Uint8Array {
  const m = new Uint8Array(16 + pd.length);
  const v = new DataView(m.buffer);
  v.setUint32(0, psn);
  v.setUint32(4, ack);
  v.setUint16(8, op << 12);
  v.setUint16(10, pdLen);
  v.setUint16(12, ird);
  v.setUint16(14, ord);
  m.set(pd, 16);
  return m;
}

/** A UD QP in RTS with Q_Key `qkey` (optionally on an SRQ), its CQ and a 64 KiB MR to send and receive from. */
export interface UdEnd {
  pd: Pd;
  cq: Cq;
  qp: Qp;
  mr: Mr;
}

export function udEnd(s: Stack, qkey: number, opts: { srq?: boolean; address?: string } = {}): UdEnd {
  const pd = s.rdma.createPd();
  const cq = s.rdma.createCq(256);
  const srq = opts.srq ? s.rdma.createSrq(pd, 64, 2) : null;
  const qp = s.rdma.createQp({
    pd,
    sendCq: cq,
    recvCq: cq,
    srq,
    type: 'ud',
    maxSendWr: 64,
    maxRecvWr: 64,
    ...(opts.address === undefined ? {} : { address: opts.address }),
  });
  for (const state of ['init', 'rtr', 'rts'] as const)
    s.rdma.modifyQp(qp, { state, qkey: state === 'init' ? qkey : undefined });
  const mr = s.rdma.regMr(pd, 1 << 16, ['local-write']);
  return { pd, cq, qp, mr };
}
