/**
 * RDMA error paths end to end between two stacks: remote access errors (bad, foreign,
 * deregistered and re-registered STags, bounds, alignment, missing rights) with the Terminate
 * on the wire and both QPs in ERROR, receiver-not-ready and message too long, queue overflows,
 * retry exhaustion when the peer vanishes, flushing on destroy and on FIN, the QP state
 * machine, local protection, and every VerbsError the verbs raise for bad input. Completions
 * are compared whole (every field); every test ends with every buffer back in the pool.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PcapReader } from '../drivers/pcap-file.ts';
import type { RdmaEvent } from '../nodes/rdma/core.ts';
import type { SendRequest } from '../nodes/rdma/stack.ts';
import { type Completion, type Mr, VerbsError, type VerbsErrorKind } from '../nodes/rdma/verbs.ts';
import {
  closeLeftovers,
  connectManual,
  type Ends,
  finish,
  IP_A,
  IP_B,
  makeEnds,
  type Pair,
  pattern,
  settle,
  type Stack,
  trackedStacks,
  twoStacks,
  waitCompletions,
  waitFor,
} from './rdma-helpers.ts';
import { termName } from '../nodes/rdma/wire.ts';

// ------------------------------------------------------------------ rig

const RW = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];

interface Rig {
  p: Pair;
  A: Ends;
  B: Ends;
  evA: RdmaEvent[];
  evB: RdmaEvent[];
}

function rig(opts: Parameters<typeof twoStacks>[0] = {}, initA = {}, initB = {}, cqDepth = 4096): Rig {
  const p = trackedStacks(opts);
  const evA: RdmaEvent[] = [],
    evB: RdmaEvent[] = [];
  p.a.rdma.onEvent = (e) => evA.push(e);
  p.b.rdma.onEvent = (e) => evB.push(e);
  const A = makeEnds(p.a, initA, cqDepth),
    B = makeEnds(p.b, initB, cqDepth);
  connectManual(p.a, A.qp, p.b, B.qp);
  return { p, A, B, evA, evB };
}

test.after.each(closeLeftovers);

/** The VerbsError `fn` throws: its kind, and a message that matches `msg`. */
function throwsVerbs(fn: () => unknown, kind: VerbsErrorKind, msg: RegExp): VerbsError {
  try {
    fn();
  } catch (e) {
    assert.instance(e, VerbsError, `a VerbsError, got ${String(e)}`);
    const v = e as VerbsError;
    assert.is(v.name, 'VerbsError');
    assert.is(v.kind, kind, `kind of "${v.message}"`);
    assert.match(v.message, msg);
    return v;
  }
  assert.unreachable(`expected a VerbsError (${kind}) matching ${msg}`);
  throw new Error('unreachable');
}

const wc = (wrId: unknown, qpn: number, status: string, opcode: string, byteLen = 0): Completion =>
  ({ wrId, qpn, status, opcode, byteLen }) as Completion;

/** Register `n` bytes of data-plane memory (optionally filled) on a stack. */
function mem(s: Stack, pd: Ends['pd'], n: number, access: string[] = RW, fill?: Uint8Array): Mr {
  const mr = s.rdma.regMr(pd, n, access);
  if (fill) mr.memory.set(fill.subarray(0, n));
  return mr;
}

