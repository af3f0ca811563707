/**
 * The one interface every driver implements (pcap, pipe, af_packet, memif, dpdk, ibverbs,
 * mlx5dv; with worker threads also drivers/remote.ts, another worker's interface seen from
 * here). The graph's device nodes (`<driver>-input`, `<if>-output`, `<if>-tx`) call it once
 * per burst, never per packet.
 *
 * Ownership: `rxBurst` hands freshly filled buffers to the caller. `txBurst` takes the buffers
 * it accepts (the first `sent` of the vector) and frees them when it is done with them; the
 * caller keeps the rest (and drops them, counting "no free tx slots").
 */
import type { BufferMemory, BufferPool, ExternalAllocator } from '../graph/buffer-pool.ts';
import type { PoolArrays } from '../native/addons.ts';

export interface DriverCounters {
  rxPackets: number;
  rxBytes: number;
  txPackets: number;
  txBytes: number;
  /** Received by the device but lost before reaching us (ring full, no buffers). */
  rxDrops: number;
  /** Offered to txBurst but not sent. */
  txDrops: number;
  /** Errors the device reports (malformed frames, I/O errors). */
  rxErrors: number;
  txErrors: number;
}

/** Driver-specific facts and counters (Driver.hardware). */
export interface DriverHardware {
  info: Record<string, string | number | boolean | null>;
  counters: Record<string, number>;
}

export function zeroCounters(): DriverCounters {
  return { rxPackets: 0, rxBytes: 0, txPackets: 0, txBytes: 0, rxDrops: 0, txDrops: 0, rxErrors: 0, txErrors: 0 };
}

/** A NIC port's MAC and queues (dpdk, ibverbs, mlx5dv), from its interface entry (drivers/open.ts). */
export interface PortQueueOptions {
  mac?: string;
  mtu: number;
  rxQueues: number;
  txQueues: number;
  rxQueueSize: number;
  txQueueSize: number;
}

/** Driver.linkDrops. */
export interface LinkDrops {
  count: number;
  reason: string | null;
  /** The last drop ended a connection that had come up (false: it ended while connecting). */
  wasUp?: boolean;
  /** The peer ended it (its DISCONNECT), rather than us. */
  byPeer?: boolean;
}

/** Driver.providesMemory: the pool's memory and, when the driver allocates, its allocator. */
export interface ProvidedMemory {
  memory: BufferMemory;
  allocator: ExternalAllocator | null;
}

export interface Driver {
  /** Driver family: "pcap", "pipe", "af_packet", "memif", ... */
  readonly kind: string;
  /** Interface name, e.g. "pipe0", "memif0". */
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues: number;
  readonly txQueues: number;
  /** The rx queues this thread polls, when not all of them (memif queues spread over workers). */
  readonly pollQueues?: readonly number[];
  /**
   * The device's number for rx queue `queue` (show interface rx-placement), when this driver is
   * a worker's share of an interface (its memif queues, its af_packet socket). Absent: the same.
   */
  deviceQueue?(queue: number): number;
  /**
   * Not the device (drivers/remote.ts): another worker owns the interface and this driver hands
   * what it is given to transmit to that worker. It receives nothing, and the interface has no
   * fault injector, capture or device counters on this thread.
   */
  readonly remote?: boolean;

  /**
   * Memory the driver wants the buffer pool to live in (DPDK's mempool: its mbufs' data rooms
   * become the pool's buffers, so nothing is copied), with the allocator that hands them out, or
   * null when it works with any pool. Asked before the pool is created, with the configured
   * buffer count and data size; at most one interface of a data plane may provide it.
   */
  providesMemory?(want: { count: number; dataSize: number }): ProvidedMemory | null;

  /** Bind to the pool and start the device. Throws a clear Error when it cannot. */
  open(pool: BufferPool): void;

  /** Receive up to `max` packets from `queue` into `out[0..]`; returns how many. */
  rxBurst(queue: number, out: Uint32Array, max: number): number;

  /** Transmit `n` packets from `bufs[off..]` on `queue`; returns how many were accepted. */
  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number;

