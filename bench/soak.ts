/**
 * npm run bench -- soak (issue 17; prints, never asserts): the memory of a daemon as users run
 * it. Two daemons (bin/main.ts start, 16384 buffers as the default config) joined by memif:
 * RSS of the first at start-up, after 1024 QPs made through the REST API (one PD, one CQ), then
 * every 30 s (or a twentieth of the soak when shorter) while perftest's ib_write_bw 64 KiB runs
 * between them through librdmagraph-verbs.so, for SOAK_SECONDS (default 600). Goal: flat, and
 * <= 200 MB. Ends with one JSON line {"bench":"soak",...}.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ApiClient } from '../api/client.ts';
import { VERBS_LIBRARY } from '../dataplane/verbs-server/connections.ts';
import { run } from './kernel-baselines.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resident set of a process in MB (/proc/PID/status VmRSS), or NaN. */
function rssMb(pid: number | undefined): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

interface Daemon {
  p: ChildProcess;
  api(): Promise<string>;
  up(): Promise<void>;
  stop(): Promise<void>;
}

function daemon(config: string): Daemon {
  const p = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'bin/main.ts'), 'start', '--config', config], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  p.stdout!.on('data', (d) => (log += d));
  p.stderr!.on('data', (d) => (log += d));
  const until = async (re: RegExp) => {
    const end = Date.now() + 30_000;
    for (;;) {
      const m = re.exec(log);
      if (m) return m;
      if (Date.now() > end || p.exitCode !== null) throw new Error(`daemon ${config}: no ${re}:\n${log}`);
      await sleep(50);
    }
  };
  return {
    p,
    api: async () => (await until(/API on (http:\/\/[^/\s]+)\/v1/))[1],
    up: async () => void (await until(/ is up$/m)),
    stop: () =>
      new Promise((r) => {
        if (p.exitCode !== null) return r();
        p.on('exit', () => r());
        p.kill('SIGTERM');
      }),
  };
}

export async function runSoakBench(): Promise<{ text: string; json: Record<string, unknown> }> {
  const seconds = Number(process.env.SOAK_SECONDS ?? 600);
  const every = Math.min(30, Math.max(1, seconds / 20));
  const lines = [`soak: ${os.cpus().length} cores, ${seconds} s of ib_write_bw 64 KiB between two daemons over memif`];
  const json: Record<string, unknown> = { bench: 'soak', seconds };
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-soak-'));
  const f = (n: string) => path.join(dir, n);
  const yaml = (role: 'server' | 'client', me: number, peer: number, verbs: string) =>
    `api: { listen: 127.0.0.1:0 }\nverbs: { socket: ${verbs} }\nrdma: { max-qps: 2048 }\ninterfaces:\n` +
    `  - name: memif0\n    driver: memif\n    memif: { socket: ${f('m.sock')}, role: ${role}, id: 0 }\n` +
    `    mac: "02:fe:00:00:00:0${me}"\n    address: 10.10.0.${me}/24\n` +
    `neighbors:\n  - { interface: memif0, address: 10.10.0.${peer}, mac: "02:fe:00:00:00:0${peer}" }\n`;
  writeFileSync(f('a.yaml'), yaml('server', 1, 2, f('va.sock')));
  writeFileSync(f('b.yaml'), yaml('client', 2, 1, f('vb.sock')));
  const a = daemon(f('a.yaml')),
    b = daemon(f('b.yaml'));
  try {
    await a.up();
    await b.up();
    await sleep(1000);
    const start = rssMb(a.p.pid);
    const api = new ApiClient(`${await a.api()}`);
    const pd = (await api.createPd()).pd;
    const cq = (await api.createCq({ depth: 4096 })).cq;
    for (let k = 0; k < 1024; k++) await api.createQp({ pd, sendCq: cq, recvCq: cq });
    await sleep(500);
    const withQps = rssMb(a.p.pid);
    lines.push(`  RSS at start-up ${start.toFixed(1)} MB; after 1024 QPs ${withQps.toFixed(1)} MB (goal <= 200)`);
    json.rssStartMb = +start.toFixed(1);
    json.rss1024QpsMb = +withQps.toFixed(1);
    const perftest = !spawnSync('ib_write_bw', ['--help']).error && existsSync(VERBS_LIBRARY);
    if (!perftest) lines.push('  no traffic: perftest not installed or librdmagraph-verbs.so not built');
    const samples: { t: number; a: number; b: number }[] = [];
    const t0 = Date.now();
    const sampler = setInterval(() => {
      const t = (Date.now() - t0) / 1000;
      const s = { t: Math.round(t), a: +rssMb(a.p.pid).toFixed(1), b: +rssMb(b.p.pid).toFixed(1) };
      samples.push(s);
      lines.push(`  t ${String(s.t).padStart(4)} s: RSS ${s.a} MB (peer ${s.b} MB)`);
    }, every * 1000);
    let port = 23000 + (process.pid % 500) * 4;
    let runs = 0,
      gbps = 0;
    while (Date.now() - t0 < seconds * 1000) {
      const left = Math.max(2, Math.min(30, Math.round(seconds - (Date.now() - t0) / 1000)));
      if (!perftest) {
        await sleep(left * 1000);
        continue;
      }
      const p = String(port++);
      const args = ['-x', '0', '-F', '-s', '65536', '-D', String(left), '-p', p];
      const server = run('ib_write_bw', args, { LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: f('va.sock') });
      await sleep(500);
      const c = await run('ib_write_bw', [...args, '127.0.0.1'], {
        LD_PRELOAD: VERBS_LIBRARY,
        RDMA_GRAPH_SOCKET: f('vb.sock'),
      });
      await server;
      const m = /^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)/m.exec(c.out);
      if (m) {
        runs++;
        gbps += (Number(m[1]) * 1048576 * 8) / 1e9;
      }
    }
    clearInterval(sampler);
    const as = samples.map((s) => s.a).filter((x) => Number.isFinite(x));
    const lo = Math.min(...as),
      hi = Math.max(...as);
    lines.push(
      `  during the soak: RSS ${lo.toFixed(1)}..${hi.toFixed(1)} MB over ${samples.length} samples; ` +
        `first ${as[0]?.toFixed(1)} MB, last ${as[as.length - 1]?.toFixed(1)} MB; ` +
        `${runs} ib_write_bw runs averaging ${(runs ? gbps / runs : 0).toFixed(2)} Gbit/s`,
    );
    json.rssMinMb = lo;
    json.rssMaxMb = hi;
    json.samples = samples;
    json.writeRuns = runs;
    json.writeGbps = runs ? +(gbps / runs).toFixed(2) : null;
  } finally {
    await a.stop();
    await b.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return { text: lines.join('\n'), json };
}
