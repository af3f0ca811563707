/**
 * Helpers of the L2–L4 tests: frame builders and parsers written independently of the nodes
 * (their own byte-by-byte checksum), a list driver (frames in from an array, frames out into
 * an array) and a one-interface stack wired the way a data plane wires it.
 */
import { Graph, type Clock, type BufferPool, BufferFlag, INVALID_INDEX } from '../graph/index.ts';
import { Interfaces, type Interface } from '../drivers/interfaces.ts';
import type { Driver, DriverCounters } from '../drivers/driver.ts';
import { zeroCounters } from '../drivers/driver.ts';
import { registerL2L4, type Netstack, type NetstackOptions } from '../nodes/netstack.ts';
import { memPool } from './helpers.ts';

export const US_MAC = '02:00:00:00:00:01';
export const PEER_MAC = '02:00:00:00:00:02';
export const OTHER_MAC = '02:00:00:00:00:99';
export const BCAST = 'ff:ff:ff:ff:ff:ff';
export const US_IP = '10.0.0.1';
export const PEER_IP = '10.0.0.2';

// ------------------------------------------------------------------ bytes

export function mac(s: string): number[] {
  return s.split(':').map((x) => parseInt(x, 16));
}

export function ip(s: string): number[] {
  return s.split('.').map(Number);
}

export function u16(x: number): number[] {
  return [(x >>> 8) & 0xff, x & 0xff];
}

export function hex(b: ArrayLike<number>): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/** RFC 1071 checksum, the plain byte-pair way (independent of the nodes' word sums). */
export function inetChecksum(bytes: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < bytes.length; i += 2) {
    const hi = bytes[i];
    const lo = i + 1 < bytes.length ? bytes[i + 1] : 0;
    sum += hi * 256 + lo;
    while (sum > 0xffff) sum = (sum & 0xffff) + Math.floor(sum / 65536);
  }
  return ~sum & 0xffff;
}

export function pseudoHeader(src: string, dst: string, proto: number, len: number): number[] {
  return [...ip(src), ...ip(dst), 0, proto, ...u16(len)];
}

// ------------------------------------------------------------------ builders

export function eth(dst: string, src: string, type: number, payload: number[]): number[] {
  return [...mac(dst), ...mac(src), ...u16(type), ...payload];
}

export function vlanEth(dst: string, src: string, tci: number, type: number, payload: number[]): number[] {
  return [...mac(dst), ...mac(src), 0x81, 0x00, ...u16(tci), ...u16(type), ...payload];
}

export interface ArpFields {
  op: number;
  sha: string;
  spa: string;
  tha?: string;
  tpa: string;
  htype?: number;
}

export function arp(f: ArpFields): number[] {
  return [
    ...u16(f.htype ?? 1),
    0x08,
    0x00,
    6,
    4,
    ...u16(f.op),
    ...mac(f.sha),
    ...ip(f.spa),
    ...mac(f.tha ?? '00:00:00:00:00:00'),
    ...ip(f.tpa),
  ];
}

export interface Ip4Fields {
  src: string;
  dst: string;
  proto: number;
  payload: number[];
  ttl?: number;
  id?: number;
  /** flags + fragment offset field (default DF). */
  frag?: number;
  tos?: number;
  options?: number[];
  version?: number;
  /** Override the IHL field. */
  ihl?: number;
  totalLength?: number;
  /** Override the header checksum. */
  checksum?: number;
}

export function ip4(f: Ip4Fields): number[] {
  const opts = f.options ?? [];
  const hl = 20 + opts.length;
  const tl = f.totalLength ?? hl + f.payload.length;
  const h = [
    ((f.version ?? 4) << 4) | (f.ihl ?? hl / 4),
    f.tos ?? 0,
    ...u16(tl),
    ...u16(f.id ?? 1),
    ...u16(f.frag ?? 0x4000),
    f.ttl ?? 64,
    f.proto,
    0,
    0,
    ...ip(f.src),
    ...ip(f.dst),
    ...opts,
  ];
  const ck = f.checksum ?? inetChecksum(h);
  h[10] = ck >>> 8;
  h[11] = ck & 0xff;
  return [...h, ...f.payload];
}

