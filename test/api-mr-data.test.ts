/**
 * MR bytes over the API are streamed, and the transfers under way are bounded (issue 26 finding
 * 5): 24 parallel 64 MiB reads once took the daemon from 132 MB to 1.7 GB of RSS. Here readers
 * that stop taking bytes hold their slots (the 17th is told 503), every byte read is checked,
 * and the process's RSS over 24 parallel 64 MiB reads stays far below one copy per read.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { request, type IncomingMessage } from 'node:http';
import { createHash } from 'node:crypto';
import { Dataplane } from '../dataplane/dataplane.ts';
import { startApi } from '../api/server.ts';
import { MR_DATA_STREAMS } from '../api/mr-data.ts';
import { baseConfig, pipeInterface } from './dataplane-helpers.ts';

const MiB = 1024 * 1024;
const SIZE = 64 * MiB;

async function setUp() {
  const dp = await Dataplane.create(
    baseConfig({
      interfaces: [
        pipeInterface('md0', 'md1', '10.94.0.1/24', '02:fe:00:00:94:01'),
        pipeInterface('md1', 'md0', '10.94.0.2/24', '02:fe:00:00:94:02'),
      ],
    }),
  );
  const api = await startApi(dp, { port: 0 });
  const { pd } = await dp.createPd();
  const { mr } = await dp.createMr({ pd, length: SIZE, access: ['local-write'] });
  // A pattern no two MiB share, written through the facade.
  const want = createHash('sha256');
  for (let at = 0; at < SIZE; at += MiB) {
    const chunk = new Uint8Array(MiB);
    for (let k = 0; k < MiB; k += 4) new DataView(chunk.buffer).setUint32(k, (at + k) * 2654435761, true);
    await dp.writeMr(mr, at, chunk);
    want.update(chunk);
  }
  return { dp, api, mr, digest: want.digest('hex') };
}

/** A GET of the whole MR; the response is handed back paused (its bytes are not taken yet). */
function get(url: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false }, (res) => {
      res.pause();
      resolve(res);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Take every byte of a response: its status, length and sha256. */
function drain(res: IncomingMessage): Promise<{ status: number; bytes: number; digest: string; text: string }> {
  const h = createHash('sha256');
  let bytes = 0,
    text = '';
  return new Promise((resolve, reject) => {
    res.on('data', (d: Buffer) => {
      bytes += d.length;
      h.update(d);
      if (text.length < 400) text += d.subarray(0, 400).toString('latin1');
    });
    res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, digest: h.digest('hex'), text }));
    res.on('error', reject);
    res.resume();
  });
}

test('24 parallel reads of a 64 MiB MR: every byte right, RSS grows by far less than one copy per read', async () => {
  const { dp, api, mr, digest } = await setUp();
  const base = process.memoryUsage.rss();
  let peak = base;
  const sample = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 5);
  try {
    const url = `${api.url}/v1/mrs/${mr}/data`;
    let served = 0,
      retried = 0;
    await Promise.all(
      Array.from({ length: 24 }, async () => {
        for (;;) {
          const d = await drain(await get(url));
          if (d.status === 503) {
            retried++;
            await new Promise((r) => setTimeout(r, 20));
            continue;
          }
          assert.equal([d.status, d.bytes, d.digest], [200, SIZE, digest]);
          served++;
          return;
        }
      }),
    );
    peak = Math.max(peak, process.memoryUsage.rss());
    assert.is(served, 24);
    const grew = (peak - base) / MiB;
    console.log(
      `  RSS ${(base / MiB).toFixed(0)} MiB -> peak ${(peak / MiB).toFixed(0)} MiB (+${grew.toFixed(0)}); ${retried} reads told to retry`,
    );
    // One copy per read would be 24 x 64 MiB = 1536 MiB; the streams hold about two chunks each.
    assert.ok(grew < 256, `RSS grew by ${grew.toFixed(0)} MiB over 24 parallel 64 MiB reads`);
  } finally {
    clearInterval(sample);
    await api.close();
    await dp.close();
  }
});

test(`readers that stop taking bytes hold their slots: ${MR_DATA_STREAMS} at once, the next is told 503, all bytes right after`, async () => {
  const { dp, api, mr, digest } = await setUp();
  try {
    const url = `${api.url}/v1/mrs/${mr}/data`;
    const held = [];
    for (let i = 0; i < MR_DATA_STREAMS; i++) held.push(await get(url));
    for (const r of held) assert.is(r.statusCode, 200);
    const extra = await drain(await get(url));
    assert.is(extra.status, 503, extra.text);
    assert.match(extra.text, new RegExp(`${MR_DATA_STREAMS} MR data transfers are under way`));
    const done = await Promise.all(held.map(drain));
    for (const d of done) assert.equal([d.status, d.bytes, d.digest], [200, SIZE, digest]);
    // The slots came back: another read is served.
    const again = await drain(await get(url));
    assert.equal([again.status, again.bytes, again.digest], [200, SIZE, digest]);
  } finally {
    await api.close();
    await dp.close();
  }
});

test('PUT streams the body into the MR: 64 MiB in one request; no Content-Length is 411, a short body 400', async () => {
  const { dp, api, mr } = await setUp();
  try {
    const put = (headers: Record<string, string | number>, body: Buffer | null, end = true) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = request(
          `${api.url}/v1/mrs/${mr}/data?offset=0`,
          { method: 'PUT', agent: false, headers: { 'content-type': 'application/octet-stream', ...headers } },
          (res) => {
            let text = '';
            res.on('data', (d) => (text += d));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
        req.on('error', reject);
        if (body) req.write(body);
        if (end) req.end();
        else setTimeout(() => req.destroy(), 500);
      });
    const big = Buffer.alloc(SIZE, 0x5a);
    const ok = await put({ 'content-length': SIZE }, big);
    assert.is(ok.status, 200, ok.text);
    assert.equal(JSON.parse(ok.text), { written: SIZE });
    const back = await dp.readMr(mr, SIZE - 16, 16);
    assert.equal([...back], new Array(16).fill(0x5a));
    const chunked = await put({ 'transfer-encoding': 'chunked' }, Buffer.from('abc'));
    assert.is(chunked.status, 411, chunked.text);
    assert.match(chunked.text, /needs a Content-Length/);
    const tooBig = await put({ 'content-length': SIZE + 1 }, null);
    assert.is(tooBig.status, 413, tooBig.text);
  } finally {
    await api.close();
    await dp.close();
  }
});

test.run();
