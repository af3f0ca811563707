/**
 * npm run bench -- hostile (prints, never asserts): what a hostile frame costs in time. The test
 * (test/hostile-frames.test.ts) counts each frame's work against bounds from the stack's own
 * state and times nothing; the microseconds are here.
 *
 * One stack (test/hostile-run-helpers.ts's HostileRig: a QP in RTS with sends in flight and
 * receives posted, a listener, the seeded hostile frames aimed at them) takes hostile frames,
 * and, interleaved with them on the same stack, good frames on a second QP: a ping (the echo
 * request answered), an in-window RDMA Write and an in-window Send (each placed and
 * acknowledged). Each frame is timed from the moment it is queued on the driver to the idle
 * pass after what it caused (the test's spin). Prints the per-frame cost distribution (p50,
 * p99, p99.9, max in µs) of hostile and of good frames, the kinds of the 5 slowest hostile
 * frames, and the figure: hostile p99 / good p50. BENCH_HOSTILE_SEED picks the frames (1).
 */
import type { Mr } from '../nodes/rdma/verbs.ts';
import { QpState, type Qp } from '../nodes/rdma/qp.ts';
import {
  HostileRig,
  PEER_PORT,
  pingFrame,
  rtsQp,
  sendBody,
  trpFrame,
  writeBody,
  type Stack,
} from '../test/hostile-run-helpers.ts';

const SEED = Number(process.env.BENCH_HOSTILE_SEED ?? 1);
/** Frames per block: hostile and good frames alternate in blocks, so both see the same heap and JIT state. */
const HOSTILE_BLOCK = 256;
const GOOD_BLOCK = 48;
/** Untimed blocks first (5120 hostile and 2880 good frames): the first frames of each kind run cold code while V8 compiles. */
const WARM_BLOCKS = 20;
const GOOD_KINDS = ['ping', 'write', 'send'] as const;
type GoodKind = (typeof GOOD_KINDS)[number];

/** The good side: a second QP toward the peer's PEER_PORT + 1, an MR it may write, receives for its Sends. */
class Good {
  private qp!: Qp;
  private readonly target: Mr;
  private readonly inbox: Mr;
  private readonly payload = Array.from({ length: 100 }, (_, k) => (k * 7 + 3) & 0xff);
  private n = 0;

  constructor(private readonly s: Stack) {
    this.target = s.rdma.regMr(s.pd, 4096, ['local-write', 'remote-write']);
    this.inbox = s.rdma.regMr(s.pd, 4096, ['local-write']);
    this.open();
  }

  private open(): void {
    this.qp = rtsQp(this.s, PEER_PORT + 1, 1000, 5000);
  }

  /** The next good frame (ping, Write, Send in turn), after the application's side (untimed). */
  next(): { kind: GoodKind; bytes: Uint8Array } {
    const s = this.s;
    s.rcq.poll(4096);
    s.scq.poll(4096);
    if (this.qp.destroyed || this.qp.state === QpState.ERROR) {
      // A hostile frame reached it (a random port and source that matched): a fresh one.
      if (!this.qp.destroyed) s.rdma.destroyQp(this.qp);
      this.open();
    }
    const qp = this.qp;
    while (qp.rqPosted - qp.rqDone < 4)
      s.rdma.postRecv(qp, { wrId: 'good', sg: [{ mr: this.inbox, offset: 0, length: 4096 }] });
    const kind = GOOD_KINDS[this.n++ % GOOD_KINDS.length];
    if (kind === 'ping') return { kind, bytes: pingFrame(s, this.n & 0xffff) };
    const body =
      kind === 'write' ? writeBody(this.target.stag, 0, this.payload) : sendBody(qp.rqDone + 1, this.payload);
    return { kind, bytes: trpFrame(s, PEER_PORT + 1, qp.qpn, qp.rcvNxt, qp.sndNxt, body) };
  }
}

interface Dist {
  n: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
}

function dist(us: number[]): Dist {
  const a = Float64Array.from(us).sort();
  const at = (p: number) =>
    a.length === 0 ? NaN : a[Math.min(a.length - 1, Math.max(0, Math.ceil(p * a.length) - 1))];
  return { n: a.length, p50: at(0.5), p99: at(0.99), p999: at(0.999), max: a.length ? a[a.length - 1] : NaN };
}

