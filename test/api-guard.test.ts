/**
 * Issue 12 item 6: web pages stay out of the API. A DNS-rebinding page (foreign Host), a
 * cross-site page (foreign Origin, Sec-Fetch-Site), a body-less or form POST (what a browser
 * sends cross-site without a preflight): each is refused and changes nothing. A non-loopback
 * listen address needs a token, in the start-up file and in startApi. rdmactl and ApiClient
 * still work.
 */
import { request } from 'node:http';
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { ApiClient } from '../api/client.ts';
import { httpCall } from '../api/rdmactl-cli.ts';
import { runCommand } from '../api/rdmactl.ts';
import { startApi } from '../api/server.ts';
import { ConfigError, parseConfig } from '../config/load.ts';
import { twoDataplanes } from './dataplane-helpers.ts';
import { apiPair, assertError, type RawResponse } from './api-helpers.ts';

/** A request with exactly these headers (node:http: no Host unless given, unlike fetch). */
function send(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<RawResponse> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, method, path, headers, setHost: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => {
        const type = String(res.headers['content-type'] ?? '');
        resolve({
          status: res.statusCode ?? 0,
          type,
          text,
          json: type.startsWith('application/json') ? JSON.parse(text) : null,
          headers: new Headers(res.headers as Record<string, string>),
        });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

test('Host must name this API: a DNS-rebinding name, another port or no Host is 403; loopback names with the port work', async () => {
  const p = await apiPair();
  try {
    const url = p.apiA.url;
    const port = new URL(url).port;
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`]) {
      const r = await send(url, 'GET', '/v1/health', { host });
      assert.is(r.status, 200, `Host ${host}: ${r.text}`);
    }
    for (const host of [
      `evil.example.com:${port}`,
      'evil.example.com',
      `127.0.0.1:${Number(port) + 1}`,
      '127.0.0.1',
      `localhost.:${port}`,
      `10.10.0.1:${port}`,
      `127.0.0.1:${port}@evil`,
    ]) {
      const r = await send(url, 'GET', '/v1/health', { host });
      assertError(
        r,
        403,
        /^Host ".*" is not this API: it answers only to localhost, 127\.0\.0\.1, \[::1\] with port \d+ \(a page whose name resolves here, DNS rebinding, is refused\)$/,
        `Host ${host}`,
      );
    }
    // HTTP/1.1 without Host: node's server refuses it before any route (requireHostHeader).
    assert.is((await send(url, 'GET', '/v1/health', {})).status, 400, 'no Host');
    // A rebinding page's POST changes nothing: no PD is created.
    const post = await send(
      url,
      'POST',
      '/v1/pds',
      { host: `evil.example.com:${port}`, 'content-type': 'application/json' },
      '{}',
    );
    assertError(post, 403, /is not this API/, 'POST from a rebinding page');
    assertError(
      await send(url, 'GET', '/v1/nope', { host: 'evil.example.com' }),
      403,
      /is not this API/,
      'unknown route, foreign Host',
    );
    assert.equal(await p.ca.pds(), []);
  } finally {
    await p.close();
  }
});

test('Origin and Sec-Fetch-Site: a request from a web page is 403 and changes nothing', async () => {
  const p = await apiPair();
  try {
    const url = p.apiA.url;
    const port = new URL(url).port;
    const host = `127.0.0.1:${port}`;
    const json = { host, 'content-type': 'application/json' };
    for (const origin of [
      'http://evil.example.com',
      'null',
      `https://127.0.0.1:${port}`,
      `http://127.0.0.1:${Number(port) + 1}`,
      `http://evil.example.com:${port}`,
      'http://localhost',
    ]) {
      const r = await send(url, 'POST', '/v1/pds', { ...json, origin }, '{}');
      assertError(
        r,
        403,
        /^Origin ".*" is not this API: requests from web pages are refused \(send no Origin header, as curl and rdmactl do\)$/,
        `Origin ${origin}`,
      );
      assertError(await send(url, 'GET', '/v1/health', { host, origin }), 403, /^Origin/, `GET with Origin ${origin}`);
    }
    for (const site of ['cross-site', 'same-site']) {
      assertError(
        await send(url, 'POST', '/v1/pds', { ...json, 'sec-fetch-site': site }, '{}'),
        403,
        `Sec-Fetch-Site "${site}": requests from web pages are refused`,
        site,
      );
      // A GET that takes completions from a CQ must not be triggered by an <img> either.
      assertError(
        await send(url, 'GET', '/v1/cqs/1/completions', { host, 'sec-fetch-site': site }),
        403,
        /^Sec-Fetch-Site/,
        `${site} GET`,
      );
    }
    assert.equal(await p.ca.pds(), [], 'nothing was created');
    assert.is(
      (await send(url, 'POST', '/v1/pds', { ...json, origin: `http://127.0.0.1:${port}` }, '{}')).status,
      201,
      'our own origin',
    );
    assert.is(
      (await send(url, 'GET', '/v1/health', { host, 'sec-fetch-site': 'none' })).status,
      200,
      'typed in the address bar',
    );
    assert.is((await send(url, 'GET', '/v1/health', { host, 'sec-fetch-site': 'same-origin' })).status, 200);
  } finally {
    await p.close();
  }
});

