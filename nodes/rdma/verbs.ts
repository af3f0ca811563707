/**
 * The verbs objects (rdma-core's ibv_pd, ibv_mr, ibv_cq, ibv_srq) and the work request and
 * completion vocabulary. QPs are in qp.ts. None of these is touched per packet except through
 * the typed arrays and preallocated slots they hold.
 */
import { widenNumberFields } from '../../graph/number-fields.ts';
import { copyBytes } from './copy.ts';

export const Access = {
  LOCAL_WRITE: 1,
  REMOTE_WRITE: 2,
  REMOTE_READ: 4,
  REMOTE_ATOMIC: 8,
  /**
   * The peer may invalidate this MR with Send with Invalidate. Off unless asked for: otherwise
   * any peer of a QP in the PD could revoke any of its MRs (even a local-only one).
   */
  REMOTE_INVALIDATE: 16,
  /** Memory windows may be bound to this MR (ibv_bind_mw, BIND_MW). */
  MW_BIND: 32,
} as const;
export const ACCESS_NAMES = [
  'local-write',
  'remote-write',
  'remote-read',
  'remote-atomic',
  'remote-invalidate',
  'mw-bind',
] as const;
export type AccessName = (typeof ACCESS_NAMES)[number];

export function accessFromNames(names: readonly string[], where = 'access'): number {
  let a = 0;
  for (const n of names) {
    const i = (ACCESS_NAMES as readonly string[]).indexOf(n);
    if (i < 0)
      throw new VerbsError('invalid', `${where}: unknown access flag "${n}" (expected ${ACCESS_NAMES.join(', ')})`);
    a |= 1 << i;
  }
  // verbs: remote write and remote atomic need local write.
  if (a & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) && !(a & Access.LOCAL_WRITE)) {
    throw new VerbsError('invalid', `${where}: remote-write and remote-atomic need local-write as well`);
  }
  return a;
}

export function accessNames(a: number): AccessName[] {
  return ACCESS_NAMES.filter((_, i) => a & (1 << i));
}

/** Why a verb failed: maps onto the API's 400/404/409/413/503. */
export type VerbsErrorKind = 'invalid' | 'not-found' | 'state' | 'busy' | 'too-large' | 'resource';

export class VerbsError extends Error {
  readonly kind: VerbsErrorKind;
  constructor(kind: VerbsErrorKind, message: string) {
    super(message);
    this.kind = kind;
    this.name = 'VerbsError';
  }
}

export const WcStatus = {
  SUCCESS: 0,
  LOC_LEN_ERR: 1,
  LOC_PROT_ERR: 2,
  LOC_QP_OP_ERR: 3,
  REM_ACCESS_ERR: 4,
  REM_OP_ERR: 5,
  REM_INV_REQ_ERR: 6,
  RNR_RETRY_EXC_ERR: 7,
  RETRY_EXC_ERR: 8,
  WR_FLUSH_ERR: 9,
  MW_BIND_ERR: 10,
} as const;
export const WC_STATUS_NAMES = [
  'success',
  'local-length-error',
  'local-protection-error',
  'local-qp-operation-error',
  'remote-access-error',
  'remote-operation-error',
  'remote-invalid-request',
  'rnr-retry-exceeded',
  'retry-exceeded',
  'flushed',
  'memory-window-bind-error',
] as const;
export type WcStatusName = (typeof WC_STATUS_NAMES)[number];

export const WcOpcode = {
  SEND: 0,
  WRITE: 1,
  READ: 2,
  FETCH_ADD: 3,
  SWAP: 4,
  CMP_SWAP: 5,
  RECV: 6,
  RECV_WITH_IMM: 7,
  BIND_MW: 8,
  LOCAL_INV: 9,
} as const;
export const WC_OPCODE_NAMES = [
  'send',
  'write',
  'read',
  'fetch-add',
  'swap',
  'cmp-swap',
  'recv',
  'recv-with-imm',
  'bind-mw',
  'local-invalidate',
] as const;
export type WcOpcodeName = (typeof WC_OPCODE_NAMES)[number];

/**
 * Send work request opcodes. The order matters: Sends (which take a send MSN) first, then the
 * Writes, the local operations (no packet: a window bind, a local invalidate), then Read and the
 * atomics (which take a read MSN and an ORD credit).
 */
