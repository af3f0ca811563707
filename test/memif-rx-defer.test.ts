/**
 * A memif server's receive of DDP segments with their payload left in the client's memory until
 * ddp-input places it (graph/peer-windows.ts, native/core/rx_windows.h): two stacks in one
 * process over a memif pair (A the zero-copy client, B the copying server; no UDP checksums, as
 * between two data planes: only such frames are received so). Each test checks the
 * bytes that land in B's MR against what A wrote, and the counters that say which way they went.
 * Then the driver alone (a pattern of our own): what is left in place, read in place, copied in
 * before the client gets its buffers back or goes away. Then the rdma-ops suite over such a pair.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from './harness.ts';
import * as assert from 'uvu/assert';
import { MemifDriver } from '../drivers/memif.ts';
import type { RxDeferPattern, RxWindowsNative } from '../native/addons.ts';
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import { chainCopier } from '../graph/chain-copy.ts';
import { createPool } from '../graph/memory.ts';
import { peerWindowsOf } from '../graph/peer-windows.ts';
import { memPool, packet, sleep } from './helpers.ts';
import { rdmaOpsSuite } from './rdma-ops-helpers.ts';
import {
  closeLeftovers,
  connectManual,
  finish,
  makeEnds,
  type Pair,
  pattern,
  trackedStacks,
  waitCompletions,
  waitFor,
  IP_B,
} from './rdma-helpers.ts';

const test = suite('memif server receive: DDP payload placed from the client memory');
const sockDir = mkdtempSync(join(tmpdir(), 'rx-defer-sock-'));
let seq = 0;
const drivers: MemifDriver[] = [];
test.after.each(() => {
  for (const d of drivers.splice(0)) d.close();
});
test.after(() => rmSync(sockDir, { recursive: true, force: true }));

/** A copying server (memPool) and a zero-copy client on a new socket, linked up. */
async function driverPair(): Promise<{ s: MemifDriver; c: MemifDriver; ps: BufferPool; pc: BufferPool }> {
  const socket = join(sockDir, `s${seq++}.sock`);
  const ps = memPool(2048),
    pc = createPool({ count: 4096, hugepages: 'never' });
  const s = new MemifDriver('ds', { socket, role: 'server' }),
    c = new MemifDriver('dc', { socket, role: 'client' });
  s.open(ps);
  c.open(pc);
  drivers.push(c, s);
  const end = Date.now() + 3000;
  while (!(s.linkUp() && c.linkUp())) {
    if (Date.now() > end) throw new Error('memif pair: no link');
    s.poll();
    c.poll();
    await sleep(2);
  }
  // Frames of at least 512 bytes whose first byte is 0xaa, 64 bytes copied.
  peerWindowsOf(ps).setPattern({ headBytes: 64, minBytes: 512, rules: Uint8Array.of(0, 0xff, 0xaa) });
  return { s, c, ps, pc };
}

/** Receive `n` frames on the server (polling the client so that it reclaims); their heads. */
async function receive(s: MemifDriver, c: MemifDriver, n: number): Promise<number[]> {
  const out = new Uint32Array(256),
    got: number[] = [];
  const end = Date.now() + 3000;
  while (got.length < n) {
    const k = s.rxBurst(0, out, 256);
    for (let i = 0; i < k; i++) got.push(out[i]);
    c.rxBurst(0, out, 0);
    if (Date.now() > end) throw new Error(`only ${got.length} of ${n} frames arrived`);
    if (k === 0) await sleep(0);
  }
  return got;
}

function frame(len: number, first: number, seed: number): Uint8Array {
  const b = pattern(len, seed);
  b[0] = first;
  return b;
}
test.after.each(closeLeftovers);

const MiB = 1 << 20;

const memifOf = (p: Pair, side: 'a' | 'b') => p[side].ifs.get(p[side].ifName).driver as MemifDriver;
const windowsOf = (p: Pair) => p.pools[1].peerWindows as RxWindowsNative;

