/**
 * Every verbs operation through the Dataplane's methods (what the REST API and rdmactl call)
 * between two data planes over memif, first on one thread each (the reference), then with
 * cpu.workers: 2 on both sides and two memif queue pairs, for QP pairs on worker 0 of both, on
 * worker 1 of both, and across (A's worker 0 with B's worker 1, through handoff): SEND of sizes
 * from 0 to 1 MiB, with solicited event and with invalidate, WRITE and WRITE with immediate,
 * READ, fetch-add / swap / compare-and-swap, inline and unsignaled requests, a burst of 300,
 * a shared receive queue and the in-band connection manager. Then the fault run: mixed SEND,
 * WRITE, READ and fetch-add on three QP pairs spread over the workers at once, with loss,
 * reordering, duplication and corruption on both directions of A's link (every queue's injector).
 * Data is compared byte for byte; every completion arrives once and succeeds.
 */
import { test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { pattern } from './rdma-helpers.ts';
import { everyOperation as requestsEach, takeCq as take, u64 } from './dataplane-ops-helpers.ts';
import { end, IP_A, IP_B, memifPair, type End, type MemifPair, pollOne } from './workers-helpers.ts';

const KiB = 1024,
  MiB = 1024 * KiB;
const ALL = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];

/** A QP's objects with a 4 MiB MR allowing everything. */
async function bigEnd(
  dp: DataplaneApi,
  itf: string,
  worker: number | undefined,
  srq = false,
): Promise<End & { srq?: number }> {
  const on = worker === undefined ? {} : { worker };
  const pd = await dp.createPd({ interface: itf, ...on });
  const cq = await dp.createCq({ depth: 1024, interface: itf, ...on });
  const mr = await dp.createMr({ pd: pd.pd, length: 4 * MiB, access: ALL });
  const s = srq ? (await dp.createSrq({ pd: pd.pd, maxWr: 64 })).srq : undefined;
  const qp = await dp.createQp({
    pd: pd.pd,
    sendCq: cq.cq,
    recvCq: cq.cq,
    interface: itf,
    maxSendWr: 512,
    maxRecvWr: 512,
    maxInline: 64,
    ...(s === undefined ? {} : { srq: s }),
  });
  return { pd, cq, mr, qp, ...(s === undefined ? {} : { srq: s }) };
}

async function connectManual(p: MemifPair, x: End, y: End): Promise<void> {
  await p.a.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
  await p.b.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
}

/** Every operation between x (on A) and y (on B). */
async function everyOperation(p: MemifPair, x: End, y: End, seed: number): Promise<void> {
  const { a, b } = p;
  // SEND, with solicited event and invalidate, WRITE, WRITE with immediate, READ, atomics.
  await requestsEach({ dp: a, ip: IP_A, ...x }, { dp: b, ip: IP_B, ...y }, seed);

  // Inline (the bytes copied at post time: changed right after) and unsignaled requests.
  await b.postRecv(y.qp.qpn, { wrId: 'in', sge: [{ mr: y.mr.mr, offset: 0, length: 64 }] });
  await a.writeMr(x.mr.mr, 0, pattern(48, seed + 200));
  await a.postSend(x.qp.qpn, {
    wrId: 'in',
    opcode: 'send',
    inline: true,
    sge: [{ mr: x.mr.mr, offset: 0, length: 48 }],
  });
  await a.writeMr(x.mr.mr, 0, new Uint8Array(48));
  await take(a, x.cq.cq, 1);
  assert.is((await take(b, y.cq.cq, 1))[0].byteLen, 48);
  assert.equal(await b.readMr(y.mr.mr, 0, 48), pattern(48, seed + 200), 'inline data as it was at post time');
  const u = pattern(10 * KiB, seed + 300);
  await a.writeMr(x.mr.mr, 0, u);
  for (let i = 0; i < 10; i++)
    await a.postSend(x.qp.qpn, {
      wrId: `u${i}`,
      opcode: 'write',
      signaled: i === 9,
      sge: [{ mr: x.mr.mr, offset: i * KiB, length: KiB }],
      remote: { stag: y.mr.stag, offset: i * KiB },
    });
  assert.equal(
    (await take(a, x.cq.cq, 1)).map((c) => c.wrId),
    ['u9'],
    'only the signaled one completes',
  );
  assert.equal(await b.readMr(y.mr.mr, 0, 10 * KiB), u, 'unsignaled WRITEs landed');

  // A burst of 300 WRITEs of 1 KiB, all posted before any completes.
  const burst = pattern(300 * KiB, seed + 400);
  await a.writeMr(x.mr.mr, 0, burst);
  await Promise.all(
    Array.from({ length: 300 }, (_, i) =>
      a.postSend(x.qp.qpn, {
        wrId: i,
        opcode: 'write',
        sge: [{ mr: x.mr.mr, offset: i * KiB, length: KiB }],
        remote: { stag: y.mr.stag, offset: MiB + i * KiB },
      }),
    ),
  );
  const bc = await take(a, x.cq.cq, 300);
  assert.ok(
    bc.every((c, i) => c.wrId === i && c.status === 'success'),
    'all 300 in order',
  );
  assert.equal(await b.readMr(y.mr.mr, MiB, 300 * KiB), burst, 'burst data');
}

