/**
 * The daemon's warm-up (config verbs.warm-up, dataplane/warm-up.ts): `rdma-graph start` sends
 * traffic of its own through its verbs socket before it announces the API, on loopback QPs only
 * (no frame through the interface's driver), leaves no QP behind, no warning in `show errors`,
 * and clears the runtime counters after it; `warm-up: 0` starts without it. The wire warm-up
 * (verbs.wire-warm-up, dataplane/wire-warm-up.ts) compiles what only a link runs, in two data
 * planes of its own; `wire-warm-up: 0` starts without it. Skips (fails under
 * CI=true) without the verbs library or the warm-up program (libibverbs-dev).
 */
import { skip, test } from './harness.ts';
import { watchDaemon, type RunningDaemon } from './helpers.ts';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { VERBS_LIBRARY, WARM_UP_PROGRAM } from '../dataplane/dataplane.ts';
import { verbsProgramEnv } from '../native/addons.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'rdma-graph-wu-'));
process.once('exit', () => rmSync(dir, { recursive: true, force: true }));

/**
 * A daemon with a memif server interface nobody connects to, `verbs` its verbs: section,
 * `address` the interface's (empty: none).
 */
function start(
  name: string,
  verbs: string,
  address = ', address: 10.10.0.1/24',
  nodeFlags: string[] = [],
  more: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): RunningDaemon {
  const cfg = join(dir, `${name}.yaml`);
  writeFileSync(
    cfg,
    [
      'api: { listen: "127.0.0.1:0" }',
      `verbs: { socket: "${join(dir, `${name}.sock`)}"${verbs} }`,
      'interfaces:',
      `  - { name: memif0, driver: memif, memif: { socket: "${join(dir, `${name}.memif`)}", role: server }, mac: "02:fe:00:00:00:01"${address} }`,
      ...more,
      '',
    ].join('\n'),
  );
  return watchDaemon(
    spawn(process.execPath, [...nodeFlags, '--import', 'tsx', join(ROOT, 'bin/main.ts'), 'start', '--config', cfg], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
}

interface ErrorRow {
  count: number;
  node: string;
  reason: string;
  severity: string;
}

async function get<T>(url: string): Promise<T> {
  return (await (await fetch(url)).json()) as T;
}

async function stop(d: RunningDaemon): Promise<void> {
  d.proc.kill('SIGTERM');
  assert.is(await d.exit, 0, d.lines.join('\n'));
}

test('start warms the data path up before it announces the API: loopback only, nothing left, runtime cleared', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(WARM_UP_PROGRAM))
    skip('the verbs library or verbs-warm-up was not built (install libibverbs-dev, npm run build)');
  const d = start('on', '');
  const url = await d.url;
  try {
    const w = d.lines.findIndex((l) => l.startsWith('rdma-graph: warm-up'));
    const api = d.lines.findIndex((l) => l.includes('API on'));
    assert.ok(w >= 0 && w < api, `the warm-up line comes before the API's:\n${d.lines.join('\n')}`);
    const m = /^rdma-graph: warm-up: (\d+) RC rounds \((\d+) operations\), (\d+) UD round trips in (\d+) ms$/.exec(
      d.lines[w],
    );
    assert.ok(m, d.lines[w]);
    const [rounds, ops, ud] = [Number(m[1]), Number(m[2]), Number(m[3])];
    assert.ok(rounds > 0 && ops >= 2 * rounds && ud > 0, d.lines[w]);
    // Through the data plane, as frames to its own address: at least a SEND each way per round.
    const errors = (await get<{ threads: { rows: ErrorRow[] }[] }>(`${url}/v1/errors`)).threads.flatMap((t) => t.rows);
    const local = errors.find((r) => r.node === 'ip4-loopback' && /local address/.test(r.reason));
    assert.ok(local !== undefined && local.count >= 2 * rounds, JSON.stringify(local));
    const bad = errors.filter((r) => r.count > 0 && r.severity !== 'info');
    assert.equal(bad, [], 'no warning or error from the warm-up');
    // Never through the driver: the interface sent nothing (it has no peer either).
    const itf = await get<{ counters: { txPackets: number; txDrops: number } }>(`${url}/v1/interfaces/memif0`);
    assert.is(itf.counters.txPackets + itf.counters.txDrops, 0);
    assert.equal(await get<unknown[]>(`${url}/v1/qps`), [], 'its QPs are gone');
    const rt = await get<{ threads: { rows: { name: string; vectors: number }[] }[] }>(`${url}/v1/runtime`);
    const moved = rt.threads.flatMap((t) => t.rows).filter((r) => r.vectors > 0);
    assert.equal(moved, [], 'the runtime counters start after the warm-up');
  } finally {
    await stop(d);
  }
});

