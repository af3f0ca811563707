/**
 * Open MPI jobs over rdma-graph, for test/verbs-mpi.test.ts and bench/mpi.ts: the tools checked,
 * a program of native/tools compiled with mpicc, and mpirun starting each rank under
 * `rdma-graph exec` (MPMD: the ranks of the first app context on daemon A's verbs socket, those
 * of the second on B's) with `--mca pml ucx --mca osc ucx`, UCX restricted to rc_verbs and
 * ud_verbs and Open MPI's BTLs to `self` (no vader shared memory, no TCP): every message between
 * ranks crosses a data plane.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';

const ROOT = join(import.meta.dirname, '..');
const RDMA_GRAPH = join(ROOT, 'bin', 'rdma-graph.mjs');

/** Why an MPI job over rdma-graph cannot run here (the library or a tool missing), or null. */
export function mpiUnavailable(): string | null {
  if (!existsSync(VERBS_LIBRARY)) return 'librdmagraph-verbs.so was not built (libibverbs-dev)';
  for (const [tool, pkg] of [
    ['mpirun', 'openmpi-bin'],
    ['mpicc', 'libopenmpi-dev'],
  ])
    if (spawnSync(tool, ['--version']).error) return `${tool} is not installed (Debian package ${pkg})`;
  return null;
}

/** native/tools/NAME.c compiled with mpicc into `dir`; its path, or an error with mpicc's output. */
export function compileMpi(name: string, dir: string): string {
  const out = join(dir, name);
  const source = join(ROOT, 'native', 'tools', `${name}.c`);
  const cc = spawnSync('mpicc', ['-O2', '-Wall', '-Wextra', '-Werror', '-o', out, source], { encoding: 'utf8' });
  if (cc.status !== 0) throw new Error(`mpicc could not build ${source}:\n${cc.stdout}${cc.stderr}`);
  return out;
}

/** A finished command: its exit code (null when killed) and everything it printed. */
export interface Job {
  code: number | null;
  out: string;
}

/** `cmd` run to its end (SIGTERM after `timeoutMs`), stdout and stderr together. */
export function runJob(cmd: string[], timeoutMs: number): Promise<Job> {
  return new Promise((resolve) => {
    const p = spawn(cmd[0], cmd.slice(1));
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => p.kill('SIGTERM'), timeoutMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

/**
 * UCX 1.13's own UD wireup races, fixed upstream since (README, issue 30): the connection
 * request/reply/ACK consistency assertions of ud_ep.c (a CREQ or CREP whose endpoint ids disagree
 * with the endpoint they reach, an ACK of a PSN not yet sent: openucx/ucx#11107, #8743, #6040,
 * #2453; fixed by #11092 in UCX 1.20 and #11800), and a wireup message handed to an endpoint that
 * is no longer the one it was sent to (a SIGSEGV in UCP's wireup handler, under
 * uct_ud_ep_process_rx). Their odds grow with the wireup's round trips, which on a 2-core machine
 * running 4 busy-polling ranks and 2 data planes take milliseconds: 7 of 250 four-rank jobs over
 * memif, 13 of 125 over two network namespaces, here.
 */
export const UCX_UD_WIREUP_RACE =
  /ud_ep\.c:\d+\s+Assertion|Caught signal 11 [^\n]*\n(?:[^\n]*\n){0,8}[^\n]*uct_ud_ep_process_rx/;

/** How many times runMpiJob runs a job that UCX's UD wireup race keeps ending (at ~1 in 10: 1 in 1000). */
export const MPI_JOB_RUNS = 3;

/**
 * An MPI job (runJob), run again (MPI_JOB_RUNS in all) while UCX's UD wireup race (above) ends
 * it: each such end is printed (`say`), and the last run's result is the job's, whatever it is.
 * Anything else fails at once.
 */
export async function runMpiJob(
  cmd: string[],
  timeoutMs: number,
  say: (line: string) => void = console.log,
): Promise<Job> {
  for (let run = 1; ; run++) {
    const r = await runJob(cmd, timeoutMs);
    if (r.code === 0 || run === MPI_JOB_RUNS || !UCX_UD_WIREUP_RACE.test(r.out)) return r;
    const what = r.out.split('\n').find((l) => /Assertion|Caught signal/.test(l)) ?? '';
    say(`  UCX's UD wireup race (README: UCX 1.13) ended run ${run} of the job: ${what.trim()}; it runs again`);
  }
}

/** mpirun as root needs --allow-run-as-root; 2 cores hold fewer slots than our jobs' ranks. */
export function mpirunPrefix(): string[] {
  return ['mpirun', ...(process.getuid?.() === 0 ? ['--allow-run-as-root'] : []), '--oversubscribe'];
}

/**
 * The mpirun command of `perSide` ranks of `prog` (the program and its arguments) on A's socket
 * `sa`, then `perSide` on B's; `extra`: more mpirun options (global ones: `--mca`). Open MPI's
 * `-x` reaches only the app context it is given in (one given before the first reaches the first
 * alone: B's ranks ran with UCX's defaults until this was found), so each context carries its own.
 */
export function mpirunOverDaemons(
  sa: string,
  sb: string,
  perSide: number,
  prog: string[],
  device: string,
  extra: string[] = [],
): string[] {
  const vars = [
    'UCX_TLS=rc_verbs,ud_verbs',
    `UCX_NET_DEVICES=${device}`,
    // UD wireup resends its connection request after 10 ms by default; round trips on a loaded
    // 2-core machine can take longer, and UCX 1.13 then hits its own race (ud_ep.c's CREP
    // assertion, openucx/ucx#6040, seen on NICs too). The README says so.
    'UCX_UD_TIMER_TICK=100ms',
  ];
  const rank = (sock: string) => [
    ...vars.flatMap((v) => ['-x', v]),
    '-np',
    String(perSide),
    process.execPath,
    RDMA_GRAPH,
    'exec',
    '--socket',
    sock,
    '--',
    ...prog,
  ];
  return [
    ...mpirunPrefix(),
    '--mca',
    'pml',
    'ucx',
    '--mca',
    'osc',
    'ucx',
    '--mca',
    'btl',
    'self',
    ...extra,
    ...rank(sa),
    ':',
    ...rank(sb),
  ];
}
