/**
 * The nodes' per-interface L2/L3 table: our MAC, IPv4 address and prefix, optional gateway,
 * MTU, subscribed multicast MACs and the name of the interface's `<if>-output` node. Indexed by
 * the interface index of the drivers' registry (what `pool.rxIf`/`pool.txIf` hold; 0 = none).
 * Whoever wires a data plane (tests, the Dataplane facade) fills it; the nodes read typed arrays.
 *
 * Nodes that transmit on an interface `attach` themselves: they get an Int32Array of their next
 * index for each interface's `<if>-output` (-1 = not configured), kept up to date as interfaces
 * are added (the arcs are added with `graph.addNext`).
 *
 * Routing is what a host needs: a destination inside an interface's prefix is on-link there;
 * anything else goes to the first interface with a gateway (the default route), else no route.
 */
import { checkMtu, type Graph, type NodeRuntime } from '../../graph/index.ts';
import { ALL_SYSTEMS, groupMacHi, groupMacLo, Ip4Groups } from './ip4-groups.ts';
import {
  formatIp4,
  formatMac,
  formatMacHiLo,
  macHi,
  macLo,
  parseIp4,
  parseIp4Prefix,
  parseMac,
  prefixMask,
} from './address.ts';

export interface InterfaceTableConfig {
  /** Interface index in the drivers' registry (`Interface.index`, what `pool.rxIf` holds). */
  index: number;
  /** For show commands (default `if<index>`). */
  name?: string;
  /** Our MAC: "aa:bb:cc:dd:ee:ff" or 6 bytes. */
  mac: string | Uint8Array;
  /** "10.0.0.1/24" (or "10.0.0.1" with `prefix`). */
  address: string;
  prefix?: number;
  /** Default gateway reached through this interface (must be on-link). */
  gateway?: string;
  /** IP MTU (default 1500). */
  mtu?: number;
  /** The interface's output node, `<if>-output`; must be registered already. */
  output: string;
  /** Checksums the interface's NIC computes on transmit (the driver's `txChecksumOffload()`). */
  txChecksumOffload?: TxChecksumChoice;
}

/**
 * `InterfaceTable.txOffload` bits. UDP_NONE: UDP datagrams go out without a checksum (0, as
 * IPv4 allows): a link that cannot corrupt them (memif's shared memory, on request).
 */
export const TxOffload = { IP4_CKSUM: 1, UDP_CKSUM: 2, UDP_NONE: 4 } as const;

/** A driver's transmit checksum choices (Driver.txChecksumOffload): what its NIC computes, or UDP with none. */
export interface TxChecksumChoice {
  ip4: boolean;
  udp: boolean;
  udpNone?: boolean;
}

/**
 * What an interface reads from its link (InterfaceTable.follow): the MTU, the checksum choices;
 * and what it tells the link: the multicast MACs it receives (Driver.multicastFilter).
 */
export interface LinkSource {
  mtu?: () => number;
  offload?: () => TxChecksumChoice;
  multicast?: (macs: Uint8Array) => void;
}

/** The TxOffload bits of `c` (none when absent). */
function offloadBits(c: TxChecksumChoice | undefined): number {
  return (
    (c?.ip4 ? TxOffload.IP4_CKSUM : 0) | (c?.udp ? TxOffload.UDP_CKSUM : 0) | (c?.udpNone ? TxOffload.UDP_NONE : 0)
  );
}

export interface InterfaceTableInfo {
  index: number;
  name: string;
  mac: string;
  address: string;
  prefix: number;
  gateway: string | null;
  mtu: number;
  output: string;
  multicast: string[];
}

/** Most multicast MACs one interface subscribes to. */
export const MAX_MCAST_PER_IF = 8;

export class InterfaceTable {
  readonly graph: Graph;
  /** Interface indices 0..max-1 (index 0 is never configured). */
  readonly max: number;
  readonly configured: Uint8Array;
  readonly macHi: Uint32Array;
  readonly macLo: Uint16Array;
  readonly address: Uint32Array;
  readonly mask: Uint32Array;
  readonly prefix: Uint8Array;
  /** Gateway address, 0 = none. */
  readonly gateway: Uint32Array;
  readonly mtu: Uint32Array;
  /** Interface index -> what it reads from its link at each refresh (follow). */
  private readonly links: Map<number, LinkSource>;
  /** TxOffload bits: checksums the NIC computes on transmit. */
  readonly txOffload: Uint8Array;
  readonly mcastHi: Uint32Array;
  readonly mcastLo: Uint16Array;
  readonly mcastCount: Uint8Array;
  /** The IPv4 multicast groups each interface has joined (UD QPs attached to them). */
  readonly groups: Ip4Groups;
  readonly names: string[] = [];
  readonly outputs: string[] = [];
  /** Configured interface indices, in the order they were added. */
  readonly list: number[] = [];
  private readonly attached: { rt: NodeRuntime; arcs: Int32Array }[] = [];
  /** Address -> interface index (control plane lookups). */
  private readonly byAddress = new Map<number, number>();

