/**
 * An interface another worker owns, as a worker without a device of it sees it (cpu.workers >= 2):
 * what this worker's stack transmits on it goes, tagged "to transmit on interface N", into the
 * handoff queue to the owner (graph/handoff-queue.ts), whose handoff-input node hands it to the
 * interface's tx node (nodes/handoff/handoff-input.ts). It receives nothing itself: the worker
 * that receives a frame for this worker's QPs hands it over as received on interface N.
 *
 * Not the device: no rx queues, no fault injector or capture here (they run where a frame meets
 * the device, on the owner), and no device counters (the owner counts what leaves) but one:
 * txDrops, what the queue to the owner had no room for (this worker's tx node drops them).
 */
import type { BufferPool } from '../graph/buffer-pool.ts';
import { HANDOFF_TX, type HandoffProducer } from '../graph/handoff-queue.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { zeroCounters } from './driver.ts';

export class RemoteDriver implements Driver {
  readonly kind = 'remote';
  readonly remote = true;
  readonly rxQueues = 0;
  readonly txQueues = 1;
  private pool: BufferPool | null = null;
  private txDrops = 0;

  constructor(
    readonly name: string,
    readonly mac: Uint8Array,
    readonly mtu: number,
    /** The interface's index (the same on every worker: its place in the configuration). */
    private readonly ifIndex: number,
    /** The queue from this worker to the interface's owner. */
    private readonly toOwner: HandoffProducer,
    /** The device sends UDP without a checksum (a memif interface with udp-checksum: false). */
    private readonly udpNone = false,
  ) {}

  open(pool: BufferPool): void {
    this.pool = pool;
  }

  txChecksumOffload(): { ip4: boolean; udp: boolean; udpNone: boolean } {
    return { ip4: false, udp: false, udpNone: this.udpNone };
  }

  rxBurst(_queue: number, _out: Uint32Array, _max: number): number {
    return 0;
  }

  /** Copies as many as the queue takes (in order), frees them, publishes once. */
  txBurst(_queue: number, bufs: Uint32Array, off: number, n: number): number {
    const pool = this.pool;
    if (pool === null) {
      this.txDrops += n;
      return 0;
    }
    const q = this.toOwner,
      ix = this.ifIndex;
    let k = 0;
    while (k < n && q.putPacket(pool, bufs[off + k], ix, HANDOFF_TX)) k++;
    q.publish();
    if (k > 0) pool.free(bufs, off, k);
    this.txDrops += n - k;
    return k;
  }

  /** The owner's link is not seen from here: up once open (its tx node drops while the device is down). */
  linkUp(): boolean {
    return this.pool !== null;
  }

  rxWaitFd(_queue: number): number {
    return -1;
  }

  setWakeup(_wake: () => void): void {
    // Receives nothing.
  }

  counters(): DriverCounters {
    return { ...zeroCounters(), txDrops: this.txDrops };
  }

  close(): void {
    this.pool = null;
  }
}
