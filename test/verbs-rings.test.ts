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
import { Dataplane } from '../dataplane/dataplane.ts';
import {
  RGV_ACCESS_LOCAL_WRITE,
  RGV_ATTR_AV,
  RGV_ATTR_DEST_QPN,
  RGV_ATTR_RQ_PSN,
  RGV_ATTR_SQ_PSN,
  RGV_ATTR_STATE,
  RGV_CQ_CONS,
  RGV_CQ_OVERFLOW,
  RGV_CQ_PROD,
  RGV_INLINE_ALIGN,
  RGV_NONE,
  RGV_OP_ALLOC_PD,
  RGV_OP_ATTACH,
  RGV_OP_CREATE_CQ,
  RGV_OP_CREATE_QP,
  RGV_QPT_RC,
  RGV_OP_CREATE_SRQ,
  RGV_OP_DEVICES,
  RGV_OP_MODIFY_QP,
  RGV_OP_QP_RING,
  RGV_OP_REG_MR,
  RGV_OP_SRQ_RING,
  RGV_QP_RQ_CONS,
  RGV_QP_RQ_DONE,
  RGV_QP_RQ_PROD,
  RGV_QP_SQ_CONS,
  RGV_QP_SQ_DONE,
  RGV_QP_SQ_PROD,
  RGV_QP_STATE,
  RGV_QPS_ERR,
  RGV_QPS_INIT,
  RGV_QPS_RTR,
  RGV_QPS_RTS,
  RGV_RING_HDR,
  RGV_SEND_INLINE,
  RGV_SEND_SIGNALED,
  RGV_SRQ_CONS,
  RGV_SRQ_PROD,
  RGV_WC_LOC_PROT_ERR,
  RGV_WC_LOC_QP_OP_ERR,
  RGV_WC_RETRY_EXC_ERR,
  RGV_WC_WR_FLUSH_ERR,
  RGV_WR_ATOMIC_CMP_AND_SWP,
  RGV_WR_ATOMIC_FETCH_AND_ADD,
  RGV_WR_RDMA_READ,
  RGV_WR_RDMA_WRITE,
  RGV_WR_RDMA_WRITE_WITH_IMM,
  RGV_WR_SEND,
  RGV_WR_SEND_WITH_IMM,
  RGV_WR_SEND_WITH_INV,
  rgv_attach,
  rgv_cq,
  rgv_cqe,
  rgv_create_cq,
  rgv_create_qp,
  rgv_create_srq,
  rgv_handle,
  rgv_modify_qp,
  rgv_mr,
  rgv_qp,
  rgv_qp_ring,
  rgv_recv_wqe,
  rgv_reg_mr,
  rgv_send_wqe,
  rgv_sge,
  rgv_srq,
  rgv_srq_ring,
} from '../dataplane/verbs-server/abi.generated.ts';
import {
  decode,
  encode,
  type Encodable,
  message,
  type Message,
  readMessage,
} from '../dataplane/verbs-server/messages.ts';
import { IP_B, twoDataplanes } from './dataplane-helpers.ts';
import { Rng } from './hostile-helpers.ts';
import { nothingLeft } from './verbs-helpers.ts';

/** A byte offset of the ABI as an index into a ring's Uint32Array. */
const word = (byteOffset: number) => byteOffset >>> 2;
const SW = rgv_send_wqe.fields,
  RW = rgv_recv_wqe.fields,
  SGE = rgv_sge.fields,
  CQE = rgv_cqe.fields;
/** What the library sizes a QP's and an SRQ's WQEs by (proto.h rgv_sq_stride, rgv_rq_stride). */
const sqStride = (sge: number, inl: number) =>
  rgv_send_wqe.size + Math.max(sge * rgv_sge.size, (inl + RGV_INLINE_ALIGN - 1) & ~(RGV_INLINE_ALIGN - 1));
const rqStride = (sge: number) => rgv_recv_wqe.size + sge * rgv_sge.size;

