/**
 * The QP lifecycle over HTTP: two data planes, each behind a real API server on 127.0.0.1, driven
 * only through the API client (and raw requests where the status itself is the point). Every
 * JSON response is checked against its declared schema by the server (checkResponses).
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ApiClient } from '../api/client.ts';
import { WAIT_MAX_MS } from '../api/schemas.ts';
import { formatInterfaceAddresses, formatQp } from '../api/render.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { apiError, apiPair, raw, readU64, u64 } from './api-helpers.ts';

const ALL = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'];

async function ends(c: ApiClient) {
  const { pd } = await c.createPd();
  const { cq } = await c.createCq({ depth: 256 });
  const mr = await c.createMr({ pd, length: 65536, access: ALL });
  const qp = await c.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 64, maxRecvWr: 64 });
  return { pd, cq, mr, qp };
}

async function pollOne(c: ApiClient, cq: number) {
  const r = await c.pollCq(cq, { max: 16, waitMs: 2000 });
  assert.is(r.completions.length, 1, `one completion on cq ${cq}: ${JSON.stringify(r)}`);
  assert.is(r.error, null);
  return r.completions[0];
}

const enc = (s: string) => new TextEncoder().encode(s);

/** A UD QP in RTS with Q_Key `qkey` (its type, Q_Key and no remote checked on the way), its CQ and an MR. */
async function udEnd(c: ApiClient, qkey: number) {
  const { pd } = await c.createPd();
  const { cq } = await c.createCq({ depth: 64 });
  const mr = await c.createMr({ pd, length: 8192, access: ['local-write'] });
  const qp = await c.createQp({ pd, sendCq: cq, recvCq: cq, type: 'ud' });
  assert.equal([qp.type, qp.qkey, qp.remote], ['ud', 0, null]);
  await c.modifyQp(qp.qpn, { state: 'init', qkey });
  await c.modifyQp(qp.qpn, { state: 'rtr' });
  assert.equal((await c.modifyQp(qp.qpn, { state: 'rts' })).qkey, qkey);
  return { cq, mr, qp };
}

test('UD QPs over HTTP: type ud, a Q_Key, a datagram with its GRH and the source QPN, rdmactl show qp says UD', async () => {
  const p = await apiPair();
  const { ca, cb } = p;
  try {
    const x = await udEnd(ca, 0x1234),
      y = await udEnd(cb, 0x1234);
    await cb.postRecv(y.qp.qpn, { wrId: 'r', sge: [{ mr: y.mr.mr, offset: 0, length: 1000 }] });
    await ca.writeMr(x.mr.mr, 0, enc('a datagram'));
    await ca.postSend(x.qp.qpn, {
      wrId: 's',
      opcode: 'send',
      sge: [{ mr: x.mr.mr, offset: 0, length: 10 }],
      ud: { ip: IP_B, qpn: y.qp.qpn, qkey: 0x1234 },
    });
    assert.equal(await pollOne(ca, x.cq), { wrId: 's', qpn: x.qp.qpn, status: 'success', opcode: 'send', byteLen: 10 });
    assert.equal(await pollOne(cb, y.cq), {
      wrId: 'r',
      qpn: y.qp.qpn,
      status: 'success',
      opcode: 'recv',
      byteLen: 50,
      srcQp: x.qp.qpn,
    });
    assert.equal(await cb.readMr(y.mr.mr, 40, 10), enc('a datagram'));
    assert.equal([...(await cb.readMr(y.mr.mr, 32, 8))], [...IP_A.split('.'), ...IP_B.split('.')].map(Number));
    // A Q_Key on an RC QP is refused; an RC opcode on a UD QP too.
    const rc = await ca.createQp({ pd: x.qp.pd, sendCq: x.cq, recvCq: x.cq });
    const e1 = await apiError(ca.modifyQp(rc.qpn, { state: 'init', qkey: 1 }));
    assert.equal([e1.statusCode, /a Q_Key is for UD QPs/.test(e1.message)], [400, true], e1.message);
    const e2 = await apiError(
      ca.postSend(x.qp.qpn, {
        wrId: 1,
        opcode: 'write',
        remote: { stag: 1, offset: 0 },
        ud: { ip: IP_B, qpn: 1, qkey: 1 },
      }),
    );
    assert.equal(
      [e2.statusCode, /a UD QP: it sends send, send-with-solicited and send-with-imm, not write/.test(e2.message)],
      [400, true],
      e2.message,
    );
  } finally {
    await p.close();
  }
});

