/**
 * Congestion control (issue 32; nodes/rdma/congestion.ts, PROTOCOL.md sections 5 and 10). One
 * stack with the peer played by the test (test/rdma-rig-helpers.ts, a manual clock: every step
 * is decided by the packets, never by timing) for the window's arithmetic and hostile ACKs; two
 * stacks over a pipe with the fault injector dropping or CE-marking for the behaviour end to end;
 * the fault injector's CE marking and the configuration keys on their own.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { FaultInjector } from '../drivers/fault.ts';
import { parseConfig } from '../config/load.ts';
import { congestionOptions } from '../dataplane/dataplane.ts';
import { ccOnAck, ccOnLoss, ccSharePath, INITIAL_CWND, MIN_CWND, sendLimit } from '../nodes/rdma/congestion.ts';
import type { RdmaOptions } from '../nodes/rdma/stack.ts';
import type { Qp } from '../nodes/rdma/qp.ts';
import { memPool } from './helpers.ts';
import { PEER_IP, parseEth, parseIp4, udpFrame, US_IP } from './l2l4-helpers.ts';
import { ALL, type Out, PEER_PORT, QPN, type Rig, TRP, rig, tagged, taggedMtu, trpHeader } from './rdma-rig-helpers.ts';
import { connectManual, finish, makeEnds, type Pair, trackedStacks, waitCompletions } from './rdma-helpers.ts';

const SEG = taggedMtu(1500);
const data = (out: Out[]) => out.filter((p) => p.op === TRP.DATA && p.body.length > 0);
const cc = (r: Rig) => r.rdma.queryQp(r.qp).congestion;
/** The ECN bits of the IPv4 header of every frame the rig sent from index `from`. */
const ecnOf = (r: Rig, from: number) => r.drv.tx.slice(from).map((f) => parseIp4(parseEth(f).payload).tos & 3);

/** A rig whose QP writes `segments` full segments to the peer (PSNs from 0). */
function writer(congestion: RdmaOptions['congestion'], segments: number): { r: Rig; first: Out[] } {
  const r = rig({ rdma: { congestion } });
  const mr = r.mr(segments * SEG, ['local-write']);
  r.post({
    wrId: 1,
    opcode: 'write',
    sg: [{ mr, offset: 0, length: segments * SEG }],
    remote: { stag: 0x1234, offset: 0 },
  });
  return { r, first: r.run() };
}
const ack = (r: Rig, upTo: number, echo = 0) => r.feed(trpHeader(0, upTo, TRP.DATA, echo));
const sack = (r: Rig, from: number, to: number, echo = 0) => r.feed(trpHeader(from, to, TRP.SACK, echo));

test('reno: slow start from 10 segments, doubling per window acknowledged; data ECT(0)', () => {
  const { r, first } = writer('reno', 200);
  assert.is(data(first).length, INITIAL_CWND, 'the initial window');
  assert.ok(
    ecnOf(r, 0).every((e) => e === 2),
    'every data packet ECT(0)',
  );
  const out = ack(r, 10);
  assert.is(cc(r).cwnd, 20);
  assert.equal(
    data(out).map((p) => p.psn),
    Array.from({ length: 20 }, (_, k) => 10 + k),
    'the window of 20, new PSNs',
  );
  assert.is(cc(r).algorithm, 'reno');
  r.close();
});

test('reno: a loss halves the window once per window of data; resends and new data share the halved window (RFC 6675)', () => {
  const { r } = writer('reno', 400);
  ack(r, 10); // cwnd 20, PSNs 10..29 out
  // 10 and 11 lost: the peer SACKs 12..14.
  let out = sack(r, 12, 15);
  assert.equal(
    data(out).map((p) => p.psn),
    [10],
    'only the first hole resent (RFC 6675 (4.3)): 20 in flight less 3 SACKed less 1 lost is over cwnd 10',
  );
  assert.is(cc(r).cwnd, 10, 'halved');
  assert.is(cc(r).lossReductions, 1);
  // 15..17 lost too, 18..29 arrived: the pipe is 10's resend alone; 11, 15, 16, 17 resent
  // first, then new data up to the window; no second reduction.
  out = sack(r, 18, 30);
  assert.equal(
    data(out).map((p) => p.psn),
    [11, 15, 16, 17, 30, 31, 32, 33, 34],
    'the holes first, then new PSNs while the pipe is under cwnd 10',
  );
  assert.is(cc(r).cwnd, 10, 'once per window');
  assert.is(cc(r).lossReductions, 1);
  assert.ok(cc(r).losses >= 2, 'both losses counted');
  // Everything up to 30 acknowledged: recovery is over, congestion avoidance from ssthresh 10.
  out = ack(r, 30);
  const w = cc(r).cwnd;
  assert.is(w, 12, 'additive increase: cwnd += acknowledged / cwnd = 10 + 20 / 10');
  assert.equal(
    data(out).map((p) => p.psn),
    [35, 36, 37, 38, 39, 40, 41],
    'the window less the 5 new segments still out',
  );
  r.close();
});

test('reno: what the peer SACKed has left the network: new data goes on within the halved window', () => {
  const { r } = writer('reno', 400);
  ack(r, 10); // cwnd 20, PSNs 10..29 out
  // 10 and 11 lost, 12..29 arrived: 20 in flight, 18 of them SACKed, cwnd halved to 10.
  const out = sack(r, 12, 30);
  assert.is(cc(r).cwnd, 10);
  assert.equal(
    data(out).map((p) => p.psn),
    [10, 11, ...Array.from({ length: 8 }, (_, k) => 30 + k)],
    'the holes resent, then new segments while in flight less SACKed (2, then up to 9) is under cwnd 10',
  );
  r.close();
});

