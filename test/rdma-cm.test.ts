/**
 * The in-band connection manager (nodes/rdma/PROTOCOL.md section 6) between two stacks: listen/connect
 * with private data both ways, IRD/ORD negotiation, REJECT with private data, connect timeout,
 * REQ retransmission through a lossy link (one QP for repeated REQs), malformed and unexpected
 * CM messages counted by cm-input, and the connect/listen API's errors. Every test ends with
 * every buffer back in the pool.
 */
import { test } from './harness.ts';
import { CmConnectError } from '../nodes/rdma/cm.ts';
import { CmRejectReason } from '../nodes/rdma/wire.ts';
import * as assert from 'uvu/assert';
import type { ConnectRequest } from '../nodes/rdma/cm.ts';
import type { RdmaEvent } from '../nodes/rdma/core.ts';
import type { QpInit } from '../nodes/rdma/stack.ts';
import { type Completion, type Mr, VerbsError } from '../nodes/rdma/verbs.ts';
import {
  closeLeftovers,
  cmMessage,
  type Ends,
  finish,
  IP_A,
  IP_B,
  makeEnds,
  pattern,
  settle,
  type Stack,
  trackedStacks,
  twoStacks,
  waitCompletions,
  waitFor,
} from './rdma-helpers.ts';

const RW = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];
const LISTEN = 7000;
const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);

test.after.each(closeLeftovers);

function pair(opts: Parameters<typeof twoStacks>[0] = {}) {
  const p = trackedStacks(opts);
  const evA: RdmaEvent[] = [],
    evB: RdmaEvent[] = [];
  p.a.rdma.onEvent = (e) => evA.push(e);
  p.b.rdma.onEvent = (e) => evB.push(e);
  return { p, evA, evB };
}

const wc = (wrId: unknown, qpn: number, status: string, opcode: string, byteLen = 0): Completion =>
  ({ wrId, qpn, status, opcode, byteLen }) as Completion;

const REQ = 1,
  ACCEPT = 2,
  REJECT = 3;

/** B listens; each request gets a new QP (INIT, `recvs` receives of 256 bytes posted) and `reply`. */
function listenB(s: Stack, init: Partial<QpInit> = {}, reply = text('welcome'), recvs = 4) {
  const reqs: ConnectRequest[] = [];
  const ends: Ends[] = [];
  const mrs: Mr[] = [];
  s.rdma.listen(LISTEN, (req) => {
    reqs.push(req);
    const e = makeEnds(s, init);
    s.rdma.modifyQp(e.qp, { state: 'init' });
    const mr = s.rdma.regMr(e.pd, 256 * recvs, RW);
    for (let i = 0; i < recvs; i++)
      s.rdma.postRecv(e.qp, { wrId: `b${i}`, sg: [{ mr, offset: i * 256, length: 256 }] });
    ends.push(e);
    mrs.push(mr);
    return { qp: e.qp, privateData: reply };
  });
  return { reqs, ends, mrs };
}

