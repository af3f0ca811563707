/**
 * Every verbs operation from one QP to another through the Dataplane's methods (what the REST
 * API and rdmactl call), the QPs on two data planes (test/workers-verbs.test.ts) or on one
 * (test/loopback.test.ts): a QP's objects with a 4 MiB MR, a manual connect, exactly n
 * completions, and the operations with every byte and completion checked.
 */
import * as assert from 'uvu/assert';
import type { DataplaneApi } from '../dataplane/api.ts';
import type { Completion } from '../nodes/rdma/verbs.ts';
import type { CqView, MrView, PdView, QpView } from '../dataplane/views.ts';
import { pattern } from './rdma-helpers.ts';

const KiB = 1024,
  MiB = 1024 * KiB;
const ALL = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];

/** A QP and its objects, on a data plane reached at `ip`. */
export interface Side {
  dp: DataplaneApi;
  ip: string;
  pd: PdView;
  cq: CqView;
  mr: MrView;
  qp: QpView;
}

/** A PD, CQ, 4 MiB MR and QP over `itf` (on `worker` when given); `ip` is the interface's address. */
export async function side(dp: DataplaneApi, itf: string, ip: string, worker?: number): Promise<Side> {
  const on = worker === undefined ? {} : { worker };
  const pd = await dp.createPd({ interface: itf, ...on });
  const cq = await dp.createCq({ depth: 1024, interface: itf, ...on });
  const mr = await dp.createMr({ pd: pd.pd, length: 4 * MiB, access: ALL });
  const qp = await dp.createQp({
    pd: pd.pd,
    sendCq: cq.cq,
    recvCq: cq.cq,
    interface: itf,
    maxSendWr: 512,
    maxRecvWr: 512,
  });
  return { dp, ip, pd, cq, mr, qp };
}