test('cubic: a loss multiplies the window by 0.7; it grows back along the cubic of the time since', () => {
  const { r } = writer('cubic', 30);
  ack(r, 10); // cwnd 20, PSNs 10..29 out
  sack(r, 12, 30); // 10 and 11 lost
  assert.is(cc(r).cwnd, 14, 'x 0.7');
  assert.is(cc(r).lossReductions, 1);
  ack(r, 30); // recovered; nothing in flight (no timer runs while the clock moves)
  // K = cbrt((W_max - cwnd) / C) = cbrt(6 / 0.4) = 2.47 s after the epoch: 3 s later the cubic
  // is back at W_max (20); Reno's increase would give 14 + 14 / 14 = 15.
  r.clock.advance(3e9);
  const mr = r.mr(100 * SEG, ['local-write']);
  r.post({ wrId: 2, opcode: 'write', sg: [{ mr, offset: 0, length: 100 * SEG }], remote: { stag: 0x1234, offset: 0 } });
  const out = data(r.run());
  assert.is(out.length, 14);
  ack(r, 44);
  assert.ok(cc(r).cwnd >= 19, `the cubic's growth, not Reno's (cwnd ${cc(r).cwnd})`);
  assert.is(cc(r).algorithm, 'cubic');
  r.close();
});

test('reno: a timeout that only asks (PROBE) holds the window: spurious, nothing to undo; a loss its answer finds halves it; unanswered, the next timeout takes it to 1', () => {
  // With an RTT sample (1 ms) and the window of 20 full.
  const setUp = () => {
    const { r } = writer('reno', 100);
    r.clock.advance(1e6);
    ack(r, 10); // cwnd 20
    r.advance(1, 0.05); // 10..29 out, paced
    assert.is(r.qp.inFlight, 20);
    return r;
  };
  const timeout = (r: Rig) => {
    let out: Out[] = [];
    for (let k = 0; k < 400 && r.qp.timeouts === 0; k++) out = out.concat(r.advance(0.1, 0.1));
    assert.is(r.qp.timeouts, 1, 'the retransmission timer expired');
    assert.is(data(out).length, 0, 'the first timeout asks (a PROBE), resends nothing');
    assert.is(cc(r).cwnd, 20, 'the window holds while the PROBE asks');
  };
  // The answer acknowledges what was out: the originals had arrived (a late ACK).
  const late = setUp();
  timeout(late);
  ack(late, 30);
  assert.is(late.qp.spuriousTimeouts, 1);
  assert.is(late.qp.ccReductions, 0, 'no reduction');
  assert.ok(cc(late).cwnd > 20, `and the window grows on (cwnd ${cc(late).cwnd})`);
  late.close();
  // The answer acknowledges nothing: the oldest is lost; the peer answered, so the ACK clock
  // runs: a fast retransmission's reaction (halved), not a timeout's (1); the oldest goes at once.
  const lost = setUp();
  timeout(lost);
  const out = lost.feed(trpHeader(10, 10, TRP.PROBE_ACK)).concat(lost.run());
  assert.equal(
    data(out).map((p) => p.psn),
    [10],
    'the oldest resent',
  );
  assert.is(cc(lost).cwnd, 10, 'halved');
  assert.is(cc(lost).ssthresh, 10);
  lost.close();
  // No answer at all: the next timeout resends, and the window goes to 1 (RFC 5681).
  const silent = setUp();
  timeout(silent);
  let again: Out[] = [];
  for (let k = 0; k < 800 && silent.qp.timeouts === 1; k++) again = again.concat(silent.advance(0.1, 0.1));
  assert.is(silent.qp.timeouts, 2);
  assert.is(cc(silent).cwnd, 1, 'cwnd 1 at the second timeout');
  assert.is(cc(silent).ssthresh, 10, 'ssthresh half of what was in flight');
  silent.close();
});

test('timeout: an ACK sooner after the resend than the smallest RTT acknowledges the original: undone; a later one is a loss', () => {
  for (const late of [false, true]) {
    const { r } = writer('reno', 20);
    r.clock.advance(1e6);
    ack(r, 10); // RTT 1 ms; cwnd 20: 10..19 go, paced
    r.advance(1, 0.05);
    r.clock.advance(1e6);
    ack(r, 19); // only 19 out: F-RTO has nothing after it to tell by
    const w = cc(r).cwnd;
    const minRtt = r.qp.minRttNs;
    assert.ok(minRtt > 0 && minRtt <= 2e6, `min RTT ${minRtt}`);
    let out: Out[] = [];
    for (let k = 0; k < 400 && data(out).length === 0; k++) out = r.advance(0.1, 0.1);
    assert.equal(
      data(out).map((p) => p.psn),
      [19],
      'the timeout resent 19',
    );
    assert.is(cc(r).cwnd, 1);
    r.clock.advance(late ? minRtt + 0.5e6 : minRtt / 4);
    ack(r, 20);
    if (late) {
      assert.is(r.qp.spuriousTimeouts, 0, 'a loss');
      assert.ok(cc(r).cwnd <= 2 && cc(r).ssthresh < w, `reduced (cwnd ${cc(r).cwnd}, ssthresh ${cc(r).ssthresh})`);
    } else {
      assert.is(r.qp.spuriousTimeouts, 1, 'spurious: the ACK came too soon to be for the resend');
      assert.is(cc(r).cwnd, w, 'the window before the timeout');
    }
    r.close();
  }
});

test('timeout before any RTT sample: the window restarts from 1, the slow-start threshold stays', () => {
  const { r } = writer('reno', 100);
  const ss = cc(r).ssthresh;
  assert.is(data(r.advance(12)).length, 0, 'rto-init 10 ms, no ACK yet: the timeout asks (a PROBE)');
  // The answer acknowledges nothing: the oldest is lost, resent at once.
  const out = r.feed(trpHeader(0, 0, TRP.PROBE_ACK)).concat(r.run());
  assert.is(data(out)[0].psn, 0, 'the oldest resent');
  assert.is(cc(r).cwnd, 1);
  assert.is(cc(r).ssthresh, ss, 'not halved: the timer ran on a guess');
  ack(r, 1); // stops right after the resend: not spurious; slow start from 1
  assert.ok(cc(r).cwnd >= 2 && cc(r).cwnd < cc(r).ssthresh, `slow start (cwnd ${cc(r).cwnd})`);
  r.close();
});

test('reno: a CE echo halves the window once per window, sends nothing again; a backwards echo is ignored', () => {
  const { r } = writer('reno', 200);
  ack(r, 10); // cwnd 20
  let out = ack(r, 15, 3);
  assert.is(cc(r).ceMarks, 3);
  assert.is(cc(r).ecnReductions, 1);
  assert.is(cc(r).cwnd, 10);
  assert.is(data(out).length, 0, 'nothing resent, nothing new (15 in flight)');
  out = ack(r, 20, 9);
  assert.is(cc(r).ecnReductions, 1, 'once per window');
  assert.is(cc(r).ceMarks, 9);
  out = ack(r, 21, 5); // counter went backwards (a reordered ACK): ignored
  assert.is(cc(r).ceMarks, 9);
  assert.is(r.rdma.queryQp(r.qp).counters.retransmits, 0);
  r.close();
});

