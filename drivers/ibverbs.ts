/**
 * The ibverbs and mlx5dv drivers: an Ethernet port of an RDMA NIC (ConnectX-4 or later on the
 * mlx5 kernel driver) through RAW_PACKET queues, the kernel keeping its interface (no vfio, no
 * hugepages), as VPP's rdma plugin in its `ibv` and `dv` modes. native/ibverbs/port.cc does the
 * queues; this wrapper binds them to the pool and keeps the buffer stash, as the memif driver.
 *
 * Zero copy: the pool memory is registered once as an MR; receive WQEs point at pool buffers,
 * send WQEs at the frames themselves, and sent buffers return to the pool when the NIC reports
 * them done. Default MAC: a random 02:fe:xx:xx:xx:xx as VPP's (steered to us by a flow rule,
 * so the kernel keeps its own address's traffic); set `mac:` to the netdev's own to take it.
 *
 * Poll mode (no fd to sleep on): an idle graph comes back every IDLE_POLL_NS (rxNextDueNs).
 */
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import { nowNs } from '../graph/clock.ts';
import {
  type Driver,
  type DriverCounters,
  type DriverHardware,
  type PortQueueOptions,
  poolArrays,
  zeroCounters,
} from './driver.ts';
import { macOption } from './mac.ts';
import {
  type VerbsPort,
  type VerbsPortInfo,
  type VerbsPortStats,
  verbsAddon,
  verbsUnavailable,
} from './ibverbs-addon.ts';
import { type ResolvedDevice, resolveVerbsDevice } from './ibverbs-devices.ts';

const IDLE_POLL_NS = 50_000;
const FRAME = 256;
const ST_STASH = 0,
  ST_DONE = 1;

/** `ibverbs:` / `mlx5dv:` of the configuration (the last two keys are mlx5dv's). */
export interface VerbsSpec {
  device: string | null;
  hostInterface: string | null;
  port: number;
  promisc: boolean;
  striding?: boolean;
  cqeCompression?: boolean;
}

export interface VerbsOptions extends VerbsSpec, PortQueueOptions {
  where?: string;
  mode: 'ibverbs' | 'mlx5dv';
}

export class VerbsDriver implements Driver {
  readonly kind: 'ibverbs' | 'mlx5dv';
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues: number;
  readonly txQueues: number;
  readonly resolved: ResolvedDevice;
  private readonly opts: VerbsOptions;
  private readonly where: string;
  private port: VerbsPort | null = null;
  private pool: BufferPool | null = null;
  private portInfo: VerbsPortInfo | null = null;
  private final: VerbsPortStats | null = null;
  private stash = new Uint32Array(0);
  private done = new Uint32Array(0);
  private readonly st = new Uint32Array(2);
  private low = 0;
  private txDrops = 0;

  constructor(name: string, o: VerbsOptions) {
    this.where = o.where ?? `interface ${name}`;
    const why = verbsUnavailable();
    if (why !== null) throw new Error(`${this.where}: ${why}`);
    this.name = name;
    this.kind = o.mode;
    this.opts = o;
    this.mtu = o.mtu;
    this.rxQueues = o.rxQueues;
    this.txQueues = o.txQueues;
    for (const [k, v] of [
      ['rx-queue-size', o.rxQueueSize],
      ['tx-queue-size', o.txQueueSize],
    ] as const)
      if (v < 64 || v > 32768 || (v & (v - 1)) !== 0)
        throw new Error(`${this.where}: ${k} ${v}: the ${o.mode} driver needs a power of two in 64..32768`);
    this.resolved = resolveVerbsDevice(verbsAddon(), this.where, o.mode, o);
    this.mac = macOption(`${o.mode} ${this.where}`, o.mac, name);
  }

  open(pool: BufferPool): void {
    if (this.port !== null || this.final !== null) throw new Error(`${this.where}: already opened`);
    const striding = this.kind === 'mlx5dv' && this.opts.striding !== false;
    // One buffer per frame unless striding RQ chains strides (and striding is only known once
    // the device says it can): the MTU must fit a buffer with the Ethernet header and a VLAN tag.
    if (!striding && this.mtu + 18 > pool.dataSize)
      throw new Error(
        `${this.where}: mtu ${this.mtu} needs buffers.data-size >= ${this.mtu + 18} with driver ${this.kind} (one buffer per received frame), it is ${pool.dataSize}`,
      );
    this.pool = pool;
    this.stash = new Uint32Array(2 * FRAME + 64);
    this.low = FRAME + 8;
    this.done = new Uint32Array(this.opts.rxQueueSize * this.rxQueues + this.opts.txQueueSize * this.txQueues + FRAME);
    try {
      this.port = new (verbsAddon().Port)({
        device: this.resolved.device.name,
        port: this.opts.port,
        mode: this.kind === 'mlx5dv' ? 'dv' : 'ibv',
        rxQueues: this.rxQueues,
        txQueues: this.txQueues,
        rxQueueSize: this.opts.rxQueueSize,
        txQueueSize: this.opts.txQueueSize,
        promisc: this.opts.promisc,
        striding,
        cqeCompression: this.opts.cqeCompression !== false,
        mac: this.mac,
        pool: {
          ...poolArrays(pool),
          stash: this.stash,
          done: this.done,
          state: this.st,
          flagNext: BufferFlag.NEXT_PRESENT,
          flagIp4Ok: BufferFlag.IP4_CKSUM_OK,
          flagL4Ok: BufferFlag.L4_CKSUM_OK,
          flagTxIp4: BufferFlag.TX_IP4_CKSUM,
          flagTxUdp: BufferFlag.TX_UDP_CKSUM,
        },
      });
    } catch (e) {
      this.freeStash();
      throw new Error(`${this.where}: ${this.resolved.device.name} port ${this.opts.port}: ${(e as Error).message}`);
    }
    this.portInfo = this.port.info();
  }

