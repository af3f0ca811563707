/**
 * The vector engine: node registry, frames, batched enqueue, the dispatch loop, adaptive
 * polling, timers, processes, counters and trace. One Graph per data-plane thread.
 *
 * A pass (VPP's main loop iteration): poll every input node in state 'polling' and those in
 * state 'interrupt' that were given work since (interrupt(): ddp-output, udp4-send,
 * icmp4-ping, whose producers say so), drain the pending frames until the graph is empty
 * (frames enqueued while draining run in the same pass), run due timers and ready processes.
 * Frames are per target node: everything enqueued to a node before it runs lands in the same
 * vector, up to 256, so vectors grow under load.
 */
import { BufferPool } from './buffer-pool.ts';
import { type Clock, systemClock } from './clock.ts';
import {
  ErrorCounters,
  RT_CALLS,
  RT_CLOCKS,
  RT_MAX_CLOCKS,
  RT_MAX_VECTORS,
  RT_STRIDE,
  RT_SUSPENDS,
  RT_VECTORS,
  RuntimeCounters,
} from './counters.ts';
import type {
  ErrorThreadSnapshot,
  GraphThreadSnapshot,
  RuntimeRow,
  RuntimeThreadSnapshot,
  TraceThreadSnapshot,
} from './format.ts';
import {
  FRAME_SIZE,
  Frame,
  NodeFlag,
  type NodeRegistration,
  NodeRuntime,
  type PollPhase,
  type ProcessContext,
  type ProcessEvent,
  type ProcessWait,
} from './node.ts';
import { TimerWheel } from './timer-wheel.ts';
import { TraceBuffer } from './trace.ts';
import { IdleWaiter, Turns } from './waiter.ts';

export class GraphError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GraphError';
  }
}

export interface GraphOptions {
  pool: BufferPool;
  clock?: Clock;
  threadIndex?: number;
  threadName?: string;
  /** The CPU the thread is pinned to (`show runtime`'s "(lcore N)"), if it is. */
  lcore?: number;
  /** Most packets `trace add` keeps (trace.max-packets). */
  traceMaxPackets?: number;
  /** Timer wheel tick (default 100 µs). */
  timerTickNs?: number;
  /**
   * Longest the loop keeps running passes before yielding to the event loop, in µs (default
   * 0: one pass per event-loop turn, so the API on the same thread stays responsive).
   */
  passBudgetUs?: number;
  /**
   * While this is the only running graph on its thread, how long one event-loop turn keeps
   * running passes, empty ones included, in µs (default 0: as passBudgetUs). An empty pass costs
   * ~1 µs here; going round the event loop to poll again costs 1-2 µs more (libuv's poll phase
   * is an epoll_wait), so spinning picks a packet up sooner. With another graph on the thread
   * (two stacks in one process), an empty pass ends the turn so the other one can run.
   */
  spinUs?: number;
  /** How long the loop keeps polling with no work before it sleeps, in µs (default 50). */
  idlePollUs?: number;
  /** 'adaptive' (default): poll while busy, sleep when idle. 'polling': never sleep. */
  mode?: 'adaptive' | 'polling';
  /**
   * Called after each empty pass, and after an event-loop turn that found no work, while the loop
   * keeps polling (native sched_yield), as long as something asked for it (addIdleYieldUser: a
   * verbs program attached):
   * a busy-polling loop otherwise holds its CPU to the end of its time slice, and a program it
   * serves (spinning on its CQ, on the same CPU) waits that long. Not otherwise: with nobody of
   * ours waiting, a yield only hands the CPU to unrelated processes. Default none.
   */
  idleYield?: () => void;
}

const PROCESS_TIMER_USER = 0xfffffffe;
/** The order input nodes are polled in within a pass, by their pollPhase. */
const POLL_PHASES: readonly PollPhase[] = ['work', 'transmit', 'receive'];

/**
 * Throw `e` again from a microtask: an application callback's error surfaces as uncaught, its
 * own, while the loop that called it (and the callbacks after it) goes on.
 */
export function throwLater(e: unknown): void {
  queueMicrotask(() => {
    throw e;
  });
}

/** Graphs running on this thread (module state is per thread under worker_threads). */
let runningGraphs = 0;

export class Graph {
  readonly pool: BufferPool;
  readonly clock: Clock;
  readonly threadIndex: number;
  readonly threadName: string;
  readonly lcore: number | undefined;
  readonly nodes: NodeRuntime[] = [];
  private readonly byName = new Map<string, NodeRuntime>();
  private built = false;

  readonly runtime: RuntimeCounters;
  private readonly errors: ErrorCounters;
  /** Error counters (shared array), indexed by global error index. */
  errorCounts: Float64Array;
  private nErrors = 0;
  /** Node and code of each global error index. */
  private readonly errorOwner: { node: NodeRuntime; code: number }[] = [];

  readonly trace: TraceBuffer;
  readonly timers: TimerWheel;
  private readonly startNs: number;

  private inputs: NodeRuntime[] = [];
  private readonly pending: Frame[] = [];
  private pendLen = 0;
  private readonly freeFrames: Frame[] = [];
  private readyProcesses: NodeRuntime[] = [];
  /** The frame the running node was called with, until it is passed on whole. */
  private dispatching: Frame | null = null;
  /** The node being dispatched (named in errors a node throws). */
  private current: NodeRuntime | null = null;