test('listen/connect: private data both ways, both QPs in RTS with each other as peer, traffic both ways', async () => {
  const { p, evA, evB } = pair();
  const L = listenB(p.b);
  const A = makeEnds(p.a);
  const res = await p.a.rdma.connect(A.qp, IP_B, LISTEN, { privateData: text('hello from A') });
  assert.is(str(res.privateData), 'welcome');
  assert.is(L.reqs.length, 1);
  const req = L.reqs[0];
  assert.equal(
    { ...req, privateData: str(req.privateData) },
    { address: IP_A, port: A.qp.qpn, listenPort: LISTEN, ird: 16, ord: 16, privateData: 'hello from A' },
  );
  const B = L.ends[0];
  assert.is.not(B.qp.qpn, LISTEN, 'the passive QP has a port of its own');
  const qa = p.a.rdma.queryQp(A.qp),
    qb = p.b.rdma.queryQp(B.qp);
  assert.equal([qa.state, qa.remote], ['rts', { address: IP_B, port: B.qp.qpn }]);
  assert.equal([qb.state, qb.remote], ['rts', { address: IP_A, port: A.qp.qpn }]);
  assert.equal(evA, [{ type: 'qp-established', qpn: A.qp.qpn }]);
  assert.equal(evB, [{ type: 'qp-established', qpn: B.qp.qpn }]);
  assert.is(p.b.graph.errorCount('cm-input', 'requests'), 1);
  // A -> B (receives posted in the accept callback) and B -> A.
  const ma = p.a.rdma.regMr(A.pd, 512, RW);
  ma.memory.set(pattern(256, 1));
  p.a.rdma.postRecv(A.qp, { wrId: 'a0', sg: [{ mr: ma, offset: 256, length: 256 }] });
  p.a.rdma.postSend(A.qp, { wrId: 'to-b', opcode: 'send', sg: [{ mr: ma, offset: 0, length: 200 }] });
  assert.equal(await waitCompletions(A.scq, 1), [wc('to-b', A.qp.qpn, 'success', 'send', 200)]);
  assert.equal(await waitCompletions(B.rcq, 1), [wc('b0', B.qp.qpn, 'success', 'recv', 200)]);
  assert.equal(L.mrs[0].memory.subarray(0, 200), pattern(200, 1));
  L.mrs[0].memory.set(pattern(100, 2), 1024 - 100);
  p.b.rdma.postSend(B.qp, { wrId: 'to-a', opcode: 'send', sg: [{ mr: L.mrs[0], offset: 1024 - 100, length: 100 }] });
  assert.equal(await waitCompletions(B.scq, 1), [wc('to-a', B.qp.qpn, 'success', 'send', 100)]);
  assert.equal(await waitCompletions(A.rcq, 1), [wc('a0', A.qp.qpn, 'success', 'recv', 100)]);
  assert.equal(ma.memory.subarray(256, 356), pattern(100, 2));
  // The connection is up and A's traffic showed B that A has its ACCEPT: a repeated REQ (the
  // same attempt, or another from the same address and port) is not answered, and makes no
  // second QP.
  assert.is(B.qp.halfOpen, false, 'B saw traffic from A');
  assert.ok(
    p.a.rdma.net.udp.sendTo(cmMessage(REQ, 16, 16, text('hello from A'), undefined, A.qp.isn), IP_B, LISTEN, A.qp.qpn),
  );
  assert.ok(
    p.a.rdma.net.udp.sendTo(cmMessage(REQ, 16, 16, text('hello from A'), undefined, 12345), IP_B, LISTEN, A.qp.qpn),
  );
  await waitFor('the repeated REQs', () => p.b.graph.errorCount('cm-input', 'repeated') === 2);
  await settle(20);
  assert.is(p.a.graph.errorCount('cm-input', 'unexpected'), 0, 'no ACCEPT came back');
  assert.is(L.reqs.length, 1, 'accept was not called again');
  assert.is(p.b.rdma.qpsByQpn.size, 1);
  assert.is(p.b.graph.errorCount('cm-input', 'requests'), 3);
  assert.is(A.qp.stateName, 'rts');
  await finish(p);
});

