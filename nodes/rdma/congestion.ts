/**
 * Congestion control of a QP's sender (PROTOCOL.md section 10): a congestion window in
 * segments beside the TRP window: a new segment goes while in flight < rdma.trp.window and in
 * flight less SACKed (the pipe) < cwnd.
 *
 * Window-based, as TCP's NewReno and CUBIC and DCTCP are (not rate-based as DCQCN on RoCE NICs
 * or BBR): a QP's sender already counts segments in flight and is clocked by ACKs, the window
 * is what bounds the bottleneck queue a QP can build, and a window needs no per-packet timer.
 *
 * - `none`: cwnd is the TRP window (a dedicated link: nothing to share).
 * - `reno`: slow start from INITIAL_CWND, one segment per RTT of additive increase above
 *   ssthresh; a loss (fast retransmit) or an ECN mark echoed by the peer halves cwnd once per
 *   window of data (NewReno's recovery point; RFC 3168's reaction to CE); a timeout that
 *   resends takes it to 1 (RFC 5681), undone when F-RTO finds the timeout spurious; one that
 *   only asks (a PROBE) leaves it, and a loss the answer finds is a fast retransmission's
 *   (transport.ts onTimeout, probeFoundLoss).
 * - `cubic`: as `reno`, but a loss or mark multiplies cwnd by 0.7 and the increase follows
 *   RFC 9438's cubic of the time since the reduction (or Reno's with alpha 0.53 where larger).
 * - `dctcp`: as `reno` for losses and timeouts; ECN marks as DCTCP (RFC 8257): alpha, the EWMA
 *   (gain 1/16) of the fraction of segments marked per window, and cwnd *= 1 - alpha/2 once
 *   per window that saw marks.
 *
 * Pacing (paceWait/paceSent): with an RTT estimate, new segments go one per srtt / (cwnd x
 * gain) rather than a window at once; ddp-output holds a paced QP back and arms a timer.
 *
 * The peer is not trusted: the marks it echoes count at most the segments it acknowledged in
 * that window (a peer claiming more than everything marked cannot push alpha above 1), and
 * cwnd never falls below MIN_CWND (a peer echoing CE on everything slows the QP to two segments
 * per RTT, it cannot stall it); marks never raise cwnd (a peer that never echoes leaves losses
 * to bound the QP). Everything is plain numbers on the Qp: no allocation per packet.
 */
import type { Qp } from './qp.ts';

export const Congestion = { NONE: 0, RENO: 1, DCTCP: 2, CUBIC: 3 } as const;
export const CONGESTION_NAMES = ['none', 'reno', 'dctcp', 'cubic'] as const;
export type CongestionName = (typeof CONGESTION_NAMES)[number];

/** Initial window (segments): RFC 6928's 10. */
export const INITIAL_CWND = 10;
/** Smallest window after a reduction (marks, losses); a timeout takes it to 1 for one RTT. */
export const MIN_CWND = 2;
/** CUBIC (RFC 9438): multiplicative decrease beta, the cubic's C (segments per second^3), the Reno-friendly alpha. */
const CUBIC_BETA = 0.7;
const CUBIC_C = 0.4;
const CUBIC_ALPHA = (3 * (1 - CUBIC_BETA)) / (1 + CUBIC_BETA);
/** DCTCP's EWMA gain g (RFC 8257: 1/16). */
const DCTCP_G = 1 / 16;
/** The echoed CE counter's width (PROTOCOL.md section 5: the low 12 bits of the opcode field). */
export const CE_MASK = 0xfff;

/** Start (or restart, at RTS) the sender's window: slow start from INITIAL_CWND. */
export function ccInit(qp: Qp, algo: number, window: number): void {
  qp.ccAlgo = algo;
  qp.cwnd = algo === Congestion.NONE ? window : Math.min(window, INITIAL_CWND);
  qp.ssthresh = window;
  qp.ccRecover = qp.sndNxt;
  qp.ccInRecovery = false;
  qp.ccAlpha = 1;
  qp.ccWinEnd = qp.sndNxt;
  qp.ccWinAcked = 0;
  qp.ccWinMarked = 0;
  qp.cubicWmax = 0;
  qp.cubicEpochNs = 0;
  qp.lostOut = 0;
  qp.rtxForce = 0;
  qp.ccRtoDone = false;
  qp.ccUsed = 0;
  qp.ccUsedLast = 0;
  qp.ccUseEnd = qp.sndNxt;
  hyStartReset(qp);
}