test('dctcp: alpha is the marked fraction (EWMA), the window shrinks by alpha/2 per marked window', () => {
  const { r } = writer('dctcp', 2000);
  assert.is(cc(r).alpha, 1, 'alpha starts at 1 (RFC 8257)');
  let acked = 0,
    echo = 0;
  let sent = 10;
  // Every window fully acknowledged, one segment in four marked.
  for (let round = 0; round < 12; round++) {
    const w = (sent - acked) | 0;
    echo += Math.floor(w / 4);
    acked = sent;
    const out = ack(r, acked, echo & 0xfff);
    sent += data(out).length;
  }
  const a = cc(r).alpha;
  assert.ok(a < 1 && a > 0.2, `alpha ${a} moves from 1 towards the marked fraction 0.25`);
  assert.ok(cc(r).ecnReductions > 0);
  assert.ok(cc(r).cwnd >= MIN_CWND);
  r.close();
});

test('hostile: a peer echoing CE on everything slows the QP to the floor, never stalls it', () => {
  for (const algo of ['reno', 'dctcp', 'cubic'] as const) {
    const segs = 300;
    const { r } = writer(algo, segs);
    let acked = 0,
      echo = 0,
      minCwnd = Infinity,
      rounds = 0;
    let sent = 10;
    while (acked < segs && rounds++ < 400) {
      echo = (echo + 2047) & 0xfff; // the most a counter may move forward at once
      acked = sent;
      const out = ack(r, acked, echo);
      sent += data(out).length;
      minCwnd = Math.min(minCwnd, cc(r).cwnd);
      assert.ok(cc(r).alpha <= 1, `${algo}: alpha ${cc(r).alpha} at most 1`);
    }
    assert.is(acked, segs, `${algo}: every segment went out and was acknowledged`);
    assert.ok(minCwnd >= MIN_CWND, `${algo}: cwnd never below ${MIN_CWND} (min ${minCwnd})`);
    assert.ok(cc(r).cwnd <= 4, `${algo}: and it stays low (cwnd ${cc(r).cwnd})`);
    const c = r.scq.poll(10);
    assert.equal(
      c.map((x) => x.status),
      ['success'],
      `${algo}: the write completed`,
    );
    r.close();
  }
});

test('hostile: a peer answering every PROBE with nothing acknowledged cannot hold the window up or stall the QP: reduced, one resend per answer, then retry-exceeded (the WR being sent)', () => {
  const { r } = writer('reno', 100);
  r.clock.advance(1e6);
  ack(r, 10); // RTT 1 ms, cwnd 20
  r.advance(1, 0.05); // 10..29 out
  const w = cc(r).cwnd;
  let resends = 0,
    answers = 0;
  for (let k = 0; k < 20000 && r.rdma.queryQp(r.qp).state !== 'error'; k++) {
    const out = r.advance(0.5, 0.5);
    resends += data(out).length;
    if (out.some((p) => p.op === TRP.PROBE)) {
      // The answer: nothing new acknowledged, whatever was resent.
      answers++;
      resends += data(r.feed(trpHeader(10, 10, TRP.PROBE_ACK)).concat(r.run())).length;
    }
    assert.ok(cc(r).cwnd <= w, `never above the window before (cwnd ${cc(r).cwnd})`);
  }
  assert.is(r.rdma.queryQp(r.qp).state, 'error', 'the QP ends: retry-exceeded, not stalled forever');
  assert.ok(answers >= 1, `answered (${answers})`);
  assert.ok(cc(r).cwnd <= w / 2, `reduced (cwnd ${cc(r).cwnd})`);
  assert.ok(resends <= answers, `one resend per answer at most (${resends} for ${answers})`);
  assert.equal(
    r.scq.poll(10).map((x) => x.status),
    ['retry-exceeded'],
  );
  r.close();
});

test('hostile: an ACK of data never sent is refused and does not open the window; a peer that never echoes is still bound by losses', () => {
  const { r } = writer('reno', 200);
  const before = r.err('trp-input', 'bad_ack');
  const out = ack(r, 5000);
  assert.is(r.err('trp-input', 'bad_ack'), before + 1);
  assert.is(data(out).length, 0);
  assert.is(cc(r).cwnd, INITIAL_CWND);
  // No CE echo at all, but losses: the window still halves.
  ack(r, 10);
  sack(r, 13, 16);
  assert.is(cc(r).cwnd, 10);
  assert.is(cc(r).ceMarks, 0);
  r.close();
});

/** mulberry32: a small seeded generator (the same losses every run). */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Segments found lost and not resent yet, and those SACKed, counted again from the QP's slots. */
function recount(qp: Qp): { lost: number; sacked: number } {
  let lost = 0,
    sacked = 0;
  for (let p = qp.sndUna; p !== qp.sndNxt; p = (p + 1) >>> 0) {
    const s = p & qp.wMask;
    if (qp.rtxQueued[s] === 1) lost++;
    if (qp.txFlags[s] & 2) sacked++;
  }
  return { lost, sacked };
}

