/**
 * npm run bench -- workers (prints, never asserts): data plane A with cpu.workers 0, 1 and 2,
 * two memif interfaces (round robin: one per worker with 2), a passive WRITE target on each,
 * and once with one interface whose two QPs sit on two workers (worker 1's through handoff);
 * peer B (another process, workers 0) writes 64 KiB x 16 outstanding on both QPs. Per setting:
 * the total WRITE bandwidth, and GET /v1/health latency on A's API measured from this process
 * while the data plane is saturated (and once idle, as the baseline). Then the memif spine per
 * worker (spineRun): one memif interface of two queue pairs, a QP per queue, bench/memif-gen.ts
 * offering minimal WRITE segments on both queues. Nothing is pinned: on a 2-core machine A's
 * workers, B (or the generator) and this process share the two cores, which bounds the scaling.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseConfig } from '../config/load.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { createDataplane } from '../dataplane/create.ts';
import { startApi } from '../api/server.ts';

const MSG = 65536;
const OUTSTANDING = 16;
const IP = (side: 'a' | 'b', k: number) => `10.9${k}.0.${side === 'a' ? 1 : 2}`;
const MAC = (side: 'a' | 'b', k: number) => `02:fe:00:00:${side === 'a' ? '0a' : '0b'}:0${k}`;

function config(side: 'a' | 'b', dir: string, workers: number, nIf: number): string {
  const other = side === 'a' ? 'b' : 'a';
  const ks = nIf === 1 ? [0] : [0, 1];
  return (
    `api: { listen: 127.0.0.1:0 }\ncpu: { workers: ${side === 'a' ? workers : 0} }\ninterfaces:\n` +
    ks
      .map(
        (k) =>
          `  - name: ${side === 'a' ? 'm' : 'n'}${k}\n    driver: memif\n` +
          `    memif: { socket: ${path.join(dir, `m${k}.sock`)}, role: ${side === 'a' ? 'server' : 'client'}, udp-checksum: false }\n` +
          `    mac: "${MAC(side, k)}"\n    address: ${IP(side, k)}/24\n`,
      )
      .join('') +
    `neighbors:\n` +
    ks
      .map(
        (k) =>
          `  - { interface: ${side === 'a' ? 'm' : 'n'}${k}, address: ${IP(other, k)}, mac: "${MAC(other, k)}" }\n`,
      )
      .join('')
  );
}

interface EndInfo {
  qpn: number;
  psn: number;
  stag: number;
}

async function childA(dir: string, workers: number, nIf: number): Promise<void> {
  const dp = await createDataplane(parseConfig(config('a', dir, workers, nIf), 'bench-a.yaml'));
  const api = await startApi(dp, { host: '127.0.0.1', port: 0, token: null });
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const next = async () => JSON.parse((await lines.next()).value as string);
  try {
    while (!(await dp.interfaces()).every((i) => i.state === 'up')) await new Promise((r) => setTimeout(r, 20));
    const ends: EndInfo[] = [];
    for (const k of [0, 1]) {
      // One interface: the two QPs on it, one per worker where there are two (handoff).
      const itf = nIf === 1 ? 'm0' : `m${k}`;
      const where = nIf === 1 && workers === 2 ? { interface: itf, worker: k } : { interface: itf };
      const pd = await dp.createPd(where);
      const cq = await dp.createCq({ depth: 1024, ...where });
      const mr = await dp.createMr({ pd: pd.pd, length: MSG, access: ['local-write', 'remote-write'] });
      const qp = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: itf });
      ends.push({ qpn: qp.qpn, psn: qp.psn, stag: mr.stag });
    }
    process.stdout.write(JSON.stringify({ api: api.url, ends }) + '\n');
    const peer = (await next()) as EndInfo[];
    for (const k of [0, 1])
      await dp.connect(ends[k].qpn, {
        remote: { ip: IP('b', nIf === 1 ? 0 : k), port: peer[k].qpn },
        mode: 'manual',
        remotePsn: peer[k].psn,
      });
    process.stdout.write(JSON.stringify({ ready: true }) + '\n');
    await next(); // stop
  } finally {
    await api.close();
    await dp.close();
  }
}

async function childB(dir: string, seconds: number, nIf: number): Promise<void> {
  const dp = await createDataplane(parseConfig(config('b', dir, 0, nIf), 'bench-b.yaml'));
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const next = async () => JSON.parse((await lines.next()).value as string);
  try {
    while (!(await dp.interfaces()).every((i) => i.state === 'up')) await new Promise((r) => setTimeout(r, 20));
    const { rdma } = Dataplane.internals(dp);
    const pd = rdma.createPd();
    const qps = [0, 1].map(() => {
      const scq = rdma.createCq(1024);
      const qp = rdma.createQp({ pd, sendCq: scq, recvCq: rdma.createCq(64), maxSendWr: 64, maxRecvWr: 16 });
      return { qp, scq, mr: rdma.regMr(pd, MSG, ['local-write']) };
    });
    process.stdout.write(JSON.stringify(qps.map((q) => ({ qpn: q.qp.qpn, psn: q.qp.isn, stag: 0 }))) + '\n');
    const peer = (await next()) as EndInfo[];
    qps.forEach((q, k) => {
      rdma.modifyQp(q.qp, { state: 'init' });
      rdma.modifyQp(q.qp, {
        state: 'rtr',
        remote: { address: IP('a', nIf === 1 ? 0 : k), port: peer[k].qpn },
        rqPsn: peer[k].psn,
      });
      rdma.modifyQp(q.qp, { state: 'rts' });
    });
    process.stdout.write(JSON.stringify({ ready: true }) + '\n');
    await next(); // go
    const end = performance.now() + seconds * 1000;
    const t0 = performance.now();
    const done = [0, 0];
    await Promise.all(
      qps.map(
        (q, k) =>
          new Promise<void>((resolve, reject) => {
            let posted = 0;
            const post = () => {
              while (posted - done[k] < OUTSTANDING)
                rdma.postSend(q.qp, {
                  wrId: posted++,
                  opcode: 'write',
                  sg: [{ mr: q.mr, offset: 0, length: MSG }],
                  remote: { stag: peer[k].stag, offset: 0 },
                });
            };
            q.scq.onCompletion = (cq) => {
              for (const c of cq.poll(64)) {
                if (c.status !== 'success') return reject(new Error(`write: ${c.status}`));
                done[k]++;
              }
              if (performance.now() >= end) resolve();
              else post();
            };
            post();
          }),
      ),
    );
    const s = (performance.now() - t0) / 1000;
    process.stdout.write(JSON.stringify({ gbps: ((done[0] + done[1]) * MSG * 8) / s / 1e9, perQp: done }) + '\n');
    await next(); // stop
  } finally {
    await dp.close();
  }
}

function spawnSide(args: string[]) {
  const p = spawn(process.execPath, ['--import', 'tsx', import.meta.filename, ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const it = createInterface({ input: p.stdout! })[Symbol.asyncIterator]();
  return {
    p,
    next: async () => {
      const r = await it.next();
      if (r.done) throw new Error(`bench side ${args[1]} ended early`);
      return JSON.parse(r.value as string);
    },
    send: (o: unknown) => p.stdin!.write(JSON.stringify(o) + '\n'),
  };
}

/** GET /v1/health until `until` resolves: latency percentiles in ms. */
async function healthLatency(url: string, until: Promise<unknown>): Promise<{ p50: number; p99: number; n: number }> {
  let stop = false;
  void until.then(() => (stop = true));
  const ms: number[] = [];
  while (!stop) {
    const t = performance.now();
    const r = await fetch(`${url}/v1/health`);
    await r.arrayBuffer();
    ms.push(performance.now() - t);
  }
  ms.sort((x, y) => x - y);
  const q = (f: number) => (ms.length ? ms[Math.min(ms.length - 1, Math.floor(f * ms.length))] : NaN);
  return { p50: q(0.5), p99: q(0.99), n: ms.length };
}

