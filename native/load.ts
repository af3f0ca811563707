// Loader and TypeScript view of the native addons built by `npm run build` (cmake-js) into
// native/build/Release/: core.node always, dpdk.node / verbs.node when their libraries exist.

import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);

/** Folder holding the built .node files. */
export const NATIVE_BUILD_DIR = fileURLToPath(new URL('./build/Release/', import.meta.url));

export type TscSource = 'rdtsc' | 'cntvct' | 'clock_monotonic';

export type HugepagesMode = 'auto' | 'never' | 'require';

export interface AllocMemoryOptions {
  /**
   * 'auto' (default): 2 MiB hugepages when the 2 MiB pool has enough free pages and the
   * mapping succeeds, otherwise normal pages (see `fallbackReason`). 'never': normal pages.
   * 'require': hugepages or a thrown Error (code 'ERR_HUGEPAGES_UNAVAILABLE') that says how
   * many to reserve.
   */
  hugepages?: HugepagesMode;
  /** memfd name, shown in /proc/<pid>/fd and /proc/<pid>/maps (1 to 249 bytes). Default 'rdma-graph'. */
  name?: string;
}

export interface NativeMemory {
  /**
   * The whole mapping, zero-filled. Its finalizer unmaps the memory and closes `fd`, so keep
   * this ArrayBuffer referenced for as long as the memory or the fd is in use.
   */
  buffer: ArrayBuffer;
  /**
   * memfd of the mapping (close-on-exec, size sealed against shrinking and growing), to share
   * it with another process (memif passes it over its unix socket). Owned by `buffer`:
   * `closeFd` refuses it.
   */
  fd: number;
  /** True when backed by 2 MiB hugepages. */
  hugepages: boolean;
  /** 2 MiB with hugepages, else the system page size. */
  pageSize: number;
  /** Mapped bytes: the request rounded up to `pageSize`; equals `buffer.byteLength`. */
  size: number;
  /** With hugepages 'auto', why normal pages were used instead; null otherwise. */
  fallbackReason: string | null;
}

/** The default-size hugepage pool as /proc/meminfo reports it. */
export interface HugepageInfo {
  /** HugePages_Total */
  total: number;
  /** HugePages_Free (includes pages reserved for existing mappings but not yet faulted in) */
  free: number;
  /** HugePages_Rsvd */
  reserved: number;
  /** HugePages_Surp */
  surplus: number;
  /** Hugepagesize, in bytes */
  pageSize: number;
}

/**
 * Sleeps on this thread's libuv loop until one of the added fds is readable or a timeout
 * passes. Level-triggered: the callback's owner must drain the fd (e.g. `eventfdRead`) or the
 * next wait fires at once. One waiter per fd per thread; `add()` puts the fd in non-blocking
 * mode. `remove()` an fd before closing it (`wait()` throws on an fd closed behind its back).
 */
export interface FdWaiter {
  /** Watch fd (must be pollable: eventfd, socket, pipe...). Adding the same fd twice throws. */
  add(fd: number): void;
  /**
   * Stop watching fd; throws if it was not added. Removing the last fd of a pending wait
   * without a timeout leaves that wait pending until cancel() or close().
   */
  remove(fd: number): void;
  /**
   * Arm all fds and, when `timeoutMs >= 0` and finite, a timer (fractions round up to whole
   * ms; 0 fires on the next loop turn). The first event disarms everything and calls
   * `cb(fd)` for a readable fd or `cb(-1)` for the timeout, exactly once, as a fresh
   * macrotask (microtasks run after it; a throw is an uncaught exception). `cb` may call
   * `wait()` again. Throws if a wait is already pending, if there is nothing to wait for
   * (no fd and no timeout), or if the waiter is closed. A pending wait keeps the process
   * alive and keeps the waiter from being garbage-collected; an idle waiter does neither.
   */
  wait(timeoutMs: number, cb: (fd: number) => void): void;
  /** Drop the pending wait, if any, without calling its callback. */
  cancel(): void;
  /** Cancel and release all handles. Idempotent; any later add/remove/wait throws. */
  close(): void;
  /** A wait is pending. */
  readonly waiting: boolean;
  readonly closed: boolean;
}

export interface FdWaiterConstructor {
  new (): FdWaiter;
  readonly prototype: FdWaiter;
}

/** A kernel interface as af_packet sees it (ioctls, no privilege needed). */
export interface AfPacketIfInfo {
  ifindex: number;
  /** IFF_* flags. */
  flags: number;
  /** IFF_UP: administratively up. */
  up: boolean;
  /** IFF_RUNNING: carrier (a veth whose peer is down is up but not running). */
  running: boolean;
  mtu: number;
  /** ARPHRD_ETHER: the only link type af_packet accepts. */
  ethernet: boolean;
  hwType: number;
  mac: Uint8Array;
}