  // The run loop.
  private running = false;
  private scheduled = false;
  private sleeping = false;
  /** The clock's ticks per nanosecond, measured at the first turn of the loop (its spin budget). */
  private loopTicksPerNs = 0;
  /** The cycle count before which runTimers() does not read the time (its wheel's next tick). */
  private timerGateTsc = 0;
  private wakeRequested = false;
  /**
   * When the loop's current idle stretch began, in cycles (-1: not idle). In a typed array: the
   * adaptive loop reads and writes it every idle turn, and a double kept in a field or read
   * through a call can be a new heap number each time.
   */
  private readonly idleSince = new Float64Array([-1]);
  private readonly passBudgetNs: number;
  /** Set by yieldSoon(): the current event-loop turn ends after this pass. */
  private yieldRequested = false;
  /** True while the loop runs a turn's passes (defer() queues to its end). */
  private inTurn = false;
  /** defer()'s callbacks for the end of this turn: [0, nDeferred), the array kept and reused. */
  private readonly deferred: ((() => void) | null)[] = [];
  private nDeferred = 0;
  private readonly spinNs: number;
  private readonly idleYield: (() => void) | null;
  private idleYieldUserCount = 0;
  private readonly idlePollNs: number;
  private readonly mode: 'adaptive' | 'polling';
  private waiter: IdleWaiter | null = null;
  private turns: Turns | null = null;
  private readonly sleepGuards: (() => boolean)[] = [];
  private readonly dueSources: (() => number)[] = [];
  private readonly closeHooks: (() => void)[] = [];
  private readonly waitFds = new Set<number>();
  /** Set when a node throws; the loop logs it and goes on. */
  lastError: Error | null = null;
  /** How many times a node threw. */
  errorsThrown = 0;
  onError: (err: Error) => void = (err) => console.error(`rdma-graph: ${err.message}`);
  /** Passes that found work / slept (for tests and `show runtime`). */
  sleeps = 0;
  wakeups = 0;

  constructor(opts: GraphOptions) {
    this.pool = opts.pool;
    this.clock = opts.clock ?? systemClock();
    this.threadIndex = opts.threadIndex ?? 0;
    this.threadName = opts.threadName ?? 'main';
    this.lcore = opts.lcore;
    this.startNs = this.clock.nowNs();
    this.runtime = new RuntimeCounters(64, this.startNs);
    this.errors = new ErrorCounters(256);
    this.errorCounts = this.errors.counts;
    this.trace = new TraceBuffer(this.pool, opts.traceMaxPackets ?? 1000, this.clock.nowNs, this.startNs);
    this.timers = new TimerWheel(this.startNs, { tickNs: opts.timerTickNs });
    this.passBudgetNs = (opts.passBudgetUs ?? 0) * 1000;
    this.spinNs = (opts.spinUs ?? 0) * 1000;
    this.idleYield = opts.idleYield ?? null;
    this.idlePollNs = (opts.idlePollUs ?? 50) * 1000;
    this.mode = opts.mode ?? 'adaptive';
    // Registered first, so global error 0 (what a fresh buffer carries) is its "no error code".
    this.register({
      name: 'error-drop',
      flags: NodeFlag.IS_DROP,
      errors: [{ name: 'unset', description: 'dropped without an error code', severity: 'error' }],
      fn: errorDrop,
      formatTrace: (r) => String(r),
    });
  }

  // ---------------------------------------------------------------- registry

  /** Register a node. Before build() its next names may refer to nodes registered later. */
  register(reg: NodeRegistration): NodeRuntime {
    if (typeof reg.name !== 'string' || reg.name.length === 0)
      throw new GraphError('node registration: name must be a non-empty string');
    if (this.byName.has(reg.name)) throw new GraphError(`node "${reg.name}" is already registered`);
    const type = reg.type ?? 'internal';
    if (type !== 'input' && type !== 'internal' && type !== 'process')
      throw new GraphError(`node "${reg.name}": unknown type "${String(type)}" (input, internal or process)`);
    if (type === 'process' && typeof reg.process !== 'function')
      throw new GraphError(`node "${reg.name}": a process node needs a process generator function`);
    if (type !== 'process' && typeof reg.fn !== 'function')
      throw new GraphError(`node "${reg.name}": an ${type} node needs a function`);
    if (reg.pollPhase !== undefined && (type !== 'input' || !POLL_PHASES.includes(reg.pollPhase)))
      throw new GraphError(
        type !== 'input'
          ? `node "${reg.name}": pollPhase is for input nodes; this is an ${type} node`
          : `node "${reg.name}": unknown pollPhase "${String(reg.pollPhase)}" (${POLL_PHASES.join(', ')})`,
      );
    const seen = new Set<string>();
    for (const e of reg.errors ?? []) {
      if (seen.has(e.name)) throw new GraphError(`node "${reg.name}": error "${e.name}" is declared twice`);
      seen.add(e.name);
    }
    const rt = new NodeRuntime(this, this.nodes.length, reg);
    this.nodes.push(rt);
    this.byName.set(rt.name, rt);
    this.runtime.ensure(this.nodes.length);
    rt.errorBase = this.nErrors;
    for (let code = 0; code < rt.errors.length; code++) this.errorOwner.push({ node: rt, code });
    this.nErrors += rt.errors.length;
    this.errors.ensure(this.nErrors);
    this.errorCounts = this.errors.counts;
    if (this.built) this.resolve(rt);
    if (type === 'input' && this.built) this.refreshInputs();
    return rt;
  }

