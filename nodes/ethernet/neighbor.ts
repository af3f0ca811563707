/**
 * The IPv4 neighbor (ARP) table: (interface, address) -> MAC, for every interface, in typed
 * arrays with an open-addressing hash (linear probing, backward-shift deletion), so a lookup
 * creates nothing.
 *
 * States:
 *   INCOMPLETE  resolution under way: ARP requests every `retransmitMs` (the first one right
 *               away), at most `maxProbes`; packets to it are held (at most `holdMax`, a linked
 *               list through a per-buffer array) and sent on when the reply comes, dropped
 *               ("held packet dropped: no ARP reply") when the probes run out.
 *   REACHABLE   learned from ARP. After `ageSec` without confirmation it is deleted, unless it
 *               was used to transmit since; then it is re-probed (PROBE) and still used.
 *   PROBE       re-confirming a used entry: `maxProbes` requests, then deleted.
 *   STATIC      from configuration: never aged, evicted or overwritten by ARP.
 *
 * Size: at most `maxDynamic` non-static entries per interface and `capacity` in all; a new
 * entry past either bound evicts the oldest non-static one (its held packets are dropped).
 *
 * Every timer is a graph timer owned by `arp-input` (user = entry index), and everything the
 * table sends (requests, held packets released to ip4-rewrite, drops) goes out through that
 * node's arcs, so it works from a node, a timer or the control plane alike.
 */
import { type Graph, INVALID_INDEX, type NodeRuntime, nextTable } from '../../graph/index.ts';
import type { InterfaceTable } from '../net/interface-table.ts';
import { formatIp4, formatMacHiLo, macHi, macLo, parseIp4, parseMac } from '../net/address.ts';
import { ArpError, buildArpRequest } from './arp.ts';

export const NeighborState = {
  FREE: 0,
  INCOMPLETE: 1,
  REACHABLE: 2,
  PROBE: 3,
  STATIC: 4,
} as const;
const STATE_NAMES = ['free', 'incomplete', 'reachable', 'probe', 'static'];

/** arp-input's next indices the table uses. */
/** arp-input's next nodes (the neighbor table sends held packets on through ARP_NEXT_REWRITE). */
export const ARP_NEXT = nextTable({ DROP: 'error-drop', REWRITE: 'ip4-rewrite' });
export const ARP_NEXT_DROP = ARP_NEXT.index.DROP;
export const ARP_NEXT_REWRITE = ARP_NEXT.index.REWRITE;

export interface NeighborOptions {
  /** Entries in all interfaces together (default 4096). */
  capacity?: number;
  /** Non-static entries per interface (default 1024). */
  maxDynamic?: number;
  /** Packets held per unresolved neighbor (default 16). */
  holdMax?: number;
  /** Seconds a learned entry stays valid without confirmation (default 300). */
  ageSec?: number;
  /** Interval between ARP requests while resolving or probing, ms (default 1000). */
  retransmitMs?: number;
  /** ARP requests before giving up (default 3). */
  maxProbes?: number;
}

export interface NeighborInfo {
  interface: number;
  address: string;
  mac: string | null;
  state: string;
  /** Seconds since the entry was learned or last confirmed. */
  age: number;
  held: number;
}

/** What `hold` did with a packet. */
export const HoldResult = { HELD: 0, QUEUE_FULL: 1, TABLE_FULL: 2 } as const;

export class NeighborTable {
  readonly graph: Graph;
  readonly interfaces: InterfaceTable;
  readonly capacity: number;
  readonly maxDynamic: number;
  readonly holdMax: number;
  readonly ageNs: number;
  readonly retransmitNs: number;
  readonly maxProbes: number;

  readonly state: Uint8Array;
  readonly ifIndex: Uint32Array;
  readonly ip: Uint32Array;
  readonly macHi: Uint32Array;
  readonly macLo: Uint16Array;
  /** Set by ip4-rewrite on each use; cleared when the entry is confirmed. */
  readonly used: Uint8Array;
  private readonly updatedNs: Float64Array;
  private readonly probes: Uint8Array;
  private readonly timer: Float64Array;
  private readonly holdHead: Uint32Array;
  private readonly holdTail: Uint32Array;
  private readonly holdCount: Uint16Array;
  /** Per buffer: the next held buffer of the same neighbor. */
  private readonly holdNext: Uint32Array;
  private readonly freeList: Uint32Array;
  private nFree: number;
  private readonly slots: Int32Array;
  private readonly slotMask: number;
  private readonly shift: number;
  private readonly dynCount: Uint32Array;

