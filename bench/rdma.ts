/**
 * npm run bench -- rdma (prints, never asserts), the machine (cores, CPU model) first:
 *
 * 1. What users see (bench/rdma-procs.ts): two data planes in two processes over memif, each on
 *    its own CPU where there are two: WRITE 64 KiB with 16 outstanding and 64-byte SEND
 *    ping-pong RTT (p50/p99/p99.9) in each cpu.poll mode; beside them, in the same run, the
 *    kernel: iperf3 TCP one stream between two network namespaces over veth (root), again with
 *    the veth offloads off (MTU-sized segments, the unit we move), and sockperf UDP 64-B
 *    ping-pong on loopback (half-RTT), with the ratios. The memif link has no MTU configured, so
 *    it takes the peer MTU between two rdma-graph data planes (~32 KiB segments in chained
 *    buffers: issue 31's lever, drivers/memif.ts linkMtu); the adaptive WRITE runs again with it
 *    pinned at 1500 (segments of 1444 bytes), as before that lever. These rows write from the
 *    memif server to the client (each byte copied twice); the adaptive WRITE runs once more the
 *    other way, towards the server (twice as well: it places a Write's payload from the client's
 *    buffers), and again with RDMA_GRAPH_MEMIF_RX_DEFER=0 (the server copies each frame whole
 *    first: three times), their ratio printed.
 *    The ping-pong's round trips count after RDMA_BENCH_WARM_MS (default 1000) of warm-up, as
 *    sockperf leaves out its first 400 ms; each row says how many GC pauses the pinger had.
 *    RDMA_BENCH_MTU (pins it), _DATA_SIZE, _WINDOW, _RTOMIN, _CC (rdma.congestion),
 *    _OUTSTANDING (WRITEs in flight, default 16), _UDP_CKSUM, _PROF, _RUNTIME (each side's
 *    `show runtime`) and _ALLOC=a|b (that side's allocation sites, bench/alloc-profile.ts) vary
 *    or look inside the first part;
 *    RDMA_BENCH_LIVE=1 adds the live view's cost: adaptive again without and with a page's event
 *    stream (GET /live/events) open on both daemons, as ratios.
 * 2. Two stacks in one process (two graphs on one thread, joined by a pipe): WRITE throughput,
 *    64-byte SEND ping-pong latency, and WRITE goodput under 1 % and 10 % of each fault (loss,
 *    reordering, duplication, corruption) as a fraction of lossless, beside the kernel's UDP
 *    ping-pong over loopback (node:dgram). Both stacks share one core here.
 * 3. Two stacks in one process over memif (bench/ext-payload.ts): the server's WRITE payloads
 *    sent from the MR in place against copied into the pool first, alternating every 100 ms.
 */
import dgram from 'node:dgram';
import os from 'node:os';
import { iperf3, sockperf } from './kernel-baselines.ts';
import { runRdmaProcsBench } from './rdma-procs.ts';
import { type ExtPayloadResult, extPayloadBench } from './ext-payload.ts';
import { connectManual, makeEnds, twoStacks } from '../test/rdma-helpers.ts';

export interface RdmaBenchResult {
  text: string;
  json: Record<string, unknown>;
}

