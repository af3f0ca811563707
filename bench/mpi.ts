/**
 * Open MPI and UCX across two hosts' worth of rdma-graph against the kernel's TCP between the same
 * two network namespaces (issue 30), measured alternately in one run; prints, never asserts.
 *
 * The set-up is test/verbs-mpi.test.ts's (test/ucx-helpers.ts withDaemons 'netns'): two daemons
 * (`rdma-graph start`), each in a network namespace of its own, joined by a veth pair whose ends
 * they open with af_packet (10.30.0.1, 10.30.0.2). The kernel ends of the same veth pair also get
 * 10.31.0.1 and 10.31.0.2 for the kernel's TCP.
 *
 *   MPI over rdma-graph  mpirun in this namespace, one rank under `rdma-graph exec` on each
 *                        daemon's verbs socket, `--mca pml ucx --mca btl self`, UCX_TLS=rc_verbs,ud_verbs
 *                        (test/mpi-helpers.ts mpirunOverDaemons)
 *   MPI over TCP         mpirun in namespace A, its rank there and the other started in namespace
 *                        B through an rsh agent (`ip netns exec`), `--mca pml ob1 --mca btl tcp,self`
 *                        over 10.31.0.0/24
 *   UCX over rdma-graph  ucx_perftest UCP tag_lat 8 B, preloaded against each daemon, UCX_TLS=rc_verbs,ud_verbs
 *   UCX over TCP         the same with UCX_TLS=tcp, server in namespace A, client in B
 *
 * The MPI program is native/tools/mpi-pingpong.c: 8 B and 1 MiB, each for --seconds after a
 * warm-up; latency is half a round trip, bandwidth 2 x size x round trips / time. Both MPI jobs
 * run with mpi_yield_when_idle 1 (YIELD below). Nothing is
 * pinned: the daemons (cpu.poll adaptive: they sleep when idle, so they are up but quiet during
 * the TCP runs) and the two ranks share the machine's cores with whatever else runs on it.
 * Medians over ROUNDS (default 3; MPI_BENCH_ROUNDS) alternating rounds, the order swapped each round,
 * after one untimed job over the fresh daemons (their first seconds are slower: see oneMtu).
 * Once per veth MTU in MPI_BENCH_MTU (default "1500,9000": both veth ends set to it; the daemons'
 * af_packet interfaces take the veth's, the kernel's TCP uses it too): jumbo frames mean 6x fewer
 * segments for us, and about nothing for TCP, which crosses a veth in 64 KiB GSO packets anyway.
 * Goal (issue 30): latency <= 0.5x and bandwidth >= 1.0x of MPI over the kernel's TCP.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ip, netnsUnavailable } from '../test/helpers-netns.ts';
import { compileMpi, type Job, mpirunOverDaemons, mpirunPrefix, mpiUnavailable, runJob } from '../test/mpi-helpers.ts';
import { ucxFinal, ucxPerftest, withDaemons } from '../test/ucx-helpers.ts';
import { nextPort, tcpListening } from '../test/verbs-helpers.ts';

export interface MpiBenchResult {
  text: string;
  json: Record<string, unknown>;
}

/** The kernel's addresses on the veth ends (A's, B's), beside the daemons' 10.30.0.0/24. */
const KERNEL = ['10.31.0.1', '10.31.0.2'];
const SMALL = 8;
const LARGE = 1 << 20;
const UCX_ITERS = 2000;
/**
 * Both MPI jobs yield the core while they wait (Open MPI's own choice on an oversubscribed node:
 * here 2 ranks, 2 daemons and mpirun on the cores). Polling without yielding starves the other
 * rank: MPI over TCP then took ~4 ms for 8 B instead of ~25 us on the 2-core VM.
 */
const YIELD = ['--mca', 'mpi_yield_when_idle', '1'];

/** One ping-pong figure of mpi-pingpong's output: half round trip (us) and MB/s, or null. */
export function parsePingpong(out: string, size: number): { us: number; mbps: number } | null {
  const m = new RegExp(`^pingpong ${size} (\\d+) ([\\d.]+) ([\\d.]+)$`, 'm').exec(out);
  return m && Number(m[1]) > 0 ? { us: Number(m[2]), mbps: Number(m[3]) } : null;
}

const median = (xs: number[]) => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** What keeps the bench from running here, or null. */
function unavailable(): string | null {
  const why = mpiUnavailable() ?? netnsUnavailable();
  if (why !== null) return why;
  if (spawnSync('ucx_perftest', ['-h']).error) return 'ucx_perftest is not installed (Debian package ucx-utils)';
  return null;
}

