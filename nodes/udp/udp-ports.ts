/**
 * The UDP API for the layers above (the RDMA QPs and connection manager, tests):
 *
 * - `bind(port, next, address?)`: datagrams to (address, port), or to any of our addresses
 *   when no address is given, go to node `next` (a next arc of udp4-input is added). The node
 *   gets buffers whose data is the UDP payload, with the UDP header just before it and the IPv4
 *   header before that, and the opaque words of `Ip4Opaque` filled in (peer address and port,
 *   our address and port). A node that answers sends the buffer on to `udp4-encap`.
 * - `listen(port, handler)`: the same through a callback node this module registers: the
 *   handler gets each vector (buffer indices, count) and owns those buffers (send or free them).
 * - `send(bufs, off, n)`: datagrams from outside the graph (control plane, callbacks): buffers
 *   whose data is the UDP payload and whose opaque words say where to (`setUdpDestination`).
 *   They enter the graph through the `udp4-send` input node on the next pass.
 *
 * - `punt(next)`: datagrams to ports nobody bound go to node `next` instead of being dropped
 *   (still counted `no_listener` by udp4-input); the RDMA stack answers a connection request
 *   there with REJECT, as TCP answers a SYN to a closed port with RST.
 *
 * Lookup is an Int32Array over the 65536 ports for wildcard bindings plus a short list of
 * address-specific ones (checked first), so demultiplexing creates nothing.
 */
import {
  type BufferPool,
  type Frame,
  type Graph,
  INVALID_INDEX,
  type NodeRuntime,
  OPAQUE_WORDS,
} from '../../graph/index.ts';
import { Ip4Opaque, IP_PROTO_UDP } from '../ip4/ip4.ts';
import { formatIp4, parseIp4 } from '../net/address.ts';
import type { UdpSendQueue } from './udp4-send.ts';

const MAX_EXACT = 64;

export interface UdpBinding {
  address: string;
  port: number;
  next: string;
}

/** A callback that owns the buffers of a received vector. */
export type UdpHandler = (bufs: Uint32Array, n: number, pool: BufferPool) => void;

/** Write where datagram `bi` goes (all four Ip4Opaque words). `src` 0 = the interface's address. */
export function setUdpDestination(
  pool: BufferPool,
  bi: number,
  dst: number,
  dstPort: number,
  srcPort: number,
  src = 0,
): void {
  const w = bi * OPAQUE_WORDS,
    op = pool.opaque;
  op[w + Ip4Opaque.REMOTE] = dst;
  op[w + Ip4Opaque.LOCAL] = src;
  op[w + Ip4Opaque.PORTS] = ((dstPort << 16) | (srcPort & 0xffff)) >>> 0;
  op[w + Ip4Opaque.L4] = IP_PROTO_UDP;
}

export class UdpApi {
  readonly graph: Graph;
  /** udp4-input's next index per port for wildcard bindings, -1 = none. */
  readonly wildcard = new Int32Array(65536).fill(-1);
  private readonly exactAddr = new Uint32Array(MAX_EXACT);
  private readonly exactPort = new Uint16Array(MAX_EXACT);
  private readonly exactArc = new Int32Array(MAX_EXACT);
  private nExact = 0;
  /** udp4-input's next index for datagrams to ports nobody bound (`punt`), -1 = drop them. */
  unboundArc = -1;
  private readonly bindings = new Map<string, UdpBinding>();
  private input: NodeRuntime | null = null;
  private queue: UdpSendQueue | null = null;
  private sender: NodeRuntime | null = null;

  constructor(graph: Graph) {
    this.graph = graph;
  }

  /** Wiring: udp4-input (whose arcs bindings add), the udp4-send queue and its node. */
  attach(input: NodeRuntime, queue: UdpSendQueue, sender: NodeRuntime): void {
    this.input = input;
    this.queue = queue;
    this.sender = sender;
  }

