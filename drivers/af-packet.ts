/**
 * The af_packet driver: a Linux kernel interface (a veth end, a NIC the kernel owns) through one
 * AF_PACKET socket, as VPP's `create host-interface name <if>` (interface name `host-<if>`).
 *
 * Receive: a TPACKET_V2 ring (a fixed slot per frame, handed over as soon as it is written), or
 * with `rxRing: 'v3'` (the default with the TX ring) a TPACKET_V3 ring (blocks of `blockSize`,
 * retired by the kernel when full or after `blockTimeoutMs`: a latency floor for sparse
 * traffic). One burst is three steps and two native calls: ask how many pool buffers
 * the waiting frames need, allocate exactly that many in one batch, then one native call copies
 * the frames into them (chaining buffers for frames larger than the pool's data size), fills the
 * pool's length/flags/next/timestamp arrays and hands each ring block back to the kernel as soon
 * as it is consumed. Indices it did not use (frames it dropped) go back in one `pool.free`.
 * Copying rather than handing out ring memory keeps one buffer model (every packet lives in the
 * pool, can be held for retransmission or queued as long as a node likes, and is freed the same
 * way whatever driver it came from), and never lets a slow consumer hold ring blocks so the
 * kernel drops; `npm run bench af_packet` measures what the copy costs.
 *
 * Frames the kernel marks TP_STATUS_CSUMNOTREADY (sent by a local stack with checksum offload:
 * the kernel on the other end of a veth) or TP_STATUS_CSUM_VALID get BufferFlag.L4_CKSUM_OK: the
 * L4 checksum field of a CHECKSUM_PARTIAL frame holds only the pseudo-header sum, so checking
 * it would wrongly drop every UDP datagram the kernel sends over a veth. An 802.1Q tag the
 * kernel stripped is put back. Frames the ring truncated are dropped and counted (rxErrors).
 *
 * Transmit: by default sendmmsg(2) batches whose iovecs point into the pool buffers (chained
 * segments gathered, no copy in user space), and for a segment sent from an MR in place
 * (BufferFlag.EXT_DATA, graph/ext-memory.ts) into the MR: its payload is never copied into the
 * pool (txExternal; the kernel's copy into the socket buffer is the only one). `txMode: 'ring'`
 * uses a TPACKET_V3 TX ring on the same socket instead (one copy into the ring, one send()
 * kick; external segments are copied into the pool before it, and one that reaches it anyway is
 * a tx error). Never both on one socket. With
 * PACKET_QDISC_BYPASS (the default, as VPP) transmitted frames skip the qdisc and the
 * interface's taps, so `tcpdump -i <hostIf>` does not show them: capture on the peer. A
 * frame the kernel refuses (longer than the MTU, shorter than an Ethernet header) is taken and
 * counted in txErrors; what the socket cannot take now (buffer full, interface down) is refused
 * and stays with the caller (<if>-tx drops it as "no free tx slots").
 *
 * Link: an administratively down interface is set up at open, as VPP does (`bringUp: false`
 * leaves it down); carrier comes and goes with the kernel interface and `linkUp()` reports it
 * (a veth is up only while its peer is). The MAC is the kernel interface's unless `mac` is
 * given; a different MAC on a real NIC needs `promisc: true` to receive frames sent to it.
 */
import { checkMtu, MTU_MIN } from '../graph/link.ts';
import type { BufferPool } from '../graph/buffer-pool.ts';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { FRAME_SIZE } from '../graph/node.ts';
import {
  loadCore,
  type AfPacketIfInfo,
  type AfPacketSocket,
  type AfPacketStats,
  type CoreAddon,
} from '../native/addons.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { poolArrays, zeroCounters, type DriverHardware } from './driver.ts';
import { extTableOf } from './ext-table.ts';
import { macOption } from './mac.ts';
import { type BpfInsn, flatten } from './steer-bpf.ts';

