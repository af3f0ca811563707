/**
 * The frame queue from one worker thread to another (cpu.workers >= 2, VPP's handoff queue):
 * single producer, single consumer, frames copied into slots of a SharedArrayBuffer made on the
 * main thread, one queue per ordered pair of workers.
 *
 * Layout (Snabb's interlink): each index on its own 64-byte cache line, so the producer's writes
 * of its index never invalidate the line the consumer writes, and each side keeps a private
 * copy of the other's index, reading the shared one only when its copy says full (producer) or
 * empty (consumer):
 *
 *   bytes   0..63    head: frames published (producer writes; free-running u32)
 *   bytes  64..127   tail: frames consumed (consumer writes; free-running u32)
 *   bytes 128..191   need-kick: 1 while the consumer is about to sleep (consumer sets, producer clears)
 *   bytes 192..      `slots` slots of `slotSize` bytes (a multiple of 64), slot s at 192 + s * slotSize:
 *                      u32 length, u32 interface index | kind << 24 (HANDOFF_RX / HANDOFF_TX),
 *                      then the frame's bytes
 *
 * Wake-ups (the need-kick handshake of the verbs rings, docs/VERBS-PROTOCOL.md 4.6): a consumer
 * about to sleep stores need-kick = 1 and then looks at head once more (`arm`); a producer
 * stores head and then loads need-kick (`publish`), and only when it is set clears it
 * (compare-and-swap, so one kick per arming) and writes the consumer's eventfd. Atomics are
 * sequentially consistent, a full fence between each side's store and its load: either the
 * consumer's second look sees the new head, or the producer sees need-kick. A busy consumer
 * never arms, so its producers make no system call; an idle one reads nothing per poll.
 */
import { loadCore } from '../native/addons.ts';
import type { BufferPool } from './buffer-pool.ts';
import type { Graph } from './graph.ts';

/** Slot kinds: a frame the sender received (process it as received), or one to transmit. */
export const HANDOFF_RX = 1,
  HANDOFF_TX = 2;

/** Bytes before a slot's frame: its length and its interface index with the kind. */
export const HANDOFF_SLOT_HEADER = 8;
/** Largest interface index a slot carries (24 bits). */
export const HANDOFF_MAX_IF = 0xffffff;

const LINE = 64;
const HEAD = 0,
  TAIL = LINE / 4,
  NEED_KICK = (2 * LINE) / 4,
  SLOTS_AT = 3 * LINE;
/** A queue's slots take at most this many bytes (fewer, larger slots for jumbo frames). */
const BUDGET = 4 << 20;

/** One queue's shared memory and the eventfd its consumer sleeps on (structured-clone data). */
export interface HandoffQueueMemory {
  sab: SharedArrayBuffer;
  /** A power of two. */
  slots: number;
  slotSize: number;
  /** The consumer's eventfd (one per consumer, shared by its producers); -1: none (tests). */
  kickFd: number;
}

/**
 * A queue for frames of up to `maxFrame` bytes, kicking `kickFd`: `slots` (a power of two) or as
 * many as fit in 4 MiB, between 64 and 1024.
 */
export function handoffQueue(maxFrame: number, kickFd: number, slots?: number): HandoffQueueMemory {
  if (!Number.isInteger(maxFrame) || maxFrame < 1 || maxFrame > 1 << 20)
    throw new RangeError(`handoff queue: maxFrame must be an integer in 1..${1 << 20}, got ${maxFrame}`);
  const slotSize = Math.ceil((HANDOFF_SLOT_HEADER + maxFrame) / LINE) * LINE;
  let n = slots ?? Math.min(1024, Math.max(64, 2 ** Math.floor(Math.log2(BUDGET / slotSize))));
  if (!Number.isInteger(n) || n < 2 || n > 1 << 16 || (n & (n - 1)) !== 0)
    throw new RangeError(`handoff queue: slots must be a power of two in 2..65536, got ${n}`);
  n |= 0;
  return { sab: new SharedArrayBuffer(SLOTS_AT + n * slotSize), slots: n, slotSize, kickFd };
}

