import { nowNs } from '../graph/clock.ts';
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { memPool } from './helpers.ts';
import { PcapDriver } from '../drivers/pcap.ts';
import { PcapReader, PcapWriter } from '../drivers/pcap-file.ts';

// ---- helpers ---------------------------------------------------------------------------------

interface Rec {
  sec: number;
  /** µs or ns, as stored in the file. */
  frac: number;
  data: Uint8Array;
  orig?: number;
}

/** A classic pcap file built by hand (independent of the writer under test). */
function makePcap(
  recs: Rec[],
  o: { le?: boolean; ns?: boolean; snaplen?: number; linktype?: number } = {},
): Uint8Array {
  const le = o.le ?? true;
  const size = 24 + recs.reduce((a, r) => a + 16 + r.data.length, 0);
  const out = new Uint8Array(size);
  const v = new DataView(out.buffer);
  v.setUint32(0, o.ns ? 0xa1b23c4d : 0xa1b2c3d4, le);
  v.setUint16(4, 2, le);
  v.setUint16(6, 4, le);
  v.setInt32(8, 0, le);
  v.setUint32(12, 0, le);
  v.setUint32(16, o.snaplen ?? 65535, le);
  v.setUint32(20, o.linktype ?? 1, le);
  let p = 24;
  for (const r of recs) {
    v.setUint32(p, r.sec, le);
    v.setUint32(p + 4, r.frac, le);
    v.setUint32(p + 8, r.data.length, le);
    v.setUint32(p + 12, r.orig ?? r.data.length, le);
    out.set(r.data, p + 16);
    p += 16 + r.data.length;
  }
  return out;
}

/** Deterministic pseudo-random bytes, different per seed. */
function bytes(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

const SIZES = [60, 1514, 5000, 64, 2048, 2049, 0, 9000, 128];

function sampleRecs(ns: boolean): Rec[] {
  return SIZES.map((n, i) => ({
    sec: 1_700_000_000 + i,
    frac: ns ? 123_456_789 + i * 1000 + i : 123_456 + i,
    data: bytes(n, i + 1),
  }));
}

let dir = '';
test.before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rdma-graph-pcap-'));
});
test.after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

function file(name: string, data?: Uint8Array): string {
  const p = path.join(dir, name);
  if (data) fs.writeFileSync(p, data);
  return p;
}

/** Receive everything the driver has (as fast as it gives), returning the head indices. */
function drain(drv: PcapDriver, limit = 100000): number[] {
  const out = new Uint32Array(256);
  const got: number[] = [];
  for (let guard = 0; !drv.done() && guard < limit; guard++) {
    const n = drv.rxBurst(0, out, 256);
    for (let i = 0; i < n; i++) got.push(out[i]);
  }
  assert.ok(drv.done(), 'replay finished');
  return got;
}

// ---- reading through the driver --------------------------------------------------------------

test('rxBurst delivers lengths, bytes, timestamps; big packets become chains', () => {
  const recs = sampleRecs(false);
  const p = file('us.pcap', makePcap(recs));
  const pool = memPool();
  const drv = new PcapDriver('pcap0', { rxFile: p });
  drv.open(pool);
  assert.ok(drv.linkUp());
  assert.is(drv.rxWaitFd(0), -1);
  const out = new Uint32Array(256);
  const n = drv.rxBurst(0, out, 256);
  assert.is(n, recs.length);
  assert.ok(drv.done());
  assert.is(drv.rxBurst(0, out, 256), 0, 'nothing after the end');
  for (let i = 0; i < n; i++) {
    const bi = out[i];
    const r = recs[i];
    assert.is(pool.packetLength(bi), r.data.length, `packet ${i} length`);
    assert.equal(pool.packetBytes(bi), r.data, `packet ${i} bytes`);
    assert.ok(pool.flags[bi] & BufferFlag.TIMESTAMP_VALID, `packet ${i} timestamp valid`);
    assert.is(pool.tsSec[bi], r.sec);
    assert.is(pool.tsNsec[bi], r.frac * 1000, 'µs scaled to ns');
    assert.is(pool.segments(bi), Math.max(1, Math.ceil(r.data.length / pool.dataSize)), `packet ${i} segments`);
  }
  // The 5000-byte packet with 2048-byte buffers: 2048 + 2048 + 904.
  const big = out[2];
  assert.is(pool.dataSize, 2048);
  assert.is(pool.segments(big), 3);
  const s1 = pool.next[big],
    s2 = pool.next[s1];
  assert.equal([pool.length[big], pool.length[s1], pool.length[s2]], [2048, 2048, 904]);
  assert.ok(pool.flags[big] & BufferFlag.NEXT_PRESENT);
  assert.ok(pool.flags[s1] & BufferFlag.NEXT_PRESENT);
  assert.not.ok(pool.flags[s2] & BufferFlag.NEXT_PRESENT);
  const c = drv.counters();
  assert.is(c.rxPackets, recs.length);
  assert.is(
    c.rxBytes,
    SIZES.reduce((a, b) => a + b, 0),
  );
  pool.free(out, 0, n);
  drv.close();
  assert.not.ok(drv.linkUp());
  assert.is(pool.available(), pool.count, 'no leak');
});

