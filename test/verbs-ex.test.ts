/**
 * The extended verbs through an unmodified libibverbs program's own calls (native/tools/
 * verbs-ex.c, librdmagraph-verbs.so preloaded): ibv_query_device_ex, ibv_create_cq_ex polled
 * with start/next/end_poll and the read_* ops, ibv_create_qp_ex with every ibv_wr_* opcode the
 * device has and each data setter, a batch, wr_abort, an operation it lacks failing its batch,
 * ibv_rereg_mr; async events (last WQE reached, CQ error, port down, device fatal); two QPs of one
 * device connected to each other (loopback).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { twoDataplanes } from './dataplane-helpers.ts';
import { assertChecks, withVerbsSocket } from './verbs-helpers.ts';

const EX = `${NATIVE_BUILD_DIR}verbs-ex`;

const CHECKS = [
  'query_device_ex',
  'create_cq_ex',
  'create_qp_ex',
  'connect (loopback)',
  'reg_mr (relaxed ordering accepted)',
  'wr_send + wr_set_sge',
  'wr_send + wr_set_sge_list',
  'wr_set_inline_data + _list, two WRs in one batch',
  'wr_rdma_write',
  'wr_rdma_write_imm (read_imm_data)',
  'wr_send_imm (IBV_WC_RECV with IBV_WC_WITH_IMM)',
  'wr_rdma_read',
  'wr_atomic_fetch_add',
  'wr_atomic_cmp_swp',
  'wr_abort',
  'wr_send_tso: EOPNOTSUPP, nothing of the batch posted',
  'a wr_<op> without its data: EINVAL',
  'rereg_mr access',
  'rereg_mr translation (READ through the new rkey)',
  'unsupported: open_xrcd, ODP',
  'wr_send_inv',
  'async: none for QPs a completion error ended',
  "async: IBV_EVENT_QP_LAST_WQE_REACHED for an SRQ's QP in ERROR",
  'async: each event once',
  'async: IBV_EVENT_CQ_ERR for a CQ that overflowed',
  'async: nothing more before the link goes down',
  'async: IBV_EVENT_PORT_ERR when the link goes down',
  'async: IBV_EVENT_DEVICE_FATAL when the daemon goes away',
];

test('extended CQs and QPs: every ibv_wr_* opcode, each data setter, batches, abort, rereg, query_device_ex', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(EX))
    skip('the verbs library or verbs-ex was not built (libibverbs-dev)');
  const dir = mkdtempSync(join(tmpdir(), 'verbs-ex-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  try {
    // The program ends blocked in ibv_get_async_event: the daemon then goes away.
    const p = spawn(EX, [], { env: { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket } });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((res) => p.on('close', (code) => res(code)));
    const kill = setTimeout(() => p.kill('SIGKILL'), 60_000);
    const until = async (line: string) => {
      for (let i = 0; i < 6000 && !out.includes(line) && p.exitCode === null; i++)
        await new Promise((res) => setTimeout(res, 10));
    };
    // Then B goes away: the pipe's link is down on A.
    await until('waiting for the link to go down');
    await dps.b.close();
    await until('waiting for the daemon to go away');
    vs.close();
    const code = await exited;
    clearTimeout(kill);
    const r = { code, out };
    assertChecks(r.out, r.code, CHECKS);
    // What a refused operation says, once, by name.
    assert.match(r.out, /rdma-graph verbs: ibv_wr_send_tso: not supported on this device \(EOPNOTSUPP\)/, r.out);
    assert.match(r.out, /rdma-graph verbs: ibv_create_cq_ex: wc_flags 0x\w+: only byte_len/, r.out);
    for (const what of ['ibv_open_xrcd \\(XRC\\)', 'IBV_ACCESS_ON_DEMAND'])
      assert.match(r.out, new RegExp(`rdma-graph verbs: .*${what}.* is not supported`), r.out);
  } finally {
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("libfabric's providers probe the device without crashing (efa's probe crashed on the plain context): fi_info exits 0, verbs lists its datagram endpoint", async () => {
  if (!existsSync(VERBS_LIBRARY)) skip('the verbs library was not built (libibverbs-dev)');
  if (spawnSync('fi_info', ['--version']).error) skip('fi_info is not installed (Debian package libfabric-bin)');
  await withVerbsSocket('verbs-ex-', async (socket) => {
    const r = await new Promise<{ code: number | null; signal: string | null; out: string }>((resolve) =>
      execFile(
        'fi_info',
        [],
        { timeout: 60_000, env: { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket } },
        (e, out, err) =>
          resolve({
            code: e === null ? 0 : typeof e.code === 'number' ? e.code : null,
            signal: e?.signal ?? null,
            out: out + err,
          }),
      ),
    );
    assert.is(r.signal, null, r.out);
    assert.is(r.code, 0, r.out);
    assert.match(r.out, /^provider: /m, 'it lists providers');
    // libfabric's verbs provider finds the device and offers its datagram endpoint (UD QPs).
    assert.match(r.out, /^provider: verbs\n\s+fabric: .*\n\s+domain: rg_\S+-dgram\n.*\n\s+type: FI_EP_DGRAM$/m, r.out);
  });
});

test.run();
