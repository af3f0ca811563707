/**
 * The memif driver: the shared-memory packet interface of VPP and DPDK (net_memif), as server
 * or client, over a UNIX socket that is a filesystem path or an abstract name ("@name" or
 * "abstract:name"; DPDK 22.11's net_memif uses the abstract namespace unless given
 * socket-abstract=no). No privileges needed. The protocol lives in native/core/memif.cc.
 *
 * Data path: one native call per burst. Receive takes pool buffers from a stash of indices
 * this wrapper allocates in batches between bursts; transmit reports the buffers it is done
 * with in a `done` array this wrapper frees with one `pool.free`. A client whose pool memory
 * is a memfd (`createPool`/`allocBufferMemory` of graph/memory.ts) registers that memory as a
 * memif region and runs zero-copy: descriptors point at pool buffers both ways. A server, and
 * a client whose pool has no fd (plain JS memory), copy between the peer's buffers and the
 * pool (`npm run bench -- memif` measures both). A server or copy-mode client gathers a segment
 * sent from an MR in place (BufferFlag.EXT_DATA: the pool's external memory table, mirrored
 * into a native core.ExtTable) straight into the peer's buffer: the payload is copied once, MR
 * to shared memory, instead of MR to pool to shared memory. A zero-copy client copies such a
 * frame into slot buffers of its own transmit rings (region 0) and points the descriptors there;
 * its other frames go zero-copy as before (RDMA_GRAPH_MEMIF_TX_GATHER=0 at open: the tx node
 * copies such payloads into the pool first, as it did).
 *
 * Link: up while the control channel is connected. A client reconnects every 250 ms while the
 * server is away; a server takes the next client. Every buffer held in a ring when the link
 * goes down (the peer vanished mid-burst, sent DISCONNECT, broke the protocol) comes back to
 * the pool, and so does the stash: while down the driver holds no buffer at all.
 *
 * Sleeping: `rxWaitFd(q)` is an epoll fd that stays the same across reconnections; it is
 * readable when queue q's interrupt eventfd is (queue 0: also the control socket, the listener
 * and the reconnect timer). While packets flow the receive rings are flagged MASK_INT (the
 * sender does not kick); an empty poll clears the flag, so an idle engine sleeps until the
 * peer's next kick.
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { MTU_MAX, MTU_MIN } from '../graph/link.ts';
import type { BufferPool } from '../graph/buffer-pool.ts';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { FRAME_SIZE } from '../graph/node.ts';
import {
  loadCore,
  type CoreAddon,
  type MemifInfo,
  type MemifLayout,
  type MemifNative,
  type MemifStats,
} from '../native/addons.ts';
import { extTableOf } from './ext-table.ts';
import { peerWindowsOf } from '../graph/peer-windows.ts';
import type { Driver, DriverCounters, LinkDrops } from './driver.ts';
import { poolArrays, zeroCounters, type DriverHardware } from './driver.ts';
import { macOption } from './mac.ts';

export interface MemifOptions {
  /** The control socket: a filesystem path (parent directories are created) or "@name" / "abstract:name". */
  socket: string;
  role: 'server' | 'client';
  /** Interface id on the socket (several interfaces may share a server socket). Default 0. */
  id?: number;
  /** Shared secret the client presents (at most 24 bytes). */
  secret?: string;
  mac?: string | Uint8Array;
  /** Default 1500. Frames larger than one buffer travel as chained descriptors. */
  mtu?: number;
  /** Default 1. */
  rxQueues?: number;
  /** Default: rxQueues. */
  txQueues?: number;
  /** Slots per ring, a power of 2 up to 16384 (the server's limit, the client's request). Default 1024. */
  ringSize?: number;
  /** Bytes per memif buffer of a copy-mode client (zero copy uses the pool's buffers). Default 2048. */
  bufferSize?: number;
  /**
   * After traffic stops, how long (µs) the receive rings stay flagged MASK_INT (the peer does
   * not kick) while the engine keeps polling: the engine's own idle-poll time (cpu.idle-poll-us),
   * Infinity for an engine that never sleeps. Default 50.
   */
  idlePollUs?: number;
  /**
   * Compute UDP checksums on transmit. false: datagrams go out with checksum 0 (IPv4 allows it):
   * shared memory does not corrupt them. Only where no peer forwards them onto a real wire (a VPP
   * peer that routes to a NIC would carry them unprotected). null or absent (the default): false
   * while the peer is another rdma-graph data plane (which forwards nothing), true otherwise.
   */
  udpChecksum?: boolean | null;
  /**
   * Queues other worker threads poll (drivers/memif-lane.ts) find this interface by this key.
   * The interface then runs in copy mode (their buffers are in their own pools).
   */
  laneKey?: string;
  /** The rx queues this thread polls (default all); the others are polled through lanes. */
  pollQueues?: number[];
}

