/**
 * The daemon's warm-up (config `verbs.warm-up`): before `rdma-graph start` announces its API, it
 * runs native/tools/verbs-warm-up.c against its own verbs socket (librdmagraph-verbs.so
 * preloaded, as `rdma-graph exec` runs a program): loopback QPs of the first device trading
 * SENDs, WRITEs, READs, atomics and UD datagrams; with cpu.workers, once for a device of each
 * worker that receives an interface with an address (a worker is a V8 isolate of its own). V8
 * compiles code as it runs it, so a fresh daemon's first thousands of round trips are several
 * times slower than the later ones; after the warm-up, the first job a user runs is not.
 *
 * The traffic goes through every node of the RDMA path and the verbs rings, but never through
 * an interface's driver (ip4-loopback): no frame leaves and the interface counters do not count
 * it. Once the program has exited and its QPs are gone, the runtime counters are cleared
 * (`show runtime`'s clocks per vector are the users' traffic's, not V8's first runs); `show
 * errors` keeps the warm-up's counts (info: frames to a local address, ACKs), as it keeps
 * everything else since start. The log line says what it did.
 *
 * It cannot warm what only a driver runs (af_packet's and memif's frames: device-input,
 * device-output, the drivers' bursts, which V8 compiles only after thousands of frames), nor the
 * branches only real traffic takes. Measured on the 2-core VM: the first MPI job after start
 * moved 1 MiB at 1.5x the rate it did without it; with the program's two sessions and the CQs'
 * sinks as objects (not closures), `ib_send_lat -n 4000` as the first job on two fresh daemons
 * averaged 46 us against 88 before (a warm daemon's: ~20), its first 2000 round trips slowest.
 * A warm-up that cannot run (no library, no interface with an address) is skipped; one that fails
 * is a warning: the daemon works without it.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { NATIVE_BUILD_DIR, VERBS_LIBRARY, verbsProgramEnv } from '../native/addons.ts';
import type { DataplaneApi } from './api.ts';

export const WARM_UP_PROGRAM = `${NATIVE_BUILD_DIR}verbs-warm-up`;
/** The program stops itself after this long, done or not. */
const BUDGET_MS = 2000;
/** Killed if it has not exited by then (a daemon that stopped answering). */
const KILL_MS = 15_000;

export interface WarmUpResult {
  /** 'skipped': the program or the library is not built, or no interface has an address. */
  outcome: 'done' | 'skipped' | 'failed';
  /** The line to log: what it did and how long it took, or why it did not run or failed. */
  message: string;
}

/** How long the program's QPs may take to go after it exits (their FINs, answered). */
const SETTLE_MS = 2000;

/**
 * Run `rounds` rounds of warm-up traffic through `dp`'s verbs socket at `socket`, once per graph
 * thread that receives an interface with an address (each thread is a V8 isolate of its own that
 * compiles its own code: with cpu.workers, a device of each worker's; without, the first device);
 * when done, clear the runtime counters. One result per run, the first failure ending them.
 */
export async function warmUp(dp: DataplaneApi, socket: string, rounds: number): Promise<WarmUpResult[]> {
  // The program's devices are the interfaces with an address: its QPs need one (the GID).
  const addressed = new Set((await dp.interfaces()).filter((i) => i.addresses.length > 0).map((i) => i.name));
  if (addressed.size === 0)
    return [{ outcome: 'skipped', message: 'warm-up skipped: no interface has an IPv4 address (its QPs need one)' }];
  const devices = await targets(dp, addressed);
  const results: WarmUpResult[] = [];
  for (const device of devices) {
    const before = (await dp.qps()).length;
    const r = await run(socket, rounds, device);
    results.push(r);
    if (r.outcome !== 'done') return results;
    for (let t = 0; t < SETTLE_MS && (await dp.qps()).length > before; t += 10) await sleep(10);
  }
  await dp.clearRuntime();
  return results;
}

/**
 * The devices to warm: [undefined] (the program's first device) when one thread runs every
 * interface; with workers, for each worker that receives an interface with an address (its first
 * queue, where that interface's QPs are, or any queue), that interface's device (rg_<name>).
 */
async function targets(dp: DataplaneApi, addressed: Set<string>): Promise<(string | undefined)[]> {
  const threads = (await dp.rxPlacement()).filter((t) => t.nodes.some((n) => n.queues.length > 0));
  if (threads.length <= 1) return [undefined];
  const devices = new Map((await dp.devices()).map((d) => [d.interface, d.name]));
  const out: string[] = [];
  for (const t of threads) {
    const queues = t.nodes.flatMap((n) => n.queues).filter((q) => addressed.has(q.interface));
    const q = queues.find((x) => x.queue === 0) ?? queues[0];
    const device = q === undefined ? undefined : devices.get(q.interface);
    if (device !== undefined && !out.includes(device)) out.push(device);
  }
  return out.length > 0 ? out : [undefined];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function run(socket: string, rounds: number, device: string | undefined): Promise<WarmUpResult> {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(WARM_UP_PROGRAM))
    return Promise.resolve({
      outcome: 'skipped',
      message:
        'warm-up skipped: the verbs library or verbs-warm-up was not built (install libibverbs-dev, npm run build)',
    });
  return new Promise((done) => {
    const args = [String(rounds), String(BUDGET_MS), ...(device === undefined ? [] : [device])];
    const child = spawn(WARM_UP_PROGRAM, args, {
      env: verbsProgramEnv(socket),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const take = (b: Buffer) => {
      if (out.length < 4096) out += b.toString();
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    const timer = setTimeout(() => child.kill('SIGKILL'), KILL_MS);
    child.on('error', (e) => {
      clearTimeout(timer);
      done({ outcome: 'failed', message: `warm-up failed: ${e.message}` });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const last = out.trim().split('\n').pop() ?? '';
      if (code === 0) done({ outcome: 'done', message: last });
      else
        done({
          outcome: 'failed',
          message: `warm-up failed (${signal ?? `exit ${code}`}): ${last || 'no output'}; the daemon runs without it`,
        });
    });
  });
}
