/**
 * The interface registry and the device nodes that connect drivers to the graph:
 *
 *   <kind>-input   one input node per driver family (pipe-input, pcap-input, memif-input...),
 *                  polling every rx queue of that family's interfaces on this thread
 *   <if>-output    counts what an interface transmits (an IS_OUTPUT node for `show runtime`)
 *   <if>-tx        hands the vector to the driver in one txBurst; what the driver refuses
 *                  while the link is up waits in the interface's transmit backlog (in order,
 *                  before anything newer) and goes out when the ring has room, retried by the
 *                  input node every pass (the loop does not sleep on a backlog); only what the
 *                  backlog has no room for, or anything refused while the link is down, is
 *                  dropped with "no free tx slots". A full ring is local congestion, not loss:
 *                  the transport above never sees it as a lost segment (issue 31).
 *
 * A fault injector (drivers/fault.ts) can sit on an interface's rx, tx or both (`setFault`, or
 * `InterfaceOptions.fault`). On rx it works on each burst right after the driver, before the
 * rx capture and trace (they see what "arrived"); on tx right before the driver, after the tx
 * capture and trace (they see what the stack sent). Held (reordered) rx packets leave through
 * the input node on a later poll; held tx packets go to the driver with a later tx vector, or
 * from the input node of the interface's kind when their delay runs out and nothing follows
 * (a due source wakes the sleeping loop for that).
 *
 * Interface index 0 is reserved (VPP's local0), so `rxIf`/`txIf` of 0 means "none".
 *
 * An interface whose driver is remote (drivers/remote.ts: another worker owns it) has its
 * output and tx nodes but no input node, fault injector or capture: those are the device's.
 */
import { performance } from 'node:perf_hooks';
import { nowNs } from '../graph/clock.ts';
import { Graph, type NodeRuntime, type Frame, NodeFlag, FRAME_SIZE, type BufferPool } from '../graph/index.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { PCAP_GLOBAL_HEADER_BYTES, PCAP_RECORD_HEADER_BYTES, PcapWriter } from './pcap-file.ts';
import {
  FaultInjector,
  validateFaultConfig,
  validateFaultDirections,
  type FaultConfig,
  type FaultCounters,
  type FaultDirections,
} from './fault.ts';

export interface InterfaceOptions {
  /** Node the input node sends this interface's packets to (default "ethernet-input"). */
  next?: string;
  /** Fault injection on receive and/or transmit from the start (see `Interfaces.setFault`). */
  fault?: FaultDirections;
  /** Packets a full transmit ring may hold back (0: none, drop at once); default TX_BACKLOG. */
  txBacklog?: number;
}

/** The transmit backlog of an interface by default (packets). */
export const TX_BACKLOG = 2048;
export const MAX_TX_BACKLOG = 65536;

/**
 * An interface's counters are its driver's, one definition each, but for `txDrops`: every
 * packet the interface dropped on transmit (refused while the link is down, or with the backlog
 * full), the same event <if>-tx counts as "no free tx slots" (`show errors`), never added to it.
 * A packet the driver refused and the backlog held is not a drop; `txHeld` counts those.
 */
export type InterfaceCounters = DriverCounters & { txHeld: number };

export class Interface {
  readonly index: number;
  readonly name: string;
  readonly driver: Driver;
  readonly next: string;
  /** Next index in the input node's arcs. */
  inputNext = 0;
  output!: NodeRuntime;
  tx!: NodeRuntime;
  /** Packet capture of what this interface receives / transmits (`pcap trace`), if on. */
  rxCapture: Capture | null = null;
  txCapture: Capture | null = null;
  /** Fault injectors on what this interface receives / transmits, if any. */
  rxFault: FaultInjector | null = null;
  txFault: FaultInjector | null = null;
  /** Name of the input node that polls this interface. */
  inputName = '';
  /** Its input node's poll list (null: another worker's interface, transmit only). */
  poll: PollList | null = null;
  /** Rx queues this thread polls. */
  readonly rxQueues: number[];
  /** Packets the driver refused while the link was up, oldest first (a ring of buffer indices). */
  readonly txBacklog: Uint32Array;
  txBlHead = 0;
  txBlCount = 0;
  /** On its input node's list of backlogged interfaces. */
  txBlListed = false;
  /** Packets dropped on transmit, and packets held in the backlog (InterfaceCounters). */
  txDropped = 0;
  txHeld = 0;

