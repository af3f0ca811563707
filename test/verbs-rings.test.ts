/**
 * The shared rings of the verbs data path (dataplane/verbs-server/rings.ts) against a hostile program:
 * this test speaks the verbs socket itself (native/verbs-lib/proto.h), maps its own rings, and
 * scribbles seeded garbage into its send and receive rings. Every work request must complete
 * (in error) or be refused, the CQEs must stay inside the CQ ring and name the QP, an impossible
 * producer index must refuse the ring, and the daemon must keep serving with nothing left behind.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCore } from '../native/addons.ts';
import { IP_B, twoDataplanes } from './dataplane-helpers.ts';
import { Rng } from './hostile-helpers.ts';
import { nothingLeft } from './verbs-helpers.ts';

const MAGIC = 0x31564752;
const NONE = 0xffffffff;

/** Requests on a raw verbs-socket connection: one request, its reply's status and u32 words. */
function requester(conn: number) {
  const core = loadCore();
  let seq = 0;
  return async (op: number, words: number[], pass = -1): Promise<{ status: number; w: number[] }> => {
    const b = new Uint8Array(16 + 4 * words.length);
    const v = new DataView(b.buffer);
    v.setUint32(0, MAGIC, true);
    v.setUint16(4, op, true);
    v.setUint32(8, ++seq, true);
    words.forEach((x, k) => v.setUint32(16 + 4 * k, x >>> 0, true));
    assert.is(core.seqpacketSend(conn, b, pass), 0);
    for (let t = 0; t < 5000; t++) {
      const m = core.seqpacketRecv(conn);
      if (m !== null) {
        assert.ok('data' in m, `op ${op} answered, not dropped`);
        const r = new DataView(m.data.buffer, m.data.byteOffset, m.data.length);
        const w: number[] = [];
        for (let k = 16; k + 4 <= m.data.length; k += 4) w.push(r.getUint32(k, true));
        return { status: r.getInt16(6, true), w };
      }
      await new Promise((r) => setImmediate(r));
    }
    throw new Error(`op ${op}: no answer`);
  };
}

/** ATTACH words: the interface name, 32 bytes. */
const ifnameWords = (name: string) => {
  const b = new Uint8Array(32);
  b.set(new TextEncoder().encode(name));
  return [...new Uint32Array(b.buffer)];
};

/**
 * A raw verbs-socket client of data plane A (of two joined ones): its connection, a request
 * function and a doorbell eventfd; everything is closed after `body`, whatever it does.
 */
