/**
 * The live view's tables: nodes that ran, interfaces, QPs (with sparklines of bytes/s each way)
 * and the error counters that moved, redrawn from each frame of GET /live/events. Runs in the
 * browser; text goes in through textContent only.
 */
import { si } from './live-graph.mjs';

const SVG = 'http://www.w3.org/2000/svg';
/** Samples a sparkline keeps: 60 s at two frames a second. */
const SPARK = 120;

function cell(tr, text, cls = '') {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

/** A table's head and rows; `empty` when there are none. */
function fill(table, head, rows, empty) {
  const thead = document.createElement('thead');
  const htr = document.createElement('tr');
  for (const h of head) {
    const th = document.createElement('th');
    th.textContent = h;
    htr.appendChild(th);
  }
  thead.appendChild(htr);
  const tbody = document.createElement('tbody');
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    cell(tr, empty, 'empty').colSpan = head.length;
    tbody.appendChild(tr);
  }
  for (const r of rows) tbody.appendChild(r);
  table.replaceChildren(thead, tbody);
}

/** A sparkline of `values` (the last SPARK), scaled to its own maximum. */
function sparkline(values) {
  const w = 90;
  const h = 18;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('width', String(w));
  svg.setAttribute('height', String(h));
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => `${((i + SPARK - values.length) * w) / (SPARK - 1)},${h - 1 - (v / max) * (h - 2)}`);
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', pts.join(' '));
  svg.appendChild(line);
  return svg;
}

export function nodesTable(table, nodes) {
  const ran = nodes
    .filter((n) => n.callsPerSec > 0)
    .sort((a, b) => b.packetsPerSec - a.packetsPerSec || a.name.localeCompare(b.name));
  const rows = ran.map((n) => {
    const tr = document.createElement('tr');
    tr.dataset.node = n.name;
    cell(tr, n.name);
    cell(tr, n.state, 'text');
    cell(tr, si(n.callsPerSec));
    cell(tr, n.vectorsPerCall.toFixed(2));
    cell(tr, si(n.packetsPerSec));
    cell(tr, si(n.clocksPerPacket));
    return tr;
  });
  fill(
    table,
    ['Node', 'State', 'Calls/s', 'Vectors/call', 'Packets/s', 'Clocks/packet'],
    rows,
    'no node ran in the last interval',
  );
}

export function interfacesTable(table, interfaces) {
  const rows = interfaces.map((i) => {
    const tr = document.createElement('tr');
    tr.dataset.interface = i.name;
    cell(tr, i.name);
    cell(tr, i.driver, 'text');
    cell(tr, i.state, i.state);
    cell(tr, i.addresses.join(' '), 'text');
    cell(tr, si(i.rxPps));
    cell(tr, si(i.rxBps));
    cell(tr, si(i.txPps));
    cell(tr, si(i.txBps));
    cell(tr, `${i.rxDrops} (${si(i.rxDropsPerSec)}/s)`);
    cell(tr, `${i.txDrops} (${si(i.txDropsPerSec)}/s)`);
    cell(tr, i.reasons.map((r) => `${r.node} ${r.reason}: ${r.count}`).join('; '), 'text');
    return tr;
  });
  fill(
    table,
    [
      'Interface',
      'Driver',
      'Link',
      'Address',
      'Rx pkt/s',
      'Rx bit/s',
      'Tx pkt/s',
      'Tx bit/s',
      'Rx drops',
      'Tx drops',
      'Drop reasons',
    ],
    rows,
    'no interfaces',
  );
}

export class QpTable {
  constructor(table) {
    this.table = table;
    this.history = new Map();
  }

  update(qps) {
    const seen = new Set();
    const rows = qps.map((q) => {
      seen.add(q.qpn);
      let h = this.history.get(q.qpn);
      if (!h) this.history.set(q.qpn, (h = { tx: [], rx: [] }));
      h.tx.push(q.txBytesPerSec);
      h.rx.push(q.rxBytesPerSec);
      if (h.tx.length > SPARK) h.tx.shift();
      if (h.rx.length > SPARK) h.rx.shift();
      const tr = document.createElement('tr');
      tr.dataset.qpn = String(q.qpn);
      cell(tr, String(q.qpn));
      cell(tr, q.type, 'text');
      cell(tr, q.state, 'text');
      cell(tr, q.local, 'text');
      cell(tr, q.peer ?? '-', 'text');
      cell(tr, q.owner ?? '-', 'text');
      cell(tr, `${si(q.txBytesPerSec)}B/s`).appendChild(sparkline(h.tx));
      cell(tr, `${si(q.rxBytesPerSec)}B/s`).appendChild(sparkline(h.rx));
      cell(tr, String(q.retransmits));
      cell(tr, String(q.timeouts));
      cell(tr, q.srttUs > 0 ? `${(q.srttUs / 1000).toFixed(3)} ms` : '-');
      cell(tr, `${q.sqOutstanding}/${q.maxSendWr}`);
      return tr;
    });
    for (const k of [...this.history.keys()]) if (!seen.has(k)) this.history.delete(k);
    fill(
      this.table,
      [
        'QPN',
        'Type',
        'State',
        'Local',
        'Peer',
        'Owner',
        'Tx',
        'Rx',
        'Retransmits',
        'Timeouts',
        'SRTT',
        'Send WRs in flight',
      ],
      rows,
      'no QPs',
    );
  }
}

export function errorsTable(table, errors) {
  const rows = [...errors]
    .sort((a, b) => b.perSec - a.perSec || b.count - a.count)
    .map((e) => {
      const tr = document.createElement('tr');
      cell(tr, e.thread);
      cell(tr, e.node, 'text');
      cell(tr, e.reason, 'text');
      cell(tr, e.severity, 'text');
      cell(tr, String(e.count));
      cell(tr, si(e.perSec));
      return tr;
    });
  fill(table, ['Thread', 'Node', 'Reason', 'Severity', 'Count', 'Per second'], rows, 'no counter moved');
}
