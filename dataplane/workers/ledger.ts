/**
 * What the main thread keeps of each worker's verbs objects (cpu.workers), so a worker that dies
 * takes its QPs to ERROR with their work requests flushed instead of leaving handles that say
 * "not found": for every QP made through the Dataplane's methods, its CQs and the work requests
 * posted on it that have not completed yet (a send queue completes in order: a send completion
 * retires every request posted before it, signaled or not; a receive completion retires the
 * receive it names).
 *
 * When worker k stops, each of its QPs becomes a record in state "error" (getQp, qps), and each
 * of its CQs a record whose pollCq returns one "flushed" completion per outstanding request of
 * its QPs, then nothing, with `error` saying why; a "qp-error" event per QP goes to the event
 * log. Its PDs, MRs and SRQs are remembered as gone: calls on them, and posting on its QPs, say
 * which worker stopped. Destroying a dead object forgets it. Receives posted to an SRQ are not
 * flushed (no QP owns them; verbs flushes them only when the SRQ itself goes into error).
 *
 * The ledger only sees what passes through the Dataplane's methods: QPs of programs on the verbs
 * socket (served by worker 0) are not in it; those programs see their connection close.
 * Bounded by our own state: at most a QP's send and receive queue depths of entries (a QP
 * cannot hold more outstanding), dropped when polled, retired or the QP is destroyed.
 */
import type { Completion, WcOpcodeName } from '../../nodes/rdma/verbs.ts';
import { DataplaneError, type CqView, type EventView, type QpView, type WrId } from '../views.ts';

interface QpRec {
  worker: number;
  view: QpView;
  /** Posted sends not yet known complete, in posting order. */
  sq: { wrId: WrId; opcode: WcOpcodeName }[];
  rq: WrId[];
}

interface DeadCq {
  view: CqView;
  flushed: Completion[];
  reason: string;
}

const WC_OF: Record<string, WcOpcodeName> = {
  send: 'send',
  'send-with-solicited': 'send',
  'send-with-invalidate': 'send',
  'send-with-imm': 'send',
  'bind-mw': 'bind-mw',
  'local-invalidate': 'local-invalidate',
  write: 'write',
  'write-with-imm': 'write',
  read: 'read',
  'fetch-add': 'fetch-add',
  swap: 'swap',
  'cmp-swap': 'cmp-swap',
};

export class WorkerLedger {
  private readonly qps = new Map<number, QpRec>();
  private readonly cqs = new Map<number, { worker: number; view: CqView }>();
  /** PDs, MRs and SRQs: handle -> worker and what it is. */
  private readonly others = new Map<number, { worker: number; what: string }>();
  private readonly deadQps = new Map<number, { view: QpView; reason: string }>();
  private readonly deadCqs = new Map<number, DeadCq>();
  private readonly deadOthers = new Map<number, { what: string; reason: string }>();

  // ------------------------------------------------------------------ live objects

  created(
    what: 'protection domain' | 'memory region' | 'memory window' | 'shared receive queue',
    h: number,
    worker: number,
  ): void {
    this.deadOthers.delete(h);
    this.others.set(h, { worker, what });
  }

  cqCreated(view: CqView, worker: number): void {
    this.deadCqs.delete(view.cq);
    this.cqs.set(view.cq, { worker, view });
  }

  /** `ifNew`: only when not known yet (a QP a listener accepted, learnt from its event). */
  qpCreated(view: QpView, worker: number, ifNew = false): void {
    if (ifNew && this.qps.has(view.qpn)) return;
    this.deadQps.delete(view.qpn);
    this.qps.set(view.qpn, { worker, view, sq: [], rq: [] });
  }

  knows(qpn: number): boolean {
    return this.qps.has(qpn);
  }

  /** The QP's latest view (connect, modify) for its record. */
  qpUpdated(view: QpView): void {
    const r = this.qps.get(view.qpn);
    if (r !== undefined) r.view = view;
  }

  destroyed(h: number): void {
    this.others.delete(h);
    this.cqs.delete(h);
    this.qps.delete(h);
  }

  posted(qpn: number, req: { wrId: WrId; opcode?: string }, send: boolean): void {
    const r = this.qps.get(qpn);
    if (r === undefined) return;
    // The QP holds at most its queue depth outstanding: older entries have completed (an
    // unsignaled request retires without a completion to tell us).
    if (send) {
      r.sq.push({ wrId: req.wrId, opcode: WC_OF[req.opcode ?? ''] ?? 'send' });
      if (r.sq.length > r.view.maxSendWr) r.sq.shift();
    } else {
      r.rq.push(req.wrId);
      if (r.rq.length > r.view.maxRecvWr) r.rq.shift();
    }
  }

