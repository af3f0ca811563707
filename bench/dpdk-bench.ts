/**
 * dpdk driver throughput (root, libdpdk-dev and dpdk-testpmd; prints, never asserts):
 *
 *   (a) baseline   testpmd txonly (memif client, CPU 1) -> testpmd rxonly (memif server, CPU 0):
 *                  DPDK's own net_memif receive, nothing above it (as in the memif bench)
 *   (b) l4         testpmd txonly (memif client, CPU 1) -> our dpdk interface, DPDK's net_memif
 *                  server on the process's mbuf mempool (this process on CPU 0): 64-byte UDP
 *                  frames through dpdk-input, ethernet-input, ip4-input, udp4-input (dropped
 *                  there: no listener)
 *   (c) spine      RDMA WRITE segments from bench/memif-gen.ts (a memif client on CPU 1) into a
 *                  QP of ours behind the same kind of dpdk interface, counted at qp-dispatch
 *   (d) net_ring   1000 frames circulating through net_ring (tx comes back as rx): the graph's
 *                  dpdk-input -> ring-output -> ring-tx in JavaScript, vs rx_burst -> tx_burst in
 *                  C inside the addon on the same port; ns per packet
 *
 * Mpps counted at the node each case ends in; ratios to (a). Ends with one JSON line
 * {"bench":"dpdk",...}.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DpdkDriver } from '../drivers/dpdk.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { BufferPool } from '../graph/index.ts';
import { testpmdUnavailable } from '../test/helpers-dpdk.ts';
import { baseline, lastNodeBreakdown, MAC, measure, pin, planeOn, spineOn, txonlyInto } from './memif-bench.ts';

export interface DpdkBenchResult {
  text: string;
  json: Record<string, unknown>;
}

const POOL = 16384;
let pool: BufferPool | null = null;

/** A dpdk interface (and, the first time, the process's mempool as the pool). */
function dpdkDriver(name: string, device: string): { d: DpdkDriver; pool: BufferPool } {
  const d = new DpdkDriver(name, {
    device,
    ealArgs: [],
    mac: MAC,
    mtu: 1500,
    rxQueues: 1,
    txQueues: 1,
    rxQueueSize: 1024,
    txQueueSize: 1024,
  });
  if (pool === null) {
    const p = d.providesMemory({ count: POOL, dataSize: 2048 });
    pool = new BufferPool(p.memory, p.allocator);
  }
  return { d, pool };
}

/** A polling graph with one dpdk interface; `next` the node its packets go to. */
function plane(name: string, device: string, opts: { rdma?: boolean; next?: string } = {}) {
  const { d, pool } = dpdkDriver(name, device);
  return planeOn(pool, d, opts);
}

async function l4(dir: string, seconds: number): Promise<{ mpps: number; breakdown: string }> {
  const sock = path.join(dir, 'l4.sock');
  const p = plane('dm0', `net_memif0,role=server,socket=${sock}`);
  try {
    const mpps = await txonlyInto(p.g, p.d, sock, seconds);
    return { mpps, breakdown: lastNodeBreakdown() };
  } finally {
    p.close();
  }
}

async function spine(
  dir: string,
  seconds: number,
): Promise<{ mpps: number; genMpps: number; drops: number; breakdown: string }> {
  const sock = path.join(dir, 'spine.sock');
  const p = plane('dm1', `net_memif1,role=server,socket=${sock}`, { rdma: true });
  try {
    // DPDK's socket is abstract by default: the same name as our memif driver's "@path".
    const r = await spineOn(p.g, p.d, p.rdma!, `@${sock}`, seconds);
    return { ...r, breakdown: lastNodeBreakdown() };
  } finally {
    p.close();
  }
}

