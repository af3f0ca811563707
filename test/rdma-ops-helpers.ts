/**
 * End-to-end tests of every RDMA operation between two stacks in one process (twoStacks: two
 * graphs joined by a pipe pair, or by a memif pair), registered by `rdmaOpsSuite(link)`
 * (test/rdma-ops.test.ts runs them all over a pipe, test/memif-rdma.test.ts a subset over
 * memif): Send and its Solicited / Invalidate variants, Write,
 * Write with Immediate, Read, the three Atomics, signaled and unsignaled and inline work
 * requests, message sizes around both segment payloads (untagged and tagged) up to 16 MiB,
 * gather/scatter lists, a shared receive queue with its limit event, a burst of 1000 WRs,
 * zero-length operations, QP counters and RTT, and the in-band connection manager.
 *
 * Data is checked byte for byte against deterministic patterns, guard bytes around every
 * destination must stay untouched, completions are compared field by field (an exact object:
 * no field missing, none extra), and every test ends with the buffer pool whole again.
 */
import { suite } from './harness.ts';
import * as assert from 'uvu/assert';
import { performance } from 'node:perf_hooks';
import {
  connectManual,
  type Ends,
  IP_A,
  IP_B,
  type Link,
  makeEnds,
  type Pair,
  pattern,
  settle,
  type Stack,
  twoStacks,
  waitCompletions,
} from './rdma-helpers.ts';
import type { Completion, Cq, Mr } from '../nodes/rdma/verbs.ts';
import type { Qp } from '../nodes/rdma/qp.ts';
import type { RdmaEvent } from '../nodes/rdma/core.ts';
import type { QpInit, RdmaOptions, SendRequest } from '../nodes/rdma/stack.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
/** The untagged segment payload on a link of `mtu`: IPv4 20 + UDP 8 + TRP 10 + untagged DDP 18 (tagged: 14). */
const untaggedPayload = (mtu: number) => mtu - 20 - 8 - 10 - 18;
const GUARD = 64;
const GUARD_BYTE = 0xee;

const RW = ['local-write', 'remote-write', 'remote-read'];
const ATOMIC = ['local-write', 'remote-atomic'];

// ------------------------------------------------------------------ harness

interface Ctx {
  p: Pair;
  a: Stack;
  b: Stack;
  A: Ends;
  B: Ends;
  /** Untagged segment payload (queryQp(qp).mtu) and tagged (4 bytes more). */
  mtu: number;
  mtuT: number;
  eventsA: RdmaEvent[];
  eventsB: RdmaEvent[];
}

/**
 * Two stacks with a manually connected QP pair (A's and B's), run `body`, then close and check
 * that every buffer went back to the pool. The pair is closed even when the body fails.
 */
type PairOptions = {
  rdma?: RdmaOptions;
  buffers?: number;
  connect?: boolean;
  init?: Partial<QpInit>;
  mtu?: number;
  udpChecksum?: boolean;
};
/** Retransmission timers far above a VM's stalls, for tests that count packets exactly. */
const QUIET_TIMERS: PairOptions = { rdma: { trp: { rtoMinMs: 250, rtoInitMs: 1000, rtoMaxMs: 2000 } } };

async function withPairOn(link: Link, body: (c: Ctx) => Promise<void>, opts: PairOptions = {}): Promise<void> {
  const p = twoStacks({ rdma: opts.rdma, buffers: opts.buffers, link, mtu: opts.mtu, udpChecksum: opts.udpChecksum });
  const eventsA: RdmaEvent[] = [],
    eventsB: RdmaEvent[] = [];
  p.a.rdma.onEvent = (e) => eventsA.push(e);
  p.b.rdma.onEvent = (e) => eventsB.push(e);
  let ok = false;
  try {
    await p.ready;
    const A = makeEnds(p.a, opts.init),
      B = makeEnds(p.b, opts.init);
    if (opts.connect !== false) connectManual(p.a, A.qp, p.b, B.qp);
    const mtu = opts.connect !== false ? p.a.rdma.queryQp(A.qp).segmentSize : untaggedPayload(opts.mtu ?? 1500);
    await body({ p, a: p.a, b: p.b, A, B, mtu, mtuT: mtu + 4, eventsA, eventsB });
    ok = true;
  } finally {
    p.close();
  }
  if (ok) assert.is(p.lost(), 0, 'every buffer is back in its pool after close');
}

/** Byte-for-byte equality, reporting the first difference (fast on 16 MiB). */
function sameBytes(actual: Uint8Array, expected: Uint8Array, what: string): void {
  assert.is(actual.length, expected.length, `${what}: length`);
  const x = Buffer.from(actual.buffer, actual.byteOffset, actual.length);
  const y = Buffer.from(expected.buffer, expected.byteOffset, expected.length);
  if (x.equals(y)) return;
  let i = 0;
  while (x[i] === y[i]) i++;
  assert.unreachable(
    `${what}: byte ${i} of ${actual.length} is 0x${x[i].toString(16)}, expected 0x${y[i].toString(16)}`,
  );
}

function allBytes(b: Uint8Array, value: number, what: string): void {
  const i = b.findIndex((x) => x !== value);
  if (i >= 0)
    assert.unreachable(`${what}: byte ${i} is 0x${b[i].toString(16)}, expected untouched 0x${value.toString(16)}`);
}

/** A destination filled with the guard byte; `region` is where data must land. */
function guarded(mr: Mr, off: number, len: number): void {
  mr.memory.fill(GUARD_BYTE, Math.max(0, off - GUARD), Math.min(mr.length, off + len + GUARD));
}

function checkGuards(mr: Mr, off: number, len: number, what: string): void {
  allBytes(mr.memory.subarray(Math.max(0, off - GUARD), off), GUARD_BYTE, `${what}: guard before`);
  allBytes(mr.memory.subarray(off + len, Math.min(mr.length, off + len + GUARD)), GUARD_BYTE, `${what}: guard after`);
}

async function one(cq: Cq, ms = 5000): Promise<Completion> {
  const [c] = await waitCompletions(cq, 1, ms);
  return c;
}

/** No completion arrives on `cq` within `ms`. */
async function none(cq: Cq, ms = 30): Promise<void> {
  await settle(ms);
  assert.is(cq.length, 0, `no completion expected, got ${JSON.stringify(cq.poll(4))}`);
}

const segments = (len: number, seg: number) => Math.max(1, Math.ceil(len / seg));

function sent(s: Stack, qp: Qp): number {
  const c = s.rdma.queryQp(qp).counters;
  return c.txPackets - c.retransmits;
}

function u64(mr: Mr, off: number): bigint {
  return mr.view.getBigUint64(off, true);
}

// ------------------------------------------------------------------ the tests

/**
 * The tests over `link`, in a uvu suite of their own (run it with `.run()`); `only`: just the
 * tests whose names start with one of these; `linkMtu`: the link's MTU (default 1500; larger than
 * a 2048-byte buffer, every segment of a message is a chain of buffers); `except`: not the tests
 * whose names start with one of these (sizes laid out for a 1500-byte MTU); `udpChecksum`: memif's
 * (false: none, as between two data planes, which a memif server's in-place receive needs).
 */
