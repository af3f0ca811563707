/**
 * Every JSON schema of the REST API, declared once: the routes validate requests (and, with
 * checkResponses, responses) against them, and api/openapi.ts publishes the same objects (the
 * named ones in `components` become `$ref`s). Written in the subset OpenAPI 3.0 and Ajv share:
 * no `const`, no type arrays (`nullable: true` instead), no `format`; `x-expected` says in words
 * what a value must be, for the error message.
 */
import {
  ACCESS_NAMES,
  CONGESTION_NAMES,
  PING_LIMITS,
  QP_STATE_NAMES,
  VERBS_DEFAULTS,
  VERBS_LIMITS,
  WC_OPCODE_NAMES,
  WC_STATUS_NAMES,
  API_WR_OPCODE_NAMES,
} from '../dataplane/views.ts';
import { EXPECTED } from './errors.ts';

export type JsonSchema = { [key: string]: unknown };

export const U32_MAX = 0xffffffff;
export const SAFE_MAX = Number.MAX_SAFE_INTEGER;
/** Largest privateData (decoded) the connection manager carries. */
export const PRIVATE_DATA_MAX = VERBS_LIMITS.maxPrivateData;
/** Longest wait a poll or a CM connect may ask for. */
export const WAIT_MAX_MS = 60000;

function int(minimum: number, maximum: number, description?: string): JsonSchema {
  return { type: 'integer', minimum, maximum, ...(description ? { description } : {}) };
}

/** An object with exactly these properties; all required but the `optional` ones. */
function obj(properties: Record<string, JsonSchema>, optional: string[] = [], description?: string): JsonSchema {
  const required = Object.keys(properties).filter((k) => !optional.includes(k));
  return {
    type: 'object',
    additionalProperties: false,
    ...(required.length ? { required } : {}),
    properties,
    ...(description ? { description } : {}),
  };
}

const str = (description?: string): JsonSchema => ({ type: 'string', ...(description ? { description } : {}) });
const num = (description?: string): JsonSchema => ({ type: 'number', ...(description ? { description } : {}) });
const count = (description?: string): JsonSchema => ({
  type: 'integer',
  minimum: 0,
  ...(description ? { description } : {}),
});
const bool = (description?: string): JsonSchema => ({ type: 'boolean', ...(description ? { description } : {}) });
const list = (items: JsonSchema, description?: string): JsonSchema => ({
  type: 'array',
  items,
  ...(description ? { description } : {}),
});
const oneOf = (names: readonly string[], description?: string): JsonSchema => ({
  type: 'string',
  enum: [...names],
  ...(description ? { description } : {}),
});
const nullable = (s: JsonSchema): JsonSchema => ({ ...s, nullable: true });

/** An optional field's default, stated for clients (the data plane applies it). */
const dflt = (s: JsonSchema, value: unknown): JsonSchema => ({ ...s, default: value });

const handle = (what: string): JsonSchema => int(0, U32_MAX, `${what} handle`);
const port = (description: string): JsonSchema => int(1, 65535, description);
const u32 = (description: string): JsonSchema => int(0, U32_MAX, description);

// ------------------------------------------------------------------ shared pieces

export const ErrorResponse = obj({
  statusCode: int(400, 599),
  error: str('HTTP reason phrase'),
  message: str('what is wrong and where'),
});

export const WrId: JsonSchema = {
  description: 'work request id: comes back exactly as sent in its completion',
  [EXPECTED]: 'a string of at most 256 characters or a safe integer',
  oneOf: [{ type: 'string', maxLength: 256 }, int(-SAFE_MAX, SAFE_MAX)],
};

export const AtomicValue: JsonSchema = {
  description: 'an unsigned 64-bit value: a decimal string, or a safe integer',
  [EXPECTED]: 'a decimal string of an unsigned 64-bit integer or a non-negative safe integer',
  oneOf: [{ type: 'string', pattern: '^[0-9]{1,20}$' }, int(0, SAFE_MAX)],
};

export const Ipv4: JsonSchema = {
  type: 'string',
  pattern: '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$',
  [EXPECTED]: 'an IPv4 address in dotted decimal, like 10.10.0.2',
};

export const Base64: JsonSchema = {
  type: 'string',
  pattern: '^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$',
  description: `bytes in base64 (at most ${PRIVATE_DATA_MAX} of them)`,
  [EXPECTED]: 'base64 (standard alphabet, with = padding)',
};

