/**
 * UCX over rdma-graph (issue 28.6): Debian's unmodified ucx_perftest, its UCT layer on rc_verbs,
 * between two data planes joined by memif (both interfaces memif0, so both devices are
 * rg_memif0, as on the README's two daemons: ucx_perftest's server takes the client's
 * parameters, device name included), with no UCX tuning variable. put_bw (zero copy, 64 KiB),
 * put_lat and am_lat (8 B) each finish, and the frames went through the data planes.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDataplane } from '../dataplane/create.ts';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { baseConfig, IP_A, IP_B, MAC_A, MAC_B } from './dataplane-helpers.ts';
import { nextPort, runTool, serverListening } from './verbs-helpers.ts';
import { cpuWith, memifIf } from './workers-helpers.ts';

const ready = () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (libibverbs-dev)');
  if (spawnSync('ucx_perftest', ['-h']).error) skip('ucx_perftest is not installed (Debian package ucx-utils)');
};

/** ucx_perftest's "Final:" row: iterations, overhead p50/avg/overall (us), MB/s avg/overall, msg/s avg/overall. */
function final(out: string): number[] | null {
  const m = /^\s*Final:\s+(.*)$/m.exec(out);
  return m ? m[1].trim().split(/\s+/).map(Number) : null;
}

test('ucx_perftest put_bw, put_lat and am_lat on rc_verbs between two data planes, unmodified and untuned', async () => {
  ready();
  const dir = mkdtempSync(join(tmpdir(), 'verbs-ucx-'));
  const sock = `@rg-ucx-${process.pid}`;
  const a = await createDataplane(
    baseConfig({
      cpu: cpuWith(0),
      interfaces: [memifIf('memif0', sock, 'server', IP_A, MAC_A)],
      neighbors: [{ interface: 'memif0', address: IP_B, mac: MAC_B }],
    }),
  );
  const b = await createDataplane(
    baseConfig({
      cpu: cpuWith(0),
      interfaces: [memifIf('memif0', sock, 'client', IP_B, MAC_B)],
      neighbors: [{ interface: 'memif0', address: IP_A, mac: MAC_A }],
    }),
  );
  const sa = join(dir, 'a.sock'),
    sb = join(dir, 'b.sock');
  const va = a.serveVerbs({ path: sa }),
    vb = b.serveVerbs({ path: sb });
  try {
    for (let i = 0; i < 300 && (await a.interface('memif0')).state !== 'up'; i++)
      await new Promise((r) => setTimeout(r, 20));
    const before = (await a.interface('memif0')).counters.rxPackets;
    const runs: [string, string[]][] = [
      ['put_bw', ['-s', '65536', '-D', 'zcopy', '-n', '300']],
      ['put_lat', ['-s', '8', '-n', '2000']],
      ['am_lat', ['-s', '8', '-n', '2000']],
    ];
    for (const [t, args] of runs) {
      const port = String(nextPort());
      const common = ['-t', t, '-x', 'rc_verbs', '-d', 'rg_memif0:1', '-p', port];
      const server = runTool(sa, ['ucx_perftest', ...common]);
      await serverListening(server, Number(port));
      const client = await runTool(sb, ['ucx_perftest', '127.0.0.1', ...common, ...args]).done;
      const srv = await server.done;
      assert.is(client.code, 0, `${t} client:\n${client.out}\nserver:\n${srv.out}`);
      assert.is(srv.code, 0, `${t} server:\n${srv.out}`);
      const f = final(client.out);
      assert.ok(
        f !== null && f[0] === Number(args[args.indexOf('-n') + 1]),
        `${t}: every iteration ran:\n${client.out}`,
      );
      assert.not.match(
        client.out + srv.out,
        /UCX {2}(ERROR|WARN)|rdma-graph verbs:/,
        `${t}: nothing refused:\n${client.out}\nserver:\n${srv.out}`,
      );
      console.log(`  ${t}: ${client.out.match(/^\s*Final:.*$/m)?.[0].trim()}`);
    }
    const after = (await a.interface('memif0')).counters.rxPackets;
    assert.ok(after - before > 300 * 16, `the traffic went through data plane A (${after - before} frames received)`);
    // What UCX made is released when it exits (memif's rings hold buffers: no pool count here).
    for (const dp of [a, b]) {
      const count = async () =>
        (await dp.qps()).length + (await dp.mrs()).length + (await dp.cqs()).length + (await dp.pds()).length;
      for (let i = 0; i < 250 && (await count()) > 0; i++) await new Promise((r) => setTimeout(r, 20));
      assert.is(await count(), 0, 'every QP, MR, CQ and PD ucx_perftest made is released');
    }
  } finally {
    va.close();
    vb.close();
    await a.close();
    await b.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