export interface AfPacketOptions {
  /** The kernel interface, e.g. "eth1" or a veth end. */
  hostIf: string;
  /** Our interface name; default `host-<hostIf>` as in VPP. */
  name?: string;
  /** "aa:bb:cc:dd:ee:ff" or 6 bytes; default the kernel interface's MAC. */
  mac?: string | Uint8Array;
  /** Receive frames for every MAC (PACKET_MR_PROMISC while open). Default false. */
  promisc?: boolean;
  /** Rx ring size in nominal 2 KiB frames (ring bytes = rxFrames * 2048). Default 4096 (8 MiB). */
  rxFrames?: number;
  /** Rx ring block size: a power of 2, >= 4096 and large enough for one MTU frame. Default 65536. */
  blockSize?: number;
  /** A block not yet full is handed to us after this many ms (tp_retire_blk_tov). Default 1. */
  blockTimeoutMs?: number;
  /**
   * 'v2' (default with txMode 'sendmmsg'): TPACKET_V2 slots, one per frame, each handed over as
   * soon as it is written (no floor; fixed-size slots; DPDK's af_packet PMD uses them too). 'v3'
   * (default with txMode 'ring', which needs it): TPACKET_V3 blocks, retired when full or after
   * blockTimeoutMs, so a lone frame waits that long: the latency floor of sparse traffic, paid at
   * every hop of a ping-pong (an MPI or UCX ping-pong over two veth ends: ~1 ms per round trip).
   */
  rxRing?: 'v3' | 'v2';
  /**
   * UDP segmentation offload (PACKET_VNET_HDR; default false): consecutive UDP datagrams of one
   * flow and one size leave as one message the kernel cuts back into them (on the NIC, or in
   * software before the wire; across a veth pair it crosses whole), and such messages received
   * are cut here (native/core/afpacket_gso.h). Needs rxRing 'v2' and txMode 'sendmmsg'; the rx
   * slots hold 64 KiB each (rxFrames of them, at most 512: 64 MiB). A peer on the same veth or
   * bridge that reads with af_packet must take GSO frames too (rdma-graph with gso, or a kernel
   * socket); one without it sees them truncated.
   */
  gso?: boolean;
  /**
   * Our MTU; at most the kernel interface's. Default: the kernel interface's (as VPP's
   * host-interface), up to what a ring block holds (blockSize - 148), and followed afterwards
   * (linkMtu) when the kernel's is lowered, or raised back up to what it was at open.
   */
  mtu?: number;
  /** 'sendmmsg' (default) or 'ring' (TPACKET_V3 TX ring). */
  txMode?: 'sendmmsg' | 'ring';
  /** TX ring frames (txMode 'ring'). Default 1024. */
  txFrames?: number;
  /** Set the kernel interface up when it is administratively down (VPP does). Default true. */
  bringUp?: boolean;
  /**
   * PACKET_QDISC_BYPASS (default true, as VPP). Frames sent with it skip the kernel's qdisc and
   * the interface's taps: `tcpdump -i <hostIf>` does not see what we transmit (capture on the
   * peer, e.g. the other end of a veth, instead), or set false to see them there.
   */
  qdiscBypass?: boolean;
  /**
   * Receive only part of the interface's frames (cpu.workers: one socket per worker, split by UDP
   * destination port, drivers/steer-bpf.ts): a classic BPF program the kernel runs per frame.
   */
  filter?: readonly BpfInsn[];
  /** Which of the interface's rx queues this socket is (a worker's share; show interface rx-placement). Default 0. */
  queue?: number;
}

/** DriverCounters plus what af_packet knows besides. */
export interface AfPacketDriverStats extends AfPacketStats {
  /** Bursts that found frames waiting but no free buffer in the pool. */
  rxNoBuffers: number;
}

const NOMINAL_FRAME = 2048;
/** gso: a slot for one whole 64 KiB message behind its TPACKET_V2 and virtio_net headers (native/core/afpacket.cc). */
const GSO_SLOT = 131072;
/** gso: at most this many slots (64 MiB of ring). */
const GSO_MAX_SLOTS = 512;
/**
 * What a ring block holds besides one frame's bytes: the block descriptor (48) and the frame's
 * MAC offset in its slot, TPACKET_ALIGN(TPACKET3_HDRLEN + 16) - 14 = 82 (the socket's
 * maxFrameLen is blockSize - 130).
 */
