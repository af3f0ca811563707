/**
 * QP numbers are not handed out again soon after their QP is destroyed (issue 30.2,
 * nodes/rdma/port-quarantine.ts): a number drawn again at once takes the old QP's late packets,
 * and programs that keep a peer's address take the new QP for the old one (an MPI job over UCX's
 * ud_verbs crashed on a wireup message meant for another process). Still drawn at random, and a
 * port range with every other number in use still hands out a recent one rather than refusing.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Graph } from '../graph/index.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import { PortQuarantine } from '../nodes/rdma/port-quarantine.ts';
import { registerRdma } from '../nodes/rdma/stack.ts';
import { memPool } from './helpers.ts';

function stack(lo: number, hi: number) {
  const g = new Graph({ pool: memPool(64, 2048), timerTickNs: 100_000 });
  const rdma = registerRdma(g, registerL2L4(g), { portRange: [lo, hi] });
  g.build();
  const pd = rdma.createPd(),
    cq = rdma.createCq(16);
  const qp = () => rdma.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 1, maxRecvWr: 1 });
  return { rdma, qp };
}

test('a destroyed QP number is not drawn again until half the range has been given up after it', () => {
  // 16 numbers: the last 8 given up are out of reuse.
  const { rdma, qp } = stack(20000, 20015);
  const given: number[] = [];
  const drawn = new Set<number>();
  for (let k = 0; k < 400; k++) {
    const q = qp();
    assert.ok(q.qpn >= 20000 && q.qpn <= 20015, `${q.qpn} in the range`);
    assert.not.ok(given.slice(-8).includes(q.qpn), `QPN ${q.qpn} was given up among the last 8 (${given.slice(-8)})`);
    drawn.add(q.qpn);
    rdma.destroyQp(q, true);
    given.push(q.qpn);
  }
  assert.is(drawn.size, 16, 'every number of the range is drawn in turn (at random among the rest)');
});

test('with every number but recent ones in use, a recent one is still handed out; a full range refuses', () => {
  const { rdma, qp } = stack(20000, 20003);
  const a = qp(),
    b = qp();
  rdma.destroyQp(a, true);
  rdma.destroyQp(b, true);
  // Four numbers, two just given up: four QPs still fit.
  const qs = [qp(), qp(), qp(), qp()];
  assert.equal(new Set(qs.map((q) => q.qpn)).size, 4);
  assert.throws(() => qp(), /no free port in the QP port range 20000\.\.20003/);
});

test('PortQuarantine: bounded by half the range, oldest out first, ports outside the range ignored', () => {
  const pq = new PortQuarantine(100, 107); // 8 ports: 4 held
  for (const p of [100, 101, 102, 103]) pq.retire(p);
  assert.ok([100, 101, 102, 103].every((p) => pq.has(p)));
  pq.retire(104);
  assert.not.ok(pq.has(100), 'the oldest is released when a fifth comes');
  assert.ok(pq.has(104));
  pq.retire(99);
  pq.retire(108);
  assert.not.ok(pq.has(99) || pq.has(108), 'outside the range: nothing held');
  pq.retire(104); // again: still held once, nothing else released
  assert.ok([101, 102, 103, 104].every((p) => pq.has(p)));
});

test.run();
