/**
 * The interface registry and the device nodes that connect drivers to the graph:
 *
 *   <kind>-input   one input node per driver family (pipe-input, pcap-input, memif-input...),
 *                  polling every rx queue of that family's interfaces on this thread
 *   <if>-output    counts what an interface transmits (an IS_OUTPUT node for `show runtime`)
 *   <if>-tx        hands the vector to the driver in one txBurst; what the driver refuses is
 *                  dropped with "no free tx slots"
 *
 * Interface index 0 is reserved (VPP's local0), so `rxIf`/`txIf` of 0 means "none".
 */
import { Graph, type NodeRuntime, type Frame, NodeFlag, FRAME_SIZE, type BufferPool } from '../graph/index.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { PcapWriter } from './pcap-file.ts';

export interface InterfaceOptions {
  /** Node the input node sends this interface's packets to (default "ethernet-input"). */
  next?: string;
}

export interface InterfaceCounters extends DriverCounters {
  /** Dropped by <if>-tx because the driver refused them. */
  txNoSlots: number;
}

export class Interface {
  readonly index: number;
  readonly name: string;
  readonly driver: Driver;
  readonly next: string;
  /** Next index in the input node's arcs. */
  inputNext = 0;
  output!: NodeRuntime;
  tx!: NodeRuntime;
  txNoSlots = 0;
  /** Packet capture of what this interface receives / transmits (`pcap trace`), if on. */
  rxCapture: Capture | null = null;
  txCapture: Capture | null = null;
  /** Rx queues this thread polls. */
  readonly rxQueues: number[];

  constructor(index: number, driver: Driver, next: string) {
    this.index = index;
    this.name = driver.name;
    this.driver = driver;
    this.next = next;
    this.rxQueues = Array.from({ length: driver.rxQueues }, (_, i) => i);
  }

  get macString(): string {
    return Array.from(this.driver.mac, (b) => b.toString(16).padStart(2, '0')).join(':');
  }

  counters(): InterfaceCounters {
    return { ...this.driver.counters(), txNoSlots: this.txNoSlots };
  }
}

/** A running capture: the file and how many packets it may still take. */
export class Capture {
  readonly writer: PcapWriter;
  remaining: number;
  constructor(path: string, max: number) {
    this.writer = new PcapWriter(path, { nanosecond: true });
    this.remaining = max;
  }

  /** Append `bufs[off..off+n)` (whole chains) to the file; one write per call. */
  write(pool: BufferPool, bufs: Uint32Array, off: number, n: number): void {
    const w = this.writer;
    const ms = Date.now();
    const sec = Math.floor(ms / 1000), nsec = (ms % 1000) * 1e6;
    const m = n < this.remaining ? n : this.remaining;
    for (let i = 0; i < m; i++) {
      const bi = bufs[off + i];
      const len = pool.packetLength(bi);
      const at = w.beginRecord(sec, nsec, len, len);
      pool.readPacket(bi, w.buf, at);
    }
    this.remaining -= m;
    w.flush();
  }
}

export interface CaptureOptions {
  /** File for received packets. */
  rx?: string;
  /** File for transmitted packets. */
  tx?: string;
  /** Stop after this many packets per direction (default unlimited). */
  max?: number;
}

/** What an input node polls: one (interface, queue) pair per entry. */
interface PollList {
  ifs: Interface[];
  queues: number[];
}

const TX_NO_SLOTS = 0;

export class Interfaces {
  readonly graph: Graph;
  private readonly list: (Interface | null)[] = [null];
  private readonly byName = new Map<string, Interface>();
  private readonly polls = new Map<string, PollList>();

  constructor(graph: Graph) {
    this.graph = graph;
  }

