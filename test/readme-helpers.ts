/**
 * What the README tests share: the README's indented blocks, daemons started as it says, and
 * bash to run a block line for line.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as assert from 'uvu/assert';
import { skip } from './harness.ts';
import { withTeardown } from './helpers.ts';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

/** The first line of the README's rdmactl session (A on port 7070, B on 7071). */
export const RDMACTL =
  'A="bin/rdmactl.mjs --api http://127.0.0.1:7070"; B="bin/rdmactl.mjs --api http://127.0.0.1:7071"';

/** Indented (4-space) blocks after a blank line, as Markdown reads them. */
export function blocks(md: string): string[] {
  const out: string[] = [];
  const lines = md.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (!lines[i].startsWith('    ') || (i > 0 && lines[i - 1].trim() !== '')) continue;
    const b: string[] = [];
    while (
      i < lines.length &&
      (lines[i].startsWith('    ') || (lines[i].trim() === '' && lines[i + 1]?.startsWith('    ')))
    )
      b.push(lines[i++].slice(4));
    out.push(b.join('\n'));
  }
  return out;
}

export interface Daemon {
  proc: ChildProcess;
  out: string;
  exit: Promise<number | null>;
  /** Every holder of its output pipes has gone (a daemon npm started included): all it wrote is in `out`. */
  closed: Promise<void>;
}

/** `rdma-graph start ARGS`, or (`shell`) a README line run by bash; resolves once its API listens. */
export function daemon(args: string[], shell?: string): Promise<Daemon> {
  const proc = spawn(
    shell === undefined ? process.execPath : 'bash',
    shell === undefined ? ['--import', 'tsx', 'bin/main.ts', 'start', ...args] : ['-c', shell],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const d: Daemon = {
    proc,
    out: '',
    exit: new Promise((r) => proc.on('exit', (c) => r(c))),
    closed: new Promise((r) => proc.on('close', () => r())),
  };
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`daemon ${args.join(' ')}: no API after 30 s:\n${d.out}`)), 30_000);
    const on = (b: Buffer) => {
      d.out += b;
      if (/API on http/.test(d.out)) {
        clearTimeout(t);
        resolve(d);
      }
    };
    proc.stdout!.on('data', on);
    proc.stderr!.on('data', on);
    proc.on('exit', (c) => reject(new Error(`daemon ${args.join(' ')} exited ${c}:\n${d.out}`)));
  });
}

export function bash(script: string): { code: number | null; out: string } {
  const r = spawnSync('bash', ['-eo', 'pipefail', '-c', script], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 240_000,
    env: { ...process.env, npm_config_loglevel: 'error' },
  });
  return { code: r.status, out: r.stdout + r.stderr };
}

/**
 * A README real-NIC block (test/hw): all lines but the last set the machine up, the last starts
 * the daemon; then the port's link must come up and `show hardware` must match every pattern.
 * The caller has checked that the NIC is there.
 */
export async function runNicBlock(block: string, hardware: RegExp[]): Promise<void> {
  const lines = block.split('\n');
  const start = lines.pop() as string;
  const setup = bash(lines.join('\n'));
  assert.is(setup.code, 0, setup.out);
  const d = await daemon([], start);
  await withTeardown(
    async () => {
      const up = bash(
        'for i in $(seq 100); do node bin/rdmactl.mjs show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1',
      );
      assert.is(up.code, 0, `the port's link came up:\n${up.out}\n${d.out}`);
      const hw = bash('node bin/rdmactl.mjs show hardware');
      for (const re of hardware) assert.match(hw.out, re, hw.out);
    },
    async () => {
      d.proc.kill('SIGTERM');
      assert.is(await d.exit, 0, d.out);
    },
  );
}

export const VERBS = 'node bin/rdma-graph.mjs exec -- ibv_devinfo -v';
/** The first line of the README's probe block (test/verbs-probes.test.ts runs it). */
export const PROBES = 'node bin/rdma-graph.mjs exec -- ls -l /dev/infiniband /sys/class/infiniband';
/** The first line of the README's librdmacm block (rping between the two daemons; checkSessions runs it). */
export const RDMACM =
  'node bin/rdma-graph.mjs exec --config config/examples/peer.yaml -- rping -s -a 10.10.0.2 -C 10 -V & sleep 1';

/** The README's line that starts a DPDK peer (test/dpdk-daemon.test.ts runs it). */
export const DPDK_LINE = 'npm start -- --config config/examples/dpdk-memif.yaml';

/** The README's embedding snippet, from its first line (test/package.test.ts runs it). */
export const EMBED = "import { createDataplane, loadConfig } from 'rdma-graph';";
export const CURL = 'A=http://127.0.0.1:7070/v1; B=http://127.0.0.1:7071/v1';