export const Endpoint = obj({ ip: Ipv4, port: port('UDP port (a QPN or a listener port)') });
export const EndpointView = obj({ ip: str('IPv4 address'), port: int(0, 65535) });

export const Sge = obj({
  mr: handle('memory region'),
  offset: int(0, SAFE_MAX, 'byte offset from the start of the MR'),
  length: int(0, SAFE_MAX, 'bytes'),
});
const SgeList = { ...list(Sge, 'scatter/gather list'), maxItems: 64 };

// ------------------------------------------------------------------ status views

const counterObject = (names: string[]): JsonSchema => obj(Object.fromEntries(names.map((n) => [n, count()])));

export const InterfaceCounters = counterObject([
  'rxPackets',
  'rxBytes',
  'txPackets',
  'txBytes',
  'rxDrops',
  'txDrops',
  'rxErrors',
  'txErrors',
  'txHeld',
]);
export const FaultCounters = counterObject(['packets', 'dropped', 'reordered', 'duplicated', 'corrupted', 'marked']);

export const InterfaceView = obj({
  name: str(),
  index: count(),
  driver: str('driver kind: pipe, pcap, af_packet, memif, ...'),
  mac: str(),
  addresses: list(str('address/prefix, like 10.10.0.1/24')),
  gateway: nullable(str()),
  mtu: count(),
  state: oneOf(['up', 'down']),
  rxQueues: count(),
  groups: list(
    obj({ group: str('IPv4 multicast group'), users: count('UD QPs attached') }),
    'the IPv4 multicast groups it has joined',
  ),
  counters: InterfaceCounters,
  fault: obj(
    { rx: nullable(FaultCounters), tx: nullable(FaultCounters) },
    [],
    'fault injector counters by direction (null: no injector)',
  ),
  capture: obj(
    {
      rx: nullable(str()),
      tx: nullable(str()),
      rxStopped: nullable(str('why it takes no more packets: the count, or capture.max-bytes')),
      txStopped: nullable(str()),
    },
    [],
    'pcap files being written by direction (null: none), in capture.dir',
  ),
});

export const NeighborView = obj({
  interface: str(),
  address: str(),
  mac: nullable(str()),
  state: str(),
  age: num('seconds since last confirmed'),
  held: count('packets waiting for resolution'),
});

