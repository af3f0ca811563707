/**
 * Unmodified perftest on rdma-graph (issue 16), beside the kernel in the same run (prints, never
 * asserts):
 *
 *   topology two-daemons  two daemon processes joined by memif (10.10.0.1 <-> 10.10.0.2), each
 *                         perftest side preloaded against its own daemon's verbs socket
 *   topology one-daemon   one daemon with two memif interfaces joined to each other (memif0 the
 *                         server, memif1 the client of the same socket), the sides on
 *                         rg_memif0 and rg_memif1
 *
 * In each, after a warm-up (ib_write_bw 64 KiB for 2 s, both ways on two daemons, and
 * ib_send_lat 64 B x 2000, not counted: a fresh daemon's first seconds run before V8 has
 * optimised its code): ib_write_bw 64 KiB (duration mode) and ib_send_lat 64 B with perftest
 * polling its CQ, and in event mode (-e, completion channels) ib_send_bw 64 KiB (perftest has no
 * event mode for WRITE) and ib_send_lat 64 B; on the two daemons also ib_write_bw the other way
 * (the client on the memif server's daemon; towards the server, the client's daemon copies the MR
 * into its pool and the server places from there; towards the client, the server gathers from the
 * MR into the client's buffers: two copies either way, graph/peer-windows.ts), and UCX's
 * ucx_perftest (UCT on rc_verbs: put_bw 64 KiB with its default of one put outstanding, which
 * measures a put's round trip more than the link, and with -O 16; put_lat and am_lat 8 B). With -R (librdmacm's connection manager
 * instead of perftest's TCP exchange: the client reaches the server at its daemon's address,
 * 10.10.0.1) ib_write_bw 64 KiB and ib_send_lat 64 B again. Baselines: iperf3 TCP, one stream, between two
 * network namespaces over a veth pair (root), and sockperf UDP 64-B ping-pong on loopback
 * (half-RTT, as perftest's latency is). Then, on the two daemons, placed (placeDaemons: each daemon
 * on a CPU of its own, each perftest process on its daemon's): ib_write_bw 64 KiB and ib_send_lat
 * 64 B again. Apart from those, nothing is pinned: on a machine with fewer cores than
 * busy-polling processes (each daemon polls; perftest polls unless -e) they compete for the
 * cores, and the figures say so. Ends with one JSON line {"bench":"perftest",...}.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/verbs-server/connections.ts';
import { iperf3, type Out, run, sockperf } from './kernel-baselines.ts';

export interface PerftestBenchResult {
  text: string;
  json: Record<string, unknown>;
}

const ROOT = path.resolve(import.meta.dirname, '..');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let port = 21000 + (process.pid % 500) * 4;

/**
 * A perftest server on socket `sa`, then its client on `sb` (reaching the server at `addr`:
 * 127.0.0.1 for perftest's TCP exchange, the daemon's address with -R); the client's output.
 */
async function pair(
  sa: string,
  sb: string,
  tool: string,
  args: string[],
  devs: [string, string] | null,
  addr = '127.0.0.1',
  cpus: [number, number] | null = null,
): Promise<Out> {
  const p = String(port++);
  const d = (k: number) => (devs ? ['-d', devs[k]] : []);
  // `cpus`: each side under taskset, on that CPU (the server's, then the client's).
  const on = (k: number, a: string[]): [string, string[]] =>
    cpus ? ['taskset', ['-c', String(cpus[k]), tool, ...a]] : [tool, a];
  const server = run(...on(0, [...args, ...d(0), '-p', p]), { LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: sa });
  await sleep(500);
  let client: Out;
  // With -R a client that comes before the server listens is REJECTED at once (as on RoCE):
  // on a loaded machine the server can take longer than the pause above; try again a few times.
  for (let k = 0; ; k++) {
    client = await run(...on(1, [...args, ...d(1), '-p', p, addr]), {
      LD_PRELOAD: VERBS_LIBRARY,
      RDMA_GRAPH_SOCKET: sb,
    });
    if (addr === '127.0.0.1' || k === 5 || !/REJECTED|Failed to connect RDMA CM/.test(client.out)) break;
    await sleep(500);
  }
  await server;
  return client;
}

/** perftest's result row for `bytes`: its columns. */
function row(out: string, bytes: number): number[] | null {
  const m = new RegExp(`^\\s*${bytes}\\s+\\d+\\s+[\\d.]+.*$`, 'm').exec(out);
  return m ? m[0].trim().split(/\s+/).map(Number) : null;
}

