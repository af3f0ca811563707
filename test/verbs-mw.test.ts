/**
 * Memory windows and SEND with immediate through an unmodified libibverbs program's own calls
 * (native/tools/verbs-mw.c, librdmagraph-verbs.so preloaded), on QPs of one device connected to
 * each other: type 1 windows (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW, ibv_wr_bind_mw); WRITE,
 * READ and fetch-add through a window's rkey; local and remote invalidate; rebind, unbind,
 * deallocation; and what each refuses. The daemon's side is asserted too: its MW list while the
 * program runs, nothing of the program's left after it exits.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { assertChecks, withVerbsSocket } from './verbs-helpers.ts';

const MW = `${NATIVE_BUILD_DIR}verbs-mw`;

const CHECKS = [
  'query_device: max_mw, IBV_DEVICE_MEM_WINDOW and _TYPE_2B',
  'alloc_mw type 1 and type 2, reg_mr with IBV_ACCESS_MW_BIND',
  'two QPs connected (loopback)',
  "ibv_bind_mw type 1: IBV_WC_BIND_MW, the rkey's key byte moves on",
  'RDMA WRITE through a type 1 window',
  'RDMA READ through a type 1 window',
  'fetch-add through a type 1 window',
  'IBV_WR_BIND_MW type 2: IBV_WC_BIND_MW',
  'RDMA WRITE through a type 2 window',
  'ibv_wr_local_inv of a type 2 window: IBV_WC_LOCAL_INV',
  'ibv_wr_bind_mw after a local invalidate',
  'SEND with invalidate of a type 2 window: IBV_WC_WITH_INV with its rkey',
  'IBV_WR_SEND_WITH_IMM: IBV_WC_RECV with the immediate, 3 segments',
  'dereg_mr of an MR with a bound window: EBUSY',
  'WRITE through an invalidated type 2 window: remote access error',
  "WRITE past the window's end: remote access error",
  "WRITE through the MR's own rkey (no remote rights): remote access error",
  'rebind type 1 (read only)',
  'WRITE through the rkey before the rebind: remote access error',
  'WRITE through a read-only window: remote access error',
  'a type 2 window through another QP: remote access error (its own QP: success)',
  'IBV_WR_BIND_MW of a bound type 2 window: IBV_WC_MW_BIND_ERR',
  'bind to an MR without IBV_ACCESS_MW_BIND: IBV_WC_MW_BIND_ERR',
  'unbind type 1 (zero length): READ through it fails',
  'dealloc_mw of a bound type 1 window: READ through its rkey fails',
  'dereg_mr once its windows are gone',
];

test('memory windows (type 1 and 2, bind, invalidate, dealloc) and SEND with immediate, through a verbs program', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(MW))
    skip('the verbs library or verbs-mw was not built (libibverbs-dev)');
  await withVerbsSocket('verbs-mw-', async (socket, dps) => {
    const p = spawn(MW, [], {
      env: { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket, VERBS_MW_PAUSE: '1' },
    });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((res) => p.on('close', (code) => res(code)));
    const kill = setTimeout(() => p.kill('SIGKILL'), 60_000);
    // While it waits (after its first WRITE through a window), the daemon lists its windows,
    // owned by the program, one of them bound.
    for (let i = 0; i < 3000 && !out.includes('\npaused\n') && p.exitCode === null; i++)
      await new Promise((res) => setTimeout(res, 10));
    assert.ok(out.includes('ok RDMA WRITE through a type 1 window\npaused\n'), `the program paused there:\n${out}`);
    const mws = await dps.a.mws();
    p.stdin.end('go\n');
    const code = await exited;
    clearTimeout(kill);
    assertChecks(out, code, CHECKS);
    assert.equal(mws.map((m) => m.type).sort(), [1, 2], JSON.stringify(mws));
    const t1 = mws.find((m) => m.type === 1);
    assert.ok(t1?.bound !== null && t1?.bound.length === 8192, JSON.stringify(mws));
    assert.equal(t1?.bound?.access, ['remote-write', 'remote-read', 'remote-atomic']);
    assert.match(t1?.owner ?? '', /^pid \d+ \(verbs-mw\)$/);
    // Everything the program made is gone with it.
    for (let i = 0; i < 200 && ((await dps.a.mws()).length > 0 || (await dps.a.mrs()).length > 0); i++)
      await new Promise((res) => setTimeout(res, 10));
    assert.equal(await dps.a.mws(), []);
    assert.equal(await dps.a.mrs(), []);
  });
});

test.run();