  /** Resolve every node's next names. Unknown names are errors naming both nodes. */
  build(): void {
    const problems: string[] = [];
    for (const rt of this.nodes) {
      try {
        this.resolve(rt);
      } catch (e) {
        problems.push((e as Error).message);
      }
    }
    if (problems.length) throw new GraphError(problems.join('\n'));
    this.built = true;
    this.refreshInputs();
  }

  private resolve(rt: NodeRuntime): void {
    const nexts: NodeRuntime[] = [];
    for (const name of rt.nextNames) {
      const t = this.byName.get(name);
      if (!t) throw new GraphError(`node "${rt.name}": next node "${name}" does not exist`);
      if (t.type !== 'internal')
        throw new GraphError(
          `node "${rt.name}": next node "${name}" is an ${t.type} node; frames go only to internal nodes`,
        );
      nexts.push(t);
    }
    rt.nextNodes = nexts;
    growArcs(rt, nexts.length);
  }

  private refreshInputs(): void {
    const phase = (n: NodeRuntime): number => POLL_PHASES.indexOf(n.reg.pollPhase ?? 'receive');
    // Array.prototype.sort is stable: registration order within a phase.
    this.inputs = this.nodes
      .filter((n) => n.type === 'input' && n.state !== 'disabled')
      .sort((x, y) => phase(x) - phase(y));
  }

  /** Add a next arc at run time (VPP's vlib_node_add_next); returns its index. */
  addNext(rt: NodeRuntime, nextName: string): number {
    const have = rt.nextNames.indexOf(nextName);
    if (have >= 0) return have;
    const t = this.byName.get(nextName);
    if (!t) throw new GraphError(`node "${rt.name}": next node "${nextName}" does not exist`);
    if (t.type !== 'internal')
      throw new GraphError(
        `node "${rt.name}": next node "${nextName}" is an ${t.type} node; frames go only to internal nodes`,
      );
    rt.nextNames.push(nextName);
    if (this.built) {
      rt.nextNodes.push(t);
      growArcs(rt, rt.nextNodes.length);
    }
    return rt.nextNames.length - 1;
  }

  node(name: string): NodeRuntime {
    const rt = this.byName.get(name);
    if (!rt) throw new GraphError(`no node named "${name}"`);
    return rt;
  }

  hasNode(name: string): boolean {
    return this.byName.has(name);
  }

  /** Next index of `nextName` in `rt`'s arcs. */
  nextIndex(rt: NodeRuntime, nextName: string): number {
    const i = rt.nextNames.indexOf(nextName);
    if (i < 0) throw new GraphError(`node "${rt.name}" has no next node "${nextName}"`);
    return i;
  }

  setInputState(rt: NodeRuntime, state: 'polling' | 'interrupt' | 'disabled'): void {
    if (rt.type !== 'input') throw new GraphError(`node "${rt.name}" is not an input node`);
    rt.state = state;
    // Whatever it had queued meanwhile is looked at once (it may have missed its interrupt).
    rt.interruptPending = true;
    this.refreshInputs();
  }

  /**
   * Input `rt` has work (VPP's vlib_node_set_interrupt_pending): an interrupt-state input is
   * called in the next pass (a polling one anyway), and a sleeping loop wakes for it. A node
   * that leaves work behind interrupts itself again before it returns.
   */
  interrupt(rt: NodeRuntime): void {
    rt.interruptPending = true;
    this.wake();
  }

  // ---------------------------------------------------------------- frames

  private openFrame(t: NodeRuntime): Frame {
    const f = this.freeFrames.length > 0 ? (this.freeFrames.pop() as Frame) : new Frame();
    f.n = 0;
    f.node = t;
    t.cur = f;
    if (this.pendLen === this.pending.length) this.pending.push(f);
    else this.pending[this.pendLen] = f;
    this.pendLen++;
    return f;
  }

  /**
   * VPP's enqueue_to_next: send `from[i]` to `rt.nextNodes[nexts[i]]` for i < n. Runs of equal
   * next indices are copied into the target's pending frame in one tight loop; a frame that
   * fills is closed and a new one opened. A node that noticed in its own loop that every next
   * is the same passes `allSame` and saves the scan (then the frame usually moves on whole).
   */
  enqueueToNext(rt: NodeRuntime, from: Uint32Array, nexts: Uint16Array, n: number, allSame = false): void {
    if (n === 0) return;
    const targets = rt.nextNodes;
    // The common case first: the whole vector goes to one next node (the caller may know).
    const nx0 = nexts[0];
    let i = allSame ? n : 1;
    while (i < n && nexts[i] === nx0) i++;
    let t = targets[nx0];
    if (t === undefined)
      throw new GraphError(`node "${rt.name}": next index ${nx0} is not one of its ${targets.length} next nodes`);
    const arcs = rt.arcPackets;
    arcs[nx0] += i;
    if (i === n) {
      this.enqueueWhole(t, from, n);
      return;
    }
    this.enqueueRun(t, from, 0, i);
    while (i < n) {
      const nx = nexts[i];
      let j = i + 1;
      while (j < n && nexts[j] === nx) j++;
      t = targets[nx];
      if (t === undefined)
        throw new GraphError(`node "${rt.name}": next index ${nx} is not one of its ${targets.length} next nodes`);
      arcs[nx] += j - i;
      this.enqueueRun(t, from, i, j - i);
      i = j;
    }
  }