/** HyStart++ from the start (RTS, and after a reduction: a later slow start measures anew). */
function hyStartReset(qp: Qp): void {
  qp.hsRoundEnd = qp.sndNxt;
  qp.hsCurMinNs = Infinity;
  qp.hsLastMinNs = Infinity;
  qp.hsSamples = 0;
  qp.hsCssRounds = 0;
  qp.hsCssBaseNs = Infinity;
}

/**
 * HyStart++ (RFC 9406): slow start ends when a round's smallest RTT rose by RttThresh over the
 * previous round's (a queue is building), into Conservative Slow Start (growth / 4) for up to
 * CSS_ROUNDS rounds, then congestion avoidance from there; back to slow start if the RTT falls
 * below the baseline again (the rise was noise). RFC 9406's constants but the threshold's floor:
 * its 4 ms is Internet jitter, more than a shallow switch queue can ever add here (64 KB at
 * 200 Mbit/s: 2.6 ms; at 1 Gbit/s: 0.5 ms), so it would never fire; ours is 1/8 of the base
 * RTT, at least HS_MIN_THRESH_NS (a tick of the timer wheel) and at most RFC 9406's 16 ms.
 * The smallest of at least 8 samples per round filters the scheduling delay (it only adds).
 */
const HS_MIN_THRESH_NS = 100_000;
const HS_MAX_THRESH_NS = 16_000_000;
/**
 * The delay component of reno and cubic (PROTOCOL.md section 10). A loss with a queue in front
 * of it (the smoothed RTT at least LOSS_QUEUE_RATIO x the smallest seen) shows how long the
 * round trip is when the path's bottleneck queue is full: the QP keeps that RTT (fullRttNs).
 * From then on, in congestion avoidance, the queueing delay (SRTT - min RTT) measured against
 * that full queue's decides: below DELAY_HOLD of it the window grows as the algorithm says; from
 * DELAY_HOLD it holds; from DELAY_REDUCE it is multiplied by DELAY_MD once per window (a
 * multiplicative decrease: QPs sharing the queue converge to fair shares, Swift's way), so the
 * queue stops short of overflowing. A path that never lost a segment to a full queue (a
 * dedicated link, where our own processing is most of the round trip) is left alone: the
 * delay of an endpoint's queue says nothing a smaller window would cure.
 */
const LOSS_QUEUE_RATIO = 1.5;
const DELAY_HOLD = 4;
const DELAY_REDUCE = 8;
const DELAY_MD = 0.7;
const HS_MIN_RTT_DIVISOR = 8;
const HS_N_RTT_SAMPLE = 8;
const HS_CSS_GROWTH_DIVISOR = 4;
const HS_CSS_ROUNDS = 5;

/** An RTT sample (ns) for HyStart++ (transport.ts rttSample): the round's smallest. */
export function ccOnRtt(qp: Qp, rttNs: number): void {
  if (qp.ccAlgo === Congestion.NONE || qp.cwnd >= qp.ssthresh) return;
  if (rttNs < qp.hsCurMinNs) qp.hsCurMinNs = rttNs;
  qp.hsSamples++;
}