  private topUp(): void {
    const have = this.st[ST_STASH];
    this.st[ST_STASH] = have + (this.pool as BufferPool).alloc(this.stash, have, this.stash.length - have);
  }

  private freeStash(): void {
    const n = this.st[ST_STASH];
    if (n > 0 && this.pool !== null) this.pool.free(this.stash, 0, n);
    this.st[ST_STASH] = 0;
  }

  private settle(): void {
    const st = this.st;
    if (st[ST_DONE] !== 0) (this.pool as BufferPool).free(this.done, 0, st[ST_DONE]);
    st[ST_DONE] = 0;
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    const p = this.port;
    if (p === null) return 0;
    if (queue >= this.rxQueues) throw new RangeError(`${this.where}: no rx queue ${queue}`);
    if (this.st[ST_STASH] < this.low) this.topUp();
    const n = p.rx(queue, out, max);
    this.settle();
    return n;
  }

  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    const p = this.port;
    if (p === null) return 0;
    const sent = p.tx(queue % this.txQueues, bufs, off, n);
    this.settle();
    this.txDrops += n - sent;
    return sent;
  }

  linkUp(): boolean {
    return this.port !== null && this.port.linkUp();
  }

  /**
   * Transmit checksums stay in software: whether the NIC wants the UDP field zero or seeded with
   * the pseudo-header sum (as DPDK's offload API asks) was never checked on a ConnectX here, and
   * a wrong guess corrupts every datagram. The native path can set the flags (IBV_SEND_IP_CSUM,
   * the eth segment's cs_flags) once a NIC confirms which. Receive verdicts are used.
   */
  txChecksumOffload(): { ip4: boolean; udp: boolean } {
    return { ip4: false, udp: false };
  }

  rxWaitFd(_queue: number): number {
    return -1;
  }

  rxNextDueNs(_queue: number): number {
    return this.port !== null ? nowNs() + IDLE_POLL_NS : -1;
  }

  setWakeup(_wake: () => void): void {
    // Poll mode: rxNextDueNs brings an idle graph back.
  }

  private stats(): VerbsPortStats | null {
    return this.port !== null ? this.port.stats() : this.final;
  }

  counters(): DriverCounters {
    const s = this.stats();
    if (s === null) return zeroCounters();
    return {
      rxPackets: s.rxPackets,
      rxBytes: s.rxBytes,
      txPackets: s.txPackets,
      txBytes: s.txBytes,
      rxDrops: 0,
      txDrops: this.txDrops,
      rxErrors: s.rxErrors,
      txErrors: s.txErrors,
    };
  }

  /** What `show hardware` prints for the port, in VPP's rdma terms. */
  hardware(): DriverHardware {
    const r = this.resolved;
    const i = this.portInfo;
    const s = this.stats();
    const flags = [
      this.port !== null ? 'admin-up' : null,
      this.port !== null && this.port.linkUp() ? 'link-up' : null,
      this.opts.promisc ? 'promiscuous' : null,
      this.kind === 'mlx5dv' ? 'mlx5dv' : null,
      i?.striding ? 'striding-rq' : null,
      i?.txChecksum ? 'rx-l4-cksum' : null,
      s?.error ? 'error' : null,
    ].filter((x) => x !== null);
    const port = r.device.ports.find((p) => p.port === this.opts.port);
    const info: DriverHardware['info'] = {
      device: `${r.device.name}${r.pci ? ` pci-addr ${r.pci}` : ''}${r.kernelDriver ? ` (${r.kernelDriver})` : ''}`,
      netdev: r.netdevs.join(' ') || null,
      firmware: i?.fwVer ?? r.device.fwVer ?? null,
      port: `${this.opts.port} ${port?.linkLayer ?? '?'} ${port?.state ?? '?'}, active mtu ${port?.activeMtu ?? '?'}`,
      mode: this.kind === 'mlx5dv' ? 'dv (mlx5 direct verbs)' : 'ibv (verbs calls)',
      queues: `${this.rxQueues} rx (${this.opts.rxQueueSize} slots), ${this.txQueues} tx (${this.opts.txQueueSize} slots)`,
      flags: flags.join(' '),
      rss: this.rxQueues > 1 ? 'ipv4-udp (Toeplitz)' : null,
    };
    if (this.kind === 'mlx5dv' && i !== null) {
      info.mlx5 = `version ${i.mlx5Version}`;
      info['device flags'] = i.deviceFlags || null;
      info['cqe compression'] = i.cqeCompression;
      if (i.striding) info['striding rq'] = `8 strides of ${i.strideBytes} bytes per WQE`;
    }
    if (s?.error) info.error = s.error;
    return {
      info,
      counters:
        s === null
          ? {}
          : {
              tx_refused: s.txRefused,
              tx_recoveries: s.txRecoveries,
              cqe_zipped_sessions: s.cqeZippedSessions,
              cqe_zipped: s.cqeZipped,
              striding_fillers: s.stridingFillers,
              async_events: s.asyncEvents,
            },
    };
  }

  close(): void {
    const p = this.port;
    if (p === null) return;
    this.final = p.stats();
    p.close();
    const pool = this.pool as BufferPool;
    for (let k = p.reclaim(); k > 0; k = p.reclaim()) pool.free(this.done, 0, k);
    this.freeStash();
    this.port = null;
  }
}