  constructor(index: number, driver: Driver, next: string, txBacklog = TX_BACKLOG) {
    this.index = index;
    this.name = driver.name;
    this.driver = driver;
    this.next = next;
    this.rxQueues = driver.pollQueues?.slice() ?? Array.from({ length: driver.rxQueues }, (_, i) => i);
    this.txBacklog = new Uint32Array(txBacklog);
  }

  get macString(): string {
    return Array.from(this.driver.mac, (b) => b.toString(16).padStart(2, '0')).join(':');
  }

  /** What the counters were at the last `clearCounters` (null: never cleared). */
  private countersBase: InterfaceCounters | null = null;

  counters(): InterfaceCounters {
    const now: InterfaceCounters = { ...this.driver.counters(), txDrops: this.txDropped, txHeld: this.txHeld };
    const base = this.countersBase;
    if (base === null) return now;
    for (const k of Object.keys(now) as (keyof InterfaceCounters)[]) now[k] = Math.max(0, now[k] - base[k]);
    return now;
  }

  /** VPP's clear interfaces: the counters count from zero again (the driver's own, show hardware's, go on). */
  clearCounters(): void {
    this.countersBase = null;
    this.countersBase = this.counters();
  }
}

/**
 * The wall clock in nanoseconds, split for pcap's record header: the process's time origin (the
 * wall clock when it started, sub-millisecond) plus the monotonic clock since (graph/clock.ts's
 * nowNs, hrtime-based: nanosecond resolution). Kept in two numbers, so nothing is lost to a
 * double's 53 bits. A capture reads it once per burst: at receive, right after the driver handed
 * the burst over; at transmit, right before the driver takes it.
 */
const ORIGIN_SEC = Math.floor(performance.timeOrigin / 1000);
const ORIGIN_NS = Math.round((performance.timeOrigin - ORIGIN_SEC * 1000) * 1e6);
const stamp = { sec: 0, nsec: 0 };

function pcapNow(): typeof stamp {
  const ns = ORIGIN_NS + nowNs();
  const carry = Math.floor(ns / 1e9);
  stamp.sec = ORIGIN_SEC + carry;
  stamp.nsec = Math.floor(ns - carry * 1e9);
  return stamp;
}

/** A file to capture into: a path (opened, or replaced, here) or a file opened already (drivers/capture-file.ts). */
export type CaptureTarget = string | { path: string; fd: number };

/** A running capture: the file, how many packets and bytes it may still take, and why it stopped. */
export class Capture {
  readonly writer: PcapWriter;
  readonly path: string;
  remaining: number;
  /** Largest file, header included. */
  readonly maxBytes: number;
  bytes = PCAP_GLOBAL_HEADER_BYTES;
  /** Why it takes no more packets (count or byte limit reached), or null while it does. */
  stopped: string | null = null;
  private readonly onStop: ((c: Capture) => void) | null;
  constructor(target: CaptureTarget, max: number, maxBytes = Infinity, onStop: ((c: Capture) => void) | null = null) {
    this.path = typeof target === 'string' ? target : target.path;
    this.writer = new PcapWriter(this.path, {
      nanosecond: true,
      ...(typeof target === 'string' ? {} : { fd: target.fd }),
    });
    this.remaining = max;
    this.maxBytes = maxBytes;
    this.onStop = onStop;
  }