  /** Every buffer `from[off..off+n)` to one next node. */
  enqueueToSingleNext(rt: NodeRuntime, next: number, from: Uint32Array, off: number, n: number): void {
    const t = rt.nextNodes[next];
    if (t === undefined)
      throw new GraphError(`node "${rt.name}": next index ${next} is not one of its ${rt.nextNodes.length} next nodes`);
    rt.arcPackets[next] += n;
    if (off === 0) this.enqueueWhole(t, from, n);
    else this.enqueueRun(t, from, off, n);
  }

  /**
   * `from[0..n)` to `t`. When that is the whole frame being dispatched and `t` has no pending
   * frame, the frame itself moves on to `t`: nothing is copied.
   */
  private enqueueWhole(t: NodeRuntime, from: Uint32Array, n: number): void {
    const f = this.dispatching;
    if (f !== null && from === f.vec && n === f.n && t.cur === null) {
      this.dispatching = null; // taken: drain must not recycle it
      f.node = t;
      t.cur = n === FRAME_SIZE ? null : f;
      if (this.pendLen === this.pending.length) this.pending.push(f);
      else this.pending[this.pendLen] = f;
      this.pendLen++;
      return;
    }
    this.enqueueRun(t, from, 0, n);
  }

  private enqueueRun(t: NodeRuntime, from: Uint32Array, off: number, n: number): void {
    while (n > 0) {
      const f = t.cur !== null ? t.cur : this.openFrame(t);
      const v = f.vec;
      let k = f.n;
      const room = FRAME_SIZE - k;
      const m = n < room ? n : room;
      for (let q = 0; q < m; q++) v[k + q] = from[off + q];
      k += m;
      f.n = k;
      if (k === FRAME_SIZE) t.cur = null;
      off += m;
      n -= m;
    }
  }

  /** One buffer to one next node. */
  enqueueOne(rt: NodeRuntime, next: number, bi: number): void {
    const t = rt.nextNodes[next];
    if (t === undefined)
      throw new GraphError(`node "${rt.name}": next index ${next} is not one of its ${rt.nextNodes.length} next nodes`);
    rt.arcPackets[next] += 1;
    let f = t.cur;
    if (f === null) f = this.openFrame(t);
    f.vec[f.n++] = bi;
    if (f.n === FRAME_SIZE) t.cur = null;
  }

  /** Frames waiting to run (for tests and the idle check). */
  get pendingFrames(): number {
    return this.pendLen;
  }

  // ---------------------------------------------------------------- dispatch

  /**
   * One pass: poll inputs, drain pending frames, run due timers and ready processes. Returns
   * the work done (packets from inputs and drained frames, timers fired, processes resumed).
   */
  runPass(): number {
    if (!this.built) throw new GraphError('graph not built: call build() first');
    const tick = this.clock.tick,
      slot = this.clock.slot;
    const cnt = this.runtime.counts;
    let work = 0;
    tick();
    let t0 = slot[0];
    const inputs = this.inputs;
    for (let i = 0; i < inputs.length; i++) {
      const rt = inputs[i];
      // An interrupt-state input runs only when given work (interrupt()): no call, no tick.
      if (rt.state === 'interrupt') {
        if (!rt.interruptPending) continue;
        rt.interruptPending = false;
      }
      this.current = rt;
      const n = rt.fn(rt, null);
      tick();
      const t1 = slot[0];
      const b = rt.index * RT_STRIDE;
      cnt[b + RT_CALLS] += 1;
      cnt[b + RT_VECTORS] += n;
      cnt[b + RT_CLOCKS] += t1 - t0;
      if (t1 - t0 > cnt[b + RT_MAX_CLOCKS]) {
        cnt[b + RT_MAX_CLOCKS] = t1 - t0;
        cnt[b + RT_MAX_VECTORS] = n;
      }
      t0 = t1;
      work += n;
    }
    work += this.drain();
    work += this.runTimers();
    this.current = null;
    this.runtime.loops++;
    return work;
  }

  /** Run pending frames until none is left. Returns the packets processed. */
  drain(): number {
    const tick = this.clock.tick,
      slot = this.clock.slot;
    const cnt = this.runtime.counts;
    const trace = this.trace;
    let work = 0;
    tick();
    let t0 = slot[0];
    // pendLen grows while we go: frames enqueued now run in this same drain.
    let i = 0;
    try {
      for (; i < this.pendLen; i++) {
        const f = this.pending[i];
        const t = f.node as NodeRuntime;
        if (t.cur === f) t.cur = null;
        this.current = t;
        t.traceOn = trace.active ? trace.visit(t, f.vec, f.n) : false;
        this.dispatching = f;
        const n = t.fn(t, f);
        // Unless the node passed the frame itself on (enqueueWhole), it is free again.
        if (this.dispatching === f) this.recycle(f);
        this.dispatching = null;
        tick();
        const t1 = slot[0];
        const b = t.index * RT_STRIDE;
        cnt[b + RT_CALLS] += 1;
        cnt[b + RT_VECTORS] += n;
        cnt[b + RT_CLOCKS] += t1 - t0;
        if (t1 - t0 > cnt[b + RT_MAX_CLOCKS]) {
          cnt[b + RT_MAX_CLOCKS] = t1 - t0;
          cnt[b + RT_MAX_VECTORS] = n;
        }
        t0 = t1;
        work += n;
      }
    } catch (e) {
      // A node threw (a bug). Its frame is lost with whatever buffers it still held; the
      // frames after it stay queued and run in the next pass.
      const f = this.pending[i];
      if (this.dispatching === f) this.recycle(f);
      this.dispatching = null;
      this.pending.copyWithin(0, i + 1, this.pendLen);
      this.pendLen -= i + 1;
      throw e;
    }
    this.pendLen = 0;
    return work;
  }

