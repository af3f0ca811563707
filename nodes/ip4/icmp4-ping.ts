/**
 * icmp4-ping: ICMP echo requests originated by the data plane (`rdmactl ping`, POST /v1/ping),
 * as VPP's ping plugin does, and the replies matched back to them.
 *
 * `Pinger.send` builds the request in a pool buffer (type 8, our identifier, a sequence number,
 * `size` bytes of pattern, the checksum) with the Ip4Opaque words ip4-rewrite reads, and queues
 * it; the `icmp4-ping` input node takes the queue on the graph's next pass and hands it to
 * ip4-rewrite (route, ARP, Ethernet). icmp4-echo passes echo replies that carry our identifier
 * to `Pinger.reply`, which settles the waiting request with the round-trip time (from the pass
 * that sent it to the pass that received the reply, on the graph's clock).
 *
 * Bounds are ours: at most MAX_WAITING requests wait for a reply at once (a reply matches only
 * a waiting sequence number; anything else is counted and dropped by icmp4-echo as before), and
 * the send queue holds as many.
 */
import { randomInt } from 'node:crypto';
import {
  BufferFlag,
  type Frame,
  type Graph,
  INVALID_INDEX,
  NodeFlag,
  type NodeRuntime,
  OPAQUE_WORDS,
} from '../../graph/index.ts';
import { ICMP_ECHO_REQUEST } from './icmp4-echo.ts';
import { Ip4Opaque, IP_PROTO_ICMP, packetSum } from './ip4.ts';
import { formatIp4 } from '../net/address.ts';

export const ICMP4_PING = 'icmp4-ping';

/** Requests waiting for their reply at once (and the send queue's size). */
export const MAX_WAITING = 256;
/** Largest payload: an echo request of 1500 bytes on the wire (MTU 1500). */
export const PING_MAX_SIZE = 1472;

/** What `Pinger.series` sends: `count` requests `intervalMs` apart, each waited for `timeoutMs`. */
export interface PingSeries {
  dst: number;
  count: number;
  intervalMs: number;
  size: number;
  timeoutMs: number;
  /** The first request's sequence number (later ones count up from it); else the pinger's next. */
  seq?: number;
}

export interface PingOutcome {
  sent: number;
  replies: PingReply[];
  /** Sequence numbers sent and not answered within the timeout. */
  lost: number[];
  /** Why the series stopped early (no buffers, too many waiting), else null. */
  stopped: string | null;
}

export interface PingReply {
  seq: number;
  /** ICMP bytes received (header + data), as ping(8) counts them. */
  bytes: number;
  ttl: number;
  from: string;
  rttNs: number;
}

interface Waiting {
  sentNs: number;
  settle: (r: PingReply | null) => void;
}

export class Pinger {
  /** Our ICMP identifier (random per data plane, so two data planes on one link tell theirs apart). */
  readonly id = randomInt(1, 0x10000);
  private nextSeq = 1;
  private readonly waiting = new Map<number, Waiting>();
  private readonly ring = new Uint32Array(MAX_WAITING);
  private head = 0;
  private tail = 0;
  private readonly graph: Graph;
  private readonly one = new Uint32Array(1);
  /** icmp4-ping, interrupted when a request is queued (registerIcmp4Ping sets it). */
  node: NodeRuntime | null = null;

  constructor(graph: Graph) {
    this.graph = graph;
    // Requests still queued when the graph closes go back to the pool; waiting ones end unanswered.
    graph.onClose(() => {
      while (this.tail !== this.head) {
        this.one[0] = this.ring[this.tail++ % MAX_WAITING];
        graph.pool.free(this.one, 0, 1);
      }
      for (const w of this.waiting.values()) w.settle(null);
      this.waiting.clear();
    });
  }

  get pending(): number {
    return this.waiting.size;
  }

  /**
   * Queue one echo request of `size` data bytes to `dst` (u32), from `src` (0: the route's
   * interface address). Returns its sequence number and a promise of the reply (null: none
   * within `timeoutMs`), or a string saying why nothing was sent.
   */
  send(
    dst: number,
    size: number,
    timeoutMs: number,
    src = 0,
    want?: number,
  ): { seq: number; reply: Promise<PingReply | null> } | string {
    if (this.waiting.size >= MAX_WAITING) return `${MAX_WAITING} echo requests are already waiting for replies`;
    const pool = this.graph.pool;
    const len = 8 + size;
    if (len > pool.dataSize) return `${size} data bytes do not fit one ${pool.dataSize}-byte buffer`;
    const bi = pool.alloc(this.one, 0, 1) === 1 ? this.one[0] : INVALID_INDEX;
    if (bi === INVALID_INDEX) return 'no free packet buffers';
    let seq = want ?? this.nextSeq;
    // The next sequence number not waiting (16 bits; at most MAX_WAITING are taken).
    while (this.waiting.has(seq)) seq = seq === 0xffff ? 1 : seq + 1;
    this.nextSeq = seq === 0xffff ? 1 : seq + 1;
    const o = pool.offset[bi];
    const u8 = pool.u8,
      v = pool.view;
    pool.length[bi] = len;
    u8[o] = ICMP_ECHO_REQUEST;
    u8[o + 1] = 0;
    v.setUint16(o + 2, 0);
    v.setUint16(o + 4, this.id);
    v.setUint16(o + 6, seq);
    for (let i = 0; i < size; i++) u8[o + 8 + i] = (0x10 + i) & 0xff;
    v.setUint16(o + 2, ~packetSum(pool, bi) & 0xffff);
    const w = bi * OPAQUE_WORDS,
      op = pool.opaque;
    op[w + Ip4Opaque.REMOTE] = dst >>> 0;
    op[w + Ip4Opaque.LOCAL] = src >>> 0;
    op[w + Ip4Opaque.PORTS] = 0;
    op[w + Ip4Opaque.L4] = IP_PROTO_ICMP;
    const reply = new Promise<PingReply | null>((resolve) => {
      const timer = setTimeout(() => {
        if (this.waiting.get(seq) === entry) this.waiting.delete(seq);
        resolve(null);
      }, timeoutMs);
      const entry: Waiting = {
        sentNs: -1,
        settle: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      };
      this.waiting.set(seq, entry);
    });
    this.ring[this.head++ % MAX_WAITING] = bi;
    if (this.node !== null) this.graph.interrupt(this.node);
    else this.graph.wake();
    return { seq, reply };
  }