/** A run's last lines, for a note saying it gave no result. */
const tail = (out: string, lines = 3): string => out.trim().split('\n').slice(-lines).join(' | ');

/** perftest's 64 KiB bandwidth row as Gbit/s (its BW average, column 3, is in 2^20-byte MB/s). */
function bw64k(out: string): number | null {
  const r = row(out, 65536);
  return r === null ? null : (r[3] * 1048576 * 8) / 1e9;
}

interface Figures {
  writeBwGbps: number | null;
  /** Two daemons: ib_write_bw with the client on the memif server's daemon (null: not run). */
  writeBwReverseGbps: number | null;
  /** ib_send_bw -e (perftest has no event mode for WRITE). */
  sendBwEventGbps: number | null;
  sendLatP50Us: number | null;
  sendLatP99Us: number | null;
  sendLatEventP50Us: number | null;
  sendLatEventP99Us: number | null;
  /** -R: connected through librdmacm (the daemons' connection manager). */
  writeBwCmGbps: number | null;
  sendLatCmP50Us: number | null;
  sendLatCmP99Us: number | null;
  notes: string[];
}

async function perftests(
  sa: string,
  sb: string,
  seconds: number,
  devs: [string, string] | null,
  reverse: boolean,
): Promise<Figures> {
  const f: Figures = {
    writeBwGbps: null,
    writeBwReverseGbps: null,
    sendBwEventGbps: null,
    sendLatP50Us: null,
    sendLatP99Us: null,
    sendLatEventP50Us: null,
    sendLatEventP99Us: null,
    writeBwCmGbps: null,
    sendLatCmP50Us: null,
    sendLatCmP99Us: null,
    notes: [],
  };
  const common = ['-x', '0', '-F'];
  // The warm-up: the same paths, not counted.
  const warm = [
    await pair(sa, sb, 'ib_write_bw', [...common, '-s', '65536', '-D', '2'], devs),
    await pair(sa, sb, 'ib_send_lat', [...common, '-s', '64', '-n', '2000'], devs),
  ];
  if (reverse) warm.push(await pair(sb, sa, 'ib_write_bw', [...common, '-s', '65536', '-D', '2'], devs));
  for (const w of warm)
    if (row(w.out, 65536) === null && row(w.out, 64) === null)
      f.notes.push(`the warm-up gave no result: ${tail(w.out)}`);
  for (const ev of [false, true]) {
    const e = ev ? ['-e'] : [];
    // perftest has no event mode for WRITE (no completion at the responder): -e measures SEND.
    const bwTool = ev ? 'ib_send_bw' : 'ib_write_bw';
    // Duration mode does not work with events: a number of iterations instead.
    const span = ev ? ['-n', String(2000 * seconds)] : ['-D', String(seconds)];
    const bw = await pair(sa, sb, bwTool, [...common, ...e, '-s', '65536', ...span], devs);
    const g = bw64k(bw.out);
    f[ev ? 'sendBwEventGbps' : 'writeBwGbps'] = g;
    if (g === null) f.notes.push(`${bwTool}${ev ? ' -e' : ''} gave no result: ${tail(bw.out)}`);
    const lat = await pair(sa, sb, 'ib_send_lat', [...common, ...e, '-s', '64', '-n', String(2000 * seconds)], devs);
    const l = row(lat.out, 64);
    // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
    if (l) {
      f[ev ? 'sendLatEventP50Us' : 'sendLatP50Us'] = l[4];
      f[ev ? 'sendLatEventP99Us' : 'sendLatP99Us'] = l[7];
    } else f.notes.push(`ib_send_lat${ev ? ' -e' : ''} gave no result: ${tail(lat.out)}`);
  }
  if (reverse) {
    const bw = await pair(sb, sa, 'ib_write_bw', [...common, '-s', '65536', '-D', String(seconds)], devs);
    f.writeBwReverseGbps = bw64k(bw.out);
    if (f.writeBwReverseGbps === null) f.notes.push(`ib_write_bw the other way gave no result: ${tail(bw.out)}`);
  }
  // -R: the same through librdmacm (the server's daemon is 10.10.0.1 in both topologies).
  const bwCm = await pair(
    sa,
    sb,
    'ib_write_bw',
    [...common, '-R', '-s', '65536', '-D', String(seconds)],
    devs,
    '10.10.0.1',
  );
  f.writeBwCmGbps = bw64k(bwCm.out);
  if (f.writeBwCmGbps === null) f.notes.push(`ib_write_bw -R gave no result: ${tail(bwCm.out)}`);
  const latCm = await pair(
    sa,
    sb,
    'ib_send_lat',
    [...common, '-R', '-s', '64', '-n', String(2000 * seconds)],
    devs,
    '10.10.0.1',
  );
  const lc = row(latCm.out, 64);
  if (lc) {
    f.sendLatCmP50Us = lc[4];
    f.sendLatCmP99Us = lc[7];
  } else f.notes.push(`ib_send_lat -R gave no result: ${tail(latCm.out)}`);
  return f;
}