export function icmpEcho(type: number, id: number, seq: number, data: number[], checksum?: number): number[] {
  const m = [type, 0, 0, 0, ...u16(id), ...u16(seq), ...data];
  const ck = checksum ?? inetChecksum(m);
  m[2] = ck >>> 8;
  m[3] = ck & 0xff;
  return m;
}

export interface UdpFields {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  payload: number[];
  /** 'zero' = no checksum, a number = that value, default the correct one. */
  checksum?: 'zero' | number;
  length?: number;
}

export function udp(f: UdpFields): number[] {
  const len = f.length ?? 8 + f.payload.length;
  const d = [...u16(f.sport), ...u16(f.dport), ...u16(len), 0, 0, ...f.payload];
  let ck: number;
  if (f.checksum === 'zero') ck = 0;
  else if (typeof f.checksum === 'number') ck = f.checksum;
  else {
    // Over the datagram as its length field says (bytes past it are not part of it).
    const n = Math.min(len, d.length);
    ck = inetChecksum([...pseudoHeader(f.src, f.dst, 17, n), ...d.slice(0, n)]);
    if (ck === 0) ck = 0xffff;
  }
  d[6] = ck >>> 8;
  d[7] = ck & 0xff;
  return d;
}

/** A complete Ethernet/IPv4/UDP frame from the peer to us. */
export function udpFrame(
  o: Partial<UdpFields> & { payload: number[]; srcMac?: string; dstMac?: string; ip?: Partial<Ip4Fields> },
): number[] {
  const src = o.src ?? PEER_IP,
    dst = o.dst ?? US_IP;
  const u = udp({
    src,
    dst,
    sport: o.sport ?? 5000,
    dport: o.dport ?? 7,
    payload: o.payload,
    checksum: o.checksum,
    length: o.length,
  });
  return eth(o.dstMac ?? US_MAC, o.srcMac ?? PEER_MAC, 0x0800, ip4({ src, dst, proto: 17, payload: u, ...o.ip }));
}

export function pingFrame(o: {
  id?: number;
  seq?: number;
  data: number[];
  src?: string;
  dst?: string;
  ip?: Partial<Ip4Fields>;
  checksum?: number;
}): number[] {
  const src = o.src ?? PEER_IP,
    dst = o.dst ?? US_IP;
  return eth(
    US_MAC,
    PEER_MAC,
    0x0800,
    ip4({ src, dst, proto: 1, payload: icmpEcho(8, o.id ?? 7, o.seq ?? 1, o.data, o.checksum), ...o.ip }),
  );
}

export function arpRequestFrame(spa: string, tpa: string, sha = PEER_MAC): number[] {
  return eth(BCAST, sha, 0x0806, arp({ op: 1, sha, spa, tpa }));
}

export function arpReplyFrame(spa: string, sha: string, tpa = US_IP, tha = US_MAC): number[] {
  return eth(tha, sha, 0x0806, arp({ op: 2, sha, spa, tha, tpa }));
}

// ------------------------------------------------------------------ parsers

export interface ParsedFrame {
  dst: string;
  src: string;
  type: number;
  payload: Uint8Array;
}

function macStr(b: Uint8Array, o: number): string {
  return Array.from(b.subarray(o, o + 6), (x) => x.toString(16).padStart(2, '0')).join(':');
}

function ipStr(b: Uint8Array, o: number): string {
  return Array.from(b.subarray(o, o + 4)).join('.');
}

export function parseEth(f: Uint8Array): ParsedFrame {
  return { dst: macStr(f, 0), src: macStr(f, 6), type: f[12] * 256 + f[13], payload: f.subarray(14) };
}

export interface ParsedArp {
  op: number;
  sha: string;
  spa: string;
  tha: string;
  tpa: string;
}

export function parseArp(p: Uint8Array): ParsedArp {
  return { op: p[6] * 256 + p[7], sha: macStr(p, 8), spa: ipStr(p, 14), tha: macStr(p, 18), tpa: ipStr(p, 24) };
}

