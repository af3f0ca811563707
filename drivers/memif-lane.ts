/**
 * The memif queues of an interface another worker owns that this worker polls (cpu.workers with
 * rx-queues > 1, `rx-placement`; VPP's rx-placement of a multi-queue memif): this worker's
 * driver of the interface. The owner runs the control channel and queue 0 (drivers/memif.ts
 * with a laneKey); each queue here is a MemifLane (native/core/memif_lane.cc) that receives from
 * and transmits on the peer's rings directly.
 *
 *   rx queue k      the k-th memif queue placed here
 *   tx              the first of them: this worker's frames go out without a hop
 *
 * A peer that sends a QP's frames on the queue of the worker that owns the QP (rdma-graph
 * itself transmits each worker's frames on its own queue) needs no handoff at all; frames on the
 * wrong queue go through worker-handoff to their QP's worker. What this worker's queues carry
 * is counted here; the facade adds it to the other workers' counts of the interface.
 *
 * Each lane has its own stash of this thread's buffers and its own `done` list, as the owner's
 * driver has; it holds no buffer while its queue is down. A lane copies, as the owner of queues
 * spread over threads does: a segment sent from an MR in place (BufferFlag.EXT_DATA) is gathered
 * from the MR straight into the peer's buffer (or the slot's), through this thread's pool's
 * external table.
 */
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import { FRAME_SIZE } from '../graph/node.ts';
import { loadCore, type MemifLaneNative, type MemifLayout } from '../native/addons.ts';
import type { Driver, DriverCounters, DriverHardware } from './driver.ts';
import { poolArrays, zeroCounters } from './driver.ts';
import { extTableOf } from './ext-table.ts';

/** One memif queue polled here: the native lane and its buffer arrays. */
class LaneQueue {
  readonly stash: Uint32Array;
  readonly done = new Uint32Array(512);
  /** bindPool's state array, and the index of each of its words (core.memifLayout()). */
  readonly st: Uint32Array;
  readonly S: MemifLayout['state'];
  readonly low: number;
  gen = 0;
  constructor(
    readonly queue: number,
    readonly native: MemifLaneNative,
    private readonly pool: BufferPool,
  ) {
    const layout = loadCore().memifLayout();
    this.st = new Uint32Array(layout.stateLength);
    this.S = layout.state;
    const maxSegs = Math.ceil(layout.maxFrame / pool.dataSize);
    this.stash = new Uint32Array(2 * FRAME_SIZE + maxSegs);
    this.low = FRAME_SIZE + maxSegs;
    native.bindPool({
      ...poolArrays(pool),
      fd: -1,
      stash: this.stash,
      done: this.done,
      state: this.st,
      flagNext: BufferFlag.NEXT_PRESENT,
      // A lane copies (its buffers are its thread's): a segment sent from an MR in place is
      // gathered from the MR straight into the peer's buffer or its slot, as the owner does.
      ext: extTableOf(loadCore(), pool),
      extId: pool.extId,
      flagExt: BufferFlag.EXT_DATA,
    });
  }

  /** Its queue is connected. */
  up(): boolean {
    return this.st[this.S.link] !== 0;
  }

  rx(out: Uint32Array, max: number): number {
    const st = this.st,
      S = this.S;
    if (st[S.link] !== 0 && st[S.stash] < this.low) this.topUp();
    const n = this.native.rx(out, max);
    if (st[S.done] !== 0) this.pool.free(this.done, 0, st[S.done]);
    if (st[S.gen] !== this.gen) this.sync();
    return n;
  }

  tx(bufs: Uint32Array, off: number, n: number): number {
    const taken = this.native.tx(bufs, off, n);
    const st = this.st,
      S = this.S;
    if (st[S.done] !== 0) this.pool.free(this.done, 0, st[S.done]);
    if (st[S.gen] !== this.gen) this.sync();
    return taken;
  }

  /** The queue came up or went down: hold buffers only while it is up. */
  private sync(): void {
    const st = this.st,
      S = this.S;
    this.gen = st[S.gen];
    for (let k = this.native.reclaim(); k > 0; k = this.native.reclaim()) this.pool.free(this.done, 0, k);
    if (st[S.link] === 0) this.freeStash();
    else this.topUp();
  }

  private topUp(): void {
    const st = this.st,
      S = this.S;
    const have = st[S.stash];
    st[S.stash] = have + this.pool.alloc(this.stash, have, this.stash.length - have);
  }

  freeStash(): void {
    const n = this.st[this.S.stash];
    if (n > 0) this.pool.free(this.stash, 0, n);
    this.st[this.S.stash] = 0;
  }

  close(): void {
    this.native.close();
    for (let k = this.native.reclaim(); k > 0; k = this.native.reclaim()) this.pool.free(this.done, 0, k);
    this.freeStash();
  }
}

