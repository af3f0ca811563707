/**
 * rdmactl against real API servers (two data planes, real HTTP): the verbs lifecycle as a
 * script would run it, the rendered show commands, the API's refusals passed on, the token.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { runCommand } from '../api/rdmactl.ts';
import { httpCall } from '../api/rdmactl-cli.ts';
import { ApiError } from '../api/client.ts';
import { apiPair } from './api-helpers.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';

function ctl(url: string, token: string | null = null) {
  return async (line: string): Promise<string> => {
    let out = '';
    await runCommand(
      line.split(' '),
      httpCall(url, token),
      { out: (s) => (out += s), bytes: (b) => (out += Buffer.from(b).toString('hex')) },
      { json: false },
    );
    return out;
  };
}

test('rdmactl and REST agree: what both leave out gets the same defaults (access, maxSendWr/maxRecvWr, sge, inline, ird/ord)', async () => {
  const p = await apiPair();
  try {
    const A = ctl(p.apiA.url);
    const pd = Number((await A('create pd')).trim()),
      cq = Number((await A('create cq depth 32')).trim());
    const [cliMr] = (await A(`create mr pd ${pd} length 64`)).trim().split(' ');
    const restMr = await p.ca.createMr({ pd, length: 64 });
    assert.equal((await p.a.getMr(Number(cliMr))).access, restMr.access);
    assert.equal(restMr.access, ['local-write']);
    const [cliQp] = (await A(`create qp pd ${pd} send-cq ${cq} recv-cq ${cq}`)).trim().split(' ');
    const restQp = await p.ca.createQp({ pd, sendCq: cq, recvCq: cq });
    const sizes = (q: {
      maxSendWr: number;
      maxRecvWr: number;
      maxSge: number;
      maxInline: number;
      ird: number;
      ord: number;
    }) => [q.maxSendWr, q.maxRecvWr, q.maxSge, q.maxInline, q.ird, q.ord];
    assert.equal(sizes(await p.a.getQp(Number(cliQp))), sizes(restQp));
    assert.equal(sizes(restQp), [256, 256, 4, 64, 16, 16]);
    // The OpenAPI document states the defaults and the real limits, so a client can check first.
    const doc = (await (await fetch(`${p.apiA.url}/v1/openapi.json`)).json()) as {
      components: { schemas: Record<string, { properties: Record<string, { default?: unknown; maximum?: number }> }> };
    };
    const qp = doc.components.schemas.QpCreate.properties;
    assert.is(qp.maxSendWr.default, 256);
    const [dev] = await p.a.devices();
    assert.is(qp.maxSendWr.maximum, dev.maxQpWr);
    assert.is(qp.maxSge.maximum, dev.maxSge);
    assert.is(qp.ird.maximum, dev.maxQpRdAtom);
    assert.is(doc.components.schemas.CqCreate.properties.depth.maximum, 1 << 20);
    assert.equal(doc.components.schemas.MrCreate.properties.access.default, ['local-write']);
  } finally {
    await p.close();
  }
});

test('a script: create, connect, write, read back, show qps/runtime/errors/trace, destroy', async () => {
  const p = await apiPair({ tokenA: 's3cret' });
  try {
    const A = ctl(p.apiA.url, 's3cret'),
      B = ctl(p.apiB.url);
    const pa = (await A('create pd')).trim(),
      ca = (await A('create cq depth 32')).trim();
    const [ma] = (await A(`create mr pd ${pa} length 4096 access local-write`)).trim().split(' ');
    const [qa, psa] = (await A(`create qp pd ${pa} send-cq ${ca} recv-cq ${ca} max-send-wr 8 max-recv-wr 8`))
      .trim()
      .split(' ');
    const pb = (await B('create pd')).trim(),
      cb = (await B('create cq depth 32')).trim();
    const [mb, sb] = (await B(`create mr pd ${pb} length 4096 access local-write,remote-write`)).trim().split(' ');
    const [qb, psb] = (await B(`create qp pd ${pb} send-cq ${cb} recv-cq ${cb}`)).trim().split(' ');
    for (const h of [pa, ca, ma, qa, psa, pb, cb, mb, qb, psb]) assert.match(h, /^\d+$/);
    assert.match(sb, /^0x[0-9a-f]+$/, 'the STag in hex, as show mrs prints it');
    assert.is(Number(psa), (await p.a.getQp(Number(qa))).psn, 'create qp printed the QPN and its initial PSN');
    assert.is((await p.a.getMr(Number(ma))).length, 4096, 'create mr printed the real handle');
    assert.is(Number(sb), (await p.b.getMr(Number(mb))).stag, 'and the STag');
    assert.is(await A(`connect ${qa} ${IP_B}:${qb} psn ${psb}`), `qp ${qa} rts ${IP_A}:${qa} -> ${IP_B}:${qb}\n`);
    await B(`connect ${qb} ${IP_A}:${qa} psn ${psa}`);
    await A('trace add pipe-input 4');
    await A(`mr write ${ma} 0 text rdmactl!`);
    await A(`post send ${qa} write wr-id w-1 sge ${ma}:0:8 remote ${sb}:16`);
    assert.is(await A(`poll ${ca} wait 2000`), `wr-id "w-1" qpn ${qa} write success byte-len 8\n`);
    assert.is(await B(`mr read ${mb} 16 8 text`), 'rdmactl!\n');
    assert.match(await B(`mr read ${mb} 16 2`), /^00000010  72 64 +rd\n$/);
    const qps = (await A('show qps')).split('\n');
    assert.match(qps[1], new RegExp(`^ *${qa} +rts +${IP_A}:${qa} +${IP_B}:${qb} `));
    const rt = await A('show runtime');
    assert.match(rt, /^Time [\d.]+, 10\.000000 sec internal node vector rate /);
    assert.match(
      rt,
      /\ntrp-input +active +[1-9]\d* +[1-9]\d* +0 +[\d.e-]+ +[\d.]+\n/,
      "trp-input ran on A (the write's ACK)",
    );
    const tr = await A('show trace');
    assert.match(tr, /Packet 1\n/);
    assert.match(tr, /pipe-input/);
    assert.match(await A('show errors'), /Count +Node +Reason +Severity/);
    // The API's refusal comes through as an ApiError with its status and message.
    const err = await A(`destroy cq ${ca}`).then(
      () => null,
      (e) => e,
    );
    assert.instance(err, ApiError);
    assert.is(err.statusCode, 409);
    assert.is(err.message, `cq ${ca} is in use by 1 QP(s)`);
    const noTok = await ctl(p.apiA.url)('show qps').then(
      () => null,
      (e) => e,
    );
    assert.is(noTok?.statusCode, 401);
    await A(`destroy qp ${qa}`);
    await A(`destroy cq ${ca}`);
    assert.is((await A('show qps')).split('\n').filter((l) => l.trim()).length, 1, 'only the header left');
  } finally {
    await p.close();
  }
});

test.run();