async function run(workers: number, seconds: number, nIf = 2) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-workers-'));
  const a = spawnSide(['--child', 'a', dir, String(workers), String(nIf)]);
  const b = spawnSide(['--child', 'b', dir, String(seconds), String(nIf)]);
  try {
    const ia = await a.next();
    const ib = await b.next();
    a.send(ib);
    b.send(ia.ends);
    await a.next();
    await b.next();
    const idle = await healthLatency(ia.api, new Promise((r) => setTimeout(r, 500)));
    b.send('go');
    const result = b.next();
    const busy = await healthLatency(ia.api, result);
    const r = await result;
    return { gbps: r.gbps as number, perQp: r.perQp as number[], idle, busy };
  } finally {
    a.send('stop');
    b.send('stop');
    for (const s of [a, b]) s.p.stdin!.end();
    await Promise.all([a, b].map((s) => new Promise((r) => (s.p.exitCode !== null ? r(0) : s.p.on('exit', r)))));
    rmSync(dir, { recursive: true, force: true });
  }
}

const GEN = new URL('./memif-gen.ts', import.meta.url).pathname;

/**
 * The memif spine per worker: A (this process) with `workers` workers and one memif server of
 * two queue pairs (with 2 workers one queue each, else both on one thread), a QP per queue (on
 * worker k with 2 workers); bench/memif-gen.ts sends minimal WRITE segments to QP k on queue k.
 * Mpps counted at qp-dispatch over every thread.
 */