const f1 = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
const line = (name: string, d: Dist) =>
  `  ${name.padEnd(8)} p50 ${f1(d.p50).padStart(6)} µs   p99 ${f1(d.p99).padStart(6)} µs   p99.9 ${f1(d.p999).padStart(6)} µs   max ${f1(d.max).padStart(7)} µs   (${d.n} frames)`;
const round = (x: number) => Math.round(x * 100) / 100;
const rounded = (d: Dist) => ({ n: d.n, p50: round(d.p50), p99: round(d.p99), p999: round(d.p999), max: round(d.max) });

export function runHostileBench(opts: { seconds: number }): { text: string; json: object } {
  const rig = new HostileRig(SEED);
  const s = rig.s;
  const good = new Good(s);
  /** One frame in, passes until idle (HostileRig.feed); microseconds. */
  const timed = (bytes: Uint8Array, segments?: number[]): number => {
    const t0 = process.hrtime.bigint();
    rig.feed({ kind: '', bytes, segments });
    return Number(process.hrtime.bigint() - t0) / 1000;
  };
  let i = 0;
  const hostileBlock = (n: number, us: number[] | null, kinds: string[] | null) => {
    for (let k = 0; k < n; k++) {
      const h = rig.next(i++);
      const t = timed(h.bytes, h.segments);
      if (us && kinds) {
        us.push(t);
        kinds.push(h.kind);
      }
    }
  };
  /** Good frames that drew their answer (an echo reply, an ACK): the baseline is work done, not drops. */
  let answered = 0;
  const goodBlock = (n: number, us: Record<GoodKind, number[]> | null) => {
    for (let k = 0; k < n; k++) {
      const g = good.next();
      const before = s.drv.tx.length;
      const t = timed(g.bytes);
      if (us) {
        us[g.kind].push(t);
        if (s.drv.tx.length > before) answered++;
      }
    }
    s.drv.tx.length = 0;
    s.drv.txSegments.length = 0;
    s.drv.txFlags.length = 0;
  };
  for (let w = 0; w < WARM_BLOCKS; w++) {
    hostileBlock(HOSTILE_BLOCK, null, null);
    goodBlock(3 * GOOD_BLOCK, null);
  }
  const hostileUs: number[] = [],
    hostileKinds: string[] = [];
  const goodUs: Record<GoodKind, number[]> = { ping: [], write: [], send: [] };
  const t0 = performance.now();
  const end = t0 + opts.seconds * 1000;
  while (performance.now() < end) {
    hostileBlock(HOSTILE_BLOCK, hostileUs, hostileKinds);
    goodBlock(GOOD_BLOCK, goodUs);
  }
  const ms = performance.now() - t0;

  const hostile = dist(hostileUs);
  const goodAll = dist(GOOD_KINDS.flatMap((k) => goodUs[k]));
  const perKind = Object.fromEntries(GOOD_KINDS.map((k) => [k, dist(goodUs[k])])) as Record<GoodKind, Dist>;
  const ratio = hostile.p99 / goodAll.p50;
  const slowest = hostileUs
    .map((us, k) => ({ us, kind: hostileKinds[k] }))
    .sort((a, b) => b.us - a.us)
    .slice(0, 5);
  const text = [
    `hostile: one stack (a QP with sends in flight, a listener), seed ${SEED}, ${hostile.n} hostile and ${goodAll.n} good frames interleaved in ${(ms / 1000).toFixed(1)} s; each timed from the driver to the idle pass`,
    line('hostile', hostile),
    `${line('good', goodAll)}, ${answered === goodAll.n ? 'each' : `${answered}`} answered`,
    ...GOOD_KINDS.map((k) => line(`  ${k}`, perKind[k])),
    `  hostile p99 / good p50: ${ratio.toFixed(2)} (${f1(hostile.p99)} µs / ${f1(goodAll.p50)} µs)`,
    `  slowest hostile frames: ${slowest.map((x) => `${f1(x.us)} µs ${x.kind}`).join(', ')}`,
  ].join('\n');
  return {
    text,
    json: {
      bench: 'hostile',
      seed: SEED,
      seconds: round(ms / 1000),
      hostile: rounded(hostile),
      good: { ...rounded(goodAll), answered, ...Object.fromEntries(GOOD_KINDS.map((k) => [k, rounded(perKind[k])])) },
      hostileP99OverGoodP50: round(ratio),
      slowest: slowest.map((x) => ({ kind: x.kind, us: round(x.us) })),
    },
  };
}
