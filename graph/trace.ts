/**
 * Packet trace (`trace add <input-node> N`, `show trace`, `clear trace`). An input node marks
 * the next N packets it receives as traced; every node that then handles a traced buffer gets
 * a visit recorded (time + node), and nodes attach their own record with `rt.addTrace`. Only
 * traced packets create objects; untraced packets cost one flag test in the scan, which runs
 * only while the trace buffer holds packets.
 */
import { BufferFlag, type BufferPool } from './buffer-pool.ts';
import type { NodeRuntime } from './node.ts';
import type { TracePacket as FormatPacket } from './format.ts';

interface Visit {
  timeNs: number;
  node: NodeRuntime;
  record: unknown;
  hasRecord: boolean;
}

export class TraceBuffer {
  private packets: Visit[][] = [];
  /** traceIndex = base + position: after a clear, buffers still in flight point nowhere. */
  private base = 0;
  /** Most packets kept; `trace add` beyond it traces nothing more. */
  maxPackets: number;
  private readonly pool: BufferPool;
  private readonly now: () => number;
  private readonly startNs: number;

  constructor(pool: BufferPool, maxPackets: number, now: () => number, startNs: number) {
    this.pool = pool;
    this.maxPackets = maxPackets;
    this.now = now;
    this.startNs = startNs;
  }

  /** True while traced packets may still be in flight (the dispatch scan is on). */
  get active(): boolean {
    return this.packets.length > 0;
  }

  get count(): number {
    return this.packets.length;
  }

  /**
   * Called by an input node for the buffers it just received: marks up to its trace budget of
   * them as traced and records the input visit. Returns how many were marked.
   */
  start(rt: NodeRuntime, bufs: Uint32Array, off: number, n: number): number {
    let marked = 0;
    const t = this.now() - this.startNs;
    for (let i = 0; i < n && rt.traceBudget > 0 && this.packets.length < this.maxPackets; i++) {
      const bi = bufs[off + i];
      if (this.pool.flags[bi] & BufferFlag.TRACED) continue; // already traced (came round again)
      this.pool.flags[bi] |= BufferFlag.TRACED;
      this.pool.traceIndex[bi] = this.base + this.packets.length;
      this.packets.push([{ timeNs: t, node: rt, record: undefined, hasRecord: false }]);
      rt.traceBudget--;
      marked++;
    }
    return marked;
  }

  /**
   * Before a node processes a frame: record its visit on every traced buffer in the frame.
   * Returns true when there was at least one (the node then gets traceOn).
   */
  visit(rt: NodeRuntime, vec: Uint32Array, n: number, off = 0): boolean {
    const flags = this.pool.flags;
    let any = false;
    let t = -1;
    for (let i = off; i < off + n; i++) {
      const bi = vec[i];
      if (flags[bi] & BufferFlag.TRACED) {
        const p = this.packets[this.pool.traceIndex[bi] - this.base];
        if (p === undefined) {
          // Trace was cleared while the packet was in flight.
          flags[bi] &= ~BufferFlag.TRACED;
          continue;
        }
        if (t < 0) t = this.now() - this.startNs;
        p.push({ timeNs: t, node: rt, record: undefined, hasRecord: false });
        any = true;
      }
    }
    return any;
  }

  /** A node's own record for traced buffer `bi` (attached to its latest visit by that node). */
  addRecord(rt: NodeRuntime, bi: number, record: unknown): void {
    if (!(this.pool.flags[bi] & BufferFlag.TRACED)) return;
    const p = this.packets[this.pool.traceIndex[bi] - this.base];
    if (p === undefined) return;
    for (let k = p.length - 1; k >= 0; k--) {
      if (p[k].node === rt) {
        p[k].record = record;
        p[k].hasRecord = true;
        return;
      }
    }
    p.push({ timeNs: this.now() - this.startNs, node: rt, record, hasRecord: true });
  }

  /** A node made `to` from traced `from` (a reply, a copy): `to` continues `from`'s trace. */
  inherit(from: number, to: number): void {
    const flags = this.pool.flags;
    if (flags[from] & BufferFlag.TRACED) {
      flags[to] |= BufferFlag.TRACED;
      this.pool.traceIndex[to] = this.pool.traceIndex[from];
    }
  }

  clear(): void {
    this.base = (this.base + this.packets.length + 1) % 0x80000000;
    this.packets = [];
  }

  /** The trace as the renderer wants it (formats each node's record). */
  snapshot(): FormatPacket[] {
    return this.packets.map((visits) => ({
      entries: visits.map((v) => ({
        timeNs: v.timeNs,
        node: v.node.name,
        text: v.hasRecord ? formatRecord(v.node, v.record) : '',
      })),
    }));
  }
}

function formatRecord(node: NodeRuntime, record: unknown): string {
  const f = node.reg.formatTrace;
  try {
    return f ? f(record) : typeof record === 'string' ? record : JSON.stringify(record);
  } catch (e) {
    return `<trace formatter of ${node.name} failed: ${(e as Error).message}>`;
  }
}
