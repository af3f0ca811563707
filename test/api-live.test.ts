/**
 * The live view's server side (issue 34): GET / and its files, GET /live/events (frames at least
 * once a second, their figures the data plane's own counters), sampling only while a stream is
 * open, a stream that never reads cut at its bound, bad paths and queries, and the same guard,
 * user and token rules as every route. The page in a real browser: test/live-browser.test.ts.
 */
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { liveOf, startApi, type RunningApi } from '../api/server.ts';
import { IP_B, twoDataplanes } from './dataplane-helpers.ts';
import { assertError, raw } from './api-helpers.ts';
import { skip, test } from './harness.ts';
import { sleep, withTeardown } from './helpers.ts';
import { getWith, nodeOf, openEvents } from './live-helpers.ts';
import { IP_B as WK_IP_B, serverA } from './workers-helpers.ts';

type Pair = Awaited<ReturnType<typeof twoDataplanes>>;

/** Data planes A and B (a pipe between them) and an API on A with these options. */
async function withLive(
  opts: Parameters<typeof startApi>[1],
  body: (api: RunningApi, dps: Pair) => Promise<void>,
): Promise<void> {
  const dps = await twoDataplanes();
  const api = await startApi(dps.a, { host: '127.0.0.1', port: 0, checkResponses: true, ...opts });
  await withTeardown(
    () => body(api, dps),
    async () => {
      await api.close();
      await dps.close();
    },
  );
}

test('the page and its files: HTML with a CSP that allows only this daemon, scripts and style from memory', async () => {
  await withLive({}, async (api) => {
    const page = await raw(api.url, 'GET', '/');
    assert.is(page.status, 200, page.text);
    assert.match(page.type, /^text\/html/);
    assert.match(page.text, /<script type="module" src="\/live\/live-page\.mjs"><\/script>/);
    const csp = page.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /connect-src 'self'/);
    // Every file the page and its modules name is served, and nothing from another host is named.
    for (const [file, type] of [
      ['live-page.mjs', /^text\/javascript/],
      ['live-graph.mjs', /^text\/javascript/],
      ['live-tables.mjs', /^text\/javascript/],
      ['live.css', /^text\/css/],
    ] as const) {
      const r = await raw(api.url, 'GET', `/live/${file}`);
      assert.is(r.status, 200, `${file}: ${r.text}`);
      assert.match(r.type, type, file);
      // (SVG's namespace is a name, never fetched.)
      assert.not.match(
        r.text.replaceAll('http://www.w3.org/2000/svg', ''),
        /https?:\/\//,
        `${file} names no other host`,
      );
    }
    assert.not.match(page.text, /https?:\/\//, 'the page names no other host');
  });
});