  /** Append `bufs[off..off+n)` (whole chains) to the file; one write per call. */
  write(pool: BufferPool, bufs: Uint32Array, off: number, n: number): void {
    if (this.stopped !== null) return;
    const w = this.writer;
    const { sec, nsec } = pcapNow();
    const m = n < this.remaining ? n : this.remaining;
    let i = 0;
    for (; i < m; i++) {
      const bi = bufs[off + i];
      const len = pool.packetLength(bi);
      if (this.bytes + PCAP_RECORD_HEADER_BYTES + len > this.maxBytes) break;
      this.bytes += PCAP_RECORD_HEADER_BYTES + len;
      const at = w.beginRecord(sec, nsec, len, len);
      pool.readPacket(bi, w.buf, at);
    }
    this.remaining -= i;
    w.flush();
    if (i < m) this.stop(`stopped at ${this.bytes} bytes: the next packet would pass the limit of ${this.maxBytes}`);
    else if (this.remaining === 0) this.stop(`stopped after ${w.records} packets, the count asked for`);
  }

  /** Take no more packets; the file is flushed and closed. */
  private stop(why: string): void {
    this.stopped = why;
    this.remaining = 0;
    this.writer.close();
    this.onStop?.(this);
  }
}

export interface CaptureOptions {
  /** File for received packets. */
  rx?: CaptureTarget;
  /** File for transmitted packets. */
  tx?: CaptureTarget;
  /** Stop after this many packets per direction (default unlimited). */
  max?: number;
  /** Stop a direction before its file passes this many bytes (default unlimited). */
  maxBytes?: number;
  /** Told once when a direction stops by itself (`stopped` says why). */
  onStop?: (c: Capture) => void;
}

/** The earlier of `due` and when `f`'s first held packet is due (-1 = never). */
function earlier(due: number, f: FaultInjector | null): number {
  if (f === null || f.held === 0) return due;
  const d = f.nextDueNs();
  return due < 0 || d < due ? d : due;
}

/** What an input node polls: one (interface, queue) pair per entry. */
interface PollList {
  ifs: Interface[];
  queues: number[];
  /** Interfaces of this kind with a tx fault injector (held packets to release on time). */
  txFaulty: Interface[];
  /** Interfaces of this kind with packets in their transmit backlog (retried every pass). */
  txBacklogged: Interface[];
}

const TX_NO_SLOTS = 0;
const TX_NO_BUFFERS = 1;

export class Interfaces {
  readonly graph: Graph;
  private readonly list: (Interface | null)[] = [null];
  private readonly byName = new Map<string, Interface>();
  private readonly polls = new Map<string, PollList>();
  private faultDueAdded = false;

  constructor(graph: Graph) {
    this.graph = graph;
    // A full ring frees as the peer takes packets, which wakes nothing here: no sleep while a
    // backlog waits.
    graph.addSleepGuard(() => this.list.some((i) => i !== null && i.txBlCount > 0));
  }