test('IRD/ORD negotiation: the passive side takes IRD := REQ.ord and ORD := REQ.ird within its limits', async () => {
  const { p } = pair();
  // A: IRD 4, ORD 8. B: allows IRD up to 16, ORD up to 2.
  const L = listenB(p.b, { ird: 16, ord: 2 });
  const A = makeEnds(p.a, { ird: 4, ord: 8 });
  await p.a.rdma.connect(A.qp, IP_B, LISTEN);
  assert.equal([L.reqs[0].ird, L.reqs[0].ord], [4, 8]);
  const B = L.ends[0];
  const qa = p.a.rdma.queryQp(A.qp),
    qb = p.b.rdma.queryQp(B.qp);
  assert.equal([qb.ird, qb.ord], [8, 2], 'B: IRD 8 serves A ORD 8; ORD 2 (its own limit)');
  assert.equal([qa.ird, qa.ord], [4, 8], 'A: IRD 4 covers B ORD 2; ORD 8 = B IRD');
  assert.ok(qa.ord <= qb.ird && qb.ord <= qa.ird, 'neither side may have more reads out than the other takes');
  // Reads both ways beyond the ORDs queue and all complete with the right bytes.
  const ma = p.a.rdma.regMr(A.pd, 4096, RW);
  ma.memory.set(pattern(2048, 3));
  const mb = p.b.rdma.regMr(B.pd, 4096, RW);
  mb.memory.set(pattern(2048, 4));
  for (let i = 0; i < 12; i++)
    p.a.rdma.postSend(A.qp, {
      wrId: i,
      opcode: 'read',
      sg: [{ mr: ma, offset: 2048 + i * 128, length: 128 }],
      remote: { stag: mb.stag, offset: i * 128 },
    });
  for (let i = 0; i < 6; i++)
    p.b.rdma.postSend(B.qp, {
      wrId: i,
      opcode: 'read',
      sg: [{ mr: mb, offset: 2048 + i * 128, length: 128 }],
      remote: { stag: ma.stag, offset: i * 128 },
    });
  assert.equal(
    await waitCompletions(A.scq, 12),
    Array.from({ length: 12 }, (_, i) => wc(i, A.qp.qpn, 'success', 'read', 128)),
  );
  assert.equal(
    await waitCompletions(B.scq, 6),
    Array.from({ length: 6 }, (_, i) => wc(i, B.qp.qpn, 'success', 'read', 128)),
  );
  assert.equal(ma.memory.subarray(2048, 2048 + 12 * 128), mb.memory.subarray(0, 12 * 128));
  assert.equal(mb.memory.subarray(2048, 2048 + 6 * 128), ma.memory.subarray(0, 6 * 128));
  assert.is(A.qp.stateName, 'rts');
  assert.is(B.qp.stateName, 'rts');
  await finish(p);
});

test('a REQ asking for IRD/ORD over 128 is rejected without calling accept', async () => {
  const { p } = pair();
  const L = listenB(p.b);
  const A = makeEnds(p.a);
  p.a.rdma.modifyQp(A.qp, { state: 'init' });
  // From A's QP port (not connecting): the REJECT comes back there and is unexpected.
  assert.ok(p.a.rdma.net.udp.sendTo(cmMessage(REQ, 129, 4, new Uint8Array(0)), IP_B, LISTEN, A.qp.qpn));
  await waitFor('the REJECT', () => p.a.graph.errorCount('cm-input', 'unexpected') === 1);
  assert.is(L.reqs.length, 0);
  assert.is(p.b.rdma.qpsByQpn.size, 0);
  assert.is(A.qp.stateName, 'init', 'a REJECT for a QP that is not connecting changes nothing');
  await finish(p);
});

