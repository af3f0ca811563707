/**
 * What the main thread and a worker thread (cpu.workers) say to each other: method calls and
 * their results, log lines and events. Structured-clone data only (views, Uint8Arrays); an
 * AbortSignal argument travels as a marker and is fired by an "abort" message.
 */
import type { Config } from '../../config/types.ts';
import type { HandoffPlan } from '../dataplane.ts';
import type { DataplaneErrorKind, EventView } from '../views.ts';

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

export type ToWorker =
  { t: 'call'; id: number; method: string; args: unknown[] } | { t: 'abort'; id: number } | { t: 'crash' };

export type FromWorker =
  | { t: 'ready' }
  | { t: 'fatal'; kind: DataplaneErrorKind; message: string }
  | { t: 'result'; id: number; r?: unknown; e?: { kind: DataplaneErrorKind | null; message: string; stack: string } }
  | { t: 'log'; level: 'error' | 'warn' | 'info' | 'debug'; msg: string }
  | { t: 'event'; e: EventView }
  /** A verbs connection this worker is done with: the main thread closes its fd. */
  | { t: 'closeFd'; fd: number };

/** The Dataplane methods a worker serves (its public async ones). */
export const CALLABLE = new Set([
  'rxPlacement',
  'buffers',
  'capture',
  'clearErrors',
  'clearRuntime',
  'clearTrace',
  'close',
  'connect',
  'cqs',
  'createCq',
  'createMr',
  'createPd',
  'createQp',
  'createSrq',
  'destroyCq',
  'destroyMr',
  'destroyPd',
  'destroyQp',
  'destroySrq',
  'device',
  'errors',
  'getCq',
  'getMr',
  'getQp',
  'hardware',
  'health',
  'interface',
  'interfaces',
  'listen',
  'listenersList',
  'modifyQp',
  'modifySrq',
  'mrs',
  'neighbors',
  'noteQpOwner',
  'pds',
  'ping',
  'pollCq',
  'postRecv',
  'postSend',
  'postSrqRecv',
  'qps',
  'readMr',
  'recentEvents',
  'runtime',
  'setFault',
  'srqs',
  'stopCapture',
  'trace',
  'traceAdd',
  'traceNodes',
  'unlisten',
  'version',
  'writeMr',
]);

/** Each worker's handles live in [index * HANDLE_SPAN + 1, (index + 1) * HANDLE_SPAN). */
export const HANDLE_SPAN = 1 << 24;