async function rawClient(
  body: (c: {
    core: ReturnType<typeof loadCore>;
    dps: Awaited<ReturnType<typeof twoDataplanes>>;
    vs: ReturnType<Awaited<ReturnType<typeof twoDataplanes>>['a']['serveVerbs']>;
    conn: number;
    req: ReturnType<typeof requester>;
    efd: number;
  }) => Promise<void>,
): Promise<void> {
  const core = loadCore();
  const dir = mkdtempSync(join(tmpdir(), 'verbs-rings-'));
  const socket = join(dir, 'v.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket, log: () => undefined });
  const conn = core.memifRawConnect(socket);
  const req = requester(conn);
  const efd = core.eventfd();
  try {
    await body({ core, dps, vs, conn, req, efd });
  } finally {
    core.closeFd(efd);
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a program scribbling on its rings: garbage WQEs complete in error or flush, CQEs stay in the ring, an impossible index refuses the ring, the daemon keeps serving and loses nothing', async () => {
  await rawClient(async ({ core, dps, conn, req, efd }) => {
    // (the connection is closed at the end of the body: its release is part of what is checked)
    // ATTACH: the opened device's interface name (32 bytes) and the doorbell eventfd.
    const nameWords = ifnameWords((await dps.a.interfaces())[0].name);
    assert.is((await req(12, new Array(8).fill(0x41414141), efd)).status, -19, 'no such interface: ENODEV');
    assert.is((await req(12, nameWords, efd)).status, 0, 'ATTACH with a doorbell eventfd');
    const pd = (await req(2, [])).w[0];
    // An MR (at a made-up address: for the daemon it is just the tagged offset of byte 0).
    const mrMem = core.allocMemory(4096, { hugepages: 'never', name: 'hostile-mr' });
    const base = 0x10000000;
    const mr = await req(4, [pd, 1, 4096, 0, base, 0, base, 0, 4096, 0], mrMem.fd);
    assert.is(mr.status, 0);
    const stag = mr.w[1];
    const CQE = 64;
    const cqMem = core.allocMemory(128 + CQE * 32, { hugepages: 'never', name: 'hostile-cq' });
    const cq = await req(6, [CQE, NONE, 128 + CQE * 32, 0], cqMem.fd);
    assert.is(cq.status, 0);
    const qpr = await req(8, [pd, cq.w[0], cq.w[0], 32, 32, 4, 64, NONE]);
    assert.is(qpr.status, 0);
    const [qpn, sw, rw, sge, inl] = qpr.w;
    const sqE = 32,
      rqE = 32,
      sqS = 64 + Math.max(sge * 16, (inl + 15) & ~15),
      rqS = 16 + sge * 16;
    assert.equal([sw, rw], [32, 32]);
    const bytes = 128 + sqE * sqS + rqE * rqS;
    const qpMem = core.allocMemory(bytes, { hugepages: 'never', name: 'hostile-qp' });
    assert.is(
      (await req(15, [qpn, sqE, rqE + 1, sqS, rqS, 0, bytes, 0], qpMem.fd)).status,
      -22,
      'wrong ring sizes: EINVAL',
    );
    assert.is((await req(15, [qpn, sqE, rqE, sqS, rqS, 0, bytes, 0], qpMem.fd)).status, 0);
    // INIT, RTR towards a QP that does not exist (nothing will answer), RTS.
    const modify = (state: number, mask: number) => {
      const w = [qpn, mask, state, 0, 0, 0xffff0000, 0, 23456, 1000, 2000, 1, 1, 0];
      const ip = IP_B.split('.').map(Number);
      w[6] = ip[0] | (ip[1] << 8) | (ip[2] << 16) | (ip[3] << 24);
      return req(9, w);
    };
    assert.is((await modify(1, 1)).status, 0);
    assert.is((await modify(2, 1 | (1 << 7) | (1 << 20) | (1 << 12))).status, 0);
    assert.is((await modify(3, 1 | (1 << 16))).status, 0);

    const u32 = new Uint32Array(qpMem.buffer);
    const cq32 = new Uint32Array(cqMem.buffer);
    const rng = new Rng(1616);
    let sqProd = 0,
      rqProd = 0,
      cqCons = 0;
    const cqes: { status: number; opcode: number; qp: number }[] = [];
    const drainCq = () => {
      const prod = Atomics.load(cq32, 16);
      assert.ok((prod - cqCons) >>> 0 <= CQE, 'the daemon never writes past the CQ ring');
      while (cqCons !== prod) {
        const w = 32 + (cqCons & (CQE - 1)) * 8;
        cqes.push({ status: cq32[w + 2], opcode: cq32[w + 3], qp: cq32[w + 6] });
        cqCons = (cqCons + 1) >>> 0;
      }
      Atomics.store(cq32, 0, cqCons);
    };
    for (let round = 0; round < 60; round++) {
      const ns = rng.int(33),
        nr = rng.int(33);
      for (let k = 0; k < ns; k++) {
        const w = (128 + ((sqProd + k) & (sqE - 1)) * sqS) >>> 2;
        rng.fill(new Uint8Array(qpMem.buffer, w * 4, sqS));
        if (rng.chance(0.7)) u32[w + 2] = rng.pick([0, 1, 2, 3, 4, 5, 6, 9]); // real opcodes as often as not
        if (rng.chance(0.5)) u32[w + 3] = rng.pick([0, 2, 8, 10]); // flags: signaled, inline
        if (rng.chance(0.7)) u32[w + 4] = rng.int(6); // num_sge
        if (rng.chance(0.5)) u32[w + 9] = rng.int(200); // inline_len
        for (let e = 0; e < 4; e++) {
          const s = w + 16 + 4 * e;
          if (rng.chance(0.5)) {
            u32[s] = base + rng.int(4200);
            u32[s + 1] = 0;
            u32[s + 2] = rng.int(300);
            u32[s + 3] = rng.chance(0.7) ? stag : rng.int(1 << 30);
          }
        }
      }
      for (let k = 0; k < nr; k++) {
        const at = 128 + sqE * sqS + ((rqProd + k) & (rqE - 1)) * rqS;
        rng.fill(new Uint8Array(qpMem.buffer, at, rqS));
        if (rng.chance(0.7)) u32[(at >>> 2) + 2] = rng.int(6);
      }
      // Only what the queues can hold (the library's own check), so nothing is refused for size.
      sqProd = (sqProd + Math.min(ns, sw - ((sqProd - Atomics.load(u32, 18)) >>> 0))) >>> 0;
      rqProd = (rqProd + Math.min(nr, rw - ((rqProd - Atomics.load(u32, 19)) >>> 0))) >>> 0;
      Atomics.store(u32, 0, sqProd);
      Atomics.store(u32, 1, rqProd);
      core.eventfdWrite(efd); // the doorbell, as the library rings it
      for (let t = 0; t < 200 && (Atomics.load(u32, 16) !== sqProd || Atomics.load(u32, 17) !== rqProd); t++) {
        drainCq();
        await new Promise((r) => setImmediate(r));
      }
      drainCq();
    }
    assert.ok(cqes.length > 100, `completions came back: ${cqes.length}`);
    assert.ok(
      cqes.every((c) => c.qp === qpn),
      'every CQE names the QP',
    );
    const statuses = new Set(cqes.map((c) => c.status));
    assert.ok(
      [...statuses].every((s) => [2, 4, 5, 12].includes(s)),
      `only error statuses (no peer answers): ${[...statuses]}`,
    );
    assert.ok(statuses.has(2) || statuses.has(4), 'malformed or unprotected work requests completed in error');
    assert.ok(statuses.has(5), 'and the rest flushed once the QP was in error');
    const bad = (await dps.a.errors())[0].rows.find((r) => r.node === 'verbs-input');
    assert.ok(bad !== undefined && bad.count > 0, 'verbs-input counted refused work requests');
    assert.is((await dps.a.getQp(qpn)).state, 'error');
    // An impossible producer index: the ring is refused for good, the daemon goes on.
    Atomics.store(u32, 0, (sqProd + 100000) >>> 0);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(u32, 16), sqProd, 'nothing taken from a ring whose producer is impossible');
    assert.is((await req(1, [])).status, 0, 'the daemon still serves');
    core.closeFd(conn);
    await nothingLeft(dps.a);
  });
});

