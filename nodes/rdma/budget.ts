/**
 * Global budgets of the verbs objects (issue 12, item 5): what every PD, CQ, SRQ, QP and MR
 * together may cost, so that no client (of the API or an embedding program) can make the data
 * plane allocate without bound. Each object is charged when it is created and gives its charge
 * back when it is destroyed.
 *
 *   mr-bytes    bytes of MR memory the data plane allocated (regMr with a length; memory an
 *               embedding program registers is its own and is not counted)
 *   cq-entries  the sum of CQ depths
 *   wr-slots    send and receive work request slots of QPs and SRQs; a send slot also counts
 *               ceil(maxInline / 1024) for its inline bytes
 *   pds, cqs, srqs   counts (QPs and MRs have their own: max-qps, max-mrs)
 *
 * A request that does not fit beside what is already in use is a VerbsError 'busy' (the API's
 * 409); one larger than the whole budget by itself is 'too-large' (413). Both name the limit
 * and its key in the start-up file.
 */
import { VerbsError } from './verbs.ts';

export interface BudgetLimits {
  maxMrBytes: number;
  maxCqEntries: number;
  maxWrSlots: number;
  maxPds: number;
  maxCqs: number;
  maxSrqs: number;
}

/** Defaults for a machine of a few tens of GiB: every budget full costs well under half of 24 GiB. */
export const BUDGET_DEFAULTS: BudgetLimits = {
  maxMrBytes: 4 * 2 ** 30,
  maxCqEntries: 4 * 2 ** 20,
  maxWrSlots: 2 ** 20,
  maxPds: 4096,
  maxCqs: 4096,
  maxSrqs: 1024,
};

export type BudgetKind = 'mr-bytes' | 'cq-entries' | 'wr-slots' | 'pds' | 'cqs' | 'srqs';
const KINDS: readonly BudgetKind[] = ['mr-bytes', 'cq-entries', 'wr-slots', 'pds', 'cqs', 'srqs'];
const LIMIT_OF: Record<BudgetKind, keyof BudgetLimits> = {
  'mr-bytes': 'maxMrBytes',
  'cq-entries': 'maxCqEntries',
  'wr-slots': 'maxWrSlots',
  pds: 'maxPds',
  cqs: 'maxCqs',
  srqs: 'maxSrqs',
};
/** The start-up file's key of each budget. */
export const BUDGET_KEY: Record<BudgetKind, string> = {
  'mr-bytes': 'rdma.max-mr-bytes',
  'cq-entries': 'rdma.max-cq-entries',
  'wr-slots': 'rdma.max-wr-slots',
  pds: 'rdma.max-pds',
  cqs: 'rdma.max-cqs',
  srqs: 'rdma.max-srqs',
};

export type Charge = Partial<Record<BudgetKind, number>>;

/** Inline bytes that count as one work request slot. */
export const INLINE_BYTES_PER_SLOT = 1024;

/**
 * The wr-slots a QP costs: one per send and receive WR, and one per INLINE_BYTES_PER_SLOT of its
 * inline area (maxInline bytes for each send WR), counted over the whole area: a few inline bytes
 * per WR (a verbs QP's 16 per gather entry) cost a fraction of a slot each, not a whole one.
 */
export function qpSlots(maxSendWr: number, maxRecvWr: number, maxInline: number): number {
  return maxSendWr + Math.ceil((maxSendWr * maxInline) / INLINE_BYTES_PER_SLOT) + maxRecvWr;
}

export class Budget {
  readonly limits: BudgetLimits;
  private readonly used: Record<BudgetKind, number> = {
    'mr-bytes': 0,
    'cq-entries': 0,
    'wr-slots': 0,
    pds: 0,
    cqs: 0,
    srqs: 0,
  };
  private readonly charges = new WeakMap<object, Charge>();

  constructor(limits: Partial<BudgetLimits> = {}) {
    const l = { ...BUDGET_DEFAULTS };
    for (const kind of KINDS) {
      const k = LIMIT_OF[kind];
      const v = limits[k] ?? l[k];
      if (!(Number.isSafeInteger(v) && v >= 1))
        throw new RangeError(`${BUDGET_KEY[kind]} must be an integer >= 1, got ${v}`);
      l[k] = v;
    }
    this.limits = l;
  }

  /** In use now, of each budget. */
  usage(): Record<BudgetKind, number> {
    return { ...this.used };
  }

  /** Throws unless `charge` fits beside what is in use; `what` names the request ("cq depth 64"). */
  check(what: string, charge: Charge): void {
    for (const kind of KINDS) {
      const n = charge[kind];
      if (n === undefined || n === 0) continue;
      const limit = this.limits[LIMIT_OF[kind]];
      const key = BUDGET_KEY[kind];
      if (n > limit)
        throw new VerbsError(
          'too-large',
          `${what} needs ${n} of ${key}, more than its whole ${limit}: ask for less, or raise ${key} in the start-up file`,
        );
      const used = this.used[kind];
      if (used + n > limit) {
        throw new VerbsError(
          'busy',
          `${what} needs ${n} of ${key} (${limit}), and ${used} are in use: destroy objects first, or raise ${key} in the start-up file`,
        );
      }
    }
  }

  /** Charge `obj` (after `check` said it fits); its charge comes back with `release(obj)`. */
  charge(obj: object, charge: Charge): void {
    for (const kind of KINDS) this.used[kind] += charge[kind] ?? 0;
    this.charges.set(obj, charge);
  }

  /** Give back what `obj` was charged (idempotent). */
  release(obj: object): void {
    const c = this.charges.get(obj);
    if (c === undefined) return;
    this.charges.delete(obj);
    for (const kind of KINDS) this.used[kind] -= c[kind] ?? 0;
  }
}