test('REJECT: connect rejects with the private data; the QP goes to ERROR; a throwing accept rejects too', async () => {
  const { p, evA } = pair();
  const seen: ConnectRequest[] = [];
  p.b.rdma.listen(LISTEN, (req) => {
    seen.push(req);
    return { reject: true, privateData: text('go away') };
  });
  const A = makeEnds(p.a);
  const m = p.a.rdma.regMr(A.pd, 64, RW);
  p.a.rdma.modifyQp(A.qp, { state: 'init' });
  p.a.rdma.postRecv(A.qp, { wrId: 'r', sg: [{ mr: m, offset: 0, length: 64 }] });
  let err: (Error & { privateData?: Uint8Array }) | null = null;
  try {
    await p.a.rdma.connect(A.qp, IP_B, LISTEN, { privateData: text('please') });
  } catch (e) {
    err = e as Error & { privateData?: Uint8Array };
  }
  assert.ok(err, 'connect rejected');
  assert.instance(err, CmConnectError);
  assert.is((err as CmConnectError).code, 'rejected', 'a code to branch on, not the message');
  assert.is(err.message, `connection rejected by ${IP_B}:${LISTEN}`);
  assert.is(str(err.privateData as Uint8Array), 'go away');
  assert.is(str(seen[0].privateData), 'please');
  assert.is(A.qp.stateName, 'error');
  assert.equal(A.rcq.poll(5), [wc('r', A.qp.qpn, 'flushed', 'recv')]);
  const why = `connection rejected by ${IP_B}:${LISTEN}`;
  assert.equal(evA, [
    { type: 'qp-error', qpn: A.qp.qpn, reason: why },
    { type: 'connect-failed', qpn: A.qp.qpn, reason: why },
  ]);
  assert.is(p.b.rdma.qpsByQpn.size, 0, 'no QP on the passive side');
  // A throwing accept callback is a REJECT (no private data).
  p.b.rdma.unlisten(LISTEN);
  p.b.rdma.listen(LISTEN, () => {
    throw new Error('accept blew up');
  });
  const A2 = makeEnds(p.a);
  const e2 = await p.a.rdma.connect(A2.qp, IP_B, LISTEN).then(
    () => null,
    (e: Error & { privateData?: Uint8Array }) => e,
  );
  assert.ok(e2);
  assert.match(e2.message, /connection rejected/);
  assert.equal(e2.privateData, new Uint8Array(0));
  assert.is(A2.qp.stateName, 'error');
  await finish(p);
});

test('connect to a port with no listener: REJECTED at once (reason "no listener"), QP in ERROR', async () => {
  const { p, evA } = pair();
  const A = makeEnds(p.a);
  const t0 = performance.now();
  const e = await p.a.rdma.connect(A.qp, IP_B, 7001, { timeoutMs: 5000, retryMs: 1000 }).then(
    () => null,
    (x: Error) => x,
  );
  const ms = performance.now() - t0;
  assert.ok(e);
  assert.is((e as CmConnectError).code, 'rejected');
  assert.is((e as CmConnectError).rejectReason, CmRejectReason.NO_LISTENER);
  assert.is(e.message, `connection rejected by ${IP_B}:7001: no listener on the port`);
  assert.ok(ms < 900, `answered by the first REQ's REJECT, not a resend or the timeout (${ms.toFixed(1)} ms)`);
  assert.is(A.qp.stateName, 'error');
  assert.equal(evA, [
    { type: 'qp-error', qpn: A.qp.qpn, reason: e.message },
    { type: 'connect-failed', qpn: A.qp.qpn, reason: e.message },
  ]);
  // B counted the datagram at UDP (no listener) and the request at the CM (REJECT sent).
  assert.is(p.b.graph.errorCount('udp4-input', 'no_listener'), 1);
  assert.is(p.b.graph.errorCount('cm-input', 'no_listener'), 1);
  // Other datagrams to a closed port are dropped as before: counted once, never answered.
  const sentByB = () => p.b.graph.errorCount('cm-input', 'no_listener');
  p.a.rdma.net.udp.sendTo(new Uint8Array(40), IP_B, 7002, 5555); // not a CM message
  p.a.rdma.net.udp.sendTo(cmMessage(ACCEPT, 4, 4, new Uint8Array(0)), IP_B, 7002, 5555);
  await waitFor('two more at B', () => p.b.graph.errorCount('udp4-input', 'no_listener') === 3);
  assert.is(sentByB(), 1, 'no REJECT for what is not a REQ');
  assert.is(p.b.graph.errorCount('cm-input', 'malformed'), 0);
  await finish(p);
});