  /**
   * Open `driver` on the graph's pool and create its nodes. Throws (and leaves nothing behind)
   * when the driver cannot open or a node name is taken.
   */
  add(driver: Driver, opts: InterfaceOptions = {}): Interface {
    const g = this.graph;
    if (this.byName.has(driver.name)) throw new Error(`interface "${driver.name}" already exists`);
    const next = opts.next ?? 'ethernet-input';
    driver.open(g.pool);
    const itf = new Interface(this.list.length, driver, next);
    try {
      this.createTxNodes(itf);
      const input = this.inputNode(driver.kind);
      itf.inputNext = g.addNext(input, next);
      const poll = this.polls.get(input.name) as PollList;
      for (const q of itf.rxQueues) {
        poll.ifs.push(itf);
        poll.queues.push(q);
        const fd = driver.rxWaitFd(q);
        if (fd >= 0) g.addWaitFd(fd);
        if (driver.rxNextDueNs) g.addDueSource(() => (driver.rxNextDueNs as (q: number) => number)(q));
      }
      driver.setWakeup(() => g.wake());
    } catch (e) {
      driver.close();
      throw e;
    }
    this.list.push(itf);
    this.byName.set(itf.name, itf);
    return itf;
  }

  get(name: string): Interface {
    const itf = this.byName.get(name);
    if (!itf) throw new Error(`no interface named "${name}" (have: ${[...this.byName.keys()].join(', ') || 'none'})`);
    return itf;
  }

  byIndex(index: number): Interface | null {
    return this.list[index] ?? null;
  }

  all(): Interface[] {
    return this.list.filter((x): x is Interface => x !== null);
  }

  /**
   * Capture what an interface receives and/or transmits to pcap files (nanosecond
   * timestamps), like VPP's `pcap trace rx tx`. Replaces a capture already running.
   */
  capture(name: string, opts: CaptureOptions): void {
    const itf = this.get(name);
    const max = opts.max ?? Infinity;
    if (!(max > 0)) throw new RangeError(`capture on ${name}: max must be a positive number, got ${opts.max}`);
    if (!opts.rx && !opts.tx) throw new Error(`capture on ${name}: give an rx file, a tx file or both`);
    this.stopCapture(name);
    if (opts.rx) itf.rxCapture = new Capture(opts.rx, max);
    if (opts.tx) itf.txCapture = new Capture(opts.tx, max);
  }

  /** Stop capturing on an interface and close its files. */
  stopCapture(name: string): void {
    const itf = this.get(name);
    if (itf.rxCapture) itf.rxCapture.writer.close();
    if (itf.txCapture) itf.txCapture.writer.close();
    itf.rxCapture = itf.txCapture = null;
  }

  /** Close every driver (their buffers return to the pool). */
  closeAll(): void {
    for (const itf of this.all()) {
      for (const q of itf.rxQueues) {
        const fd = itf.driver.rxWaitFd(q);
        if (fd >= 0) this.graph.removeWaitFd(fd);
      }
      if (itf.rxCapture || itf.txCapture) this.stopCapture(itf.name);
      itf.driver.close();
    }
  }

  private inputNode(kind: string): NodeRuntime {
    const name = `${kind.replace(/_/g, '-')}-input`;
    if (this.graph.hasNode(name)) return this.graph.node(name);
    const poll: PollList = { ifs: [], queues: [] };
    this.polls.set(name, poll);
    return this.graph.register({
      name,
      type: 'input',
      flags: NodeFlag.TRACE_SUPPORTED,
      next: ['error-drop'],
      runtimeData: poll,
      fn: deviceInput,
      formatTrace: formatInputTrace,
    });
  }

  private createTxNodes(itf: Interface): void {
    const g = this.graph;
    const txName = `${itf.name}-tx`, outName = `${itf.name}-output`;
    for (const n of [txName, outName]) if (g.hasNode(n)) throw new Error(`interface "${itf.name}": node "${n}" already exists`);
    itf.tx = g.register({
      name: txName,
      next: ['error-drop'],
      errors: [{ name: 'no_tx_slots', description: 'no free tx slots', severity: 'error' }],
      runtimeData: itf,
      fn: deviceTx,
      formatTrace: (r) => String(r),
    });
    itf.output = g.register({
      name: outName,
      flags: NodeFlag.IS_OUTPUT,
      next: [txName],
      runtimeData: itf,
      fn: deviceOutput,
      formatTrace: (r) => String(r),
    });
  }
}

