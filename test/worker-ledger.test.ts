/**
 * dataplane/workers/ledger.ts on its own: which requests a dead worker's QPs flush (in-order
 * retirement of sends, signaled or not; receives by name; at most a queue's depth remembered),
 * what dead objects answer, and forgetting them.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { WorkerLedger } from '../dataplane/workers/ledger.ts';
import type { CqView, QpView } from '../dataplane/views.ts';

const cq = (h: number): CqView => ({ cq: h, depth: 64, pending: 0, error: false, users: 1 });
const qp = (qpn: number, over: Partial<QpView> = {}): QpView =>
  ({
    qpn,
    state: 'rts',
    sendCq: 10,
    recvCq: 11,
    maxSendWr: 4,
    maxRecvWr: 3,
    sqOutstanding: 0,
    rqPosted: 0,
    ...over,
  }) as QpView;

test('sends retire in order (unsignaled ones with the next completion), receives by name; the rest is flushed', () => {
  const l = new WorkerLedger();
  l.cqCreated(cq(10), 1);
  l.cqCreated(cq(11), 1);
  l.qpCreated(qp(25000), 1);
  l.posted(25000, { wrId: 'u1', opcode: 'write' }, true);
  l.posted(25000, { wrId: 's1', opcode: 'send' }, true);
  l.posted(25000, { wrId: 'r1', opcode: 'read' }, true);
  l.posted(25000, { wrId: 'a' }, false);
  l.posted(25000, { wrId: 'b' }, false);
  l.polled([
    { wrId: 's1', qpn: 25000, status: 'success', opcode: 'send', byteLen: 1 },
    { wrId: 'b', qpn: 25000, status: 'success', opcode: 'recv', byteLen: 1 },
  ]);
  const r = l.stopped(1, 'Error: boom\n    at stack');
  assert.equal(r.qps, [25000]);
  assert.is(r.flushed, 2);
  assert.equal(
    l.pollDead(10)?.completions.map((c) => [c.wrId, c.opcode, c.status]),
    [['r1', 'read', 'flushed']],
  );
  assert.equal(
    l.pollDead(11)?.completions.map((c) => [c.wrId, c.opcode]),
    [['a', 'recv']],
  );
  assert.equal(l.pollDead(11), { completions: [], error: 'worker 1 stopped (Error: boom): its QPs are in error' });
  assert.is(l.deadQp(25000)?.state, 'error');
  assert.is(r.events[0].type, 'qp-error');
});

test("at most a queue's depth is remembered: a QP posting only unsignaled requests does not grow it", () => {
  const l = new WorkerLedger();
  l.cqCreated(cq(10), 0);
  l.cqCreated(cq(11), 0);
  l.qpCreated(qp(20000), 0);
  for (let i = 0; i < 1000; i++) l.posted(20000, { wrId: i, opcode: 'write' }, true);
  for (let i = 0; i < 1000; i++) l.posted(20000, { wrId: i }, false);
  const r = l.stopped(0, 'exited');
  assert.is(r.flushed, 4 + 3, 'maxSendWr + maxRecvWr');
  assert.equal(
    l.pollDead(10, 100)?.completions.map((c) => c.wrId),
    [996, 997, 998, 999],
  );
});

test('dead objects refuse calls naming the worker; other workers are untouched; destroying forgets', () => {
  const l = new WorkerLedger();
  l.created('memory region', 5, 1);
  l.created('memory region', 6, 0);
  l.cqCreated(cq(10), 1);
  l.qpCreated(qp(25001), 1);
  l.qpCreated(qp(20001, { sendCq: 12, recvCq: 12 }), 0);
  l.stopped(1, 'exited with code 1');
  assert.throws(
    () => l.refuseDead(5),
    /memory region 5 was on worker 1 stopped \(exited with code 1\); it is in error/,
  );
  assert.throws(() => l.refuseDead(25001, true), /QP 25001 was on worker 1 stopped/);
  assert.throws(() => l.refuseDead(10), /completion queue 10 was on worker 1/);
  l.refuseDead(6);
  l.refuseDead(20001, true);
  assert.is(l.deadQp(20001), undefined);
  assert.is(l.forget(25001, true), true);
  assert.is(l.forget(5), true);
  assert.is(l.forget(5), false);
  l.refuseDead(5);
  assert.equal(
    l.deadCqViews().map((v) => [v.cq, v.error]),
    [[10, true]],
  );
});

test.run();