/** Slow start's growth for `acked` segments, with HyStart++'s round bookkeeping (RFC 9406 4.2-4.3). */
function slowStart(qp: Qp, acked: number): void {
  if (((qp.sndUna - qp.hsRoundEnd) | 0) >= 0) {
    // A round ended: the next is what is sent from now on.
    qp.hsRoundEnd = qp.sndNxt;
    qp.hsLastMinNs = qp.hsCurMinNs;
    qp.hsCurMinNs = Infinity;
    qp.hsSamples = 0;
    if (qp.hsCssRounds > 0 && ++qp.hsCssRounds > HS_CSS_ROUNDS) {
      // CSS_ROUNDS in Conservative Slow Start: congestion avoidance from here.
      qp.hsCssRounds = 0;
      qp.ssthresh = qp.cwnd;
      qp.hystartExits++;
      return;
    }
  }
  if (qp.hsCssRounds > 0) {
    if (qp.hsSamples >= HS_N_RTT_SAMPLE && qp.hsCurMinNs < qp.hsCssBaseNs) {
      // The RTT came back down: the rise was not a queue; slow start again.
      qp.hsCssRounds = 0;
      qp.hsCssBaseNs = Infinity;
    } else {
      qp.cwnd += acked / HS_CSS_GROWTH_DIVISOR;
      return;
    }
  } else if (qp.hsSamples >= HS_N_RTT_SAMPLE && qp.hsLastMinNs !== Infinity && qp.hsCurMinNs !== Infinity) {
    let thresh = qp.hsLastMinNs / HS_MIN_RTT_DIVISOR;
    thresh = thresh < HS_MIN_THRESH_NS ? HS_MIN_THRESH_NS : thresh > HS_MAX_THRESH_NS ? HS_MAX_THRESH_NS : thresh;
    if (qp.hsCurMinNs >= qp.hsLastMinNs + thresh) {
      qp.hsCssBaseNs = qp.hsCurMinNs;
      qp.hsCssRounds = 1;
      qp.cwnd += acked / HS_CSS_GROWTH_DIVISOR;
      return;
    }
  }
  qp.cwnd += acked;
}

/** Pacing gains (Linux's): a window per 1/2 srtt in slow start, per srtt / 1.2 above ssthresh. */
const PACE_GAIN_SS = 2;
const PACE_GAIN_CA = 1.2;

/**
 * Pacing: the earliest time (ns) the QP's next new segment may go, or 0 when it may go now. A
 * QP under congestion control with an RTT estimate sends its window spread over the round trip
 * (srtt / (cwnd x gain) between segments) rather than as one burst; up to `slackNs` ahead of
 * that schedule may go at once (the timer wheel's tick: nothing finer can be waited for, so a
 * tick's worth of segments leaves together). Before the first RTT sample nothing is paced (the
 * initial window goes as a burst, as TCP's).
 */
export function paceWait(qp: Qp, nowNs: number, slackNs: number): number {
  if (qp.ccAlgo === Congestion.NONE || qp.srttNs === 0) return 0;
  return qp.paceNs > nowNs + slackNs ? qp.paceNs - slackNs : 0;
}

/**
 * One segment went at `nowNs`: the schedule moves on by one interval, and the most the QP has
 * had in the network this round (cwnd validation, ccOnAck) is updated.
 */
export function paceSent(qp: Qp, nowNs: number, slackNs: number): void {
  if (qp.ccAlgo === Congestion.NONE) return;
  const p = qp.inFlight - qp.sacked - qp.lostOut;
  if (p > qp.ccUsed) qp.ccUsed = p;
  if (qp.srttNs === 0) return;
  const gain = qp.cwnd < qp.ssthresh ? PACE_GAIN_SS : PACE_GAIN_CA;
  const interval = qp.srttNs / (qp.cwnd * gain);
  // A QP brought back late (the timer's tick, a busy pass) may catch up by one slack's worth.
  const from = nowNs - slackNs;
  qp.paceNs = (qp.paceNs > from ? qp.paceNs : from) + interval;
}

/**
 * RFC 6675's pipe: the segments in the network. In flight, less what the peer SACKed, less what
 * was found lost and is not resent yet (a lost segment counts 0, its retransmission 1 until
 * it is acknowledged, SACKed or found lost again).
 */
export function pipe(qp: Qp): number {
  return qp.inFlight - qp.sacked - qp.lostOut;
}

/**
 * Whether one more new segment may go: the TRP window bounds the sequence space in flight (the
 * transmit slots, the peer's receive window), cwnd what is in the network (the pipe), so that
 * after a loss new data keeps the ACK clock going (and can reveal a lost retransmission) rather
 * than waiting a round trip for the hole. Resends go first (ddp-output), within the same limit.
 */
