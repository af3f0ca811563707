/**
 * A worker's side of an interface another worker owns, when this worker receives part of its
 * traffic itself (cpu.workers; memif queues spread over workers, an af_packet interface split
 * by UDP port): the `wire` is this worker's own share of the device (drivers/memif-lane.ts, or an
 * af_packet socket with a filter, drivers/steer-bpf.ts), and the handoff link brings the frames
 * the owner (or another worker) received for this worker's QPs.
 *
 *   rx queue 0      the handoff link (frames flagged HANDED)
 *   rx queue 1..    the wire's queues
 *   tx              the wire's first queue: this worker's frames go out without a hop
 *
 * Counters, link state, checksum offload and `show hardware` are the wire's.
 */
import type { BufferPool } from '../graph/buffer-pool.ts';
import type { Driver, DriverCounters, DriverHardware } from './driver.ts';
import { HandoffDriver, type HandoffLink } from './handoff.ts';

export class WorkerLaneDriver implements Driver {
  readonly kind: string;
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues: number;
  readonly txQueues = 1;
  private readonly handoff: HandoffDriver;

  constructor(
    private readonly wire: Driver,
    link: HandoffLink,
    /** The device's numbers of the wire's queues (the memif queues or af_packet share placed here). */
    private readonly deviceQueues: readonly number[],
  ) {
    this.kind = wire.kind;
    this.name = wire.name;
    this.mac = wire.mac;
    this.mtu = wire.mtu;
    this.rxQueues = 1 + wire.rxQueues;
    this.handoff = HandoffDriver.shadow(wire.name, wire.mac, wire.mtu, link);
  }

  open(pool: BufferPool): void {
    this.handoff.open(pool);
    try {
      this.wire.open(pool);
    } catch (e) {
      this.handoff.close();
      throw e;
    }
  }

  txChecksumOffload(): { ip4: boolean; udp: boolean; udpNone?: boolean } {
    return this.wire.txChecksumOffload?.() ?? { ip4: false, udp: false };
  }

  deviceQueue(queue: number): number {
    return queue === 0 ? -1 : (this.deviceQueues[queue - 1] ?? -1);
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    return queue === 0 ? this.handoff.rxBurst(0, out, max) : this.wire.rxBurst(queue - 1, out, max);
  }

  txBurst(_queue: number, bufs: Uint32Array, off: number, n: number): number {
    return this.wire.txBurst(0, bufs, off, n);
  }

  linkUp(): boolean {
    return this.wire.linkUp();
  }

  rxWaitFd(queue: number): number {
    return queue === 0 ? this.handoff.rxWaitFd(0) : this.wire.rxWaitFd(queue - 1);
  }

  setWakeup(wake: () => void): void {
    this.wire.setWakeup(wake);
  }

  hardware(): DriverHardware {
    return this.wire.hardware?.() ?? { info: {}, counters: {} };
  }

  counters(): DriverCounters {
    return this.wire.counters();
  }

  close(): void {
    this.wire.close();
    this.handoff.close();
  }
}
