/**
 * RDMA between two data planes in two processes joined by memif (issue 17), each process on its
 * own CPU when the machine has two (taskset): WRITE 64 KiB with 16 outstanding (bandwidth), and
 * 64-byte SEND ping-pong (RTT p50/p99/p99.9), in each cpu.poll mode. The processes embed a
 * Dataplane (config parsed from YAML as the daemon does) and drive its verbs directly, as a
 * program embedding rdma-graph would. Prints, never asserts.
 *
 *   node --import tsx bench/rdma-procs.ts --child ROLE SOCKET POLL TEST SECONDS
 *
 * runs one side (ROLE a: the memif server, WRITE source / pinger; b: the client, WRITE target /
 * ponger): it prints {"qpn","psn","stag"} once its link is up, reads the peer's line on stdin,
 * connects, prints {"ready":true}, waits for "go", runs TEST (write | pingpong) and prints its
 * result as one JSON line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { startApi } from '../api/server.ts';
import { liveSampleCost } from './live-cost.ts';
import { startAllocProfile } from './alloc-profile.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseConfig } from '../config/load.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { createDataplane } from '../dataplane/create.ts';
import { formatRuntime } from '../graph/format.ts';

const MACS = { a: '02:fe:00:00:00:01', b: '02:fe:00:00:00:02' };
const IPS = { a: '10.10.0.1', b: '10.10.0.2' };
const MSG = 65536;
/** memif between two processes of this host: no UDP checksum (RDMA_BENCH_UDP_CKSUM=true to compute them). */
const UDP_CKSUM = process.env.RDMA_BENCH_UDP_CKSUM === 'true' ? 'true' : 'false';
/** RDMA_BENCH_OUTSTANDING: WRITEs of 64 KiB in flight (default 16; 1..1024). */
const OUTSTANDING = Number(process.env.RDMA_BENCH_OUTSTANDING ?? 16);
if (!Number.isInteger(OUTSTANDING) || OUTSTANDING < 1 || OUTSTANDING > 1024)
  throw new Error(`RDMA_BENCH_OUTSTANDING must be a whole number 1..1024, got "${process.env.RDMA_BENCH_OUTSTANDING}"`);
/**
 * RDMA_BENCH_MTU=N: the memif link's MTU pinned to N; unset, the interface's default (between two
 * rdma-graph data planes, memif's MEMIF_PEER_MTU, drivers/memif.ts linkMtu).
 */
const MTU = process.env.RDMA_BENCH_MTU === undefined ? null : Number(process.env.RDMA_BENCH_MTU);
/**
 * RDMA_BENCH_WRITER_CLIENT=1 (set by pairRun): a, the side that writes and pings, is the memif
 * client, b the server (unset: a is the server). A WRITE's payload is copied twice either way:
 * towards the client from the MR into the client's buffers (the server's gather) and then into
 * the MR; towards the server from the MR into the client's transmit slots (its gather) and then,
 * from there, into the MR (the server leaves it where it is until placed, graph/peer-windows.ts;
 * RDMA_GRAPH_MEMIF_RX_DEFER=0 makes it copy each frame whole first: three copies;
 * RDMA_GRAPH_MEMIF_TX_GATHER=0 has the client copy into its pool instead of its slots).
 */
const WRITER_IS_CLIENT = process.env.RDMA_BENCH_WRITER_CLIENT === '1';
/** RDMA_BENCH_DATA_SIZE: the pool's buffer size (default 2048: a segment longer than a buffer is a chain). */
const DATA_SIZE = Number(process.env.RDMA_BENCH_DATA_SIZE ?? 2048);
/**
 * RDMA_BENCH_WARM_MS: how long the ping-pong runs before its round trips count (default 1000).
 * sockperf, the baseline, leaves its first 400 ms out the same way; a JIT-compiled data plane
 * needs longer (its first round trips run before the code is optimised).
 */
