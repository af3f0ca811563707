/**
 * api/client.ts against real servers: refusals as ApiError {statusCode, error, message}, a
 * daemon that is not running as ApiConnectionError with a message that says so, a non-API
 * answer, raw bytes and text; and api/ reaching the data plane only through the facade (dataplane/).
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { createServer } from 'node:http';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ApiClient, ApiConnectionError, ApiError, ApiForeignError } from '../api/client.ts';
import { apiError, apiPair } from './api-helpers.ts';

test("refusals are ApiErrors with the API's status, reason and message", async () => {
  const p = await apiPair();
  try {
    const e = await apiError(p.ca.getQp(1));
    assert.equal([e.statusCode, e.error, e.message, e.name], [404, 'Not Found', 'no QP 1', 'ApiError']);
    const v = await apiError(p.ca.createCq({ depth: '5' as unknown as number }));
    assert.equal([v.statusCode, v.error, v.message], [400, 'Bad Request', 'body/depth must be integer']);
    const { pd } = await p.ca.createPd();
    await p.ca.createMr({ pd, length: 8, access: [] });
    const busy = await apiError(p.ca.destroyPd(pd));
    assert.equal([busy.statusCode, busy.error], [409, 'Conflict']);
    // A trailing slash on the URL is fine; bytes and text come back as such.
    const c = new ApiClient(`${p.apiA.url}/`);
    const mr = await c.createMr({ pd, length: 4, access: [] });
    assert.equal(await c.writeMr(mr.mr, 1, new Uint8Array([7, 8, 9])), { written: 3 });
    const bytes = await c.readMr(mr.mr);
    assert.instance(bytes, Uint8Array);
    assert.equal([...bytes], [0, 7, 8, 9]);
    assert.equal([...(await c.readMr(mr.mr, 2, 1))], [8]);
    assert.match(await c.metrics(), /^# HELP rdmagraph_/);
    assert.is((await c.openapi()).openapi, '3.0.3');
    assert.is(await c.clearRuntime(), undefined);
  } finally {
    await p.close();
  }
});

test('no daemon: ApiConnectionError "cannot reach the rdma-graph API at URL: is the daemon running? (ECONNREFUSED)"', async () => {
  // A port that was just free: listen, note it, close.
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  const url = `http://127.0.0.1:${port}`;
  const e = await new ApiClient(url).health().then(
    () => null,
    (x) => x,
  );
  assert.instance(e, ApiConnectionError);
  assert.instance(e, ApiError);
  assert.is(e.statusCode, 0);
  assert.is(e.code, 'ECONNREFUSED');
  assert.is(e.message, `cannot reach the rdma-graph API at ${url}: is the daemon running? (ECONNREFUSED)`);
});

test('something that is not the API answering: ApiForeignError (an ApiError) with the HTTP status and the start of the body, on one line', async () => {
  const srv = createServer((_req, res) => {
    res.writeHead(502, { 'content-type': 'text/html' });
    res.end('<h1>bad gateway</h1>');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
  try {
    const e = await apiError(new ApiClient(url).health());
    assert.instance(e, ApiForeignError);
    assert.equal(
      [e.statusCode, e.error, e.message],
      [
        502,
        'Not rdma-graph',
        `${url} answered GET /v1/health with HTTP 502 Bad Gateway (text/html: <h1>bad gateway</h1>), not as the rdma-graph API does: is --api right?`,
      ],
    );
  } finally {
    await new Promise<void>((r) => srv.close(() => r()));
  }
});

test('api/ reaches the data plane only through the facade and its views in dataplane/ (and graph/format.ts for the VPP renderers)', () => {
  const root = new URL('..', import.meta.url).pathname;
  const files = (dir: string): string[] =>
    readdirSync(join(root, dir)).flatMap((f) => {
      const rel = join(dir, f);
      return statSync(join(root, rel)).isDirectory() ? files(rel) : rel.endsWith('.ts') ? [rel] : [];
    });
  const list = files('api');
  assert.ok(list.length >= 10, `${list.length} api sources`);
  for (const f of list) {
    const text = readFileSync(join(root, f), 'utf8');
    for (const m of text.matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)) {
      const spec = m[1];
      if (!spec.startsWith('.')) continue; // node: built-ins and packages
      const to = join(f, '..', spec);
      assert.ok(
        to.startsWith('api/') ||
          to === 'dataplane/api.ts' ||
          to === 'dataplane/views.ts' ||
          to === 'graph/format.ts' ||
          to === 'package.json',
        `${f} imports "${spec}"`,
      );
    }
  }
});

test.run();
