/**
 * igmp4-input: IGMPv2 (RFC 2236) host side for the IPv4 multicast groups the interfaces join
 * (net/ip4-groups.ts: UD QPs attached to groups, nodes/rdma/multicast.ts), so that a switch or
 * router that snoops IGMP forwards the groups to us, as the kernel's does for RoCE multicast.
 *
 * - A group's first user on an interface: an unsolicited Membership Report (type 0x16) to the
 *   group, sent at once and once more UNSOLICITED_REPEAT_NS later (RFC 2236 3: "repeat once or
 *   twice after short delays").
 * - Its last user gone: a Leave Group (0x17) to all-routers (224.0.0.2).
 * - A Membership Query (0x11) received on an interface: for a general query (group 0), each
 *   group the interface joined, for a group-specific one that group if joined, gets a report
 *   after a random delay up to the query's Max Response Time (an IGMPv1 query's 0: 10 s); a
 *   report already due sooner stays. A report of another host for the group cancels ours
 *   (RFC 2236's suppression). Leaves and unknown types are counted and dropped.
 *
 * Every message goes out with TTL 1, TOS 0xc0 and the IP Router Alert option (RFC 2113), whole
 * frames built here and handed to the interface's output (as ARP's are). Bounded by our own
 * state: at most one pending report per joined group (MAX_GROUPS_PER_IF an interface), whatever
 * a flood of queries asks.
 */
import {
  BufferFlag,
  type Frame,
  type Graph,
  INVALID_INDEX,
  type NodeRuntime,
  errorTable,
  nextTable,
} from '../../graph/index.ts';
import { ETH_HEADER_BYTES, ETHERTYPE_IP4 } from '../ethernet/ethernet.ts';
import { formatIp4 } from '../net/address.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import { ALL_SYSTEMS, MAX_GROUPS_PER_IF, groupMacHi, groupMacLo } from '../net/ip4-groups.ts';
import { foldSum, rangeSum } from './ip4.ts';

export const IGMP4_INPUT = 'igmp4-input';
export const IP_PROTO_IGMP = 2;
/** 224.0.0.1 (all systems: general queries; net/ip4-groups.ts) and 224.0.0.2 (all routers: leaves). */
export { ALL_SYSTEMS };
export const ALL_ROUTERS = 0xe0000002;

const IGMP_QUERY = 0x11;
const IGMP_V1_REPORT = 0x12;
const IGMP_V2_REPORT = 0x16;
const IGMP_LEAVE = 0x17;
const IGMP_BYTES = 8;
/** IPv4 header with the Router Alert option (4 bytes). */
const IP_RA_HEADER = 24;
/** An unsolicited report's repeat (RFC 2236's Unsolicited Report Interval is 10 s; "short delays"). */
export const UNSOLICITED_REPEAT_NS = 1e9;
/** An IGMPv1 query's (Max Response Time 0) response time. */
const V1_MAX_RESPONSE_NS = 10e9;

const NEXT = nextTable({ DROP: 'error-drop' });
const NEXT_DROP = NEXT.index.DROP;

const ERROR_TABLE = errorTable({
  QUERIES: { name: 'queries', description: 'IGMP membership queries received', severity: 'info' },
  REPORTS_SEEN: { name: 'reports_seen', description: "other hosts' IGMP reports received", severity: 'info' },
  REPORTS_SENT: { name: 'reports_sent', description: 'IGMP membership reports sent', severity: 'info' },
  LEAVES_SENT: { name: 'leaves_sent', description: 'IGMP leave messages sent', severity: 'info' },
  TRUNCATED: {
    name: 'truncated',
    description: 'IGMP message shorter than 8 bytes or not in one buffer',
    severity: 'error',
  },
  BAD_CHECKSUM: { name: 'bad_checksum', description: 'bad IGMP checksum', severity: 'error' },
  OTHER: { name: 'other', description: 'IGMP leave or unknown type (dropped)', severity: 'info' },
  NO_BUFFER: { name: 'no_buffer', description: 'IGMP message not sent: no buffer', severity: 'warn' },
});
export const Igmp4Error = ERROR_TABLE.code;
const ERRORS = ERROR_TABLE.list;

/**
 * The reports pending per (interface, group): MAX_GROUPS_PER_IF slots an interface, each the
 * group (0: free), when it is due and the timer that sends it (user = the slot). Typed arrays:
 * a query costs no allocation, however many come.
 */