const PINGPONG_WARM_MS = Number(process.env.RDMA_BENCH_WARM_MS ?? 1000);
if (!Number.isFinite(PINGPONG_WARM_MS) || PINGPONG_WARM_MS < 0 || PINGPONG_WARM_MS > 60000)
  throw new Error(`RDMA_BENCH_WARM_MS must be a number of ms in 0..60000, got "${process.env.RDMA_BENCH_WARM_MS}"`);
/** Most round trips one ping-pong run records (2^22: 64 MiB of two arrays, minutes at our rates). */
const PINGPONG_MAX = 1 << 22;

/**
 * The garbage collector's pauses in this process from now on (PerformanceObserver 'gc'): what
 * the data plane's allocations cost a latency run (a scavenge stops the thread ~0.5-2 ms).
 */
function watchGc(): () => { count: number; maxMs: number; totalMs: number } {
  let count = 0,
    maxMs = 0,
    totalMs = 0;
  const o = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      count++;
      totalMs += e.duration;
      if (e.duration > maxMs) maxMs = e.duration;
    }
  });
  o.observe({ entryTypes: ['gc'] });
  return () => {
    o.disconnect();
    return { count, maxMs, totalMs };
  };
}

async function child(role: 'a' | 'b', sock: string, poll: string, kind: string, seconds: number): Promise<void> {
  const other = role === 'a' ? 'b' : 'a';
  const cfg = parseConfig(
    `api: { listen: 127.0.0.1:0 }\n` +
      `cpu: { poll: ${poll} }\n` +
      `buffers: { data-size: ${DATA_SIZE} }\n` +
      `rdma: { ${process.env.RDMA_BENCH_CC ? `congestion: ${process.env.RDMA_BENCH_CC}, ` : ''}trp: { ${process.env.RDMA_BENCH_WINDOW ? `window: ${process.env.RDMA_BENCH_WINDOW}, ` : ''}${process.env.RDMA_BENCH_RTOMIN ? `rto-min-ms: ${process.env.RDMA_BENCH_RTOMIN}` : ''} } }\n` +
      `interfaces:\n  - name: memif0\n    driver: memif\n` +
      `    memif: { socket: ${sock}, role: ${(role === 'a') !== WRITER_IS_CLIENT ? 'server' : 'client'}, id: 0, udp-checksum: ${UDP_CKSUM} }\n` +
      `    mac: "${MACS[role]}"\n    address: ${IPS[role]}/24\n${MTU === null ? '' : `    mtu: ${MTU}\n`}` +
      `neighbors:\n  - { interface: memif0, address: ${IPS[other]}, mac: "${MACS[other]}" }\n`,
    `bench-${role}.yaml`,
  );
  const dp = await createDataplane(cfg);
  // RDMA_BENCH_LIVE_PAGE=1 (set by pairRun): the API up and a page's event stream open on it for
  // the whole run, read by curl in a process of its own as a browser would (the live view's cost).
  let page: ChildProcess | null = null;
  const api = process.env.RDMA_BENCH_LIVE_PAGE === '1' ? await startApi(dp, { port: 0 }) : null;
  if (api) page = spawn('curl', ['-sSN', '-o', '/dev/null', `${api.url}/live/events`], { stdio: 'ignore' });
  const say = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const next = async () => JSON.parse((await lines.next()).value as string);
  try {
    while ((await dp.interfaces())[0].state !== 'up') await new Promise((r) => setTimeout(r, 20));
    const { rdma } = Dataplane.internals(dp);
    const pd = rdma.createPd();
    const scq = rdma.createCq(1024),
      rcq = rdma.createCq(1024);
    const qp = rdma.createQp({ pd, sendCq: scq, recvCq: rcq, maxSendWr: 64, maxRecvWr: 64 });
    const mr = rdma.regMr(pd, MSG, ['local-write', 'remote-write']);
    say({ qpn: qp.qpn, psn: qp.isn, stag: mr.stag });
    const peer = (await next()) as { qpn: number; psn: number; stag: number };
    rdma.modifyQp(qp, { state: 'init' });
    rdma.modifyQp(qp, { state: 'rtr', remote: { address: IPS[other], port: peer.qpn }, rqPsn: peer.psn });
    rdma.modifyQp(qp, { state: 'rts' });
    say({ ready: true });
    await next(); // go
    // RDMA_BENCH_ALLOC=a|b: that side's allocations over the run (bench/alloc-profile.ts) on stderr.
    const alloc = process.env.RDMA_BENCH_ALLOC === role ? await startAllocProfile() : null;
    const gcPauses = watchGc();
    const cpu0 = process.cpuUsage();
    let cpuAtEnd: number | null = null;
    const cpuMs = () => {
      const c = process.cpuUsage(cpu0);
      return (c.user + c.system) / 1000;
    };
    const end = performance.now() + seconds * 1000;
    if (kind === 'write' && role === 'a') {
      let posted = 0,
        done = 0;
      const post = () => {
        while (posted - done < OUTSTANDING)
          rdma.postSend(qp, {
            wrId: posted++,
            opcode: 'write',
            sg: [{ mr, offset: 0, length: MSG }],
            remote: { stag: peer.stag, offset: 0 },
          });
      };
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) => {
        scq.onCompletion = (cq) => {
          for (const c of cq.poll(64)) {
            if (c.status !== 'success') return reject(new Error(`write: ${c.status}`));
            done++;
          }
          if (performance.now() >= end) resolve();
          else post();
        };
        post();
      });
      const s = (performance.now() - t0) / 1000;
      const c = rdma.queryQp(qp).counters;
      say({
        gbps: (done * MSG * 8) / s / 1e9,
        cpuMs: cpuMs(),
        writes: done,
        retransmits: c.retransmits,
        fastRetransmits: c.fastRetransmits,
        timeouts: c.timeouts,
        spurious: c.spuriousTimeouts,
        segment: qp.mtuTagged,
      });
    } else if (kind === 'pingpong') {
      // b answers every message; a measures each round trip.
      const sg = [{ mr, offset: 0, length: 64 }];
      for (let k = 0; k < 32; k++) rdma.postRecv(qp, { wrId: k, sg });
      // Every round trip is recorded from the first (when each was sent, and how long it took),
      // into arrays allocated up front; those sent in the warm-up are left out only at the end,
      // so the measured part runs the same code as the warm-up (a path first taken mid-run is a
      // deoptimisation, and its recompilation shares this CPU).
      const sentAt = new Float64Array(PINGPONG_MAX),
        rtt = new Float64Array(PINGPONG_MAX);
      let n = 0,
        t = 0;
      const stop = performance.now() + PINGPONG_WARM_MS + seconds * 1000;
      await new Promise<void>((resolve, reject) => {
        rcq.onCompletion = (cq) => {
          for (const c of cq.poll(64)) {
            // The other side finished and closed (its FIN flushes our receives): the end.
            if (c.status === 'flushed') return resolve();
            if (c.status !== 'success') return reject(new Error(`recv: ${c.status}`));
            rdma.postRecv(qp, { wrId: 0, sg });
            if (role === 'a') {
              const now = performance.now();
              sentAt[n] = t;
              rtt[n] = now - t;
              if (++n === PINGPONG_MAX || now >= stop) return resolve();
            }
            t = performance.now();
            rdma.postSend(qp, { wrId: 0, opcode: 'send', sg, signaled: false });
          }
        };
        scq.onCompletion = (cq) => void cq.poll(64);
        if (role === 'a') {
          t = performance.now();
          rdma.postSend(qp, { wrId: 0, opcode: 'send', sg, signaled: false });
        } else setTimeout(resolve, PINGPONG_WARM_MS + seconds * 1000 + 1000);
      });
      const from = sentAt[0] + PINGPONG_WARM_MS;
      let first = 0;
      while (first < n && sentAt[first] < from) first++;
      const rtts = rtt.slice(first, n).sort();
      const q = (x: number) =>
        rtts.length ? rtts[Math.min(rtts.length - 1, Math.floor(x * rtts.length))] * 1000 : NaN;
      if (role === 'a') say({ p50: q(0.5), p99: q(0.99), p999: q(0.999), n: rtts.length, gc: gcPauses() });
    } else {
      // The WRITE target: its CPU time over the sender's `seconds` (not the second of grace after).
      setTimeout(() => (cpuAtEnd = cpuMs()), seconds * 1000);
      await new Promise((r) => setTimeout(r, seconds * 1000 + 1000));
    }
    const q = rdma.queryQp(qp).counters;
    if (alloc)
      process.stderr.write(
        `--- ${role} ${poll} ${kind}: per packet sent or received\n${await alloc.stop(q.rxPackets + q.txPackets)}\n`,
      );
    // RDMA_BENCH_RUNTIME=1: each side's `show runtime` (per-node cost at this run's vector sizes) on stderr.
    if (process.env.RDMA_BENCH_RUNTIME === '1')
      process.stderr.write(`--- ${role} ${poll} ${kind}\n${formatRuntime(await dp.runtime(), { time: true })}\n`);
    if (role === 'b' || kind === 'write')
      say({ done: true, duplicates: q.duplicates, timeouts: q.timeouts, cpuMs: cpuAtEnd ?? cpuMs() });
  } finally {
    page?.kill();
    await api?.close();
    await dp.close();
  }
}

