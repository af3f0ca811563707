/**
 * UD QPs through unmodified programs (issue 30.1), each side preloaded with librdmagraph-verbs.so
 * against its own data plane (two data planes joined by a pipe in this process):
 * ibverbs-utils' ibv_ud_pingpong (address handles from the peer's GID, Q_Keys, the GRH in front
 * of every receive) and perftest's ib_send_bw / ib_send_lat with -c UD. Each run must finish
 * with the tool's own checks and report; the datagrams are counted by ud-input on the receiving
 * side; nothing is left behind. Skips (fails under CI=true) without the library or the tools.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { errorCount } from './dataplane-ops-helpers.ts';
import { assertChecks, pair, type Run, runTool, withTwoDaemons } from './verbs-helpers.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';

const have = (tool: string, why: string) => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync(tool, ['--help']).error) skip(`${why} is not installed (${tool})`);
};

const ok = (r: Run, who: string) => {
  assert.is(r.signal, null, `${who}: no signal\n${r.out}`);
  assert.is(r.code, 0, `${who} exits 0\n${r.out}`);
};

/** Datagrams ud-input delivered on this data plane so far. */
const delivered = (dp: DataplaneApi) => errorCount(dp, 'ud-input', /datagrams delivered/);

test('ibv_ud_pingpong -g 0: datagrams both ways, through address handles, each with its GRH; both sides report', async () => {
  have('ibv_ud_pingpong', 'ibverbs-utils');
  await withTwoDaemons(async ({ a, b, dpA, dpB }) => {
    for (const extra of [[], ['-e'], ['-s', '1024', '-n', '300']]) {
      const [da, db] = [await delivered(dpA), await delivered(dpB)];
      const [s, c] = await pair(a, b, ['ibv_ud_pingpong', '-g', '0', ...extra]);
      ok(s, `server ${extra.join(' ')}`);
      ok(c, `client ${extra.join(' ')}`);
      const iters = extra.includes('-n') ? 300 : 1000;
      for (const r of [s, c]) {
        assert.match(r.out, /remote address: .*GID ::ffff:10\.10\.0\.[12]/);
        assert.match(r.out, new RegExp(`${iters} iters in [\\d.]+ seconds = [\\d.]+ usec/iter`));
      }
      // Every ping and every pong went through ud-input (the tools post their receives ahead).
      assert.ok((await delivered(dpA)) - da >= iters, 'A took the pongs');
      assert.ok((await delivered(dpB)) - db >= iters, 'B took the pings');
    }
  });
});

test('ib_send_bw -c UD and ib_send_lat -c UD: perftest over UD QPs, results reported', async () => {
  have('ib_send_bw', 'perftest');
  await withTwoDaemons(async ({ a, b }) => {
    const [s, c] = await pair(a, b, ['ib_send_bw', '-c', 'UD', '-x', '0', '-F', '-s', '1024', '-n', '2000']);
    ok(s, 'ib_send_bw server');
    ok(c, 'ib_send_bw client');
    assert.match(c.out, /^\s*1024\s+2000\s+[\d.]+\s+[\d.]+/m, c.out);
    const [ls, lc] = await pair(a, b, ['ib_send_lat', '-c', 'UD', '-x', '0', '-F', '-s', '64', '-n', '1000']);
    ok(ls, 'ib_send_lat server');
    ok(lc, 'ib_send_lat client');
    assert.match(lc.out, /^\s*64\s+1000\s+[\d.]+/m, lc.out);
  });
});

const UD = `${NATIVE_BUILD_DIR}verbs-ud`;
const UD_CHECKS = [
  'UD QPs created and at RTS (INIT with a Q_Key, RTR, RTS)',
  'ibv_query_qp: the Q_Key and RTS',
  'a datagram through an AH: IBV_WC_RECV with IBV_WC_GRH, src_qp, byte_len 40 + 600',
  "the GRH: 20 zero bytes, then an IPv4 header from our GID's address to it",
  "ibv_create_ah_from_wc / ibv_init_ah_from_wc: the sender's GID",
  'the answer, SEND with immediate: IBV_WC_WITH_IMM and the immediate',
  'ibv_wr_send + ibv_wr_set_ud_addr',
  'a wrong Q_Key: sent, never received',
  'the right Q_Key after it: received by the receive the wrong one left',
  'a UD QP on an SRQ: two datagrams, two SRQ receives in order',
  'a controlled Q_Key (high bit): EPERM unless root, else taken',
  'datagrams posted just before ibv_destroy_qp: all sent, all received',
  'ibv_query_device: max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach',
  'ibv_attach_mcast refuses an RC QP and a unicast GID: EINVAL',
  'a datagram to a group (its GID, QPN 0xFFFFFF): each attached QP takes a copy, the GRH naming the group',
  'ibv_detach_mcast: the detached QP takes no more, the other does; a second detach ENOENT',
  "a datagram over the port's active MTU: IBV_WC_LOC_LEN_ERR",
];

test('a program of our own: AH from a work completion, the GRH, Q_Key violations dropped and counted, the MTU, SRQ, multicast', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(UD))
    skip('the verbs library or verbs-ud was not built (libibverbs-dev)');
  await withTwoDaemons(async ({ b, dpB }) => {
    const before = await errorCount(dpB, 'ud-input', /Q_Key is not the QP's/);
    const r = await runTool(b, [UD]).done;
    assertChecks(r.out, r.code, UD_CHECKS);
    ok(r, 'verbs-ud');
    assert.is((await errorCount(dpB, 'ud-input', /Q_Key is not the QP's/)) - before, 1, 'the wrong Q_Key counted');
  });
});

test.run();