/** UCX (ucx_perftest, UCT on rc_verbs, device rg_memif0 on both daemons): its Final rows. */
interface UcxFigures {
  /** ucx_perftest's default: one put outstanding at a time (-O 1), so each 64 KiB waits for the last. */
  putBwGbps: number | null;
  /** -O 16: sixteen outstanding, as a program streaming puts keeps them (perftest's tx-depth). */
  putBwWindowGbps: number | null;
  putLatUs: number | null;
  amLatUs: number | null;
  notes: string[];
}

async function ucx(sa: string, sb: string, seconds: number): Promise<UcxFigures> {
  const f: UcxFigures = { putBwGbps: null, putBwWindowGbps: null, putLatUs: null, amLatUs: null, notes: [] };
  if (spawnSync('ucx_perftest', ['-h']).error) {
    f.notes.push('ucx_perftest not installed (Debian package ucx-utils)');
    return f;
  }
  const runs: [keyof UcxFigures, string, string[]][] = [
    ['putBwGbps', 'put_bw', ['-s', '65536', '-D', 'zcopy', '-n', String(2000 * seconds)]],
    ['putBwWindowGbps', 'put_bw', ['-s', '65536', '-D', 'zcopy', '-O', '16', '-n', String(8000 * seconds)]],
    ['putLatUs', 'put_lat', ['-s', '8', '-n', String(10000 * seconds)]],
    ['amLatUs', 'am_lat', ['-s', '8', '-n', String(10000 * seconds)]],
  ];
  for (const [key, t, args] of runs) {
    const p = String(port++);
    const common = ['-t', t, '-x', 'rc_verbs', '-d', 'rg_memif0:1', '-p', p];
    const server = run('ucx_perftest', common, { LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: sa });
    await sleep(500);
    const client = await run('ucx_perftest', ['127.0.0.1', ...common, ...args], {
      LD_PRELOAD: VERBS_LIBRARY,
      RDMA_GRAPH_SOCKET: sb,
    });
    await server;
    // Final: iterations, overhead p50 / avg / overall (us), MB/s avg / overall, msg/s avg / overall.
    const m = /^\s*Final:\s+(.*)$/m.exec(client.out);
    const c = m ? m[1].trim().split(/\s+/).map(Number) : null;
    if (c === null) f.notes.push(`ucx_perftest ${t} gave no result: ${tail(client.out, 2)}`);
    else if (key === 'putBwGbps' || key === 'putBwWindowGbps') f[key] = (c[5] * 1048576 * 8) / 1e9;
    else if (key !== 'notes') f[key] = c[1];
  }
  return f;
}

/** Two daemons placed (see placeDaemons): ib_write_bw 64 KiB and ib_send_lat 64 B, polling. */
interface PlacedFigures {
  writeBwGbps: number | null;
  sendLatP50Us: number | null;
  sendLatP99Us: number | null;
  notes: string[];
}

/**
 * Each daemon, every thread of it, on a CPU of its own (A on 0, B on 1: `taskset -a -p`), and
 * each perftest process on its own daemon's CPU, as VPP-style deployments place them: a program
 * and the data plane it posts to share a core and hand it to each other (both yield when idle),
 * and the two daemons never share one. Null when the machine has fewer than 2 CPUs or taskset
 * failed.
 */
function placeDaemons(a: Daemon, b: Daemon): string | null {
  if (os.cpus().length < 2) return 'fewer than 2 CPUs';
  for (const [d, cpu] of [
    [a, 0],
    [b, 1],
  ] as const) {
    const r = spawnSync('taskset', ['-a', '-p', '-c', String(cpu), String(d.pid)]);
    if (r.error || r.status !== 0) return `taskset: ${r.error?.message ?? r.stderr.toString().trim()}`;
  }
  return null;
}

