/**
 * A handoff link between two worker threads (cpu.workers): two frame rings in SharedArrayBuffers,
 * one per direction, and an eventfd per direction (fd numbers are the process's, so both threads
 * use the same ones). Each end is a Driver: txBurst copies frames into slots of the ring towards
 * the other end (and kicks its eventfd once per burst), rxBurst copies them out into buffers of
 * this thread's pool. Single producer, single consumer per ring; head and tail are Atomics.
 *
 * The interface owner's end is the "port" (its frames go straight out of the real interface);
 * the other worker's end is the "shadow" of that interface (same name, MAC and address), so a QP
 * on that worker can use the interface: the owner hands it the frames for its QPs
 * (nodes/handoff/worker-handoff.ts) and sends what it transmits.
 *
 * When the other worker polls queues of the interface itself (memif queues spread over workers,
 * drivers/memif-lane.ts), it transmits on them too, and the link carries received frames both
 * ways: the owner's port delivers what it receives from the link as received on the interface,
 * and the other worker writes into the link through a transmit-only port (`toOwner`) while its
 * lane driver reads the owner's direction. Frames received from a link are flagged HANDED.
 */
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import { loadCore } from '../native/addons.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { zeroCounters } from './driver.ts';

const HEAD = 0,
  TAIL = 1;

/** One direction: slots of `slotSize` bytes, a length per slot, head/tail counters. */
export interface HandoffRing {
  ctl: SharedArrayBuffer; // Int32Array [head, tail]
  lengths: SharedArrayBuffer; // Uint32Array per slot
  slots: SharedArrayBuffer; // nSlots * slotSize bytes
  slotSize: number;
  nSlots: number;
  /** eventfd the consumer's graph sleeps on. */
  fd: number;
}

/** Both directions of a link: `a` carries port -> shadow, `b` shadow -> port. */
export interface HandoffLink {
  toShadow: HandoffRing;
  toPort: HandoffRing;
}

function ring(nSlots: number, slotSize: number): HandoffRing {
  return {
    ctl: new SharedArrayBuffer(8),
    lengths: new SharedArrayBuffer(4 * nSlots),
    slots: new SharedArrayBuffer(nSlots * slotSize),
    slotSize,
    nSlots,
    fd: loadCore().eventfd(),
  };
}

/** A link for frames of up to `maxFrame` bytes (made on the main thread, sent to both workers). */
export function handoffLink(maxFrame: number, nSlots = 1024): HandoffLink {
  return { toShadow: ring(nSlots, maxFrame), toPort: ring(nSlots, maxFrame) };
}

export class HandoffDriver implements Driver {
  readonly kind = 'handoff';
  readonly rxQueues = 1;
  readonly txQueues = 1;
  private readonly core = loadCore();
  private readonly rxCtl: Int32Array;
  private readonly rxLen: Uint32Array;
  private readonly rxSlots: Uint8Array;
  private readonly txCtl: Int32Array;
  private readonly txLen: Uint32Array;
  private readonly txSlots: Uint8Array;
  private pool: BufferPool | null = null;
  private readonly stats = zeroCounters();

  constructor(
    readonly name: string,
    readonly mac: Uint8Array,
    readonly mtu: number,
    private readonly rx: HandoffRing,
    private readonly tx: HandoffRing,
    /** false: a transmit-only end (its receive direction is read by another driver). */
    private readonly receives = true,
  ) {
    this.rxCtl = new Int32Array(rx.ctl);
    this.rxLen = new Uint32Array(rx.lengths);
    this.rxSlots = new Uint8Array(rx.slots);
    this.txCtl = new Int32Array(tx.ctl);
    this.txLen = new Uint32Array(tx.lengths);
    this.txSlots = new Uint8Array(tx.slots);
  }

  /** The interface owner's end of `link`. */
  static port(name: string, mac: Uint8Array, mtu: number, link: HandoffLink): HandoffDriver {
    return new HandoffDriver(name, mac, mtu, link.toPort, link.toShadow);
  }

  /** The other worker's transmit-only end, when a lane driver reads the owner's direction. */
  static toOwner(name: string, mac: Uint8Array, mtu: number, link: HandoffLink): HandoffDriver {
    return new HandoffDriver(name, mac, mtu, link.toShadow, link.toPort, false);
  }

  /** The other worker's end: the shadow of the interface. */
  static shadow(name: string, mac: Uint8Array, mtu: number, link: HandoffLink): HandoffDriver {
    return new HandoffDriver(name, mac, mtu, link.toShadow, link.toPort);
  }

  open(pool: BufferPool): void {
    this.pool = pool;
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    const pool = this.pool;
    if (pool === null || queue !== 0 || !this.receives) return 0;
    const ctl = this.rxCtl,
      n = this.rx.nSlots,
      size = this.rx.slotSize;
    let tail = ctl[TAIL];
    const head = Atomics.load(ctl, HEAD);
    let avail = (head - tail) | 0;
    if (avail === 0) {
      this.core.eventfdRead(this.rx.fd);
      // A frame published between the look and the drain kicked the fd we just drained: look again.
      avail = (Atomics.load(ctl, HEAD) - tail) | 0;
      if (avail === 0) return 0;
    }
    if (avail < 0 || avail > n) return 0; // impossible counters: our own peer thread wrote them
    if (max > out.length) max = out.length;
    let k = 0;
    while (k < max && avail > 0) {
      const s = tail % n;
      const len = Math.min(this.rxLen[s], size);
      const bi = pool.writePacket(this.rxSlots, s * size, len);
      if (bi === 0xffffffff) break; // no buffers: the frames wait in the ring
      pool.flags[bi] |= BufferFlag.HANDED;
      out[k++] = bi;
      this.stats.rxPackets++;
      this.stats.rxBytes += len;
      tail = (tail + 1) | 0;
      avail--;
    }
    Atomics.store(ctl, TAIL, tail);
    return k;
  }

  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    const pool = this.pool;
    if (pool === null) return 0;
    const ctl = this.txCtl,
      slots = this.tx.nSlots,
      size = this.tx.slotSize;
    let head = ctl[HEAD];
    const room = slots - ((head - Atomics.load(ctl, TAIL)) | 0);
    const take = n < room ? n : room;
    let sent = 0;
    for (let i = 0; i < take; i++) {
      const bi = bufs[off + i];
      const len = pool.packetLength(bi);
      if (len > size) {
        this.stats.txErrors++;
        pool.freeOne(bi);
        continue;
      }
      const s = head % slots;
      pool.readPacket(bi, this.txSlots, s * size);
      this.txLen[s] = len;
      head = (head + 1) | 0;
      pool.freeOne(bi);
      sent++;
      this.stats.txPackets++;
      this.stats.txBytes += len;
    }
    if (sent > 0) {
      Atomics.store(ctl, HEAD, head);
      this.core.eventfdWrite(this.tx.fd);
    }
    this.stats.txDrops += n - take;
    return take;
  }

  linkUp(): boolean {
    return this.pool !== null;
  }

  /** Not a device's queue (show interface rx-placement leaves handoff links out). */
  deviceQueue(_queue: number): number {
    return -1;
  }

  rxWaitFd(queue: number): number {
    return queue === 0 && this.receives ? this.rx.fd : -1;
  }

  setWakeup(_wake: () => void): void {
    // The eventfd wakes the graph.
  }

  counters(): DriverCounters {
    return { ...this.stats };
  }

  close(): void {
    this.pool = null;
  }
}