export const HealthView = obj({
  status: oneOf(['ok']),
  version: str(),
  uptime: num('seconds since the data plane started'),
  interfaces: count(),
  qps: count(),
});
/** Driver facts: names to text, or null (not known, not connected). */
const FactMap: JsonSchema = {
  type: 'object',
  additionalProperties: { type: 'string', nullable: true },
  description: 'driver facts in display order',
};
const CounterMap: JsonSchema = {
  type: 'object',
  additionalProperties: { type: 'number' },
  description: 'driver counters',
};
export const ThreadView = obj({
  index: count("VPP's thread number: 0 the main thread, 1.. the workers"),
  name: str('rdma_wk_N, or main'),
  type: str("'' for the main thread, workers for the others"),
  lwp: count("the kernel's task id"),
  policy: str('scheduling policy: other, fifo, rr, batch, idle, deadline'),
  priority: count('real-time priority (0 under other)'),
  lcore: nullable(count('the CPU it is pinned to (null: not pinned)')),
  core: nullable(count("the pinned CPU's core id")),
  socket: nullable(count("the pinned CPU's socket (physical package)")),
  cpu: count('the CPU it last ran on'),
});
export const RxPlacementView = obj({
  index: count("VPP's thread number: 0 the main thread, 1.. the workers"),
  name: str('rdma_wk_N, or main'),
  nodes: list(
    obj({
      node: str('the input node, e.g. memif-input'),
      queues: list(
        obj({
          interface: str(),
          queue: count("the device's rx queue number"),
          mode: oneOf(['adaptive', 'polling', 'interrupt']),
        }),
      ),
    }),
  ),
});
export const HardwareView = obj({
  name: str(),
  index: count(),
  driver: str(),
  mac: str(),
  mtu: count(),
  state: oneOf(['up', 'down']),
  rxQueues: count(),
  txQueues: count(),
  info: FactMap,
  counters: CounterMap,
});
export const DevicePort = obj({
  port: count('port number: 1'),
  state: oneOf(['active', 'down']),
  maxMtu: count('bytes: the largest path MTU a QP takes'),
  activeMtu: count('bytes: the largest IB MTU (256..4096) the interface segments hold'),
  mtu: count('the interface MTU'),
  segmentBytes: count('what one TRP segment carries: the MTU less IPv4, UDP and TRP headers'),
  linkLayer: oneOf(['Ethernet']),
  gid: str('GID 0: the IPv4 address as an IPv4-mapped IPv6 address'),
  gidType: oneOf(['RoCE v2']),
  address: str(),
});
export const DeviceView = obj({
  name: str('hca_id: rg_<interface>, at most 15 characters'),
  interface: str(),
  transport: oneOf(['InfiniBand']),
  wire: oneOf(['iWARP over UDP (urdma TRP)']),
  fwVer: str(),
  nodeGuid: str(),
  sysImageGuid: str(),
  vendorId: count(),
  vendorPartId: count(),
  hwVer: count(),
  maxQp: count(),
  maxQpWr: count(),
  maxSge: count(),
  maxSgeRd: count(),
  maxInline: count(),
  maxCq: count(),
  maxCqe: count(),
  maxMr: count(),
  maxMrSize: count('bytes of one MR'),
  maxPd: count(),
  maxSrq: count(),
  maxSrqWr: count(),
  maxSrqSge: count(),
  maxQpRdAtom: count(),
  maxQpInitRdAtom: count(),
  maxResRdAtom: count(),
  maxMsgSz: count(),
  pageSizeCap: count(),
  atomicCap: oneOf(['hca']),
  stagKeyBits: count(),
  portRange: { ...list(count()), minItems: 2, maxItems: 2 },
  window: count(),
  maxMcastGrp: count(),
  maxMcastQpAttach: count(),
  maxTotalMcastQpAttach: count(),
  multicastPort: count('the UDP port datagrams to multicast groups go to'),
  ports: { ...list(DevicePort), minItems: 1, maxItems: 1 },
});
export const VersionView = obj({
  version: str(),
  node: str(),
  platform: str(),
  startedAt: str(),
  drivers: list(obj({ name: str(), available: bool(), why: nullable(str()) })),
});
export const BufferView = obj({
  count: count('buffers in the pool'),
  free: count('buffers free now'),
  dataSize: count('data bytes per buffer'),
  hugepages: bool('the pool is in 2 MiB hugepages'),
});

export const RuntimeRow = obj(
  {
    name: str(),
    state: str(),
    calls: count(),
    vectors: count(),
    suspends: count(),
    clocks: num('CPU clocks spent, total'),
    maxClocks: num('the most clocks one call took since the last clear (show runtime max)'),
    vectorsAtMax: count(),
    eventsPending: bool(),
  },
  ['eventsPending', 'maxClocks', 'vectorsAtMax'],
);
export const RuntimeThread = obj(
  {
    index: count(),
    name: str(),
    lcore: count(),
    time: num('seconds since the last clear'),
    updateInterval: num(),
    internalVectorRate: num(),
    loopsPerSec: num(),
    ratesIn: num(),
    ratesOut: num(),
    ratesDrop: num(),
    ratesPunt: num(),
    rows: list(RuntimeRow),
  },
  ['lcore'],
);
export const RuntimeResponse = obj({ threads: list(RuntimeThread) });

export const ErrorRow = obj(
  { count: count(), node: str(), reason: str(), severity: oneOf(['error', 'warn', 'info']), index: count() },
  ['index'],
);
export const ErrorThread = obj({ index: count(), name: str(), rows: list(ErrorRow) });
export const ErrorsResponse = obj({ threads: list(ErrorThread) });

export const TraceEntry = obj({ timeNs: num('nanoseconds since the data plane started'), node: str(), text: str() });
export const TraceThread = obj({ index: count(), name: str(), packets: list(obj({ entries: list(TraceEntry) })) });
export const TraceResponse = obj({ threads: list(TraceThread) });
export const TraceNodes = list(str(), 'input nodes that trace add accepts');

export const EventView = obj(
  {
    seq: count(),
    time: str('ISO 8601'),
    type: oneOf([
      'qp-error',
      'qp-established',
      'qp-disconnected',
      'cq-error',
      'srq-limit',
      'connect-failed',
      'connect-request',
    ]),
    qpn: count(),
    cq: count(),
    srq: count(),
    reason: str(),
  },
  ['qpn', 'cq', 'srq', 'reason'],
);

