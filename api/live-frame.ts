/**
 * One frame of the live view (GET /live/events): the rates between two samples of the facade's
 * own views (runtime, node graph, interfaces, QPs, errors), per worker thread and in total. A
 * pure function of the two samples: api/live-sampler.ts takes them, the page only draws.
 */
import type { DataplaneApi } from '../dataplane/api.ts';
import type { InterfaceView, QpView } from '../dataplane/views.ts';
import {
  runtimeTotal,
  type ErrorThreadSnapshot,
  type GraphThreadSnapshot,
  type RuntimeThreadSnapshot,
} from '../graph/format.ts';

/** What one sample reads from the data plane, and when (ms of the monotonic clock). */
export interface LiveSample {
  atMs: number;
  runtime: RuntimeThreadSnapshot[];
  graph: GraphThreadSnapshot[];
  interfaces: InterfaceView[];
  qps: QpView[];
  errors: ErrorThreadSnapshot[];
}

/** Read one sample through the facade: the same calls GET /v1/runtime, /v1/interfaces, /v1/qps and /v1/errors make. */
export async function takeSample(dp: DataplaneApi): Promise<LiveSample> {
  const [runtime, graph, interfaces, qps, errors] = await Promise.all([
    dp.runtime(),
    dp.nodeGraph(),
    dp.interfaces(),
    dp.qps(),
    dp.errors(),
  ]);
  return { atMs: performance.now(), runtime, graph, interfaces, qps, errors };
}

export interface LiveNode {
  name: string;
  type: string;
  state: string;
  /** Per second over the interval, as `show runtime` divides since its last clear. */
  callsPerSec: number;
  packetsPerSec: number;
  vectorsPerCall: number;
  /** Clocks per packet (per call when the node handled none, as VPP's Clocks column). */
  clocksPerPacket: number;
  /** Totals since the last `clear runtime`. */
  calls: number;
  vectors: number;
  /** Next node names and the packets per second each arc carried. */
  next: string[];
  arcPerSec: number[];
}

export interface LiveThread {
  /** -1 for the total of every thread. */
  index: number;
  name: string;
  nodes: LiveNode[];
}

export interface LiveInterface {
  name: string;
  driver: string;
  state: 'up' | 'down';
  addresses: string[];
  /** Packets since start (or the last `clear interfaces`). */
  rxPackets: number;
  txPackets: number;
  rxPps: number;
  txPps: number;
  rxBps: number;
  txBps: number;
  rxDrops: number;
  txDrops: number;
  rxDropsPerSec: number;
  txDropsPerSec: number;
  /** Error counters of this interface's own nodes (`<name>-tx` ...) that are not zero. */
  reasons: { node: string; reason: string; count: number }[];
}

export interface LiveQp {
  qpn: number;
  type: 'rc' | 'ud';
  state: string;
  local: string;
  peer: string | null;
  owner: string | null;
  txBytesPerSec: number;
  rxBytesPerSec: number;
  retransmits: number;
  timeouts: number;
  srttUs: number;
  /** Send work requests not completed yet: the QP's window in use. */
  sqOutstanding: number;
  maxSendWr: number;
}

export interface LiveError {
  thread: string;
  node: string;
  reason: string;
  severity: string;
  count: number;
  perSec: number;
}

export interface LiveFrame {
  /** Wall clock of the sample (ms since the epoch) and the interval the rates cover (s; 0 for the first). */
  time: number;
  interval: number;
  /** Each thread, then (with more than one) their total. */
  threads: LiveThread[];
  interfaces: LiveInterface[];
  qps: LiveQp[];
  /** Counters that moved since sampling began (their count differs from the first sample's). */
  errors: LiveError[];
}

const rate = (now: number, before: number | undefined, dt: number): number =>
  dt > 0 && before !== undefined ? Math.max(0, now - before) / dt : 0;

/** One thread's nodes with their rates, from its runtime rows and graph tables now and before. */
function liveThread(
  index: number,
  name: string,
  rt: RuntimeThreadSnapshot,
  g: GraphThreadSnapshot,
  rtBefore: RuntimeThreadSnapshot | undefined,
  gBefore: GraphThreadSnapshot | undefined,
  dt: number,
): LiveThread {
  const before = new Map((rtBefore?.rows ?? []).map((r) => [r.name, r]));
  const arcsBefore = new Map((gBefore?.nodes ?? []).map((n) => [n.name, n]));
  const rows = new Map(rt.rows.map((r) => [r.name, r]));
  const nodes = g.nodes.map((n): LiveNode => {
    const r = rows.get(n.name);
    const b = before.get(n.name);
    // A `clear runtime` in between makes the counters smaller: count from zero then.
    const cleared = r !== undefined && b !== undefined && r.calls < b.calls;
    const dCalls = r === undefined ? 0 : r.calls - (cleared || b === undefined ? 0 : b.calls);
    const dVectors = r === undefined ? 0 : r.vectors - (cleared || b === undefined ? 0 : b.vectors);
    const dClocks = r === undefined ? 0 : r.clocks - (cleared || b === undefined ? 0 : b.clocks);
    const ok = dt > 0 && b !== undefined;
    const prevArcs = arcsBefore.get(n.name);
    return {
      name: n.name,
      type: n.type,
      state: r?.state ?? '',
      callsPerSec: ok ? dCalls / dt : 0,
      packetsPerSec: ok ? dVectors / dt : 0,
      vectorsPerCall: ok && dCalls > 0 ? dVectors / dCalls : 0,
      clocksPerPacket: !ok ? 0 : dVectors > 0 ? dClocks / dVectors : dCalls > 0 ? dClocks / dCalls : 0,
      calls: r?.calls ?? 0,
      vectors: r?.vectors ?? 0,
      next: n.next,
      arcPerSec: n.arcPackets.map((p, i) => rate(p, prevArcs?.arcPackets[i], dt)),
    };
  });
  return { index, name, nodes };
}

