/**
 * memif throughput (root, dpdk-testpmd; prints, never asserts):
 *
 *   (a) baseline   testpmd txonly (client, CPU 1) -> testpmd rxonly (server, CPU 0): DPDK's own
 *                  memif receive, nothing above it
 *   (b) l4         testpmd txonly (client, CPU 1) -> rdma-graph (server, this process on CPU 0):
 *                  64-byte UDP frames through memif-input, ethernet-input, ip4-input and
 *                  udp4-input, dropped there (no listener on the port)
 *   (c) spine      RDMA WRITE segments (70-byte frames, consecutive PSNs; from bench/memif-gen.ts,
 *                  a memif client process on CPU 1, since testpmd cannot make TRP) into a QP of
 *                  rdma-graph: memif-input ... udp4-input, trp-input, ddp-input (placed in an
 *                  MR), rdmap-input, qp-dispatch
 *   copy vs zero copy  testpmd txonly as server -> rdma-graph as client, l4 path as in (b), 64-
 *                  and 1500-byte frames, with a memfd pool (the client registers it: zero copy)
 *                  and with the same kind of pool offered without its fd (the client copies)
 *
 * Mpps counted at the node each case ends in over the measured window; ratios to (a). Then what
 * a packet cost on the receive path of (b) and (c), by the engine's per-node clocks: the rate of
 * (c) also follows its generator's speed, these do not. Ends with one JSON line
 * {"bench":"memif","baselineMpps":N,"l4Mpps":N,"spineMpps":N,"l4MemifInputNs":N,"l4PathNs":N,
 * "spineMemifInputNs":N,"spinePathNs":N}.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Driver } from '../drivers/driver.ts';
import { MemifDriver } from '../drivers/memif.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { BufferPool, Graph } from '../graph/index.ts';
import { allocBufferMemory } from '../graph/memory.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import { registerRdma } from '../nodes/rdma/stack.ts';
import type { Rdma } from '../nodes/rdma/stack.ts';
import { Testpmd, testpmdUnavailable } from '../test/helpers-dpdk.ts';

export interface MemifBenchResult {
  text: string;
  json: Record<string, unknown>;
}

export const GEN = fileURLToPath(new URL('./memif-gen.ts', import.meta.url));
export const MAC = '02:00:00:00:00:01';

export function pin(cpus: string): void {
  spawnSync('taskset', ['-a', '-p', '-c', cpus, String(process.pid)], { stdio: 'ignore' });
}

/** A data plane with one memif interface, the L2-L4 nodes and (rdma) the RDMA layer. */
function plane(pool: BufferPool, socket: string, role: 'server' | 'client', rdma: boolean) {
  return planeOn(pool, new MemifDriver('memif0', { socket, role, mac: MAC }), { rdma });
}

/**
 * A polling data plane with one interface on `d` (10.0.0.1, the peer 10.0.0.2 static), the
 * L2-L4 nodes and (rdma) the RDMA layer; `next`: where its packets go (default ethernet-input).
 */
export function planeOn<D extends Driver>(pool: BufferPool, d: D, opts: { rdma?: boolean; next?: string } = {}) {
  const g = new Graph({ pool, mode: 'polling' });
  const net = registerL2L4(g);
  const ifs = new Interfaces(g);
  const itf = ifs.add(d, { next: opts.next });
  net.addInterface({
    index: itf.index,
    name: d.name,
    mac: d.mac,
    address: '10.0.0.1/24',
    mtu: d.mtu,
    output: itf.output.name,
    neighbors: [{ address: '10.0.0.2', mac: '02:00:00:00:00:02' }],
  });
  const r = opts.rdma ? registerRdma(g, net) : null;
  g.build();
  return {
    g,
    d,
    pool,
    ifs,
    rdma: r,
    close: () => {
      g.close();
      ifs.closeAll();
    },
  };
}

