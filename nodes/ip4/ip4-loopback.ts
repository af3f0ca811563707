/**
 * ip4-loopback: packets ip4-rewrite addressed to one of this data plane's own addresses (its
 * local adjacency, VPP's receive route), taken in as received on the interface that owns the
 * address, without a driver: two QPs of one data plane connected to each other, a QP on one
 * interface talking to a QP on another, a ping of our own address; and the copy of a multicast
 * datagram to a group the sending interface joined (its members here: net/ip4-groups.ts).
 *
 * In: whole Ethernet frames (ip4-rewrite wrote the owner's MAC as destination and set
 * `pool.rxIf` to the owner). A checksum left to the NIC (TX_IP4_CKSUM, TX_UDP_CKSUM: an
 * offloading tx interface) is computed here, since no NIC will; the frame never left memory, so
 * it is marked IP4_CKSUM_OK and L4_CKSUM_OK (Linux's loopback does the same). Then the receive
 * path: ethernet-input, or with cpu.workers worker-handoff, which hands a datagram for another
 * worker's QP to that worker as received on the owner interface (`setLoopbackNext`).
 *
 * Never the interface's output or tx nodes: no driver, fault injector or capture sees these
 * frames and the interface counters do not count them (as in VPP, where a packet to a local
 * address never reaches interface-output); this node's runtime line and its `local` counter do.
 */
import {
  BufferFlag,
  type BufferPool,
  type Frame,
  type Graph,
  type NodeRuntime,
  RX_ONLY_FLAGS,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { ETH_HEADER_BYTES } from '../ethernet/ethernet.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import { IP4_HEADER_BYTES, IP_PROTO_UDP, ip4SetChecksum20, packetSum } from './ip4.ts';

export const IP4_LOOPBACK = 'ip4-loopback';

/** Its next nodes at registration; the receive path's arc is added once that node exists. */
const NEXT = nextTable({ DROP: 'error-drop' });

const ERROR_TABLE = errorTable({
  LOCAL: {
    name: 'local',
    description: 'frames to a local address, received on its interface',
    severity: 'info',
  },
  NO_BUFFERS: {
    name: 'no_buffers',
    description: 'no buffers to copy a payload sent from an MR into (dropped)',
    severity: 'error',
  },
});
export const Ip4LoopbackError = ERROR_TABLE.code;

interface LoopbackData {
  ifs: InterfaceTable;
  /** Next index of the receive path (ethernet-input, or worker-handoff with workers). */
  next: number;
}

const UDP_CHECKSUM = 6;
const IP4_PROTOCOL = 9;
const TX_CKSUM = BufferFlag.TX_IP4_CKSUM | BufferFlag.TX_UDP_CKSUM;

export function registerIp4Loopback(graph: Graph, ifs: InterfaceTable): NodeRuntime {
  const data: LoopbackData = { ifs, next: -1 };
  return graph.register({
    name: IP4_LOOPBACK,
    next: NEXT.names,
    errors: ERROR_TABLE.list,
    runtimeData: data,
    fn: ip4Loopback,
    formatTrace: (r) => String(r),
  });
}

/** Loopback frames go to node `name` (registered already) as received: ethernet-input, or worker-handoff. */
export function setLoopbackNext(graph: Graph, name: string): void {
  const rt = graph.node(IP4_LOOPBACK);
  (rt.runtimeData as LoopbackData).next = graph.addNext(rt, name);
}

function ip4Loopback(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const d = rt.runtimeData as LoopbackData;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    flags = pool.flags;
  const vec = f.vec;
  // Payloads sent from an MR in place are copied in: the receive path reads the pool.
  if (pool.ext.wanted) materializeAll(rt, f);
  const n = f.n;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const fl = flags[bi];
    if (fl & TX_CKSUM) finishChecksums(pool, bi, fl, v, u8, offset[bi]);
    flags[bi] = (fl & ~(TX_CKSUM | RX_ONLY_FLAGS)) | BufferFlag.IP4_CKSUM_OK | BufferFlag.L4_CKSUM_OK;
    if (rt.traceOn && fl & BufferFlag.TRACED)
      rt.addTrace(bi, `local address: received on ${d.ifs.names[pool.rxIf[bi]]}`);
  }
  rt.countError(Ip4LoopbackError.LOCAL, n);
  rt.graph.enqueueToSingleNext(rt, d.next, vec, 0, n);
  return n;
}

/** BufferPool.materialize on every packet; one the pool has no buffers for is dropped, the frame closing up. */
function materializeAll(rt: NodeRuntime, f: Frame): void {
  const pool = rt.graph.pool;
  const kept = pool.materializeVector(f.vec, f.n, rt.scratch);
  if (kept === f.n) return;
  const code = rt.errorIndex(Ip4LoopbackError.NO_BUFFERS);
  for (let i = 0; i < f.n - kept; i++) pool.error[rt.scratch[i]] = code;
  rt.graph.enqueueToSingleNext(rt, NEXT.index.DROP, rt.scratch, 0, f.n - kept);
  f.n = kept;
}

/** What an offloading NIC would have done on transmit (ip4-rewrite and udp4-encap left it to one). */
function finishChecksums(pool: BufferPool, bi: number, fl: number, v: DataView, u8: Uint8Array, o: number): void {
  const ip = o + ETH_HEADER_BYTES;
  if (fl & BufferFlag.TX_IP4_CKSUM) ip4SetChecksum20(v, ip);
  if (fl & BufferFlag.TX_UDP_CKSUM && u8[ip + IP4_PROTOCOL] === IP_PROTO_UDP) {
    // The field holds the pseudo-header sum: the NIC sums the datagram over it.
    const l4 = ETH_HEADER_BYTES + IP4_HEADER_BYTES;
    pool.advance(bi, l4);
    const ck = ~packetSum(pool, bi) & 0xffff;
    pool.prepend(bi, l4);
    v.setUint16(ip + IP4_HEADER_BYTES + UDP_CHECKSUM, ck === 0 ? 0xffff : ck);
  }
}