test('a program scribbling on its SRQ ring and its CQ consumer index: the SRQ ring is refused, a CQE never lands past the CQ, the daemon keeps serving and loses nothing', async () => {
  await rawClient(async ({ core, dps, conn, req, efd }) => {
    assert.is((await req(12, ifnameWords((await dps.a.interfaces())[0].name), efd)).status, 0);
    const pd = (await req(2, [])).w[0];
    // An SRQ and its ring.
    const srq = await req(16, [pd, 32, 4, 0]);
    assert.is(srq.status, 0);
    const [sh, maxWr, maxSge] = srq.w;
    const entries = 32,
      stride = 16 + 16 * maxSge,
      sbytes = 128 + entries * stride;
    assert.is(maxWr, 32);
    const sMem = core.allocMemory(sbytes, { hugepages: 'never', name: 'hostile-srq' });
    assert.is((await req(17, [sh, entries, stride + 16, 0, sbytes, 0], sMem.fd)).status, -22, 'wrong stride: EINVAL');
    assert.is((await req(17, [sh, entries, stride, 0, sbytes, 0], sMem.fd)).status, 0);
    const s32 = new Uint32Array(sMem.buffer);
    const rng = new Rng(1717);
    // Garbage receive WQEs (num_sge up to 40 of 4 allowed, random lkeys): each is posted (a bad
    // lkey fails only when a message uses it) or refuses the ring; nothing else.
    for (let k = 0; k < 24; k++) {
      const at = 128 + k * stride;
      rng.fill(new Uint8Array(sMem.buffer, at, stride));
      s32[(at >>> 2) + 2] = rng.int(41);
    }
    Atomics.store(s32, 0, 24);
    core.eventfdWrite(efd); // the doorbell, as the library rings it (the engine may be asleep)
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    const cons = Atomics.load(s32, 16);
    assert.ok(cons < 24, `a malformed WQE (num_sge up to 40 of ${maxSge}) stopped the ring at ${cons} of 24`);
    const bad = (await dps.a.errors())[0].rows.find((r) => r.node === 'verbs-input');
    assert.ok(bad !== undefined && bad.count > 0, 'the refused WQE is counted');
    // An impossible producer: nothing more is taken.
    Atomics.store(s32, 0, 100000);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(s32, 16), cons, 'nothing taken from a ring whose producer is impossible');

    // A CQ whose consumer index the program set far ahead: a completion finds no room.
    const CQE = 8;
    const cqMem = core.allocMemory(128 + CQE * 32, { hugepages: 'never', name: 'hostile-cq2' });
    const cq = await req(6, [CQE, 0xffffffff, 128 + CQE * 32, 0], cqMem.fd);
    assert.is(cq.status, 0);
    const c32 = new Uint32Array(cqMem.buffer);
    Atomics.store(c32, 0, 0x80000000);
    const qpr = await req(8, [pd, cq.w[0], cq.w[0], 8, 8, 1, 0, 0xffffffff]);
    assert.is(qpr.status, 0);
    const [qpn, sw, rw, sge, inl] = qpr.w;
    const sqS = 64 + Math.max(sge * 16, (inl + 15) & ~15),
      rqS = 16 + sge * 16,
      bytes = 128 + sw * sqS + rw * rqS;
    const qMem = core.allocMemory(bytes, { hugepages: 'never', name: 'hostile-qp2' });
    assert.is((await req(15, [qpn, sw, rw, sqS, rqS, 0, bytes, 0], qMem.fd)).status, 0);
    const q32 = new Uint32Array(qMem.buffer);
    assert.is((await req(9, [qpn, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])).status, 0, 'INIT');
    // One receive (no SGE), then the QP to ERROR: its flush completion wants the CQ.
    const at = 128 + sw * sqS;
    q32[at >>> 2] = 7;
    q32[(at >>> 2) + 2] = 0;
    Atomics.store(q32, 1, 1);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50 && Atomics.load(q32, 17) !== 1; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(q32, 17), 1, 'the receive was taken');
    assert.is((await req(9, [qpn, 1, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])).status, 0, 'to ERROR');
    for (let t = 0; t < 20; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(c32, 16), 0, 'no CQE written: the ring had no room by its consumer index');
    assert.is(Atomics.load(c32, 18), 1, 'the CQ says it overflowed');
    assert.is((await req(1, [])).status, 0, 'the daemon still serves');
    core.closeFd(conn);
    await nothingLeft(dps.a);
  });
});