/** <kind>-input: one rx burst per (interface, queue), straight into the interface's next node. */
function deviceInput(rt: NodeRuntime): number {
  const poll = rt.runtimeData as PollList;
  const g = rt.graph;
  const pool = g.pool;
  const rxIf = pool.rxIf;
  const out = rt.scratch;
  let total = 0;
  for (let k = 0; k < poll.ifs.length; k++) {
    const itf = poll.ifs[k];
    const n = itf.driver.rxBurst(poll.queues[k], out, FRAME_SIZE);
    if (n === 0) continue;
    const ix = itf.index;
    for (let i = 0; i < n; i++) rxIf[out[i]] = ix;
    if (itf.rxCapture !== null) itf.rxCapture.write(pool, out, 0, n);
    g.traceInput(rt, out, 0, n);
    if (rt.traceOn) {
      for (let i = 0; i < n; i++) rt.addTrace(out[i], { itf, queue: poll.queues[k], len: pool.packetLength(out[i]) });
    }
    g.enqueueToSingleNext(rt, itf.inputNext, out, 0, n);
    total += n;
  }
  return total;
}

function formatInputTrace(r: unknown): string {
  const t = r as { itf: Interface; queue: number; len: number };
  return `${t.itf.driver.kind}: ${t.itf.name} (${t.itf.index}) queue ${t.queue} len ${t.len} next-node ${t.itf.next}`;
}

/** <if>-output: marks the tx interface and passes the vector to <if>-tx. */
function deviceOutput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const itf = rt.runtimeData as Interface;
  const txIf = rt.graph.pool.txIf;
  const ix = itf.index;
  for (let i = 0; i < f.n; i++) txIf[f.vec[i]] = ix;
  if (rt.traceOn) traceBytes(rt, f, itf.name);
  rt.graph.enqueueToSingleNext(rt, 0, f.vec, 0, f.n);
  return f.n;
}

/** <if>-tx: one txBurst for the vector; what the driver refuses is dropped and counted. */
function deviceTx(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const itf = rt.runtimeData as Interface;
  const g = rt.graph;
  if (rt.traceOn) {
    for (let i = 0; i < f.n; i++) rt.addTrace(f.vec[i], `${itf.name} queue 0 len ${g.pool.packetLength(f.vec[i])}`);
  }
  // Captured before the driver takes (and may free) the buffers.
  if (itf.txCapture !== null) itf.txCapture.write(g.pool, f.vec, 0, f.n);
  const sent = itf.driver.txBurst(0, f.vec, 0, f.n);
  if (sent < f.n) {
    const err = g.pool.error, code = rt.errorIndex(TX_NO_SLOTS);
    for (let i = sent; i < f.n; i++) err[f.vec[i]] = code;
    itf.txNoSlots += f.n - sent;
    g.enqueueToSingleNext(rt, 0, f.vec, sent, f.n - sent);
  }
  return f.n;
}

/** Trace record of an output node: the length and the first bytes, as VPP's hex dumps. */
function traceBytes(rt: NodeRuntime, f: Frame, ifName: string): void {
  const pool = rt.graph.pool;
  for (let i = 0; i < f.n; i++) {
    const bi = f.vec[i];
    const o = pool.offset[bi];
    const len = pool.packetLength(bi);
    const show = pool.u8.subarray(o, o + Math.min(pool.length[bi], 64));
    const hex = Array.from(show, (b) => b.toString(16).padStart(2, '0')).join('');
    const lines = [`${ifName} len ${len}`];
    for (let p = 0; p < hex.length; p += 64) lines.push(`  ${(p / 2).toString(16).padStart(8, '0')}: ${hex.slice(p, p + 64)}`);
    rt.addTrace(bi, lines.join('\n'));
  }
}
