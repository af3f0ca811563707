/**
 * The IPv4 multicast groups each interface has joined, with a count of the users of each (the
 * UD QPs attached to it: nodes/rdma/multicast.ts). ip4-input takes a datagram to a joined group
 * on the interface that joined it as local; ethernet-input takes a frame to the group's MAC
 * (01:00:5e and the group's low 23 bits, RFC 1112 6.4). A group joined or left is told to each
 * `watch`er in turn: the interface table first (the device's multicast filter), then
 * igmp4-input, which announces it (IGMPv2 reports and leaves) so a switch that snoops IGMP
 * forwards it. At most MAX_GROUPS_PER_IF per interface: every lookup is a scan of that many.
 */
import { formatIp4, isIp4Multicast } from './address.ts';

/** 224.0.0.1, all systems: IGMP's general queries come to it; every host that joins a group receives it. */
export const ALL_SYSTEMS = 0xe0000001;

/** Most IPv4 groups one interface joins. */
export const MAX_GROUPS_PER_IF = 16;

/** The Ethernet MAC of IPv4 group `g`, as the MAC tables keep it: high 32 bits. */
export function groupMacHi(g: number): number {
  return (0x01005e00 | ((g >>> 16) & 0x7f)) >>> 0;
}

/** The low 16 bits of group `g`'s MAC. */
export function groupMacLo(g: number): number {
  return g & 0xffff;
}

/** Told when an interface joins a group (its first user) or leaves it (its last). */
export type GroupWatcher = (ix: number, g: number, joined: boolean) => void;

export class Ip4Groups {
  private readonly watchers: GroupWatcher[] = [];
  /**
   * cpu.workers >= 2: one count per worker of the groups its interfaces joined, shared by the
   * workers (HandoffPlan.groups), and this worker's slot in it (shareCounts).
   */
  private shared: Int32Array | null = null;
  private self = 0;
  private readonly group: Uint32Array;
  private readonly users: Uint32Array;
  private readonly joined: Uint8Array;

  constructor(maxInterfaces: number) {
    this.group = new Uint32Array(maxInterfaces * MAX_GROUPS_PER_IF);
    this.users = new Uint32Array(maxInterfaces * MAX_GROUPS_PER_IF);
    this.joined = new Uint8Array(maxInterfaces);
  }

  /**
   * Tell `w` of every join and leave from now on, after those watching already. A watcher that
   * throws on a join undoes it: the join throws, and the watchers told before are told of the
   * leave.
   */
  watch(w: GroupWatcher): void {
    this.watchers.push(w);
  }

  /**
   * One more user of group `g` on interface `ix` (the first joins it); throws when the table is
   * full or a watcher refuses the join (the device could not take the group).
   */
  join(ix: number, g: number, ifName: string): void {
    if (!isIp4Multicast(g)) throw new RangeError(`${formatIp4(g)} is not an IPv4 multicast group (224.0.0.0/4)`);
    const base = ix * MAX_GROUPS_PER_IF,
      n = this.joined[ix];
    for (let k = 0; k < n; k++)
      if (this.group[base + k] === g) {
        this.users[base + k]++;
        return;
      }
    if (n === MAX_GROUPS_PER_IF)
      throw new RangeError(`interface ${ifName} has joined ${MAX_GROUPS_PER_IF} multicast groups, the most it can`);
    this.group[base + n] = g;
    this.users[base + n] = 1;
    this.joined[ix] = n + 1;
    for (let w = 0; w < this.watchers.length; w++) {
      try {
        this.watchers[w](ix, g, true);
      } catch (e) {
        this.joined[ix] = n;
        for (let k = 0; k < w; k++) this.watchers[k](ix, g, false);
        throw e;
      }
    }
  }

  /** One user fewer of group `g` on `ix` (the last leaves it); false when it was not joined. */
  leave(ix: number, g: number): boolean {
    const base = ix * MAX_GROUPS_PER_IF,
      n = this.joined[ix];
    for (let k = 0; k < n; k++) {
      if (this.group[base + k] !== g) continue;
      if (--this.users[base + k] === 0) {
        this.group[base + k] = this.group[base + n - 1];
        this.users[base + k] = this.users[base + n - 1];
        this.joined[ix] = n - 1;
        for (const w of this.watchers) w(ix, g, false);
      }
      return true;
    }
    return false;
  }

  /**
   * Keep this worker's count of joined groups in `counts[self]` (shared with the other workers,
   * which read it: worker-handoff copies a group's datagrams to the workers with members).
   */
  shareCounts(counts: Int32Array, self: number): void {
    if (self < 0 || self >= counts.length)
      throw new RangeError(`worker ${self} has no slot in ${counts.length} group counts`);
    this.shared = counts;
    this.self = self;
    Atomics.store(counts, self, 0);
    this.watch((_ix, _g, joined) => Atomics.add(counts, self, joined ? 1 : -1));
  }

  /**
   * Data path: whether another worker of this data plane has joined a group (a datagram sent to
   * a group is then looped back for its members there too). Bounded by the workers.
   */
  joinedElsewhere(): boolean {
    const c = this.shared;
    if (c === null) return false;
    for (let k = 0; k < c.length; k++) if (k !== this.self && Atomics.load(c, k) > 0) return true;
    return false;
  }

  /** Groups interface `ix` has joined. */
  count(ix: number): number {
    return this.joined[ix];
  }

  /** The `k`th of them (k < count(ix)). */
  at(ix: number, k: number): number {
    return this.group[ix * MAX_GROUPS_PER_IF + k];
  }

  /** Data path: whether interface `ix` has joined group `g`. */
  member(ix: number, g: number): boolean {
    const base = ix * MAX_GROUPS_PER_IF,
      n = this.joined[ix];
    for (let k = 0; k < n; k++) if (this.group[base + k] === g) return true;
    return false;
  }

  /** Data path: whether MAC (hi, lo) is the MAC of a group interface `ix` has joined. */
  macMember(ix: number, hi: number, lo: number): boolean {
    if ((hi & 0xffffff80) >>> 0 !== 0x01005e00) return false;
    const base = ix * MAX_GROUPS_PER_IF,
      n = this.joined[ix];
    for (let k = 0; k < n; k++) {
      const g = this.group[base + k];
      if (groupMacHi(g) === hi && groupMacLo(g) === lo) return true;
    }
    return false;
  }

  /** The groups interface `ix` has joined, with their users. */
  list(ix: number): { group: string; users: number }[] {
    const out: { group: string; users: number }[] = [];
    const base = ix * MAX_GROUPS_PER_IF;
    for (let k = 0; k < this.joined[ix]; k++)
      out.push({ group: formatIp4(this.group[base + k]), users: this.users[base + k] });
    return out;
  }
}
