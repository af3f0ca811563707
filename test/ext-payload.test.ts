/**
 * Payloads sent from an MR in place (issue 31: one copy per byte fewer on the sender): a segment's
 * payload attached to the pool as windows of the MR (BufferFlag.EXT_DATA, graph/ext-memory.ts)
 * and gathered by the memif server straight into the peer's buffer, or copied into the pool
 * (materialize) where nothing can gather it: a driver without external transmit, a capture or
 * fault injector on the interface, the local adjacency. Data is checked byte for byte; the MR's
 * memory stays referenced while a segment from it is queued, also after it is deregistered.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { BufferFlag, INVALID_INDEX } from '../graph/index.ts';
import { packetSum } from '../nodes/ip4/ip4.ts';
import { MemifDriver } from '../drivers/memif.ts';
import { TxOffload } from '../nodes/net/interface-table.ts';
import { memPool } from './helpers.ts';
import {
  closeLeftovers,
  connectManual,
  finish,
  makeEnds,
  type Pair,
  type Stack,
  pattern,
  settle,
  trackedStacks,
  waitCompletions,
  waitFor,
} from './rdma-helpers.ts';
import type { Mr } from '../nodes/rdma/verbs.ts';
import type { Qp } from '../nodes/rdma/qp.ts';

test.after.each(closeLeftovers);

// ------------------------------------------------------------------ the pool

/** A packet of a 20-byte head, a window of `mem` and a 100-byte pool tail; returns its head. */
function extPacket(pool: ReturnType<typeof memPool>, id: number, off: number, len: number): number {
  const head = pool.allocChain(3);
  const e = pool.next[head],
    t = pool.next[e];
  pool.u8.set(pattern(20, 1), pool.offset[head]);
  pool.length[head] = 20;
  pool.flags[head] |= BufferFlag.EXT_CHAIN;
  pool.attachExt(e, id, off, len);
  pool.u8.set(pattern(100, 2), pool.offset[t]);
  pool.length[t] = 100;
  return head;
}

test('pool: a window reads and sums as the bytes it names, materializes into pool buffers, and its id goes with its last buffer after retire', () => {
  const pool = memPool(64, 2048);
  const mem = pattern(9000, 3);
  const id = pool.ext.add(mem);
  const bi = extPacket(pool, id, 101, 5001); // odd offset and length: the sum's byte order
  const want = new Uint8Array([...pattern(20, 1), ...mem.subarray(101, 5102), ...pattern(100, 2)]);
  assert.is(pool.packetLength(bi), want.length);
  assert.equal(pool.packetBytes(bi), want);
  const plain = pool.writePacket(want, 0, want.length);
  assert.is(packetSum(pool, bi), packetSum(pool, plain), 'the checksum reads the MR');
  pool.freeOne(plain);
  assert.is(pool.ext.attached(id), 1);
  pool.ext.retire(id);
  assert.is(pool.ext.inUse(), 1, 'retired, but a buffer still reads it');
  assert.ok(pool.ext.mem[id] === mem);
  assert.ok(pool.materialize(bi));
  assert.is(pool.flags[bi] & BufferFlag.EXT_CHAIN, 0);
  for (let b = bi; ; b = pool.next[b]) {
    assert.is(pool.flags[b] & BufferFlag.EXT_DATA, 0, `buffer ${b} is the pool's now`);
    if (!(pool.flags[b] & BufferFlag.NEXT_PRESENT)) break;
  }
  assert.is(pool.segments(bi), 1 + 3 + 1, '5001 bytes in 2048-byte buffers');
  assert.equal(pool.packetBytes(bi), want);
  assert.is(pool.ext.inUse(), 0, 'the last window went: so did the id');
  assert.is(pool.ext.mem[id], null);
  pool.freeOne(bi);
  assert.is(pool.available(), 64);
});

test('pool: materialize with the pool short leaves the packet whole, and freeing it lets the memory go', () => {
  const pool = memPool(6, 2048);
  const id = pool.ext.add(pattern(9000, 4));
  const bi = extPacket(pool, id, 0, 8000); // needs 4 buffers, 3 are left
  assert.not.ok(pool.materialize(bi));
  assert.is(pool.packetLength(bi), 20 + 8000 + 100);
  assert.is(pool.ext.attached(id), 1);
  const drop = new Uint32Array(4);
  const vec = Uint32Array.of(bi);
  assert.is(pool.materializeVector(vec, 1, drop), 0);
  assert.is(drop[0], bi);
  pool.ext.retire(id);
  pool.freeOne(bi);
  assert.is(pool.ext.inUse(), 0);
  assert.is(pool.available(), 6);
  assert.throws(() => pool.ext.retire(id), /not in use/);
});

