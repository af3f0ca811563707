/**
 * GET /metrics: the data plane's counters in the Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/), built from the same facade
 * views the JSON routes answer with.
 */
import type { DataplaneApi } from '../dataplane/api.ts';
import { PROMETHEUS, type Ctx, type RouteDef } from './routes/route.ts';

type Labels = Record<string, string | number>;

interface Family {
  name: string;
  type: 'counter' | 'gauge';
  help: string;
  samples: { labels: Labels; value: number }[];
}

/** A label value with backslash, double quote and line feed escaped. */
export function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/** HELP text with backslash and line feed escaped. */
function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

export function renderFamilies(families: Family[]): string {
  const out: string[] = [];
  for (const f of families) {
    out.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    for (const s of f.samples) {
      const labels = Object.entries(s.labels)
        .map(([k, v]) => `${k}="${escapeLabel(String(v))}"`)
        .join(',');
      out.push(`${f.name}${labels ? `{${labels}}` : ''} ${formatValue(s.value)}`);
    }
  }
  return out.join('\n') + '\n';
}

const P = 'rdmagraph_';

/** Families of one kind of row: one sample a row for each of the given fields. */
function perRow<R>(
  rows: R[],
  labels: (r: R) => Labels,
  fields: [name: string, type: Family['type'], help: string, value: (r: R) => number][],
): Family[] {
  return fields.map(([name, type, help, value]) => ({
    name: P + name,
    type,
    help,
    samples: rows.map((r) => ({ labels: labels(r), value: value(r) })),
  }));
}