/** Every thread's graph with node and arc figures added up by name (the same nodes on each worker). */
function totalGraph(graphs: GraphThreadSnapshot[]): GraphThreadSnapshot {
  const nodes = new Map<string, GraphThreadSnapshot['nodes'][number]>();
  for (const g of graphs)
    for (const n of g.nodes) {
      const have = nodes.get(n.name);
      if (have === undefined) nodes.set(n.name, { ...n, next: [...n.next], arcPackets: [...n.arcPackets] });
      else
        n.next.forEach((to, i) => {
          const k = have.next.indexOf(to);
          if (k < 0) {
            have.next.push(to);
            have.arcPackets.push(n.arcPackets[i]);
          } else have.arcPackets[k] += n.arcPackets[i];
        });
    }
  return { index: -1, name: 'total', nodes: [...nodes.values()] };
}

function liveInterface(i: InterfaceView, b: InterfaceView | undefined, dt: number, errs: LiveError[]): LiveInterface {
  const c = i.counters;
  const p = b?.counters;
  const mine = (node: string) => node === i.name || node.startsWith(`${i.name}-`);
  return {
    name: i.name,
    driver: i.driver,
    state: i.state,
    addresses: i.addresses,
    rxPackets: c.rxPackets,
    txPackets: c.txPackets,
    rxPps: rate(c.rxPackets, p?.rxPackets, dt),
    txPps: rate(c.txPackets, p?.txPackets, dt),
    rxBps: rate(c.rxBytes, p?.rxBytes, dt) * 8,
    txBps: rate(c.txBytes, p?.txBytes, dt) * 8,
    rxDrops: c.rxDrops,
    txDrops: c.txDrops,
    rxDropsPerSec: rate(c.rxDrops, p?.rxDrops, dt),
    txDropsPerSec: rate(c.txDrops, p?.txDrops, dt),
    reasons: errs
      .filter((e) => mine(e.node) && e.count > 0)
      .map(({ node, reason, count }) => ({ node, reason, count })),
  };
}

function liveQp(q: QpView, b: QpView | undefined, dt: number): LiveQp {
  const c = q.counters;
  return {
    qpn: q.qpn,
    type: q.type,
    state: q.state,
    local: `${q.local.ip}:${q.local.port}`,
    peer: q.remote === null ? null : `${q.remote.ip}:${q.remote.port}`,
    owner: q.owner,
    txBytesPerSec: rate(c.txBytes, b?.counters.txBytes, dt),
    rxBytesPerSec: rate(c.rxBytes, b?.counters.rxBytes, dt),
    retransmits: c.retransmits + c.fastRetransmits,
    timeouts: c.timeouts,
    srttUs: q.rtt.srttUs,
    sqOutstanding: q.sqOutstanding,
    maxSendWr: q.maxSendWr,
  };
}

/** Error rows keyed by thread, node and reason. */
function errorCounts(
  threads: ErrorThreadSnapshot[],
): Map<string, { thread: string; row: ErrorThreadSnapshot['rows'][number] }> {
  const out = new Map<string, { thread: string; row: ErrorThreadSnapshot['rows'][number] }>();
  for (const t of threads)
    for (const row of t.rows) out.set(`${t.name}\u0000${row.node}\u0000${row.reason}`, { thread: t.name, row });
  return out;
}

/**
 * The frame for `cur`, with rates against `prev` (null: the first sample, rates 0) and moved
 * errors against `first` (the first sample since sampling began).
 */
export function liveFrame(prev: LiveSample | null, cur: LiveSample, first: LiveSample): LiveFrame {
  const dt = prev === null ? 0 : (cur.atMs - prev.atMs) / 1000;
  const threads = cur.runtime.map((rt, k) =>
    liveThread(rt.index, rt.name, rt, cur.graph[k], prev?.runtime[k], prev?.graph[k], dt),
  );
  if (cur.runtime.length > 1)
    threads.push(
      liveThread(
        -1,
        'total',
        runtimeTotal(cur.runtime),
        totalGraph(cur.graph),
        prev ? runtimeTotal(prev.runtime) : undefined,
        prev ? totalGraph(prev.graph) : undefined,
        dt,
      ),
    );
  const start = errorCounts(first.errors);
  const before = errorCounts(prev?.errors ?? []);
  const errors: LiveError[] = [];
  for (const [key, { thread, row }] of errorCounts(cur.errors)) {
    const base = start.get(key)?.row.count ?? 0;
    if (row.count === base) continue;
    errors.push({
      thread,
      node: row.node,
      reason: row.reason,
      severity: row.severity,
      count: row.count,
      perSec: rate(row.count, before.get(key)?.row.count, dt),
    });
  }
  const allErrors: LiveError[] = [...errorCounts(cur.errors).values()].map(({ thread, row }) => ({
    thread,
    node: row.node,
    reason: row.reason,
    severity: row.severity,
    count: row.count,
    perSec: 0,
  }));
  const prevIfs = new Map((prev?.interfaces ?? []).map((i) => [i.name, i]));
  const prevQps = new Map((prev?.qps ?? []).map((q) => [q.qpn, q]));
  return {
    time: Date.now(),
    interval: dt,
    threads,
    interfaces: cur.interfaces.map((i) => liveInterface(i, prevIfs.get(i.name), dt, allErrors)),
    qps: cur.qps.map((q) => liveQp(q, prevQps.get(q.qpn), dt)),
    errors,
  };
}
