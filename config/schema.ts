/**
 * The schema of the start-up YAML: every key with its type, range, default and a one-line
 * description. config/load.ts validates against it (and adds the checks that relate several
 * keys: unique names, driver options, subnets, pipe peers, neighbors, port range, RTO order);
 * `schemaReference()` renders it as the key table of config/README.md. Keys are kebab-case in
 * YAML and camelCase in the loaded `Config` (config/types.ts).
 *
 * Rules the walker applies to every spec:
 * - a key left out takes its `default`; a mapping without a default is filled from its own
 *   keys' defaults, unless `omit` (then it stays absent); `required` keys must be there;
 * - an empty value (`key:` with nothing, or `null`) is null where `nullable`, an empty mapping
 *   for a mapping, an empty list for a list, and an error anywhere else;
 * - strings are never empty; numbers are finite.
 */
import { CONGESTION_NAMES } from '../nodes/rdma/congestion.ts';
import { MTU_MAX, MTU_MIN } from '../graph/link.ts';
import { DRIVER_KINDS, type DriverKind } from './types.ts';
import {
  checkHostIfName,
  checkIfName,
  checkIp4,
  checkIp4Prefix,
  checkListen,
  checkMac,
  checkLocalGroup,
  checkLocalUser,
  checkNoWhitespace,
} from './formats.ts';

interface Base {
  /** One line for the reference table. */
  doc: string;
  required?: boolean;
  /** null is a valid value (and the default when no other is given). */
  nullable?: boolean;
  default?: unknown;
  /** A mapping left out stays absent (instead of being filled with its defaults). */
  omit?: boolean;
  /** What is expected, in messages and in the reference, when not derived from the type. */
  expect?: string;
  /** One more check of a value of the right type and range: what is wrong with it, or undefined. */
  check?: (v: never) => string | undefined;
}

export interface IntSpec extends Base {
  type: 'int';
  min?: number;
  max?: number;
  pow2?: boolean;
  multipleOf?: number;
  check?: (v: number) => string | undefined;
}
/** `above`: an exclusive lower bound (instead of `min`). */
export interface NumberSpec extends Base {
  type: 'number';
  min?: number;
  above?: number;
  max?: number;
}
export interface BoolSpec extends Base {
  type: 'bool';
}
export interface StringSpec extends Base {
  type: 'string';
  maxLength?: number;
  check?: (v: string) => string | undefined;
}
export interface EnumSpec extends Base {
  type: 'enum';
  values: readonly string[];
}
export interface MapSpec extends Base {
  type: 'map';
  keys: Readonly<Record<string, Spec>>;
}
export interface ListSpec extends Base {
  type: 'list';
  items: Spec;
}
export interface TupleSpec extends Base {
  type: 'tuple';
  items: readonly Spec[];
}
export type Spec = IntSpec | NumberSpec | BoolSpec | StringSpec | EnumSpec | MapSpec | ListSpec | TupleSpec;