  private recycle(f: Frame): void {
    if (f.node !== null && f.node.cur === f) f.node.cur = null;
    f.node = null;
    this.freeFrames.push(f);
  }

  // ---------------------------------------------------------------- timers and processes

  /** Start a timer owned by `rt`: its `timer(rt, user)` runs after `delayNs`. */
  startTimer(rt: NodeRuntime, delayNs: number, user: number): number {
    if (rt.type !== 'process' && typeof rt.reg.timer !== 'function')
      throw new GraphError(`node "${rt.name}" has no timer function`);
    return this.timers.start(this.clock.nowNs(), delayNs, rt.index, user);
  }

  stopTimer(handle: number): boolean {
    return this.timers.stop(handle);
  }

  private readonly fire = (owner: number, user: number): void => {
    const rt = this.nodes[owner];
    this.current = rt;
    if (rt.type === 'process') {
      if (user === PROCESS_TIMER_USER && (rt.processState === 'clock wait' || rt.processState === 'any wait')) {
        rt.waitTimer = -1;
        this.resumeProcess(rt);
      }
      return;
    }
    (rt.reg.timer as (rt: NodeRuntime, user: number) => void)(rt, user);
  };

  private runTimers(): number {
    let work = 0;
    if (this.timers.size > 0) {
      // The wheel is looked at once per tick of it, by the cycle counter the dispatch already
      // read: the monotonic time is a heap number once read through a call, and a polling
      // loop passes millions of times a second. Outside the loop (runPass by hand) every pass.
      const tsc = this.clock.slot[0];
      if (tsc >= this.timerGateTsc) {
        const now = this.clock.nowNs();
        if (now >= this.timers.nextTickNs) work += this.timers.advance(now, this.fire);
        const k = this.loopTicksPerNs;
        this.timerGateTsc = k > 0 ? tsc + (this.timers.nextTickNs - now) * k : 0;
      }
    }
    if (this.readyProcesses.length > 0) {
      const ready = this.readyProcesses;
      this.readyProcesses = [];
      for (const rt of ready) this.resumeProcess(rt);
      work += ready.length;
    }
    // Timers and processes may have enqueued packets.
    if (this.pendLen > 0) work += this.drain();
    return work;
  }

  private startProcesses(): void {
    for (const rt of this.nodes) {
      if (rt.type === 'process' && rt.processState === 'not started') {
        const ctx = makeProcessContext(this, rt);
        rt.gen = (rt.reg.process as (c: ProcessContext) => Generator<ProcessWait, void, void>)(ctx);
        rt.processState = 'running';
        this.readyProcesses.push(rt);
      }
    }
  }

  private resumeProcess(rt: NodeRuntime): void {
    const gen = rt.gen;
    if (gen === null || rt.processState === 'done') return;
    const tsc = this.clock.tsc;
    const cnt = this.runtime.counts;
    const b = rt.index * RT_STRIDE;
    const t0 = tsc();
    rt.processState = 'running';
    this.current = rt;
    let r: IteratorResult<ProcessWait, void>;
    try {
      r = gen.next();
    } catch (e) {
      rt.processState = 'done';
      cnt[b + RT_CALLS] += 1;
      cnt[b + RT_CLOCKS] += tsc() - t0;
      throw e;
    }
    cnt[b + RT_CALLS] += 1;
    cnt[b + RT_CLOCKS] += tsc() - t0;
    if (r.done) {
      rt.processState = 'done';
      return;
    }
    cnt[b + RT_SUSPENDS] += 1;
    const w = r.value;
    if (w.kind === 'clock' || w.kind === 'any') {
      rt.waitTimer = this.timers.start(this.clock.nowNs(), w.ns, rt.index, PROCESS_TIMER_USER);
    }
    rt.processState = w.kind === 'clock' ? 'clock wait' : w.kind === 'event' ? 'event wait' : 'any wait';
    if (w.kind !== 'clock' && rt.events.length > 0) this.makeReady(rt);
  }

  private makeReady(rt: NodeRuntime): void {
    if (rt.waitTimer >= 0) {
      this.timers.stop(rt.waitTimer);
      rt.waitTimer = -1;
    }
    rt.processState = 'running';
    this.readyProcesses.push(rt);
    this.wake();
  }

  /** Signal an event to a process node (VPP's vlib_process_signal_event). */
  signalEvent(rt: NodeRuntime, type: string, data?: unknown): void {
    if (rt.type !== 'process') throw new GraphError(`node "${rt.name}" is not a process node`);
    rt.events.push({ type, data });
    if (rt.processState === 'event wait' || rt.processState === 'any wait') this.makeReady(rt);
  }

  // ---------------------------------------------------------------- the run loop

  /** Start the loop on this thread's event loop. */
  start(): void {
    if (!this.built) this.build();
    if (this.running) return;
    this.running = true;
    runningGraphs++;
    this.startProcesses();
    this.schedule();
  }

  /** Stop the loop (pending frames are drained first). */
  stop(): void {
    if (!this.running) return;
    this.running = false;
    runningGraphs--;
    if (this.pendLen > 0) this.drain();
    if (this.waiter) this.waiter.cancel();
    this.sleeping = false;
  }

  get isRunning(): boolean {
    return this.running;
  }

  get isSleeping(): boolean {
    return this.sleeping;
  }