/** Capture what a stack transmits (pcap); `terminates(port)` parses the Terminates a QP sent. */
function captureTx(s: Stack) {
  const dir = mkdtempSync(join(tmpdir(), 'rdma-errors-'));
  const file = join(dir, 'tx.pcap');
  s.ifs.capture(s.ifName, { tx: file });
  return {
    /** DDP segments (UDP payload minus TRP) of every data packet from `port`. */
    segments(port: number): Uint8Array[] {
      const r = PcapReader.open(file);
      const out: Uint8Array[] = [];
      for (let i = 0; i < r.count; i++) {
        const f = r.packet(i);
        if (f.length <= 52 || f[23] !== 17) continue;
        const v = new DataView(f.buffer, f.byteOffset, f.byteLength);
        if (v.getUint16(34) !== port || f[50] >>> 4 !== 0) continue;
        out.push(f.slice(52));
      }
      return out;
    },
    terminates(port: number) {
      return this.segments(port)
        .filter((d) => (d[0] & 0x80) === 0 && (d[1] & 0x0f) === 7)
        .map((d) => {
          const v = new DataView(d.buffer, d.byteOffset, d.byteLength);
          const t = d.subarray(18);
          return {
            ddp: { ctl: d[0], rdmap: d[1], qn: v.getUint32(6), msn: v.getUint32(10), mo: v.getUint32(14) },
            code: (t[0] << 8) | t[1],
            hdrct: t[2],
            reserved: t[3],
            segLen: (t[4] << 8) | t[5],
            /** The offending DDP header (14 or 18 bytes) and, with R, the 28-byte RDMAP header. */
            headers: t.slice(6),
          };
        });
    },
    done(): void {
      s.ifs.stopCapture(s.ifName);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Post `n` receives of `len` bytes each (from a fresh MR), wrIds first, first + 1...; returns the MR. */
function recvs(s: Stack, e: Ends, n: number, len: number, first = 100): Mr {
  const mr = mem(s, e.pd, Math.max(1, n * len));
  for (let i = 0; i < n; i++) s.rdma.postRecv(e.qp, { wrId: first + i, sg: [{ mr, offset: i * len, length: len }] });
  return mr;
}

// ------------------------------------------------------------------ remote access errors

type RemoteOp = 'write' | 'read' | 'fetch-add';

interface AccessCase {
  name: string;
  op: RemoteOp;
  /** Make the target on B: the STag and offset to aim at (and a check that B's memory is untouched). */
  target(r: Rig): { stag: number; offset: number; untouched?: () => void };
  code: number;
  length?: number;
}

function remoteReq(op: RemoteOp, wrId: unknown, local: Mr, stag: number, offset: number, length: number): SendRequest {
  const sg = [{ mr: local, offset: 0, length: op === 'fetch-add' ? 8 : length }];
  if (op === 'fetch-add') return { wrId, opcode: op, sg, remote: { stag, offset }, atomic: { add: 5n } };
  return { wrId, opcode: op, sg, remote: { stag, offset } };
}

const WC_OP: Record<RemoteOp, string> = { write: 'write', read: 'read', 'fetch-add': 'fetch-add' };
const RIGHTS: Record<RemoteOp, string> = { write: 'remote-write', read: 'remote-read', 'fetch-add': 'remote-atomic' };
/** RFC 5041 tagged (Write) vs RFC 5040 RDMAP (Read Request, Atomic Request) codes. */
const INVALID_STAG: Record<RemoteOp, number> = { write: 0x1100, read: 0x0100, 'fetch-add': 0x0100 };
const BOUNDS: Record<RemoteOp, number> = { write: 0x1101, read: 0x0101, 'fetch-add': 0x0101 };
/** A Write without remote-write is an invalid STag for DDP; Read/Atomic: RDMAP access violation. */
const NO_RIGHTS: Record<RemoteOp, number> = { write: 0x1100, read: 0x0102, 'fetch-add': 0x0102 };

/** What the events say of each code (RFC 5040/5041 section 7 names, written out here). */
const TERM_WORDS: Record<number, string> = {
  0x0100: 'remote protection error: invalid STag (0x0100)',
  0x0101: 'remote protection error: base or bounds violation (0x0101)',
  0x0102: 'remote protection error: access rights violation (0x0102)',
  0x1100: 'DDP tagged buffer error: invalid STag (0x1100)',
  0x1101: 'DDP tagged buffer error: base or bounds violation (0x1101)',
  0x1202: 'DDP untagged buffer error: no receive buffer posted (0x1202)',
  0x1203: 'DDP untagged buffer error: MSN out of range (0x1203)',
  0x1205: 'DDP untagged buffer error: message too long for the receive buffer (0x1205)',
};

test('termName: every code the responder sends is named; codes the RFCs do not name keep what can be named', () => {
  for (const [code, words] of Object.entries(TERM_WORDS)) assert.is(termName(Number(code)), words);
  assert.is(termName(0x0207), 'remote operation error: catastrophic error, local to the RDMAP stream (0x0207)');
  assert.is(termName(0x0277), 'remote operation error (0x0277)', 'a code the RFC does not list');
  assert.is(termName(0x0500), 'RDMAP error (0x0500)', 'an error type the RFC does not list');
  assert.is(termName(0x7000), 'error (0x7000)', 'a layer the RFC does not list');
});

const zeroed = (mr: Mr) => () =>
  assert.ok(
    mr.memory.every((b) => b === 0),
    'target memory untouched',
  );

const cases: AccessCase[] = [];
for (const op of ['write', 'read', 'fetch-add'] as RemoteOp[]) {
  cases.push(
    {
      name: 'an STag that does not exist',
      op,
      code: INVALID_STAG[op],
      target: () => ({ stag: 0x00abcd01, offset: 0 }),
    },
    {
      name: 'an STag of another PD on the peer',
      op,
      code: INVALID_STAG[op],
      target: (r) => {
        const mr = mem(r.p.b, r.p.b.rdma.createPd(), 64);
        return { stag: mr.stag, offset: 0, untouched: zeroed(mr) };
      },
    },
    {
      name: 'a deregistered STag',
      op,
      code: INVALID_STAG[op],
      target: (r) => {
        const mr = mem(r.p.b, r.B.pd, 64);
        r.p.b.rdma.deregMr(mr);
        return { stag: mr.stag, offset: 0, untouched: zeroed(mr) };
      },
    },
    {
      name: 'past the end of the region',
      op,
      code: BOUNDS[op],
      length: 16,
      target: (r) => {
        const mr = mem(r.p.b, r.B.pd, 64);
        return { stag: mr.stag, offset: op === 'fetch-add' ? 64 : 56, untouched: zeroed(mr) };
      },
    },
    {
      name: `a region without ${RIGHTS[op]}`,
      op,
      code: NO_RIGHTS[op],
      target: (r) => {
        const mr = mem(
          r.p.b,
          r.B.pd,
          64,
          RW.filter((a) => a !== RIGHTS[op]),
        );
        return { stag: mr.stag, offset: 0, untouched: zeroed(mr) };
      },
    },
  );
}

for (const c of cases) {
  test(`${c.op} to ${c.name}: remote-access-error, Terminate 0x${c.code.toString(16).padStart(4, '0')}, both QPs in ERROR, the rest flushed`, async () => {
    const r = rig();
    const { p, A, B } = r;
    const cap = captureTx(p.b);
    const len = c.length ?? 32;
    const local = mem(p.a, A.pd, 64, RW, pattern(64, 7));
    const before = local.memory.slice();
    const bRecv = recvs(p.b, B, 2, 32);
    const t = c.target(r);
    p.a.rdma.postSend(A.qp, remoteReq(c.op, 'bad', local, t.stag, t.offset, len));
    // Queued behind it: flushed, in posting order.
    p.a.rdma.postSend(A.qp, { wrId: 'next-send', opcode: 'send', sg: [{ mr: local, offset: 0, length: 8 }] });
    p.a.rdma.postSend(A.qp, {
      wrId: 'next-write',
      opcode: 'write',
      sg: [{ mr: local, offset: 0, length: 8 }],
      remote: { stag: bRecv.stag, offset: 0 },
    });
    recvs(p.a, A, 1, 16, 500);
    const got = await waitCompletions(A.scq, 3);
    assert.equal(got, [
      wc('bad', A.qp.qpn, 'remote-access-error', WC_OP[c.op]),
      wc('next-send', A.qp.qpn, 'flushed', 'send'),
      wc('next-write', A.qp.qpn, 'flushed', 'write'),
    ]);
    assert.equal(await waitCompletions(A.rcq, 1), [wc(500, A.qp.qpn, 'flushed', 'recv')]);
    assert.is(A.qp.stateName, 'error');
    // The responder sent the Terminate and is in ERROR with its receives flushed.
    assert.equal(await waitCompletions(B.rcq, 2), [
      wc(100, B.qp.qpn, 'flushed', 'recv'),
      wc(101, B.qp.qpn, 'flushed', 'recv'),
    ]);
    assert.is(B.qp.stateName, 'error');
    assert.equal(p.b.rdma.core.counters.terminatesSent, 1);
    assert.equal(p.a.rdma.core.counters.terminatesReceived, 1);
    assert.is(p.a.rdma.core.counters.terminatesSent, 0);
    assert.equal(
      r.evA.filter((e) => e.type === 'qp-error'),
      [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[c.code]}` }],
    );
    assert.equal(
      r.evB.map((e) => e.type),
      ['qp-error'],
    );
    assert.ok(
      (r.evB[0].reason as string).startsWith(`terminate sent: ${TERM_WORDS[c.code]}: `),
      r.evB[0].reason as string,
    );
    // The Terminate on the wire: RFC 5040 layout, the code, hdrct M|D(|R), the offending header.
    await waitFor('the Terminate to be acknowledged', () => B.qp.sndUna === B.qp.sndNxt);
    const terms = cap.terminates(B.qp.qpn);
    const tm = terms[0];
    assert.ok(tm, 'a Terminate was sent');
    // One Terminate: any retransmission (a slow ACK on a loaded machine) is the same bytes.
    for (const again of terms.slice(1)) assert.equal(again, tm, 'a retransmission is the same Terminate');
    assert.equal(tm.ddp, { ctl: 0x41, rdmap: 0x47, qn: 2, msn: 1, mo: 0 });
    assert.is(tm.code, c.code);
    assert.is(tm.reserved, 0);
    const tagged = c.op === 'write';
    const withR = c.op === 'read' && c.code >> 12 === 0;
    assert.is(tm.hdrct, 0x80 | 0x40 | (withR ? 0x20 : 0));
    const hv = new DataView(tm.headers.buffer, tm.headers.byteOffset, tm.headers.byteLength);
    if (tagged) {
      assert.is(tm.segLen, 14 + len);
      assert.is(tm.headers.length, 14);
      assert.is(tm.headers[0] & 0xc3, 0xc1, 'tagged, last, DV 1');
      assert.is(tm.headers[1], 0x40, 'RDMA Write');
      assert.is(hv.getUint32(2), t.stag);
      assert.is(Number(hv.getBigUint64(6)), t.offset);
    } else {
      assert.is(tm.segLen, 18 + (c.op === 'read' ? 28 : 52));
      assert.is(tm.headers[0], 0x41);
      assert.is(tm.headers[1], c.op === 'read' ? 0x41 : 0x4a);
      assert.is(hv.getUint32(6), 1, 'QN 1');
      assert.is(hv.getUint32(10), 1, 'MSN 1');
      if (withR) {
        assert.is(tm.headers.length, 18 + 28);
        assert.is(hv.getUint32(18 + 12), len, 'read size');
        assert.is(hv.getUint32(18 + 16), t.stag, 'source STag');
        assert.is(Number(hv.getBigUint64(18 + 20)), t.offset, 'source TO');
      } else assert.is(tm.headers.length, 18);
    }
    // Nothing was placed or changed on either side.
    t.untouched?.();
    assert.equal(local.memory, before, 'requester memory unchanged');
    const errNode = tagged ? 'ddp-input' : 'rdmap-input';
    assert.is(p.b.graph.errorCount(errNode, 'terminated'), 1);
    assert.is(p.a.graph.errorCount('rdmap-input', 'terminate_received'), 1);
    cap.done();
    await finish(p);
  });
}

test("a QP moved to ERROR, then RESET, as soon as its last receive completes still acknowledges it: the peer's SEND completes", async () => {
  // A lone SEND's ACK is held for a reply to carry (rdma.trp.ack-delay-us, 100 us by default); a
  // program that leaves the connection at once (ibv_modify_qp ERR, then RESET, as at a teardown)
  // must not take that ACK with it, or the peer's SEND ends in its retry limit.
  const { p, A, B } = rig();
  const mrA = mem(p.a, A.pd, 64),
    mrB = mem(p.b, B.pd, 64);
  p.b.rdma.postRecv(B.qp, { wrId: 1, sg: [{ mr: mrB, offset: 0, length: 64 }] });
  let left = false;
  B.rcq.onCompletion = (cq) => {
    if (cq.poll(1).length === 0 || left) return;
    left = true;
    p.b.rdma.modifyQp(B.qp, { state: 'error' });
    p.b.rdma.modifyQp(B.qp, { state: 'reset' });
  };
  p.a.rdma.postSend(A.qp, { wrId: 7, opcode: 'send', sg: [{ mr: mrA, offset: 0, length: 64 }] });
  const [c] = await waitCompletions(A.scq, 1, 10_000);
  assert.ok(left, 'B received the SEND and left the connection');
  assert.is(c.status, 'success', `A's SEND: ${c.status}`);
});

test('re-registration: the old STag fails after the new registration in the same slot works', async () => {
  // One MR slot: the re-registration must reuse it, with a new key.
  const r = rig({ rdma: { maxMrs: 1 } });
  const { p, A, B } = r;
  const src = mem(p.a, A.pd, 32, RW, pattern(32, 3));
  const old = mem(p.b, B.pd, 64);
  p.b.rdma.deregMr(old);
  const fresh = mem(p.b, B.pd, 64);
  const kb = p.b.rdma.core.stagKeyBits;
  assert.ok(kb >= 12, `at least 12 key bits, got ${kb}`);
  assert.is(fresh.stag >>> kb, old.stag >>> kb, 'same MR table slot');
  assert.is.not(fresh.stag, old.stag, 'a new key');
  throwsVerbs(() => p.b.rdma.regMr(B.pd, 8, RW), 'resource', /no free memory region or window slot \(max-mrs 1\)/);
  p.a.rdma.postSend(A.qp, {
    wrId: 'new',
    opcode: 'write',
    sg: [{ mr: src, offset: 0, length: 32 }],
    remote: { stag: fresh.stag, offset: 8 },
  });
  assert.equal(await waitCompletions(A.scq, 1), [wc('new', A.qp.qpn, 'success', 'write', 32)]);
  assert.equal(fresh.memory.subarray(8, 40), src.memory);
  p.a.rdma.postSend(A.qp, {
    wrId: 'old',
    opcode: 'write',
    sg: [{ mr: src, offset: 0, length: 32 }],
    remote: { stag: old.stag, offset: 8 },
  });
  assert.equal(await waitCompletions(A.scq, 1), [wc('old', A.qp.qpn, 'remote-access-error', 'write')]);
  await waitFor('B in ERROR', () => B.qp.stateName === 'error');
  assert.is(p.b.rdma.core.counters.terminatesSent, 1);
  assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x1100]}` }]);
  await finish(p);
});

test('re-registration for read and atomic: old STags fail (RDMAP invalid STag), new ones work', async () => {
  for (const op of ['read', 'fetch-add'] as const) {
    const r = rig({ rdma: { maxMrs: 1 } });
    const { p, A, B } = r;
    const local = mem(p.a, A.pd, 64);
    const old = mem(p.b, B.pd, 64);
    p.b.rdma.deregMr(old);
    const fresh = mem(p.b, B.pd, 64, RW, pattern(64, 11));
    const want = fresh.memory.slice(0, 8);
    p.a.rdma.postSend(A.qp, remoteReq(op, 'new', local, fresh.stag, 0, 8));
    assert.equal(await waitCompletions(A.scq, 1), [wc('new', A.qp.qpn, 'success', op, 8)]);
    assert.equal(local.memory.subarray(0, 8), want);
    p.a.rdma.postSend(A.qp, remoteReq(op, 'old', local, old.stag, 0, 8));
    assert.equal(await waitCompletions(A.scq, 1), [wc('old', A.qp.qpn, 'remote-access-error', op)]);
    assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x0100]}` }]);
    await waitFor('B in ERROR', () => B.qp.stateName === 'error');
    await finish(p);
  }
});

