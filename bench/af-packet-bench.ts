/**
 * af_packet over a veth pair with one end in a network namespace (needs root, iproute2).
 *
 *   tx     JS txBurst of 64-byte frames, sendmmsg vs TPACKET_V3 TX ring: frames taken per
 *          second and frames the namespace end really received (its kernel rx counter).
 *   rx     a generator (this file, --generator, in its own process inside the namespace,
 *          sendmmsg through our driver) against JS rxBurst in this process: generator rate vs
 *          received rate and kernel drops.
 *   latency  kernel receive timestamp to our rxBurst at a low rate: what TPACKET_V3's block
 *          retire timeout (1 ms) adds to every frame when blocks do not fill, and the same
 *          with the TPACKET_V2 ring (rxRing 'v2'), which has no such floor.
 *   drain  the copy cost: the ring is filled while nobody reads it (64 MiB, colder than the
 *          L3), then drained by rxBurst (copy into pool buffers + JS reads each EtherType +
 *          pool.free) vs rxSkip with touch (the ring walk plus a read of each EtherType in
 *          place: what a zero-copy path pays to look at a packet) vs the bare ring walk.
 *
 * The generator and the kernel's veth path run on the sending CPU (pinned to the last CPU with
 * taskset when there are several); on a 2-vCPU VM the kernel sender, not JavaScript, is the
 * limit of every rx figure. Prints figures, asserts nothing.
 */