// ------------------------------------------------------------------ over memif

interface Run {
  p: Pair;
  src: Mr;
  dst: Mr;
}

/**
 * B (the memif server) -> A (the zero-copy client), or A -> B with `writer` 'a': a connected QP
 * pair, a source MR on the writer and a target MR on the other, of `n` bytes.
 */
async function memifPair(n: number, opts: Parameters<typeof trackedStacks>[0] = {}, writer: 'a' | 'b' = 'b') {
  const p = trackedStacks({ link: 'memif', ...opts });
  await p.ready;
  const A = makeEnds(p.a),
    B = makeEnds(p.b);
  connectManual(p.a, A.qp, p.b, B.qp);
  const [from, to] = writer === 'b' ? [p.b, p.a] : [p.a, p.b];
  const src = from.rdma.regMr((writer === 'b' ? B : A).pd, n, ['local-write', 'remote-read']);
  const dst = to.rdma.regMr((writer === 'b' ? A : B).pd, n, ['local-write', 'remote-write']);
  return { p, A, B, src, dst };
}

/** The first byte where `got` differs from `want` (-1: none), so that a failure says where, fast. */
function firstDiff(got: Uint8Array, want: Uint8Array): number {
  if (Buffer.compare(got, want) === 0) return -1;
  for (let i = 0; i < Math.min(got.length, want.length); i++) if (got[i] !== want[i]) return i;
  return Math.min(got.length, want.length);
}

function sameBytes(got: Uint8Array, want: Uint8Array, what: string): void {
  assert.is(firstDiff(got, want), -1, `${what}: the first byte that differs`);
}

/** A WRITE of `n` bytes from `src` to `dst` at offset 0, posted on `qp` of `s`. */
function postWrite(s: Stack, qp: Qp, wrId: number, src: Mr, dst: Mr, n: number): void {
  s.rdma.postSend(qp, {
    wrId,
    opcode: 'write',
    sg: [{ mr: src, offset: 0, length: n }],
    remote: { stag: dst.stag, offset: 0 },
  });
}

function checkIn(r: Run, what: string): void {
  sameBytes(r.dst.memory, r.src.memory, what);
}

test('memif server: WRITEs sent from the MR in place arrive byte for byte (gather lists across segments, UDP checksums on)', async () => {
  const n = 1 << 20;
  const { p, B, src, dst } = await memifPair(n);
  src.memory.set(pattern(n, 5));
  // A stack built on the driver alone (no data plane's link watch) keeps the choice it took when
  // the interface was added, before the link was up: UDP checksums computed.
  const drv = p.b.ifs.get('mb').driver as MemifDriver;
  assert.is(drv.udpChecksum, null, 'the default: follow the peer (memif.udp-checksum null)');
  const it = p.b.rdma.net.interfaces;
  assert.is(it.txOffload[p.b.ifs.get('mb').index] & TxOffload.UDP_NONE, 0, 'checksums computed on this stack');
  // Three SGEs of odd lengths: segments spanning two of them take two windows.
  const cuts = [0, 333_333, 333_333 + 4097, n];
  p.b.rdma.postSend(B.qp, {
    wrId: 1,
    opcode: 'write',
    sg: cuts.slice(0, -1).map((c, i) => ({ mr: src, offset: c, length: cuts[i + 1] - c })),
    remote: { stag: dst.stag, offset: 0 },
  });
  const [c] = await waitCompletions(B.scq, 1);
  assert.is(c.status, 'success');
  await waitFor('the bytes', () => dst.memory[n - 1] === src.memory[n - 1]);
  checkIn({ p, src, dst }, 'the WRITE');
  assert.ok(src.extId !== 0, 'the MR was sent from in place');
  assert.ok(p.b.graph.pool.ext.wanted && drv.txExternal());
  assert.is(p.b.graph.errorCount('mb-tx', 'no_buffers'), 0);
  assert.is(drv.stats().txErrors, 0);
  await finish(p);
});