  private arp: NodeRuntime | null = null;
  private outArcs: Int32Array | null = null;

  constructor(graph: Graph, interfaces: InterfaceTable, opts: NeighborOptions = {}) {
    this.graph = graph;
    this.interfaces = interfaces;
    const int = (v: number | undefined, def: number, lo: number, hi: number, what: string): number => {
      const x = v ?? def;
      if (!Number.isInteger(x) || x < lo || x > hi)
        throw new RangeError(`neighbor table: ${what} must be an integer in ${lo}..${hi}, got ${x}`);
      return x;
    };
    this.capacity = int(opts.capacity, 4096, 1, 1 << 22, 'capacity');
    this.maxDynamic = int(opts.maxDynamic, Math.min(1024, this.capacity), 1, this.capacity, 'maxDynamic');
    this.holdMax = int(opts.holdMax, 16, 0, 65535, 'holdMax');
    this.maxProbes = int(opts.maxProbes, 3, 1, 255, 'maxProbes');
    const age = opts.ageSec ?? 300;
    if (!(age > 0)) throw new RangeError(`neighbor table: ageSec must be > 0, got ${age}`);
    const rtx = opts.retransmitMs ?? 1000;
    if (!(rtx > 0)) throw new RangeError(`neighbor table: retransmitMs must be > 0, got ${rtx}`);
    this.ageNs = age * 1e9;
    this.retransmitNs = rtx * 1e6;
    const n = this.capacity;
    this.state = new Uint8Array(n);
    this.ifIndex = new Uint32Array(n);
    this.ip = new Uint32Array(n);
    this.macHi = new Uint32Array(n);
    this.macLo = new Uint16Array(n);
    this.used = new Uint8Array(n);
    this.updatedNs = new Float64Array(n);
    this.probes = new Uint8Array(n);
    this.timer = new Float64Array(n).fill(-1);
    this.holdHead = new Uint32Array(n).fill(INVALID_INDEX);
    this.holdTail = new Uint32Array(n).fill(INVALID_INDEX);
    this.holdCount = new Uint16Array(n);
    this.holdNext = new Uint32Array(graph.pool.count);
    this.freeList = new Uint32Array(n);
    for (let i = 0; i < n; i++) this.freeList[i] = n - 1 - i;
    this.nFree = n;
    let slots = 2;
    while (slots < 2 * n) slots *= 2;
    this.slots = new Int32Array(slots).fill(-1);
    this.slotMask = slots - 1;
    this.shift = 32 - Math.log2(slots);
    this.dynCount = new Uint32Array(interfaces.max);
    // Packets still held for an unresolved neighbor go back to the pool when the graph closes
    // (a pool a driver provides, such as DPDK's mempool, outlives the graph).
    graph.onClose(() => this.freeAllHeld());
  }

  /** Called by arp-input's registration: the node whose arcs and timers the table uses. */
  bind(arp: NodeRuntime): void {
    this.arp = arp;
    this.outArcs = this.interfaces.attach(arp);
  }

  /** Entries in use. */
  get size(): number {
    return this.capacity - this.nFree;
  }

  // ------------------------------------------------------------------ data path

  /** Entry of (interface, address), or -1. */
  lookup(ix: number, ip: number): number {
    const slots = this.slots,
      mask = this.slotMask,
      eip = this.ip,
      eif = this.ifIndex;
    let s = this.hash(ix, ip);
    for (;;) {
      const e = slots[s];
      if (e < 0) return -1;
      if (eip[e] === ip && eif[e] === ix) return e;
      s = (s + 1) & mask;
    }
  }

  /** True when entry `e` has a usable MAC. */
  resolved(e: number): boolean {
    return this.state[e] >= NeighborState.REACHABLE;
  }

  /**
   * Hold packet `bi` for unresolved next hop `ip` on interface `ix`, starting resolution (an
   * ARP request right away) when no entry exists yet. The caller drops the packet unless the
   * result is HELD.
   */
  hold(ix: number, ip: number, bi: number): number {
    let e = this.lookup(ix, ip);
    if (e < 0) {
      e = this.create(ix, ip, NeighborState.INCOMPLETE);
      if (e < 0) return HoldResult.TABLE_FULL;
      this.probes[e] = 1;
      this.sendRequest(ix, ip);
      this.timer[e] = this.graph.startTimer(this.arp as NodeRuntime, this.retransmitNs, e);
    }
    const n = this.holdCount[e];
    if (n >= this.holdMax) return HoldResult.QUEUE_FULL;
    this.holdNext[bi] = INVALID_INDEX;
    if (n === 0) this.holdHead[e] = bi;
    else this.holdNext[this.holdTail[e]] = bi;
    this.holdTail[e] = bi;
    this.holdCount[e] = n + 1;
    return HoldResult.HELD;
  }

