/**
 * The hostile-input generator of test/hostile-frames.test.ts: seeded random and mutated frames
 * aimed at every receive node of one stack (ethernet, ARP, IPv4, ICMP, UDP, TRP, CM, DDP,
 * RDMAP), built byte by byte from nodes/rdma/PROTOCOL.md and the RFCs with their own checksums (nothing
 * shared with the nodes). A frame is either well formed up to some layer with garbage, a wrong
 * field or a truncation above it, or garbage outright; the TRP/DDP/RDMAP fields are drawn near
 * the values the stack's QP would accept (its receive window, its STags, its MSNs) as often as
 * far from them, so the deep nodes see frames that pass every check but one. Some UDP frames are
 * aimed at a UD QP instead (PROTOCOL.md section 9): DATAGRAM headers with its Q_Key or another,
 * reserved flag bits, short headers, messages over the UD MTU, UDP lengths that promise more than
 * the frame holds, other TRP opcodes, and ports near it where no QP is.
 */
import { BCAST, ip, mac, PEER_IP, PEER_MAC, US_IP, US_MAC } from './l2l4-helpers.ts';

/** mulberry32: a small seeded generator (same seed, same frames). */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  u32(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }
  /** 0..n-1 */
  int(n: number): number {
    return this.u32() % n;
  }
  chance(p: number): boolean {
    return this.u32() < p * 4294967296;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)];
  }
  fill(b: Uint8Array, from = 0, to = b.length): Uint8Array {
    for (let i = from; i < to; i++) b[i] = this.u32() & 0xff;
    return b;
  }
  /** A 32-bit field: 0, all ones, the sign boundary, random, or `near` give or take `spread`. */
  field32(near: number, spread: number): number {
    switch (this.int(6)) {
      case 0:
        return 0;
      case 1:
        return 0xffffffff;
      case 2:
        return this.pick([0x7fffffff, 0x80000000, 0xc0000000]);
      case 3:
        return this.u32();
      default:
        return (near + this.int(2 * spread + 1) - spread) >>> 0;
    }
  }
}

// ------------------------------------------------------------------ builders (own checksums)

function sum16(b: Uint8Array, from: number, to: number, acc = 0): number {
  for (let i = from; i < to; i += 2) acc += (b[i] << 8) | (i + 1 < to ? b[i + 1] : 0);
  while (acc > 0xffff) acc = (acc & 0xffff) + (acc >>> 16);
  return acc;
}

const put16 = (b: Uint8Array, o: number, v: number) => {
  b[o] = (v >>> 8) & 0xff;
  b[o + 1] = v & 0xff;
};
const put32 = (b: Uint8Array, o: number, v: number) => {
  put16(b, o, v >>> 16);
  put16(b, o + 2, v & 0xffff);
};

const MAC_US = Uint8Array.from(mac(US_MAC)),
  MAC_PEER = Uint8Array.from(mac(PEER_MAC)),
  MAC_BC = Uint8Array.from(mac(BCAST));
const IP_US = Uint8Array.from(ip(US_IP)),
  IP_PEER = Uint8Array.from(ip(PEER_IP));

/** Ethernet II frame around `payload`. */
export function ethFrame(dst: Uint8Array, src: Uint8Array, type: number, payload: Uint8Array): Uint8Array {
  const f = new Uint8Array(14 + payload.length);
  f.set(dst, 0);
  f.set(src, 6);
  put16(f, 12, type);
  f.set(payload, 14);
  return f;
}

export interface Ip4Opts {
  src?: Uint8Array;
  /** Destination (default: ours). */
  dst?: Uint8Array;
  ttl?: number;
  frag?: number;
  version?: number;
  ihl?: number;
  totalLength?: number;
  badChecksum?: boolean;
}

