// Loader and TypeScript view of the native addons built by `npm run build` (cmake-js) into
// native/build/Release/: core.node always, dpdk.node / ibverbs.node when their libraries exist.

import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);

/** Folder holding the built .node files. */
export const NATIVE_BUILD_DIR = fileURLToPath(new URL('./build/Release/', import.meta.url));

/** librdmagraph-verbs.so, what `rdma-graph exec` preloads (built when libibverbs-dev is there). */
export const VERBS_LIBRARY = `${NATIVE_BUILD_DIR}librdmagraph-verbs.so`;

/**
 * The environment of a verbs program of the daemon whose verbs socket is `socket`: `base` with
 * librdmagraph-verbs.so preloaded (before whatever it preloads already) and RDMA_GRAPH_SOCKET
 * set, absolute (the program may change directory), or the abstract name ("@...") as it is.
 */
export function verbsProgramEnv(socket: string, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return {
    ...base,
    RDMA_GRAPH_SOCKET: socket.startsWith('@') ? socket : resolve(socket),
    LD_PRELOAD: [VERBS_LIBRARY, base.LD_PRELOAD].filter(Boolean).join(':'),
  };
}

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
  /**
   * The function each soon() calls; weakly held (neither it nor the waiter is kept alive by
   * it). Replaces the last one.
   */
  onTurn(fn: () => void): void;
  /**
   * Call the onTurn() function once, in this event-loop iteration's check phase (where
   * setImmediate's callbacks run; the poll phase does not block meanwhile), or the next
   * iteration's when called from it. No object is made per call (setImmediate makes one). A
   * second soon() before the call is the same call. Microtasks run after it; a throw is an
   * uncaught exception. An armed turn keeps the process alive.
   */
  soon(): void;
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
  /** 'v3' (default) or 'v2' (TPACKET_V2: a slot per frame, no block timeout; needs txRing false). */
  rxRing?: 'v3' | 'v2';
  /** PACKET_VNET_HDR: UDP segmentation offload both ways (native/core/afpacket_gso.h); needs rxRing 'v2'. Default false. */
  gso?: boolean;
  /** Transmit through a TPACKET_V3 TX ring on the socket instead of sendmmsg. Default false. */
  txRing?: boolean;
  /** TX ring frames (txRing only). Default 1024. */
  txFrames?: number;
  /** TX ring frame size, header included (txRing only). Default 2048. */
  txFrameSize?: number;
  /** A classic BPF socket filter, flat [code, jt, jf, k, ...] (drivers/steer-bpf.ts), attached before bind. */
  filter?: Uint32Array;
}

/** A buffer pool's memory, layout and metadata arrays as native drivers see them (BufferPool fields). */
export interface PoolArrays {
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
}

/** Where the rx path writes: the pool's memory and metadata arrays. */
export interface AfPacketPoolBinding extends PoolArrays {
  tsSec: Uint32Array;
  tsNsec: Uint32Array;
  /** Buffer indices allocated for the current burst; holds at least one maximal frame. */
  idx: Uint32Array;
  /** [0]: indices of `idx` the last rx() used. */
  result: Uint32Array;
  flagNext: number;
  flagTimestamp: number;
  flagL4Ok: number;
  /** Packets whose UDP checksum is left to the socket (gso: a virtio_net_hdr asks the kernel for it). */
  flagTxUdp?: number;
  /**
   * External payload (graph/ext-memory.ts): segments flagged `flagExt` have their bytes in
   * memory `extId[bi]` of `ext`, which sendmmsg gathers in place (the TX ring copies them).
   * Left out, such a segment is a transmit error.
   */
  ext?: ExtTableNative;
  extId?: Uint32Array;
  flagExt?: number;
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
  /** gso: messages of more than one datagram sent, and the datagrams they carried (in txPackets). */
  txGsoMessages: number;
  txGsoDatagrams: number;
  /** gso: GSO frames received and cut, the datagrams they gave (in rxPackets), and those dropped (not IPv4/UDP, lengths that disagree, too many or too small pieces). */
  rxGsoFrames: number;
  rxGsoDatagrams: number;
  rxGsoDropped: number;
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
  readonly rxRing: 'v3' | 'v2';
  readonly gso: boolean;
  /** TPACKET_V2 slots in the rx ring (0 with v3). */
  readonly rxSlots: number;
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
  /** The kernel interface's MTU now (by index), -1 when it is gone or the socket closed. */
  linkMtu(): number;
  /** The multicast MACs (6 bytes each) the interface is to receive: the socket's PACKET_MR_MULTICAST memberships. */
  multicast(macs: Uint8Array): void;
  close(): void;
}