const BLOCK_OVERHEAD = 130;
const IFF_UP = 0x1;
const IFF_RUNNING = 0x40;

export class AfPacketDriver implements Driver {
  readonly kind = 'af_packet';
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues = 1;
  readonly txQueues = 1;

  readonly hostIf: string;
  /** The kernel interface when this driver was created. */
  readonly hostInfo: AfPacketIfInfo;
  readonly txMode: 'sendmmsg' | 'ring';

  private readonly promisc: boolean;
  private readonly blockSize: number;
  private readonly blocks: number;
  private readonly blockTimeoutMs: number;
  readonly rxRing: 'v3' | 'v2';
  /** UDP segmentation offload on this socket (AfPacketOptions.gso). */
  readonly gso: boolean;
  private readonly txFrames: number;
  private readonly bringUp: boolean;
  private readonly qdiscBypass: boolean;
  private readonly filter: Uint32Array | undefined;
  private readonly queue: number;

  private state: 'new' | 'open' | 'closed' = 'new';
  private sock: AfPacketSocket | null = null;
  private handle = -1;
  private readonly core: CoreAddon;
  private pool: BufferPool | null = null;
  private idx = new Uint32Array(0);
  private readonly result = new Uint32Array(4);
  private rxNoBuffers = 0;
  /** Counters as they were at close. */
  private final: AfPacketStats | null = null;
  private wake: (() => void) | null = null;

