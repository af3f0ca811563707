/**
 * UD multicast between two stacks (PROTOCOL.md section 9.1, nodes/rdma/multicast.ts): a datagram
 * to a group reaches every QP attached to it (each its own copy, the GRH naming the group), a
 * member with another Q_Key drops it and counts it, a detached or destroyed QP gets nothing and
 * the group is left; a member on the sending data plane takes a copy (loopback); what attach
 * refuses (an RC QP, a unicast address, one group too many), the multicast QPN only with a
 * group's address, and a datagram to a group nobody here joined dropped and counted. Every test
 * ends with every buffer back.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { VerbsError } from '../nodes/rdma/verbs.ts';
import { MCAST_GROUPS, MCAST_QPN } from '../nodes/rdma/multicast.ts';
import {
  closeLeftovers,
  finish,
  IP_A,
  IP_B,
  pattern,
  settle,
  type Stack,
  trackedStacks,
  type UdEnd,
  udEnd,
  waitCompletions,
  waitFor,
} from './rdma-helpers.ts';

test.after.each(closeLeftovers);

const QKEY = 0x01234567;
const GROUP = '239.1.2.3';

const errs = (s: Stack, node: string, name: string) => s.graph.errorCount(node, name);

function member(s: Stack, address: string, qkey = QKEY): UdEnd {
  const e = udEnd(s, qkey, { address });
  s.rdma.attachMcast(e.qp, GROUP);
  return e;
}

function recv(s: Stack, e: UdEnd, wrId: number, offset: number): void {
  s.rdma.postRecv(e.qp, { wrId, sg: [{ mr: e.mr, offset, length: 2048 }] });
}

function sendToGroup(s: Stack, e: UdEnd, wrId: number, len: number, group = GROUP): void {
  s.rdma.postSend(e.qp, {
    wrId,
    opcode: 'send',
    sg: [{ mr: e.mr, offset: 0, length: len }],
    ud: { address: group, qpn: MCAST_QPN, qkey: QKEY },
  });
}

test('multicast: each member takes a copy with the GRH naming the group; a wrong Q_Key is dropped and counted', async () => {
  const p = trackedStacks();
  await p.ready;
  const b1 = member(p.b, IP_B),
    b2 = member(p.b, IP_B),
    bad = member(p.b, IP_B, 0x42);
  const a = udEnd(p.a, QKEY, { address: IP_A });
  for (const e of [b1, b2, bad]) recv(p.b, e, 1, 0);
  a.mr.memory.set(pattern(700, 3), 0);
  sendToGroup(p.a, a, 7, 700);
  const sent = await waitCompletions(a.cq, 1);
  assert.equal([sent[0].wrId, sent[0].status], [7, 'success']);
  for (const e of [b1, b2]) {
    const [c] = await waitCompletions(e.cq, 1);
    assert.equal([c.status, c.byteLen, c.srcQp], ['success', 740, a.qp.qpn]);
    const m = e.mr.memory;
    assert.equal(m.subarray(40, 740), pattern(700, 3));
    assert.equal([...m.subarray(32, 36)], IP_A.split('.').map(Number), 'GRH source: the sender');
    assert.equal([...m.subarray(36, 40)], GROUP.split('.').map(Number), 'GRH destination: the group');
  }
  await settle(30);
  assert.equal(bad.cq.poll(4), [], 'the member with another Q_Key took nothing');
  assert.is(errs(p.b, 'ud-input', 'bad_qkey'), 1);
  assert.is(errs(p.b, 'ud-input', 'multicast'), 1);
  assert.is(errs(p.b, 'ud-input', 'delivered'), 2);
  assert.equal(p.b.net.interfaces.groups.list(p.b.net.interfaces.find(p.b.ifName)), [{ group: GROUP, users: 1 }]);
  await finish(p);
});

test('multicast: detach and destroy leave the group; a datagram to a group nobody here joined is dropped and counted', async () => {
  const p = trackedStacks();
  await p.ready;
  const b1 = member(p.b, IP_B),
    b2 = member(p.b, IP_B);
  const a = udEnd(p.a, QKEY, { address: IP_A });
  recv(p.b, b1, 1, 0);
  recv(p.b, b2, 1, 0);
  p.b.rdma.detachMcast(b1.qp, GROUP);
  assert.equal(p.b.rdma.mcastGroupsOf(b1.qp), []);
  assert.throws(
    () => p.b.rdma.detachMcast(b1.qp, GROUP),
    (e: unknown) => e instanceof VerbsError && e.kind === 'not-found',
  );
  sendToGroup(p.a, a, 1, 64);
  await waitCompletions(b2.cq, 1);
  await settle(30);
  assert.equal(b1.cq.poll(4), [], 'detached: nothing');
  const ix = p.b.net.interfaces.find(p.b.ifName);
  p.b.rdma.destroyQp(b2.qp);
  assert.equal(p.b.net.interfaces.groups.list(ix), [], 'the last member gone: the group is left');
  const before = errs(p.b, 'ethernet-input', 'mcast_not_subscribed');
  sendToGroup(p.a, a, 2, 64);
  await waitFor(
    'the frame dropped as not subscribed',
    () => errs(p.b, 'ethernet-input', 'mcast_not_subscribed') === before + 1,
  );
  // Joined on B by a QP on another group sharing nothing with this one: the group's datagram
  // meets no member and is counted.
  const other = udEnd(p.b, QKEY, { address: IP_B });
  p.b.rdma.attachMcast(other.qp, '239.9.9.9');
  p.b.net.interfaces.groups.join(
    ix,
    '239.1.2.3'.split('.').reduce((x, o) => x * 256 + Number(o), 0),
    'pb',
  );
  sendToGroup(p.a, a, 3, 64);
  await waitFor('the datagram counted as meeting no member', () => errs(p.b, 'ud-input', 'no_member') === 1);
  await waitCompletions(a.cq, 3);
  await finish(p);
});

test('multicast: a member on the sending data plane takes a copy too (loopback), the sender among them', async () => {
  const p = trackedStacks();
  await p.ready;
  const b = member(p.b, IP_B),
    local = member(p.a, IP_A),
    a = member(p.a, IP_A);
  for (const e of [b, local, a]) recv(e === b ? p.b : p.a, e, 5, 0);
  a.mr.memory.set(pattern(300, 8), 0);
  sendToGroup(p.a, a, 9, 300);
  for (const e of [b, local, a]) {
    const got = (await waitCompletions(e.cq, e === a ? 2 : 1)).filter((c) => c.opcode === 'recv');
    assert.equal([got.length, got[0].byteLen, got[0].srcQp], [1, 340, a.qp.qpn]);
    assert.equal(e.mr.memory.subarray(40, 340), pattern(300, 8));
  }
  assert.is(errs(p.a, 'ip4-rewrite', 'mcast_loop'), 1);
  assert.is(errs(p.a, 'ud-input', 'delivered'), 2, 'both members on A');
  assert.is(errs(p.b, 'ud-input', 'delivered'), 1);
  await finish(p);
});

test('multicast: a QP made with multicastLoopback false loops nothing back; the other data plane still takes it', async () => {
  const p = trackedStacks();
  await p.ready;
  const b = member(p.b, IP_B),
    local = member(p.a, IP_A);
  const pd = p.a.rdma.createPd(),
    cq = p.a.rdma.createCq(16);
  const qp = p.a.rdma.createQp({ pd, sendCq: cq, recvCq: cq, type: 'ud', address: IP_A, multicastLoopback: false });
  for (const state of ['init', 'rtr', 'rts'] as const)
    p.a.rdma.modifyQp(qp, { state, qkey: state === 'init' ? QKEY : undefined });
  recv(p.b, b, 1, 0);
  recv(p.a, local, 1, 0);
  const mr = p.a.rdma.regMr(pd, 4096, ['local-write']);
  p.a.rdma.postSend(qp, {
    wrId: 1,
    opcode: 'send',
    sg: [{ mr, offset: 0, length: 64 }],
    ud: { address: GROUP, qpn: MCAST_QPN, qkey: QKEY },
  });
  await waitCompletions(b.cq, 1);
  await settle(30);
  assert.equal(local.cq.poll(4), [], 'no copy for the member on the sending data plane');
  assert.is(errs(p.a, 'ip4-rewrite', 'mcast_loop'), 0);
  assert.throws(
    () => p.a.rdma.createQp({ pd, sendCq: cq, recvCq: cq, type: 'ud', multicastLoopback: 1 as unknown as boolean }),
    /multicastLoopback must be true or false/,
  );
  await finish(p);
});

test('multicast: what attach and send refuse', async () => {
  const p = trackedStacks();
  await p.ready;
  const invalid = (fn: () => void, re: RegExp, kind = 'invalid') =>
    assert.throws(fn, (e: unknown) => e instanceof VerbsError && e.kind === kind && re.test(e.message));
  const ud = udEnd(p.b, QKEY, { address: IP_B });
  invalid(() => p.b.rdma.attachMcast(ud.qp, '10.0.0.9'), /not an IPv4 multicast group/);
  invalid(() => p.b.rdma.attachMcast(ud.qp, 'x'), /multicast group/);
  // A QP with no address joins on the interface its datagrams to the group leave by.
  const noAddr = udEnd(p.b, QKEY);
  p.b.rdma.attachMcast(noAddr.qp, '239.7.7.7');
  assert.equal(p.b.rdma.mcastGroupsOf(noAddr.qp), ['239.7.7.7']);
  p.b.rdma.destroyQp(noAddr.qp);
  const pd = p.b.rdma.createPd(),
    cq = p.b.rdma.createCq(8);
  const rc = p.b.rdma.createQp({ pd, sendCq: cq, recvCq: cq, address: IP_B });
  invalid(() => p.b.rdma.attachMcast(rc, GROUP), /only a UD QP/);
  // As many groups as the table holds, then one more is refused.
  for (let g = 0; g < MCAST_GROUPS; g++) p.b.rdma.attachMcast(ud.qp, `239.0.0.${g + 1}`);
  p.b.rdma.attachMcast(ud.qp, '239.0.0.1'); // attached already: no error, no second membership
  invalid(() => p.b.rdma.attachMcast(ud.qp, '239.0.1.1'), /groups have members/, 'resource');
  assert.is(p.b.rdma.mcastGroupsOf(ud.qp).length, MCAST_GROUPS);
  // The multicast QPN names a group only.
  invalid(
    () =>
      p.b.rdma.postSend(ud.qp, {
        wrId: 1,
        opcode: 'send',
        sg: [],
        ud: { address: IP_A, qpn: MCAST_QPN, qkey: QKEY },
      }),
    /ud\.qpn/,
  );
  p.b.rdma.destroyQp(ud.qp);
  assert.equal(p.b.net.interfaces.groups.list(p.b.net.interfaces.find(p.b.ifName)), []);
  await finish(p);
});

test.run();