import { spawn, spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { AfPacketDriver } from '../drivers/af-packet.ts';
import { createPool } from '../graph/memory.ts';
import { createVethNs, destroyVethNs, linkStats, netnsUnavailable } from '../test/helpers-netns.ts';

const OTHER_HOST = Uint8Array.of(0x02, 0, 0, 0, 0, 0x01); // unicast, nobody's: the peer stack drops it early

function frameTemplate(dst: Uint8Array, src: Uint8Array, len: number): Uint8Array {
  const f = new Uint8Array(len);
  f.set(dst, 0);
  f.set(src, 6);
  f[12] = 0x88;
  f[13] = 0xb5;
  for (let i = 14; i < len; i++) f[i] = i & 0xff;
  return f;
}

/** Send `count` frames (0 = until `seconds` pass) of `len` bytes on `ifname`; prints JSON. */
function generator(ifname: string, count: number, seconds: number, len: number): void {
  const pool = createPool({ count: 4096 });
  const d = new AfPacketDriver({ hostIf: ifname });
  d.open(pool);
  const tmpl = frameTemplate(OTHER_HOST, d.mac, len);
  const bufs = new Uint32Array(256);
  let sent = 0;
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  for (;;) {
    const want = count > 0 ? Math.min(256, count - sent) : 256;
    if (want <= 0) break;
    const n = pool.alloc(bufs, 0, want);
    for (let i = 0; i < n; i++) {
      const bi = bufs[i];
      pool.u8.set(tmpl, pool.offset[bi]);
      pool.view.setUint32(pool.offset[bi] + 14, sent + i);
      pool.length[bi] = len;
    }
    const taken = d.txBurst(0, bufs, 0, n);
    if (taken < n) pool.free(bufs, taken, n - taken);
    sent += taken;
    if ((sent & 0xfff) < 256 && performance.now() > end) break;
  }
  const secs = (performance.now() - t0) / 1000;
  const s = d.stats();
  d.close();
  console.log(JSON.stringify({ sent, secs, txErrors: s.txErrors, refused: s.txRefused }));
}

interface GenResult {
  sent: number;
  secs: number;
}

/**
 * CPU for the generator: the last CPU when there are several and taskset exists. Decided once,
 * before this process pins itself (children inherit its affinity, and availableParallelism()
 * follows it).
 */
let genCpuCache: string | null | undefined;
function genCpu(): string | null {
  if (genCpuCache === undefined) {
    const n = availableParallelism();
    genCpuCache = n >= 2 && spawnSync('sh', ['-c', 'command -v taskset']).status === 0 ? String(n - 1) : null;
  }
  return genCpuCache;
}

/** Pin every thread of this process to `cpus` (taskset -a -p); false when not possible. */
function pinSelf(cpus: string): boolean {
  return spawnSync('taskset', ['-a', '-p', '-c', cpus, String(process.pid)], { stdio: 'ignore' }).status === 0;
}

function startGenerator(ns: string, ifname: string, count: number, seconds: number, len: number): Promise<GenResult> {
  const self = fileURLToPath(import.meta.url);
  const root = fileURLToPath(new URL('..', import.meta.url));
  const cpu = genCpu();
  const args = [
    'netns',
    'exec',
    ns,
    ...(cpu !== null ? ['taskset', '-c', cpu] : []),
    process.execPath,
    '--import',
    'tsx',
    self,
    '--generator',
    ifname,
    String(count),
    String(seconds),
    String(len),
  ];
  const child = spawn('ip', args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  return new Promise((res, rej) => {
    child.on('close', (code) => {
      if (code !== 0) return rej(new Error(`generator exited ${code}`));
      res(JSON.parse(out.trim().split('\n').pop() as string) as GenResult);
    });
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export interface AfPacketBenchResult {
  text: string;
  json: Record<string, unknown>;
}

export async function runAfPacketBench(opts: { seconds?: number } = {}): Promise<AfPacketBenchResult> {
  const seconds = opts.seconds ?? 2;
  const why = netnsUnavailable();
  if (why !== null) return { text: `af_packet: skipped (${why})`, json: { bench: 'af_packet', skipped: why } };
  const lines: string[] = [];
  const json: Record<string, unknown> = { bench: 'af_packet' };
  const p = createVethNs();
  try {
    // ------------------------------------------------------------ tx: sendmmsg vs TX ring
    for (const txMode of ['sendmmsg', 'ring'] as const) {
      const pool = createPool({ count: 4096 });
      const d = new AfPacketDriver({ hostIf: p.host, txMode });
      d.open(pool);
      const tmpl = frameTemplate(OTHER_HOST, d.mac, 64);
      const bufs = new Uint32Array(256);
      const before = linkStats(p.peer, p.ns).rxPackets;
      let taken = 0,
        bursts = 0;
      const t0 = performance.now();
      const end = t0 + seconds * 1000;
      while (performance.now() < end) {
        const n = pool.alloc(bufs, 0, 256);
        for (let i = 0; i < n; i++) {
          pool.u8.set(tmpl, pool.offset[bufs[i]]);
          pool.length[bufs[i]] = 64;
        }
        const k = d.txBurst(0, bufs, 0, n);
        if (k < n) pool.free(bufs, k, n - k);
        taken += k;
        bursts++;
      }
      const secs = (performance.now() - t0) / 1000;
      await sleep(50);
      const arrived = linkStats(p.peer, p.ns).rxPackets - before;
      const s = d.stats();
      d.close();
      const mpps = taken / secs / 1e6,
        arrivedMpps = arrived / secs / 1e6;
      lines.push(
        `af_packet tx ${txMode.padEnd(8)} 64 B: ${mpps.toFixed(3)} Mpps taken, ${arrivedMpps.toFixed(3)} Mpps received by the peer (${((100 * arrived) / Math.max(1, taken)).toFixed(1)} %), refused ${s.txRefused}, ${bursts} bursts`,
      );
      json[`tx_${txMode}_mpps`] = round(mpps);
      json[`tx_${txMode}_received_mpps`] = round(arrivedMpps);
    }

    // ------------------------------------------------------------ rx: kernel generator vs JS
    // The generator on the last CPU, this process on the others: a busy-polling receiver
    // sharing the generator's CPU would halve what the kernel sends.
    const cpu = genCpu();
    const pinned = cpu !== null && pinSelf(`0-${Number(cpu) - 1}`);
    try {
      for (const rxRing of ['v3', 'v2'] as const) {
        const pool = createPool({ count: 8192 });
        const d = new AfPacketDriver({ hostIf: p.host, rxFrames: 32768, rxRing });
        d.open(pool);
        const out = new Uint32Array(256);
        let got = 0,
          et = 0;
        const gen = startGenerator(p.ns, p.peer, 0, seconds, 64);
        let done = false;
        let res: GenResult | null = null;
        gen.then(
          (r) => {
            res = r;
            done = true;
          },
          () => {
            done = true;
          },
        );
        const u8 = pool.u8,
          off = pool.offset;
        let lastGot = -1;
        let maxGapMs = 0,
          prev = performance.now();
        while (!done || got !== lastGot) {
          lastGot = got;
          const t = performance.now();
          if (t - prev > maxGapMs) maxGapMs = t - prev;
          for (let k = 0; k < 64; k++) {
            const n = d.rxBurst(0, out, 256);
            for (let i = 0; i < n; i++) et |= (u8[off[out[i]] + 12] << 8) | u8[off[out[i]] + 13];
            if (n) pool.free(out, 0, n);
            got += n;
          }
          prev = performance.now();
          await new Promise((r) => setImmediate(r));
          if (done) await sleep(5);
        }
        const s = d.stats();
        d.close();
        const r = res as GenResult | null;
        if (r) {
          const genMpps = r.sent / r.secs / 1e6;
          lines.push(
            `af_packet rx 64 B (${rxRing} ring): generator ${genMpps.toFixed(3)} Mpps (${r.sent} frames in ${r.secs.toFixed(2)} s), JS received ${got} (${((100 * got) / Math.max(1, r.sent)).toFixed(2)} %), kernel drops ${s.kernelDrops}, longest event-loop turn between polls ${maxGapMs.toFixed(1)} ms${pinned ? '' : ' (not pinned)'}${et === 0 ? ' (nothing read)' : ''}`,
          );
          json[`rx_${rxRing}_generator_mpps`] = round(genMpps);
          json[`rx_${rxRing}_received_fraction`] = round(got / Math.max(1, r.sent));
          json[`rx_${rxRing}_kernel_drops`] = s.kernelDrops;
        }
      }
    } finally {
      if (pinned) pinSelf(`0-${cpu}`);
    }

    // ------------------------------------------------------------ empty poll
    {
      const pool = createPool({ count: 1024 });
      const d = new AfPacketDriver({ hostIf: p.host });
      d.open(pool);
      const out = new Uint32Array(256);
      let n = 0,
        calls = 0;
      const t0 = process.hrtime.bigint();
      const end = performance.now() + Math.min(1, seconds) * 1000;
      while (performance.now() < end) {
        for (let i = 0; i < 10000; i++) {
          const k = d.rxBurst(0, out, 256);
          if (k) pool.free(out, 0, k);
          n += k;
        }
        calls += 10000;
      }
      const ns = Number(process.hrtime.bigint() - t0) / calls;
      d.close();
      lines.push(
        `af_packet rxBurst on an empty ring: ${ns.toFixed(1)} ns per poll (one native call)${n ? ` (${n} stray frames)` : ''}`,
      );
      json.rx_empty_poll_ns = round(ns);
    }

    // ------------------------------------------------------------ rx latency (block timeout)
    // A TPACKET_V3 block reaches us when full or after tp_retire_blk_tov (1 ms): at low rates
    // every frame waits for the timeout. TPACKET_V2 (rxRing 'v2') hands each slot over as it is
    // written. Kernel rx timestamp -> our rxBurst, polling.
    for (const rxRing of ['v3', 'v2'] as const) {
      const pool = createPool({ count: 1024 });
      const d = new AfPacketDriver({ hostIf: p.host, rxRing });
      d.open(pool);
      const py = `
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((sys.argv[1], 0))
f = bytes.fromhex(sys.argv[2])
time.sleep(0.2)
for i in range(100):
    s.send(f); time.sleep(0.003)
`;
      const f = frameTemplate(OTHER_HOST, Uint8Array.of(2, 0, 0, 0, 0, 2), 64);
      const child = spawn('ip', ['netns', 'exec', p.ns, 'python3', '-c', py, p.peer, Buffer.from(f).toString('hex')], {
        stdio: 'ignore',
      });
      let done = false;
      child.on('close', () => {
        done = true;
      });
      const out = new Uint32Array(256);
      const delays: number[] = [];
      const origin = performance.timeOrigin;
      while (!done) {
        const n = d.rxBurst(0, out, 256);
        if (n) {
          const now = origin + performance.now();
          for (let i = 0; i < n; i++) delays.push(now - (pool.tsSec[out[i]] * 1e3 + pool.tsNsec[out[i]] / 1e6));
          pool.free(out, 0, n);
        }
        await new Promise((r) => setImmediate(r));
      }
      d.close();
      delays.sort((a, b) => a - b);
      const q = (x: number) =>
        delays.length ? delays[Math.min(delays.length - 1, Math.floor(x * delays.length))] : NaN;
      lines.push(
        `af_packet rx latency, ${rxRing === 'v3' ? 'TPACKET_V3 ring (block timeout 1 ms)' : 'TPACKET_V2 ring (rxRing v2)'}, 1 frame / 3 ms: min ${q(0).toFixed(3)} median ${q(0.5).toFixed(3)} p99 ${q(0.99).toFixed(3)} ms over ${delays.length} frames`,
      );
      json[rxRing === 'v3' ? 'rx_latency_median_ms' : 'rx_latency_v2_median_ms'] = round(q(0.5));
    }

    // ------------------------------------------------------------ drain: copy vs ring walk
    const drainPool = createPool({ count: 8192 });
    for (const len of [64, 1514]) {
      const count = len === 64 ? 200_000 : 30_000;
      const res: Record<string, number> = {};
      for (const mode of ['copy', 'touch', 'walk'] as const) {
        // Best of 3 drains after 2 warm-up drains (V8 tiers rxBurst and the read loop up
        // during the first two: they run 2-3x slower).
        const runs: { ns: number; n: number; drops: number; et: number }[] = [];
        for (let round = 0; round < 5; round++) {
          const pool = drainPool;
          // 1024 blocks of 64 KiB (64 MiB): room for the whole burst.
          const d = new AfPacketDriver({ hostIf: p.host, rxFrames: 32768 });
          d.open(pool);
          await startGenerator(p.ns, p.peer, count, 60, len);
          await sleep(20);
          const out = new Uint32Array(256);
          const u8 = pool.u8,
            off = pool.offset;
          let n = 0,
            et = 0;
          const t0 = process.hrtime.bigint();
          if (mode === 'copy') {
            for (;;) {
              const k = d.rxBurst(0, out, 256);
              if (k === 0) break;
              for (let i = 0; i < k; i++) et |= (u8[off[out[i]] + 12] << 8) | u8[off[out[i]] + 13];
              pool.free(out, 0, k);
              n += k;
            }
          } else {
            for (;;) {
              const k = d.rxSkip(256, mode === 'touch');
              if (k === 0) break;
              n += k;
            }
          }
          const ns = Number(process.hrtime.bigint() - t0);
          if (round >= 2) runs.push({ ns, n, drops: d.stats().kernelDrops, et });
          d.close();
        }
        runs.sort((a, b) => a.ns / Math.max(1, a.n) - b.ns / Math.max(1, b.n));
        const { ns, n, drops, et } = runs[0];
        res[mode] = ns / Math.max(1, n);
        const label = {
          copy: 'copy into pool, JS reads EtherType',
          touch: 'zero-copy: walk + read EtherType  ',
          walk: 'ring walk only                    ',
        }[mode];
        lines.push(
          `af_packet drain ${String(len).padStart(4)} B ${label}: ${n} frames, ${((n / ns) * 1e3).toFixed(2)} Mpps, ${(ns / Math.max(1, n)).toFixed(1)} ns/frame${drops ? `, kernel drops ${drops}` : ''}${mode === 'copy' && et === 0 ? ' (nothing read)' : ''}`,
        );
        json[`drain_${len}_${mode}_ns`] = round(ns / Math.max(1, n));
      }
      lines.push(
        `  copy cost at ${len} B: ${(res.copy - res.touch).toFixed(1)} ns/frame over zero-copy (alloc + memcpy + metadata + free)`,
      );
    }
  } finally {
    destroyVethNs(p);
  }
  return { text: lines.join('\n'), json };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

// Generator mode: node --import tsx bench/af-packet-bench.ts --generator <if> <count> <seconds> <len>
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href && process.argv[2] === '--generator') {
  const [ifname, count, secs, len] = process.argv.slice(3);
  generator(ifname, Number(count), Number(secs), Number(len));
} else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  // Direct run: node --import tsx bench/af-packet-bench.ts [seconds] (or npm run bench -- af_packet)
  const r = await runAfPacketBench({ seconds: Number(process.argv[2] ?? 2) });
  console.log(r.text);
}
