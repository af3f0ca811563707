/**
 * Incast through a bottleneck the kernel makes (issue 32): network namespaces s1, s2 (senders)
 * and r (receiver) joined by a bridge in a fourth, the switch, whose port towards r is shaped by
 * tbf (INCAST_RATE, default 200mbit; a drop-tail queue of INCAST_QUEUE bytes, default 64k).
 * Ours: a data plane on af_packet in each namespace (a process each), 2 senders x 4 QPs WRITEing
 * 64 KiB (4 outstanding per QP) into r for the run, with rdma.congestion auto (reno on
 * af_packet), cubic and none. The kernel's: iperf3 with the same 8 TCP flows (-P 4 from each
 * sender) through the same bottleneck. Per run: utilization of the bottleneck rate, Jain's
 * fairness index over the 8 flows' delivered bytes, bytes resent / bytes delivered, and RTT
 * p50/p99 over the idle RTT (ours: the QPs' smoothed RTT sampled every 10 ms over their srtt after
 * 10 lone 64-byte reads each before the load; iperf3: its per-flow mean RTT over ping's idle
 * RTT). Prints, never asserts. Both sides warm up for INCAST_WARMUP seconds (default 4) before
 * the measured ones: the data planes are fresh processes whose data path V8 compiles for
 * seconds (perf of a sender: TurboFan's threads took 28 % of its samples 2-4 s into the load,
 * 6 % at 12-14 s; the main thread ran baseline code meanwhile), and iperf3 -O leaves TCP's
 * slow start out likewise. Measured after 1 s of warm-up, reno's utilization was 0.62 and 0.34
 * of TCP's, after 4 s 0.88 and 0.92 (alternating, load average 8).
 *
 * Beside the figures, what explains them: per sender what held each QP back when sampled, the
 * CPU each process used (user and system) and how long its main thread waited for a CPU while
 * runnable (/proc/self/schedstat), where the graph's time went (its costliest nodes), the
 * bottleneck's packets sent and dropped (tc -s qdisc of the tbf), each data plane's interface
 * drops and its warn/error counters, and per QP losses, reductions, timeouts (spurious ones)
 * and HyStart++ exits.
 *
 * With ECN marking (unless INCAST_ECN=0): this kernel has no red, fq_codel, pie or netem (tc says
 * "Specified qdisc kind is unknown"), so the switch's port towards r leaves the bridge and
 * native/tools/ecn-switch forwards between it and the bridge, marking CE on ECT frames towards r
 * that find more than INCAST_ECN_K bytes (default 30000) in a virtual queue drained at
 * INCAST_ECN_GAMMA (default 0.95) x the bottleneck's rate: a phantom queue, which fills before
 * the tbf's real queue does. Rows: reno (auto) and dctcp with marking, and iperf3's TCP (cubic)
 * with net.ipv4.tcp_ecn=1 on the senders, through the same switch in the same run; each row
 * says how many ECT frames the switch saw and marked. Needs root, ip, tc, iperf3, and the
 * ecn-switch tool (npm run build).
 *
 *   node --import tsx bench/incast.ts --child ROLE IFACE ADDR CONGESTION
 * runs one data plane (ROLE r or s), talking JSON lines on stdin/stdout with the parent.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseConfig } from '../config/load.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { createDataplane } from '../dataplane/create.ts';
import { sendLimit } from '../nodes/rdma/congestion.ts';
import { ECN_SWITCH, EcnSwitch, type SwitchCounters } from './ecn-switch.ts';

const RATE = process.env.INCAST_RATE ?? '200mbit';
const QUEUE = process.env.INCAST_QUEUE ?? '64k';
const MSG = 65536;
const PER_SENDER = 4;
const OUTSTANDING = 4;
const SEGMENT = 1500 - 20 - 8 - 10 - 14;
const ROOT = path.resolve(import.meta.dirname, '..');
/** INCAST_TRACE=1: each sender prints a timeline (every 100 ms, per QP cwnd/pipe/srtt ms) to stderr. */
const TRACE = process.env.INCAST_TRACE === '1';
/** INCAST_ONLY_AUTO=1: only rdma.congestion auto (reno) beside TCP (quicker, for experiments). */
const ONLY_AUTO = process.env.INCAST_ONLY_AUTO === '1';
/**
 * INCAST_CPU: the data planes' `cpu:` mapping. By default `{ poll: interrupt }`: the three data
 * planes share the machine's cores (two here, with whatever else runs), and an adaptive one
 * keeps polling while a pacing timer or an ACK is due within idle-poll-us, which under load is
 * always: each stayed runnable the whole run and took a core's share whether it had work or
 * not, so the others (the receiver's ACK clock first) waited 40-80 % of the time for a CPU
 * (/proc schedstat). Sleeping until a packet or a timer, as the kernel's TCP does, utilization
 * rose in 6 of 6 alternating pairs (0.33-0.49 -> 0.50-0.87 of TCP's). "{}" keeps the config's
 * defaults.
 */