  constructor(opts: AfPacketOptions) {
    if (opts === null || typeof opts !== 'object')
      throw new TypeError('af_packet: options must be an object with hostIf');
    const hostIf = opts.hostIf;
    if (typeof hostIf !== 'string' || hostIf.length === 0 || hostIf.length > 15) {
      throw new RangeError(
        `af_packet: hostIf must be a kernel interface name of 1 to 15 characters, got ${JSON.stringify(hostIf)}`,
      );
    }
    this.hostIf = hostIf;
    this.name = opts.name ?? `host-${hostIf}`;
    const where = `af_packet interface ${this.name}`;

    // gso: one 128 KiB slot per block (a whole 64 KiB message behind its headers).
    const blockSize = opts.blockSize ?? (opts.gso === true ? GSO_SLOT : 65536);
    if (
      !Number.isInteger(blockSize) ||
      blockSize < 4096 ||
      blockSize > 1 << 26 ||
      (blockSize & (blockSize - 1)) !== 0
    ) {
      throw new RangeError(`${where}: blockSize must be a power of 2 in 4096..67108864, got ${blockSize}`);
    }
    const rxFrames = opts.rxFrames ?? 4096;
    if (!Number.isInteger(rxFrames) || rxFrames < 16 || rxFrames > 1 << 22) {
      throw new RangeError(`${where}: rxFrames must be an integer in 16..4194304, got ${rxFrames}`);
    }
    const tov = opts.blockTimeoutMs ?? 1;
    if (!Number.isInteger(tov) || tov < 1 || tov > 1000)
      throw new RangeError(`${where}: blockTimeoutMs must be an integer in 1..1000, got ${tov}`);
    const txMode = opts.txMode ?? 'sendmmsg';
    if (txMode !== 'sendmmsg' && txMode !== 'ring')
      throw new RangeError(`${where}: txMode must be 'sendmmsg' or 'ring', got ${JSON.stringify(txMode)}`);
    const gso = opts.gso ?? false;
    if (typeof gso !== 'boolean') throw new RangeError(`${where}: gso must be a boolean, got ${JSON.stringify(gso)}`);
    if (gso && (txMode === 'ring' || opts.rxRing === 'v3'))
      throw new RangeError(
        `${where}: gso needs txMode 'sendmmsg' and rxRing 'v2' (virtio_net_hdr on TPACKET_V2 slots)`,
      );
    const rxRing = opts.rxRing ?? (txMode === 'ring' ? 'v3' : 'v2');
    if (rxRing !== 'v3' && rxRing !== 'v2')
      throw new RangeError(`${where}: rxRing must be 'v3' or 'v2', got ${JSON.stringify(rxRing)}`);
    if (rxRing === 'v2' && txMode === 'ring')
      throw new RangeError(`${where}: rxRing 'v2' needs txMode 'sendmmsg' (the TX ring is TPACKET_V3's)`);
    const txFrames = opts.txFrames ?? 1024;
    if (!Number.isInteger(txFrames) || txFrames < 8 || txFrames > 1 << 20)
      throw new RangeError(`${where}: txFrames must be an integer in 8..1048576, got ${txFrames}`);

    // Throws ENODEV naming the interface when it does not exist (no privilege needed).
    this.core = loadCore();
    const info = this.core.afPacketIfInfo(hostIf);
    if (!info.ethernet)
      throw Object.assign(new Error(`${where}: kernel interface "${hostIf}" is not Ethernet (ARPHRD ${info.hwType})`), {
        code: 'EPROTONOSUPPORT',
      });
    this.hostInfo = info;

    const mtu = opts.mtu ?? Math.min(info.mtu, blockSize - 18 - BLOCK_OVERHEAD);
    checkMtu(mtu, where);
    if (mtu > info.mtu) {
      throw new RangeError(
        `${where}: mtu ${mtu} is larger than kernel interface ${hostIf}'s MTU ${info.mtu} (raise it with: ip link set dev ${hostIf} mtu ${mtu})`,
      );
    }
    if (blockSize < mtu + 18 + BLOCK_OVERHEAD) {
      throw new RangeError(
        `${where}: blockSize ${blockSize} cannot hold a ${mtu + 18}-byte frame (MTU ${mtu}); use at least ${nextPow2(mtu + 18 + BLOCK_OVERHEAD)}`,
      );
    }
    this.mtu = mtu;
    this.mac = opts.mac === undefined ? Uint8Array.from(info.mac) : macOption(where, opts.mac, this.name);
    this.promisc = opts.promisc ?? false;
    this.blockSize = blockSize;
    if (gso && blockSize < GSO_SLOT)
      throw new RangeError(
        `${where}: gso needs blockSize of at least ${GSO_SLOT} (a 64 KiB message per slot), got ${blockSize}`,
      );
    this.gso = gso;
    this.blocks = gso
      ? Math.max(2, Math.ceil(Math.min(rxFrames, GSO_MAX_SLOTS) / (blockSize / GSO_SLOT)))
      : Math.max(2, Math.ceil((rxFrames * NOMINAL_FRAME) / blockSize));
    this.blockTimeoutMs = tov;
    this.rxRing = rxRing;
    this.txMode = txMode;
    this.txFrames = txFrames;
    this.bringUp = opts.bringUp ?? true;
    this.qdiscBypass = opts.qdiscBypass ?? true;
    this.filter = opts.filter === undefined ? undefined : flatten(opts.filter);
    this.queue = opts.queue ?? 0;
  }