/** A writes `len` pattern bytes into B's MR in `chunks` Writes; B's MR after them, and the source. */
async function writeToServer(
  p: Pair,
  len: number,
  chunks = 4,
  seed = 7,
): Promise<{ got: Uint8Array; want: Uint8Array }> {
  await p.ready;
  const A = makeEnds(p.a),
    B = makeEnds(p.b);
  connectManual(p.a, A.qp, p.b, B.qp);
  const src = p.a.rdma.regMr(A.pd, pattern(len, seed), []);
  const dst = p.b.rdma.regMr(B.pd, len, ['local-write', 'remote-write']);
  const each = len / chunks;
  for (let k = 0; k < chunks; k++)
    p.a.rdma.postSend(A.qp, {
      wrId: k,
      opcode: 'write',
      sg: [{ mr: src, offset: k * each, length: each }],
      remote: { stag: dst.stag, offset: k * each },
    });
  const done = await waitCompletions(A.scq, chunks, 20000);
  for (const c of done) assert.is(c.status, 'success');
  return { got: dst.memory, want: src.memory };
}

function same(got: Uint8Array, want: Uint8Array, what: string): void {
  if (Buffer.compare(got, want) === 0) return;
  let i = 0;
  while (got[i] === want[i]) i++;
  assert.unreachable(
    `${what}: byte ${i} of ${want.length} is 0x${got[i].toString(16)}, expected 0x${want[i].toString(16)}`,
  );
}

for (const mtu of [1500, 9000]) {
  test(`MTU ${mtu}: 8 MiB written towards the server land intact, the segments received in place`, async () => {
    const p = trackedStacks({ link: 'memif', mtu, udpChecksum: false });
    const { got, want } = await writeToServer(p, 8 * MiB);
    same(got, want, 'B MR');
    const b = memifOf(p, 'b').stats(),
      a = memifOf(p, 'a').stats();
    const segs = Math.ceil((8 * MiB) / (mtu - 20 - 8 - 10 - 14));
    assert.ok(b.rxDeferred >= segs, `server: ${b.rxDeferred} frames received in place, expected >= ${segs}`);
    assert.is(a.rxDeferred, 0, 'the client (zero copy) never does');
    console.log(
      `  MTU ${mtu}: ${b.rxDeferred} of ${b.rxPackets} frames in place, ${windowsOf(p).counters().copiedIn} windows copied in late`,
    );
    await finish(p);
  });
}

test('RDMA_GRAPH_MEMIF_RX_DEFER=0 when the server opens: every frame copied, the same bytes land', async () => {
  process.env.RDMA_GRAPH_MEMIF_RX_DEFER = '0';
  let p: Pair;
  try {
    p = trackedStacks({ link: 'memif', mtu: 9000, udpChecksum: false });
  } finally {
    delete process.env.RDMA_GRAPH_MEMIF_RX_DEFER;
  }
  const { got, want } = await writeToServer(p, 2 * MiB);
  same(got, want, 'B MR');
  assert.is(memifOf(p, 'b').stats().rxDeferred, 0);
  await finish(p);
});

test("a fault injector on the server's receive (reordering, duplicating) works on bytes copied in first", async () => {
  const p = trackedStacks({ link: 'memif', mtu: 9000, udpChecksum: false });
  await p.ready;
  p.b.ifs.setFault(p.b.ifName, 'rx', { seed: 3, reorder: 0.1, duplicate: 0.05, reorderDelayUs: 200 });
  const before = windowsOf(p).counters().copiedIn;
  const { got, want } = await writeToServer(p, 8 * MiB, 8, 11);
  same(got, want, 'B MR');
  assert.ok(memifOf(p, 'b').stats().rxDeferred > 0, 'frames were received in place');
  const f = p.b.ifs.faultCounters(p.b.ifName).rx;
  assert.ok(
    f !== null && f.reordered > 0 && f.duplicated > 0,
    `the injector reordered and duplicated: ${JSON.stringify(f)}`,
  );
  assert.ok(windowsOf(p).counters().copiedIn - before > 0, 'their windows were copied in for it');
  await finish(p);
});