export function mayAdd(qp: Qp, trpWindow: number, limit: number): boolean {
  const f = qp.inFlight;
  return f < trpWindow && f - qp.sacked - qp.lostOut < limit;
}

/**
 * Whether a segment found lost may be resent now (RFC 6675 5 (C): only while the pipe is under
 * cwnd, and as paced as new data), except the one resend that opens a recovery (4.3) or
 * follows a timeout (RFC 5681), which goes whatever the window. Under `none`: always.
 */
export function mayResend(qp: Qp, limit: number, nowNs: number, slackNs: number): boolean {
  if (qp.ccAlgo === Congestion.NONE) return true;
  if (qp.rtxForce > 0) return true;
  return qp.inFlight - qp.sacked - qp.lostOut < limit && paceWait(qp, nowNs, slackNs) === 0;
}

/** A resend went (after mayResend said so): a forced one is used up; it is paced as new data. */
export function resent(qp: Qp, nowNs: number, slackNs: number): void {
  if (qp.rtxForce > 0) qp.rtxForce--;
  paceSent(qp, nowNs, slackNs);
}

/** Segments the QP may have in flight now. */
export function sendLimit(qp: Qp, window: number): number {
  if (qp.ccAlgo === Congestion.NONE) return window;
  const c = qp.cwnd | 0;
  return c < window ? (c < 1 ? 1 : c) : window;
}

/** A multiplicative decrease to `to` segments, once per window: the rest of the window is covered. */
function reduce(qp: Qp, to: number): void {
  hyStartReset(qp);
  const c = to < MIN_CWND ? MIN_CWND : to;
  qp.cwnd = c;
  qp.ssthresh = c;
  qp.ccInRecovery = true;
  qp.ccRecover = qp.sndNxt;
}

/** A loss or (reno, cubic) an ECN mark: halve (reno, dctcp) or x 0.7 with a new cubic epoch (cubic). */
function decrease(qp: Qp): void {
  if (qp.ccAlgo !== Congestion.CUBIC) {
    reduce(qp, qp.cwnd / 2);
    return;
  }
  // RFC 9438 4.7 fast convergence: a window below the last maximum releases bandwidth.
  qp.cubicWmax = qp.cwnd < qp.cubicWmax ? (qp.cwnd * (1 + CUBIC_BETA)) / 2 : qp.cwnd;
  qp.cubicEpochNs = 0;
  reduce(qp, qp.cwnd * CUBIC_BETA);
}

/**
 * Fast retransmission found a loss. True when it showed the path's full-queue RTT anew (the
 * caller passes it to the stack's other QPs on the same path: ccSharePath).
 */
export function ccOnLoss(qp: Qp): boolean {
  if (qp.ccAlgo === Congestion.NONE) return false;
  qp.lossEvents++;
  if (qp.ccInRecovery) return false;
  // A loss behind a queue: how long the round trip is with the bottleneck full.
  let learned = false;
  if (qp.minRttNs > 0 && qp.srttNs >= LOSS_QUEUE_RATIO * qp.minRttNs) {
    qp.fullRttNs = qp.srttNs;
    learned = true;
  }
  qp.ccReductions++;
  decrease(qp);
  // RFC 6675 (4.3): the first lost segment goes at once, whatever the (halved) window.
  qp.rtxForce = 1;
  return learned;
}

/**
 * The path's full-queue RTT that `qp` learned, to every other QP of the stack towards the same
 * peer address through the same interface (a QP connecting there later takes it: ccJoinPath):
 * QPs sharing a bottleneck back off from the same queue, whether or not each lost a segment
 * itself (those that never did would otherwise take the others' share).
 */
export function ccSharePath(qps: readonly (Qp | null)[], from: Qp): void {
  for (let i = 0; i < qps.length; i++) {
    const q = qps[i];
    if (q !== null && q !== from && q.remoteAddr === from.remoteAddr && q.egress === from.egress)
      q.fullRttNs = from.fullRttNs;
  }
}