interface Side {
  p: ChildProcess;
  next(): Promise<Record<string, unknown>>;
  send(o: unknown): void;
}

function side(
  role: 'a' | 'b',
  sock: string,
  poll: string,
  kind: string,
  seconds: number,
  cpu: string | null,
  livePage = false,
  mtu: number | null = null,
  writerClient = false,
): Side {
  // RDMA_BENCH_PROF=a|b: that side writes a V8 CPU profile (--cpu-prof) into the working directory.
  const prof = process.env.RDMA_BENCH_PROF === role ? ['--cpu-prof'] : [];
  const args = [...prof, '--import', 'tsx', import.meta.filename, '--child', role, sock, poll, kind, String(seconds)];
  const env = {
    ...process.env,
    RDMA_BENCH_LIVE_PAGE: livePage ? '1' : '0',
    RDMA_BENCH_WRITER_CLIENT: writerClient ? '1' : '0',
    ...(mtu === null ? {} : { RDMA_BENCH_MTU: String(mtu) }),
  };
  const p = cpu
    ? spawn('taskset', ['-c', cpu, process.execPath, ...args], { stdio: ['pipe', 'pipe', 'inherit'], env })
    : spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'], env });
  const it = createInterface({ input: p.stdout! })[Symbol.asyncIterator]();
  return {
    p,
    next: async () => {
      const r = await it.next();
      if (r.done) throw new Error(`bench side ${role} ended early`);
      return JSON.parse(r.value as string);
    },
    send: (o) => p.stdin!.write(JSON.stringify(o) + '\n'),
  };
}