/** IPv4 datagram (20-byte header unless ihl says more: the extra bytes are random options). */
export function ip4Packet(proto: number, payload: Uint8Array, o: Ip4Opts = {}, rng?: Rng): Uint8Array {
  const ihl = o.ihl ?? 5;
  const hl = Math.max(20, ihl * 4);
  const p = new Uint8Array(hl + payload.length);
  p[0] = ((o.version ?? 4) << 4) | (ihl & 15);
  put16(p, 2, o.totalLength ?? p.length);
  put16(p, 4, 1);
  put16(p, 6, o.frag ?? 0x4000);
  p[8] = o.ttl ?? 64;
  p[9] = proto;
  p.set(o.src ?? IP_PEER, 12);
  p.set(o.dst ?? IP_US, 16);
  if (rng && hl > 20) rng.fill(p, 20, hl);
  put16(p, 10, (~sum16(p, 0, hl) & 0xffff) ^ (o.badChecksum ? 0x1234 : 0));
  p.set(payload, hl);
  return p;
}

/** UDP datagram from `src` with a correct checksum (or none, or a wrong one), length as given. */
export function udpDgram(
  src: Uint8Array,
  sport: number,
  dport: number,
  payload: Uint8Array,
  o: { length?: number; checksum?: 'zero' | 'bad'; dst?: Uint8Array } = {},
): Uint8Array {
  const d = new Uint8Array(8 + payload.length);
  put16(d, 0, sport);
  put16(d, 2, dport);
  const len = o.length ?? d.length;
  put16(d, 4, len);
  d.set(payload, 8);
  if (o.checksum !== 'zero') {
    const n = Math.min(len, d.length);
    const pseudo = new Uint8Array(12);
    pseudo.set(src, 0);
    pseudo.set(o.dst ?? IP_US, 4);
    pseudo[9] = 17;
    put16(pseudo, 10, n);
    let ck = ~sum16(d, 0, n, sum16(pseudo, 0, 12)) & 0xffff;
    if (ck === 0) ck = 0xffff;
    if (o.checksum === 'bad') ck ^= 0x0101;
    put16(d, 6, ck);
  }
  return d;
}

// ------------------------------------------------------------------ what the generator aims at

/** The stack's state the generator aims near (read before each frame). */
export interface Target {
  /** The QP's port, its peer's port, its receive and send state. */
  qpn: number;
  peerPort: number;
  rcvNxt: number;
  sndUna: number;
  sndNxt: number;
  window: number;
  /** Next untagged MSNs it expects on QN 0 (Send) and QN 1 (Read/Atomic request). */
  sendMsn: number;
  readMsn: number;
  /** STags of its MRs (remote-accessible or not) and their lengths. */
  stags: number[];
  mrLen: number;
  /** A listener's port, and a datagram service (SIDR) listener's. */
  listenPort: number;
  sidrPort: number;
  /** A UD QP's port (its QPN) and Q_Key. */
  udQpn: number;
  udQkey: number;
  /** The multicast group the UD QP joined, and the stack's multicast port. */
  mcGroup: Uint8Array;
  mcPort: number;
}

export interface Hostile {
  /** Which generator made it (for the report and the failure message). */
  kind: string;
  bytes: Uint8Array;
  /** Chain cut sizes (the rest in full buffers), or undefined for one buffer. */
  segments?: number[];
}

// DATA, SACK, FIN, REQ, ACCEPT, REJECT, SIDR_REQ, SIDR_REP, weighted
const TRP_OPS = [0, 0, 0, 0, 0, 0, 0, 5, 5, 4, 1, 2, 3, 9, 10];