  /** 'polling' never sleeps; 'adaptive' polls `idlePollUs` of its clock with nothing to do, then sleeps. */
  get pollMode(): 'adaptive' | 'polling' {
    return this.mode;
  }

  get idlePollUs(): number {
    return this.idlePollNs / 1000;
  }

  /** How many asked the polling loop to yield its CPU after idle turns (addIdleYieldUser). */
  get idleYieldUsers(): number {
    return this.idleYieldUserCount;
  }

  /** Ask the loop to run a pass soon (a driver got packets outside any fd, an event came). */
  wake(): void {
    this.wakeRequested = true;
    if (this.sleeping) {
      this.sleeping = false;
      this.wakeups++;
      (this.waiter as IdleWaiter).cancel();
      this.schedule();
    }
  }

  /** A file descriptor whose readability wakes the sleeping loop (driver rx). */
  addWaitFd(fd: number): void {
    this.waitFds.add(fd);
    if (this.waiter) this.waiter.add(fd);
  }

  removeWaitFd(fd: number): void {
    this.waitFds.delete(fd);
    if (this.waiter) this.waiter.remove(fd);
  }

  /**
   * Asked just before the loop sleeps: a guard that returns true keeps it awake for another
   * pass (work it can see that no fd announces: a ring in shared memory another process fills;
   * it also arms that process's doorbell). Returns the function that removes it.
   */
  addSleepGuard(guard: () => boolean): () => void {
    this.sleepGuards.push(guard);
    return () => {
      const i = this.sleepGuards.indexOf(guard);
      if (i >= 0) this.sleepGuards.splice(i, 1);
    };
  }

