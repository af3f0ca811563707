/**
 * Load and validate the start-up YAML (config/README.md; the keys are in config/schema.ts).
 *
 *   const cfg = loadConfig('config/startup.yaml');   // or parseConfig(text, 'name.yaml')
 *
 * Everything wrong is reported at once: a `ConfigError` carries one `ConfigIssue` per problem,
 * sorted by position, and its message has one line per issue:
 *
 *   config/startup.yaml:7:11: interfaces[0].mtu: 100000 is out of range (expected an integer in 68..65535)
 *
 * The position is the offending value; for an unknown key the key itself; for a missing key the
 * mapping that lacks it. A YAML syntax error stops there (the document is not checked further,
 * its structure is a guess). Relative paths (memif sockets, pcap files) are kept as written:
 * the daemon resolves them against its working directory.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { validateFaultConfig } from '../drivers/fault.ts';
import {
  inSubnet,
  notAHost,
  parseIp4,
  parseIp4Prefix,
  parseListen,
  rdmaDeviceName,
  subnetText,
  type Ip4Prefix,
} from './formats.ts';
import { camel, expected, expectedOrNull, parseCoreList, SCHEMA, type MapSpec, type Spec } from './schema.ts';
import { DRIVER_KINDS, type Config, type InterfaceConfig } from './types.ts';

/** The embedded default configuration file (absolute path, found from the package wherever the process runs). */
export const STARTUP_CONFIG = fileURLToPath(new URL('./startup.yaml', import.meta.url));

export interface ConfigIssue {
  /** Key path, e.g. "interfaces[0].memif.role"; "" for the file or the document as a whole. */
  path: string;
  /** 1-based; 0 when the file could not be read. */
  line: number;
  column: number;
  /** What is wrong, then "(expected ...)". */
  message: string;
}

export class ConfigError extends Error {
  readonly source: string;
  readonly issues: ConfigIssue[];
  constructor(source: string, issues: ConfigIssue[]) {
    super(issues.map((i) => formatIssue(source, i)).join('\n'));
    this.name = 'ConfigError';
    this.source = source;
    this.issues = issues;
  }
}

/** "FILE:LINE:COL: PATH: WHAT (expected ...)". */
export function formatIssue(source: string, i: ConfigIssue): string {
  const at = i.line > 0 ? `${source}:${i.line}:${i.column}` : source;
  return `${at}: ${i.path === '' ? '' : `${i.path}: `}${i.message}`;
}

/**
 * The verbs socket of a daemon of `config` whose API listens on `apiPort` (the configured port;
 * the one it got when that is 0): `verbs.socket`, else `run/verbs-PORT.sock`, so that two
 * daemons with different API ports never share one. null: derived from a port not known yet (0).
 */
export function verbsSocketPath(config: Config, apiPort: number = config.api.port): string | null {
  if (config.verbs.socket !== null) return config.verbs.socket;
  return apiPort === 0 ? null : `run/verbs-${apiPort}.sock`;
}

/** Read and check a start-up file (the embedded default when no path is given). Throws ConfigError. */
export function loadConfig(path: string = STARTUP_CONFIG): Config {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError(path, [
      { path: '', line: 0, column: 0, message: `cannot read the configuration file: ${(e as Error).message}` },
    ]);
  }
  return parseConfig(text, path);
}

/** Check configuration text; `source` names it in messages and in `Config.source`. Throws ConfigError. */
export function parseConfig(text: string, source = '<string>'): Config {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false });
  const c = new Checker(doc, lineCounter);
  const yamlProblems = [
    ...doc.errors.map((e) => ({ e, what: 'YAML syntax error' })),
    ...doc.warnings.map((e) => ({ e, what: 'YAML' })),
  ];
  for (const { e, what } of yamlProblems) c.report('', c.offsetPos(e.pos[0]), `${what}: ${e.message}`);
  if (c.issues.length > 0) throw c.error(source);

  const root = c.resolve(doc.contents);
  let raw: Raw | undefined;
  if (root === null || (isScalar(root) && root.value === null)) {
    raw = c.map(null, SCHEMA, '', { line: 1, column: 1 });
  } else if (!isMap(root)) {
    c.report('', c.pos(root), `the top level is ${describe(root)}`, expected(SCHEMA));
  } else {
    raw = c.map(root, SCHEMA, '', c.pos(root));
  }
  if (raw !== undefined) crossCheck(raw, c);
  if (c.issues.length > 0 || raw === undefined) throw c.error(source);
  return build(raw, source, c);
}