async function ring(seconds: number): Promise<{ jsNs: number; cNs: number; jsMpps: number; breakdown: string }> {
  const p = plane('ring0', 'net_ring0', { next: 'ring0-output' });
  try {
    const FRAMES = 1000; // net_ring's ring holds 1023
    const bufs = new Uint32Array(FRAMES);
    if (p.pool.alloc(bufs, 0, FRAMES) !== FRAMES) throw new Error('bench dpdk: no buffers for the ring');
    for (let i = 0; i < FRAMES; i++) {
      const o = p.pool.offset[bufs[i]];
      p.pool.u8.fill(0, o, o + 64);
      p.pool.u8.set([2, 0, 0, 0, 0, 2], o); // to a MAC that is not ours: it only circulates
      p.pool.length[bufs[i]] = 64;
    }
    let sent = 0;
    for (let n = 1; n > 0 && sent < FRAMES; sent += n) n = p.d.txBurst(0, bufs, sent, FRAMES - sent);
    if (sent !== FRAMES) throw new Error(`bench dpdk: net_ring took ${sent} of ${FRAMES} frames`);
    const jsMpps = await measure(p.g, 'ring0-tx', seconds);
    const breakdown = lastNodeBreakdown();
    const c = p.d.forwardInC(0, seconds * 1000);
    return { jsNs: 1000 / jsMpps, cNs: c.ns / c.packets, jsMpps, breakdown };
  } finally {
    p.close(); // the port's close drains what still circulates back into the mempool
  }
}

export async function runDpdkBench(opts: { seconds?: number } = {}): Promise<DpdkBenchResult> {
  const seconds = opts.seconds ?? 2;
  const why = !fs.existsSync(`${NATIVE_BUILD_DIR}dpdk.node`)
    ? 'dpdk.node was not built (install libdpdk-dev, npm run build)'
    : testpmdUnavailable();
  if (why) return { text: `dpdk: skipped (${why})`, json: { bench: 'dpdk', skipped: why } };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-dpdk-'));
  const cores = os.cpus().length;
  try {
    const base = await baseline(dir, seconds);
    pin('0');
    const b = await l4(dir, seconds);
    const c = await spine(dir, seconds).catch((e) => ({
      mpps: 0,
      genMpps: 0,
      drops: -1,
      breakdown: '',
      error: String(e),
    }));
    const d = await ring(seconds);
    const ratio = (x: number) => (base > 0 ? (x / base).toFixed(2) : '-');
    const lines = [
      `dpdk (DPDK 22.11 net_memif/net_ring vdevs, mbuf mempool = the graph's pool, zero copy), ${cores} cores, ${seconds} s per case;`,
      `  testpmd on CPU 1 (its rx side in (a) on CPU 0), rdma-graph pinned to CPU 0, the generator of (c) on CPU 1:`,
      `  (a) baseline  testpmd txonly -> testpmd rxonly              ${base.toFixed(2).padStart(7)} Mpps`,
      `  (b) l4        testpmd txonly -> dpdk net_memif -> udp4-input ${b.mpps.toFixed(2).padStart(7)} Mpps  ${ratio(b.mpps)} x (a)`,
      `  (c) spine     WRITE segments -> dpdk net_memif -> qp-dispatch ${c.mpps.toFixed(2).padStart(6)} Mpps  ${ratio(c.mpps)} x (a)   (generator offered ${c.genMpps.toFixed(2)} Mpps, ${c.drops} dropped${'error' in c ? `; failed: ${c.error}` : ''})`,
      `  (d) net_ring  rx -> graph -> tx in JavaScript ${d.jsNs.toFixed(1).padStart(6)} ns/packet (${d.jsMpps.toFixed(2)} Mpps); rx_burst -> tx_burst in C ${d.cNs.toFixed(1)} ns/packet`,
      `  goal: (b) >= 0.9 x (a), (c) >= 10 Mpps`,
      `  ns/packet per node, (b): ${b.breakdown}`,
      `  ns/packet per node, (c): ${c.breakdown}`,
      `  ns/packet per node, (d): ${d.breakdown}`,
    ];
    const r3 = (x: number) => Math.round(x * 1000) / 1000;
    return {
      text: lines.join('\n'),
      json: {
        bench: 'dpdk',
        cores,
        baselineMpps: r3(base),
        l4Mpps: r3(b.mpps),
        l4Ratio: base > 0 ? r3(b.mpps / base) : null,
        spineMpps: r3(c.mpps),
        ringJsNsPerPacket: r3(d.jsNs),
        ringCNsPerPacket: r3(d.cNs),
      },
    };
  } finally {
    pin('0-' + (cores - 1));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const i = args.indexOf('--seconds');
  const r = await runDpdkBench({ seconds: i >= 0 ? Number(args[i + 1]) : undefined });
  console.log(r.text);
  console.log(JSON.stringify(r.json));
}