test('recovery: on a lossy path, resends and new data together stay within cwnd (RFC 6675 pipe); only the first resend of a recovery or a timeout goes beyond it', () => {
  for (const algo of ['reno', 'cubic'] as const) {
    const SEGS = 400;
    const { r } = writer(algo, SEGS);
    const qp = r.qp;
    const rnd = seeded(algo === 'reno' ? 7 : 11);
    // The path: one-way 0.5 ms, 10 % of data packets lost (first sends and resends alike); the
    // peer acknowledges cumulatively and SACKs up to 4 ranges above, at once (ACKs are not lost).
    const wire: { psn: number; at: number }[] = [];
    const arrived = new Set<number>();
    let cum = 0,
      t = 0,
      steps = 0,
      resends = 0,
      beyond = 0;
    const check = (out: Out[], what: string) => {
      const sent = data(out);
      for (const p of sent) wire.push({ psn: p.psn, at: t + 0.5 });
      const c = cc(r);
      const counted = recount(qp);
      assert.is(qp.lostOut, counted.lost, `${algo} ${what}: lost-not-resent as counted from the slots`);
      assert.is(qp.sacked, counted.sacked, `${algo} ${what}: SACKed as counted from the slots`);
      const pipe = qp.inFlight - qp.sacked - qp.lostOut;
      const forced = c.lossReductions + r.rdma.queryQp(qp).counters.timeouts - before;
      if (sent.length > 0 && pipe > c.cwnd) {
        beyond++;
        assert.ok(
          sent.length === 1 && forced > 0,
          `${algo} ${what}: ${sent.length} sent with the pipe at ${pipe} over cwnd ${c.cwnd} ` +
            `(only one, opening a recovery or after a timeout, may go beyond it)`,
        );
      }
      before = c.lossReductions + r.rdma.queryQp(qp).counters.timeouts;
    };
    let before = 0;
    // The initial window went before the loop: on the wire.
    for (let p = 0; p < INITIAL_CWND; p++) wire.push({ psn: p, at: 0.5 });
    while (cum < SEGS && steps++ < 40000) {
      t += 0.1;
      r.clock.advance(100_000);
      check(r.run(), `timers at ${t.toFixed(1)} ms`);
      let got = false;
      for (let i = 0; i < wire.length;) {
        if (wire[i].at > t + 1e-9) {
          i++;
          continue;
        }
        const { psn } = wire[i];
        wire.splice(i, 1);
        if (rnd() < 0.1) continue;
        arrived.add(psn);
        got = true;
      }
      if (!got) continue;
      while (arrived.has(cum)) cum++;
      const dgrams = [trpHeader(0, cum, TRP.DATA)];
      // The SACK ranges above the cumulative ACK, the highest first (RFC 2018's order).
      const ranges: [number, number][] = [];
      const top = Math.max(...arrived) + 1;
      for (let p = cum; p < top;) {
        while (p < top && !arrived.has(p)) p++;
        const a = p;
        while (p < top && arrived.has(p)) p++;
        if (p > a) ranges.push([a, p]);
      }
      for (const [a, b] of ranges.reverse().slice(0, 4)) dgrams.push(trpHeader(a, b, TRP.SACK));
      check(r.feed(...dgrams), `ACK ${cum} at ${t.toFixed(1)} ms`);
      resends = r.rdma.queryQp(qp).counters.retransmits;
    }
    assert.is(cum, SEGS, `${algo}: every segment arrived`);
    assert.equal(
      r.scq.poll(4).map((c) => c.status),
      ['success'],
      `${algo}: the write completed`,
    );
    assert.ok(resends > 20, `${algo}: losses were repaired (${resends} resends)`);
    assert.ok(cc(r).lossReductions > 0, `${algo}: the window was reduced`);
    assert.ok(beyond <= cc(r).lossReductions + r.rdma.queryQp(qp).counters.timeouts, `${algo}: forced resends`);
    r.close();
  }
});

test('slow start: a paced QP whose ACKs come in bunches still grows by one per segment acknowledged; one with nothing more to send does not', () => {
  const { r, first } = writer('reno', 4000);
  // Every ACK 1 ms after its segment left, the clock jumping there at once: the ACKs of a
  // window arrive together (a scheduling gap), pacing holds most of the next window back, so
  // little is in flight at each ACK; yet the QP has data waiting: the window is the limit.
  const pending = data(first).map((p) => ({ psn: p.psn, t: p.t }));
  for (let k = 0; k < 120; k++) {
    const p = pending.shift() as { psn: number; t: number };
    if (r.clock.t < p.t + 1e6) r.clock.advance(p.t + 1e6 - r.clock.t);
    for (const q of data(ack(r, p.psn + 1))) pending.push({ psn: q.psn, t: q.t });
  }
  assert.is(cc(r).cwnd, INITIAL_CWND + 120, 'one segment per segment acknowledged');
  assert.ok(r.qp.inFlight * 2 < cc(r).cwnd, `with less than half the window in flight (${r.qp.inFlight})`);
  r.close();
  // 15 segments to send in all: after the first window, the QP runs out of data.
  const few = writer('reno', 15);
  ack(few.r, 10);
  assert.is(cc(few.r).cwnd, 20);
  ack(few.r, 15);
  assert.is(cc(few.r).cwnd, 20, 'application-limited: the window it did not use is not grown');
  few.r.close();
});

test('cwnd validation: a window the QP never filled does not grow (at most twice what it had in the network); filled, it grows again', () => {
  const { r, first } = writer('reno', 4000);
  assert.is(data(first).length, INITIAL_CWND);
  r.clock.advance(1e6); // the round trip: 1 ms
  // The window of 20 opens; pacing lets a few go now, the rest on timers that do not run here
  // (the clock stands still: a QP that does not get the CPU, or whose timer is late).
  const burst = data(ack(r, 10));
  assert.is(cc(r).cwnd, 20);
  assert.ok(burst.length < 10, `only part of the window went (${burst.length})`);
  // Their ACKs come back, each on its own, the clock still standing: data waits, yet the QP
  // never had more than the initial 10 in the network: the window stays at twice that.
  for (const p of burst) ack(r, p.psn + 1);
  assert.is(cc(r).cwnd, 2 * INITIAL_CWND, 'not grown past twice what was in the network');
  assert.ok(r.qp.sqNext !== r.qp.sqTail, 'with data waiting (not application-limited)');
  // The clock runs again: the timers send the rest of the window, it fills, and its ACKs grow
  // it as slow start does (one segment per segment acknowledged).
  const rest = data(r.advance(1, 0.05));
  assert.is(r.qp.inFlight, 20, `the window filled (${rest.length} more went)`);
  const last = rest[rest.length - 1].psn;
  r.clock.advance(1e6);
  ack(r, last + 1);
  assert.ok(cc(r).cwnd >= 35, `grown again once used (${cc(r).cwnd})`);
  r.close();
});

/**
 * Slow start with every segment acknowledged on its own `rttMs(round)` after it was sent (the
 * manual clock), for `rounds` rounds (a round: what was sent before the ACK of the first
 * segment of the next). Returns the QP, its cwnd at the end of each round and
 * the most rounds it had been in Conservative Slow Start during each.
 */