/** Requests on a raw verbs-socket connection: one request (op, body, fd), its reply. */
function requester(conn: number) {
  const core = loadCore();
  let seq = 0;
  return async (op: number, body?: Uint8Array, pass = -1): Promise<Message> => {
    assert.is(core.seqpacketSend(conn, message(op, ++seq, body), pass), 0);
    for (let t = 0; t < 5000; t++) {
      const m = core.seqpacketRecv(conn);
      if (m !== null) {
        assert.ok('data' in m, `op ${op} answered, not dropped`);
        const r = readMessage(m.data);
        assert.ok(r !== null, `op ${op}: a reply of ${m.data.length} bytes`);
        return r;
      }
      await new Promise((r) => setImmediate(r));
    }
    throw new Error(`op ${op}: no answer`);
  };
}

/** ATTACH's body: the interface name. */
const attach = (name: string) => encode(rgv_attach, { ifname: name });
/** The handle a reply carries (ALLOC_PD, CREATE_CHANNEL). */
const handleOf = (r: Message) => decode(rgv_handle, r.body).handle;

/** MODIFY_QP of `qpn` to `state`, the peer at IP_B's QP 23456 (taken with RGV_ATTR_AV). */
function modifyQp(qpn: number, state: number, mask: number): Uint8Array {
  const q: Encodable<typeof rgv_modify_qp> = {
    qpn,
    mask,
    state,
    // GID 0 of the peer: its IPv4 address, IPv4-mapped.
    dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...IP_B.split('.').map(Number)],
    dest_qpn: 23456,
    rq_psn: 1000,
    sq_psn: 2000,
    max_rd_atomic: 1,
    max_dest_rd_atomic: 1,
  };
  return encode(rgv_modify_qp, q);
}

/**
 * A raw verbs-socket client of data plane A (of two joined ones): its connection, a request
 * function and a doorbell eventfd; everything is closed after `body`, whatever it does.
 */
