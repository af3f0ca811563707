/**
 * Issue 12 item 5: memory exhaustion through the API. The start-up file's budgets (rdma.max-*)
 * bound what CQs, MRs, QPs, SRQs and PDs cost together; a request over a budget is 409, one
 * larger than the whole budget 413, both naming the key; destroying gives the budget back; the
 * issue's own attack (CQs of depth 2^20 without end) stops at the default budget.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { startApi } from '../api/server.ts';
import { ApiClient } from '../api/client.ts';
import { parseConfig } from '../config/load.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { type DataplaneError } from '../dataplane/views.ts';
import { baseConfig, IP_A, twoDataplanes } from './dataplane-helpers.ts';
import { apiError, assertError, raw } from './api-helpers.ts';

const SMALL = { maxPds: 3, maxCqs: 4, maxSrqs: 2, maxMrBytes: 1 << 20, maxCqEntries: 1000, maxWrSlots: 10000 };

async function smallApi() {
  const dps = await twoDataplanes({ a: { rdma: { ...baseConfig().rdma, ...SMALL } } });
  const api = await startApi(dps.a, { port: 0, checkResponses: true });
  return {
    url: api.url,
    c: new ApiClient(api.url),
    b: dps.b,
    async close() {
      await api.close();
      await dps.close();
    },
  };
}

const over = (key: string) =>
  new RegExp(
    `needs \\d+ of ${key.replace(/\./g, '\\.')} \\(\\d+\\), and \\d+ are in use: destroy objects first, or raise ${key.replace(/\./g, '\\.')} in the start-up file$`,
  );
const alone = (key: string) =>
  new RegExp(
    `needs \\d+ of ${key.replace(/\./g, '\\.')}, more than its whole \\d+: ask for less, or raise ${key.replace(/\./g, '\\.')} in the start-up file$`,
  );

test('CQs: depths add up to rdma.max-cq-entries (409 past it, 413 alone), their number to rdma.max-cqs; destroy gives it back', async () => {
  const t = await smallApi();
  try {
    const a = await t.c.createCq({ depth: 600 });
    assertError(
      await raw(t.url, 'POST', '/v1/cqs', { body: { depth: 600 } }),
      409,
      /^cq depth 600 needs 600 of rdma\.max-cq-entries \(1000\), and 600 are in use: destroy objects first, or raise rdma\.max-cq-entries in the start-up file$/,
      'second CQ of 600',
    );
    assertError(
      await raw(t.url, 'POST', '/v1/cqs', { body: { depth: 1001 } }),
      413,
      /^cq depth 1001 needs 1001 of rdma\.max-cq-entries, more than its whole 1000/,
      'a CQ deeper than the budget',
    );
    await t.c.destroyCq(a.cq);
    const b = await t.c.createCq({ depth: 600 });
    for (let i = 0; i < 3; i++) await t.c.createCq({ depth: 1 });
    assertError(await raw(t.url, 'POST', '/v1/cqs', { body: { depth: 1 } }), 409, over('rdma.max-cqs'), 'a fifth CQ');
    assert.is((await t.c.cqs()).length, 4);
    await t.c.destroyCq(b.cq);
    await t.c.createCq({ depth: 1 });
  } finally {
    await t.close();
  }
});

test('MRs: allocated bytes add up to rdma.max-mr-bytes; PDs count to rdma.max-pds', async () => {
  const t = await smallApi();
  try {
    const { pd } = await t.c.createPd();
    const m = await t.c.createMr({ pd, length: 600 * 1024, access: [] });
    assertError(
      await raw(t.url, 'POST', '/v1/mrs', { body: { pd, length: 600 * 1024, access: [] } }),
      409,
      over('rdma.max-mr-bytes'),
      'second MR',
    );
    assertError(
      await raw(t.url, 'POST', '/v1/mrs', { body: { pd, length: 2 << 20, access: [] } }),
      413,
      alone('rdma.max-mr-bytes'),
      'an MR larger than the budget',
    );
    await t.c.destroyMr(m.mr);
    await t.c.createMr({ pd, length: 1 << 20, access: [] });
    await t.c.createPd();
    await t.c.createPd();
    assertError(await raw(t.url, 'POST', '/v1/pds', { body: {} }), 409, over('rdma.max-pds'), 'a fourth PD');
  } finally {
    await t.close();
  }
});

test('QPs and SRQs: work request slots (inline bytes count) add up to rdma.max-wr-slots; SRQs count to rdma.max-srqs; a listener over budget rejects', async () => {
  const t = await smallApi();
  try {
    const { pd } = await t.c.createPd();
    const { cq } = await t.c.createCq({ depth: 64 });
    // 1000 send slots with 4096 inline bytes each (1 + 4) and 1000 receive slots: 6000.
    const q = await t.c.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 1000, maxRecvWr: 1000, maxInline: 4096 });
    const body = { pd, sendCq: cq, recvCq: cq, maxSendWr: 1000, maxRecvWr: 1000, maxInline: 4096 };
    assertError(
      await raw(t.url, 'POST', '/v1/qps', { body }),
      409,
      /^qp of maxSendWr 1000, maxRecvWr 1000, maxInline 4096 needs 6000 of rdma\.max-wr-slots \(10000\), and 6000 are in use/,
      'second QP',
    );
    assertError(
      await raw(t.url, 'POST', '/v1/qps', { body: { ...body, maxSendWr: 16384, maxInline: 0 } }),
      413,
      alone('rdma.max-wr-slots'),
      'a QP larger than the budget',
    );
    assertError(
      await raw(t.url, 'POST', '/v1/srqs', { body: { pd, maxWr: 5000 } }),
      409,
      over('rdma.max-wr-slots'),
      'an SRQ past the budget',
    );
    await t.c.listen({ port: 18800, ...body });
    const bp = await t.b.createPd();
    const bc = await t.b.createCq({ depth: 16 });
    const bq = await t.b.createQp({ pd: bp.pd, sendCq: bc.cq, recvCq: bc.cq, maxSendWr: 4, maxRecvWr: 4 });
    const refused = await t.b.connect(bq.qpn, { remote: { ip: IP_A, port: 18800 }, mode: 'cm', timeoutMs: 2000 }).then(
      () => null,
      (x: DataplaneError) => x,
    );
    assert.is(refused?.kind, 'rejected', `the listener cannot make its QP: ${refused?.message}`);
    const [lv] = await t.c.listeners();
    assert.equal([lv.requests, lv.accepted], [1, []]);
    await t.c.destroyQp(q.qpn);
    const s1 = await t.c.createSrq({ pd, maxWr: 2000 });
    await t.c.createSrq({ pd, maxWr: 10 });
    assertError(
      await raw(t.url, 'POST', '/v1/srqs', { body: { pd, maxWr: 1 } }),
      409,
      over('rdma.max-srqs'),
      'a third SRQ',
    );
    await t.c.destroySrq(s1.srq);
    await t.c.createSrq({ pd, maxWr: 1 });
    // Budgets are returned exactly: all of it is free again once everything is gone.
    await t.c.unlisten(18800);
  } finally {
    await t.close();
  }
});

test("default budgets: the issue's attack (CQs of depth 2^20, again and again) stops at rdma.max-cq-entries; every existing size still fits", async () => {
  const cfg = parseConfig('');
  assert.equal(
    [
      cfg.rdma.maxMrBytes,
      cfg.rdma.maxCqEntries,
      cfg.rdma.maxWrSlots,
      cfg.rdma.maxPds,
      cfg.rdma.maxCqs,
      cfg.rdma.maxSrqs,
    ],
    [4 * 2 ** 30, 4 * 2 ** 20, 2 ** 20, 4096, 4096, 1024],
  );
  const dp = await Dataplane.create({
    ...cfg,
    interfaces: [],
    api: { host: '127.0.0.1', port: 0, token: null, users: [], group: null },
  });
  const api = await startApi(dp, { port: 0 });
  const c = new ApiClient(api.url);
  try {
    let made = 0;
    for (;;) {
      const e = await c.createCq({ depth: 2 ** 20 }).then(
        () => null,
        (x) => x,
      );
      if (e !== null) {
        assert.is(e.statusCode, 409, e.message);
        assert.match(e.message, over('rdma.max-cq-entries'));
        break;
      }
      made++;
      assert.ok(made <= 4, 'the default budget holds 4 CQs of depth 2^20');
    }
    assert.is(made, 4);
    // The largest QP the verbs allow fits the default slots (16384 send with 4096 inline, 16384 receive).
    const { pd } = await c.createPd();
    await c.destroyCq((await c.cqs())[0].cq);
    const { cq } = await c.createCq({ depth: 16 });
    const q = await c.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16384, maxRecvWr: 16384, maxInline: 4096 });
    assert.is(q.maxInline, 4096);
    const e = await apiError(
      c
        .createMr({ pd, length: 2 ** 31, access: [] })
        .then(() => c.createMr({ pd, length: 2 ** 31, access: [] }))
        .then(() => c.createMr({ pd, length: 1, access: [] })),
    );
    assert.is(e.statusCode, 409);
    assert.match(e.message, over('rdma.max-mr-bytes'));
  } finally {
    await api.close();
    await dp.close();
  }
});

test.run();