test('UD multicast over HTTP: attach to a group, a send to the group (qpn 16777215) reaches it, detach; what is refused', async () => {
  const p = await apiPair();
  const { ca, cb } = p;
  try {
    const x = await udEnd(ca, 0x777),
      y = await udEnd(cb, 0x777);
    assert.equal(await cb.attachMcast(y.qp.qpn, '239.5.5.5'), { groups: ['239.5.5.5'] });
    // The interface shows the group it joined (show interface addr, as `ip maddr` would).
    const [itf] = await cb.interfaces();
    assert.equal(itf.groups, [{ group: '239.5.5.5', users: 1 }]);
    assert.match(formatInterfaceAddresses([itf]), /^ {2}multicast 239\.5\.5\.5 \(1 QP\)$/m);
    const view = await cb.getQp(y.qp.qpn);
    assert.equal(view.multicast, ['239.5.5.5'], "the QP's view names its group");
    assert.match(formatQp(view), /^ {2}sq outstanding 0 rq posted 0 multicast 239\.5\.5\.5$/m);
    await cb.postRecv(y.qp.qpn, { wrId: 'r', sge: [{ mr: y.mr.mr, offset: 0, length: 1000 }] });
    await ca.writeMr(x.mr.mr, 0, enc('to the group'));
    await ca.postSend(x.qp.qpn, {
      wrId: 's',
      opcode: 'send',
      sge: [{ mr: x.mr.mr, offset: 0, length: 12 }],
      ud: { ip: '239.5.5.5', qpn: 0xffffff, qkey: 0x777 },
    });
    assert.is((await pollOne(ca, x.cq)).status, 'success');
    const got = await pollOne(cb, y.cq);
    assert.equal([got.status, got.byteLen, got.srcQp], ['success', 52, x.qp.qpn]);
    assert.equal(await cb.readMr(y.mr.mr, 40, 12), enc('to the group'));
    assert.equal([...(await cb.readMr(y.mr.mr, 36, 4))], [239, 5, 5, 5], 'the GRH names the group');
    assert.equal(await cb.detachMcast(y.qp.qpn, '239.5.5.5'), { groups: [] });
    assert.equal((await cb.interfaces())[0].groups, [], 'the group left with its last QP');
    const e1 = await apiError(cb.detachMcast(y.qp.qpn, '239.5.5.5'));
    assert.equal([e1.statusCode, /is not attached to 239\.5\.5\.5/.test(e1.message)], [404, true], e1.message);
    const e2 = await apiError(cb.attachMcast(y.qp.qpn, IP_A));
    assert.equal([e2.statusCode, /not an IPv4 multicast group/.test(e2.message)], [400, true], e2.message);
    // The multicast QPN with a unicast address is no destination.
    const e3 = await apiError(
      ca.postSend(x.qp.qpn, { wrId: 1, opcode: 'send', sge: [], ud: { ip: IP_B, qpn: 0xffffff, qkey: 1 } }),
    );
    assert.equal([e3.statusCode, /ud\.qpn must be an integer in 1\.\.65535/.test(e3.message)], [400, true], e3.message);
  } finally {
    await p.close();
  }
});