// ------------------------------------------------------------------ verbs views

export const PdView = obj({ pd: count(), users: count('MRs, QPs and SRQs using it') });
export const MrView = obj({
  mr: count(),
  pd: count(),
  stag: u32('steering tag peers name it by'),
  length: count(),
  access: list(oneOf(ACCESS_NAMES)),
  owner: nullable(
    str(
      'the program that registered it through the verbs socket, e.g. "pid 1234 (ibv_rc_pingpong)": its memory is that program\'s; null: made through the API',
    ),
  ),
});
export const CqView = obj({
  cq: count(),
  depth: count(),
  pending: count('completions waiting to be polled'),
  error: bool('overflowed'),
  users: count(),
});
export const SrqView = obj({
  srq: count(),
  pd: count(),
  maxWr: count(),
  maxSge: count(),
  posted: count(),
  limit: count(),
});

export const QpCounters = counterObject([
  'txPackets',
  'rxPackets',
  'txBytes',
  'rxBytes',
  'retransmits',
  'fastRetransmits',
  'timeouts',
  'spuriousTimeouts',
  'probes',
  'duplicates',
]);
export const QpRtt = obj({ srttUs: num(), rttvarUs: num(), rtoUs: num() });
export const QpCongestion = obj({
  algorithm: oneOf(CONGESTION_NAMES, 'rdma.congestion (nodes/rdma/PROTOCOL.md section 10)'),
  cwnd: count('segments the QP may have in flight now: the congestion window (none: the TRP window; 0 before RTS)'),
  ssthresh: num('slow-start threshold, segments'),
  alpha: num("DCTCP's estimate of the fraction of segments marked CE (1 until measured; reno, none: 0)"),
  ceMarks: count('segments the peer echoed as CE-marked'),
  ceReceived: count('CE-marked data packets received (echoed to the peer)'),
  losses: count('losses seen: fast retransmissions and timeouts'),
  lossReductions: count('window reductions for losses (at most one per window of data)'),
  ecnReductions: count('window reductions for ECN marks (at most one per window of data)'),
  delayReductions: count(
    "window reductions for a queue building on the path: the QP's own segments queued (Vegas' estimate) above 8 once a full queue has dropped one (at most one per window)",
  ),
  fullQueueRttUs: num(
    'the smoothed RTT (us) when a full queue on the path last dropped a segment; 0: none seen yet (the delay component waits for one)',
  ),
  hystartExits: count("slow starts ended by HyStart++ (RFC 9406: the round's smallest RTT rose), not by a loss"),
});
const qpViewProps = {
  qpn: int(0, 65535, 'QP number = its UDP port'),
  type: oneOf(['rc', 'ud'], 'rc: reliable connected; ud: unreliable datagram'),
  qkey: nullable(u32("a UD QP's Q_Key")),
  state: oneOf(QP_STATE_NAMES),
  psn: u32("initial send PSN (random): the peer's manual connect needs it"),
  local: EndpointView,
  remote: nullable(EndpointView),
  pd: count(),
  sendCq: count(),
  recvCq: count(),
  srq: nullable(count()),
  listener: nullable(count('the listener port that accepted it')),
  owner: nullable(str('the program that created it through the verbs socket, e.g. "pid 1234 (ib_write_bw)"')),
  ird: count(),
  ord: count(),
  maxSendWr: count(),
  maxRecvWr: count(),
  maxSge: count(),
  maxInline: count(),
  segmentSize: count('payload bytes of one untagged DDP segment (the link MTU less IPv4, UDP, TRP and DDP headers)'),
  multicast: list(str('IPv4 multicast group'), 'the groups a UD QP is attached to'),
  sqOutstanding: count(),
  rqPosted: count(),
  counters: QpCounters,
  rtt: QpRtt,
  congestion: QpCongestion,
};
export const QpView = obj(qpViewProps);
export const ConnectResult = obj(
  { ...qpViewProps, privateData: { ...Base64, description: 'cm: the bytes the peer accepted with' } },
  ['privateData'],
);

