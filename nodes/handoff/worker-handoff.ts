/**
 * worker-handoff (cpu.workers >= 2, VPP's worker handoff): on every worker that receives an
 * interface's frames from its device (the owner, or a worker polling its own share of it),
 * between the interface's input and ethernet-input. A UDP datagram whose destination port is a
 * QP number of another worker's slice is copied, frame and all, into the handoff queue to that
 * worker (graph/handoff-queue.ts) as received on its interface, and its buffer freed here: the
 * QP and its TRP/DDP/RDMAP state are never touched by two threads. An ARP frame goes on here and
 * a copy goes to every other worker (each keeps its own neighbor table), and so does an IGMP
 * message (each worker answers the queries for the groups its own QPs joined). A datagram to a
 * multicast group on the multicast port (in no worker's slice) is copied to every other worker
 * whose interfaces joined a group (`groups`, shared by the workers), and goes on here only if
 * this worker's did too (or no worker's did: ethernet-input drops and counts it). Everything
 * else stays.
 * Each queue written to is published once per vector (at most one kick); a frame its queue has
 * no room for is dropped and counted.
 *
 * Per frame it reads the Ethernet type, the IPv4 header length, protocol and fragment offset and
 * the UDP destination port, each only when the frame is long enough to hold it.
 */
import {
  BufferFlag,
  type Frame,
  type Graph,
  HANDOFF_RX,
  type HandoffProducer,
  type NodeRuntime,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { ETH_HEADER_BYTES, ETHERTYPE_ARP, ETHERTYPE_IP4 } from '../ethernet/ethernet.ts';
import { IP4_FRAG, IP4_FRAG_OFFSET_MASK, IP4_HEADER_BYTES, IP_PROTO_UDP } from '../ip4/ip4.ts';
import { UDP_HEADER_BYTES } from '../udp/udp4-input.ts';
import { IP_PROTO_IGMP } from '../ip4/igmp4-input.ts';
import { isIp4Multicast } from '../net/address.ts';

export const WORKER_HANDOFF = 'worker-handoff';

const NEXT = nextTable({ ETH: 'ethernet-input' });
const NEXT_ETH = NEXT.index.ETH;

const ERROR_TABLE = errorTable({
  HANDOFF: { name: 'handoff', description: "frames handed to the QP's worker", severity: 'info' },
  ARP_COPY: { name: 'arp_copy', description: 'ARP copies sent to the other workers', severity: 'info' },
  QUEUE_FULL: {
    name: 'queue_full',
    description: "dropped: the handoff queue to the QP's worker was full",
    severity: 'warn',
  },
  TOO_LONG: { name: 'too_long', description: 'dropped: longer than a handoff slot', severity: 'warn' },
  ARP_QUEUE_FULL: {
    name: 'arp_queue_full',
    description: "ARP copy dropped: the worker's handoff queue was full",
    severity: 'warn',
  },
  IGMP_COPY: { name: 'igmp_copy', description: 'IGMP copies sent to the other workers', severity: 'info' },
  MCAST_COPY: {
    name: 'mcast_copy',
    description: "copies of a group's datagram sent to the workers with members",
    severity: 'info',
  },
  COPY_QUEUE_FULL: {
    name: 'copy_queue_full',
    description: "IGMP or group datagram copy dropped: the worker's handoff queue was full",
    severity: 'warn',
  },
});
export const HandoffError = ERROR_TABLE.code;

export interface HandoffTable {
  /** This worker. */
  self: number;
  /** UDP destination port -> the worker whose QP slice holds it, or -1. */
  portWorker: Int8Array;
  /** The queue to each worker (null for this one). */
  toWorker: (HandoffProducer | null)[];
  /** Scratch: the buffers handed over or dropped in one vector, freed together. */
  gone: Uint32Array;
  /** Scratch: whether worker k's queue was written in this vector. */
  touched: Uint8Array;
  /** Per worker: the multicast groups its interfaces joined (written by each worker for itself). */
  groups: Int32Array;
  /** The multicast port (rdma.multicast-port): a group's datagrams come to it. */
  mcastPort: number;
}

export function handoffTable(
  self: number,
  ranges: readonly (readonly [number, number])[],
  toWorker: (HandoffProducer | null)[],
  groups: Int32Array = new Int32Array(ranges.length),
  mcastPort = -1,
): HandoffTable {
  if (toWorker.length !== ranges.length || toWorker[self] !== null)
    throw new RangeError(
      `worker-handoff: one queue per other worker (${ranges.length} workers, this is ${self}), got ${toWorker.length}`,
    );
  const portWorker = new Int8Array(65536).fill(-1);
  ranges.forEach(([lo, hi], k) => portWorker.fill(k, lo, hi + 1));
  if (groups.length !== ranges.length)
    throw new RangeError(`worker-handoff: one group count per worker (${ranges.length}), got ${groups.length}`);
  return {
    self,
    portWorker,
    toWorker,
    gone: new Uint32Array(256),
    touched: new Uint8Array(ranges.length),
    groups,
    mcastPort,
  };
}

export function registerWorkerHandoff(graph: Graph, table: HandoffTable): NodeRuntime {
  return graph.register({
    name: WORKER_HANDOFF,
    next: NEXT.names,
    errors: ERROR_TABLE.list,
    runtimeData: table,
    fn: workerHandoff,
    formatTrace: (r) => String(r),
  });
}

/** Offsets within the Ethernet, IPv4 and UDP headers. */
const ETH_TYPE = 12,
  IP4_PROTOCOL = 9,
  IP4_DST = 16,
  UDP_DST_PORT = 2;

/**
 * A copy of `bi` to every other worker, or (`members`) to those whose interfaces joined a group;
 * counted as `copied` per copy, `full` per queue without room. How many copies went. Bounded by
 * the workers.
 */
function copyOut(rt: NodeRuntime, t: HandoffTable, bi: number, members: boolean, copied: number, full: number): number {
  const pool = rt.graph.pool;
  let sent = 0;
  for (let k = 0; k < t.toWorker.length; k++) {
    const q = t.toWorker[k];
    if (q === null || (members && Atomics.load(t.groups, k) <= 0)) continue;
    if (q.putPacket(pool, bi, pool.rxIf[bi], HANDOFF_RX)) {
      t.touched[k] = 1;
      rt.countError(copied);
      sent++;
    } else rt.countError(full);
  }
  return sent;
}

function workerHandoff(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const t = rt.runtimeData as HandoffTable;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    rxIf = pool.rxIf;
  const { portWorker, toWorker, self, gone, touched, groups, mcastPort } = t;
  const workers = toWorker.length;
  const vec = f.vec,
    n = f.n;
  let stay = 0,
    m = 0,
    handed = 0,
    full = 0,
    long = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = offset[bi],
      len = length[bi];
    let to = -1;
    if (len >= ETH_HEADER_BYTES) {
      const type = v.getUint16(o + ETH_TYPE);
      if (type === ETHERTYPE_IP4 && len >= ETH_HEADER_BYTES + IP4_HEADER_BYTES) {
        const ip = o + ETH_HEADER_BYTES;
        const ihl = (u8[ip] & 0x0f) * 4;
        const proto = u8[ip + IP4_PROTOCOL];
        if (
          proto === IP_PROTO_UDP &&
          ihl >= IP4_HEADER_BYTES &&
          (v.getUint16(ip + IP4_FRAG) & IP4_FRAG_OFFSET_MASK) === 0 &&
          len >= ETH_HEADER_BYTES + ihl + UDP_HEADER_BYTES
        ) {
          const port = v.getUint16(ip + ihl + UDP_DST_PORT);
          const w = portWorker[port];
          if (w >= 0 && w !== self) to = w;
          else if (port === mcastPort && isIp4Multicast(v.getUint32(ip + IP4_DST))) {
            // A group's datagram: to the workers with members; here too if this one has any.
            const sent = copyOut(rt, t, bi, true, HandoffError.MCAST_COPY, HandoffError.COPY_QUEUE_FULL);
            if (sent > 0 && Atomics.load(groups, self) <= 0) {
              if (rt.traceOn && pool.flags[bi] & BufferFlag.TRACED)
                rt.addTrace(bi, `a group's datagram: copied to ${sent} worker(s) with members, none here`);
              gone[m++] = bi;
              continue;
            }
          }
        } else if (proto === IP_PROTO_IGMP)
          copyOut(rt, t, bi, false, HandoffError.IGMP_COPY, HandoffError.COPY_QUEUE_FULL);
      } else if (type === ETHERTYPE_ARP) copyOut(rt, t, bi, false, HandoffError.ARP_COPY, HandoffError.ARP_QUEUE_FULL);
    }
    if (to < 0) {
      vec[stay++] = bi;
      if (rt.traceOn && pool.flags[bi] & BufferFlag.TRACED) rt.addTrace(bi, 'stays on this worker');
      continue;
    }
    const q = toWorker[to] as HandoffProducer;
    let what = 0;
    if (q.putPacket(pool, bi, rxIf[bi], HANDOFF_RX)) {
      touched[to] = 1;
      handed++;
    } else if (pool.packetLength(bi) > q.maxFrame) {
      long++;
      what = 1;
    } else {
      full++;
      what = 2;
    }
    // Traced: the record stays with this buffer's trace (the copy starts afresh on the worker).
    if (rt.traceOn && pool.flags[bi] & BufferFlag.TRACED)
      rt.addTrace(
        bi,
        what === 0
          ? `handed to worker ${to}`
          : what === 1
            ? `dropped: longer than a handoff slot (${q.maxFrame} bytes)`
            : `dropped: the queue to worker ${to} is full`,
      );
    gone[m++] = bi;
  }
  for (let k = 0; k < workers; k++) {
    if (touched[k] === 0) continue;
    touched[k] = 0;
    (toWorker[k] as HandoffProducer).publish();
  }
  if (m > 0) pool.free(gone, 0, m);
  if (handed > 0) rt.countError(HandoffError.HANDOFF, handed);
  if (full > 0) rt.countError(HandoffError.QUEUE_FULL, full);
  if (long > 0) rt.countError(HandoffError.TOO_LONG, long);
  if (stay > 0) rt.graph.enqueueToSingleNext(rt, NEXT_ETH, vec, 0, stay);
  return n;
}