test('manual connect; SEND/RECV, WRITE, WRITE-with-imm, READ, fetch-add, swap, cmp-swap with the bytes checked through the data routes', async () => {
  const p = await apiPair();
  const { ca, cb } = p;
  try {
    const x = await ends(ca),
      y = await ends(cb);
    assert.is(x.qp.state, 'reset');
    assert.equal(x.qp.local, { ip: IP_A, port: x.qp.qpn });
    assert.equal(x.mr.access, ALL);
    const cx = await ca.connect(x.qp.qpn, {
      remote: { ip: IP_B, port: y.qp.qpn },
      mode: 'manual',
      remotePsn: y.qp.psn,
    });
    assert.is(cx.state, 'rts');
    assert.is(cx.privateData, undefined);
    assert.is(
      (await cb.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn })).state,
      'rts',
    );

    // SEND/RECV: the poll on B waits for the completion that arrives while it waits.
    const msg = enc('hello over HTTP');
    assert.equal(await ca.writeMr(x.mr.mr, 100, msg), { written: msg.length });
    assert.equal(await cb.postRecv(y.qp.qpn, { wrId: 'r1', sge: [{ mr: y.mr.mr, offset: 0, length: 4096 }] }), {
      wrId: 'r1',
    });
    // The longest wait there is: a poll that returns long before it returned for the completion.
    const t0 = Date.now();
    const waiting = cb.pollCq(y.cq, { max: 4, waitMs: WAIT_MAX_MS });
    await new Promise((r) => setTimeout(r, 30));
    assert.equal(
      await ca.postSend(x.qp.qpn, { wrId: 7, opcode: 'send', sge: [{ mr: x.mr.mr, offset: 100, length: msg.length }] }),
      { wrId: 7 },
    );
    const got = await waiting;
    assert.ok(
      Date.now() - t0 < WAIT_MAX_MS / 2,
      `the waiting poll returned when the completion came, not at its ${WAIT_MAX_MS} ms (${Date.now() - t0} ms)`,
    );
    assert.equal(got.completions, [
      { wrId: 'r1', qpn: y.qp.qpn, status: 'success', opcode: 'recv', byteLen: msg.length },
    ]);
    assert.equal(await pollOne(ca, x.cq), {
      wrId: 7,
      qpn: x.qp.qpn,
      status: 'success',
      opcode: 'send',
      byteLen: msg.length,
    });
    assert.equal(await cb.readMr(y.mr.mr, 0, msg.length), msg);

    // WRITE 5000 bytes into B at 8192; READ them back into A at 20000.
    const big = Uint8Array.from({ length: 5000 }, (_, i) => (i * 31 + 7) & 0xff);
    await ca.writeMr(x.mr.mr, 0, big);
    await ca.postSend(x.qp.qpn, {
      wrId: 'w',
      opcode: 'write',
      sge: [{ mr: x.mr.mr, offset: 0, length: 5000 }],
      remote: { stag: y.mr.stag, offset: 8192 },
    });
    assert.equal(await pollOne(ca, x.cq), {
      wrId: 'w',
      qpn: x.qp.qpn,
      status: 'success',
      opcode: 'write',
      byteLen: 5000,
    });
    assert.equal(await cb.readMr(y.mr.mr, 8192, 5000), big);
    await ca.postSend(x.qp.qpn, {
      wrId: 'r',
      opcode: 'read',
      sge: [{ mr: x.mr.mr, offset: 20000, length: 5000 }],
      remote: { stag: y.mr.stag, offset: 8192 },
    });
    assert.equal(await pollOne(ca, x.cq), {
      wrId: 'r',
      qpn: x.qp.qpn,
      status: 'success',
      opcode: 'read',
      byteLen: 5000,
    });
    assert.equal(await ca.readMr(x.mr.mr, 20000, 5000), big);

    // WRITE with immediate: the bytes land and B's receive completes with the immediate.
    await cb.postRecv(y.qp.qpn, { wrId: 'imm-recv' });
    await ca.writeMr(x.mr.mr, 30000, enc('immediate!'));
    await ca.postSend(x.qp.qpn, {
      wrId: 'wi',
      opcode: 'write-with-imm',
      sge: [{ mr: x.mr.mr, offset: 30000, length: 10 }],
      remote: { stag: y.mr.stag, offset: 30000 },
      imm: 0xdeadbeef,
    });
    assert.is((await pollOne(ca, x.cq)).opcode, 'write');
    const ri = await pollOne(cb, y.cq);
    assert.equal([ri.wrId, ri.opcode, ri.imm, ri.status], ['imm-recv', 'recv-with-imm', 0xdeadbeef, 'success']);
    assert.equal(await cb.readMr(y.mr.mr, 30000, 10), enc('immediate!'));

    // SEND with immediate (rdma-graph's RDMAP opcode 12, 13 with SE): one receive, the bytes
    // and the immediate; 5000 bytes take several segments, each carrying the immediate.
    await cb.postRecv(y.qp.qpn, { wrId: 'si-recv', sge: [{ mr: y.mr.mr, offset: 40000, length: 6000 }] });
    await ca.postSend(x.qp.qpn, {
      wrId: 'si',
      opcode: 'send-with-imm',
      sge: [{ mr: x.mr.mr, offset: 20000, length: 5000 }],
      imm: 0x0badcafe,
      solicited: true,
    });
    assert.equal(await pollOne(ca, x.cq), {
      wrId: 'si',
      qpn: x.qp.qpn,
      status: 'success',
      opcode: 'send',
      byteLen: 5000,
    });
    const si = await pollOne(cb, y.cq);
    assert.equal(
      [si.wrId, si.opcode, si.imm, si.byteLen, si.solicited, si.status],
      ['si-recv', 'recv', 0x0badcafe, 5000, true, 'success'],
    );
    assert.equal(await cb.readMr(y.mr.mr, 40000, 5000), big);

    // Atomics on B's 8 bytes at 0 (host order); the original value lands in A's 8-byte SGE.
    await cb.writeMr(y.mr.mr, 0, u64(1000n));
    const atomic = async (
      wrId: string,
      opcode: 'fetch-add' | 'swap' | 'cmp-swap',
      a: { add?: string | number; swap?: string | number; compare?: string | number },
    ) => {
      await ca.postSend(x.qp.qpn, {
        wrId,
        opcode,
        sge: [{ mr: x.mr.mr, offset: 40000, length: 8 }],
        remote: { stag: y.mr.stag, offset: 0 },
        atomic: a,
      });
      const c = await pollOne(ca, x.cq);
      assert.equal([c.wrId, c.opcode, c.status], [wrId, opcode, 'success']);
      return { orig: readU64(await ca.readMr(x.mr.mr, 40000, 8)), now: readU64(await cb.readMr(y.mr.mr, 0, 8)) };
    };
    assert.equal(await atomic('fa', 'fetch-add', { add: '9007199254740993' }), {
      orig: 1000n,
      now: 1000n + 9007199254740993n,
    });
    assert.equal(await atomic('sw', 'swap', { swap: 42 }), { orig: 1000n + 9007199254740993n, now: 42n });
    assert.equal(await atomic('cs', 'cmp-swap', { compare: '42', swap: '18446744073709551615' }), {
      orig: 42n,
      now: 0xffffffffffffffffn,
    });
    assert.equal(await atomic('cs-miss', 'cmp-swap', { compare: 1, swap: 2 }), {
      orig: 0xffffffffffffffffn,
      now: 0xffffffffffffffffn,
    });

    const q = await ca.getQp(x.qp.qpn);
    assert.ok(q.counters.txPackets >= 8, `QP counters move: ${JSON.stringify(q.counters)}`);
    assert.equal(q.remote, { ip: IP_B, port: y.qp.qpn });
    assert.ok(q.rtt.srttUs > 0, 'an RTT was measured');
  } finally {
    await p.close();
  }
});