const CPU = process.env.INCAST_CPU ?? '{ poll: interrupt }';
/** INCAST_GSO=1: the data planes' af_packet sockets with UDP segmentation offload (af_packet.gso). */
const GSO = process.env.INCAST_GSO === '1' ? ', gso: true' : '';
/** INCAST_ECN=0 leaves out the rows with ECN marking at the bottleneck. */
const ECN = process.env.INCAST_ECN !== '0';
/** The marking switch's threshold (bytes in its virtual queue) and its drain (x the bottleneck's rate). */
const ECN_K = Number(process.env.INCAST_ECN_K ?? 30000);
const ECN_GAMMA = Number(process.env.INCAST_ECN_GAMMA ?? 0.95);
if (!(ECN_K >= 0) || !(ECN_GAMMA > 0 && ECN_GAMMA <= 1))
  throw new Error(
    `INCAST_ECN_K must be bytes >= 0 and INCAST_ECN_GAMMA in (0, 1], got "${process.env.INCAST_ECN_K}" and "${process.env.INCAST_ECN_GAMMA}"`,
  );
/** Seconds of load before the measured ones (INCAST_WARMUP, default 4; whole seconds: iperf3 -O). */
const WARMUP = Number(process.env.INCAST_WARMUP ?? 4);
if (!Number.isInteger(WARMUP) || WARMUP < 0)
  throw new Error(`INCAST_WARMUP must be a whole number of seconds >= 0, got "${process.env.INCAST_WARMUP}"`);

export interface IncastResult {
  text: string;
  json: Record<string, unknown>;
}

interface Figures {
  mbps: number;
  utilization: number;
  jain: number;
  resent: number;
  rttP50: number;
  rttP99: number;
  idleRttUs: number;
}

function rateBps(r: string): number {
  const m = /^(\d+(?:\.\d+)?)(k|m|g)?bit$/i.exec(r);
  if (!m) throw new Error(`INCAST_RATE must be like 200mbit or 1gbit, got "${r}"`);
  return Number(m[1]) * ({ k: 1e3, m: 1e6, g: 1e9 }[(m[2] ?? '').toLowerCase() as 'k'] ?? 1);
}

const jain = (xs: number[]) => {
  const s = xs.reduce((a, b) => a + b, 0);
  const q = xs.reduce((a, b) => a + b * b, 0);
  return q > 0 ? (s * s) / (xs.length * q) : 0;
};
/** The figures of one run from each flow's delivered bytes, the bytes resent, RTT samples and the idle RTT (us). */
function figures(
  delivered: number[],
  resent: number,
  rtts: number[],
  idle: number,
  seconds: number,
  rate: number,
): Figures {
  const total = delivered.reduce((a, b) => a + b, 0);
  return {
    mbps: (total * 8) / seconds / 1e6,
    utilization: (total * 8) / seconds / rate,
    jain: jain(delivered),
    resent: total > 0 ? resent / total : NaN,
    rttP50: pct(rtts, 0.5) / idle,
    rttP99: pct(rtts, 0.99) / idle,
    idleRttUs: idle,
  };
}
const pct = (xs: number[], p: number) => {
  const v = [...xs].sort((a, b) => a - b);
  return v.length ? v[Math.min(v.length - 1, Math.floor(p * v.length))] : NaN;
};

// ------------------------------------------------------------------ child: one data plane

