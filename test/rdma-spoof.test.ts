/**
 * A spoofer on the segment (issue 11): UDP has no authentication, so anyone who can send from a
 * QP's peer address and port reaches trp-input, cm-input and the RDMA nodes. One stack with the
 * peer played by the test (test/rdma-rig-helpers.ts): each test sends what an attacker would and
 * checks that it costs one packet's work and does not steer the QP; where an honest peer must
 * still get through (a FIN or Terminate after loss, a Send after a hole on an SRQ), that too.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import type { Qp } from '../nodes/rdma/qp.ts';
import { registerRdma } from '../nodes/rdma/stack.ts';
import { Graph } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import { memPool } from './helpers.ts';
import { ListDriver, PEER_IP, PEER_MAC, udpFrame, US_IP, US_MAC } from './l2l4-helpers.ts';
import {
  OP,
  type Out,
  PEER_PORT,
  QPN,
  type Rig,
  TRP,
  rig,
  summary,
  tagged,
  terminate,
  trpHeader,
  untagged,
} from './rdma-rig-helpers.ts';
import { finish, IP_B, makeEnds, settle, twoStacks, waitCompletions, waitFor } from './rdma-helpers.ts';

const LISTEN = 18515;
const send = (
  psn: number,
  msn: number,
  data: number[],
  o: { ack?: number; last?: boolean; mo?: number; op?: number; inv?: number } = {},
) => [
  ...trpHeader(psn, o.ack ?? 0),
  ...untagged({ op: o.op ?? OP.SEND, last: o.last, qn: 0, msn, mo: o.mo, inv: o.inv }),
  ...data,
];
const cm = (op: number, psn: number, ack: number, ird = 4, ord = 4) => [
  ...trpHeader(psn, ack, op),
  0,
  0,
  ird >> 8,
  ird & 0xff,
  ord >> 8,
  ord & 0xff,
];
const acks = (out: Out[]) => out.filter((p) => p.op === TRP.DATA && p.body.length === 0);
const sacks = (out: Out[]) => out.filter((p) => p.op === TRP.SACK);

// ------------------------------------------------------------------ 1. SACK ranges

test('1. a SACK whose range does not lie in [snd_una, snd_nxt] is refused at once, whatever its numbers', () => {
  const r = rig();
  const src = r.mr(64, ['local-write']);
  for (let k = 0; k < 4; k++) r.post({ wrId: k, opcode: 'send', sg: [{ mr: src, offset: k, length: 1 }] });
  assert.equal(
    r.run().map((p) => p.psn),
    [0, 1, 2, 3],
  );
  // The reported freeze: start half the sequence space away; "end" then looks before snd_nxt to
  // a serial comparison. Then: start beyond snd_nxt, end before start, end beyond snd_nxt.
  const bad: [number, number][] = [
    [0x7fffffff, 0xc0000000],
    [5, 6],
    [3, 1],
    [1, 9],
    [0x80000000, 2],
  ];
  for (const [start, end] of bad) r.feed(trpHeader(start, end, TRP.SACK));
  assert.is(r.err('trp-input', 'bad_sack'), bad.length);
  assert.is(r.rdma.core.counters.badAck, bad.length);
  for (let p = 0; p < 4; p++) assert.is(r.qp.txFlags[p] & 2, 0, `PSN ${p} not marked SACKed`);
  // A good one is still taken: [2, 4) marks 2 and 3, and 0, 1 are sent again at once (early retransmit).
  const out = r.feed(trpHeader(2, 4, TRP.SACK));
  assert.is(r.err('trp-input', 'bad_sack'), bad.length);
  assert.equal(
    out.map((p) => p.psn),
    [0, 1],
    'the holes before the range, retransmitted',
  );
  assert.is(r.qp.txFlags[2] & 2, 2);
  r.feed(trpHeader(4, 4));
  assert.equal(summary(r.scq.poll(8)), [
    '0:send:success:1',
    '1:send:success:1',
    '2:send:success:1',
    '3:send:success:1',
  ]);
  r.close();
});

// ------------------------------------------------------------------ 2. blind injection

test('2. initial PSNs, QP ports and STag keys are random; a guessed ACK completes nothing', () => {
  const g = new Graph({ pool: memPool(64, 2048) });
  const net = registerL2L4(g);
  const rdma = registerRdma(g, net, { portRange: [20000, 29999], maxMrs: 1 });
  const pd = rdma.createPd(),
    cq = rdma.createCq(8);
  const qps: Qp[] = [];
  for (let k = 0; k < 64; k++) qps.push(rdma.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 1, maxRecvWr: 1 }));
  const isns = new Set(qps.map((q) => q.isn)),
    ports = qps.map((q) => q.qpn);
  assert.is(isns.size, 64, '64 QPs, 64 initial PSNs');
  assert.not.ok(isns.has(0) && isns.size === 1);
  assert.ok(
    ports.some((p, k) => k > 0 && p !== ports[k - 1] + 1),
    `QPNs not handed out in order: ${ports.slice(0, 8).join(' ')}...`,
  );
  assert.ok(Math.min(...ports) > 20000 || Math.max(...ports) < 29999, 'not from the start of the range');
  assert.is(rdma.queryQp(qps[0]).psn, qps[0].isn, 'query shows the initial PSN');
  // One MR slot registered 300 times: its STag never comes back (8-bit keys came back after 256).
  assert.ok(rdma.core.stagKeyBits >= 12);
  const stags = new Set<number>();
  for (let k = 0; k < 300; k++) {
    const mr = rdma.regMr(pd, 8, ['local-write']);
    stags.add(mr.stag);
    rdma.deregMr(mr);
  }
  assert.is(stags.size, 300, '300 registrations, 300 STags');

  // A connected QP with its own random initial PSN: an ACK guessed as the old fixed start (3 =
  // "the first three arrived") is outside [snd_una - W, snd_nxt]: dropped, nothing completes.
  const r = rig({ psn: { rq: 0 } });
  const isn = r.qp.isn;
  const src = r.mr(64, ['local-write']);
  for (let k = 0; k < 3; k++) r.post({ wrId: k, opcode: 'send', sg: [{ mr: src, offset: k, length: 1 }] });
  assert.equal(
    r.run().map((p) => p.psn),
    [isn, (isn + 1) >>> 0, (isn + 2) >>> 0],
    'sent from the random initial PSN',
  );
  const guess = isn === 0 ? 0x80000000 : 0;
  r.feed(trpHeader(0, (guess + 3) >>> 0));
  assert.is(r.err('trp-input', 'bad_ack'), 1);
  assert.equal(r.scq.poll(8), [], 'no completion from a spoofed ACK');
  // Data with a good PSN but a guessed ACK is dropped too (not placed).
  const sink = r.mr(16, ['local-write', 'remote-write']);
  r.feed([...trpHeader(0, guess), ...tagged({ stag: sink.stag, to: 0 }), 0x77]);
  assert.is(sink.memory[0], 0);
  assert.is(r.err('trp-input', 'bad_ack'), 2);
  // The real ACK completes them.
  r.feed(trpHeader(0, (isn + 3) >>> 0));
  assert.equal(summary(r.scq.poll(8)), ['0:send:success:1', '1:send:success:1', '2:send:success:1']);
  r.close();
});

test("2. the connection manager exchanges random initial PSNs: each side receives from the other's", async () => {
  const p = twoStacks();
  const A = makeEnds(p.a);
  let B: ReturnType<typeof makeEnds> | null = null;
  p.b.rdma.listen(LISTEN, () => {
    B = makeEnds(p.b);
    return { qp: B.qp };
  });
  const isnA = A.qp.isn;
  await p.a.rdma.connect(A.qp, IP_B, LISTEN);
  const b = (B as unknown as ReturnType<typeof makeEnds>).qp;
  assert.is(b.rcvNxt, isnA, "B expects A's initial PSN");
  assert.is(A.qp.rcvNxt, b.isn, "A expects B's");
  assert.is.not(isnA, b.isn);
  // The third packet (A's pure ACK) showed B that A has its ACCEPT.
  await waitFor("B to see A's ACK", () => !b.halfOpen);
  const mr = p.b.rdma.regMr(b.pd, 16, ['local-write']);
  p.b.rdma.postRecv(b, { wrId: 'r', sg: [{ mr, offset: 0, length: 16 }] });
  const sm = p.a.rdma.regMr(A.pd, 16, []);
  p.a.rdma.postSend(A.qp, { wrId: 's', opcode: 'send', sg: [{ mr: sm, offset: 0, length: 16 }] });
  assert.equal(summary(await waitCompletions(A.scq, 1)), ['s:send:success:16']);
  await finish(p);
});

// ------------------------------------------------------------------ 3. spoofed teardown

test('3. FIN only at the expected PSN: elsewhere it draws a challenge ACK and the QP stays up', () => {
  const r = rig();
  const sink = r.mr(16, ['local-write', 'remote-write']);
  r.feed([...trpHeader(0, 0), ...tagged({ stag: sink.stag, to: 0, last: false }), 1]);
  // Expected PSN is 1 now. FINs at 0 (old), 2 and 0x40000000 (in the window / far), and at 1
  // with an ACK we never sent: all refused; the in-window ones draw an ACK saying 1.
  let out = r.feed(trpHeader(2, 0, TRP.FIN));
  assert.equal(
    acks(out).map((p) => p.ack),
    [1],
    'challenge ACK',
  );
  r.feed(trpHeader(0, 0, TRP.FIN), trpHeader(0x40000000, 0, TRP.FIN), trpHeader(1, 12345, TRP.FIN));
  assert.is(r.err('trp-input', 'fin_rejected'), 4);
  assert.is(r.qp.stateName, 'rts');
  // The honest FIN, at 1.
  out = r.feed(trpHeader(1, 0, TRP.FIN));
  assert.is(r.qp.stateName, 'error');
  assert.equal(out, []);
  r.close();
});

test('3. an honest closer whose FIN was refused sends it again where the challenge ACK says', () => {
  const r = rig();
  const src = r.mr(64, ['local-write']);
  for (let k = 0; k < 3; k++) r.post({ wrId: k, opcode: 'send', sg: [{ mr: src, offset: k, length: 1 }] });
  r.run();
  r.rdma.disconnect(r.qp);
  const fin = r.run().filter((p) => p.op === TRP.FIN);
  assert.equal(
    fin.map((p) => p.psn),
    [3],
    'FIN at our next PSN',
  );
  // The peer got only PSN 0: its challenge ACK says 1. Our FIN goes again at 1 (at most 3 times).
  let out = r.feed(trpHeader(0, 1));
  assert.equal(
    out.filter((p) => p.op === TRP.FIN).map((p) => p.psn),
    [1],
  );
  // Each new challenge moves it; after three it stops, whatever comes.
  let fins = 0;
  for (const ack of [2, 1, 2, 1, 2]) fins += r.feed(trpHeader(0, ack)).filter((p) => p.op === TRP.FIN).length;
  assert.is(fins, 2);
  assert.is(r.qp.finResends, 3, 'bounded');
  r.close();
});

test('3. an ACK outside [snd_una - W, snd_nxt] is dropped with its packet', () => {
  const r = rig();
  const sink = r.mr(16, ['local-write', 'remote-write']);
  // Nothing sent: snd_una = snd_nxt = 0; ACK 1 is beyond, 0xffff0000 far behind.
  r.feed(
    [...trpHeader(0, 1), ...tagged({ stag: sink.stag, to: 0 }), 9],
    [...trpHeader(0, 0xffff0000), ...tagged({ stag: sink.stag, to: 1 }), 9],
  );
  assert.is(r.err('trp-input', 'bad_ack'), 2);
  assert.equal(Array.from(sink.memory.subarray(0, 2)), [0, 0]);
  // Within the window behind snd_una is fine (a late packet).
  r.feed([...trpHeader(0, 0xffffff00), ...tagged({ stag: sink.stag, to: 0 }), 9]);
  assert.is(sink.memory[0], 9);
  r.close();
});

test('3. a Terminate is taken only at the expected PSN; after loss the closer puts one in every hole', () => {
  const r = rig();
  const sink = r.mr(16, ['local-write', 'remote-write']);
  // A spoofed Terminate at PSN 3 (0..2 not received): not taken, not acknowledged.
  const term = (psn: number) => [
    ...trpHeader(psn, 0),
    ...untagged({ op: OP.TERMINATE, qn: 2, msn: 1 }),
    0x01,
    0x00,
    0,
    0,
  ];
  let out = r.feed(term(3));
  assert.is(r.err('rdmap-input', 'terminate_early'), 1);
  assert.is(r.qp.stateName, 'rts');
  assert.equal(
    acks(out).map((p) => p.ack),
    [0],
  );
  assert.equal(sacks(out), [], 'not reported as received');
  for (let k = 0; k < 3; k++) r.feed([...trpHeader(k, 0), ...tagged({ stag: sink.stag, to: k, last: false }), k]);
  out = r.feed(term(3));
  assert.is(r.qp.stateName, 'error', 'at the expected PSN it is taken');
  r.close();

  // The other side: we raise a Terminate after sending 0..2; the peer has only 0 and says so.
  const s = rig();
  const src = s.mr(64, ['local-write']);
  for (let k = 0; k < 3; k++) s.post({ wrId: k, opcode: 'send', sg: [{ mr: src, offset: k, length: 1 }] });
  s.run();
  out = s.feed([...trpHeader(0, 1), ...tagged({ stag: 0x12345, to: 0 }), 1]); // Write to a bad STag
  const t = out.filter((p) => p.op === TRP.DATA && p.body.length > 0);
  assert.equal(
    t.map((p) => [p.psn, terminate(p).code]),
    [[3, 0x1100]],
  );
  // On the timeout, PSNs 1..3 all go again, each as the Terminate.
  out = s.advance(30);
  const again = out.filter((p) => p.op === TRP.DATA && p.body.length > 0).slice(0, 3);
  assert.equal(
    again.map((p) => p.psn),
    [1, 2, 3],
  );
  for (const p of again) assert.is(terminate(p).code, 0x1100);
  s.close();
});

// ------------------------------------------------------------------ 4 and 5. connection manager

function listener(r: Rig, backlog: number, halfOpenMs = 1000) {
  const made: Qp[] = [],
    reaped: string[] = [];
  r.rdma.listen(
    LISTEN,
    () => {
      const q = r.rdma.createQp({ pd: r.pd, sendCq: r.scq, recvCq: r.rcq, maxSendWr: 4, maxRecvWr: 4 });
      made.push(q);
      return { qp: q };
    },
    { backlog, onReap: (_q, why) => reaped.push(why) },
  );
  r.rdma.cm.halfOpenTimeoutNs = halfOpenMs * 1e6;
  return { made, reaped };
}

test("4. ACCEPT and REJECT must echo the REQ's initial PSN: a spoofed one neither connects nor fails the QP", async () => {
  const r = rig({ rdma: { cmRetryMs: 50 } });
  const q = r.rdma.createQp({ pd: r.pd, sendCq: r.scq, recvCq: r.rcq, maxSendWr: 4, maxRecvWr: 4 });
  let settled = '';
  const done = r.rdma.connect(q, PEER_IP, LISTEN).then(
    () => (settled = 'connected'),
    (e: Error) => (settled = e.message),
  );
  const req = r.run().find((p) => p.op === TRP.REQ) as Out;
  assert.is(req.psn, q.isn, 'REQ carries our initial PSN');
  // From the listener's address, from another port (as a real ACCEPT would be), but not echoing.
  r.feed(
    { payload: cm(TRP.ACCEPT, 777, 0), sport: 4000, dport: q.qpn },
    { payload: cm(TRP.REJECT, 0, (q.isn + 1) >>> 0), sport: LISTEN, dport: q.qpn },
  );
  await settle(1);
  assert.is(r.err('cm-input', 'wrong_id'), 2);
  assert.is(settled, '');
  assert.is(q.stateName, 'init');
  // The real one.
  const out = r.feed({ payload: cm(TRP.ACCEPT, 777, q.isn), sport: 4000, dport: q.qpn });
  await done;
  assert.is(settled, 'connected');
  assert.equal([q.stateName, q.remotePort, q.rcvNxt], ['rts', 4000, 777]);
  assert.equal(
    acks(out).map((p) => [p.dport, p.psn, p.ack]),
    [[4000, q.isn, 777]],
    'the third packet of the handshake',
  );
  r.close();
});

test('5. REQ flood: at most `backlog` half-open connections, the rest dropped unanswered; half-open ones are reaped', () => {
  const r = rig();
  const L = listener(r, 4, 1000);
  const before = r.rdma.qpsByQpn.size;
  let out: Out[] = [];
  for (let k = 0; k < 10; k++)
    out.push(...r.feed({ payload: cm(TRP.REQ, 1000 + k, 0), sport: 5000 + k, dport: LISTEN }));
  assert.is(L.made.length, 4);
  assert.is(r.err('cm-input', 'backlog_full'), 6);
  assert.equal(
    out.filter((p) => p.op === TRP.ACCEPT).map((p) => p.dport),
    [5000, 5001, 5002, 5003],
    'only the four accepted were answered',
  );
  // One of them shows it has our ACCEPT (an ACK within our window): no longer half-open.
  const good = L.made[0];
  r.feed({ payload: trpHeader(1000, good.isn), sport: 5000, dport: good.qpn });
  assert.is(good.halfOpen, false);
  // A repeated REQ of a half-open one: one more ACCEPT at most every 20 ms.
  out = [];
  for (let k = 0; k < 10; k++) out.push(...r.feed({ payload: cm(TRP.REQ, 1001, 0), sport: 5001, dport: LISTEN }));
  assert.is(out.filter((p) => p.op === TRP.ACCEPT).length, 0, 'just answered: not again yet');
  out = r.advance(25, 25);
  out = r.feed({ payload: cm(TRP.REQ, 1001, 0), sport: 5001, dport: LISTEN });
  assert.is(out.filter((p) => p.op === TRP.ACCEPT).length, 1);
  // After the half-open timeout the other three are gone; the opened one stays.
  r.advance(1100, 50);
  assert.is(r.err('cm-input', 'reaped'), 3);
  assert.is(L.reaped.length, 3);
  assert.ok(
    L.reaped.some((w) =>
      /^half-open connection from 10\.0\.0\.2:5001 reaped: no traffic 1000 ms after ACCEPT$/.test(w),
    ),
    L.reaped.join('\n'),
  );
  assert.is(r.rdma.qpsByQpn.size, before + 1);
  assert.is(good.destroyed, false);
  // Room again for new requests.
  out = r.feed({ payload: cm(TRP.REQ, 2000, 0), sport: 6000, dport: LISTEN });
  assert.is(out.filter((p) => p.op === TRP.ACCEPT).length, 1);
  r.close();
});

// ------------------------------------------------------------------ 6 and 7. receives

test('6. SRQ: a Send naming a far MSN takes no receive; another QP of the SRQ still gets one', () => {
  // Two QPs on one SRQ of 8; QP1 is the rig's (peer port PEER_PORT), QP2 talks to PEER_PORT + 1.
  const pool = memPool(1024, 2048);
  const g = new Graph({ pool, timerTickNs: 100_000 });
  const net = registerL2L4(g);
  const ifs = new Interfaces(g);
  const drv = new ListDriver('tst0', US_MAC, 1500);
  const itf = ifs.add(drv);
  net.addInterface({
    index: itf.index,
    name: 'tst0',
    mac: US_MAC,
    address: `${US_IP}/24`,
    mtu: 1500,
    output: itf.output.name,
    neighbors: [{ address: PEER_IP, mac: PEER_MAC }],
  });
  const rdma = registerRdma(g, net, { portRange: [20000, 20099] });
  g.build();
  const pd = rdma.createPd(),
    cq = rdma.createCq(64);
  const srq = rdma.createSrq(pd, 8);
  const mr = rdma.regMr(pd, 8 * 64, ['local-write']);
  for (let k = 0; k < 8; k++) rdma.postSrqRecv(srq, { wrId: `r${k}`, sg: [{ mr, offset: k * 64, length: 64 }] });
  const mk = (port: number, peer: number) => {
    const q = rdma.createQp({ pd, sendCq: cq, recvCq: cq, srq, maxSendWr: 4, maxRecvWr: 0, port });
    rdma.modifyQp(q, { state: 'init' });
    rdma.modifyQp(q, { state: 'rtr', remote: { address: PEER_IP, port: peer }, rqPsn: 0 });
    rdma.modifyQp(q, { state: 'rts', sqPsn: 0 });
    return q;
  };
  const q1 = mk(QPN, PEER_PORT),
    q2 = mk(QPN + 1, PEER_PORT + 1);
  const feed = (payload: number[], sport: number, dport: number) => {
    drv.rx.push({ bytes: udpFrame({ src: PEER_IP, dst: US_IP, sport, dport, payload }) });
    for (let k = 0; k < 50 && (g.runPass() > 0 || drv.rx.length > 0); k++);
  };
  // One 28-byte segment on QP1: a Send with MSN 200 (rqDone + W would have bound a window).
  feed(send(5, 200, [1, 2]), PEER_PORT, QPN);
  assert.is(srq.length, 8, 'no receive taken');
  assert.is(g.errorCount('ddp-input', 'srq_order'), 1);
  assert.is(q1.stateName, 'rts');
  // QP2's honest Send gets its receive.
  feed(send(0, 1, [7, 7, 7]), PEER_PORT + 1, QPN + 1);
  const c = cq.poll(8);
  assert.equal(
    c.map((x) => [x.qpn, x.status, x.byteLen]),
    [[QPN + 1, 'success', 3]],
  );
  assert.is(q2.stateName, 'rts');
  // QP1's Sends arriving out of order: MSN 2 before MSN 1 waits (not acknowledged), then both land in order.
  feed(send(1, 2, [2]), PEER_PORT, QPN);
  assert.is(q1.rcvNxt, 0);
  feed(send(0, 1, [1]), PEER_PORT, QPN);
  feed(send(1, 2, [2]), PEER_PORT, QPN);
  assert.equal(
    cq.poll(8).map((x) => [x.qpn, x.status, x.byteLen]),
    [
      [QPN, 'success', 1],
      [QPN, 'success', 1],
    ],
  );
  assert.is(srq.length, 5);
  g.close();
  ifs.closeAll();
});

test('7. receives complete strictly in MSN order: a Send that skips an MSN gets Terminate 0x1203, every receive flushes with its wrId', () => {
  const r = rig();
  const mr = r.mr(3 * 16, ['local-write']);
  for (let k = 0; k < 3; k++) r.recv({ wrId: `r${k}`, sg: [{ mr, offset: k * 16, length: 16 }] });
  // In PSN order, but MSN 2 first: skips the receive of MSN 1.
  const out = r.feed(send(0, 2, [9]));
  const t = out.filter((p) => p.op === TRP.DATA && p.body.length > 0).map((p) => terminate(p));
  assert.equal(
    t.map((x) => x.code),
    [0x1203],
  );
  assert.is(r.qp.stateName, 'error');
  const c = r.rcq.poll(8);
  assert.equal(
    c.map((x) => [x.wrId, x.status]),
    [
      ['r0', 'flushed'],
      ['r1', 'flushed'],
      ['r2', 'flushed'],
    ],
    'no completion without its wrId, none twice',
  );
  r.close();
});

test('7. SRQ: a receive is released once, however the peer numbers its Sends', () => {
  const pool = memPool(256, 2048);
  const g = new Graph({ pool });
  const net = registerL2L4(g);
  const rdma = registerRdma(g, net, {});
  const pd = rdma.createPd();
  const srq = rdma.createSrq(pd, 4);
  const mr = rdma.regMr(pd, 64, ['local-write']);
  for (let k = 0; k < 4; k++) rdma.postSrqRecv(srq, { wrId: k, sg: [{ mr, offset: 0, length: 8 }] });
  const wr = srq.take();
  assert.ok(wr);
  srq.release(wr!);
  srq.release(wr!);
  // Three left posted + one free slot: exactly one more post fits.
  rdma.postSrqRecv(srq, { wrId: 'again', sg: [{ mr, offset: 0, length: 8 }] });
  assert.throws(() => rdma.postSrqRecv(srq, { wrId: 'over', sg: [{ mr, offset: 0, length: 8 }] }), /srq \d+ is full/);
  g.close();
});

// ------------------------------------------------------------------ 8. remote invalidation

test('8. Send with Invalidate: only MRs registered remote-invalidate; any other gets Terminate 0x0109 and stays valid', () => {
  const r = rig();
  const buf = r.mr(64, ['local-write']);
  const local = r.mr(64, ['local-write']);
  const open = r.mr(64, ['local-write', 'remote-invalidate']);
  for (let k = 0; k < 2; k++) r.recv({ wrId: `r${k}`, sg: [{ mr: buf, offset: k * 32, length: 32 }] });
  r.feed(send(0, 1, [1], { op: OP.SEND_INV, inv: open.stag }));
  assert.equal(
    r.rcq.poll(4).map((c) => [c.wrId, c.status, c.invalidatedStag]),
    [['r0', 'success', open.stag]],
  );
  assert.is(open.valid, false);
  const out = r.feed(send(1, 2, [1], { op: OP.SEND_INV, inv: local.stag }));
  assert.equal(
    out.filter((p) => p.op === TRP.DATA && p.body.length > 0).map((p) => terminate(p).code),
    [0x0109],
  );
  assert.is(local.valid, true, 'a local-only MR cannot be revoked by the peer');
  r.close();
});

// ------------------------------------------------------------------ 9. SACK amplification

test('9. with 16 holes open, duplicates draw their ACK and at most one SACK per range per RTT', () => {
  const r = rig();
  const sink = r.mr(64, ['local-write', 'remote-write']);
  const wr = (psn: number) => [...trpHeader(psn, 0), ...tagged({ last: false, stag: sink.stag, to: psn }), psn];
  const first = r.feed(...Array.from({ length: 16 }, (_, k) => wr(2 * k + 1)));
  assert.is(sacks(first).length, 16);
  let out: Out[] = [];
  for (let k = 0; k < 10; k++) out.push(...r.feed(wr(7)));
  assert.is(acks(out).length, 10, 'each duplicate re-acknowledged');
  assert.is(sacks(out).length, 0, 'no SACK: nothing changed within the RTT');
  assert.ok(out.length <= 10, `${out.length} datagrams out for 10 in (was 170)`);
  r.clock.advance(1e6);
  out = r.feed(wr(7));
  assert.is(sacks(out).length, 16, 'an RTT later, every range once more');
  r.close();
});

test.run();
