/**
 * handoff-input (cpu.workers >= 2): the input node that drains this worker's inbound handoff
 * queues (graph/handoff-queue.ts, one from each other worker) into its own pool. A slot holds a
 * frame and the global interface index it belongs to (the same on every worker: its place in
 * the configuration), and says what it is:
 *
 *   received     another worker received it from the device for one of our QPs (or it is an
 *                ARP copy): to ethernet-input as received on that interface
 *   to transmit  a worker without the device transmitted it: to the interface's tx node here,
 *                where its tx fault injector and capture run once and the driver sends it
 *
 * Each slot comes from another thread of this process, not the wire, and is still checked: a
 * length of 0 or past the slot, a kind that is neither, an interface this worker does not have
 * (or, to transmit, has no device of) are counted and skipped; nothing is allocated for them.
 * When the pool has no buffer the frames wait in the queue. At most one vector per call, the
 * queues taken in turn from a rotating start.
 */
import {
  BufferFlag,
  FRAME_SIZE,
  type Graph,
  HANDOFF_MAX_IF,
  HANDOFF_RX,
  HANDOFF_SLOT_HEADER,
  HANDOFF_TX,
  type HandoffInbox,
  INVALID_INDEX,
  NodeFlag,
  type NodeRuntime,
  errorTable,
  nextTable,
} from '../../graph/index.ts';

export const HANDOFF_INPUT = 'handoff-input';

const NEXT = nextTable({ ETH: 'ethernet-input' });
const NEXT_ETH = NEXT.index.ETH;

const ERROR_TABLE = errorTable({
  BAD_LENGTH: {
    name: 'bad_length',
    description: 'handoff slots with no frame or one past the slot',
    severity: 'error',
  },
  BAD_KIND: { name: 'bad_kind', description: 'handoff slots neither received nor to transmit', severity: 'error' },
  NO_INTERFACE: {
    name: 'no_interface',
    description: 'handoff slots naming an interface this worker does not have',
    severity: 'error',
  },
  NOT_DEVICE: {
    name: 'not_device',
    description: 'frames to transmit on an interface this worker has no device of',
    severity: 'error',
  },
  NO_BUFFERS: { name: 'no_buffers', description: 'handoff frames left waiting: no buffer', severity: 'warn' },
});
export const HandoffInputError = ERROR_TABLE.code;

export interface HandoffInputTable {
  inbox: HandoffInbox;
  /** Interface index -> 1 when this worker has it (received frames may name it). */
  known: Uint8Array;
  /** Interface index -> next index of its tx node, or -1 (none here, or not its device here). */
  txNext: Int32Array;
  /** The queue the next call starts with. */
  start: number;
  /** Scratch: the queue each frame of the vector came from (trace). */
  src: Uint8Array;
}

/** The trace record of a frame taken from a queue. */
interface HandoffTrace {
  from: number;
  tx: boolean;
  ifIndex: number;
  len: number;
}

export function registerHandoffInput(graph: Graph, inbox: HandoffInbox, maxIf: number): NodeRuntime {
  const table: HandoffInputTable = {
    inbox,
    known: new Uint8Array(maxIf + 1),
    txNext: new Int32Array(maxIf + 1).fill(-1),
    start: 0,
    src: new Uint8Array(FRAME_SIZE),
  };
  return graph.register({
    name: HANDOFF_INPUT,
    type: 'input',
    pollPhase: 'receive',
    flags: NodeFlag.TRACE_SUPPORTED,
    next: NEXT.names,
    errors: ERROR_TABLE.list,
    runtimeData: table,
    fn: handoffInput,
    formatTrace: (r) => {
      const t = r as HandoffTrace;
      return `from worker ${t.from}: ${t.tx ? 'to transmit on' : 'received on'} interface ${t.ifIndex}, len ${t.len}`;
    },
  });
}

/**
 * Interface `index` exists here: received frames may name it; `txNode` (its tx node, when this
 * worker has its device) takes the frames other workers transmit on it.
 */
export function addHandoffInterface(graph: Graph, rt: NodeRuntime, index: number, txNode: string | null): void {
  const t = rt.runtimeData as HandoffInputTable;
  if (!(Number.isInteger(index) && index >= 1 && index < t.known.length && index <= HANDOFF_MAX_IF))
    throw new RangeError(`handoff-input: interface index ${index} is not in 1..${t.known.length - 1}`);
  t.known[index] = 1;
  if (txNode !== null) t.txNext[index] = graph.addNext(rt, txNode);
}

function handoffInput(rt: NodeRuntime): number {
  const t = rt.runtimeData as HandoffInputTable;
  const inbox = t.inbox;
  inbox.awake();
  const from = inbox.from;
  const nq = from.length;
  if (nq === 0) return 0;
  const g = rt.graph;
  const pool = g.pool;
  const out = rt.scratch,
    nexts = rt.nexts,
    known = t.known,
    txNext = t.txNext,
    nIf = known.length;
  let k = 0,
    starved = false;
  const first = t.start;
  t.start = first + 1 === nq ? 0 : first + 1;
  for (let j = 0; j < nq && k < FRAME_SIZE; j++) {
    const qi = (first + j) % nq;
    const q = from[qi];
    let avail = q.available();
    if (avail === 0) continue;
    const u32 = q.u32,
      u8 = q.u8,
      max = q.maxFrame;
    while (avail > 0 && k < FRAME_SIZE) {
      const w = q.slot();
      const len = u32[w],
        word = u32[w + 1];
      const ix = word & HANDOFF_MAX_IF,
        kind = word >>> 24;
      let next = -1;
      if (len === 0 || len > max) rt.countError(HandoffInputError.BAD_LENGTH);
      else if (kind === HANDOFF_RX) {
        if (ix < nIf && known[ix] !== 0) next = NEXT_ETH;
        else rt.countError(HandoffInputError.NO_INTERFACE);
      } else if (kind === HANDOFF_TX) {
        if (ix < nIf && txNext[ix] >= 0) next = txNext[ix];
        else rt.countError(ix < nIf && known[ix] !== 0 ? HandoffInputError.NOT_DEVICE : HandoffInputError.NO_INTERFACE);
      } else rt.countError(HandoffInputError.BAD_KIND);
      if (next >= 0) {
        const bi = pool.writePacket(u8, (w << 2) + HANDOFF_SLOT_HEADER, len);
        if (bi === INVALID_INDEX) {
          starved = true;
          break;
        }
        if (kind === HANDOFF_RX) pool.rxIf[bi] = ix;
        else pool.txIf[bi] = ix;
        out[k] = bi;
        nexts[k] = next;
        t.src[k] = qi;
        k++;
      }
      q.pop();
      avail--;
    }
    q.release();
    if (starved) {
      rt.countError(HandoffInputError.NO_BUFFERS);
      break;
    }
  }
  if (k === 0) return 0;
  g.traceInput(rt, out, 0, k);
  if (rt.traceOn) {
    for (let i = 0; i < k; i++) {
      const bi = out[i];
      if ((pool.flags[bi] & BufferFlag.TRACED) === 0) continue;
      const tx = rt.nextNames[nexts[i]] !== 'ethernet-input';
      rt.addTrace(bi, {
        from: inbox.fromWorker[t.src[i]],
        tx,
        ifIndex: tx ? pool.txIf[bi] : pool.rxIf[bi],
        len: pool.packetLength(bi),
      } satisfies HandoffTrace);
    }
  }
  rt.enqueue(out, k);
  return k;
}