/** A TRP header and DDP/RDMAP body aimed at `t`. */
function trpPayload(rng: Rng, t: Target): { kind: string; payload: Uint8Array } {
  const op = rng.chance(0.05) ? rng.int(16) : rng.pick(TRP_OPS);
  const w = t.window;
  // Half the time exactly what the QP takes next (or just above: out of order), else anything.
  const psn = rng.chance(0.5)
    ? (t.rcvNxt + (rng.chance(0.8) ? 0 : rng.int(8))) >>> 0
    : rng.field32(t.rcvNxt + (rng.chance(0.5) ? 0 : w / 2), w + 4);
  const inFlight = (t.sndNxt - t.sndUna) >>> 0;
  const ack = rng.chance(0.6)
    ? (t.sndUna + rng.int(inFlight + 1)) >>> 0
    : rng.field32(rng.chance(0.5) ? t.sndNxt : t.sndUna, w + 4);
  const low = rng.chance(0.1) ? rng.int(0x1000) : 0;
  let body: Uint8Array;
  let kind = `trp-op${op}`;
  if (op === 0 && rng.chance(0.9)) {
    const d = ddpSegment(rng, t);
    body = d.body;
    kind = d.kind;
  } else if ((op >= 1 && op <= 3) || op === 9 || op === 10) {
    // CM (and SIDR): ird, ord, private data length and the data; lengths right or wrong.
    const pd = rng.int(rng.chance(0.1) ? 2000 : 600);
    body = rng.fill(new Uint8Array(6 + (rng.chance(0.8) ? pd : rng.int(700))));
    put16(body, 0, pd);
    if (rng.chance(0.7)) {
      put16(body, 2, rng.int(20));
      put16(body, 4, rng.int(20));
    }
    kind = `cm-op${op}`;
  } else {
    body = rng.fill(new Uint8Array(rng.chance(0.7) ? 0 : rng.int(64)));
  }
  const p = new Uint8Array(10 + body.length);
  put32(p, 0, psn);
  put32(p, 4, op === 5 && rng.chance(0.5) ? (psn + rng.int(2 * w)) >>> 0 : ack);
  put16(p, 8, (op << 12) | low);
  p.set(body, 10);
  return { kind, payload: p };
}

/** The UD MTU of a 1500-byte link (PROTOCOL.md section 9, udMessageLimit), the message the receiver may refuse. */
const UD_MTU = 1024;
/** The most a DATAGRAM carries on a 1500-byte link: what IPv4, UDP and its header leave. */
const UD_ROOM = 1500 - 20 - 8 - 10;

/**
 * A DATAGRAM (TRP opcode 6) for the UD QP of `t`: its Q_Key and flags right (delivered if a
 * receive is posted and holds it) or one thing wrong: another Q_Key, reserved flag bits, a header
 * shorter than 10 bytes, a message over the UD MTU, another TRP opcode (a UD QP takes DATAGRAM
 * only, and the SIDR_REP answering a request it sent), a SIDR_REP it never asked for.
 */
function udPayload(rng: Rng, t: Target): { kind: string; payload: Uint8Array } {
  const v = rng.int(7);
  if (v === 0) return { kind: 'ud-short', payload: rng.fill(new Uint8Array(rng.int(10))) };
  const len = v === 4 ? UD_MTU + 1 + rng.int(UD_ROOM - UD_MTU) : rng.chance(0.7) ? rng.int(200) : rng.int(UD_MTU + 1);
  const p = rng.fill(new Uint8Array(10 + len));
  let flags = rng.int(4); // IMM, SOLICITED
  let qkey = t.udQkey;
  let op = 6;
  let kind = 'ud-good';
  if (v === 1) {
    qkey = rng.field32(t.udQkey, 2);
    kind = 'ud-qkey';
  } else if (v === 2) {
    flags |= (1 + rng.int(0x3ff)) << 2;
    kind = 'ud-flags';
  } else if (v === 3) {
    op = rng.pick([0, 1, 2, 3, 4, 5, 7 + rng.int(9)]);
    kind = `ud-op${op}`;
  } else if (v === 4) kind = 'ud-oversized';
  else if (v === 5 && len >= 6 && rng.chance(0.5)) {
    // A SIDR_REP (the answer to a datagram service request) nobody asked for, CM layout right
    // or its private-data length wrong: cm-input drops it.
    op = 10;
    put16(p, 10, rng.chance(0.8) ? len - 6 : rng.int(600));
    kind = 'ud-sidr-rep';
  }
  put32(p, 0, qkey);
  if (!(flags & 1) && rng.chance(0.8)) put32(p, 4, 0);
  put16(p, 8, (op << 12) | flags);
  return { kind, payload: p };
}

