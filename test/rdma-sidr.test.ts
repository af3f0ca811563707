/**
 * The datagram service's connection manager (nodes/rdma/sidr.ts, PROTOCOL.md section 6.1) between
 * two stacks: a UD QP asks a listening port which QP and Q_Key serve it (SIDR_REQ) and gets them
 * with private data both ways (SIDR_REP), then reaches that QP with a datagram; a request to a port
 * nobody listens on, to an RC listener, refused by the program, beyond the backlog, unanswered
 * (resent, then a timeout); an RC REQ to a datagram listener; the hostile cases, each dropped and
 * counted: answers nobody asked for, from another host, not echoing the request id, malformed,
 * SIDR messages to QPs that do not take them; a repeated request answered again at most as often
 * as allowed; what a listener remembers bounded by its backlog. Every test ends with every
 * buffer back in the pool.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { CmConnectError } from '../nodes/rdma/cm.ts';
import { parseIp4 } from '../nodes/net/address.ts';
import type { Qp } from '../nodes/rdma/qp.ts';
import {
  type SidrAnswer,
  sidrAnswer,
  sidrConnect,
  sidrKey,
  type SidrRequest,
  sidrRequestMessage,
} from '../nodes/rdma/sidr.ts';
import { SidrStatus } from '../nodes/rdma/wire.ts';
import {
  closeLeftovers,
  udEnd,
  cmMessage,
  finish,
  IP_A,
  IP_B,
  makeEnds,
  settle,
  type Stack,
  trackedStacks,
  waitCompletions,
  waitFor,
} from './rdma-helpers.ts';

test.after.each(closeLeftovers);

const PORT = 7174;
const QKEY_B = 0x01234567;
const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);
const errs = (s: Stack, name: string) => s.graph.errorCount('cm-input', name);

/** `qp` of stack `s` asks `ip`:`port`; the answer (or the CmConnectError). */
function ask(
  s: Stack,
  qp: Qp,
  ip: string,
  port: number,
  pd = new Uint8Array(0),
  reqId = 0x5eed0001,
  timeoutMs = 3000,
  retryMs = 200,
): Promise<SidrAnswer | CmConnectError> {
  return new Promise((done) =>
    sidrConnect(s.rdma.cm, {
      qp,
      reqId,
      dst: parseIp4(ip),
      dstPort: port,
      startNs: s.graph.clock.nowNs(),
      timeoutNs: timeoutMs * 1e6,
      retryNs: retryMs * 1e6,
      msg: sidrRequestMessage(reqId, pd),
      done,
    }),
  );
}

/** B listens for datagram service requests on PORT; `decide` says whether each is held. */
function listenB(s: Stack, decide: (r: SidrRequest) => boolean = () => true, backlog = 8) {
  const reqs: SidrRequest[] = [];
  s.rdma.listen(PORT, () => ({ reject: true }), {
    backlog,
    sidr: (r) => {
      reqs.push(r);
      return decide(r);
    },
  });
  return { reqs, listener: () => s.rdma.cm.listeners.get(PORT)! };
}

const SIDR_REQ = 9,
  SIDR_REP = 10;

test('SIDR: a UD QP learns the serving QP and Q_Key with private data both ways, then reaches it', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a, 0x0a0a0a0a),
    b = udEnd(p.b, QKEY_B);
  const L = listenB(p.b);
  const answer = ask(p.a, a.qp, IP_B, PORT, text('who serves 7174?'));
  await waitFor('the request held', () => L.reqs.length === 1);
  const r = L.reqs[0];
  assert.equal(
    [r.src, r.srcPort, r.listenPort, str(r.privateData)],
    [parseIp4(IP_A), a.qp.qpn, PORT, 'who serves 7174?'],
  );
  sidrAnswer(p.b.rdma.cm, L.listener(), sidrKey(r.src, r.srcPort), SidrStatus.SUCCESS, b.qp.qpn, QKEY_B, text('qp b'));
  const got = await answer;
  assert.not.instance(got, CmConnectError);
  const ok = got as SidrAnswer;
  assert.equal([ok.status, ok.qpn, ok.qkey, str(ok.privateData)], [SidrStatus.SUCCESS, b.qp.qpn, QKEY_B, 'qp b']);
  assert.is(p.a.rdma.cm.sidrPending.size, 0);
  assert.is(L.listener().sidr!.held.size, 0);
  // What it learned reaches B's QP.
  a.mr.memory.set(text('hello'), 0);
  p.b.rdma.postRecv(b.qp, { wrId: 1, sg: [{ mr: b.mr, offset: 0, length: 1024 }] });
  p.a.rdma.postSend(a.qp, {
    wrId: 2,
    opcode: 'send',
    sg: [{ mr: a.mr, offset: 0, length: 5 }],
    ud: { address: IP_B, qpn: ok.qpn, qkey: ok.qkey },
  });
  const [wc] = await waitCompletions(b.cq, 1);
  assert.equal([wc.status, wc.byteLen, wc.srcQp], ['success', 45, a.qp.qpn]);
  assert.is(str(b.mr.memory.subarray(40, 45)), 'hello');
  await waitCompletions(a.cq, 1);
  assert.is(p.b.graph.errorsThrown + p.a.graph.errorsThrown, 0);
  await finish(p);
});