test('wrId: strings (empty, unicode, 256 characters) and integers (negative, largest safe) come back exactly as sent, in the post answer and the completion', async () => {
  const p = await apiPair();
  try {
    const x = await ends(p.ca),
      y = await ends(p.cb);
    await p.ca.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
    await p.cb.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
    const ids = [
      '',
      'ünïcødé 🚀 "quoted" \\ \n',
      'x'.repeat(256),
      '42',
      0,
      -5,
      Number.MAX_SAFE_INTEGER,
      -Number.MAX_SAFE_INTEGER,
    ];
    for (const [i, wrId] of ids.entries()) {
      assert.equal(await p.cb.postRecv(y.qp.qpn, { wrId, sge: [{ mr: y.mr.mr, offset: 0, length: 64 }] }), { wrId });
      assert.equal(
        await p.ca.postSend(x.qp.qpn, { wrId, opcode: 'send', sge: [{ mr: x.mr.mr, offset: i, length: 1 }] }),
        { wrId },
      );
      const s = await pollOne(p.ca, x.cq),
        r = await pollOne(p.cb, y.cq);
      assert.is(s.wrId, wrId, `send wrId ${JSON.stringify(wrId)}`);
      assert.is(r.wrId, wrId, `recv wrId ${JSON.stringify(wrId)}`);
    }
  } finally {
    await p.close();
  }
});