/** Run passes until the link is up (servicing the control channel). */
export async function untilUp(g: Graph, d: { linkUp(): boolean; info?(): unknown }, what: string): Promise<void> {
  const end = Date.now() + 15000;
  while (!d.linkUp()) {
    for (let k = 0; k < 100; k++) g.runPass();
    if (Date.now() > end) throw new Error(`bench memif: no link for ${what}: ${JSON.stringify(d.info?.() ?? null)}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** ns per packet of each node that saw packets in the last measure() window (memif-input: and packets per call). */
let lastBreakdown = '';
export const lastNodeBreakdown = (): string => lastBreakdown;
/** The same, by node name. */
let lastNs = new Map<string, number>();

/**
 * The receive path's own cost in the last window: ns per packet of memif-input, and the sum over
 * `path`'s nodes. The engine's clocks, not the rate: the rate of (c) also follows its generator's
 * speed, these only what each packet cost here.
 */
function pathNs(path: readonly string[]): { inputNs: number; pathNs: number } {
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return { inputNs: r3(lastNs.get(path[0]) ?? 0), pathNs: r3(path.reduce((a, n) => a + (lastNs.get(n) ?? 0), 0)) };
}
const L4_PATH = ['memif-input', 'ethernet-input', 'ip4-input', 'udp4-input'] as const;
const SPINE_PATH = [...L4_PATH, 'trp-input', 'ddp-input', 'rdmap-input', 'qp-dispatch'] as const;

/** Packets into `node` per second over `seconds`, after a warm-up, running passes in a tight loop. */
export async function measure(g: Graph, node: string, seconds: number): Promise<number> {
  const warm = performance.now();
  while (performance.now() - warm < 300) for (let k = 0; k < 64; k++) g.runPass();
  g.clearRuntime();
  const v0 = g.nodeCounters(node).vectors;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) {
    for (let k = 0; k < 256; k++) g.runPass();
  }
  const dt = (performance.now() - t0) / 1000;
  const cpn = g.clock.clocksPerNs();
  const seen = g.nodes.map((rt) => ({ name: rt.name, c: g.nodeCounters(rt.name) })).filter((x) => x.c.vectors > 0);
  lastNs = new Map(seen.map((x) => [x.name, x.c.clocks / cpn / x.c.vectors]));
  lastBreakdown = seen
    .map(
      (x) =>
        `${x.name} ${(x.c.clocks / cpn / x.c.vectors).toFixed(1)}${x.name === 'memif-input' ? ` (${(x.c.vectors / Math.max(x.c.calls, 1)).toFixed(1)}/call)` : ''}`,
    )
    .join(', ');
  return (g.nodeCounters(node).vectors - v0) / dt / 1e6;
}

export const TXONLY = ['--txpkts=64', `--eth-peer=0,${MAC}`, '--tx-ip=10.0.0.2,10.0.0.1', '--tx-udp=4000,9'];

export async function baseline(dir: string, seconds: number): Promise<number> {
  const sock = path.join(dir, 'base.sock');
  const rx = new Testpmd({
    memif: `role=server,socket=${sock}`,
    mode: 'rxonly',
    lcores: '0@0,1@0',
    maxSeconds: seconds + 60,
  });
  await rx.ready(); // listening before the client starts: DPDK's client connects once, at port start
  const tx = new Testpmd({
    memif: `role=client,socket=${sock}`,
    mode: 'txonly',
    lcores: '0@1,1@1',
    args: TXONLY,
    maxSeconds: seconds + 60,
  });
  try {
    await tx.ready();
    rx.send('start');
    tx.send('start');
    await new Promise((r) => setTimeout(r, 1000));
    const a = await rx.stats();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const b = await rx.stats();
    return (b.rxPackets - a.rxPackets) / ((performance.now() - t0) / 1000) / 1e6;
  } finally {
    await tx.quit();
    await rx.quit();
  }
}

async function l4Server(dir: string, seconds: number): Promise<number> {
  const sock = path.join(dir, 'l4.sock');
  const p = plane(
    new BufferPool(allocBufferMemory({ count: 16384, name: 'bench-memif' })),
    `@${sock}`,
    'server',
    false,
  );
  try {
    const mpps = await txonlyInto(p.g, p.d, sock, seconds);
    breakdown.l4 = lastBreakdown;
    costs.l4 = pathNs(L4_PATH);
    return mpps;
  } finally {
    p.close();
  }
}

/**
 * testpmd txonly as the memif client of `sock` (CPU 1) into the graph `g` whose server interface
 * `d` listens there: Mpps reaching udp4-input. The server must listen first (DPDK's client
 * connects once, at port start).
 */
export async function txonlyInto(g: Graph, d: { linkUp(): boolean }, sock: string, seconds: number): Promise<number> {
  const tx = new Testpmd({
    memif: `role=client,socket=${sock}`,
    mode: 'txonly',
    lcores: '0@1,1@1',
    args: TXONLY,
    maxSeconds: seconds + 60,
  });
  try {
    await tx.ready();
    await untilUp(g, d, 'l4');
    await tx.start();
    return await measure(g, 'udp4-input', seconds);
  } finally {
    await tx.quit();
  }
}

const breakdown = { l4: '', spine: '' };
const costs = { l4: { inputNs: 0, pathNs: 0 }, spine: { inputNs: 0, pathNs: 0 } };

async function l4Client(
  dir: string,
  seconds: number,
  zeroCopy: boolean,
  size: number,
): Promise<{ mpps: number; zeroCopy: boolean }> {
  const sock = path.join(dir, `cl-${zeroCopy}-${size}.sock`);
  const mem = allocBufferMemory({ count: 16384, name: 'bench-memif-client' });
  const p = plane(new BufferPool(zeroCopy ? mem : { ...mem, fd: -1 }), `@${sock}`, 'client', false);
  const args = TXONLY.map((a) => (a === '--txpkts=64' ? `--txpkts=${size}` : a));
  const tx = new Testpmd({
    memif: `role=server,socket=${sock}`,
    mode: 'txonly',
    lcores: '0@1,1@1',
    args,
    maxSeconds: seconds + 60,
  });
  try {
    await tx.ready();
    await untilUp(p.g, p.d, 'l4 client');
    const zc = p.d.info().zeroCopy;
    tx.send('start');
    return { mpps: await measure(p.g, 'udp4-input', seconds), zeroCopy: zc };
  } finally {
    await tx.quit();
    p.close();
  }
}

async function spine(dir: string, seconds: number): Promise<SpineResult> {
  const sock = `@${path.join(dir, 'spine.sock')}`;
  const p = plane(new BufferPool(allocBufferMemory({ count: 16384, name: 'bench-memif-spine' })), sock, 'server', true);
  try {
    const r = await spineOn(p.g, p.d, p.rdma!, sock, seconds);
    costs.spine = pathNs(SPINE_PATH);
    return r;
  } finally {
    p.close();
  }
}

export type SpineResult = { mpps: number; genMpps: number; drops: number };

/**
 * Case (c) on any interface that a memif client can reach at `sock` (our memif server, DPDK's
 * net_memif server): a QP on `rdma`, bench/memif-gen.ts on CPU 1 sending WRITE segments to it,
 * Mpps at qp-dispatch. The caller closes the graph.
 */
export async function spineOn(
  g: Graph,
  link: { linkUp(): boolean },
  rdma: Rdma,
  sock: string,
  seconds: number,
): Promise<SpineResult> {
  const pd = rdma.createPd();
  const cq = rdma.createCq(64);
  const mr = rdma.regMr(pd, 4096, ['local-write', 'remote-write']);
  const QPN = 20001,
    SPORT = 31000;
  const qp = rdma.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16, port: QPN });
  rdma.modifyQp(qp, { state: 'init' });
  rdma.modifyQp(qp, { state: 'rtr', remote: { address: '10.0.0.2', port: SPORT }, rqPsn: 0 });
  rdma.modifyQp(qp, { state: 'rts', sqPsn: 0 }); // the generator starts at PSN 0 and acknowledges 0
  const gen = spawn(
    'taskset',
    [
      '-c',
      '1',
      process.execPath,
      '--import',
      'tsx',
      GEN,
      sock,
      String(mr.stag),
      String(QPN),
      String(SPORT),
      String(seconds + 3),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  gen.stdout!.on('data', (d) => (out += d));
  const exited = new Promise<void>((r) => gen.on('exit', () => r()));
  try {
    await untilUp(g, link, 'spine');
    const d0 = g.nodeCounters('error-drop').vectors;
    const mpps = await measure(g, 'qp-dispatch', seconds);
    breakdown.spine = lastBreakdown;
    const drops = g.nodeCounters('error-drop').vectors - d0;
    // Keep servicing the link until the generator's time is up and it leaves.
    const end = Date.now() + 10000;
    while (link.linkUp() && gen.exitCode === null && Date.now() < end) {
      for (let k = 0; k < 256; k++) g.runPass();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    const r = JSON.parse(out.trim().split('\n').pop() || '{}') as { sent?: number; seconds?: number };
    return { mpps, genMpps: (r.sent ?? 0) / (r.seconds ?? 1) / 1e6, drops };
  } finally {
    gen.kill('SIGKILL');
  }
}

export async function runMemifBench(opts: { seconds?: number } = {}): Promise<MemifBenchResult> {
  const seconds = opts.seconds ?? 2;
  const why = testpmdUnavailable();
  if (why) {
    return { text: `memif: skipped (${why})`, json: { bench: 'memif', skipped: why } };
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-memif-'));
  const lines: string[] = [];
  try {
    const base = await baseline(dir, seconds);
    pin('0');
    const l4 = await l4Server(dir, seconds);
    const spineR = await spine(dir, seconds).catch((e) => ({ mpps: 0, genMpps: 0, drops: -1, error: String(e) }));
    const zc = await l4Client(dir, seconds, true, 64);
    const cp = await l4Client(dir, seconds, false, 64);
    const zcBig = await l4Client(dir, seconds, true, 1500);
    const cpBig = await l4Client(dir, seconds, false, 1500);
    const ratio = (x: number) => (base > 0 ? (x / base).toFixed(2) : '-');
    lines.push(
      `memif, 1 queue pair, ring 1024, ${seconds} s per case (testpmd ${'0@0/0@1'}, rdma-graph pinned to CPU 0):`,
      `  (a) baseline  testpmd txonly -> testpmd rxonly            ${base.toFixed(2).padStart(7)} Mpps`,
      `  (b) l4        testpmd txonly -> rdma-graph udp4-input     ${l4.toFixed(2).padStart(7)} Mpps  ${ratio(l4)} x (a)   (server: copies)`,
      `  (c) spine     WRITE segments -> rdma-graph qp-dispatch    ${spineR.mpps.toFixed(2).padStart(7)} Mpps  ${ratio(spineR.mpps)} x (a)   (generator offered ${spineR.genMpps.toFixed(2)} Mpps, ${spineR.drops} dropped${'error' in spineR ? `; failed: ${spineR.error}` : ''})`,
      `  client l4, zero copy (pool registered as region 1)  64 B ${zc.mpps.toFixed(2).padStart(7)} Mpps, 1500 B ${zcBig.mpps.toFixed(2).padStart(6)} Mpps (zeroCopy ${zc.zeroCopy && zcBig.zeroCopy})`,
      `  client l4, copy (the pool offered without its fd)   64 B ${cp.mpps.toFixed(2).padStart(7)} Mpps, 1500 B ${cpBig.mpps.toFixed(2).padStart(6)} Mpps (zeroCopy ${cp.zeroCopy || cpBig.zeroCopy})`,
      `  goal: (c) >= 10 Mpps and >= 0.5 x (a)`,
      `  ns/packet per node, (b): ${breakdown.l4}`,
      `  ns/packet per node, (c): ${breakdown.spine}`,
      `  receive path, ns/packet: (b) ${costs.l4.pathNs.toFixed(1)} (memif-input ${costs.l4.inputNs.toFixed(1)}), (c) ${costs.spine.pathNs.toFixed(1)} (memif-input ${costs.spine.inputNs.toFixed(1)})`,
    );
    const r3 = (x: number) => Math.round(x * 1000) / 1000;
    return {
      text: lines.join('\n'),
      json: {
        bench: 'memif',
        baselineMpps: r3(base),
        l4Mpps: r3(l4),
        spineMpps: r3(spineR.mpps),
        l4MemifInputNs: costs.l4.inputNs,
        l4PathNs: costs.l4.pathNs,
        spineMemifInputNs: costs.spine.inputNs,
        spinePathNs: costs.spine.pathNs,
      },
    };
  } finally {
    pin('0-' + (os.cpus().length - 1));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const i = args.indexOf('--seconds');
  const r = await runMemifBench({ seconds: i >= 0 ? Number(args[i + 1]) : undefined });
  console.log(r.text);
  console.log(JSON.stringify(r.json));
}