/** A shared receive queue on B's side: three SENDs land in its receives. */
async function srqOperation(p: MemifPair, workerA: number | undefined, workerB: number | undefined): Promise<void> {
  const x = await bigEnd(p.a, 'm0', workerA),
    y = await bigEnd(p.b, 'n0', workerB, true);
  await connectManual(p, x, y);
  for (let i = 0; i < 3; i++)
    await p.b.postSrqRecv(y.srq as number, { wrId: `s${i}`, sge: [{ mr: y.mr.mr, offset: i * 4096, length: 4096 }] });
  await p.a.writeMr(x.mr.mr, 0, pattern(3000, 9));
  for (let i = 0; i < 3; i++)
    await p.a.postSend(x.qp.qpn, {
      wrId: i,
      opcode: 'send',
      sge: [{ mr: x.mr.mr, offset: 0, length: 1000 * (i + 1) }],
    });
  await take(p.a, x.cq.cq, 3);
  const rc = await take(p.b, y.cq.cq, 3);
  assert.equal(
    rc.map((c) => [c.wrId, c.byteLen, c.qpn]),
    [
      ['s0', 1000, y.qp.qpn],
      ['s1', 2000, y.qp.qpn],
      ['s2', 3000, y.qp.qpn],
    ],
  );
  assert.equal(await p.b.readMr(y.mr.mr, 2 * 4096, 3000), pattern(3000, 9));
}

/** The connection manager: a listener on A's `workerA`, B connects from `workerB`, then a SEND. */
async function cmOperation(p: MemifPair, workerA: number | undefined, workerB: number | undefined, from: number) {
  // A port in the worker's slice that no QP has taken (QP numbers are drawn at random).
  const used = new Set((await p.a.qps()).map((q) => q.qpn));
  let port = from;
  while (used.has(port)) port++;
  const on = workerA === undefined ? {} : { worker: workerA };
  const pd = await p.a.createPd({ interface: 'm0', ...on });
  const cq = await p.a.createCq({ depth: 64, interface: 'm0', ...on });
  const mr = await p.a.createMr({ pd: pd.pd, length: 4096, access: ['local-write'] });
  await p.a.listen({ port, pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, maxSendWr: 16, maxRecvWr: 16, interface: 'm0' });
  const y = await end(p.b, 'n0', workerB);
  const r = await p.b.connect(y.qp.qpn, {
    remote: { ip: IP_A, port },
    mode: 'cm',
    privateData: new Uint8Array([1, 2, 3]),
  });
  assert.is(r.state, 'rts');
  const [l] = (await p.a.listenersList()).filter((x) => x.port === port);
  assert.is(l.accepted.length, 1);
  const qpn = l.accepted[0];
  await p.a.postRecv(qpn, { wrId: 'cm', sge: [{ mr: mr.mr, offset: 0, length: 4096 }] });
  await p.b.writeMr(y.mr.mr, 0, pattern(777, 4));
  await p.b.postSend(y.qp.qpn, { wrId: 'cm', opcode: 'send', sge: [{ mr: y.mr.mr, offset: 0, length: 777 }] });
  assert.is((await pollOne(p.b, y.cq.cq)).status, 'success');
  const c = await pollOne(p.a, cq.cq);
  assert.equal([c.wrId, c.qpn, c.byteLen], ['cm', qpn, 777]);
  assert.equal(await p.a.readMr(mr.mr, 0, 777), pattern(777, 4));
  await p.a.unlisten(port);
}