test('a UDP listener other than the transport gets such a frame with its bytes in the pool', async () => {
  const p = trackedStacks({ link: 'memif', mtu: 9000, udpChecksum: false });
  await p.ready;
  const sent = pattern(4000, 21);
  sent[8] = 0; // where a TRP header has its opcode: DATA, so the server receives it in place
  const got: Buffer[] = [];
  p.b.net.udp.listen(6100, (bufs, n, pool) => {
    // Its bytes read as a node reads them: each buffer's offset and length in the pool.
    for (let i = 0; i < n; i++) {
      const parts: Buffer[] = [];
      for (let b = bufs[i]; ; b = pool.next[b]) {
        parts.push(Buffer.from(pool.u8.subarray(pool.offset[b], pool.offset[b] + pool.length[b])));
        if (!(pool.flags[b] & BufferFlag.NEXT_PRESENT)) break;
      }
      got.push(Buffer.concat(parts));
    }
    pool.free(bufs, 0, n);
  });
  const before = memifOf(p, 'b').stats().rxDeferred;
  assert.ok(p.a.net.udp.sendTo(sent, IP_B, 6100, 6101));
  await waitFor('the datagram', () => got.length === 1);
  assert.ok(memifOf(p, 'b').stats().rxDeferred > before, 'the server received it in place');
  same(got[0], sent, 'the listener');
  await finish(p);
});

