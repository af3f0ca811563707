/**
 * Issue 12 item 5, "allocation that never stalls the data plane for long": creating the largest
 * QP the verbs allow (16384 send WRs with 4096 inline bytes, 16384 receive WRs) took 0.4-0.6 s
 * of the main thread and ~130 MB (a Mr and a 4 KiB buffer per send slot, every slot made up
 * front). Slots are now made at their first post and the inline bytes of all slots share one
 * area made at the first inline post. Inline sends still carry each WR's own bytes.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Dataplane } from '../dataplane/dataplane.ts';
import { IP_A, IP_B, twoDataplanes } from './dataplane-helpers.ts';

/** heapUsed + arrayBuffers (typed arrays live outside the V8 heap: heapUsed alone misses them). */
const jsMemory = () => {
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};

// What is asserted is what the code must do (no slot made before its first post, the inline
// area made once at the first inline post); the time and memory are printed (bench material).
test('creating a QP of 16384 send WRs with 4096 inline bytes and 16384 receive WRs makes no slot up front', async () => {
  const dps = await twoDataplanes();
  try {
    const a = dps.a;
    const { rdma } = Dataplane.internals(a);
    const { pd } = await a.createPd();
    const { cq } = await a.createCq({ depth: 64 });
    const times: number[] = [];
    const mem0 = jsMemory();
    const live = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const q = await a.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16384, maxRecvWr: 16384, maxInline: 4096 });
      times.push(performance.now() - t0);
      live.push(q.qpn);
      const qp = rdma.qpsByQpn.get(q.qpn)!;
      assert.equal(qp.slotsMade(), { send: 0, recv: 0, inlineBytes: 0 }, 'nothing made at creation');
    }
    const grew = (jsMemory() - mem0) / 2 ** 20;
    times.sort((x, y) => x - y);
    console.log(
      `  createQp 16384/16384 inline 4096: ${times.map((t) => t.toFixed(1)).join(', ')} ms; heap + ArrayBuffers grew ${grew.toFixed(1)} MiB for three live QPs`,
    );
    for (const q of live) await a.destroyQp(q);
  } finally {
    await dps.close();
  }
});

test('creating an SRQ of 16384 receive WRs with 32 SGEs each makes no slot up front (made at their first post, at most maxWr)', async () => {
  const dps = await twoDataplanes();
  try {
    const a = dps.a;
    const { rdma } = Dataplane.internals(a);
    const { pd } = await a.createPd();
    const times: number[] = [];
    const mem0 = jsMemory();
    const live = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const s = await a.createSrq({ pd, maxWr: 16384, maxSge: 32 });
      times.push(performance.now() - t0);
      live.push(s.srq);
      assert.is(rdma.srqs.get(s.srq)!.slotsMade, 0, 'no slot made at creation');
    }
    const grew = (jsMemory() - mem0) / 2 ** 20;
    times.sort((x, y) => x - y);
    console.log(
      `  createSrq 16384 x 32 SGEs: ${times.map((t) => t.toFixed(1)).join(', ')} ms; heap + ArrayBuffers grew ${grew.toFixed(1)} MiB for three live SRQs`,
    );
    for (const h of live) await a.destroySrq(h);
    // Exactly maxWr receives fit, one slot made per post.
    const s = await a.createSrq({ pd, maxWr: 3 });
    const mr = (await a.createMr({ pd, length: 64, access: ['local-write'] })).mr;
    for (let i = 0; i < 3; i++) {
      await a.postSrqRecv(s.srq, { wrId: i, sge: [{ mr, offset: 0, length: 64 }] });
      assert.is(rdma.srqs.get(s.srq)!.slotsMade, i + 1);
    }
    const full = await a.postSrqRecv(s.srq, { wrId: 3, sge: [{ mr, offset: 0, length: 64 }] }).then(
      () => null,
      (e: Error) => e.message,
    );
    assert.is(full, `srq ${s.srq} is full (maxWr 3)`);
    assert.is(rdma.srqs.get(s.srq)!.slotsMade, 3, 'never more than maxWr');
  } finally {
    await dps.close();
  }
});

test('inline sends: each of many outstanding WRs carries the bytes it was posted with (its own part of the inline area)', async () => {
  const dps = await twoDataplanes();
  try {
    const { a, b } = dps;
    const pa = (await a.createPd()).pd,
      pb = (await b.createPd()).pd;
    const ca = (await a.createCq({ depth: 256 })).cq,
      cb = (await b.createCq({ depth: 256 })).cq;
    const src = (await a.createMr({ pd: pa, length: 64, access: [] })).mr;
    const N = 100;
    const dst = (await b.createMr({ pd: pb, length: N * 64, access: ['local-write'] })).mr;
    const qa = await a.createQp({ pd: pa, sendCq: ca, recvCq: ca, maxSendWr: N, maxRecvWr: 4, maxInline: 64 });
    const qb = await b.createQp({ pd: pb, sendCq: cb, recvCq: cb, maxSendWr: 4, maxRecvWr: N });
    await a.connect(qa.qpn, { remote: { ip: IP_B, port: qb.qpn }, mode: 'manual', remotePsn: qb.psn });
    await b.connect(qb.qpn, { remote: { ip: IP_A, port: qa.qpn }, mode: 'manual', remotePsn: qa.psn });
    for (let i = 0; i < N; i++) await b.postRecv(qb.qpn, { wrId: i, sge: [{ mr: dst, offset: i * 64, length: 64 }] });
    // Post all N before the graph runs; the source MR is rewritten after every post.
    for (let i = 0; i < N; i++) {
      await a.writeMr(src, 0, new Uint8Array(48).fill(i + 1));
      await a.postSend(qa.qpn, { wrId: i, opcode: 'send', inline: true, sge: [{ mr: src, offset: 0, length: 48 }] });
    }
    // One send slot per post, and the inline area (maxSendWr x maxInline) made once.
    assert.equal(Dataplane.internals(a).rdma.qpsByQpn.get(qa.qpn)!.slotsMade(), {
      send: N,
      recv: 0,
      inlineBytes: N * 64,
    });
    const got: number[] = [];
    for (let k = 0; k < 100 && got.length < N; k++) {
      const r = await b.pollCq(cb, 256, 200);
      for (const c of r.completions) {
        assert.is(c.status, 'success');
        got.push(c.wrId as number);
      }
    }
    assert.is(got.length, N);
    const bytes = await b.readMr(dst);
    for (let i = 0; i < N; i++)
      assert.equal([...bytes.subarray(i * 64, i * 64 + 48)], new Array(48).fill(i + 1), `message ${i}`);
  } finally {
    await dps.close();
  }
});

test.run();