test('POST without Content-Type: application/json (a form, a body-less fetch) is 415 and changes nothing; {} or an empty JSON body works', async () => {
  const p = await apiPair();
  try {
    const url = p.apiA.url;
    const host = `127.0.0.1:${new URL(url).port}`;
    const [itf] = await p.ca.interfaces();
    await p.ca.traceAdd('pipe-input', 0);
    for (const path of [
      '/v1/pds',
      '/v1/runtime/clear',
      '/v1/errors/clear',
      '/v1/trace',
      `/v1/interfaces/${itf.name}/capture`,
      '/v1/cqs',
    ]) {
      const none = await send(url, 'POST', path, { host });
      assertError(
        none,
        415,
        new RegExp(
          `^POST /v1/.* needs Content-Type: application/json \\(send \\{\\} when the route takes no body\\): web pages cannot send that without asking, got no Content-Type$`,
        ),
        `${path} without a body`,
      );
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
        const form = await send(url, 'POST', path, { host, 'content-type': type }, '{"depth":1}');
        assertError(form, 415, /needs Content-Type: application\/json .* got Content-Type "/, `${path} as ${type}`);
      }
    }
    assert.equal(await p.ca.pds(), [], 'no PD was created');
    assert.equal(await p.ca.cqs(), [], 'no CQ was created');
    assert.is((await send(url, 'POST', '/v1/pds', { host, 'content-type': 'application/json' }, '{}')).status, 201);
    assert.is(
      (await send(url, 'POST', '/v1/pds', { host, 'content-type': 'application/json', 'content-length': '0' }, ''))
        .status,
      201,
      'empty JSON body',
    );
    assert.is(
      (await send(url, 'POST', '/v1/errors/clear', { host, 'content-type': 'application/json; charset=utf-8' }, '{}'))
        .status,
      204,
    );
    assertError(
      await send(url, 'POST', '/v1/cqs', { host, 'content-type': 'application/json', 'content-length': '0' }, ''),
      400,
      'body is required: send a JSON object with Content-Type: application/json',
      'a route that needs a body',
    );
    // DELETE and GET need no content type (browsers preflight a cross-site DELETE; GETs are checked above).
    const { pd } = await p.ca.createPd();
    assert.is((await send(url, 'DELETE', `/v1/pds/${pd}`, { host })).status, 204);
  } finally {
    await p.close();
  }
});

test('the client and rdmactl send what the API asks for (JSON on every POST)', async () => {
  const p = await apiPair();
  try {
    const client = new ApiClient(p.apiA.url);
    const { pd } = await client.createPd();
    await client.clearRuntime();
    await client.clearErrors();
    const out: string[] = [];
    const io = { out: (s: string) => out.push(s), bytes: () => {} };
    const call = httpCall(p.apiA.url, null);
    await runCommand(['create', 'pd'], call, io, { json: false });
    await runCommand(['clear', 'runtime'], call, io, { json: false });
    await runCommand(['clear', 'errors'], call, io, { json: false });
    await runCommand(['create', 'cq', 'depth', '8'], call, io, { json: false });
    assert.is((await client.pds()).length, 2);
    assert.ok(out.join('').trim().split('\n').length >= 2, out.join(''));
    assert.ok(pd > 0);
  } finally {
    await p.close();
  }
});

test('a non-loopback listen address needs a token: start-up file and startApi say so, naming api.listen and api.token', async () => {
  for (const listen of ['0.0.0.0:7070', '[::]:7070', '10.1.2.3:7070']) {
    const e = (() => {
      try {
        parseConfig(`api:\n  listen: "${listen}"\n`, 'x.yaml');
        return null;
      } catch (x) {
        return x;
      }
    })();
    assert.instance(e, ConfigError, listen);
    assert.match(
      (e as ConfigError).message,
      /^x\.yaml:2:11: api\.listen: ".*" is not a loopback address and api\.token is not set: anyone who can reach it would control the data plane \(expected a loopback address \(127\.0\.0\.1, \[::1\], localhost\), or api\.token set\)$/,
    );
    assert.equal(parseConfig(`api:\n  listen: "${listen}"\n  token: s3cret\n`).api.token, 's3cret');
  }
  for (const listen of ['127.0.0.1:7070', '127.1.2.3:7070', 'localhost:7070', '[::1]:7070'])
    assert.is(parseConfig(`api: {listen: "${listen}"}`).api.token, null, listen);

  const dps = await twoDataplanes();
  try {
    const err = await startApi(dps.a, { host: '0.0.0.0', port: 0 }).then(
      () => null,
      (x: Error) => x,
    );
    assert.ok(err !== null, 'startApi on 0.0.0.0 without a token must refuse');
    assert.match(
      (err as Error).message,
      /^api\.listen 0\.0\.0\.0 is not a loopback address and api\.token is not set: .*set api\.token$/,
    );
    const api = await startApi(dps.a, { host: '0.0.0.0', port: 0, token: 'tok' });
    try {
      const port = new URL(api.url).port;
      const ok = await send(`http://127.0.0.1:${port}`, 'GET', '/v1/health', {
        host: `127.0.0.1:${port}`,
        authorization: 'Bearer tok',
      });
      assert.is(ok.status, 200, ok.text);
      const evil = await send(`http://127.0.0.1:${port}`, 'GET', '/v1/health', {
        host: `evil.example.com:${port}`,
        authorization: 'Bearer tok',
      });
      assert.is(evil.status, 403, 'the Host check holds with a token too');
    } finally {
      await api.close();
    }
  } finally {
    await dps.close();
  }
});

test.run();