async function suite(p: MemifPair, pairs: [number | undefined, number | undefined][]): Promise<void> {
  for (const [k, [wa, wb]] of pairs.entries()) {
    const x = await bigEnd(p.a, 'm0', wa),
      y = await bigEnd(p.b, 'n0', wb);
    if (wa !== undefined) assert.is(x.pd.pd >= 1 << 24, wa === 1, `A's objects on worker ${wa}`);
    if (wb !== undefined) assert.is(y.pd.pd >= 1 << 24, wb === 1, `B's objects on worker ${wb}`);
    await connectManual(p, x, y);
    await everyOperation(p, x, y, 10 * k + 1);
    await srqOperation(p, wa, wb);
    // A's listener port in its worker's slice of 20000..29999.
    await cmOperation(p, wa, wb, (wa ?? 0) === 1 ? 26000 + k : 21000 + k);
  }
}

test('every operation between two data planes on one thread each (the reference run)', async () => {
  const p = await memifPair({ workersA: 0, workersB: 0, queues: 1 });
  try {
    await suite(p, [[undefined, undefined]]);
  } finally {
    await p.close();
  }
});

test('every operation with cpu.workers: 2 and two memif queue pairs: QPs on worker 0, on worker 1, and across', async () => {
  const p = await memifPair({ workersA: 2, workersB: 2, queues: 2 });
  try {
    await suite(p, [
      [0, 0],
      [1, 1],
      [0, 1],
    ]);
    const rt = await p.a.runtime();
    assert.ok(
      rt.every((t) => (t.rows.find((r) => r.name === 'memif-input')?.vectors ?? 0) > 50),
      'both workers received on their own memif queue',
    );
  } finally {
    await p.close();
  }
});

/** Mixed operations on one QP pair, `ops` of them, with at most 32 in flight; everything checked. */
async function mixed(
  p: MemifPair,
  x: End,
  y: End,
  ops: number,
  seed: number,
): Promise<{ bytes: number; adds: bigint }> {
  const SLOT = 4096,
    FLIGHT = 32;
  let bytes = 0,
    adds = 0n,
    recvs = 0;
  // Data compared; on a difference, say where it starts and whether it is an earlier round's
  // data for the same slot (a stale segment placed late).
  const same = (got: Uint8Array, want: Uint8Array, id: number, slot: number, where: string) => {
    if (Buffer.from(got).equals(want)) return;
    let first = 0;
    while (got[first] === want[first]) first++;
    let diff = 0;
    for (let j = 0; j < want.length; j++) if (got[j] !== want[j]) diff++;
    const older = [1, 2, 3, 4].find(
      (r) =>
        id - r * FLIGHT >= 0 &&
        Buffer.from(got.subarray(first, first + 64)).equals(
          pattern(SLOT, seed * 7 + id - r * FLIGHT).subarray(first, first + 64),
        ),
    );
    assert.unreachable(
      `${where} on QP ${x.qp.qpn} (slot ${slot}): ${diff} bytes differ from byte ${first}${older ? `, which are round -${older}'s` : ''}`,
    );
  };
  for (let base = 0; base < ops; base += FLIGHT) {
    const n = Math.min(FLIGHT, ops - base);
    const plan: { kind: string; len: number; data: Uint8Array }[] = [];
    for (let i = 0; i < n; i++) {
      const id = base + i;
      const r = pattern(4, seed * 100003 + id);
      const len = ((r[0] << 8) | r[1]) % SLOT;
      const kind = r[2] < 77 ? 'send' : r[2] < 154 ? 'write' : r[2] < 230 ? 'read' : 'fetch-add';
      plan.push({ kind, len, data: pattern(len, seed * 7 + id) });
    }
    // Sources and READ targets' sources in place first (slot i of this round).
    await Promise.all(
      plan.map((o, i) =>
        o.kind === 'read' ? p.b.writeMr(y.mr.mr, i * SLOT, o.data) : p.a.writeMr(x.mr.mr, i * SLOT, o.data),
      ),
    );
    await Promise.all(
      plan.map((o, i) =>
        o.kind === 'send'
          ? p.b.postRecv(y.qp.qpn, { wrId: base + i, sge: [{ mr: y.mr.mr, offset: 2 * MiB + i * SLOT, length: SLOT }] })
          : Promise.resolve(),
      ),
    );
    for (const [i, o] of plan.entries()) {
      const id = base + i;
      if (o.kind === 'send')
        await p.a.postSend(x.qp.qpn, {
          wrId: id,
          opcode: 'send',
          sge: [{ mr: x.mr.mr, offset: i * SLOT, length: o.len }],
        });
      else if (o.kind === 'write')
        await p.a.postSend(x.qp.qpn, {
          wrId: id,
          opcode: 'write',
          sge: [{ mr: x.mr.mr, offset: i * SLOT, length: o.len }],
          remote: { stag: y.mr.stag, offset: MiB + i * SLOT },
        });
      else if (o.kind === 'read')
        await p.a.postSend(x.qp.qpn, {
          wrId: id,
          opcode: 'read',
          sge: [{ mr: x.mr.mr, offset: MiB + i * SLOT, length: o.len }],
          remote: { stag: y.mr.stag, offset: i * SLOT },
        });
      else {
        adds += BigInt(id + 1);
        await p.a.postSend(x.qp.qpn, {
          wrId: id,
          opcode: 'fetch-add',
          atomic: { add: String(id + 1) },
          sge: [{ mr: x.mr.mr, offset: 3 * MiB + i * 8, length: 8 }],
          remote: { stag: y.mr.stag, offset: 4 * MiB - 8 },
        });
      }
    }
    const cs = await take(p.a, x.cq.cq, n);
    const bad = cs.filter((c) => c.status !== 'success');
    assert.equal(
      bad,
      [],
      `round ${base}: ${JSON.stringify(bad.map((c) => [c.wrId, c.status, plan[(c.wrId as number) - base]?.kind]))}`,
    );
    assert.equal(
      cs.map((c) => [c.wrId, c.status]).sort((u, v) => (u[0] as number) - (v[0] as number)),
      plan.map((_, i) => [base + i, 'success']),
      'each request completed once, successfully',
    );
    const sends = plan.filter((o) => o.kind === 'send').length;
    const rc = sends > 0 ? await take(p.b, y.cq.cq, sends) : [];
    assert.ok(
      rc.every((c) => c.status === 'success'),
      'receives succeed',
    );
    recvs += rc.length;
    for (const [i, o] of plan.entries()) {
      const where = `op ${base + i} (${o.kind} of ${o.len})`;
      if (o.kind === 'send') {
        const c = rc.find((r) => r.wrId === base + i);
        assert.is(c?.byteLen, o.len, where);
        same(await p.b.readMr(y.mr.mr, 2 * MiB + i * SLOT, o.len), o.data, base + i, i, where);
      } else if (o.kind === 'write') same(await p.b.readMr(y.mr.mr, MiB + i * SLOT, o.len), o.data, base + i, i, where);
      else if (o.kind === 'read') same(await p.a.readMr(x.mr.mr, MiB + i * SLOT, o.len), o.data, base + i, i, where);
      if (o.kind !== 'fetch-add') bytes += o.len;
    }
  }
  assert.is(u64(await p.b.readMr(y.mr.mr, 4 * MiB - 8, 8)), adds, 'fetch-adds add up');
  assert.ok(recvs > 0);
  return { bytes, adds };
}