test('connect timeout when nothing answers: rejects after timeoutMs, REQ resent every retryMs, QP in ERROR', async () => {
  const { p, evA } = pair();
  // B answers each REQ with REJECT (nobody listens on 7001); A hears nothing back.
  p.a.ifs.setFault(p.a.ifName, 'rx', { seed: 1, loss: 1 });
  const A = makeEnds(p.a);
  const t0 = performance.now();
  const e = await p.a.rdma.connect(A.qp, IP_B, 7001, { timeoutMs: 60, retryMs: 10 }).then(
    () => null,
    (x: Error) => x,
  );
  const ms = performance.now() - t0;
  assert.ok(e);
  assert.is((e as CmConnectError).code, 'timeout');
  assert.is(e.message, `connect to ${IP_B}:7001 timed out after 60 ms`);
  assert.ok(ms >= 55 && ms < 1000, `gave up after ${ms.toFixed(1)} ms`);
  assert.is(A.qp.stateName, 'error');
  assert.equal(evA, [
    { type: 'qp-error', qpn: A.qp.qpn, reason: e.message },
    { type: 'connect-failed', qpn: A.qp.qpn, reason: e.message },
  ]);
  // The REQs reach B and are rejected there: resent, not sent once.
  const atB = () => p.b.graph.errorCount('cm-input', 'no_listener');
  await waitFor('REQs at B', () => atB() >= 2);
  await settle(30);
  const dropped = atB();
  assert.ok(dropped <= 7, `${dropped} REQs in 60 ms, one every 10 ms`);
  await settle(30);
  assert.is(atB(), dropped, 'no REQ after giving up');
  p.a.ifs.setFault(p.a.ifName, 'rx', null);
  await finish(p);
});

test('REQ retransmission through loss: connect succeeds, repeated REQs make exactly one QP', async () => {
  const { p } = pair();
  // Half of what A sends and receives is lost: REQs, and the ACCEPTs coming back.
  p.a.ifs.setFault(p.a.ifName, 'both', { seed: 6, loss: 0.5 });
  const L = listenB(p.b);
  const A = makeEnds(p.a);
  const res = await p.a.rdma.connect(A.qp, IP_B, LISTEN, { privateData: text('lossy'), retryMs: 5, timeoutMs: 2000 });
  assert.is(str(res.privateData), 'welcome');
  // Seed 6 drops REQs on the way out and the first ACCEPTs on the way back: B must have
  // answered several REQs from the same peer.
  const f = p.a.ifs.faultCounters(p.a.ifName);
  assert.ok((f.tx?.dropped ?? 0) > 0, 'REQs were lost');
  assert.ok((f.rx?.dropped ?? 0) > 0, 'ACCEPTs were lost');
  const reqs = p.b.graph.errorCount('cm-input', 'requests');
  assert.ok(reqs >= 2, `B saw the REQ ${reqs} times`);
  assert.is(L.reqs.length, 1, 'accept called once');
  assert.is(p.b.rdma.qpsByQpn.size, 1, 'one QP on the passive side');
  assert.is(p.b.rdma.cm.accepted.size, 1);
  const B = L.ends[0];
  assert.is(A.qp.stateName, 'rts');
  assert.equal(p.a.rdma.queryQp(A.qp).remote, { address: IP_B, port: B.qp.qpn });
  // Let late REQ/ACCEPT copies drain, then traffic flows on the one connection.
  p.a.ifs.setFault(p.a.ifName, 'both', null);
  await settle(20);
  const ma = p.a.rdma.regMr(A.pd, 64, RW);
  ma.memory.set(pattern(64, 9));
  p.a.rdma.postSend(A.qp, { wrId: 's', opcode: 'send', sg: [{ mr: ma, offset: 0, length: 64 }] });
  assert.equal(await waitCompletions(A.scq, 1), [wc('s', A.qp.qpn, 'success', 'send', 64)]);
  assert.equal(await waitCompletions(B.rcq, 1), [wc('b0', B.qp.qpn, 'success', 'recv', 64)]);
  assert.is(p.b.rdma.qpsByQpn.size, 1);
  await finish(p);
});