/** An rsh agent for mpirun: "host command..." runs the command in the namespace holding that address. */
function writeAgent(dir: string, ns: string[]): string {
  const agent = path.join(dir, 'netns-agent.sh');
  writeFileSync(
    agent,
    [
      '#!/bin/sh',
      'host=$1; shift',
      'case $host in',
      ...KERNEL.map((a, i) => `  ${a}) ns=${ns[i]} ;;`),
      '  *) echo "netns-agent: unknown host $host" >&2; exit 1 ;;',
      'esac',
      'exec ip netns exec "$ns" sh -c "$*"',
      '',
    ].join('\n'),
  );
  chmodSync(agent, 0o755);
  return agent;
}

/** mpirun over the kernel's TCP: its rank in namespace A and the other in B. */
function mpirunTcp(ns: string[], agent: string, prog: string[]): string[] {
  return [
    'ip',
    'netns',
    'exec',
    ns[0],
    ...mpirunPrefix(),
    '--host',
    KERNEL.join(','),
    '-np',
    '2',
    ...YIELD,
    '--mca',
    'plm_rsh_agent',
    agent,
    '--mca',
    'pml',
    'ob1',
    '--mca',
    'btl',
    'tcp,self',
    '--mca',
    'btl_tcp_if_include',
    '10.31.0.0/24',
    '--mca',
    'oob_tcp_if_include',
    '10.31.0.0/24',
    ...prog,
  ];
}

/** ucx_perftest UCP tag_lat over TCP: the server in namespace A, its client in B. */
async function ucxTcp(ns: string[], links: string[], args: string[]): Promise<{ client: Job; server: Job }> {
  const port = String(nextPort());
  const env = (i: number) => ['env', 'UCX_TLS=tcp', `UCX_NET_DEVICES=${links[i]}`];
  const p = spawn('ip', ['netns', 'exec', ns[0], ...env(0), 'ucx_perftest', '-p', port]);
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const server = new Promise<Job>((r) => p.on('close', (code) => r({ code, out })));
  // ip netns exec and env exec the program: this pid is ucx_perftest's, its /proc/PID/net namespace A's.
  for (let i = 0; i < 1000 && p.exitCode === null && !tcpListening(Number(port), p.pid); i++)
    await new Promise((r) => setTimeout(r, 10));
  const client = await runJob(
    ['ip', 'netns', 'exec', ns[1], ...env(1), 'ucx_perftest', KERNEL[0], '-p', port, ...args],
    120_000,
  );
  if (p.exitCode === null && client.code !== 0) p.kill('SIGTERM');
  return { client, server: await server };
}

/** Median of a figure, its runs, and a line. */
const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');

export async function runMpiBench(opts: { seconds: number }): Promise<MpiBenchResult> {
  const why = unavailable();
  if (why !== null) return { text: `mpi: not run: ${why}`, json: { bench: 'mpi', skipped: why } };
  const rounds = Number(process.env.MPI_BENCH_ROUNDS ?? 3);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 50)
    throw new Error(`MPI_BENCH_ROUNDS must be an integer in 1..50, got "${process.env.MPI_BENCH_ROUNDS}"`);
  const mtus = (process.env.MPI_BENCH_MTU ?? '1500,9000').split(',').map(Number);
  if (mtus.some((m) => !Number.isInteger(m) || m < 1280 || m > 65535))
    throw new Error(`MPI_BENCH_MTU must be MTUs in 1280..65535, comma-separated, got "${process.env.MPI_BENCH_MTU}"`);
  // The daemons' af_packet sockets with UDP segmentation offload, as the kernel's TCP has its own
  // (GSO/GRO) on the same veth pair; MPI_BENCH_GSO=0 measures them without.
  const gso = process.env.MPI_BENCH_GSO !== '0';
  const lines: string[] = [
    `mpi: ${os.cpus().length} cores; nothing pinned: 2 daemons (cpu.poll adaptive) and 2 ranks (one per daemon, mpi_yield_when_idle 1) share them; ${rounds} alternating rounds after an untimed MPI job (fresh daemons are slower), medians`,
  ];
  const json: Record<string, unknown> = { bench: 'mpi', cores: os.cpus().length, rounds, gso };
  for (const mtu of mtus) {
    const r = await oneMtu(opts.seconds, rounds, gso, mtu);
    lines.push(...r.lines);
    json[`mtu${mtu}`] = r.json;
    // The figures at the first MTU (1500 by default) keep their names.
    if (mtu === mtus[0]) Object.assign(json, r.json);
  }
  return { text: lines.join('\n'), json };
}

