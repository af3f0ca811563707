/**
 * Two data planes for UCX and MPI programs (test/verbs-ucx.test.ts, test/verbs-mpi.test.ts): A
 * (10.10.0.1, memif server) and B (10.10.0.2, memif client) in this process, each serving a verbs
 * socket; both interfaces are memif0, so both devices are rg_memif0, as on the README's two
 * daemons. Afterwards every verbs object the programs made must be released.
 */
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { baseConfig, IP_A, IP_B, MAC_A, MAC_B } from './dataplane-helpers.ts';
import { nextPort } from './verbs-helpers.ts';
import { cpuWith, memifIf } from './workers-helpers.ts';

/** Frames received by memif0 of each data plane. */
export const received = async (dps: DataplaneApi[]) =>
  Promise.all(dps.map(async (dp) => (await dp.interface('memif0')).counters.rxPackets));

/** Two data planes A and B joined by memif, each serving a verbs socket; all released after `body`. */
export async function withMemifPair(body: (x: { sa: string; sb: string; dps: DataplaneApi[] }) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-ucx-'));
  const sock = `@rg-ucx-${process.pid}-${nextPort()}`;
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
    await body({ sa, sb, dps: [a, b] });
    // What the programs made is released when they exit (memif's rings hold buffers: no pool count here).
    for (const dp of [a, b]) {
      const count = async () =>
        (await dp.qps()).length + (await dp.mrs()).length + (await dp.cqs()).length + (await dp.pds()).length;
      for (let i = 0; i < 250 && (await count()) > 0; i++) await new Promise((r) => setTimeout(r, 20));
      assert.is(await count(), 0, 'every QP, MR, CQ and PD the programs made is released');
    }
  } finally {
    va.close();
    vb.close();
    await a.close();
    await b.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