test('unaligned atomic: refused at post; an unaligned Atomic Request on the wire gets Terminate 0x0101', async () => {
  const r = rig();
  const { p, A, B } = r;
  const local = mem(p.a, A.pd, 8);
  const target = mem(p.b, B.pd, 64, RW, pattern(64, 5));
  const before = target.memory.slice();
  throwsVerbs(
    () => p.a.rdma.postSend(A.qp, remoteReq('fetch-add', 1, local, target.stag, 4, 8)),
    'invalid',
    /fetch-add: remote\.offset must be 8-byte aligned, got 4/,
  );
  assert.is(A.qp.sqDepth, 0, 'nothing was queued');
  // Craft one: TRP psn = what B expects next, ack = what A has sent, from A's QP port,
  // Atomic Request FetchAdd at TO 4.
  const m = new Uint8Array(10 + 18 + 52);
  const v = new DataView(m.buffer);
  v.setUint32(0, B.qp.rcvNxt);
  v.setUint32(4, B.qp.sndNxt);
  m[10] = 0x41;
  m[11] = 0x4a;
  v.setUint32(16, 1); // QN 1
  v.setUint32(20, 1); // MSN 1
  v.setUint32(28, 0); // FetchAdd
  v.setUint32(32, 1); // request id
  v.setUint32(36, target.stag);
  v.setUint32(44, 4); // TO 4
  v.setUint32(52, 1); // add 1
  assert.ok(p.a.rdma.net.udp.sendTo(m, IP_B, B.qp.qpn, A.qp.qpn));
  await waitFor('B in ERROR', () => B.qp.stateName === 'error');
  assert.is(p.b.rdma.core.counters.terminatesSent, 1);
  assert.is(p.b.graph.errorCount('rdmap-input', 'terminated'), 1);
  assert.equal(target.memory, before, 'nothing changed');
  await waitFor('A to take the Terminate', () => A.qp.stateName === 'error');
  assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x0101]}` }]);
  await finish(p);
});

test('send with invalidate naming a bad STag: remote-access-error, Terminate 0x0100, nothing invalidated', async () => {
  for (const which of ['none', 'other-pd'] as const) {
    const r = rig();
    const { p, A, B } = r;
    const src = mem(p.a, A.pd, 16);
    const dst = recvs(p.b, B, 2, 16);
    const foreign = mem(p.b, p.b.rdma.createPd(), 16);
    const stag = which === 'none' ? 0x00777701 : foreign.stag;
    p.a.rdma.postSend(A.qp, {
      wrId: 'inv',
      opcode: 'send-with-invalidate',
      invalidateStag: stag,
      sg: [{ mr: src, offset: 0, length: 16 }],
    });
    assert.equal(await waitCompletions(A.scq, 1), [wc('inv', A.qp.qpn, 'remote-access-error', 'send')], which);
    assert.equal(
      await waitCompletions(B.rcq, 2),
      [wc(100, B.qp.qpn, 'flushed', 'recv'), wc(101, B.qp.qpn, 'flushed', 'recv')],
      which,
    );
    assert.equal(
      r.evA,
      [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x0100]}` }],
      which,
    );
    assert.ok(foreign.valid && dst.valid, 'nothing was invalidated');
    await finish(p);
  }
});

test('ORD above the peer IRD: Terminate 0x1203 whether the extra Read Request comes with the first or later', async () => {
  // Together: both Read Requests in one burst; B's IRD is 1.
  {
    const r = rig({}, { ord: 4 }, { ird: 1 });
    const { p, A, B } = r;
    const la = mem(p.a, A.pd, 2048),
      rb = mem(p.b, B.pd, 1024);
    for (let i = 0; i < 2; i++)
      p.a.rdma.postSend(A.qp, {
        wrId: i,
        opcode: 'read',
        sg: [{ mr: la, offset: i * 1024, length: 1024 }],
        remote: { stag: rb.stag, offset: 0 },
      });
    // Read 0 was taken but B never answered it (it went to ERROR): flushed, in posting order.
    assert.equal(await waitCompletions(A.scq, 2), [
      wc(0, A.qp.qpn, 'flushed', 'read'),
      wc(1, A.qp.qpn, 'remote-invalid-request', 'read'),
    ]);
    assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x1203]}` }]);
    assert.is(p.b.rdma.core.counters.terminatesSent, 1);
    await finish(p);
  }
  // Later: the second arrives while the first one's response is still unacknowledged (B's
  // transmissions are lost until then). B must not drop out silently: it sends a Terminate.
  {
    const r = rig({}, { ord: 4 }, { ird: 1 });
    const { p, A, B } = r;
    const la = mem(p.a, A.pd, 2048),
      rb = mem(p.b, B.pd, 1024);
    p.b.ifs.setFault(p.b.ifName, 'tx', { loss: 1 });
    p.a.rdma.postSend(A.qp, {
      wrId: 0,
      opcode: 'read',
      sg: [{ mr: la, offset: 0, length: 1024 }],
      remote: { stag: rb.stag, offset: 0 },
    });
    await waitFor('B to take Read 0', () => B.qp.respTail === 1);
    p.a.rdma.postSend(A.qp, {
      wrId: 1,
      opcode: 'read',
      sg: [{ mr: la, offset: 1024, length: 1024 }],
      remote: { stag: rb.stag, offset: 0 },
    });
    await waitFor('B to refuse Read 1', () => B.qp.stateName === 'error');
    assert.is(p.b.rdma.core.counters.terminatesSent, 1);
    assert.equal(
      r.evB.map((e) => e.reason),
      [`terminate sent: ${TERM_WORDS[0x1203]}: rdmap-input on qp ${B.qp.qpn}: Read Request`],
    );
    p.b.ifs.setFault(p.b.ifName, 'tx', null);
    assert.equal(await waitCompletions(A.scq, 2), [
      wc(0, A.qp.qpn, 'flushed', 'read'),
      wc(1, A.qp.qpn, 'remote-invalid-request', 'read'),
    ]);
    assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x1203]}` }]);
    await finish(p);
  }
});

