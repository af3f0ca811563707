/**
 * The pcap driver: replays a capture file as the receive side and writes what is transmitted to
 * a capture file (VPP's packet generator `packet-generator new pcap ...` + `packet-generator
 * capture`). It is how graph tests feed packets in and compare what comes out.
 *
 * Receive: each record becomes one packet in fresh pool buffers (chained when larger than the
 * pool's data size) carrying the record's timestamp (TIMESTAMP_VALID), so a replayed capture
 * written back out is byte-identical. `rate` paces the replay (packet k is due at start + k/rate,
 * the clock starting at the first rxBurst); `loop` replays the file several times (0 = forever,
 * with the file's timestamps each time). When the pool runs dry the replay waits: nothing is
 * lost to backpressure.
 *
 * Transmit: each packet (all its segments) becomes one record; one file write per burst.
 */
import { checkMtu } from '../graph/link.ts';
import type { BufferPool } from '../graph/buffer-pool.ts';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { nowNs } from '../graph/clock.ts';
import type { Driver, DriverCounters } from './driver.ts';
import { zeroCounters } from './driver.ts';
import { LINKTYPE_ETHERNET, PcapReader, PcapWriter } from './pcap-file.ts';
import { macOption } from './mac.ts';

export interface PcapDriverOptions {
  /** Capture replayed as received packets. */
  rxFile?: string;
  /** Capture file (created/truncated at open) that transmitted packets are written to. */
  txFile?: string;
  /** Packets per second; 0 or undefined = as fast as the graph takes them. */
  rate?: number;
  /** Times to replay rxFile; default 1, 0 = forever. */
  loop?: number;
  /** "aa:bb:cc:dd:ee:ff" or 6 bytes; default a locally administered address derived from the name. */
  mac?: string | Uint8Array;
  /** Default 1500. */
  mtu?: number;
  /** Snaplen of txFile; default the rx file's, else 262144. */
  txSnaplen?: number;
  /** Nanosecond timestamps in txFile; default the rx file's, else false. */
  txNanosecond?: boolean;
}

export class PcapDriver implements Driver {
  readonly kind = 'pcap';
  readonly name: string;
  readonly mac: Uint8Array;
  readonly mtu: number;
  readonly rxQueues = 1;
  readonly txQueues = 1;

  readonly rxFile: string | undefined;
  readonly txFile: string | undefined;
  readonly rate: number;
  readonly loop: number;

  private readonly reader: PcapReader | null;
  private writer: PcapWriter | null = null;
  private pool: BufferPool | null = null;
  private state: 'new' | 'open' | 'closed' = 'new';
  private wake: (() => void) | null = null;
  private readonly stats: DriverCounters = zeroCounters();
  private readonly txSnaplen: number | undefined;
  private readonly txNanosecond: boolean | undefined;
  /** Set when a write to txFile failed; tx is refused from then on. */
  private txFailure: string | null = null;

  // Replay position: next record, and passes over the file completed.
  private cur = 0;
  private passes = 0;
  private exhausted: boolean;
  /** Packets released so far (k of the next packet in the rate schedule). */
  private released = 0;
  private startNs = -1;
  private readonly periodNs: number;

  // Per-burst scratch, grown rarely, never per packet.
  private segs = new Uint32Array(1024);

  constructor(name: string, opts: PcapDriverOptions = {}) {
    this.name = name;
    const where = `pcap interface ${name}`;
    if (opts.rxFile === undefined && opts.txFile === undefined) {
      throw new Error(`${where}: give rxFile, txFile or both`);
    }
    const rate = opts.rate ?? 0;
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate < 0)
      throw new RangeError(`${where}: rate must be a number of packets per second >= 0, got ${rate}`);
    const loop = opts.loop ?? 1;
    if (!Number.isInteger(loop) || loop < 0)
      throw new RangeError(`${where}: loop must be an integer >= 0 (0 = forever), got ${loop}`);
    const mtu = opts.mtu ?? 1500;
    checkMtu(mtu, where);
    this.rate = rate;
    this.periodNs = rate > 0 ? 1e9 / rate : 0;
    this.loop = loop;
    this.mtu = mtu;
    this.mac = macOption(where, opts.mac, name);
    this.rxFile = opts.rxFile;
    this.txFile = opts.txFile;

