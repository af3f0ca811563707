/**
 * rdmactl's `show` commands: VPP's (runtime, errors, interfaces, hardware, buffers, memif,
 * ip neighbors, trace, version) and rdma-core's (`show device`, as `ibv_devinfo -v` prints a
 * device), plus the verbs objects. Words may be cut to a unique prefix (`sh int`, `sh hard`).
 */
import {
  formatErrors,
  formatRuntime,
  formatTrace,
  vppFormat,
  type ErrorThreadSnapshot,
  type RuntimeThreadSnapshot,
  type TraceThreadSnapshot,
} from '../graph/format.ts';
import type {
  BufferView,
  CqView,
  DeviceView,
  EventView,
  HardwareView,
  HealthView,
  InterfaceView,
  ListenerView,
  MrView,
  NeighborView,
  PdView,
  QpView,
  RxPlacementView,
  SrqView,
  ThreadView,
  VersionView,
} from '../dataplane/views.ts';
import {
  formatInterfaceAddresses,
  formatInterfaces,
  formatListeners,
  formatNeighbors,
  formatQp,
  formatQps,
  formatRxPlacement,
} from './render.ts';
import { Args, intOpt, resolveWord, UsageError } from './rdmactl-args.ts';

/** Accepted words (aliases included) of `show`, to their canonical object. */
export const SHOW_OBJECTS: Record<string, string> = {
  runtime: 'runtime',
  errors: 'errors',
  interfaces: 'interfaces',
  interface: 'interfaces',
  hardware: 'hardware',
  'hardware-interfaces': 'hardware',
  buffers: 'buffers',
  memif: 'memif',
  neighbors: 'neighbors',
  neighbours: 'neighbors',
  ip: 'ip',
  trace: 'trace',
  qps: 'qps',
  qp: 'qp',
  listeners: 'listeners',
  mrs: 'mrs',
  cqs: 'cqs',
  srqs: 'srqs',
  pds: 'pds',
  events: 'events',
  health: 'health',
  version: 'version',
  device: 'device',
  devices: 'device',
  threads: 'threads',
};

/** `show threads`, in the columns of VPP's (threads_cli.c): an unpinned thread's lcore, core and socket are n/a. */
export function formatThreads(v: ThreadView[]): string {
  const lines = [
    vppFormat(
      '%-7s%-20s%-12s%-8s%-25s%-7s%-7s%-7s%-10s',
      'ID',
      'Name',
      'Type',
      'LWP',
      'Sched Policy (Priority)',
      'lcore',
      'Core',
      'Socket',
      'State',
    ),
  ];
  for (const t of v) {
    const at = (n: number | null) => (n === null ? 'n/a' : String(n));
    lines.push(
      vppFormat('%-7d%-20s%-12s%-8d', t.index, t.name, t.type, t.lwp) +
        vppFormat('%-25s', `${t.policy} (${t.priority})`) +
        vppFormat(
          '%-7s%-7s%-7s',
          at(t.lcore),
          at(t.lcore === null ? null : t.core),
          at(t.lcore === null ? null : t.socket),
        ),
    );
  }
  return lines.map((l) => l.trimEnd() + '\n').join('');
}

/** `show hardware`: VPP's header and generic lines, then what the driver says (non-zero counters only). */
export function formatHardware(v: HardwareView[]): string {
  const lines = [vppFormat('%=32s%=6s%=8s%s', 'Name', 'Idx', 'Link', 'Hardware')];
  for (const h of v) {
    lines.push(vppFormat('%-32s%=6u%=8s%s', h.name, h.index, h.state, h.name));
    lines.push(
      `  ${h.driver}: ${h.rxQueues} rx queue${h.rxQueues === 1 ? '' : 's'}, ${h.txQueues} tx queue${h.txQueues === 1 ? '' : 's'}, MTU ${h.mtu}`,
    );
    lines.push(`  Ethernet address ${h.mac}`);
    for (const [k, val] of Object.entries(h.info)) if (val !== null) lines.push(`  ${k}: ${val}`);
    const counters = Object.entries(h.counters).filter(([, n]) => n !== 0);
    if (counters.length > 0) {
      lines.push('  counters:');
      for (const [k, n] of counters) lines.push(vppFormat('    %-28s%16lu', k, n));
    }
  }
  return lines.map((l) => l + '\n').join('');
}

