/**
 * The start-up configuration after loading and validation (config/load.ts): every default
 * filled in, keys in camelCase. The YAML spelling of each key is given in its comment; the
 * schema in config/schema.ts is the one source of both.
 */
import type { CongestionName } from '../nodes/rdma/congestion.ts';
import type { FaultConfig } from '../drivers/fault.ts';

export type DriverKind = 'memif' | 'af_packet' | 'pcap' | 'pipe' | 'dpdk' | 'ibverbs' | 'mlx5dv';
export const DRIVER_KINDS: readonly DriverKind[] = ['memif', 'af_packet', 'pcap', 'pipe', 'dpdk', 'ibverbs', 'mlx5dv'];
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

/** `memif: {socket, role, id, secret, buffer-size, udp-checksum}`. */
export interface MemifConfig {
  socket: string;
  role: 'server' | 'client';
  id: number;
  secret: string | null;
  bufferSize: number;
  /** null: off while the peer is another rdma-graph data plane, else on (MemifDriver.txChecksumOffload). */
  udpChecksum: boolean | null;
}

/** `af_packet: {host-interface, promisc, tx-mode, block-size, qdisc-bypass}`. */
export interface AfPacketConfig {
  hostInterface: string;
  promisc: boolean;
  txMode: 'sendmmsg' | 'ring';
  blockSize: number;
  qdiscBypass: boolean;
  /** 'auto': the driver's default (v2, or v3 with tx-mode ring). */
  rxRing: 'auto' | 'v3' | 'v2';
  /** UDP segmentation offload (drivers/af-packet.ts AfPacketOptions.gso). */
  gso: boolean;
  blockTimeoutMs: number;
}

/** `pcap: {rx-file, tx-file, rate, loop}` (at least one of the files). */
export interface PcapConfig {
  rxFile: string | null;
  txFile: string | null;
  rate: number;
  loop: number;
}

/** `pipe: {peer}`: the other end, an interface of this data plane or of another in this process. */
export interface PipeConfig {
  peer: string;
}

/** `dpdk: {device, eal-args}`. */
export interface DpdkConfig {
  device: string;
  ealArgs: string[];
}

/** `ibverbs: {device | host-interface, port, promisc}`; `mlx5dv:` also striding, cqe-compression. */
export interface VerbsDeviceConfig {
  device: string | null;
  hostInterface: string | null;
  port: number;
  promisc: boolean;
  striding?: boolean;
  cqeCompression?: boolean;
}

export interface InterfaceConfig {
  name: string;
  driver: DriverKind;
  /** The options under the driver's own key; exactly the one matching `driver` is set. */
  memif?: MemifConfig;
  afPacket?: AfPacketConfig;
  pcap?: PcapConfig;
  pipe?: PipeConfig;
  dpdk?: DpdkConfig;
  ibverbs?: VerbsDeviceConfig;
  mlx5dv?: VerbsDeviceConfig;
  /** "02:fe:..." or null (the driver's default). */
  mac: string | null;
  /** "10.10.0.1/24" or null (no IPv4 on this interface). */
  address: string | null;
  /** Default gateway through this interface, or null. */
  gateway: string | null;
  /** null: 1500, or the link's own (a memif link to another rdma-graph data plane: Driver.linkMtu). */
  mtu: number | null;
  rxQueues: number;
  /** The worker thread that runs it (cpu.workers > 0), or null: round robin in file order. */
  worker: number | null;
  /** The worker polling each rx queue (memif), or null: round robin from `worker`. */
  rxPlacement: number[] | null;
  /** interfaces[].rx-mode; null: cpu.poll's. */
  rxMode: 'adaptive' | 'polling' | 'interrupt' | null;
  /** interfaces[].congestion; null: rdma.congestion's. */
  congestion: CongestionName | null;
  rxQueueSize: number;
  txQueueSize: number;
  /** `fault: {direction: rx|tx|both (default rx), seed, loss, reorder, reorder-depth, reorder-delay-us, duplicate, corrupt, ce}`. */
  fault: { direction: 'rx' | 'tx' | 'both'; config: FaultConfig } | null;
  /** The YAML line of this interface entry (for start-up errors that name it). */
  line: number;
}

export interface NeighborConfig {
  interface: string;
  address: string;
  mac: string;
}

export interface Config {
  /** The file it came from (or '<string>'). */
  source: string;
  /** `api: {listen: "host:port", token, users, group}`. */
  api: { host: string; port: number; token: string | null; users: string[]; group: string | null };
  /** `cpu: {workers, main-core, corelist-workers, poll, idle-poll-us, idle-yield}`. */
  cpu: {
    workers: number;
    mainCore: number | null;
    corelistWorkers: string | null;
    poll: 'adaptive' | 'polling' | 'interrupt';
    idlePollUs: number;
    idleYield: boolean;
  };
  /** `buffers: {count, data-size}`. */
  buffers: { count: number; dataSize: number };
  /** `log: {level}`. */
  log: { level: LogLevel };
  interfaces: InterfaceConfig[];
  neighbors: NeighborConfig[];
  /** `rdma: {port-range, max-qps, max-mrs, cm-retry-ms, cm-timeout-ms, cm-backlog, cm-half-open-ms, trp: {window, rto-min-ms, rto-max-ms, rto-init-ms, max-retries}}`. */
  rdma: {
    portRange: [number, number];
    /** `rdma.multicast-port`: where datagrams to multicast groups go (nodes/rdma/multicast.ts). */
    multicastPort: number;
    maxQps: number;
    maxMrs: number;
    cmRetryMs: number;
    cmTimeoutMs: number;
    cmBacklog: number;
    cmHalfOpenMs: number;
    /** `rdma.congestion`: auto (none on memif/pipe, reno elsewhere) | none | reno | cubic | dctcp. */
    congestion: 'auto' | CongestionName;
    /** Budgets (nodes/rdma/budget.ts): `max-pds`, `max-cqs`, `max-srqs`, `max-mr-bytes`, `max-cq-entries`, `max-wr-slots`. */
    maxPds: number;
    maxCqs: number;
    maxSrqs: number;
    maxMrBytes: number;
    maxCqEntries: number;
    maxWrSlots: number;
    trp: {
      window: number;
      rtoMinMs: number;
      rtoMaxMs: number;
      rtoInitMs: number | null;
      maxRetries: number;
      ackDelayUs: number;
    };
  };
  /** `capture: {dir, max-bytes}`: where the API's captures go, and how large one file may grow. */
  capture: { dir: string; maxBytes: number };
  /**
   * `verbs: {socket, max-connections, max-connections-per-uid, max-connections-per-pid,
   * max-fds-per-connection, warm-up, wire-warm-up}`: where unmodified libibverbs programs (`rdma-graph exec`) reach the
   * daemon, and what one of them may hold.
   */
  verbs: {
    /** null: derived from the API's port (verbsSocketPath in config/load.ts). */
    socket: string | null;
    maxConnections: number;
    maxConnectionsPerUid: number;
    maxConnectionsPerPid: number;
    maxFdsPerConnection: number;
    /** Rounds of warm-up traffic at start (0: none; dataplane/warm-up.ts). */
    warmUp: number;
    /** Round trips between two throwaway data planes over memif at start (0: none; dataplane/wire-warm-up.ts). */
    wireWarmUp: number;
  };
  /** `trace: {max-packets}`. */
  trace: { maxPackets: number };
}