/** CREATE_CQ of `entries` with its ring in a fresh memfd: the CQ's handle and the ring's memory. */
async function ringCq(
  core: ReturnType<typeof loadCore>,
  req: (op: number, body?: Uint8Array, fd?: number) => Promise<Message>,
  entries: number,
  name: string,
) {
  const bytes = RGV_RING_HDR + entries * rgv_cqe.size;
  const mem = core.allocMemory(bytes, { hugepages: 'never', name });
  const r = await req(RGV_OP_CREATE_CQ, encode(rgv_create_cq, { entries, channel: RGV_NONE, bytes }), mem.fd);
  assert.is(r.status, 0, 'CREATE_CQ');
  return { cq: decode(rgv_cq, r.body).handle, mem };
}

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
    const name = (await dps.a.interfaces())[0].name;
    const noName = new Uint8Array(rgv_attach.size).fill(0x41); // 32 'A's, no NUL
    assert.is((await req(RGV_OP_ATTACH, noName, efd)).status, -19, 'no such interface: ENODEV');
    const graph = Dataplane.internals(dps.a).graph;
    const yielders = graph.idleYieldUsers;
    assert.is((await req(RGV_OP_ATTACH, attach(name), efd)).status, 0, 'ATTACH with a doorbell eventfd');
    assert.is(graph.idleYieldUsers, yielders + 1, 'an attached program: the polling loop yields when idle');
    const pd = handleOf(await req(RGV_OP_ALLOC_PD));
    // An MR (at a made-up address: for the daemon it is just the tagged offset of byte 0).
    const mrMem = core.allocMemory(4096, { hugepages: 'never', name: 'hostile-mr' });
    const base = 0x10000000;
    const mr = await req(
      RGV_OP_REG_MR,
      encode(rgv_reg_mr, { pd, access: RGV_ACCESS_LOCAL_WRITE, span: 4096, start: base, addr: base, length: 4096 }),
      mrMem.fd,
    );
    assert.is(mr.status, 0);
    const stag = decode(rgv_mr, mr.body).stag;
    const CQE_N = 64;
    const { cq, mem: cqMem } = await ringCq(core, req, CQE_N, 'hostile-cq');
    const qpr = await req(
      RGV_OP_CREATE_QP,
      encode(rgv_create_qp, {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 32,
        max_recv_wr: 32,
        max_sge: 4,
        max_inline: 64,
        srq: RGV_NONE,
        qp_type: RGV_QPT_RC,
      }),
    );
    assert.is(qpr.status, 0);
    const { qpn, max_send_wr: sw, max_recv_wr: rw, max_sge: sge, max_inline: inl } = decode(rgv_qp, qpr.body);
    const sqE = 32,
      rqE = 32,
      sqS = sqStride(sge, inl),
      rqS = rqStride(sge);
    assert.equal([sw, rw], [32, 32]);
    const bytes = RGV_RING_HDR + sqE * sqS + rqE * rqS;
    const qpMem = core.allocMemory(bytes, { hugepages: 'never', name: 'hostile-qp' });
    const ring = (rq_entries: number) =>
      encode(rgv_qp_ring, { qpn, sq_entries: sqE, rq_entries, sq_stride: sqS, rq_stride: rqS, bytes });
    assert.is((await req(RGV_OP_QP_RING, ring(rqE + 1), qpMem.fd)).status, -22, 'wrong ring sizes: EINVAL');
    assert.is((await req(RGV_OP_QP_RING, ring(rqE), qpMem.fd)).status, 0);
    // INIT, RTR towards a QP that does not exist (nothing will answer), RTS.
    const modify = (state: number, mask: number) => req(RGV_OP_MODIFY_QP, modifyQp(qpn, state, mask));
    assert.is((await modify(RGV_QPS_INIT, RGV_ATTR_STATE)).status, 0);
    const rtr = RGV_ATTR_STATE | RGV_ATTR_AV | RGV_ATTR_DEST_QPN | RGV_ATTR_RQ_PSN;
    assert.is((await modify(RGV_QPS_RTR, rtr)).status, 0);
    assert.is((await modify(RGV_QPS_RTS, RGV_ATTR_STATE | RGV_ATTR_SQ_PSN)).status, 0);

    const u32 = new Uint32Array(qpMem.buffer);
    const cq32 = new Uint32Array(cqMem.buffer);
    const rng = new Rng(1616);
    let sqProd = 0,
      rqProd = 0,
      cqCons = 0;
    const cqes: { status: number; opcode: number; qp: number }[] = [];
    const drainCq = () => {
      const prod = Atomics.load(cq32, word(RGV_CQ_PROD));
      assert.ok((prod - cqCons) >>> 0 <= CQE_N, 'the daemon never writes past the CQ ring');
      while (cqCons !== prod) {
        const w = word(RGV_RING_HDR) + (cqCons & (CQE_N - 1)) * word(rgv_cqe.size);
        cqes.push({
          status: cq32[w + word(CQE.status.offset)],
          opcode: cq32[w + word(CQE.opcode.offset)],
          qp: cq32[w + word(CQE.qp_num.offset)],
        });
        cqCons = (cqCons + 1) >>> 0;
      }
      Atomics.store(cq32, word(RGV_CQ_CONS), cqCons);
    };
    // Real opcodes as often as not; flags signaled, inline, both or none.
    const opcodes = [
      RGV_WR_RDMA_WRITE,
      RGV_WR_RDMA_WRITE_WITH_IMM,
      RGV_WR_SEND,
      RGV_WR_SEND_WITH_IMM,
      RGV_WR_RDMA_READ,
      RGV_WR_ATOMIC_CMP_AND_SWP,
      RGV_WR_ATOMIC_FETCH_AND_ADD,
      RGV_WR_SEND_WITH_INV,
    ];
    const flags = [0, RGV_SEND_SIGNALED, RGV_SEND_INLINE, RGV_SEND_SIGNALED | RGV_SEND_INLINE];
    for (let round = 0; round < 60; round++) {
      const ns = rng.int(33),
        nr = rng.int(33);
      for (let k = 0; k < ns; k++) {
        const w = word(RGV_RING_HDR + ((sqProd + k) & (sqE - 1)) * sqS);
        rng.fill(new Uint8Array(qpMem.buffer, w * 4, sqS));
        if (rng.chance(0.7)) u32[w + word(SW.opcode.offset)] = rng.pick(opcodes);
        if (rng.chance(0.5)) u32[w + word(SW.flags.offset)] = rng.pick(flags);
        if (rng.chance(0.7)) u32[w + word(SW.num_sge.offset)] = rng.int(6);
        if (rng.chance(0.5)) u32[w + word(SW.inline_len.offset)] = rng.int(200);
        for (let e = 0; e < 4; e++) {
          const s = w + word(rgv_send_wqe.size + e * rgv_sge.size);
          if (rng.chance(0.5)) {
            u32[s + word(SGE.addr.offset)] = base + rng.int(4200);
            u32[s + word(SGE.addr.offset) + 1] = 0;
            u32[s + word(SGE.length.offset)] = rng.int(300);
            u32[s + word(SGE.lkey.offset)] = rng.chance(0.7) ? stag : rng.int(1 << 30);
          }
        }
      }
      for (let k = 0; k < nr; k++) {
        const at = RGV_RING_HDR + sqE * sqS + ((rqProd + k) & (rqE - 1)) * rqS;
        rng.fill(new Uint8Array(qpMem.buffer, at, rqS));
        if (rng.chance(0.7)) u32[word(at + RW.num_sge.offset)] = rng.int(6);
      }
      // Only what the queues can hold (the library's own check), so nothing is refused for size.
      sqProd = (sqProd + Math.min(ns, sw - ((sqProd - Atomics.load(u32, word(RGV_QP_SQ_DONE))) >>> 0))) >>> 0;
      rqProd = (rqProd + Math.min(nr, rw - ((rqProd - Atomics.load(u32, word(RGV_QP_RQ_DONE))) >>> 0))) >>> 0;
      Atomics.store(u32, word(RGV_QP_SQ_PROD), sqProd);
      Atomics.store(u32, word(RGV_QP_RQ_PROD), rqProd);
      core.eventfdWrite(efd); // the doorbell, as the library rings it
      for (
        let t = 0;
        t < 200 &&
        (Atomics.load(u32, word(RGV_QP_SQ_CONS)) !== sqProd || Atomics.load(u32, word(RGV_QP_RQ_CONS)) !== rqProd);
        t++
      ) {
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
      [...statuses].every((s) =>
        [RGV_WC_LOC_QP_OP_ERR, RGV_WC_LOC_PROT_ERR, RGV_WC_WR_FLUSH_ERR, RGV_WC_RETRY_EXC_ERR].includes(s),
      ),
      `only error statuses (no peer answers): ${[...statuses]}`,
    );
    assert.ok(
      statuses.has(RGV_WC_LOC_QP_OP_ERR) || statuses.has(RGV_WC_LOC_PROT_ERR),
      'malformed or unprotected work requests completed in error',
    );
    assert.ok(statuses.has(RGV_WC_WR_FLUSH_ERR), 'and the rest flushed once the QP was in error');
    const bad = (await dps.a.errors())[0].rows.find((r) => r.node === 'verbs-input');
    assert.ok(bad !== undefined && bad.count > 0, 'verbs-input counted refused work requests');
    assert.is((await dps.a.getQp(qpn)).state, 'error');
    // An impossible producer index: the ring is refused for good, the daemon goes on.
    Atomics.store(u32, word(RGV_QP_SQ_PROD), (sqProd + 100000) >>> 0);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    assert.is(
      Atomics.load(u32, word(RGV_QP_SQ_CONS)),
      sqProd,
      'nothing taken from a ring whose producer is impossible',
    );
    assert.is((await req(RGV_OP_DEVICES)).status, 0, 'the daemon still serves');
    core.closeFd(conn);
    await nothingLeft(dps.a);
  });
});