async function writeThroughput(
  seconds: number,
  fault: number,
  msg = 65536,
): Promise<{ gbps: number; mpps: number; ops: number; retransmits: number }> {
  const f = fault > 0 ? { seed: 7, loss: fault, reorder: fault, duplicate: fault, corrupt: fault } : undefined;
  const p = twoStacks({
    buffers: 16384,
    faultA: f ? { rx: f, tx: f } : undefined,
    rdma: { trp: { rtoMinMs: 2, rtoMaxMs: 50, maxRetries: 30 } },
  });
  try {
    const A = makeEnds(p.a, { maxSendWr: 64 }),
      B = makeEnds(p.b);
    connectManual(p.a, A.qp, p.b, B.qp);
    const src = p.a.rdma.regMr(A.pd, msg, ['local-write']);
    const dst = p.b.rdma.regMr(B.pd, msg, ['local-write', 'remote-write']);
    let done = 0,
      posted = 0;
    const post = () => {
      while (posted - done < 16) {
        p.a.rdma.postSend(A.qp, {
          wrId: posted++,
          opcode: 'write',
          sg: [{ mr: src, offset: 0, length: msg }],
          remote: { stag: dst.stag, offset: 0 },
        });
      }
    };
    const t0 = performance.now();
    const end = t0 + seconds * 1000;
    await new Promise<void>((resolve) => {
      A.scq.onCompletion = (cq) => {
        for (const c of cq.poll(64)) {
          if (c.status !== 'success') throw new Error(`write failed: ${c.status}`);
          done++;
        }
        if (performance.now() >= end) resolve();
        else post();
      };
      post();
    });
    const s = (performance.now() - t0) / 1000;
    const q = p.a.rdma.queryQp(A.qp);
    return {
      gbps: (done * msg * 8) / s / 1e9,
      mpps: q.counters.txPackets / s / 1e6,
      ops: done,
      retransmits: q.counters.retransmits,
    };
  } finally {
    p.close();
  }
}

async function sendLatency(seconds: number): Promise<{ medianUs: number; p99Us: number; n: number }> {
  const p = twoStacks();
  try {
    const A = makeEnds(p.a),
      B = makeEnds(p.b);
    connectManual(p.a, A.qp, p.b, B.qp);
    const am = p.a.rdma.regMr(A.pd, 128, ['local-write']);
    const bm = p.b.rdma.regMr(B.pd, 128, ['local-write']);
    for (let i = 0; i < 64; i++) {
      p.a.rdma.postRecv(A.qp, { wrId: i, sg: [{ mr: am, offset: 64, length: 64 }] });
      p.b.rdma.postRecv(B.qp, { wrId: i, sg: [{ mr: bm, offset: 64, length: 64 }] });
    }
    const rtts: number[] = [];
    B.rcq.onCompletion = (cq) => {
      for (const c of cq.poll(16)) {
        p.b.rdma.postRecv(B.qp, { wrId: c.wrId, sg: [{ mr: bm, offset: 64, length: 64 }] });
        p.b.rdma.postSend(B.qp, { wrId: 0, opcode: 'send', signaled: false, sg: [{ mr: bm, offset: 64, length: 64 }] });
      }
    };
    B.scq.onCompletion = (cq) => void cq.poll(64);
    A.scq.onCompletion = (cq) => void cq.poll(64);
    const end = performance.now() + seconds * 1000;
    let t = 0;
    await new Promise<void>((resolve) => {
      const ping = () => {
        t = performance.now();
        p.a.rdma.postSend(A.qp, { wrId: 0, opcode: 'send', signaled: false, sg: [{ mr: am, offset: 0, length: 64 }] });
      };
      A.rcq.onCompletion = (cq) => {
        for (const c of cq.poll(16)) {
          rtts.push(performance.now() - t);
          p.a.rdma.postRecv(A.qp, { wrId: c.wrId, sg: [{ mr: am, offset: 64, length: 64 }] });
        }
        if (performance.now() >= end) resolve();
        else ping();
      };
      ping();
    });
    rtts.sort((x, y) => x - y);
    return {
      medianUs: rtts[rtts.length >> 1] * 1000,
      p99Us: rtts[Math.floor(rtts.length * 0.99)] * 1000,
      n: rtts.length,
    };
  } finally {
    p.close();
  }
}

async function kernelUdpLatency(seconds: number): Promise<{ medianUs: number; p99Us: number; n: number }> {
  const a = dgram.createSocket('udp4'),
    b = dgram.createSocket('udp4');
  await Promise.all([
    new Promise<void>((r) => a.bind(0, '127.0.0.1', r)),
    new Promise<void>((r) => b.bind(0, '127.0.0.1', r)),
  ]);
  const bp = b.address().port,
    ap = a.address().port;
  const msg = Buffer.alloc(64);
  b.on('message', (m) => b.send(m, ap, '127.0.0.1'));
  const rtts: number[] = [];
  const end = performance.now() + seconds * 1000;
  await new Promise<void>((resolve) => {
    let t = performance.now();
    a.on('message', () => {
      rtts.push(performance.now() - t);
      if (performance.now() >= end) return resolve();
      t = performance.now();
      a.send(msg, bp, '127.0.0.1');
    });
    a.send(msg, bp, '127.0.0.1');
  });
  a.close();
  b.close();
  rtts.sort((x, y) => x - y);
  return {
    medianUs: rtts[rtts.length >> 1] * 1000,
    p99Us: rtts[Math.floor(rtts.length * 0.99)] * 1000,
    n: rtts.length,
  };
}