/** `show memif`: the memif interfaces only, in the words of VPP's `show memif`. */
export function formatMemif(v: HardwareView[]): string {
  const m = v.filter((h) => h.driver === 'memif');
  if (m.length === 0) return 'no memif interfaces\n';
  return m
    .map((h) => {
      const i = h.info;
      const lines = [
        `interface ${h.name}`,
        `  role ${i.role ?? '-'} id ${i.id ?? '-'} socket ${i.socket ?? '-'}`,
        `  state ${i.state ?? '-'} link ${h.state} zero-copy ${i['zero-copy'] ?? '-'}`,
      ];
      if (i.peer) lines.push(`  remote ${i.peer}`);
      lines.push(`  rings ${i.rings ?? '-'}, regions ${i.regions ?? '-'}, buffer-size ${i['buffer-size'] ?? '-'}`);
      if (i['last disconnect']) lines.push(`  last disconnect: ${i['last disconnect']}`);
      if (i['last connect error']) lines.push(`  last connect error: ${i['last connect error']}`);
      return lines.map((l) => l + '\n').join('');
    })
    .join('');
}

/** `show buffers`, in VPP's columns (one pool). */
export function formatBuffers(b: BufferView): string {
  return (
    vppFormat('%-20s%=6s%=11s%=9s%=9s%=9s', 'Pool Name', 'Index', 'Data Size', 'Total', 'Avail', 'Used') +
    '\n' +
    vppFormat('%-20s%=6u%=11u%=9u%=9u%=9u', 'default', 0, b.dataSize, b.count, b.free, b.count - b.free) +
    '\n'
  );
}

/** An IB MTU in bytes (256..4096) as ibv_devinfo prints one: "1024 (3)". */
function ibMtu(bytes: number): string {
  return `${bytes} (${Math.log2(bytes) - 7})`;
}

/**
 * `show device`: each device as `ibv_devinfo -v` prints it (its names, layout and values for
 * every field both have: test/device-probes.test.ts compares them), then what is rdma-graph's
 * own (interface, wire, inline data, STag key bits, QPN range, TRP window, segment size).
 */
export function formatDevice(d: DeviceView): string {
  // ibv_devinfo's columns: the value at column 40 (tabs of 8).
  const f = (k: string, v: string | number) =>
    `\t${k}:${'\t'.repeat(Math.max(1, 4 - Math.floor((k.length + 1) / 8)))}${v}`;
  const hex = (v: number, width = 0) => `0x${v.toString(16).padStart(width, '0')}`;
  const lines = [
    `hca_id:\t${d.name}`,
    f('transport', `${d.transport} (0)`),
    f('fw_ver', d.fwVer),
    f('node_guid', d.nodeGuid),
    f('sys_image_guid', d.sysImageGuid),
    f('vendor_id', hex(d.vendorId, 4)),
    f('vendor_part_id', d.vendorPartId),
    f('hw_ver', hex(d.hwVer)),
    f('phys_port_cnt', d.ports.length),
    f('max_mr_size', hex(d.maxMrSize)),
    f('page_size_cap', hex(d.pageSizeCap)),
    f('max_qp', d.maxQp),
    f('max_qp_wr', d.maxQpWr),
    f('max_sge', d.maxSge),
    f('max_sge_rd', d.maxSgeRd),
    f('max_cq', d.maxCq),
    f('max_cqe', d.maxCqe),
    f('max_mr', d.maxMr),
    f('max_pd', d.maxPd),
    f('max_qp_rd_atom', d.maxQpRdAtom),
    f('max_res_rd_atom', d.maxResRdAtom),
    f('max_qp_init_rd_atom', d.maxQpInitRdAtom),
    f('atomic_cap', 'ATOMIC_HCA (1)'),
    f('max_srq', d.maxSrq),
    f('max_srq_wr', d.maxSrqWr),
    f('max_srq_sge', d.maxSrqSge),
    f('max_mcast_grp', d.maxMcastGrp),
    f('max_mcast_qp_attach', d.maxMcastQpAttach),
    f('max_total_mcast_qp_attach', d.maxTotalMcastQpAttach),
    f('max_pkeys', 1),
    f('interface', d.interface),
    f('wire', d.wire),
    f('max_inline_data', d.maxInline),
    f('stag_key_bits', d.stagKeyBits),
    f('qpn_range', `${d.portRange[0]}..${d.portRange[1]} (UDP ports)`),
    f('trp_window', d.window),
    f('multicast_port', d.multicastPort),
  ];
  for (const p of d.ports) {
    lines.push(`\t\tport:\t${p.port}`);
    lines.push(`\t\t\tstate:\t\t\t${p.state === 'active' ? 'PORT_ACTIVE (4)' : 'PORT_DOWN (1)'}`);
    lines.push(`\t\t\tmax_mtu:\t\t${ibMtu(p.maxMtu)}`);
    lines.push(`\t\t\tactive_mtu:\t\t${ibMtu(p.activeMtu)}`);
    lines.push(`\t\t\tlink_layer:\t\t${p.linkLayer}`);
    lines.push(`\t\t\tmax_msg_sz:\t\t${hex(d.maxMsgSz)}`);
    lines.push(`\t\t\tpkey_tbl_len:\t\t1`);
    lines.push(`\t\t\tgid_tbl_len:\t\t1`);
    lines.push(`\t\t\tGID[  0]:\t\t${p.gid}, ${p.gidType}`);
    lines.push(`\t\t\tsegment_bytes:\t\t${p.segmentBytes} (interface MTU ${p.mtu})`);
  }
  return lines.map((l) => l + '\n').join('');
}

