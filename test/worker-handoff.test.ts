/**
 * worker-handoff against hostile frames (every field comes off the wire): too short for
 * Ethernet, IPv4 or UDP, header lengths below 20 or past the frame, later fragments, other
 * protocols, ports of this worker or of no worker, an interface without ports, and ARP when the
 * pool has no buffer for the copy. Only a whole UDP header naming another worker's QP number
 * is handed off; everything else stays on this worker; nothing is lost.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Graph } from '../graph/graph.ts';
import type { Frame, NodeRuntime } from '../graph/node.ts';
import { addHandoffPort, handoffTable, registerWorkerHandoff } from '../nodes/handoff/worker-handoff.ts';
import { memPool } from './helpers.ts';

/** An Ethernet frame: type, then an IPv4 header of `ihl` words (protocol, fragment field) and a UDP port. */
function ip4(opts: { ihl?: number; proto?: number; frag?: number; dport?: number; len?: number }): Uint8Array {
  const ihl = opts.ihl ?? 5;
  const f = new Uint8Array(opts.len ?? 14 + Math.max(ihl * 4, 20) + 8 + 10);
  f.set([0x08, 0x00], 12);
  f[14] = 0x40 | ihl;
  const ip = 14;
  if (f.length > ip + 9) f[ip + 9] = opts.proto ?? 17;
  if (f.length > ip + 7) {
    f[ip + 6] = (opts.frag ?? 0) >> 8;
    f[ip + 7] = (opts.frag ?? 0) & 0xff;
  }
  const u = ip + ihl * 4;
  if (f.length > u + 3) {
    f[u + 2] = (opts.dport ?? 0) >> 8;
    f[u + 3] = (opts.dport ?? 0) & 0xff;
  }
  return f;
}

function arp(): Uint8Array {
  const f = new Uint8Array(42);
  f.fill(0xff, 0, 6);
  f.set([0x08, 0x06], 12);
  return f;
}

function rig(poolSize = 64) {
  const pool = memPool(poolSize);
  const g = new Graph({ pool });
  const got = { eth: 0, port: 0 };
  const sink = (name: string, key: 'eth' | 'port') =>
    g.register({
      name,
      fn: (_rt: NodeRuntime, f: Frame | null) => {
        got[key] += f!.n;
        pool.free(f!.vec, 0, f!.n);
        return f!.n;
      },
    });
  sink('ethernet-input', 'eth');
  sink('port-out', 'port');
  const queue: { bytes: Uint8Array; rxIf: number }[] = [];
  g.register({
    name: 'frames-input',
    type: 'input',
    next: ['worker-handoff'],
    fn: (rt) => {
      let n = 0;
      for (const q of queue.splice(0)) {
        const bi = pool.writePacket(q.bytes, 0, q.bytes.length);
        pool.rxIf[bi] = q.rxIf;
        rt.scratch[n++] = bi;
      }
      if (n > 0) g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  // Worker 0 of 2; worker 1 owns QP numbers 25000..29999; interface 1 has a port to worker 1.
  const rt = registerWorkerHandoff(
    g,
    handoffTable(
      0,
      2,
      [
        [20000, 24999],
        [25000, 29999],
      ],
      2,
    ),
  );
  addHandoffPort(g, rt, 1, 1, 'port-out');
  g.build();
  const count = (reason: string) =>
    g.errorSnapshot().rows.find((r) => r.node === 'worker-handoff' && r.reason === reason)?.count ?? 0;
  return { pool, g, got, queue, count };
}

test('worker-handoff: only a whole UDP header with another worker’s QP number leaves this worker', () => {
  const r = rig();
  const frames: [string, Uint8Array, number, 'eth' | 'port'][] = [
    ['shorter than Ethernet', new Uint8Array(5), 1, 'eth'],
    ['IPv4 cut in its header', ip4({ dport: 26000, len: 30 }), 1, 'eth'],
    ['UDP to worker 1', ip4({ dport: 26000 }), 1, 'port'],
    ['IHL 15, frame ends before UDP', ip4({ ihl: 15, dport: 26000, len: 14 + 60 + 2 }), 1, 'eth'],
    ['IHL 15 with a whole UDP header', ip4({ ihl: 15, dport: 26000 }), 1, 'port'],
    ['IHL 2 (below 20 bytes)', ip4({ ihl: 2, dport: 26000 }), 1, 'eth'],
    ['a later fragment', ip4({ frag: 0x0010, dport: 26000 }), 1, 'eth'],
    ['TCP, not UDP', ip4({ proto: 6, dport: 26000 }), 1, 'eth'],
    ["UDP to this worker's QP number", ip4({ dport: 20001 }), 1, 'eth'],
    ['UDP to no QP number', ip4({ dport: 80 }), 1, 'eth'],
    ['UDP to worker 1 on an interface without ports', ip4({ dport: 26000 }), 2, 'eth'],
  ];
  const want = { eth: 0, port: 0 };
  for (const [, bytes, rxIf, to] of frames) {
    r.queue.push({ bytes, rxIf });
    want[to]++;
  }
  r.g.runPass();
  assert.equal(r.got, want);
  assert.is(r.count("frames handed to the QP's worker"), 2);
  assert.is(r.pool.available(), r.pool.count, 'every buffer back');
});

test('worker-handoff: ARP goes on and a copy goes to each port; without a buffer the copy is dropped and counted', () => {
  const r = rig(4);
  r.queue.push({ bytes: arp(), rxIf: 1 });
  r.g.runPass();
  assert.equal(r.got, { eth: 1, port: 1 });
  assert.is(r.count('ARP copies sent to the other workers'), 1);
  // The pool's last buffer holds the ARP itself: no room for the copy.
  const held = new Uint32Array(3);
  assert.is(r.pool.alloc(held, 0, 3), 3);
  r.queue.push({ bytes: arp(), rxIf: 1 });
  r.g.runPass();
  assert.equal(r.got, { eth: 2, port: 1 });
  assert.is(r.count('ARP copy dropped: no buffer'), 1);
  r.pool.free(held, 0, 3);
  assert.is(r.pool.available(), r.pool.count);
});

test.run();