export class Igmp4 {
  private rt: NodeRuntime | null = null;
  private out: Int32Array = new Int32Array(0);
  private readonly pGroup: Uint32Array;
  private readonly pDue: Float64Array;
  private readonly pTimer: Float64Array;
  private nPending = 0;

  constructor(
    readonly graph: Graph,
    readonly ifs: InterfaceTable,
  ) {
    const slots = ifs.max * MAX_GROUPS_PER_IF;
    this.pGroup = new Uint32Array(slots);
    this.pDue = new Float64Array(slots);
    this.pTimer = new Float64Array(slots).fill(-1);
    ifs.groups.watch((ix, g, joined) => (joined ? this.joined(ix, g) : this.left(ix, g)));
  }

  bind(rt: NodeRuntime): void {
    this.rt = rt;
    this.out = this.ifs.attach(rt);
  }

  /** The first user of `g` on `ix`: a report now and one more shortly. */
  private joined(ix: number, g: number): void {
    this.send(ix, IGMP_V2_REPORT, g, g);
    this.schedule(ix, g, UNSOLICITED_REPEAT_NS);
    this.graph.wake();
  }

  /** The last user gone: its pending report cancelled, a leave to all routers. */
  private left(ix: number, g: number): void {
    this.cancel(ix, g);
    this.send(ix, IGMP_LEAVE, g, ALL_ROUTERS);
    this.graph.wake();
  }

  /** `g`'s slot on `ix`, or -1 (a scan of the interface's MAX_GROUPS_PER_IF slots). */
  private slotOf(ix: number, g: number): number {
    const base = ix * MAX_GROUPS_PER_IF;
    for (let k = 0; k < MAX_GROUPS_PER_IF; k++) if (this.pGroup[base + k] === g) return base + k;
    return -1;
  }

  /** A report for `g` on `ix` within `delayNs` (an earlier one pending stays). */
  schedule(ix: number, g: number, delayNs: number): void {
    const due = this.graph.clock.nowNs() + delayNs;
    let s = this.slotOf(ix, g);
    if (s >= 0) {
      if (this.pDue[s] <= due) return;
      this.graph.stopTimer(this.pTimer[s]);
    } else {
      s = this.slotOf(ix, 0); // a free one: an interface joins at most MAX_GROUPS_PER_IF groups
      if (s < 0) return;
      this.pGroup[s] = g;
      this.nPending++;
    }
    this.pDue[s] = due;
    this.pTimer[s] = this.graph.startTimer(this.rt as NodeRuntime, delayNs, s);
  }

  cancel(ix: number, g: number): void {
    const s = this.slotOf(ix, g);
    if (s < 0) return;
    this.graph.stopTimer(this.pTimer[s]);
    this.free(s);
  }

  private free(s: number): void {
    this.pGroup[s] = 0;
    this.pTimer[s] = -1;
    this.nPending--;
  }

  /** Slot `s`'s report is due. */
  onTimer(s: number): void {
    const g = this.pGroup[s];
    if (g === 0) return;
    this.free(s);
    const ix = (s / MAX_GROUPS_PER_IF) | 0;
    if (this.ifs.groups.member(ix, g)) this.send(ix, IGMP_V2_REPORT, g, g);
  }

  /** Reports waiting for their time (for tests and `show`). */
  get pendingReports(): number {
    return this.nPending;
  }

