/**
 * The data plane's contract with its callers, as plain JSON-able views: what the Dataplane
 * facade (dataplane.ts) takes and returns, its DataplaneError, and the limits and names the
 * REST schemas state. api/client.ts and rdmactl import these as types only, so they load
 * without the data plane.
 */
import { createRequire } from 'node:module';
import type { DeviceAttr, QpInfo } from '../nodes/rdma/stack.ts';
import type { RdmaEvent } from '../nodes/rdma/core.ts';
import type { Completion, WrOpcodeName } from '../nodes/rdma/verbs.ts';
import type { InterfaceCounters } from '../drivers/interfaces.ts';
import type { FaultCounters } from '../drivers/fault.ts';
import { PING_MAX_SIZE } from '../nodes/ip4/icmp4-ping.ts';

/** The package's version (package.json). */
export const VERSION: string = createRequire(import.meta.url)('../package.json').version;

/** What kind of wrong: the API answers 400, 404, 409, 409, 413, 503, 504, 409, 503. */
export type DataplaneErrorKind =
  'invalid' | 'not-found' | 'state' | 'busy' | 'too-large' | 'resource' | 'timeout' | 'rejected' | 'unavailable';

export class DataplaneError extends Error {
  readonly kind: DataplaneErrorKind;
  constructor(kind: DataplaneErrorKind, message: string) {
    super(message);
    this.kind = kind;
    this.name = 'DataplaneError';
  }
}

/**
 * Throws the DataplaneError a read or write of `length` bytes at `offset` of MR `mr` (of
 * `mrLength` bytes) meets, if any: `what` says which ("read mr 3").
 */
export function checkMrRange(mr: number, mrLength: number, offset: number, length: number, what: string): void {
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new DataplaneError('invalid', `${what}: offset must be a non-negative integer, got ${offset}`);
  if (!Number.isSafeInteger(length) || length < 0)
    throw new DataplaneError('invalid', `${what}: length must be a non-negative integer, got ${length}`);
  if (offset > mrLength)
    throw new DataplaneError('invalid', `${what}: offset ${offset} is past the end of mr ${mr} (length ${mrLength})`);
  if (offset + length > mrLength)
    throw new DataplaneError(
      'too-large',
      `${what}: ${length} bytes at offset ${offset} do not fit in mr ${mr} (length ${mrLength})`,
    );
}

export type WrId = string | number;
export type Logger = (level: 'error' | 'warn' | 'info' | 'debug', message: string) => void;

export interface InterfaceView {
  name: string;
  index: number;
  driver: string;
  mac: string;
  /** "10.10.0.1/24"; empty when the interface has no IPv4. */
  addresses: string[];
  gateway: string | null;
  mtu: number;
  state: 'up' | 'down';
  rxQueues: number;
  /** The IPv4 multicast groups it has joined and the UD QPs attached to each (nodes/net/ip4-groups.ts). */
  groups: { group: string; users: number }[];
  counters: InterfaceCounters;
  fault: { rx: FaultCounters | null; tx: FaultCounters | null };
  /** Files being written (absolute paths), and why a direction stopped taking packets (count or capture.max-bytes). */
  capture: { rx: string | null; tx: string | null; rxStopped: string | null; txStopped: string | null };
}

/** One thread of `show threads`, as VPP lists it. */
export interface ThreadView {
  /** VPP's thread number (0 main, 1.. workers), name and type ('' for the main thread, else workers). */
  index: number;
  name: string;
  type: string;
  /** The kernel's task id (LWP), scheduling policy (other, fifo, rr, batch, idle) and real-time priority. */
  lwp: number;
  policy: string;
  priority: number;
  /** The CPU it is pinned to (cpu.main-core, cpu.corelist-workers), that CPU's core and socket; null: not pinned. */
  lcore: number | null;
  core: number | null;
  socket: number | null;
  /** The CPU it last ran on. */
  cpu: number;
}

/** One thread of `show interface rx-placement`. */
export interface RxPlacementView {
  /** VPP's thread number (0 main, 1.. workers) and name. */
  index: number;
  name: string;
  nodes: { node: string; queues: { interface: string; queue: number; mode: 'adaptive' | 'polling' | 'interrupt' }[] }[];
}

