/**
 * ping from the data plane (issue 13 item 9): ICMP echo requests originated by the graph
 * (icmp4-ping -> ip4-rewrite), replies matched by icmp4-echo, RTTs measured on the graph's clock;
 * the REST route and `rdmactl ping` printing VPP's lines.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { DataplaneError } from '../dataplane/views.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { runCommand } from '../api/rdmactl.ts';
import { httpCall } from '../api/rdmactl-cli.ts';
import { NoReplyError } from '../api/rdmactl-ping.ts';
import { apiPair } from './api-helpers.ts';
import { IP_A, IP_B, twoDataplanes } from './dataplane-helpers.ts';

const errorCount = async (
  dp: { errors(): Promise<{ rows: { node: string; reason: string; count: number }[] }[]> },
  node: string,
  reason: string,
) =>
  (await dp.errors())
    .flatMap((t) => t.rows)
    .filter((r) => r.node === node && r.reason === reason)
    .reduce((s, r) => s + r.count, 0);

test("A pings B: every request answered by B's icmp4-echo, in order, with bytes, TTL and a round-trip time; the pool is whole after", async () => {
  const p = await twoDataplanes();
  try {
    const before = await errorCount(p.b, 'icmp4-echo', 'ICMP echo replies sent');
    const r = await p.a.ping({ address: IP_B, count: 4, intervalMs: 5, size: 100 });
    assert.is(r.sent, 4);
    assert.is(r.received, 4);
    assert.equal(r.lost, []);
    assert.is(r.stopped, null);
    const seqs = r.replies.map((x) => x.seq);
    assert.equal(
      seqs,
      [...seqs].sort((x, y) => x - y),
    );
    assert.is(new Set(seqs).size, 4);
    for (const x of r.replies) {
      assert.is(x.bytes, 108, '8-byte header + 100 data bytes');
      assert.is(x.ttl, 64);
      assert.is(x.from, IP_B);
      assert.ok(x.timeMs > 0 && x.timeMs < 1000, `rtt ${x.timeMs} ms`);
    }
    assert.is((await errorCount(p.b, 'icmp4-echo', 'ICMP echo replies sent')) - before, 4, 'B answered each');
    assert.ok((await errorCount(p.a, 'icmp4-echo', 'ICMP echo reply received')) >= 4, 'A took the replies in');
    // Two series at once do not take each other's replies.
    const [x, y] = await Promise.all([
      p.a.ping({ address: IP_B, count: 3, intervalMs: 1 }),
      p.a.ping({ address: IP_B, count: 3, intervalMs: 1 }),
    ]);
    assert.is(x.received + y.received, 6);
    assert.not.ok(
      x.replies.some((q) => y.replies.some((w) => w.seq === q.seq)),
      'disjoint sequence numbers',
    );
    // Until the pool is whole (3 s at most): A's link watch may announce its link (a gratuitous
    // ARP, its buffer out until the next pass) just as a fixed wait ends on a slow machine.
    let b = await p.a.buffers();
    for (let t = 0; t < 150 && b.free !== b.count; t++) {
      await new Promise((res) => setTimeout(res, 20));
      b = await p.a.buffers();
    }
    assert.is(b.free, b.count, "every request and reply buffer back in A's pool");
  } finally {
    await p.close();
  }
});

test('nobody answers: each request times out and is listed lost; no route and bad arguments are refused up front', async () => {
  const p = await twoDataplanes();
  try {
    const silent = '10.10.0.99'; // on-link, but nobody answers ARP
    const t0 = Date.now();
    const r = await p.a.ping({ address: silent, count: 2, intervalMs: 10, timeoutMs: 150 });
    assert.is(r.sent, 2);
    assert.is(r.received, 0);
    assert.is(r.lost.length, 2);
    assert.ok(Date.now() - t0 >= 150, 'waited for the timeout');
    const refused = async (req: Parameters<typeof p.a.ping>[0], kind: string, re: RegExp) => {
      const e = await p.a.ping(req).then(
        () => null,
        (x: unknown) => x,
      );
      assert.instance(e, DataplaneError, JSON.stringify(req));
      assert.is((e as DataplaneError).kind, kind);
      assert.match((e as Error).message, re);
    };
    await refused({ address: '192.168.50.1' }, 'not-found', /^ping: no route to 192\.168\.50\.1/);
    await refused({ address: '10.10.0' }, 'invalid', /not a dotted-quad IPv4 address/);
    await refused({ address: IP_B, count: 0 }, 'invalid', /count must be an integer in 1\.\.100, got 0/);
    await refused({ address: IP_B, size: 1473 }, 'invalid', /size must be an integer in 0\.\.1472/);
    await refused({ address: IP_B, count: 100, intervalMs: 1000 }, 'invalid', /take longer than 60000 ms/);
  } finally {
    await p.close();
  }
});

test('a reply with our identifier but a sequence number nobody waits for settles nothing', async () => {
  const p = await twoDataplanes();
  try {
    const { net, pool } = Dataplane.internals(p.a);
    const { INVALID_INDEX } = await import('../graph/index.ts');
    const a = { pool };
    const one = new Uint32Array(1);
    assert.is(a.pool.alloc(one, 0, 1), 1);
    assert.is.not(one[0], INVALID_INDEX);
    const o = a.pool.offset[one[0]] + 20;
    a.pool.offset[one[0]] = o;
    a.pool.u8[o] = 0;
    a.pool.view.setUint16(o + 4, net.pinger.id);
    a.pool.view.setUint16(o + 6, 4242);
    assert.not.ok(net.pinger.reply(one[0], 1), 'nothing waits for seq 4242');
    a.pool.free(one, 0, 1);
    assert.is(net.pinger.pending, 0);
  } finally {
    await p.close();
  }
});

test("rdmactl ping IP repeat N: VPP's lines, then Statistics; POST /v1/ping answers JSON; no reply: exit status from NoReplyError", async () => {
  const p = await apiPair();
  try {
    let out = '';
    const io = { out: (s: string) => (out += s), bytes: () => {} };
    await runCommand(['ping', IP_B, 'repeat', '3', 'interval', '0.01'], httpCall(p.apiA.url, null), io, {
      json: false,
    });
    const lines = out.split('\n');
    for (const l of lines.slice(0, 3))
      assert.match(
        l,
        new RegExp(`^64 bytes from ${IP_B.replace(/\./g, '\\.')}: icmp_seq=\\d+ ttl=64 time=\\d+\\.\\d{4} ms$`),
      );
    assert.equal(lines.slice(3), ['', 'Statistics: 3 sent, 3 received, 0% packet loss', '']);
    out = '';
    const e = await runCommand(
      ['ping', '10.10.0.99', 'count', '2', 'interval', '0.01', 'timeout', '0.1'],
      httpCall(p.apiA.url, null),
      io,
      { json: false },
    ).then(
      () => null,
      (x: unknown) => x,
    );
    assert.instance(e, NoReplyError);
    assert.is(out, '\nStatistics: 2 sent, 0 received, 100% packet loss\n');
    const r = await fetch(`${p.apiB.url}/v1/ping`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ address: IP_A, count: 2, intervalMs: 1 }),
    });
    assert.is(r.status, 200);
    const j = (await r.json()) as { sent: number; received: number; replies: { from: string }[] };
    assert.is(j.received, 2);
    assert.is(j.replies[0].from, IP_A);
    const bad = await fetch(`${p.apiB.url}/v1/ping`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ address: IP_A, count: 101 }),
    });
    assert.is(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /body\/count must be <= 100/);
  } finally {
    await p.close();
  }
});

test.run();