test('a program scribbling on its SRQ ring and its CQ consumer index: the SRQ ring is refused, a CQE never lands past the CQ, the daemon keeps serving and loses nothing', async () => {
  await rawClient(async ({ core, dps, conn, req, efd }) => {
    assert.is((await req(RGV_OP_ATTACH, attach((await dps.a.interfaces())[0].name), efd)).status, 0);
    const pd = handleOf(await req(RGV_OP_ALLOC_PD));
    // An SRQ and its ring.
    const srq = await req(RGV_OP_CREATE_SRQ, encode(rgv_create_srq, { pd, max_wr: 32, max_sge: 4, limit: 0 }));
    assert.is(srq.status, 0);
    const { handle: sh, max_wr: maxWr, max_sge: maxSge } = decode(rgv_srq, srq.body);
    const entries = 32,
      stride = rqStride(maxSge),
      sbytes = RGV_RING_HDR + entries * stride;
    assert.is(maxWr, 32);
    const sMem = core.allocMemory(sbytes, { hugepages: 'never', name: 'hostile-srq' });
    const srqRing = (stride: number) => encode(rgv_srq_ring, { srq: sh, entries, stride, bytes: sbytes });
    assert.is(
      (await req(RGV_OP_SRQ_RING, srqRing(stride + rgv_sge.size), sMem.fd)).status,
      -22,
      'wrong stride: EINVAL',
    );
    assert.is((await req(RGV_OP_SRQ_RING, srqRing(stride), sMem.fd)).status, 0);
    const s32 = new Uint32Array(sMem.buffer);
    const rng = new Rng(1717);
    // Garbage receive WQEs (num_sge up to 40 of 4 allowed, random lkeys): each is posted (a bad
    // lkey fails only when a message uses it) or refuses the ring; nothing else.
    for (let k = 0; k < 24; k++) {
      const at = RGV_RING_HDR + k * stride;
      rng.fill(new Uint8Array(sMem.buffer, at, stride));
      s32[word(at + RW.num_sge.offset)] = rng.int(41);
    }
    Atomics.store(s32, word(RGV_SRQ_PROD), 24);
    core.eventfdWrite(efd); // the doorbell, as the library rings it (the engine may be asleep)
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    const cons = Atomics.load(s32, word(RGV_SRQ_CONS));
    assert.ok(cons < 24, `a malformed WQE (num_sge up to 40 of ${maxSge}) stopped the ring at ${cons} of 24`);
    const bad = (await dps.a.errors())[0].rows.find((r) => r.node === 'verbs-input');
    assert.ok(bad !== undefined && bad.count > 0, 'the refused WQE is counted');
    // An impossible producer: nothing more is taken.
    Atomics.store(s32, word(RGV_SRQ_PROD), 100000);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(s32, word(RGV_SRQ_CONS)), cons, 'nothing taken from a ring whose producer is impossible');

    // A CQ whose consumer index the program set far ahead: a completion finds no room.
    const CQE_N = 8;
    const { cq, mem: cqMem } = await ringCq(core, req, CQE_N, 'hostile-cq2');
    const c32 = new Uint32Array(cqMem.buffer);
    Atomics.store(c32, word(RGV_CQ_CONS), 0x80000000);
    const qpr = await req(
      RGV_OP_CREATE_QP,
      encode(rgv_create_qp, {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 8,
        max_recv_wr: 8,
        max_sge: 1,
        max_inline: 0,
        srq: RGV_NONE,
        qp_type: RGV_QPT_RC,
      }),
    );
    assert.is(qpr.status, 0);
    const { qpn, max_send_wr: sw, max_recv_wr: rw, max_sge: sge, max_inline: inl } = decode(rgv_qp, qpr.body);
    const sqS = sqStride(sge, inl),
      rqS = rqStride(sge),
      bytes = RGV_RING_HDR + sw * sqS + rw * rqS;
    const qMem = core.allocMemory(bytes, { hugepages: 'never', name: 'hostile-qp2' });
    const ring = encode(rgv_qp_ring, { qpn, sq_entries: sw, rq_entries: rw, sq_stride: sqS, rq_stride: rqS, bytes });
    assert.is((await req(RGV_OP_QP_RING, ring, qMem.fd)).status, 0);
    const q32 = new Uint32Array(qMem.buffer);
    const toState = (state: number) =>
      req(RGV_OP_MODIFY_QP, encode(rgv_modify_qp, { qpn, mask: RGV_ATTR_STATE, state }));
    assert.is((await toState(RGV_QPS_INIT)).status, 0, 'INIT');
    // One receive (no SGE), then the QP to ERROR: its flush completion wants the CQ.
    const at = RGV_RING_HDR + sw * sqS;
    q32[word(at + RW.wr_id.offset)] = 7;
    q32[word(at + RW.num_sge.offset)] = 0;
    Atomics.store(q32, word(RGV_QP_RQ_PROD), 1);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50 && Atomics.load(q32, word(RGV_QP_RQ_CONS)) !== 1; t++)
      await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(q32, word(RGV_QP_RQ_CONS)), 1, 'the receive was taken');
    assert.is((await toState(RGV_QPS_ERR)).status, 0, 'to ERROR');
    for (let t = 0; t < 20; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(c32, word(RGV_CQ_PROD)), 0, 'no CQE written: the ring had no room by its consumer index');
    assert.is(Atomics.load(c32, word(RGV_CQ_OVERFLOW)), 1, 'the CQ says it overflowed');
    assert.is((await req(RGV_OP_DEVICES)).status, 0, 'the daemon still serves');
    core.closeFd(conn);
    await nothingLeft(dps.a);
  });
});