    if (opts.rxFile !== undefined) {
      const r = PcapReader.open(opts.rxFile);
      if (r.header.linktype !== LINKTYPE_ETHERNET) {
        throw new Error(
          `${where}: ${opts.rxFile} is not an Ethernet capture (linktype ${r.header.linktype}, need ${LINKTYPE_ETHERNET})`,
        );
      }
      this.reader = r;
    } else {
      this.reader = null;
    }
    this.exhausted = this.reader === null || this.reader.count === 0;
    this.txSnaplen = opts.txSnaplen ?? this.reader?.header.snaplen;
    this.txNanosecond = opts.txNanosecond ?? this.reader?.header.nanosecond;
  }

  open(pool: BufferPool): void {
    if (this.state !== 'new')
      throw new Error(`pcap interface ${this.name}: already ${this.state === 'open' ? 'open' : 'closed'}`);
    const r = this.reader;
    if (r !== null && r.maxInclLen > pool.count * pool.dataSize) {
      // Such a packet could never be allocated: the replay would stall on it forever.
      throw new Error(
        `pcap interface ${this.name}: ${this.rxFile} has a ${r.maxInclLen}-byte packet, more than the whole buffer pool holds ` +
          `(${pool.count} buffers of ${pool.dataSize} bytes)`,
      );
    }
    if (this.txFile !== undefined) {
      const h = r?.header;
      this.writer = new PcapWriter(this.txFile, {
        snaplen: this.txSnaplen,
        nanosecond: this.txNanosecond,
        linktype: LINKTYPE_ETHERNET,
        // Same header as the rx file where it has one, so a replay re-written is identical.
        versionMajor: h?.versionMajor,
        versionMinor: h?.versionMinor,
        thiszone: h?.thiszone,
        sigfigs: h?.sigfigs,
      });
    }
    this.pool = pool;
    this.state = 'open';
  }

  rxBurst(queue: number, out: Uint32Array, max: number): number {
    if (queue !== 0) throw new RangeError(`pcap interface ${this.name}: no rx queue ${queue}`);
    const pool = this.pool;
    const r = this.reader;
    if (this.state !== 'open' || this.exhausted || pool === null || r === null) return 0;
    if (max > out.length) max = out.length;

    if (this.periodNs > 0) {
      const now = monoNs();
      if (this.startNs < 0) this.startNs = now;
      // Packet k is due at start + k * period; release only those.
      const start = this.startNs,
        period = this.periodNs,
        k0 = this.released;
      let due = 0;
      while (due < max && start + (k0 + due) * period <= now) due++;
      max = due;
    }
    if (max === 0) return 0;

    // Buffers needed by the next `max` records (stopping at the end of the last pass).
    const ds = pool.dataSize;
    const inclLen = r.inclLen;
    const count = r.count,
      loop = this.loop;
    let ri = this.cur,
      passes = this.passes,
      nPlan = 0,
      nSegs = 0;
    while (nPlan < max) {
      const len = inclLen[ri];
      nSegs += len <= ds ? 1 : Math.ceil(len / ds);
      nPlan++;
      if (++ri === count) {
        ri = 0;
        if (++passes === loop) break; // loop 0 never matches: forever
      }
    }

    // One allocation for the whole burst; with fewer buffers, deliver the packets that fit.
    if (this.segs.length < nSegs) this.segs = new Uint32Array(Math.max(nSegs, this.segs.length * 2));
    const segs = this.segs;
    const got = pool.alloc(segs, 0, nSegs);

    const data = r.data,
      dataOffset = r.dataOffset,
      tsSec = r.tsSec,
      tsNsec = r.tsNsec;
    const u8 = pool.u8,
      offset = pool.offset,
      length = pool.length,
      flags = pool.flags,
      next = pool.next;
    const pts = pool.tsSec,
      ptn = pool.tsNsec;
    let used = 0,
      n = 0,
      bytes = 0;
    ri = this.cur;
    passes = this.passes;
    for (; n < nPlan; n++) {
      const len = inclLen[ri];
      const need = len <= ds ? 1 : Math.ceil(len / ds);
      if (used + need > got) break;
      const head = segs[used];
      let src = dataOffset[ri];
      let left = len;
      for (let s = 0; s < need; s++) {
        const bi = segs[used + s];
        const take = left < ds ? left : ds;
        u8.set(data.subarray(src, src + take), offset[bi]);
        length[bi] = take;
        src += take;
        left -= take;
        if (s + 1 < need) {
          flags[bi] |= BufferFlag.NEXT_PRESENT;
          next[bi] = segs[used + s + 1];
        }
      }
      flags[head] |= BufferFlag.TIMESTAMP_VALID;
      pts[head] = tsSec[ri];
      ptn[head] = tsNsec[ri];
      out[n] = head;
      used += need;
      bytes += len;
      if (++ri === count) {
        ri = 0;
        passes++;
      }
    }
    // Buffers allocated for packets that did not fit go straight back (unchained singles).
    if (got > used) pool.free(segs, used, got - used);

    this.cur = ri;
    this.passes = passes;
    if (loop !== 0 && passes >= loop) this.exhausted = true;
    this.released += n;
    this.stats.rxPackets += n;
    this.stats.rxBytes += bytes;
    return n;
  }

  txBurst(queue: number, bufs: Uint32Array, off: number, n: number): number {
    if (queue !== 0) throw new RangeError(`pcap interface ${this.name}: no tx queue ${queue}`);
    const w = this.writer;
    const pool = this.pool;
    if (w === null || pool === null || this.state !== 'open' || this.txFailure !== null) {
      this.stats.txDrops += n;
      return 0;
    }
    if (n === 0) return 0;
    const u8 = pool.u8,
      offset = pool.offset,
      length = pool.length,
      flags = pool.flags,
      next = pool.next;
    const snaplen = w.snaplen;
    let nowSec = -1,
      nowNsec = 0;
    let bytes = 0;
    try {
      for (let i = 0; i < n; i++) {
        const head = bufs[off + i];
        const len = pool.packetLength(head);
        const incl = len < snaplen ? len : snaplen;
        let sec: number, nsec: number;
        if (flags[head] & BufferFlag.TIMESTAMP_VALID) {
          sec = pool.tsSec[head];
          nsec = pool.tsNsec[head];
        } else {
          if (nowSec < 0) {
            // Wall clock (CLOCK_REALTIME, millisecond resolution), read once per burst.
            const ms = Date.now();
            nowSec = Math.floor(ms / 1000);
            nowNsec = (ms - nowSec * 1000) * 1e6;
          }
          sec = nowSec;
          nsec = nowNsec;
        }
        let at = w.beginRecord(sec, nsec, incl, len);
        const dst = w.buf;
        let left = incl;
        let bi = head;
        while (left > 0) {
          const o = offset[bi];
          const l = length[bi];
          const take = l < left ? l : left;
          dst.set(u8.subarray(o, o + take), at);
          at += take;
          left -= take;
          if (!(flags[bi] & BufferFlag.NEXT_PRESENT)) break;
          bi = next[bi];
        }
        bytes += len;
      }
      w.flush();
    } catch (e) {
      // The file is now in an unknown state: stop writing to it. The packets were taken.
      this.txFailure = `pcap interface ${this.name}: writing ${this.txFile} failed: ${(e as Error).message}`;
      this.stats.txErrors += n;
      pool.free(bufs, off, n);
      try {
        w.close();
      } catch {
        // already failing; the error is recorded in txFailure
      }
      this.writer = null;
      return n;
    }
    pool.free(bufs, off, n);
    this.stats.txPackets += n;
    this.stats.txBytes += bytes;
    return n;
  }

  linkUp(): boolean {
    return this.state === 'open';
  }

  rxWaitFd(_queue: number): number {
    return -1;
  }

  /**
   * When rx packets are next available: the scheduled time of the next packet with `rate`, now
   * while a free-running replay has packets left, -1 once the file is exhausted.
   */
  rxNextDueNs(_queue: number): number {
    if (this.exhausted || this.state !== 'open') return -1;
    if (this.periodNs > 0 && this.startNs >= 0) return this.startNs + this.released * this.periodNs;
    return monoNs();
  }

  /** Stored for the engine's sake; pacing is reported through rxNextDueNs, not callbacks. */
  setWakeup(wake: () => void): void {
    this.wake = wake;
  }

  /** True once the rx file has been replayed `loop` times (always true without an rx file). */
  done(): boolean {
    return this.exhausted;
  }

  /** Why tx stopped, when a write to txFile failed; null otherwise. */
  txError(): string | null {
    return this.txFailure;
  }

  /** The rx file's index (header, record count), or null without an rx file. */
  rxCapture(): PcapReader | null {
    return this.reader;
  }

  counters(): DriverCounters {
    return { ...this.stats };
  }

  close(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.wake = null;
    const w = this.writer;
    this.writer = null;
    this.pool = null;
    if (w !== null) w.close();
  }
}

function monoNs(): number {
  return nowNs();
}
