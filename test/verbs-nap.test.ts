/**
 * A verbs program polling an empty CQ while a bulk transfer is queued sleeps between polls;
 * one waiting for a reply keeps spinning (native/verbs-lib/ring.c, NAP_BYTES): on a host with
 * fewer cores than busy pollers, the daemons get the CPU a spinning perftest would take.
 *
 * Seen as the kernel counts it: a program's voluntary context switches (a nanosleep is one, a
 * sched_yield is not), read by a python3 wrapper from getrusage(RUSAGE_CHILDREN) once the
 * unmodified perftest client it ran has exited. Skips (fails under CI=true) without the
 * library, perftest or python3.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { nextPort, type Run, runTool, serverListening, withTwoDaemons } from './verbs-helpers.ts';

/** Runs its arguments as a child, then prints the child's CPU time and context switches. */
const RUSAGE = [
  'import resource, subprocess, sys',
  'r = subprocess.run(sys.argv[1:])',
  'u = resource.getrusage(resource.RUSAGE_CHILDREN)',
  'print(f"rusage cpu {u.ru_utime + u.ru_stime:.3f} nvcsw {u.ru_nvcsw} nivcsw {u.ru_nivcsw}", flush=True)',
  'sys.exit(r.returncode)',
].join('\n');

const have = (tool: string) => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync(tool, ['--help']).error) skip(`perftest is not installed (${tool})`);
  if (spawnSync('python3', ['-c', 'import resource']).status !== 0) skip('python3 is not installed');
};

/**
 * The server on B, then the client on A under the rusage wrapper (with `env`, NAME=VALUE
 * settings for the client, and `serverEnv` for the server); both runs.
 */
async function wrappedPair(
  a: string,
  b: string,
  cmd: string[],
  env: string[] = [],
  serverEnv: string[] = [],
): Promise<[Run, Run]> {
  const p = String(nextPort());
  const server = runTool(b, [...(serverEnv.length ? ['env', ...serverEnv] : []), ...cmd, '-p', p]);
  await serverListening(server, Number(p));
  const client = runTool(a, ['env', ...env, 'python3', '-c', RUSAGE, ...cmd, '-p', p, '127.0.0.1']);
  return Promise.all([server.done, client.done]);
}

const sleeps = (r: Run): number => {
  const m = /^rusage cpu [\d.]+ nvcsw (\d+) nivcsw \d+$/m.exec(r.out);
  assert.ok(m, `the wrapper reported the client's usage\n${r.out}`);
  return Number(m[1]);
};

const ok = (r: Run, who: string) => {
  assert.is(r.signal, null, `${who}: no signal\n${r.out}`);
  assert.is(r.code, 0, `${who} exits 0\n${r.out}`);
};

test('ib_write_bw 64 KiB (128 WRITEs queued): the client sleeps while it waits; ib_send_lat 64 B: it spins', async () => {
  have('ib_write_bw');
  await withTwoDaemons(async ({ a, b }) => {
    const [s, c] = await wrappedPair(a, b, ['ib_write_bw', '-x', '0', '-F', '-s', '65536', '-D', '2']);
    ok(s, 'ib_write_bw server');
    ok(c, 'ib_write_bw client');
    assert.match(c.out, /^\s*65536\s+\d+\s+[\d.]+\s+[\d.]+/m, 'the client reports its bandwidth');
    // Each nap is a voluntary switch (thousands a second: a poll of an empty CQ every ~60-170 us
    // of a 2-s run); spinning with yields makes ~100-150 in a whole run (setup and exit).
    const bulk = sleeps(c);
    assert.ok(bulk > 1000, `the bandwidth client slept between polls (${bulk} voluntary switches)`);

    const [s2, c2] = await wrappedPair(a, b, ['ib_send_lat', '-x', '0', '-F', '-s', '64', '-n', '3000']);
    ok(s2, 'ib_send_lat server');
    ok(c2, 'ib_send_lat client');
    assert.match(c2.out, /^\s*64\s+3000\s+[\d.]+/m, 'the client reports its latency');
    // One message in flight: no nap, whose timer wake-up would be the latency measured. A nap
    // at every 64th empty poll would be thousands here.
    const pingpong = sleeps(c2);
    assert.ok(pingpong < 1000, `the latency client kept spinning (${pingpong} voluntary switches)`);
  });
});

test('RDMA_GRAPH_NAP_US=0 (and the sleeps on an idle CQ off): the bandwidth client spins; a value not understood is said and the default kept', async () => {
  have('ib_write_bw');
  await withTwoDaemons(async ({ a, b }) => {
    const cmd = ['ib_write_bw', '-x', '0', '-F', '-s', '65536', '-D', '1'];
    // Without naps the client waits long enough between completions (a hundred 64 KiB WRITEs)
    // for the sleeps of a CQ empty for 200 us (test/verbs-cq-sleep.test.ts): those off too.
    const [s, c] = await wrappedPair(a, b, cmd, ['RDMA_GRAPH_NAP_US=0', 'RDMA_GRAPH_SLEEP_US=0']);
    ok(s, 'server');
    ok(c, 'client, RDMA_GRAPH_NAP_US=0');
    const spun = sleeps(c);
    assert.ok(spun < 1000, `with naps off the client yields, it does not sleep (${spun} voluntary switches)`);

    const [s2, c2] = await wrappedPair(a, b, cmd, ['RDMA_GRAPH_NAP_US=fifty']);
    ok(s2, 'server');
    ok(c2, 'client, RDMA_GRAPH_NAP_US=fifty');
    assert.match(
      c2.out,
      /rdma-graph verbs: RDMA_GRAPH_NAP_US="fifty" is not a whole number of microseconds from 0 to 1000000: naps of 50 us/,
    );
    const napped = sleeps(c2);
    assert.ok(napped > 500, `the default naps were kept (${napped} voluntary switches)`);
  });
});

test('RDMA_GRAPH_SLEEP_US=100 on both sides (the opt-in sleep on an idle CQ): unmodified ib_send_lat and ib_write_bw run to their reports', async () => {
  have('ib_send_lat');
  await withTwoDaemons(async ({ a, b }) => {
    const sleep = ['RDMA_GRAPH_SLEEP_US=100'];
    for (const cmd of [
      ['ib_send_lat', '-x', '0', '-F', '-s', '64', '-n', '3000'],
      ['ib_write_bw', '-x', '0', '-F', '-s', '65536', '-D', '1'],
    ]) {
      const [s, c] = await wrappedPair(a, b, cmd, sleep, sleep);
      ok(s, `${cmd[0]} server`);
      ok(c, `${cmd[0]} client`);
      assert.match(c.out, cmd[0] === 'ib_send_lat' ? /^\s*64\s+3000\s+[\d.]+/m : /^\s*65536\s+\d+\s+[\d.]+/m, c.out);
    }
  });
});

test.run();