/**
 * One run of `kind` between two processes; `livePage`: each with a live view's stream open
 * (RDMA_BENCH_LIVE_PAGE); `mtu`: the memif link's pinned (default RDMA_BENCH_MTU's, else the interface's default);
 * `writerClient`: the writing side is the memif client (RDMA_BENCH_WRITER_CLIENT).
 */
export async function pairRun(
  poll: string,
  kind: string,
  seconds: number,
  livePage = false,
  mtu: number | null = null,
  writerClient = false,
): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-rdma-'));
  const sock = path.join(dir, 'm.sock');
  const two = os.cpus().length >= 2;
  const a = side('a', sock, poll, kind, seconds, two ? '0' : null, livePage, mtu, writerClient);
  const b = side('b', sock, poll, kind, seconds, two ? '1' : null, livePage, mtu, writerClient);
  try {
    const ia = await a.next(),
      ib = await b.next();
    a.send(ib);
    b.send(ia);
    await a.next();
    await b.next();
    a.send('go');
    b.send('go');
    const r = await a.next();
    const rb = await b.next(); // b's end: what its QP saw (duplicates: retransmissions that were not needed)
    return { ...r, peerDuplicates: rb.duplicates, peerCpuMs: rb.cpuMs };
  } finally {
    for (const s of [a, b]) s.p.stdin!.end();
    await Promise.all([a, b].map((s) => new Promise((r) => (s.p.exitCode !== null ? r(0) : s.p.on('exit', r)))));
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A run's GC pauses on the measuring side, as printed. */
function gcText(g: unknown): string {
  const x = g as { count?: number; maxMs?: number; totalMs?: number } | undefined;
  return typeof x?.count === 'number'
    ? `${x.count} GC pauses on the pinger over the run, longest ${(x.maxMs ?? 0).toFixed(2)} ms, ${(x.totalMs ?? 0).toFixed(1)} ms in all`
    : 'GC pauses not seen';
}

/**
 * A WRITE run's CPU time (user + system, from "go" to its end, the run's setup not counted) per
 * byte written, on one side: a figure a loaded machine disturbs less than Gbit/s (what a
 * segment costs, not how often the scheduler lets the process run).
 */
function cpuNsPerByte(w: Record<string, unknown>, side: 'cpuMs' | 'peerCpuMs'): number | null {
  const ms = w[side],
    writes = w.writes;
  return typeof ms === 'number' && typeof writes === 'number' && writes > 0 ? (ms * 1e6) / (writes * MSG) : null;
}

/** RDMA_BENCH_TOWARDS_ROUNDS: rounds of the three WRITEs towards the memif server, alternated (default 3). */
const TOWARDS_ROUNDS = Math.max(1, Number(process.env.RDMA_BENCH_TOWARDS_ROUNDS ?? 3) | 0);

/** `fn` with environment variable `name` set to `value` (both sides' processes inherit it), then as it was. */
async function withEnv<T>(name: string, value: string, fn: () => Promise<T>): Promise<T> {
  const was = process.env[name];
  process.env[name] = value;
  try {
    return await fn();
  } finally {
    if (was === undefined) delete process.env[name];
    else process.env[name] = was;
  }
}

export async function runRdmaProcsBench(seconds: number): Promise<{ lines: string[]; json: Record<string, unknown> }> {
  const lines: string[] = [];
  const json: Record<string, unknown> = {};
  const two = os.cpus().length >= 2;
  lines.push(
    `rdma: two data planes in two processes over memif (${two ? 'a on CPU 0, b on CPU 1' : 'one CPU: both share it'}; a, the memif server unless said, writes and pings; memif udp-checksum: ${UDP_CKSUM})`,
  );
  for (const poll of ['adaptive', 'polling', 'interrupt']) {
    const w = await pairRun(poll, 'write', seconds);
    const pp = await pairRun(poll, 'pingpong', seconds);
    const f = (x: unknown, d = 2) => (typeof x === 'number' ? x.toFixed(d) : 'n/a');
    lines.push(
      `  cpu.poll ${poll.padEnd(9)} WRITE 64 KiB x ${OUTSTANDING} (segments of ${w.segment} bytes): ${f(w.gbps)} Gbit/s (${w.retransmits} retransmissions: ${w.fastRetransmits} fast; ${w.timeouts} timeouts, ${w.spurious} spurious; ${w.peerDuplicates} arrived twice; ` +
        `CPU per byte written: ${f(cpuNsPerByte(w, 'cpuMs'))} ns sender, ${f(cpuNsPerByte(w, 'peerCpuMs'))} ns receiver); ` +
        `SEND 64 B ping-pong RTT p50 ${f(pp.p50, 1)} us, p99 ${f(pp.p99, 1)} us, p99.9 ${f(pp.p999, 1)} us (${pp.n} round trips after ${PINGPONG_WARM_MS} ms of warm-up; ${gcText(pp.gc)})`,
    );
    json[poll] = {
      writeGbps: w.gbps,
      segmentBytes: w.segment,
      writeCpuNsPerByteSender: cpuNsPerByte(w, 'cpuMs'),
      writeCpuNsPerByteReceiver: cpuNsPerByte(w, 'peerCpuMs'),
      retransmits: w.retransmits,
      duplicates: w.peerDuplicates,
      rttP50Us: pp.p50,
      rttP99Us: pp.p99,
      rttP999Us: pp.p999,
      pingGc: pp.gc,
    };
  }
  const f = (x: unknown, d = 2) => (typeof x === 'number' ? x.toFixed(d) : 'n/a');
  // An adaptive WRITE run's line (after `what`, `rounds` before its CPU figures) and JSON figures.
  const writeFigures = (what: string, t: Record<string, unknown>, rounds = '') => {
    lines.push(
      `  cpu.poll adaptive  ${what}, segments of ${t.segment} bytes: ${f(t.gbps)} Gbit/s${rounds} ` +
        `(${t.retransmits} retransmissions, ${t.timeouts} timeouts; CPU per byte written: ${f(cpuNsPerByte(t, 'cpuMs'))} ns sender, ${f(cpuNsPerByte(t, 'peerCpuMs'))} ns receiver)`,
    );
    return {
      writeGbps: t.gbps,
      segmentBytes: t.segment,
      writeCpuNsPerByteSender: cpuNsPerByte(t, 'cpuMs'),
      writeCpuNsPerByteReceiver: cpuNsPerByte(t, 'peerCpuMs'),
      retransmits: t.retransmits,
    };
  };
  // One more adaptive WRITE: its line and its JSON figures.
  const writeAgain = async (what: string, mtu: number | null, writerClient: boolean) =>
    writeFigures(what, await pairRun('adaptive', 'write', seconds, false, mtu, writerClient));
  // The segment-size lever (issue 31): the default mode's WRITE again with the memif link pinned
  // at MTU 1500 (segments of 1444 bytes: every link before memif took its peer's MTU), against
  // the default above (a memif link between two rdma-graph data planes: drivers/memif.ts linkMtu).
  if (MTU === null)
    json.mtu1500 = await writeAgain(`memif mtu 1500 pinned: WRITE 64 KiB x ${OUTSTANDING}`, 1500, false);
  // The other direction: every row above writes from the memif server to the client (each byte
  // copied twice: from the MR into the client's buffers, then into the MR). Towards the server
  // also twice (into the client's transmit slots, then from there into the MR: the server leaves
  // a Write's payload where it is until DDP places it, graph/peer-windows.ts), and once more with
  // that off (RDMA_GRAPH_MEMIF_RX_DEFER=0: the server copies each frame whole first, three copies).
  // With the client's payloads copied into its pool by the tx node before they go, as before it
  // gathered them from the MR into its own transmit slots (RDMA_GRAPH_MEMIF_TX_GATHER=0), too.
  // The three run alternately, TOWARDS_ROUNDS rounds, and each line is the median run's, with
  // every round's rate: one run of each in turn had the in-place receive at 12.1 against 21.1
  // Gbit/s copied whole, where five alternated pairs right after put it ahead in every pair.
  const variants = [
    {
      key: 'towardsServer',
      env: null,
      what: `WRITE 64 KiB x ${OUTSTANDING} towards the memif server (the writer the client; payload placed from the client's buffers)`,
    },
    {
      key: 'towardsServerCopied',
      env: 'RDMA_GRAPH_MEMIF_RX_DEFER',
      what: `WRITE 64 KiB x ${OUTSTANDING} towards the memif server, RDMA_GRAPH_MEMIF_RX_DEFER=0 (frames copied whole on receive: each byte three times)`,
    },
    {
      key: 'towardsServerPoolCopy',
      env: 'RDMA_GRAPH_MEMIF_TX_GATHER',
      what: `WRITE 64 KiB x ${OUTSTANDING} towards the memif server, RDMA_GRAPH_MEMIF_TX_GATHER=0 (the client copies each payload into its pool, not into its transmit slots)`,
    },
  ] as const;
  const towards = variants.map(() => [] as Record<string, unknown>[]);
  for (let round = 0; round < TOWARDS_ROUNDS; round++)
    for (let j = 0; j < variants.length; j++) {
      const k = round % 2 === 0 ? j : variants.length - 1 - j;
      const env = variants[k].env;
      const run = () => pairRun('adaptive', 'write', seconds, false, null, true);
      towards[k].push(env === null ? await run() : await withEnv(env, '0', run));
    }
  variants.forEach((v, k) => {
    const sorted = [...towards[k]].sort((x, y) => Number(x.gbps) - Number(y.gbps));
    const rates = towards[k].map((t) => f(t.gbps)).join(', ');
    json[v.key] = writeFigures(v.what, sorted[Math.floor(sorted.length / 2)], ` (median of ${rates})`);
  });
  // RDMA_BENCH_LIVE=1: the live view's cost (issue 34). cpu.poll adaptive again, with no page and
  // with a page's event stream open on both daemons, alternated five times (a busy machine drifts),
  // the medians side by side and as ratios to no page; and one sample's cost, timed by itself.
  if (process.env.RDMA_BENCH_LIVE === '1') {
    const runs: Record<'none' | 'open', { gbps: number; p50: number; p99: number }[]> = { none: [], open: [] };
    for (let round = 0; round < 5; round++)
      for (const k of ['none', 'open'] as const) {
        const w = await pairRun('adaptive', 'write', seconds, k === 'open');
        const pp = await pairRun('adaptive', 'pingpong', seconds, k === 'open');
        runs[k].push({ gbps: Number(w.gbps), p50: Number(pp.p50), p99: Number(pp.p99) });
      }
    const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    const m = (k: 'none' | 'open', f: 'gbps' | 'p50' | 'p99') => median(runs[k].map((r) => r[f]));
    const each = (k: 'none' | 'open') => runs[k].map((r) => r.gbps.toFixed(2)).join(' ');
    lines.push(
      `  live view (cpu.poll adaptive, medians of 5 alternated runs; GET /live/events open on both daemons, read by curl): ` +
        `WRITE ${m('open', 'gbps').toFixed(2)} Gbit/s with (${each('open')}), ${m('none', 'gbps').toFixed(2)} without (${each('none')}): x${(m('open', 'gbps') / m('none', 'gbps')).toFixed(3)}; ` +
        `RTT p50 ${m('open', 'p50').toFixed(1)} us with, ${m('none', 'p50').toFixed(1)} without: x${(m('open', 'p50') / m('none', 'p50')).toFixed(3)}; ` +
        `p99 ${m('open', 'p99').toFixed(1)} us with, ${m('none', 'p99').toFixed(1)} without: x${(m('open', 'p99') / m('none', 'p99')).toFixed(3)}`,
    );
    const cost = await liveSampleCost();
    lines.push(
      `  live view: one sample (facade calls, frame, JSON of ${cost.frameBytes} bytes, 8 QPs) takes the data plane's thread ${cost.medianMs.toFixed(2)} ms (median; p90 ${cost.p90Ms.toFixed(2)} ms) every 500 ms while a page is open: ${(cost.shareOfThread * 100).toFixed(2)} % of it; none while no page is`,
    );
    json.livePage = { ...runs, sample: cost };
  }
  return { lines, json };
}

if (process.argv[2] === '--child') {
  const [role, sock, poll, kind, secs] = process.argv.slice(3);
  child(role as 'a' | 'b', sock, poll, kind, Number(secs)).then(
    () => process.exit(0),
    (e) => {
      process.stderr.write(`bench side ${role}: ${(e as Error).stack}\n`);
      process.exit(1);
    },
  );
}
