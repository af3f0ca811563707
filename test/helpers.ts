/** Shared test helpers. */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BufferPool, poolLayout } from '../graph/buffer-pool.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A command run from the checkout's root to its end: its status, stdout and stderr. */
function run(args: string[]): { code: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** `rdma-graph ARGS` (bin/main.ts through tsx), run from the checkout's root. */
export function cli(args: string[]): { code: number | null; out: string; err: string } {
  return run(['--import', 'tsx', `${ROOT}bin/main.ts`, ...args]);
}

/** `rdmactl ARGS` (bin/rdmactl.mjs), run from the checkout's root. */
export function rdmactl(args: string[]): { code: number | null; out: string; err: string } {
  return run([`${ROOT}bin/rdmactl.mjs`, ...args]);
}

/** A pool over plain JS memory (no native addon). */
export function memPool(count = 1024, dataSize = 2048, headroom = 128): BufferPool {
  const l = poolLayout({ count, dataSize, headroom });
  return new BufferPool({
    buffer: new ArrayBuffer(l.bytes),
    count: l.count,
    stride: l.stride,
    firstOffset: 0,
    headroom: l.headroom,
    dataSize: l.dataSize,
    hugepages: false,
    fd: -1,
    owner: 'test',
  });
}

/** Fill a new buffer with `bytes`; returns its index. */
export function packet(pool: BufferPool, bytes: number[] | Uint8Array): number {
  const b = bytes instanceof Uint8Array ? bytes : Uint8Array.from(bytes);
  const bi = pool.writePacket(b, 0, b.length);
  if (bi === 0xffffffff) throw new Error('pool exhausted');
  return bi;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Runs `body`, then `teardown` whatever happened. The teardown may assert (no buffer leaked, a
 * clean exit status); when the body failed, its failure stays the one reported, with the
 * teardown's own failure appended, instead of being replaced by it (as a `finally` would).
 */
export async function withTeardown<T>(body: () => T | Promise<T>, teardown: () => unknown): Promise<T> {
  let result: T;
  try {
    result = await body();
  } catch (e) {
    try {
      await teardown();
    } catch (t) {
      if (e instanceof Error)
        e.message += `\n(the teardown failed as well: ${t instanceof Error ? t.message : String(t)})`;
    }
    throw e;
  }
  await teardown();
  return result;
}

/** A daemon child (`rdma-graph start ...`): its output lines, its API URL once logged, its exit. */
export interface RunningDaemon {
  proc: ChildProcess;
  lines: string[];
  /** Resolves with the API's URL from its "API on URL/v1" line; rejects if it exits first. */
  url: Promise<string>;
  exit: Promise<number | null>;
}

/** Follow a daemon child's stdout and stderr line by line (see RunningDaemon). */
export function watchDaemon(proc: ChildProcess): RunningDaemon {
  const lines: string[] = [];
  const exit = new Promise<number | null>((r) => proc.on('exit', (c) => r(c)));
  const url = new Promise<string>((resolve, reject) => {
    let buf = '';
    const on = (d: Buffer) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const l = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        lines.push(l);
        const m = /API on (http:\/\/\S+)\/v1/.exec(l);
        if (m) resolve(m[1]);
      }
    };
    proc.stdout!.on('data', on);
    proc.stderr!.on('data', on);
    void exit.then((c) => reject(new Error(`daemon exited (${c}) before the API came up:\n${lines.join('\n')}`)));
  });
  return { proc, lines, url, exit };
}