test('statuses: creates 201 with the view, posts 202 {wrId}, deletes 204 with no body, reads 200', async () => {
  const p = await apiPair();
  const u = p.apiA.url;
  try {
    const pd = await raw(u, 'POST', '/v1/pds', { body: {} });
    assert.is(pd.status, 201);
    const pdn = (pd.json as { pd: number }).pd;
    assert.equal(pd.json, { pd: pdn, users: 0 });
    const cq = await raw(u, 'POST', '/v1/cqs', { body: { depth: 8 } });
    assert.is(cq.status, 201);
    const cqn = (cq.json as { cq: number }).cq;
    assert.equal(cq.json, { cq: cqn, depth: 8, pending: 0, error: false, users: 0 });
    const mr = await raw(u, 'POST', '/v1/mrs', { body: { pd: pdn, length: 16, access: [] } });
    assert.is(mr.status, 201);
    const srq = await raw(u, 'POST', '/v1/srqs', { body: { pd: pdn, maxWr: 8 } });
    assert.is(srq.status, 201);
    const qp = await raw(u, 'POST', '/v1/qps', {
      body: { pd: pdn, sendCq: cqn, recvCq: cqn, maxSendWr: 4, maxRecvWr: 4 },
    });
    assert.is(qp.status, 201);
    const qpn = (qp.json as { qpn: number }).qpn;
    const init = await raw(u, 'POST', `/v1/qps/${qpn}/modify`, { body: { state: 'init' } });
    assert.equal([init.status, (init.json as { state: string }).state], [200, 'init']);
    const recv = await raw(u, 'POST', `/v1/qps/${qpn}/recv`, { body: { wrId: 'a' } });
    assert.equal([recv.status, recv.json], [202, { wrId: 'a' }]);
    const srqn = (srq.json as { srq: number }).srq;
    const sr = await raw(u, 'POST', `/v1/srqs/${srqn}/recv`, { body: { wrId: 9 } });
    assert.equal([sr.status, sr.json], [202, { wrId: 9 }]);
    const l = await raw(u, 'POST', '/v1/listeners', {
      body: { port: 18600, pd: pdn, sendCq: cqn, recvCq: cqn, maxSendWr: 4 },
    });
    assert.is(l.status, 201, l.text);
    for (const path of [
      '/v1/listeners/18600',
      `/v1/qps/${qpn}`,
      `/v1/srqs/${srqn}`,
      `/v1/mrs/${(mr.json as { mr: number }).mr}`,
      `/v1/cqs/${cqn}`,
      `/v1/pds/${pdn}`,
    ]) {
      const d = await raw(u, 'DELETE', path);
      assert.equal([d.status, d.text], [204, ''], `DELETE ${path}`);
      const again = await raw(u, 'DELETE', path);
      assert.is(again.status, 404, `DELETE ${path} again: ${again.text}`);
    }
    // The posted receive was flushed to the CQ when the QP went; the CQ is gone now, so nothing to poll.
    const h = await raw(u, 'GET', '/v1/health');
    assert.is(h.status, 200);
    assert.is((h.json as { status: string }).status, 'ok');
  } finally {
    await p.close();
  }
});