/** A lane's native counters, named as the owner's (Lane::kCounterNames). */
type MemifLaneStats = ReturnType<MemifLaneNative['stats']>;
const STAT_KEYS = [
  'rxPackets',
  'rxBytes',
  'rxErrors',
  'rxNoBuffers',
  'rxChained',
  'txPackets',
  'txBytes',
  'txErrors',
  'txRefused',
  'txChained',
  'kicks',
  'interrupts',
  'rxDeferred',
  'txGathered',
] as const satisfies readonly (keyof MemifLaneStats)[];

export interface MemifLaneOptions {
  /** The owner's laneKey. */
  key: string;
  /** The memif queues this worker polls (1..). */
  queues: number[];
  /** As the owner's udpChecksum. */
  udpChecksum: boolean;
}

export class MemifLaneDriver implements Driver {
  readonly kind = 'memif';
  readonly rxQueues: number;
  readonly txQueues = 1;
  private readonly core = loadCore();
  private lanes: LaneQueue[] = [];
  private pool: BufferPool | null = null;
  private final: MemifLaneStats | null = null;

  constructor(
    readonly name: string,
    readonly mac: Uint8Array,
    readonly mtu: number,
    private readonly opts: MemifLaneOptions,
  ) {
    const where = `memif interface ${name}`;
    if (opts.queues.length === 0 || !opts.queues.every((q) => Number.isInteger(q) && q >= 1 && q <= 254))
      throw new RangeError(`${where}: lane queues must be 1..254, got ${JSON.stringify(opts.queues)}`);
    this.rxQueues = opts.queues.length;
  }

  open(pool: BufferPool): void {
    this.pool = pool;
    pool.ext.wanted = true;
    try {
      for (const q of this.opts.queues) {
        const native = new this.core.MemifLane({ name: this.name, key: this.opts.key, queue: q });
        this.lanes.push(new LaneQueue(q, native, pool));
      }
    } catch (e) {
      this.close();
      throw e;
    }
  }

  txChecksumOffload(): { ip4: boolean; udp: boolean; udpNone: boolean } {
    return { ip4: false, udp: false, udpNone: !this.opts.udpChecksum };
  }

  /** The memif queue number of rx queue `queue` here (show interface rx-placement). */
  deviceQueue(queue: number): number {
    return this.opts.queues[queue] ?? -1;
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    const lane = this.lanes[queue];
    return lane === undefined ? 0 : lane.rx(out, max);
  }

  txBurst(_queue: number, bufs: Uint32Array, off: number, n: number): number {
    const lane = this.lanes[0];
    return lane === undefined ? 0 : lane.tx(bufs, off, n);
  }

  /** A lane copies, with the pool's external table: payloads sent from an MR are gathered in place. */
  txExternal(): boolean {
    return this.linkUp();
  }

  /** Up while the owner's connection is and this worker's queues are attached to it. */
  linkUp(): boolean {
    return this.lanes.length > 0 && this.lanes[0].up();
  }

  rxWaitFd(queue: number): number {
    return this.lanes[queue]?.native.waitFd ?? -1;
  }

  setWakeup(_wake: () => void): void {
    // The lanes' epoll fds wake the graph.
  }

  hardware(): DriverHardware {
    const info: DriverHardware['info'] = { lanes: `memif queue ${this.opts.queues.join(', ')} of ${this.name}` };
    for (const l of this.lanes) {
      const i = l.native.info();
      info[`queue ${l.queue}`] = i.attached ? (i.up ? 'up' : 'down') : `not attached${i.error ? ` (${i.error})` : ''}`;
    }
    return { info, counters: { ...this.stats() } };
  }

  /** What this worker's queues counted natively, under the owner's memif counter names. */
  stats(): MemifLaneStats {
    if (this.final !== null) return { ...this.final };
    const c = Object.fromEntries(STAT_KEYS.map((k) => [k, 0])) as MemifLaneStats;
    for (const l of this.lanes) {
      const s = l.native.stats();
      for (const k of STAT_KEYS) c[k] += s[k];
    }
    return c;
  }

  /** What this worker's queues carried. */
  counters(): DriverCounters {
    const s = this.stats();
    const c = zeroCounters();
    c.rxPackets = s.rxPackets;
    c.rxBytes = s.rxBytes;
    c.txPackets = s.txPackets;
    c.txBytes = s.txBytes;
    c.txDrops = s.txRefused;
    c.rxErrors = s.rxErrors;
    c.txErrors = s.txErrors;
    return c;
  }

  close(): void {
    if (this.pool === null) return;
    this.final = this.stats();
    for (const l of this.lanes) l.close();
    this.lanes = [];
    this.pool = null;
  }
}