  constructor(graph: Graph, max = 64) {
    if (!Number.isInteger(max) || max < 2 || max > 65536)
      throw new RangeError(`interfaces: max must be an integer in 2..65536, got ${max}`);
    this.graph = graph;
    this.max = max;
    this.configured = new Uint8Array(max);
    this.macHi = new Uint32Array(max);
    this.macLo = new Uint16Array(max);
    this.address = new Uint32Array(max);
    this.mask = new Uint32Array(max);
    this.prefix = new Uint8Array(max);
    this.gateway = new Uint32Array(max);
    this.mtu = new Uint32Array(max);
    this.links = new Map();
    this.txOffload = new Uint8Array(max);
    this.mcastHi = new Uint32Array(max * MAX_MCAST_PER_IF);
    this.mcastLo = new Uint16Array(max * MAX_MCAST_PER_IF);
    this.mcastCount = new Uint8Array(max);
    this.groups = new Ip4Groups(max);
    // First of the watchers: a group the device cannot take is refused before IGMP announces it.
    this.groups.watch((ix, _g, joined) => {
      try {
        this.tellMulticast(ix);
      } catch (e) {
        if (joined) throw e; // a filter that keeps a group it no longer needs costs nothing
      }
    });
  }

  /**
   * The multicast MACs interface `ix` receives, told to its link: those subscribed by hand, each
   * joined group's (with all-systems, 224.0.0.1, whose IGMP queries ask for them). At most
   * MAX_MCAST_PER_IF + MAX_GROUPS_PER_IF + 1, without repeats (two groups can share a MAC).
   */
  private tellMulticast(ix: number): void {
    const tell = this.links.get(ix)?.multicast;
    if (tell === undefined) return;
    const hi: number[] = [],
      lo: number[] = [];
    const add = (h: number, l: number) => {
      for (let k = 0; k < hi.length; k++) if (hi[k] === h && lo[k] === l) return;
      hi.push(h);
      lo.push(l);
    };
    for (let k = 0; k < this.mcastCount[ix]; k++)
      add(this.mcastHi[ix * MAX_MCAST_PER_IF + k], this.mcastLo[ix * MAX_MCAST_PER_IF + k]);
    const n = this.groups.count(ix);
    if (n > 0) add(groupMacHi(ALL_SYSTEMS), groupMacLo(ALL_SYSTEMS));
    for (let k = 0; k < n; k++) {
      const g = this.groups.at(ix, k);
      add(groupMacHi(g), groupMacLo(g));
    }
    const macs = new Uint8Array(hi.length * 6);
    const v = new DataView(macs.buffer);
    for (let k = 0; k < hi.length; k++) {
      v.setUint32(k * 6, hi[k]);
      v.setUint16(k * 6 + 4, lo[k]);
    }
    tell(macs);
  }

  /**
   * Take what `link` gives of interface `ix` from its link from now on (a memif link to another
   * rdma-graph data plane: its MTU, its UDP checksum): read now, and again by refresh.
   */
  follow(ix: number, link: LinkSource): void {
    this.links.set(ix, link);
    this.refresh(ix);
    if (this.mcastCount[ix] > 0 || this.groups.count(ix) > 0) this.tellMulticast(ix);
  }

  /** Interface `ix` brought up to date from its link (follow), when it follows one; its MTU. */
  refresh(ix: number): number {
    const link = this.links.get(ix);
    if (link !== undefined) {
      if (link.mtu !== undefined) this.mtu[ix] = checkMtu(link.mtu(), `interface ${this.names[ix] ?? ix}`);
      if (link.offload !== undefined) this.txOffload[ix] = offloadBits(link.offload());
    }
    return this.mtu[ix];
  }

