/**
 * icmp4-echo: answers ICMP echo requests (ping) in place and counts every other ICMP message.
 *
 * The request buffer becomes the reply: type 0, the ICMP checksum recomputed over the whole
 * message (every segment of a chained packet), the IPv4 addresses swapped with TTL 64 and a new
 * header checksum (identification and DF are kept, as Linux does), and the Ethernet header
 * rebuilt in front of it addressed to the request's Ethernet source. It goes straight back out
 * of the interface it came in on: a host answers the neighbor (or router) that asked, so no
 * route or neighbor lookup is needed. A request from one of our own addresses (a ping of our
 * own address, which came through ip4-loopback) is answered the same way: through ip4-loopback,
 * as received on the interface that owns the address.
 *
 * Echo replies carrying the identifier of our own pinger (icmp4-ping.ts) settle the request
 * they answer first; then they, and the other ICMP types (unreachables, ...), are counted and
 * dropped (info).
 */
import {
  BufferFlag,
  type Frame,
  type Graph,
  type NodeRuntime,
  RX_ONLY_FLAGS,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { ETH_HEADER_BYTES } from '../ethernet/ethernet.ts';
import type { Pinger } from './icmp4-ping.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import { IP4_DEFAULT_TTL, IP4_HEADER_BYTES, ip4SetChecksum20, packetSum } from './ip4.ts';

export const ICMP4_ECHO = 'icmp4-echo';
export const ICMP_ECHO_REPLY = 0;
export const ICMP_ECHO_REQUEST = 8;

const NEXT = nextTable({ DROP: 'error-drop', LOCAL: 'ip4-loopback' });
const NEXT_DROP = NEXT.index.DROP,
  NEXT_LOCAL = NEXT.index.LOCAL;

const ERROR_TABLE = errorTable({
  TRUNCATED: { name: 'truncated', description: 'ICMP message < 8 bytes', severity: 'error' },
  BAD_CHECKSUM: { name: 'bad_checksum', description: 'bad ICMP checksum', severity: 'error' },
  REPLIES: { name: 'replies', description: 'ICMP echo replies sent', severity: 'info' },
  ECHO_REPLY: { name: 'echo_reply', description: 'ICMP echo reply received', severity: 'info' },
  OTHER_TYPE: { name: 'other_type', description: 'ICMP type not handled', severity: 'info' },
});
export const IcmpError = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

const TYPE_NAMES: Record<number, string> = {
  0: 'echo_reply',
  3: 'destination_unreachable',
  5: 'redirect',
  8: 'echo_request',
  11: 'time_exceeded',
  12: 'parameter_problem',
};

interface IcmpData {
  ifs: InterfaceTable;
  out: Int32Array;
  pinger: Pinger | null;
}

interface IcmpTrace {
  type: number;
  code: number;
  checksum: number;
  id: number;
  seq: number;
  length: number;
  note: string;
}

function formatIcmpTrace(r: unknown): string {
  if (typeof r === 'string') return r;
  const t = r as IcmpTrace;
  const name = TYPE_NAMES[t.type] ?? `type ${t.type}`;
  const echo = t.type === 0 || t.type === 8 ? ` id ${t.id} seq ${t.seq}` : '';
  return `ICMP ${name} code ${t.code} checksum 0x${t.checksum.toString(16).padStart(4, '0')}${echo} length ${t.length}\n  ${t.note}`;
}

export function registerIcmp4Echo(graph: Graph, ifs: InterfaceTable, pinger: Pinger | null = null): NodeRuntime {
  const data: IcmpData = { ifs, out: new Int32Array(0), pinger };
  const rt = graph.register({
    name: ICMP4_ECHO,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: data,
    fn: icmp4Echo,
    formatTrace: formatIcmpTrace,
  });
  data.out = ifs.attach(rt);
  return rt;
}

function icmp4Echo(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const { ifs, out, pinger } = rt.runtimeData as IcmpData;
  const pool = rt.graph.pool;
  const v = pool.view,
    u8 = pool.u8,
    offset = pool.offset,
    length = pool.length,
    flags = pool.flags,
    rxIf = pool.rxIf,
    error = pool.error;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  let replies = 0;
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = offset[bi];
    const fl = flags[bi];
    const len = fl & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : length[bi];
    let err = -1;
    const traced = rt.traceOn && (fl & BufferFlag.TRACED) !== 0;
    // The 8-byte header must be in the first segment (drivers chain after >= 128 bytes).
    if (len < 8 || length[bi] < 8) err = IcmpError.TRUNCATED;
    else if (!(fl & BufferFlag.L4_CKSUM_OK) && packetSum(pool, bi) !== 0xffff) err = IcmpError.BAD_CHECKSUM;
    else if (u8[o] !== ICMP_ECHO_REQUEST) err = u8[o] === ICMP_ECHO_REPLY ? IcmpError.ECHO_REPLY : IcmpError.OTHER_TYPE;
    let ours = false;
    if (err === IcmpError.ECHO_REPLY && pinger !== null && v.getUint16(o + 4) === pinger.id)
      ours = pinger.reply(bi, rt.graph.clock.nowNs());
    if (traced) {
      rt.addTrace(
        bi,
        len < 8
          ? `ICMP message truncated: ${len} bytes`
          : ({
              type: u8[o],
              code: u8[o + 1],
              checksum: v.getUint16(o + 2),
              id: v.getUint16(o + 4),
              seq: v.getUint16(o + 6),
              length: len,
              note: ours ? 'echo reply to our ping' : err >= 0 ? ERRORS[err].description : 'echo reply sent',
            } satisfies IcmpTrace),
      );
    }
    if (err >= 0) {
      error[bi] = eBase + err;
      nexts[i] = NEXT_DROP;
      continue;
    }
    // ICMP: echo reply, checksum over the whole message.
    u8[o] = ICMP_ECHO_REPLY;
    u8[o + 1] = 0;
    v.setUint16(o + 2, 0);
    v.setUint16(o + 2, ~packetSum(pool, bi) & 0xffff);
    // IPv4: swap the addresses, fresh TTL and checksum.
    const ip = o - IP4_HEADER_BYTES;
    const src = v.getUint32(ip + 12);
    v.setUint32(ip + 12, v.getUint32(ip + 16));
    v.setUint32(ip + 16, src);
    u8[ip + 8] = IP4_DEFAULT_TTL;
    ip4SetChecksum20(v, ip);
    // Ethernet: back to where it came from.
    const e = ip - ETH_HEADER_BYTES;
    const ix = rxIf[bi];
    const local = ifs.localInterface(src);
    if (local === 0) {
      v.setUint32(e, v.getUint32(e + 6));
      v.setUint16(e + 4, v.getUint16(e + 10));
    } else {
      v.setUint32(e, ifs.macHi[local]);
      v.setUint16(e + 4, ifs.macLo[local]);
      rxIf[bi] = local;
    }
    v.setUint32(e + 6, ifs.macHi[ix]);
    v.setUint16(e + 10, ifs.macLo[ix]);
    pool.prepend(bi, IP4_HEADER_BYTES + ETH_HEADER_BYTES);
    flags[bi] = fl & ~RX_ONLY_FLAGS;
    nexts[i] = local === 0 ? out[ix] : NEXT_LOCAL;
    replies++;
  }
  if (replies > 0) rt.countError(IcmpError.REPLIES, replies);
  rt.enqueue(vec, n);
  return n;
}