  /** Packets held for entry `e`. */
  held(e: number): number {
    return this.holdCount[e];
  }

  /**
   * ARP told us `ip` is at MAC (hi, lo) on interface `ix`. Updates an existing entry (RFC 826's
   * merge); creates one only when `create` (the ARP was addressed to us). Held packets go on to
   * ip4-rewrite. Returns the entry or -1.
   */
  learn(ix: number, ip: number, hi: number, lo: number, create: boolean): number {
    const arp = this.arp as NodeRuntime;
    let e = this.lookup(ix, ip);
    if (e < 0) {
      if (!create) return -1;
      e = this.create(ix, ip, NeighborState.REACHABLE);
      if (e < 0) return -1;
      this.timer[e] = this.graph.startTimer(arp, this.ageNs, e);
      arp.countError(ArpError.LEARNED);
    } else {
      const st = this.state[e];
      if (st === NeighborState.STATIC) {
        if (this.macHi[e] !== hi || this.macLo[e] !== lo) arp.countError(ArpError.STATIC_KEPT);
        return e;
      }
      if (st === NeighborState.INCOMPLETE) arp.countError(ArpError.LEARNED);
      // The running timer (retransmit or age) re-arms itself from updatedNs when it fires.
      this.state[e] = NeighborState.REACHABLE;
    }
    this.macHi[e] = hi;
    this.macLo[e] = lo;
    this.updatedNs[e] = this.graph.clock.nowNs();
    this.used[e] = 0;
    this.probes[e] = 0;
    if (this.holdCount[e] > 0) this.release(e);
    return e;
  }

  /** A timer of entry `e` expired (arp-input's timer function). */
  onTimer(e: number): void {
    this.timer[e] = -1;
    const st = this.state[e];
    const arp = this.arp as NodeRuntime;
    if (st === NeighborState.FREE) return;
    if (st === NeighborState.STATIC) {
      if (this.holdCount[e] > 0) this.release(e);
      return;
    }
    if (st === NeighborState.REACHABLE) {
      const left = this.updatedNs[e] + this.ageNs - this.graph.clock.nowNs();
      if (left > 0) {
        this.timer[e] = this.graph.startTimer(arp, left, e);
        return;
      }
      if (this.used[e] === 0) {
        arp.countError(ArpError.AGED);
        this.remove(e, ArpError.EVICTED_HELD);
        return;
      }
      this.state[e] = NeighborState.PROBE;
      this.probes[e] = 0;
    }
    // INCOMPLETE or PROBE: another request, or give up.
    if (this.probes[e] < this.maxProbes) {
      this.probes[e]++;
      this.sendRequest(this.ifIndex[e], this.ip[e]);
      this.timer[e] = this.graph.startTimer(arp, this.retransmitNs, e);
      return;
    }
    if (st === NeighborState.PROBE) arp.countError(ArpError.AGED);
    this.remove(e, ArpError.RESOLUTION_FAILED);
  }

  // ------------------------------------------------------------------ control plane

  /** Add or replace a static entry (configuration). Held packets for it are sent on. */
  addStatic(ix: number, address: string | number, mac: string | Uint8Array): void {
    if (!this.interfaces.isConfigured(ix))
      throw new Error(`static neighbor: interface index ${ix} is not configured for IPv4`);
    const ip = typeof address === 'number' ? address >>> 0 : parseIp4(address, 'static neighbor');
    const m = parseMac(mac, `static neighbor ${formatIp4(ip)}`);
    if (m[0] & 1) throw new RangeError(`static neighbor ${formatIp4(ip)}: MAC must be unicast`);
    let e = this.lookup(ix, ip);
    if (e >= 0 && this.state[e] !== NeighborState.STATIC) {
      this.stopTimer(e);
      this.dynCount[ix]--;
      this.state[e] = NeighborState.STATIC;
    } else if (e < 0) {
      e = this.create(ix, ip, NeighborState.STATIC);
      if (e < 0)
        throw new Error(
          `static neighbor ${formatIp4(ip)}: the neighbor table is full of static entries (capacity ${this.capacity})`,
        );
    }
    this.macHi[e] = macHi(m);
    this.macLo[e] = macLo(m);
    this.updatedNs[e] = this.graph.clock.nowNs();
    if (this.holdCount[e] > 0) {
      this.release(e);
      this.graph.wake();
    }
  }