function slowStartRounds(rttMs: (round: number) => number, rounds: number): { r: Rig; cwnds: number[]; css: number[] } {
  const { r, first } = writer('reno', 4000);
  const pending = data(first).map((p) => ({ psn: p.psn, t: p.t }));
  const cwnds: number[] = [],
    css: number[] = [];
  let round = 0,
    roundEnd = r.qp.sndNxt;
  while (pending.length > 0) {
    const p = pending.shift() as { psn: number; t: number };
    if (p.psn >= roundEnd) {
      cwnds.push(cc(r).cwnd);
      if (++round === rounds) break;
      roundEnd = r.qp.sndNxt;
    }
    // Up to the ACK's time in 50 us steps: paced segments leave on their timers meanwhile.
    const dt = (p.t + rttMs(round) * 1e6 - r.clock.t) / 1e6;
    const out = dt > 0 ? r.advance(dt, Math.min(0.05, dt)) : [];
    for (const q of [...data(out), ...data(ack(r, p.psn + 1))]) pending.push({ psn: q.psn, t: q.t });
    css[round] = Math.max(css[round] ?? 0, r.qp.hsCssRounds);
  }
  assert.is(r.rdma.queryQp(r.qp).counters.retransmits, 0, 'nothing lost, nothing resent');
  return { r, cwnds, css };
}

test('HyStart++: a steady RTT keeps slow start doubling; a round whose smallest RTT rose ends it through Conservative Slow Start, a fall back resumes it', () => {
  // Steady 1 ms: slow start throughout.
  const steady = slowStartRounds(() => 1, 6);
  // (Round 1 is short: the initial window went as a burst, the next ones paced.)
  for (let k = 2; k < 6; k++)
    assert.ok(steady.cwnds[k] >= 1.7 * steady.cwnds[k - 1], `about doubling per round (${steady.cwnds})`);
  assert.is(steady.r.qp.hystartExits, 0);
  assert.is(steady.r.qp.hsCssRounds, 0, 'never in CSS');
  steady.r.close();
  // From round 3 on, 1.5 ms (a queue of 0.5 ms; the threshold is max(1 ms / 8, 0.1 ms)).
  const rising = slowStartRounds((k) => (k >= 3 ? 1.5 : 1), 10);
  const c = rising.cwnds;
  assert.is(rising.r.qp.hystartExits, 1, `slow start ended once (${c})`);
  assert.is(cc(rising.r).hystartExits, 1, 'the QP view (rdmactl show qp, REST, /metrics) says so');
  assert.ok(c[3] < 2 * c[2], `round 3 grew by less than double: CSS (${c[2]} -> ${c[3]})`);
  for (let k = 4; k <= 7; k++) assert.ok(c[k] <= 1.3 * c[k - 1], `CSS: round ${k} grew by a quarter at most (${c})`);
  const ss = cc(rising.r).ssthresh;
  assert.ok(ss < 512 && ss >= c[7], `ssthresh set where CSS ended (${ss})`);
  assert.ok(c[9] <= c[8] + 2, `congestion avoidance after: about a segment per round (${c})`);
  rising.r.close();
  // A rise in rounds 3 and 4 that falls back after: noise, slow start again.
  const blip = slowStartRounds((k) => (k === 3 || k === 4 ? 1.5 : 1), 7);
  assert.ok(
    blip.css.some((x) => x > 0),
    `CSS entered (${blip.css})`,
  );
  assert.is(blip.r.qp.hystartExits, 0, `no exit (${blip.cwnds})`);
  assert.is(blip.r.qp.hsCssRounds, 0, 'out of CSS');
  assert.ok(blip.cwnds[4] < 1.5 * blip.cwnds[3], `CSS: slower (${blip.cwnds})`);
  assert.ok(blip.cwnds[6] >= 1.8 * blip.cwnds[5], `doubling again (${blip.cwnds})`);
  blip.r.close();
});

/**
 * The delay component, on a QP of the rig in congestion avoidance: its state set as a round of
 * data would leave it (cwnd, ssthresh, the window in use, the RTTs), then the congestion calls
 * an ACK and a loss make (congestion.ts).
 */
function avoiding(cwnd: number, minRttUs: number, srttUs: number): Rig {
  const r = rig({ rdma: { congestion: 'reno' } });
  const q = r.qp;
  q.cwnd = cwnd;
  q.ssthresh = cwnd / 2;
  q.ccUsed = q.ccUsedLast = cwnd; // the window was in the network this round
  q.ccUseEnd = (q.sndNxt + 1000) >>> 0; // and the round goes on
  q.minRttNs = minRttUs * 1e3;
  q.srttNs = srttUs * 1e3;
  return r;
}

test('delay: without a loss behind a queue the RTT above its smallest changes nothing (a dedicated link: our own processing); a loss with the RTT >= 1.5 x its smallest sets the full-queue RTT, one without a queue does not', () => {
  // 40 segments, RTT 3x its smallest: Vegas' estimate would say 27 queued; nothing learned yet.
  let r = avoiding(40, 100, 300);
  ccOnAck(r.qp, 40, 512, 0);
  assert.ok(r.qp.cwnd > 40, `grew as reno does (${r.qp.cwnd})`);
  assert.is(cc(r).delayReductions, 0);
  assert.is(cc(r).fullQueueRttUs, 0);
  // A loss at 1.2 x the smallest RTT: no queue in front of it (a corrupted or random loss).
  r.qp.srttNs = 120e3;
  assert.is(ccOnLoss(r.qp), false, 'nothing learned from a loss without a queue');
  assert.is(r.qp.fullRttNs, 0);
  r.close();
  r = avoiding(40, 100, 160);
  assert.is(ccOnLoss(r.qp), true, 'a loss behind a queue (1.6 x) is learned');
  assert.is(cc(r).fullQueueRttUs, 160, 'the view says the full-queue RTT (rdmactl show qp, REST, /metrics)');
  assert.is(cc(r).lossReductions, 1, 'and halves the window as reno does');
  r.close();
});