test("a refused ring's state word says ERROR, as the QP is (the program sees it without a verb)", async () => {
  await rawClient(async ({ core, dps, conn, req, efd }) => {
    assert.is((await req(12, ifnameWords((await dps.a.interfaces())[0].name), efd)).status, 0);
    const pd = (await req(2, [])).w[0];
    const CQE = 16;
    const cqMem = core.allocMemory(128 + CQE * 32, { hugepages: 'never', name: 'state-cq' });
    const cq = await req(6, [CQE, NONE, 128 + CQE * 32, 0], cqMem.fd);
    assert.is(cq.status, 0);
    const qpr = await req(8, [pd, cq.w[0], cq.w[0], 8, 8, 1, 0, NONE]);
    assert.is(qpr.status, 0);
    const [qpn, sw, rw, sge, inl] = qpr.w;
    const sqS = 64 + Math.max(sge * 16, (inl + 15) & ~15),
      rqS = 16 + sge * 16,
      bytes = 128 + sw * sqS + rw * rqS;
    const qMem = core.allocMemory(bytes, { hugepages: 'never', name: 'state-qp' });
    assert.is((await req(15, [qpn, sw, rw, sqS, rqS, 0, bytes, 0], qMem.fd)).status, 0);
    const q32 = new Uint32Array(qMem.buffer);
    const ip = IP_B.split('.').map(Number);
    const modify = (state: number, mask: number) =>
      req(9, [
        qpn,
        mask,
        state,
        0,
        0,
        0xffff0000,
        ip[0] | (ip[1] << 8) | (ip[2] << 16) | (ip[3] << 24),
        23456,
        1000,
        2000,
        1,
        1,
        0,
      ]);
    assert.is((await modify(1, 1)).status, 0);
    assert.is((await modify(2, 1 | (1 << 7) | (1 << 20) | (1 << 12))).status, 0);
    assert.is((await modify(3, 1 | (1 << 16))).status, 0);
    const STATE = 21;
    core.eventfdWrite(efd);
    for (let t = 0; t < 50 && Atomics.load(q32, STATE) !== 3; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(q32, STATE), 3, 'RTS in the state word');
    // An impossible producer index: the ring is refused and its QP goes to ERROR.
    Atomics.store(q32, 0, 100000);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50 && (await dps.a.getQp(qpn)).state !== 'error'; t++)
      await new Promise((r) => setImmediate(r));
    assert.is((await dps.a.getQp(qpn)).state, 'error');
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(q32, STATE), 6, 'the state word says ERROR too');
    core.closeFd(conn);
    await nothingLeft(dps.a);
  });
});

test.run();