const KNOWN = new Set([
  'socket',
  'role',
  'id',
  'secret',
  'mac',
  'mtu',
  'rxQueues',
  'txQueues',
  'ringSize',
  'bufferSize',
  'idlePollUs',
  'udpChecksum',
  'laneKey',
  'pollQueues',
]);

/** How a data plane of ours names itself in the memif handshake (native/core/memif_control.cc). */
const RDMA_GRAPH_PEER = 'rdma-graph ';

/**
 * The largest MTU a memif link between two of our data planes takes by itself (linkMtu): an RC
 * QP's tagged segment then carries exactly 32 KiB (20 bytes of IPv4, 8 of UDP, 10 of TRP and 14
 * of tagged DDP header: nodes/rdma/wire.ts segmentPayload), so a 64 KiB WRITE is two segments,
 * not two and a 232-byte third that costs as much to handle as a full one (32768 before, 32652-
 * byte segments: alternated WRITE runs put 32 KiB segments 4-10 % ahead in one series, within
 * noise in another). 32 KiB is the largest power of two a UDP datagram carries (65507 bytes).
 */
export const MEMIF_PEER_MTU = 32 * 1024 + 52;

/**
 * The MTU of a memif link between two rdma-graph data planes: MEMIF_PEER_MTU, or less where a
 * frame would take more than 32 buffers (pool buffers of `dataSize`, memif buffers of
 * `bufferSize`; a transmitted frame may have 64 segments, a received one 256 descriptors:
 * native/core/memif.h) or more than a quarter of a ring of `ringSize` slots; null when that
 * leaves no more than 1500.
 */
export function peerMtu(dataSize: number, bufferSize: number, ringSize: number): number | null {
  const buffers = Math.min(32, ringSize >>> 2);
  const mtu = Math.min(MEMIF_PEER_MTU, buffers * Math.min(dataSize, bufferSize) - 64);
  return mtu > 1500 ? mtu : null;
}

export class MemifDriver implements Driver {
  readonly kind = 'memif';
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues: number;
  readonly txQueues: number;
  readonly role: 'server' | 'client';
  readonly socket: string;
  readonly id: number;
  readonly ringSize: number;
  readonly idlePollUs: number;
  readonly udpChecksum: boolean | null;
  readonly bufferSize: number;
  readonly pollQueues: readonly number[];

  private readonly secret: string;
  private readonly laneKey: string | undefined;
  private readonly core: CoreAddon;
  private state: 'new' | 'open' | 'closed' = 'new';
  private native: MemifNative | null = null;
  private handle = -1;
  private pool: BufferPool | null = null;
  private stash = new Uint32Array(0);
  private done = new Uint32Array(0);
  /** bindPool's state array, and the index of each of its words (core.memifLayout()). */
  private readonly st: Uint32Array;
  private readonly S: MemifLayout['state'];
  /** Largest frame the native receive path accepts (kMaxFrame, core.memifLayout()). */
  private readonly maxRxFrame: number;
  private low = 0;
  private gen = 0;
  private waitFds: number[] = [];
  private final: MemifStats | null = null;
  private finalInfo: MemifInfo | null = null;