test('nanosecond and big-endian files are read correctly', () => {
  const recs = sampleRecs(true);
  for (const le of [true, false]) {
    const p = file(`ns-${le ? 'le' : 'be'}.pcap`, makePcap(recs, { ns: true, le }));
    const r = PcapReader.open(p);
    assert.is(r.header.littleEndian, le);
    assert.is(r.header.nanosecond, true);
    assert.is(r.header.snaplen, 65535);
    assert.is(r.header.linktype, 1);
    assert.is(r.count, recs.length);
    const pool = memPool();
    const drv = new PcapDriver('pcap0', { rxFile: p });
    drv.open(pool);
    const got = drain(drv);
    assert.is(got.length, recs.length);
    got.forEach((bi, i) => {
      assert.equal(pool.packetBytes(bi), recs[i].data);
      assert.is(pool.tsSec[bi], recs[i].sec);
      assert.is(pool.tsNsec[bi], recs[i].frac);
    });
    pool.free(Uint32Array.from(got), 0, got.length);
    drv.close();
    assert.is(pool.available(), pool.count);
  }
  // Big-endian µs as well.
  const usRecs = sampleRecs(false);
  const r = PcapReader.parse(makePcap(usRecs, { le: false }));
  assert.is(r.header.littleEndian, false);
  assert.is(r.header.nanosecond, false);
  for (let i = 0; i < usRecs.length; i++) {
    assert.is(r.tsSec[i], usRecs[i].sec);
    assert.is(r.tsNsec[i], usRecs[i].frac * 1000);
    assert.equal(r.packet(i), usRecs[i].data);
  }
});

// ---- round trips -----------------------------------------------------------------------------

function roundTrip(input: Uint8Array, name: string, poolCount = 1024): Uint8Array {
  const inPath = file(`${name}.in.pcap`, input);
  const outPath = file(`${name}.out.pcap`);
  const hdr = PcapReader.parse(input).header;
  const pool = memPool(poolCount);
  const rx = new PcapDriver('pcap-in', { rxFile: inPath });
  const tx = new PcapDriver('pcap-out', { txFile: outPath, txSnaplen: hdr.snaplen, txNanosecond: hdr.nanosecond });
  rx.open(pool);
  tx.open(pool);
  const out = new Uint32Array(4); // small bursts: many flushes
  while (!rx.done()) {
    const n = rx.rxBurst(0, out, out.length);
    assert.is(tx.txBurst(0, out, 0, n), n);
  }
  const rc = rx.counters(),
    tc = tx.counters();
  assert.is(tc.txPackets, rc.rxPackets);
  assert.is(tc.txBytes, rc.rxBytes);
  rx.close();
  tx.close();
  tx.close(); // idempotent
  assert.is(pool.available(), pool.count, 'no leak');
  return fs.readFileSync(outPath);
}

test('round trip: little-endian µs file is re-written byte-identical', () => {
  const input = makePcap(sampleRecs(false));
  const output = roundTrip(input, 'rt-us');
  assert.is(output.length, input.length);
  assert.ok(Buffer.compare(output, input) === 0, 'byte-identical');
});