  /** Delete the entry of (interface, address); held packets are dropped. False if none. */
  delete(ix: number, address: string | number): boolean {
    const ip = typeof address === 'number' ? address >>> 0 : parseIp4(address, 'neighbor');
    const e = this.lookup(ix, ip);
    if (e < 0) return false;
    this.remove(e, ArpError.EVICTED_HELD);
    this.graph.wake();
    return true;
  }

  /**
   * Delete every learned and incomplete entry (of interface `ix`, or all when omitted), as
   * `ip neighbor flush` does; static entries stay. Held packets are dropped. Returns how many.
   */
  flush(ix = -1): number {
    let n = 0;
    for (let e = 0; e < this.capacity; e++) {
      const st = this.state[e];
      if (st === NeighborState.FREE || st === NeighborState.STATIC || (ix >= 0 && this.ifIndex[e] !== ix)) continue;
      this.remove(e, ArpError.EVICTED_HELD);
      n++;
    }
    if (n > 0) this.graph.wake();
    return n;
  }

  /** Send an ARP request for `ip` out of interface `ix` (also gratuitous ARP: ip = ours). */
  sendRequest(ix: number, ip: number): boolean {
    const ifs = this.interfaces;
    const arp = this.arp as NodeRuntime;
    const bi = buildArpRequest(this.graph.pool, ifs.macHi[ix], ifs.macLo[ix], ifs.address[ix], ip);
    if (bi === INVALID_INDEX) {
      arp.countError(ArpError.NO_BUFFER);
      return false;
    }
    this.graph.enqueueOne(arp, (this.outArcs as Int32Array)[ix], bi);
    arp.countError(ip === ifs.address[ix] ? ArpError.GRATUITOUS_SENT : ArpError.REQUESTS_SENT);
    return true;
  }

  /** Gratuitous ARP for interface `ix`'s address (call when the interface comes up). */
  announce(ix: number): boolean {
    if (!this.interfaces.isConfigured(ix))
      throw new Error(`gratuitous ARP: interface index ${ix} is not configured for IPv4`);
    const ok = this.sendRequest(ix, this.interfaces.address[ix]);
    this.graph.wake();
    return ok;
  }

  entries(): NeighborInfo[] {
    const out: NeighborInfo[] = [];
    const now = this.graph.clock.nowNs();
    for (let e = 0; e < this.capacity; e++) {
      const st = this.state[e];
      if (st === NeighborState.FREE) continue;
      out.push({
        interface: this.ifIndex[e],
        address: formatIp4(this.ip[e]),
        mac: st === NeighborState.INCOMPLETE ? null : formatMacHiLo(this.macHi[e], this.macLo[e]),
        state: STATE_NAMES[st],
        age: (now - this.updatedNs[e]) / 1e9,
        held: this.holdCount[e],
      });
    }
    return out.sort((a, b) => a.interface - b.interface || parseIp4(a.address) - parseIp4(b.address));
  }

  /** One entry (tests, show), or null. */
  get(ix: number, address: string | number): NeighborInfo | null {
    const ip = typeof address === 'number' ? address >>> 0 : parseIp4(address, 'neighbor');
    const e = this.lookup(ix, ip);
    if (e < 0) return null;
    return this.entries().find((x) => x.interface === ix && x.address === formatIp4(ip)) ?? null;
  }

  // ------------------------------------------------------------------ internals

  private hash(ix: number, ip: number): number {
    return (Math.imul(ip ^ Math.imul(ix, 0x9e3779b1), 0x85ebca6b) >>> 0) >>> this.shift;
  }