/** What both ends of a queue see of its memory. */
class QueueEnd {
  protected readonly ctl: Int32Array;
  readonly u8: Uint8Array;
  readonly u32: Uint32Array;
  protected readonly mask: number;
  protected readonly slotSize: number;
  /** Largest frame a slot holds. */
  readonly maxFrame: number;
  readonly kickFd: number;

  constructor(mem: HandoffQueueMemory) {
    this.ctl = new Int32Array(mem.sab, 0, SLOTS_AT / 4);
    this.u8 = new Uint8Array(mem.sab);
    this.u32 = new Uint32Array(mem.sab);
    this.mask = mem.slots - 1;
    this.slotSize = mem.slotSize;
    this.maxFrame = mem.slotSize - HANDOFF_SLOT_HEADER;
    this.kickFd = mem.kickFd;
  }
}

/** The producer's end (one thread). */
export class HandoffProducer extends QueueEnd {
  /** Next slot to fill; what was last stored as head; the consumer's tail as last read. */
  private head: number;
  private published: number;
  private tailCache: number;
  private readonly core = loadCore();

  constructor(mem: HandoffQueueMemory) {
    super(mem);
    // A restarted thread goes on where the shared indices are.
    this.head = this.published = Atomics.load(this.ctl, HEAD);
    this.tailCache = Atomics.load(this.ctl, TAIL);
  }

  /**
   * The byte offset of the next free slot's frame, or -1 when the queue is full (the shared
   * tail is read only then). Nothing is visible to the consumer before `commit` and `publish`.
   */
  reserve(): number {
    const size = this.mask + 1;
    if (((this.head - this.tailCache) | 0) >= size) {
      this.tailCache = Atomics.load(this.ctl, TAIL);
      if (((this.head - this.tailCache) | 0) >= size) return -1;
    }
    return SLOTS_AT + (this.head & this.mask) * this.slotSize + HANDOFF_SLOT_HEADER;
  }

  /** Close the slot `reserve` gave: `len` bytes for interface `ifIndex`, of `kind`. */
  commit(len: number, ifIndex: number, kind: number): void {
    const w = (SLOTS_AT + (this.head & this.mask) * this.slotSize) >>> 2;
    this.u32[w] = len;
    this.u32[w + 1] = (ifIndex & HANDOFF_MAX_IF) | (kind << 24);
    this.head = (this.head + 1) | 0;
  }

  /**
   * Copy packet `bi` (its whole chain) into the next slot. False when the queue is full or the
   * packet is longer than a slot (the caller keeps the buffer either way).
   */
  putPacket(pool: BufferPool, bi: number, ifIndex: number, kind: number): boolean {
    const len = pool.packetLength(bi);
    if (len > this.maxFrame) return false;
    const at = this.reserve();
    if (at < 0) return false;
    pool.readPacket(bi, this.u8, at);
    this.commit(len, ifIndex, kind);
    return true;
  }

  /** Make the committed frames visible; kick the consumer if it is going to sleep. */
  publish(): void {
    if (this.head === this.published) return;
    Atomics.store(this.ctl, HEAD, this.head);
    this.published = this.head;
    // After the store (a full fence): a consumer that armed before it sees our head or we see its flag.
    if (Atomics.load(this.ctl, NEED_KICK) !== 0 && Atomics.compareExchange(this.ctl, NEED_KICK, 1, 0) === 1)
      if (this.kickFd >= 0) this.core.eventfdWrite(this.kickFd);
  }
}

/** The consumer's end (one thread). */
export class HandoffConsumer extends QueueEnd {
  /** Next slot to read; what was last stored as tail; the producer's head as last read. */
  private tail: number;
  private released: number;
  private headCache: number;

  constructor(mem: HandoffQueueMemory) {
    super(mem);
    this.tail = this.released = Atomics.load(this.ctl, TAIL);
    this.headCache = Atomics.load(this.ctl, HEAD);
  }