export interface AfPacketSocketOptions {
  /** PACKET_MR_PROMISC membership while the socket is open. Default false. */
  promisc?: boolean;
  /** Set an administratively down interface up, as VPP does. Default true. */
  bringUp?: boolean;
  /**
   * PACKET_QDISC_BYPASS (default true, as VPP): transmit straight to the device driver. Frames
   * sent that way skip the qdisc and the interface's taps: tcpdump on this interface does not
   * see them.
   */
  qdiscBypass?: boolean;
  /** Rx ring block size: a power of 2, a multiple of the page size. Default 65536. */
  blockSize?: number;
  /** Rx ring blocks, >= 2. Default 128. */
  blocks?: number;
  /** tp_retire_blk_tov: a block not yet full is handed over after this many ms. Default 1. */
  blockTimeoutMs?: number;
  /** Transmit through a TPACKET_V3 TX ring on the socket instead of sendmmsg. Default false. */
  txRing?: boolean;
  /** TX ring frames (txRing only). Default 1024. */
  txFrames?: number;
  /** TX ring frame size, header included (txRing only). Default 2048. */
  txFrameSize?: number;
}

/** Where the rx path writes: the pool's memory and metadata arrays (BufferPool fields). */
export interface AfPacketPoolBinding {
  memory: ArrayBuffer;
  firstOffset: number;
  stride: number;
  headroom: number;
  dataSize: number;
  count: number;
  offset: Uint32Array;
  length: Uint32Array;
  flags: Uint32Array;
  next: Uint32Array;
  tsSec: Uint32Array;
  tsNsec: Uint32Array;
  /** Buffer indices allocated for the current burst; holds at least one maximal frame. */
  idx: Uint32Array;
  /** [0]: indices of `idx` the last rx() used. */
  result: Uint32Array;
  flagNext: number;
  flagTimestamp: number;
  flagL4Ok: number;
}

export interface AfPacketStats {
  rxPackets: number;
  rxBytes: number;
  /** Frames the ring truncated (larger than a block): dropped. */
  rxTruncated: number;
  /** Frames with impossible ring offsets: dropped. */
  rxBad: number;
  /** Frames whose 802.1Q tag the kernel had stripped and rx put back. */
  rxVlan: number;
  /** Frames from a local stack with CHECKSUM_PARTIAL (L4 checksum not filled in). */
  rxCsumPartial: number;
  rxSkipped: number;
  txPackets: number;
  txBytes: number;
  /** Frames taken but dropped: refused by the kernel (too long...) or malformed chains. */
  txErrors: number;
  txInvalid: number;
  /** Frames offered but not taken (socket buffer or TX ring full, interface down). */
  txRefused: number;
  /** PACKET_STATISTICS, accumulated: frames the socket saw (including drops). */
  kernelPackets: number;
  /** PACKET_STATISTICS: frames lost because the rx ring was full. */
  kernelDrops: number;
  kernelFreezeQueue: number;
  /** Pending socket errors cleared (ENETDOWN when the interface went down). */
  socketErrors: number;
  lastSocketErrno: number;
  lastTxErrno: number;
}

/**
 * One AF_PACKET socket bound to a kernel interface (native/core/afpacket.cc). The per-burst
 * calls are the addon's afPacketRxNeed/Rx/Tx functions taking `handle`: plain functions cost a
 * quarter of an object method call through Node-API.
 */
export interface AfPacketSocket {
  /** This thread's number for the socket while it is open (the per-burst functions take it). */
  readonly handle: number;
  readonly fd: number;
  readonly ifindex: number;
  /** The interface when it was opened. */
  readonly info: AfPacketIfInfo;
  /** The interface was administratively down and was set up. */
  readonly broughtUp: boolean;
  readonly blockSize: number;
  readonly blocks: number;
  /** Longest frame the rx ring holds whole (blockSize - 130); longer ones arrive truncated. */
  readonly maxFrameLen: number;
  readonly txMode: 'sendmmsg' | 'ring';
  readonly txFrames: number;
  readonly txMaxFrameLen: number;
  readonly warnings: string[];
  bindPool(b: AfPacketPoolBinding): void;
  stats(): AfPacketStats;
  /** IFF_* flags now, -1 when the interface is gone or the socket closed. */
  linkFlags(): number;
  close(): void;
}