export interface NeighborView {
  interface: string;
  address: string;
  mac: string | null;
  state: string;
  age: number;
  held: number;
}

export interface PdView {
  pd: number;
  users: number;
}
export interface MrView {
  mr: number;
  pd: number;
  stag: number;
  length: number;
  access: string[];
  /** "pid N (comm)" of the verbs program that registered it (its memory is that program's), or null. */
  owner: string | null;
}
export interface MwView {
  mw: number;
  pd: number;
  type: number;
  /** Its current STag (the last bind's). */
  rkey: number;
  /** What it is bound to now, or null (unbound, invalidated). */
  bound: { mr: number; address: number; length: number; access: string[] } | null;
  owner: string | null;
}
export interface CqView {
  cq: number;
  depth: number;
  pending: number;
  error: boolean;
  users: number;
}
export interface SrqView {
  srq: number;
  pd: number;
  maxWr: number;
  maxSge: number;
  posted: number;
  limit: number;
}
export interface Endpoint {
  ip: string;
  port: number;
}

/** queryQp's fields, with endpoints as {ip, port} and the handles of the objects it uses. */
export interface QpView extends Omit<QpInfo, 'local' | 'remote'> {
  local: Endpoint;
  remote: Endpoint | null;
  pd: number;
  sendCq: number;
  recvCq: number;
  /** The listener port that accepted it, or null. */
  listener: number | null;
  /** The program that created it through the verbs socket ("pid 1234 (ib_write_bw)"), or null. */
  owner: string | null;
  /** The multicast groups a UD QP is attached to (empty otherwise). */
  multicast: string[];
}

export interface SgeIn {
  mr: number;
  offset: number;
  length: number;
}

export interface QpCreate {
  pd: number;
  sendCq: number;
  recvCq: number;
  srq?: number | null;
  /** Default 256 (VERBS_DEFAULTS, as every optional size here). */
  maxSendWr?: number;
  maxRecvWr?: number;
  maxSge?: number;
  maxInline?: number;
  ird?: number;
  ord?: number;
  /** Bind the QP to this interface's address (default: any of ours). */
  interface?: string;
  /** A specific QPN (UDP port) in the port range. */
  port?: number;
  /** 'rc' (default) or 'ud' (unreliable datagram). */
  type?: 'rc' | 'ud';
  /** A UD QP's datagrams to a group reach this data plane's members too (default true; false: ibv_create_qp_ex's IBV_QP_CREATE_BLOCK_SELF_MCAST_LB). */
  multicastLoopback?: boolean;
}

export interface ConnectIn {
  remote: Endpoint;
  mode: 'manual' | 'cm';
  /** manual: the peer QP's initial PSN (its `psn`; required: sequence numbers are random). */
  remotePsn?: number;
  /** cm: bytes sent with the request (base64 in the API). */
  privateData?: Uint8Array;
  ird?: number;
  ord?: number;
  /** cm: give up after this long (default rdma.cm-timeout-ms). */
  timeoutMs?: number;
}

export interface ListenerCreate extends Omit<QpCreate, 'port'> {
  port: number;
  /** Bytes sent back with each ACCEPT. */
  privateData?: Uint8Array;
}

export interface ListenerView {
  port: number;
  pd: number;
  sendCq: number;
  recvCq: number;
  srq: number | null;
  maxSendWr: number;
  maxRecvWr: number;
  accepted: number[];
  requests: number;
}

export type AtomicValue = string | number | bigint;

export interface SendIn {
  wrId: WrId;
  opcode: WrOpcodeName;
  sge?: SgeIn[];
  remote?: { stag: number; offset: number };
  imm?: number;
  invalidateStag?: number;
  atomic?: { add?: AtomicValue; swap?: AtomicValue; compare?: AtomicValue };
  signaled?: boolean;
  solicited?: boolean;
  inline?: boolean;
  /** A UD QP's send: where to (the peer's address, QPN and Q_Key). */
  ud?: { ip: string; qpn: number; qkey: number };
}

export interface RecvIn {
  wrId: WrId;
  sge?: SgeIn[];
}

export interface PollResult {
  completions: Completion[];
  /** Set once the CQ overflowed: it is in error (completions that did not fit follow the ring's). */
  error: string | null;
}

export interface EventView extends RdmaEvent {
  seq: number;
  time: string;
}