export async function runRdmaBench(opts: { seconds: number }): Promise<RdmaBenchResult> {
  const s = opts.seconds;
  const cores = os.cpus().length,
    model = os.cpus()[0]?.model ?? 'unknown CPU';
  const procs = await runRdmaProcsBench(s);
  const tcp = await iperf3(s);
  const tcpSeg = await iperf3(s, false);
  const udp = await sockperf(s, 21900 + (process.pid % 90));
  const ratio = (x: unknown, y: number | null) =>
    typeof x === 'number' && y !== null && y > 0 ? (x / y).toFixed(2) : 'n/a';
  const kernelLines = [
    `  kernel: iperf3 TCP 1 stream over veth ${tcp.gbps === null ? `not run (${tcp.why})` : `${tcp.gbps.toFixed(2)} Gbit/s`}; ` +
      `sockperf UDP 64 B half-RTT ${udp.p50 === null ? `not run (${udp.why})` : `p50 ${udp.p50} us, p99 ${udp.p99} us, p99.9 ${udp.p999} us`}`,
    `  kernel: iperf3 TCP with the veth offloads off (1500-byte segments, as ours at mtu 1500) ${tcpSeg.gbps === null ? `not run (${tcpSeg.why})` : `${tcpSeg.gbps.toFixed(2)} Gbit/s`}`,
  ];
  for (const [poll, r] of Object.entries(procs.json) as [string, Record<string, number>][])
    if (poll === 'mtu1500')
      kernelLines.push(
        `  adaptive at memif mtu 1500 pinned: WRITE ${ratio(r.writeGbps, tcp.gbps)} x kernel TCP (goal >= 1.0), ${ratio(r.writeGbps, tcpSeg.gbps)} x without offloads (goal >= 1.5)`,
      );
    else if (poll === 'towardsServer')
      kernelLines.push(
        `  adaptive towards the memif server: WRITE ${ratio(r.writeGbps, tcp.gbps)} x kernel TCP (goal >= 1.0), ${ratio(r.writeGbps, tcpSeg.gbps)} x without offloads (goal >= 1.5)`,
      );
    else if (poll === 'towardsServerCopied')
      kernelLines.push(
        `  adaptive towards the memif server, frames copied whole on receive: WRITE ${ratio(r.writeGbps, tcp.gbps)} x kernel TCP; placed from the client's buffers / copied whole ${ratio((procs.json as Record<string, Record<string, number>>).towardsServer?.writeGbps, r.writeGbps)} x`,
      );
    else if (poll === 'towardsServerPoolCopy')
      kernelLines.push(
        `  adaptive towards the memif server, payloads copied into the client's pool first: WRITE ${ratio(r.writeGbps, tcp.gbps)} x kernel TCP; gathered into the client's slots / copied into its pool ${ratio((procs.json as Record<string, Record<string, number>>).towardsServer?.writeGbps, r.writeGbps)} x`,
      );
    else if (poll !== 'livePage')
      kernelLines.push(
        `  ${poll}${r.segmentBytes ? ` (segments of ${r.segmentBytes} bytes)` : ''}: WRITE ${ratio(r.writeGbps, tcp.gbps)} x kernel TCP (goal >= 1.0), ${ratio(r.writeGbps, tcpSeg.gbps)} x without offloads (goal >= 1.5); half-RTT p50 ${(r.rttP50Us / 2).toFixed(1)} us = ` +
          `${ratio(r.rttP50Us / 2, udp.p50)} x kernel UDP (goal <= 0.5), p99 ${(r.rttP99Us / 2).toFixed(1)} us = ${ratio(r.rttP99Us / 2, udp.p99)} x (goal <= 1.0), p99.9 ${(r.rttP999Us / 2).toFixed(1)} us = ${ratio(r.rttP999Us / 2, udp.p999)} x`,
      );
  await writeThroughput(Math.min(s, 1), 0); // warm-up (JIT), not reported
  const w0 = await writeThroughput(s, 0);
  const w1 = await writeThroughput(s, 0.01);
  const w10 = await writeThroughput(s, 0.1);
  const lat = await sendLatency(s);
  const k = await kernelUdpLatency(s);
  const xp = await extPayloadBench(Math.max(6, 3 * s));
  const xj = await extPayloadBench(Math.max(6, 3 * s), 9000);
  const f = (x: number, d = 2) => x.toFixed(d);
  const runs: [string, ExtPayloadResult][] = [
    ['mtu 1500', xp],
    ['mtu 9000', xj],
  ];
  const extLines = runs.map(
    ([what, x]) =>
      `  ${what}: in place ${f(x.inPlace.gbps)} Gbit/s, ${f(x.inPlace.nsPerByte, 3)} ns CPU per byte; copied ${f(x.copied.gbps)} Gbit/s, ${f(x.copied.nsPerByte, 3)} ns; ` +
      `in place / copied: ${f(x.inPlace.nsPerByte / x.copied.nsPerByte, 3)} x the CPU per byte, ${f(x.inPlace.gbps / x.copied.gbps, 3)} x the rate`,
  );
  const text = [
    `machine: ${cores} cores, ${model}`,
    ...procs.lines,
    ...kernelLines,
    'rdma: two stacks in one process over a pipe (one core for both)',
    `  WRITE 64 KiB, 16 outstanding: ${f(w0.gbps)} Gbit/s payload, ${f(w0.mpps, 3)} Mpps of segments (${w0.ops} writes)`,
    `  WRITE goodput, 1 % of each fault: ${f(w1.gbps)} Gbit/s = ${f(w1.gbps / w0.gbps)} x lossless (${w1.retransmits} retransmissions)`,
    `  WRITE goodput, 10 % of each fault: ${f(w10.gbps)} Gbit/s = ${f(w10.gbps / w0.gbps)} x lossless (${w10.retransmits} retransmissions)`,
    `  SEND 64 B ping-pong: median RTT ${f(lat.medianUs, 1)} us, p99 ${f(lat.p99Us, 1)} us (${lat.n} round trips)`,
    `  baseline, kernel UDP 64 B ping-pong on loopback (node:dgram): median RTT ${f(k.medianUs, 1)} us, p99 ${f(k.p99Us, 1)} us`,
    'rdma: two stacks in one process over memif, WRITE 64 KiB x 16 from the server, payloads sent from the MR in place and copied into the pool first, alternating every 100 ms (one core for both)',
    ...extLines,
  ].join('\n');
  return {
    text,
    json: {
      bench: 'rdma',
      cores,
      cpu: model,
      processes: procs.json,
      kernelTcpGbps: tcp.gbps === null ? 'n/a' : +tcp.gbps.toFixed(3),
      kernelTcpNoOffloadGbps: tcpSeg.gbps === null ? 'n/a' : +tcpSeg.gbps.toFixed(3),
      kernelUdpHalfRttP50Us: udp.p50 === null ? 'n/a' : udp.p50,
      writeGbps: +f(w0.gbps, 3),
      goodput1: +f(w1.gbps / w0.gbps, 3),
      goodput10: +f(w10.gbps / w0.gbps, 3),
      sendRttUs: +f(lat.medianUs, 1),
      kernelUdpRttUs: +f(k.medianUs, 1),
      extInPlaceNsPerByte: +f(xp.inPlace.nsPerByte, 4),
      extCopiedNsPerByte: +f(xp.copied.nsPerByte, 4),
      extInPlaceGbps: +f(xp.inPlace.gbps, 3),
      extCopiedGbps: +f(xp.copied.gbps, 3),
      extJumboInPlaceNsPerByte: +f(xj.inPlace.nsPerByte, 4),
      extJumboCopiedNsPerByte: +f(xj.copied.nsPerByte, 4),
    },
  };
}