test('delay: once a full queue dropped, the QP grows under 4 queued segments, holds from 4, and from 8 is reduced x 0.7 once per window; grows again when the queue drains', () => {
  const r = avoiding(40, 100, 100);
  r.qp.fullRttNs = 400e3;
  // No queue: reno's growth.
  ccOnAck(r.qp, 40, 512, 0);
  const grown = r.qp.cwnd;
  assert.ok(grown > 40, `no queue: grows (${grown})`);
  // 40 x (1 - 100/115) = 5.2 segments queued: holds.
  r.qp.srttNs = 115e3;
  ccOnAck(r.qp, 40, 512, 0);
  assert.is(r.qp.cwnd, grown, 'between 4 and 8 queued: the window holds');
  // 41 x (1 - 100/200) = 20 queued: x 0.7, once for this window.
  r.qp.srttNs = 200e3;
  ccOnAck(r.qp, 10, 512, 0);
  const reduced = r.qp.cwnd;
  assert.ok(Math.abs(reduced - grown * 0.7) < 1e-9, `x 0.7 (${grown} -> ${reduced})`);
  assert.is(cc(r).delayReductions, 1);
  // (The rig's QP has nothing in flight: the window the reduction covers is set by hand.)
  const covered = (r.qp.sndUna + 40) >>> 0;
  r.qp.ccRecover = covered;
  ccOnAck(r.qp, 10, 512, 0);
  assert.is(r.qp.cwnd, reduced, 'once per window: the rest of it is covered');
  assert.is(cc(r).delayReductions, 1);
  assert.is(r.rdma.queryQp(r.qp).counters.retransmits, 0, 'nothing was lost or resent for it');
  // That window acknowledged (its recovery point reached): the queue still there, reduced again.
  r.qp.ccRecover = r.qp.sndUna;
  ccOnAck(r.qp, 10, 512, 0);
  assert.is(cc(r).delayReductions, 2, 'the next window, the queue still there: reduced again');
  // The queue drained: the window grows again.
  r.qp.ccRecover = r.qp.sndUna;
  r.qp.srttNs = 100e3;
  const before = r.qp.cwnd;
  ccOnAck(r.qp, 10, 512, 0);
  ccOnAck(r.qp, 40, 512, 0);
  assert.ok(r.qp.cwnd > before, `grows again (${before} -> ${r.qp.cwnd})`);
  r.close();
});

test('hostile: a peer holding its ACKs back longer every window (the RTT rising without end once a full queue was learned) cannot take the QP below 4 queued segments or stall it', () => {
  const r = avoiding(40, 100, 100);
  r.qp.fullRttNs = 400e3;
  let least = Infinity;
  for (let w = 0; w < 80; w++) {
    r.qp.srttNs = Math.min(r.qp.srttNs * 1.5, 1e12); // 100 us x 1.5 per window, to 1000 s
    r.qp.ccRecover = r.qp.sndUna; // a new window each time: a reduction is allowed in each
    ccOnAck(r.qp, 10, 512, 0);
    least = Math.min(least, sendLimit(r.qp, 512));
  }
  const c = r.qp.cwnd;
  // With the RTT so far above its smallest, nearly the whole window counts as queued: the delay
  // component holds it where 4-8 segments are queued, and reductions stop below 8.
  assert.ok(c >= 4 && c < 12, `the window settles where 4-8 segments are queued (${c})`);
  assert.ok(least >= MIN_CWND, `the QP may always send (at least ${MIN_CWND} segments: ${least})`);
  assert.ok(cc(r).delayReductions > 0, 'it was reduced on the way down');
  r.close();
});

test("delay: a full-queue RTT one QP learned is every QP's towards the same peer through the same interface, and a QP connecting there later takes it; a QP towards another peer does not", async () => {
  const p = trackedStacks({ rdma: { congestion: 'reno' } });
  try {
    await p.ready;
    const A1 = makeEnds(p.a),
      A2 = makeEnds(p.a),
      B1 = makeEnds(p.b),
      B2 = makeEnds(p.b),
      L1 = makeEnds(p.a),
      L2 = makeEnds(p.a);
    connectManual(p.a, A1.qp, p.b, B1.qp);
    connectManual(p.a, A2.qp, p.b, B2.qp);
    connectManual(p.a, L1.qp, p.a, L2.qp); // a loopback pair: the peer is A's own address
    A1.qp.minRttNs = 100e3;
    A1.qp.srttNs = 300e3;
    A1.qp.cwnd = 20;
    assert.is(ccOnLoss(A1.qp), true);
    ccSharePath(p.a.rdma.core.qps, A1.qp);
    assert.is(p.a.rdma.queryQp(A2.qp).congestion.fullQueueRttUs, 300, 'the other QP to B has it');
    assert.is(p.a.rdma.queryQp(L1.qp).congestion.fullQueueRttUs, 0, 'a QP to another peer has not');
    assert.is(p.a.rdma.queryQp(L2.qp).congestion.fullQueueRttUs, 0);
    const A3 = makeEnds(p.a),
      B3 = makeEnds(p.b);
    connectManual(p.a, A3.qp, p.b, B3.qp);
    assert.is(p.a.rdma.queryQp(A3.qp).congestion.fullQueueRttUs, 300, 'a QP connecting to B later takes it');
  } finally {
    p.close();
  }
});

test('pacing: with an RTT estimate a window is spread over the round trip, not sent as one burst', () => {
  const { r, first } = writer('reno', 200);
  assert.is(data(first).length, INITIAL_CWND, 'the initial window as a burst (no RTT estimate yet)');
  r.clock.advance(1e6); // the round trip: 1 ms
  const atAck = data(ack(r, 10));
  assert.is(cc(r).cwnd, 20);
  // Slow start paces at 2 x cwnd per srtt (one segment per 25 us); the timer's tick (100 us)
  // is the finest wait, so a tick's worth goes at once.
  assert.ok(atAck.length >= 2 && atAck.length <= 10, `${atAck.length} at once, not the window of 20`);
  const later = data(r.advance(1, 0.05));
  assert.equal(
    [...atAck, ...later].map((p) => p.psn),
    Array.from({ length: 20 }, (_, k) => 10 + k),
    'the rest of the window follows, in order, within the round trip',
  );
  const span = later[later.length - 1].t - atAck[0].t;
  assert.ok(span >= 200_000 && span <= 1_000_000, `spread over ${span / 1000} us of the 1 ms round trip`);
  r.close();
});

test('none: the whole TRP window at once, no ECT', () => {
  const { r, first } = writer('none', 200);
  assert.is(data(first).length, 200);
  assert.ok(ecnOf(r, 0).every((e) => e === 0));
  assert.is(cc(r).algorithm, 'none');
  r.close();
});