export const WrOpcode = {
  SEND: 0,
  SEND_WITH_SE: 1,
  SEND_WITH_INV: 2,
  SEND_WITH_IMM: 3,
  WRITE: 4,
  WRITE_WITH_IMM: 5,
  BIND_MW: 6,
  LOCAL_INV: 7,
  READ: 8,
  FETCH_ADD: 9,
  SWAP: 10,
  CMP_SWAP: 11,
} as const;
export const WR_OPCODE_NAMES = [
  'send',
  'send-with-solicited',
  'send-with-invalidate',
  'send-with-imm',
  'write',
  'write-with-imm',
  'bind-mw',
  'local-invalidate',
  'read',
  'fetch-add',
  'swap',
  'cmp-swap',
] as const;
export type WrOpcodeName = (typeof WR_OPCODE_NAMES)[number];
/**
 * What the REST API posts: every opcode but the memory window ones (windows are allocated and
 * bound by verbs programs through librdmagraph-verbs.so; the API has no window objects).
 */
export const API_WR_OPCODE_NAMES = WR_OPCODE_NAMES.filter((n) => n !== 'bind-mw' && n !== 'local-invalidate');

export const WR_WC_OPCODE = [
  WcOpcode.SEND,
  WcOpcode.SEND,
  WcOpcode.SEND,
  WcOpcode.SEND,
  WcOpcode.WRITE,
  WcOpcode.WRITE,
  WcOpcode.BIND_MW,
  WcOpcode.LOCAL_INV,
  WcOpcode.READ,
  WcOpcode.FETCH_ADD,
  WcOpcode.SWAP,
  WcOpcode.CMP_SWAP,
];

export function isAtomic(op: number): boolean {
  return op >= WrOpcode.FETCH_ADD;
}

/** A Send of any kind (takes a send MSN, goes on queue 0). */
export function isSend(op: number): boolean {
  return op <= WrOpcode.SEND_WITH_IMM;
}

/** A work request that makes no packet (a memory window bind, a local invalidate). */
export function isLocal(op: number): boolean {
  return op === WrOpcode.BIND_MW || op === WrOpcode.LOCAL_INV;
}

/** Where a CQ's completions go as they happen (Cq.sink). */
export interface CompletionSink {
  /** One completion; false when there is no room for it (the CQ overflowed). */
  take(c: Completion): boolean;
}

export interface Completion {
  wrId: unknown;
  qpn: number;
  status: WcStatusName;
  opcode: WcOpcodeName;
  byteLen: number;
  imm?: number;
  invalidatedStag?: number;
  solicited?: boolean;
  /** A UD receive: the sender's QPN; the receive's first 40 bytes are the GRH. */
  srcQp?: number;
}

export class Pd {
  readonly handle: number;
  /** Objects using this PD (MRs, QPs, SRQs): destroy refuses while any is left. */
  users = 0;
  destroyed = false;
  constructor(handle: number) {
    this.handle = handle;
  }
}

export class Mr {
  readonly handle: number;
  readonly pd: Pd;
  stag: number;
  readonly memory: Uint8Array;
  readonly view: DataView;
  readonly length: number;
  readonly access: number;
  /**
   * The tagged offset of byte 0: 0 for an MR addressed by offsets (the REST API's), the virtual
   * address of the buffer for one a verbs program registered (peers send remote_addr as TO).
   */
  readonly base: number;
  valid = true;
  /** A memory window's bound range (in the STag table in the MR's stead): its window, else null. */
  mw: Mw | null = null;
  /** A type 2 window's QP: remote access only through it (null: any QP of the PD). */
  boundQp: object | null = null;
  /** Windows bound to this MR now (deregistration is refused while any is: EBUSY). */
  windows = 0;
  /** Its id in the pool's external memory table (graph/ext-memory.ts) once a segment was sent from it in place; 0: none. */
  extId = 0;
  constructor(handle: number, pd: Pd, stag: number, memory: Uint8Array, access: number, base = 0) {
    this.handle = handle;
    this.pd = pd;
    this.stag = stag;
    this.memory = memory;
    this.view = new DataView(memory.buffer, memory.byteOffset, memory.byteLength);
    this.length = memory.byteLength;
    this.access = access;
    this.base = base;
    widenNumberFields(this); // stag, base (a virtual address): any u32 or address
  }
}

/**
 * A memory window (ibv_mw): a slot of the STag table of its own, bound to a range of an MR with
 * remote access rights of its own by a bind work request. Type 1 is bound by ibv_bind_mw and
 * stays usable from any QP of its PD until rebound, unbound (zero length) or deallocated; type 2
 * is bound by a BIND_MW work request to the posting QP (remote access only through it) and is
 * freed by a local invalidate or by the peer's Send with Invalidate. Each bind gives the window
 * a new key: a bind takes the STag the verbs program names (`ibv_inc_rkey`: the low 8 bits
 * change), which must keep the window's table index, so an STag of an earlier binding is dead.
 */