test('memif server: Read responses and Sends from the MR in place, and jumbo segments chained over 2 KiB buffers', async () => {
  const n = 300_000;
  const { p, A, B, src, dst } = await memifPair(n, { mtu: 9000 });
  src.memory.set(pattern(n, 6));
  // A reads B's MR: B answers with Read Responses sent from it.
  p.a.rdma.postSend(A.qp, {
    wrId: 2,
    opcode: 'read',
    sg: [{ mr: dst, offset: 0, length: n }],
    remote: { stag: src.stag, offset: 0 },
  });
  const [c] = await waitCompletions(A.scq, 1);
  assert.is(c.status, 'success');
  checkIn({ p, src, dst }, 'the READ');
  assert.ok(src.extId !== 0, 'the responses were sent from the MR in place');
  // B sends to A's posted receive.
  const recv = p.a.rdma.regMr(A.pd, n, ['local-write']);
  p.a.rdma.postRecv(A.qp, { wrId: 3, sg: [{ mr: recv, offset: 0, length: n }] });
  p.b.rdma.postSend(B.qp, { wrId: 4, opcode: 'send', sg: [{ mr: src, offset: 0, length: n }] });
  const [r] = await waitCompletions(A.rcq, 1);
  assert.is(r.status, 'success');
  assert.is(r.byteLen, n);
  sameBytes(recv.memory, src.memory, 'the SEND');
  const drv = p.b.ifs.get('mb').driver as MemifDriver;
  assert.ok(drv.stats().txChained > 0, '8962-byte segments over 2048-byte client buffers: chained descriptors');
  assert.is(drv.stats().txErrors, 0);
  await finish(p);
});

test('memif server: an MR deregistered while segments sent from it wait in the transmit backlog: they go with its bytes, and its memory is let go after the last', async () => {
  const n = 4 << 20;
  const { p, B, src, dst } = await memifPair(n, { rdma: { trp: { window: 2048 } } });
  src.memory.set(pattern(n, 7));
  const ext = p.b.graph.pool.ext;
  const itf = p.b.ifs.get('mb');
  // A stops taking frames: its ring fills (1024 slots) and B's backlog holds the rest of the window.
  p.a.graph.stop();
  postWrite(p.b, B.qp, 5, src, dst, n);
  await waitFor('a backlog', () => itf.txBlCount > 100);
  const id = src.extId;
  assert.ok(id !== 0);
  const queued = ext.attached(id);
  assert.ok(queued >= itf.txBlCount, `${queued} windows of the MR queued`);
  p.b.rdma.deregMr(src);
  assert.is(src.extId, 0);
  assert.is(ext.inUse(), 1, 'deregistered, but queued segments still read it');
  assert.ok(ext.mem[id] === src.memory);
  p.a.graph.start();
  const [c] = await waitCompletions(B.scq, 1, 20_000);
  assert.is(c.status, 'success');
  checkIn({ p, src, dst }, 'the WRITE, its MR deregistered under it');
  await waitFor('the last window freed', () => ext.inUse() === 0);
  assert.is(ext.mem[id], null);
  await finish(p);
});

/** A (the zero-copy client) -> B (the memif server) at MTU 9000, its gathering on or off. */
async function clientPair(n: number, gather: boolean) {
  // Read by both ends when their interfaces open (the native one at its construction).
  if (!gather) process.env.RDMA_GRAPH_MEMIF_TX_GATHER = '0';
  try {
    return await memifPair(n, { mtu: 9000 }, 'a');
  } finally {
    delete process.env.RDMA_GRAPH_MEMIF_TX_GATHER;
  }
}