export interface CoreAddon {
  /** Package version the addon was built from. */
  readonly version: string;
  /** CPU timestamp counter (or CLOCK_MONOTONIC ns where there is none), see tscSource(). */
  rdtsc(): number;
  tscSource(): TscSource;
  /**
   * Shareable memory for a packet-buffer pool: memfd + mmap(MAP_SHARED|MAP_POPULATE).
   * Throws TypeError/RangeError for bad arguments (bytes must be an integer in
   * [1, 64 GiB]), Error with .code = errno name when the system calls fail.
   */
  allocMemory(bytes: number, opts?: AllocMemoryOptions): NativeMemory;
  hugepageInfo(): HugepageInfo;
  /** A non-blocking, close-on-exec eventfd with counter 0. */
  eventfd(): number;
  /** Add n (default 1, integer >= 1) to the eventfd counter. */
  eventfdWrite(fd: number, n?: number): void;
  /** Read and reset the eventfd counter; 0 when it was already 0. */
  eventfdRead(fd: number): number;
  /** close(2). Throws for a bad fd and for the fd of an allocMemory() buffer. */
  closeFd(fd: number): void;
  FdWaiter: FdWaiterConstructor;
  /**
   * Open an AF_PACKET socket on a kernel interface. Throws Error with .code ENODEV (no such
   * interface), EPERM (needs CAP_NET_RAW), EPROTONOSUPPORT (not Ethernet), or the errno of the
   * failing call.
   */
  AfPacketSocket: new (ifname: string, opts?: AfPacketSocketOptions) => AfPacketSocket;
  /** Interface facts; throws .code ENODEV naming the interface when it does not exist. */
  afPacketIfInfo(ifname: string): AfPacketIfInfo;
  /** Pool buffers the next (up to max) frames need; 0 when none are waiting (or closed). */
  afPacketRxNeed(handle: number, max: number): number;
  /**
   * Copy up to max frames into the bound idx[0..nIdx) buffers (in order), heads to out[];
   * returns the packet count, result[0] = indices used.
   */
  afPacketRx(handle: number, out: Uint32Array, max: number, nIdx: number): number;
  /** Consume up to max frames without copying (benchmarks); touch: read each EtherType in place. */
  afPacketRxSkip(handle: number, max: number, touch?: boolean): number;
  /** Transmit bufs[off..off+n); returns how many were taken (the caller frees those). */
  afPacketTx(handle: number, bufs: Uint32Array, off: number, n: number): number;
}

/** The core addon is missing or cannot be loaded. */
export class NativeAddonError extends Error {
  readonly code = 'NATIVE_ADDON_UNAVAILABLE';
  readonly addon: string;
  readonly path: string;
  constructor(message: string, addon: string, path: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'NativeAddonError';
    this.addon = addon;
    this.path = path;
  }
}

/** A driver's addon was not built (its library was missing at build time) or cannot be loaded. */
export class DriverUnavailableError extends Error {
  readonly code = 'DRIVER_UNAVAILABLE';
  readonly driver: string;
  readonly path: string;
  constructor(message: string, driver: string, path: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'DriverUnavailableError';
    this.driver = driver;
    this.path = path;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

let core: CoreAddon | undefined;

/** core.node, loaded once per thread. */
export function loadCore(): CoreAddon {
  if (core) return core;
  const path = NATIVE_BUILD_DIR + 'core.node';
  if (!existsSync(path)) {
    throw new NativeAddonError(
      'native addon core.node not built: run npm run build (needs cmake, g++)',
      'core',
      path,
    );
  }
  try {
    core = require(path) as CoreAddon;
  } catch (e) {
    throw new NativeAddonError(
      `native addon core.node failed to load: ${errorText(e)} (rebuild with: npm run rebuild)`,
      'core',
      path,
      e,
    );
  }
  return core;
}

const drivers = new Map<string, unknown>();

/**
 * A driver addon (`<name>.node`), loaded once per thread. `installHint` says what provides
 * its library, e.g. 'install libdpdk-dev'. Throws DriverUnavailableError when it was not
 * built or cannot be loaded.
 */
export function loadAddon<T>(name: 'dpdk' | 'verbs', installHint: string): T {
  const cached = drivers.get(name);
  if (cached !== undefined) return cached as T;
  const path = `${NATIVE_BUILD_DIR}${name}.node`;
  if (!existsSync(path)) {
    throw new DriverUnavailableError(
      `driver unavailable: ${name}.node was not built (${installHint} and run npm run build)`,
      name,
      path,
    );
  }
  let addon: T;
  try {
    addon = require(path) as T;
  } catch (e) {
    throw new DriverUnavailableError(
      `driver unavailable: ${name}.node failed to load: ${errorText(e)} (${installHint} and run npm run rebuild)`,
      name,
      path,
      e,
    );
  }
  drivers.set(name, addon);
  return addon;
}