/**
 * The README's rdmactl, verbs and curl sessions as written, against daemons on 7070 (A) and 7071
 * (B) already started, with what each must print (test/readme.test.ts; test/workers.test.ts with
 * A on worker threads).
 */
export function checkSessions(): void {
  const all = blocks(README);
  // The memif link comes up within a second (the client retries every 250 ms).
  const up = bash(
    'for i in $(seq 50); do node bin/rdmactl.mjs show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1',
  );
  assert.is(up.code, 0, `memif link up:\n${up.out}`);
  const ctl = bash(all.find((x) => x.startsWith(RDMACTL)) as string);
  assert.is(ctl.code, 0, ctl.out);
  assert.match(ctl.out, /wr-id "s1" qpn \d+ send success byte-len 5/);
  assert.match(ctl.out, /wr-id "r1" qpn \d+ recv success byte-len 5/);
  assert.match(ctl.out, /^hello$/m);
  for (const w of ['w1', 'r2', 'f1']) assert.match(ctl.out, new RegExp(`wr-id "${w}" qpn \\d+ \\S+ success`));
  assert.match(ctl.out, /Time [\d.]+, 10\.000000 sec internal node vector rate/, 'show runtime');
  assert.match(ctl.out, /Packet 1\n/, 'show trace has the packets armed before the traffic');
  const curl = bash(all.find((x) => x.startsWith(CURL)) as string);
  assert.is(curl.code, 0, curl.out);
  assert.match(curl.out, /\{"qpn":\d+,"state":"rts"\}\n\{"qpn":\d+,"state":"rts"\}/);
  assert.match(curl.out, /"wrId":"w1".*"status":"success"/);
  assert.match(curl.out, /^hello$/m);
  assert.match(curl.out, /^rdmagraph_qp_tx_packets_total\{.*\} [1-9]\d*$/m, "the QP's counters in /metrics");
  // The verbs block: A's run/verbs-7070.sock and B's run/verbs-7071.sock, the programs unmodified.
  // Last: without the programs the test ends here as skipped (a failure in strict mode).
  if (spawnSync('ibv_devinfo', ['--help']).error) skip('ibverbs-utils is not installed (ibv_devinfo)');
  if (spawnSync('ib_write_bw', ['--help']).error) skip('perftest is not installed (ib_write_bw)');
  const verbs = bash(all.find((x) => x.startsWith(VERBS)) as string);
  assert.is(verbs.code, 0, verbs.out);
  assert.match(verbs.out, /^hca_id:\s+rg_memif0$/m);
  assert.match(verbs.out, /GID\[\s*0\]:\s+::ffff:10\.10\.0\.1, RoCE v2/);
  assert.is(
    verbs.out.match(/1000 iters in [\d.]+ seconds = [\d.]+ usec\/iter/g)?.length,
    2,
    'both pingpong sides report',
  );
  assert.ok(
    (verbs.out.match(/^ 65536\s+2000\s+[\d.]+\s+[\d.]+/gm)?.length ?? 0) === 2,
    `ib_write_bw reports:\n${verbs.out}`,
  );
  // The librdmacm block: Debian's rping on both daemons, its 10 pings verified by rping (-V).
  if (spawnSync('rping', ['-h']).error) skip('rdmacm-utils is not installed (rping)');
  const cm = bash(all.find((x) => x.startsWith(RDMACM)) as string);
  assert.is(cm.code, 0, cm.out);
  assert.is(cm.out.match(/^ping data: rdma-ping-\d+: /gm)?.length, 10, `rping's client prints 10 pings:\n${cm.out}`);
  assert.not.match(cm.out, /rdma-graph verbs:/, 'nothing refused');
}

/**
 * Daemon A (`rdma-graph start ...aArgs`) and B (config/examples/peer.yaml), the README sessions
 * against them (checkSessions), `check(a)` on A's start-up log, `after()` (more checks against
 * the running daemons), then both stopped cleanly.
 * Without jq or curl it skips (a failure under CI=true).
 */
export async function runSessions(
  aArgs: string[],
  check: (a: Daemon) => void = () => {},
  after: () => void = () => {},
): Promise<void> {
  if (spawnSync('jq', ['--version']).status !== 0 || spawnSync('curl', ['--version']).status !== 0) {
    skip('jq and curl are needed (Debian packages jq, curl)');
  }
  const a = await daemon(aArgs);
  const b = await daemon(['--config', 'config/examples/peer.yaml']);
  await withTeardown(
    () => {
      check(a);
      checkSessions();
      after();
    },
    async () => {
      a.proc.kill('SIGTERM');
      b.proc.kill('SIGTERM');
      assert.is(await a.exit, 0, a.out);
      assert.is(await b.exit, 0, b.out);
    },
  );
}
