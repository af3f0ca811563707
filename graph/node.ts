/**
 * Node registrations and their per-thread runtime. A node is registered with a name, a type,
 * named next nodes (resolved to indices when the graph is built), error counters and a trace
 * formatter; at run time it processes one frame (up to 256 buffer indices) per call.
 */
import type { Severity } from './format.ts';
import type { Graph } from './graph.ts';

export const FRAME_SIZE = 256;

export type NodeType = 'input' | 'internal' | 'process';
export type InputState = 'polling' | 'interrupt' | 'disabled';

/** Node flags (VPP's VLIB_NODE_FLAG_*): what the `show runtime` summary rates count. */
export const NodeFlag = {
  IS_OUTPUT: 1 << 0,
  IS_DROP: 1 << 1,
  IS_PUNT: 1 << 2,
  /** Input nodes that can start a packet trace (`trace add <node> N`). */
  TRACE_SUPPORTED: 1 << 3,
  /**
   * Takes packets whose payload may still be in a memif peer's memory (BufferFlag.PEER_CHAIN,
   * graph/peer-windows.ts): reads only their headers, or places them with ChainCopy. A node that
   * sends such a packet to a next node without this flag (nor IS_DROP) settles it first.
   */
  PEER_DATA_OK: 1 << 4,
} as const;

export interface ErrorDesc {
  name: string;
  description: string;
  severity?: Severity;
}

/**
 * A node's next nodes as one table (VPP's `[NEXT_DROP] = "error-drop"`): `names` go to the
 * registration, `index.KEY` is the arc the code sets; the two cannot drift apart.
 */
export function nextTable<K extends string>(
  t: Record<K, string>,
): { names: string[]; index: Readonly<Record<K, number>> } {
  const keys = Object.keys(t) as K[];
  const index = {} as Record<K, number>;
  keys.forEach((k, i) => (index[k] = i));
  return { names: keys.map((k) => t[k]), index: Object.freeze(index) };
}

/**
 * A node's error counters as one table (VPP's `foreach_*_error`): `list` goes to the
 * registration, `code.KEY` is what `countError` and `pool.error` take.
 */
export function errorTable<K extends string>(
  t: Record<K, ErrorDesc>,
): { list: readonly ErrorDesc[]; code: Readonly<Record<K, number>> } {
  const keys = Object.keys(t) as K[];
  const code = {} as Record<K, number>;
  keys.forEach((k, i) => (code[k] = i));
  return { list: Object.freeze(keys.map((k) => t[k])), code: Object.freeze(code) };
}

/** A frame: up to FRAME_SIZE buffer indices addressed to one node. */
export class Frame {
  readonly vec = new Uint32Array(FRAME_SIZE);
  n = 0;
  node: NodeRuntime | null = null;
}

/** What a process node yields to suspend itself. */
export type ProcessWait = { kind: 'clock'; ns: number } | { kind: 'event' } | { kind: 'any'; ns: number };

export interface ProcessEvent {
  type: string;
  data?: unknown;
}

/** Handed to a process node's generator (VPP's process API, cooperatively). */
export interface ProcessContext {
  readonly graph: Graph;
  readonly node: NodeRuntime;
  /** `yield ctx.sleep(ms)`: resume after ms milliseconds. */
  sleep(ms: number): ProcessWait;
  /** `yield ctx.waitEvent()`: resume when an event is signalled. */
  waitEvent(): ProcessWait;
  /** `yield ctx.waitEventOrTimeout(ms)`: whichever comes first. */
  waitEventOrTimeout(ms: number): ProcessWait;
  /** Events signalled since the last call (the caller owns the array). */
  takeEvents(): ProcessEvent[];
}

export type NodeFunction = (rt: NodeRuntime, frame: Frame | null) => number;
export type ProcessFunction = (ctx: ProcessContext) => Generator<ProcessWait, void, void>;
export type TimerFunction = (rt: NodeRuntime, user: number) => void;