test('a repeated REQ after its listener closed is the same request: answered as before, not REJECTed; another REQ is', async () => {
  // perftest's servers accept one connection and close their listener at once: a requester whose
  // ACCEPT was late (its REQ went again) was told "no listener" and gave up (a loaded CI run).
  const { p } = pair();
  const L = listenB(p.b);
  const from = 5555,
    isn = 0x1234;
  const req = cmMessage(REQ, 4, 4, text('first'), 5, isn);
  p.a.rdma.net.udp.sendTo(req, IP_B, LISTEN, from);
  await waitFor('accepted', () => L.reqs.length === 1);
  const B = L.ends[0];
  p.b.rdma.unlisten(LISTEN);
  const noListener = () => p.b.graph.errorCount('cm-input', 'no_listener');
  const accepts = () => p.b.graph.errorCount('cm-input', 'requests');
  const before = accepts();
  // The same REQ again, too soon for a second ACCEPT (REACCEPT_NS, 20 ms), then after it. Too
  // soon by B's clock whatever the machine's speed (a loaded one can take 20 ms between the
  // ACCEPT and the repeat): its ACCEPT dated in the future until the repeat is counted.
  const acceptedAt = B.qp.cmAcceptNs;
  B.qp.cmAcceptNs = p.b.graph.clock.nowNs() + 60e9;
  p.a.rdma.net.udp.sendTo(req, IP_B, LISTEN, from);
  await waitFor('counted as repeated', () => p.b.graph.errorCount('cm-input', 'repeated') === 1);
  B.qp.cmAcceptNs = acceptedAt;
  await settle(30);
  p.a.rdma.net.udp.sendTo(req, IP_B, LISTEN, from);
  await waitFor('seen', () => accepts() === before + 2);
  await settle(5);
  assert.is(noListener(), 0, 'neither repeat was REJECTed as a REQ to a closed port');
  assert.is(B.qp.cmAccepts, 2, 'the ACCEPT went again once, as while the listener was there');
  assert.is(L.reqs.length, 1, 'and accept was not called again');
  // Another requester: a REQ to a closed port (dropped within a second of the close, as the next
  // test shows; REJECTed after it).
  const relisten = () => p.b.graph.errorCount('cm-input', 'relisten');
  p.a.rdma.net.udp.sendTo(cmMessage(REQ, 4, 4, new Uint8Array(0)), IP_B, LISTEN, 5556);
  await waitFor('dropped', () => relisten() === 1);
  await settle(1050);
  p.a.rdma.net.udp.sendTo(cmMessage(REQ, 4, 4, new Uint8Array(0)), IP_B, LISTEN, 5556);
  await waitFor('REJECT', () => noListener() === 1);
  // B's QP destroyed: its requester's REQ is a REQ to a closed port too, and the map is empty.
  p.b.rdma.destroyQp(B.qp);
  assert.is(p.b.rdma.cm.accepted.size, 0, 'the accepted QP is forgotten with it');
  p.a.rdma.net.udp.sendTo(req, IP_B, LISTEN, from);
  await waitFor('REJECT', () => noListener() === 2);
  await finish(p);
});

test('a listener closed and opened again on its port: a REQ in between waits (dropped, resent), not REJECTed', async () => {
  // perftest's -R servers close their listener after the handshake's connection and listen
  // again for the test's; the client's second REQ could land in between (a loaded CI run).
  const { p } = pair();
  const L = listenB(p.b);
  p.b.rdma.unlisten(LISTEN);
  const A = makeEnds(p.a);
  const connected = p.a.rdma.connect(A.qp, IP_B, LISTEN, { privateData: text('again'), retryMs: 20, timeoutMs: 3000 });
  await waitFor('a REQ dropped', () => p.b.graph.errorCount('cm-input', 'relisten') >= 1);
  assert.is(p.b.graph.errorCount('cm-input', 'no_listener'), 0, 'not REJECTed');
  // Listening again (a new listener, as the program's second rdma_listen).
  const L2 = listenB(p.b);
  const res = await connected;
  assert.is(str(res.privateData), 'welcome');
  assert.is(L.reqs.length, 0);
  assert.is(L2.reqs.length, 1, 'the new listener took the resent REQ');
  assert.is(A.qp.stateName, 'rts');
  assert.is(p.b.rdma.cm.closedAt.has(LISTEN), false, 'listening again forgets the close');
  await finish(p);
});

