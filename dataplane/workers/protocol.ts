/**
 * What the main thread and a worker thread (cpu.workers) say to each other: method calls and
 * their results, log lines and events. Structured-clone data only (views, Uint8Arrays); an
 * AbortSignal argument travels as a marker and is fired by an "abort" message.
 */
import type { Config } from '../../config/types.ts';
import type { HandoffQueueMemory } from '../../graph/handoff-queue.ts';
import type { ArgsOf, ResultOf, WorkerMethod } from '../api.ts';
import type { DataplaneErrorKind, EventView } from '../views.ts';

/**
 * How one worker reaches one configured interface (cpu.workers >= 2). Every worker registers
 * every interface, in configuration order, so interface index k + 1 is entry k everywhere.
 */
export type InterfaceReach =
  /**
   * Its worker: the device's driver. `memifKey`: other workers poll some of its memif queues
   * (this one polls `pollQueues`); `reject`: other workers' af_packet sockets take these UDP ports.
   */
  | { via: 'owner'; memifKey?: string; pollQueues?: number[]; reject?: [number, number][] }
  /**
   * Its own share of the device `owner` owns (VPP's rx-placement): the memif queues `queues`
   * (found by `memifKey`), or an af_packet socket taking the UDP ports `accept` (its rx queue
   * `queues[0]`). It receives and transmits there itself.
   */
  | { via: 'lane'; owner: number; queues: number[]; memifKey?: string; accept?: [number, number][] }
  /** No device of it here: what this worker transmits on it is handed to `owner` (drivers/remote.ts). */
  | { via: 'remote'; owner: number };

/** What a worker gets to take part in handoff (graph/handoff-queue.ts, nodes/handoff/). */
export interface HandoffPlan {
  self: number;
  /** Each worker's QP numbers (its slice of rdma.port-range): one entry per worker. */
  ranges: [number, number][];
  /** Per configured interface, in configuration order. */
  interfaces: InterfaceReach[];
  /** queues[i][j]: worker i's frames for worker j (null when i === j); each kicks worker j's eventfd. */
  queues: (HandoffQueueMemory | null)[][];
  /**
   * Shared by every worker (an Int32Array over it, one slot per worker): the IPv4 multicast
   * groups each worker's interfaces have joined (its UD QPs attached to them), which worker-handoff
   * reads to copy a group's datagrams to the workers that have members.
   */
  groups: SharedArrayBuffer;
}

export interface WorkerInit {
  config: Config;
  /** 0-based worker number (its graph is thread index + 1, named rdma_wk_<index>). */
  index: number;
  /** CPU to pin to (cpu.corelist-workers), or null. */
  cpu: number | null;
  /** Its PD/MR/CQ/SRQ handles count up from here (facade.ts routes a handle by its range). */
  handleBase: number;
  /** With 2 or more workers: how it reaches each interface, and the handoff queues. */
  handoff?: HandoffPlan;
}

/**
 * What the facade asks a worker besides the data plane's own methods: the verbs connections the
 * main thread's listener hands over (the worker serves them; it hands each fd back to close).
 */
export interface WorkerControl {
  /** Serve verbs connection `fd` (accepted by the main thread). */
  adoptVerbs(fd: number): void;
  /** Stop serving verbs connections (the listener closed). */
  closeVerbs(): void;
  /** Verbs connections this worker serves. */
  verbsConnections(): number;
}

/** Every call a worker answers: the data plane's methods (DataplaneApi) and its control. */
export type CallName = WorkerMethod | keyof WorkerControl;
export type CallArgs<M extends CallName> = M extends WorkerMethod
  ? ArgsOf<M>
  : M extends keyof WorkerControl
    ? Parameters<WorkerControl[M]>
    : never;
export type CallResult<M extends CallName> = M extends WorkerMethod
  ? ResultOf<M>
  : M extends keyof WorkerControl
    ? ReturnType<WorkerControl[M]>
    : never;

/** One handler per call, exhaustive: a method added to DataplaneApi and not served fails tsc. */
export type CallTable = { [M in CallName]: (...args: CallArgs<M>) => unknown };

/** An AbortSignal argument travels as this marker; an "abort" message fires it. */
export interface SignalMarker {
  __signal: true;
}

export type ToWorker =
  { t: 'call'; id: number; method: CallName; args: unknown[] } | { t: 'abort'; id: number } | { t: 'crash' };

export type FromWorker =
  | { t: 'ready' }
  | { t: 'fatal'; kind: DataplaneErrorKind; message: string }
  /** `e.kind` null: not a DataplaneError (a bug): the caller gets an Error with the worker's stack. */
  | { t: 'result'; id: number; r?: unknown; e?: { kind: DataplaneErrorKind | null; message: string; stack: string } }
  | { t: 'log'; level: 'error' | 'warn' | 'info' | 'debug'; msg: string }
  | { t: 'event'; e: EventView }
  /** A verbs connection this worker is done with: the main thread closes its fd. */
  | { t: 'closeFd'; fd: number };

/** Each worker's handles live in [index * HANDLE_SPAN + 1, (index + 1) * HANDLE_SPAN). */
export const HANDLE_SPAN = 1 << 24;