test('connection manager through a listener: private data both ways, the accepted QP shows its listener, SEND over it; SRQ; events; modify and destroy flush', async () => {
  const p = await apiPair();
  const { ca, cb } = p;
  try {
    const x = await ends(ca);
    const { pd } = await cb.createPd();
    const { cq } = await cb.createCq({ depth: 64 });
    const mr = await cb.createMr({ pd, length: 4096, access: ['local-write'] });
    const srq = await cb.createSrq({ pd, maxWr: 16 });
    assert.equal(srq, { srq: srq.srq, pd, maxWr: 16, maxSge: 4, posted: 0, limit: 0 });
    assert.equal(await cb.modifySrq(srq.srq, 2), { ...srq, limit: 2 });
    const l = await cb.listen({
      port: 18515,
      pd,
      sendCq: cq,
      recvCq: cq,
      srq: srq.srq,
      maxSendWr: 16,
      privateData: Buffer.from([9, 8]).toString('base64'),
    });
    assert.equal(l, {
      port: 18515,
      pd,
      sendCq: cq,
      recvCq: cq,
      srq: srq.srq,
      maxSendWr: 16,
      maxRecvWr: 256,
      accepted: [],
      requests: 0,
    });
    const res = await ca.connect(x.qp.qpn, {
      remote: { ip: IP_B, port: 18515 },
      mode: 'cm',
      privateData: Buffer.from([1, 2, 3]).toString('base64'),
      timeoutMs: 2000,
    });
    assert.is(res.state, 'rts');
    assert.is(res.privateData, Buffer.from([9, 8]).toString('base64'));
    const [ls] = await cb.listeners();
    assert.is(ls.accepted.length, 1);
    assert.is(ls.requests, 1);
    const qb = await cb.getQp(ls.accepted[0]);
    assert.equal([qb.listener, qb.state, qb.srq, qb.remote], [18515, 'rts', srq.srq, { ip: IP_A, port: x.qp.qpn }]);
    assert.ok(
      (await cb.qps()).some((q) => q.qpn === qb.qpn),
      'the accepted QP is in GET /v1/qps',
    );

    // A SEND from A lands in a receive posted to B's SRQ.
    for (const w of ['s1', 's2', 's3'])
      await cb.postSrqRecv(srq.srq, { wrId: w, sge: [{ mr: mr.mr, offset: 0, length: 256 }] });
    assert.is((await cb.srqs())[0].posted, 3);
    await ca.writeMr(x.mr.mr, 0, enc('through the SRQ'));
    await ca.postSend(x.qp.qpn, { wrId: 1, opcode: 'send', sge: [{ mr: x.mr.mr, offset: 0, length: 15 }] });
    assert.is((await pollOne(ca, x.cq)).status, 'success');
    const rc = await pollOne(cb, cq);
    assert.equal([rc.wrId, rc.qpn, rc.byteLen], ['s1', qb.qpn, 15]);
    assert.equal(await cb.readMr(mr.mr, 0, 15), enc('through the SRQ'));

    const events = await ca.events();
    assert.ok(
      events.some((e) => e.type === 'qp-established' && e.qpn === x.qp.qpn),
      `A's events: ${JSON.stringify(events)}`,
    );
    const last = events[events.length - 1].seq;
    assert.equal(await ca.events(last), []);

    // To ERROR: B's QP flushes nothing of its own (SRQ receives stay), A's posted receive is flushed.
    await ca.postRecv(x.qp.qpn, { wrId: 'pending', sge: [{ mr: x.mr.mr, offset: 0, length: 8 }] });
    assert.is((await ca.modifyQp(x.qp.qpn, { state: 'error' })).state, 'error');
    const fl = await pollOne(ca, x.cq);
    assert.equal([fl.wrId, fl.status], ['pending', 'flushed']);
    await cb.unlisten(18515);
    assert.equal(await cb.listeners(), []);
    await ca.destroyQp(x.qp.qpn);
    assert.is((await apiError(ca.getQp(x.qp.qpn))).statusCode, 404);
    assert.ok(!(await ca.qps()).some((q) => q.qpn === x.qp.qpn));
  } finally {
    await p.close();
  }
});