/** Options of a native memif interface (drivers/memif.ts validates them first). */
export interface MemifNativeOptions {
  name: string;
  /** A filesystem path, or an abstract name as "@name" or "abstract:name". */
  socket: string;
  role: 'server' | 'client';
  id?: number;
  secret?: string;
  /** log2 of the ring size: 1..14 (the server's upper limit, the client's request). */
  log2RingSize?: number;
  /** Client copy mode: bytes per buffer in region 0. */
  bufferSize?: number;
  rxQueues?: number;
  txQueues?: number;
  /** After traffic stops, µs with the receive rings masked (no kicks) before interrupts go back on; default 50. */
  idleUs?: number;
  /** Queues other threads poll through MemifLane find this interface by this key (copy mode then). */
  laneKey?: string;
}

/** One queue pair of a memif interface polled by another thread than its owner's (native/core/memif_lane.cc). */
export interface MemifLaneNative {
  /** epoll fd: readable on the queue's interrupt, or every 10 ms while not attached to the owner. */
  readonly waitFd: number;
  bindPool(b: MemifPoolBinding): void;
  rx(out: Uint32Array, max: number): number;
  tx(bufs: Uint32Array, off: number, n: number): number;
  reclaim(): number;
  info(): { name: string; queue: number; attached: boolean; up: boolean; attaches: number; error: string | null };
  stats(): Pick<
    MemifStats,
    | 'rxPackets'
    | 'rxBytes'
    | 'rxErrors'
    | 'rxNoBuffers'
    | 'rxChained'
    | 'txPackets'
    | 'txBytes'
    | 'txErrors'
    | 'txRefused'
    | 'txChained'
    | 'kicks'
    | 'interrupts'
    | 'rxDeferred'
    | 'txGathered'
  >;
  close(): void;
}

/**
 * What the memif data path shares with its driver, as native/core/memif.h lays it out
 * (core.memifLayout()): the index of each word of the `state` array, its length, and the largest
 * frame the receive path takes.
 */
export interface MemifLayout {
  state: { stash: number; done: number; gen: number; link: number; orphans: number; ext: number };
  stateLength: number;
  maxFrame: number;
}

/** Where the memif data path reads and writes: the pool and the driver's shared arrays. */
export interface MemifPoolBinding extends PoolArrays {
  /** memfd of `memory` (allocMemory's), or -1: a client registers it as region 1 (zero copy). */
  fd: number;
  /** Allocated buffers the receive path takes from the top of (count in state[0]). */
  stash: Uint32Array;
  /** Buffers the last call is done with, for the caller to free (count in state[1]); >= ringSize + 256. */
  done: Uint32Array;
  /** [stash count, done count, link generation, link up, orphans waiting, ...]: MemifLayout. */
  state: Uint32Array;
  flagNext: number;
  /**
   * External payload (graph/ext-memory.ts): segments flagged `flagExt` have their bytes in
   * memory `extId[bi]` of `ext` (at offset[bi], length[bi]), which a copy-mode transmit reads
   * in place. Left out, such a segment is a transmit error.
   */
  ext?: ExtTableNative;
  extId?: Uint32Array;
  flagExt?: number;
  /** The pool's RxWindows: a server leaves received payload matching its pattern in the client's memory. */
  windows?: RxWindowsNative;
}

/** core.ExtTable (native/core/ext_table.h): memories by id, each kept alive while listed. */
export interface ExtTableNative {
  /** List `memory` as id (1..2^24-1), replacing what was there. */
  set(id: number, memory: Uint8Array): void;
  /** Unlist id (its reference goes). */
  clear(id: number): void;
}

/** Which received frames a memif server may leave in its peer's memory past their first bytes. */
export interface RxDeferPattern {
  /** Bytes copied into the head buffer (64..256): every header a node reads. */
  headBytes: number;
  /** Frames shorter than this are copied whole. */
  minBytes: number;
  /** (offset, mask, value) triples over the first headBytes; all must match. */
  rules: Uint8Array;
}

