/**
 * The held ACK (rdma.trp.ack-delay-us, nodes/rdma/PROTOCOL.md section 5): a lone data packet
 * received in order is acknowledged by the data going back (a reply, a Read's response) when
 * some leaves within the delay, else by a pure ACK once the delay is over; two packets in a row
 * are acknowledged at once. The delay here is 1 s (rto-min-ms 5 s, so no timeout meddles):
 * what completes well before it was acknowledged without waiting, what has not completed at
 * 200 ms is being held. The counts are ddp-output's pure ACKs (`acks`). The first tests play
 * the peer packet by packet on a manual clock (the rig), the others run two stacks.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { connectManual, makeEnds, pattern, type Stack, twoStacks, waitCompletions } from './rdma-helpers.ts';
import { isPureAck, OP, readRequestBody, rig, tagged, TRP, trpHeader, untagged } from './rdma-rig-helpers.ts';

const DELAY_US = 1_000_000;
const acks = (s: Stack) => s.graph.errorCount('ddp-output', 'acks');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function pair(ackDelayUs = DELAY_US) {
  const p = twoStacks({ rdma: { trp: { rtoMinMs: 5000, rtoMaxMs: 10000, ackDelayUs } } });
  await p.ready;
  const A = makeEnds(p.a),
    B = makeEnds(p.b);
  connectManual(p.a, A.qp, p.b, B.qp);
  const src = p.a.rdma.regMr(A.pd, pattern(8192, 3), ['local-write']);
  const dst = p.b.rdma.regMr(B.pd, 8192, ['local-write', 'remote-write', 'remote-read']);
  const write = (n: number, wrId: string) =>
    p.a.rdma.postSend(A.qp, {
      wrId,
      opcode: 'write',
      sg: [{ mr: src, offset: 0, length: n }],
      remote: { stag: dst.stag, offset: 0 },
    });
  return { p, A, B, src, dst, write };
}

test('the rig, a manual clock and a 100 us delay: a lone packet waits, a second one in a row or one out of order is acknowledged at once, a Read response carries the ACK of its request', () => {
  const r = rig({ rdma: { trp: { ackDelayUs: 100 } } });
  const sink = r.mr(4096, ['local-write', 'remote-write', 'remote-read']);
  const wr = (psn: number) => [...trpHeader(psn, 0), ...tagged({ stag: sink.stag, to: psn }), 0xa0 + psn];
  assert.equal(r.feed(wr(0)), [], 'a lone packet: no ACK this pass');
  assert.equal(r.advance(0.05, 0.01), [], 'nor within the delay');
  let out = r.advance(0.1, 0.01);
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 1]],
    'one pure ACK once the delay is over (the wheel ticks every 100 us: by 150 us)',
  );
  // The next lone packet is held; the one after it, in another pass, has the ACK go at once.
  assert.equal(r.feed(wr(1)), []);
  out = r.feed(wr(2));
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 3]],
    'a second packet in order: at once',
  );
  // Out of order (PSN 4 before 3): a SACK-bearing ACK at once; then 3 fills the hole: at once.
  out = r.feed(wr(4));
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [
      [TRP.DATA, 0, 3],
      [TRP.SACK, 4, 5],
    ],
    'out of order: a pure ACK of 3 and a SACK of [4, 5) at once',
  );
  out = r.feed(wr(3));
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 5]],
    'the hole filled: at once',
  );
  // A Read Request: its response leaves this pass and carries the ACK; no pure ACK.
  const acksBefore = r.err('ddp-output', 'acks');
  out = r.feed([
    ...trpHeader(5, 0),
    ...untagged({ op: OP.READ_REQ, qn: 1, msn: 1 }),
    ...readRequestBody({ sinkStag: 0x77, sinkTo: 0n, size: 8, srcStag: sink.stag, srcTo: 0n }),
  ]);
  assert.is(out.length, 1, 'the Read Response alone');
  assert.ok(!isPureAck(out[0]) && out[0].op === TRP.DATA && out[0].ack === 6, 'it carries ack 6');
  assert.is(r.err('ddp-output', 'acks'), acksBefore, 'no pure ACK');
  assert.equal(r.advance(0.3, 0.01), [], 'and none later: nothing is held');
  r.close();
});

test('a lone WRITE with nothing coming back: its ACK is held for ack-delay-us, then one pure ACK completes it', async () => {
  const { p, A, write } = await pair();
  try {
    const t0 = Date.now();
    write(100, 'lone');
    await sleep(200);
    if (Date.now() - t0 < DELAY_US / 2000) {
      assert.is(A.scq.poll(1).length, 0, 'not acknowledged yet: the ACK is held');
      assert.is(acks(p.b), 0, 'no pure ACK yet');
    }
    const [c] = await waitCompletions(A.scq, 1, 5000);
    assert.is(c.status, 'success');
    assert.ok(Date.now() - t0 >= DELAY_US / 1000 - 5, 'completed once the delay was over');
    assert.is(acks(p.b), 1, 'one pure ACK');
  } finally {
    p.close();
  }
});

test('a Send answered by a Send: the answer carries the ACK, no pure ACK either way until the last one is held out', async () => {
  const { p, A, B } = await pair();
  try {
    const a = p.a.rdma.regMr(A.pd, 4096, ['local-write']),
      b = p.b.rdma.regMr(B.pd, 4096, ['local-write']);
    const t0 = Date.now();
    for (let i = 0; i < 5; i++) {
      p.b.rdma.postRecv(B.qp, { wrId: `rb${i}`, sg: [{ mr: b, offset: 0, length: 4096 }] });
      p.a.rdma.postRecv(A.qp, { wrId: `ra${i}`, sg: [{ mr: a, offset: 0, length: 4096 }] });
      p.a.rdma.postSend(A.qp, { wrId: `ping${i}`, opcode: 'send', sg: [{ mr: a, offset: 0, length: 64 }] });
      const [got] = await waitCompletions(B.rcq, 1);
      assert.is(got.status, 'success');
      await sleep(30); // the program's own work: many passes, in which the ACK would have gone
      p.b.rdma.postSend(B.qp, { wrId: `pong${i}`, opcode: 'send', sg: [{ mr: b, offset: 0, length: 64 }] });
      const [back] = await waitCompletions(A.rcq, 1);
      assert.is(back.status, 'success');
      await sleep(30);
      // The pong carried B's ACK of the ping: A's Send is complete without a pure ACK.
      const [sent] = await waitCompletions(A.scq, 1);
      assert.is(sent.wrId, `ping${i}`);
    }
    // 300 ms of sleeps, late on a loaded machine; an ACK waited for would take a whole delay more.
    assert.ok(Date.now() - t0 < DELAY_US / 1000, 'every round within one delay: no ACK was waited for');
    assert.is(acks(p.b), 0, 'B sent no pure ACK: its pongs carried them');
    assert.is(acks(p.a), 0, 'A sent none: each ping carried the ACK of the pong before it');
    // The last pong's ACK has nothing to ride on: a pure ACK after the delay completes it.
    const [last] = await waitCompletions(B.scq, 5, 5000).then((cs) => cs.slice(-1));
    assert.is(last.wrId, 'pong4');
    assert.is(acks(p.a), 1);
  } finally {
    p.close();
  }
});

test('two packets in a row are acknowledged at once; so is everything with ack-delay-us 0', async () => {
  for (const [delay, n] of [
    [DELAY_US, 3000],
    [0, 100],
  ] as const) {
    const { p, A, dst, src, write } = await pair(delay);
    try {
      const t0 = Date.now();
      write(n, 'w');
      const [c] = await waitCompletions(A.scq, 1, 5000);
      assert.is(c.status, 'success');
      assert.ok(Date.now() - t0 < DELAY_US / 1000 / 2, `${n} B with delay ${delay}: completed without waiting`);
      assert.is(acks(p.b), 1, 'one pure ACK');
      assert.equal(dst.memory.subarray(0, n), src.memory.subarray(0, n));
    } finally {
      p.close();
    }
  }
});

test('an ack-delay-us not below rto-min-ms is refused', () => {
  assert.throws(
    () => twoStacks({ rdma: { trp: { rtoMinMs: 1, ackDelayUs: 1000 } } }),
    /ack-delay-us must be >= 0 and below rto-min-ms \(1 ms\), got 1000/,
  );
});

test.run();