  polled(completions: readonly Completion[]): void {
    for (const c of completions) {
      const r = this.qps.get(c.qpn);
      if (r === undefined) continue;
      if (c.opcode === 'recv' || c.opcode === 'recv-with-imm') {
        const i = r.rq.indexOf(c.wrId as WrId);
        if (i >= 0) r.rq.splice(i, 1);
        continue;
      }
      // In order: this one and every request posted before it are done.
      const i = r.sq.findIndex((e) => e.wrId === c.wrId);
      if (i >= 0) r.sq.splice(0, i + 1);
    }
  }

  // ------------------------------------------------------------------ a worker stopped

  /** Worker `k` stopped: its QPs into error with their requests flushed; the events to log. */
  stopped(k: number, why: string): { qps: number[]; flushed: number; events: Omit<EventView, 'seq'>[] } {
    const reason = `worker ${k} stopped (${why.split('\n')[0]})`;
    const time = new Date().toISOString();
    for (const [h, c] of this.cqs)
      if (c.worker === k) {
        this.deadCqs.set(h, { view: { ...c.view, error: true }, flushed: [], reason });
        this.cqs.delete(h);
      }
    const qps: number[] = [];
    const events: Omit<EventView, 'seq'>[] = [];
    let flushed = 0;
    for (const [qpn, r] of this.qps) {
      if (r.worker !== k) continue;
      this.qps.delete(qpn);
      qps.push(qpn);
      this.deadQps.set(qpn, { view: { ...r.view, state: 'error', sqOutstanding: 0, rqPosted: 0 }, reason });
      const flush = (cq: number, wrId: WrId, opcode: WcOpcodeName) => {
        this.deadCqs.get(cq)?.flushed.push({ wrId, qpn, status: 'flushed', opcode, byteLen: 0 });
        flushed++;
      };
      for (const e of r.sq) flush(r.view.sendCq, e.wrId, e.opcode);
      for (const w of r.rq) flush(r.view.recvCq, w, 'recv');
      events.push({ type: 'qp-error', qpn, reason, time });
    }
    for (const [h, o] of this.others)
      if (o.worker === k) {
        this.deadOthers.set(h, { what: o.what, reason });
        this.others.delete(h);
      }
    return { qps, flushed, events };
  }

  // ------------------------------------------------------------------ what dead objects answer

  deadQp(qpn: number): QpView | undefined {
    return this.deadQps.get(qpn)?.view;
  }

  deadQpViews(): QpView[] {
    return [...this.deadQps.values()].map((d) => d.view);
  }

  deadCqViews(): CqView[] {
    return [...this.deadCqs.values()].map((d) => ({ ...d.view, pending: d.flushed.length }));
  }

  deadCq(h: number): CqView | undefined {
    const d = this.deadCqs.get(h);
    return d === undefined ? undefined : { ...d.view, pending: d.flushed.length };
  }

  /** pollCq on a dead CQ: its flushed completions, then none; `error` says why. */
  pollDead(h: number, max = 16): { completions: Completion[]; error: string } | undefined {
    const d = this.deadCqs.get(h);
    if (d === undefined) return undefined;
    const n = Math.max(1, Math.min(Number.isInteger(max) ? max : 16, 4096));
    return { completions: d.flushed.splice(0, n), error: `${d.reason}: its QPs are in error` };
  }

  /** Throws when `h` names a dead object (QP number when qp is set): what happened to it. */
  refuseDead(h: unknown, qp = false): void {
    if (typeof h !== 'number') return;
    const d = qp ? this.deadQps.get(h) : (this.deadCqs.get(h) ?? this.deadOthers.get(h));
    if (d === undefined) return;
    const what = qp ? `QP ${h}` : 'what' in d ? `${d.what} ${h}` : `completion queue ${h}`;
    throw new DataplaneError('state', `${what} was on ${d.reason}; it is in error: destroy it`);
  }

  /** Destroying a dead object forgets it; true when `h` was one. */
  forget(h: number, qp = false): boolean {
    if (qp) return this.deadQps.delete(h);
    return this.deadCqs.delete(h) || this.deadOthers.delete(h);
  }
}