test("a refused ring's state word says ERROR, as the QP is (the program sees it without a verb)", async () => {
  await rawClient(async ({ core, dps, conn, req, efd }) => {
    assert.is((await req(RGV_OP_ATTACH, attach((await dps.a.interfaces())[0].name), efd)).status, 0);
    const pd = handleOf(await req(RGV_OP_ALLOC_PD));
    const CQE_N = 16;
    const { cq } = await ringCq(core, req, CQE_N, 'state-cq');
    const qpr = await req(
      RGV_OP_CREATE_QP,
      encode(rgv_create_qp, {
        pd,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 8,
        max_recv_wr: 8,
        max_sge: 1,
        max_inline: 0,
        srq: RGV_NONE,
        qp_type: RGV_QPT_RC,
      }),
    );
    assert.is(qpr.status, 0);
    const { qpn, max_send_wr: sw, max_recv_wr: rw, max_sge: sge, max_inline: inl } = decode(rgv_qp, qpr.body);
    const sqS = sqStride(sge, inl),
      rqS = rqStride(sge),
      bytes = RGV_RING_HDR + sw * sqS + rw * rqS;
    const qMem = core.allocMemory(bytes, { hugepages: 'never', name: 'state-qp' });
    const ring = encode(rgv_qp_ring, { qpn, sq_entries: sw, rq_entries: rw, sq_stride: sqS, rq_stride: rqS, bytes });
    assert.is((await req(RGV_OP_QP_RING, ring, qMem.fd)).status, 0);
    const q32 = new Uint32Array(qMem.buffer);
    const modify = (state: number, mask: number) => req(RGV_OP_MODIFY_QP, modifyQp(qpn, state, mask));
    assert.is((await modify(RGV_QPS_INIT, RGV_ATTR_STATE)).status, 0);
    const rtr = RGV_ATTR_STATE | RGV_ATTR_AV | RGV_ATTR_DEST_QPN | RGV_ATTR_RQ_PSN;
    assert.is((await modify(RGV_QPS_RTR, rtr)).status, 0);
    assert.is((await modify(RGV_QPS_RTS, RGV_ATTR_STATE | RGV_ATTR_SQ_PSN)).status, 0);
    const STATE = word(RGV_QP_STATE);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50 && Atomics.load(q32, STATE) !== RGV_QPS_RTS; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(q32, STATE), RGV_QPS_RTS, 'RTS in the state word');
    // An impossible producer index: the ring is refused and its QP goes to ERROR.
    Atomics.store(q32, word(RGV_QP_SQ_PROD), 100000);
    core.eventfdWrite(efd);
    for (let t = 0; t < 50 && (await dps.a.getQp(qpn)).state !== 'error'; t++)
      await new Promise((r) => setImmediate(r));
    assert.is((await dps.a.getQp(qpn)).state, 'error');
    for (let t = 0; t < 50; t++) await new Promise((r) => setImmediate(r));
    assert.is(Atomics.load(q32, STATE), RGV_QPS_ERR, 'the state word says ERROR too');
    core.closeFd(conn);
    await nothingLeft(dps.a);
  });
});

test.run();