  /** Open the socket (needs CAP_NET_RAW), map the rings, bind the pool. */
  open(pool: BufferPool): void {
    if (this.state !== 'new')
      throw new Error(`af_packet interface ${this.name}: already ${this.state === 'open' ? 'open' : 'closed'}`);
    const sock = new this.core.AfPacketSocket(this.hostIf, {
      promisc: this.promisc,
      bringUp: this.bringUp,
      qdiscBypass: this.qdiscBypass,
      blockSize: this.blockSize,
      blocks: this.blocks,
      blockTimeoutMs: this.blockTimeoutMs,
      rxRing: this.rxRing,
      gso: this.gso,
      txRing: this.txMode === 'ring',
      txFrames: this.txFrames,
      txFrameSize: Math.max(2048, (this.mtu + 18 + 48 + 15) & ~15),
      ...(this.filter === undefined ? {} : { filter: this.filter }),
    });
    try {
      // Room for a whole burst plus one frame as large as a ring block, in the smallest buffers.
      this.idx = new Uint32Array(FRAME_SIZE + Math.ceil((this.blockSize + 4) / pool.dataSize) + 1);
      sock.bindPool({
        ...poolArrays(pool),
        tsSec: pool.tsSec,
        tsNsec: pool.tsNsec,
        idx: this.idx,
        result: this.result,
        flagNext: BufferFlag.NEXT_PRESENT,
        flagTimestamp: BufferFlag.TIMESTAMP_VALID,
        flagL4Ok: BufferFlag.L4_CKSUM_OK,
        // gso: the UDP checksum is left to the kernel (txChecksumOffload).
        flagTxUdp: this.gso ? BufferFlag.TX_UDP_CKSUM : 0,
        // sendmmsg gathers a segment's payload from its MR in place (txExternal); the kernel
        // copies it into the socket buffer during the call, so nothing is held after it. The TX
        // ring has no table: an external segment there is a tx error, never pool bytes.
        flagExt: BufferFlag.EXT_DATA,
        ...(this.txMode === 'sendmmsg' ? { ext: extTableOf(this.core, pool), extId: pool.extId } : {}),
      });
    } catch (e) {
      sock.close();
      throw e;
    }
    this.sock = sock;
    this.handle = sock.handle;
    this.pool = pool;
    this.state = 'open';
    if (this.txMode === 'sendmmsg') pool.ext.wanted = true;
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    if (queue !== 0) throw new RangeError(`af_packet interface ${this.name}: no rx queue ${queue}`);
    const h = this.handle;
    if (h < 0) return 0;
    if (max > out.length) max = out.length;
    if (max > FRAME_SIZE) max = FRAME_SIZE;
    const core = this.core;
    const need = core.afPacketRxNeed(h, max);
    if (need === 0) return 0;
    const pool = this.pool as BufferPool;
    const got = pool.alloc(this.idx, 0, need);
    if (got === 0) {
      this.rxNoBuffers++;
      return 0;
    }
    const n = core.afPacketRx(h, out, max, got);
    const used = this.result[0];
    if (used < got) pool.free(this.idx, used, got - used);
    return n;
  }

  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    if (queue !== 0) throw new RangeError(`af_packet interface ${this.name}: no tx queue ${queue}`);
    const h = this.handle;
    if (h < 0) {
      if (this.final) this.final.txRefused += n;
      return 0;
    }
    const taken = this.core.afPacketTx(h, bufs, off, n);
    if (taken > 0) (this.pool as BufferPool).free(bufs, off, taken);
    return taken;
  }

  /** With sendmmsg, payloads sent from an MR in place are gathered from it (no copy into the pool). */
  txExternal(): boolean {
    return this.sock !== null && this.txMode === 'sendmmsg';
  }

  /**
   * The kernel interface's MTU now, at most the one this socket was opened for (its rings are
   * sized for that): a QP's segments follow the link as the kernel's own sockets do. null while
   * not open or when the interface is gone.
   */
  linkMtu(): number | null {
    if (this.sock === null) return null;
    const k = this.sock.linkMtu();
    return k < MTU_MIN ? null : Math.min(k, this.mtu);
  }

  /**
   * The multicast MACs the data plane receives on this interface (IPv4 groups' MACs): the
   * socket's memberships, which the kernel puts in the device's filter (a NIC that is not
   * promiscuous drops a group's frames it was not told of), as `ip maddr show` lists them.
   */
  multicastFilter(macs: Uint8Array): void {
    if (this.sock !== null) this.sock.multicast(macs);
  }

  /** Administratively up with carrier, as the kernel sees the interface now. */
  linkUp(): boolean {
    if (this.sock === null) return false;
    const f = this.sock.linkFlags();
    return f >= 0 && (f & IFF_UP) !== 0 && (f & IFF_RUNNING) !== 0;
  }

  deviceQueue(_queue: number): number {
    return this.queue;
  }

  /** The socket: readable when a ring block is waiting (or an error is pending). */
  rxWaitFd(_queue: number): number {
    return this.sock === null ? -1 : this.sock.fd;
  }

  setWakeup(wake: () => void): void {
    this.wake = wake;
  }

  /**
   * gso: the UDP checksum is left to the kernel (a virtio_net_hdr with NEEDS_CSUM per message:
   * it completes it, or the NIC does); udp4-encap then writes only the pseudo-header sum.
   */
  txChecksumOffload(): { ip4: boolean; udp: boolean } {
    return { ip4: false, udp: this.gso };
  }

  /** Everything the driver and the kernel count (PACKET_STATISTICS accumulated). */
  hardware(): DriverHardware {
    return {
      info: {
        'host-interface': `${this.hostIf} (ifindex ${this.hostInfo.ifindex})`,
        state: this.state,
        promiscuous: this.promisc,
        'rx ring':
          this.rxRing === 'v2'
            ? `TPACKET_V2, ${this.blocks} blocks of ${this.blockSize} bytes, a slot per frame (no block timeout)${this.gso ? ', GSO messages cut into datagrams' : ''}`
            : `TPACKET_V3, ${this.blocks} blocks of ${this.blockSize} bytes, block timeout ${this.blockTimeoutMs} ms`,
        tx:
          this.txMode === 'ring'
            ? `TX ring, ${this.txFrames} frames`
            : `sendmmsg${this.gso ? ', UDP datagrams of one flow as GSO messages' : ''}`,
        'qdisc-bypass': this.qdiscBypass,
      },
      counters: { ...this.stats() },
    };
  }

  stats(): AfPacketDriverStats {
    const s = this.sock !== null ? this.sock.stats() : (this.final ?? emptyStats());
    return { ...s, rxNoBuffers: this.rxNoBuffers };
  }

  counters(): DriverCounters {
    if (this.sock === null && this.final === null) return zeroCounters();
    const s = this.stats();
    return {
      rxPackets: s.rxPackets,
      rxBytes: s.rxBytes,
      txPackets: s.txPackets,
      txBytes: s.txBytes,
      rxDrops: s.kernelDrops,
      txDrops: s.txRefused,
      rxErrors: s.rxTruncated + s.rxBad + s.rxGsoDropped,
      txErrors: s.txErrors,
    };
  }

  /** The native socket while open (benchmarks and diagnostics), else null. */
  get socket(): AfPacketSocket | null {
    return this.sock;
  }

  /** Consume up to max waiting frames without copying them (benchmarks: the ring walk alone). */
  rxSkip(max: number, touch = false): number {
    return this.handle < 0 ? 0 : this.core.afPacketRxSkip(this.handle, max, touch);
  }

  /** The kernel interface was administratively down and open() set it up. */
  get broughtUp(): boolean {
    return this.sock?.broughtUp ?? false;
  }

  /** Unmap the rings and close the socket. The driver holds no pool buffers. Idempotent. */
  close(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    const sock = this.sock;
    this.sock = null;
    this.handle = -1;
    this.wake = null;
    if (sock !== null) {
      this.final = sock.stats();
      sock.close();
    }
    this.pool = null;
  }
}

function nextPow2(x: number): number {
  let p = 4096;
  while (p < x) p *= 2;
  return p;
}

function emptyStats(): AfPacketStats {
  return {
    rxPackets: 0,
    rxBytes: 0,
    rxTruncated: 0,
    rxBad: 0,
    rxVlan: 0,
    rxCsumPartial: 0,
    rxSkipped: 0,
    txPackets: 0,
    txBytes: 0,
    txErrors: 0,
    txInvalid: 0,
    txRefused: 0,
    txGsoMessages: 0,
    txGsoDatagrams: 0,
    rxGsoFrames: 0,
    rxGsoDatagrams: 0,
    rxGsoDropped: 0,
    kernelPackets: 0,
    kernelDrops: 0,
    kernelFreezeQueue: 0,
    socketErrors: 0,
    lastSocketErrno: 0,
    lastTxErrno: 0,
  };
}