async function child(role: string, iface: string, addr: string, congestion: string): Promise<void> {
  const dp = await createDataplane(
    parseConfig(
      `rdma: { congestion: ${congestion} }\ncpu: ${CPU}\ninterfaces:\n  - name: e0\n    driver: af_packet\n` +
        `    af_packet: { host-interface: ${iface}${GSO} }\n    address: ${addr}/24\n`,
      `incast-${role}.yaml`,
    ),
  );
  const say = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
  // What the data plane itself saw: its interface's drops and errors, and every counter of
  // warn or error severity (af_packet ring overruns, buffer starvation), with its CPU use.
  const graph = Dataplane.internals(dp).rdma.core.graph;
  /** The main thread's time on a CPU, waiting for one (runnable) and its timeslices (/proc schedstat, ns). */
  const sched = () => readFileSync('/proc/self/schedstat', 'utf8').trim().split(/\s+/).map(Number);
  let ifc0: Awaited<ReturnType<typeof dp.interfaces>>[number]['counters'] | null = null;
  const diagnostics = async (cpu0: NodeJS.CpuUsage, t0: number, sched0: number[], sleeps0: number) => {
    const s1 = sched();
    const ms = performance.now() - t0;
    const c1 = (await dp.interfaces())[0].counters;
    const c = (k: keyof typeof c1) => c1[k] - (ifc0 === null ? 0 : ifc0[k]);
    const errs = (await dp.errors())
      .flatMap((t) => t.rows)
      .filter((r) => r.count > 0 && r.severity !== 'info')
      .map((r) => `${r.node} ${r.reason} ${r.count}`);
    const u = process.cpuUsage(cpu0);
    // Where the graph's time went: its nodes' share of the wall clock, the costliest per packet.
    const snap = await dp.runtime();
    if (process.env.INCAST_RUNTIME === '1')
      process.stderr.write(
        `runtime ${role}: loops/s ${snap[0].loopsPerSec.toFixed(0)} vector rate ${snap[0].internalVectorRate.toFixed(2)}\n` +
          snap[0].rows
            .filter((r) => r.calls > 0)
            .map((r) => `  ${r.name} calls ${r.calls} vectors ${r.vectors} clocks ${r.clocks}`)
            .join('\n') +
          '\n',
      );
    const rows = snap.flatMap((t) => t.rows).filter((r) => r.clocks > 0);
    const cpn = graph.clock.clocksPerNs();
    const nodeNs = rows.reduce((a, r) => a + r.clocks, 0) / cpn;
    const top = rows
      .sort((a, b) => b.clocks - a.clocks)
      .slice(0, 4)
      .map(
        (r) =>
          `${r.name} ${(r.clocks / cpn / 1e6).toFixed(0)} ms (${r.vectors ? (r.clocks / cpn / r.vectors / 1e3).toFixed(1) : '-'} us/pkt)`,
      );
    return {
      cpu: (u.user + u.system) / 1e3 / ms,
      sched: `user ${(u.user / 10 / ms).toFixed(0)} % sys ${(u.system / 10 / ms).toFixed(0)} %, main thread on CPU ${((s1[0] - sched0[0]) / 1e4 / ms).toFixed(0)} %, runnable waiting ${((s1[1] - sched0[1]) / 1e4 / ms).toFixed(0)} %, ${s1[2] - sched0[2]} slices, graph slept ${graph.sleeps - sleeps0} times`,
      drops: `rx ${c('rxPackets')} pkts, rx drops ${c('rxDrops')} errors ${c('rxErrors')}; tx ${c('txPackets')} pkts, tx drops ${c('txDrops')} errors ${c('txErrors')}`,
      errors: errs,
      nodes: `nodes ${(nodeNs / 1e4 / ms).toFixed(0)} % of the time: ${top.join(', ')}`,
    };
  };
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const next = async () => JSON.parse((await lines.next()).value as string);
  while ((await dp.interfaces())[0].state !== 'up') await new Promise((r) => setTimeout(r, 20));
  const { rdma } = Dataplane.internals(dp);
  const n = role === 'r' ? 2 * PER_SENDER : PER_SENDER;
  const pd = rdma.createPd();
  const cq = rdma.createCq(4096);
  const mr = rdma.regMr(pd, MSG, ['local-write', 'remote-write', 'remote-read']);
  const qps = Array.from({ length: n }, () =>
    rdma.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 64, maxRecvWr: 16 }),
  );
  say({ qps: qps.map((q) => ({ qpn: q.qpn, psn: q.isn, stag: mr.stag })) });
  // The peers: [{addr, qpn, psn, stag}] for each of our QPs.
  const peers = (await next()) as { addr: string; qpn: number; psn: number; stag: number }[];
  qps.forEach((q, k) => {
    rdma.modifyQp(q, { state: 'init' });
    rdma.modifyQp(q, { state: 'rtr', remote: { address: peers[k].addr, port: peers[k].qpn }, rqPsn: peers[k].psn });
    rdma.modifyQp(q, { state: 'rts' });
  });
  say({ ready: true });
  const go = (await next()) as { seconds: number };
  /** The measured phase starts: counters, CPU and the graph's runtime from here. */
  let cpu0 = process.cpuUsage(),
    t0 = performance.now(),
    sched0 = sched(),
    sleeps0 = graph.sleeps;
  const startMeasuring = () => {
    graph.clearRuntime();
    graph.clearErrors();
    // The interface's counters from here (read at once: the driver's, not the graph's).
    void dp.interfaces().then((v) => (ifc0 = v[0].counters));
    cpu0 = process.cpuUsage();
    t0 = performance.now();
    sched0 = sched();
    sleeps0 = graph.sleeps;
  };
  if (role !== 'r') {
    const done = qps.map(() => 0),
      posted = qps.map(() => 0);
    const byQpn = new Map(qps.map((q, k) => [q.qpn, k]));
    const post = (k: number) => {
      while (posted[k] - done[k] < OUTSTANDING)
        rdma.postSend(qps[k], {
          wrId: posted[k]++,
          opcode: 'write',
          sg: [{ mr, offset: 0, length: MSG }],
          remote: { stag: peers[k].stag, offset: 0 },
        });
    };
    // Idle RTT: one small Read at a time on each QP before the load; the QPs' own estimate
    // (srtt), the same figure sampled under load. A Read, not a Write: its response carries the
    // ACK of the request at once, where a lone Write's ACK waits rdma.trp.ack-delay-us for data
    // going back (there is none) and the sample would count that wait as path.
    for (let i = 0; i < 10; i++)
      for (const q of qps) {
        const got = new Promise<void>((resolve) => {
          cq.onCompletion = (c) => {
            if (c.poll(8).length > 0) resolve();
          };
        });
        rdma.postSend(q, {
          wrId: -1,
          opcode: 'read',
          sg: [{ mr, offset: 0, length: 64 }],
          remote: { stag: peers[qps.indexOf(q)].stag, offset: 0 },
        });
        await got;
      }
    const idle = qps.map((q) => rdma.queryQp(q).rtt.srttUs);
    const srtt: number[] = [];
    // Each QP's counters when the measured phase starts (after the warm-up).
    const counters = () => ({
      done: [...done],
      retransmits: qps.map((q) => rdma.queryQp(q).counters.retransmits),
      losses: qps.map((q) => q.lossEvents),
      reductions: qps.map((q) => q.ccReductions + q.ecnReductions),
      timeouts: qps.map((q) => q.timeouts),
      spurious: qps.map((q) => q.spuriousTimeouts),
      hystart: qps.map((q) => q.hystartExits),
    });
    let base = counters();
    let measuring = false;
    // What holds each QP back when sampled (every 10 ms, between the graph's passes): nothing
    // left to send (application), the window (cwnd, RFC 6675's pipe), pacing, or none of these
    // (waiting for its turn); and a timeline every 100 ms (INCAST_TRACE=1).
    const clock = rdma.core.graph.clock;
    const limits = { app: 0, cwnd: 0, pace: 0, turn: 0, timer: 0, unscheduled: 0 };
    const timeline: string[] = [];
    const tLoad = performance.now();
    let ticks = 0;
    const sampler = setInterval(() => {
      const now = clock.nowNs();
      if (measuring)
        for (const q of qps) {
          srtt.push(rdma.queryQp(q).rtt.srttUs);
          const pipe = q.inFlight - q.sacked;
          if (q.sqNext === q.sqTail) limits.app++;
          else if (pipe >= sendLimit(q, rdma.core.window)) limits.cwnd++;
          else if (q.ccAlgo !== 0 && q.srttNs > 0 && q.paceNs > now) limits.pace++;
          else if (q.inTxQueue) limits.turn++;
          else if (q.paceTimer >= 0) limits.timer++;
          else limits.unscheduled++;
        }
      if (TRACE && ticks++ % 10 === 0)
        timeline.push(
          `${((performance.now() - tLoad) / 1000).toFixed(2)}s${measuring ? '' : ' (warm-up)'} ` +
            qps
              .map((q) => `${q.cwnd.toFixed(0)}/${(q.inFlight - q.sacked) | 0}/${(q.srttNs / 1e6).toFixed(1)}`)
              .join(' ') +
            ` losses ${qps.reduce((a, q) => a + q.lossEvents, 0)} red ${qps.reduce((a, q) => a + q.ccReductions + q.ecnReductions, 0)} rto ${qps.reduce((a, q) => a + q.timeouts, 0)}`,
        );
    }, 10);
    // The load: a warm-up of WARMUP seconds (not measured: the JIT compiles the data path and
    // the windows open, as TCP's path is warm in the kernel and iperf3 -O leaves its start out),
    // then the measured seconds.
    await new Promise<void>((resolve, reject) => {
      let end = performance.now() + WARMUP * 1000;
      cq.onCompletion = (c) => {
        for (const x of c.poll(256)) {
          if (x.status !== 'success') return reject(new Error(`write: ${x.status}`));
          done[byQpn.get(x.qpn) as number]++;
        }
        if (performance.now() >= end) {
          if (measuring) return resolve();
          measuring = true;
          base = counters();
          startMeasuring();
          say({ measuring: true });
          end = performance.now() + go.seconds * 1000;
        }
        for (let k = 0; k < n; k++) post(k);
      };
      for (let k = 0; k < n; k++) post(k);
    });
    clearInterval(sampler);
    const now = counters();
    const since = (k: Exclude<keyof typeof now, 'done'>) => now[k].map((v, i) => v - base[k][i]);
    say({
      delivered: now.done.map((d, i) => (d - base.done[i]) * MSG),
      // The measured phase as it ran: it ends at the first completion after its seconds, which
      // a sender short of CPU handles late.
      elapsed: (performance.now() - t0) / 1000,
      retransmits: since('retransmits'),
      cwnd: qps.map((q) => rdma.queryQp(q).congestion.cwnd),
      algorithm: rdma.queryQp(qps[0]).congestion.algorithm,
      srtt,
      idleRttUs: pct(idle, 0.5),
      limits,
      timeline,
      losses: since('losses'),
      reductions: since('reductions'),
      timeouts: since('timeouts'),
      spurious: since('spurious'),
      hystart: since('hystart'),
      ...(await diagnostics(cpu0, t0, sched0, sleeps0)),
    });
  } else {
    // The parent says when the senders' measured phase starts, then asks (the senders are done)
    // for the duplicates that arrived since: resends of segments we already had (spurious
    // resends: the originals were late, not lost).
    await next();
    const dup = () => qps.reduce((a, q) => a + rdma.queryQp(q).counters.duplicates, 0);
    const dup0 = dup();
    startMeasuring();
    await next();
    say({ duplicates: dup() - dup0, ...(await diagnostics(cpu0, t0, sched0, sleeps0)) });
  }
  await dp.close();
  process.exit(0);
}