/** A QP connecting: the full-queue RTT another QP of the stack learned on the same path, if any. */
export function ccJoinPath(qps: readonly (Qp | null)[], qp: Qp): void {
  for (let i = 0; i < qps.length; i++) {
    const q = qps[i];
    if (q !== null && q !== qp && q.fullRttNs > 0 && q.remoteAddr === qp.remoteAddr && q.egress === qp.egress) {
      qp.fullRttNs = q.fullRttNs;
      return;
    }
  }
}

/** The first timeout of a series: cwnd to 1, ssthresh to half of what was in flight (once an RTT was measured). */
export function ccOnTimeout(qp: Qp, flight: number): void {
  if (qp.ccAlgo === Congestion.NONE) return;
  qp.lossEvents++;
  qp.ccUndoCwnd = qp.cwnd;
  qp.ccUndoSsthresh = qp.ssthresh;
  qp.cubicWmax = qp.cwnd;
  qp.cubicEpochNs = 0;
  // Before any RTT sample the timer ran on rto-init's guess: a timeout then says the guess was
  // short, not that the path is full (as TCP's after a SYN's: the window restarts from 1, the
  // slow-start threshold stays). Otherwise half of what was in flight.
  const half = flight / 2;
  if (qp.srttNs > 0) qp.ssthresh = half < MIN_CWND ? MIN_CWND : half;
  qp.cwnd = 1;
  hyStartReset(qp);
  qp.ccInRecovery = true;
  qp.ccRecover = qp.sndNxt;
  qp.ccReductions++;
}

/** F-RTO found the timeout spurious: the window before it comes back. */
export function ccUndoTimeout(qp: Qp): void {
  if (qp.ccAlgo === Congestion.NONE || qp.ccUndoCwnd === 0) return;
  qp.cwnd = qp.ccUndoCwnd;
  qp.ssthresh = qp.ccUndoSsthresh;
  qp.ccUndoCwnd = 0;
}

/**
 * The peer's echoed CE counter (12 bits, PROTOCOL.md section 5) from an acceptable ACK. Returns
 * the segments newly reported marked. A counter that moved backwards (a reordered ACK: more
 * than half the counter's range ahead) is ignored.
 */
export function ccOnEcho(qp: Qp, echo: number): void {
  const d = (echo - qp.ccEchoSeen) & CE_MASK;
  if (d === 0 || d > CE_MASK >>> 1) return;
  qp.ccEchoSeen = echo;
  if (qp.ccAlgo === Congestion.NONE) return;
  qp.ceMarks += d;
  qp.ccWinMarked += d;
  if (qp.ccAlgo !== Congestion.DCTCP && !qp.ccInRecovery) {
    // RFC 3168: a CE echo is a loss signal without the loss, once per window.
    qp.ecnReductions++;
    decrease(qp);
  }
}

/**
 * `acked` segments newly acknowledged (cumulatively): the window grows (when the QP used it),
 * DCTCP's window of observation closes.
 */