  /**
   * Ask the polling loop to give its CPU up after each idle turn (GraphOptions.idleYield), while
   * the returned function has not been called.
   */
  addIdleYieldUser(): () => void {
    this.idleYieldUserCount++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.idleYieldUserCount--;
    };
  }

  /** A source of "work is due at this monotonic ns" (rate-limited replays); -1 = none. */
  addDueSource(due: () => number): void {
    this.dueSources.push(due);
  }

  private schedule(): void {
    if (this.scheduled || !this.running) return;
    this.scheduled = true;
    // Not setImmediate: it makes an Immediate per turn (with its async bookkeeping), about half
    // of a two-process ping-pong's garbage (graph/waiter.ts Turns).
    if (this.turns === null) this.turns = new Turns(this.loop);
    this.turns.soon();
  }

  private readonly loop = (): void => {
    this.scheduled = false;
    if (!this.running) return;
    const now = this.clock.nowNs;
    // The budget is kept in the counter's ticks, read through its slot: reading the time in
    // nanoseconds makes a heap number per read, and this loop reads it after every pass.
    const tick = this.clock.tick,
      slot = this.clock.slot;
    if (this.loopTicksPerNs === 0) this.loopTicksPerNs = this.clock.clocksPerNs() || 1;
    tick();
    const start = slot[0];
    this.yieldRequested = false;
    // Alone on the thread (and allowed to poll): keep passing, empty passes too, for spinNs.
    const spin = runningGraphs === 1 && (this.mode === 'polling' || this.idlePollNs > 0) && this.spinNs > 0;
    const budget = (spin ? Math.max(this.spinNs, this.passBudgetNs) : this.passBudgetNs) * this.loopTicksPerNs;
    let work = 0;
    this.inTurn = true;
    for (;;) {
      this.wakeRequested = false;
      const w = this.loopPass();
      work += w;
      if ((w === 0 && !spin) || this.yieldRequested || !this.running) break;
      tick();
      if (slot[0] - start >= budget) break;
      // Spinning on empty passes: a program waiting on us may share this CPU (idleYield).
      if (w === 0 && this.idleYieldUserCount > 0) this.idleYield?.();
    }
    this.inTurn = false;
    if (this.nDeferred > 0) {
      // Completions go to the application now, outside every node. What it posts from them (a
      // reply, the next request) goes out in one more pass of this turn: going round the event
      // loop first costs more than the pass (a turn ~1.5 us here, an empty pass ~0.2). Its own
      // microtasks (promises it resolved) run when the turn ends, after that one pass.
      this.runDeferred();
      if (this.wakeRequested && this.running) {
        this.wakeRequested = false;
        this.inTurn = true;
        work += this.loopPass();
        this.inTurn = false;
        if (this.nDeferred > 0) this.runDeferred();
      }
    }
    if (!this.running) return;
    if (work > 0 || this.wakeRequested) {
      this.idleSince[0] = -1;
      this.schedule();
      return;
    }
    if (this.mode === 'polling') {
      this.idleSince[0] = -1;
      if (this.idleYieldUserCount > 0) this.idleYield?.();
      this.schedule();
      return;
    }
    tick();
    const c = slot[0],
      idle = this.idleSince;
    if (idle[0] < 0) idle[0] = c;
    if (c - idle[0] < this.idlePollNs * this.loopTicksPerNs) {
      if (this.idleYieldUserCount > 0) this.idleYield?.();
      this.schedule();
      return;
    }
    for (let i = 0; i < this.sleepGuards.length; i++) {
      if (this.sleepGuards[i]()) {
        this.schedule();
        return;
      }
    }
    this.sleep(now());
  };

  /** One pass of the loop; a node's throw is reported and counts as work (the loop goes on). */
  private loopPass(): number {
    try {
      return this.runPass();
    } catch (e) {
      this.reportNodeError(e as Error);
      return 1;
    }
  }

  /**
   * End the current event-loop turn after this pass: something queued for the event loop (a
   * promise a node resolved, a socket write) should not wait for the spin budget. Completions
   * need not ask: defer() ends the turn itself.
   */
  yieldSoon(): void {
    this.yieldRequested = true;
  }

  /**
   * Run `fn` when this turn's passes end, outside every node (so it may post work), and end the
   * turn after the current pass; called outside a turn (an API call, a test stepping the graph
   * by hand), as a microtask. How completions reach the application: Node's queueMicrotask
   * makes an AsyncResource and a bound function per call, this nothing. The caller keeps `fn`
   * from being queued twice. A callback that throws does not stop the others or the loop: its
   * error is thrown again from a microtask, as an uncaught error, as before.
   */
  defer(fn: () => void): void {
    if (!this.inTurn) {
      queueMicrotask(fn);
      return;
    }
    this.deferred[this.nDeferred++] = fn;
    this.yieldRequested = true;
  }

  private runDeferred(): void {
    const list = this.deferred;
    // A callback may defer again (the turn is over: that one goes to a microtask).
    // Each entry cleared as it is taken, not by fill() after: a builtin call per turn, ~0.6 % of
    // a latency run's time.
    for (let i = 0; i < this.nDeferred; i++) {
      const fn = list[i] as () => void;
      list[i] = null;
      try {
        fn();
      } catch (e) {
        throwLater(e);
      }
    }
    this.nDeferred = 0;
  }

  private sleep(t: number): void {
    let due = this.timers.nextDueNs();
    for (const s of this.dueSources) {
      const d = s();
      if (d >= 0 && (due < 0 || d < due)) due = d;
    }
    if (this.readyProcesses.length > 0) due = t;
    const timeoutMs = due < 0 ? -1 : Math.max(0, (due - t) / 1e6);
    if (this.waiter === null) {
      this.waiter = new IdleWaiter();
      for (const fd of this.waitFds) this.waiter.add(fd);
    }
    this.sleeping = true;
    this.sleeps++;
    this.waiter.wait(timeoutMs, this.onWake);
  }

  private readonly onWake = (): void => {
    if (!this.sleeping) return;
    this.sleeping = false;
    this.wakeups++;
    this.idleSince[0] = -1;
    this.schedule();
  };

  private reportNodeError(err: Error): void {
    const where = this.current ? `node "${this.current.name}"` : 'the dispatch loop';
    const e = new GraphError(`${where} threw: ${err.stack ?? err.message}`);
    this.lastError = e;
    this.errorsThrown++;
    this.onError(e);
  }

  /** Release native handles. */
  close(): void {
    this.stop();
    if (this.waiter) {
      this.waiter.close();
      this.waiter = null;
    }
    if (this.turns) {
      this.turns.close(); // an armed turn is dropped with it
      this.turns = null;
      this.scheduled = false;
    }
    // Whoever holds buffers outside frames (queues fed from outside the graph) gives them back.
    for (const hook of this.closeHooks.splice(0)) hook();
  }

  /** Run `hook` when the graph is closed (e.g. free buffers a queue still holds). */
  onClose(hook: () => void): void {
    this.closeHooks.push(hook);
  }

  // ---------------------------------------------------------------- trace

  /** `trace add <input-node> N`. */
  traceAdd(nodeName: string, n: number): void {
    const rt = this.node(nodeName);
    if (rt.type !== 'input' || !(rt.flags & NodeFlag.TRACE_SUPPORTED)) {
      const ok = this.nodes.filter((x) => x.type === 'input' && x.flags & NodeFlag.TRACE_SUPPORTED).map((x) => x.name);
      throw new GraphError(
        `trace add: node "${nodeName}" is not an input node that supports trace (these do: ${ok.join(', ') || 'none'})`,
      );
    }
    if (!Number.isInteger(n) || n < 0)
      throw new GraphError(`trace add: count must be a non-negative integer, got ${n}`);
    rt.traceBudget = n === 0 ? 0 : rt.traceBudget + n;
  }

  /**
   * For input nodes, on the buffers just received: record this node's visit on those already
   * traced (a packet that came round through a pipe), then mark new ones while the node has
   * trace budget. Sets `rt.traceOn` when any of them is traced. Cheap when nothing is traced.
   */
  traceInput(rt: NodeRuntime, bufs: Uint32Array, off: number, n: number): void {
    rt.traceOn = false;
    if (this.trace.active) rt.traceOn = this.trace.visit(rt, bufs, n, off);
    if (rt.traceBudget > 0 && this.trace.start(rt, bufs, off, n) > 0) rt.traceOn = true;
  }

  clearTrace(): void {
    this.trace.clear();
    for (const rt of this.nodes) rt.traceBudget = 0;
  }

  traceSnapshot(): TraceThreadSnapshot {
    return { index: this.threadIndex, name: this.threadName, packets: this.trace.snapshot() };
  }

  // ---------------------------------------------------------------- counters

  runtimeSnapshot(): RuntimeThreadSnapshot {
    const nowNs = this.clock.nowNs();
    const time = Math.max((nowNs - this.runtime.clearTimeNs) / 1e9, 1e-9);
    const rows: RuntimeRow[] = [];
    let inV = 0,
      outV = 0,
      dropV = 0,
      puntV = 0,
      intV = 0,
      intC = 0;
    for (const rt of this.nodes) {
      const calls = this.runtime.get(rt.index, RT_CALLS);
      const vectors = this.runtime.get(rt.index, RT_VECTORS);
      rows.push({
        name: rt.name,
        state: stateOf(rt, this.sleeping),
        calls,
        vectors,
        suspends: this.runtime.get(rt.index, RT_SUSPENDS),
        clocks: this.runtime.get(rt.index, RT_CLOCKS),
        maxClocks: this.runtime.get(rt.index, RT_MAX_CLOCKS),
        vectorsAtMax: this.runtime.get(rt.index, RT_MAX_VECTORS),
      });
      if (rt.type === 'input') inV += vectors;
      if (rt.type === 'internal') {
        intV += vectors;
        intC += calls;
        if (rt.flags & NodeFlag.IS_OUTPUT) outV += vectors;
        if (rt.flags & NodeFlag.IS_DROP) dropV += vectors;
        if (rt.flags & NodeFlag.IS_PUNT) puntV += vectors;
      }
    }
    return {
      index: this.threadIndex,
      name: this.threadName,
      ...(this.lcore !== undefined ? { lcore: this.lcore } : {}),
      time,
      updateInterval: 10,
      internalVectorRate: intC > 0 ? intV / intC : 0,
      loopsPerSec: this.runtime.loopsSinceClear() / time,
      ratesIn: inV / time,
      ratesOut: outV / time,
      ratesDrop: dropV / time,
      ratesPunt: puntV / time,
      rows,
    };
  }

  /**
   * The node/next-node tables as VPP's `show vlib graph` has them, with the packets each arc
   * carried since start (graph views take differences of two).
   */
  graphSnapshot(): GraphThreadSnapshot {
    const nodes = this.nodes.map((rt) => ({
      name: rt.name,
      type: rt.type,
      next: [...rt.nextNames],
      arcPackets: rt.nextNames.map((_, i) => rt.arcPackets[i] ?? 0),
    }));
    return { index: this.threadIndex, name: this.threadName, nodes };
  }

  /** `clear runtime`: snapshot, never reset in place. */
  clearRuntime(): void {
    this.runtime.clear(this.clock.nowNs());
  }

  errorSnapshot(): ErrorThreadSnapshot {
    const rows = this.errorOwner.map(({ node, code }, idx) => {
      const d = node.errors[code];
      return {
        index: idx,
        count: this.errors.get(node.errorBase + code),
        node: node.name,
        reason: d.description,
        severity: d.severity ?? 'error',
      };
    });
    return { index: this.threadIndex, name: this.threadName, rows };
  }

  /** Error count since the last clear, by node and error name. */
  errorCount(nodeName: string, errorName: string): number {
    const rt = this.node(nodeName);
    const code = rt.errors.findIndex((e) => e.name === errorName);
    if (code < 0) throw new GraphError(`node "${nodeName}" has no error "${errorName}"`);
    return this.errors.get(rt.errorBase + code);
  }

  /** Node and code of a global error index (what error-drop and traces print). */
  errorName(index: number): string {
    const o = this.errorOwner[index];
    return o ? `${o.node.name}: ${o.node.errors[o.code].description}` : `unknown error ${index}`;
  }

  clearErrors(): void {
    this.errors.clear();
  }

  /** Counters of one node since the last clear. */
  nodeCounters(name: string): { calls: number; vectors: number; suspends: number; clocks: number } {
    const i = this.node(name).index;
    return {
      calls: this.runtime.get(i, RT_CALLS),
      vectors: this.runtime.get(i, RT_VECTORS),
      suspends: this.runtime.get(i, RT_SUSPENDS),
      clocks: this.runtime.get(i, RT_CLOCKS),
    };
  }

  /** Nanoseconds since the graph started. */
  uptimeNs(): number {
    return this.clock.nowNs() - this.startNs;
  }
}