test('receiver: CE-marked data packets are counted and echoed in the ACK (12 bits), ECT ones are not', () => {
  const r = rig({ rdma: { congestion: 'reno' } });
  const mr = r.mr(4096, ALL);
  const seg = (psn: number, tos: number) => {
    r.drv.rx.push({
      bytes: udpFrame({
        src: PEER_IP,
        dst: US_IP,
        sport: PEER_PORT,
        dport: QPN,
        ip: { tos },
        payload: [...trpHeader(psn, 0), ...tagged({ stag: mr.stag, to: psn * 4 }), 1, 2, 3, 4],
      }),
    });
  };
  seg(0, 3);
  seg(1, 2);
  seg(2, 3);
  let out = r.run();
  const acks = out.filter((p) => p.op === TRP.DATA && p.body.length === 0);
  assert.ok(acks.length >= 1);
  assert.is(acks[acks.length - 1].ack, 3);
  assert.is(acks[acks.length - 1].low, 2, 'two CE marks echoed');
  assert.is(cc(r).ceReceived, 2);
  seg(3, 3);
  out = r.run();
  assert.is(out[out.length - 1].low, 3);
  r.close();
});

// ------------------------------------------------------------------ two stacks over a pipe

const BIG = 64 * 1024;

async function writes(
  pair: Pair,
  qps: { qp: Qp; scq: Parameters<typeof waitCompletions>[0] }[],
  n: number,
  stag: number,
  src: Parameters<Pair['a']['rdma']['postSend']>[1]['sg'],
  onEach?: () => void,
): Promise<number[][]> {
  const posted = qps.map(() => 0),
    done = qps.map(() => 0);
  const atFirstFinish: number[][] = [];
  for (;;) {
    for (let k = 0; k < qps.length; k++)
      while (posted[k] < n && posted[k] - done[k] < 16) {
        pair.a.rdma.postSend(qps[k].qp, { wrId: posted[k]++, opcode: 'write', sg: src, remote: { stag, offset: 0 } });
      }
    let progressed = false;
    for (let k = 0; k < qps.length; k++) {
      const got = qps[k].scq.poll(64);
      for (const c of got) assert.is(c.status, 'success');
      done[k] += got.length;
      if (got.length > 0) progressed = true;
    }
    onEach?.();
    if (atFirstFinish.length === 0 && done.some((d) => d === n)) atFirstFinish.push([...done]);
    if (done.every((d) => d === n)) break;
    if (!progressed) {
      const k = done.findIndex((d) => d < n);
      done[k] += (await waitCompletions(qps[k].scq, 1, 20000)).length;
    }
  }
  return atFirstFinish;
}

test('end to end: a QP backs off while the link marks CE, and grows back when marking stops', async () => {
  const pair = trackedStacks({
    rdma: { congestion: 'reno', trp: { rtoMinMs: 2, rtoMaxMs: 50, maxRetries: 30 } },
    faultA: { tx: { seed: 5, ce: 0.1 } },
  });
  await pair.ready;
  const A = makeEnds(pair.a, { maxSendWr: 64 });
  const B = makeEnds(pair.b, { maxRecvWr: 16 });
  connectManual(pair.a, A.qp, pair.b, B.qp);
  const src = pair.a.rdma.regMr(A.pd, BIG, ['local-write']);
  const dst = pair.b.rdma.regMr(B.pd, BIG, ['local-write', 'remote-write']);
  const sg = [{ mr: src, offset: 0, length: BIG }];
  let maxMarked = 0;
  const view = () => pair.a.rdma.queryQp(A.qp).congestion;
  await writes(pair, [{ qp: A.qp, scq: A.scq }], 150, dst.stag, sg, () => {
    maxMarked = Math.max(maxMarked, view().cwnd);
  });
  const marked = view();
  assert.ok(marked.ceMarks > 0, 'marks echoed');
  assert.ok(marked.ecnReductions > 0, 'the window was reduced for them');
  assert.ok(maxMarked < 128, `the window stayed small while marked (largest ${maxMarked})`);
  assert.ok(pair.b.rdma.queryQp(B.qp).congestion.ceReceived > 0, 'the receiver counted the CE marks');
  pair.a.ifs.setFault(pair.a.ifName, 'tx', null);
  let maxClean = 0;
  await writes(pair, [{ qp: A.qp, scq: A.scq }], 300, dst.stag, sg, () => {
    maxClean = Math.max(maxClean, view().cwnd);
  });
  assert.ok(maxClean > 2 * maxMarked, `grows back on a clean link (${maxClean} > 2 x ${maxMarked})`);
  await finish(pair);
});

test('end to end: dctcp alpha tracks the fraction of segments marked (5 %): its mean over the run, not one reading', async () => {
  const pair = trackedStacks({
    rdma: { congestion: 'dctcp', trp: { rtoMinMs: 2, rtoMaxMs: 50, maxRetries: 30 } },
    faultA: { tx: { seed: 5, ce: 0.05 } },
  });
  await pair.ready;
  const A = makeEnds(pair.a, { maxSendWr: 64 });
  const B = makeEnds(pair.b, { maxRecvWr: 16 });
  connectManual(pair.a, A.qp, pair.b, B.qp);
  const src = pair.a.rdma.regMr(A.pd, BIG, ['local-write']);
  const dst = pair.b.rdma.regMr(B.pd, BIG, ['local-write', 'remote-write']);
  const alphas: number[] = [];
  let calls = 0;
  await writes(pair, [{ qp: A.qp, scq: A.scq }], 200, dst.stag, [{ mr: src, offset: 0, length: BIG }], () => {
    // After alpha's start at 1 has decayed (a few dozen windows).
    if (++calls > 40) alphas.push(pair.a.rdma.queryQp(A.qp).congestion.alpha);
  });
  const rx = pair.b.rdma.queryQp(B.qp);
  const marked = rx.congestion.ceReceived / rx.counters.rxPackets;
  assert.ok(marked > 0.03 && marked < 0.07, `the injector marked ${marked}`);
  const mean = alphas.reduce((a, b) => a + b, 0) / alphas.length;
  assert.ok(
    Math.abs(mean - marked) < marked / 2,
    `mean alpha ${mean.toFixed(4)} over ${alphas.length} readings (from ${Math.min(...alphas).toFixed(4)} ` +
      `to ${Math.max(...alphas).toFixed(4)}) against ${marked.toFixed(4)} marked`,
  );
  await finish(pair);
});