async function spineRun(workers: number, seconds: number): Promise<{ mpps: number; genMpps: number }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-wspine-'));
  const sock = path.join(dir, 'spine.sock');
  const dp = await createDataplane(
    parseConfig(
      `cpu: { workers: ${workers} }
interfaces:
` +
        `  - name: m0
    driver: memif
    memif: { socket: ${sock}, role: server, udp-checksum: false }
` +
        `    mac: "02:00:00:00:00:01"
    address: 10.0.0.1/24
    rx-queues: 2
` +
        `neighbors:
  - { interface: m0, address: 10.0.0.2, mac: "02:00:00:00:00:02" }
`,
      'bench-spine.yaml',
    ),
  );
  const SPORT = 31000;
  let gen: ReturnType<typeof spawn> | null = null;
  try {
    const qps: { qpn: number; psn: number; stag: number }[] = [];
    for (const k of [0, 1]) {
      const where = workers === 2 ? { interface: 'm0', worker: k } : { interface: 'm0' };
      const pd = await dp.createPd(where);
      const cq = await dp.createCq({ depth: 64, ...where });
      const mr = await dp.createMr({ pd: pd.pd, length: 4096, access: ['local-write', 'remote-write'] });
      const qp = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: 'm0' });
      await dp.connect(qp.qpn, { remote: { ip: '10.0.0.2', port: SPORT + k }, mode: 'manual', remotePsn: 0 });
      qps.push({ qpn: qp.qpn, psn: qp.psn, stag: mr.stag });
    }
    const list = (f: (q: (typeof qps)[number]) => number) => qps.map(f).join(',');
    // The generator on the last CPU (where there are two or more): A's threads share the rest.
    const last = os.cpus().length - 1;
    gen = spawn(
      last > 0 ? 'taskset' : process.execPath,
      [
        ...(last > 0 ? ['-c', String(last), process.execPath] : []),
        '--import',
        'tsx',
        GEN,
        sock,
        list((q) => q.stag),
        list((q) => q.qpn),
        String(SPORT),
        String(seconds + 3),
        list((q) => q.psn),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    gen.stdout!.on('data', (d) => (out += d));
    const exited = new Promise<void>((r) => gen!.on('exit', () => r()));
    for (let i = 0; i < 500 && !(await dp.interfaces()).every((x) => x.state === 'up'); i++)
      await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 500)); // past the generator's start
    const count = async () =>
      (await dp.runtime()).reduce((s, t) => s + (t.rows.find((r) => r.name === 'qp-dispatch')?.vectors ?? 0), 0);
    const c0 = await count(),
      t0 = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const mpps = ((await count()) - c0) / ((performance.now() - t0) / 1000) / 1e6;
    await Promise.race([exited, new Promise((r) => setTimeout(r, 6000))]);
    const g = JSON.parse(out.trim().split('\n').pop() || '{}') as { sent?: number; seconds?: number };
    return { mpps, genMpps: (g.sent ?? 0) / (g.seconds ?? 1) / 1e6 };
  } finally {
    gen?.kill('SIGKILL');
    await dp.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runWorkersBench(opts: {
  seconds: number;
}): Promise<{ text: string; json: Record<string, unknown> }> {
  const cpus = os.cpus();
  const lines = [
    `workers: A with cpu.workers 0/1/2 (two memif interfaces, a QP each), B (workers 0) writing 64 KiB x ${OUTSTANDING} on both QPs; ` +
      `${cpus.length} cores, nothing pinned (A's threads, B and this process share them)`,
  ];
  const json: Record<string, unknown> = { bench: 'workers', cores: cpus.length };
  const f = (x: number, d = 2) => x.toFixed(d);
  let one = 0;
  for (const w of [0, 1, 2]) {
    const r = await run(w, opts.seconds);
    if (w === 1) one = r.gbps;
    lines.push(
      `  workers ${w}: WRITE ${f(r.gbps)} Gbit/s (${r.perQp.join(' + ')} writes)${w === 2 && one > 0 ? ` = ${f(r.gbps / one)} x workers 1` : ''}; ` +
        `GET /v1/health p50 ${f(r.busy.p50)} ms, p99 ${f(r.busy.p99)} ms under load (${r.busy.n}), idle p99 ${f(r.idle.p99)} ms`,
    );
    json[`workers${w}`] = {
      gbps: +f(r.gbps, 3),
      healthP50Ms: +f(r.busy.p50, 3),
      healthP99Ms: +f(r.busy.p99, 3),
      idleP99Ms: +f(r.idle.p99, 3),
    };
  }
  // One interface, its two QPs on two workers: worker 1's frames cross the handoff queues.
  const h = await run(2, opts.seconds, 1);
  const h0 = await run(0, opts.seconds, 1);
  lines.push(
    `  one interface, a QP on each of 2 workers (handoff): WRITE ${f(h.gbps)} Gbit/s (${h.perQp.join(' + ')} writes) = ${f(h.gbps / h0.gbps)} x workers 0 on that interface (${f(h0.gbps)})`,
  );
  json.handoff = { gbps: +f(h.gbps, 3), workers0Gbps: +f(h0.gbps, 3) };
  // The spine per worker: one memif interface of two queue pairs, a generator on both queues.
  const sp: Record<number, { mpps: number; genMpps: number }> = {};
  for (const w of [0, 1, 2]) sp[w] = await spineRun(w, opts.seconds);
  lines.push(
    `  memif spine, one interface of 2 queue pairs, a QP per queue, one generator process on both pinned to CPU ${cpus.length - 1} (A's threads share the cores, that one too): ` +
      [0, 1, 2].map((w) => `workers ${w} ${f(sp[w].mpps)} Mpps (offered ${f(sp[w].genMpps)})`).join(', ') +
      (sp[1].mpps > 0 ? ` = ${f(sp[2].mpps / sp[1].mpps)} x workers 1 (goal 1.6)` : ''),
  );
  json.spine = Object.fromEntries(
    [0, 1, 2].map((w) => [`workers${w}`, { mpps: +f(sp[w].mpps, 3), genMpps: +f(sp[w].genMpps, 3) }]),
  );
  return { text: lines.join('\n'), json };
}

if (process.argv[2] === '--child') {
  const [role, dir, arg, nIf] = process.argv.slice(3);
  (role === 'a' ? childA(dir, Number(arg), Number(nIf)) : childB(dir, Number(arg), Number(nIf))).then(
    () => process.exit(0),
    (e) => {
      process.stderr.write(`bench workers side ${role}: ${(e as Error).stack}\n`);
      process.exit(1);
    },
  );
}