test('events: a frame at least once a second, the figures the data plane counted (node rates, arcs, interface rates sum to the echoes sent)', async () => {
  await withLive({}, async (api, dps) => {
    const s = await openEvents(api.url);
    try {
      await s.until(() => true, 2000, 'a first frame');
      assert.is(s.frames[0].frame.interval, 0, 'the first frame has no rates yet');
      const itf = dps.a.config.interfaces[0].name;
      // 20 echo requests from A to B, and their 20 replies into A.
      const ping = await dps.a.ping({ address: IP_B, count: 20, intervalMs: 20 });
      assert.is(ping.received, 20);
      await sleep(1300); // two more frames after the last reply
      s.close();
      const frames = s.frames.map((f) => f.frame);
      const gaps = s.frames.slice(1).map((f, i) => f.at - s.frames[i].at);
      assert.ok(gaps.length >= 4, `${gaps.length + 1} frames`);
      assert.ok(Math.max(...gaps) < 1000, `frames at least once a second: gaps ${gaps.map((g) => g.toFixed(0))} ms`);
      // Rates times intervals add up to exactly what was counted.
      const sum = (f: (x: (typeof frames)[number]) => number) => frames.reduce((n, x) => n + f(x) * x.interval, 0);
      const near = (x: number, want: number, what: string) => assert.ok(Math.abs(x - want) < 1e-6, `${what}: ${x}`);
      const ifOf = (f: (typeof frames)[number]) => f.interfaces.find((i) => i.name === itf)!;
      const last = frames.at(-1)!;
      near(
        sum((f) => ifOf(f).rxPps),
        ifOf(last).rxPackets - ifOf(frames[0]).rxPackets,
        'interface rx packets',
      );
      near(
        sum((f) => ifOf(f).txPps),
        ifOf(last).txPackets - ifOf(frames[0]).txPackets,
        'interface tx packets',
      );
      assert.ok(ifOf(last).txPackets - ifOf(frames[0]).txPackets >= 20, 'the 20 echo requests were counted');
      const view = await dps.a.interface(itf);
      assert.equal(
        [ifOf(last).rxPackets, ifOf(last).txPackets],
        [view.counters.rxPackets, view.counters.txPackets],
        "the interface's own counters",
      );
      near(
        sum((f) => nodeOf(f, 'ip4-input').packetsPerSec),
        20,
        'ip4-input packets',
      );
      const eth = (f: (typeof frames)[number]) => nodeOf(f, 'ethernet-input');
      const arc = (f: (typeof frames)[number]) => eth(f).arcPerSec[eth(f).next.indexOf('ip4-input')];
      near(sum(arc), 20, 'packets along the arc ethernet-input -> ip4-input');
      assert.ok(frames.some((f) => arc(f) > 0) && arc(frames.at(-1)!) === 0, 'the arc carried traffic, and then none');
      // The arcs are the engine's own tables: every next name is a node of the frame.
      const names = new Set(frames[0].threads[0].nodes.map((n) => n.name));
      for (const n of frames[0].threads[0].nodes)
        for (const to of n.next) assert.ok(names.has(to), `${n.name} -> ${to}`);
      // Totals are GET /v1/runtime's (nothing moves after the echoes).
      const rt = (await raw(api.url, 'GET', '/v1/runtime').then((r) => r.json)) as {
        threads: { rows: { name: string; vectors: number }[] }[];
      };
      for (const name of ['ip4-input', 'ethernet-input', 'icmp4-echo', 'pipe-input'])
        assert.is(
          nodeOf(frames.at(-1)!, name).vectors,
          rt.threads[0].rows.find((r) => r.name === name)!.vectors,
          `${name} vectors`,
        );
      assert.ok(nodeOf(frames.at(-1)!, 'ip4-input').vectors >= 20);
    } finally {
      s.close();
    }
  });
});

test('events: a QP appears in the next frame with its state, peer and window; moved error counters are listed', async () => {
  await withLive({}, async (api, dps) => {
    const s = await openEvents(api.url);
    try {
      await s.until(() => true, 2000, 'a first frame');
      const { pd } = await dps.a.createPd();
      const { cq } = await dps.a.createCq({ depth: 16 });
      const qp = await dps.a.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 8, maxRecvWr: 8 });
      const f = await s.until((x) => x.qps.some((q) => q.qpn === qp.qpn), 1500, `QP ${qp.qpn} in a frame`);
      const q = f.qps.find((x) => x.qpn === qp.qpn)!;
      assert.equal(
        { state: q.state, peer: q.peer, owner: q.owner, sqOutstanding: q.sqOutstanding, maxSendWr: q.maxSendWr },
        { state: qp.state, peer: null, owner: null, sqOutstanding: 0, maxSendWr: 8 },
      );
      // An echo request to an address nobody has: its error counter moves and is listed.
      const lost = await dps.a.ping({ address: '10.10.0.77', count: 1, timeoutMs: 100 });
      assert.is(lost.received, 0);
      const moved = await s.until((x) => x.errors.length > 0, 2000, 'a moved error counter');
      const want = (await dps.a.errors())[0].rows.filter((r) => r.count > 0);
      for (const e of moved.errors)
        assert.ok(
          want.some((r) => r.node === e.node && r.reason === e.reason && r.count === e.count),
          `${e.node} ${e.reason} ${e.count} is a counter of GET /v1/errors`,
        );
    } finally {
      s.close();
    }
  });
});

