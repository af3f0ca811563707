/**
 * udp-echo: a UDP echo service (RFC 862) as a graph node. Bind a port to it
 * (`udp.bind(7, 'udp-echo')`) and every datagram received there goes back to its sender with
 * the same payload. Nothing is copied or rewritten here: udp4-input leaves the peer in the
 * REMOTE/PORTS opaque words and udp4-encap sends to exactly that, so the node only passes its
 * vector on (the frame itself moves to udp4-encap).
 */
import { BufferFlag, type Frame, type Graph, type NodeRuntime, OPAQUE_WORDS } from '../../graph/index.ts';
import { Ip4Opaque } from '../ip4/ip4.ts';
import { formatIp4 } from '../net/address.ts';

export const UDP_ECHO = 'udp-echo';

export function registerUdpEcho(graph: Graph): NodeRuntime {
  return graph.register({
    name: UDP_ECHO,
    next: ['udp4-encap'],
    fn: udpEcho,
    formatTrace: (r) => String(r),
  });
}

function udpEcho(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const g = rt.graph;
  if (rt.traceOn) {
    const pool = g.pool,
      op = pool.opaque;
    for (let i = 0; i < f.n; i++) {
      const bi = f.vec[i];
      if (!(pool.flags[bi] & BufferFlag.TRACED)) continue;
      const w = bi * OPAQUE_WORDS;
      rt.addTrace(
        bi,
        `echo ${pool.packetLength(bi)} bytes back to ${formatIp4(op[w + Ip4Opaque.REMOTE])}:${op[w + Ip4Opaque.PORTS] >>> 16}`,
      );
    }
  }
  g.enqueueToSingleNext(rt, 0, f.vec, 0, f.n);
  return f.n;
}
