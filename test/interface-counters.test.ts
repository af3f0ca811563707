/**
 * One definition of each interface counter (issue 33.2): a transmit drop is counted once, and
 * `show interfaces`, `show hardware`, `show errors` and /metrics give the same figure for it.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as assert from 'uvu/assert';
import { test } from './harness.ts';
import { rdmactl, watchDaemon, withTeardown } from './helpers.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The one number in `text` that `re`'s group captures (the test fails when there is none). */
function figure(text: string, re: RegExp, what: string): number {
  const m = re.exec(text);
  assert.ok(m, `${what} not found in:\n${text}`);
  return Number(m![1]);
}

test('transmit drops: show interfaces, show hardware, show errors and /metrics give one figure', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rg-counters-'));
  // A memif server nobody connects to: everything it is given to send is refused by the driver.
  const cfg = join(dir, 'a.yaml');
  writeFileSync(
    cfg,
    `api: { listen: "127.0.0.1:0" }\nverbs: { socket: ${join(dir, 'verbs.sock')} }\ninterfaces:\n` +
      `  - { name: memif0, driver: memif, memif: { socket: ${join(dir, 'memif.sock')}, role: server }, address: 10.10.0.1/24 }\n` +
      `neighbors:\n  - { interface: memif0, address: 10.10.0.2, mac: "02:fe:00:00:00:02" }\n`,
  );
  const d = watchDaemon(
    spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bin/main.ts'), 'start', '--config', cfg], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  await withTeardown(
    async () => {
      const url = await d.url;
      const ping = rdmactl(['--api', url, 'ping', '10.10.0.2', 'repeat', '3', 'interval', '0.05']);
      assert.match(ping.out, /3 sent, 0 received/, ping.out + ping.err);
      const show = (what: string) => {
        const r = rdmactl(['--api', url, 'show', what]);
        assert.is(r.code, 0, r.err);
        return r.out;
      };
      const interfaces = figure(show('interfaces'), /^memif0 .*drops +(\d+)$/m, 'show interfaces drops');
      const hardware = figure(show('hardware'), /^ +txRefused +(\d+)$/m, 'show hardware txRefused');
      const errors = figure(show('errors'), /^ +(\d+) +memif0-tx +no free tx slots/m, 'show errors no free tx slots');
      const metrics = await (await fetch(`${url}/metrics`)).text();
      const exported = figure(
        metrics,
        /^rdmagraph_interface_tx_drops_total\{interface="memif0"[^}]*\} (\d+)$/m,
        'interface_tx_drops_total',
      );
      const view = (await (await fetch(`${url}/v1/interfaces/memif0`)).json()) as { counters: Record<string, number> };
      assert.is(exported, 3, 'each echo request refused once');
      assert.equal(
        { interfaces, hardware, errors, metrics: exported, api: view.counters.txDrops + view.counters.rxDrops },
        { interfaces: 3, hardware: 3, errors: 3, metrics: 3, api: 3 },
      );
      assert.not.ok('txNoSlots' in view.counters, 'no second name for the same drops');
    },
    async () => {
      d.proc.kill('SIGTERM');
      assert.is(await d.exit, 0, d.lines.join('\n'));
      rmSync(dir, { recursive: true, force: true });
    },
  );
});

test.run();