  /** Datagrams to `port` (on `address`, default any of ours) go to node `next`. */
  bind(port: number, next: string, address?: string): void {
    checkPort(port);
    const a = address === undefined ? 0 : parseIp4(address, `udp bind ${port}`);
    const key = `${a}:${port}`;
    const have = this.bindings.get(key);
    if (have) throw new Error(`udp port ${port}${a ? ` on ${address}` : ''} is already bound to ${have.next}`);
    if (a !== 0 && this.nExact === MAX_EXACT)
      throw new Error(`udp bind: at most ${MAX_EXACT} address-specific bindings`);
    const arc = this.graph.addNext(this.input as NodeRuntime, next);
    if (a === 0) this.wildcard[port] = arc;
    else {
      this.exactAddr[this.nExact] = a;
      this.exactPort[this.nExact] = port;
      this.exactArc[this.nExact] = arc;
      this.nExact++;
    }
    this.bindings.set(key, { address: a === 0 ? '0.0.0.0' : formatIp4(a), port, next });
  }

  /** Datagrams to ports nobody bound go to node `next` (null: dropped again). */
  punt(next: string | null): void {
    this.unboundArc = next === null ? -1 : this.graph.addNext(this.input as NodeRuntime, next);
  }

  /** Remove a binding; false when there was none. */
  unbind(port: number, address?: string): boolean {
    checkPort(port);
    const a = address === undefined ? 0 : parseIp4(address, `udp unbind ${port}`);
    if (!this.bindings.delete(`${a}:${port}`)) return false;
    if (a === 0) this.wildcard[port] = -1;
    else {
      for (let k = 0; k < this.nExact; k++) {
        if (this.exactAddr[k] === a && this.exactPort[k] === port) {
          const last = --this.nExact;
          this.exactAddr[k] = this.exactAddr[last];
          this.exactPort[k] = this.exactPort[last];
          this.exactArc[k] = this.exactArc[last];
          break;
        }
      }
    }
    return true;
  }

  /**
   * Deliver datagrams for `port` to `handler` through a callback node (named `name`, default
   * `udp-listen-<port>`), registered now. Returns the node name.
   */
  listen(port: number, handler: UdpHandler, opts: { address?: string; name?: string } = {}): string {
    checkPort(port);
    const name = opts.name ?? `udp-listen-${port}`;
    const pool = this.graph.pool;
    this.graph.register({
      name,
      fn: (rt: NodeRuntime, frame: Frame | null) => {
        const f = frame as Frame;
        handler(f.vec, f.n, pool);
        return f.n;
      },
      formatTrace: (r) => String(r),
    });
    this.bind(port, name, opts.address);
    return name;
  }

  /** udp4-input's next index for (our address, port), or -1. */
  lookup(addr: number, port: number): number {
    for (let k = 0; k < this.nExact; k++)
      if (this.exactPort[k] === port && this.exactAddr[k] === addr) return this.exactArc[k];
    return this.wildcard[port];
  }

  /**
   * Send datagrams from outside the graph: `bufs[off..off+n)` hold UDP payloads with their
   * destination in the opaque words. Returns how many were taken (the queue may be full); the
   * graph owns those, the caller keeps the rest.
   */
  send(bufs: Uint32Array, off: number, n: number): number {
    const q = this.queue as UdpSendQueue;
    const taken = q.push(bufs, off, n);
    if (taken > 0) this.graph.interrupt(this.sender as NodeRuntime);
    return taken;
  }

  /** Convenience (control plane, tests): copy `payload` into a new packet and send it. */
  sendTo(
    payload: Uint8Array,
    dst: string | number,
    dstPort: number,
    srcPort: number,
    src: string | number = 0,
  ): boolean {
    checkPort(dstPort);
    checkPort(srcPort, 0);
    const pool = this.graph.pool;
    const d = typeof dst === 'number' ? dst >>> 0 : parseIp4(dst, 'udp sendTo');
    const s = typeof src === 'number' ? src >>> 0 : parseIp4(src, 'udp sendTo source');
    const bi = pool.writePacket(payload, 0, payload.length);
    if (bi === INVALID_INDEX) return false;
    setUdpDestination(pool, bi, d, dstPort, srcPort, s);
    this.one[0] = bi;
    if (this.send(this.one, 0, 1) === 1) return true;
    pool.freeOne(bi);
    return false;
  }
  private readonly one = new Uint32Array(1);

  bound(): UdpBinding[] {
    return [...this.bindings.values()].sort((x, y) => x.port - y.port || x.address.localeCompare(y.address));
  }
}

function checkPort(port: number, lo = 1): void {
  if (!Number.isInteger(port) || port < lo || port > 65535)
    throw new RangeError(`udp port must be an integer in ${lo}..65535, got ${port}`);
}