/** A segment the QP takes as it is: a Write into its first MR, a Send at the next MSN, a Read Request. */
function validSegment(rng: Rng, t: Target): { kind: string; body: Uint8Array } {
  const k = rng.int(3);
  const data = rng.int(k === 2 ? 1 : 1024);
  if (k === 0) {
    const b = rng.fill(new Uint8Array(14 + data));
    b[0] = 0xc1;
    b[1] = 0x40;
    put32(b, 2, t.stags[0]);
    put32(b, 6, 0);
    put32(b, 10, rng.int(t.mrLen - data + 1));
    return { kind: 'valid-write', body: b };
  }
  const b = rng.fill(new Uint8Array(18 + (k === 1 ? data : 28)));
  b[0] = 0x41;
  b[1] = 0x40 | (k === 1 ? 3 : 1);
  put32(b, 2, 0);
  put32(b, 6, k === 1 ? 0 : 1);
  put32(b, 10, k === 1 ? t.sendMsn : t.readMsn);
  put32(b, 14, 0);
  if (k === 2) {
    const size = 1 + rng.int(4096);
    put32(b, 18, rng.u32());
    put32(b, 22, 0);
    put32(b, 26, 0);
    put32(b, 30, size);
    put32(b, 34, t.stags[0]);
    put32(b, 38, 0);
    put32(b, 42, rng.int(t.mrLen - size + 1));
  }
  return { kind: k === 1 ? 'valid-send' : 'valid-read', body: b };
}

/** A DDP segment (tagged or untagged) with an RDMAP opcode and a body for it. */
function ddpSegment(rng: Rng, t: Target): { kind: string; body: Uint8Array } {
  if (rng.chance(0.3)) return validSegment(rng, t);
  const taggedSeg = rng.chance(0.4);
  const rop = rng.chance(0.1) ? rng.int(16) : rng.pick(taggedSeg ? [0, 0, 2] : [3, 4, 5, 6, 1, 10, 7, 8, 9, 11]);
  const last = rng.chance(0.7) ? 0x40 : 0;
  const dv = rng.chance(0.95) ? 1 : rng.int(4);
  const rv = rng.chance(0.95) ? 1 : rng.int(4);
  const hl = taggedSeg ? 14 : 18;
  let extra = 0;
  if (!taggedSeg && rop === 1) extra = 28; // Read Request
  if (!taggedSeg && rop === 10) extra = 52; // Atomic Request (RFC 7306)
  if (!taggedSeg && rop === 7) extra = 4 + rng.int(60); // Terminate: control + headers
  if (rng.chance(0.2)) extra = rng.int(extra + 8); // wrong body length
  const data = rng.chance(0.5) ? rng.int(64) : rng.int(1400);
  const b = rng.fill(new Uint8Array(hl + extra + data));
  b[0] = (taggedSeg ? 0x80 : 0) | last | dv | (rng.chance(0.05) ? (rng.int(64) << 2) & 0x3c : 0);
  b[1] = (rv << 6) | rop | (rng.chance(0.05) ? 0x30 : 0);
  const stag = () => (rng.chance(0.6) ? rng.pick(t.stags) ^ (rng.chance(0.3) ? 1 << rng.int(32) : 0) : rng.u32()) >>> 0;
  if (taggedSeg) {
    put32(b, 2, stag());
    const to = rng.chance(0.6) ? rng.int(t.mrLen + 64) : rng.u32();
    put32(b, 6, rng.chance(0.8) ? 0 : rng.u32());
    put32(b, 10, to);
  } else {
    put32(b, 2, rng.chance(0.5) ? stag() : 0);
    const qn = rng.chance(0.9) ? rng.int(4) : rng.u32();
    put32(b, 6, qn);
    const msnNear = qn === 1 ? t.readMsn : t.sendMsn;
    put32(b, 10, rng.field32(msnNear, 8));
    put32(b, 14, rng.chance(0.6) ? rng.int(4) * 1024 : rng.u32());
    if (rop === 1 && extra >= 28) {
      put32(b, 18, rng.u32()); // sink STag
      put32(b, 30, rng.chance(0.5) ? rng.int(t.mrLen * 2) : rng.u32()); // size
      put32(b, 34, stag()); // source STag
      put32(b, 38, 0);
      put32(b, 42, rng.int(t.mrLen + 64)); // source TO
    }
    if (rop === 10 && extra >= 52) {
      put32(b, 18, rng.chance(0.8) ? rng.int(3) : rng.u32()); // atomic opcode
      put32(b, 26, stag());
      put32(b, 30, 0);
      put32(b, 34, rng.chance(0.7) ? rng.int(t.mrLen / 8 + 2) * 8 : rng.u32()); // TO
    }
  }
  return { kind: `ddp-${taggedSeg ? 't' : 'u'}op${rop}`, body: b };
}