  constructor(name: string, opts: MemifOptions) {
    if (typeof name !== 'string' || name.length === 0)
      throw new TypeError(`memif: interface name must be a non-empty string, got ${JSON.stringify(name)}`);
    const where = `memif interface ${name}`;
    if (opts === null || typeof opts !== 'object')
      throw new TypeError(`${where}: options must be an object with socket and role`);
    for (const k of Object.keys(opts)) {
      if (!KNOWN.has(k)) throw new RangeError(`${where}: unknown option "${k}" (known: ${[...KNOWN].join(', ')})`);
    }
    this.name = name;
    if (typeof opts.socket !== 'string' || opts.socket.length === 0)
      throw new TypeError(
        `${where}: socket must be a non-empty string (a path, or "@name" for the abstract namespace)`,
      );
    const abstract = opts.socket.startsWith('@') || opts.socket.startsWith('abstract:');
    const sockName = opts.socket.startsWith('@')
      ? opts.socket.slice(1)
      : opts.socket.startsWith('abstract:')
        ? opts.socket.slice(9)
        : opts.socket;
    const bytes = Buffer.byteLength(sockName);
    if (bytes === 0 || bytes > 107 || sockName.includes('\0'))
      throw new RangeError(
        `${where}: socket must name 1 to 107 bytes${abstract ? ' after the abstract prefix' : ''}, got ${bytes}`,
      );
    this.socket = opts.socket;
    if (opts.role !== 'server' && opts.role !== 'client')
      throw new RangeError(`${where}: role must be 'server' or 'client', got ${JSON.stringify(opts.role)}`);
    this.role = opts.role;
    this.id = intOption(where, 'id', opts.id, 0, 0, 0xffffffff);
    if (opts.secret !== undefined) {
      if (
        typeof opts.secret !== 'string' ||
        opts.secret.length === 0 ||
        Buffer.byteLength(opts.secret) > 24 ||
        opts.secret.includes('\0')
      ) {
        throw new RangeError(
          `${where}: secret must be a string of 1 to 24 bytes without NUL, got ${JSON.stringify(opts.secret)}`,
        );
      }
    }
    this.secret = opts.secret ?? '';
    this.mac = macOption(where, opts.mac, name);
    this.mtu = intOption(where, 'mtu', opts.mtu, 1500, MTU_MIN, MTU_MAX);
    this.rxQueues = intOption(where, 'rxQueues', opts.rxQueues, 1, 1, 255);
    this.txQueues = intOption(where, 'txQueues', opts.txQueues, this.rxQueues, 1, 255);
    this.ringSize = intOption(where, 'ringSize', opts.ringSize, 1024, 2, 16384);
    const idle = opts.idlePollUs ?? 50;
    if (!(typeof idle === 'number' && idle >= 0 && (Number.isInteger(idle) || idle === Infinity)))
      throw new RangeError(`${where}: idlePollUs must be an integer >= 0 or Infinity, got ${String(opts.idlePollUs)}`);
    this.idlePollUs = idle;
    if (opts.udpChecksum !== undefined && opts.udpChecksum !== null && typeof opts.udpChecksum !== 'boolean')
      throw new RangeError(`${where}: udpChecksum must be true, false or null, got ${String(opts.udpChecksum)}`);
    this.udpChecksum = opts.udpChecksum ?? null;
    if ((this.ringSize & (this.ringSize - 1)) !== 0)
      throw new RangeError(`${where}: ringSize must be a power of 2 in 2..16384, got ${this.ringSize}`);
    this.bufferSize = intOption(where, 'bufferSize', opts.bufferSize, 2048, 128, 65535);
    const poll = opts.pollQueues ?? Array.from({ length: this.rxQueues }, (_, q) => q);
    if (
      !Array.isArray(poll) ||
      !poll.every((q) => Number.isInteger(q) && q >= 0 && q < this.rxQueues) ||
      !poll.includes(0) ||
      new Set(poll).size !== poll.length
    )
      throw new RangeError(
        `${where}: pollQueues must list distinct rx queues 0..${this.rxQueues - 1} including 0 (it runs the control channel), got ${JSON.stringify(opts.pollQueues)}`,
      );
    this.pollQueues = poll;
    if (opts.laneKey !== undefined && (typeof opts.laneKey !== 'string' || opts.laneKey.length === 0))
      throw new RangeError(`${where}: laneKey must be a non-empty string`);
    if (poll.length < this.rxQueues && opts.laneKey === undefined)
      throw new RangeError(`${where}: queues left out of pollQueues need a laneKey (another thread polls them)`);
    this.laneKey = opts.laneKey;
    this.core = loadCore();
    const layout = this.core.memifLayout();
    this.st = new Uint32Array(layout.stateLength);
    this.S = layout.state;
    this.maxRxFrame = layout.maxFrame;
  }