export class Mw {
  readonly handle: number;
  readonly pd: Pd;
  readonly type: 1 | 2;
  /** The STag table slot (this window's STags are index << keyBits | key). */
  readonly index: number;
  /** The current STag: the last bind's (the one ibv_alloc_mw returned before any). */
  rkey: number;
  /** The MR the window is bound to (null: unbound or invalidated). */
  parent: Mr | null = null;
  destroyed = false;
  constructor(handle: number, pd: Pd, type: 1 | 2, index: number, rkey: number) {
    this.handle = handle;
    this.pd = pd;
    this.type = type;
    this.index = index;
    this.rkey = rkey;
    widenNumberFields(this); // rkey: any u32
  }
}

/** A completion queue: a ring of completions; overflow puts it in error and is reported. */
export class Cq {
  readonly handle: number;
  readonly depth: number;
  private readonly ring: Completion[];
  private head = 0;
  private count = 0;
  /** Set when a completion found the CQ full (the completion is kept in `overflowed`). */
  error = false;
  /** Completions that did not fit: never dropped silently, reported and kept for inspection. */
  readonly overflowed: Completion[] = [];
  users = 0;
  destroyed = false;
  /**
   * Called once per turn of the data plane's loop that added completions, after its passes,
   * outside every node (Graph.defer): it may post work, which goes out in one more pass of that
   * turn. Outside the loop (an API call that completes at once), from a microtask.
   */
  onCompletion: ((cq: Cq) => void) | null = null;
  /** Called when the CQ overflows. */
  onError: ((cq: Cq) => void) | null = null;
  /**
   * Where completions go instead of the ring, as they happen (a verbs program's CQ ring in
   * shared memory). An object, not a closure: every CQ's sink is then of one class, and the data
   * path's call to it stays monomorphic from the first CQ on (a closure per CQ is a new call
   * target each time, which threw away the optimised completion path at each new program).
   */
  sink: CompletionSink | null = null;
  dirty = false;
  notifyQueued = false;

  constructor(handle: number, depth: number) {
    this.handle = handle;
    this.depth = depth;
    this.ring = new Array<Completion>(depth);
  }

  get length(): number {
    return this.count;
  }

  /** Add a completion; false (and the CQ in error) when it is full. */
  push(c: Completion): boolean {
    if (this.error || this.count === this.depth) {
      if (!this.error) {
        this.error = true;
        this.onError?.(this);
      }
      this.overflowed.push(c);
      return false;
    }
    this.ring[(this.head + this.count) % this.depth] = c;
    this.count++;
    this.dirty = true;
    return true;
  }

  /** Take up to `max` completions, oldest first. */
  poll(max: number): Completion[] {
    const n = Math.min(max, this.count);
    const out = new Array<Completion>(n);
    for (let i = 0; i < n; i++) {
      out[i] = this.ring[this.head];
      this.ring[this.head] = undefined as unknown as Completion;
      this.head = (this.head + 1) % this.depth;
    }
    this.count -= n;
    return out;
  }
}

/** Scatter/gather list of a work request: MRs, offsets and lengths, preallocated per slot. */
export class SgList {
  n = 0;
  readonly mr: (Mr | null)[];
  readonly off: Float64Array;
  readonly len: Float64Array;
  total = 0;
  constructor(max: number) {
    this.mr = new Array<Mr | null>(max).fill(null);
    this.off = new Float64Array(max);
    this.len = new Float64Array(max);
  }

  clear(): void {
    for (let i = 0; i < this.n; i++) this.mr[i] = null;
    this.n = 0;
    this.total = 0;
  }

  /** Where span() found its bytes: their offset in the memory it returned. */
  spanAt = 0;

  /**
   * When bytes [pos, pos + len) of the list lie within one SGE: that MR's memory, with their
   * offset in it in `spanAt`; else null (two SGEs or more, or past the list). No allocation.
   */
  span(pos: number, len: number): Uint8Array | null {
    let i = 0;
    while (i < this.n && pos >= this.len[i]) pos -= this.len[i++];
    if (i >= this.n || pos + len > this.len[i]) return null;
    const m = this.mr[i] as Mr;
    this.spanAt = this.off[i] + pos;
    return m.memory;
  }