test('round trip: little-endian ns file is re-written byte-identical', () => {
  const input = makePcap(sampleRecs(true), { ns: true, snaplen: 262144 });
  const output = roundTrip(input, 'rt-ns');
  assert.ok(Buffer.compare(output, input) === 0, 'byte-identical');
});

test('round trip through a small pool (backpressure) loses nothing', () => {
  // 16 buffers: a 9000-byte packet takes 5, so bursts stop early and resume.
  const input = makePcap(sampleRecs(false));
  const output = roundTrip(input, 'rt-small', 16);
  assert.ok(Buffer.compare(output, input) === 0, 'byte-identical');
});

test('round trip: big-endian input re-written little-endian has the same records', () => {
  const recs = sampleRecs(true);
  const input = makePcap(recs, { ns: true, le: false });
  const output = roundTrip(input, 'rt-be');
  const a = PcapReader.parse(input),
    b = PcapReader.parse(output);
  assert.is(b.header.littleEndian, true);
  assert.is(b.header.nanosecond, true);
  assert.is(b.count, a.count);
  for (let i = 0; i < a.count; i++) {
    assert.is(b.tsSec[i], a.tsSec[i]);
    assert.is(b.tsNsec[i], a.tsNsec[i]);
    assert.is(b.origLen[i], a.origLen[i]);
    assert.equal(b.packet(i), a.packet(i));
  }
  // And it is exactly what a little-endian file of the same records is.
  assert.ok(Buffer.compare(output, makePcap(recs, { ns: true, le: true })) === 0);
});

test('writer → reader → writer with the reader header is byte-identical', () => {
  const p1 = file('w1.pcap'),
    p2 = file('w2.pcap');
  const w1 = new PcapWriter(p1, { nanosecond: true, snaplen: 1000, thiszone: -3600, sigfigs: 0 });
  w1.writeRecord(10, 999_999_999, bytes(100, 7));
  w1.writeRecord(11, 1, bytes(1500, 8)); // truncated to snaplen 1000, orig_len 1500
  w1.writeRecord(12, 2, new Uint8Array(0));
  w1.close();
  const r1 = PcapReader.open(p1);
  assert.is(r1.count, 3);
  assert.is(r1.inclLen[1], 1000);
  assert.is(r1.origLen[1], 1500);
  assert.is(r1.header.thiszone, -3600);
  const w2 = new PcapWriter(p2, r1.header);
  for (let i = 0; i < r1.count; i++) w2.writeRecord(r1.tsSec[i], r1.tsNsec[i], r1.packet(i), r1.origLen[i]);
  w2.close();
  assert.ok(Buffer.compare(fs.readFileSync(p1), fs.readFileSync(p2)) === 0);
  // µs writer truncates ns to µs; a nanosecond count >= 1e9 carries into seconds.
  const p3 = file('w3.pcap');
  const w3 = new PcapWriter(p3);
  w3.writeRecord(5, 1_500_000_999, bytes(10, 1));
  w3.close();
  const r3 = PcapReader.open(p3);
  assert.is(r3.header.nanosecond, false);
  assert.is(r3.header.snaplen, 262144);
  assert.is(r3.tsSec[0], 6);
  assert.is(r3.tsNsec[0], 500_000_000);
});

// ---- tx specifics ----------------------------------------------------------------------------

test('tx: snaplen truncates, no timestamp uses the wall clock, counters', () => {
  const outPath = file('tx.pcap');
  const pool = memPool();
  const tx = new PcapDriver('pcap-out', { txFile: outPath, txSnaplen: 100 });
  tx.open(pool);
  const payload = bytes(5000, 3);
  const bi = pool.writePacket(payload, 0, payload.length);
  assert.is(pool.segments(bi), 3);
  const before = Date.now();
  assert.is(tx.txBurst(0, Uint32Array.of(bi), 0, 1), 1);
  const after = Date.now();
  assert.not.ok(pool.isAllocated(bi), 'tx frees the buffers');
  tx.close();
  const r = PcapReader.open(outPath);
  assert.is(r.count, 1);
  assert.is(r.inclLen[0], 100);
  assert.is(r.origLen[0], 5000);
  assert.equal(r.packet(0), payload.subarray(0, 100));
  const ms = r.tsSec[0] * 1000 + r.tsNsec[0] / 1e6;
  assert.ok(ms >= before - 1 && ms <= after + 1, `wall-clock timestamp ${ms} within [${before}, ${after}]`);
  const c = tx.counters();
  assert.is(c.txPackets, 1);
  assert.is(c.txBytes, 5000);
  assert.is(pool.available(), pool.count);
});