test('hostile: the closed ports a CM remembers are bounded (1024, the oldest forgotten), whatever a program opens and closes', async () => {
  const { p } = pair();
  for (let port = 30000; port < 31100; port++) {
    p.b.rdma.listen(port, () => ({ reject: true }));
    p.b.rdma.unlisten(port);
  }
  const closed = p.b.rdma.cm.closedAt;
  assert.is(closed.size, 1024);
  assert.not.ok(closed.has(30000), 'the oldest went first');
  assert.ok(closed.has(31099));
  // A REQ to a port closed long enough ago that it was forgotten: REJECTed at once.
  p.a.rdma.net.udp.sendTo(cmMessage(REQ, 4, 4, new Uint8Array(0)), IP_B, 30000, 5557);
  await waitFor('REJECT', () => p.b.graph.errorCount('cm-input', 'no_listener') === 1);
  assert.is(p.b.graph.errorCount('cm-input', 'relisten'), 0);
  await finish(p);
});

test('malformed CM messages are counted and dropped; nothing is created or answered', async () => {
  const { p } = pair();
  const L = listenB(p.b);
  const send = (m: Uint8Array, port = LISTEN) => assert.ok(p.a.rdma.net.udp.sendTo(m, IP_B, port, 5555));
  const good = cmMessage(REQ, 4, 4, text('abcd'));
  send(good.subarray(0, 4)); // shorter than the TRP header
  send(good.subarray(0, 12)); // shorter than the CM parameters
  send(cmMessage(REQ, 4, 4, text('abcd'), 10)); // private-data length 10, 4 bytes follow
  send(cmMessage(REQ, 4, 4, text('abcd'), 3)); // length 3, 4 bytes follow
  send(cmMessage(REQ, 4, 4, new Uint8Array(513))); // more than 512 bytes of private data
  send(new Uint8Array(0)); // empty datagram
  send(cmMessage(0, 4, 4, text('abcd'))); // DATA to a listener
  send(cmMessage(4, 4, 4, text('abcd'))); // FIN to a listener
  send(cmMessage(15, 4, 4, text('abcd'))); // no such TRP opcode
  await waitFor('nine malformed', () => p.b.graph.errorCount('cm-input', 'malformed') === 9);
  assert.is(L.reqs.length, 0);
  assert.is(p.b.rdma.qpsByQpn.size, 0);
  assert.is(p.b.graph.errorsThrown, 0, 'no node threw');
  assert.is(p.b.graph.errorCount('cm-input', 'requests'), 0);
  // A well-formed REQ still works after all that (the reply goes to port 5555: nobody there).
  send(good);
  await waitFor('the REQ', () => L.reqs.length === 1);
  assert.is(p.b.graph.errorCount('cm-input', 'malformed'), 9);
  await finish(p);
});