// ------------------------------------------------------------------ parent

function sh(ns: string | null, ...cmd: string[]): string {
  const argv = ns === null ? cmd : ['ip', 'netns', 'exec', ns, ...cmd];
  return execFileSync(argv[0], argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function unavailable(): string | null {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'needs root';
  for (const t of ['ip', 'tc', 'iperf3', 'ping'])
    if (spawnSync('sh', ['-c', `command -v ${t}`]).status !== 0) return `${t} not installed`;
  return null;
}

interface Topology {
  ns: Record<'s1' | 's2' | 'r' | 'sw', string>;
  /** The marking switch while it is on the path (the ECN rows), else null. */
  marker: EcnSwitch | null;
  dev: Record<'s1' | 's2' | 'r', string>;
  ours: Record<'s1' | 's2' | 'r', string>;
  kernel: Record<'s1' | 's2' | 'r', string>;
}

function setUp(): Topology {
  const tag = process.pid.toString(36);
  const ns = { s1: `rgi${tag}s1`, s2: `rgi${tag}s2`, r: `rgi${tag}r`, sw: `rgi${tag}sw` };
  const dev = { s1: 'eth1', s2: 'eth1', r: 'eth1' };
  const t: Topology = {
    ns,
    marker: null,
    dev,
    ours: { s1: '10.80.0.1', s2: '10.80.0.2', r: '10.80.0.3' },
    kernel: { s1: '10.80.1.1', s2: '10.80.1.2', r: '10.80.1.3' },
  };
  for (const n of Object.values(ns)) sh(null, 'ip', 'netns', 'add', n);
  sh(ns.sw, 'ip', 'link', 'add', 'br0', 'type', 'bridge');
  for (const h of ['s1', 's2', 'r'] as const) {
    const outer = `p${h}`;
    sh(null, 'ip', 'link', 'add', `i${tag}${h}`, 'type', 'veth', 'peer', 'name', `o${tag}${h}`);
    sh(null, 'ip', 'link', 'set', `i${tag}${h}`, 'netns', ns[h], 'name', dev[h]);
    sh(null, 'ip', 'link', 'set', `o${tag}${h}`, 'netns', ns.sw, 'name', outer);
    sh(ns.sw, 'ip', 'link', 'set', outer, 'master', 'br0');
    sh(ns.sw, 'ip', 'link', 'set', outer, 'up');
    sh(ns[h], 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1');
    sh(ns[h], 'ip', 'addr', 'add', `${t.kernel[h]}/24`, 'dev', dev[h]);
    sh(ns[h], 'ip', 'link', 'set', dev[h], 'up');
    sh(ns[h], 'ip', 'link', 'set', 'lo', 'up');
  }
  sh(ns.sw, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1');
  // The marking switch's way into the bridge (pm, a bridge port; mm, its other end, the switch's).
  sh(ns.sw, 'ip', 'link', 'add', 'pm', 'type', 'veth', 'peer', 'name', 'mm');
  sh(ns.sw, 'ip', 'link', 'set', 'pm', 'master', 'br0');
  // A TCP sender's 64 KiB GSO packets are cut into segments on their way into the switch, as
  // the tbf cuts them on its own port: the switch sees (and marks) packets, not 45 at once.
  sh(ns.sw, 'ip', 'link', 'set', 'pm', 'gso_max_segs', '1');
  for (const d of ['pm', 'mm']) sh(ns.sw, 'ip', 'link', 'set', d, 'up');
  sh(ns.sw, 'ip', 'link', 'set', 'br0', 'up');
  // The bottleneck: the switch's port towards r.
  sh(ns.sw, 'tc', 'qdisc', 'add', 'dev', 'pr', 'root', 'tbf', 'rate', RATE, 'burst', '32k', 'limit', QUEUE);
  return t;
}

/** The bottleneck's counters (tc -s qdisc of the tbf): packets sent and dropped so far. */
function tbfStats(t: Topology): { sent: number; dropped: number; overlimits: number } {
  const out = sh(t.ns.sw, 'tc', '-s', 'qdisc', 'show', 'dev', 'pr');
  const m = /Sent \d+ bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)/.exec(out);
  if (!m) throw new Error(`incast: cannot read the tbf's counters from tc -s qdisc: ${out}`);
  return { sent: Number(m[1]), dropped: Number(m[2]), overlimits: Number(m[3]) };
}

/** pr leaves the bridge and the marking switch joins it to the bridge; the kernel's TCP asks for ECN. */
async function markingOn(t: Topology, rate: number): Promise<void> {
  sh(t.ns.sw, 'ip', 'link', 'set', 'pr', 'nomaster');
  t.marker = new EcnSwitch(['mm', 'pr', String(rate), String(ECN_K), String(ECN_GAMMA)], t.ns.sw);
  await t.marker.ready();
  for (const h of ['s1', 's2', 'r'] as const) sh(t.ns[h], 'sysctl', '-qw', 'net.ipv4.tcp_ecn=1');
}

function markingOff(t: Topology): void {
  t.marker?.p.kill('SIGTERM');
  t.marker = null;
  sh(t.ns.sw, 'ip', 'link', 'set', 'pr', 'master', 'br0');
  for (const h of ['s1', 's2', 'r'] as const) sh(t.ns[h], 'sysctl', '-qw', 'net.ipv4.tcp_ecn=2');
}

/** What the bottleneck did between two snapshots: the tbf's packets and drops, the switch's marks. */
interface PathSnapshot {
  tbf: ReturnType<typeof tbfStats>;
  sw: SwitchCounters | null;
}
async function snapshot(t: Topology): Promise<PathSnapshot> {
  return { tbf: tbfStats(t), sw: t.marker === null ? null : await t.marker.counters() };
}
function pathSays(a: PathSnapshot, b: PathSnapshot): string {
  const tbf = `bottleneck (tbf) sent ${b.tbf.sent - a.tbf.sent} pkts, dropped ${b.tbf.dropped - a.tbf.dropped}`;
  if (a.sw === null || b.sw === null) return tbf;
  const ect = b.sw.ect - a.sw.ect,
    marked = b.sw.marked - a.sw.marked;
  return `${tbf}; marking switch: ${b.sw.ab.frames - a.sw.ab.frames} frames towards r, ${ect} ECT, ${marked} marked CE (${ect > 0 ? ((100 * marked) / ect).toFixed(1) : '-'} %), ${b.sw.ab.dropped - a.sw.ab.dropped} refused by the tbf`;
}

function tearDown(t: Topology): void {
  t.marker?.p.kill('SIGTERM');
  for (const n of Object.values(t.ns)) spawnSync('ip', ['netns', 'del', n]);
}

class Child {
  readonly p: ChildProcess;
  private readonly lines: AsyncIterator<string>;
  constructor(t: Topology, role: 's1' | 's2' | 'r', congestion: string) {
    this.p = spawn(
      'ip',
      [
        'netns',
        'exec',
        t.ns[role],
        process.execPath,
        '--import',
        'tsx',
        path.join(ROOT, 'bench/incast.ts'),
        '--child',
        role === 'r' ? 'r' : 's',
        t.dev[role],
        t.ours[role],
        congestion,
      ],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    this.lines = createInterface({ input: this.p.stdout! })[Symbol.asyncIterator]();
  }
  async read(): Promise<Record<string, unknown>> {
    const l = await this.lines.next();
    if (l.done) throw new Error('an incast data plane exited early');
    return JSON.parse(l.value) as Record<string, unknown>;
  }
  send(o: unknown): void {
    this.p.stdin!.write(JSON.stringify(o) + '\n');
  }
}

type QpLine = { qpn: number; psn: number; stag: number };

async function ours(
  t: Topology,
  congestion: string,
  seconds: number,
  rate: number,
): Promise<Figures & { algorithm: string; held: string }> {
  const r = new Child(t, 'r', congestion),
    s = [new Child(t, 's1', congestion), new Child(t, 's2', congestion)];
  try {
    const rq = ((await r.read()).qps as QpLine[]).slice();
    const sq = [(await s[0].read()).qps as QpLine[], (await s[1].read()).qps as QpLine[]];
    r.send([...sq[0].map((q) => ({ addr: t.ours.s1, ...q })), ...sq[1].map((q) => ({ addr: t.ours.s2, ...q }))]);
    s[0].send(rq.slice(0, PER_SENDER).map((q) => ({ addr: t.ours.r, ...q })));
    s[1].send(rq.slice(PER_SENDER).map((q) => ({ addr: t.ours.r, ...q })));
    for (const c of [r, ...s]) await c.read(); // ready
    for (const c of [r, ...s]) c.send({ seconds });
    // Both senders' warm-up over: the measured phase.
    for (const c of s) await c.read();
    r.send({ measuring: true });
    const path0 = await snapshot(t);
    const res = [await s[0].read(), await s[1].read()];
    const path1 = await snapshot(t);
    r.send({ report: true });
    const rx = await r.read();
    const duplicates = rx.duplicates as number;
    // Each sender's bytes over the seconds it measured, as if over the nominal ones.
    const delivered = res.flatMap((x) => (x.delivered as number[]).map((b) => (b * seconds) / (x.elapsed as number)));
    const resent = res
      .flatMap((x) => (x.retransmits as number[]).map((n) => (n * SEGMENT * seconds) / (x.elapsed as number)))
      .reduce((a, b) => a + b, 0);
    const srtt = res.flatMap((x) => x.srtt as number[]).filter((x) => x > 0);
    const idle = Math.min(...res.map((x) => x.idleRttUs as number));
    const lim = { app: 0, cwnd: 0, pace: 0, turn: 0, timer: 0, unscheduled: 0 };
    for (const x of res)
      for (const k of Object.keys(lim) as (keyof typeof lim)[]) lim[k] += (x.limits as typeof lim)[k];
    const all = lim.app + lim.cwnd + lim.pace + lim.turn + lim.timer + lim.unscheduled || 1;
    const sum = (k: string) => res.flatMap((x) => x[k] as number[]).join(' ');
    const held =
      `held back by: cwnd ${((100 * lim.cwnd) / all).toFixed(0)} %, pacing ${((100 * lim.pace) / all).toFixed(0)} %, ` +
      `application ${((100 * lim.app) / all).toFixed(0)} %, its turn (queued ${((100 * lim.turn) / all).toFixed(0)} %, ` +
      `pacing timer late ${((100 * lim.timer) / all).toFixed(0)} %, unscheduled ${((100 * lim.unscheduled) / all).toFixed(0)} %); ` +
      `CPU per sender ${res.map((x) => ((x.cpu as number) * 100).toFixed(0)).join(', ')} % of a core; ` +
      `resent that had arrived (duplicates at the receiver) ${(
        (100 * duplicates) /
        Math.max(
          1,
          res.flatMap((x) => x.retransmits as number[]).reduce((a, b) => a + b, 0),
        )
      ).toFixed(0)} %; ` +
      `receiver CPU ${((rx.cpu as number) * 100).toFixed(0)} %; graph (s1 | s2 | r): ${[...res, rx].map((x) => x.nodes as string).join(' | ')}; scheduling (s1 | s2 | r): ${[...res, rx].map((x) => x.sched as string).join(' | ')}; ${pathSays(path0, path1)}; ` +
      `data planes: ${[...res, rx].map((x) => `${x.drops as string}${(x.errors as string[]).length ? ` [${(x.errors as string[]).join(', ')}]` : ''}`).join(' | ')}; ` +
      `per QP losses [${sum('losses')}] reductions [${sum('reductions')}] timeouts [${sum('timeouts')}] (spurious [${sum('spurious')}]) HyStart++ exits [${sum('hystart')}]`;
    if (TRACE)
      res.forEach((x, k) =>
        process.stderr.write(
          `incast ${congestion} s${k + 1} (cwnd/pipe/srtt ms per QP):\n  ${(x.timeline as string[]).join('\n  ')}\n`,
        ),
      );
    return {
      algorithm: res[0].algorithm as string,
      held,
      ...figures(delivered, resent, srtt, idle, seconds, rate),
    };
  } finally {
    for (const c of [r, ...s]) c.p.kill('SIGKILL');
  }
}

async function iperf(t: Topology, seconds: number, rate: number): Promise<Figures & { held: string }> {
  const ping = sh(t.ns.s1, 'ping', '-c', '5', '-i', '0.2', '-q', t.kernel.r);
  const m = /= [\d.]+\/([\d.]+)\//.exec(ping);
  const idle = m ? Number(m[1]) * 1000 : NaN;
  const servers = [5201, 5202].map((port) =>
    spawn('ip', ['netns', 'exec', t.ns.r, 'iperf3', '-s', '-1', '-p', String(port)], { stdio: 'ignore' }),
  );
  await new Promise((r) => setTimeout(r, 300));
  let path0 = await snapshot(t);
  // iperf3 -O leaves the warm-up out of its figures; the bottleneck's counters likewise.
  const warm = setTimeout(() => void snapshot(t).then((x) => (path0 = x)), WARMUP * 1000);
  const clients = (['s1', 's2'] as const).map(
    (h, k) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        const c = spawn('ip', [
          'netns',
          'exec',
          t.ns[h],
          'iperf3',
          '-c',
          t.kernel.r,
          '-p',
          String(5201 + k),
          '-P',
          String(PER_SENDER),
          '-t',
          String(seconds),
          '-O',
          String(WARMUP),
          '-J',
        ]);
        let out = '';
        c.stdout.on('data', (d: Buffer) => (out += d.toString()));
        c.on('close', () => {
          try {
            resolve(JSON.parse(out) as Record<string, unknown>);
          } catch (e) {
            reject(new Error(`iperf3: ${(e as Error).message}: ${out.slice(0, 200)}`));
          }
        });
      }),
  );
  const res = await Promise.all(clients);
  clearTimeout(warm);
  const path1 = await snapshot(t);
  for (const s of servers) s.kill();
  type Stream = { sender: { bytes: number; retransmits: number; mean_rtt: number } };
  const streams = res.flatMap((x) => ((x.end as { streams: Stream[] }).streams ?? []).map((s) => s.sender));
  const delivered = res.flatMap((x) =>
    ((x.end as { streams: { receiver: { bytes: number } }[] }).streams ?? []).map((s) => s.receiver.bytes),
  );
  const resent = streams.reduce((a, s) => a + s.retransmits, 0) * 1448;
  return {
    ...figures(
      delivered,
      resent,
      streams.map((s) => s.mean_rtt),
      idle,
      seconds,
      rate,
    ),
    held: pathSays(path0, path1),
  };
}

export async function runIncastBench(opts: { seconds: number }): Promise<IncastResult> {
  const why = unavailable();
  if (why !== null) return { text: `incast: skipped (${why})`, json: { bench: 'incast', skipped: why } };
  const rate = rateBps(RATE);
  const seconds = Math.max(3, opts.seconds);
  const t = setUp();
  try {
    const reno = await ours(t, 'auto', seconds, rate);
    const cubic = ONLY_AUTO ? null : await ours(t, 'cubic', seconds, rate);
    const none = ONLY_AUTO ? null : await ours(t, 'none', seconds, rate);
    const tcp = await iperf(t, seconds, rate);
    let ecn: {
      reno: Awaited<ReturnType<typeof ours>>;
      dctcp: Awaited<ReturnType<typeof ours>> | null;
      tcp: Awaited<ReturnType<typeof iperf>>;
    } | null = null;
    const ecnWhy = !ECN
      ? 'INCAST_ECN=0'
      : !existsSync(ECN_SWITCH)
        ? `${ECN_SWITCH} was not built (npm run build)`
        : null;
    if (ecnWhy === null) {
      await markingOn(t, rate);
      try {
        ecn = {
          reno: await ours(t, 'auto', seconds, rate),
          dctcp: ONLY_AUTO ? null : await ours(t, 'dctcp', seconds, rate),
          tcp: await iperf(t, seconds, rate),
        };
      } finally {
        markingOff(t);
      }
    }
    const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
    const row = (name: string, x: Figures) =>
      `  ${name.padEnd(28)} ${f(x.mbps, 0).padStart(6)} Mbit/s  util ${f(x.utilization)}  Jain ${f(x.jain, 3)}  ` +
      `resent ${f(100 * x.resent, 2)} %  RTT p50 x${f(x.rttP50, 1)} p99 x${f(x.rttP99, 1)} (idle ${f(x.idleRttUs, 0)} us)`;
    const text = [
      `incast: 2 senders x ${PER_SENDER} flows into 1 receiver through tbf ${RATE} (queue ${QUEUE}), ${seconds} s each after ${WARMUP} s of warm-up; data planes cpu: ${CPU}`,
      row(`rdma-graph ${reno.algorithm} (auto)`, reno),
      `    ${reno.held}`,
      ...(cubic === null || none === null
        ? ['  cubic and none: not run (INCAST_ONLY_AUTO=1)']
        : [
            row(`rdma-graph ${cubic.algorithm}`, cubic),
            `    ${cubic.held}`,
            row(`rdma-graph ${none.algorithm}`, none),
            `    ${none.held}`,
          ]),
      row('kernel TCP (iperf3 -P 4 x 2)', tcp),
      `    ${tcp.held}`,
      `  ours/TCP: utilization ${f(reno.utilization / tcp.utilization)}`,
      ...(ecn === null
        ? [`  with ECN marking: not run (${ecnWhy})`]
        : [
            `  with ECN marking (ecn-switch in front of the tbf: CE on ECT frames finding > ${ECN_K} bytes in a virtual queue drained at ${ECN_GAMMA} x ${RATE}):`,
            row(`rdma-graph ${ecn.reno.algorithm} (auto) + ECN`, ecn.reno),
            `    ${ecn.reno.held}`,
            ...(ecn.dctcp === null
              ? ['  dctcp: not run (INCAST_ONLY_AUTO=1)']
              : [row(`rdma-graph ${ecn.dctcp.algorithm} + ECN`, ecn.dctcp), `    ${ecn.dctcp.held}`]),
            row('kernel TCP, tcp_ecn=1 + ECN', ecn.tcp),
            `    ${ecn.tcp.held}`,
            `  ours/TCP with ECN: utilization ${f(ecn.reno.utilization / ecn.tcp.utilization)}${ecn.dctcp === null ? '' : ` (dctcp ${f(ecn.dctcp.utilization / ecn.tcp.utilization)})`}`,
          ]),
    ].join('\n');
    return {
      text,
      json: {
        bench: 'incast',
        rate: RATE,
        queue: QUEUE,
        seconds,
        reno,
        cubic,
        none,
        tcp,
        ecn: ecn === null ? null : { k: ECN_K, gamma: ECN_GAMMA, ...ecn },
      },
    };
  } finally {
    tearDown(t);
  }
}

if (process.argv[2] === '--child') {
  const [role, iface, addr, congestion] = process.argv.slice(3);
  child(role, iface, addr, congestion).catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
