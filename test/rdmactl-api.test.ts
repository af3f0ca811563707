/**
 * rdmactl against real API servers (two data planes, real HTTP): the verbs lifecycle as a
 * script would run it, the rendered show commands, the API's refusals passed on, the token.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { runCommand } from '../api/rdmactl.ts';
import { apiBase, httpCall } from '../api/rdmactl-cli.ts';
import { NotFound, UsageError } from '../api/rdmactl.ts';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
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

test("vppctl's forms (issue 33.9): --api host:port and /v1, show interface/hardware NAME, show trace max, monitor interface, tables with a header, ping from icmp_seq 1 and its statistics on Ctrl-C", async () => {
  for (const [given, base] of [
    ['127.0.0.1:7070', 'http://127.0.0.1:7070'],
    ['http://127.0.0.1:7070/v1', 'http://127.0.0.1:7070'],
    ['127.0.0.1:7070/v1/', 'http://127.0.0.1:7070'],
    ['http://[::1]:7070', 'http://[::1]:7070'],
  ])
    assert.is(apiBase(given), base, given);
  assert.throws(
    () => apiBase('https://127.0.0.1:7070'),
    (e: Error) =>
      e instanceof UsageError &&
      /--api must be http:\/\/HOST:PORT, HOST:PORT or either ending in \/v1 .* got "https:/.test(e.message),
  );
  const p = await apiPair();
  try {
    const A = ctl(apiBase(`${p.apiA.url.replace('http://', '')}/v1`));
    const [itf] = await p.a.interfaces();
    const one = await A(`show interface ${itf.name}`);
    assert.match(one, new RegExp(`\\n${itf.name} +${itf.index} +`));
    assert.is(one.split('\n').filter((l) => /^\S/.test(l)).length, 1, `${itf.name} only:\n${one}`);
    const none = await A('show interface nosuch').then(
      () => null,
      (e) => e,
    );
    assert.instance(none, ApiError);
    assert.is(none.statusCode, 404);
    assert.match(none.message, /nosuch/);
    assert.match(await A(`show hardware ${itf.name}`), new RegExp(`\\n${itf.name} +${itf.index} +`));
    const noHw = await A('show hardware nosuch').then(
      () => null,
      (e) => e,
    );
    assert.instance(noHw, NotFound);
    assert.match(noHw.message, new RegExp(`show hardware: no interface nosuch \\(interfaces: .*${itf.name}`));
    // Tables with a header row.
    assert.match(await A('show pds'), /^PD +Users\n\(none\)\n$/);
    const pd = (await A('create pd')).trim();
    const cq = (await A('create cq depth 16')).trim();
    await A(`create mr pd ${pd} length 64`);
    assert.match(await A('show pds'), new RegExp(`^PD +Users\\n${pd} +1\\n$`));
    assert.match(await A('show cqs'), new RegExp(`^CQ +Depth +Pending +Users +State\\n${cq} +16 +0 +0 +ok\\n$`));
    assert.match(
      await A('show mrs'),
      new RegExp(`^MR +PD +STag +Length +Access +Owner\\n\\d+ +${pd} +0x[0-9a-f]+ +64 +local-write +-\\n$`),
    );
    // ping: icmp_seq from 1 in each run; the trace shows the echoes, max limits it.
    await A(`trace add ${itf.driver}-input 10`);
    for (let run = 0; run < 2; run++) {
      const out = await A(`ping ${IP_B} repeat 3 interval 0.01`);
      assert.equal(
        [...out.matchAll(/icmp_seq=(\d+)/g)].map((m) => Number(m[1])),
        [1, 2, 3],
        out,
      );
    }
    assert.match(
      await A('show trace max 1'),
      /Packet 1\n[^]*Limiting display to 1 packets\. To display more specify max\.\n/,
    );
    assert.not.match(await A('show trace max 1'), /Packet 2\n/);
    // monitor interface: a line per interval, rates that saw the pings in between.
    const mon = A(`monitor interface ${itf.name} interval 0.3 count 2`);
    await A(`ping ${IP_B} repeat 5 interval 0.02`);
    const lines = (await mon).split('\n').filter(Boolean);
    assert.is(lines.length, 2, lines.join('\n'));
    for (const l of lines) assert.match(l, /^rx: [\d.]+[kMG]?pps [\d.]+[kMG]?bps tx: [\d.]+[kMG]?pps [\d.]+[kMG]?bps$/);
    assert.ok(
      lines.some((l) => !l.startsWith('rx: 0pps')),
      `the pings were seen: ${lines.join(' | ')}`,
    );
    // clear interfaces: show interface and /metrics count from zero, the driver's counters go on.
    const hwBefore = (await p.a.hardware()).find((h) => h.name === itf.name)!.counters;
    assert.is(await A('clear interfaces'), 'cleared interfaces\n');
    assert.not.match(await A(`show interface ${itf.name}`), /packets/);
    assert.equal((await p.a.interface(itf.name)).counters.rxPackets, 0);
    const metrics = await (await fetch(`${p.apiA.url}/metrics`)).text();
    assert.match(
      metrics,
      new RegExp(`rdmagraph_interface_rx_packets_total\\{interface="${itf.name}",driver="${itf.driver}"\\} 0\\n`),
    );
    assert.equal((await p.a.hardware()).find((h) => h.name === itf.name)!.counters, hwBefore);
    await A(`ping ${IP_B} repeat 1`);
    assert.match(await A(`show interface ${itf.name}`), /rx packets +1\n/);
    // Ctrl-C: the statistics of what went out, as ping(8) prints them.
    const child = spawn(
      process.execPath,
      [
        fileURLToPath(new URL('../bin/rdmactl.mjs', import.meta.url)),
        '--api',
        p.apiA.url,
        'ping',
        IP_B,
        'repeat',
        '1000',
        'interval',
        '0.05',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (out += d));
    const exited = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    for (let i = 0; i < 300 && !/icmp_seq=3 /.test(out); i++) await new Promise((r) => setTimeout(r, 50));
    child.kill('SIGINT');
    assert.is(await exited, 0, out);
    const st = /\nStatistics: (\d+) sent, (\d+) received, /.exec(out);
    assert.ok(st, out);
    assert.ok(Number(st[1]) >= 3 && Number(st[1]) < 1000 && Number(st[2]) >= 3, out);
  } finally {
    await p.close();
  }
});

test("show runtime max: per node the slowest call since the last clear, in VPP's columns", async () => {
  const p = await apiPair();
  try {
    const A = ctl(p.apiA.url);
    await A(`ping ${IP_B} repeat 3 interval 0.01`);
    const out = await A('show runtime max');
    assert.match(out, /\n +Name +Max Node Clocks +Vectors at Max +Max Clocks +Avg Clocks +Avg Vectors\/Call\n/);
    const [t] = (await p.a.runtime()) as {
      rows: {
        name: string;
        calls: number;
        clocks: number;
        vectors: number;
        maxClocks?: number;
        vectorsAtMax?: number;
      }[];
    }[];
    const ran = t.rows.filter((r) => r.calls > 0);
    assert.ok(
      ran.some((r) => r.name === 'ip4-input'),
      ran.map((r) => r.name).join(' '),
    );
    for (const r of ran) {
      // The slowest call took at least the average call, and no call had more vectors than all of them.
      assert.ok(
        r.maxClocks! >= r.clocks / r.calls - 1e-6,
        `${r.name}: max ${r.maxClocks} < average ${r.clocks / r.calls}`,
      );
      assert.ok(r.vectorsAtMax! <= r.vectors, r.name);
      assert.match(out, new RegExp(`\\n${r.name} +[\\d.]+e-?\\d+ +${r.vectorsAtMax} +`), r.name);
    }
    await A('clear runtime');
    const [c] = (await p.a.runtime()) as { rows: { name: string; calls: number; maxClocks?: number }[] }[];
    const ip4 = c.rows.find((r) => r.name === 'ip4-input')!;
    assert.is(ip4.calls, 0);
    assert.is(ip4.maxClocks, 0, 'cleared: the maximum starts again');
  } finally {
    await p.close();
  }
});

test('show trace: cm-input and qp-dispatch say what they did with each traced packet (no blank entries)', async () => {
  const p = await apiPair();
  try {
    const A = ctl(p.apiA.url),
      B = ctl(p.apiB.url);
    const pa = (await A('create pd')).trim(),
      ca = (await A('create cq depth 32')).trim();
    const [ma] = (await A(`create mr pd ${pa} length 4096 access local-write`)).trim().split(' ');
    const pb = (await B('create pd')).trim(),
      cb = (await B('create cq depth 32')).trim();
    const [mb] = (await B(`create mr pd ${pb} length 4096 access local-write`)).trim().split(' ');
    await A('trace add pipe-input 50');
    await B('trace add pipe-input 50');
    await B(`listen 18515 pd ${pb} send-cq ${cb} recv-cq ${cb}`);
    const [qa] = (await A(`create qp pd ${pa} send-cq ${ca} recv-cq ${ca}`)).trim().split(' ');
    await A(`connect ${qa} ${IP_B}:18515 cm`);
    const qb = (await p.b.qps()).find((q) => q.remote?.port === Number(qa))!.qpn;
    await B(`post recv ${qb} wr-id r1 sge ${mb}:0:64`);
    await A(`mr write ${ma} 0 text hello`);
    await A(`post send ${qa} send wr-id s1 sge ${ma}:0:5`);
    assert.match(await B(`poll ${cb} wait 2000`), /"r1".* success/);
    await A(`poll ${ca} wait 2000`);
    const tb = await B('show trace'),
      ta = await A('show trace');
    assert.match(
      tb,
      new RegExp(
        `\\d: cm-input\\n  CM: REQ from ${IP_A}:${qa} to port 18515: ACCEPT sent from qp ${qb} \\(ird \\d+ ord \\d+\\), half-open`,
      ),
    );
    assert.match(
      ta,
      new RegExp(`\\d: cm-input\\n  CM: ACCEPT from ${IP_B}:${qb} to port ${qa}: qp ${qa} connected to ${IP_B}:${qb} `),
    );
    assert.match(
      tb,
      new RegExp(
        `\\d: qp-dispatch\\n  qp ${qb} psn \\d+: delivered psn \\d+\\.\\.\\d+ in order: receive completion \\(1\\)`,
      ),
    );
    for (const t of [ta, tb]) {
      const entries = [...t.matchAll(/\d: (cm-input|qp-dispatch)\n(.*)\n/g)];
      assert.ok(entries.length > 0, t);
      for (const e of entries) assert.match(e[2], /^  \S/, `an entry of ${e[1]} says something:\n${t}`);
    }
  } finally {
    await p.close();
  }
});

test('401: the hint how to give the token is said once (the API says it; rdmactl adds it only when the API did not)', async () => {
  const p = await apiPair({ tokenA: 's3cret' });
  try {
    for (const args of [[], ['--token', 'wrong']]) {
      const child = spawn(
        process.execPath,
        [fileURLToPath(new URL('../bin/rdmactl.mjs', import.meta.url)), '--api', p.apiA.url, ...args, 'show', 'qps'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d));
      const code = await new Promise<number | null>((r) => child.on('close', (c) => r(c)));
      assert.is(code, 1, err);
      assert.match(err, /^rdmactl: 401 Unauthorized: (missing Authorization header|wrong token)/);
      assert.is(err.split('--token').length, 2, `one hint:\n${err}`);
      assert.is(err.split('\n').filter(Boolean).length, 1, err);
    }
  } finally {
    await p.close();
  }
});

test.run();