/** One hostile frame. */
export function hostileFrame(rng: Rng, t: Target): Hostile {
  const r = rng.int(100);
  let kind: string;
  let f: Uint8Array;
  if (r < 5) {
    kind = 'garbage';
    f = rng.fill(new Uint8Array(rng.int(1600)));
    if (f.length >= 6 && rng.chance(0.7)) f.set(rng.chance(0.5) ? MAC_US : MAC_BC, 0);
  } else if (r < 12) {
    kind = 'arp';
    const a = rng.fill(new Uint8Array(rng.chance(0.8) ? 28 : rng.int(60)));
    if (a.length >= 28 && rng.chance(0.7)) {
      a.set([0, 1, 8, 0, 6, 4, 0, rng.chance(0.5) ? 1 : 2], 0);
      if (rng.chance(0.5)) a.set(IP_US, 24);
    }
    f = ethFrame(rng.chance(0.5) ? MAC_BC : MAC_US, MAC_PEER, 0x0806, a);
  } else if (r < 22) {
    kind = 'ip4';
    const proto = rng.pick([1, 17, 6, 2, rng.int(256)]);
    const inner = rng.fill(new Uint8Array(proto === 2 && rng.chance(0.7) ? 8 : rng.int(200)));
    if (proto === 1 && inner.length >= 8 && rng.chance(0.6)) {
      inner[0] = 8;
      inner[1] = 0;
      put16(inner, 2, 0);
      put16(inner, 2, ~sum16(inner, 0, inner.length) & 0xffff);
    }
    const o: Ip4Opts = {};
    let dstMac = MAC_US;
    if (proto === 2) {
      // IGMP: a query (mostly), to all systems or the joined group, its checksum right (mostly),
      // with the Router Alert option (IHL 6) or without.
      kind = 'igmp';
      if (inner.length >= 8 && rng.chance(0.8)) {
        inner[0] = rng.pick([0x11, 0x11, 0x16, 0x17, rng.int(256)]);
        if (rng.chance(0.5)) inner.set(rng.chance(0.5) ? t.mcGroup : new Uint8Array(4), 4);
        put16(inner, 2, 0);
        if (rng.chance(0.9)) put16(inner, 2, ~sum16(inner, 0, inner.length) & 0xffff);
      }
      o.dst = rng.chance(0.5) ? Uint8Array.from([224, 0, 0, 1]) : t.mcGroup;
      dstMac = Uint8Array.from([1, 0, 0x5e, o.dst[1] & 0x7f, o.dst[2], o.dst[3]]);
      if (rng.chance(0.7)) o.ihl = 6;
    }
    switch (rng.int(8)) {
      case 0:
        o.version = rng.int(16);
        break;
      case 1:
        o.ihl = rng.int(16);
        break;
      case 2:
        o.totalLength = rng.int(65536);
        break;
      case 3:
        o.frag = rng.u32() & 0xffff;
        break;
      case 4:
        o.ttl = rng.int(2);
        break;
      case 5:
        o.badChecksum = true;
        break;
      case 6:
        o.src = Uint8Array.from([rng.int(256), rng.int(256), rng.int(256), rng.int(256)]);
        break;
      default:
        break;
    }
    f = ethFrame(dstMac, MAC_PEER, 0x0800, ip4Packet(proto, inner, o, rng));
  } else if (r < 36) {
    // A datagram to the UD QP (from anyone: a UD QP has no peer), or to a port near it where no
    // QP is; its UDP length now and then promising more than the frame holds (truncated).
    const noQp = rng.chance(0.1);
    const dport = noQp ? (t.udQpn + 1 + rng.int(8)) & 0xffff : t.udQpn;
    const src = rng.chance(0.8) ? IP_PEER : Uint8Array.from([10, 0, 0, 2 + rng.int(250)]);
    const d = udPayload(rng, t);
    kind = noQp ? 'ud-noqp' : d.kind;
    const truncated = rng.chance(0.1);
    const dgram = udpDgram(
      src,
      rng.int(65536),
      dport,
      d.payload,
      truncated ? { length: 8 + d.payload.length + 1 + rng.int(64) } : {},
    );
    if (truncated) kind += '+udplen';
    // Now and then to the multicast port as unicast, to us (no group's datagram: not_group).
    f = ethFrame(
      MAC_US,
      MAC_PEER,
      0x0800,
      ip4Packet(17, rng.chance(0.03) ? udpDgram(src, rng.int(65536), t.mcPort, d.payload) : dgram, { src }),
    );
    if (rng.chance(0.25)) {
      // To a multicast group: the one the UD QP joined (most), or one nobody here joined; on
      // the multicast port (most) or the QP's; to the group's MAC (most) or ours.
      const group = rng.chance(0.8) ? t.mcGroup : Uint8Array.from([224 + rng.int(16), rng.int(256), 9, rng.int(256)]);
      const gMac = Uint8Array.from([1, 0, 0x5e, group[1] & 0x7f, group[2], group[3]]);
      const port = rng.chance(0.85) ? t.mcPort : dport;
      const mdgram = udpDgram(src, rng.int(65536), port, d.payload, {
        dst: group,
        ...(truncated ? { length: 8 + d.payload.length + 1 + rng.int(64) } : {}),
      });
      f = ethFrame(rng.chance(0.9) ? gMac : MAC_US, MAC_PEER, 0x0800, ip4Packet(17, mdgram, { src, dst: group }));
      kind = `mcast-${kind}`;
    }
  } else {
    // UDP: to the QP (most), the listener, or anywhere; sometimes from a spoofed address/port.
    const to = rng.int(10);
    const dport = to < 7 ? t.qpn : to < 8 ? t.listenPort : to < 9 ? t.sidrPort : rng.int(65536);
    const sport = rng.chance(0.85) ? t.peerPort : rng.int(65536);
    const src = rng.chance(0.9) ? IP_PEER : Uint8Array.from([10, 0, 0, 2 + rng.int(250)]);
    // TRP to a port nobody bound too (a REQ there is answered with REJECT).
    const { kind: k, payload } =
      to < 9 || rng.chance(0.5) ? trpPayload(rng, t) : { kind: 'udp', payload: rng.fill(new Uint8Array(rng.int(100))) };
    kind = k;
    const uo: { length?: number; checksum?: 'zero' | 'bad' } = {};
    const m = rng.int(20);
    if (m === 0) uo.length = rng.int(65536);
    else if (m === 1) uo.checksum = 'bad';
    else if (m === 2) uo.checksum = 'zero';
    f = ethFrame(MAC_US, MAC_PEER, 0x0800, ip4Packet(17, udpDgram(src, sport, dport, payload, uo), { src }));
    if (m === 3) kind += '+iplen';
  }
  // Mutations on the finished frame: a truncation (often at a header boundary), a flipped byte.
  if (f.length > 0 && rng.chance(0.15)) {
    const cut = rng.chance(0.6)
      ? rng.pick([0, 1, 13, 14, 15, 33, 34, 41, 42, 51, 52, 55, 60, 65, 66, 69, 70, 94, 98])
      : rng.int(f.length);
    if (cut < f.length) {
      f = f.subarray(0, cut);
      kind += '+cut';
    }
  }
  if (f.length > 14 && rng.chance(0.05)) {
    f[rng.int(f.length)] ^= 1 << rng.int(8);
    kind += '+flip';
  }
  let segments: number[] | undefined;
  if (f.length > 1 && rng.chance(0.1)) {
    segments = [];
    for (let at = 0, k = 0; at < f.length && k < 6; k++) {
      const s = 1 + rng.int(rng.chance(0.5) ? 16 : 200);
      segments.push(s);
      at += s;
    }
    kind += '+chain';
  }
  return { kind, bytes: f, segments };
}

/** Hex dump, 16 bytes a line. */
export function hexDump(b: Uint8Array): string {
  const lines: string[] = [];
  for (let i = 0; i < b.length; i += 16) {
    lines.push(
      `${i.toString(16).padStart(4, '0')}  ${Array.from(b.subarray(i, i + 16), (x) => x.toString(16).padStart(2, '0')).join(' ')}`,
    );
  }
  return lines.join('\n');
}
