/**
 * What the main thread and a worker thread (cpu.workers) say to each other: method calls and
 * their results, log lines and events. Structured-clone data only (views, Uint8Arrays); an
 * AbortSignal argument travels as a marker and is fired by an "abort" message.
 */
import type { Config, InterfaceConfig } from '../../config/types.ts';
import type { HandoffLink } from '../../drivers/handoff.ts';
import type { ArgsOf, ResultOf, WorkerMethod } from '../api.ts';
import type { DataplaneErrorKind, EventView } from '../views.ts';

/** What a worker gets to take part in handoff (nodes/handoff/worker-handoff.ts, drivers/handoff.ts). */
export interface HandoffPlan {
  self: number;
  workers: number;
  /** Each worker's QP numbers (its slice of rdma.port-range). */
  ranges: [number, number][];
  /**
   * Interfaces this worker owns: a port towards each other worker. `lanes`: that worker polls
   * queues of the interface itself, so what the port receives are frames it received for our
   * QPs (processed as received on the interface), not frames for us to transmit.
   */
  ports: { iface: string; worker: number; link: HandoffLink; lanes: boolean }[];
  /**
   * Interfaces other workers own: this worker's shadow of each, or with `lanes` its own memif
   * queues of it (drivers/memif-lane.ts).
   */
  shadows: {
    config: InterfaceConfig;
    link: HandoffLink;
    owner: number;
    /** memif: the queues this worker polls; af_packet: the UDP ports its socket takes. */
    lanes: { key: string; queues: number[] } | { accept: [number, number][]; queues: number[] } | null;
  }[];
  /**
   * Interfaces this worker owns that other workers receive part of: a memif interface's key and
   * the queues this worker polls, or the UDP ports this worker's af_packet socket leaves to them.
   */
  lanes: { iface: string; key?: string; pollQueues?: number[]; reject?: [number, number][] }[];
}

export interface WorkerInit {
  config: Config;
  /** 0-based worker number (its graph is thread index + 1, named rdma_wk_<index>). */
  index: number;
  /** CPU to pin to (cpu.corelist-workers), or null. */
  cpu: number | null;
  /** Its PD/MR/CQ/SRQ handles count up from here (facade.ts routes a handle by its range). */
  handleBase: number;
  /** With 2 or more workers: its handoff ports and shadows. */
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
