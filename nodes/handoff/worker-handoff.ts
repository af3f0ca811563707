/**
 * worker-handoff (cpu.workers >= 2, VPP's worker handoff): on the worker that owns an interface,
 * between the interface's input and ethernet-input. A UDP datagram whose destination port is a
 * QP number of another worker's slice goes, frame and all, to that worker's handoff port of this
 * interface (drivers/handoff.ts), where the worker's shadow of the interface receives it: the QP
 * and its TRP/DDP/RDMAP state are never touched by two threads. ARP frames go on here and a copy
 * goes to every other worker (each keeps its own neighbor table). Everything else stays here.
 *
 * Per frame it reads the Ethernet type, the IPv4 header length, protocol and fragment offset and
 * the UDP destination port, each only when the frame is long enough to hold it.
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, errorTable, nextTable } from '../../graph/index.ts';
import { ETH_HEADER_BYTES, ETHERTYPE_ARP, ETHERTYPE_IP4 } from '../ethernet/ethernet.ts';
import { IP4_FRAG, IP4_FRAG_OFFSET_MASK, IP4_HEADER_BYTES, IP_PROTO_UDP } from '../ip4/ip4.ts';
import { UDP_HEADER_BYTES } from '../udp/udp4-input.ts';

export const WORKER_HANDOFF = 'worker-handoff';

const NEXT = nextTable({ ETH: 'ethernet-input' });
const NEXT_ETH = NEXT.index.ETH;

const ERROR_TABLE = errorTable({
  HANDOFF: { name: 'handoff', description: "frames handed to the QP's worker", severity: 'info' },
  ARP_COPY: { name: 'arp_copy', description: 'ARP copies sent to the other workers', severity: 'info' },
  NO_BUFFERS: { name: 'no_buffers', description: 'ARP copy dropped: no buffer', severity: 'warn' },
});
export const HandoffError = ERROR_TABLE.code;

export interface HandoffTable {
  /** This worker. */
  self: number;
  workers: number;
  /** UDP destination port -> the worker whose QP slice holds it, or -1. */
  portWorker: Int8Array;
  /** rxIf * workers + worker -> next index of that worker's port on this interface, or -1. */
  portNext: Int32Array;
  /** rxIf -> next indices of every port of that interface (ARP copies). */
  arpNexts: number[][];
}

export function handoffTable(self: number, workers: number, ranges: [number, number][], maxIf: number): HandoffTable {
  const portWorker = new Int8Array(65536).fill(-1);
  ranges.forEach(([lo, hi], k) => portWorker.fill(k, lo, hi + 1));
  return {
    self,
    workers,
    portWorker,
    portNext: new Int32Array((maxIf + 1) * workers).fill(-1),
    arpNexts: Array.from({ length: maxIf + 1 }, () => []),
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

/**
 * Send interface `rxIf`'s frames for `worker` to the node `portOutput` (that worker's port, or
 * the owner's port that passes them on); `arp`: ARP copies go there too (once per port).
 */
export function addHandoffPort(
  graph: Graph,
  rt: NodeRuntime,
  rxIf: number,
  worker: number,
  portOutput: string,
  arp = true,
): void {
  const t = rt.runtimeData as HandoffTable;
  const nx = graph.addNext(rt, portOutput);
  t.portNext[rxIf * t.workers + worker] = nx;
  if (arp) t.arpNexts[rxIf].push(nx);
}

const one = new Uint32Array(1);
/** Offsets within the Ethernet, IPv4 and UDP headers. */
const ETH_TYPE = 12,
  IP4_PROTOCOL = 9,
  UDP_DST_PORT = 2;

function workerHandoff(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const t = rt.runtimeData as HandoffTable;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    rxIf = pool.rxIf;
  const { portWorker, portNext, workers, self } = t;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  let handed = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = offset[bi],
      len = length[bi];
    let next = NEXT_ETH;
    if (len >= ETH_HEADER_BYTES) {
      const type = v.getUint16(o + ETH_TYPE);
      if (type === ETHERTYPE_IP4 && len >= ETH_HEADER_BYTES + IP4_HEADER_BYTES) {
        const ip = o + ETH_HEADER_BYTES;
        const ihl = (u8[ip] & 0x0f) * 4;
        if (
          u8[ip + IP4_PROTOCOL] === IP_PROTO_UDP &&
          ihl >= IP4_HEADER_BYTES &&
          (v.getUint16(ip + IP4_FRAG) & IP4_FRAG_OFFSET_MASK) === 0 &&
          len >= ETH_HEADER_BYTES + ihl + UDP_HEADER_BYTES
        ) {
          const w = portWorker[v.getUint16(ip + ihl + UDP_DST_PORT)];
          if (w >= 0 && w !== self) {
            const nx = portNext[rxIf[bi] * workers + w];
            if (nx >= 0) {
              next = nx;
              handed++;
            }
          }
        }
      } else if (type === ETHERTYPE_ARP && (pool.flags[bi] & BufferFlag.HANDED) === 0) {
        const ports = t.arpNexts[rxIf[bi]];
        for (let k = 0; k < ports.length; k++) {
          const c = pool.writePacket(u8, o, len);
          if (c === 0xffffffff) {
            rt.countError(HandoffError.NO_BUFFERS);
            continue;
          }
          one[0] = c;
          rt.graph.enqueueToSingleNext(rt, ports[k], one, 0, 1);
          rt.countError(HandoffError.ARP_COPY);
        }
      }
    }
    nexts[i] = next;
    if (rt.traceOn && pool.flags[bi] & BufferFlag.TRACED)
      rt.addTrace(bi, next === NEXT_ETH ? 'stays on this worker' : `handed to worker ${rt.nextNames[next]}`);
  }
  if (handed > 0) rt.countError(HandoffError.HANDOFF, handed);
  rt.enqueue(vec, n);
  return n;
}