/** The property name in the loaded Config: "rx-queue-size" -> "rxQueueSize", "af_packet" -> "afPacket". */
export function camel(key: string): string {
  return key.replace(/[-_]([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** What a value of this spec must be, as said after "expected" (without "null or"). */
export function expected(s: Spec): string {
  if (s.expect !== undefined) return s.expect;
  switch (s.type) {
    case 'int': {
      const what = s.pow2
        ? 'a power of 2'
        : s.multipleOf !== undefined
          ? `a multiple of ${s.multipleOf}`
          : 'an integer';
      if (s.min === undefined) return what;
      return s.max === undefined ? `${what} >= ${s.min}` : `${what} in ${s.min}..${s.max}`;
    }
    case 'number':
      if (s.above !== undefined)
        return s.max === undefined ? `a number > ${s.above}` : `a number > ${s.above} and <= ${s.max}`;
      return s.max === undefined ? `a number >= ${s.min}` : `a number in ${s.min}..${s.max}`;
    case 'bool':
      return 'true or false';
    case 'string':
      return s.maxLength === undefined ? 'a non-empty string' : `a string of 1..${s.maxLength} characters`;
    case 'enum':
      return `one of: ${s.values.join(', ')}`;
    case 'map':
      return `a mapping of: ${Object.keys(s.keys).join(', ')}`;
    case 'list':
      return `a list of ${expected(s.items).replace(/^an? /, '')}s`;
    case 'tuple':
      return `a list of ${s.items.length} items`;
  }
}

/** `expected()` with "null or " in front for nullable specs. */
export function expectedOrNull(s: Spec): string {
  return s.nullable ? `null or ${expected(s)}` : expected(s);
}

// ------------------------------------------------------------------ the schema

const port = (doc: string): IntSpec => ({ type: 'int', min: 1, max: 65535, doc });
const probability = (doc: string): NumberSpec => ({ type: 'number', min: 0, max: 1, default: 0, doc });
const device = (doc: string): StringSpec => ({ type: 'string', required: true, doc });
const verbsPort: IntSpec = { type: 'int', min: 1, max: 255, default: 1, doc: 'the port number on the device' };
const ifName = (doc: string, required = true): StringSpec => ({
  type: 'string',
  required,
  check: checkIfName,
  expect: 'a lowercase letter then up to 31 of a-z, 0-9, _ and -',
  doc,
});

/** The options of each driver, under a key named like the driver. */
const DRIVER_OPTIONS: Record<DriverKind, MapSpec> = {
  memif: {
    type: 'map',
    omit: true,
    doc: 'memif options (required with driver: memif)',
    keys: {
      socket: {
        type: 'string',
        required: true,
        doc: "control socket path (a relative path is resolved against the daemon's working directory)",
      },
      role: {
        type: 'enum',
        values: ['server', 'client'],
        default: 'server',
        doc: 'server creates the socket and the shared memory; client connects',
      },
      id: {
        type: 'int',
        min: 0,
        max: 0xffffffff,
        default: 0,
        doc: 'interface id on the socket (both ends use the same)',
      },
      secret: { type: 'string', maxLength: 24, nullable: true, doc: 'shared secret the client must present' },
      'buffer-size': {
        type: 'int',
        min: 256,
        max: 65536,
        pow2: true,
        default: 2048,
        doc: 'bytes per shared-memory buffer (server)',
      },
      'udp-checksum': {
        type: 'bool',
        nullable: true,
        doc: 'compute UDP checksums on transmit; false sends checksum 0 (IPv4 allows it: shared memory does not corrupt), only where no peer forwards our datagrams onto a real wire; null (the default): false while the peer is another rdma-graph data plane (neither end forwards a frame; not with cpu.workers), true otherwise',
      },
    },
  },
  af_packet: {
    type: 'map',
    omit: true,
    doc: 'af_packet options (required with driver: af_packet)',
    keys: {
      'host-interface': {
        type: 'string',
        required: true,
        maxLength: 15,
        check: checkHostIfName,
        expect: 'a Linux interface name of 1..15 characters without /, : or white space',
        doc: 'the kernel interface to attach to (e.g. a veth end)',
      },
      promisc: { type: 'bool', default: false, doc: 'put the host interface in promiscuous mode' },
      'tx-mode': {
        type: 'enum',
        values: ['sendmmsg', 'ring'],
        default: 'sendmmsg',
        doc: 'transmit with sendmmsg or through a TPACKET_V3 tx ring',
      },
      'block-size': {
        type: 'int',
        min: 4096,
        max: 67108864,
        pow2: true,
        default: 65536,
        doc: 'rx ring block size in bytes (largest frame: block-size - 130)',
      },
      'qdisc-bypass': {
        type: 'bool',
        default: true,
        doc: 'transmitted frames skip the kernel qdisc (PACKET_QDISC_BYPASS)',
      },
      'rx-ring': {
        type: 'enum',
        values: ['auto', 'v2', 'v3'],
        default: 'auto',
        doc: "v2: TPACKET_V2, a slot per frame handed over at once (no latency floor; needs tx-mode sendmmsg); v3: TPACKET_V3 blocks, handed over when full or after block-timeout-ms (a lone frame waits that long: a ping-pong pays it at every hop); auto: v2, or v3 with tx-mode ring (DPDK's af_packet uses TPACKET_V2 too)",
      },
      gso: {
        type: 'bool',
        default: false,
        doc: "UDP segmentation offload (PACKET_VNET_HDR): a QP's consecutive segments leave as one message the kernel cuts back into datagrams (on the NIC or before the wire; across a veth pair it crosses whole, as TCP's 64 KiB GSO packets do), and such messages received are cut here; needs rx-ring v2 (auto) and tx-mode sendmmsg; rx slots of 128 KiB (block-size raised to 131072; up to 512 slots: 64 MiB). Every af_packet reader on the same veth or bridge must take GSO frames (rdma-graph with gso: true, or the kernel's sockets)",
      },
      'block-timeout-ms': {
        type: 'int',
        min: 1,
        max: 1000,
        default: 1,
        doc: 'rx-ring v3: a block not yet full is handed over after this many ms',
      },
    },
  },
  pcap: {
    type: 'map',
    omit: true,
    doc: 'pcap options (required with driver: pcap; rx-file or tx-file or both)',
    keys: {
      'rx-file': {
        type: 'string',
        nullable: true,
        doc: "capture replayed as received packets (relative: against the daemon's working directory)",
      },
      'tx-file': {
        type: 'string',
        nullable: true,
        doc: 'capture the transmitted packets are written to (relative: likewise)',
      },
      rate: { type: 'number', min: 0, default: 0, doc: 'replay rate in packets per second (0 = as fast as possible)' },
      loop: { type: 'int', min: 0, default: 1, doc: 'times the rx file is replayed (0 = forever)' },
    },
  },
  pipe: {
    type: 'map',
    omit: true,
    doc: 'pipe options (required with driver: pipe)',
    keys: { peer: ifName('the interface at the other end (in this file, or in another data plane of this process)') },
  },
  dpdk: {
    type: 'map',
    omit: true,
    doc: 'dpdk options (required with driver: dpdk)',
    keys: {
      device: device('the port: a PCI address (0000:3b:00.0) or a vdev'),
      'eal-args': {
        type: 'list',
        items: { type: 'string', doc: 'one EAL argument' },
        default: [],
        doc: 'extra DPDK EAL arguments',
      },
    },
  },
  ibverbs: {
    type: 'map',
    omit: true,
    doc: 'ibverbs options (required with driver: ibverbs): RAW_PACKET queues through verbs calls',
    keys: verbsKeys(false),
  },
  mlx5dv: {
    type: 'map',
    omit: true,
    doc: 'mlx5dv options (required with driver: mlx5dv): the same queues driven in memory (mlx5 only)',
    keys: verbsKeys(true),
  },
};

/** "1-3,5": CPU numbers and ascending ranges; undefined when valid. */
export function parseCoreList(v: string): number[] | string {
  const out: number[] = [];
  for (const part of v.split(',')) {
    const m = /^\s*(\d{1,4})(?:\s*-\s*(\d{1,4}))?\s*$/.exec(part);
    if (m === null) return `"${part}" is not a CPU number or a range a-b`;
    const a = Number(m[1]),
      b = m[2] === undefined ? a : Number(m[2]);
    if (b < a) return `range ${a}-${b} goes down`;
    if (b > 1023) return `CPU ${b} is beyond 1023`;
    for (let c = a; c <= b; c++) {
      if (out.includes(c)) return `CPU ${c} is listed twice`;
      out.push(c);
    }
  }
  return out;
}

function checkCoreList(v: string): string | undefined {
  const r = parseCoreList(v);
  return typeof r === 'string' ? r : undefined;
}

/** The keys of `ibverbs:` and `mlx5dv:`: the device by name or by its kernel interface. */
function verbsKeys(dv: boolean): Record<string, Spec> {
  const keys: Record<string, Spec> = {
    device: {
      type: 'string',
      nullable: true,
      doc: 'the verbs device name as ibv_devices prints it, e.g. mlx5_0 (or host-interface)',
    },
    'host-interface': {
      type: 'string',
      nullable: true,
      maxLength: 15,
      check: checkHostIfName,
      expect: 'a Linux interface name of 1..15 characters without /, : or white space',
      doc: "the device by its kernel interface, e.g. enp59s0f0 (resolved through /sys/class/net/<if>/device as VPP's host-if); the kernel keeps the interface",
    },
    port: verbsPort,
    promisc: {
      type: 'bool',
      default: false,
      doc: 'receive every frame on the port (a flow rule with an empty mask), not only ours, broadcast and IPv4 multicast',
    },
  };
  if (dv) {
    keys.striding = {
      type: 'bool',
      default: true,
      doc: 'striding RQ (8 pool buffers per receive WQE, one per stride) when the device has it; false: one buffer per WQE',
    };
    keys['cqe-compression'] = {
      type: 'bool',
      default: true,
      doc: 'let the NIC compress receive CQEs (mini-CQE arrays) when it can',
    };
  }
  return keys;
}

const FAULT: MapSpec = {
  type: 'map',
  nullable: true,
  doc: 'a seeded fault injector on this interface (null: none)',
  keys: {
    direction: { type: 'enum', values: ['rx', 'tx', 'both'], default: 'rx', doc: 'which direction the faults hit' },
    seed: {
      type: 'int',
      min: 0,
      max: 0xffffffff,
      default: 1,
      doc: 'same seed and same traffic give the same decisions',
    },
    loss: probability('probability a packet is dropped'),
    reorder: probability('probability a packet is held back behind later ones'),
    'reorder-depth': {
      type: 'int',
      min: 1,
      max: 65535,
      default: 8,
      doc: 'at most this many later packets overtake a held one',
    },
    'reorder-delay-us': {
      type: 'number',
      min: 1,
      max: 10000000,
      default: 500,
      doc: 'a held packet goes out at the latest after this many microseconds',
    },
    duplicate: probability('probability a packet is sent twice'),
    corrupt: probability('probability one random bit of a packet is flipped'),
    ce: probability('probability an ECN-capable (ECT) IPv4 packet is marked CE (congestion experienced)'),
  },
};

const INTERFACE: MapSpec = {
  type: 'map',
  expect: "a mapping with name, driver and the driver's options",
  doc: 'one interface',
  keys: {
    name: ifName('the interface name, unique'),
    driver: {
      type: 'enum',
      values: DRIVER_KINDS,
      required: true,
      doc: 'the driver; its options go under the key of the same name',
    },
    ...DRIVER_OPTIONS,
    mac: {
      type: 'string',
      nullable: true,
      check: checkMac,
      expect: 'a unicast MAC address xx:xx:xx:xx:xx:xx',
      doc: "MAC address (null: the driver's, or one derived from the name)",
    },
    address: {
      type: 'string',
      nullable: true,
      check: checkIp4Prefix,
      expect: 'an IPv4 host address with prefix length, a.b.c.d/N with N in 0..32',
      doc: 'IPv4 address and prefix (null: no IPv4)',
    },
    gateway: {
      type: 'string',
      nullable: true,
      check: checkIp4,
      expect: 'an IPv4 address a.b.c.d',
      doc: 'default gateway through this interface, inside its subnet',
    },
    mtu: {
      type: 'int',
      nullable: true,
      min: MTU_MIN,
      max: MTU_MAX,
      doc: "largest IP packet (it may exceed buffers.data-size: frames are chained); an RC QP's segments are as large as its egress interface's MTU allows (nodes/rdma/PROTOCOL.md section 1). null (the default): 1500, except a memif interface connected to another rdma-graph data plane, which takes up to 32768 while that peer is there (neither end forwards a frame onto a wire), and an af_packet interface, which takes its kernel interface's and follows it down (and back up to what it was at start), as VPP's host-interface and the kernel's own sockets do (not with cpu.workers); a number pins it (a DPDK or VPP peer that forwards onto a network wants that network's MTU)",
    },
    'rx-queues': {
      type: 'int',
      min: 1,
      max: 64,
      default: 1,
      doc: 'receive queues (memif: queue pairs; af_packet: sockets, one per worker, at most cpu.workers)',
    },
    worker: {
      type: 'int',
      min: 0,
      max: 63,
      nullable: true,
      doc: "the worker thread that runs this interface (VPP's rx-placement; null: round robin in file order); needs cpu.workers",
    },
    'rx-placement': {
      type: 'list',
      items: { type: 'int', min: 0, max: 63, doc: 'a worker' },
      nullable: true,
      default: null,
      expect: 'a list of workers, one per rx queue',
      doc: "the worker that receives each rx queue, in queue order (VPP's set interface rx-placement; memif: its queue pairs, af_packet: one socket per worker taking its QP numbers by UDP port; each worker then also transmits itself). The first is the interface's worker (a memif's control channel). null: queue q on worker (worker + q) mod cpu.workers for memif and af_packet, other drivers' queues stay on their worker",
    },
    congestion: {
      type: 'enum',
      values: CONGESTION_NAMES,
      nullable: true,
      doc: "congestion control of the RC QPs whose peer is reached through this interface (null: rdma.congestion's)",
    },
    'rx-mode': {
      type: 'enum',
      values: ['adaptive', 'polling', 'interrupt'],
      nullable: true,
      doc: "this interface's rx-mode (VPP's set interface rx-mode; null: cpu.poll's): polling keeps the graph from sleeping, interrupt lets a memif peer kick at once when traffic stops, adaptive waits cpu.idle-poll-us",
    },
    'rx-queue-size': {
      type: 'int',
      min: 16,
      max: 65536,
      pow2: true,
      default: 1024,
      doc: 'descriptors per receive queue',
    },
    'tx-queue-size': {
      type: 'int',
      min: 16,
      max: 65536,
      pow2: true,
      default: 1024,
      doc: 'descriptors per transmit queue',
    },
    fault: FAULT,
  },
};

const NEIGHBOR: MapSpec = {
  type: 'map',
  expect: 'a mapping of: interface, address, mac',
  doc: 'one static neighbor',
  keys: {
    interface: ifName('the interface it is reached through'),
    address: {
      type: 'string',
      required: true,
      check: checkIp4,
      expect: 'an IPv4 address a.b.c.d',
      doc: "its IPv4 address, inside that interface's subnet",
    },
    mac: {
      type: 'string',
      required: true,
      check: checkMac,
      expect: 'a unicast MAC address xx:xx:xx:xx:xx:xx',
      doc: 'its MAC address',
    },
  },
};

export const SCHEMA: MapSpec = {
  type: 'map',
  doc: 'the start-up configuration',
  keys: {
    api: {
      type: 'map',
      doc: 'the REST API',
      keys: {
        listen: {
          type: 'string',
          default: '127.0.0.1:7070',
          check: checkListen,
          expect: 'host:port with an IPv4 address, localhost or [IPv6] and a port in 0..65535',
          doc: 'address the API listens on',
        },
        token: {
          type: 'string',
          nullable: true,
          check: checkNoWhitespace,
          expect: 'a non-empty string without white space',
          doc: 'when set, every request needs "Authorization: Bearer <token>" (and any holder of it is served, from anywhere)',
        },
        users: {
          type: 'list',
          items: {
            type: 'string',
            check: checkLocalUser,
            expect: 'a user name of this host or a uid',
            doc: 'a local user',
          },
          default: [],
          doc: "without api.token, local users served besides the daemon's own user and root (known by the uid owning the connecting socket); they cannot change a verbs program's QPs or touch its memory",
        },
        group: {
          type: 'string',
          nullable: true,
          check: checkLocalGroup,
          expect: 'a group name or gid of this host',
          doc: 'without api.token, a local group whose members are served as api.users are',
        },
      },
    },
    cpu: {
      type: 'map',
      doc: 'threads',
      keys: {
        workers: {
          type: 'int',
          min: 0,
          max: 64,
          default: 0,
          doc: "worker threads, each running a graph over the interfaces placed on it (interfaces[].worker, else round robin); 0: the graph runs on the main thread beside the API. With workers the main thread keeps only the API, configuration and logging (VPP's main thread and vpp_wk_N)",
        },
        'main-core': {
          type: 'int',
          min: 0,
          max: 1023,
          nullable: true,
          doc: "pin the main thread to this CPU (VPP's main-core; null: not pinned)",
        },
        'corelist-workers': {
          type: 'string',
          nullable: true,
          check: checkCoreList,
          expect: 'CPU numbers and ranges, e.g. 1-3 or 1,3',
          doc: "pin worker i to the i-th CPU of this list (VPP's corelist-workers; it must name as many CPUs as workers; null: not pinned)",
        },
        poll: {
          type: 'enum',
          values: ['adaptive', 'polling', 'interrupt'],
          default: 'adaptive',
          doc: "when the graph sleeps (VPP's rx-mode): adaptive polls while there is work and idle-poll-us after, then sleeps until an interface or timer wakes it; polling never sleeps (lowest latency, a core per data plane); interrupt sleeps as soon as a pass finds nothing",
        },
        'idle-poll-us': {
          type: 'int',
          min: 0,
          max: 1000000,
          default: 200,
          doc: 'adaptive: how long the graph keeps polling with nothing to do before it sleeps (µs); longer than one wake-up (~90 µs p50 on the 2-core VM) so that two data planes exchanging traffic do not both fall asleep and pay a wake-up per hop',
        },
        'idle-yield': {
          type: 'bool',
          default: true,
          doc: 'while a verbs program is attached, a polling graph gives its CPU up (sched_yield) after each empty pass: a program spinning on its CQ on the same CPU runs at once instead of at the end of our time slice (ib_send_lat 64 B typical 1.3 ms -> 50-66 us on the 2-core VM); false keeps the CPU (a core of its own per data plane and per program)',
        },
      },
    },
    buffers: {
      type: 'map',
      doc: 'the packet buffer pool',
      keys: {
        count: { type: 'int', min: 64, max: 1048576, default: 16384, doc: 'buffers in the pool' },
        'data-size': {
          type: 'int',
          min: 256,
          max: 65536,
          multipleOf: 64,
          default: 2048,
          doc: 'data bytes per buffer (larger packets are chains)',
        },
      },
    },
    log: {
      type: 'map',
      doc: 'logging',
      keys: {
        level: {
          type: 'enum',
          values: ['error', 'warn', 'info', 'debug'],
          default: 'info',
          doc: 'least severe level logged',
        },
      },
    },
    interfaces: {
      type: 'list',
      items: INTERFACE,
      default: [],
      expect: 'a list of interfaces',
      doc: 'the interfaces of the data plane',
    },
    neighbors: {
      type: 'list',
      items: NEIGHBOR,
      default: [],
      expect: 'a list of neighbors',
      doc: 'static neighbor (ARP) entries',
    },
    rdma: {
      type: 'map',
      doc: 'the RDMA transport',
      keys: {
        'port-range': {
          type: 'tuple',
          items: [port('lowest QP port'), port('highest QP port')],
          default: [20000, 29999],
          expect: '[lo, hi], two ports in 1..65535 with lo <= hi',
          doc: "UDP ports QPs get (a QP's number is its port), inclusive",
        },
        'multicast-port': {
          ...port('the UDP port datagrams to multicast groups go to (outside port-range; the same on every member)'),
          default: 19999,
        },
        'max-qps': { type: 'int', min: 1, max: 65536, default: 1024, doc: 'most QPs at once' },
        'max-mrs': {
          type: 'int',
          min: 1,
          max: 1048575,
          default: 4096,
          doc: 'most memory regions at once (STags keep at least 12 random key bits)',
        },
        'max-pds': { type: 'int', min: 1, max: 1048576, default: 4096, doc: 'most protection domains at once' },
        'max-cqs': { type: 'int', min: 1, max: 1048576, default: 4096, doc: 'most completion queues at once' },
        'max-srqs': { type: 'int', min: 1, max: 1048576, default: 1024, doc: 'most shared receive queues at once' },
        'max-mr-bytes': {
          type: 'int',
          min: 1,
          max: 2 ** 48,
          default: 4 * 2 ** 30,
          doc: 'bytes of MR memory the data plane allocates, all MRs together (4 GiB)',
        },
        'max-cq-entries': {
          type: 'int',
          min: 1,
          max: 2 ** 31,
          default: 4 * 2 ** 20,
          doc: 'completion queue depths, all CQs together',
        },
        'max-wr-slots': {
          type: 'int',
          min: 1,
          max: 2 ** 31,
          default: 2 ** 20,
          doc: 'work request slots, all QPs (send + receive) and SRQs together; a send slot also counts 1 per KiB of maxInline',
        },
        'cm-retry-ms': { type: 'number', above: 0, default: 100, doc: 'connection manager: REQ resend interval' },
        'cm-timeout-ms': { type: 'number', above: 0, default: 5000, doc: 'connection manager: connect timeout' },
        'cm-backlog': {
          type: 'int',
          min: 1,
          max: 65536,
          default: 64,
          doc: 'connection manager: half-open connections a listener holds at most (more REQs are dropped)',
        },
        'cm-half-open-ms': {
          type: 'number',
          above: 0,
          default: 5000,
          doc: 'connection manager: an accepted connection with no traffic from the peer this long is destroyed',
        },
        congestion: {
          type: 'enum',
          values: ['auto', ...CONGESTION_NAMES],
          default: 'auto',
          doc: "congestion control of an RC QP's sender, by the interface its peer is reached through (interfaces[].congestion overrides it; nodes/rdma/PROTOCOL.md section 10): none (a dedicated link: every QP sends its whole TRP window, no ECT), reno (slow start, AIMD, halving once per window on a loss or an ECN mark; once a full queue on the path has dropped a segment, the window also holds and shrinks x 0.7 while the QP's segments queued there exceed 4 and 8; data sent ECT(0)), cubic (as reno, but x 0.7 on a loss or mark and RFC 9438's cubic increase), dctcp (as reno, but an ECN mark reduces by the fraction marked: for networks whose switches mark at a shallow threshold), auto (none on memif and pipe interfaces, shared memory between two processes; reno on every other driver, a network)",
        },
        trp: {
          type: 'map',
          doc: 'the TRP reliability layer',
          keys: {
            window: {
              type: 'int',
              min: 1,
              max: 32768,
              default: 512,
              doc: 'segments in flight per QP (two receive vectors: the sender keeps sending while the receiver works through one)',
            },
            'rto-min-ms': {
              type: 'number',
              above: 0,
              default: 5,
              doc: 'smallest retransmission timeout (a scheduling stall of a few ms must not look like a loss: SACKs repair real losses sooner)',
            },
            'rto-max-ms': {
              type: 'number',
              above: 0,
              default: 200,
              doc: 'largest retransmission timeout, >= rto-min-ms',
            },
            'rto-init-ms': {
              type: 'number',
              above: 0,
              nullable: true,
              doc: 'timeout before the first RTT sample, in rto-min-ms..rto-max-ms (null: max(rto-min-ms, 10))',
            },
            'max-retries': {
              type: 'int',
              min: 0,
              max: 255,
              default: 7,
              doc: 'retransmissions of one segment before the QP fails',
            },
            'ack-delay-us': {
              type: 'int',
              min: 0,
              max: 1000000,
              default: 100,
              doc: "how long the ACK of a lone data packet received in order waits for data going back (a reply, a Read's response) to carry it, in µs, below rto-min-ms; two packets in a row, or any out of order, are acknowledged at once. A request/response exchange then sends no pure ACKs (half the packets each data plane handles); a sender waiting on a lone message with nothing coming back completes up to this much later. 0: every pass that takes data acknowledges it",
            },
          },
        },
      },
    },
    capture: {
      type: 'map',
      doc: 'pcap captures the API starts (POST /v1/interfaces/{name}/capture)',
      keys: {
        dir: {
          type: 'string',
          default: 'run/captures',
          doc: "the directory capture files are created in (made at the first capture, mode 0700; a symlink is refused; relative: against the daemon's working directory); the API names files in it",
        },
        'max-bytes': {
          type: 'int',
          min: 4096,
          max: 2 ** 40,
          default: 64 * 2 ** 20,
          doc: 'largest capture file: the capture of that direction stops there (64 MiB)',
        },
      },
    },
    verbs: {
      type: 'map',
      doc: 'the verbs control socket: unmodified libibverbs programs run with `rdma-graph exec` reach the daemon through it',
      keys: {
        socket: {
          type: 'string',
          nullable: true,
          doc: 'its path (mode 0660 from the moment it exists; relative: against the daemon\'s working directory), or "@name" in the abstract namespace; null: run/verbs-PORT.sock, PORT the API\'s port (with api.listen port 0, the port it got), so that daemons with different API ports never share one',
        },
        'max-connections': {
          type: 'int',
          min: 1,
          max: 65536,
          default: 256,
          doc: 'connections served at once, every program together (with cpu.workers: the whole daemon); more are refused with EUSERS and the reason',
        },
        'max-connections-per-uid': {
          type: 'int',
          min: 1,
          max: 65536,
          default: 64,
          doc: "connections of one user at once (the peer's uid, SO_PEERCRED); more are refused with EUSERS and the reason",
        },
        'max-connections-per-pid': {
          type: 'int',
          min: 1,
          max: 65536,
          default: 16,
          doc: 'connections of one process at once (its device-list query and each device it opened); more are refused with EMFILE and the reason',
        },
        'max-fds-per-connection': {
          type: 'int',
          min: 2,
          max: 1024,
          default: 32,
          doc: 'fds one connection may leave with the daemon (its doorbell, async fd and completion channels); more are refused with EMFILE',
        },
        'warm-up': {
          type: 'int',
          min: 0,
          max: 100000,
          default: 2000,
          doc: "rounds of warm-up traffic `rdma-graph start` sends through the verbs socket before it announces the API (a program of its own, on loopback QPs of the first device, with cpu.workers of a device on each worker, whose PSNs start above 2^31 and wrap: SENDs, each 4th round a UD datagram, each 8th round a WRITE, READ, WRITE with immediate and atomic; in two sessions, the first short, each with QPs of its own that it then destroys, so that the code compiled in the second has seen a QP torn down; 2 s at most each): V8 then has compiled the data path before the first job, whose round trips otherwise take several times longer at first (an MPI job's 8 B latency 180-320 us instead of ~30 on the 2-core VM). 0: none",
        },
        'wire-warm-up': {
          type: 'int',
          min: 0,
          max: 100000,
          default: 1000,
          doc: "rounds of verbs traffic `rdma-graph start` runs before it announces the API between two data planes of its own in this process, joined by a memif link of their own (sockets in a private directory): verbs-warm-up's pair mode on each, one driving and one answering (SENDs, each 8th round WRITEs, READs, a WRITE with immediate, a fetch-and-add and a 4 KiB SEND, each 4th a UD datagram; 1.5 s at most). The code only frames on a link run (the drivers' bursts, device-input, ip4-rewrite's route to a neighbour, the input nodes' branches for a peer's frames), which the loopback warm-up (warm-up) never reaches, is then compiled before the first job, whose first ~2000 round trips over a link otherwise take two to four times as long, with pauses of a millisecond (dataplane/wire-warm-up.ts). Skipped with cpu.workers (each worker is an isolate of its own) or without the verbs library. 0: none",
        },
      },
    },
    trace: {
      type: 'map',
      doc: 'packet trace',
      keys: { 'max-packets': { type: 'int', min: 1, max: 1000000, default: 1000, doc: 'most packets a trace holds' } },
    },
  },
};

// ------------------------------------------------------------------ reference

function yamlText(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(yamlText).join(', ')}]`;
  return v === null ? 'null' : typeof v === 'object' ? JSON.stringify(v) : String(v as string | number | boolean);
}

function defaultText(s: Spec): string {
  if (s.required) return 'required';
  if (s.default !== undefined) return `\`${yamlText(s.default)}\``;
  if (s.nullable) return '`null`';
  return s.type === 'map' && s.omit ? '—' : '';
}

/** The Type column: what is expected, but a mapping's keys are the rows below it. */
function typeText(s: Spec): string {
  const t = s.type === 'map' ? 'a mapping' : expected(s);
  return s.nullable ? `null or ${t}` : t;
}

function cell(s: string): string {
  return s.replace(/\|/g, '\\|');
}

/**
 * The key reference of config/README.md, one row per key, as a markdown table. The README holds
 * it between its GENERATED markers; `node --import tsx config/update-readme.ts` rewrites that
 * part and test/config.test.ts fails when it is not current.
 */
export function schemaReference(): string {
  const rows = ['| Key | Type | Default | Description |', '|---|---|---|---|'];
  const walk = (spec: MapSpec, prefix: string) => {
    for (const [key, s] of Object.entries(spec.keys)) {
      const path = prefix + key;
      rows.push(`| \`${path}\` | ${cell(typeText(s))} | ${defaultText(s)} | ${cell(s.doc)} |`);
      if (s.type === 'map') walk(s, `${path}.`);
      if (s.type === 'list' && s.items.type === 'map') walk(s.items, `${path}[].`);
    }
  };
  walk(SCHEMA, '');
  return rows.join('\n') + '\n';
}
