/**
 * An interface as the daemon's commands show it, on a memif server nobody connects to (so that
 * everything it is given to send is refused by the driver): one definition of each counter
 * (issue 33.2: a transmit drop is counted once, and `show interfaces`, `show hardware`, `show
 * errors` and /metrics give the same figure), and capture timestamps with the clock's real
 * resolution (issue 33.7), not Date.now()'s millisecond.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as assert from 'uvu/assert';
import { PcapReader } from '../drivers/pcap-file.ts';
import { test } from './harness.ts';
import { rdmactl, watchDaemon, withTeardown } from './helpers.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The one number in `text` that `re`'s group captures (the test fails when there is none). */
function figure(text: string, re: RegExp, what: string): number {
  const m = re.exec(text);
  assert.ok(m, `${what} not found in:\n${text}`);
  return Number(m![1]);
}

/**
 * `body(url, ctl, dir)` against a daemon with memif0 (10.10.0.1/24, a memif server nobody
 * connects to, 10.10.0.2 a static neighbour) and its capture.dir in `dir`; stopped after (exit 0).
 */
async function lonelyDaemon(
  body: (url: string, ctl: (...args: string[]) => string, dir: string) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'rg-interface-'));
  const cfg = join(dir, 'a.yaml');
  writeFileSync(
    cfg,
    `api: { listen: "127.0.0.1:0" }\nverbs: { socket: ${join(dir, 'verbs.sock')} }\ncapture: { dir: ${dir} }\n` +
      `interfaces:\n  - { name: memif0, driver: memif, memif: { socket: ${join(dir, 'memif.sock')}, role: server }, address: 10.10.0.1/24 }\n` +
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
      const ctl = (...args: string[]) => {
        const r = rdmactl(['--api', url, ...args]);
        assert.is(r.code, 0, `rdmactl ${args.join(' ')}: ${r.err}`);
        return r.out;
      };
      await body(url, ctl, dir);
    },
    async () => {
      d.proc.kill('SIGTERM');
      assert.is(await d.exit, 0, d.lines.join('\n'));
      rmSync(dir, { recursive: true, force: true });
    },
  );
}

/** `ping 10.10.0.2 repeat N`: N echo requests, every one refused by the unconnected link. */
function ping(url: string, n: number): void {
  const r = rdmactl(['--api', url, 'ping', '10.10.0.2', 'repeat', String(n), 'interval', '0.05']);
  assert.match(r.out, new RegExp(`${n} sent, 0 received`), r.out + r.err);
}

test('transmit drops: show interfaces, show hardware, show errors and /metrics give one figure', async () => {
  await lonelyDaemon(async (url, ctl) => {
    ping(url, 3);
    const interfaces = figure(ctl('show', 'interfaces'), /^memif0 .*drops +(\d+)$/m, 'show interfaces drops');
    const hardware = figure(ctl('show', 'hardware'), /^ +txRefused +(\d+)$/m, 'show hardware txRefused');
    const errors = figure(ctl('show', 'errors'), /^ +(\d+) +memif0-tx +no free tx slots/m, 'show errors');
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const exported = figure(
      metrics,
      /^rdmagraph_interface_tx_drops_total\{interface="memif0"[^}]*\} (\d+)$/m,
      'interface_tx_drops_total',
    );
    const view = (await (await fetch(`${url}/v1/interfaces/memif0`)).json()) as { counters: Record<string, number> };
    assert.equal(
      { interfaces, hardware, errors, metrics: exported, api: view.counters.txDrops + view.counters.rxDrops },
      { interfaces: 3, hardware: 3, errors: 3, metrics: 3, api: 3 },
      'each echo request refused once, and counted once',
    );
    assert.not.ok('txNoSlots' in view.counters, 'no second name for the same drops');
  });
});

test('capture timestamps: the wall clock at transmit, with sub-millisecond resolution', async () => {
  await lonelyDaemon(async (url, ctl, dir) => {
    assert.match(ctl('capture', 'memif0', 'tx', 'echo.pcap', 'count', '8'), /tx into .*echo\.pcap/);
    const before = Date.now();
    ping(url, 8);
    const after = Date.now();
    ctl('capture', 'memif0', 'off');
    const r = PcapReader.open(join(dir, 'echo.pcap'));
    assert.is(r.header.nanosecond, true, 'a nanosecond pcap');
    assert.is(r.count, 8, 'the 8 echo requests');
    const ns = Array.from({ length: r.count }, (_, i) => BigInt(r.tsSec[i]) * 1_000_000_000n + BigInt(r.tsNsec[i]));
    for (let i = 0; i < ns.length; i++) {
      // The wall clock (a second's slack either way: Date.now() and the monotonic clock are two clocks).
      assert.ok(ns[i] >= BigInt(before - 1000) * 1_000_000n && ns[i] <= BigInt(after + 1000) * 1_000_000n, `${ns[i]}`);
      if (i > 0) assert.ok(ns[i] > ns[i - 1], `record ${i} after record ${i - 1}: ${ns[i - 1]}, ${ns[i]}`);
    }
    // Date.now() gave whole milliseconds: every nanosecond field a multiple of 1e6.
    assert.ok(
      ns.some((t) => t % 1_000_000n !== 0n),
      `sub-millisecond digits: ${ns.join(' ')}`,
    );
  });
});

test.run();