/** `show device [NAME]`: every device, a blank line between, as ibv_devinfo -v (-d NAME: that one). */
export function formatDevices(ds: DeviceView[], name?: string): string {
  const pick = name === undefined ? ds : ds.filter((d) => d.name === name || d.interface === name);
  if (pick.length === 0)
    return name === undefined
      ? 'No IB devices found (no interface has an IPv4 address)\n'
      : `no device ${name} (devices: ${ds.map((d) => d.name).join(', ') || 'none'})\n`;
  return pick.map(formatDevice).join('\n');
}

export function formatVersion(v: VersionView): string {
  const have = v.drivers.filter((d) => d.available).map((d) => d.name);
  const lines = [
    `rdma-graph v${v.version} on Node ${v.node} (${v.platform}), started ${v.startedAt}`,
    `drivers: ${have.join(', ') || 'none'}`,
  ];
  for (const d of v.drivers) if (!d.available) lines.push(`not available: ${d.name}: ${d.why}`);
  return lines.map((l) => l + '\n').join('');
}

/** GET `path` (several: each, their answers as one array) and print `render` of the answer. */
export type Show = (path: string | string[], render: (v: never) => string) => Promise<void>;

/** What the user named is not there (exit 1, as the API's 404): thrown by a renderer. */
export class NotFound extends Error {}

/**
 * A table: a header row, then one row per object, columns as wide as their widest cell and two
 * spaces apart; the last column is not padded. No rows: the header and "(none)".
 */
export function table(header: string[], rows: (string | number)[][]): string {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const width = header.map((_, k) => Math.max(...cells.map((r) => r[k].length)));
  const line = (r: string[]) => r.map((c, k) => (k === r.length - 1 ? c : c.padEnd(width[k]))).join('  ') + '\n';
  return cells.map(line).join('') + (rows.length === 0 ? '(none)\n' : '');
}