  /** Bind (server) or start connecting (client) with the pool. Throws when the socket cannot be used. */
  open(pool: BufferPool): void {
    if (this.state !== 'new')
      throw new Error(`memif interface ${this.name}: already ${this.state === 'open' ? 'open' : 'closed'}`);
    const native = new this.core.Memif({
      // Capped at an hour (the native option is a double of µs): "never" in practice.
      idleUs: Math.min(this.idlePollUs, 3.6e9),
      name: this.name,
      socket: this.socket,
      role: this.role,
      id: this.id,
      secret: this.secret,
      log2RingSize: Math.log2(this.ringSize),
      bufferSize: this.bufferSize,
      rxQueues: this.rxQueues,
      txQueues: this.txQueues,
      ...(this.laneKey === undefined ? {} : { laneKey: this.laneKey }),
    });
    const maxSegs = Math.ceil(this.maxRxFrame / pool.dataSize);
    this.stash = new Uint32Array(2 * FRAME_SIZE + maxSegs);
    this.low = FRAME_SIZE + maxSegs;
    this.done = new Uint32Array(this.ringSize + FRAME_SIZE + 256);
    this.pool = pool;
    this.native = native;
    this.handle = native.handle;
    this.waitFds = native.waitFds.slice();
    this.state = 'open';
    // One native mirror of the pool's external memory table per pool, shared by its drivers.
    const ext = extTableOf(this.core, pool);
    // A server always copies (the payload of an external segment straight from the MR), and so
    // does a client whose pool is not shareable or whose queues are spread over threads. A
    // zero-copy client copies such a frame into slot buffers of its own transmit rings
    // (native/core/memif_rings.cc TxZeroCopy) unless RDMA_GRAPH_MEMIF_TX_GATHER=0 when it opens.
    if (
      this.role === 'server' ||
      pool.memory.fd < 0 ||
      this.laneKey !== undefined ||
      process.env.RDMA_GRAPH_MEMIF_TX_GATHER !== '0'
    )
      pool.ext.wanted = true;
    try {
      native.bindPool({
        ...poolArrays(pool),
        fd: pool.memory.fd,
        stash: this.stash,
        done: this.done,
        state: this.st,
        flagNext: BufferFlag.NEXT_PRESENT,
        ext,
        extId: pool.extId,
        flagExt: BufferFlag.EXT_DATA,
        // A server may leave received payload in the client's memory (graph/peer-windows.ts).
        windows: this.role === 'server' && this.laneKey === undefined ? peerWindowsOf(pool) : undefined,
      });
    } catch (e) {
      this.close();
      throw e;
    }
    this.sync();
  }

  /**
   * UDP without a checksum with udpChecksum false, or null while the peer is another rdma-graph
   * data plane (ourPeer); nothing is offloaded (memif has no NIC). Read again by the data
   * plane's link watch, so it follows the peer.
   */
  txChecksumOffload(): { ip4: boolean; udp: boolean; udpNone: boolean } {
    const none = this.udpChecksum === null ? this.ourPeer() !== null : !this.udpChecksum;
    return { ip4: false, udp: false, udpNone: none };
  }

