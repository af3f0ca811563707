/**
 * Running unmodified verbs programs against data planes in this process (test/verbs-apps.test.ts,
 * test/verbs-rings.test.ts): each program preloaded with librdmagraph-verbs.so.
 */
import * as assert from 'uvu/assert';
import type { DataplaneApi } from '../dataplane/api.ts';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { twoDataplanes } from './dataplane-helpers.ts';

export interface Run {
  code: number | null;
  signal: string | null;
  out: string;
}

export interface Tool {
  done: Promise<Run>;
  kill(): void;
  /** Set once the program has exited (its result, as `done` gives it). */
  readonly exited: Run | null;
}

const RDMA_GRAPH = join(import.meta.dirname, '..', 'bin', 'rdma-graph.mjs');

/**
 * A program preloaded against `socket` (by this process, or with `via: 'exec'` by `rdma-graph
 * exec --socket`, as a user runs it); its exit and everything it printed.
 */
export function runTool(socket: string, cmd: string[], timeoutMs = 60_000, via: 'preload' | 'exec' = 'preload'): Tool {
  const p =
    via === 'exec'
      ? spawn(process.execPath, [RDMA_GRAPH, 'exec', '--socket', socket, '--', ...cmd])
      : spawn(cmd[0], cmd.slice(1), {
          env: { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket },
        });
  // rdma-graph exec passes SIGTERM on to the program (SIGKILL would leave the program behind).
  const kill = () => p.kill(via === 'exec' ? 'SIGTERM' : 'SIGKILL');
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const timer = setTimeout(kill, timeoutMs);
  let exited: Run | null = null;
  return {
    done: new Promise((resolve) =>
      // 'close', not 'exit': everything it printed has been read by then.
      p.on('close', (code, signal) => {
        clearTimeout(timer);
        exited = { code, signal, out };
        resolve(exited);
      }),
    ),
    kill,
    get exited() {
      return exited;
    },
  };
}

/**
 * True when a TCP socket of this network namespace (or of process `pid`'s) listens on `port`
 * (/proc/net/tcp, tcp6).
 */
export function tcpListening(port: number, pid?: number): boolean {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')} `;
  const net = pid === undefined ? '/proc/net' : `/proc/${pid}/net`;
  for (const f of [`${net}/tcp`, `${net}/tcp6`]) {
    let text = '';
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    // "sl local_address rem_address st ...": st 0A is LISTEN.
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 3 && (cols[1] + ' ').endsWith(hex) && cols[3] === '0A') return true;
    }
  }
  return false;
}

/**
 * Until `server` (a tool taking perftest's or ibv_*_pingpong's `-p port`) listens on its TCP
 * port: the readiness to start its client. Fails at once, with its output, if it exits first.
 */
export async function serverListening(server: Tool, port: number): Promise<void> {
  while (!tcpListening(port)) {
    const r = server.exited;
    if (r !== null)
      assert.unreachable(`the server exited before it listened on ${port}: ${r.code} ${r.signal}\n${r.out}`);
    await new Promise((res) => setTimeout(res, 10));
  }
}

/** Two data planes, each serving a verbs socket (A is the client's, B the server's). */
export async function withTwoDaemons(
  body: (x: { a: string; b: string; dpA: DataplaneApi; dpB: DataplaneApi; stopA(): void }) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-apps-'));
  const dps = await twoDataplanes();
  const a = join(dir, 'a.sock'),
    b = join(dir, 'b.sock');
  const va = dps.a.serveVerbs({ path: a }),
    vb = dps.b.serveVerbs({ path: b });
  try {
    await body({ a, b, dpA: dps.a, dpB: dps.b, stopA: () => va.close() });
    for (const dp of [dps.a, dps.b]) await nothingLeft(dp);
  } finally {
    va.close();
    vb.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Data plane A of twoDataplanes serving a verbs socket in a fresh directory (`prefix` names it)
 * for `body`, then all of it closed and removed, whatever `body` did.
 */
export async function withVerbsSocket<T>(
  prefix: string,
  body: (socket: string, dps: Awaited<ReturnType<typeof twoDataplanes>>) => Promise<T>,
): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  try {
    return await body(socket, dps);
  } finally {
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A test program of native/tools that prints "ok NAME" / "FAIL NAME: why" per check and "done N
 * failures": every check in `checks` passed, none failed, and it exited 0.
 */
export function assertChecks(out: string, code: number | null, checks: readonly string[]): void {
  for (const c of checks) assert.ok(out.includes(`ok ${c}\n`), `${c}:\n${out}`);
  assert.not.match(out, /^FAIL/m, out);
  assert.match(out, /^done 0 failures$/m, out);
  assert.is(code, 0, out);
}

/** Every verbs object the programs made is gone, and every buffer is back in the pool. */
export async function nothingLeft(dp: DataplaneApi): Promise<void> {
  const count = async () =>
    (await dp.qps()).length +
    (await dp.mrs()).length +
    (await dp.cqs()).length +
    (await dp.srqs()).length +
    (await dp.pds()).length +
    (await dp.mws()).length;
  const until = Date.now() + 5000;
  while ((await count()) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  assert.is(await count(), 0, 'every QP, MR, MW, CQ, SRQ and PD the programs made is released');
  const until2 = Date.now() + 3000;
  let st = await dp.buffers();
  while (st.count !== st.free && Date.now() < until2) {
    await new Promise((r) => setTimeout(r, 20));
    st = await dp.buffers();
  }
  assert.is(st.count - st.free, 0, 'no buffer lost');
}

let port = 18515 + (process.pid % 1000) * 8;

/** A TCP port for a tool's out-of-band exchange, different for each run. */
export const nextPort = () => port++;

/** The server on B, then the client on A towards 127.0.0.1; both results. */
export async function pair(a: string, b: string, cmd: string[]): Promise<[Run, Run]> {
  const p = String(nextPort());
  const server = runTool(b, [...cmd, '-p', p]);
  await serverListening(server, Number(p));
  const client = runTool(a, [...cmd, '-p', p, '127.0.0.1']);
  return Promise.all([server.done, client.done]);
}
