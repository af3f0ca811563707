/**
 * arp-input: Ethernet/IPv4 ARP (RFC 826) for a host.
 *
 * - A request for the receiving interface's address is answered in place (the request buffer
 *   becomes the reply, sent back out of the interface it came in on) and its sender learned.
 * - A reply addressed to us is learned (held packets waiting for it go on to ip4-rewrite) and
 *   consumed ("ARP replies received", info).
 * - ARP not addressed to us only refreshes an entry we already have (RFC 826's merge; this is
 *   how a peer's gratuitous ARP updates us) and is consumed ("ARP for another address").
 * - An ARP claiming one of our addresses from another MAC is an address conflict: counted, not
 *   learned. Probes (sender address 0.0.0.0, RFC 5227) are answered but teach nothing.
 * - We answer only for the address of the interface the request came in on (Linux's
 *   arp_ignore=1 behaviour; VPP does the same per interface).
 *
 * The node also owns the neighbor table's timers (retransmission, aging) and is the node its
 * ARP requests and gratuitous ARPs leave from.
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, RX_ONLY_FLAGS } from '../../graph/index.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import { formatIp4, formatMacHiLo } from '../net/address.ts';
import {
  ARP_BYTES,
  ARP_ERRORS,
  ARP_ETH_IP4_HEAD,
  ARP_ETH_IP4_LENS,
  ARP_OP_REPLY,
  ARP_OP_REQUEST,
  ARP_SHA,
  ARP_SPA,
  ARP_THA,
  ARP_TPA,
  ArpError,
} from './arp.ts';
import { ETH_HEADER_BYTES, ETHERTYPE_ARP } from './ethernet.ts';
import { ARP_NEXT, ARP_NEXT_DROP, ARP_NEXT_REWRITE, type NeighborTable } from './neighbor.ts';

export const ARP_INPUT = 'arp-input';

interface ArpData {
  ifs: InterfaceTable;
  table: NeighborTable;
  /** Next index of each interface's output node. */
  out: Int32Array;
}

interface ArpTrace {
  op: number;
  shaHi: number;
  shaLo: number;
  spa: number;
  thaHi: number;
  thaLo: number;
  tpa: number;
  action: string;
}

function formatArpTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as ArpTrace;
  const op = t.op === ARP_OP_REQUEST ? 'request' : t.op === ARP_OP_REPLY ? 'reply' : `opcode ${t.op}`;
  return (
    `${op}, type ethernet/IP4, address size 6/4\n` +
    `${formatMacHiLo(t.shaHi, t.shaLo)}/${formatIp4(t.spa)} -> ${formatMacHiLo(t.thaHi, t.thaLo)}/${formatIp4(t.tpa)}\n` +
    t.action
  );
}

export function registerArpInput(graph: Graph, ifs: InterfaceTable, table: NeighborTable): NodeRuntime {
  const data: ArpData = { ifs, table, out: new Int32Array(0) };
  const rt = graph.register({
    name: ARP_INPUT,
    // Order matters: ARP_NEXT_DROP and ARP_NEXT_REWRITE.
    next: ARP_NEXT.names,
    errors: ARP_ERRORS,
    runtimeData: data,
    fn: arpInput,
    timer: arpTimer,
    formatTrace: formatArpTrace,
  });
  if (rt.nextNames[ARP_NEXT_DROP] !== 'error-drop' || rt.nextNames[ARP_NEXT_REWRITE] !== 'ip4-rewrite')
    throw new Error('arp-input: arc order');
  table.bind(rt);
  data.out = ifs.attach(rt);
  return rt;
}

function arpTimer(rt: NodeRuntime, user: number): void {
  (rt.runtimeData as ArpData).table.onTimer(user);
}

function arpInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const { ifs, table, out } = rt.runtimeData as ArpData;
  const pool = rt.graph.pool;
  const v = pool.view,
    offset = pool.offset,
    length = pool.length,
    rxIf = pool.rxIf,
    error = pool.error,
    flags = pool.flags;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  let replies = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = offset[bi];
    const ix = rxIf[bi];
    let err = -1;
    let next = ARP_NEXT_DROP;
    let op = 0,
      shaHi = 0,
      shaLo = 0,
      spa = 0,
      tpa = 0;
    if (length[bi] < ARP_BYTES) err = ArpError.TRUNCATED;
    else if (v.getUint32(o) !== ARP_ETH_IP4_HEAD || v.getUint16(o + 4) !== ARP_ETH_IP4_LENS) err = ArpError.BAD_FORMAT;
    else {
      op = v.getUint16(o + 6);
      shaHi = v.getUint32(o + ARP_SHA);
      shaLo = v.getUint16(o + ARP_SHA + 4);
      spa = v.getUint32(o + ARP_SPA);
      tpa = v.getUint32(o + ARP_TPA);
      const ours = ifs.address[ix];
      if (op !== ARP_OP_REQUEST && op !== ARP_OP_REPLY) err = ArpError.BAD_OPCODE;
      else if (shaHi & 0x01000000) err = ArpError.BAD_SENDER;
      else if (spa === ours) {
        // Our address as sender: someone else claims it (or our own frame came back).
        err = shaHi !== ifs.macHi[ix] || shaLo !== ifs.macLo[ix] ? ArpError.CONFLICT : ArpError.NOT_FOR_US;
      } else if (tpa === ours) {
        if (spa !== 0) table.learn(ix, spa, shaHi, shaLo, true);
        if (op === ARP_OP_REQUEST) {
          if (rt.traceOn && flags[bi] & BufferFlag.TRACED) traceArp(rt, pool.view, o, bi, op, 'reply sent');
          // The request becomes the reply: target = the requester, sender = us.
          v.setUint16(o + 6, ARP_OP_REPLY);
          v.setUint32(o + ARP_THA, shaHi);
          v.setUint16(o + ARP_THA + 4, shaLo);
          v.setUint32(o + ARP_TPA, spa);
          v.setUint32(o + ARP_SHA, ifs.macHi[ix]);
          v.setUint16(o + ARP_SHA + 4, ifs.macLo[ix]);
          v.setUint32(o + ARP_SPA, ours);
          if (length[bi] !== ARP_BYTES || flags[bi] & BufferFlag.NEXT_PRESENT) pool.trim(bi, ARP_BYTES);
          pool.prepend(bi, ETH_HEADER_BYTES);
          const e = o - ETH_HEADER_BYTES;
          v.setUint32(e, shaHi);
          v.setUint16(e + 4, shaLo);
          v.setUint32(e + 6, ifs.macHi[ix]);
          v.setUint16(e + 10, ifs.macLo[ix]);
          v.setUint16(e + 12, ETHERTYPE_ARP);
          flags[bi] &= ~RX_ONLY_FLAGS;
          next = out[ix];
          replies++;
          nexts[i] = next;
          continue;
        }
        err = ArpError.REPLY_RECEIVED;
      } else {
        if (spa !== 0) table.learn(ix, spa, shaHi, shaLo, false);
        err = ArpError.NOT_FOR_US;
      }
    }
    error[bi] = eBase + err;
    nexts[i] = next;
    if (rt.traceOn && flags[bi] & BufferFlag.TRACED) {
      if (err === ArpError.TRUNCATED || err === ArpError.BAD_FORMAT)
        rt.addTrace(bi, `${ARP_ERRORS[err].description}: ${length[bi]} bytes`);
      else traceArp(rt, v, o, bi, op, ARP_ERRORS[err].description);
    }
  }
  if (replies > 0) rt.countError(ArpError.REPLIES_SENT, replies);
  rt.enqueue(vec, n);
  return n;
}

function traceArp(rt: NodeRuntime, v: DataView, o: number, bi: number, op: number, action: string): void {
  rt.addTrace(bi, {
    op,
    shaHi: v.getUint32(o + ARP_SHA),
    shaLo: v.getUint16(o + ARP_SHA + 4),
    spa: v.getUint32(o + ARP_SPA),
    thaHi: v.getUint32(o + ARP_THA),
    thaLo: v.getUint16(o + ARP_THA + 4),
    tpa: v.getUint32(o + ARP_TPA),
    action,
  } satisfies ArpTrace);
}
