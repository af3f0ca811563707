/**
 * The daemon as a user runs it: `rdma-graph check`, `rdma-graph start` with its log lines, the
 * API answering, rdmactl against it, SIGTERM shutdown (socket removed, exit 0), refusals at
 * start-up (bad file, API port taken), and `npm run demo` end to end.
 */
import { test } from './harness.ts';
import { cli, rdmactl, sleep, watchDaemon, withTeardown, type RunningDaemon } from './helpers.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../config/load.ts';
import { preflight } from '../dataplane/preflight.ts';
import { loadCore } from '../native/addons.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'rdma-graph-daemon-'));

function config(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

const SERVER = (sock: string, listen = '127.0.0.1:0') => `
api: { listen: "${listen}" }
interfaces:
  - { name: memif0, driver: memif, memif: { socket: ${sock}, role: server }, mac: "02:fe:00:00:00:01", address: 10.10.0.1/24 }
`;

type Running = RunningDaemon;

function start(cfg: string): Running {
  return watchDaemon(
    spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bin/main.ts'), 'start', '--config', cfg], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
}

/**
 * Whether `check` of a valid shipped FILE (run from `cwd`) may say "valid": on a shared machine
 * another daemon may hold its API port or verbs socket right now (the README's 7070 and 7071),
 * and then check must refuse it with exactly those reasons (the test above checks that it finds
 * them, and only them); true when nothing is held.
 */
async function heldElsewhere(file: string, r: { code: number | null; err: string }, cwd = ROOT): Promise<boolean> {
  const held = await inDir(cwd, () => preflight(loadConfig(resolve(cwd, file)), file));
  if (held.length === 0) return false;
  assert.is(r.code, 2, r.err);
  for (const l of held) assert.ok(r.err.includes(`rdma-graph: ${l}\n`), `${l}\n${r.err}`);
  assert.ok(r.err.includes(`start would refuse it (${held.length} error`), r.err);
  return true;
}

/** `fn` with the working directory `cwd` (relative paths in a file are resolved against it). */
async function inDir<T>(cwd: string, fn: () => Promise<T>): Promise<T> {
  const was = process.cwd();
  process.chdir(cwd);
  try {
    return await fn();
  } finally {
    process.chdir(was);
  }
}

test('check: the shipped files are valid; a bad file names line, column and key; exit 2', async () => {
  const ok = cli(['check', '--config', 'config/examples/peer.yaml']);
  if (!(await heldElsewhere('config/examples/peer.yaml', ok))) {
    assert.is(ok.code, 0, ok.err);
    assert.match(ok.out, /config\/examples\/peer\.yaml: valid; interfaces: memif0 \(memif\); api 127\.0\.0\.1:7071/);
  }
  const bad = config(
    'bad.yaml',
    'api: { listen: "127.0.0.1:7070" }\ninterfaces:\n  - { name: m0, driver: memif, memif: { socket: x, role: boss }, mtu: 10 }\n',
  );
  const r = cli(['check', '--config', bad]);
  assert.is(r.code, 2);
  assert.match(r.err, new RegExp(`${bad}:3:\\d+: interfaces\\[0\\]\\.memif\\.role: .*boss`));
  assert.match(r.err, new RegExp(`${bad}:3:\\d+: interfaces\\[0\\]\\.mtu: `));
  assert.match(r.err, /2 errors/);
  const missing = cli(['check', '--config', join(dir, 'nope.yaml')]);
  assert.is(missing.code, 2);
  assert.match(missing.err, /cannot read the configuration file/);
  const usage = cli(['start', '--colour']);
  assert.is(usage.code, 2);
  assert.match(usage.err, /unknown option "--colour"/);
});

test('start: logs each interface and the API URL, answers, shuts down on SIGTERM (socket removed, buffers back)', async () => {
  const sock = join(dir, 'run1', 'memif.sock');
  const d = start(config('s1.yaml', SERVER(sock)));
  const url = await d.url;
  assert.ok(
    d.lines.some((l) => l === 'rdma-graph: interface memif0 (memif) mac 02:fe:00:00:00:01 10.10.0.1/24 mtu 1500 down'),
    d.lines.join('\n'),
  );
  assert.ok(existsSync(sock), 'memif socket created (directory made)');
  const health = (await (await fetch(`${url}/v1/health`)).json()) as { status: string };
  assert.is(health.status, 'ok');
  const c = rdmactl(['--api', url, 'create', 'pd']);
  assert.is(c.code, 0, c.err);
  assert.match(c.out, /^\d+\n$/);
  const e = rdmactl(['--api', url, 'destroy', 'pd', '999']);
  assert.is(e.code, 1);
  assert.match(e.err, /^rdmactl: 404 Not Found: no protection domain 999/);
  const show = rdmactl(['--api', url, 'show', 'interfaces']);
  assert.match(show.out, /^memif0 +1 +down +1500\/0\/0\/0/m);
  d.proc.kill('SIGTERM');
  assert.is(await d.exit, 0, d.lines.join('\n'));
  assert.ok(d.lines.includes('rdma-graph: SIGTERM: shutting down'));
  assert.ok(
    d.lines.some((l) => /stopped \(0 QPs closed with FIN\); every buffer back in the pool/.test(l)),
    d.lines.join('\n'),
  );
  assert.not.ok(existsSync(sock), 'memif socket removed');
  const gone = rdmactl(['--api', url, 'show', 'qps']);
  assert.is(gone.code, 3);
  assert.match(gone.err, /cannot reach the rdma-graph API at .*: is the daemon running\? \(ECONNREFUSED\)/);
});

test('a QP destroyed by its user is no error: no qp-error in show events or the log', async () => {
  const d = start(config('destroy.yaml', SERVER(join(dir, 'run4', 'memif.sock'))));
  const url = await d.url;
  const ctl = (...args: string[]) => {
    const r = rdmactl(['--api', url, ...args]);
    assert.is(r.code, 0, `rdmactl ${args.join(' ')}: ${r.err}`);
    return r.out.trim();
  };
  const pd = ctl('create', 'pd'),
    cq = ctl('create', 'cq', 'depth', '16');
  for (const connected of [false, true]) {
    const [qp] = ctl('create', 'qp', 'pd', pd, 'send-cq', cq, 'recv-cq', cq).split(' ');
    if (connected) ctl('connect', qp, '10.10.0.2:20000', 'psn', '1');
    ctl('destroy', 'qp', qp);
  }
  const events = ctl('show', 'events');
  d.proc.kill('SIGTERM');
  assert.is(await d.exit, 0, d.lines.join('\n'));
  assert.not.match(events, /qp-error/, events);
  assert.not.ok(
    d.lines.some((l) => /qp-error|destroyed/.test(l)),
    d.lines.join('\n'),
  );
});

test("workers: the log names only configured interfaces, with their true state (not another worker's view of one)", async () => {
  const run = join(dir, 'run5');
  const w = start(
    config(
      'workers.yaml',
      `api: { listen: "127.0.0.1:0" }\ncpu: { workers: 2 }\ninterfaces:\n` +
        `  - { name: memif0, driver: memif, memif: { socket: ${run}/w0.sock, role: server }, address: 10.20.0.1/24, rx-queues: 2 }\n` +
        `  - { name: memif1, driver: memif, memif: { socket: ${run}/w1.sock, role: server }, address: 10.21.0.1/24 }\n`,
    ),
  );
  let peer: Running | null = null;
  const linkLines = () => w.lines.filter((l) => / is (up|down)$/.test(l));
  await withTeardown(
    async () => {
      const url = await w.url;
      // Nobody connected: both down, and nothing said they were up.
      assert.equal(linkLines(), [], w.lines.join('\n'));
      assert.match(w.lines.join('\n'), /interface memif0 \(memif\) .* down\n.*interface memif1 \(memif\) .* down/);
      // A client on memif0's socket (two queues: worker 1 polls queue 1): memif0 comes up, said
      // once, by its owner; memif1 (owned by worker 1, a stand-in on worker 0) stays down.
      peer = start(
        config(
          'client.yaml',
          `api: { listen: "127.0.0.1:0" }\ninterfaces:\n` +
            `  - { name: c0, driver: memif, memif: { socket: ${run}/w0.sock, role: client }, address: 10.20.0.2/24, rx-queues: 2 }\n`,
        ),
      );
      await peer.url;
      let shown = '';
      for (let i = 0; i < 100 && !/^memif0 +\d+ +up /m.test(shown); i++) {
        await sleep(100);
        shown = rdmactl(['--api', url, 'show', 'interfaces']).out;
      }
      assert.match(shown, /^memif0 +\d+ +up /m);
      assert.match(shown, /^memif1 +\d+ +down /m);
      // Every worker's link watch (every 200 ms) has looked since: worker 1's share of memif0 (its
      // queue 1) would have said so by now.
      await sleep(1000);
      assert.equal(linkLines(), ['rdma-graph: rdma_wk_0: interface memif0 is up'], w.lines.join('\n'));
    },
    async () => {
      if (peer !== null) {
        peer.proc.kill('SIGTERM');
        assert.is(await peer.exit, 0, peer.lines.join('\n'));
      }
      w.proc.kill('SIGTERM');
      assert.is(await w.exit, 0, w.lines.join('\n'));
    },
  );
});

test('the start-up hints are commands that work from where the daemon was started, socket paths absolute', async () => {
  const cwd = mkdtempSync(join(dir, 'elsewhere-'));
  for (const where of [ROOT, cwd]) {
    const d = watchDaemon(
      spawn(
        process.execPath,
        [
          join(ROOT, 'bin/rdma-graph.mjs'),
          'start',
          '--config',
          config('hint.yaml', SERVER(join(dir, 'run-hint', 'memif.sock'))),
        ],
        {
          cwd: where,
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      ),
    );
    await withTeardown(
      async () => {
        await d.url;
        const api = d.lines.find((l) => l.startsWith('rdma-graph: API on '))!;
        const ctl = /; (.+ --api http:\/\/127\.0\.0\.1:\d+ show runtime)$/.exec(api)?.[1];
        assert.ok(ctl, api);
        console.log(`  from ${where === ROOT ? 'the checkout' : 'another directory'}: ${ctl}`);
        if (where === ROOT) assert.match(ctl, /^(rdmactl|node bin\/rdmactl\.mjs) /);
        else assert.match(ctl, /^(rdmactl|node \/\S+\/bin\/rdmactl\.mjs) /);
        const r = spawnSync('sh', ['-c', ctl], { cwd: where, encoding: 'utf8', timeout: 30_000 });
        assert.is(r.status, 0, r.stderr);
        assert.match(r.stdout, /vector rates in /);
        const verbs = d.lines.find((l) => l.startsWith('rdma-graph: verbs socket '))!;
        const exec = /^rdma-graph: verbs socket \S+: (.+ exec --socket (\S+) -- ibv_devinfo)$/.exec(verbs);
        if (exec === null) {
          assert.match(verbs, /librdmagraph-verbs\.so was not built/);
          return;
        }
        assert.ok(exec[2].startsWith('/'), `absolute socket path: ${verbs}`);
        const e = spawnSync('sh', ['-c', exec[1]], { cwd: where, encoding: 'utf8', timeout: 30_000 });
        assert.is(e.status, 0, e.stderr);
        assert.match(e.stdout, /hca_id:\s+rg_memif0/);
      },
      async () => {
        d.proc.kill('SIGTERM');
        assert.is(await d.exit, 0, d.lines.join('\n'));
      },
    );
  }
});

test("show threads: the main thread and each worker, their LWPs the daemon's tasks, workers on the CPUs of corelist-workers", async () => {
  const d = start(
    config(
      'threads.yaml',
      `api: { listen: "127.0.0.1:0" }\ncpu: { workers: 2, corelist-workers: "0-1" }\ninterfaces:\n  - { name: memif0, driver: memif, memif: { socket: ${join(dir, 'run-thr', 'a.sock')}, role: server }, address: 10.20.0.1/24 }\n  - { name: memif1, driver: memif, memif: { socket: ${join(dir, 'run-thr', 'b.sock')}, role: server }, address: 10.21.0.1/24, worker: 1 }\n`,
    ),
  );
  await withTeardown(
    async () => {
      const url = await d.url;
      const r = rdmactl(['--api', url, 'show', 'threads']);
      assert.is(r.code, 0, r.err);
      console.log(r.out);
      const lines = r.out.trimEnd().split('\n');
      assert.match(lines[0], /^ID +Name +Type +LWP +Sched Policy \(Priority\) +lcore +Core +Socket +State$/);
      assert.is(lines.length, 4, r.out);
      const rows = lines.slice(1).map((l) => l.split(/ +/));
      assert.equal(
        rows.map((c) => c[0]),
        ['0', '1', '2'],
      );
      assert.equal(rows[0].slice(1, 2), ['main']);
      assert.equal(
        rows[0].slice(2),
        [String(d.proc.pid), 'other', '(0)', 'n/a', 'n/a', 'n/a'],
        'the main thread is the process',
      );
      for (const k of [1, 2]) {
        assert.equal(rows[k].slice(1, 3), [`rdma_wk_${k - 1}`, 'workers']);
        assert.ok(existsSync(`/proc/${d.proc.pid}/task/${rows[k][3]}`), `LWP ${rows[k][3]} is a task of the daemon`);
        assert.is(rows[k][6], String(k - 1), `worker ${k - 1} on CPU ${k - 1}`);
      }
      assert.is.not(rows[1][3], rows[2][3]);
    },
    async () => {
      d.proc.kill('SIGTERM');
      assert.is(await d.exit, 0, d.lines.join('\n'));
    },
  );
});

test('a memif client whose socket directory does not exist: its first failure logged, then each change of reason, never a repeat', async () => {
  const sockDir = join(dir, 'not-yet', 'deeper');
  const d = start(
    config(
      'client-nodir.yaml',
      `api: { listen: "127.0.0.1:0" }\ninterfaces:\n  - { name: memif0, driver: memif, memif: { socket: ${join(sockDir, 'm.sock')}, role: client }, address: 10.10.0.2/24 }\n`,
    ),
  );
  await withTeardown(
    async () => {
      await d.url;
      const news = () => d.lines.filter((l) => l.includes('interface memif0: cannot connect'));
      for (let i = 0; i < 100 && news().length === 0; i++) await sleep(50);
      await sleep(1500); // six more retries at 250 ms: none logged again
      assert.equal(news(), [
        `rdma-graph: warn: interface memif0: cannot connect to ${join(sockDir, 'm.sock')}: its directory ${sockDir} does not exist; retrying until it can (logged again only if the reason changes)`,
      ]);
      mkdirSync(sockDir, { recursive: true });
      for (let i = 0; i < 100 && news().length === 1; i++) await sleep(50);
      await sleep(1000);
      assert.equal(news().slice(1), [
        `rdma-graph: interface memif0: cannot connect to ${join(sockDir, 'm.sock')}: No such file or directory; retrying until it can (logged again only if the reason changes)`,
      ]);
    },
    async () => {
      d.proc.kill('SIGTERM');
      assert.is(await d.exit, 0, d.lines.join('\n'));
    },
  );
});

test('start refuses an API port in use with a clear message, exit 1, nothing left behind', async () => {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  const sock = join(dir, 'run2', 'memif.sock');
  const r = cli(['start', '--config', config('s2.yaml', SERVER(sock, `127.0.0.1:${port}`))]);
  srv.close();
  assert.is(r.code, 1);
  assert.match(r.err, new RegExp(`cannot start the API: 127\\.0\\.0\\.1:${port} is in use`));
  assert.not.ok(existsSync(sock), 'memif socket removed on the way out');
});

test('check refuses what start would find taken (API port, memif server socket, verbs socket), taking none of it', async () => {
  const core = loadCore();
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  const memif = join(dir, 'run3', 'memif.sock'),
    verbs = join(dir, 'run3', 'verbs.sock'),
    stale = join(dir, 'run3', 'stale.sock');
  mkdirSync(join(dir, 'run3'));
  const held = [core.memifRawListen(memif), core.seqpacketListen(verbs)];
  // A socket file nobody serves (a daemon that died): start replaces it, so check takes it.
  core.closeFd(core.memifRawListen(stale));
  const file = config('taken.yaml', `${SERVER(memif, `127.0.0.1:${port}`)}verbs: { socket: ${verbs} }\n`);
  // In the order start meets them: the interfaces, the API, the verbs socket.
  const lines = [
    `socket ${memif} is in use by another memif server`,
    `cannot start the API: 127.0.0.1:${port} is in use (another rdma-graph? set api.listen)`,
    `verbs.socket ${verbs}: another process serves it (another rdma-graph?)`,
  ];
  const release: (() => Promise<void>)[] = [
    async () => core.closeFd(held.shift()!),
    () => new Promise((r) => srv.close(() => r())),
    async () => core.closeFd(held.shift()!),
  ];
  try {
    const r = cli(['check', '--config', file]);
    assert.is(r.code, 2, r.out + r.err);
    for (const l of lines) assert.ok(r.err.includes(l), `check says: ${l}\n${r.err}`);
    assert.ok(r.err.includes(`taken.yaml:4: interface memif0: socket`), r.err);
    assert.match(r.err, /valid YAML, but start would refuse it \(3 errors\)/);
    // What check said is what start says, one resource after another.
    for (let k = 0; k < lines.length; k++) {
      const s = cli(['start', '--config', file]);
      assert.is(s.code, 1, s.out + s.err);
      assert.ok(s.err.includes(lines[k]), `start says: ${lines[k]}\n${s.err}`);
      await release[k]();
    }
    const free = cli(['check', '--config', config('free.yaml', SERVER(stale, `127.0.0.1:${port}`))]);
    assert.is(free.code, 0, free.err);
    assert.match(free.out, /free\.yaml: valid/);
    assert.ok(existsSync(stale), 'check left the stale file where it was');
  } finally {
    srv.close();
    for (const fd of held) core.closeFd(fd);
  }
});

test('check finds the embedded default from any directory and says what start would: unavailable drivers are errors, no interface a warning', async () => {
  // As `npx rdma-graph check` runs it from an application's directory.
  const away = spawnSync(process.execPath, [join(ROOT, 'bin/rdma-graph.mjs'), 'check'], {
    cwd: tmpdir(),
    encoding: 'utf8',
    timeout: 30_000,
  });
  const startup = join(ROOT, 'config/startup.yaml');
  if (!(await heldElsewhere(startup, { code: away.status, err: away.stderr }, tmpdir()))) {
    assert.is(away.status, 0, away.stderr);
    assert.is(
      away.stdout,
      `rdma-graph: ${startup} (the embedded default): valid; interfaces: memif0 (memif); api 127.0.0.1:7070\n`,
    );
  }
  // dpdk: available when dpdk.node was built; check then calls the example valid (its PCI
  // address is only probed by start).
  const dpdk = cli(['check', '--config', 'config/examples/dpdk.yaml']);
  if (existsSync(join(ROOT, 'native/build/Release/dpdk.node'))) {
    assert.is(dpdk.code, 0, dpdk.err);
    assert.match(dpdk.out, /config\/examples\/dpdk\.yaml: valid; interfaces: eth0 \(dpdk\)/);
  } else {
    assert.is(dpdk.code, 2);
    assert.match(dpdk.err, /interface eth0: DPDK is not available: install libdpdk-dev and rebuild/);
  }
  // ibverbs/mlx5dv: check validates the file and that ibverbs.node is there (the device itself
  // is only looked up by start).
  const verbs = existsSync(join(ROOT, 'native/build/Release/ibverbs.node'));
  for (const [d, itf] of [
    ['ibverbs', 'eth0'],
    ['mlx5dv', 'cx0'],
  ]) {
    const r = cli(['check', '--config', `config/examples/${d}.yaml`]);
    if (verbs) {
      assert.is(r.code, 0, `${d}: ${r.out}${r.err}`);
      assert.match(r.out, new RegExp(`config/examples/${d}\\.yaml: valid; interfaces: ${itf} \\(${d}\\)`));
    } else {
      assert.is(r.code, 2, `${d}: ${r.out}${r.err}`);
      assert.match(
        r.err,
        new RegExp(`interface ${itf}: the ibverbs and mlx5dv drivers are not built: install libibverbs-dev`),
      );
    }
  }
  const empty = cli(['check', '--config', config('empty.yaml', '')]);
  assert.is(empty.code, 0);
  assert.match(
    empty.err,
    /warning: .*empty\.yaml: no interfaces: the data plane would have nothing to receive from or send to/,
  );
  assert.match(empty.out, /empty\.yaml: valid; interfaces: none; api 127\.0\.0\.1:7070 \(1 warning\)/);
});

test('npm start: SIGTERM to the PID the shell got stops the daemon itself (npm passes it on)', async () => {
  const sock = join(dir, 'run-npm', 'memif.sock');
  const cfg = config('npm.yaml', SERVER(sock));
  const npm = spawn('npm', ['start', '--silent', '--', '--config', cfg], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // 'close' comes when every holder of the stdio pipes has gone: npm and the daemon, its child,
  // so every line the daemon wrote on its way out has been read by then.
  const closed = new Promise<void>((r) => npm.on('close', () => r()));
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no API line after 30 s:\n${out}`)), 30_000);
    const on = (d: Buffer) => {
      out += d;
      const m = /API on (http:\/\/\S+)\/v1/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]);
      }
    };
    npm.stdout!.on('data', on);
    npm.stderr!.on('data', on);
  });
  assert.ok(existsSync(sock));
  // The README's words: the PID is npm's, the daemon is its child (npm's shell exec'd it).
  const children = readFileSync(`/proc/${npm.pid}/task/${npm.pid}/children`, 'utf8').trim().split(' ');
  assert.is(children.length, 1, `npm's children: ${children.join(' ')}`);
  const cmdline = readFileSync(`/proc/${children[0]}/cmdline`, 'utf8').split('\0');
  assert.ok(cmdline.includes('bin/main.ts') && cmdline.includes('start'), cmdline.join(' '));
  npm.kill('SIGTERM');
  // The daemon (not only npm) is gone: its pipes closed, its socket removed on the way out, its
  // API refusing.
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = await Promise.race([
    closed.then(() => false),
    new Promise<boolean>((r) => (timer = setTimeout(() => r(true), 20_000))),
  ]);
  clearTimeout(timer);
  assert.not.ok(gaveUp, `npm and the daemon still hold their output 20 s after SIGTERM:\n${out}`);
  assert.not.ok(existsSync(sock), `the daemon removed its socket:\n${out}`);
  assert.match(out, /SIGTERM: shutting down/);
  const gone = rdmactl(['--api', url, 'show', 'qps']);
  assert.is(gone.code, 3, 'nobody answers the API any more');
});

test('start refuses an ibverbs interface whose device is not here, naming the interface and its line', () => {
  const r = cli([
    'start',
    '--config',
    config(
      's3.yaml',
      'interfaces:\n  - { name: d0, driver: ibverbs, ibverbs: { device: mlx5_0 }, address: 10.1.0.1/24 }\n',
    ),
  ]);
  assert.is(r.code, 1);
  assert.match(
    r.err,
    existsSync(join(ROOT, 'native/build/Release/ibverbs.node'))
      ? /interface d0 \(line 2\): no RDMA device "mlx5_0"; ibv_get_device_list (failed: |found )/
      : /interface d0 \(line 2\): the ibverbs and mlx5dv drivers are not built: install libibverbs-dev/,
  );
});

test('npm run demo: two daemons over memif, every step checked, both stop cleanly', () => {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'api/demo.ts')], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.is(r.status, 0, r.stdout.slice(-3000) + r.stderr);
  const oks = r.stdout.split('\n').filter((l) => /^\s+ok: /.test(l));
  assert.is(oks.length, 15, `${oks.length} checks passed:\n${oks.join('\n')}`);
  assert.not.match(r.stdout, /FAILED/);
  assert.match(r.stdout, /demo: all checks passed\n$/);
  for (const p of ['A', 'B']) assert.ok(r.stdout.includes(`ok: ${p} stopped (exit 0)`));
  // A clean run is clean: no counter of error severity in show errors (a full transmit ring
  // holds packets, it drops none), nothing logged as a warning or an error.
  const errors = /\$ rdmactl [^\n]* show errors\n([^]*?)\n\n/.exec(r.stdout)?.[1];
  assert.ok(errors !== undefined && /Count +Node +Reason +Severity/.test(errors), r.stdout.slice(-3000));
  assert.equal(
    errors.split('\n').filter((l) => / error *$/.test(l)),
    [],
    'no error-severity counter',
  );
  const warned = (r.stdout + r.stderr).split('\n').filter((l) => /rdma-graph: (warn|error): /.test(l));
  assert.equal(warned, [], 'nothing logged as a warning or an error');
});

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
