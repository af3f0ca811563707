/**
 * The dpdk driver: a DPDK ethdev port (a PCI NIC bound to vfio-pci, or a vdev such as net_ring,
 * net_null, net_memif, net_af_packet) through native/dpdk/dpdk.cc.
 *
 * One EAL and one mbuf mempool per process, shared by every dpdk interface. The mempool is the
 * data plane's buffer pool (providesMemory): buffer i is the i-th mbuf's data room, so rx and
 * tx hand buffer indices across, never bytes. Sent buffers go back to the mempool when the PMD
 * is done with them; ones it refuses stay the caller's.
 *
 * Poll mode: a port has no fd to sleep on, so when the graph is idle it comes back to the port
 * every IDLE_POLL_NS (rxNextDueNs); under load it polls every pass.
 */
import { availableParallelism } from 'node:os';
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import { nowNs } from '../graph/clock.ts';
import { loadAddon } from '../native/addons.ts';
import type { Driver, DriverCounters, DriverHardware, PortQueueOptions, ProvidedMemory } from './driver.ts';
import { macOption } from './mac.ts';

interface DpdkAddon {
  ealInit(args: string[]): { ports: number };
  createPool(
    count: number,
    dataRoom: number,
  ): { memory: ArrayBuffer; firstOffset: number; stride: number; headroom: number; dataSize: number; count: number };
  bindPool(
    offset: Uint32Array,
    length: Uint32Array,
    flags: Uint32Array,
    next: Uint32Array,
    bits: { nextPresent: number; ip4Ok: number; l4Ok: number; txIp4: number; txUdp: number },
  ): void;
  alloc(out: Uint32Array, off: number, n: number): number;
  free(src: Uint32Array, off: number, n: number): void;
  avail(): number;
  probe(devargs: string): number;
  portStart(
    port: number,
    o: { rxQueues: number; txQueues: number; rxDesc: number; txDesc: number; mtu: number; promisc: boolean },
  ): {
    mac: Uint8Array;
    driver: string;
    rxDesc: number;
    txDesc: number;
    txIp4Cksum: boolean;
    txUdpCksum: boolean;
    rxOffloads: string;
    txOffloads: string;
  };
  rx(port: number, queue: number, out: Uint32Array, max: number): number;
  tx(port: number, queue: number, bufs: Uint32Array, off: number, n: number): number;
  linkUp(port: number): boolean;
  stats(port: number): Record<string, number> & { xstats: Record<string, number> };
  portClose(port: number): void;
  /** The multicast MACs the port receives: its list, all multicast where it has none, or nothing (promiscuous). */
  portMulticast(port: number, macs: Uint8Array): 'list' | 'all' | 'promiscuous' | 'none';
  /** Benchmark baseline: rx straight into tx on one port, in C, for ms milliseconds. */
  forward(port: number, queue: number, ms: number): { packets: number; ns: number };
}

/** How often an idle graph comes back to poll a port. */
const IDLE_POLL_NS = 50_000;
const HINT = 'install libdpdk-dev';

/** Why DPDK cannot be used in this build, or null when it can. */
export function dpdkUnavailable(): string | null {
  try {
    loadAddon<DpdkAddon>('dpdk', HINT);
    return null;
  } catch {
    return 'DPDK is not available: install libdpdk-dev and rebuild (npm run build)';
  }
}

/** The process's EAL and mempool, made by the first dpdk interface. */
let shared: { addon: DpdkAddon; args: string[]; provided: ProvidedMemory | null; bound: BufferPool | null } | null =
  null;