/**
 * The functions of the RDMA path that every verbs program's traffic runs (V8's names in its
 * --trace-opt/--trace-deopt lines).
 */
const DATA_PATH = [
  'trpInput',
  'ddpInput',
  'rdmapInput',
  'qpDispatch',
  'completeSq',
  'ddpOutput',
  'sqAcknowledged',
  'onAck',
  'postSend',
  'postRecv',
  'pollQp',
  'serve',
  'writeCqe',
];

/** V8's events for function `f` in trace lines: 'optimized', 'deopt: REASON' or 'dependent'. */
function events(lines: string[], f: string): string[] {
  const out: string[] = [];
  for (const l of lines) {
    if (l.includes(`<JSFunction ${f} `) && l.startsWith('[completed optimizing')) out.push('optimized');
    else if (l.includes(`<JSFunction ${f} `) && l.startsWith('[bailout'))
      out.push(`deopt: ${/reason: ([^)]*)\)/.exec(l)?.[1] ?? '?'}`);
    else if (l.startsWith('[marking dependent code') && l.includes(`<SharedFunctionInfo ${f}>`)) out.push('dependent');
  }
  return out;
}

test('the warm-up leaves the data path compiled, and a new program does not throw that code away', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(WARM_UP_PROGRAM))
    skip('the verbs library or verbs-warm-up was not built (install libibverbs-dev, npm run build)');
  const socket = join(dir, 'traced.sock');
  const d = start('traced', '', undefined, ['--trace-opt', '--trace-deopt']);
  await d.url;
  try {
    // What V8 did up to the API's announcement: each function's last event is its compilation,
    // not a deoptimisation (the warm-up's first teardown did that to half of these before it
    // ran a short session of its own first).
    const api = d.lines.findIndex((l) => l.includes('API on'));
    const before = d.lines.slice(0, api);
    for (const f of DATA_PATH) {
      const ev = events(before, f);
      assert.is(ev.at(-1), 'optimized', `${f} after the warm-up: ${ev.join(', ') || 'never compiled'}`);
    }
    // A program of its own after that (new PD, CQ and QPs, as each user's): no deoptimisation
    // of the data path that a new object's class or identity causes (a CQ's completion sink was
    // a closure per CQ: "wrong call target" in completeSq at the first program).
    const mark = d.lines.length;
    const job = spawn(WARM_UP_PROGRAM, ['300', '5000'], { env: verbsProgramEnv(socket), stdio: 'pipe' });
    let out = '';
    job.stdout.on('data', (b) => (out += b));
    job.stderr.on('data', (b) => (out += b));
    assert.is(await new Promise((r) => job.on('close', r)), 0, out);
    const during = d.lines.slice(mark);
    for (const f of DATA_PATH) {
      const bad = events(during, f).filter((e) => /wrong call target|wrong map|dependent/.test(e));
      assert.equal(bad, [], `${f} during a new program's traffic`);
    }
  } finally {
    await stop(d);
  }
});