  /**
   * Open `driver` on the graph's pool and create its nodes. Throws (and leaves nothing behind)
   * when the driver cannot open or a node name is taken.
   */
  add(driver: Driver, opts: InterfaceOptions = {}): Interface {
    const g = this.graph;
    if (this.byName.has(driver.name)) throw new Error(`interface "${driver.name}" already exists`);
    const next = opts.next ?? 'ethernet-input';
    const fault = opts.fault === undefined ? {} : validateFaultDirections(opts.fault, `interface ${driver.name} fault`);
    if (driver.remote === true && (fault.rx || fault.tx))
      throw new Error(
        `interface "${driver.name}": another worker's here: its fault injector runs on the device's workers`,
      );
    const backlog = opts.txBacklog ?? TX_BACKLOG;
    if (!Number.isInteger(backlog) || backlog < 0 || backlog > MAX_TX_BACKLOG)
      throw new Error(
        `interface "${driver.name}": txBacklog must be an integer in 0..${MAX_TX_BACKLOG}, got ${backlog}`,
      );
    driver.open(g.pool);
    // Another worker's interface has no input node here to retry a backlog from: it drops.
    const itf = new Interface(this.list.length, driver, next, driver.remote === true ? 0 : backlog);
    try {
      this.createTxNodes(itf);
      // Another worker's interface: transmit only (no input node, nothing to poll).
      if (driver.remote === true) {
        this.list.push(itf);
        this.byName.set(itf.name, itf);
        return itf;
      }
      const input = this.inputNode(driver.kind);
      itf.inputName = input.name;
      itf.poll = this.polls.get(input.name) as PollList;
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
    if (fault.rx) this.setFaultDir(itf, 'rx', fault.rx);
    if (fault.tx) this.setFaultDir(itf, 'tx', fault.tx);
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

  /** What each input node polls, in order: (interface, rx queue) pairs (show interface rx-placement). */
  placement(): { node: string; queues: { itf: Interface; queue: number }[] }[] {
    return [...this.polls].map(([node, p]) => ({ node, queues: p.ifs.map((itf, k) => ({ itf, queue: p.queues[k] })) }));
  }

  /**
   * Capture what an interface receives and/or transmits to pcap files (nanosecond
   * timestamps), like VPP's `pcap trace rx tx`. Replaces a capture already running.
   */
  capture(name: string, opts: CaptureOptions): void {
    const itf = this.device(name, 'capture');
    const max = opts.max ?? Infinity;
    if (!(max > 0)) throw new RangeError(`capture on ${name}: max must be a positive number, got ${opts.max}`);
    if (!opts.rx && !opts.tx) throw new Error(`capture on ${name}: give an rx file, a tx file or both`);
    this.stopCapture(name);
    const maxBytes = opts.maxBytes ?? Infinity;
    if (!(maxBytes > PCAP_GLOBAL_HEADER_BYTES))
      throw new RangeError(
        `capture on ${name}: maxBytes must be more than the ${PCAP_GLOBAL_HEADER_BYTES}-byte header, got ${opts.maxBytes}`,
      );
    if (opts.rx) itf.rxCapture = new Capture(opts.rx, max, maxBytes, opts.onStop ?? null);
    if (opts.tx) itf.txCapture = new Capture(opts.tx, max, maxBytes, opts.onStop ?? null);
  }

  /** Stop capturing on an interface and close its files. */
  stopCapture(name: string): void {
    const itf = this.get(name);
    if (itf.rxCapture) itf.rxCapture.writer.close();
    if (itf.txCapture) itf.txCapture.writer.close();
    itf.rxCapture = itf.txCapture = null;
  }

  /**
   * Put a fault injector on an interface's rx, tx or both, change the one there, or remove it
   * (`cfg` null: packets it holds go back to the pool, its counters go). A new configuration
   * replaces the old one whole (keys left out take their defaults), keeps the counters and the
   * packets held; the generator restarts from `cfg.seed` only when a seed is given, otherwise
   * it goes on where it was. Throws for an unknown interface, direction or bad configuration
   * (and then changes nothing).
   */
  setFault(name: string, dir: 'rx' | 'tx' | 'both', cfg: FaultConfig | null): void {
    const itf = this.device(name, 'fault');
    if (dir !== 'rx' && dir !== 'tx' && dir !== 'both')
      throw new RangeError(`fault on ${name}: direction must be rx, tx or both, got ${String(dir)}`);
    const c = cfg === null ? null : validateFaultConfig(cfg, `interface ${name} fault.${dir}`);
    if (dir !== 'tx') this.setFaultDir(itf, 'rx', c);
    if (dir !== 'rx') this.setFaultDir(itf, 'tx', c);
  }

  /** Counters of an interface's fault injectors (null for a direction without one). */
  faultCounters(name: string): { rx: FaultCounters | null; tx: FaultCounters | null } {
    const itf = this.get(name);
    return { rx: itf.rxFault ? itf.rxFault.counters() : null, tx: itf.txFault ? itf.txFault.counters() : null };
  }

  /** Interface `name` when this thread has its device (not another worker's remote interface). */
  private device(name: string, what: string): Interface {
    const itf = this.get(name);
    if (itf.driver.remote === true)
      throw new RangeError(
        `${what} on ${name}: another worker owns this interface; its ${what} runs on the workers with its device`,
      );
    return itf;
  }

  private setFaultDir(itf: Interface, dir: 'rx' | 'tx', cfg: FaultConfig | null): void {
    const have = dir === 'rx' ? itf.rxFault : itf.txFault;
    if (cfg === null) {
      if (have === null) return;
      have.freeHeld(this.graph.pool);
      if (dir === 'rx') itf.rxFault = null;
      else {
        itf.txFault = null;
        const txFaulty = (this.polls.get(itf.inputName) as PollList).txFaulty;
        txFaulty.splice(txFaulty.indexOf(itf), 1);
      }
      return;
    }
    if (have !== null) {
      have.configure(cfg);
    } else if (dir === 'rx') {
      itf.rxFault = new FaultInjector(cfg, 0);
    } else {
      itf.txFault = new FaultInjector(cfg, 1);
      (this.polls.get(itf.inputName) as PollList).txFaulty.push(itf);
    }
    if (!this.faultDueAdded) {
      this.faultDueAdded = true;
      this.graph.addDueSource(this.faultDue);
    }
    // A sleeping loop recomputes when to wake.
    this.graph.wake();
  }

  /** When the first held packet of any injector is due (the loop must not sleep past it). */
  private readonly faultDue = (): number => {
    let due = -1;
    for (let i = 1; i < this.list.length; i++) {
      const itf = this.list[i] as Interface;
      due = earlier(due, itf.rxFault);
      due = earlier(due, itf.txFault);
    }
    return due;
  };

  /** Close every driver (their buffers, and those fault injectors hold, return to the pool). */
  closeAll(): void {
    for (const itf of this.all()) {
      for (const q of itf.rxQueues) {
        const fd = itf.driver.rxWaitFd(q);
        if (fd >= 0) this.graph.removeWaitFd(fd);
      }
      if (itf.rxCapture || itf.txCapture) this.stopCapture(itf.name);
      this.setFaultDir(itf, 'rx', null);
      this.setFaultDir(itf, 'tx', null);
      dropBacklog(this.graph.pool, itf, null);
      itf.driver.close();
    }
  }

  private inputNode(kind: string): NodeRuntime {
    const name = `${kind.replace(/_/g, '-')}-input`;
    if (this.graph.hasNode(name)) return this.graph.node(name);
    const poll: PollList = { ifs: [], queues: [], txFaulty: [], txBacklogged: [] };
    this.polls.set(name, poll);
    return this.graph.register({
      name,
      type: 'input',
      pollPhase: 'receive',
      flags: NodeFlag.TRACE_SUPPORTED,
      next: ['error-drop'],
      runtimeData: poll,
      fn: deviceInput,
      formatTrace: formatInputTrace,
    });
  }

  private createTxNodes(itf: Interface): void {
    const g = this.graph;
    const txName = `${itf.name}-tx`,
      outName = `${itf.name}-output`;
    for (const n of [txName, outName])
      if (g.hasNode(n)) throw new Error(`interface "${itf.name}": node "${n}" already exists`);
    itf.tx = g.register({
      name: txName,
      next: ['error-drop'],
      errors: [
        { name: 'no_tx_slots', description: 'no free tx slots', severity: 'error' },
        {
          name: 'no_buffers',
          description: 'no buffers to copy a payload sent from an MR into (dropped)',
          severity: 'error',
        },
      ],
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

/**
 * <kind>-input: one rx burst per (interface, queue), through the rx fault injector if any,
 * straight into the interface's next node. Also sends held tx packets whose delay ran out.
 */
function deviceInput(rt: NodeRuntime): number {
  const poll = rt.runtimeData as PollList;
  const g = rt.graph;
  const pool = g.pool;
  const rxIf = pool.rxIf;
  let total = 0;
  if (poll.txFaulty.length !== 0) total += releaseHeldTx(rt, poll.txFaulty);
  if (poll.txBacklogged.length !== 0) total += retryBacklogs(rt, poll.txBacklogged);
  for (let k = 0; k < poll.ifs.length; k++) {
    const itf = poll.ifs[k];
    let out = rt.scratch;
    let n = itf.driver.rxBurst(poll.queues[k], out, FRAME_SIZE);
    const ix = itf.index;
    for (let i = 0; i < n; i++) rxIf[out[i]] = ix;
    const fault = itf.rxFault;
    // A fault injector or capture reads (and copies) frames as bytes: none left in a peer's memory.
    if (n !== 0 && (fault !== null || itf.rxCapture !== null)) for (let i = 0; i < n; i++) pool.settlePeer(out[i]);
    if (fault !== null && (n !== 0 || fault.held !== 0)) {
      n = fault.process(pool, out, 0, n, g.clock.nowNs());
      out = fault.out;
    }
    if (n === 0) continue;
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

/**
 * <if>-tx: one txBurst for the vector (after the tx fault injector, if any); what the driver
 * refuses is dropped and counted.
 */
function deviceTx(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const itf = rt.runtimeData as Interface;
  const g = rt.graph;
  const n = f.n;
  // Payloads sent from an MR in place (BufferFlag.EXT_DATA) are copied into the pool for a
  // driver that does not gather them itself (its senders then copy at once: txTakes), and for
  // the capture and the fault injector.
  const ext = g.pool.ext;
  if (ext.wanted) {
    const takes = itf.driver.txExternal?.() === true;
    if (itf.index < ext.txTakes.length) ext.txTakes[itf.index] = takes ? 1 : 0;
    if (!takes || itf.txCapture !== null || itf.txFault !== null) materializeAll(rt, f);
  }
  if (rt.traceOn) {
    for (let i = 0; i < f.n; i++) rt.addTrace(f.vec[i], `${itf.name} queue 0 len ${g.pool.packetLength(f.vec[i])}`);
  }
  // Captured before the driver takes (and may free) the buffers.
  if (itf.txCapture !== null) itf.txCapture.write(g.pool, f.vec, 0, f.n);
  const fault = itf.txFault;
  if (fault === null) transmit(rt, itf, f.vec, f.n);
  else transmit(rt, itf, fault.out, fault.process(g.pool, f.vec, 0, f.n, g.clock.nowNs()));
  return n;
}

/**
 * Copy every external payload of the frame into the pool (BufferPool.materialize); a packet the
 * pool has no buffers for goes to error-drop as "no buffers", the frame closing up behind it.
 */
function materializeAll(rt: NodeRuntime, f: Frame): void {
  const pool = rt.graph.pool;
  const kept = pool.materializeVector(f.vec, f.n, rt.scratch);
  if (kept === f.n) return;
  const code = rt.errorIndex(TX_NO_BUFFERS);
  for (let i = 0; i < f.n - kept; i++) pool.error[rt.scratch[i]] = code;
  rt.graph.enqueueToSingleNext(rt, 0, rt.scratch, 0, f.n - kept);
  f.n = kept;
}

/**
 * Hand `vec[0..n)` to the interface's driver in one txBurst, after what its backlog holds (in
 * order: nothing newer passes an older packet). What the driver refuses while the link is up
 * goes into the backlog as far as it has room; the rest (and anything refused with the link
 * down) goes to `rt`'s next 0 (error-drop, on both the tx and the input nodes) as the tx node's
 * "no free tx slots", the interface's txDrops.
 */
function transmit(rt: NodeRuntime, itf: Interface, vec: Uint32Array, n: number): void {
  if (itf.txBlCount > 0) flushBacklog(itf);
  if (n === 0) return;
  const sent = itf.txBlCount === 0 ? itf.driver.txBurst(0, vec, 0, n) : 0;
  if (sent === n) return;
  let i = sent;
  const bl = itf.txBacklog,
    cap = bl.length;
  if (cap > 0 && itf.driver.linkUp()) {
    for (; i < n && itf.txBlCount < cap; i++) {
      bl[(itf.txBlHead + itf.txBlCount) % cap] = vec[i];
      itf.txBlCount++;
    }
    itf.txHeld += i - sent;
    if (itf.txBlCount > 0 && !itf.txBlListed && itf.poll !== null) {
      itf.txBlListed = true;
      itf.poll.txBacklogged.push(itf);
    }
  }
  if (i < n) {
    const g = rt.graph;
    const err = g.pool.error,
      code = itf.tx.errorIndex(TX_NO_SLOTS);
    for (let k = i; k < n; k++) err[vec[k]] = code;
    itf.txDropped += n - i;
    g.enqueueToSingleNext(rt, 0, vec, i, n - i);
  }
}

/** Send what the backlog holds, oldest first, as far as the driver takes it; how many went. */
function flushBacklog(itf: Interface): number {
  const bl = itf.txBacklog,
    cap = bl.length;
  let total = 0;
  while (itf.txBlCount > 0) {
    const run = Math.min(itf.txBlCount, cap - itf.txBlHead);
    const s = itf.driver.txBurst(0, bl, itf.txBlHead, run);
    itf.txBlHead = (itf.txBlHead + s) % cap;
    itf.txBlCount -= s;
    total += s;
    if (s < run) break;
  }
  return total;
}

/**
 * The backlog's packets dropped: freed when the interface closes (`rt` null), else (its link
 * went down) sent to `rt`'s next 0, error-drop, as "no free tx slots" and counted in txDrops.
 */
function dropBacklog(pool: BufferPool, itf: Interface, rt: NodeRuntime | null): void {
  const bl = itf.txBacklog,
    cap = bl.length;
  const code = rt === null ? 0 : itf.tx.errorIndex(TX_NO_SLOTS);
  while (itf.txBlCount > 0) {
    const run = Math.min(itf.txBlCount, cap - itf.txBlHead);
    if (rt === null) pool.free(bl, itf.txBlHead, run);
    else {
      for (let k = 0; k < run; k++) pool.error[bl[itf.txBlHead + k]] = code;
      rt.graph.enqueueToSingleNext(rt, 0, bl, itf.txBlHead, run);
      itf.txDropped += run;
    }
    itf.txBlHead = (itf.txBlHead + run) % cap;
    itf.txBlCount -= run;
  }
}

/**
 * From the input node, every pass: the backlogged interfaces of its kind send what their rings
 * now take; one whose link went down drops its backlog. An interface leaves the list when empty.
 */
function retryBacklogs(rt: NodeRuntime, list: Interface[]): number {
  let total = 0;
  for (let k = 0; k < list.length; k++) {
    const itf = list[k];
    if (itf.driver.linkUp()) total += flushBacklog(itf);
    else dropBacklog(rt.graph.pool, itf, rt);
    if (itf.txBlCount === 0) {
      itf.txBlListed = false;
      list[k] = list[list.length - 1];
      list.pop();
      k--;
    }
  }
  return total;
}

/** From the input node: held tx packets whose delay ran out go to their drivers. */
function releaseHeldTx(rt: NodeRuntime, list: Interface[]): number {
  let total = 0;
  let now = -1;
  for (let k = 0; k < list.length; k++) {
    const itf = list[k];
    const fault = itf.txFault as FaultInjector;
    if (fault.held === 0) continue;
    if (now < 0) now = rt.graph.clock.nowNs();
    const n = fault.release(now);
    transmit(rt, itf, fault.out, n);
    total += n;
  }
  return total;
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
    for (let p = 0; p < hex.length; p += 64)
      lines.push(`  ${(p / 2).toString(16).padStart(8, '0')}: ${hex.slice(p, p + 64)}`);
    rt.addTrace(bi, lines.join('\n'));
  }
}
