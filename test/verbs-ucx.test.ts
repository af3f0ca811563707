/**
 * UCX over rdma-graph (issues 28.6 and 30.2): Debian's unmodified ucx_perftest between two data
 * planes joined by memif (both interfaces memif0, so both devices are rg_memif0, as on the
 * README's two daemons: ucx_perftest's server takes the client's parameters, device name
 * included). Its UCT layer on rc_verbs (put_bw zero copy 64 KiB, put_lat, am_lat) and on ud_verbs
 * (am_lat, am_bw), with no UCX tuning variable; its UCP layer (what Open MPI uses: tag_lat,
 * tag_bw, ucp_put_bw, ucp_get) with UCX_TLS=rc_verbs,ud_verbs, so that neither shared memory nor
 * TCP can carry it. Each run finishes every iteration with nothing refused or warned about, and
 * the frames went through both data planes.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { received, ucxFinal, ucxPerftest, withMemifPair } from './ucx-helpers.ts';

const ready = () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (libibverbs-dev)');
  if (spawnSync('ucx_perftest', ['-h']).error) skip('ucx_perftest is not installed (Debian package ucx-utils)');
};

/**
 * One ucx_perftest run: the server preloaded against A, the client against B (towards 127.0.0.1,
 * its out-of-band TCP exchange), `env` before both (through env(1), which the preload survives).
 * Every iteration ran, both exit 0, and neither UCX nor the library said anything went wrong.
 */
async function perftest(sa: string, sb: string, name: string, common: string[], args: string[], env: string[] = []) {
  const { client, server: srv } = await ucxPerftest(sa, sb, common, args, env);
  assert.is(client.code, 0, `${name} client:\n${client.out}\nserver:\n${srv.out}`);
  assert.is(srv.code, 0, `${name} server:\n${srv.out}`);
  const f = ucxFinal(client.out);
  const n = Number(args[args.indexOf('-n') + 1]);
  assert.ok(f !== null && f[0] === n, `${name}: every iteration ran (${n}):\n${client.out}`);
  assert.not.match(
    client.out + srv.out,
    /UCX {2}(ERROR|WARN)|rdma-graph verbs:|Fatal/,
    `${name}: nothing refused:\n${client.out}\nserver:\n${srv.out}`,
  );
  console.log(`  ${name}: ${client.out.match(/^\s*Final:.*$/m)?.[0].trim()}`);
}

test('ucx_perftest UCT put_bw, put_lat and am_lat on rc_verbs, am_lat and am_bw on ud_verbs, between two data planes, untuned', async () => {
  ready();
  await withMemifPair(async ({ sa, sb, dps }) => {
    // [transport, test, arguments, frames the server's data plane (A) must have received at least]
    const runs: [string, string, string[], number][] = [
      ['rc_verbs', 'put_bw', ['-s', '65536', '-D', 'zcopy', '-n', '300'], 300 * 16],
      ['rc_verbs', 'put_lat', ['-s', '8', '-n', '2000'], 2000],
      ['rc_verbs', 'am_lat', ['-s', '8', '-n', '2000'], 2000],
      // UD: a datagram each way per iteration (the receive's GRH and sl as mlx5 reports them: UCX
      // finds its own GID there, or drops the datagram).
      ['ud_verbs', 'am_lat', ['-s', '8', '-n', '2000'], 2000],
      ['ud_verbs', 'am_bw', ['-s', '8', '-n', '20000'], 20000 / 16],
    ];
    for (const [tl, t, args, frames] of runs) {
      const before = await received(dps);
      await perftest(sa, sb, `${t} on ${tl}`, ['-t', t, '-x', tl, '-d', 'rg_memif0:1'], args);
      const got = (await received(dps))[0] - before[0];
      assert.ok(got >= frames, `${t} on ${tl}: the server's data plane received ${got} frames (>= ${frames})`);
    }
  });
});

test('ucx_perftest UCP tag_lat, tag_bw, ucp_put_bw and ucp_get with UCX_TLS=rc_verbs,ud_verbs between two data planes', async () => {
  ready();
  await withMemifPair(async ({ sa, sb, dps }) => {
    // UCP wires up over ud_verbs (its auxiliary transport) and moves data on rc_verbs; shared
    // memory, CMA and TCP are not allowed, so every byte crosses the data planes.
    const env = ['UCX_TLS=rc_verbs,ud_verbs', 'UCX_NET_DEVICES=rg_memif0:1'];
    // [test, arguments, the data plane the data arrives at (0: the server's A, 1: the client's B), frames]
    const runs: [string, string[], number, number][] = [
      ['tag_lat', ['-s', '8', '-n', '2000'], 0, 2000],
      ['tag_bw', ['-s', '65536', '-n', '300'], 0, 300 * 16],
      ['ucp_put_bw', ['-s', '65536', '-n', '300'], 0, 300 * 16],
      ['ucp_get', ['-s', '65536', '-n', '300'], 1, 300 * 16], // the client reads: the responses come to B
    ];
    for (const [t, args, at, frames] of runs) {
      const before = await received(dps);
      await perftest(sa, sb, `${t} (UCP)`, ['-t', t], args, env);
      const got = (await received(dps))[at] - before[at];
      assert.ok(got >= frames, `${t}: data plane ${'AB'[at]} received ${got} frames (>= ${frames})`);
    }
  });
});

test('ucx_perftest UCP tag_lat and tag_bw over rc_verbs,ud_verbs with the library sleeping at every idle point (RDMA_GRAPH_SLEEP_US, no spin): UCX polls several CQs, each sleep ends on a completion to any', async () => {
  ready();
  await withMemifPair(async ({ sa, sb, dps }) => {
    // No spin: each 64th empty poll of any of UCX's CQs (a send and a receive CQ per transport)
    // sleeps while all are empty, until the data plane writes a completion to one of them.
    const env = [
      'UCX_TLS=rc_verbs,ud_verbs',
      'UCX_NET_DEVICES=rg_memif0:1',
      'RDMA_GRAPH_SLEEP_US=100',
      'RDMA_GRAPH_SPIN_US=0',
    ];
    const runs: [string, string[], number][] = [
      ['tag_lat', ['-s', '8', '-n', '2000'], 2000],
      ['tag_bw', ['-s', '65536', '-n', '300'], 300 * 16],
    ];
    for (const [t, args, frames] of runs) {
      const before = await received(dps);
      await perftest(sa, sb, `${t} (UCP, sleeping)`, ['-t', t], args, env);
      const got = (await received(dps))[0] - before[0];
      assert.ok(got >= frames, `${t}: data plane A received ${got} frames (>= ${frames})`);
    }
  });
});

test("ucx_perftest UCP with UCX's defaults between two data planes: shared memory for the data, its SysV buffers registered and still shared", async () => {
  ready();
  await withMemifPair(async ({ sa, sb }) => {
    // On one machine UCX moves the data through shared memory and CMA; it allocates its buffers
    // as SysV segments and registers them with rc_verbs too: those must stay the segments (the
    // peer attaches them for RMA), or ucp_put_bw and ucp_get fail ("shmat ... failed").
    const runs: [string, string[]][] = [
      ['tag_lat', ['-s', '8', '-n', '2000']],
      ['tag_bw', ['-s', '65536', '-n', '300']],
      ['ucp_put_bw', ['-s', '65536', '-n', '300']],
      ['ucp_get', ['-s', '65536', '-n', '300']],
    ];
    for (const [t, args] of runs) await perftest(sa, sb, `${t} (UCP, defaults)`, ['-t', t], args);
  });
});

test.run();