  /** Link up (carrier) as the device sees it. */
  linkUp(): boolean;
  /**
   * The MTU this link takes now when the interface's configuration sets none, or null for the
   * default (1500). memif: peerMtu while connected to another rdma-graph data plane (which never
   * forwards a frame onto a wire), else null. Drivers that know no better leave it out.
   */
  linkMtu?(): number | null;
  /**
   * The multicast MACs (6 bytes each, at most 64) the data plane wants received: the IPv4
   * groups its interfaces joined, the all-systems group with them, and the MACs subscribed
   * by hand. Called with the whole list whenever it changes; the driver puts it in the
   * device's filter (a NIC drops a group's frames it was not given unless promiscuous) and
   * throws when it cannot. Absent: the device needs nothing (memif, pcap: every frame
   * arrives; ibverbs steers all IPv4 multicast already).
   */
  multicastFilter?(macs: Uint8Array): void;
  /**
   * True while txBurst takes packets with external payload segments (BufferFlag.EXT_DATA,
   * graph/ext-memory.ts) and reads them in place; absent or false: the tx node copies them into
   * the pool first (BufferPool.materialize).
   */
  txExternal?(): boolean;
  /**
   * Checksums the device computes on transmit, when it can (after open); absent: none.
   * udpNone: send UDP without a checksum (the link cannot corrupt it).
   */
  txChecksumOffload?(): { ip4: boolean; udp: boolean; udpNone?: boolean };

  /**
   * How many times a connection was dropped (a link that went down, or a peer refused while
   * connecting) and the last reason, for the log: counted, so none is missed between two looks.
   * Drivers with nothing to say (no peer) leave it out.
   */
  linkDrops?(): LinkDrops;

  /**
   * Peers refused while connecting to us (a memif server: wrong secret, a taken id), counted,
   * with the last reason and the peer's name. Drivers that never refuse leave it out.
   */
  refusals?(): { count: number; reason: string | null; peer: string | null };

  /**
   * A client's failed attempts to reach its peer (a memif client whose server socket is not
   * there), counted, with why the last one failed (null: the last attempt got through) and how
   * much it matters (warn: likely a mistake, as a socket directory that does not exist; info: the
   * peer is not up yet). Drivers that never connect out leave it out.
   */
  connectFailures?(): { count: number; reason: string | null; level: 'info' | 'warn' };

  /**
   * What `show hardware` prints below the generic lines: driver facts in display order (memif
   * role, socket, peer, rings; af_packet host interface, ring geometry) and driver counters.
   * Drivers with nothing beyond the generic leave it out.
   */
  hardware?(): DriverHardware;

  /**
   * File descriptor that becomes readable when `queue` has packets (memif eventfd, af_packet
   * socket), or -1 when the driver has none and wakes the engine through `setWakeup` instead.
   */
  rxWaitFd(queue: number): number;

  /**
   * Monotonic nanoseconds on the engine's scale (`nowNs()` of graph/clock.ts, performance.now()
   * in ns) at which the queue
   * will next have packets without any fd becoming readable (a rate-limited pcap replay), or
   * -1 when it does not know / never.
   */
  rxNextDueNs?(queue: number): number;

  /**
   * The engine gives every driver a callback to call when packets become available outside
   * any fd (pipe: the peer transmitted). Called at most once per rx queue registration.
   */
  setWakeup(wake: () => void): void;

  counters(): DriverCounters;

  /** Release the device. Buffers it holds go back to the pool. Idempotent. */
  close(): void;
}

/** What a native driver needs to read and write a pool's buffers (its bindPool argument). */
export function poolArrays(pool: BufferPool): PoolArrays {
  return {
    memory: pool.memory.buffer,
    firstOffset: pool.firstOffset,
    stride: pool.stride,
    headroom: pool.headroom,
    dataSize: pool.dataSize,
    count: pool.count,
    offset: pool.offset,
    length: pool.length,
    flags: pool.flags,
    next: pool.next,
  };
}
