/**
 * What the README tests share: the README's indented blocks, daemons started as it says, and
 * bash to run a block line for line.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as assert from 'uvu/assert';

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
  try {
    const up = bash(
      'for i in $(seq 100); do node bin/rdmactl.mjs show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1',
    );
    assert.is(up.code, 0, `the port's link came up:\n${up.out}\n${d.out}`);
    const hw = bash('node bin/rdmactl.mjs show hardware');
    for (const re of hardware) assert.match(hw.out, re, hw.out);
  } finally {
    d.proc.kill('SIGTERM');
    assert.is(await d.exit, 0, d.out);
  }
}