export const ListenerView = obj({
  port: port('listening port'),
  pd: count(),
  sendCq: count(),
  recvCq: count(),
  srq: nullable(count()),
  maxSendWr: count(),
  maxRecvWr: count(),
  accepted: list(count(), 'QPNs it accepted'),
  requests: count('connection requests seen'),
});

export const Completion = obj(
  {
    wrId: WrId,
    qpn: count(),
    status: oneOf(WC_STATUS_NAMES),
    opcode: oneOf(WC_OPCODE_NAMES),
    byteLen: count(),
    imm: u32('immediate data'),
    invalidatedStag: u32('STag the peer invalidated'),
    solicited: bool(),
    srcQp: count("a UD receive: the sender's QPN (the receive's first 40 bytes are the GRH)"),
  },
  ['imm', 'invalidatedStag', 'solicited', 'srcQp'],
);
export const PollResult = obj({
  completions: list(Completion),
  error: nullable(str('set once the CQ overflowed: it is in error')),
});

export const Posted = obj({ wrId: WrId }, [], 'accepted: the completion comes on the CQ');
export const Written = obj({ written: count('bytes written') });

// ------------------------------------------------------------------ request bodies

export const TraceAdd = obj({
  node: { ...str('an input node (GET /v1/trace/nodes)'), maxLength: 256 },
  count: int(0, 1000000, 'packets to trace; 0 stops'),
});
const captureName = {
  ...str("a file NAME, created in the start-up file's capture.dir (never an existing file)"),
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9_][A-Za-z0-9._-]*$',
  [EXPECTED]:
    'a file name of 1..128 letters, digits, ".", "_" and "-", not starting with "." or "-" (no path: it goes into capture.dir)',
};
export const CaptureStart = obj(
  {
    direction: oneOf(['rx', 'tx', 'both']),
    file: captureName,
    count: int(1, U32_MAX, 'stop after this many packets (the file also stops at capture.max-bytes)'),
  },
  ['count'],
);
const probability = (what: string): JsonSchema => ({
  type: 'number',
  minimum: 0,
  maximum: 1,
  description: `probability a packet is ${what}`,
});
export const FaultSet = obj(
  {
    direction: oneOf(['rx', 'tx', 'both']),
    off: { type: 'boolean', enum: [true], description: 'remove the injector (no other field with it)' },
    seed: u32('generator seed'),
    loss: probability('dropped'),
    reorder: probability('held back'),
    reorderDepth: int(1, 65535, 'at most this many later packets overtake a held one'),
    reorderDelayUs: {
      type: 'number',
      minimum: 1,
      maximum: 1e7,
      description: 'a held packet goes out after this long at the latest',
    },
    duplicate: probability('duplicated'),
    corrupt: probability('corrupted (one bit)'),
    ce: probability('marked CE, if ECN-capable (ECT) IPv4'),
  },
  ['off', 'seed', 'loss', 'reorder', 'reorderDepth', 'reorderDelayUs', 'duplicate', 'corrupt', 'ce'],
);

const L = VERBS_LIMITS,
  D = VERBS_DEFAULTS;
export const MrCreate = obj(
  {
    pd: handle('protection domain'),
    length: int(0, L.maxMrLength, 'bytes (GET /v1/devices maxMrSize; all MRs together: at most rdma.max-mr-bytes)'),
    access: dflt({ ...list(oneOf(ACCESS_NAMES)), maxItems: 8 }, [...D.access]),
  },
  ['access'],
);
const placeOn = {
  ...str("the interface it serves: with cpu.workers it is made on that interface's worker (default: worker 0)"),
  maxLength: 256,
};
const onWorker = int(0, 63, "with cpu.workers: the worker it is made on (default: the interface's, else 0)");
export const PdCreate = obj({ interface: placeOn, worker: onWorker }, ['interface', 'worker']);
export const CqCreate = obj(
  {
    depth: int(1, L.maxCqe, 'completions it holds (rdma.max-cq-entries may lower the limit: GET /v1/devices maxCqe)'),
    interface: placeOn,
    worker: onWorker,
  },
  ['interface', 'worker'],
);
export const SrqCreate = obj(
  {
    pd: handle('protection domain'),
    maxWr: int(1, L.maxWr),
    maxSge: dflt(int(1, L.maxSge), D.srqMaxSge),
    limit: int(0, U32_MAX, 'arm the limit event'),
  },
  ['maxSge', 'limit'],
);
export const SrqModify = obj({ limit: int(0, U32_MAX, 'the limit event fires once fewer receives than this remain') });
export const RecvRequest = obj({ wrId: WrId, sge: SgeList }, ['sge']);