export function ccOnAck(qp: Qp, acked: number, window: number, nowNs: number): void {
  if (qp.ccAlgo === Congestion.NONE) return;
  qp.ccUndoCwnd = 0;
  qp.ccWinAcked += acked;
  if (qp.ccInRecovery && ((qp.sndUna - qp.ccRecover) | 0) >= 0) qp.ccInRecovery = false;
  // Nothing lost left to resend: no forced resend is owed (its segment arrived after all).
  if (qp.lostOut === 0) qp.rtxForce = 0;
  if (qp.ccAlgo === Congestion.DCTCP && ((qp.sndUna - qp.ccWinEnd) | 0) >= 0) {
    // A window of data acknowledged: the fraction marked in it (at most all of it).
    const m = qp.ccWinMarked < qp.ccWinAcked ? qp.ccWinMarked : qp.ccWinAcked;
    const f = qp.ccWinAcked > 0 ? m / qp.ccWinAcked : 0;
    qp.ccAlpha = (1 - DCTCP_G) * qp.ccAlpha + DCTCP_G * f;
    if (m > 0 && !qp.ccInRecovery) {
      qp.ecnReductions++;
      reduce(qp, qp.cwnd * (1 - qp.ccAlpha / 2));
    }
    qp.ccWinEnd = qp.sndNxt;
    qp.ccWinAcked = 0;
    qp.ccWinMarked = 0;
  }
  // Cwnd validation (RFC 7661): a round ended; what the QP had in the network at most in it.
  if (((qp.sndUna - qp.ccUseEnd) | 0) >= 0) {
    qp.ccUsedLast = qp.ccUsed;
    qp.ccUsed = pipe(qp);
    qp.ccUseEnd = qp.sndNxt;
  }
  // Never grow while recovering from a halving (a recovery after a timeout is slow start from 1,
  // RFC 5681 3.1: only a window at ssthresh holds still until the recovery point is
  // acknowledged), nor a window the QP did not use: grow only while at least half of it was in
  // the network at some time this round or the last (RFC 7661's validated window; Linux grows
  // slow start likewise only below twice what was out). Whatever held it back (nothing more to
  // send, pacing behind its schedule on a late timer, a CPU it did not get), a window it never
  // filled says nothing about the path: grown on, it only inflates the pacing rate and the burst
  // that leaves when the QP is served again. Measured when segments go, not at the ACK: a
  // window's ACKs that arrive in one bunch (a scheduling gap) leave little in flight at each
  // ACK, yet the window was full.
  const used = qp.ccUsed > qp.ccUsedLast ? qp.ccUsed : qp.ccUsedLast;
  if ((qp.ccInRecovery && qp.cwnd >= qp.ssthresh) || used * 2 < qp.cwnd) return;
  if (qp.cwnd < qp.ssthresh) slowStart(qp, acked);
  else {
    // The delay component: the queueing delay against a full bottleneck queue's, once known.
    if (qp.fullRttNs > 0) {
      const d = qp.srttNs > 0 ? qp.cwnd * (1 - qp.minRttNs / qp.srttNs) : 0;
      if (d >= DELAY_REDUCE) {
        if (!qp.ccInRecovery) {
          qp.delayReductions++;
          reduce(qp, qp.cwnd * DELAY_MD);
        }
        return;
      }
      if (d >= DELAY_HOLD) return;
    }
    if (qp.ccAlgo === Congestion.CUBIC) cubicIncrease(qp, acked, nowNs);
    else qp.cwnd += acked / qp.cwnd;
  }
  // At most twice what the QP had in the network (slow start's doubling of a full window).
  if (qp.cwnd > 2 * used) qp.cwnd = 2 * used;
  if (qp.cwnd > window) qp.cwnd = window;
}

/**
 * CUBIC's congestion avoidance (RFC 9438 4.2-4.4): the window follows C (t - K)^3 + W_max from
 * the epoch (the first ACK after a reduction), t one RTT ahead, at most 1.5 x cwnd as a target;
 * where Reno with alpha 0.53 per RTT would be larger (the Reno-friendly region: on our short
 * round trips, most of the time) it follows that.
 */
function cubicIncrease(qp: Qp, acked: number, nowNs: number): void {
  const w = qp.cwnd;
  if (qp.cubicEpochNs === 0) {
    qp.cubicEpochNs = nowNs > 0 ? nowNs : 1;
    if (qp.cubicWmax < w) qp.cubicWmax = w;
    qp.cubicK = Math.cbrt((qp.cubicWmax - w) / CUBIC_C);
    qp.cubicWest = w;
  }
  const t = (nowNs - qp.cubicEpochNs + qp.srttNs) / 1e9 - qp.cubicK;
  let target = CUBIC_C * t * t * t + qp.cubicWmax;
  if (target < w) target = w;
  else if (target > 1.5 * w) target = 1.5 * w;
  qp.cubicWest += (CUBIC_ALPHA * acked) / w;
  qp.cwnd = qp.cubicWest > target ? qp.cubicWest : w + ((target - w) / w) * acked;
}