test('tx without a txFile (or after close) is refused and counted', () => {
  const pool = memPool();
  const p = file('only-rx.pcap', makePcap(sampleRecs(false)));
  const drv = new PcapDriver('pcap0', { rxFile: p });
  drv.open(pool);
  const bufs = new Uint32Array(3);
  assert.is(pool.alloc(bufs, 0, 3), 3);
  assert.is(drv.txBurst(0, bufs, 0, 3), 0);
  assert.is(drv.counters().txDrops, 3);
  assert.ok(pool.isAllocated(bufs[0]), 'refused buffers stay with the caller');
  pool.free(bufs, 0, 3);
  drv.close();
  const tx = new PcapDriver('pcap1', { txFile: file('closed.pcap') });
  tx.open(pool);
  tx.close();
  assert.is(pool.alloc(bufs, 0, 2), 2);
  assert.is(tx.txBurst(0, bufs, 0, 2), 0);
  assert.is(tx.counters().txDrops, 2);
  pool.free(bufs, 0, 2);
  assert.is(pool.available(), pool.count);
});

// ---- loop, rate, backpressure ----------------------------------------------------------------

test('loop=3 replays the file three times, in order', () => {
  const recs = sampleRecs(false);
  const p = file('loop.pcap', makePcap(recs));
  const pool = memPool();
  const drv = new PcapDriver('pcap0', { rxFile: p, loop: 3 });
  drv.open(pool);
  const out = new Uint32Array(256);
  const got: Uint8Array[] = [];
  // Bursts of 4 so the wrap falls inside a burst.
  while (!drv.done()) {
    const n = drv.rxBurst(0, out, 4);
    assert.ok(n > 0);
    for (let i = 0; i < n; i++) got.push(pool.packetBytes(out[i]));
    pool.free(out, 0, n);
  }
  assert.is(got.length, 3 * recs.length);
  got.forEach((b, i) => assert.equal(b, recs[i % recs.length].data, `packet ${i}`));
  assert.is(drv.counters().rxPackets, 3 * recs.length);
  assert.is(drv.rxNextDueNs(0), -1);
  drv.close();
  assert.is(pool.available(), pool.count);
});

test('loop=3 with a burst spanning several passes stops after the third', () => {
  const recs = sampleRecs(false).slice(0, 2);
  const p = file('loop-short.pcap', makePcap(recs));
  const pool = memPool();
  const drv = new PcapDriver('pcap0', { rxFile: p, loop: 3 });
  drv.open(pool);
  const out = new Uint32Array(256);
  const n = drv.rxBurst(0, out, 256);
  assert.is(n, 6);
  for (let i = 0; i < n; i++) assert.equal(pool.packetBytes(out[i]), recs[i % 2].data);
  assert.ok(drv.done());
  assert.is(drv.rxBurst(0, out, 256), 0);
  pool.free(out, 0, n);
  drv.close();
  assert.is(pool.available(), pool.count);
});

test('loop=0 replays until stopped', () => {
  const p = file('forever.pcap', makePcap(sampleRecs(false).slice(0, 2)));
  const pool = memPool();
  const drv = new PcapDriver('pcap0', { rxFile: p, loop: 0 });
  drv.open(pool);
  const out = new Uint32Array(256);
  let total = 0;
  for (let i = 0; i < 10; i++) {
    const n = drv.rxBurst(0, out, 256);
    assert.is(n, 256);
    pool.free(out, 0, n);
    total += n;
  }
  assert.is(total, 2560);
  assert.not.ok(drv.done());
  assert.ok(drv.rxNextDueNs(0) >= 0);
  drv.close();
  assert.is(pool.available(), pool.count);
});