export interface HealthView {
  status: 'ok';
  version: string;
  uptime: number;
  interfaces: number;
  qps: number;
}

/** `show hardware`: the generic lines of an interface and what its driver says of itself. */
export interface HardwareView {
  name: string;
  index: number;
  driver: string;
  mac: string;
  mtu: number;
  state: 'up' | 'down';
  rxQueues: number;
  txQueues: number;
  /** Driver facts in display order (memif role/socket/peer/rings, af_packet host interface/rings), as text. */
  info: Record<string, string | null>;
  counters: Record<string, number>;
}

/**
 * `show device` (ibv_devinfo -v), GET /v1/devices: an RDMA device, one per interface with an
 * IPv4 address, as a verbs program sees it (dataplane/rdma-devices.ts makes it; the verbs
 * socket's DEVICES reply carries the same figures to ibv_query_device and ibv_query_port).
 */
export interface DeviceView extends DeviceAttr {
  /** The hca_id: rg_<interface> (dataplane/rdma-devices.ts says the rule). */
  name: string;
  interface: string;
  /** libibverbs' transport: InfiniBand, as a RoCE device's (GID 0 a RoCE v2 GID, link layer Ethernet). */
  transport: 'InfiniBand';
  /** What actually travels. */
  wire: 'iWARP over UDP (urdma TRP)';
  fwVer: string;
  /** "00fe:00ff:fe00:0001": the EUI-64 of the MAC. */
  nodeGuid: string;
  sysImageGuid: string;
  vendorId: number;
  vendorPartId: number;
  hwVer: number;
  /** One port. */
  ports: {
    port: number;
    state: 'active' | 'down';
    /** Bytes: the largest path MTU a QP takes. */
    maxMtu: number;
    /** Bytes: the largest IB MTU the interface's segments hold. */
    activeMtu: number;
    /** The interface's IP MTU. */
    mtu: number;
    /** What one segment carries: the DDP/RDMAP header and payload. */
    segmentBytes: number;
    linkLayer: 'Ethernet';
    gid: string;
    gidType: 'RoCE v2';
    address: string;
  }[];
}

/** `show version`. */
export interface VersionView {
  version: string;
  node: string;
  platform: string;
  /** Drivers this build can open, and why each other one cannot. */
  drivers: { name: string; available: boolean; why: string | null }[];
  startedAt: string;
}

/** POST /v1/ping's limits (the schema states them too). */
export const PING_LIMITS = Object.freeze({
  maxCount: 100,
  minIntervalMs: 1,
  maxWaitMs: 60_000,
  maxSize: PING_MAX_SIZE,
});

/** `ping`: defaults count 1, intervalMs 1000, size 56 (data bytes after the 8-byte header), timeoutMs 1000. */
export interface PingRequest {
  address: string;
  count?: number;
  intervalMs?: number;
  size?: number;
  timeoutMs?: number;
  /** The first request's ICMP sequence number, 1..65535 (the next count up; one still waiting is skipped). */
  seq?: number;
}

export interface PingResult {
  address: string;
  size: number;
  sent: number;
  received: number;
  /** In sequence order; timeMs is the round trip measured by the graph. */
  replies: { seq: number; bytes: number; ttl: number; from: string; timeMs: number }[];
  /** Sequence numbers without a reply within timeoutMs. */
  lost: number[];
  /** Why sending stopped early (no free buffers, too many waiting), else null. */
  stopped: string | null;
}

/** The packet buffer pool: how many buffers, how many are free, bytes of data each. */
export interface BufferView {
  count: number;
  free: number;
  dataSize: number;
  hugepages: boolean;
}

export type { Config } from '../config/types.ts';
/** The names the API's schemas enumerate. */
export {
  ACCESS_NAMES,
  API_WR_OPCODE_NAMES,
  WC_OPCODE_NAMES,
  WC_STATUS_NAMES,
  WR_OPCODE_NAMES,
} from '../nodes/rdma/verbs.ts';
export { QP_STATE_NAMES } from '../nodes/rdma/qp.ts';
export { CONGESTION_NAMES } from '../nodes/rdma/congestion.ts';
export { VERBS_DEFAULTS, VERBS_LIMITS } from '../nodes/rdma/stack.ts';
export type { Completion } from '../nodes/rdma/verbs.ts';