  /** Frames waiting (the shared head is read only when the cached one says none). */
  available(): number {
    let n = (this.headCache - this.tail) | 0;
    if (n <= 0) {
      this.headCache = Atomics.load(this.ctl, HEAD);
      n = (this.headCache - this.tail) | 0;
    }
    // Only a broken producer makes it negative or more than the queue: treat it as empty.
    return n > 0 && n <= this.mask + 1 ? n : 0;
  }

  /** The u32 word index of the oldest waiting slot's header: [w] length, [w + 1] interface | kind << 24. */
  slot(): number {
    return (SLOTS_AT + (this.tail & this.mask) * this.slotSize) >>> 2;
  }

  /** Done with the oldest slot (the producer may reuse it after `release`). */
  pop(): void {
    this.tail = (this.tail + 1) | 0;
  }

  /** Hand the slots popped so far back to the producer (one store). */
  release(): void {
    if (this.tail === this.released) return;
    Atomics.store(this.ctl, TAIL, this.tail);
    this.released = this.tail;
  }

  /** About to sleep: ask for a kick, then look once more; true when frames are waiting (stay awake). */
  arm(): boolean {
    Atomics.store(this.ctl, NEED_KICK, 1);
    this.headCache = Atomics.load(this.ctl, HEAD);
    return ((this.headCache - this.tail) | 0) !== 0;
  }

  /** Awake again: no kicks wanted. */
  disarm(): void {
    Atomics.store(this.ctl, NEED_KICK, 0);
  }

  /** Whether the consumer asked for a kick and no producer has taken it yet (tests). */
  get needKick(): boolean {
    return Atomics.load(this.ctl, NEED_KICK) !== 0;
  }
}

/**
 * A worker's inbound queues (one from each other worker) and the eventfd their producers kick:
 * what its handoff-input node drains. The eventfd is among the graph's wait fds; the graph's
 * sleep guard arms every queue (need-kick) and looks once more. The eventfd is read only after
 * the graph slept armed (one read per sleep), never on a busy or an empty poll.
 */
export class HandoffInbox {
  readonly from: HandoffConsumer[];
  private armed = false;
  private sleepsAtArm = 0;
  private readonly core = loadCore();
  private readonly removeGuard: () => void;

  constructor(
    private readonly graph: Graph,
    queues: readonly HandoffQueueMemory[],
    /** The worker each queue comes from (trace). */
    readonly fromWorker: readonly number[],
    /** This worker's eventfd (every queue's kickFd); -1: none (tests drive `arm` themselves). */
    readonly kickFd: number,
  ) {
    this.from = queues.map((m) => new HandoffConsumer(m));
    // A thread that died armed (or with a kick pending) left the flags and the counter set.
    for (const q of this.from) q.disarm();
    if (kickFd >= 0) {
      this.core.eventfdRead(kickFd);
      graph.addWaitFd(kickFd);
    }
    this.removeGuard = graph.addSleepGuard(() => this.arm());
  }

  /** The sleep guard: ask every producer for a kick, then look once more (true: frames came, stay awake). */
  arm(): boolean {
    this.armed = true;
    this.sleepsAtArm = this.graph.sleeps;
    let waiting = false;
    for (let i = 0; i < this.from.length; i++) if (this.from[i].arm()) waiting = true;
    return waiting;
  }

  /**
   * At each poll: after an arming, no more kicks wanted; and after a sleep the eventfd is
   * drained (a kick that lands after this read leaves it readable: the next sleep returns at
   * once and drains it then).
   */
  awake(): void {
    if (!this.armed) return;
    this.armed = false;
    for (let i = 0; i < this.from.length; i++) this.from[i].disarm();
    if (this.kickFd >= 0 && this.graph.sleeps !== this.sleepsAtArm) this.core.eventfdRead(this.kickFd);
  }

  close(): void {
    this.removeGuard();
    if (this.kickFd >= 0) this.graph.removeWaitFd(this.kickFd);
  }
}