test('SIDR: no listener, an RC listener, refused, beyond the backlog: each answered with its status', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a, 1);
  // Nobody on the port.
  const none = (await ask(p.a, a.qp, IP_B, PORT)) as SidrAnswer;
  assert.equal([none.status, none.qpn], [SidrStatus.NO_LISTENER, 0]);
  assert.is(errs(p.b, 'no_listener'), 1);
  // An RC listener takes no datagram request.
  let rcCalled = 0;
  p.b.rdma.listen(PORT + 1, () => {
    rcCalled++;
    return { reject: true };
  });
  const rc = (await ask(p.a, a.qp, IP_B, PORT + 1)) as SidrAnswer;
  assert.is(rc.status, SidrStatus.NO_LISTENER);
  assert.is(rcCalled, 0);
  // The program refuses it.
  const L = listenB(p.b, () => false, 2);
  const refused = (await ask(p.a, a.qp, IP_B, PORT, new Uint8Array(0), 7)) as SidrAnswer;
  assert.equal([refused.status, refused.qpn, L.reqs.length], [SidrStatus.REJECTED, 0, 1]);
  // Beyond the backlog (2 held): REJECTED without asking the program.
  p.b.rdma.unlisten(PORT);
  const H = listenB(p.b, () => true, 2);
  const held = [udEnd(p.a, 1), udEnd(p.a, 1)].map((e, i) => ask(p.a, e.qp, IP_B, PORT, new Uint8Array(0), 100 + i));
  await waitFor('two held', () => H.reqs.length === 2);
  const over = (await ask(p.a, a.qp, IP_B, PORT, new Uint8Array(0), 9)) as SidrAnswer;
  assert.is(over.status, SidrStatus.REJECTED);
  assert.is(H.reqs.length, 2, 'the third was not shown to the program');
  assert.is(errs(p.b, 'backlog_full'), 1);
  // Closing the listener's port answers nothing more; the held requesters time out or are answered.
  for (const k of [...H.listener().sidr!.held.keys()])
    sidrAnswer(p.b.rdma.cm, H.listener(), k, SidrStatus.REJECTED, 0, 0, new Uint8Array(0));
  for (const r of (await Promise.all(held)) as SidrAnswer[]) assert.is(r.status, SidrStatus.REJECTED);
  await finish(p);
});

test('SIDR: an RC REQ to a datagram listener is rejected as to a closed port', async () => {
  const p = trackedStacks();
  await p.ready;
  const L = listenB(p.b);
  const A = makeEnds(p.a);
  const e = await p.a.rdma.connect(A.qp, IP_B, PORT, { timeoutMs: 2000, retryMs: 200 }).catch((x: Error) => x);
  assert.instance(e, CmConnectError);
  assert.is((e as CmConnectError).code, 'rejected');
  assert.is(L.reqs.length, 0);
  await finish(p);
});

test('SIDR: unanswered requests are resent every retry and time out; a repeat while held is not shown again', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a, 1);
  const L = listenB(p.b);
  const t0 = Date.now();
  const r = await ask(p.a, a.qp, IP_B, PORT, new Uint8Array(0), 42, 600, 100);
  assert.instance(r, CmConnectError);
  assert.is((r as CmConnectError).code, 'timeout');
  assert.ok(Date.now() - t0 >= 550, 'not before the timeout');
  assert.is(L.reqs.length, 1, 'one request shown to the program');
  assert.ok(errs(p.b, 'repeated') >= 3, `resent: ${errs(p.b, 'repeated')} repeats`);
  assert.is(p.a.rdma.cm.sidrPending.size, 0);
  await finish(p);
});

