/**
 * Loopback with unmodified verbs programs (issue 28, point 2): ibv_rc_pingpong and perftest's
 * ib_write_bw, server and client both run with `rdma-graph exec` against ONE daemon's verbs
 * socket and the same device, the client reaching the server over 127.0.0.1 for its TCP
 * exchange as these tools do; the GID each side sends is the interface's address, so each QP
 * is connected to a QP of the same device. On one thread, and with cpu.workers: 2 (the daemon
 * hands each program to a worker in turn: the two QPs are on different workers). Each run must
 * finish with the tool's own checks and report, send nothing through the driver, and leave
 * nothing behind. Skips (fails under CI=true) without the library, ibverbs-utils or perftest.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataplaneApi } from '../dataplane/api.ts';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { IP_A, twoDataplanes } from './dataplane-helpers.ts';
import { nextPort, nothingLeft, type Run, runTool, serverListening } from './verbs-helpers.ts';
import { IP_A as WORKERS_IP_A, memifPair } from './workers-helpers.ts';
import { vectors, wire } from './dataplane-ops-helpers.ts';

/** Skips the test, saying what is missing, without the library or `tool` (from package `why`). */
const have = (tool: string, why: string) => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync(tool, ['--help']).error) skip(`${why} is not installed (${tool})`);
};

/** The server, then the client towards 127.0.0.1, both through `rdma-graph exec` on one socket. */
async function onePair(socket: string, cmd: string[]): Promise<[Run, Run]> {
  const p = String(nextPort());
  const server = runTool(socket, [...cmd, '-p', p], 60_000, 'exec');
  await serverListening(server, Number(p));
  const client = runTool(socket, [...cmd, '-p', p, '127.0.0.1'], 60_000, 'exec');
  return Promise.all([server.done, client.done]);
}

const ok = (r: Run, who: string) => {
  assert.is(r.signal, null, `${who}: no signal\n${r.out}`);
  assert.is(r.code, 0, `${who} exits 0\n${r.out}`);
};

/**
 * One daemon serving a verbs socket, its interface up with a peer on the wire: A of a pipe pair
 * (10.10.0.1), or with `workers` A of a memif pair (10.70.0.1) with that many workers, B on one
 * thread. Its address is the GID both programs see.
 */
async function withOneDaemon(
  workers: number,
  body: (x: { socket: string; dp: DataplaneApi; gid: string }) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'loopback-verbs-'));
  const socket = join(dir, 'verbs.sock');
  const pair = workers === 0 ? await twoDataplanes() : await memifPair({ workersA: workers, workersB: 0, queues: 1 });
  const vs = pair.a.serveVerbs({ path: socket });
  try {
    // A memif interface keeps buffers on its rings: what the programs used must come back.
    const inUse = async () => {
      const b = await pair.a.buffers();
      return b.count - b.free;
    };
    const base = await inUse();
    await body({ socket, dp: pair.a, gid: workers === 0 ? IP_A : WORKERS_IP_A });
    if (workers === 0) await nothingLeft(pair.a);
    else {
      const objects = async () =>
        (await pair.a.qps()).length +
        (await pair.a.mrs()).length +
        (await pair.a.cqs()).length +
        (await pair.a.pds()).length;
      for (let i = 0; i < 250 && ((await objects()) > 0 || (await inUse()) > base); i++)
        await new Promise((r) => setTimeout(r, 20));
      assert.is(await objects(), 0, 'every QP, MR, CQ and PD the programs made is released');
      const left = await inUse();
      assert.ok(left <= base, `no buffer lost: ${left} in use, ${base} before`);
    }
  } finally {
    vs.close();
    await pair.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** perftest's result row for `bytes` (its columns as numbers). */
const row = (out: string, bytes: number): number[] | null => {
  const m = new RegExp(`^\\s*${bytes}\\s+\\d+\\s+[\\d.]+.*$`, 'm').exec(out);
  return m ? m[0].trim().split(/\s+/).map(Number) : null;
};

for (const workers of [0, 2]) {
  const where = workers === 0 ? 'one thread' : `cpu.workers: ${workers}, one program per worker`;

  test(`ibv_rc_pingpong -g 0 -c, server and client on one daemon and device (${where}): both check every buffer and report`, async () => {
    have('ibv_rc_pingpong', 'ibverbs-utils');
    await withOneDaemon(workers, async ({ socket, dp, gid }) => {
      const mapped = new RegExp(`GID ::ffff:${gid.replace(/\./g, '\\.')}\\b`);
      const before = await wire(dp);
      for (const extra of [[], ['-e'], ['-s', '8192', '-n', '200']]) {
        const [s, c] = await onePair(socket, ['ibv_rc_pingpong', '-g', '0', '-c', ...extra]);
        ok(s, `server ${extra.join(' ')}`);
        ok(c, `client ${extra.join(' ')}`);
        for (const r of [s, c]) {
          // Each side's peer is the same device: the same address.
          assert.match(r.out, new RegExp(`local address: .*${mapped.source}`));
          assert.match(r.out, new RegExp(`remote address: .*${mapped.source}`));
          assert.match(r.out, /\d+ bytes in [\d.]+ seconds = [\d.]+ Mbit\/sec/);
          assert.match(r.out, /\d+ iters in [\d.]+ seconds = [\d.]+ usec\/iter/);
        }
      }
      // Only ARP of a link coming up may have moved on the wire meanwhile, never the ping-pong.
      assert.ok((await wire(dp)) - before < 10, 'the ping-pong did not go through the driver');
      const v = await vectors(dp, 'ip4-loopback');
      assert.ok(Object.values(v).reduce((a, b) => a + b, 0) > 1000, `ip4-loopback carried it: ${JSON.stringify(v)}`);
      if (workers > 0)
        assert.ok(
          Object.values(v).every((n) => n > 0),
          `on every worker: ${JSON.stringify(v)}`,
        );
    });
  });

  test(`perftest ib_write_bw 65536 and 1024 B, server and client on one daemon and device (${where}): each finishes with its report`, async () => {
    have('ib_write_bw', 'perftest');
    await withOneDaemon(workers, async ({ socket, gid }) => {
      const octets = gid.split('.').map((o) => o.padStart(2, '0'));
      const gidRe = new RegExp(`GID: 00:00:00:00:00:00:00:00:00:00:255:255:${octets.join(':')}`, 'g');
      for (const bytes of [65536, 1024]) {
        const [s, c] = await onePair(socket, ['ib_write_bw', '-x', '0', '-F', '-n', '200', '-s', String(bytes)]);
        ok(s, `ib_write_bw -s ${bytes} server`);
        ok(c, `ib_write_bw -s ${bytes} client`);
        assert.match(c.out, /Link type\s+: Ethernet/);
        // Local and remote GID: both the interface's address.
        assert.is(c.out.match(gidRe)?.length, 2, c.out);
        const r = row(c.out, bytes);
        assert.ok(r !== null, `a result row for ${bytes} bytes\n${c.out}`);
        assert.is(r[1], 200, 'iterations');
        assert.ok(r[3] > 0, `a bandwidth: ${r}`);
      }
    });
  });
}

test.run();