  /**
   * How many pieces (one per SGE touched) bytes [pos, pos + len) of the list are in, or 0 when
   * an MR among them is no longer valid or the range runs past the list.
   */
  pieces(pos: number, len: number): number {
    let i = 0;
    while (i < this.n && pos >= this.len[i]) pos -= this.len[i++];
    let n = 0;
    while (len > 0) {
      if (i >= this.n) return 0;
      const m = this.mr[i];
      if (m === null || !m.valid) return 0;
      len -= Math.min(len, this.len[i] - pos);
      pos = 0;
      i++;
      n++;
    }
    return n;
  }

  /** Copy `len` bytes starting at byte `pos` of the list into `dst` (`dstView` over it) at `dstOff`. */
  gather(pos: number, dst: Uint8Array, dstView: DataView, dstOff: number, len: number): void {
    let i = 0;
    while (i < this.n && pos >= this.len[i]) pos -= this.len[i++];
    while (len > 0) {
      const m = this.mr[i] as Mr;
      const take = Math.min(len, this.len[i] - pos);
      const s = this.off[i] + pos;
      copyBytes(dst, dstView, dstOff, m.memory, m.view, s, take);
      dstOff += take;
      len -= take;
      pos = 0;
      i++;
    }
  }

  /** Copy `len` bytes of `src` (`srcView` over it) at `srcOff` into the list at byte `pos`. */
  scatter(pos: number, src: Uint8Array, srcView: DataView, srcOff: number, len: number): void {
    let i = 0;
    while (i < this.n && pos >= this.len[i]) pos -= this.len[i++];
    while (len > 0) {
      const m = this.mr[i] as Mr;
      const take = Math.min(len, this.len[i] - pos);
      copyBytes(m.memory, m.view, this.off[i] + pos, src, srcView, srcOff, take);
      srcOff += take;
      len -= take;
      pos = 0;
      i++;
    }
  }
}

/** A posted receive. */
export class RecvWr {
  wrId: unknown = null;
  /** On its SRQ's free list (release is idempotent: a slot is never listed twice). */
  free = true;
  readonly sg: SgList;
  constructor(maxSge: number) {
    this.sg = new SgList(maxSge);
  }
}

/** A shared receive queue. */
export class Srq {
  readonly handle: number;
  readonly pd: Pd;
  readonly maxWr: number;
  readonly maxSge: number;
  /** Slots made so far: they are made at their first post (creating an SRQ costs no time), at most maxWr. */
  private made = 0;
  private readonly free: RecvWr[];
  private readonly queue: RecvWr[];
  private qHead = 0;
  private qCount = 0;
  /** Limit event (ibv_modify_srq srq_limit): armed when > 0, fires once when fewer remain. */
  limit = 0;
  onLimit: ((srq: Srq) => void) | null = null;
  users = 0;
  destroyed = false;

  constructor(handle: number, pd: Pd, maxWr: number, maxSge: number) {
    this.handle = handle;
    this.pd = pd;
    this.maxWr = maxWr;
    this.maxSge = maxSge;
    this.free = [];
    this.queue = new Array<RecvWr>(maxWr);
  }

  get length(): number {
    return this.qCount;
  }

  /** Receive slots made so far (at most maxWr). */
  get slotsMade(): number {
    return this.made;
  }

  /** Whether `slot` would give one. */
  get hasRoom(): boolean {
    return this.free.length > 0 || this.made < this.maxWr;
  }

  /** A free slot to fill, or null when the SRQ is full. */
  slot(): RecvWr | null {
    let wr = this.free.pop();
    if (wr === undefined) {
      if (this.made === this.maxWr) return null;
      wr = new RecvWr(this.maxSge);
      this.made++;
    }
    wr.free = false;
    return wr;
  }

  push(wr: RecvWr): void {
    this.queue[(this.qHead + this.qCount) % this.maxWr] = wr;
    this.qCount++;
  }

  /** The oldest posted receive (the caller gives it back with `release` when completed). */
  take(): RecvWr | null {
    if (this.qCount === 0) return null;
    const wr = this.queue[this.qHead];
    this.qHead = (this.qHead + 1) % this.maxWr;
    this.qCount--;
    if (this.limit > 0 && this.qCount < this.limit) {
      this.limit = 0;
      this.onLimit?.(this);
    }
    return wr;
  }

  release(wr: RecvWr): void {
    if (wr.free) return;
    wr.free = true;
    wr.sg.clear();
    wr.wrId = null;
    this.free.push(wr);
  }

  /** Take every posted receive (destroy). */
  drain(): RecvWr[] {
    const out: RecvWr[] = [];
    for (let wr = this.take(); wr !== null; wr = this.take()) out.push(wr);
    return out;
  }
}