/** core.RxWindows (native/core/rx_windows.h): one pool's received payload left in a peer's memory. */
export interface RxWindowsNative {
  /** Copy the chain's peer windows into the pool (flags cleared); the bytes copied. */
  settle(head: number): number;
  /** Which frames may be received so (null: none, the default). */
  setPattern(p: RxDeferPattern | null): void;
  /** Windows copied in late (before their slots went back, or for a node reading bytes). */
  counters(): { copiedIn: number };
}

/** core.ChainCopy (native/core/chain_copy.cc): one pool's packet bytes copied out, one call a chain. */
export interface ChainCopyNative {
  /**
   * `len` bytes of the chain from buffer `bi`, `skip` bytes into it, to dst[dstOff..]; the bytes
   * copied (fewer when the chain ends first). Throws on an index or range outside the pool or dst.
   */
  toMem(bi: number, skip: number, dst: Uint8Array, dstOff: number, len: number): number;
  /**
   * `len` bytes of src[srcOff..] into the chain from buffer `bi`, `h` bytes into its data, each
   * buffer filled to dataSize and its length set; the last buffer written. Throws (nothing
   * written) when the chain is too short or a range is outside the pool or src.
   */
  fromMem(bi: number, h: number, src: Uint8Array, srcOff: number, len: number): number;
}

export interface MemifInfo {
  name: string;
  role: 'server' | 'client';
  socket: string;
  abstract: boolean;
  id: number;
  state: 'idle' | 'hello' | 'handshake' | 'connected' | 'closed';
  connected: boolean;
  zeroCopy: boolean;
  remoteName: string;
  remoteIfName: string;
  ringSize: number;
  rxRings: number;
  txRings: number;
  regions: number;
  bufferSize: number;
  /** wasUp: the connection had come up (false: the peer refused it during the handshake). */
  lastDisconnect: { reason: string; code: number; byPeer: boolean; wasUp: boolean } | null;
  /** Server: the last client refused (the reason sent in its DISCONNECT, the name in its INIT). */
  lastRefused: { reason: string; peer: string } | null;
  lastConnectError: string | null;
}

export interface MemifStats {
  rxPackets: number;
  rxBytes: number;
  /** Frames dropped for bad descriptors (outside their region, too long, broken chains). */
  rxErrors: number;
  /** Receive polls that left frames in the ring for want of buffers. */
  rxNoBuffers: number;
  rxChained: number;
  txPackets: number;
  txBytes: number;
  /** Taken but dropped: invalid buffer chains. */
  txErrors: number;
  /** Offered but not taken (ring full, link down). */
  txRefused: number;
  txChained: number;
  /** Interrupts we sent (eventfd writes) / received (eventfd reads that found a count). */
  kicks: number;
  interrupts: number;
  /**
   * Frames received with their payload left in the client's memory until placed (a server's
   * own queues; graph/peer-windows.ts).
   */
  rxDeferred: number;
  /**
   * Frames whose payload was copied straight from an MR (sent in place, BufferFlag.EXT_DATA)
   * into the peer's buffers (a server, a copy-mode client) or its own transmit slots (a
   * zero-copy client).
   */
  txGathered: number;
  connects: number;
  disconnects: number;
  connectFailures: number;
  /** Connections refused at INIT (wrong secret, already connected...). */
  refused: number;
  /** Server: connections its socket closed unserved (too many waiting for INIT, none in 2 s, out of fds). */
  socketRefused: number;
  controlMessages: number;
}

/** One memif interface (native/core/memif.cc). */
export interface MemifNative {
  readonly handle: number;
  /** One epoll fd per rx queue: readable on that queue's interrupt (queue 0: also control). */
  readonly waitFds: number[];
  bindPool(b: MemifPoolBinding): void;
  /** Service the control channel now; true while connected. */
  poll(): boolean;
  info(): MemifInfo;
  stats(): MemifStats;
  /** Move up to done.length orphaned buffers into done; returns how many. */
  reclaim(): number;
  /** Send DISCONNECT, release rings, regions, fds and (last server on it) the socket. */
  close(): void;
}