// ------------------------------------------------------------------ walking the document

type Raw = Record<string, unknown>;
type YNode = Document['contents'] | undefined;
interface Pos {
  line: number;
  column: number;
}

const isRecord = (v: unknown): v is Raw => typeof v === 'object' && v !== null && !Array.isArray(v);
const q = (s: string) => JSON.stringify(s);

/** "a list", "the string \"x\"", ...: a value that is not what was expected. */
function describe(node: YNode): string {
  if (isMap(node)) return 'a mapping';
  if (isSeq(node)) return 'a list';
  if (!isScalar(node) || node.value === null) return 'no value';
  const v = node.value;
  if (typeof v === 'string') return `the string ${q(v)}`;
  if (typeof v === 'number') return `the number ${v}`;
  if (typeof v === 'boolean') return `the boolean ${v}`;
  return `the value ${typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v as string | undefined)}`;
}

/** Walks the document along the schema: collects issues, remembers where each path is. */
class Checker {
  readonly issues: ConfigIssue[] = [];
  /** Where the value of each path is (for a key with no value: the key). */
  readonly at = new Map<string, Pos>();
  /** Where each key that is present is. */
  readonly keyAt = new Map<string, Pos>();

  constructor(
    private readonly doc: Document,
    private readonly lines: LineCounter,
  ) {}

  offsetPos(offset: number): Pos {
    const { line, col } = this.lines.linePos(offset);
    return { line, column: col };
  }

  pos(node: YNode): Pos {
    return this.offsetPos(node?.range?.[0] ?? 0);
  }

  resolve(node: unknown): YNode {
    if (isAlias(node)) return node.resolve(this.doc) as YNode;
    return node as YNode;
  }

  report(path: string, pos: Pos, what: string, expect?: string): void {
    this.issues.push({
      path,
      line: pos.line,
      column: pos.column,
      message: expect === undefined ? what : `${what} (expected ${expect})`,
    });
  }

  /** Where `path` is (its value, else its mapping, else the top). */
  where(path: string): Pos {
    return this.at.get(path) ?? { line: 1, column: 1 };
  }

  error(source: string): ConfigError {
    const sorted = this.issues
      .map((i, k) => ({ i, k }))
      .sort((a, b) => a.i.line - b.i.line || a.i.column - b.i.column || a.k - b.k);
    return new ConfigError(
      source,
      sorted.map((x) => x.i),
    );
  }

