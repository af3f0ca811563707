/**
 * The live view's graph picture: lays out one thread's nodes and next arcs (the engine's own
 * tables, as GET /live/events sends them) in layers from the input nodes, as plain SVG, and
 * updates each node's and arc's rate in place every frame. Runs in the browser.
 */

const SVG = 'http://www.w3.org/2000/svg';
const COL = 182;
const ROW = 78;
const BOX_W = 166;
const BOX_H = 46;
const PAD = 14;

/** An SVG element with attributes. */
function el(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

/** A rate with an SI prefix and three significant digits: 1.23k, 45.6M. */
export function si(x) {
  if (!Number.isFinite(x) || x === 0) return '0';
  const units = ['', 'k', 'M', 'G', 'T'];
  let u = 0;
  let v = Math.abs(x);
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  const digits = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return `${x < 0 ? '-' : ''}${v.toFixed(digits)}${units[u]}`;
}

/** The structure of a thread's graph: changes only when nodes or arcs are added. */
function shapeOf(nodes) {
  return nodes.map((n) => `${n.name}>${n.next.join(',')}`).join(';');
}

/**
 * Layers, top to bottom: each node one layer below its furthest predecessor along arcs that are
 * not back arcs (an arc to a node still being walked, found by a depth-first walk from the input
 * nodes). Nodes no arc touches go in a last layer of their own.
 */
function layout(nodes) {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const back = new Set();
  const state = new Map();
  const walk = (n) => {
    state.set(n.name, 1);
    for (const to of n.next) {
      const t = byName.get(to);
      if (t === undefined) continue;
      const s = state.get(to);
      if (s === 1) back.add(`${n.name}>${to}`);
      else if (s === undefined) walk(t);
    }
    state.set(n.name, 2);
  };
  const order = [...nodes].sort((a, b) => (a.type === 'input') - (b.type === 'input') || a.name.localeCompare(b.name));
  for (const n of order.reverse()) if (!state.has(n.name)) walk(n);
  const preds = new Map(nodes.map((n) => [n.name, []]));
  for (const n of nodes)
    for (const to of n.next) if (byName.has(to) && !back.has(`${n.name}>${to}`)) preds.get(to).push(n.name);
  const rank = new Map();
  const rankOf = (name) => {
    if (rank.has(name)) return rank.get(name);
    rank.set(name, 0);
    const r = Math.max(-1, ...preds.get(name).map(rankOf)) + 1;
    rank.set(name, r);
    return r;
  };
  const touched = new Set();
  for (const n of nodes)
    for (const to of n.next)
      if (byName.has(to)) {
        touched.add(n.name);
        touched.add(to);
      }
  let maxRank = 0;
  for (const n of nodes) if (touched.has(n.name)) maxRank = Math.max(maxRank, rankOf(n.name));
  const columns = [];
  for (const n of nodes) {
    const r = touched.has(n.name) ? rank.get(n.name) : maxRank + 1;
    (columns[r] ??= []).push(n.name);
  }
  // Within a layer: by the mean place of the predecessors (fewer crossings), then by name.
  const place = new Map();
  const pos = new Map();
  const widest = Math.max(...columns.map((c) => c?.length ?? 0));
  columns.forEach((layer = [], r) => {
    const mean = (name) => {
      const p = preds.get(name).filter((x) => place.has(x));
      return p.length ? p.reduce((s, x) => s + place.get(x), 0) / p.length : Infinity;
    };
    layer.sort((a, b) => mean(a) - mean(b) || a.localeCompare(b));
    // Centred under the widest layer.
    const shift = ((widest - layer.length) * COL) / 2;
    layer.forEach((name, i) => {
      place.set(name, i + (widest - layer.length) / 2);
      pos.set(name, { x: PAD + shift + i * COL, y: PAD + r * ROW });
    });
  });
  return { pos, back, width: PAD * 2 + widest * COL + 40, height: PAD * 2 + columns.length * ROW };
}

export class GraphView {
  constructor(host) {
    this.host = host;
    this.shape = null;
    this.nodes = new Map();
    this.arcs = new Map();
  }

  /** Draw `nodes` (one thread's, from a frame): lay out again only when the structure changed. */
  update(nodes) {
    const shape = shapeOf(nodes);
    if (shape !== this.shape) this.build(nodes, shape);
    for (const n of nodes) {
      const v = this.nodes.get(n.name);
      if (!v) continue;
      v.g.dataset.pps = String(n.packetsPerSec);
      v.g.classList.toggle('busy', n.packetsPerSec > 0);
      v.rate.textContent = `${si(n.packetsPerSec)} pkt/s  ${si(n.clocksPerPacket)} clk/pkt`;
      v.calls.textContent = `${si(n.callsPerSec)} calls/s  ${n.vectorsPerCall.toFixed(1)} vec/call`;
      v.title.textContent = `${n.name} (${n.type}${n.state ? `, ${n.state}` : ''}): ${si(n.callsPerSec)} calls/s, ${n.vectorsPerCall.toFixed(2)} vectors/call, ${si(n.packetsPerSec)} packets/s, ${si(n.clocksPerPacket)} clocks/packet`;
      n.next.forEach((to, i) => {
        const a = this.arcs.get(`${n.name}>${to}`);
        if (!a) return;
        const pps = n.arcPerSec[i] ?? 0;
        a.path.classList.toggle('hot', pps > 0);
        a.path.setAttribute('stroke-width', pps > 0 ? String(Math.min(6, 1.5 + Math.log10(1 + pps) / 1.5)) : '1');
        a.path.dataset.pps = String(pps);
        a.label.textContent = pps > 0 ? si(pps) : '';
      });
    }
  }

  build(nodes, shape) {
    this.shape = shape;
    this.nodes.clear();
    this.arcs.clear();
    const { pos, back, width, height } = layout(nodes);
    const svg = el('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img' });
    el('title', {}, svg).textContent = 'node graph';
    const arcs = el('g', {}, svg);
    const boxes = el('g', {}, svg);
    for (const n of nodes) {
      const p = pos.get(n.name);
      for (const to of n.next) {
        const q = pos.get(to);
        if (!q || this.arcs.has(`${n.name}>${to}`)) continue;
        const x1 = p.x + BOX_W / 2;
        const y1 = p.y + BOX_H;
        const x2 = q.x + BOX_W / 2;
        const y2 = q.y;
        let d;
        // The rate's label sits on the arc just above the node it enters, so it is read as that arc's.
        let lx;
        let ly;
        if (back.has(`${n.name}>${to}`) || y2 <= y1) {
          // Back arcs (upwards) leave from the right side and come round to the target's right.
          const xr = Math.max(p.x, q.x) + BOX_W + 30;
          d = `M${p.x + BOX_W},${p.y + BOX_H / 2} C${xr},${p.y + BOX_H / 2} ${xr},${q.y + BOX_H / 2} ${q.x + BOX_W},${q.y + BOX_H / 2}`;
          lx = xr - 8;
          ly = q.y + BOX_H / 2 + 14;
        } else {
          const my = (y1 + y2) / 2;
          d = `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`;
          // The cubic at t = 0.85 (control points straight below and above the ends).
          const t = 0.85;
          const a = (1 - t) ** 3 + 3 * (1 - t) ** 2 * t;
          lx = a * x1 + (1 - a) * x2;
          ly = (1 - t) ** 3 * y1 + 3 * (1 - t) * t * (1 - t) * my + 3 * (1 - t) * t * t * my + t ** 3 * y2;
        }
        const path = el('path', { d, class: 'arc', 'data-from': n.name, 'data-to': to }, arcs);
        el('title', {}, path).textContent = `${n.name} -> ${to}`;
        const label = el('text', { x: lx + 3, y: ly, class: 'arc-label' }, arcs);
        this.arcs.set(`${n.name}>${to}`, { path, label });
      }
    }
    for (const n of nodes) {
      const p = pos.get(n.name);
      const g = el('g', { class: `node ${n.type}`, 'data-node': n.name, transform: `translate(${p.x},${p.y})` }, boxes);
      const title = el('title', {}, g);
      el('rect', { width: BOX_W, height: BOX_H, rx: 4 }, g);
      el('text', { x: 6, y: 14 }, g).textContent = n.name;
      const rate = el('text', { x: 6, y: 27, class: 'rate' }, g);
      const calls = el('text', { x: 6, y: 40, class: 'rate' }, g);
      this.nodes.set(n.name, { g, rate, calls, title });
    }
    this.host.replaceChildren(svg);
  }
}