test('the fault run with cpu.workers: 2: loss, reordering, duplication and corruption on every queue of the link, three QP pairs over the workers at once', async () => {
  const p = await memifPair({
    workersA: 2,
    workersB: 2,
    queues: 2,
    udpChecksum: true, // corrupted frames must be caught
    rdma: { trp: { window: 256, rtoMinMs: 2, rtoMaxMs: 50, rtoInitMs: null, maxRetries: 30, ackDelayUs: 100 } },
  });
  try {
    const level = 0.05;
    const fault = {
      seed: 11,
      loss: level,
      reorder: level,
      duplicate: level,
      corrupt: level,
      reorderDepth: 8,
      reorderDelayUs: 300,
    };
    await p.a.setFault('m0', 'rx', fault);
    await p.a.setFault('m0', 'tx', fault);
    const pairs: [number, number][] = [
      [0, 0],
      [1, 1],
      [1, 0],
    ];
    const ends = await Promise.all(
      pairs.map(async ([wa, wb]) => [await bigEnd(p.a, 'm0', wa), await bigEnd(p.b, 'n0', wb)] as const),
    );
    for (const [x, y] of ends) await connectManual(p, x, y);
    await Promise.all(ends.map(([x, y], k) => mixed(p, x, y, 600, k + 1)));
    // Every pair repaired losses, the one on both workers 1 too: its frames never pass worker 0,
    // so worker 1's own queue had the injector.
    const qps = await Promise.all(ends.map(([x]) => p.a.getQp(x.qp.qpn)));
    assert.ok(
      qps.every((q) => q.counters.retransmits > 0),
      `retransmissions per pair: ${qps.map((q) => q.counters.retransmits)}`,
    );
    const itf = await p.a.interface('m0');
    assert.ok(
      itf.fault.rx !== null && itf.fault.rx.dropped > 0 && itf.fault.rx.corrupted > 0,
      `faults injected on the owner's queue: ${JSON.stringify(itf.fault)}`,
    );
  } finally {
    await p.close();
  }
});

test.run();