test('an empty capture is done at once', () => {
  const p = file('empty.pcap', makePcap([]));
  const pool = memPool();
  const drv = new PcapDriver('pcap0', { rxFile: p, loop: 0 });
  drv.open(pool);
  assert.ok(drv.done());
  assert.is(drv.rxBurst(0, new Uint32Array(8), 8), 0);
  assert.is(drv.rxNextDueNs(0), -1);
  drv.close();
});

test('pool runs dry: fewer packets now, none lost, order kept', () => {
  const recs = [5000, 5000, 60].map((n, i) => ({ sec: i, frac: 0, data: bytes(n, 40 + i) }));
  const p = file('dry.pcap', makePcap(recs));
  const pool = memPool(4);
  const drv = new PcapDriver('pcap0', { rxFile: p });
  drv.open(pool);
  const out = new Uint32Array(8);
  // 4 buffers: the first 5000-byte packet (3 segments) fits, the second does not.
  assert.is(drv.rxBurst(0, out, 8), 1);
  assert.equal(pool.packetBytes(out[0]), recs[0].data);
  assert.is(pool.available(), 1, 'the spare buffer went back');
  assert.is(drv.rxBurst(0, out, 8), 0, 'nothing fits: wait, do not drop');
  assert.not.ok(drv.done());
  pool.freeOne(out[0]);
  // 4 buffers again: the second 5000-byte packet (3) and the 60-byte one (1) both fit.
  assert.is(drv.rxBurst(0, out, 8), 2);
  assert.equal(pool.packetBytes(out[0]), recs[1].data);
  assert.equal(pool.packetBytes(out[1]), recs[2].data);
  assert.is(pool.available(), 0);
  pool.free(out, 0, 2);
  assert.ok(drv.done());
  assert.is(drv.counters().rxPackets, 3);
  assert.is(drv.counters().rxDrops, 0);
  drv.close();
  assert.is(pool.available(), pool.count);
});

test('a packet larger than the whole pool is refused at open', () => {
  const p = file('huge.pcap', makePcap([{ sec: 0, frac: 0, data: bytes(9000, 1) }]));
  const drv = new PcapDriver('pcap0', { rxFile: p });
  assert.throws(() => drv.open(memPool(2)), /9000-byte packet.*2 buffers of 2048/);
});

test('rate: 1000 pps over 20 packets is paced', async () => {
  const N = 20;
  const recs = Array.from({ length: N }, (_, i) => ({ sec: 0, frac: i, data: bytes(64, i) }));
  const p = file('rate.pcap', makePcap(recs));
  const pool = memPool();
  const drv = new PcapDriver('pcap0', { rxFile: p, rate: 1000 });
  drv.open(pool);
  const out = new Uint32Array(256);
  const now = () => nowNs();
  const t0 = now();
  let got = 0;
  const first = drv.rxBurst(0, out, 256);
  const t1 = now();
  assert.is(first, 1, 'only the first packet is due at the start');
  pool.free(out, 0, first);
  got += first;
  const due = drv.rxNextDueNs(0);
  assert.ok(due > t0 + 0.9e6 && due <= t1 + 1e6 + 1, `next due ${due - t0} ns after start, want ~1 ms`);
  while (!drv.done()) {
    const d = drv.rxNextDueNs(0);
    const wait = (d - now()) / 1e6;
    if (wait > 0.5) await new Promise((r) => setTimeout(r, wait));
    const n = drv.rxBurst(0, out, 256);
    const t = now();
    pool.free(out, 0, n);
    got += n;
    // Never ahead of schedule: by time t at most floor((t - t0) / 1 ms) + 1 packets.
    assert.ok(got <= Math.floor((t - t0) / 1e6) + 1, `${got} packets after ${(t - t0) / 1e6} ms`);
  }
  const elapsedMs = (now() - t0) / 1e6;
  assert.is(got, N);
  assert.ok(elapsedMs >= 19, `took ${elapsedMs} ms, want >= 19`);
  assert.is(drv.rxNextDueNs(0), -1);
  drv.close();
  assert.is(pool.available(), pool.count);
});