  /** The checked value at `path`, defaults filled; undefined when it is wrong (an issue was reported). */
  value(n: unknown, s: Spec, path: string, pos: Pos): unknown {
    this.at.set(path, pos);
    const node = this.resolve(n);
    if (node === null || node === undefined || (isScalar(node) && node.value === null)) {
      if (s.nullable) return null;
      if (s.type === 'map') return this.map(null, s, path, pos);
      if (s.type === 'list') return [];
      return this.wrong(node, s, path, pos);
    }
    switch (s.type) {
      case 'map':
        return isMap(node) ? this.map(node, s, path, pos) : this.wrong(node, s, path, pos);
      case 'list':
      case 'tuple': {
        if (!isSeq(node)) return this.wrong(node, s, path, pos);
        if (s.type === 'tuple' && node.items.length !== s.items.length) {
          this.report(
            path,
            pos,
            `got a list of ${node.items.length} item${node.items.length === 1 ? '' : 's'}`,
            expectedOrNull(s),
          );
          return undefined;
        }
        // A wrong item is undefined in the list (and reported); the rest are still checked.
        return node.items.map((item, k) =>
          this.value(item, s.type === 'list' ? s.items : s.items[k], `${path}[${k}]`, this.pos(item as YNode)),
        );
      }
    }
    if (!isScalar(node)) return this.wrong(node, s, path, pos);
    const v = node.value;
    const fail = (what: string) => {
      this.report(path, pos, what, expected(s));
      return undefined;
    };
    switch (s.type) {
      case 'int':
      case 'number': {
        if (typeof v !== 'number') return this.wrong(node, s, path, pos);
        if (!Number.isFinite(v)) return fail(`${v} is not a finite number`);
        if (s.type === 'int' && !Number.isInteger(v)) return fail(`${v} is not an integer`);
        const low = s.type === 'number' && s.above !== undefined ? v <= s.above : s.min !== undefined && v < s.min;
        if (low || (s.max !== undefined && v > s.max)) return fail(`${v} is out of range`);
        if (s.type === 'int' && s.pow2 && (v & (v - 1)) !== 0) return fail(`${v} is not a power of 2`);
        if (s.type === 'int' && s.multipleOf !== undefined && v % s.multipleOf !== 0)
          return fail(`${v} is not a multiple of ${s.multipleOf}`);
        break;
      }
      case 'bool':
        if (typeof v !== 'boolean') return this.wrong(node, s, path, pos);
        break;
      case 'enum':
        if (typeof v !== 'string') return this.wrong(node, s, path, pos);
        if (!s.values.includes(v)) return fail(`${q(v)} is not a valid choice`);
        break;
      case 'string':
        if (typeof v !== 'string') return this.wrong(node, s, path, pos);
        if (v === '') return fail('"" is empty');
        if (s.maxLength !== undefined && v.length > s.maxLength) return fail(`${q(v)} is ${v.length} characters long`);
        break;
    }
    const bad = (s.check as ((v: unknown) => string | undefined) | undefined)?.(v);
    return bad === undefined ? v : fail(bad);
  }

  private wrong(node: YNode, s: Spec, path: string, pos: Pos): undefined {
    this.report(path, pos, `got ${describe(node)}`, expectedOrNull(s));
    return undefined;
  }

  /** A mapping (null: an empty one at `pos`): its keys checked, the absent ones defaulted. */
  map(node: YNode, s: MapSpec, path: string, pos: Pos): Raw {
    const out: Raw = {};
    const names = Object.keys(s.keys);
    const seen = new Set<string>();
    const child = (key: string) => (path === '' ? key : `${path}.${key}`);
    for (const pair of isMap(node) ? node.items : []) {
      const keyNode = this.resolve(pair.key);
      const kpos = this.pos(keyNode ?? node);
      if (!isScalar(keyNode)) {
        this.report(path, kpos, `got ${describe(keyNode)} as a key`, `one of: ${names.join(', ')}`);
        continue;
      }
      const key = String(keyNode.value);
      const ks = Object.hasOwn(s.keys, key) ? s.keys[key] : undefined;
      if (ks === undefined) {
        this.report(child(key), kpos, `unknown key ${q(key)}`, `one of: ${names.join(', ')}`);
        continue;
      }
      seen.add(key);
      this.keyAt.set(child(key), kpos);
      const vnode = pair.value as YNode;
      // `key:` with nothing after it: point at the key. (An alias: where it is used.)
      const empty = vnode === null || vnode === undefined || (vnode.range != null && vnode.range[0] === vnode.range[1]);
      const v = this.value(vnode, ks, child(key), empty ? kpos : this.pos(vnode));
      if (v !== undefined) out[camel(key)] = v;
    }
    for (const key of names) {
      if (seen.has(key)) continue;
      const ks = s.keys[key];
      if (ks.required) this.report(child(key), pos, 'missing', expectedOrNull(ks));
      else if (ks.default !== undefined) out[camel(key)] = structuredClone(ks.default);
      else if (ks.nullable) out[camel(key)] = null;
      else if (ks.type === 'map' && !ks.omit) out[camel(key)] = this.map(null, ks, child(key), pos);
    }
    return out;
  }
}

// ------------------------------------------------------------------ checks across keys

const INTERFACE_SPEC = (SCHEMA.keys.interfaces as { items: MapSpec }).items;

/**
 * Checks that relate keys to each other, on what the walk found valid (a value it rejected is
 * undefined here and not looked at again).
 */