export async function renderMetrics(dp: DataplaneApi): Promise<string> {
  const [health, buffers, ifs, runtime, errors, qps] = await Promise.all([
    dp.health(),
    dp.buffers(),
    dp.interfaces(),
    dp.runtime(),
    dp.errors(),
    dp.qps(),
  ]);
  const nodes = runtime.flatMap((t) => t.rows.map((r) => ({ ...r, thread: t.name })));
  const errs = errors.flatMap((t) => t.rows);
  const families: Family[] = [
    {
      name: `${P}uptime_seconds`,
      type: 'gauge',
      help: 'Seconds since the data plane started.',
      samples: [{ labels: {}, value: health.uptime }],
    },
    {
      name: `${P}buffers`,
      type: 'gauge',
      help: 'Packet buffers in the pool.',
      samples: [{ labels: {}, value: buffers.count }],
    },
    {
      name: `${P}buffers_free`,
      type: 'gauge',
      help: 'Packet buffers free now.',
      samples: [{ labels: {}, value: buffers.free }],
    },
    ...perRow(ifs, (i) => ({ interface: i.name, driver: i.driver }), [
      ['interface_rx_packets_total', 'counter', 'Packets received.', (i) => i.counters.rxPackets],
      ['interface_rx_bytes_total', 'counter', 'Bytes received.', (i) => i.counters.rxBytes],
      ['interface_tx_packets_total', 'counter', 'Packets transmitted.', (i) => i.counters.txPackets],
      ['interface_tx_bytes_total', 'counter', 'Bytes transmitted.', (i) => i.counters.txBytes],
      [
        'interface_rx_drops_total',
        'counter',
        'Packets the device received but lost before the graph (ring full, no buffers).',
        (i) => i.counters.rxDrops,
      ],
      [
        'interface_tx_drops_total',
        'counter',
        'Packets dropped on transmit (refused with the link down, or the transmit backlog full).',
        (i) => i.counters.txDrops,
      ],
      [
        'interface_tx_held_total',
        'counter',
        'Packets a full transmit ring held back and sent later (local congestion, not loss).',
        (i) => i.counters.txHeld,
      ],
      ['interface_rx_errors_total', 'counter', 'Receive errors the device reports.', (i) => i.counters.rxErrors],
      ['interface_tx_errors_total', 'counter', 'Transmit errors the device reports.', (i) => i.counters.txErrors],
      ['interface_link_up', 'gauge', '1 when the link is up, 0 when down.', (i) => (i.state === 'up' ? 1 : 0)],
    ]),
    ...perRow(nodes, (n) => ({ node: n.name, thread: n.thread }), [
      ['node_calls_total', 'counter', 'Times the node ran (since the last runtime clear).', (n) => n.calls],
      ['node_vectors_total', 'counter', 'Packets the node processed (since the last runtime clear).', (n) => n.vectors],
      [
        'node_suspends_total',
        'counter',
        'Times the process node suspended (since the last runtime clear).',
        (n) => n.suspends,
      ],
      ['node_clocks_total', 'counter', 'CPU clocks spent in the node (since the last runtime clear).', (n) => n.clocks],
    ]),
    ...perRow(errs, (e) => ({ node: e.node, reason: e.reason, severity: e.severity }), [
      ['errors_total', 'counter', 'Error counters by node and reason (since the last errors clear).', (e) => e.count],
    ]),
    ...perRow(qps, (q) => ({ qpn: q.qpn, state: q.state }), [
      ['qp_tx_packets_total', 'counter', 'Packets the QP sent.', (q) => q.counters.txPackets],
      ['qp_rx_packets_total', 'counter', 'Packets the QP received.', (q) => q.counters.rxPackets],
      ['qp_tx_bytes_total', 'counter', 'Bytes the QP sent.', (q) => q.counters.txBytes],
      ['qp_rx_bytes_total', 'counter', 'Bytes the QP received.', (q) => q.counters.rxBytes],
      ['qp_retransmits_total', 'counter', 'Segments the QP retransmitted.', (q) => q.counters.retransmits],
      ['qp_timeouts_total', 'counter', 'Retransmission timeouts of the QP.', (q) => q.counters.timeouts],
      [
        'qp_spurious_timeouts_total',
        'counter',
        'Retransmission timeouts an ACK showed were not losses.',
        (q) => q.counters.spuriousTimeouts,
      ],
      ['qp_probes_total', 'counter', 'PROBEs the QP sent at retransmission timeouts.', (q) => q.counters.probes],
      ['qp_srtt_seconds', 'gauge', 'Smoothed round-trip time of the QP.', (q) => q.rtt.srttUs / 1e6],
      [
        'qp_cwnd_segments',
        'gauge',
        'Segments the QP may have in flight (congestion window).',
        (q) => q.congestion.cwnd,
      ],
      ['qp_ssthresh_segments', 'gauge', 'Slow-start threshold of the QP, segments.', (q) => q.congestion.ssthresh],
      [
        'qp_dctcp_alpha',
        'gauge',
        "DCTCP's estimate of the fraction of the QP's segments marked CE.",
        (q) => q.congestion.alpha,
      ],
      ['qp_ce_marks_total', 'counter', 'Segments the peer echoed as CE-marked.', (q) => q.congestion.ceMarks],
      ['qp_ce_received_total', 'counter', 'CE-marked data packets the QP received.', (q) => q.congestion.ceReceived],
      [
        'qp_losses_total',
        'counter',
        'Losses the QP saw (fast retransmissions and timeouts).',
        (q) => q.congestion.losses,
      ],
      [
        'qp_cwnd_reductions_total',
        'counter',
        'Congestion window reductions of the QP (losses, ECN marks and queueing delay).',
        (q) => q.congestion.lossReductions + q.congestion.ecnReductions + q.congestion.delayReductions,
      ],
      [
        'qp_hystart_exits_total',
        'counter',
        'Slow starts of the QP ended by HyStart++ (a rising round RTT), not by a loss.',
        (q) => q.congestion.hystartExits,
      ],
    ]),
  ];
  return renderFamilies(families);
}

export const metricsRoute: RouteDef = {
  method: 'GET',
  path: '/metrics',
  tag: 'status',
  summary: 'interface, node, error and QP counters in the Prometheus text format 0.0.4',
  status: 200,
  produces: PROMETHEUS,
  response: { type: 'string', description: 'Prometheus text exposition format 0.0.4' },
  errors: [],
  handler: async ({ dp, reply }: Ctx) => {
    reply.type(PROMETHEUS);
    return renderMetrics(dp);
  },
};