test('end to end: two QPs sharing a lossy, marking link both complete; neither starves', async () => {
  for (const algo of ['reno', 'dctcp', 'cubic'] as const) {
    const pair = trackedStacks({
      rdma: { congestion: algo, trp: { rtoMinMs: 2, rtoMaxMs: 50, maxRetries: 30 } },
      faultA: { tx: { seed: 9, loss: 0.01, ce: 0.05 } },
    });
    await pair.ready;
    const A1 = makeEnds(pair.a, { maxSendWr: 64 });
    const B1 = makeEnds(pair.b, { maxRecvWr: 16 });
    connectManual(pair.a, A1.qp, pair.b, B1.qp);
    const A2 = makeEnds(pair.a, { maxSendWr: 64 });
    const B2 = makeEnds(pair.b, { maxRecvWr: 16 });
    connectManual(pair.a, A2.qp, pair.b, B2.qp);
    const src = pair.a.rdma.regMr(A1.pd, BIG, ['local-write']);
    const dst = pair.b.rdma.regMr(B1.pd, BIG, ['local-write', 'remote-write']);
    const src2 = pair.a.rdma.regMr(A2.pd, BIG, ['local-write']);
    const dst2 = pair.b.rdma.regMr(B2.pd, BIG, ['local-write', 'remote-write']);
    // Each QP writes its own region (separate PDs: separate MRs).
    const N = 120;
    const posted = [0, 0],
      done = [0, 0];
    const ends = [
      { qp: A1.qp, scq: A1.scq, sg: [{ mr: src, offset: 0, length: BIG }], stag: dst.stag },
      { qp: A2.qp, scq: A2.scq, sg: [{ mr: src2, offset: 0, length: BIG }], stag: dst2.stag },
    ];
    let atFirst: number[] | null = null;
    while (done[0] < N || done[1] < N) {
      for (let k = 0; k < 2; k++)
        while (posted[k] < N && posted[k] - done[k] < 16)
          pair.a.rdma.postSend(ends[k].qp, {
            wrId: posted[k]++,
            opcode: 'write',
            sg: ends[k].sg,
            remote: { stag: ends[k].stag, offset: 0 },
          });
      const k = done[0] < N && (done[1] >= N || done[0] <= done[1]) ? 0 : 1;
      const got = [...(await waitCompletions(ends[k].scq, 1, 20000)), ...ends[k].scq.poll(64)];
      for (const c of got) assert.is(c.status, 'success');
      done[k] += got.length;
      const other = 1 - k;
      const more = ends[other].scq.poll(64);
      for (const c of more) assert.is(c.status, 'success');
      done[other] += more.length;
      if (atFirst === null && (done[0] === N || done[1] === N)) atFirst = [...done];
    }
    const [x, y] = atFirst as number[];
    assert.ok(
      Math.min(x, y) * 3 >= Math.max(x, y),
      `${algo}: when one QP finished, the other had ${Math.min(x, y)} of ${N}`,
    );
    const c1 = pair.a.rdma.queryQp(A1.qp).congestion,
      c2 = pair.a.rdma.queryQp(A2.qp).congestion;
    assert.ok(
      c1.lossReductions + c1.ecnReductions > 0 && c2.lossReductions + c2.ecnReductions > 0,
      `${algo}: both backed off`,
    );
    await finish(pair);
  }
});

// ------------------------------------------------------------------ the fault injector, the keys

test('fault injector: ce marks ECN-capable IPv4 packets CE with a valid checksum, leaves the rest', () => {
  const pool = memPool(16, 2048);
  const inj = new FaultInjector({ ce: 1 });
  const put = (tos: number) => {
    const f = udpFrame({ ip: { tos }, payload: [1, 2, 3] });
    const bi = pool.allocOne();
    pool.u8.set(f, pool.offset[bi]);
    pool.length[bi] = f.length;
    return bi;
  };
  const bis = new Uint32Array([put(0x02), put(0x01), put(0x00), put(0xb8 | 0x02)]);
  const n = inj.process(pool, bis, 0, 4, 0);
  assert.is(n, 4);
  const got = [...inj.out.subarray(0, n)].map((bi) => {
    const ip = parseIp4(parseEth(pool.u8.slice(pool.offset[bi], pool.offset[bi] + pool.length[bi])).payload);
    return { tos: ip.tos, ok: ip.checksumOk };
  });
  assert.equal(got, [
    { tos: 0x03, ok: true },
    { tos: 0x03, ok: true },
    { tos: 0x00, ok: true },
    { tos: 0xbb, ok: true },
  ]);
  assert.is(inj.counters().marked, 3);
  pool.free(inj.out, 0, n);
});

test('config: rdma.congestion and interfaces[].congestion, checked and resolved (auto: none on memif/pipe, reno elsewhere)', () => {
  assert.throws(() => parseConfig('rdma: {congestion: bbr}\n', 't.yaml'), /rdma\.congestion/);
  assert.throws(
    () =>
      parseConfig(
        'interfaces:\n  - {name: p0, driver: pipe, pipe: {peer: p1}, congestion: fast}\n  - {name: p1, driver: pipe, pipe: {peer: p0}}\n',
        't.yaml',
      ),
    /interfaces\[0\]\.congestion/,
  );
  const cfg = parseConfig(
    [
      'interfaces:',
      '  - {name: m0, driver: memif, memif: {socket: /tmp/cc-m0.sock}}',
      '  - {name: h0, driver: af_packet, af_packet: {host-interface: veth0}}',
      '  - {name: h1, driver: af_packet, af_packet: {host-interface: veth1}, congestion: dctcp}',
      '',
    ].join('\n'),
    't.yaml',
  );
  assert.is(cfg.rdma.congestion, 'auto');
  assert.equal(congestionOptions(cfg), {
    congestion: 'none',
    interfaceCongestion: { m0: 'none', h0: 'reno', h1: 'dctcp' },
  });
  cfg.rdma.congestion = 'dctcp';
  assert.equal(congestionOptions(cfg).interfaceCongestion, { m0: 'dctcp', h0: 'dctcp', h1: 'dctcp' });
});

test.run();