test('SIDR hostile: stray, spoofed, stale and malformed messages are dropped and counted; nothing is answered twice too often', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a, 1);
  const b = udEnd(p.b, QKEY_B);
  const L = listenB(p.b);
  const send = (m: Uint8Array, to: Stack, ip: string, port: number, from: number, srcIp?: string) =>
    assert.ok(
      to === p.b
        ? p.a.rdma.net.udp.sendTo(m, ip, port, from, srcIp)
        : p.b.rdma.net.udp.sendTo(m, ip, port, from, srcIp),
    );
  // A SIDR_REP nobody asked for, to A's UD QP.
  send(cmMessage(SIDR_REP, 0, 99, new Uint8Array(0), undefined, 5, 1), p.a, IP_A, a.qp.qpn, PORT);
  await waitFor('unexpected', () => errs(p.a, 'unexpected') === 1);
  // A request under way: answers from another host, another port, with another id.
  const pending = ask(p.a, a.qp, IP_B, PORT, new Uint8Array(0), 0xabcdef, 5000, 5000);
  await waitFor('held', () => L.reqs.length === 1);
  send(
    cmMessage(SIDR_REP, 0, 99, new Uint8Array(0), undefined, QKEY_B, 0xabcdef),
    p.a,
    IP_A,
    a.qp.qpn,
    PORT,
    '10.0.0.77',
  );
  send(cmMessage(SIDR_REP, 0, 99, new Uint8Array(0), undefined, QKEY_B, 0xabcdef), p.a, IP_A, a.qp.qpn, PORT + 5);
  send(cmMessage(SIDR_REP, 0, 99, new Uint8Array(0), undefined, QKEY_B, 0xabcdee), p.a, IP_A, a.qp.qpn, PORT);
  await waitFor(
    'two unexpected more and a wrong id',
    () => errs(p.a, 'unexpected') === 3 && errs(p.a, 'wrong_id') === 1,
  );
  // Malformed: private-data length that lies, too long, shorter than the CM header.
  send(cmMessage(SIDR_REP, 0, 99, new Uint8Array(4), 9, 0, 0xabcdef), p.a, IP_A, a.qp.qpn, PORT);
  send(cmMessage(SIDR_REQ, 0, 0, new Uint8Array(513), undefined, 1, 0), p.b, IP_B, PORT, 5555);
  send(cmMessage(SIDR_REQ, 0, 0, new Uint8Array(0), undefined, 1, 0).subarray(0, 12), p.b, IP_B, PORT, 5555);
  await waitFor('malformed', () => errs(p.a, 'malformed') === 1 && errs(p.b, 'malformed') === 2);
  assert.is(p.a.rdma.cm.sidrPending.size, 1, 'the request is still under way');
  // SIDR messages where they do not belong: a SIDR_REQ to a UD QP's port, a SIDR_REP to an RC QP.
  const rc = makeEnds(p.b);
  p.b.rdma.modifyQp(rc.qp, { state: 'init' });
  const badOp = () => p.b.graph.errorCount('trp-input', 'bad_opcode') + p.b.graph.errorCount('trp-input', 'wrong_peer');
  send(cmMessage(SIDR_REQ, 0, 0, new Uint8Array(0), undefined, 1, 0), p.b, IP_B, b.qp.qpn, 5555);
  send(cmMessage(SIDR_REP, 0, 0, new Uint8Array(0), undefined, 1, 0), p.b, IP_B, rc.qp.qpn, 5555);
  await waitFor('trp-input drops both', () => badOp() === 2);
  assert.is(L.reqs.length, 1);
  // The real answer, then the same request again: answered again, not more often than allowed.
  const r = L.reqs[0];
  sidrAnswer(
    p.b.rdma.cm,
    L.listener(),
    sidrKey(r.src, r.srcPort),
    SidrStatus.SUCCESS,
    b.qp.qpn,
    QKEY_B,
    new Uint8Array(0),
  );
  const got = (await pending) as SidrAnswer;
  assert.equal([got.status, got.qpn], [SidrStatus.SUCCESS, b.qp.qpn]);
  const repeats = errs(p.b, 'repeated');
  const req = cmMessage(SIDR_REQ, 0, 0, new Uint8Array(0), undefined, 0xabcdef, 0);
  for (let i = 0; i < 50; i++) send(req, p.b, IP_B, PORT, a.qp.qpn);
  // At most one of the fifty (more than 20 ms after the answer) gets it again; the rest are counted.
  await waitFor('fifty repeats seen', () => errs(p.b, 'repeated') >= repeats + 49);
  assert.is(L.reqs.length, 1, 'none of them is a new request');
  // The answered requests a listener remembers stay within its backlog, whatever the senders do.
  const l = L.listener();
  for (let port = 20000; port < 20040; port++) {
    send(cmMessage(SIDR_REQ, 0, 0, new Uint8Array(0), undefined, port, 0), p.b, IP_B, PORT, port);
    await waitFor(`request from ${port}`, () => l.sidr!.held.size === 1);
    for (const k of [...l.sidr!.held.keys()])
      sidrAnswer(p.b.rdma.cm, l, k, SidrStatus.REJECTED, 0, 0, new Uint8Array(0));
    assert.ok(l.sidr!.answered.size <= l.backlog, `answered ${l.sidr!.answered.size}`);
  }
  assert.is(l.sidr!.answered.size, l.backlog);
  assert.is(p.a.graph.errorsThrown + p.b.graph.errorsThrown, 0, 'no node threw');
  await settle(20);
  await finish(p);
});

test.run();