// ------------------------------------------------------------------ receive side errors

test('send with no receive posted: rnr-retry-exceeded, Terminate 0x1202, both in ERROR', async () => {
  const r = rig();
  const { p, A, B } = r;
  const cap = captureTx(p.b);
  const src = mem(p.a, A.pd, 64, RW, pattern(64, 1));
  p.a.rdma.postSend(A.qp, { wrId: 's1', opcode: 'send', sg: [{ mr: src, offset: 0, length: 64 }] });
  p.a.rdma.postSend(A.qp, { wrId: 's2', opcode: 'send', sg: [{ mr: src, offset: 0, length: 4 }] });
  assert.equal(await waitCompletions(A.scq, 2), [
    wc('s1', A.qp.qpn, 'rnr-retry-exceeded', 'send'),
    wc('s2', A.qp.qpn, 'flushed', 'send'),
  ]);
  assert.is(A.qp.stateName, 'error');
  await waitFor('B in ERROR', () => B.qp.stateName === 'error');
  assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x1202]}` }]);
  assert.is(p.b.graph.errorCount('ddp-input', 'terminated'), 1);
  await waitFor('the Terminate to be acknowledged', () => B.qp.sndUna === B.qp.sndNxt);
  const [tm] = cap.terminates(B.qp.qpn);
  assert.is(tm.code, 0x1202);
  assert.is(tm.hdrct, 0xc0);
  assert.is(tm.segLen, 18 + 64);
  assert.equal(Array.from(tm.headers.subarray(0, 2)), [0x41, 0x43], 'the offending Send header');
  assert.is(B.rcq.length, 0, 'B had nothing to complete');
  cap.done();
  await finish(p);
});

test('message too long: requester remote-invalid-request, responder local-length-error, Terminate 0x1205', async () => {
  for (const [size, posted] of [
    [100, 16],
    [3000, 1000],
  ] as const) {
    const r = rig();
    const { p, A, B } = r;
    const src = mem(p.a, A.pd, size, RW, pattern(size, 2));
    const dst = mem(p.b, B.pd, posted + 32);
    p.b.rdma.postRecv(B.qp, { wrId: 'small', sg: [{ mr: dst, offset: 0, length: posted }] });
    p.b.rdma.postRecv(B.qp, { wrId: 'spare', sg: [{ mr: dst, offset: posted, length: 32 }] });
    p.a.rdma.postSend(A.qp, { wrId: 'big', opcode: 'send', sg: [{ mr: src, offset: 0, length: size }] });
    p.a.rdma.postSend(A.qp, { wrId: 'after', opcode: 'send', sg: [{ mr: src, offset: 0, length: 8 }] });
    assert.equal(await waitCompletions(A.scq, 2), [
      wc('big', A.qp.qpn, 'remote-invalid-request', 'send'),
      wc('after', A.qp.qpn, 'flushed', 'send'),
    ]);
    assert.equal(await waitCompletions(B.rcq, 2), [
      wc('small', B.qp.qpn, 'local-length-error', 'recv'),
      wc('spare', B.qp.qpn, 'flushed', 'recv'),
    ]);
    assert.is(A.qp.stateName, 'error');
    assert.is(B.qp.stateName, 'error');
    assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: `terminate received: ${TERM_WORDS[0x1205]}` }]);
    assert.is(p.b.rdma.core.counters.terminatesSent, 1);
    await finish(p);
  }
});

// ------------------------------------------------------------------ queue overflows

test('receive queue overflow throws resource; send queue overflow throws resource', async () => {
  const r = rig({}, { maxSendWr: 2, maxRecvWr: 2 });
  const { p, A } = r;
  const m = mem(p.a, A.pd, 64);
  p.a.rdma.postRecv(A.qp, { wrId: 1, sg: [{ mr: m, offset: 0, length: 8 }] });
  p.a.rdma.postRecv(A.qp, { wrId: 2, sg: [{ mr: m, offset: 8, length: 8 }] });
  throwsVerbs(
    () => p.a.rdma.postRecv(A.qp, { wrId: 3, sg: [{ mr: m, offset: 16, length: 8 }] }),
    'resource',
    new RegExp(`qp ${A.qp.qpn}: receive queue full \\(2\\)`),
  );
  assert.is(A.qp.rqDepth, 2);
  p.a.rdma.postSend(A.qp, { wrId: 1, opcode: 'send', sg: [] });
  p.a.rdma.postSend(A.qp, { wrId: 2, opcode: 'send', sg: [] });
  throwsVerbs(
    () => p.a.rdma.postSend(A.qp, { wrId: 3, opcode: 'send', sg: [] }),
    'resource',
    new RegExp(`qp ${A.qp.qpn}: send queue full \\(2\\)`),
  );
  assert.is(A.qp.sqDepth, 2);
  await finish(p);
});

test('send queue slots come back: after completions the queue takes as many again', async () => {
  const r = rig({}, { maxSendWr: 2 });
  const { p, A, B } = r;
  recvs(p.b, B, 6, 8);
  for (let round = 0; round < 3; round++) {
    p.a.rdma.postSend(A.qp, { wrId: round * 2, opcode: 'send', sg: [] });
    p.a.rdma.postSend(A.qp, { wrId: round * 2 + 1, opcode: 'send', sg: [] });
    throwsVerbs(() => p.a.rdma.postSend(A.qp, { wrId: 'x', opcode: 'send', sg: [] }), 'resource', /send queue full/);
    assert.equal(await waitCompletions(A.scq, 2), [
      wc(round * 2, A.qp.qpn, 'success', 'send'),
      wc(round * 2 + 1, A.qp.qpn, 'success', 'send'),
    ]);
  }
  assert.is((await waitCompletions(B.rcq, 6)).filter((c) => c.status === 'success').length, 6);
  await finish(p);
});

test('CQ overflow: the CQ goes to error, one cq-error event, the completions that did not fit are kept', async () => {
  const r = rig({}, {}, {}, 2);
  const { p, A, B } = r;
  const target = mem(p.b, B.pd, 8);
  const src = mem(p.a, A.pd, 8);
  const write = (i: number) =>
    p.a.rdma.postSend(A.qp, {
      wrId: i,
      opcode: 'write',
      sg: [{ mr: src, offset: 0, length: 8 }],
      remote: { stag: target.stag, offset: 0 },
    });
  for (let i = 0; i < 5; i++) write(i);
  await waitFor('all five completions', () => A.scq.length + A.scq.overflowed.length === 5);
  assert.ok(A.scq.error, 'the CQ is in error');
  const cqErrors = r.evA.filter((e) => e.type === 'cq-error');
  assert.equal(cqErrors, [
    { type: 'cq-error', cq: A.scq.handle, reason: `completion queue ${A.scq.handle} overflowed (depth 2)` },
  ]);
  assert.equal(
    A.scq.poll(10),
    [0, 1].map((i) => wc(i, A.qp.qpn, 'success', 'write', 8)),
  );
  assert.equal(
    A.scq.overflowed,
    [2, 3, 4].map((i) => wc(i, A.qp.qpn, 'success', 'write', 8)),
  );
  // In error the CQ takes nothing more into its ring, even with room: it goes to overflowed.
  write(5);
  await waitFor('the sixth completion', () => A.scq.overflowed.length === 4);
  assert.is(A.scq.length, 0);
  assert.equal(A.scq.overflowed[3], wc(5, A.qp.qpn, 'success', 'write', 8));
  assert.is(r.evA.filter((e) => e.type === 'cq-error').length, 1, 'reported once');
  await finish(p);
});

// ------------------------------------------------------------------ the peer stalls

test('a peer not scheduled for a while: its timeouts ask (PROBEs), nothing is sent twice, the answers show the timeouts spurious', async () => {
  // rto-min 50 ms: a timeout's backoff (100 ms) leaves the test time to see the PROBE and restart B.
  const r = rig({ rdma: { trp: { rtoMinMs: 50, rtoMaxMs: 400, maxRetries: 7 } } });
  const { p, A, B } = r;
  const src = mem(p.a, A.pd, 4096, RW, pattern(4096, 6));
  const dst = recvs(p.b, B, 8, 4096);
  const send = (wrId: string) =>
    p.a.rdma.postSend(A.qp, { wrId, opcode: 'send', sg: [{ mr: src, offset: 0, length: 3000 }] });
  send('warm');
  await waitCompletions(A.scq, 1);
  await waitCompletions(B.rcq, 1);
  // 1. B stalls past one timeout: A asks once, B (scheduled again) takes the data, then answers.
  p.b.graph.stop();
  send('one');
  await waitFor('a PROBE', () => A.qp.probes === 1, 3000);
  p.b.graph.start();
  assert.equal(await waitCompletions(A.scq, 1), [wc('one', A.qp.qpn, 'success', 'send', 3000)]);
  await waitFor('the answer', () => A.qp.peerProbes);
  assert.is(A.qp.spuriousTimeouts, 1, 'the answer acknowledged the data: spurious');
  // 2. Now B is known to answer: a longer stall (several timeouts) asks at each, resends nothing.
  p.b.graph.stop();
  send('two');
  await waitFor('three PROBEs', () => A.qp.probes >= 3, 5000);
  p.b.graph.start();
  assert.equal(await waitCompletions(A.scq, 1), [wc('two', A.qp.qpn, 'success', 'send', 3000)]);
  await waitCompletions(B.rcq, 2);
  assert.is(A.qp.retransmits, 0, 'nothing was sent twice');
  assert.is(B.qp.duplicates, 0, 'B received nothing twice');
  assert.ok(A.qp.spuriousTimeouts >= 2, `spurious timeouts: ${A.qp.spuriousTimeouts}`);
  assert.equal(dst.memory.subarray(8192, 8192 + 3000), src.memory.subarray(0, 3000), "the last Send's bytes");
  await finish(p);
});

// ------------------------------------------------------------------ the peer vanishes

// rto-init 1 s: the warm-up exchange's ACK, late on a loaded machine, is no timeout (a PROBE
// answered then would have every later timeout ask instead of resend); its RTT sample sets the
// RTO within [1, 10] ms for the rest.
const FAST = { rdma: { trp: { rtoMinMs: 1, rtoMaxMs: 10, rtoInitMs: 1000, maxRetries: 3 } } };

async function vanish(how: (p: Pair) => void): Promise<void> {
  const r = rig(FAST);
  const { p, A, B } = r;
  const src = mem(p.a, A.pd, 4096, RW, pattern(4096, 4));
  const dst = recvs(p.b, B, 4, 1024);
  // One exchange first (an RTT sample: the RTO starts from it).
  p.a.rdma.postSend(A.qp, { wrId: 'warm', opcode: 'send', sg: [{ mr: src, offset: 0, length: 100 }] });
  assert.equal(await waitCompletions(A.scq, 1), [wc('warm', A.qp.qpn, 'success', 'send', 100)]);
  await waitCompletions(B.rcq, 1);
  how(p);
  const core = p.a.rdma.core;
  const rto0 = A.qp.rtoNs;
  assert.ok(rto0 >= core.rtoMinNs && rto0 <= core.rtoMaxNs, `RTO after the RTT sample: ${rto0} ns`);
  const timeouts0 = A.qp.timeouts,
    rtx0 = A.qp.retransmits,
    tx0 = A.qp.txPackets;
  p.a.rdma.postSend(A.qp, { wrId: 'lost', opcode: 'send', sg: [{ mr: src, offset: 0, length: 3000 }] });
  p.a.rdma.postSend(A.qp, {
    wrId: 'w',
    opcode: 'write',
    sg: [{ mr: src, offset: 0, length: 64 }],
    remote: { stag: dst.stag, offset: 0 },
  });
  p.a.rdma.postSend(A.qp, {
    wrId: 'r',
    opcode: 'read',
    sg: [{ mr: src, offset: 0, length: 64 }],
    remote: { stag: dst.stag, offset: 0 },
  });
  const got = await waitCompletions(A.scq, 3, 3000);
  assert.equal(got, [
    wc('lost', A.qp.qpn, 'retry-exceeded', 'send'),
    wc('w', A.qp.qpn, 'flushed', 'write'),
    wc('r', A.qp.qpn, 'flushed', 'read'),
  ]);
  assert.is(A.qp.stateName, 'error');
  assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: 'retry-exceeded' }]);
  assert.is(p.a.rdma.core.counters.retryExceeded, 1);
  // maxRetries 3: the 4th expiry gives up. Each wait is the RTO of its moment: the first the
  // RTT sample's, then doubled by each of the three retries, never above rto-max.
  assert.is(A.qp.timeouts - timeouts0, 4);
  assert.is(A.qp.rtoNs, Math.min(core.rtoMaxNs, rto0 * 8), 'three backoffs, capped at rto-max');
  // Every packet in flight (the Send's segments, the Write, the Read Request) was sent once;
  // the first timeout asked (a PROBE: a late ACK is likelier than a loss), and as the peer
  // never answered one, each later timeout resent only the oldest (with no SACK from the peer,
  // nothing says the rest is lost); then A sends nothing more.
  const packets = Math.ceil(3000 / A.qp.mtuUntagged) + 2;
  assert.is(A.qp.probes, 1, 'the first timeout sent a PROBE');
  assert.is(A.qp.retransmits - rtx0, 2);
  assert.is(A.qp.txPackets - tx0, packets + 2);
  const tx = A.qp.txPackets;
  await settle(40);
  assert.is(A.qp.txPackets, tx, 'silent after giving up');
  // Posting now completes at once, flushed.
  p.a.rdma.postSend(A.qp, { wrId: 'late', opcode: 'send', sg: [] });
  assert.equal(A.scq.poll(5), [wc('late', A.qp.qpn, 'flushed', 'send')]);
  await finish(p);
}

test('peer graph stopped: retry-exceeded within the RTO bound, QP in ERROR, the rest flushed', async () => {
  await vanish((p) => p.b.graph.stop());
});

test('peer closed (graph and interface gone): retry-exceeded, QP in ERROR, the rest flushed', async () => {
  await vanish((p) => {
    p.b.graph.close();
    p.b.ifs.closeAll();
  });
});

// ------------------------------------------------------------------ flush on destroy, FIN

test('destroy flushes posted sends and receives; the peer gets FIN: qp-disconnected, ERROR, its receives flushed', async () => {
  const r = rig();
  const { p, A, B } = r;
  const m = mem(p.a, A.pd, 64);
  recvs(p.b, B, 3, 16);
  for (let i = 0; i < 3; i++) p.a.rdma.postRecv(A.qp, { wrId: `r${i}`, sg: [{ mr: m, offset: i * 8, length: 8 }] });
  for (let i = 0; i < 2; i++)
    p.a.rdma.postSend(A.qp, {
      wrId: `s${i}`,
      opcode: 'write',
      sg: [{ mr: m, offset: 0, length: 8 }],
      remote: { stag: 1, offset: 0 },
    });
  const qpn = A.qp.qpn;
  p.a.rdma.destroyQp(A.qp);
  assert.equal(A.scq.poll(10), [wc('s0', qpn, 'flushed', 'write'), wc('s1', qpn, 'flushed', 'write')]);
  assert.equal(
    A.rcq.poll(10),
    [0, 1, 2].map((i) => wc(`r${i}`, qpn, 'flushed', 'recv')),
  );
  assert.ok(A.qp.destroyed);
  assert.equal(r.evA, [], 'a destroy is no error: no qp-error event');
  throwsVerbs(
    () => p.a.rdma.postSend(A.qp, { wrId: 1, opcode: 'send' }),
    'not-found',
    new RegExp(`qp ${qpn} is destroyed`),
  );
  throwsVerbs(() => p.a.rdma.postRecv(A.qp, { wrId: 1 }), 'not-found', /is destroyed/);
  throwsVerbs(() => p.a.rdma.destroyQp(A.qp), 'not-found', /already destroyed/);
  throwsVerbs(() => p.a.rdma.qp(qpn), 'not-found', new RegExp(`no QP ${qpn}`));
  // B: the FIN.
  assert.equal(
    await waitCompletions(B.rcq, 3),
    [100, 101, 102].map((i) => wc(i, B.qp.qpn, 'flushed', 'recv')),
  );
  assert.is(B.qp.stateName, 'error');
  assert.equal(
    r.evB,
    [{ type: 'qp-disconnected', qpn: B.qp.qpn, reason: 'FIN received' }],
    'a clean close is no qp-error',
  );
  assert.is(p.b.graph.errorCount('trp-input', 'fin'), 1);
  // The port is free again and the objects can go.
  p.a.rdma.destroyCq(A.scq);
  p.a.rdma.destroyCq(A.rcq);
  p.a.rdma.deregMr(m);
  p.a.rdma.destroyPd(A.pd);
  await finish(p);
});

test('disconnect: FIN to the peer, both in ERROR, the peer flushes its receives and outstanding sends', async () => {
  const r = rig();
  const { p, A, B } = r;
  recvs(p.a, A, 2, 16, 200);
  recvs(p.b, B, 2, 16);
  p.a.rdma.disconnect(A.qp);
  assert.is(A.qp.stateName, 'error');
  assert.equal(A.rcq.poll(5), [wc(200, A.qp.qpn, 'flushed', 'recv'), wc(201, A.qp.qpn, 'flushed', 'recv')]);
  assert.equal(await waitCompletions(B.rcq, 2), [
    wc(100, B.qp.qpn, 'flushed', 'recv'),
    wc(101, B.qp.qpn, 'flushed', 'recv'),
  ]);
  assert.is(B.qp.stateName, 'error');
  assert.ok(r.evB.some((e) => e.type === 'qp-disconnected' && e.qpn === B.qp.qpn));
  assert.equal(r.evA, [{ type: 'qp-error', qpn: A.qp.qpn, reason: 'disconnected' }]);
  // B posting now completes flushed at once.
  p.b.rdma.postSend(B.qp, { wrId: 'late', opcode: 'send' });
  assert.equal(B.scq.poll(2), [wc('late', B.qp.qpn, 'flushed', 'send')]);
  // A second disconnect sends no second FIN.
  p.a.rdma.disconnect(A.qp);
  await settle(20);
  assert.is(p.b.graph.errorCount('trp-input', 'fin'), 1);
  await finish(p);
});

// ------------------------------------------------------------------ QP state machine

test('QP state machine: IB transitions, post rules per state, ERROR flushes at post, reset and reconnect work', async () => {
  const p = trackedStacks();
  const A = makeEnds(p.a),
    B = makeEnds(p.b);
  const ra = p.a.rdma;
  const m = mem(p.a, A.pd, 64, RW, pattern(64, 9));
  const q = A.qp;
  assert.is(q.stateName, 'reset');
  const bad = (to: string) =>
    throwsVerbs(
      () => ra.modifyQp(q, { state: to as 'rts' }),
      'state',
      new RegExp(`qp ${q.qpn}: cannot go from ${q.stateName} to ${to}`),
    );
  bad('rtr');
  bad('rts');
  bad('sqd');
  throwsVerbs(
    () => ra.modifyQp(q, { state: 'bogus' as 'rts' }),
    'invalid',
    /qp state must be one of reset, init, rtr, rts, sqd, sqe, error, got "bogus"/,
  );
  throwsVerbs(() => ra.postRecv(q, { wrId: 1, sg: [{ mr: m, offset: 0, length: 8 }] }), 'state', /is in RESET/);
  throwsVerbs(() => ra.postSend(q, { wrId: 1, opcode: 'send' }), 'state', /is in reset: post send needs RTS/);
  ra.modifyQp(q, { state: 'init' });
  ra.modifyQp(q, { state: 'init' });
  bad('rts');
  bad('sqd');
  throwsVerbs(() => ra.postSend(q, { wrId: 1, opcode: 'send' }), 'state', /is in init: post send needs RTS/);
  ra.postRecv(q, { wrId: 'early', sg: [{ mr: m, offset: 0, length: 8 }] }); // allowed in INIT
  throwsVerbs(() => ra.modifyQp(q, { state: 'rtr' }), 'invalid', /RTR needs remote \{address, port\}/);
  throwsVerbs(
    () => ra.modifyQp(q, { state: 'rtr', remote: { address: '192.168.9.9', port: 1 }, rqPsn: 0 }),
    'invalid',
    /no route to 192\.168\.9\.9/,
  );
  throwsVerbs(
    () => ra.modifyQp(q, { state: 'rtr', remote: { address: 'nope', port: 1 }, rqPsn: 0 }),
    'invalid',
    /remote address/,
  );
  throwsVerbs(
    () => ra.modifyQp(q, { state: 'rtr', remote: { address: IP_B, port: 70000 }, rqPsn: 0 }),
    'invalid',
    /remote port must be an integer in 1\.\.65535, got 70000/,
  );
  throwsVerbs(
    () => ra.modifyQp(q, { state: 'rtr', remote: { address: IP_B, port: B.qp.qpn } }),
    'invalid',
    /RTR needs rqPsn, the peer QP's initial PSN/,
  );
  throwsVerbs(
    () => ra.modifyQp(q, { state: 'rtr', remote: { address: IP_B, port: B.qp.qpn }, rqPsn: 2 ** 32 }),
    'invalid',
    /rqPsn must be an integer in 0\.\.4294967295/,
  );
  assert.is(q.stateName, 'init', 'a refused transition changes nothing');
  ra.modifyQp(q, { state: 'rtr', remote: { address: IP_B, port: B.qp.qpn }, rqPsn: B.qp.isn });
  bad('init');
  bad('sqd');
  throwsVerbs(() => ra.postSend(q, { wrId: 1, opcode: 'send' }), 'state', /is in rtr: post send needs RTS/);
  ra.modifyQp(q, { state: 'rts' });
  bad('init');
  bad('rtr');
  ra.modifyQp(q, { state: 'rts' });
  // B up: a send works; SQD holds new work until RTS again.
  p.b.rdma.modifyQp(B.qp, { state: 'init' });
  p.b.rdma.modifyQp(B.qp, { state: 'rtr', remote: { address: IP_A, port: q.qpn }, rqPsn: q.isn });
  p.b.rdma.modifyQp(B.qp, { state: 'rts' });
  const bm = mem(p.b, B.pd, 64);
  for (let i = 0; i < 3; i++) p.b.rdma.postRecv(B.qp, { wrId: i, sg: [{ mr: bm, offset: i * 16, length: 16 }] });
  ra.modifyQp(q, { state: 'sqd' });
  bad('init');
  ra.postSend(q, { wrId: 'held', opcode: 'send', sg: [{ mr: m, offset: 0, length: 16 }] });
  await settle(30);
  assert.is(B.rcq.length, 0, 'SQD starts nothing new');
  assert.is(A.scq.length, 0);
  ra.modifyQp(q, { state: 'rts' });
  assert.equal(await waitCompletions(A.scq, 1), [wc('held', q.qpn, 'success', 'send', 16)]);
  assert.equal(await waitCompletions(B.rcq, 1), [wc(0, B.qp.qpn, 'success', 'recv', 16)]);
  // ERROR: posts complete flushed at once; only reset (or error) leaves it. The user's own
  // move to ERROR is no error: no qp-error event (a librdmacm program's disconnect does it).
  const events: string[] = [];
  ra.onEvent = (e) => events.push(e.type);
  ra.modifyQp(q, { state: 'error' });
  assert.equal(events, [], 'no qp-error for a QP its user moved to ERROR');
  assert.equal(A.rcq.poll(5), [wc('early', q.qpn, 'flushed', 'recv')]);
  for (const to of ['init', 'rtr', 'rts', 'sqd', 'sqe']) bad(to);
  ra.modifyQp(q, { state: 'error' });
  ra.postSend(q, {
    wrId: 'e1',
    opcode: 'write',
    sg: [{ mr: m, offset: 0, length: 8 }],
    remote: { stag: 5, offset: 0 },
  });
  ra.postRecv(q, { wrId: 'e2', sg: [{ mr: m, offset: 0, length: 8 }] });
  assert.equal(A.scq.poll(5), [wc('e1', q.qpn, 'flushed', 'write')]);
  assert.equal(A.rcq.poll(5), [wc('e2', q.qpn, 'flushed', 'recv')]);
  assert.equal(q.sqDepth, 0);
  // reset -> init -> rtr -> rts again (both sides), and traffic flows from fresh sequence numbers.
  const oldIsn = q.isn;
  ra.modifyQp(q, { state: 'reset' });
  assert.is(q.stateName, 'reset');
  assert.equal([q.sndNxt, q.rcvNxt, q.sqDepth, q.rqDepth], [0, 0, 0, 0]);
  assert.is.not(q.isn, oldIsn, 'a new random initial PSN after reset');
  p.b.rdma.modifyQp(B.qp, { state: 'reset' });
  assert.equal(await waitCompletions(B.rcq, 2), [
    wc(1, B.qp.qpn, 'flushed', 'recv'),
    wc(2, B.qp.qpn, 'flushed', 'recv'),
  ]);
  connectManual(p.a, q, p.b, B.qp);
  p.b.rdma.postRecv(B.qp, { wrId: 'again', sg: [{ mr: bm, offset: 0, length: 64 }] });
  ra.postSend(q, { wrId: 'again', opcode: 'send', sg: [{ mr: m, offset: 0, length: 64 }] });
  assert.equal(await waitCompletions(A.scq, 1), [wc('again', q.qpn, 'success', 'send', 64)]);
  assert.equal(await waitCompletions(B.rcq, 1), [wc('again', B.qp.qpn, 'success', 'recv', 64)]);
  assert.equal(bm.memory, m.memory);
  assert.is(q.stateName, 'rts');
  await finish(p);
});

// ------------------------------------------------------------------ local protection

test('local protection: a send SGE outside its MR, from another PD or deregistered completes local-protection-error', async () => {
  const cases: [string, (r: Rig) => SendRequest][] = [
    [
      'outside its MR',
      (r) => ({ wrId: 'bad', opcode: 'send', sg: [{ mr: mem(r.p.a, r.A.pd, 16), offset: 8, length: 16 }] }),
    ],
    [
      'from another PD',
      (r) => ({
        wrId: 'bad',
        opcode: 'send',
        sg: [{ mr: mem(r.p.a, r.p.a.rdma.createPd(), 16), offset: 0, length: 16 }],
      }),
    ],
    [
      'deregistered',
      (r) => {
        const m = mem(r.p.a, r.A.pd, 16);
        r.p.a.rdma.deregMr(m);
        return { wrId: 'bad', opcode: 'write', sg: [{ mr: m, offset: 0, length: 16 }], remote: { stag: 1, offset: 0 } };
      },
    ],
    [
      'a read into memory without local-write',
      (r) => ({
        wrId: 'bad',
        opcode: 'read',
        sg: [{ mr: mem(r.p.a, r.A.pd, 16, ['remote-read']), offset: 0, length: 16 }],
        remote: { stag: 1, offset: 0 },
      }),
    ],
    [
      'an atomic result without local-write',
      (r) => ({
        wrId: 'bad',
        opcode: 'swap',
        sg: [{ mr: mem(r.p.a, r.A.pd, 8, []), offset: 0, length: 8 }],
        remote: { stag: 1, offset: 0 },
        atomic: { swap: 1n },
      }),
    ],
  ];
  for (const [what, req] of cases) {
    const r = rig();
    const { p, A, B } = r;
    const ok = mem(p.a, A.pd, 16);
    recvs(p.b, B, 2, 16);
    p.a.rdma.postSend(A.qp, { wrId: 'first', opcode: 'send', sg: [{ mr: ok, offset: 0, length: 16 }] });
    const bad = req(r);
    p.a.rdma.postSend(A.qp, bad);
    p.a.rdma.postSend(A.qp, { wrId: 'after', opcode: 'send', sg: [{ mr: ok, offset: 0, length: 16 }] });
    const got = await waitCompletions(A.scq, 3);
    assert.equal(
      got,
      [
        wc('first', A.qp.qpn, 'success', 'send', 16),
        wc('bad', A.qp.qpn, 'local-protection-error', bad.opcode === 'swap' ? 'swap' : bad.opcode),
        wc('after', A.qp.qpn, 'flushed', 'send'),
      ],
      what,
    );
    assert.is(A.qp.stateName, 'error', what);
    assert.equal(
      r.evA,
      [{ type: 'qp-error', qpn: A.qp.qpn, reason: 'local protection error in a send work request' }],
      what,
    );
    // Nothing of it reached B: one receive used, the other still posted.
    assert.equal(await waitCompletions(B.rcq, 1), [wc(100, B.qp.qpn, 'success', 'recv', 16)], what);
    assert.is(B.qp.rqDepth, 1, what);
    assert.is(p.b.rdma.core.counters.terminatesSent, 0, what);
    await finish(p);
  }
});

test('local protection on receives: no local-write, outside the MR, another PD throw at post', async () => {
  const r = rig();
  const { p, A } = r;
  const ro = mem(p.a, A.pd, 16, ['remote-read']);
  throwsVerbs(
    () => p.a.rdma.postRecv(A.qp, { wrId: 1, sg: [{ mr: ro, offset: 0, length: 8 }] }),
    'invalid',
    new RegExp(`recv: sg\\[0\\]: mr ${ro.handle} lacks local-write`),
  );
  const m = mem(p.a, A.pd, 16);
  throwsVerbs(
    () =>
      p.a.rdma.postRecv(A.qp, {
        wrId: 1,
        sg: [
          { mr: m, offset: 0, length: 8 },
          { mr: m, offset: 10, length: 8 },
        ],
      }),
    'invalid',
    new RegExp(`recv: sg\\[1\\]: \\[10, 18\\) is outside mr ${m.handle} \\(length 16\\)`),
  );
  const other = mem(p.a, p.a.rdma.createPd(), 16);
  throwsVerbs(
    () => p.a.rdma.postRecv(A.qp, { wrId: 1, sg: [{ mr: other, offset: 0, length: 8 }] }),
    'invalid',
    new RegExp(`mr ${other.handle} is not valid in this PD`),
  );
  assert.is(A.qp.rqDepth, 0, 'nothing was posted');
  assert.is(A.qp.stateName, 'rts', 'the QP is unharmed');
  await finish(p);
});

// ------------------------------------------------------------------ bad input

test('bad input: every VerbsError says what is wrong', async () => {
  const p = trackedStacks({ rdma: { maxMessage: 4096 } });
  const ra = p.a.rdma;
  const A = makeEnds(p.a, { maxInline: 32, maxSge: 2 });
  connectManual(p.a, A.qp, p.b, makeEnds(p.b).qp);
  const q = A.qp;
  const m = mem(p.a, A.pd, 8192);
  const post = (req: Partial<SendRequest>) => () => ra.postSend(q, { wrId: 1, opcode: 'send', ...req } as SendRequest);
  // Work requests.
  throwsVerbs(
    post({ opcode: 'jump' as 'send' }),
    'invalid',
    /opcode must be one of send, send-with-solicited, send-with-invalidate, send-with-imm, write, write-with-imm, bind-mw, local-invalidate, read, fetch-add, swap, cmp-swap, got "jump"/,
  );
  throwsVerbs(
    post({ opcode: 'write', sg: [{ mr: m, offset: 0, length: 8 }] }),
    'invalid',
    /write needs remote \{stag, offset\}/,
  );
  throwsVerbs(
    post({ opcode: 'read', sg: [{ mr: m, offset: 0, length: 8 }], remote: { stag: -1, offset: 0 } }),
    'invalid',
    /remote\.stag must be an integer in 0\.\.4294967295, got -1/,
  );
  throwsVerbs(
    post({ opcode: 'read', sg: [{ mr: m, offset: 0, length: 8 }], remote: { stag: 1, offset: 1.5 } }),
    'invalid',
    /remote\.offset must be an integer/,
  );
  throwsVerbs(
    post({ opcode: 'fetch-add', sg: [{ mr: m, offset: 0, length: 8 }], remote: { stag: 1, offset: 0 } }),
    'invalid',
    /atomic\.add must be a 64-bit unsigned integer/,
  );
  throwsVerbs(
    post({
      opcode: 'fetch-add',
      sg: [{ mr: m, offset: 0, length: 8 }],
      remote: { stag: 1, offset: 0 },
      atomic: { add: 5 as unknown as bigint },
    }),
    'invalid',
    /atomic\.add must be a 64-bit unsigned integer/,
  );
  throwsVerbs(
    post({
      opcode: 'swap',
      sg: [{ mr: m, offset: 0, length: 8 }],
      remote: { stag: 1, offset: 0 },
      atomic: { swap: -1n },
    }),
    'invalid',
    /atomic\.swap must be a 64-bit unsigned integer/,
  );
  throwsVerbs(
    post({
      opcode: 'swap',
      sg: [{ mr: m, offset: 0, length: 8 }],
      remote: { stag: 1, offset: 0 },
      atomic: { swap: 1n << 64n },
    }),
    'invalid',
    /atomic\.swap/,
  );
  throwsVerbs(
    post({
      opcode: 'cmp-swap',
      sg: [{ mr: m, offset: 0, length: 8 }],
      remote: { stag: 1, offset: 0 },
      atomic: { swap: 1n },
    }),
    'invalid',
    /atomic\.compare must be a 64-bit unsigned integer/,
  );
  throwsVerbs(
    post({
      opcode: 'fetch-add',
      sg: [{ mr: m, offset: 0, length: 4 }],
      remote: { stag: 1, offset: 0 },
      atomic: { add: 1n },
    }),
    'invalid',
    /fetch-add needs exactly 8 bytes of local buffer for the original value, got 4/,
  );
  throwsVerbs(
    post({ opcode: 'write-with-imm', sg: [], remote: { stag: 1, offset: 0 } }),
    'invalid',
    /imm must be an integer in 0\.\.4294967295, got undefined/,
  );
  throwsVerbs(post({ opcode: 'send-with-invalidate', sg: [] }), 'invalid', /invalidateStag must be an integer/);
  throwsVerbs(
    post({ inline: true, sg: [{ mr: m, offset: 0, length: 33 }] }),
    'too-large',
    /inline data of 33 bytes exceeds the QP's maxInline 32/,
  );
  throwsVerbs(
    post({ inline: true, opcode: 'read', sg: [{ mr: m, offset: 0, length: 8 }], remote: { stag: 1, offset: 0 } }),
    'invalid',
    /read cannot be inline/,
  );
  throwsVerbs(
    post({
      sg: [
        { mr: m, offset: 0, length: 4096 },
        { mr: m, offset: 0, length: 1 },
      ],
    }),
    'too-large',
    /message of 4097 bytes exceeds the maximum 4096/,
  );
  throwsVerbs(
    post({ sg: [1, 2, 3].map(() => ({ mr: m, offset: 0, length: 1 })) }),
    'invalid',
    /send: 3 SGEs, the queue allows 2/,
  );
  throwsVerbs(
    post({ sg: [{ mr: {} as Mr, offset: 0, length: 1 }] }),
    'invalid',
    /send: sg\[0\]\.mr is not a memory region/,
  );
  throwsVerbs(
    post({ sg: [{ mr: m, offset: -1, length: 1 }] }),
    'invalid',
    /send: sg\[0\]\.offset must be an integer in 0\.\.4294967296, got -1/,
  );
  throwsVerbs(post({ sg: [{ mr: m, offset: 0, length: NaN }] }), 'invalid', /sg\[0\]\.length must be an integer/);
  throwsVerbs(post({ sg: 'x' as unknown as [] }), 'invalid', /send: sg must be a list/);
  throwsVerbs(
    () => ra.postRecv(q, { wrId: 1, sg: [1, 2, 3].map(() => ({ mr: m, offset: 0, length: 1 })) }),
    'invalid',
    /recv: 3 SGEs, the queue allows 2/,
  );
  assert.is(q.sqDepth, 0, 'no refused request took a slot');
  assert.is(q.stateName, 'rts', 'and the QP is unharmed');
  // Objects.
  throwsVerbs(
    () => ra.regMr(A.pd, 16, ['remote-jump']),
    'invalid',
    /access: unknown access flag "remote-jump" \(expected local-write, remote-write, remote-read, remote-atomic, remote-invalidate, mw-bind\)/,
  );
  throwsVerbs(
    () => ra.regMr(A.pd, 16, ['remote-write']),
    'invalid',
    /remote-write and remote-atomic need local-write as well/,
  );
  throwsVerbs(() => ra.regMr(A.pd, -1, RW), 'invalid', /mr length must be an integer in 0\.\.2\^31, got -1/);
  throwsVerbs(() => ra.regMr(A.pd, 2 ** 31 + 1, RW), 'too-large', /mr length/);
  throwsVerbs(() => ra.createCq(0), 'invalid', /cq depth must be an integer in 1\.\.1048576, got 0/);
  throwsVerbs(
    () => ra.createQp({ pd: A.pd, sendCq: A.scq, recvCq: A.rcq, maxSendWr: 0, maxRecvWr: 1 }),
    'invalid',
    /maxSendWr must be an integer in 1\.\.16384, got 0/,
  );
  throwsVerbs(
    () => ra.createQp({ pd: A.pd, sendCq: A.scq, recvCq: A.rcq, maxSendWr: 1, maxRecvWr: 1, ird: 129 }),
    'invalid',
    /ird must be an integer in 1\.\.128, got 129/,
  );
  throwsVerbs(
    () => ra.createQp({ pd: A.pd, sendCq: A.scq, recvCq: A.rcq, maxSendWr: 1, maxRecvWr: 1, port: q.qpn }),
    'busy',
    new RegExp(`port ${q.qpn} already has a QP`),
  );
  throwsVerbs(
    () => ra.createQp({ pd: A.pd, sendCq: A.scq, recvCq: A.rcq, maxSendWr: 1, maxRecvWr: 1, port: 80 }),
    'invalid',
    /qp port \(port-range 20000\.\.29999\) must be an integer in 20000\.\.29999, got 80/,
  );
  throwsVerbs(
    () => ra.createQp({ pd: A.pd, sendCq: A.scq, recvCq: A.rcq, maxSendWr: 1, maxRecvWr: 1, address: '1.2.3' }),
    'invalid',
    /qp address/,
  );
  throwsVerbs(() => ra.modifyQp(q, { state: 'rts', ird: 0 }), 'invalid', /ird must be an integer in 1\.\.16, got 0/);
  throwsVerbs(() => ra.qp(1), 'not-found', /no QP 1/);
  // Destroying what is in use, or twice.
  throwsVerbs(() => ra.destroyPd(A.pd), 'busy', new RegExp(`pd ${A.pd.handle} is in use by 2 MR/QP/SRQ`));
  throwsVerbs(() => ra.destroyCq(A.scq), 'busy', new RegExp(`cq ${A.scq.handle} is in use by 1 QP\\(s\\)`));
  const srq = ra.createSrq(A.pd, 4);
  const sq = ra.createQp({ pd: A.pd, sendCq: A.scq, recvCq: A.rcq, srq, maxSendWr: 1, maxRecvWr: 1 });
  throwsVerbs(() => ra.destroySrq(srq), 'busy', new RegExp(`srq ${srq.handle} is in use by 1 QP\\(s\\)`));
  throwsVerbs(
    () => ra.postRecv(sq, { wrId: 1 }),
    'invalid',
    new RegExp(`qp ${sq.qpn} receives from srq ${srq.handle}: post there`),
  );
  throwsVerbs(
    () => ra.postSrqRecv(srq, { wrId: 1, sg: [{ mr: mem(p.a, ra.createPd(), 8), offset: 0, length: 8 }] }),
    'invalid',
    /srq recv: sg\[0\]: mr \d+ is not valid in this PD/,
  );
  for (let i = 0; i < 4; i++) ra.postSrqRecv(srq, { wrId: i, sg: [{ mr: m, offset: i * 8, length: 8 }] });
  throwsVerbs(
    () => ra.postSrqRecv(srq, { wrId: 5 }),
    'resource',
    new RegExp(`srq ${srq.handle} is full \\(maxWr 4\\)`),
  );
  throwsVerbs(() => ra.modifySrq(srq, 5), 'invalid', /srq limit must be an integer in 0\.\.4, got 5/);
  ra.destroyQp(sq);
  ra.destroySrq(srq);
  throwsVerbs(() => ra.destroySrq(srq), 'not-found', /already destroyed/);
  throwsVerbs(() => ra.postSrqRecv(srq, { wrId: 1 }), 'not-found', /is destroyed/);
  const pd2 = ra.createPd();
  const cq2 = ra.createCq(4);
  ra.destroyPd(pd2);
  ra.destroyCq(cq2);
  throwsVerbs(() => ra.destroyPd(pd2), 'not-found', new RegExp(`pd ${pd2.handle} is already destroyed`));
  throwsVerbs(() => ra.destroyCq(cq2), 'not-found', new RegExp(`cq ${cq2.handle} is already destroyed`));
  throwsVerbs(() => ra.regMr(pd2, 8, RW), 'not-found', /is destroyed/);
  throwsVerbs(
    () => ra.createQp({ pd: A.pd, sendCq: cq2, recvCq: A.rcq, maxSendWr: 1, maxRecvWr: 1 }),
    'not-found',
    /completion queue is destroyed/,
  );
  const m2 = mem(p.a, A.pd, 8);
  ra.deregMr(m2);
  throwsVerbs(() => ra.deregMr(m2), 'not-found', new RegExp(`mr ${m2.handle} is not registered`));
  // Connection management input.
  throwsVerbs(
    () => ra.listen(0, () => ({ reject: true })),
    'invalid',
    /listen port must be an integer in 1\.\.65535, got 0/,
  );
  ra.listen(7000, () => ({ reject: true }));
  throwsVerbs(() => ra.listen(7000, () => ({ reject: true })), 'busy', /already listening on port 7000/);
  throwsVerbs(() => ra.listen(q.qpn, () => ({ reject: true })), 'busy', new RegExp(`port ${q.qpn} has a QP`));
  throwsVerbs(() => ra.unlisten(7001), 'not-found', /not listening on port 7001/);
  throwsVerbs(() => ra.connect(q, IP_B, 7000), 'state', /connect needs a QP in INIT, it is rts/);
  const fresh = makeEnds(p.a, { pd: A.pd, sendCq: A.scq, recvCq: A.rcq });
  throwsVerbs(
    () => ra.connect(fresh.qp, IP_B, 7000, { privateData: new Uint8Array(513) }),
    'too-large',
    /private data is at most 512 bytes, got 513/,
  );
  throwsVerbs(() => ra.connect(fresh.qp, '10.0.0', 7000), 'invalid', /connect address/);
  ra.unlisten(7000);
  await finish(p);
});

test.run();