const qpParams = {
  pd: handle('protection domain'),
  sendCq: handle('completion queue'),
  recvCq: handle('completion queue'),
  srq: nullable(handle('shared receive queue')),
  maxSendWr: dflt(int(1, L.maxWr), D.maxSendWr),
  maxRecvWr: dflt(int(0, L.maxWr, 'ignored with an srq'), D.maxRecvWr),
  maxSge: dflt(int(1, L.maxSge), D.maxSge),
  maxInline: dflt(int(0, L.maxInline), D.maxInline),
  ird: dflt(int(1, L.maxRdAtomic, 'inbound RDMA READ / atomic depth'), D.ird),
  ord: dflt(int(1, L.maxRdAtomic, 'outbound RDMA READ / atomic depth'), D.ord),
  interface: { ...str("bind to this interface's address"), maxLength: 256 },
};
const qpOptional = ['srq', 'maxSendWr', 'maxRecvWr', 'maxSge', 'maxInline', 'ird', 'ord', 'interface'];
export const QpCreate = obj(
  {
    ...qpParams,
    port: port('a specific QPN in the port range'),
    type: dflt(oneOf(['rc', 'ud'], 'rc: reliable connected; ud: unreliable datagram'), 'rc'),
    multicastLoopback: bool("default true: a UD QP's datagrams to a group reach this data plane's members too"),
  },
  [...qpOptional, 'port', 'type', 'multicastLoopback'],
);
export const ListenerCreate = obj(
  { port: port('port to accept connection requests on'), ...qpParams, privateData: Base64 },
  [...qpOptional, 'privateData'],
);

export const Connect = obj(
  {
    remote: Endpoint,
    mode: oneOf(['manual', 'cm'], "manual: straight to RTS; cm: through the peer's listener"),
    privateData: Base64,
    ird: int(1, L.maxRdAtomic),
    ord: int(1, L.maxRdAtomic),
    timeoutMs: int(1, WAIT_MAX_MS, 'cm: give up after this long'),
    remotePsn: u32("manual (required): the peer QP's psn"),
  },
  ['privateData', 'ird', 'ord', 'timeoutMs', 'remotePsn'],
);
export const QpModify = obj(
  {
    state: oneOf(QP_STATE_NAMES),
    remote: Endpoint,
    rqPsn: u32("rtr (required): the peer QP's psn"),
    sqPsn: u32("rts: our initial PSN (default: the QP's psn)"),
    ird: int(1, L.maxRdAtomic),
    ord: int(1, L.maxRdAtomic),
    qkey: u32("a UD QP's Q_Key (datagrams carrying another are dropped)"),
  },
  ['remote', 'rqPsn', 'sqPsn', 'ird', 'ord', 'qkey'],
);

export const SendRequest = obj(
  {
    wrId: WrId,
    opcode: oneOf(API_WR_OPCODE_NAMES),
    sge: SgeList,
    remote: obj({
      stag: u32("the peer MR's STag"),
      offset: int(0, SAFE_MAX, 'byte offset from the start of the peer MR'),
    }),
    imm: u32('immediate data (write-with-imm)'),
    invalidateStag: u32('send-with-invalidate'),
    atomic: obj(
      { add: AtomicValue, swap: AtomicValue, compare: AtomicValue },
      ['add', 'swap', 'compare'],
      '{add} fetch-add, {swap} swap, {compare, swap} cmp-swap',
    ),
    signaled: bool('default true'),
    solicited: bool(),
    inline: bool(),
    ud: obj(
      {
        ip: Ipv4,
        qpn: int(1, 0xffffff, "the peer UD QP's number; 16777215 (0xFFFFFF) with a multicast group's ip: the group"),
        qkey: u32("the peer QP's Q_Key"),
      },
      [],
      "a UD QP's send: the destination",
    ),
  },
  ['sge', 'remote', 'imm', 'invalidateStag', 'atomic', 'signaled', 'solicited', 'inline', 'ud'],
);

// ------------------------------------------------------------------ params and querystrings