  /** Configure an interface for IPv4 and add the output arcs of every attached node. */
  add(cfg: InterfaceTableConfig): void {
    const ix = cfg.index;
    const where = `interface ${cfg.name ?? ix}`;
    if (!Number.isInteger(ix) || ix < 1 || ix >= this.max)
      throw new RangeError(`${where}: index must be an integer in 1..${this.max - 1}, got ${ix}`);
    if (this.configured[ix])
      throw new Error(`${where}: interface index ${ix} is already configured (${this.names[ix]})`);
    const mac = parseMac(cfg.mac, `${where}: mac`);
    if (mac[0] & 1) throw new RangeError(`${where}: mac ${formatMac(mac)} is a group (multicast) address`);
    const p = parseIp4Prefix(cfg.address, `${where}: address`);
    const prefix = cfg.prefix ?? p.prefix;
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > 32)
      throw new RangeError(`${where}: prefix must be 0..32, got ${prefix}`);
    if (p.address === 0 || p.address >>> 28 >= 0xe || p.address >>> 24 === 127)
      throw new RangeError(`${where}: ${formatIp4(p.address)} cannot be an interface address`);
    const other = this.byAddress.get(p.address);
    if (other !== undefined)
      throw new Error(`${where}: address ${formatIp4(p.address)} is already on ${this.names[other]}`);
    const mask = prefixMask(prefix);
    let gw = 0;
    if (cfg.gateway !== undefined) {
      gw = parseIp4(cfg.gateway, `${where}: gateway`);
      if (((gw ^ p.address) & mask) !== 0 || gw === p.address)
        throw new RangeError(`${where}: gateway ${cfg.gateway} is not a neighbor on ${cfg.address}/${prefix}`);
    }
    const mtu = cfg.mtu ?? 1500;
    checkMtu(mtu, where);
    if (!this.graph.hasNode(cfg.output))
      throw new Error(
        `${where}: output node "${cfg.output}" does not exist (add the interface to the drivers' registry first)`,
      );
    // Arcs first: if one fails nothing is configured.
    const arcs = this.attached.map((a) => this.graph.addNext(a.rt, cfg.output));
    this.attached.forEach((a, k) => (a.arcs[ix] = arcs[k]));
    this.macHi[ix] = macHi(mac);
    this.macLo[ix] = macLo(mac);
    this.address[ix] = p.address;
    this.prefix[ix] = prefix;
    this.txOffload[ix] = offloadBits(cfg.txChecksumOffload);
    this.mask[ix] = mask;
    this.gateway[ix] = gw;
    this.mtu[ix] = mtu;
    this.names[ix] = cfg.name ?? `if${ix}`;
    this.outputs[ix] = cfg.output;
    this.configured[ix] = 1;
    this.list.push(ix);
    this.byAddress.set(p.address, ix);
  }

  /**
   * A node that transmits on interfaces: returns its next index per interface index (-1 when
   * not configured), including interfaces added later.
   */
  attach(rt: NodeRuntime): Int32Array {
    const have = this.attached.find((a) => a.rt === rt);
    if (have) return have.arcs;
    const arcs = new Int32Array(this.max).fill(-1);
    for (const ix of this.list) arcs[ix] = this.graph.addNext(rt, this.outputs[ix]);
    this.attached.push({ rt, arcs });
    return arcs;
  }

  /** Also accept frames to this multicast MAC on the interface. */
  subscribeMulticast(ix: number, mac: string | Uint8Array): void {
    this.check(ix);
    const m = parseMac(mac, `interface ${this.names[ix]}: multicast mac`);
    if (!(m[0] & 1)) throw new RangeError(`interface ${this.names[ix]}: ${formatMac(m)} is not a multicast MAC`);
    const hi = macHi(m),
      lo = macLo(m),
      base = ix * MAX_MCAST_PER_IF,
      n = this.mcastCount[ix];
    for (let k = 0; k < n; k++) if (this.mcastHi[base + k] === hi && this.mcastLo[base + k] === lo) return;
    if (n === MAX_MCAST_PER_IF)
      throw new Error(`interface ${this.names[ix]}: at most ${MAX_MCAST_PER_IF} multicast MACs`);
    this.mcastHi[base + n] = hi;
    this.mcastLo[base + n] = lo;
    this.mcastCount[ix] = n + 1;
    try {
      this.tellMulticast(ix);
    } catch (e) {
      this.mcastCount[ix] = n;
      throw e;
    }
  }

  /** True when interface `ix` subscribed to multicast MAC (hi, lo). */
  mcastMember(ix: number, hi: number, lo: number): boolean {
    const base = ix * MAX_MCAST_PER_IF,
      n = this.mcastCount[ix];
    for (let k = 0; k < n; k++) if (this.mcastHi[base + k] === hi && this.mcastLo[base + k] === lo) return true;
    return false;
  }

  /** Interface owning local address `a`, or 0. Data path: a scan of the configured list. */
  localInterface(a: number): number {
    const list = this.list,
      addr = this.address;
    for (let k = 0; k < list.length; k++) if (addr[list[k]] === a) return list[k];
    return 0;
  }

  /** Interface to reach `dst` on: on-link prefix match (longest), else the default route, else 0. */
  route(dst: number): number {
    const list = this.list,
      addr = this.address,
      mask = this.mask,
      prefix = this.prefix;
    let best = 0,
      bestLen = -1;
    for (let k = 0; k < list.length; k++) {
      const ix = list[k];
      if (((dst ^ addr[ix]) & mask[ix]) === 0 && prefix[ix] > bestLen) {
        best = ix;
        bestLen = prefix[ix];
      }
    }
    if (best !== 0) return best;
    for (let k = 0; k < list.length; k++) if (this.gateway[list[k]] !== 0) return list[k];
    return 0;
  }

  /**
   * The interface for a datagram from our address `src` to `dst`: the one that owns `src` when
   * `dst` is on its link or it has a gateway (a socket bound to an interface's address sends
   * out of that interface, even when another interface shares the subnet); else route(dst). A
   * multicast group: multicastInterface.
   */
  routeFrom(src: number, dst: number): number {
    if (dst >>> 28 === 0xe) return this.multicastInterface(src, dst);
    if (src !== 0) {
      const list = this.list;
      for (let k = 0; k < list.length; k++) {
        const ix = list[k];
        if (this.address[ix] !== src) continue;
        if (((dst ^ src) & this.mask[ix]) === 0 || this.gateway[ix] !== 0) return ix;
        break;
      }
    }
    return this.route(dst);
  }

  /**
   * The interface a datagram from `src` to multicast group `g` goes out of, and that a UD QP
   * with address `src` joins `g` on (nodes/rdma/multicast.ts): the one owning `src` (0 if none
   * does); with no source, route(g), else the first interface with an address (as an unbound
   * socket's multicast leaves by the default route, or the first interface without one).
   */
  multicastInterface(src: number, g: number): number {
    if (src !== 0) return this.localInterface(src);
    const r = this.route(g);
    if (r !== 0) return r;
    for (const ix of this.list) if (this.address[ix] !== 0) return ix;
    return 0;
  }

  /**
   * Next hop for `dst` out of interface `ix`: `dst` itself when on-link (or a broadcast), the
   * gateway otherwise, 0 when neither.
   */
  nextHop(ix: number, dst: number): number {
    if (((dst ^ this.address[ix]) & this.mask[ix]) === 0 || dst === 0xffffffff) return dst;
    return this.gateway[ix];
  }

  /** The subnet's directed broadcast address of interface `ix` (none for /31 and /32). */
  isBroadcast(ix: number, a: number): boolean {
    if (a === 0xffffffff) return true;
    const m = this.mask[ix];
    return this.prefix[ix] < 31 && ((a ^ this.address[ix]) & m) === 0 && (a | m) >>> 0 === 0xffffffff;
  }

  isConfigured(ix: number): boolean {
    return ix > 0 && ix < this.max && this.configured[ix] === 1;
  }

  /** Control plane: interface index by name or address string. */
  find(nameOrAddress: string): number {
    for (const ix of this.list) if (this.names[ix] === nameOrAddress) return ix;
    return this.byAddress.get(/^\d+\.\d+\.\d+\.\d+$/.test(nameOrAddress) ? parseIp4(nameOrAddress) : -1) ?? 0;
  }

  info(ix: number): InterfaceTableInfo {
    this.check(ix);
    const mc: string[] = [];
    for (let k = 0; k < this.mcastCount[ix]; k++) {
      const hi = this.mcastHi[ix * MAX_MCAST_PER_IF + k],
        lo = this.mcastLo[ix * MAX_MCAST_PER_IF + k];
      mc.push(formatMacHiLo(hi, lo));
    }
    return {
      index: ix,
      name: this.names[ix],
      mac: formatMacHiLo(this.macHi[ix], this.macLo[ix]),
      address: formatIp4(this.address[ix]),
      prefix: this.prefix[ix],
      gateway: this.gateway[ix] ? formatIp4(this.gateway[ix]) : null,
      mtu: this.mtu[ix],
      output: this.outputs[ix],
      multicast: mc,
    };
  }

  all(): InterfaceTableInfo[] {
    return this.list.map((ix) => this.info(ix));
  }

  private check(ix: number): void {
    if (!this.isConfigured(ix)) throw new Error(`interface index ${ix} is not configured for IPv4`);
  }
}