test("worker threads: a section per worker and their total, whose rates are the sums of the workers' and whose arcs are their union", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rg-live-wk-'));
  const dp = await serverA(join(dir, 'm.sock'), 2, 2);
  const api = await startApi(dp, { host: '127.0.0.1', port: 0, checkResponses: true });
  await withTeardown(
    async () => {
      const s = await openEvents(api.url);
      await s.until(() => true, 3000, 'a first frame');
      // Echo requests into a link that is down: the nodes on the way still run, on a worker.
      const sent = s.until(
        (x) => x.interval > 0 && x.threads.at(-1)!.nodes.some((n) => n.packetsPerSec > 0),
        3000,
        'a frame with packets moving',
      );
      await dp.ping({ address: WK_IP_B, count: 3, intervalMs: 20, timeoutMs: 100 });
      const f = await sent;
      s.close();
      assert.equal(
        f.threads.map((t) => [t.index, t.name]),
        [
          [1, 'rdma_wk_0'],
          [2, 'rdma_wk_1'],
          [-1, 'total'],
        ],
      );
      const total = f.threads[2];
      const workers = f.threads.slice(0, 2);
      let polled = 0;
      for (const n of total.nodes) {
        const parts = workers.flatMap((t) => t.nodes.filter((x) => x.name === n.name));
        assert.ok(parts.length > 0, `${n.name} is a node of a worker`);
        const sum = parts.reduce((k, x) => k + x.callsPerSec, 0);
        assert.ok(Math.abs(n.callsPerSec - sum) <= 1e-9 * Math.max(1, sum), `${n.name}: ${n.callsPerSec} = ${sum}`);
        assert.is(
          n.calls,
          parts.reduce((k, x) => k + x.calls, 0),
          `${n.name} calls`,
        );
        for (const p of parts)
          for (const to of p.next) assert.ok(n.next.includes(to), `${n.name} -> ${to} in the total`);
        if (n.callsPerSec > 0) polled++;
      }
      assert.ok(polled >= 2, `${polled} nodes ran on the workers`);
    },
    async () => {
      await api.close();
      await dp.close();
      rmSync(dir, { recursive: true, force: true });
    },
  );
});

test('sampling runs only while a stream is open: no facade call without a page, none after it goes', async () => {
  await withLive({ live: { intervalMs: 50 } }, async (api) => {
    const { sampler, streams } = liveOf(api.server);
    await sleep(400);
    assert.is(sampler.samples, 0, 'nothing sampled with no page open');
    const s = await openEvents(api.url);
    await s.until(() => true, 1000, 'a frame');
    await s.until(() => true, 1000, 'a second frame');
    assert.is(streams.streams, 1);
    s.close();
    await sleep(100);
    assert.is(streams.streams, 0, 'the stream is forgotten when the page goes');
    const after = sampler.samples;
    assert.ok(after >= 2, `${after} samples`);
    await sleep(400);
    assert.ok(sampler.samples <= after + 1, `sampling stopped: ${after} then ${sampler.samples}`);
  });
});

test('closing the server ends the open streams at once (a daemon stopping waits for no page)', async () => {
  await withLive({}, async (api) => {
    const s = await openEvents(api.url);
    await s.until(() => true, 2000, 'a frame');
    const ended = new Promise<void>((resolve) => s.res.once('end', resolve));
    const t0 = performance.now();
    await Promise.race([api.close(), sleep(3000)]);
    const took = performance.now() - t0;
    assert.ok(took < 1000, `closed in ${took.toFixed(0)} ms`);
    await ended;
    assert.is(liveOf(api.server).streams.streams, 0);
  });
});