function hugepagesFree(): number {
  try {
    const m = /^HugePages_Free:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/**
 * The EAL arguments: `--in-memory` when hugepages are reserved, else `--no-huge -m MB
 * --no-shconf`; no telemetry; IOVA as VA; one lcore that may run on any CPU (so Node's thread
 * is not pinned); no PCI scan unless the device is a PCI address, and then only that device
 * (`-a`, unless the configured arguments allow or block devices themselves); then the configured ones.
 */
export function ealArgs(device: string, extra: string[], memBytes: number): string[] {
  const mem =
    hugepagesFree() > 0
      ? ['--in-memory']
      : [
          '--no-huge',
          '--no-shconf',
          ...(extra.includes('-m') ? [] : ['-m', String(Math.max(512, Math.ceil(memBytes / 2 ** 20) + 128))]),
        ];
  const pci = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/i.test(device);
  return [
    ...mem,
    '--no-telemetry',
    '--iova-mode=va',
    `--lcores=0@(0-${availableParallelism() - 1})`,
    '--log-level=warning',
    // A PCI device: only it is probed at start-up (not every NIC EAL can drive on the machine).
    ...(pci ? (extra.some((a) => /^(-a|-b|--allow|--block)(=|$)/.test(a)) ? [] : ['-a', device]) : ['--no-pci']),
    ...extra,
  ];
}

/**
 * The device string as DPDK gets it: a net_memif file socket (`socket-abstract=no`) given
 * relative is made absolute from the working directory, as our memif driver reads its own
 * (DPDK 22.11 refuses a relative one: "Invalid socket directory").
 */
export function deviceArgs(device: string): string {
  if (!/^net_memif/.test(device) || !/,socket-abstract=no(,|$)/.test(device)) return device;
  return device.replace(/,socket=([^,]+)/, (all, path: string) =>
    isAbsolute(path) ? all : `,socket=${resolve(path)}`,
  );
}

export interface DpdkOptions extends PortQueueOptions {
  /** How messages name the interface (default `interface NAME`). */
  where?: string;
  device: string;
  ealArgs: string[];
  promisc?: boolean;
}

export class DpdkDriver implements Driver {
  readonly kind = 'dpdk';
  readonly name: string;
  mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues: number;
  readonly txQueues: number;
  private readonly addon: DpdkAddon;
  private readonly port: number;
  private readonly opts: DpdkOptions;
  private readonly macSet: boolean;
  private state: 'new' | 'open' | 'closed' = 'new';
  /** How the port takes the multicast MACs (multicastFilter): null until it was told any. */
  private mcastMode: string | null = null;
  private pmd = '';
  private desc = { rx: 0, tx: 0 };
  private offloads = { ip4: false, udp: false, rx: '', tx: '' };
  private readonly counts = { rxPackets: 0, rxBytes: 0, txPackets: 0, txBytes: 0, txDrops: 0 };

  constructor(name: string, o: DpdkOptions) {
    const where = o.where ?? `interface ${name}`;
    this.name = name;
    this.opts = o;
    this.mtu = o.mtu;
    this.rxQueues = o.rxQueues;
    this.txQueues = o.txQueues;
    const why = dpdkUnavailable();
    if (why !== null) throw new Error(`${where}: ${why}`);
    this.addon = loadAddon<DpdkAddon>('dpdk', HINT);
    const args = ealArgs(o.device, o.ealArgs, 0);
    if (shared === null) {
      try {
        this.addon.ealInit(args);
      } catch (e) {
        throw new Error(`${where}: DPDK EAL: ${(e as Error).message}`);
      }
      shared = { addon: this.addon, args: o.ealArgs, provided: null, bound: null };
    } else if (JSON.stringify(shared.args) !== JSON.stringify(o.ealArgs)) {
      throw new Error(
        `${where}: dpdk.eal-args differ from another dpdk interface's (${JSON.stringify(shared.args)}); one process has one EAL`,
      );
    }
    try {
      this.port = this.addon.probe(deviceArgs(o.device));
    } catch (e) {
      throw new Error(`${where}: DPDK device "${o.device}": ${(e as Error).message}`);
    }
    this.macSet = o.mac !== undefined;
    this.mac = o.mac !== undefined ? macOption(`dpdk ${where}`, o.mac, name) : new Uint8Array(6);
  }

  providesMemory(want: { count: number; dataSize: number }): ProvidedMemory {
    const s = shared!;
    if (s.provided === null) {
      const p = this.addon.createPool(want.count, want.dataSize + 128);
      const addon = this.addon;
      s.provided = {
        memory: { ...p, buffer: p.memory, hugepages: hugepagesFree() > 0, fd: -1, owner: 'dpdk' },
        allocator: {
          alloc: (out, off, n) => addon.alloc(out, off, n),
          free: (src, off, n) => addon.free(src, off, n),
          available: () => addon.avail(),
        },
      };
    }
    return s.provided;
  }

  open(pool: BufferPool): void {
    if (this.state !== 'new') throw new Error(`dpdk interface ${this.name}: already ${this.state}`);
    const s = shared!;
    if (s.provided === null || pool.memory.buffer !== s.provided.memory.buffer) {
      throw new Error(`dpdk interface ${this.name}: the buffer pool must be DPDK's mempool (providesMemory)`);
    }
    if (s.bound !== pool) {
      this.addon.bindPool(pool.offset, pool.length, pool.flags, pool.next, {
        nextPresent: BufferFlag.NEXT_PRESENT,
        ip4Ok: BufferFlag.IP4_CKSUM_OK,
        l4Ok: BufferFlag.L4_CKSUM_OK,
        txIp4: BufferFlag.TX_IP4_CKSUM,
        txUdp: BufferFlag.TX_UDP_CKSUM,
      });
      s.bound = pool;
    }
    const r = this.addon.portStart(this.port, {
      rxQueues: this.rxQueues,
      txQueues: this.txQueues,
      rxDesc: this.opts.rxQueueSize,
      txDesc: this.opts.txQueueSize,
      mtu: this.mtu,
      promisc: this.opts.promisc === true,
    });
    if (!this.macSet) this.mac = new Uint8Array(r.mac);
    this.pmd = r.driver;
    this.desc = { rx: r.rxDesc, tx: r.txDesc };
    this.offloads = { ip4: r.txIp4Cksum, udp: r.txUdpCksum, rx: r.rxOffloads, tx: r.txOffloads };
    this.state = 'open';
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    if (this.state !== 'open') return 0;
    return this.addon.rx(this.port, queue, out, max);
  }

  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    if (this.state !== 'open') return 0;
    const sent = this.addon.tx(this.port, queue, bufs, off, n);
    this.counts.txDrops += n - sent;
    return sent;
  }

  linkUp(): boolean {
    return this.state === 'open' && this.addon.linkUp(this.port);
  }

  /**
   * The multicast MACs the data plane receives: the port's multicast list, or all multicast
   * where the PMD keeps no list (ethernet-input drops what no group wants); a PMD with neither
   * (net_af_packet) passes what its device passes (`promisc: true` takes every group). `show
   * hardware` says which.
   */
  multicastFilter(macs: Uint8Array): void {
    if (this.state !== 'open') return;
    const mode = this.addon.portMulticast(this.port, macs);
    this.mcastMode =
      macs.length === 0
        ? 'no group joined'
        : mode === 'list'
          ? "the port's multicast list"
          : mode === 'all'
            ? 'all multicast (the port keeps no list)'
            : mode === 'promiscuous'
              ? 'every frame (promiscuous)'
              : 'not filtered by the port (its PMD has no multicast list or all-multicast mode): what the device passes';
  }

  /** The checksums the port computes on transmit (known once open). */
  txChecksumOffload(): { ip4: boolean; udp: boolean } {
    return { ip4: this.offloads.ip4, udp: this.offloads.udp };
  }

  rxWaitFd(_queue: number): number {
    return -1;
  }

  rxNextDueNs(_queue: number): number {
    return this.state === 'open' ? nowNs() + IDLE_POLL_NS : -1;
  }

  setWakeup(_wake: () => void): void {
    // Poll mode: nothing wakes the graph; rxNextDueNs brings it back.
  }

  counters(): DriverCounters {
    if (this.state !== 'open')
      return { rxPackets: 0, rxBytes: 0, txPackets: 0, txBytes: 0, rxDrops: 0, txDrops: 0, rxErrors: 0, txErrors: 0 };
    const s = this.addon.stats(this.port);
    return {
      rxPackets: s.ipackets,
      rxBytes: s.ibytes,
      txPackets: s.opackets,
      txBytes: s.obytes,
      rxDrops: s.imissed + s.rxNombuf,
      txDrops: this.counts.txDrops,
      rxErrors: s.ierrors + s.rxBadChecksum,
      txErrors: s.oerrors,
    };
  }

  hardware(): DriverHardware {
    const s = this.state === 'open' ? this.addon.stats(this.port) : null;
    return {
      info: {
        pmd: this.pmd || null,
        device: this.opts.device,
        port: this.port,
        queues: `${this.rxQueues} rx (${this.desc.rx} descriptors), ${this.txQueues} tx (${this.desc.tx} descriptors)`,
        'eal args': (shared?.args ?? []).join(' ') || null,
        'rx offloads': this.offloads.rx || null,
        'tx offloads': this.offloads.tx || null,
        multicast: this.mcastMode,
      },
      counters: s === null ? {} : { ...s.xstats, rx_bad_checksum: s.rxBadChecksum },
    };
  }

  /**
   * The benchmark's baseline (bench/dpdk-bench.ts, case d): rx straight into tx on this port in C for
   * `ms` milliseconds, no graph. Not a data path: the graph must not poll the port meanwhile.
   */
  forwardInC(queue: number, ms: number): { packets: number; ns: number } {
    if (this.state !== 'open') throw new Error(`dpdk interface ${this.name}: not open`);
    return this.addon.forward(this.port, queue, ms);
  }

  close(): void {
    if (this.state === 'open') this.addon.portClose(this.port);
    this.state = 'closed';
  }
}