  /** One IGMP message (`type`, `group`) to `dst` out of `ix`: a whole frame, TTL 1, Router Alert. */
  private send(ix: number, type: number, group: number, dst: number): void {
    const rt = this.rt as NodeRuntime;
    const ifs = this.ifs;
    if (!ifs.isConfigured(ix) || this.out[ix] < 0) return;
    const pool = this.graph.pool;
    const bi = pool.allocOne();
    if (bi === INVALID_INDEX) {
      rt.countError(Igmp4Error.NO_BUFFER);
      return;
    }
    const v = pool.view,
      o = pool.offset[bi];
    v.setUint32(o, groupMacHi(dst));
    v.setUint16(o + 4, groupMacLo(dst));
    v.setUint32(o + 6, ifs.macHi[ix]);
    v.setUint16(o + 10, ifs.macLo[ix]);
    v.setUint16(o + 12, ETHERTYPE_IP4);
    const ip = o + ETH_HEADER_BYTES;
    v.setUint32(ip, (0x46c00000 | (IP_RA_HEADER + IGMP_BYTES)) >>> 0); // version 4, IHL 6, TOS 0xc0
    v.setUint32(ip + 4, 0);
    v.setUint32(ip + 8, (1 << 24) | (IP_PROTO_IGMP << 16)); // TTL 1, IGMP, checksum 0
    v.setUint32(ip + 12, ifs.address[ix]);
    v.setUint32(ip + 16, dst);
    v.setUint32(ip + 20, 0x94040000); // Router Alert: copied, option 20, length 4, value 0
    v.setUint16(ip + 10, ~foldSum(rangeSum(v, pool.u8, ip, IP_RA_HEADER)) & 0xffff);
    const m = ip + IP_RA_HEADER;
    v.setUint32(m, type << 24); // type, max response 0, checksum 0
    v.setUint32(m + 4, group);
    v.setUint16(m + 2, ~foldSum(rangeSum(v, pool.u8, m, IGMP_BYTES)) & 0xffff);
    pool.length[bi] = ETH_HEADER_BYTES + IP_RA_HEADER + IGMP_BYTES;
    this.graph.enqueueOne(rt, this.out[ix], bi);
    rt.countError(type === IGMP_LEAVE ? Igmp4Error.LEAVES_SENT : Igmp4Error.REPORTS_SENT);
  }
}

export function registerIgmp4Input(graph: Graph, igmp: Igmp4): NodeRuntime {
  const rt = graph.register({
    name: IGMP4_INPUT,
    next: NEXT.names,
    errors: ERRORS,
    runtimeData: igmp,
    fn: igmp4Input,
    timer: (r, user) => (r.runtimeData as Igmp4).onTimer(user),
    formatTrace: (r) => String(r),
  });
  igmp.bind(rt);
  return rt;
}

/** In: the IGMP message (ip4-input advanced past the IPv4 header, options included). */
function igmp4Input(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const igmp = rt.runtimeData as Igmp4;
  const pool = rt.graph.pool;
  const v = pool.view,
    error = pool.error;
  const vec = f.vec,
    n = f.n,
    nexts = rt.nexts;
  const eBase = rt.errorIndex(0);
  for (let i = 0; i < n; i++) {
    const bi = vec[i];
    const o = pool.offset[bi],
      len = pool.flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : pool.length[bi];
    const ix = pool.rxIf[bi];
    let err: number = Igmp4Error.OTHER;
    let note = '';
    // A message is one buffer (8 bytes; IGMPv3's queries a few more): a chain is not one of ours.
    if (len < IGMP_BYTES || pool.length[bi] < len) err = Igmp4Error.TRUNCATED;
    else if (foldSum(rangeSum(v, pool.u8, o, len)) !== 0xffff) err = Igmp4Error.BAD_CHECKSUM;
    else {
      const type = v.getUint8(o),
        code = v.getUint8(o + 1),
        group = v.getUint32(o + 4);
      if (type === IGMP_QUERY) {
        err = Igmp4Error.QUERIES;
        const maxNs = code === 0 ? V1_MAX_RESPONSE_NS : code * 1e8;
        const groups = igmp.ifs.groups;
        if (group === 0) {
          const k = groups.count(ix);
          for (let j = 0; j < k; j++) igmp.schedule(ix, groups.at(ix, j), Math.random() * maxNs);
          if (rt.traceOn) note = `general query: ${k} group(s) to report within ${maxNs / 1e6} ms`;
        } else if (groups.member(ix, group)) {
          igmp.schedule(ix, group, Math.random() * maxNs);
          if (rt.traceOn) note = `query for ${formatIp4(group)}: a report within ${maxNs / 1e6} ms`;
        }
      } else if (type === IGMP_V2_REPORT || type === IGMP_V1_REPORT) {
        err = Igmp4Error.REPORTS_SEEN;
        igmp.cancel(ix, group); // another member answered for the link
      }
    }
    if (rt.traceOn && pool.flags[bi] & BufferFlag.TRACED)
      rt.addTrace(bi, `IGMP: ${ERRORS[err].description}${note ? `; ${note}` : ''}`);
    error[bi] = eBase + err;
    nexts[i] = NEXT_DROP;
  }
  rt.graph.enqueueToNext(rt, vec, nexts, n, true);
  return n;
}
