/**
 * librdmacm programs, unmodified (issue 29): Debian's librdmacm.so runs on the library's answer
 * to its kernel interface (native/verbs-lib/ucma.c: /dev/infiniband/rdma_cm, the ucma commands,
 * the event fd) and the daemon's connection manager (dataplane/verbs-server/ucma.ts,
 * nodes/rdma/cm.ts). rping (rdmacm-utils) in both roles between two data planes, with its own
 * data check (-v prints each ping, -V verifies it), and the hostile cases: a connect to a port
 * nobody listens on, garbage written to rdma_cm.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { DataplaneApi } from '../dataplane/api.ts';
import { Dataplane, VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { nextPort, runTool, type Tool, withTwoDaemons } from './verbs-helpers.ts';

/** What the programs printed but librdmacm's ECE probe (ibv_query_ece/ibv_set_ece: EOPNOTSUPP, which it takes). */
const refusals = (out: string) =>
  out
    .split('\n')
    .filter((l) => /rdma-graph verbs:/.test(l) && !/ibv_(query|set)_ece is not supported/.test(l))
    .join('\n');

const ready = () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (libibverbs-dev)');
  if (spawnSync('rping', ['-h']).error) skip('rping is not installed (Debian package rdmacm-utils)');
};

/** Until data plane `dp` listens for connection requests on `port` (the rping server is ready). */
async function cmListening(dp: DataplaneApi, server: Tool, port: number): Promise<void> {
  const cm = Dataplane.internals(dp).rdma.cm;
  while (!cm.listeners.has(port)) {
    const r = server.exited;
    if (r !== null)
      assert.unreachable(`the server exited before it listened on ${port}: ${r.code} ${r.signal}\n${r.out}`);
    await new Promise((res) => setTimeout(res, 10));
  }
}

test('rping: server on one data plane, client on the other, 10 pings verified', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpB }) => {
    const port = nextPort();
    const server = runTool(b, ['rping', '-s', '-a', IP_B, '-p', String(port), '-C', '10', '-V'], 30_000, 'exec');
    await cmListening(dpB, server, port);
    const client = await runTool(
      a,
      ['rping', '-c', '-a', IP_B, '-p', String(port), '-C', '10', '-v', '-V'],
      30_000,
      'exec',
    ).done;
    const srv = await server.done;
    assert.is(client.code, 0, `client:\n${client.out}\nserver:\n${srv.out}`);
    assert.is(srv.code, 0, `server:\n${srv.out}`);
    const pings = client.out.split('\n').filter((l) => /^ping data: rdma-ping-\d+: /.test(l));
    assert.is(pings.length, 10, `10 pings printed:\n${client.out}`);
    assert.is(refusals(client.out + srv.out), '', 'nothing refused');
  });
});

test('rping the other way, server bound to any address (INADDR_ANY)', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpA }) => {
    const port = nextPort();
    const server = runTool(a, ['rping', '-s', '-a', '0.0.0.0', '-p', String(port), '-C', '5', '-V'], 30_000, 'exec');
    await cmListening(dpA, server, port);
    const client = await runTool(b, ['rping', '-c', '-a', IP_A, '-p', String(port), '-C', '5', '-V'], 30_000, 'exec')
      .done;
    const srv = await server.done;
    assert.is(client.code, 0, `client:\n${client.out}\nserver:\n${srv.out}`);
    assert.is(srv.code, 0, `server:\n${srv.out}`);
  });
});

test.run();