test('interfaces, neighbors, runtime (verbose), errors, trace, capture and fault through the API', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rdma-graph-api-'));
  const p = await apiPair({ captureDir: dir });
  const { ca, cb } = p;
  try {
    const [ia] = await ca.interfaces();
    assert.equal([ia.driver, ia.state, ia.addresses, ia.mac], ['pipe', 'up', [`${IP_A}/24`], '02:fe:00:00:00:01']);
    // The same view by name (its counters move on their own: a gratuitous ARP may go out between the calls).
    const { counters: _c1, ...byName } = await ca.interface(ia.name);
    const { counters: _c2, ...fromList } = ia;
    assert.equal(byName, fromList);
    const n = await ca.neighbors();
    assert.ok(
      n.some((e) => e.address === IP_B && e.mac === '02:fe:00:00:00:02' && e.interface === ia.name),
      JSON.stringify(n),
    );

    const nodes = await ca.traceNodes();
    assert.ok(nodes.includes('pipe-input'), `trace nodes: ${nodes}`);
    await ca.traceAdd('pipe-input', 5);
    const x = await ends(ca),
      y = await ends(cb);
    await ca.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
    await cb.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
    const cap = await ca.capture(ia.name, { direction: 'both', file: 'a.pcap', count: 100 });
    assert.equal(cap.capture, {
      rx: join(dir, 'a.pcap'),
      tx: join(dir, 'a-tx.pcap'),
      rxStopped: null,
      txStopped: null,
    });
    await ca.postSend(x.qp.qpn, {
      wrId: 1,
      opcode: 'write',
      sge: [{ mr: x.mr.mr, offset: 0, length: 3000 }],
      remote: { stag: y.mr.stag, offset: 0 },
    });
    await pollOne(ca, x.cq);
    await ca.stopCapture(ia.name);
    assert.equal((await ca.interface(ia.name)).capture, { rx: null, tx: null, rxStopped: null, txStopped: null });
    assert.ok(statSync(join(dir, 'a-tx.pcap')).size > 24 + 3000, 'tx capture holds the WRITE');
    assert.ok(readFileSync(join(dir, 'a.pcap')).length > 24, 'rx capture holds the ACKs');

    const tr = await ca.trace();
    assert.ok(tr.threads[0].packets.length > 0, 'packets were traced');
    assert.is(tr.threads[0].packets[0].entries[0].node, 'pipe-input');
    await ca.clearTrace();
    assert.equal((await ca.trace()).threads[0].packets, []);

    const rt = await ca.runtime();
    const rv = await ca.runtime({ verbose: true });
    assert.ok(rt.threads[0].rows.length > 0, 'nodes ran');
    assert.ok(
      rt.threads[0].rows.every((r) => r.calls > 0 || r.suspends > 0),
      'rows with no calls are left out',
    );
    assert.ok(rv.threads[0].rows.length > rt.threads[0].rows.length, 'verbose shows them');
    assert.ok(
      rt.threads[0].rows.some((r) => r.name === 'trp-input' && r.vectors > 0),
      'trp-input ran',
    );
    await ca.clearRuntime();
    assert.ok(
      (await ca.runtime({ verbose: true })).threads[0].rows.find((r) => r.name === 'trp-input')!.vectors === 0,
      'clear zeroes',
    );

    const errs = await ca.errors();
    assert.ok(errs.threads[0].rows.length > 0 && errs.threads[0].rows.every((r) => typeof r.reason === 'string'));
    assert.ok(
      errs.threads[0].rows.some((r) => r.count > 0),
      'something was counted before the clear',
    );
    await ca.clearErrors();
    const cleared = (await ca.errors()).threads[0].rows;
    assert.is(cleared.length, errs.threads[0].rows.length, 'every counter still listed');
    assert.ok(
      cleared.every((r) => r.count === 0),
      'clear zeroes them',
    );

    const f = await ca.setFault(ia.name, 'tx', { seed: 7, loss: 0.5 });
    assert.equal(f.fault, {
      rx: null,
      tx: { packets: 0, dropped: 0, reordered: 0, duplicated: 0, corrupted: 0, marked: 0 },
    });
    // Lossy tx: the WRITE still completes (retransmitted), and the injector counted.
    await ca.postSend(x.qp.qpn, {
      wrId: 2,
      opcode: 'write',
      sge: [{ mr: x.mr.mr, offset: 0, length: 8000 }],
      remote: { stag: y.mr.stag, offset: 0 },
    });
    assert.is((await pollOne(ca, x.cq)).status, 'success');
    assert.ok((await ca.interface(ia.name)).fault.tx!.dropped > 0, 'packets were dropped');
    assert.equal((await ca.setFault(ia.name, 'both', null)).fault, { rx: null, tx: null });
  } finally {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a poll whose client goes away takes nothing: the completion is there for the next poll; closing the server ends a waiting poll at once', async () => {
  const p = await apiPair();
  const { ca, cb } = p;
  try {
    const x = await ends(ca),
      y = await ends(cb);
    await ca.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
    await cb.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
    const ac = new AbortController();
    const gone = fetch(`${p.apiA.url}/v1/cqs/${x.cq}/completions?waitMs=10000`, { signal: ac.signal }).then(
      () => 'answered',
      (e) => e.name,
    );
    await new Promise((r) => setTimeout(r, 50));
    ac.abort();
    assert.is(await gone, 'AbortError');
    await new Promise((r) => setTimeout(r, 50));
    await ca.postSend(x.qp.qpn, {
      wrId: 'kept',
      opcode: 'write',
      sge: [{ mr: x.mr.mr, offset: 0, length: 10 }],
      remote: { stag: y.mr.stag, offset: 0 },
    });
    const c = await pollOne(ca, x.cq);
    assert.is(c.wrId, 'kept');

    const waiting = cb.pollCq(y.cq, { waitMs: WAIT_MAX_MS }).then(
      (r) => r,
      (e) => e,
    );
    await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    await p.apiB.close();
    const r = await waiting;
    assert.ok(Date.now() - t0 < WAIT_MAX_MS / 2, `close did not wait out the poll (${Date.now() - t0} ms)`);
    assert.equal(r, { completions: [], error: null });
  } finally {
    await p.close();
  }
});

test.run();