  /** A new entry (mac unset), evicting when a bound is reached; -1 when nothing can go. */
  private create(ix: number, ip: number, state: number): number {
    const dynamic = state !== NeighborState.STATIC;
    if (dynamic && this.dynCount[ix] >= this.maxDynamic) this.evictOldest(ix);
    if (this.nFree === 0) this.evictOldest(-1);
    if (this.nFree === 0 || (dynamic && this.dynCount[ix] >= this.maxDynamic)) return -1;
    const e = this.freeList[--this.nFree];
    this.state[e] = state;
    this.ifIndex[e] = ix;
    this.ip[e] = ip;
    this.macHi[e] = 0;
    this.macLo[e] = 0;
    this.used[e] = 0;
    this.probes[e] = 0;
    this.updatedNs[e] = this.graph.clock.nowNs();
    this.timer[e] = -1;
    this.holdCount[e] = 0;
    this.holdHead[e] = INVALID_INDEX;
    this.holdTail[e] = INVALID_INDEX;
    if (dynamic) this.dynCount[ix]++;
    const slots = this.slots,
      mask = this.slotMask;
    let s = this.hash(ix, ip);
    while (slots[s] >= 0) s = (s + 1) & mask;
    slots[s] = e;
    return e;
  }

  /** Evict the least recently confirmed non-static entry (of interface `ix`, or any when -1). */
  private evictOldest(ix: number): void {
    let best = -1,
      bestNs = Infinity;
    for (let e = 0; e < this.capacity; e++) {
      const st = this.state[e];
      if (st === NeighborState.FREE || st === NeighborState.STATIC) continue;
      if (ix >= 0 && this.ifIndex[e] !== ix) continue;
      if (this.updatedNs[e] < bestNs) {
        bestNs = this.updatedNs[e];
        best = e;
      }
    }
    if (best < 0) return;
    (this.arp as NodeRuntime).countError(ArpError.EVICTED);
    this.remove(best, ArpError.EVICTED_HELD);
  }

  /** Delete entry `e`, dropping its held packets with arp-input error `code`. */
  private remove(e: number, code: number): void {
    this.stopTimer(e);
    if (this.holdCount[e] > 0) this.dropHeld(e, code);
    if (this.state[e] !== NeighborState.STATIC) this.dynCount[this.ifIndex[e]]--;
    this.state[e] = NeighborState.FREE;
    this.unhash(e);
    this.freeList[this.nFree++] = e;
  }

  private stopTimer(e: number): void {
    if (this.timer[e] >= 0) this.graph.stopTimer(this.timer[e]);
    this.timer[e] = -1;
  }

  /** Held packets of `e` back into ip4-rewrite, in order. */
  private release(e: number): void {
    const arp = this.arp as NodeRuntime,
      g = this.graph;
    let bi = this.holdHead[e];
    while (bi !== INVALID_INDEX) {
      const nx = this.holdNext[bi];
      g.enqueueOne(arp, ARP_NEXT_REWRITE, bi);
      bi = nx;
    }
    this.holdCount[e] = 0;
    this.holdHead[e] = this.holdTail[e] = INVALID_INDEX;
  }

  private freeAllHeld(): void {
    const pool = this.graph.pool,
      one = new Uint32Array(1);
    for (let e = 0; e < this.capacity; e++) {
      let bi = this.holdHead[e];
      while (bi !== INVALID_INDEX) {
        const nx = this.holdNext[bi];
        one[0] = bi;
        pool.free(one, 0, 1);
        bi = nx;
      }
      this.holdCount[e] = 0;
      this.holdHead[e] = this.holdTail[e] = INVALID_INDEX;
    }
  }

  private dropHeld(e: number, code: number): void {
    const arp = this.arp as NodeRuntime,
      g = this.graph,
      err = g.pool.error,
      idx = arp.errorIndex(code);
    let bi = this.holdHead[e];
    while (bi !== INVALID_INDEX) {
      const nx = this.holdNext[bi];
      err[bi] = idx;
      g.enqueueOne(arp, ARP_NEXT_DROP, bi);
      bi = nx;
    }
    this.holdCount[e] = 0;
    this.holdHead[e] = this.holdTail[e] = INVALID_INDEX;
  }

  /** Remove `e` from the hash (backward-shift deletion keeps every probe chain intact). */
  private unhash(e: number): void {
    const slots = this.slots,
      mask = this.slotMask;
    let i = this.hash(this.ifIndex[e], this.ip[e]);
    while (slots[i] !== e) i = (i + 1) & mask;
    slots[i] = -1;
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const f = slots[j];
      if (f < 0) return;
      const k = this.hash(this.ifIndex[f], this.ip[f]);
      // f may move back to the hole at i unless its home k lies cyclically in (i, j].
      const stays = j > i ? k > i && k <= j : k > i || k <= j;
      if (!stays) {
        slots[i] = f;
        slots[j] = -1;
        i = j;
      }
    }
  }
}