export interface NodeRegistration {
  name: string;
  /** Default 'internal'. */
  type?: NodeType;
  /** Named next nodes; the array position is the next index the node enqueues to. */
  next?: readonly string[];
  errors?: readonly ErrorDesc[];
  flags?: number;
  /** input: called each pass with frame null; internal: called with a frame. Returns packets. */
  fn?: NodeFunction;
  /** process nodes: a generator driven by the engine. */
  process?: ProcessFunction;
  /** Called when a timer this node started expires. */
  timer?: TimerFunction;
  /** Renders the record a node attached with `rt.addTrace` (show trace). */
  formatTrace?: (record: unknown) => string;
  /** Input nodes: initial state (default 'polling'). */
  state?: InputState;
  /**
   * Input nodes: where in a pass this one is polled (default 'receive'; registration order
   * within a phase). A pass polls 'work' (requests from outside the graph: a verbs program's
   * rings), then 'transmit' (nodes that turn queued work into packets: the RDMA transport, UDP
   * sends), then 'receive' (device inputs), and drains after the last: what arrived goes up the
   * graph straight after its burst instead of after the other inputs' polls, and work posted
   * since the last pass (a reply from a completion callback) goes out before the devices are
   * read. Each ordering costs a round trip a few hundred nanoseconds at vector size 1.
   */
  pollPhase?: PollPhase;
  /** Anything the node wants to keep per thread (its tables, scratch arrays). */
  runtimeData?: unknown;
}

/** Input nodes: the order they are polled in within a pass (NodeRegistration.pollPhase). */
export type PollPhase = 'work' | 'transmit' | 'receive';

export type ProcessState = 'not started' | 'running' | 'clock wait' | 'event wait' | 'any wait' | 'done';

/** A node as it runs on one thread. Monomorphic: every node uses this one class. */
export class NodeRuntime {
  readonly index: number;
  readonly name: string;
  readonly type: NodeType;
  readonly flags: number;
  readonly reg: NodeRegistration;
  readonly graph: Graph;
  fn: NodeFunction;
  /** Resolved next nodes, by next index. */
  nextNodes: NodeRuntime[] = [];
  nextNames: string[];
  /**
   * Packets sent along each next arc since start, by next index (never cleared: readers take
   * differences). One add per run of equal next indices (enqueueOne: per packet it takes).
   */
  arcPackets = new Float64Array(0);
  /** Global index of this node's error 0. */
  errorBase = 0;
  readonly errors: readonly ErrorDesc[];
  /** The frame being filled for this node (pending in the dispatch queue), if any. */
  cur: Frame | null = null;
  /**
   * Input nodes: 'polling' (called every pass), 'interrupt' (called only in a pass after
   * `graph.interrupt(rt)`, VPP's interrupt pending: whoever gives it work says so) or 'disabled'.
   */
  state: InputState;
  /** An interrupt-state input has work (graph.interrupt): called in the next pass. */
  interruptPending = false;
  /** True during a call whose frame holds traced buffers: the node may call addTrace. */
  traceOn = false;
  /** Input nodes: packets still to trace (`trace add`). */
  traceBudget = 0;
  /** Scratch for enqueueToNext: next index per packet. */
  readonly nexts = new Uint16Array(FRAME_SIZE);
  /** Scratch: buffer indices (input nodes fill it from the driver). */
  readonly scratch = new Uint32Array(FRAME_SIZE);
  runtimeData: unknown;
  /** Process nodes. */
  processState: ProcessState = 'not started';
  gen: Generator<ProcessWait, void, void> | null = null;
  events: ProcessEvent[] = [];
  waitTimer = -1;

  constructor(graph: Graph, index: number, reg: NodeRegistration) {
    this.graph = graph;
    this.index = index;
    this.name = reg.name;
    this.type = reg.type ?? 'internal';
    this.flags = reg.flags ?? 0;
    this.reg = reg;
    this.fn = reg.fn ?? noop;
    this.nextNames = [...(reg.next ?? [])];
    this.errors = reg.errors ?? [];
    this.state = reg.state ?? 'polling';
    this.runtimeData = reg.runtimeData;
  }

  /** Count `n` occurrences of this node's error `code` (without dropping anything). */
  countError(code: number, n = 1): void {
    this.graph.errorCounts[this.errorBase + code] += n;
  }

  /** The global error index of this node's error `code` (for `pool.error[bi]`). */
  errorIndex(code: number): number {
    return this.errorBase + code;
  }

  /** Attach this node's trace record to traced buffer `bi` (call only when traceOn). */
  addTrace(bi: number, record: unknown): void {
    this.graph.trace.addRecord(this, bi, record);
  }

  /** Enqueue `n` buffers `from[0..]` to next nodes `this.nexts[0..]`. */
  enqueue(from: Uint32Array, n: number): void {
    this.graph.enqueueToNext(this, from, this.nexts, n);
  }
}

function noop(): number {
  return 0;
}