test("a capture of the server's receive sees each Write segment's payload, not the pool's stale bytes", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rx-defer-'));
  try {
    const p = trackedStacks({ link: 'memif', mtu: 9000, udpChecksum: false });
    await p.ready;
    const file = join(dir, 'b-rx.pcap');
    p.b.ifs.capture(p.b.ifName, { rx: file });
    const { got, want } = await writeToServer(p, 1 * MiB, 2, 5);
    p.b.ifs.stopCapture(p.b.ifName);
    same(got, want, 'B MR');
    // pcap: 24-byte file header, then per frame 16 bytes (incl_len at 8) and the frame.
    const pc = readFileSync(file);
    let at = 24,
      writes = 0;
    while (at + 16 <= pc.length) {
      const n = pc.readUInt32LE(at + 8);
      const f = pc.subarray(at + 16, at + 16 + n);
      at += 16 + n;
      // A tagged Write: TRP DATA, DDP T bit, RDMAP opcode 0; payload from byte 66, at TO.
      if (n <= 66 || f[50] >> 4 !== 0 || !(f[52] & 0x80) || (f[53] & 0x0f) !== 0) continue;
      const to = Number(f.readBigUInt64BE(58));
      same(f.subarray(66), want.subarray(to, to + n - 66), `captured segment at TO ${to}`);
      writes++;
    }
    assert.ok(writes >= (1 * MiB) / 9000, `${writes} Write segments captured and checked`);
    await finish(p);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('driver: a frame matching the pattern is left in place, read there, and copied in before its slots go back', async () => {
  const { s, c, ps, pc } = await driverPair();
  const sent = [frame(4000, 0xaa, 1), frame(300, 0xaa, 2), frame(4000, 0x55, 3)];
  const bufs = Uint32Array.from(sent, (b) => packet(pc, b));
  assert.is(c.txBurst(0, bufs, 0, 3), 3);
  const [h0, h1, h2] = await receive(s, c, 3);
  assert.is(s.stats().rxDeferred, 1, 'only the long frame that matches');
  assert.ok(ps.flags[h0] & BufferFlag.PEER_CHAIN, 'its head is marked');
  assert.is(ps.length[h0], 64, 'the head holds the first headBytes');
  const second = ps.next[h0];
  assert.ok(ps.flags[second] & BufferFlag.PEER_DATA, 'the rest is in the peer memory');
  for (const h of [h1, h2]) assert.is(ps.flags[h] & (BufferFlag.PEER_CHAIN | BufferFlag.PEER_DATA), 0);
  // Placement reads the bytes where they are.
  const placed = new Uint8Array(4000);
  assert.is(chainCopier(ps).toMem(h0, 0, placed, 0, 4000), 4000);
  assert.ok(Buffer.from(placed).equals(Buffer.from(sent[0])), 'ChainCopy read the frame in place');
  // The client's five buffers stay in its ring: the server has not published the tail.
  for (let i = 0; i < 20; i++) c.rxBurst(0, new Uint32Array(1), 0);
  const held = pc.available();
  const before = peerWindowsOf(ps).counters().copiedIn;
  const out = new Uint32Array(8);
  assert.is(s.rxBurst(0, out, 8), 0, 'the next look: nothing new');
  assert.is(ps.flags[second] & BufferFlag.PEER_DATA, 0, 'what still lived was copied in');
  assert.ok(peerWindowsOf(ps).counters().copiedIn - before >= 2, 'two windows (two client buffers) copied in');
  const end = Date.now() + 2000;
  while (pc.available() < held + 5 && Date.now() < end) {
    c.rxBurst(0, out, 0);
    await sleep(1);
  }
  assert.is(pc.available(), held + 5, 'then the client got its five buffers back');
  // The client reuses them: what the server holds does not change.
  const more = Uint32Array.from([frame(4000, 0x11, 9), frame(4000, 0x22, 10)], (b) => packet(pc, b));
  assert.is(c.txBurst(0, more, 0, 2), 2);
  const later = await receive(s, c, 2);
  for (const h of [h0, h1, h2].keys())
    assert.ok(Buffer.from(ps.packetBytes([h0, h1, h2][h])).equals(Buffer.from(sent[h])), `frame ${h} unchanged`);
  ps.free(Uint32Array.from([h0, h1, h2, ...later]), 0, 5);
  drivers.splice(drivers.indexOf(s), 1);
  s.close();
  assert.is(ps.available(), ps.count, 'every server buffer back once it closes');
});

test('driver: the client going away while a frame is held in place: it is copied in before the unmap', async () => {
  const { s, c, ps, pc } = await driverPair();
  const sent = frame(6000, 0xaa, 4);
  assert.is(c.txBurst(0, Uint32Array.of(packet(pc, sent)), 0, 1), 1);
  const [h] = await receive(s, c, 1);
  assert.ok(ps.flags[ps.next[h]] & BufferFlag.PEER_DATA);
  c.close();
  const end = Date.now() + 3000;
  while (s.linkUp()) {
    if (Date.now() > end) throw new Error('the server never saw the client go');
    s.poll();
    await sleep(2);
  }
  for (let b = h; ; b = ps.next[b]) {
    assert.is(ps.flags[b] & BufferFlag.PEER_DATA, 0, `buffer ${b} copied in`);
    if (!(ps.flags[b] & BufferFlag.NEXT_PRESENT)) break;
  }
  assert.ok(Buffer.from(ps.packetBytes(h)).equals(Buffer.from(sent)), 'the frame intact after the unmap');
  ps.freeOne(h);
});

test('RxWindows.setPattern: bad patterns are refused naming what is wrong', () => {
  const w = peerWindowsOf(memPool(16));
  const bad: [unknown, RegExp][] = [
    [{ headBytes: 32, minBytes: 512, rules: Uint8Array.of(0, 1, 1) }, /headBytes/],
    [{ headBytes: 64, minBytes: 64, rules: Uint8Array.of(0, 1, 1) }, /minBytes/],
    [{ headBytes: 64, minBytes: 512, rules: Uint8Array.of(0, 1) }, /triples/],
    [{ headBytes: 64, minBytes: 512, rules: Uint8Array.of(64, 1, 1) }, /rule 0 reads byte 64, beyond headBytes 64/],
    [{ headBytes: 64, minBytes: 512, rules: [0, 1, 1] }, /Uint8Array/],
  ];
  for (const [p, re] of bad) assert.throws(() => w.setPattern(p as RxDeferPattern), re);
});

test.run();

// Every rdma-ops test (each opcode, sizes up to 16 MiB both ways, SGEs, SRQ, the connection
// manager) over memif without checksums, so that the server receives Writes, Sends and Read
// Responses in place; and the size sweeps again at MTU 9000 (segments chained across the
// client's descriptors).
rdmaOpsSuite('memif', undefined, 1500, [], false).run();
rdmaOpsSuite(
  'memif',
  ['a manually connected pair', 'send: sizes', 'write: sizes', 'read: sizes'],
  9000,
  [],
  false,
).run();