async function placedPerftests(sa: string, sb: string, seconds: number): Promise<PlacedFigures> {
  const f: PlacedFigures = { writeBwGbps: null, sendLatP50Us: null, sendLatP99Us: null, notes: [] };
  const common = ['-x', '0', '-F'];
  const cpus: [number, number] = [0, 1];
  const bw = await pair(
    sa,
    sb,
    'ib_write_bw',
    [...common, '-s', '65536', '-D', String(seconds)],
    null,
    undefined,
    cpus,
  );
  f.writeBwGbps = bw64k(bw.out);
  if (f.writeBwGbps === null) f.notes.push(`ib_write_bw gave no result: ${tail(bw.out)}`);
  const lat = await pair(
    sa,
    sb,
    'ib_send_lat',
    [...common, '-s', '64', '-n', String(2000 * seconds)],
    null,
    undefined,
    cpus,
  );
  const l = row(lat.out, 64);
  if (l) {
    f.sendLatP50Us = l[4];
    f.sendLatP99Us = l[7];
  } else f.notes.push(`ib_send_lat gave no result: ${tail(lat.out)}`);
  return f;
}

interface Daemon {
  /** Resolves once `n` interfaces said they are up. */
  up(n: number): Promise<void>;
  stop(): Promise<void>;
  readonly pid: number;
}

/** A daemon (bin/main.ts start) on `config`. */
function daemon(config: string): Daemon {
  const p: ChildProcess = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(ROOT, 'bin/main.ts'), 'start', '--config', config],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  p.stdout!.on('data', (d) => (log += d));
  p.stderr!.on('data', (d) => (log += d));
  return {
    pid: p.pid ?? -1,
    async up(n: number) {
      const end = Date.now() + 20_000;
      while ((log.match(/ is up$/gm)?.length ?? 0) < n) {
        if (Date.now() > end || p.exitCode !== null) throw new Error(`daemon ${config} did not come up:\n${log}`);
        await sleep(50);
      }
    },
    stop: () =>
      new Promise((r) => {
        if (p.exitCode !== null) return r();
        p.on('exit', () => r());
        p.kill('SIGTERM');
      }),
  };
}

function memifItf(name: string, sock: string, role: string, mac: string, addr: string): string {
  // Two daemons of one host: no UDP checksum on the memif link (nothing forwards it further).
  return `  - name: ${name}\n    driver: memif\n    memif: { socket: ${sock}, role: ${role}, id: 0, udp-checksum: false }\n    mac: "${mac}"\n    address: ${addr}/24\n`;
}

const MAC1 = '02:fe:00:00:00:01',
  MAC2 = '02:fe:00:00:00:02';