export interface ParsedIp4 {
  version: number;
  ihl: number;
  tos: number;
  totalLength: number;
  id: number;
  frag: number;
  ttl: number;
  proto: number;
  checksumOk: boolean;
  src: string;
  dst: string;
  payload: Uint8Array;
}

export function parseIp4(p: Uint8Array): ParsedIp4 {
  const ihl = p[0] & 0xf;
  const tl = p[2] * 256 + p[3];
  return {
    version: p[0] >> 4,
    ihl,
    tos: p[1],
    totalLength: tl,
    id: p[4] * 256 + p[5],
    frag: p[6] * 256 + p[7],
    ttl: p[8],
    proto: p[9],
    checksumOk: inetChecksum(p.subarray(0, ihl * 4)) === 0,
    src: ipStr(p, 12),
    dst: ipStr(p, 16),
    payload: p.subarray(ihl * 4, tl),
  };
}

export interface ParsedUdp {
  sport: number;
  dport: number;
  length: number;
  checksum: number;
  checksumOk: boolean;
  payload: Uint8Array;
}

export function parseUdp(ipp: ParsedIp4): ParsedUdp {
  const p = ipp.payload;
  const len = p[4] * 256 + p[5];
  const ck = p[6] * 256 + p[7];
  return {
    sport: p[0] * 256 + p[1],
    dport: p[2] * 256 + p[3],
    length: len,
    checksum: ck,
    checksumOk: ck !== 0 && inetChecksum([...pseudoHeader(ipp.src, ipp.dst, 17, len), ...p.subarray(0, len)]) === 0,
    payload: p.subarray(8, len),
  };
}

// ------------------------------------------------------------------ a driver over arrays

export interface RxItem {
  bytes: number[] | Uint8Array;
  /** Split into segments of these sizes (a chained packet); the rest in full buffers. */
  segments?: number[];
  /** Buffer flags the "NIC" sets (IP4_CKSUM_OK, L4_CKSUM_OK). */
  flags?: number;
}

/** Frames in from `rx`, frames out into `tx` (bytes copied, buffers freed). */
export class ListDriver implements Driver {
  readonly kind = 'list';
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues = 1;
  readonly txQueues = 1;
  readonly rx: RxItem[] = [];
  readonly tx: Uint8Array[] = [];
  /** Segments of each transmitted packet. */
  readonly txSegments: number[] = [];
  /** Buffer flags of each transmitted packet's first buffer (TX_*_CKSUM requests). */
  readonly txFlags: number[] = [];
  private pool: BufferPool | null = null;
  private stats: DriverCounters = zeroCounters();

  constructor(name: string, macStr: string, mtu = 1500) {
    this.name = name;
    this.mac = Uint8Array.from(mac(macStr));
    this.mtu = mtu;
  }

  open(pool: BufferPool): void {
    this.pool = pool;
  }

  rxBurst(_q: number, out: Uint32Array, max: number): number {
    const pool = this.pool as BufferPool;
    let n = 0;
    while (n < max && this.rx.length > 0) {
      const it = this.rx.shift() as RxItem;
      const b = it.bytes instanceof Uint8Array ? it.bytes : Uint8Array.from(it.bytes);
      const bi = it.segments ? chained(pool, b, it.segments) : pool.writePacket(b, 0, b.length);
      if (bi === INVALID_INDEX) throw new Error('test pool exhausted');
      if (it.flags) pool.flags[bi] |= it.flags;
      out[n++] = bi;
      this.stats.rxPackets++;
    }
    return n;
  }

  txBurst(_q: number, bufs: Uint32Array, off: number, n: number): number {
    const pool = this.pool as BufferPool;
    for (let i = 0; i < n; i++) {
      this.tx.push(pool.packetBytes(bufs[off + i]));
      this.txSegments.push(pool.segments(bufs[off + i]));
      this.txFlags.push(pool.flags[bufs[off + i]]);
    }
    pool.free(bufs, off, n);
    this.stats.txPackets += n;
    return n;
  }