/** Connect x and y to each other (by address and QP number, as rdmactl's manual connect). */
export async function join(x: Side, y: Side): Promise<void> {
  await x.dp.connect(x.qp.qpn, { remote: { ip: y.ip, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
  await y.dp.connect(y.qp.qpn, { remote: { ip: x.ip, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
}

/** Exactly `n` completions from `dp`'s CQ `cq` (each within 5 s), then none more. */
export async function takeCq(dp: DataplaneApi, cq: number, n: number): Promise<Completion[]> {
  const out: Completion[] = [];
  while (out.length < n) {
    const r = await dp.pollCq(cq, Math.min(256, n - out.length), 5000);
    assert.ok(r.completions.length > 0, `completions stalled at ${out.length} of ${n}`);
    out.push(...r.completions);
  }
  assert.is((await dp.pollCq(cq, 16, 0)).completions.length, 0, 'no completion beyond those expected');
  return out;
}

/** Exactly `n` completions from s's CQ. */
export const take = (s: Side, n: number) => takeCq(s.dp, s.cq.cq, n);

/** An 8-byte word as atomics see it (host order, little-endian here). */
export const u64 = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, true);
const le64 = (v: bigint) => {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, v, true);
  return b;
};

/**
 * x's requests to y: SEND of sizes around one segment up to 1 MiB, with solicited event and
 * with invalidate, WRITE of 1 MiB, WRITE with immediate, READ of 1 MiB, fetch-add, swap and
 * compare-and-swap (failing, then succeeding). Every byte and completion is checked.
 */
export async function everyOperation(x: Side, y: Side, seed: number): Promise<void> {
  const seg = x.qp.segmentSize;
  const sizes = [0, 1, seg - 1, seg, seg + 1, 3 * seg + 7, 64 * KiB, 1 * MiB];
  let off = 0;
  const at: number[] = [];
  for (const [i, n] of sizes.entries()) {
    at.push(off);
    await y.dp.postRecv(y.qp.qpn, { wrId: `r${i}`, sge: [{ mr: y.mr.mr, offset: off, length: Math.max(n, 1) }] });
    await x.dp.writeMr(x.mr.mr, off, pattern(n, seed + i));
    off += n + 64;
  }
  for (const [i, n] of sizes.entries())
    await x.dp.postSend(x.qp.qpn, { wrId: i, opcode: 'send', sge: [{ mr: x.mr.mr, offset: at[i], length: n }] });
  assert.equal(
    (await take(x, sizes.length)).map((c) => [c.wrId, c.status, c.opcode, c.qpn]),
    sizes.map((_, i) => [i, 'success', 'send', x.qp.qpn]),
  );
  assert.equal(
    (await take(y, sizes.length)).map((c) => [c.wrId, c.status, c.opcode, c.byteLen, c.qpn]),
    sizes.map((n, i) => [`r${i}`, 'success', 'recv', n, y.qp.qpn]),
  );
  for (const [i, n] of sizes.entries())
    assert.equal(await y.dp.readMr(y.mr.mr, at[i], n), pattern(n, seed + i), `SEND of ${n} bytes`);

  // Solicited event; invalidate of an MR of y's that allows it.
  const inv = await y.dp.createMr({
    pd: y.pd.pd,
    length: 4096,
    access: ['local-write', 'remote-write', 'remote-invalidate'],
  });
  await x.dp.writeMr(x.mr.mr, 0, pattern(24, seed + 50));
  await y.dp.postRecv(y.qp.qpn, { wrId: 'se', sge: [{ mr: y.mr.mr, offset: 0, length: 64 }] });
  await y.dp.postRecv(y.qp.qpn, { wrId: 'inv', sge: [{ mr: y.mr.mr, offset: 64, length: 64 }] });
  await x.dp.postSend(x.qp.qpn, {
    wrId: 'se',
    opcode: 'send-with-solicited',
    sge: [{ mr: x.mr.mr, offset: 0, length: 16 }],
  });
  await x.dp.postSend(x.qp.qpn, {
    wrId: 'inv',
    opcode: 'send-with-invalidate',
    invalidateStag: inv.stag,
    sge: [{ mr: x.mr.mr, offset: 16, length: 8 }],
  });
  assert.equal(
    (await take(x, 2)).map((c) => [c.wrId, c.status]),
    [
      ['se', 'success'],
      ['inv', 'success'],
    ],
  );
  const [se, iv] = await take(y, 2);
  assert.equal([se.wrId, se.status, se.byteLen, se.solicited], ['se', 'success', 16, true], 'solicited event flagged');
  assert.equal([iv.wrId, iv.status, iv.byteLen, iv.invalidatedStag], ['inv', 'success', 8, inv.stag]);
  assert.equal(await y.dp.readMr(y.mr.mr, 0, 16), pattern(24, seed + 50).subarray(0, 16));
  assert.equal(await y.dp.readMr(y.mr.mr, 64, 8), pattern(24, seed + 50).subarray(16, 24));
  await y.dp.destroyMr(inv.mr);

  // WRITE 1 MiB, WRITE with immediate, READ the 1 MiB back elsewhere.
  const w = pattern(1 * MiB, seed + 100);
  await x.dp.writeMr(x.mr.mr, 0, w);
  await x.dp.postSend(x.qp.qpn, {
    wrId: 'w',
    opcode: 'write',
    sge: [{ mr: x.mr.mr, offset: 0, length: w.length }],
    remote: { stag: y.mr.stag, offset: 2 * MiB },
  });
  await y.dp.postRecv(y.qp.qpn, { wrId: 'imm' });
  await x.dp.postSend(x.qp.qpn, {
    wrId: 'wi',
    opcode: 'write-with-imm',
    imm: 0x1234abcd,
    sge: [{ mr: x.mr.mr, offset: 0, length: 4000 }],
    remote: { stag: y.mr.stag, offset: 3 * MiB + 100 },
  });
  assert.equal(
    (await take(x, 2)).map((c) => [c.wrId, c.status, c.opcode]),
    [
      ['w', 'success', 'write'],
      ['wi', 'success', 'write'],
    ],
  );
  const imm = (await take(y, 1))[0];
  assert.equal(
    [imm.wrId, imm.status, imm.opcode, imm.imm, imm.byteLen],
    ['imm', 'success', 'recv-with-imm', 0x1234abcd, 4000],
  );
  assert.equal(await y.dp.readMr(y.mr.mr, 2 * MiB, w.length), w, 'WRITE of 1 MiB');
  assert.equal(await y.dp.readMr(y.mr.mr, 3 * MiB + 100, 4000), w.subarray(0, 4000), 'WRITE with immediate');
  await x.dp.postSend(x.qp.qpn, {
    wrId: 'rd',
    opcode: 'read',
    sge: [{ mr: x.mr.mr, offset: 1 * MiB, length: 1 * MiB }],
    remote: { stag: y.mr.stag, offset: 2 * MiB },
  });
  const rd = (await take(x, 1))[0];
  assert.equal([rd.wrId, rd.status, rd.opcode, rd.byteLen], ['rd', 'success', 'read', 1 * MiB]);
  assert.equal(await x.dp.readMr(x.mr.mr, 1 * MiB, 1 * MiB), w, 'READ of 1 MiB');

  // Atomics on an 8-byte word of y's: the old value comes back each time.
  await y.dp.writeMr(y.mr.mr, 4 * MiB - 8, le64(1000n));
  const atomics: [string, object, bigint, bigint][] = [
    ['fetch-add', { add: '5' }, 1000n, 1005n],
    ['swap', { swap: '77' }, 1005n, 77n],
    ['cmp-swap', { compare: '76', swap: '9' }, 77n, 77n], // compare fails: unchanged
    ['cmp-swap', { compare: '77', swap: '9' }, 77n, 9n],
  ];
  for (const [i, [op, arg, old, now]] of atomics.entries()) {
    await x.dp.postSend(x.qp.qpn, {
      wrId: `at${i}`,
      opcode: op as 'swap',
      atomic: arg,
      sge: [{ mr: x.mr.mr, offset: 8 * i, length: 8 }],
      remote: { stag: y.mr.stag, offset: 4 * MiB - 8 },
    });
    const c = (await take(x, 1))[0];
    assert.equal([c.wrId, c.status, c.opcode, c.byteLen], [`at${i}`, 'success', op, 8]);
    assert.is(u64(await x.dp.readMr(x.mr.mr, 8 * i, 8)), old, `${op} returned the old value`);
    assert.is(u64(await y.dp.readMr(y.mr.mr, 4 * MiB - 8, 8)), now, `${op} left ${now}`);
  }
}

/** Every operation each way: x's requests to y, then y's to x. */
export async function bothWays(x: Side, y: Side, seed: number): Promise<void> {
  await everyOperation(x, y, seed);
  await everyOperation(y, x, seed + 1000);
}

/** A thread's count in the error table (`show errors`) for `node` and a reason matching `reason`. */
export async function errorCount(dp: DataplaneApi, node: string, reason: RegExp, thread?: string): Promise<number> {
  return (await dp.errors())
    .filter((t) => thread === undefined || t.name === thread)
    .flatMap((t) => t.rows)
    .filter((r) => r.node === node && reason.test(r.reason))
    .reduce((a, r) => a + r.count, 0);
}

/** Vectors of `node` in `show runtime`, per thread. */
export async function vectors(dp: DataplaneApi, node: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of await dp.runtime()) out[t.name] = t.rows.find((r) => r.name === node)?.vectors ?? 0;
  return out;
}

/** Packets every interface of `dp` moved through its driver (received and transmitted). */
export async function wire(dp: DataplaneApi): Promise<number> {
  return (await dp.interfaces()).reduce((s, i) => s + i.counters.txPackets + i.counters.rxPackets, 0);
}