function crossCheck(raw: Raw, c: Checker): void {
  const ifs = Array.isArray(raw.interfaces) ? raw.interfaces : [];
  const byName = new Map<string, { k: number; itf: Raw }>();
  const byDevice = new Map<string, number>();

  ifs.forEach((itf: unknown, k) => {
    if (!isRecord(itf)) return;
    const p = `interfaces[${k}]`;
    const name = typeof itf.name === 'string' ? itf.name : undefined;
    if (name !== undefined) {
      const prev = byName.get(name);
      if (prev !== undefined)
        c.report(
          `${p}.name`,
          c.where(`${p}.name`),
          `${q(name)} is already the name of interfaces[${prev.k}]`,
          'a unique name',
        );
      else byName.set(name, { k, itf });
      // Two long names may hash to one RDMA device name (rdmaDeviceName): 2^-20, refused here.
      const dev = rdmaDeviceName(name);
      const other = byDevice.get(dev);
      if (prev === undefined && other !== undefined)
        c.report(
          `${p}.name`,
          c.where(`${p}.name`),
          `${q(name)} gets the RDMA device name ${dev}, as interfaces[${other}] does`,
          'another name (its first 6 characters, or one of 12 characters or fewer)',
        );
      else byDevice.set(dev, k);
    }
    const driver = typeof itf.driver === 'string' ? itf.driver : undefined;
    if (driver !== undefined) {
      for (const d of DRIVER_KINDS) {
        const present = c.keyAt.get(`${p}.${d}`);
        if (d === driver && present === undefined) {
          c.report(
            `${p}.${d}`,
            c.where(p),
            `missing, driver ${d} takes its options here`,
            expected(INTERFACE_SPEC.keys[d]),
          );
        } else if (d !== driver && present !== undefined) {
          c.report(`${p}.${d}`, present, `${d} options on a ${driver} interface`, `only the ${driver} key`);
        }
      }
    }
    if (isRecord(itf.fault)) {
      // The schema has fault.ts's ranges; this keeps them from parting silently.
      const { direction: _, ...settings } = itf.fault;
      try {
        validateFaultConfig(settings, `${p}.fault`);
      } catch (e) {
        c.report(`${p}.fault`, c.where(`${p}.fault`), (e as Error).message);
      }
    }
    if (
      driver === 'af_packet' &&
      isRecord(itf.afPacket) &&
      itf.afPacket.rxRing === 'v2' &&
      itf.afPacket.txMode === 'ring'
    ) {
      c.report(
        `${p}.af_packet.rx-ring`,
        c.where(`${p}.af_packet.rx-ring`),
        "rx-ring v2 with tx-mode ring (the tx ring is TPACKET_V3's: one socket has one version)",
        'tx-mode: sendmmsg with rx-ring: v2',
      );
    }
    if (
      driver === 'af_packet' &&
      isRecord(itf.afPacket) &&
      itf.afPacket.gso === true &&
      (itf.afPacket.rxRing === 'v3' || itf.afPacket.txMode === 'ring')
    ) {
      c.report(
        `${p}.af_packet.gso`,
        c.where(`${p}.af_packet.gso`),
        'gso with rx-ring v3 or tx-mode ring (the virtio_net_hdr goes with TPACKET_V2 slots and sendmmsg)',
        'gso: true with rx-ring auto or v2 and tx-mode sendmmsg',
      );
    }
    for (const d of ['ibverbs', 'mlx5dv'] as const) {
      const o = itf[d];
      if (driver !== d || !isRecord(o)) continue;
      if ((o.device ?? null) === null && (o.hostInterface ?? null) === null)
        c.report(`${p}.${d}`, c.where(`${p}.${d}`), 'names no device', 'device: mlx5_0 or host-interface: enp59s0f0');
      else if ((o.device ?? null) !== null && (o.hostInterface ?? null) !== null)
        c.report(
          `${p}.${d}.host-interface`,
          c.where(`${p}.${d}.host-interface`),
          'given with device: one names the device',
          'device or host-interface, not both',
        );
    }
    if (driver === 'pcap' && isRecord(itf.pcap) && itf.pcap.rxFile === null && itf.pcap.txFile === null) {
      c.report(`${p}.pcap`, c.where(`${p}.pcap`), 'neither rx-file nor tx-file is set', 'at least one of them');
    }
    if (typeof itf.gateway === 'string') {
      if (itf.address === null) {
        c.report(
          `${p}.gateway`,
          c.where(`${p}.gateway`),
          `${q(itf.gateway)} needs an address on this interface`,
          'address: a.b.c.d/N on the interface',
        );
      } else if (typeof itf.address === 'string') {
        checkHost(c, `${p}.gateway`, itf.gateway, name ?? p, parseIp4Prefix(itf.address)!);
      }
    }
  });

  ifs.forEach((itf: unknown, k) => {
    if (!isRecord(itf) || itf.driver !== 'pipe' || !isRecord(itf.pipe) || typeof itf.pipe.peer !== 'string') return;
    const path = `interfaces[${k}].pipe.peer`;
    const peer = itf.pipe.peer;
    if (peer === itf.name) {
      c.report(path, c.where(path), `${q(peer)} is this interface itself`, 'the name of the other end');
      return;
    }
    const other = byName.get(peer)?.itf;
    if (other === undefined || typeof other.driver !== 'string') return;
    if (other.driver !== 'pipe') {
      c.report(
        path,
        c.where(path),
        `${q(peer)} is a ${other.driver} interface`,
        'a pipe interface in this file, or a name not in this file',
      );
    } else if (
      isRecord(other.pipe) &&
      typeof other.pipe.peer === 'string' &&
      typeof itf.name === 'string' &&
      other.pipe.peer !== itf.name
    ) {
      c.report(
        path,
        c.where(path),
        `${q(peer)} is a pipe whose peer is ${q(other.pipe.peer)}`,
        `a pipe whose peer is ${q(itf.name)}`,
      );
    }
  });

  const seen = new Map<string, number>();
  const names = [...byName.keys()];
  (Array.isArray(raw.neighbors) ? raw.neighbors : []).forEach((n: unknown, k) => {
    if (!isRecord(n)) return;
    const p = `neighbors[${k}]`;
    const ifName = typeof n.interface === 'string' ? n.interface : undefined;
    let subnet: Ip4Prefix | null = null;
    if (ifName !== undefined) {
      const itf = byName.get(ifName)?.itf;
      if (itf === undefined) {
        c.report(
          `${p}.interface`,
          c.where(`${p}.interface`),
          `${q(ifName)} is not a configured interface`,
          names.length > 0 ? `one of: ${names.join(', ')}` : 'an interface of interfaces:, there are none',
        );
      } else if (itf.address === null) {
        c.report(
          `${p}.interface`,
          c.where(`${p}.interface`),
          `${q(ifName)} has no IPv4 address`,
          'an interface with address: a.b.c.d/N',
        );
      } else if (typeof itf.address === 'string') {
        subnet = parseIp4Prefix(itf.address);
      }
    }
    if (typeof n.address !== 'string' || ifName === undefined) return;
    if (subnet !== null) checkHost(c, `${p}.address`, n.address, ifName, subnet);
    const key = `${ifName} ${n.address}`;
    const prev = seen.get(key);
    if (prev !== undefined)
      c.report(
        p,
        c.where(p),
        `${ifName} ${n.address} is already in neighbors[${prev}]`,
        'one entry per interface and address',
      );
    else seen.set(key, k);
  });

  const cpu = isRecord(raw.cpu) ? raw.cpu : {};
  const workers = typeof cpu.workers === 'number' ? cpu.workers : 0;
  if (typeof cpu.corelistWorkers === 'string') {
    const cores = parseCoreList(cpu.corelistWorkers);
    if (Array.isArray(cores) && cores.length !== workers)
      c.report(
        'cpu.corelist-workers',
        c.where('cpu.corelist-workers'),
        `names ${cores.length} CPU${cores.length === 1 ? '' : 's'} for ${workers} worker${workers === 1 ? '' : 's'}`,
        `${workers} CPU${workers === 1 ? '' : 's'} (one per worker)`,
      );
  }
  ifs.forEach((itf: unknown, k) => {
    if (!isRecord(itf) || !Array.isArray(itf.rxPlacement)) return;
    const at = `interfaces[${k}].rx-placement`;
    const place = itf.rxPlacement as number[];
    const queues = typeof itf.rxQueues === 'number' ? itf.rxQueues : 1;
    if (place.length !== queues)
      c.report(
        at,
        c.where(at),
        `names ${place.length} worker${place.length === 1 ? '' : 's'} for ${queues} rx queue${queues === 1 ? '' : 's'}`,
        'one worker per rx queue',
      );
    const bad = place.find((w) => w >= workers);
    if (bad !== undefined)
      c.report(
        at,
        c.where(at),
        workers === 0
          ? `worker ${bad} with cpu.workers 0 (no worker threads)`
          : `worker ${bad} but cpu.workers is ${workers}`,
        workers === 0 ? 'cpu.workers >= 2, or no rx-placement' : `workers 0..${workers - 1}`,
      );
    if (typeof itf.worker === 'number' && place.length > 0 && place[0] !== itf.worker)
      c.report(
        at,
        c.where(at),
        `puts queue 0 on worker ${place[0]} but worker is ${itf.worker}`,
        "queue 0 on the interface's worker (it runs the control channel)",
      );
    if (itf.driver !== 'memif' && itf.driver !== 'af_packet' && place.some((w) => w !== place[0]))
      c.report(
        at,
        c.where(at),
        `spreads the queues of this ${String(itf.driver)} interface over workers`,
        'one worker for all its queues (only memif and af_packet interfaces can be received by several workers)',
      );
    if (itf.driver === 'af_packet' && new Set(place).size !== place.length)
      c.report(
        at,
        c.where(at),
        `names a worker twice`,
        "distinct workers: each af_packet queue is one worker's socket",
      );
  });
  // af_packet: each rx queue is one worker's socket (its share picked by UDP port).
  ifs.forEach((itf: unknown, k) => {
    if (!isRecord(itf) || itf.driver !== 'af_packet' || typeof itf.rxQueues !== 'number' || itf.rxQueues <= 1) return;
    if (itf.rxQueues > Math.max(workers, 1))
      c.report(
        `interfaces[${k}].rx-queues`,
        c.where(`interfaces[${k}].rx-queues`),
        `${itf.rxQueues} on an af_packet interface with cpu.workers ${workers}`,
        "at most one queue per worker (each is one worker's socket, taking its QP numbers by UDP port)",
      );
  });
  ifs.forEach((itf: unknown, k) => {
    if (!isRecord(itf) || typeof itf.worker !== 'number') return;
    if (itf.worker >= workers)
      c.report(
        `interfaces[${k}].worker`,
        c.where(`interfaces[${k}].worker`),
        workers === 0
          ? `${itf.worker} with cpu.workers 0 (no worker threads)`
          : `${itf.worker} but cpu.workers is ${workers}`,
        workers === 0 ? 'cpu.workers >= 1, or no worker key' : `a worker 0..${workers - 1}`,
      );
  });

  const api = isRecord(raw.api) ? raw.api : {};
  const listen = typeof api.listen === 'string' ? parseListen(api.listen) : undefined;
  if (typeof listen === 'object' && !isLoopbackHost(listen.host) && api.token === null) {
    c.report(
      'api.listen',
      c.where('api.listen'),
      `${q(api.listen as string)} is not a loopback address and api.token is not set: anyone who can reach it would control the data plane`,
      'a loopback address (127.0.0.1, [::1], localhost), or api.token set',
    );
  }

  const rdma = isRecord(raw.rdma) ? raw.rdma : {};
  const range = rdma.portRange;
  if (Array.isArray(range) && range[0] > range[1]) {
    c.report('rdma.port-range', c.where('rdma.port-range'), `[${range[0]}, ${range[1]}] has lo > hi`, 'lo <= hi');
  }
  const mcPort = typeof rdma.multicastPort === 'number' ? rdma.multicastPort : 19999;
  const [lo, hi] = Array.isArray(range) ? (range as number[]) : [20000, 29999];
  if (mcPort >= lo && mcPort <= hi)
    c.report(
      'rdma.multicast-port',
      c.at.get('rdma.multicast-port') ?? c.where('rdma.port-range'),
      `${mcPort} is inside port-range [${lo}, ${hi}] (a QP could take it)`,
      'a port outside rdma.port-range',
    );
  const trp = isRecord(rdma.trp) ? rdma.trp : {};
  const { rtoMinMs: min, rtoMaxMs: max, rtoInitMs: init, ackDelayUs: delay } = trp;
  const minMs = typeof min === 'number' ? min : 5;
  if (typeof delay === 'number' && delay / 1000 >= minMs)
    c.report(
      'rdma.trp.ack-delay-us',
      c.where('rdma.trp.ack-delay-us'),
      `${delay} us is not below rto-min-ms ${minMs} (the peer would time out waiting for the ACK)`,
      'an integer of µs below rto-min-ms',
    );
  if (typeof min === 'number' && typeof max === 'number' && max < min) {
    c.report(
      'rdma.trp.rto-max-ms',
      c.where('rdma.trp.rto-max-ms'),
      `${max} is less than rto-min-ms ${min}`,
      'a number >= rto-min-ms',
    );
  }
  if (typeof init === 'number') {
    const where = c.where('rdma.trp.rto-init-ms');
    if (typeof min === 'number' && init < min)
      c.report(
        'rdma.trp.rto-init-ms',
        where,
        `${init} is less than rto-min-ms ${min}`,
        'a number in rto-min-ms..rto-max-ms',
      );
    else if (typeof max === 'number' && init > max)
      c.report(
        'rdma.trp.rto-init-ms',
        where,
        `${init} is more than rto-max-ms ${max}`,
        'a number in rto-min-ms..rto-max-ms',
      );
  }
}