test('a client that never reads its stream is cut once its unsent frames pass the bound; the others go on', async () => {
  const bound = 32 * 1024;
  await withLive({ live: { intervalMs: 10, maxBuffered: bound } }, async (api) => {
    const { streams } = liveOf(api.server);
    const reader = await openEvents(api.url);
    const port = Number(new URL(api.url).port);
    const stalled = connect(port, '127.0.0.1');
    stalled.pause(); // never reads
    stalled.write(`GET /live/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
    const t0 = performance.now();
    while (streams.dropped === 0 && performance.now() - t0 < 60_000) await sleep(50);
    assert.is(streams.dropped, 1, `the stalled client was cut (after ${(performance.now() - t0).toFixed(0)} ms)`);
    assert.is(streams.streams, 1, 'the reading page still has its stream');
    const before = reader.frames.length;
    await reader.until(() => true, 1000, 'frames still reach the page that reads');
    assert.ok(reader.frames.length > before);
    reader.close();
    stalled.destroy();
  });
});

test('bad input: unknown paths are 404, queries 400, a huge query string 431, a HEAD of the stream no stream; past 16 streams 503', async () => {
  await withLive({ live: { maxStreams: 2 } }, async (api) => {
    assertError(
      await raw(api.url, 'GET', '/live/nope.js'),
      404,
      /^no file "nope\.js" in the live view/,
      'a bogus file',
    );
    assertError(await raw(api.url, 'GET', '/live/'), 404, /no file "" in the live view|no route/, 'no file name');
    assertError(await raw(api.url, 'GET', '/index.html'), 404, /^no route GET \/index\.html/, 'a bogus path');
    assertError(await raw(api.url, 'GET', '/live/a/b'), 404, /^no route GET \/live\/a\/b/, 'a deeper path');
    assertError(await raw(api.url, 'POST', '/', { body: {} }), 405, /^POST is not a method of \//, 'POST /');
    assertError(
      await raw(api.url, 'GET', '/?token=x'),
      400,
      'querystring/token is not allowed (querystring takes no fields)',
      'a query on /',
    );
    assertError(
      await raw(api.url, 'GET', '/live/events?__proto__=1'),
      400,
      'querystring/__proto__ is not allowed (querystring takes no fields)',
      'a __proto__ query on the stream',
    );
    const huge = await raw(api.url, 'GET', `/live/events?x=${'a'.repeat(20000)}`);
    assert.is(huge.status, 431, huge.text);
    assert.match(huge.text, /Exceeded maximum allowed HTTP header size/);
    const head = await fetch(`${api.url}/live/events`, { method: 'HEAD' });
    assert.is(head.status, 200);
    assert.match(head.headers.get('content-type') ?? '', /^text\/event-stream/);
    const { streams } = liveOf(api.server);
    assert.is(streams.streams, 0, 'HEAD opened no stream');
    const a = await openEvents(api.url);
    const b = await openEvents(api.url);
    try {
      assertError(await raw(api.url, 'GET', '/live/events'), 503, /^2 live views are open, the most/, 'a third stream');
    } finally {
      a.close();
      b.close();
    }
  });
});

test('guard and token: pages of other sites and other hosts are refused, a token is needed when set', async () => {
  await withLive({}, async (api) => {
    const port = new URL(api.url).port;
    for (const path of ['/', '/live/live-page.mjs', '/live/events']) {
      assertError(
        await raw(api.url, 'GET', path, { headers: { origin: 'http://evil.example' } }),
        403,
        /^Origin "http:\/\/evil\.example" is not this API/,
        `${path} from another site`,
      );
      assertError(
        await raw(api.url, 'GET', path, { headers: { 'sec-fetch-site': 'cross-site' } }),
        403,
        /^Sec-Fetch-Site "cross-site"/,
        `${path} cross-site`,
      );
      const rebound = await getWith(api.url, path, { host: `evil.example:${port}` });
      assert.is(rebound.status, 403, `${path} through another name (DNS rebinding): ${rebound.text.slice(0, 200)}`);
      assert.match(rebound.text, /"message":"Host \\"evil\.example:\d+\\" is not this API/);
    }
    // What the page itself sends: its own origin, same-origin.
    const s = await openEvents(api.url, { origin: api.url, 'sec-fetch-site': 'same-origin' });
    await s.until(() => true, 2000, 'a frame for the page');
    s.close();
  });
  await withLive({ token: 'live-s3cret' }, async (api) => {
    for (const path of ['/', '/live/live.css', '/live/events'])
      assertError(await raw(api.url, 'GET', path), 401, /^missing Authorization header/, `${path} without the token`);
    assert.is((await raw(api.url, 'GET', '/', { headers: { authorization: 'Bearer live-s3cret' } })).status, 200);
    await openEvents(api.url, { authorization: 'Bearer wrong' }).then(
      () => assert.unreachable('a wrong token opened a stream'),
      (e: Error) => assert.match(e.message, /^401 .*wrong token/),
    );
    const s = await openEvents(api.url, { authorization: 'Bearer live-s3cret' });
    await s.until(() => true, 2000, 'a frame with the token');
    s.close();
  });
});

test('another local user is refused the page and the stream (403 naming its uid), as every route', async () => {
  if (process.getuid?.() !== 0) skip('needs root (to run curl as uid 65534 with setpriv)');
  if (spawnSync('setpriv', ['--version']).error) skip('setpriv is not installed (util-linux)');
  if (spawnSync('curl', ['--version']).error) skip('curl is not installed');
  await withLive({}, async (api) => {
    for (const path of ['/', '/live/events']) {
      // Not spawnSync: the API answering it runs in this process.
      const r = await promisify(execFile)(
        'setpriv',
        [
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          'curl',
          '-sS',
          '-m',
          '3',
          '-w',
          '\n%{http_code}',
          `${api.url}${path}`,
        ],
        { encoding: 'utf8' },
      ).catch((e: { stdout: string; stderr: string }) => e);
      const [body, code] = r.stdout.trimEnd().split(/\n(?=\d+$)/);
      assert.is(code, '403', `${path}: ${r.stdout} ${r.stderr}`);
      assert.match(body, /uid 65534/);
    }
    assert.is(liveOf(api.server).sampler.samples, 0, 'nothing was sampled for them');
  });
});

test.run();