/** Room for `n` arcs' packet counts, keeping those counted (addNext after build). */
function growArcs(rt: NodeRuntime, n: number): void {
  if (rt.arcPackets.length >= n) return;
  const grown = new Float64Array(n);
  grown.set(rt.arcPackets);
  rt.arcPackets = grown;
}

function stateOf(rt: NodeRuntime, sleeping: boolean): string {
  if (rt.type === 'internal') return 'active';
  if (rt.type === 'process') return rt.processState;
  if (rt.state === 'disabled') return 'disabled';
  return rt.state === 'interrupt' || sleeping ? 'interrupt wait' : 'polling';
}

/** error-drop: counts each buffer's error (runs of equal codes at once) and frees the frame. */
function errorDrop(rt: NodeRuntime, frame: import('./node.ts').Frame | null): number {
  const f = frame as Frame;
  const g = rt.graph;
  const err = g.pool.error;
  const counts = g.errorCounts;
  const vec = f.vec,
    n = f.n;
  let i = 0;
  while (i < n) {
    const e = err[vec[i]];
    let j = i + 1;
    while (j < n && err[vec[j]] === e) j++;
    counts[e] += j - i;
    i = j;
  }
  if (rt.traceOn) {
    for (let k = 0; k < n; k++) rt.addTrace(vec[k], g.errorName(err[vec[k]]));
  }
  g.pool.free(vec, 0, n);
  return n;
}

function makeProcessContext(graph: Graph, node: NodeRuntime): ProcessContext {
  return {
    graph,
    node,
    sleep: (ms) => ({ kind: 'clock', ns: ms * 1e6 }),
    waitEvent: () => ({ kind: 'event' }),
    waitEventOrTimeout: (ms) => ({ kind: 'any', ns: ms * 1e6 }),
    takeEvents: (): ProcessEvent[] => {
      const ev = node.events;
      node.events = [];
      return ev;
    },
  };
}