export const NameParams = obj({ name: { ...str('interface name'), minLength: 1, maxLength: 256 } });
export const PdParams = obj({ pd: handle('protection domain') });
export const MrParams = obj({ mr: handle('memory region') });
export const CqParams = obj({ cq: handle('completion queue') });
export const SrqParams = obj({ srq: handle('shared receive queue') });
export const QpParams = obj({ qpn: int(0, 65535, 'QP number') });
export const QpGroupParams = obj({ qpn: int(0, 65535, 'QP number'), group: Ipv4 });
export const McastJoin = obj({ group: Ipv4 }, [], 'an IPv4 multicast group (224.0.0.0/4)');
export const McastGroups = obj(
  { groups: list(str('IPv4 multicast group')) },
  [],
  'the multicast groups the UD QP is attached to',
);
export const ListenerParams = obj({ port: int(0, 65535, 'listening port') });

export const VerboseQuery = obj({ verbose: oneOf(['0', '1', 'true', 'false'], 'include rows with no calls') }, [
  'verbose',
]);
export const EventsQuery = obj({ since: int(0, SAFE_MAX, 'only events after this seq') }, ['since']);
export const OffsetQuery = obj({ offset: int(0, SAFE_MAX, 'byte offset from the start of the MR') }, ['offset']);
export const ReadQuery = obj(
  {
    offset: int(0, SAFE_MAX, 'byte offset from the start of the MR'),
    length: int(0, SAFE_MAX, 'bytes (default: to the end)'),
  },
  ['offset', 'length'],
);
export const PollQuery = obj(
  {
    max: int(1, 65536, 'most completions to take (default 64)'),
    waitMs: int(0, WAIT_MAX_MS, 'wait this long for the first one (default 0)'),
  },
  ['max', 'waitMs'],
);

export const PingRequest = obj(
  {
    address: Ipv4,
    count: dflt(int(1, PING_LIMITS.maxCount, 'echo requests to send'), 1),
    intervalMs: dflt(int(PING_LIMITS.minIntervalMs, PING_LIMITS.maxWaitMs, 'between two requests'), 1000),
    size: dflt(int(0, PING_LIMITS.maxSize, 'data bytes after the 8-byte ICMP header'), 56),
    timeoutMs: dflt(
      int(1, PING_LIMITS.maxWaitMs, 'wait this long for each reply; the whole series takes at most 60 s'),
      1000,
    ),
    seq: int(
      1,
      0xffff,
      "the first request's ICMP sequence number (the next ones count up from it; one still waiting for its reply is skipped); else the data plane's next",
    ),
  },
  ['count', 'intervalMs', 'size', 'timeoutMs', 'seq'],
);
export const PingResult = obj({
  address: str(),
  size: count(),
  sent: count(),
  received: count(),
  replies: list(
    obj({
      seq: count(),
      bytes: count('ICMP bytes received'),
      ttl: count(),
      from: str(),
      timeMs: num('round trip measured by the graph'),
    }),
  ),
  lost: list(count(), 'sequence numbers without a reply in time'),
  stopped: nullable(str('why sending stopped early')),
});

/** The named schemas the OpenAPI document lists under components/schemas (and refers to). */
export const components: Record<string, JsonSchema> = {
  Error: ErrorResponse,
  WrId,
  AtomicValue,
  Ipv4,
  Base64,
  Endpoint,
  EndpointView,
  Sge,
  InterfaceCounters,
  FaultCounters,
  InterfaceView,
  NeighborView,
  HealthView,
  BufferView,
  HardwareView,
  RxPlacementView,
  DevicePort,
  DeviceView,
  VersionView,
  ThreadView,
  RuntimeRow,
  RuntimeThread,
  RuntimeResponse,
  ErrorRow,
  ErrorThread,
  ErrorsResponse,
  TraceEntry,
  TraceThread,
  TraceResponse,
  EventView,
  PdView,
  MrView,
  CqView,
  SrqView,
  QpCounters,
  QpRtt,
  QpView,
  ConnectResult,
  ListenerView,
  Completion,
  PollResult,
  Posted,
  Written,
  TraceAdd,
  CaptureStart,
  FaultSet,
  PingRequest,
  PingResult,
  MrCreate,
  CqCreate,
  PdCreate,
  SrqCreate,
  SrqModify,
  RecvRequest,
  QpCreate,
  ListenerCreate,
  Connect,
  QpModify,
  SendRequest,
};
