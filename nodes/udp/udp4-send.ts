/**
 * udp4-send: the input node through which datagrams sent from outside the graph (the UDP
 * API's `send`, called by the control plane or a callback) enter it, bound for udp4-encap.
 * A ring of buffer indices filled by `push` and drained up to a frame per pass; as an input
 * node it can start a packet trace (`trace add udp4-send N`).
 */
import { type Frame, FRAME_SIZE, type Graph, NodeFlag, type NodeRuntime } from '../../graph/index.ts';

export const UDP4_SEND = 'udp4-send';

export class UdpSendQueue {
  private readonly ring: Uint32Array;
  private readonly mask: number;
  private head = 0;
  private tail = 0;

  constructor(size = 4096) {
    if (!Number.isInteger(size) || size < 2 || (size & (size - 1)) !== 0)
      throw new RangeError(`udp send queue: size must be a power of 2 >= 2, got ${size}`);
    this.ring = new Uint32Array(size);
    this.mask = size - 1;
  }

  get length(): number {
    return this.head - this.tail;
  }

  /** Queue `bufs[off..off+n)`; returns how many fitted. */
  push(bufs: Uint32Array, off: number, n: number): number {
    const room = this.ring.length - (this.head - this.tail);
    const m = n < room ? n : room;
    for (let i = 0; i < m; i++) this.ring[(this.head + i) & this.mask] = bufs[off + i];
    this.head += m;
    return m;
  }

  /** Take up to `max` into `out[0..]`. */
  pop(out: Uint32Array, max: number): number {
    const have = this.head - this.tail;
    const m = have < max ? have : max;
    for (let i = 0; i < m; i++) out[i] = this.ring[(this.tail + i) & this.mask];
    this.tail += m;
    return m;
  }
}

export function registerUdp4Send(graph: Graph, queue: UdpSendQueue): NodeRuntime {
  // Datagrams still queued when the graph closes go back to the pool.
  graph.onClose(() => {
    const left = new Uint32Array(queue.length);
    graph.pool.free(left, 0, queue.pop(left, left.length));
  });
  return graph.register({
    name: UDP4_SEND,
    type: 'input',
    // Called only when the queue was given datagrams (UdpApi.send interrupts it).
    state: 'interrupt',
    pollPhase: 'transmit',
    flags: NodeFlag.TRACE_SUPPORTED,
    next: ['udp4-encap'],
    runtimeData: queue,
    fn: udp4Send,
    formatTrace: (r) => String(r),
  });
}

function udp4Send(rt: NodeRuntime, _frame: Frame | null): number {
  const q = rt.runtimeData as UdpSendQueue;
  if (q.length === 0) return 0;
  const out = rt.scratch;
  const n = q.pop(out, FRAME_SIZE);
  const g = rt.graph;
  if (q.length > 0) g.interrupt(rt); // more than a frame queued: the rest next pass
  g.traceInput(rt, out, 0, n);
  if (rt.traceOn) {
    for (let i = 0; i < n; i++)
      rt.addTrace(out[i], `datagram of ${g.pool.packetLength(out[i])} bytes from the UDP API`);
  }
  g.enqueueToSingleNext(rt, 0, out, 0, n);
  return n;
}