  /** While connected to another rdma-graph data plane (its name in the memif handshake): the link's info. */
  private ourPeer(): MemifInfo | null {
    if (this.native === null || this.st[this.S.link] === 0) return null;
    const i = this.native.info();
    return i.remoteName.startsWith(RDMA_GRAPH_PEER) ? i : null;
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    const h = this.handle;
    if (h < 0) return 0;
    if (queue >= this.rxQueues) throw new RangeError(`memif interface ${this.name}: no rx queue ${queue}`);
    const st = this.st,
      S = this.S;
    if (st[S.link] !== 0 && st[S.stash] < this.low) this.topUp();
    const n = this.core.memifRx(h, queue, out, max);
    if (st[S.done] !== 0) (this.pool as BufferPool).free(this.done, 0, st[S.done]);
    if (st[S.gen] !== this.gen) {
      this.sync();
      if (st[S.link] !== 0) this.refill();
    }
    return n;
  }

  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    const h = this.handle;
    if (h < 0) return 0;
    const taken = this.core.memifTx(h, queue, bufs, off, n);
    const st = this.st,
      S = this.S;
    if (st[S.done] !== 0) (this.pool as BufferPool).free(this.done, 0, st[S.done]);
    if (st[S.gen] !== this.gen) this.sync();
    return taken;
  }

  /** Service the control channel now (the receive path does it by itself); true while connected. */
  poll(): boolean {
    if (this.native === null) return false;
    this.native.poll();
    const st = this.st,
      S = this.S;
    if (st[S.done] !== 0) (this.pool as BufferPool).free(this.done, 0, st[S.done]);
    if (st[S.gen] !== this.gen) {
      this.sync();
      if (st[S.link] !== 0) this.refill();
    }
    return st[S.link] !== 0;
  }

  /**
   * While connected to another rdma-graph data plane (the peer's name in the memif handshake):
   * peerMtu. Neither end forwards a frame anywhere, so no wire limits the frame; a larger MTU
   * means larger RDMA segments (nodes/rdma/PROTOCOL.md section 1). Any other peer (DPDK, VPP,
   * libmemif), or not connected: null (1500), since such a peer may forward onto a network.
   */
  linkMtu(): number | null {
    const i = this.ourPeer();
    if (i === null || this.pool === null) return null;
    return peerMtu(this.pool.dataSize, Math.min(this.bufferSize, i.bufferSize || this.bufferSize), i.ringSize);
  }

  /** Connected in copy mode: external payload segments are gathered from where they are. */
  txExternal(): boolean {
    return this.st[this.S.ext] !== 0;
  }

  /** Connected to a peer. */
  linkUp(): boolean {
    return this.st[this.S.link] !== 0 && this.native !== null;
  }

  /** An epoll fd that stays the same across reconnections (see the file comment). */
  rxWaitFd(queue: number): number {
    return this.waitFds[queue] ?? -1;
  }

  setWakeup(_wake: () => void): void {
    // Everything that should wake the engine makes rxWaitFd readable.
  }

  /** Connection state, peer names, ring geometry, zero copy or not, the last disconnect reason. */
  info(): MemifInfo {
    if (this.native !== null) return this.native.info();
    if (this.finalInfo !== null) return this.finalInfo;
    throw new Error(`memif interface ${this.name}: not open`);
  }

  hardware(): DriverHardware {
    const i = this.native !== null ? this.native.info() : this.finalInfo;
    const st = this.stats();
    const info: DriverHardware['info'] =
      i === null
        ? { state: 'not open' }
        : {
            role: i.role,
            socket: i.abstract ? `@${i.socket}` : i.socket,
            id: i.id,
            state: i.state,
            peer: i.connected ? `${i.remoteName || '-'} (interface ${i.remoteIfName || '-'})` : null,
            'zero-copy': i.zeroCopy,
            rings: `${i.rxRings} rx, ${i.txRings} tx, ${i.ringSize} slots`,
            regions: i.regions,
            'buffer-size': i.bufferSize,
            'last disconnect':
              i.lastDisconnect === null
                ? null
                : `${i.lastDisconnect.reason} (${i.lastDisconnect.byPeer ? (i.lastDisconnect.wasUp ? 'by the peer' : 'the peer refused us') : 'by us'})`,
            'last refused':
              i.lastRefused === null
                ? null
                : `${i.lastRefused.peer ? `"${i.lastRefused.peer}"` : 'a client'}: ${i.lastRefused.reason}`,
            'last connect error': i.lastConnectError,
          };
    return { info, counters: { ...st } };
  }

  linkDrops(): LinkDrops {
    const count = this.native !== null ? this.native.stats().disconnects : (this.final?.disconnects ?? 0);
    const last = (this.native !== null ? this.native.info() : this.finalInfo)?.lastDisconnect ?? null;
    return { count, reason: last?.reason ?? null, wasUp: last?.wasUp ?? true, byPeer: last?.byPeer ?? false };
  }

  connectFailures(): { count: number; reason: string | null; level: 'info' | 'warn' } {
    const count = this.native !== null ? this.native.stats().connectFailures : (this.final?.connectFailures ?? 0);
    const err = (this.native !== null ? this.native.info() : this.finalInfo)?.lastConnectError ?? null;
    if (err === null) return { count, reason: null, level: 'info' };
    const path = this.socket.startsWith('@') || this.socket.startsWith('abstract:') ? null : this.socket;
    const where = path === null ? `abstract socket ${this.socket}` : path;
    if (path !== null && !existsSync(dirname(resolve(path))))
      return {
        count,
        reason: `cannot connect to ${where}: its directory ${dirname(resolve(path))} does not exist`,
        level: 'warn',
      };
    return { count, reason: `cannot connect to ${where}: ${err}`, level: 'info' };
  }

  refusals(): { count: number; reason: string | null; peer: string | null } {
    const count = this.native !== null ? this.native.stats().refused : (this.final?.refused ?? 0);
    const last = (this.native !== null ? this.native.info() : this.finalInfo)?.lastRefused ?? null;
    return { count, reason: last?.reason ?? null, peer: last?.peer || null };
  }

  /** Everything the native side counts. */
  stats(): MemifStats {
    if (this.native !== null) return this.native.stats();
    if (this.final !== null) return { ...this.final };
    return {
      rxPackets: 0,
      rxBytes: 0,
      rxErrors: 0,
      rxNoBuffers: 0,
      rxChained: 0,
      txPackets: 0,
      txBytes: 0,
      txErrors: 0,
      txRefused: 0,
      txChained: 0,
      kicks: 0,
      interrupts: 0,
      rxDeferred: 0,
      txGathered: 0,
      connects: 0,
      disconnects: 0,
      connectFailures: 0,
      refused: 0,
      socketRefused: 0,
      controlMessages: 0,
    };
  }

  counters(): DriverCounters {
    if (this.native === null && this.final === null) return zeroCounters();
    const s = this.stats();
    return {
      rxPackets: s.rxPackets,
      rxBytes: s.rxBytes,
      txPackets: s.txPackets,
      txBytes: s.txBytes,
      rxDrops: 0, // memif never drops on receive: frames wait in the ring (the sender sees it full)
      txDrops: s.txRefused,
      rxErrors: s.rxErrors,
      txErrors: s.txErrors,
    };
  }

  /** Send DISCONNECT, give every buffer back to the pool, close the fds, remove the socket file. Idempotent. */
  close(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    const native = this.native;
    if (native !== null) {
      native.close();
      this.final = native.stats();
      this.finalInfo = native.info();
      // Buffers that were in the rings, then the stash.
      const pool = this.pool as BufferPool;
      for (let k = native.reclaim(); k > 0; k = native.reclaim()) pool.free(this.done, 0, k);
      this.freeStash();
    }
    this.native = null;
    this.handle = -1;
    this.waitFds = [];
    this.pool = null;
  }

  /**
   * Just connected: give the peer receive buffers at once (a zero-copy client refills its
   * rings from the stash sync() just filled), not at the next poll, which may come only after
   * the engine slept, and the peer cannot send before.
   */
  private refill(): void {
    const st = this.st,
      S = this.S;
    for (const q of this.pollQueues) {
      if (this.handle < 0) break;
      if (st[S.stash] < this.low) this.topUp();
      this.core.memifRx(this.handle, q, this.noOut, 0);
      if (st[S.done] !== 0) (this.pool as BufferPool).free(this.done, 0, st[S.done]);
    }
  }
  private readonly noOut = new Uint32Array(1);

  private topUp(): void {
    const st = this.st,
      S = this.S;
    const have = st[S.stash];
    st[S.stash] = have + (this.pool as BufferPool).alloc(this.stash, have, this.stash.length - have);
  }

  private freeStash(): void {
    const n = this.st[this.S.stash];
    if (n > 0 && this.pool !== null) this.pool.free(this.stash, 0, n);
    this.st[this.S.stash] = 0;
  }

  /** The link went up or down: reclaim what the rings held; hold nothing while down. */
  private sync(): void {
    const st = this.st,
      S = this.S;
    this.gen = st[S.gen];
    const native = this.native;
    const pool = this.pool;
    if (native === null || pool === null) return;
    if (st[S.orphans] !== 0) {
      for (let k = native.reclaim(); k > 0; k = native.reclaim()) pool.free(this.done, 0, k);
    }
    if (st[S.link] === 0) this.freeStash();
    else this.topUp();
  }
}

function intOption(where: string, key: string, v: unknown, def: number, min: number, max: number): number {
  if (v === undefined) return def;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`${where}: ${key} must be an integer in ${min}..${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}