test('memif zero-copy client: WRITEs, Sends and Read responses from the MR in place are copied once, into its own transmit slots', async () => {
  const n = 1 << 20;
  const { p, A, B, src, dst } = await clientPair(n, true);
  src.memory.set(pattern(n, 12));
  const drv = p.a.ifs.get('ma').driver as MemifDriver;
  assert.is((drv.info() as { zeroCopy: boolean }).zeroCopy, true, 'still a zero-copy client');
  assert.ok(drv.txExternal(), 'it gathers payloads sent from an MR');
  const pool = p.a.graph.pool;
  postWrite(p.a, A.qp, 1, src, dst, n);
  assert.is((await waitCompletions(A.scq, 1))[0].status, 'success');
  sameBytes(dst.memory, src.memory, 'the WRITE');
  assert.ok(src.extId !== 0, 'sent from the MR in place');
  // A Send into a posted receive, and B reading A's MR (A answers with Read Responses).
  const recv = p.b.rdma.regMr(B.pd, n, ['local-write']);
  p.b.rdma.postRecv(B.qp, { wrId: 2, sg: [{ mr: recv, offset: 0, length: n }] });
  p.a.rdma.postSend(A.qp, { wrId: 3, opcode: 'send', sg: [{ mr: src, offset: 0, length: n }] });
  const [r] = await waitCompletions(B.rcq, 1);
  assert.is(r.status, 'success');
  sameBytes(recv.memory, src.memory, 'the SEND');
  const back = p.b.rdma.regMr(B.pd, n, ['local-write']);
  p.b.rdma.postSend(B.qp, {
    wrId: 4,
    opcode: 'read',
    sg: [{ mr: back, offset: 0, length: n }],
    remote: { stag: src.stag, offset: 0 },
  });
  assert.is((await waitCompletions(B.scq, 1))[0].status, 'success');
  sameBytes(back.memory, src.memory, 'the READ');
  const st = drv.stats();
  assert.is(st.txErrors, 0);
  // 1 MiB three times in segments of up to ~8.9 KiB, each over several 2 KiB slots.
  assert.ok(st.txGathered >= (3 * n) / 9000, `${st.txGathered} frames gathered from the MR`);
  // (A message's last segment may fit in one slot.)
  assert.ok(st.txChained >= st.txGathered - 3, 'segments over several slots');
  assert.is(pool.ext.attached(src.extId), 0, 'no window of the MR left queued');
  await finish(p);
});

test('memif zero-copy client with RDMA_GRAPH_MEMIF_TX_GATHER=0: payloads are copied into its pool, and arrive whole', async () => {
  const n = 1 << 20;
  const { p, A, src, dst } = await clientPair(n, false);
  src.memory.set(pattern(n, 13));
  const drv = p.a.ifs.get('ma').driver as MemifDriver;
  assert.is((drv.info() as { zeroCopy: boolean }).zeroCopy, true);
  assert.not.ok(drv.txExternal(), 'it gathers nothing');
  postWrite(p.a, A.qp, 1, src, dst, n);
  assert.is((await waitCompletions(A.scq, 1))[0].status, 'success');
  sameBytes(dst.memory, src.memory, 'the WRITE');
  assert.is(src.extId, 0, 'never sent from the MR in place');
  assert.is(drv.stats().txErrors, 0);
  assert.is(drv.stats().txGathered, 0);
  await finish(p);
});

test('memif server with a tx capture or fault injector: payloads are copied into the pool for it, and still arrive whole', async () => {
  const n = 1 << 20;
  const { p, B, src, dst } = await memifPair(n, { rdma: { trp: { rtoMinMs: 2 } } });
  src.memory.set(pattern(n, 8));
  p.b.ifs.setFault('mb', 'tx', { seed: 3, loss: 0.02, duplicate: 0.02, reorder: 0.02, corrupt: 0.05 });
  postWrite(p.b, B.qp, 6, src, dst, n);
  const [c] = await waitCompletions(B.scq, 1, 20_000);
  assert.is(c.status, 'success');
  checkIn({ p, src, dst }, 'the WRITE through the fault injector');
  const fc = p.b.ifs.faultCounters('mb').tx;
  assert.ok((fc?.dropped ?? 0) > 0, 'the injector dropped some');
  // Its bit flips hit the payloads' copies (not pool memory at an MR offset): A finds them.
  const bad = p.a.graph.errorCount('udp4-input', 'bad_checksum');
  // (A flip in the Ethernet or IPv4 header, 34 bytes of ~1500, is dropped before UDP looks.)
  const flips = fc?.corrupted ?? 0;
  assert.ok(flips > 10 && bad >= 0.8 * flips, `${bad} bad UDP checksums at A for ${flips} flipped bits`);
  assert.ok(src.extId !== 0, 'attached, then copied at the tx node');
  assert.is(p.b.graph.pool.ext.attached(src.extId), 0);
  await finish(p);
});