/** Only this machine reaches it: 127.0.0.0/8, ::1, localhost (a host parseListen accepted). */
function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}

/** `text` (a valid IPv4 address) as another host of interface `ifName`'s subnet. */
function checkHost(c: Checker, path: string, text: string, ifName: string, subnet: Ip4Prefix): void {
  const addr = parseIp4(text)!;
  const net = subnetText(subnet);
  const pos = c.where(path);
  if (!inSubnet(subnet, addr))
    return c.report(path, pos, `${q(text)} is outside ${ifName}'s subnet ${net}`, `an address in ${net}`);
  if (addr === subnet.addr)
    return c.report(path, pos, `${q(text)} is ${ifName}'s own address`, `another host in ${net}`);
  const why = notAHost(subnet, addr);
  if (why !== undefined) c.report(path, pos, `${q(text)} is ${why}`, `a host address in ${net}`);
}

// ------------------------------------------------------------------ the Config

function build(raw: Raw, source: string, c: Checker): Config {
  const api = raw.api as { listen: string; token: string | null; users: string[]; group: string | null };
  const { host, port } = parseListen(api.listen) as { host: string; port: number };
  const interfaces = (raw.interfaces as Raw[]).map((itf, k): InterfaceConfig => {
    const { fault, mac, ...rest } = itf;
    let f: InterfaceConfig['fault'] = null;
    if (isRecord(fault)) {
      const { direction, ...settings } = fault;
      f = {
        direction: direction as 'rx' | 'tx' | 'both',
        config: validateFaultConfig(settings, `interfaces[${k}].fault`),
      };
    }
    const line = c.where(`interfaces[${k}]`).line;
    return {
      ...(rest as Omit<InterfaceConfig, 'fault' | 'mac' | 'line'>),
      mac: typeof mac === 'string' ? mac.toLowerCase() : null,
      fault: f,
      line,
    };
  });
  const neighbors = (raw.neighbors as Config['neighbors']).map((n) => ({ ...n, mac: n.mac.toLowerCase() }));
  return {
    source,
    api: { host, port, token: api.token, users: api.users, group: api.group },
    cpu: raw.cpu as Config['cpu'],
    buffers: raw.buffers as Config['buffers'],
    log: raw.log as Config['log'],
    interfaces,
    neighbors,
    rdma: raw.rdma as Config['rdma'],
    capture: raw.capture as Config['capture'],
    verbs: raw.verbs as Config['verbs'],
    trace: raw.trace as Config['trace'],
  };
}