test('start runs the wire warm-up before it announces the API: code only a link runs is compiled; its socket directory is gone; wire-warm-up: 0 runs none', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(WARM_UP_PROGRAM))
    skip('the verbs library or verbs-warm-up was not built (install libibverbs-dev, npm run build)');
  // memif's transmit burst runs only for frames on a link: the loopback warm-up never calls it.
  const wireOnly = ['txBurst'];
  const runs: Record<string, string[]> = {};
  for (const wire of [true, false]) {
    const tmp = mkdtempSync(join(dir, `tmp-${wire}-`));
    const d = start(`wire-${wire}`, wire ? '' : ', wire-warm-up: 0', undefined, ['--trace-opt', '--trace-deopt'], [], {
      ...process.env,
      TMPDIR: tmp,
    });
    await d.url;
    try {
      const api = d.lines.findIndex((l) => l.includes('API on'));
      const before = d.lines.slice(0, api);
      const w = before.filter((l) => l.startsWith('rdma-graph: wire warm-up'));
      runs[`${wire}`] = wireOnly.map((f) => events(before, f).at(-1) ?? 'never compiled');
      if (!wire) {
        assert.equal(w, [], 'wire-warm-up: 0: none');
        continue;
      }
      assert.is(w.length, 1, d.lines.join('\n'));
      const m =
        /^rdma-graph: wire warm-up: (\d+) RC rounds \((\d+) operations\), (\d+) UD round trips in \d+ ms \(\d+ ms in all\)$/.exec(
          w[0],
        );
      assert.ok(m !== null && Number(m[1]) > 0 && Number(m[3]) > 0, w[0]);
      const left = readdirSync(tmp).filter((f) => f.startsWith('rdma-graph-wire-warm-up-'));
      assert.equal(left, [], 'its socket directory is removed');
    } finally {
      await stop(d);
    }
  }
  assert.equal(runs.true, ['optimized'], `with it, ${wireOnly.join(', ')}`);
  assert.equal(runs.false, ['never compiled'], `without it, ${wireOnly.join(', ')}`);
});

test('with cpu.workers, each worker that receives an interface with an address is warmed up, on a device of its own', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(WARM_UP_PROGRAM))
    skip('the verbs library or verbs-warm-up was not built (install libibverbs-dev, npm run build)');
  const d = start(
    'workers',
    ', warm-up: 300',
    undefined,
    [],
    [
      `  - { name: memif1, driver: memif, memif: { socket: "${join(dir, 'workers1.memif')}", role: server }, mac: "02:fe:00:00:00:02", address: 10.11.0.1/24, worker: 1 }`,
      'cpu: { workers: 2 }',
    ],
  );
  const url = await d.url;
  try {
    const lines = d.lines.filter((l) => l.startsWith('rdma-graph: warm-up'));
    assert.is(lines.length, 2, lines.join('\n'));
    assert.ok(
      d.lines.includes('rdma-graph: wire warm-up skipped: cpu.workers (each worker is an isolate of its own)'),
      d.lines.join('\n'),
    );
    for (const [i, device] of ['rg_memif0', 'rg_memif1'].entries())
      assert.match(
        lines[i],
        new RegExp(
          `^rdma-graph: warm-up: 300 RC rounds \\(\\d+ operations\\), \\d+ UD round trips in \\d+ ms on ${device}$`,
        ),
      );
    // Each worker's own ip4-loopback counted its run's frames (a SEND each way per round, at least).
    const threads = (await get<{ threads: { name: string; rows: ErrorRow[] }[] }>(`${url}/v1/errors`)).threads;
    const local = (t: { rows: ErrorRow[] }) =>
      t.rows.find((r) => r.node === 'ip4-loopback' && /local address/.test(r.reason))?.count ?? 0;
    const warmed = threads.filter((t) => local(t) >= 600).map((t) => t.name);
    assert.equal(warmed.length, 2, `both workers: ${JSON.stringify(threads.map((t) => [t.name, local(t)]))}`);
  } finally {
    await stop(d);
  }
});

test('an interface without an address: the warm-up is skipped, saying why, and is no warning', async () => {
  const d = start('noaddr', '', '');
  await d.url;
  try {
    const w = d.lines.filter((l) => /warm-up/.test(l) && l.startsWith('rdma-graph: ') && !/wire warm-up/.test(l));
    assert.equal(w, ['rdma-graph: warm-up skipped: no interface has an IPv4 address (its QPs need one)']);
  } finally {
    await stop(d);
  }
});

test('verbs.warm-up: 0 starts without one', async () => {
  const d = start('off', ', warm-up: 0');
  const url = await d.url;
  try {
    assert.not.ok(
      d.lines.some((l) => l.startsWith('rdma-graph: warm-up')),
      d.lines.join('\n'),
    );
    const errors = (await get<{ threads: { rows: ErrorRow[] }[] }>(`${url}/v1/errors`)).threads.flatMap((t) => t.rows);
    assert.not.ok(errors.some((r) => r.node === 'ip4-loopback' && r.count > 0));
  } finally {
    await stop(d);
  }
});

test.run();