/** The rounds over one veth MTU (both ends; the daemons take it, the kernel's TCP uses it). */
async function oneMtu(
  seconds: number,
  rounds: number,
  gso: boolean,
  mtu: number,
): Promise<{ lines: string[]; json: Record<string, unknown> }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-mpi-'));
  // Per figure: the runs over rdma-graph ("rg") and over the kernel's TCP ("tcp").
  const runs = { lat: { rg: [] as number[], tcp: [] as number[] }, bw: { rg: [] as number[], tcp: [] as number[] } };
  const ucx = { rg: [] as number[], tcp: [] as number[] };
  const failures: string[] = [];
  try {
    const prog = compileMpi('mpi-pingpong', dir);
    const args = [prog, String(seconds), '20', String(SMALL), String(LARGE)];
    const timeout = (4 * seconds + 90) * 1000;
    await withDaemons(
      'netns',
      async ({ sa, sb, device, ns, links }) => {
        for (const i of [0, 1]) ip('-n', ns[i], 'addr', 'add', `${KERNEL[i]}/24`, 'dev', links[i]);
        const agent = writeAgent(dir, ns);
        const mpi = async (over: 'rg' | 'tcp') => {
          const cmd = over === 'rg' ? mpirunOverDaemons(sa, sb, 1, args, device, YIELD) : mpirunTcp(ns, agent, args);
          const r = await runJob(cmd, timeout);
          const small = parsePingpong(r.out, SMALL),
            large = parsePingpong(r.out, LARGE);
          if (r.code !== 0 || small === null || large === null) {
            failures.push(`MPI over ${over} exited ${r.code}:\n${r.out.slice(-2000)}`);
            return;
          }
          runs.lat[over].push(small.us);
          runs.bw[over].push(large.mbps);
        };
        const tagLat = async (over: 'rg' | 'tcp') => {
          const perf = ['-t', 'tag_lat', '-s', String(SMALL), '-n', String(UCX_ITERS), '-w', '200'];
          const r =
            over === 'rg'
              ? await ucxPerftest(sa, sb, ['-t', 'tag_lat'], perf.slice(2), [
                  'UCX_TLS=rc_verbs,ud_verbs',
                  `UCX_NET_DEVICES=${device}`,
                ])
              : await ucxTcp(ns, links, perf);
          const f = ucxFinal(r.client.out);
          if (r.client.code !== 0 || f === null || f[0] !== UCX_ITERS) {
            failures.push(
              `UCX tag_lat over ${over} exited ${r.client.code}:\n${(r.client.out + r.server.out).slice(-2000)}`,
            );
            return;
          }
          ucx[over].push(f[1]); // overhead p50, us (half a round trip, as MPI's)
        };
        // Untimed first: fresh daemons run their first seconds of traffic 2-3x slower (V8
        // compiles their data path as it runs: MPI's 8 B half round trip 134, 85, 65, 41 us in
        // four jobs in a row on the same daemons), which the first round alone would pay.
        await runJob(
          mpirunOverDaemons(
            sa,
            sb,
            1,
            [prog, String(Math.max(1, seconds)), '20', String(SMALL), String(LARGE)],
            device,
            YIELD,
          ),
          timeout,
        );
        for (let round = 0; round < rounds; round++) {
          const order: ('rg' | 'tcp')[] = round % 2 === 0 ? ['rg', 'tcp'] : ['tcp', 'rg'];
          for (const over of order) await mpi(over);
          for (const over of order) await tagLat(over);
        }
      },
      { gso, mtu },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const lat = { rg: median(runs.lat.rg), tcp: median(runs.lat.tcp) };
  const bw = { rg: median(runs.bw.rg), tcp: median(runs.bw.tcp) };
  const tag = { rg: median(ucx.rg), tcp: median(ucx.tcp) };
  const list = (xs: number[]) => xs.map((x) => fmt(x)).join(' ');
  const lines = [
    `  two network namespaces joined by a veth pair, MTU ${mtu} on both ends: daemons on af_packet (10.30.0.0/24, gso: ${gso}, the veth's MTU), the kernel's TCP on 10.31.0.0/24`,
    `  MPI ping-pong ${SMALL} B latency (us, half round trip): rdma-graph ${fmt(lat.rg)} [${list(runs.lat.rg)}], TCP ${fmt(lat.tcp)} [${list(runs.lat.tcp)}]: x${fmt(lat.rg / lat.tcp, 2)} (goal <= 0.5)`,
    `  MPI ping-pong 1 MiB bandwidth (MB/s): rdma-graph ${fmt(bw.rg)} [${list(runs.bw.rg)}], TCP ${fmt(bw.tcp)} [${list(runs.bw.tcp)}]: x${fmt(bw.rg / bw.tcp, 2)} (goal >= 1.0)`,
    `  UCX UCP tag_lat ${SMALL} B (us, p50): rdma-graph (rc_verbs,ud_verbs) ${fmt(tag.rg)} [${list(ucx.rg)}], UCX_TLS=tcp ${fmt(tag.tcp)} [${list(ucx.tcp)}]: x${fmt(tag.rg / tag.tcp, 2)}`,
    ...failures.map((f) => `  failed: ${f}`),
  ];
  return {
    lines,
    json: {
      mtu,
      latencyUs: lat,
      bandwidthMBps: bw,
      ucxTagLatUs: tag,
      latencyRatio: lat.rg / lat.tcp,
      bandwidthRatio: bw.rg / bw.tcp,
      failures: failures.length,
    },
  };
}