export interface CoreAddon {
  /** Package version the addon was built from. */
  readonly version: string;
  /** CPU timestamp counter (or CLOCK_MONOTONIC ns where there is none), see tscSource(). */
  rdtsc(): number;
  /** The counter into the Float64Array last given to tscInto() (no heap number made). */
  rdtscStore(): void;
  tscInto(slot: Float64Array): void;
  tscSource(): TscSource;
  /** Pin the calling thread to these CPUs (pthread_setaffinity_np). */
  setThreadAffinity(cpus: number[]): void;
  /** The CPU the calling thread runs on now (sched_getcpu). */
  currentCpu(): number;
  /** Give the CPU to another runnable thread of it, if any (sched_yield). */
  yieldCpu(): void;
  /**
   * Replace this process with `file` (searched in PATH), `argv` and `env` ("K=V" strings):
   * ignored signals back to default, an empty signal mask, blocking stdio. Throws the errno when
   * the exec fails; never returns otherwise.
   */
  execve(file: string, argv: string[], env: string[]): never;
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
  /**
   * For an eventfd another process gave us (it may be blocking or full, or made so at any
   * moment): add 1 without ever blocking (a full counter: not written; a write that blocks
   * anyway is ended by a timer's signal, eventfd.cc); true if it did. `raceForTest` (tests):
   * the peer's moves inside the window between the checks and the write (the fd made blocking
   * and its counter full).
   */
  eventfdSignal(fd: number, opts?: { raceForTest?: boolean }): boolean;
  /** Whether `fd` is an AF_UNIX stream socket (a completion channel's end, CREATE_CHANNEL). */
  isStreamPair(fd: number): boolean;
  /**
   * One byte to such a socket, never blocking (MSG_DONTWAIT, per call: nothing the program does
   * to the file's flags changes it) nor raising SIGPIPE; true if sent (a full one is readable).
   * `blockingForTest` (tests): the file made blocking first, as a program holding a copy can.
   */
  channelSignal(fd: number, opts?: { blockingForTest?: boolean }): boolean;
  /**
   * FUTEX_WAKE on `u32[index]`, a word of memory shared with another process (a verbs program's
   * CQ ring): wakes every thread asleep in a futex wait on it; the number woken.
   */
  futexWake(u32: Uint32Array, index: number): number;
  /** Read and reset the counter of such an eventfd without ever blocking (RWF_NOWAIT); 0 if empty. */
  eventfdDrain(fd: number): number;
  /** Whether fd is an eventfd (its /proc/self/fd link is anon_inode:[eventfd]). */
  isEventfd(fd: number): boolean;
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
  /** A memif interface; throws naming the interface (bad options, socket in use...). */
  Memif: new (opts: MemifNativeOptions) => MemifNative;
  /** Queue `queue` (1..254) of the memif interface published under `key` by another thread. */
  MemifLane: new (opts: { name: string; key: string; queue: number }) => MemifLaneNative;
  /** An external payload table for bindPool's `ext` (graph/ext-memory.ts mirrors its ids into it). */
  ExtTable: new () => ExtTableNative;
  /** A chain copier over one pool's memory and per-buffer arrays (kept alive by it). */
  ChainCopy: new (pool: {
    memory: ArrayBuffer;
    count: number;
    dataSize: number;
    offset: Uint32Array;
    length: Uint32Array;
    flags: Uint32Array;
    next: Uint32Array;
    flagNext: number;
    /** The pool's RxWindows: buffers flagged with its flagPeer are read in the peer's memory. */
    windows?: RxWindowsNative;
  }) => ChainCopyNative;
  /** Received payload left in a memif peer's memory, over one pool (graph/peer-windows.ts). */
  RxWindows: new (pool: {
    memory: ArrayBuffer;
    count: number;
    flags: Uint32Array;
    next: Uint32Array;
    flagNext: number;
    flagPeer: number;
    flagPeerChain: number;
  }) => RxWindowsNative;
  /** One receive burst from rx queue `queue` into out[]; frees go to done (state[1]). */
  memifRx(handle: number, queue: number, out: Uint32Array, max: number): number;
  /** One transmit burst; returns how many were taken; buffers to free go to done (state[1]). */
  memifTx(handle: number, queue: number, bufs: Uint32Array, off: number, n: number): number;
  memifReclaim(handle: number): number;
  memifPoll(handle: number): boolean;
  /** The layout of the state array and the largest received frame (MemifLayout). */
  memifLayout(): MemifLayout;
  /** Test helpers: raw SOCK_SEQPACKET control sockets (non-blocking) and region mapping. */
  memifRawConnect(socket: string): number;
  memifRawListen(socket: string): number;
  memifRawAccept(fd: number): number;
  memifRawSend(fd: number, bytes: Uint8Array, passFd?: number): number;
  memifRawRecv(fd: number): null | { eof: true } | { data: Uint8Array; fd: number };
  memifMapFd(fd: number, size: number): ArrayBuffer;
  /** SOCK_SEQPACKET for the verbs control socket: the same non-blocking primitives. */
  seqpacketListen(socket: string): number;
  seqpacketAccept(fd: number): number;
  /** One message passing the fd `pass`, or the fds in it (at most RGV_MAX_MR_PIECES); 0 or an errno. */
  seqpacketSend(fd: number, bytes: Uint8Array, pass?: number | readonly number[]): number;
  /**
   * One message (up to 8 KiB) and the fds passed with it (`fd`: the first, or -1); `truncated`:
   * it was longer, or carried more than RGV_MAX_MR_PIECES fds (the kernel closed the rest).
   */
  seqpacketRecv(fd: number): null | { eof: true } | { data: Uint8Array; fd: number; fds: number[]; truncated: boolean };
  /** Map `size` bytes of a passed memfd sealed against shrinking (closes fd); throws naming what is wrong. */
  mapSealedFd(fd: number, size: number): ArrayBuffer;
  /** The process at the other end of a unix socket (SO_PEERCRED), or null. */
  seqpacketPeer(fd: number): { pid: number; uid: number } | null;
  /**
   * The verbs socket's listener (native/core/verbs_socket.cc): non-blocking SOCK_SEQPACKET on
   * `path` ("@name": abstract), its file made with `mode` from the start (bound in a private 0700
   * directory, renamed into place, never over an existing file: EEXIST). Keeps a spare fd.
   */
  verbsListen(path: string, mode: number): number;
  /**
   * A connection's fd; -1 none waiting; -2 out of descriptors: one waiting connection was taken
   * off the queue and closed (the spare fd); -3 accept fails: stop watching for a while.
   */
  verbsAccept(fd: number): number;
  /** Close a verbsListen listener and its spare fd. */
  verbsUnlisten(fd: number): void;
  /** RLIMIT_NOFILE (the soft limit). */
  fdLimit(): number;
  /**
   * Map `size` bytes of a passed memfd (closes fd either way), never touching them: it must be
   * sealed against shrinking, that long, and not hugetlbfs; else throws "mapVerbsMemory: why".
   */
  mapVerbsMemory(fd: number, size: number): ArrayBuffer;
  /**
   * A registration's `span` bytes as one view: `pieces` [fdIndex, offset, length] x n (page
   * multiples, in address order, adding up to `span`, every fd used), each range of its memfd
   * (checked as mapVerbsMemory checks one) or of a regular file not sealed (a program's shared
   * mapping: guarded, a page past the file's end reads as zeros instead of SIGBUS) mapped in
   * place. Closes every fd either way; throws "mapVerbsPieces: why".
   */
  mapVerbsPieces(fds: readonly number[], pieces: readonly number[], span: number): ArrayBuffer;
  /** Pages of registered shared files found shrunk under the daemon (each replaced by a zero page). */
  verbsMemoryFaults(): number;
  /**
   * A registration over System V shared memory: segment `shmid` attached here if `uid` is root,
   * its owner or its creator, [offset, offset + span) in it (page multiples), not hugetlb; the
   * ArrayBuffer over those bytes detaches it when collected. Throws "mapVerbsShm: why".
   */
  mapVerbsShm(shmid: number, offset: number, span: number, uid: number): ArrayBuffer;
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
    throw new NativeAddonError('native addon core.node not built: run npm run build (needs cmake, g++)', 'core', path);
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
export function loadAddon<T>(name: 'dpdk' | 'ibverbs', installHint: string): T {
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