test('unexpected CM messages: ACCEPT/REJECT to a listener or a QP not connecting, REQ to a QP port', async () => {
  const { p, evB } = pair();
  const L = listenB(p.b);
  // B has a connect pending (to a listener that holds requests unanswered): a stray ACCEPT must
  // not complete it.
  p.a.rdma.listen(7009, () => ({ defer: true }));
  const Bc = makeEnds(p.b);
  let settled = false;
  const pending = p.b.rdma.connect(Bc.qp, IP_A, 7009, { timeoutMs: 10_000, retryMs: 1000 }).then(
    () => {
      settled = true;
    },
    (e: Error) => {
      settled = true;
      return e;
    },
  );
  const Bq = makeEnds(p.b);
  p.b.rdma.modifyQp(Bq.qp, { state: 'init' });
  const from = 5555;
  p.a.rdma.net.udp.sendTo(cmMessage(ACCEPT, 4, 4, new Uint8Array(0)), IP_B, LISTEN, from); // ACCEPT to the listener
  p.a.rdma.net.udp.sendTo(cmMessage(REJECT, 0, 0, new Uint8Array(0)), IP_B, LISTEN, from); // REJECT to the listener
  p.a.rdma.net.udp.sendTo(cmMessage(ACCEPT, 4, 4, new Uint8Array(0)), IP_B, Bq.qp.qpn, from); // to a QP not connecting
  // An ACCEPT for the pending connect, but from a host it did not send its REQ to.
  p.a.rdma.net.udp.sendTo(cmMessage(ACCEPT, 4, 4, new Uint8Array(0)), IP_B, Bc.qp.qpn, 7009, '10.0.0.77');
  await waitFor('four unexpected', () => p.b.graph.errorCount('cm-input', 'unexpected') === 4);
  assert.not.ok(settled, 'the pending connect is untouched');
  assert.is(Bc.qp.stateName, 'init');
  assert.is(Bq.qp.stateName, 'init');
  // A REQ to a QP's port: no listener there.
  p.a.rdma.net.udp.sendTo(cmMessage(REQ, 4, 4, new Uint8Array(0)), IP_B, Bq.qp.qpn, from);
  await waitFor('no_listener', () => p.b.graph.errorCount('cm-input', 'no_listener') === 1);
  assert.is(L.reqs.length, 0);
  assert.equal(evB, []);
  // Destroying the connecting QP rejects its connect.
  p.b.rdma.destroyQp(Bc.qp);
  const e = await pending;
  assert.instance(e, Error);
  assert.is((e as Error).message, `qp ${Bc.qp.qpn} destroyed`);
  await finish(p);
});

test('connect API: twice, on a connected QP, disconnect while connecting; listen/unlisten errors', async () => {
  const { p } = pair();
  const ra = p.a.rdma;
  const A = makeEnds(p.a);
  const first = ra.connect(A.qp, IP_B, 7002, { timeoutMs: 10_000 }).then(
    () => null,
    (e: Error) => e,
  );
  assert.is(A.qp.stateName, 'init', 'connect moves a RESET QP to INIT');
  try {
    void ra.connect(A.qp, IP_B, 7002);
    assert.unreachable('second connect');
  } catch (e) {
    assert.instance(e, VerbsError);
    assert.is((e as VerbsError).kind, 'state');
    assert.is((e as VerbsError).message, `qp ${A.qp.qpn} is already connecting`);
  }
  ra.disconnect(A.qp);
  assert.is((await first)?.message, `qp ${A.qp.qpn} disconnected`);
  assert.is(A.qp.stateName, 'error');
  try {
    void ra.connect(A.qp, IP_B, 7002);
    assert.unreachable('connect in ERROR');
  } catch (e) {
    assert.is((e as VerbsError).kind, 'state');
    assert.is((e as VerbsError).message, `qp ${A.qp.qpn}: connect needs a QP in INIT, it is error`);
  }
  // Unlisten: the port is closed again (a REQ there is counted by UDP and rejected).
  const L = listenB(p.b);
  p.b.rdma.unlisten(LISTEN);
  const A2 = makeEnds(p.a);
  const e2 = await ra.connect(A2.qp, IP_B, LISTEN, { timeoutMs: 3000, retryMs: 1000 }).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(e2?.message ?? '', /connection rejected by .*: no listener on the port$/);
  assert.is(L.reqs.length, 0);
  assert.ok(p.b.graph.errorCount('udp4-input', 'no_listener') >= 1);
  await finish(p);
});

test.run();