test('a driver that cannot gather (pipe) and the local adjacency get payloads sent in place copied into the pool first', async () => {
  const n = 1 << 20;
  const p = trackedStacks();
  await p.ready;
  const pool = p.b.graph.pool;
  pool.ext.wanted = true; // as if a memif server were on this data plane too
  // B -> A over the pipe, which has no external transmit.
  const A = makeEnds(p.a),
    B = makeEnds(p.b);
  connectManual(p.a, A.qp, p.b, B.qp);
  const src = p.b.rdma.regMr(B.pd, n, ['local-write']);
  const dst = p.a.rdma.regMr(A.pd, n, ['local-write', 'remote-write']);
  src.memory.set(pattern(n, 9));
  postWrite(p.b, B.qp, 7, src, dst, n);
  assert.is((await waitCompletions(B.scq, 1))[0].status, 'success');
  checkIn({ p, src, dst }, 'the WRITE over the pipe');
  assert.ok(src.extId !== 0, 'the first burst attached, then copied at the tx node');
  // The tx node noted that the pipe gathers nothing: from now on the sender copies at once.
  const pb = p.b.ifs.get('pb').index;
  assert.is(pool.ext.txTakes[pb], 0);
  const src2 = p.b.rdma.regMr(B.pd, n, ['local-write']);
  src2.memory.set(pattern(n, 11));
  postWrite(p.b, B.qp, 9, src2, dst, n);
  assert.is((await waitCompletions(B.scq, 1))[0].status, 'success');
  checkIn({ p, src: src2, dst }, 'the second WRITE over the pipe');
  assert.is(src2.extId, 0, 'never attached');
  // Two QPs of A talking to each other (one pool with B's): ip4-loopback takes the frames in as
  // received. Their egress is A's pipe (noted as gathering nothing): as if it were a memif
  // server's, whose senders attach.
  pool.ext.txTakes.fill(1);
  const X = makeEnds(p.a),
    Y = makeEnds(p.a);
  connectManual(p.a, X.qp, p.a, Y.qp);
  const from = p.a.rdma.regMr(X.pd, n, ['local-write']);
  const to = p.a.rdma.regMr(Y.pd, n, ['local-write', 'remote-write']);
  from.memory.set(pattern(n, 10));
  const local = p.a.graph.errorCount('ip4-loopback', 'local');
  postWrite(p.a, X.qp, 8, from, to, n);
  assert.is((await waitCompletions(X.scq, 1))[0].status, 'success');
  sameBytes(to.memory, from.memory, 'the WRITE through the local adjacency');
  assert.ok(p.a.graph.errorCount('ip4-loopback', 'local') > local);
  assert.ok(from.extId !== 0);
  assert.is(pool.ext.attached(from.extId) + pool.ext.attached(src.extId), 0);
  await finish(p);
});

test('memif: a window the native table does not list, or that runs past its memory, is a transmit error, not a read', async () => {
  const p = trackedStacks({ link: 'memif' });
  await p.ready;
  for (const [stack, name] of [
    [p.b, 'mb'],
    [p.a, 'ma'],
  ] as const) {
    const pool = stack.graph.pool;
    const drv = stack.ifs.get(name).driver as MemifDriver;
    const id = pool.ext.add(new Uint8Array(100));
    const before = drv.stats().txErrors;
    const bufs = new Uint32Array(3);
    // id 4000: not listed; id `id` at 50 + 100: past its end; then a good one.
    const windows: [number, number, number][] = [
      [4000, 0, 10],
      [id, 50, 100],
      [id, 0, 100],
    ];
    windows.forEach(([x, off, len], k) => {
      const head = pool.allocChain(2);
      assert.ok(head !== INVALID_INDEX);
      pool.u8.fill(0, pool.offset[head], pool.offset[head] + 60);
      pool.length[head] = 60;
      pool.flags[head] |= BufferFlag.EXT_CHAIN;
      if (x === id) pool.attachExt(pool.next[head], id, off, len);
      else {
        // By hand: no such id anywhere (the pool's count of it is a no-op).
        const e = pool.next[head];
        pool.flags[e] |= BufferFlag.EXT_DATA;
        pool.extId[e] = x;
        pool.offset[e] = off;
        pool.length[e] = len;
      }
      bufs[k] = head;
    });
    const taken = drv.txBurst(0, bufs, 0, 3);
    assert.is(taken, 3, 'taken (and freed) whatever they were');
    // The zero-copy client gathers windows too (into its own transmit slots).
    assert.is(drv.stats().txErrors - before, 2, `${name}: 2 transmit errors`);
    pool.ext.retire(id);
    await settle(20);
    assert.is(pool.ext.inUse(), 0);
  }
  await finish(p);
});

test.run();