  linkUp(): boolean {
    return this.pool !== null;
  }
  rxWaitFd(): number {
    return -1;
  }
  setWakeup(): void {}
  counters(): DriverCounters {
    return { ...this.stats };
  }
  close(): void {
    this.pool = null;
  }
}

/** A packet in segments of the given sizes. */
export function chained(pool: BufferPool, b: Uint8Array, sizes: number[]): number {
  const segs: number[] = [];
  let at = 0;
  for (let k = 0; at < b.length; k++) {
    const take = Math.min(k < sizes.length ? sizes[k] : pool.dataSize, b.length - at);
    const bi = pool.allocOne();
    if (bi === INVALID_INDEX) throw new Error('test pool exhausted');
    pool.u8.set(b.subarray(at, at + take), pool.offset[bi]);
    pool.length[bi] = take;
    if (segs.length) {
      const prev = segs[segs.length - 1];
      pool.flags[prev] |= BufferFlag.NEXT_PRESENT;
      pool.next[prev] = bi;
    }
    segs.push(bi);
    at += take;
  }
  return segs[0];
}

// ------------------------------------------------------------------ a stack

/** A clock the test moves by hand (timers, aging). */
export function manualClock(startNs = 1e9): Clock & { t: number; advance(ns: number): void } {
  const slot = new Float64Array(1);
  const c = {
    t: startNs,
    tsc: () => c.t,
    tick: () => {
      slot[0] = c.t;
    },
    slot,
    nowNs: () => c.t,
    tickNs: () => c.t,
    clocksPerNs: () => 1,
    source: 'manual',
    advance(ns: number) {
      c.t += ns;
    },
  };
  return c;
}

export interface Stack {
  g: Graph;
  pool: BufferPool;
  net: Netstack;
  drv: ListDriver;
  itf: Interface;
  ifs: Interfaces;
  /** Queue frames and run passes until the graph is idle; returns the frames transmitted by this call. */
  run(...frames: (number[] | RxItem)[]): Uint8Array[];
  /** Frames received so far by the stack. */
  inputs: number;
  /** error-drop vectors (every counted drop). */
  drops(): number;
  err(node: string, name: string): number;
}

export interface StackOptions extends NetstackOptions {
  clock?: Clock;
  poolCount?: number;
  dataSize?: number;
  address?: string;
  gateway?: string;
  mtu?: number;
  neighbors?: { address: string; mac: string }[];
  /** Checksums the interface's "NIC" computes on transmit. */
  txChecksumOffload?: { ip4: boolean; udp: boolean; udpNone?: boolean };
}

export function makeStack(o: StackOptions = {}): Stack {
  const pool = memPool(o.poolCount ?? 512, o.dataSize ?? 2048);
  const g = new Graph({ pool, clock: o.clock ?? manualClock() });
  const net = registerL2L4(g, o);
  const ifs = new Interfaces(g);
  const drv = new ListDriver('tst0', US_MAC, o.mtu ?? 1500);
  const itf = ifs.add(drv);
  net.addInterface({
    index: itf.index,
    name: 'tst0',
    mac: US_MAC,
    address: o.address ?? `${US_IP}/24`,
    gateway: o.gateway,
    mtu: o.mtu,
    output: itf.output.name,
    neighbors: o.neighbors,
    txChecksumOffload: o.txChecksumOffload,
  });
  g.build();
  const s: Stack = {
    g,
    pool,
    net,
    drv,
    itf,
    ifs,
    inputs: 0,
    run(...frames) {
      const before = drv.tx.length;
      for (const f of frames) drv.rx.push(Array.isArray(f) ? { bytes: f } : f);
      s.inputs += frames.length;
      for (let k = 0; k < 100 && (g.runPass() > 0 || drv.rx.length > 0); k++);
      return drv.tx.slice(before);
    },
    drops: () => g.nodeCounters('error-drop').vectors,
    err: (node, name) => g.errorCount(node, name),
  };
  return s;
}