  /** Send a series and wait for every reply or its timeout; `signal` stops sending more. */
  async series(p: PingSeries, signal?: AbortSignal): Promise<PingOutcome> {
    const waits: Promise<void>[] = [];
    const replies: PingReply[] = [],
      lost: number[] = [];
    let sent = 0,
      stopped: string | null = null;
    const aborted = () => signal !== undefined && signal.aborted;
    for (let i = 0; i < p.count && !aborted(); i++) {
      if (i > 0) await abortableSleep(p.intervalMs, signal);
      if (aborted()) break;
      const r = this.send(
        p.dst,
        p.size,
        p.timeoutMs,
        0,
        p.seq === undefined ? undefined : ((p.seq - 1 + i) % 0xffff) + 1,
      );
      if (typeof r === 'string') {
        stopped = r;
        break;
      }
      sent++;
      waits.push(r.reply.then((x) => void (x === null ? lost.push(r.seq) : replies.push(x))));
    }
    await Promise.all(waits);
    replies.sort((a, b) => a.seq - b.seq);
    lost.sort((a, b) => a - b);
    return { sent, replies, lost, stopped };
  }

  /** Requests waiting to go out (icmp4-ping polls this before it reads the clock). */
  get queued(): boolean {
    return this.tail !== this.head;
  }

  /** icmp4-ping: stamp and hand over what is queued. */
  take(out: Uint32Array, max: number, nowNs: number): number {
    const pool = this.graph.pool;
    let n = 0;
    while (this.tail !== this.head && n < max) {
      const bi = this.ring[this.tail++ % MAX_WAITING];
      const w = this.waiting.get(pool.view.getUint16(pool.offset[bi] + 6));
      if (w !== undefined) w.sentNs = nowNs;
      out[n++] = bi;
    }
    return n;
  }

  /**
   * An echo reply with our identifier (icmp4-echo, buffer `bi` at the ICMP header): settle the
   * request it answers. False when none waits for it (late, duplicate or forged).
   */
  reply(bi: number, nowNs: number): boolean {
    const pool = this.graph.pool;
    const o = pool.offset[bi];
    const seq = pool.view.getUint16(o + 6);
    const w = this.waiting.get(seq);
    if (w === undefined || w.sentNs < 0) return false;
    this.waiting.delete(seq);
    const ip = o - 20;
    const bytes = pool.flags[bi] & BufferFlag.NEXT_PRESENT ? pool.packetLength(bi) : pool.length[bi];
    w.settle({
      seq,
      bytes,
      ttl: pool.u8[ip + 8],
      from: formatIp4(pool.view.getUint32(ip + 12)),
      rttNs: nowNs - w.sentNs,
    });
    return true;
  }
}

export function registerIcmp4Ping(graph: Graph, pinger: Pinger): NodeRuntime {
  const rt = graph.register({
    name: ICMP4_PING,
    type: 'input',
    // Called only when a request was queued (Pinger.send interrupts it).
    state: 'interrupt',
    pollPhase: 'transmit',
    flags: NodeFlag.TRACE_SUPPORTED,
    next: ['ip4-rewrite'],
    runtimeData: pinger,
    fn: icmp4Ping,
    formatTrace: (r) => String(r),
  });
  pinger.node = rt;
  return rt;
}

function icmp4Ping(rt: NodeRuntime, _frame: Frame | null): number {
  const p = rt.runtimeData as Pinger;
  const g = rt.graph;
  const out = rt.scratch;
  // The time (a heap number once passed on) is read only when a request waits.
  if (!p.queued) return 0;
  const n = p.take(out, out.length, g.clock.nowNs());
  if (p.queued) g.interrupt(rt); // more than a frame queued: the rest next pass
  if (n === 0) return 0;
  g.traceInput(rt, out, 0, n);
  if (rt.traceOn) {
    for (let i = 0; i < n; i++)
      rt.addTrace(
        out[i],
        `echo request id ${p.id} seq ${g.pool.view.getUint16(g.pool.offset[out[i]] + 6)} (${g.pool.length[out[i]]} bytes) from the control plane`,
      );
  }
  g.enqueueToSingleNext(rt, 0, out, 0, n);
  return n;
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