export async function runPerftestBench(opts: { seconds: number }): Promise<PerftestBenchResult> {
  const seconds = Math.max(2, Math.round(opts.seconds));
  const cores = os.cpus().length;
  const model = os.cpus()[0]?.model ?? 'unknown CPU';
  const missing = ['ib_write_bw', 'ib_send_lat'].filter((t) => spawnSync(t, ['--help']).error);
  const json: Record<string, unknown> = { bench: 'perftest', cores, cpu: model, seconds };
  const lines: string[] = [
    `perftest on rdma-graph: ${cores} cores (${model}), ${seconds} s per run after a warm-up run of each tool; nothing pinned but the placed rows: each daemon busy-polls, perftest polls unless -e`,
  ];
  const tcp = await iperf3(seconds);
  const udp = await sockperf(seconds, port++);
  // The same with both ends spinning on their sockets: the baseline for a busy-polling program.
  const udpSpin = await sockperf(seconds, port++, true);
  json.kernel = {
    iperf3TcpGbps: tcp.gbps,
    sockperfUdpHalfRttP50Us: udp.p50,
    sockperfUdpHalfRttP99Us: udp.p99,
    sockperfSpinUdpHalfRttP50Us: udpSpin.p50,
    sockperfSpinUdpHalfRttP99Us: udpSpin.p99,
  };
  const half = (u: typeof udp) => (u.p50 === null ? `not run (${u.why})` : `p50 ${u.p50} us, p99 ${u.p99} us`);
  lines.push(
    `  kernel: iperf3 TCP 1 stream over veth ${tcp.gbps === null ? `not run (${tcp.why})` : `${tcp.gbps.toFixed(2)} Gbit/s`}; ` +
      `sockperf UDP 64 B half-RTT ${half(udp)}; spinning (--timeout 0) ${half(udpSpin)}`,
  );
  if (missing.length > 0 || !existsSync(VERBS_LIBRARY)) {
    const why =
      missing.length > 0
        ? `${missing.join(', ')} not installed (Debian package perftest)`
        : `${VERBS_LIBRARY} not built (libibverbs-dev, npm run build)`;
    lines.push(`  perftest not run: ${why}`);
    json.error = why;
    return { text: lines.join('\n'), json };
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-perftest-'));
  try {
    const s = (n: string) => path.join(dir, n);
    // Two daemons.
    writeFileSync(
      s('a.yaml'),
      `api: { listen: 127.0.0.1:0 }\nverbs: { socket: ${s('va.sock')} }\ninterfaces:\n` +
        memifItf('memif0', s('m2.sock'), 'server', MAC1, '10.10.0.1') +
        `neighbors:\n  - { interface: memif0, address: 10.10.0.2, mac: "${MAC2}" }\n`,
    );
    writeFileSync(
      s('b.yaml'),
      `api: { listen: 127.0.0.1:0 }\nverbs: { socket: ${s('vb.sock')} }\ninterfaces:\n` +
        memifItf('memif0', s('m2.sock'), 'client', MAC2, '10.10.0.2') +
        `neighbors:\n  - { interface: memif0, address: 10.10.0.1, mac: "${MAC1}" }\n`,
    );
    // One daemon, two interfaces joined by memif.
    writeFileSync(
      s('one.yaml'),
      `api: { listen: 127.0.0.1:0 }\nverbs: { socket: ${s('v1.sock')} }\ninterfaces:\n` +
        memifItf('memif0', s('m1.sock'), 'server', MAC1, '10.10.0.1') +
        memifItf('memif1', s('m1.sock'), 'client', MAC2, '10.10.0.2') +
        `neighbors:\n  - { interface: memif0, address: 10.10.0.2, mac: "${MAC2}" }\n` +
        `  - { interface: memif1, address: 10.10.0.1, mac: "${MAC1}" }\n`,
    );
    const topologies: Record<string, Figures> = {};
    let ucxFigures: UcxFigures | null = null;
    let placed: PlacedFigures | null = null;
    let placedWhy = '';
    {
      const a = daemon(s('a.yaml'));
      const b = daemon(s('b.yaml'));
      try {
        await a.up(1);
        await b.up(1);
        topologies['two-daemons'] = await perftests(s('va.sock'), s('vb.sock'), seconds, null, true);
        ucxFigures = await ucx(s('va.sock'), s('vb.sock'), seconds);
        // Last, as the daemons stay where they were put.
        const why = placeDaemons(a, b);
        placed = why === null ? await placedPerftests(s('va.sock'), s('vb.sock'), seconds) : null;
        if (why !== null) placedWhy = why;
      } finally {
        await a.stop();
        await b.stop();
      }
    }
    {
      const one = daemon(s('one.yaml'));
      try {
        await one.up(2);
        topologies['one-daemon'] = await perftests(
          s('v1.sock'),
          s('v1.sock'),
          seconds,
          ['rg_memif0', 'rg_memif1'],
          false,
        );
      } finally {
        await one.stop();
      }
    }
    const ratio = (x: number | null, y: number | null) => (x === null || y === null || y === 0 ? null : x / y);
    const fmt = (x: number | null, d = 2) => (x === null ? 'n/a' : x.toFixed(d));
    for (const [name, f] of Object.entries(topologies)) {
      const busy = name === 'two-daemons' ? 2 : 1;
      lines.push(
        `  ${name} (${busy} busy-polling daemon${busy > 1 ? 's' : ''} + 2 perftest processes on ${cores} cores):`,
      );
      lines.push(
        `    ib_write_bw 64 KiB: ${fmt(f.writeBwGbps)} Gbit/s polling (${fmt(ratio(f.writeBwGbps, tcp.gbps))}x kernel TCP), ` +
          `ib_send_bw -e ${fmt(f.sendBwEventGbps)} Gbit/s (${fmt(ratio(f.sendBwEventGbps, tcp.gbps))}x); goal >= 1.0x`,
      );
      if (name === 'two-daemons')
        lines.push(
          `    ib_write_bw 64 KiB the other way (towards the memif client's daemon): ` +
            `${fmt(f.writeBwReverseGbps)} Gbit/s (${fmt(ratio(f.writeBwReverseGbps, tcp.gbps))}x kernel TCP)`,
        );
      lines.push(
        `    ib_send_lat 64 B: p50 ${fmt(f.sendLatP50Us)} us p99 ${fmt(f.sendLatP99Us)} us polling ` +
          `(${fmt(ratio(f.sendLatP50Us, udp.p50))}x kernel UDP half-RTT, ${fmt(ratio(f.sendLatP50Us, udpSpin.p50))}x spinning), p50 ${fmt(f.sendLatEventP50Us)} us p99 ` +
          `${fmt(f.sendLatEventP99Us)} us with -e (${fmt(ratio(f.sendLatEventP50Us, udp.p50))}x); goal p50 <= 1.0x, polling and -e (issue 31)`,
      );
      lines.push(
        `    -R (librdmacm): ib_write_bw 64 KiB ${fmt(f.writeBwCmGbps)} Gbit/s (${fmt(ratio(f.writeBwCmGbps, tcp.gbps))}x kernel TCP), ` +
          `ib_send_lat 64 B p50 ${fmt(f.sendLatCmP50Us)} us p99 ${fmt(f.sendLatCmP99Us)} us (${fmt(ratio(f.sendLatCmP50Us, udp.p50))}x)`,
      );
      for (const n of f.notes) lines.push(`    note: ${n}`);
      json[name] = {
        ...f,
        writeBwVsTcp: ratio(f.writeBwGbps, tcp.gbps),
        writeBwReverseVsTcp: ratio(f.writeBwReverseGbps, tcp.gbps),
        sendBwEventVsTcp: ratio(f.sendBwEventGbps, tcp.gbps),
        sendLatVsUdp: ratio(f.sendLatP50Us, udp.p50),
        sendLatVsUdpSpin: ratio(f.sendLatP50Us, udpSpin.p50),
        sendLatEventVsUdp: ratio(f.sendLatEventP50Us, udp.p50),
        writeBwCmVsTcp: ratio(f.writeBwCmGbps, tcp.gbps),
        sendLatCmVsUdp: ratio(f.sendLatCmP50Us, udp.p50),
      };
    }
    lines.push(
      "  two-daemons placed (daemon A, all its threads, on CPU 0, B on CPU 1; each perftest process on its daemon's CPU):",
    );
    if (placed === null) lines.push(`    not run: ${placedWhy}`);
    else {
      lines.push(
        `    ib_write_bw 64 KiB: ${fmt(placed.writeBwGbps)} Gbit/s (${fmt(ratio(placed.writeBwGbps, tcp.gbps))}x kernel TCP); ` +
          `ib_send_lat 64 B: p50 ${fmt(placed.sendLatP50Us)} us p99 ${fmt(placed.sendLatP99Us)} us (${fmt(ratio(placed.sendLatP50Us, udp.p50))}x kernel UDP half-RTT)`,
      );
      for (const n of placed.notes) lines.push(`    note: ${n}`);
      json['two-daemons-placed'] = {
        ...placed,
        writeBwVsTcp: ratio(placed.writeBwGbps, tcp.gbps),
        sendLatVsUdp: ratio(placed.sendLatP50Us, udp.p50),
      };
    }
    if (ucxFigures !== null) {
      const u = ucxFigures;
      lines.push('  UCX (ucx_perftest, UCT rc_verbs on rg_memif0, two daemons, untuned):');
      lines.push(
        `    put_bw 64 KiB zcopy ${fmt(u.putBwGbps)} Gbit/s one put at a time (its default; ${fmt(ratio(u.putBwGbps, tcp.gbps))}x kernel TCP), ` +
          `${fmt(u.putBwWindowGbps)} Gbit/s with -O 16 (${fmt(ratio(u.putBwWindowGbps, tcp.gbps))}x); ` +
          `put_lat 8 B p50 ${fmt(u.putLatUs)} us, am_lat 8 B p50 ${fmt(u.amLatUs)} us ` +
          `(${fmt(ratio(u.amLatUs, udp.p50))}x kernel UDP half-RTT)`,
      );
      for (const n of u.notes) lines.push(`    note: ${n}`);
      json.ucx = u;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { text: lines.join('\n'), json };
}