/** `show WHAT ...` (words after "show"). */
export function showCommand(words: string[], show: Show): Promise<void> {
  const [w, ...rest] = words;
  const sub = resolveWord(w, SHOW_OBJECTS, 'show');
  const a = new Args(rest, `show ${sub}`);
  switch (sub) {
    case 'runtime': {
      const o = a.options([], ['verbose', 'total', 'max']);
      const verbose = o.has('verbose');
      return show(`/v1/runtime${verbose ? '?verbose=1' : ''}`, (v: { threads: RuntimeThreadSnapshot[] }) =>
        formatRuntime(v.threads, { verbose, total: o.has('total'), max: o.has('max') }),
      );
    }
    case 'errors': {
      const verbose = a.options([], ['verbose']).has('verbose');
      return show('/v1/errors', (v: { threads: ErrorThreadSnapshot[] }) => formatErrors(v.threads, { verbose }));
    }
    case 'interfaces': {
      // VPP's show interface [address] [NAME...]: the flags and interface names in any order.
      const flags = new Set<string>(),
        names: string[] = [];
      for (const w of rest) ['addr', 'address', 'rx-placement'].includes(w) ? flags.add(w) : names.push(w);
      if (flags.has('rx-placement')) {
        if (flags.size > 1 || names.length > 0)
          throw new UsageError(
            `show interface rx-placement: unexpected "${[...names, ...flags].find((w) => w !== 'rx-placement')}"`,
          );
        return show('/v1/rx-placement', (v: RxPlacementView[]) => formatRxPlacement(v));
      }
      const addr = flags.size > 0;
      const render = (v: InterfaceView[]) => (addr ? formatInterfaceAddresses(v) : formatInterfaces(v));
      if (names.length === 0) return show('/v1/interfaces', render);
      // Each name through GET /v1/interfaces/NAME: an unknown one is the API's 404, naming it.
      return show(
        names.map((n) => `/v1/interfaces/${encodeURIComponent(n)}`),
        render,
      );
    }
    case 'hardware': {
      const names = rest;
      if (names.length === 0) return show('/v1/hardware', (v: HardwareView[]) => formatHardware(v));
      return show('/v1/hardware', (v: HardwareView[]) => {
        const missing = names.filter((n) => !v.some((h) => h.name === n));
        if (missing.length > 0)
          throw new NotFound(
            `show hardware: no interface ${missing.join(', ')} (interfaces: ${v.map((h) => h.name).join(', ') || 'none'})`,
          );
        return formatHardware(v.filter((h) => names.includes(h.name)));
      });
    }
    case 'memif':
      a.end();
      return show('/v1/hardware', (v: HardwareView[]) => formatMemif(v));
    case 'buffers':
      a.end();
      return show('/v1/buffers', (v: BufferView) => formatBuffers(v));
    case 'ip': {
      const what = resolveWord(
        rest[0],
        { neighbors: 'neighbors', neighbours: 'neighbors', neighbor: 'neighbors', arp: 'neighbors' },
        'show ip',
      );
      new Args(rest.slice(1), `show ip ${what}`).end();
      return show('/v1/neighbors', (v: NeighborView[]) => formatNeighbors(v));
    }
    case 'neighbors':
      a.end();
      return show('/v1/neighbors', (v: NeighborView[]) => formatNeighbors(v));
    case 'trace': {
      const max = intOpt(a.options(['max']), 'max', 'show trace');
      return show('/v1/trace', (v: { threads: TraceThreadSnapshot[] }) =>
        formatTrace(v.threads, max === undefined ? {} : { max }),
      );
    }
    case 'qps':
      a.end();
      return show('/v1/qps', (v: QpView[]) => formatQps(v));
    case 'qp': {
      const qpn = a.int('QPN');
      a.end();
      return show(`/v1/qps/${qpn}`, (v: QpView) => formatQp(v));
    }
    case 'listeners':
      a.end();
      return show('/v1/listeners', (v: ListenerView[]) => formatListeners(v));
    case 'mrs':
      a.end();
      return show('/v1/mrs', (v: MrView[]) =>
        table(
          ['MR', 'PD', 'STag', 'Length', 'Access', 'Owner'],
          v.map((m) => [m.mr, m.pd, `0x${m.stag.toString(16)}`, m.length, m.access.join(',') || '-', m.owner ?? '-']),
        ),
      );
    case 'cqs':
      a.end();
      return show('/v1/cqs', (v: CqView[]) =>
        table(
          ['CQ', 'Depth', 'Pending', 'Users', 'State'],
          v.map((c) => [c.cq, c.depth, c.pending, c.users, c.error ? 'ERROR (overflowed)' : 'ok']),
        ),
      );
    case 'srqs':
      a.end();
      return show('/v1/srqs', (v: SrqView[]) =>
        table(
          ['SRQ', 'PD', 'Max WR', 'Max SGE', 'Posted', 'Limit'],
          v.map((q) => [q.srq, q.pd, q.maxWr, q.maxSge, q.posted, q.limit]),
        ),
      );
    case 'pds':
      a.end();
      return show('/v1/pds', (v: PdView[]) =>
        table(
          ['PD', 'Users'],
          v.map((p) => [p.pd, p.users]),
        ),
      );
    case 'events':
      a.end();
      return show('/v1/events', (v: EventView[]) =>
        v
          .map(
            (e) =>
              `${e.time} #${e.seq} ${e.type}${e.qpn !== undefined ? ` qp ${e.qpn}` : ''}${e.cq !== undefined ? ` cq ${e.cq}` : ''}${e.srq !== undefined ? ` srq ${e.srq}` : ''}${e.reason ? `: ${e.reason}` : ''}\n`,
          )
          .join(''),
      );
    case 'health':
      a.end();
      return show(
        '/v1/health',
        (v: HealthView) => `${v.status}: rdma-graph ${v.version}, up ${v.uptime.toFixed(1)} s\n`,
      );
    case 'version':
      a.end();
      return show('/v1/version', (v: VersionView) => formatVersion(v));
    case 'threads':
      a.end();
      return show('/v1/threads', (v: ThreadView[]) => formatThreads(v));
    case 'device': {
      const name = a.done ? undefined : a.word('NAME');
      a.end();
      return show('/v1/devices', (v: DeviceView[]) => formatDevices(v, name));
    }
    default:
      throw new UsageError(`show: "${sub}" has no renderer`);
  }
}
