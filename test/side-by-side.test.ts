/**
 * Daemons side by side in one directory (issue 33.1): the verbs socket is per instance, named
 * after the API port unless a file sets one, so any two start-up files with different API ports
 * start beside each other; `npm run demo` and the worker examples run beside `npm start`.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { STARTUP_CONFIG, loadConfig, parseConfig, verbsSocketPath } from '../config/load.ts';
import type { Config } from '../config/types.ts';
import { test } from './harness.ts';
import { withTeardown } from './helpers.ts';
import { bash, daemon, ROOT, type Daemon } from './readme-helpers.ts';

/** The example that is the default's server under another name (it says so in its comment). */
const REPLACES_DEFAULT = 'lossy.yaml';

function memifServers(c: Config): string[] {
  return c.interfaces.filter((i) => i.memif?.role === 'server').map((i) => i.memif!.socket);
}

test('verbs.socket: set, it is used; unset, run/verbs-PORT.sock; port 0 leaves it to the port the API gets', () => {
  const set = parseConfig('api: { listen: "127.0.0.1:7000" }\nverbs: { socket: /tmp/v.sock }\n', 's.yaml');
  assert.is(verbsSocketPath(set), '/tmp/v.sock');
  const unset = parseConfig('api: { listen: "127.0.0.1:7000" }\n', 'u.yaml');
  assert.is(unset.verbs.socket, null);
  assert.is(verbsSocketPath(unset), 'run/verbs-7000.sock');
  const zero = parseConfig('api: { listen: "127.0.0.1:0" }\nverbs: { socket: ~ }\n', 'z.yaml');
  assert.is(verbsSocketPath(zero), null, 'not known before the API listens');
  assert.is(verbsSocketPath(zero, 41234), 'run/verbs-41234.sock');
  // exec cannot know it: it says so and what to give instead.
  const dir = mkdtempSync(join(tmpdir(), 'rg-side-'));
  try {
    writeFileSync(join(dir, 'zero.yaml'), 'api: { listen: "127.0.0.1:0" }\n');
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'bin/main.ts', 'exec', '--config', join(dir, 'zero.yaml'), '--', 'true'],
      { cwd: ROOT, encoding: 'utf8' },
    );
    assert.is(r.status, 2, r.stderr);
    assert.match(r.stderr, /zero\.yaml sets no verbs\.socket and its API port is 0, .*give --socket PATH/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every shipped example has its own API port, verbs socket and memif server sockets, apart from the default', () => {
  const def = loadConfig(STARTUP_CONFIG);
  const files = readdirSync(join(ROOT, 'config/examples')).filter((f) => f.endsWith('.yaml'));
  assert.ok(files.length >= 10, files.join(' '));
  const seen = new Map<number, string>();
  for (const f of files) {
    const c = loadConfig(join(ROOT, 'config/examples', f));
    if (f === REPLACES_DEFAULT) {
      assert.is(c.api.port, def.api.port, `${f} is the default's server under another name`);
      continue;
    }
    assert.is.not(c.api.port, def.api.port, `${f}: its API port is not the default's`);
    assert.is.not(verbsSocketPath(c), verbsSocketPath(def), `${f}: its verbs socket is not the default's`);
    for (const s of memifServers(c)) assert.not.ok(memifServers(def).includes(s), `${f}: memif server ${s}`);
    // dpdk-memif.yaml and peer.yaml are the same peer through two drivers: one port between them.
    const other = seen.get(c.api.port);
    if (other !== undefined)
      assert.equal([other, f].sort(), ['dpdk-memif.yaml', 'peer.yaml'], `${other} and ${f} share an API port`);
    seen.set(c.api.port, f);
  }
});

/** Stop a daemon with SIGTERM; it must exit 0. */
async function stop(d: Daemon): Promise<void> {
  d.proc.kill('SIGTERM');
  assert.is(await d.exit, 0, d.out);
}

test('npm run demo, workers.yaml and memif-queues.yaml run beside npm start (and beside each other)', async () => {
  const running: Daemon[] = [];
  await withTeardown(
    async () => {
      // `npm start`: the embedded default, its verbs socket run/verbs-7070.sock.
      running.push(await daemon([]));
      assert.match(running[0].out, /verbs socket run\/verbs-7070\.sock/);
      const demo = bash('npm run demo');
      assert.is(demo.code, 0, demo.out);
      assert.match(demo.out, /demo: all checks passed/);
      for (const f of ['workers', 'memif-queues']) {
        const d = await daemon(['--config', `config/examples/${f}.yaml`]);
        running.push(d);
        const port = loadConfig(join(ROOT, `config/examples/${f}.yaml`)).api.port;
        assert.match(d.out, new RegExp(`verbs socket run/verbs-${port}\\.sock`), d.out);
      }
      assert.ok(
        running.every((d) => d.proc.exitCode === null),
        'all three still running',
      );
    },
    async () => {
      for (const d of running.reverse()) await stop(d);
    },
  );
});

test.run();
