/**
 * Make the driver a start-up configuration entry asks for. A driver whose addon was not built
 * (dpdk, ibverbs, mlx5dv) fails here with an error that says what to install; nothing is opened.
 */
import { DEFAULT_MTU } from '../graph/link.ts';
import type { Driver, PortQueueOptions } from './driver.ts';
import { AfPacketDriver } from './af-packet.ts';
import { PcapDriver } from './pcap.ts';
import { pipeEnd } from './pipe.ts';
import { MemifDriver } from './memif.ts';
import { DpdkDriver, dpdkUnavailable } from './dpdk.ts';
import { VerbsDriver, type VerbsSpec } from './ibverbs.ts';
import { verbsUnavailable } from './ibverbs-addon.ts';
import type { BpfInsn } from './steer-bpf.ts';

/**
 * What a driver is made from: an interface entry of the start-up configuration (config/types.ts
 * InterfaceConfig has this shape; drivers/ does not import config/).
 */
export interface DriverSpec {
  name: string;
  driver: string;
  /** Where the entry is (for messages). */
  line: number;
  mac: string | null;
  /** null: 1500 (a memif link may take more by itself: Driver.linkMtu). */
  mtu: number | null;
  rxQueues: number;
  rxQueueSize: number;
  txQueueSize: number;
  memif?: {
    socket: string;
    role: 'server' | 'client';
    id: number;
    secret: string | null;
    bufferSize: number;
    udpChecksum: boolean | null;
  };
  afPacket?: {
    hostInterface: string;
    promisc: boolean;
    txMode: 'sendmmsg' | 'ring';
    blockSize: number;
    qdiscBypass: boolean;
    rxRing: 'auto' | 'v3' | 'v2';
    gso: boolean;
    blockTimeoutMs: number;
  };
  pcap?: { rxFile: string | null; txFile: string | null; rate: number; loop: number };
  pipe?: { peer: string };
  dpdk?: { device: string; ealArgs: string[] };
  ibverbs?: VerbsSpec;
  mlx5dv?: VerbsSpec;
}

/** openDriver's `lanes`. */
export interface DriverLanes {
  /** memif: other threads find the interface by this key and poll the queues not in pollQueues. */
  key?: string;
  pollQueues?: number[];
  /** af_packet: the socket filter picking this worker's frames (drivers/steer-bpf.ts). */
  filter?: BpfInsn[];
  /** af_packet: which of the interface's rx queues this socket is (show interface rx-placement). */
  queue?: number;
}

/** Drivers openDriver makes. */
const HAVE = new Set(['pipe', 'pcap', 'af_packet', 'memif']);

/**
 * Why `driver` cannot be opened here, in the words start-up would use, or null when it can
 * (`rdma-graph check` says what `start` would).
 */
export function driverUnavailable(driver: string): string | null {
  if (HAVE.has(driver)) return null;
  if (driver === 'dpdk') return dpdkUnavailable();
  if (driver === 'ibverbs' || driver === 'mlx5dv') return verbsUnavailable();
  return `unknown driver "${driver}"; use memif, af_packet, pcap, pipe, dpdk, ibverbs or mlx5dv`;
}

/**
 * Open the driver of interface `c`. `idlePollUs`: how long the engine polls with nothing to do
 * before it sleeps (cpu.idle-poll-us; Infinity when it never sleeps, 0 when it sleeps at once):
 * a memif interface keeps its peer's kicks off that long after traffic stops, the same setting.
 * `lanes` (cpu.workers, an interface received by several workers): a memif interface's key and
 * the queues this thread polls, or an af_packet socket's share of the frames.
 */
export function openDriver(c: DriverSpec, idlePollUs = 50, lanes?: DriverLanes): Driver {
  const where = `interface ${c.name} (line ${c.line})`;
  const mac = c.mac ?? undefined;
  const mtu = c.mtu ?? DEFAULT_MTU;
  // A NIC port's queues (dpdk, ibverbs, mlx5dv): as many tx queues as rx queues.
  const port: PortQueueOptions = {
    mac,
    mtu,
    rxQueues: c.rxQueues,
    txQueues: c.rxQueues,
    rxQueueSize: c.rxQueueSize,
    txQueueSize: c.txQueueSize,
  };
  const single = (kind: string) => {
    if (c.rxQueues !== 1) throw new Error(`${where}: the ${kind} driver has one rx queue, rx-queues is ${c.rxQueues}`);
  };
  switch (c.driver) {
    case 'pipe': {
      single('pipe');
      return pipeEnd(c.name, c.pipe!.peer, { mac, mtu, ringSize: c.rxQueueSize });
    }
    case 'pcap': {
      single('pcap');
      const p = c.pcap!;
      return new PcapDriver(c.name, {
        rxFile: p.rxFile ?? undefined,
        txFile: p.txFile ?? undefined,
        rate: p.rate,
        loop: p.loop,
        mac,
        mtu,
      });
    }
    case 'af_packet': {
      // With workers each rx queue is one worker's socket, its share picked by `filter`.
      if (lanes?.filter === undefined) single('af_packet');
      const a = c.afPacket!;
      return new AfPacketDriver({
        hostIf: a.hostInterface,
        name: c.name,
        mac,
        // None configured: the kernel interface's, which the stack then follows (linkMtu); not
        // with workers, whose handoff slots are sized by the configured MTUs.
        mtu: c.mtu ?? (lanes === undefined ? undefined : DEFAULT_MTU),
        promisc: a.promisc,
        txMode: a.txMode,
        // gso: a slot per 64 KiB message (block-size is raised to 128 KiB).
        blockSize: a.gso ? Math.max(a.blockSize, 131072) : a.blockSize,
        qdiscBypass: a.qdiscBypass,
        ...(a.rxRing === 'auto' ? {} : { rxRing: a.rxRing }),
        gso: a.gso,
        blockTimeoutMs: a.blockTimeoutMs,
        rxFrames: Math.max(c.rxQueueSize, 64),
        txFrames: c.txQueueSize,
        ...(lanes?.filter === undefined ? {} : { filter: lanes.filter }),
        ...(lanes?.queue === undefined ? {} : { queue: lanes.queue }),
      });
    }
    case 'memif': {
      const m = c.memif!;
      return new MemifDriver(c.name, {
        socket: m.socket,
        role: m.role,
        id: m.id,
        secret: m.secret ?? undefined,
        mac,
        mtu,
        rxQueues: c.rxQueues,
        txQueues: c.rxQueues,
        ringSize: c.rxQueueSize,
        bufferSize: m.bufferSize,
        idlePollUs,
        udpChecksum: m.udpChecksum,
        ...(lanes?.key === undefined ? {} : { laneKey: lanes.key, pollQueues: lanes.pollQueues }),
      });
    }
    // Their constructors say what to install when the addon was not built.
    case 'dpdk':
      return new DpdkDriver(c.name, { where, ...c.dpdk!, ...port });
    case 'ibverbs':
    case 'mlx5dv':
      return new VerbsDriver(c.name, {
        where,
        mode: c.driver,
        ...(c.driver === 'ibverbs' ? c.ibverbs : c.mlx5dv)!,
        ...port,
      });
    default:
      throw new Error(`${where}: ${driverUnavailable(String(c.driver))}`);
  }
}