// ---- errors ----------------------------------------------------------------------------------

test('errors: missing file names the path', () => {
  const p = path.join(dir, 'nope', 'missing.pcap');
  assert.throws(
    () => new PcapDriver('pcap0', { rxFile: p }),
    (e: Error) => e.message.includes(p) && /does not exist/.test(e.message),
  );
});

test('errors: a directory, bad options', () => {
  assert.throws(() => new PcapDriver('pcap0', { rxFile: dir }), /is a directory/);
  assert.throws(() => new PcapDriver('pcap0', {}), /rxFile, txFile or both/);
  const p = file('opt.pcap', makePcap([]));
  assert.throws(() => new PcapDriver('pcap0', { rxFile: p, loop: -1 }), /loop/);
  assert.throws(() => new PcapDriver('pcap0', { rxFile: p, rate: -5 }), /rate/);
  assert.throws(() => new PcapDriver('pcap0', { rxFile: p, mac: 'zz:00:00:00:00:00' }), /mac/);
  const d = new PcapDriver('pcap0', { rxFile: p, mac: '02:00:00:00:00:2a', mtu: 9000 });
  assert.equal(Array.from(d.mac), [2, 0, 0, 0, 0, 0x2a]);
  assert.is(d.mtu, 9000);
  assert.is(d.kind, 'pcap');
});

test('errors: too short, bad magic, pcapng', () => {
  assert.throws(
    () => new PcapDriver('pcap0', { rxFile: file('short.pcap', new Uint8Array(10)) }),
    /too short.*10 bytes/,
  );
  const bad = makePcap([]);
  bad.set([0xde, 0xad, 0xbe, 0xef], 0);
  assert.throws(() => new PcapDriver('pcap0', { rxFile: file('bad.pcap', bad) }), /bad magic 0xdeadbeef/);
  const ng = makePcap([]);
  ng.set([0x0a, 0x0d, 0x0d, 0x0a], 0);
  assert.throws(() => new PcapDriver('pcap0', { rxFile: file('ng.pcap', ng) }), /pcapng.*not supported/);
});

test('errors: truncated record names the record and offset', () => {
  const recs = sampleRecs(false).slice(0, 3); // 60, 1514, 5000 bytes
  const whole = makePcap(recs);
  // Cut inside the third record's data: it starts at 24 + (16+60) + (16+1514) = 1630.
  const cut = whole.subarray(0, 1630 + 16 + 100);
  assert.throws(
    () => PcapReader.parse(cut, 'cut.pcap'),
    /record 3 at byte offset 1630 is truncated: incl_len 5000 but only 100/,
  );
  // Cut inside a record header.
  assert.throws(
    () => PcapReader.parse(whole.subarray(0, 1630 + 7)),
    /record 3 at byte offset 1630 is truncated: 7 bytes left/,
  );
  const p = file('trunc.pcap', cut);
  assert.throws(
    () => new PcapDriver('pcap0', { rxFile: p }),
    (e: Error) => e.message.includes(p) && /record 3/.test(e.message),
  );
});

test('errors: incl_len beyond snaplen or 256 KiB', () => {
  assert.throws(
    () => PcapReader.parse(makePcap(sampleRecs(false), { snaplen: 1000 })),
    /record 2 at byte offset 100 has incl_len 1514, more than the file's snaplen 1000/,
  );
  const big = makePcap([{ sec: 0, frac: 0, data: new Uint8Array(300 * 1024) }], { snaplen: 0x7fffffff });
  assert.throws(() => PcapReader.parse(big), /incl_len 307200, more than the 262144-byte maximum/);
});

test('errors: a non-Ethernet capture is refused by the driver, reported by the reader', () => {
  const raw = makePcap(sampleRecs(false).slice(0, 1), { linktype: 101 });
  assert.is(PcapReader.parse(raw).header.linktype, 101);
  const p = file('raw.pcap', raw);
  assert.throws(() => new PcapDriver('pcap0', { rxFile: p }), /not an Ethernet capture \(linktype 101/);
});

test.run();