export function rdmaOpsSuite(
  link: Link,
  only?: readonly string[],
  linkMtu = 1500,
  except: readonly string[] = [],
  udpChecksum?: boolean,
): ReturnType<typeof suite> {
  const all = suite(
    `rdma-ops over ${link}${linkMtu === 1500 ? '' : ` at MTU ${linkMtu}`}${udpChecksum === false ? ' without UDP checksums' : ''}`,
  );
  const MTU_UNTAGGED = untaggedPayload(linkMtu),
    MTU_TAGGED = MTU_UNTAGGED + 4;
  const test = (name: string, fn: () => unknown): void => {
    if ((only === undefined || only.some((o) => name.startsWith(o))) && !except.some((o) => name.startsWith(o)))
      all(name, fn as () => Promise<void>);
  };
  const withPair = (body: (c: Ctx) => Promise<void>, opts: PairOptions = {}): Promise<void> =>
    withPairOn(link, body, { mtu: linkMtu, udpChecksum, ...opts });

  // ------------------------------------------------------------------ the QP pair itself

  test('a manually connected pair: RTS both ways, segment payloads from the link MTU', () =>
    withPair(async ({ a, b, A, B, mtu }) => {
      const qa = a.rdma.queryQp(A.qp),
        qb = b.rdma.queryQp(B.qp);
      assert.is(qa.state, 'rts');
      assert.is(qb.state, 'rts');
      assert.equal(qa.remote, { address: IP_B, port: B.qp.qpn });
      assert.equal(qb.remote, { address: IP_A, port: A.qp.qpn });
      assert.is(qa.qpn, A.qp.qpn);
      assert.is(mtu, MTU_UNTAGGED, `untagged payload = ${linkMtu} - 20 - 8 - 10 - 18 (whatever the buffer size)`);
      assert.is(qb.segmentSize, MTU_UNTAGGED);
      assert.is(A.qp.mtuTagged, MTU_TAGGED, 'tagged segments carry 4 bytes more');
    }));

  // ------------------------------------------------------------------ sizes

  /** Sizes across both segment boundaries, up to 16 MiB. */
  function sizes(mtu: number, mtuT: number): number[] {
    return [0, 1, mtu - 1, mtu, mtu + 1, mtuT - 1, mtuT, mtuT + 1, 3 * mtu + 7, 1 * MiB, 16 * MiB];
  }

  const timings: string[] = [];
  function timed(what: string, len: number, ms: number): void {
    if (len >= MiB)
      timings.push(`${what} ${len / MiB} MiB: ${ms.toFixed(0)} ms (${(len / MiB / (ms / 1000)).toFixed(0)} MiB/s)`);
  }

  test('send: sizes 0, 1, MTU-1, MTU, MTU+1 (both boundaries), 1 MiB, 16 MiB, byte for byte', () =>
    withPair(async ({ a, b, A, B, mtu, mtuT }) => {
      const max = 16 * MiB;
      const src = a.rdma.regMr(A.pd, pattern(max + 64, 11), []);
      const dst = b.rdma.regMr(B.pd, max + 2 * GUARD + 64, ['local-write']);
      let k = 0;
      for (const len of sizes(mtu, mtuT)) {
        k++;
        const so = k % 5,
          ro = GUARD + (k % 3); // unaligned offsets on both sides
        guarded(dst, ro, len + 16);
        const wrR = k % 2 ? `recv-${len}` : 1000 + k,
          wrS = k % 2 ? 2000 + k : `send-${len}`;
        const txA = sent(a, A.qp),
          rxB = b.rdma.queryQp(B.qp).counters.rxPackets;
        b.rdma.postRecv(B.qp, { wrId: wrR, sg: [{ mr: dst, offset: ro, length: len + 16 }] }); // room to spare
        const t0 = performance.now();
        a.rdma.postSend(A.qp, { wrId: wrS, opcode: 'send', sg: [{ mr: src, offset: so, length: len }] });
        const r = await one(B.rcq, 20000);
        const s = await one(A.scq, 20000);
        timed('send', len, performance.now() - t0);
        assert.equal(
          r,
          { wrId: wrR, qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: len },
          `recv completion, ${len} bytes`,
        );
        assert.equal(
          s,
          { wrId: wrS, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: len },
          `send completion, ${len} bytes`,
        );
        sameBytes(dst.memory.subarray(ro, ro + len), src.memory.subarray(so, so + len), `send of ${len}`);
        checkGuards(dst, ro, len + 16, `send of ${len}`); // the spare 16 bytes are guard bytes too
        assert.is(
          sent(a, A.qp) - txA,
          segments(len, mtu),
          `send of ${len}: ${segments(len, mtu)} segments of at most ${mtu}`,
        );
        assert.ok(b.rdma.queryQp(B.qp).counters.rxPackets - rxB >= segments(len, mtu));
      }
      assert.is(A.scq.length + A.rcq.length + B.scq.length + B.rcq.length, 0, 'no other completions');
    }));

  /**
   * Write (A's bytes into B's MR) or Read (B's MR into A's) of every size: placed exactly at the
   * offset, segmented at the tagged payload (Write segments from A, Read Responses from B).
   */
  async function taggedSweep({ a, b, A, B, mtu, mtuT }: Ctx, op: 'write' | 'read'): Promise<void> {
    const max = 16 * MiB;
    const write = op === 'write';
    const src = write
      ? a.rdma.regMr(A.pd, pattern(max + 64, 12), [])
      : b.rdma.regMr(B.pd, pattern(max + 64, 13), ['remote-read']);
    const dst = write
      ? b.rdma.regMr(B.pd, max + 2 * GUARD + 64, RW)
      : a.rdma.regMr(A.pd, max + 2 * GUARD + 64, ['local-write']);
    let k = 0;
    for (const len of sizes(mtu, mtuT)) {
      k++;
      const so = (k * 3) % 7,
        dof = GUARD + (k % 5); // unaligned offsets on both sides
      guarded(dst, dof, len);
      const wrId = k % 2 ? `${op}-${len}` : k * 10;
      const txA = sent(a, A.qp),
        txB = sent(b, B.qp);
      const [local, loff, remote, roff] = write ? [src, so, dst, dof] : [dst, dof, src, so];
      const t0 = performance.now();
      a.rdma.postSend(A.qp, {
        wrId,
        opcode: op,
        sg: [{ mr: local, offset: loff, length: len }],
        remote: { stag: remote.stag, offset: roff },
      });
      const c = await one(A.scq, 20000);
      timed(op, len, performance.now() - t0);
      assert.equal(
        c,
        { wrId, qpn: A.qp.qpn, status: 'success', opcode: op, byteLen: len },
        `${op} completion, ${len} bytes`,
      );
      sameBytes(dst.memory.subarray(dof, dof + len), src.memory.subarray(so, so + len), `${op} of ${len}`);
      checkGuards(dst, dof, len, `${op} of ${len}`);
      const n = segments(len, mtuT);
      assert.is(
        sent(a, A.qp) - txA,
        write ? n : 1,
        write ? `write of ${len}: ${n} tagged segments of at most ${mtuT}` : 'one Read Request',
      );
      assert.is(
        sent(b, B.qp) - txB,
        write ? 0 : n,
        write ? 'the target sends only pure ACKs' : `read of ${len}: ${n} Read Response segments of at most ${mtuT}`,
      );
    }
    assert.is(A.rcq.length + B.scq.length + B.rcq.length, 0, `a ${op} completes nothing but the requester's WR`);
  }

  test('write: sizes around both boundaries up to 16 MiB, placed at the remote offset only', () =>
    withPair((c) => taggedSweep(c, 'write')));

  test('read: sizes around both boundaries up to 16 MiB, responses segmented at the tagged payload', () =>
    withPair((c) => taggedSweep(c, 'read')));

  test("an MR with a base (a verbs program's virtual address): write, read and fetch-add address it at base + offset; below the base is out of bounds", () =>
    withPair(async ({ a, b, A, B }) => {
      const BASE = 0x7f12_3456_7000 + 24; // a user-space address, not page aligned
      const src = a.rdma.regMr(A.pd, pattern(4096, 17), ['local-write']);
      const dst = b.rdma.regMr(B.pd, 4096, [...RW, 'remote-atomic'], BASE);
      a.rdma.postSend(A.qp, {
        wrId: 'w',
        opcode: 'write',
        sg: [{ mr: src, offset: 0, length: 1000 }],
        remote: { stag: dst.stag, offset: BASE + 100 },
      });
      assert.equal(await one(A.scq), { wrId: 'w', qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 1000 });
      sameBytes(dst.memory.subarray(100, 1100), src.memory.subarray(0, 1000), 'written at TO - base');
      allBytes(dst.memory.subarray(0, 100), 0, 'nothing before');
      const back = a.rdma.regMr(A.pd, 1000, ['local-write']);
      a.rdma.postSend(A.qp, {
        wrId: 'r',
        opcode: 'read',
        sg: [{ mr: back, offset: 0, length: 1000 }],
        remote: { stag: dst.stag, offset: BASE + 100 },
      });
      assert.equal(await one(A.scq), { wrId: 'r', qpn: A.qp.qpn, status: 'success', opcode: 'read', byteLen: 1000 });
      sameBytes(back.memory, src.memory.subarray(0, 1000), 'read from TO - base');
      dst.view.setBigUint64(2048, 41n, true);
      a.rdma.postSend(A.qp, {
        wrId: 'f',
        opcode: 'fetch-add',
        atomic: { add: 1n },
        sg: [{ mr: back, offset: 0, length: 8 }],
        remote: { stag: dst.stag, offset: BASE + 2048 },
      } as SendRequest);
      assert.equal(await one(A.scq), { wrId: 'f', qpn: A.qp.qpn, status: 'success', opcode: 'fetch-add', byteLen: 8 });
      assert.is(dst.view.getBigUint64(2048, true), 42n, 'the atomic at TO - base');
      // An offset-addressed TO (what the REST API sends) is below this MR's base.
      a.rdma.postSend(A.qp, {
        wrId: 'low',
        opcode: 'write',
        sg: [{ mr: src, offset: 0, length: 8 }],
        remote: { stag: dst.stag, offset: 100 },
      });
      assert.is((await one(A.scq)).status, 'remote-access-error', 'below the base: out of bounds');
      allBytes(dst.memory.subarray(0, 100), 0, 'nothing written');
      assert.is(b.rdma.queryQp(B.qp).state, 'error');
    }));

  // ------------------------------------------------------------------ Send variants

  test('send-with-solicited: the receive completion is solicited; solicited: true on a send too', () =>
    withPair(async ({ a, b, A, B }) => {
      const src = a.rdma.regMr(A.pd, pattern(3000, 21), []);
      const dst = b.rdma.regMr(B.pd, 9000, ['local-write']);
      for (let i = 0; i < 3; i++)
        b.rdma.postRecv(B.qp, { wrId: `r${i}`, sg: [{ mr: dst, offset: i * 3000, length: 3000 }] });
      a.rdma.postSend(A.qp, { wrId: 1, opcode: 'send-with-solicited', sg: [{ mr: src, offset: 0, length: 2000 }] });
      a.rdma.postSend(A.qp, { wrId: 2, opcode: 'send', sg: [{ mr: src, offset: 0, length: 10 }] });
      a.rdma.postSend(A.qp, {
        wrId: 3,
        opcode: 'send',
        solicited: true,
        sg: [{ mr: src, offset: 5, length: 3000 - 5 }],
      });
      const r = await waitCompletions(B.rcq, 3);
      assert.equal(r, [
        { wrId: 'r0', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 2000, solicited: true },
        { wrId: 'r1', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 10 },
        { wrId: 'r2', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 2995, solicited: true },
      ]);
      const s = await waitCompletions(A.scq, 3);
      assert.equal(s, [
        { wrId: 1, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 2000 },
        { wrId: 2, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 10 },
        { wrId: 3, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 2995 },
      ]);
      sameBytes(dst.memory.subarray(0, 2000), src.memory.subarray(0, 2000), 'solicited send');
      sameBytes(dst.memory.subarray(3000, 3010), src.memory.subarray(0, 10), 'plain send');
      sameBytes(dst.memory.subarray(6000, 8995), src.memory.subarray(5, 3000), 'send with solicited: true');
    }));

  test('send-with-invalidate: the named MR becomes invalid, a later write to it fails with remote-access-error', () =>
    withPair(async ({ a, b, A, B, eventsA, eventsB }) => {
      const src = a.rdma.regMr(A.pd, pattern(4000, 31), []);
      const dst = b.rdma.regMr(B.pd, 4000, ['local-write']);
      // Remote invalidation only of what was registered for it (remote-invalidate).
      const target = b.rdma.regMr(B.pd, 4096, [...RW, 'remote-invalidate']);
      const other = b.rdma.regMr(B.pd, 4096, [...RW, 'remote-invalidate']);
      const third = b.rdma.regMr(B.pd, 64, ['remote-read', 'remote-invalidate']);
      // Before: a write to `target` works.
      a.rdma.postSend(A.qp, {
        wrId: 'w0',
        opcode: 'write',
        sg: [{ mr: src, offset: 0, length: 100 }],
        remote: { stag: target.stag, offset: 0 },
      });
      assert.equal(await one(A.scq), { wrId: 'w0', qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 100 });
      b.rdma.postRecv(B.qp, { wrId: 'inv', sg: [{ mr: dst, offset: 0, length: 4000 }] });
      a.rdma.postSend(A.qp, {
        wrId: 's-inv',
        opcode: 'send-with-invalidate',
        invalidateStag: target.stag,
        sg: [{ mr: src, offset: 0, length: 3000 }],
      });
      assert.equal(await one(B.rcq), {
        wrId: 'inv',
        qpn: B.qp.qpn,
        status: 'success',
        opcode: 'recv',
        byteLen: 3000,
        invalidatedStag: target.stag,
      });
      assert.equal(await one(A.scq), {
        wrId: 's-inv',
        qpn: A.qp.qpn,
        status: 'success',
        opcode: 'send',
        byteLen: 3000,
      });
      sameBytes(dst.memory.subarray(0, 3000), src.memory.subarray(0, 3000), 'send-with-invalidate payload');
      assert.is(target.valid, false, 'the MR named by invalidateStag is invalid');
      assert.is(other.valid, true, 'other MRs are untouched');
      assert.is(third.valid, true);
      // With the solicited flag: Send with SE and Invalidate.
      b.rdma.postRecv(B.qp, { wrId: 'inv-se', sg: [{ mr: dst, offset: 3000, length: 1000 }] });
      a.rdma.postSend(A.qp, {
        wrId: 7,
        opcode: 'send-with-invalidate',
        solicited: true,
        invalidateStag: third.stag,
        sg: [{ mr: src, offset: 0, length: 1 }],
      });
      assert.equal(await one(B.rcq), {
        wrId: 'inv-se',
        qpn: B.qp.qpn,
        status: 'success',
        opcode: 'recv',
        byteLen: 1,
        invalidatedStag: third.stag,
        solicited: true,
      });
      assert.equal(await one(A.scq), { wrId: 7, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 1 });
      assert.is(third.valid, false);
      assert.is(other.valid, true);
      // A write to another MR still works; one to the invalidated STag fails.
      a.rdma.postSend(A.qp, {
        wrId: 'w1',
        opcode: 'write',
        sg: [{ mr: src, offset: 0, length: 50 }],
        remote: { stag: other.stag, offset: 8 },
      });
      assert.equal(await one(A.scq), { wrId: 'w1', qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 50 });
      target.memory.fill(0x5a);
      a.rdma.postSend(A.qp, {
        wrId: 'w2',
        opcode: 'write',
        sg: [{ mr: src, offset: 0, length: 100 }],
        remote: { stag: target.stag, offset: 0 },
      });
      assert.equal(await one(A.scq), {
        wrId: 'w2',
        qpn: A.qp.qpn,
        status: 'remote-access-error',
        opcode: 'write',
        byteLen: 0,
      });
      allBytes(target.memory, 0x5a, 'nothing written to the invalidated MR');
      assert.is(a.rdma.queryQp(A.qp).state, 'error');
      assert.is(b.rdma.queryQp(B.qp).state, 'error');
      assert.ok(
        eventsA.some((e) => e.type === 'qp-error' && e.qpn === A.qp.qpn),
        'A reports the QP error',
      );
      assert.ok(
        eventsB.some((e) => e.type === 'qp-error' && e.qpn === B.qp.qpn),
        'B reports the QP error',
      );
      await settle(20); // the Terminate's ACK
    }));

  // ------------------------------------------------------------------ Write with Immediate

  test('write-with-imm: data placed, the target gets recv-with-imm (imm, byteLen = write length) consuming a receive', () =>
    withPair(async ({ a, b, A, B, mtuT }) => {
      const room = Math.max(8 * KiB, 3 * mtuT + 64); // the first write's four segments, whatever the MTU
      const src = a.rdma.regMr(A.pd, pattern(room, 41), []);
      const dst = b.rdma.regMr(B.pd, room + 2 * GUARD, RW);
      const rbuf = b.rdma.regMr(B.pd, 3 * KiB, ['local-write']);
      rbuf.memory.fill(GUARD_BYTE);
      b.rdma.postRecv(B.qp, { wrId: 'for-imm', sg: [{ mr: rbuf, offset: 0, length: 1024 }] });
      b.rdma.postRecv(B.qp, { wrId: 'for-imm-0', sg: [{ mr: rbuf, offset: 1024, length: 1024 }] });
      b.rdma.postRecv(B.qp, { wrId: 'for-send', sg: [{ mr: rbuf, offset: 2048, length: 1024 }] });
      b.rdma.postRecv(B.qp, { wrId: 'solicited-imm', sg: [] });
      const len = 3 * mtuT + 5; // four tagged segments, then Immediate Data
      const far = Math.max(6000, len + 2 * GUARD); // the last write's place: past the first's guard
      guarded(dst, GUARD, len);
      const txA = sent(a, A.qp);
      a.rdma.postSend(A.qp, {
        wrId: 7,
        opcode: 'write-with-imm',
        imm: 0xdeadbeef,
        sg: [{ mr: src, offset: 1, length: len }],
        remote: { stag: dst.stag, offset: GUARD },
      });
      a.rdma.postSend(A.qp, {
        wrId: 8,
        opcode: 'write-with-imm',
        imm: 0,
        sg: [],
        remote: { stag: dst.stag, offset: 0 },
      });
      a.rdma.postSend(A.qp, { wrId: 9, opcode: 'send', sg: [{ mr: src, offset: 0, length: 33 }] });
      a.rdma.postSend(A.qp, {
        wrId: 10,
        opcode: 'write-with-imm',
        imm: 0x80000001,
        solicited: true,
        sg: [{ mr: src, offset: 0, length: 16 }],
        remote: { stag: dst.stag, offset: far },
      });
      const r = await waitCompletions(B.rcq, 4);
      assert.equal(r, [
        { wrId: 'for-imm', qpn: B.qp.qpn, status: 'success', opcode: 'recv-with-imm', byteLen: len, imm: 0xdeadbeef },
        { wrId: 'for-imm-0', qpn: B.qp.qpn, status: 'success', opcode: 'recv-with-imm', byteLen: 0, imm: 0 },
        { wrId: 'for-send', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 33 },
        {
          wrId: 'solicited-imm',
          qpn: B.qp.qpn,
          status: 'success',
          opcode: 'recv-with-imm',
          byteLen: 16,
          imm: 0x80000001,
          solicited: true,
        },
      ]);
      assert.equal(await waitCompletions(A.scq, 4), [
        { wrId: 7, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: len },
        { wrId: 8, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 0 },
        { wrId: 9, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 33 },
        { wrId: 10, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 16 },
      ]);
      sameBytes(dst.memory.subarray(GUARD, GUARD + len), src.memory.subarray(1, 1 + len), 'write-with-imm data');
      checkGuards(dst, GUARD, len, 'write-with-imm');
      sameBytes(dst.memory.subarray(far, far + 16), src.memory.subarray(0, 16), 'solicited write-with-imm data');
      assert.is(
        sent(a, A.qp) - txA,
        4 + 1 + 1 + 1 + 1 + 1 + 1,
        'data segments + Immediate Data for each write-with-imm, one for the send',
      );
      allBytes(rbuf.memory.subarray(0, 2048), GUARD_BYTE, 'the receives consumed by immediate data hold nothing');
      sameBytes(
        rbuf.memory.subarray(2048, 2048 + 33),
        src.memory.subarray(0, 33),
        'the send landed in the third receive',
      );
      assert.is(b.rdma.queryQp(B.qp).rqPosted, 0, 'all four receives consumed');
    }));

  // ------------------------------------------------------------------ Atomics

  test('atomics: fetch-add (with carry and wrap), swap, cmp-swap matching and not; host byte order both sides', () =>
    withPair(async ({ a, b, A, B }) => {
      const remote = b.rdma.regMr(B.pd, 64, ATOMIC);
      const local = a.rdma.regMr(A.pd, 64, ['local-write']);
      const rv = remote.view;
      const lv = new BigUint64Array(local.memory.buffer, local.memory.byteOffset, 8);
      const neighbors = () => [u64(remote, 0), u64(remote, 16)];
      rv.setBigUint64(0, 0x1111111111111111n, true);
      rv.setBigUint64(16, 0x2222222222222222n, true);
      let n = 0;
      const run = async (
        req: Omit<SendRequest, 'wrId' | 'sg' | 'remote'>,
        at: number,
        before: bigint,
        after: bigint,
        opcode: string,
      ) => {
        rv.setBigUint64(at, before, true);
        local.memory.fill(0xcc);
        const wrId = ++n % 2 ? `atomic-${n}` : n;
        a.rdma.postSend(A.qp, {
          ...req,
          wrId,
          sg: [{ mr: local, offset: 24, length: 8 }],
          remote: { stag: remote.stag, offset: at },
        } as SendRequest);
        assert.equal(
          await one(A.scq),
          { wrId, qpn: A.qp.qpn, status: 'success', opcode, byteLen: 8 },
          `${req.opcode} completion`,
        );
        assert.is(lv[3], before, `${req.opcode}: the original value in the local SGE (host order)`);
        assert.is(local.view.getBigUint64(24, true), before);
        assert.is(u64(remote, at), after, `${req.opcode}: the remote value (host order)`);
        allBytes(local.memory.subarray(0, 24), 0xcc, 'local bytes before the SGE');
        allBytes(local.memory.subarray(32), 0xcc, 'local bytes after the SGE');
        assert.equal(neighbors(), [0x1111111111111111n, 0x2222222222222222n], 'neighboring words untouched');
      };
      await run({ opcode: 'fetch-add', atomic: { add: 5n } }, 8, 0x0102030405060708n, 0x010203040506070dn, 'fetch-add');
      await run({ opcode: 'fetch-add', atomic: { add: 1n } }, 8, 0x00000000ffffffffn, 0x0000000100000000n, 'fetch-add');
      await run(
        { opcode: 'fetch-add', atomic: { add: 0x8000000180000001n } },
        8,
        0x7fffffff7fffffffn,
        0x0000000100000000n,
        'fetch-add',
      );
      await run({ opcode: 'fetch-add', atomic: { add: 2n } }, 8, 0xffffffffffffffffn, 1n, 'fetch-add');
      await run(
        { opcode: 'swap', atomic: { swap: 0xfedcba9876543210n } },
        8,
        0x0123456789abcdefn,
        0xfedcba9876543210n,
        'swap',
      );
      await run(
        { opcode: 'cmp-swap', atomic: { compare: 0xaaaaaaaabbbbbbbbn, swap: 0x1234n } },
        8,
        0xaaaaaaaabbbbbbbbn,
        0x1234n,
        'cmp-swap',
      );
      // Not matching: only the low half differs, then only the high half.
      await run(
        { opcode: 'cmp-swap', atomic: { compare: 0xaaaaaaaabbbbbbbcn, swap: 0x1234n } },
        8,
        0xaaaaaaaabbbbbbbbn,
        0xaaaaaaaabbbbbbbbn,
        'cmp-swap',
      );
      await run(
        { opcode: 'cmp-swap', atomic: { compare: 0xaaaaaaabbbbbbbbbn, swap: 0x1234n } },
        8,
        0xaaaaaaaabbbbbbbbn,
        0xaaaaaaaabbbbbbbbn,
        'cmp-swap',
      );
      // The first and the last word of the MR.
      await run({ opcode: 'swap', atomic: { swap: 7n } }, 56, 9n, 7n, 'swap');
      rv.setBigUint64(0, 0x1111111111111111n, true);
      await run({ opcode: 'fetch-add', atomic: { add: 1n } }, 32, 41n, 42n, 'fetch-add');
      // A burst of fetch-adds: every one sees the previous one's result, in posting order.
      rv.setBigUint64(40, 100n, true);
      const res = a.rdma.regMr(A.pd, 8 * 20, ['local-write']);
      for (let i = 0; i < 20; i++)
        a.rdma.postSend(A.qp, {
          wrId: i,
          opcode: 'fetch-add',
          atomic: { add: BigInt(i) },
          sg: [{ mr: res, offset: 8 * i, length: 8 }],
          remote: { stag: remote.stag, offset: 40 },
        });
      const cs = await waitCompletions(A.scq, 20);
      assert.equal(
        cs.map((c) => c.wrId),
        [...Array(20).keys()],
      );
      let v = 100n;
      for (let i = 0; i < 20; i++) {
        assert.is(res.view.getBigUint64(8 * i, true), v, `fetch-add ${i} original value`);
        v += BigInt(i);
      }
      assert.is(u64(remote, 40), v);
      assert.is(B.rcq.length + B.scq.length, 0, 'atomics complete nothing at the target');
    }));

  // ------------------------------------------------------------------ signaled, unsignaled, inline

  test('unsignaled WRs give no completion; the signaled ones after them do, in order', () =>
    withPair(async ({ a, b, A, B }) => {
      const src = a.rdma.regMr(A.pd, pattern(4096, 51), ['local-write']);
      const dst = b.rdma.regMr(B.pd, 5 * 4096, RW);
      for (let i = 0; i < 4; i++) b.rdma.postRecv(B.qp, { wrId: i, sg: [{ mr: dst, offset: i * 4096, length: 4096 }] });
      const w = { mr: src, offset: 0, length: 2000 };
      a.rdma.postSend(A.qp, { wrId: 'u1', opcode: 'send', signaled: false, sg: [w] });
      a.rdma.postSend(A.qp, {
        wrId: 'u2',
        opcode: 'write',
        signaled: false,
        sg: [w],
        remote: { stag: dst.stag, offset: 4 * 4096 + 10 },
      });
      a.rdma.postSend(A.qp, { wrId: 's1', opcode: 'send', sg: [w] });
      a.rdma.postSend(A.qp, {
        wrId: 'u3',
        opcode: 'read',
        signaled: false,
        sg: [{ mr: src, offset: 2048, length: 1000 }],
        remote: { stag: dst.stag, offset: 0 },
      });
      a.rdma.postSend(A.qp, { wrId: 'u4', opcode: 'send', signaled: false, sg: [w] });
      a.rdma.postSend(A.qp, {
        wrId: 's2',
        opcode: 'write',
        signaled: true,
        sg: [w],
        remote: { stag: dst.stag, offset: 4 * 4096 + 2060 },
      });
      a.rdma.postSend(A.qp, { wrId: 'u5', opcode: 'send', signaled: false, sg: [w] });
      assert.equal(await waitCompletions(A.scq, 2), [
        { wrId: 's1', qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 2000 },
        { wrId: 's2', qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 2000 },
      ]);
      const r = await waitCompletions(B.rcq, 4);
      assert.equal(
        r.map((c) => [c.wrId, c.status, c.byteLen]),
        [
          [0, 'success', 2000],
          [1, 'success', 2000],
          [2, 'success', 2000],
          [3, 'success', 2000],
        ],
        'all four sends arrived',
      );
      await none(A.scq);
      assert.is(a.rdma.queryQp(A.qp).sqOutstanding, 0, 'the trailing unsignaled send left the queue too');
      sameBytes(src.memory.subarray(2048, 3048), dst.memory.subarray(0, 1000), 'the unsignaled read landed');
      sameBytes(dst.memory.subarray(4 * 4096 + 10, 4 * 4096 + 2010), src.memory.subarray(0, 2000), 'unsignaled write');
      sameBytes(dst.memory.subarray(4 * 4096 + 2060, 4 * 4096 + 4060), src.memory.subarray(0, 2000), 'signaled write');
    }));

  test('inline send and write: the source may be overwritten right after post', () =>
    withPair(async ({ a, b, A, B }) => {
      const src = a.rdma.regMr(A.pd, 256, []);
      const want = pattern(256, 61);
      const dst = b.rdma.regMr(B.pd, 1024, RW);
      b.rdma.postRecv(B.qp, { wrId: 'r', sg: [{ mr: dst, offset: 0, length: 128 }] });
      const maxInline = a.rdma.queryQp(A.qp).maxInline;
      assert.is(maxInline, 64);
      src.memory.set(want);
      a.rdma.postSend(A.qp, {
        wrId: 1,
        opcode: 'send',
        inline: true,
        sg: [
          { mr: src, offset: 0, length: 40 },
          { mr: src, offset: 100, length: 24 },
        ],
      });
      a.rdma.postSend(A.qp, {
        wrId: 2,
        opcode: 'write',
        inline: true,
        sg: [{ mr: src, offset: 200, length: 56 }],
        remote: { stag: dst.stag, offset: 500 },
      });
      a.rdma.postSend(A.qp, {
        wrId: 3,
        opcode: 'write-with-imm',
        imm: 77,
        inline: true,
        sg: [{ mr: src, offset: 10, length: 8 }],
        remote: { stag: dst.stag, offset: 600 },
      });
      src.memory.fill(0); // at once: nothing was sent yet (the loop has not run)
      b.rdma.postRecv(B.qp, { wrId: 'r2', sg: [] });
      assert.equal(await waitCompletions(A.scq, 3), [
        { wrId: 1, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 64 },
        { wrId: 2, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 56 },
        { wrId: 3, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 8 },
      ]);
      assert.equal(await waitCompletions(B.rcq, 2), [
        { wrId: 'r', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 64 },
        { wrId: 'r2', qpn: B.qp.qpn, status: 'success', opcode: 'recv-with-imm', byteLen: 8, imm: 77 },
      ]);
      sameBytes(dst.memory.subarray(0, 40), want.subarray(0, 40), 'inline send, first SGE');
      sameBytes(dst.memory.subarray(40, 64), want.subarray(100, 124), 'inline send, second SGE');
      sameBytes(dst.memory.subarray(500, 556), want.subarray(200, 256), 'inline write');
      sameBytes(dst.memory.subarray(600, 608), want.subarray(10, 18), 'inline write-with-imm');
    }));

  // ------------------------------------------------------------------ gather / scatter

  test('multiple SGEs: gather on send and write, scatter on receive and read, across segment boundaries', () =>
    withPair(
      async ({ a, b, A, B, mtu }) => {
        const s1 = a.rdma.regMr(A.pd, pattern(5000, 71), ['local-write']);
        const s2 = a.rdma.regMr(A.pd, pattern(3000, 72), ['local-write']);
        // Gather list: 1000 from s1@7, 0 (empty SGE), 1 from s2@0, 2500 from s2@400, 1700 from s1@3000.
        const gather = [
          { mr: s1, offset: 7, length: 1000 },
          { mr: s2, offset: 10, length: 0 },
          { mr: s2, offset: 0, length: 1 },
          { mr: s2, offset: 400, length: 2500 },
          { mr: s1, offset: 3000, length: 1700 },
        ];
        const total = 1000 + 1 + 2500 + 1700;
        assert.ok(total > 3 * mtu);
        const flat = new Uint8Array(total);
        let at = 0;
        for (const g of gather) {
          flat.set(g.mr.memory.subarray(g.offset, g.offset + g.length), at);
          at += g.length;
        }
        const r1 = b.rdma.regMr(B.pd, 6000, RW),
          r2 = b.rdma.regMr(B.pd, 6000, ['local-write']);
        r1.memory.fill(GUARD_BYTE);
        r2.memory.fill(GUARD_BYTE);
        // Scatter list on B: 1443 (one byte short of a segment), 2 bytes, 3000, and 2000 of room.
        const scatter = [
          { mr: r1, offset: 100, length: mtu - 1 },
          { mr: r2, offset: 0, length: 2 },
          { mr: r2, offset: 50, length: 3000 },
          { mr: r1, offset: 3000, length: 2000 },
        ];
        b.rdma.postRecv(B.qp, { wrId: 'sc', sg: scatter });
        a.rdma.postSend(A.qp, { wrId: 'ga', opcode: 'send', sg: gather });
        assert.equal(await one(B.rcq), {
          wrId: 'sc',
          qpn: B.qp.qpn,
          status: 'success',
          opcode: 'recv',
          byteLen: total,
        });
        assert.equal(await one(A.scq), {
          wrId: 'ga',
          qpn: A.qp.qpn,
          status: 'success',
          opcode: 'send',
          byteLen: total,
        });
        let off = 0;
        for (const [i, e] of scatter.entries()) {
          const take = Math.min(e.length, total - off);
          sameBytes(
            e.mr.memory.subarray(e.offset, e.offset + take),
            flat.subarray(off, off + take),
            `scatter SGE ${i}`,
          );
          off += take;
        }
        allBytes(r1.memory.subarray(0, 100), GUARD_BYTE, 'r1 before');
        allBytes(r1.memory.subarray(100 + mtu - 1, 3000), GUARD_BYTE, 'r1 between');
        const used4 = total - (mtu - 1) - 2 - 3000;
        allBytes(r1.memory.subarray(3000 + used4), GUARD_BYTE, 'r1 after the last byte');
        allBytes(r2.memory.subarray(2, 50), GUARD_BYTE, 'r2 between');
        allBytes(r2.memory.subarray(3050), GUARD_BYTE, 'r2 after');

        // Write: gathered on A, contiguous at B.
        const wdst = b.rdma.regMr(B.pd, total + 2 * GUARD, RW);
        guarded(wdst, GUARD, total);
        a.rdma.postSend(A.qp, { wrId: 'gw', opcode: 'write', sg: gather, remote: { stag: wdst.stag, offset: GUARD } });
        assert.equal(await one(A.scq), {
          wrId: 'gw',
          qpn: A.qp.qpn,
          status: 'success',
          opcode: 'write',
          byteLen: total,
        });
        sameBytes(wdst.memory.subarray(GUARD, GUARD + total), flat, 'gathered write');
        checkGuards(wdst, GUARD, total, 'gathered write');

        // Read: contiguous at B, scattered on A.
        const l1 = a.rdma.regMr(A.pd, 4000, ['local-write']),
          l2 = a.rdma.regMr(A.pd, 4000, ['local-write']);
        l1.memory.fill(GUARD_BYTE);
        l2.memory.fill(GUARD_BYTE);
        const rs = [
          { mr: l2, offset: 1, length: 999 },
          { mr: l1, offset: 0, length: 0 },
          { mr: l1, offset: 10, length: mtu + 4 },
          { mr: l2, offset: 2000, length: 1500 },
          { mr: l1, offset: 2000, length: total - 999 - (mtu + 4) - 1500 },
        ];
        a.rdma.postSend(A.qp, { wrId: 'sr', opcode: 'read', sg: rs, remote: { stag: wdst.stag, offset: GUARD } });
        assert.equal(await one(A.scq), {
          wrId: 'sr',
          qpn: A.qp.qpn,
          status: 'success',
          opcode: 'read',
          byteLen: total,
        });
        off = 0;
        for (const [i, e] of rs.entries()) {
          sameBytes(
            e.mr.memory.subarray(e.offset, e.offset + e.length),
            flat.subarray(off, off + e.length),
            `read scatter SGE ${i}`,
          );
          off += e.length;
        }
        allBytes(l2.memory.subarray(0, 1), GUARD_BYTE, 'l2 before');
        allBytes(l2.memory.subarray(1000, 2000), GUARD_BYTE, 'l2 between');
        allBytes(l2.memory.subarray(3500), GUARD_BYTE, 'l2 after');
        allBytes(l1.memory.subarray(0, 10), GUARD_BYTE, 'l1 before');
        allBytes(l1.memory.subarray(10 + mtu + 4, 2000), GUARD_BYTE, 'l1 between');
        allBytes(l1.memory.subarray(2000 + rs[4].length), GUARD_BYTE, 'l1 after');
      },
      { init: { maxSge: 8 } },
    ));

  // ------------------------------------------------------------------ SRQ

  test('SRQ: two QPs share one SRQ, receives are taken in posting order; the limit event fires once when armed', () =>
    withPair(async ({ a, b, eventsB }) => {
      const pdB = b.rdma.createPd();
      const srq = b.rdma.createSrq(pdB, 16, 2);
      const rcq = b.rdma.createCq(64);
      const B1 = makeEnds(b, { pd: pdB, recvCq: rcq, srq });
      const B2 = makeEnds(b, { pd: pdB, recvCq: rcq, srq });
      const A1 = makeEnds(a),
        A2 = makeEnds(a);
      connectManual(a, A1.qp, b, B1.qp);
      connectManual(a, A2.qp, b, B2.qp);
      assert.is(b.rdma.queryQp(B1.qp).srq, srq.handle);
      const buf = b.rdma.regMr(pdB, 9 * 1000, ['local-write']);
      buf.memory.fill(GUARD_BYTE);
      for (let i = 0; i < 8; i++)
        b.rdma.postSrqRecv(srq, {
          wrId: i % 2 ? `srq-${i}` : i,
          sg: [
            { mr: buf, offset: i * 1000, length: 600 },
            { mr: buf, offset: i * 1000 + 600, length: 400 },
          ],
        });
      assert.is(srq.length, 8);
      b.rdma.modifySrq(srq, 3);
      const s1 = a.rdma.regMr(A1.pd, pattern(1000, 81), []);
      const s2 = a.rdma.regMr(A2.pd, pattern(1000, 82), []);
      // Alternate the senders: A1, A2, A2, A1, A1, A2 (each waits for the one before).
      const order: [Ends, Mr, Ends][] = [
        [A1, s1, B1],
        [A2, s2, B2],
        [A2, s2, B2],
        [A1, s1, B1],
        [A1, s1, B1],
        [A2, s2, B2],
      ];
      const limitEvents = () => eventsB.filter((e) => e.type === 'srq-limit');
      for (const [i, [src, mem, dst]] of order.entries()) {
        const len = 700 + i * 50; // spills from the first SGE into the second
        a.rdma.postSend(src.qp, { wrId: `m${i}`, opcode: 'send', sg: [{ mr: mem, offset: i, length: len }] });
        assert.equal(
          await one(rcq),
          { wrId: i % 2 ? `srq-${i}` : i, qpn: dst.qp.qpn, status: 'success', opcode: 'recv', byteLen: len },
          `message ${i} takes receive ${i}`,
        );
        assert.equal(await one(src.scq), {
          wrId: `m${i}`,
          qpn: src.qp.qpn,
          status: 'success',
          opcode: 'send',
          byteLen: len,
        });
        sameBytes(
          buf.memory.subarray(i * 1000, i * 1000 + len),
          mem.memory.subarray(i, i + len),
          `message ${i} in receive ${i}`,
        );
        allBytes(buf.memory.subarray(i * 1000 + len, i * 1000 + 1000), GUARD_BYTE, `receive ${i} beyond the message`);
        assert.is(srq.length, 8 - i - 1);
        // Armed at 3: fires once when fewer than 3 remain (after the sixth receive was taken).
        assert.is(limitEvents().length, srq.length < 3 ? 1 : 0, `limit events after ${i + 1} receives`);
      }
      assert.equal(limitEvents(), [{ type: 'srq-limit', srq: srq.handle, reason: limitEvents()[0].reason }]);
      assert.type(limitEvents()[0].reason, 'string');
      // Not armed any more: another receive taken fires nothing; re-armed, it fires again.
      a.rdma.postSend(A1.qp, { wrId: 'm6', opcode: 'send', sg: [{ mr: s1, offset: 0, length: 10 }] });
      assert.equal(await one(rcq), { wrId: 6, qpn: B1.qp.qpn, status: 'success', opcode: 'recv', byteLen: 10 });
      assert.equal(await one(A1.scq), { wrId: 'm6', qpn: A1.qp.qpn, status: 'success', opcode: 'send', byteLen: 10 });
      assert.is(limitEvents().length, 1, 'one-shot');
      b.rdma.postSrqRecv(srq, { wrId: 'late', sg: [{ mr: buf, offset: 8000, length: 1000 }] });
      b.rdma.modifySrq(srq, 2);
      a.rdma.postSend(A2.qp, { wrId: 'm7', opcode: 'send', sg: [{ mr: s2, offset: 0, length: 20 }] });
      assert.equal(await one(rcq), { wrId: 'srq-7', qpn: B2.qp.qpn, status: 'success', opcode: 'recv', byteLen: 20 });
      assert.equal(await one(A2.scq), { wrId: 'm7', qpn: A2.qp.qpn, status: 'success', opcode: 'send', byteLen: 20 });
      assert.is(limitEvents().length, 2, 're-armed: fires again when 1 < 2 remain');
      // A burst from both QPs at once: every message in its own receive, each receive used once,
      // each QP's receives in SRQ order.
      const order2 = ['late', ...Array.from({ length: 8 }, (_, i) => `b${i}`)];
      for (let i = 0; i < 8; i++)
        b.rdma.postSrqRecv(srq, { wrId: `b${i}`, sg: [{ mr: buf, offset: i * 1000, length: 1000 }] });
      const at = (wrId: unknown) => (wrId === 'late' ? 8000 : Number(String(wrId).slice(1)) * 1000);
      for (let i = 0; i < 4; i++) {
        a.rdma.postSend(A1.qp, { wrId: i, opcode: 'send', sg: [{ mr: s1, offset: i * 100, length: 100 + i }] });
        a.rdma.postSend(A2.qp, { wrId: i, opcode: 'send', sg: [{ mr: s2, offset: i * 100, length: 200 + i }] });
      }
      const got = await waitCompletions(rcq, 8);
      assert.equal(got.map((c) => c.wrId).sort(), order2.slice(0, 8).sort(), 'the eight oldest receives, each once');
      for (const [src, mem, dst, base] of [
        [A1, s1, B1, 100],
        [A2, s2, B2, 200],
      ] as const) {
        const mine = got.filter((c) => c.qpn === dst.qp.qpn);
        assert.is(mine.length, 4);
        const idx = mine.map((c) => order2.indexOf(c.wrId as string));
        assert.equal(
          idx,
          [...idx].sort((x, y) => x - y),
          `qp ${dst.qp.qpn} took its receives in SRQ order`,
        );
        for (const [k, c] of mine.entries()) {
          assert.equal(c, { wrId: c.wrId, qpn: dst.qp.qpn, status: 'success', opcode: 'recv', byteLen: base + k });
          sameBytes(
            buf.memory.subarray(at(c.wrId), at(c.wrId) + base + k),
            mem.memory.subarray(k * 100, k * 100 + base + k),
            `burst message ${k} of qp ${src.qp.qpn}`,
          );
        }
        assert.equal(
          (await waitCompletions(src.scq, 4)).map((c) => [c.wrId, c.status]),
          [
            [0, 'success'],
            [1, 'success'],
            [2, 'success'],
            [3, 'success'],
          ],
        );
      }
      assert.is(srq.length, 1, 'b7 is still posted');
    }));

  // ------------------------------------------------------------------ many outstanding WRs

  test('1000 small sends in one burst, three times (the 1024-slot rings wrap): all arrive and complete once, in posting order', () =>
    withPair(async ({ a, b, A, B }) => {
      const N = 1000,
        L = 24;
      const src = a.rdma.regMr(A.pd, N * L, []);
      const dst = b.rdma.regMr(B.pd, N * 32, ['local-write']);
      for (let round = 0; round < 3; round++) {
        dst.memory.fill(GUARD_BYTE);
        for (let i = 0; i < N; i++) {
          const v = new DataView(src.memory.buffer, src.memory.byteOffset + i * L, L);
          v.setUint32(0, round * N + i);
          for (let k = 4; k < L; k++) v.setUint8(k, (i * 31 + k + round) & 0xff);
        }
        const id = (i: number) => (i % 3 === 0 ? `s${round}-${i}` : round * N + i);
        for (let i = 0; i < N; i++)
          b.rdma.postRecv(B.qp, { wrId: id(i), sg: [{ mr: dst, offset: i * 32, length: 32 }] });
        const txA = sent(a, A.qp);
        const t0 = performance.now();
        for (let i = 0; i < N; i++)
          a.rdma.postSend(A.qp, { wrId: id(i), opcode: 'send', sg: [{ mr: src, offset: i * L, length: L }] });
        assert.is(a.rdma.queryQp(A.qp).sqOutstanding, N, 'all posted before any went out');
        const r = await waitCompletions(B.rcq, N);
        const s = await waitCompletions(A.scq, N);
        if (round === 0) timings.push(`1000 sends of ${L} bytes: ${(performance.now() - t0).toFixed(0)} ms`);
        for (let i = 0; i < N; i++) {
          assert.equal(
            r[i],
            { wrId: id(i), qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: L },
            `round ${round} receive ${i}`,
          );
          assert.equal(
            s[i],
            { wrId: id(i), qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: L },
            `round ${round} send ${i}`,
          );
        }
        for (let i = 0; i < N; i++) {
          sameBytes(
            dst.memory.subarray(i * 32, i * 32 + L),
            src.memory.subarray(i * L, (i + 1) * L),
            `round ${round} message ${i}`,
          );
          allBytes(
            dst.memory.subarray(i * 32 + L, (i + 1) * 32),
            GUARD_BYTE,
            `round ${round} receive ${i} beyond the message`,
          );
        }
        assert.is(sent(a, A.qp) - txA, N, 'one packet each');
        await none(A.scq, 10);
        assert.is(B.rcq.length, 0, 'no duplicate receive completions');
        assert.is(a.rdma.queryQp(A.qp).sqOutstanding, 0);
        assert.is(b.rdma.queryQp(B.qp).rqPosted, 0);
      }
    }));

  test('SRQ burst: 700 sends from each of two QPs at once through one SRQ, each receive used once', () =>
    withPair(async ({ a, b }) => {
      const N = 700,
        L = 40;
      const pdB = b.rdma.createPd();
      const srq = b.rdma.createSrq(pdB, 2 * N, 1);
      const rcq = b.rdma.createCq(4 * N);
      const B1 = makeEnds(b, { pd: pdB, recvCq: rcq, srq });
      const B2 = makeEnds(b, { pd: pdB, recvCq: rcq, srq });
      const A1 = makeEnds(a),
        A2 = makeEnds(a);
      connectManual(a, A1.qp, b, B1.qp);
      connectManual(a, A2.qp, b, B2.qp);
      const buf = b.rdma.regMr(pdB, 2 * N * 64, ['local-write']);
      buf.memory.fill(GUARD_BYTE);
      for (let i = 0; i < 2 * N; i++)
        b.rdma.postSrqRecv(srq, { wrId: i, sg: [{ mr: buf, offset: i * 64, length: 64 }] });
      const s1 = a.rdma.regMr(A1.pd, pattern(N * L, 131), []);
      const s2 = a.rdma.regMr(A2.pd, pattern(N * L, 132), []);
      for (let i = 0; i < N; i++) {
        a.rdma.postSend(A1.qp, { wrId: i, opcode: 'send', sg: [{ mr: s1, offset: i * L, length: L }] });
        a.rdma.postSend(A2.qp, { wrId: i, opcode: 'send', sg: [{ mr: s2, offset: i * L, length: L - 1 }] });
      }
      const got = await waitCompletions(rcq, 2 * N);
      assert.equal(
        got.map((c) => c.wrId as number).sort((x, y) => x - y),
        [...Array(2 * N).keys()],
        'every receive used exactly once',
      );
      for (const [src, mem, dst, len] of [
        [A1, s1, B1, L],
        [A2, s2, B2, L - 1],
      ] as const) {
        const mine = got.filter((c) => c.qpn === dst.qp.qpn);
        assert.is(mine.length, N);
        for (const [k, c] of mine.entries()) {
          if (k > 0)
            assert.ok((c.wrId as number) > (mine[k - 1].wrId as number), `qp ${dst.qp.qpn}: receives in SRQ order`);
          assert.equal(c, { wrId: c.wrId, qpn: dst.qp.qpn, status: 'success', opcode: 'recv', byteLen: len });
          const at = (c.wrId as number) * 64;
          sameBytes(
            buf.memory.subarray(at, at + len),
            mem.memory.subarray(k * L, k * L + len),
            `message ${k} of qp ${src.qp.qpn}`,
          );
          allBytes(buf.memory.subarray(at + len, at + 64), GUARD_BYTE, `receive ${c.wrId} beyond the message`);
        }
        const sc = await waitCompletions(src.scq, N);
        assert.equal(
          sc.map((c) => c.wrId),
          [...Array(N).keys()],
        );
      }
      assert.is(srq.length, 0);
    }));

  test('a mixed burst (send, write, read, atomics, write-with-imm, zero-length) completes in posting order', () =>
    withPair(async ({ a, b, A, B }) => {
      const N = 600;
      const local = a.rdma.regMr(A.pd, pattern(N * 256, 91), ['local-write']);
      const orig = local.memory.slice();
      const remote = b.rdma.regMr(B.pd, pattern(N * 256, 92), [
        'local-write',
        'remote-write',
        'remote-read',
        'remote-atomic',
      ]);
      const rorig = remote.memory.slice();
      const rbuf = b.rdma.regMr(B.pd, N * 256, ['local-write']);
      const kinds = [
        'send',
        'write',
        'read',
        'fetch-add',
        'write-with-imm',
        'send',
        'read',
        'swap',
        'write',
        'cmp-swap',
      ] as const;
      const expected: Completion[] = [];
      const recvs: Completion[] = [];
      let nRecv = 0;
      for (let i = 0; i < N; i++) {
        const op = kinds[i % kinds.length];
        const len = i % 7 === 0 ? 0 : 1 + ((i * 37) % 200);
        const at = i * 256;
        const wrId = i % 2 ? i : `w${i}`;
        const req: SendRequest = {
          wrId,
          opcode: op,
          sg: [{ mr: local, offset: at, length: len }],
          remote: { stag: remote.stag, offset: at },
        };
        let byteLen = len;
        if (op === 'fetch-add' || op === 'swap' || op === 'cmp-swap') {
          req.sg = [{ mr: local, offset: at, length: 8 }];
          // cmp-swap: every other one compares against the wrong value (and changes nothing).
          const cur = new DataView(rorig.buffer).getBigUint64(at, true);
          req.atomic =
            op === 'fetch-add'
              ? { add: BigInt(i) }
              : op === 'swap'
                ? { swap: BigInt(i) }
                : { compare: i % 20 === 9 ? cur : cur ^ 1n, swap: BigInt(i) };
          byteLen = 8;
        }
        if (op === 'write-with-imm') req.imm = i;
        if (op === 'send' || op === 'write-with-imm') {
          const rid = `r${nRecv++}`;
          b.rdma.postRecv(B.qp, { wrId: rid, sg: [{ mr: rbuf, offset: at, length: 256 }] });
          recvs.push(
            op === 'send'
              ? { wrId: rid, qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: len }
              : { wrId: rid, qpn: B.qp.qpn, status: 'success', opcode: 'recv-with-imm', byteLen: len, imm: i },
          );
        }
        a.rdma.postSend(A.qp, req);
        const wcop = op === 'send' ? 'send' : op === 'write' || op === 'write-with-imm' ? 'write' : op;
        expected.push({ wrId, qpn: A.qp.qpn, status: 'success', opcode: wcop, byteLen } as Completion);
      }
      assert.equal(await waitCompletions(A.scq, N), expected, 'send queue completions in posting order');
      assert.equal(await waitCompletions(B.rcq, recvs.length), recvs, 'receive completions in MSN order');
      for (let i = 0; i < N; i++) {
        const op = kinds[i % kinds.length];
        const len = i % 7 === 0 ? 0 : 1 + ((i * 37) % 200);
        const at = i * 256;
        const what = `${op} ${i}`;
        if (op === 'send') sameBytes(rbuf.memory.subarray(at, at + len), orig.subarray(at, at + len), what);
        else if (op === 'write' || op === 'write-with-imm')
          sameBytes(remote.memory.subarray(at, at + len), orig.subarray(at, at + len), what);
        else if (op === 'read') sameBytes(local.memory.subarray(at, at + len), rorig.subarray(at, at + len), what);
        else {
          const before = new DataView(rorig.buffer).getBigUint64(at, true);
          assert.is(local.view.getBigUint64(at, true), before, `${what}: original value`);
          const after =
            op === 'fetch-add'
              ? (before + BigInt(i)) & 0xffffffffffffffffn
              : op === 'cmp-swap' && i % 20 !== 9
                ? before
                : BigInt(i);
          assert.is(remote.view.getBigUint64(at, true), after, `${what}: remote value`);
        }
      }
      await none(A.scq);
    }));

  // ------------------------------------------------------------------ zero length

  test('zero-length send, write and read complete (no SGE at all, and one empty SGE)', () =>
    withPair(async ({ a, b, A, B }) => {
      const mr = a.rdma.regMr(A.pd, 16, ['local-write']);
      const rmr = b.rdma.regMr(B.pd, 16, RW);
      rmr.memory.fill(GUARD_BYTE);
      mr.memory.fill(GUARD_BYTE);
      b.rdma.postRecv(B.qp, { wrId: 'r-none', sg: [] });
      b.rdma.postRecv(B.qp, { wrId: 'r-empty', sg: [{ mr: rmr, offset: 4, length: 0 }] });
      b.rdma.postRecv(B.qp, { wrId: 'r-room' }); // sg omitted
      const e = { mr, offset: 3, length: 0 };
      const txA = sent(a, A.qp),
        txB = sent(b, B.qp);
      a.rdma.postSend(A.qp, { wrId: 1, opcode: 'send' });
      a.rdma.postSend(A.qp, { wrId: 2, opcode: 'send', sg: [e] });
      a.rdma.postSend(A.qp, { wrId: 3, opcode: 'write', remote: { stag: rmr.stag, offset: 0 } });
      a.rdma.postSend(A.qp, { wrId: 4, opcode: 'write', sg: [e], remote: { stag: rmr.stag, offset: 16 } }); // at the very end
      a.rdma.postSend(A.qp, { wrId: 5, opcode: 'read', remote: { stag: rmr.stag, offset: 0 } });
      a.rdma.postSend(A.qp, { wrId: 6, opcode: 'read', sg: [e], remote: { stag: rmr.stag, offset: 16 } });
      a.rdma.postSend(A.qp, { wrId: 7, opcode: 'send-with-solicited', sg: [] });
      const s = await waitCompletions(A.scq, 7);
      assert.equal(s, [
        { wrId: 1, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 0 },
        { wrId: 2, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 0 },
        { wrId: 3, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 0 },
        { wrId: 4, qpn: A.qp.qpn, status: 'success', opcode: 'write', byteLen: 0 },
        { wrId: 5, qpn: A.qp.qpn, status: 'success', opcode: 'read', byteLen: 0 },
        { wrId: 6, qpn: A.qp.qpn, status: 'success', opcode: 'read', byteLen: 0 },
        { wrId: 7, qpn: A.qp.qpn, status: 'success', opcode: 'send', byteLen: 0 },
      ]);
      assert.equal(await waitCompletions(B.rcq, 3), [
        { wrId: 'r-none', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 0 },
        { wrId: 'r-empty', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 0 },
        { wrId: 'r-room', qpn: B.qp.qpn, status: 'success', opcode: 'recv', byteLen: 0, solicited: true },
      ]);
      assert.is(sent(a, A.qp) - txA, 7, 'one packet per zero-length message or request');
      assert.is(sent(b, B.qp) - txB, 2, 'one (empty, last) Read Response per zero-length read');
      allBytes(rmr.memory, GUARD_BYTE, 'remote untouched');
      allBytes(mr.memory, GUARD_BYTE, 'local untouched');
    }));

  // ------------------------------------------------------------------ counters and RTT

  test('queryQp: packet and byte counters move exactly, RTT is estimated and the RTO derived from it', () =>
    withPair(async ({ a, b, A, B, mtu }) => {
      const q0 = a.rdma.queryQp(A.qp);
      assert.equal(q0.counters, {
        txPackets: 0,
        rxPackets: 0,
        txBytes: 0,
        rxBytes: 0,
        retransmits: 0,
        fastRetransmits: 0,
        timeouts: 0,
        spuriousTimeouts: 0,
        probes: 0,
        duplicates: 0,
      });
      assert.is(q0.rtt.srttUs, 0, 'no sample before any traffic');
      const src = a.rdma.regMr(A.pd, pattern(3 * mtu, 101), []);
      const dst = b.rdma.regMr(B.pd, 3 * mtu, ['local-write']);
      const bsrc = b.rdma.regMr(B.pd, pattern(2 * mtu, 102), []);
      const adst = a.rdma.regMr(A.pd, 2 * mtu, ['local-write']);
      b.rdma.postRecv(B.qp, { wrId: 0, sg: [{ mr: dst, offset: 0, length: 3 * mtu }] });
      a.rdma.postRecv(A.qp, { wrId: 0, sg: [{ mr: adst, offset: 0, length: 2 * mtu }] });
      const len1 = 2 * mtu + 1,
        len2 = mtu + 1;
      a.rdma.postSend(A.qp, { wrId: 'x', opcode: 'send', sg: [{ mr: src, offset: 0, length: len1 }] });
      b.rdma.postSend(B.qp, { wrId: 'y', opcode: 'send', sg: [{ mr: bsrc, offset: 0, length: len2 }] });
      await waitCompletions(A.scq, 1);
      await waitCompletions(B.scq, 1);
      await waitCompletions(A.rcq, 1);
      await waitCompletions(B.rcq, 1);
      const qa = a.rdma.queryQp(A.qp),
        qb = b.rdma.queryQp(B.qp);
      assert.equal(qa.counters, {
        txPackets: 3,
        rxPackets: 2,
        txBytes: len1,
        rxBytes: len2,
        retransmits: 0,
        fastRetransmits: 0,
        timeouts: 0,
        spuriousTimeouts: 0,
        probes: 0,
        duplicates: 0,
      });
      assert.equal(qb.counters, {
        txPackets: 2,
        rxPackets: 3,
        txBytes: len2,
        rxBytes: len1,
        retransmits: 0,
        fastRetransmits: 0,
        timeouts: 0,
        spuriousTimeouts: 0,
        probes: 0,
        duplicates: 0,
      });
      for (const [name, q] of [
        ['A', qa],
        ['B', qb],
      ] as const) {
        assert.ok(q.rtt.srttUs > 0, `${name}: RTT estimated (${q.rtt.srttUs} us)`);
        assert.ok(q.rtt.srttUs < 1e6, `${name}: a plausible RTT (${q.rtt.srttUs} us)`);
        assert.ok(q.rtt.rttvarUs > 0, `${name}: RTT variance`);
        assert.ok(
          q.rtt.rtoUs >= 250_000 && q.rtt.rtoUs <= 2_000_000,
          `${name}: RTO within [rto-min 250 ms, rto-max 2 s]: ${q.rtt.rtoUs}`,
        );
        assert.ok(q.rtt.rtoUs >= q.rtt.srttUs, `${name}: RTO >= SRTT`);
      }
      // More traffic: the counters keep moving.
      const w = a.rdma.regMr(A.pd, pattern(5000, 103), []);
      const wd = b.rdma.regMr(B.pd, 5000, RW);
      a.rdma.postSend(A.qp, {
        wrId: 'w',
        opcode: 'write',
        sg: [{ mr: w, offset: 0, length: 5000 }],
        remote: { stag: wd.stag, offset: 0 },
      });
      await waitCompletions(A.scq, 1);
      const qa2 = a.rdma.queryQp(A.qp);
      assert.is(qa2.counters.txPackets, 3 + segments(5000, mtu + 4));
      assert.is(qa2.counters.txBytes, len1 + 5000);
      assert.is(b.rdma.queryQp(B.qp).counters.rxBytes, len1 + 5000);
      assert.is(b.rdma.queryQp(B.qp).counters.rxPackets, 3 + segments(5000, mtu + 4));
      // Counters exact: timers far above any stall of a loaded 2-core VM, so no spurious
      // retransmission can move them (a 10 ms stall before the first RTT sample once did).
    }, QUIET_TIMERS));

  // ------------------------------------------------------------------ connection manager

  test('connection manager: listen/connect, private data both ways, IRD/ORD negotiated, then operations', () =>
    withPair(
      async ({ a, b, eventsA, eventsB }) => {
        const PORT = 7471;
        const pdB = b.rdma.createPd();
        const cqB = b.rdma.createCq(64);
        const requests: unknown[] = [];
        let passive: Qp | null = null;
        b.rdma.listen(PORT, (req) => {
          requests.push(req);
          passive = b.rdma.createQp({
            pd: pdB,
            sendCq: cqB,
            recvCq: cqB,
            maxSendWr: 64,
            maxRecvWr: 64,
            ird: 16,
            ord: 16,
          });
          return { qp: passive, privateData: new TextEncoder().encode('welcome from B') };
        });
        const A = makeEnds(a, { ird: 8, ord: 4, maxSendWr: 64, maxRecvWr: 64 });
        const pdata = pattern(100, 111);
        const res = await a.rdma.connect(A.qp, IP_B, PORT, { privateData: pdata });
        assert.is(
          new TextDecoder().decode(res.privateData),
          'welcome from B',
          'the accept private data reaches the active side',
        );
        assert.is(requests.length, 1);
        const req = requests[0] as {
          address: string;
          port: number;
          listenPort: number;
          ird: number;
          ord: number;
          privateData: Uint8Array;
        };
        assert.is(req.address, IP_A);
        assert.is(req.port, A.qp.qpn);
        assert.is(req.listenPort, PORT);
        assert.is(req.ird, 8);
        assert.is(req.ord, 4);
        sameBytes(req.privateData, pdata, 'the request private data reaches the listener');
        const P = passive as unknown as Qp;
        await settle(5);
        const qa = a.rdma.queryQp(A.qp),
          qb = b.rdma.queryQp(P);
        assert.is(qa.state, 'rts');
        assert.is(qb.state, 'rts');
        assert.not.equal(P.qpn, PORT, 'the passive QP has its own port');
        assert.equal(qa.remote, { address: IP_B, port: P.qpn }, 'the active side learned the data port from ACCEPT');
        assert.equal(qb.remote, { address: IP_A, port: A.qp.qpn });
        assert.equal([qb.ird, qb.ord], [4, 8], 'passive IRD := REQ.ord, ORD := REQ.ird');
        assert.equal([qa.ird, qa.ord], [8, 4], 'active keeps IRD 8 and ORD 4');
        assert.ok(eventsA.some((e) => e.type === 'qp-established' && e.qpn === A.qp.qpn));
        assert.ok(eventsB.some((e) => e.type === 'qp-established' && e.qpn === P.qpn));

        // Operations both ways over the connected pair.
        const src = a.rdma.regMr(A.pd, pattern(10_000, 112), []);
        const dst = b.rdma.regMr(pdB, 20_000, RW);
        b.rdma.postRecv(P, { wrId: 'p0', sg: [{ mr: dst, offset: 0, length: 10_000 }] });
        a.rdma.postSend(A.qp, { wrId: 'c0', opcode: 'send', sg: [{ mr: src, offset: 0, length: 10_000 }] });
        assert.equal(await one(A.scq), {
          wrId: 'c0',
          qpn: A.qp.qpn,
          status: 'success',
          opcode: 'send',
          byteLen: 10_000,
        });
        assert.equal(await one(cqB), { wrId: 'p0', qpn: P.qpn, status: 'success', opcode: 'recv', byteLen: 10_000 });
        sameBytes(dst.memory.subarray(0, 10_000), src.memory, 'send over the connection');
        const back = a.rdma.regMr(A.pd, 10_000, ['local-write']);
        // ORD 4 at the active side: 6 reads, at most 4 outstanding, all complete in order.
        for (let i = 0; i < 6; i++)
          a.rdma.postSend(A.qp, {
            wrId: `rd${i}`,
            opcode: 'read',
            sg: [{ mr: back, offset: i * 1000, length: 1000 }],
            remote: { stag: dst.stag, offset: i * 1000 },
          });
        const rd = await waitCompletions(A.scq, 6);
        assert.equal(
          rd.map((c) => [c.wrId, c.status, c.byteLen]),
          [0, 1, 2, 3, 4, 5].map((i) => [`rd${i}`, 'success', 1000]),
        );
        sameBytes(back.memory.subarray(0, 6000), src.memory.subarray(0, 6000), 'reads over the connection');
        const bsrc = b.rdma.regMr(pdB, pattern(3000, 113), []);
        const adst = a.rdma.regMr(A.pd, 3000, ['local-write']);
        a.rdma.postRecv(A.qp, { wrId: 'a0', sg: [{ mr: adst, offset: 0, length: 3000 }] });
        b.rdma.postSend(P, { wrId: 'p-send', opcode: 'send', sg: [{ mr: bsrc, offset: 0, length: 3000 }] });
        assert.equal(await one(A.rcq), { wrId: 'a0', qpn: A.qp.qpn, status: 'success', opcode: 'recv', byteLen: 3000 });
        assert.equal(await one(cqB), { wrId: 'p-send', qpn: P.qpn, status: 'success', opcode: 'send', byteLen: 3000 });
        sameBytes(adst.memory, bsrc.memory, 'send from the passive side');
        b.rdma.unlisten(PORT);
      },
      { connect: false },
    ));

  test("connection manager: ORD beyond the passive QP's IRD is cut to it on both sides", () =>
    withPair(
      async ({ a, b }) => {
        const PORT = 7472;
        const pdB = b.rdma.createPd();
        const cqB = b.rdma.createCq(64);
        let passive: Qp | null = null;
        b.rdma.listen(PORT, () => {
          passive = b.rdma.createQp({
            pd: pdB,
            sendCq: cqB,
            recvCq: cqB,
            maxSendWr: 64,
            maxRecvWr: 64,
            ird: 2,
            ord: 3,
          });
          return { qp: passive };
        });
        const A = makeEnds(a, { ird: 32, ord: 32, maxSendWr: 64, maxRecvWr: 64 });
        const res = await a.rdma.connect(A.qp, IP_B, PORT);
        assert.is(res.privateData.length, 0, 'no private data');
        const P = passive as unknown as Qp;
        await settle(5);
        const qa = a.rdma.queryQp(A.qp),
          qb = b.rdma.queryQp(P);
        assert.equal([qb.ird, qb.ord], [2, 3], 'passive: REQ.ord and REQ.ird within what the QP allows');
        assert.is(qa.ord, 2, 'active ORD = the passive IRD');
        assert.ok(qa.ird >= qb.ord, 'active IRD serves the passive ORD');
        // Five reads with ORD 2 against IRD 2: all complete, none overruns the responder.
        const src = b.rdma.regMr(pdB, pattern(5000, 121), ['remote-read']);
        const dst = a.rdma.regMr(A.pd, 5000, ['local-write']);
        for (let i = 0; i < 5; i++)
          a.rdma.postSend(A.qp, {
            wrId: i,
            opcode: 'read',
            sg: [{ mr: dst, offset: i * 1000, length: 1000 }],
            remote: { stag: src.stag, offset: i * 1000 },
          });
        const rd = await waitCompletions(A.scq, 5);
        assert.equal(
          rd.map((c) => [c.wrId, c.status]),
          [0, 1, 2, 3, 4].map((i) => [i, 'success']),
        );
        sameBytes(dst.memory, src.memory, 'reads');
        assert.is(b.rdma.queryQp(P).state, 'rts');
      },
      { connect: false },
    ));

  // The big transfers' times, printed for whoever reads the log (never asserted: `npm run
  // bench -- rdma` measures them against kernel baselines).
  all.after(() => {
    for (const t of timings) console.log(`  ${t}`);
  });

  return all;
}
