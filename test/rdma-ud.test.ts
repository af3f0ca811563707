/**
 * UD QPs between two stacks (PROTOCOL.md section 9): datagrams with and without immediate and
 * the solicited flag, the GRH in front of each receive (a valid IPv4 header with the sender's
 * address), the sender's QPN in the completion, one UD QP answering several peers (no per-peer
 * state), a UD QP on an SRQ; what is refused or dropped and counted: a wrong Q_Key, no receive
 * posted, a receive too small (local-length-error, the QP stays up), a message over the path
 * MTU (local-length-error at the sender, its QP in error), RC opcodes on a UD QP, datagrams to
 * an RC QP and RC packets to a UD QP, reserved header bits. Every test ends with every buffer back.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import type { Qp } from '../nodes/rdma/qp.ts';
import { VerbsError } from '../nodes/rdma/verbs.ts';
import { ip4HeaderSum20 } from '../nodes/ip4/ip4.ts';
import {
  closeLeftovers,
  type UdEnd,
  udEnd as udEndOf,
  finish,
  IP_A,
  IP_B,
  pattern,
  settle,
  type Stack,
  trackedStacks,
  waitCompletions,
  waitFor,
} from './rdma-helpers.ts';

test.after.each(closeLeftovers);

const QKEY = 0x11111111;

function udEnd(s: Stack, opts: { srq?: boolean; qkey?: number } = {}): UdEnd {
  return udEndOf(s, opts.qkey ?? QKEY, opts);
}

const errs = (s: Stack, node: string, name: string) => s.graph.errorCount(node, name);

function recv(s: Stack, e: UdEnd, wrId: number, offset: number, length: number): void {
  s.rdma.postRecv(e.qp, { wrId, sg: [{ mr: e.mr, offset, length }] });
}

function send(
  s: Stack,
  e: UdEnd,
  wrId: number,
  to: { ip: string; qp: Qp; qkey?: number },
  off: number,
  len: number,
  extra = {},
): void {
  s.rdma.postSend(e.qp, {
    wrId,
    opcode: 'send',
    sg: [{ mr: e.mr, offset: off, length: len }],
    ud: { address: to.ip, qpn: to.qp.qpn, qkey: to.qkey ?? QKEY },
    ...extra,
  });
}

test('UD: datagrams both ways with the GRH, the source QPN, immediate and solicited', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a),
    b = udEnd(p.b);
  const data = pattern(1000, 7);
  a.mr.memory.set(data, 0);
  recv(p.b, b, 1, 0, 2048);
  recv(p.b, b, 2, 4096, 2048);
  send(p.a, a, 10, { ip: IP_B, qp: b.qp }, 0, 1000);
  p.a.rdma.postSend(a.qp, {
    wrId: 11,
    opcode: 'send-with-imm',
    sg: [{ mr: a.mr, offset: 100, length: 24 }],
    imm: 0xabcdef01,
    solicited: true,
    ud: { address: IP_B, qpn: b.qp.qpn, qkey: QKEY },
  });
  const sent = await waitCompletions(a.cq, 2);
  assert.equal(
    sent.map((c) => [c.wrId, c.status, c.opcode, c.byteLen]),
    [
      [10, 'success', 'send', 1000],
      [11, 'success', 'send', 24],
    ],
  );
  const got = await waitCompletions(b.cq, 2);
  assert.equal(
    [got[0].wrId, got[0].status, got[0].opcode, got[0].byteLen, got[0].srcQp],
    [1, 'success', 'recv', 1040, a.qp.qpn],
  );
  assert.is(got[0].imm, undefined);
  assert.equal([got[1].wrId, got[1].byteLen, got[1].imm, got[1].solicited], [2, 64, 0xabcdef01, true]);
  // The message after the 40-byte GRH; the GRH: 20 zero bytes, then A's IPv4 header to B.
  const m = b.mr.memory;
  assert.equal(m.subarray(40, 1040), data);
  assert.equal(m.subarray(4096 + 40, 4096 + 64), data.subarray(100, 124));
  assert.ok(m.subarray(0, 20).every((x) => x === 0));
  const v = new DataView(m.buffer, m.byteOffset + 20, 20);
  assert.is(v.getUint8(0), 0x45);
  assert.is(v.getUint16(2), 20 + 8 + 10 + 1000, 'IPv4 total length');
  assert.is(v.getUint8(9), 17);
  assert.is(ip4HeaderSum20(v, 0), 0xffff, 'a valid IPv4 checksum');
  assert.equal([...m.subarray(32, 36)], IP_A.split('.').map(Number));
  assert.equal([...m.subarray(36, 40)], IP_B.split('.').map(Number));
  // B answers A the way it learnt from the completion.
  recv(p.a, a, 3, 8192, 256);
  b.mr.memory.set(pattern(32, 9), 20000);
  send(p.b, b, 20, { ip: IP_A, qp: { qpn: got[0].srcQp } as Qp }, 20000, 32);
  const back = await waitCompletions(a.cq, 1);
  assert.equal([back[0].wrId, back[0].byteLen, back[0].srcQp], [3, 72, b.qp.qpn]);
  assert.equal(a.mr.memory.subarray(8192 + 40, 8192 + 72), pattern(32, 9));
  await waitCompletions(b.cq, 1);
  await finish(p);
});

test('UD: one QP serves several peers and an SRQ feeds a UD QP', async () => {
  const p = trackedStacks();
  await p.ready;
  const b = udEnd(p.b, { srq: true });
  const srq = b.qp.srq!;
  for (let i = 0; i < 6; i++)
    p.b.rdma.postSrqRecv(srq, { wrId: 100 + i, sg: [{ mr: b.mr, offset: i * 1024, length: 1024 }] });
  const senders = [udEnd(p.a), udEnd(p.a), udEnd(p.a)];
  senders.forEach((s, k) => {
    s.mr.memory.fill(k + 1, 0, 100);
    send(p.a, s, k, { ip: IP_B, qp: b.qp }, 0, 100);
    send(p.a, s, k + 10, { ip: IP_B, qp: b.qp }, 0, 100);
  });
  const got = await waitCompletions(b.cq, 6);
  assert.equal(
    got.map((c) => c.wrId),
    [100, 101, 102, 103, 104, 105],
    'SRQ receives in order',
  );
  const from = new Map<number, number>();
  for (const c of got) from.set(c.srcQp!, (from.get(c.srcQp!) ?? 0) + 1);
  assert.equal([...from.values()], [2, 2, 2]);
  assert.equal(new Set(from.keys()), new Set(senders.map((s) => s.qp.qpn)));
  for (let i = 0; i < 6; i++) {
    const k = senders.findIndex((s) => s.qp.qpn === got[i].srcQp);
    assert.ok(b.mr.memory.subarray(i * 1024 + 40, i * 1024 + 140).every((x) => x === k + 1));
  }
  for (const s of senders) await waitCompletions(s.cq, 2);
  await finish(p);
});

test('UD: a wrong Q_Key and no receive posted are dropped and counted; a short receive completes in error; the QP stays up', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a),
    b = udEnd(p.b);
  send(p.a, a, 1, { ip: IP_B, qp: b.qp, qkey: QKEY + 1 }, 0, 10);
  send(p.a, a, 2, { ip: IP_B, qp: b.qp }, 0, 10);
  await waitCompletions(a.cq, 2);
  await settle(20);
  // Sent is not received: on a loaded machine B may not have run yet when the 20 ms are over.
  await waitFor(
    'B to drop both',
    () => errs(p.b, 'ud-input', 'bad_qkey') > 0 && errs(p.b, 'ud-input', 'no_receive') > 0,
  );
  assert.is(errs(p.b, 'ud-input', 'bad_qkey'), 1);
  assert.is(errs(p.b, 'ud-input', 'no_receive'), 1);
  assert.is(b.cq.length, 0, 'nothing completes');
  // 60 bytes do not fit 40 + 60 - 1.
  recv(p.b, b, 7, 0, 99);
  recv(p.b, b, 8, 1024, 100);
  send(p.a, a, 3, { ip: IP_B, qp: b.qp }, 0, 60);
  send(p.a, a, 4, { ip: IP_B, qp: b.qp }, 0, 60);
  const got = await waitCompletions(b.cq, 2);
  assert.equal(
    got.map((c) => [c.wrId, c.status]),
    [
      [7, 'local-length-error'],
      [8, 'success'],
    ],
  );
  assert.is(errs(p.b, 'ud-input', 'too_long'), 1);
  assert.is(b.qp.stateName, 'rts');
  // The privileged-Q_Key rule: a WR Q_Key with the high bit set sends the QP's own.
  p.a.rdma.modifyQp(a.qp, { state: 'rts', qkey: QKEY });
  recv(p.b, b, 9, 2048, 200);
  send(p.a, a, 5, { ip: IP_B, qp: b.qp, qkey: 0x80000000 }, 0, 8);
  assert.equal(
    (await waitCompletions(b.cq, 1)).map((c) => [c.wrId, c.status]),
    [[9, 'success']],
  );
  await waitCompletions(a.cq, 3);
  await finish(p);
});

test('UD: a message over the path MTU fails at the sender; RC opcodes and RC packets are refused', async () => {
  const p = trackedStacks();
  await p.ready;
  const a = udEnd(p.a),
    b = udEnd(p.b);
  // MTU 1500: 1462 bytes of room, active MTU 1024.
  send(p.a, a, 1, { ip: IP_B, qp: b.qp }, 0, 1025);
  const c = await waitCompletions(a.cq, 1);
  assert.equal([c[0].wrId, c[0].status], [1, 'local-length-error']);
  assert.is(a.qp.stateName, 'error');
  for (const opcode of ['write', 'read', 'send-with-invalidate'] as const)
    assert.throws(
      () =>
        p.b.rdma.postSend(b.qp, {
          wrId: 1,
          opcode,
          sg: [],
          remote: { stag: 1, offset: 0 },
          ud: { address: IP_A, qpn: 1, qkey: 1 },
        }),
      (e: unknown) =>
        e instanceof VerbsError && /a UD QP: it sends send, send-with-solicited and send-with-imm/.test(e.message),
    );
  assert.throws(
    () => p.b.rdma.postSend(b.qp, { wrId: 1, opcode: 'send', sg: [] }),
    (e: unknown) => e instanceof VerbsError && /a UD send needs ud \{address, qpn, qkey\}/.test(e.message),
  );
  assert.throws(
    () => p.b.rdma.modifyQp(p.b.rdma.createQp({ pd: b.pd, sendCq: b.cq, recvCq: b.cq }), { state: 'init', qkey: 5 }),
    (e: unknown) => e instanceof VerbsError && /a Q_Key is for UD QPs/.test(e.message),
  );
  // An RC QP's packet to a UD QP's port, and a datagram to an RC QP's port.
  const rc = p.a.rdma.createQp({ pd: a.pd, sendCq: a.cq, recvCq: a.cq });
  const before = errs(p.b, 'trp-input', 'bad_opcode'),
    peerBefore = errs(p.b, 'trp-input', 'wrong_peer');
  const u = p.a.rdma.net.udp;
  const hdr = (op: number) => {
    const m = new Uint8Array(20);
    new DataView(m.buffer).setUint16(8, op << 12);
    return m;
  };
  u.sendTo(hdr(0), IP_B, b.qp.qpn, rc.qpn);
  const rcB = p.b.rdma.createQp({ pd: b.pd, sendCq: b.cq, recvCq: b.cq });
  u.sendTo(hdr(6), IP_B, rcB.qpn, rc.qpn);
  // Reserved flag bits in a datagram: dropped.
  const bad = hdr(6);
  new DataView(bad.buffer).setUint32(0, QKEY);
  new DataView(bad.buffer).setUint16(8, (6 << 12) | 0x100);
  recv(p.b, b, 50, 0, 200);
  u.sendTo(bad, IP_B, b.qp.qpn, rc.qpn);
  await settle(30);
  // Sent is not received: on a loaded machine B may not have run yet when the 30 ms are over.
  await waitFor(
    'B to drop all three',
    () =>
      errs(p.b, 'trp-input', 'bad_opcode') > before &&
      errs(p.b, 'trp-input', 'wrong_peer') > peerBefore &&
      errs(p.b, 'ud-input', 'bad_header') > 0,
  );
  // The RC packet to the UD QP: an unknown opcode there; the datagram to the RC QP (not
  // connected): not from its peer.
  assert.is(errs(p.b, 'trp-input', 'bad_opcode') - before, 1);
  assert.is(errs(p.b, 'trp-input', 'wrong_peer') - peerBefore, 1);
  assert.is(errs(p.b, 'ud-input', 'bad_header'), 1);
  assert.is(b.cq.length, 0);
  await finish(p);
});

test.run();
