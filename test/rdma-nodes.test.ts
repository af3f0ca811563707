/**
 * The RDMA nodes one at a time, with packets built by hand: one stack (L2–L4 + RDMA) on a list
 * driver and a manual clock, one QP put in RTS by hand (init -> rtr {remote} -> rts) on a known
 * port, its peer played by the test. Frames in are built with l2l4-helpers' independent
 * builders and checksums; what the stack transmits is parsed (and checksum-checked) here, from
 * the bytes, by code that follows nodes/rdma/PROTOCOL.md and shares nothing with nodes/rdma.
 */

import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import {
  ALL,
  D,
  M,
  OP,
  R,
  PEER_PORT,
  Rig,
  TRP,
  atomicBody,
  be32,
  be64,
  bytes,
  fromHex,
  fromQp,
  isPureAck,
  polls,
  readRequestBody,
  rig,
  seg,
  summary,
  tagged,
  taggedMtu,
  terminate,
  trpHeader,
  u32,
  u64,
  untagged,
  untaggedMtu,
} from './rdma-rig-helpers.ts';
import { hex } from './l2l4-helpers.ts';

// ------------------------------------------------------------------ nodes/rdma/PROTOCOL.md test vectors

test('nodes/rdma/PROTOCOL.md vectors: SEND "hi" lands in the posted receive, WRITE places 0xaa at the TO, a pure ACK and a SACK are consumed', () => {
  const r = rig();
  const src = r.mr(64, ['local-write']);
  const sink = r.mr(8192, ['local-write', 'remote-write']);
  const rbuf = r.mr(16, ['local-write']);
  r.recv({ wrId: 'r1', sg: [{ mr: rbuf, offset: 4, length: 8 }] });
  // 16 one-packet sends of ours (PSNs 0..15) make the vectors' ACK 3, ACK 5 and SACK [12,15) valid.
  for (let k = 0; k < 16; k++) r.post({ wrId: `s${k}`, opcode: 'send', sg: [{ mr: src, offset: k, length: 1 }] });
  const sent = r.run();
  fromQp(sent);
  assert.equal(
    sent.map((p) => p.psn),
    Array.from({ length: 16 }, (_, k) => k),
  );
  // The peer's PSNs 0..6: one-byte Write middle segments at TO 0..6 (so the vectors' PSNs 7 and 8 come in order).
  const pre = Array.from({ length: 7 }, (_, k) => [
    ...trpHeader(k, 0),
    ...tagged({ last: false, stag: sink.stag, to: k }),
    0x10 + k,
  ]);
  let out = r.feed(...pre);
  assert.is(out.length, 1, 'one pure ACK for the vector');
  assert.ok(isPureAck(out[0]));
  assert.equal([out[0].psn, out[0].ack], [16, 7]);

  // SEND, last segment, PSN 7, ACK 3, MSN 1, MO 0, payload "hi": verbatim.
  out = r.feed(fromHex('00000007 00000003 0000 41 43 00000000 00000000 00000001 00000000 6869'));
  assert.equal(summary(polls(r.rcq)), ['r1:recv:success:2']);
  assert.equal(Array.from(rbuf.memory.subarray(4, 6)), [0x68, 0x69]);
  assert.equal(
    summary(polls(r.scq)),
    ['s0:send:success:1', 's1:send:success:1', 's2:send:success:1'],
    'its ACK 3 completed our first three sends',
  );
  assert.is(out.length, 1);
  assert.ok(isPureAck(out[0]));
  assert.equal([out[0].psn, out[0].ack], [16, 8]);

  // RDMA WRITE middle segment, PSN 8, TO 0x1000, 0xaa (the STag is our MR's: STag 0x00ABCDEF names no MR here).
  const w = fromHex('00000008 00000003 0000 81 40 00abcdef 0000000000001000 aa');
  w.splice(12, 4, ...be32(sink.stag));
  out = r.feed(w);
  assert.is(sink.memory[0x1000], 0xaa);
  assert.equal(
    Array.from(sink.memory.subarray(0, 8)),
    [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0],
    'the prelude placed too',
  );
  assert.equal(polls(r.rcq), [], 'a middle Write segment completes nothing');
  assert.equal([out.length, out[0].psn, out[0].ack], [1, 16, 9]);

  // Pure ACK (sender's next PSN 9, cumulative ack 5): consumed, our sends 3 and 4 complete, nothing answers it.
  out = r.feed(fromHex('00000009 00000005 0000'));
  assert.equal(out, []);
  assert.is(r.err('trp-input', 'ack'), 1);
  assert.equal(summary(polls(r.scq)), ['s3:send:success:1', 's4:send:success:1']);

  // SACK of [12,15): consumed; 5..11 were sent before 12..14 and are missing: retransmitted at once.
  out = r.feed(fromHex('0000000c 0000000f 5000'));
  assert.is(r.err('trp-input', 'sack'), 1);
  fromQp(out);
  assert.equal(
    out.map((p) => p.psn),
    [5, 6, 7, 8, 9, 10, 11],
  );
  for (const p of out) {
    const orig = sent[p.psn];
    assert.is(p.ack, 9, 'a retransmission carries the current cumulative ACK');
    assert.is(hex(p.body), hex(orig.body), `PSN ${p.psn} rebuilt byte for byte`);
  }
  assert.is(r.qp.fastRetransmits, 7);
  assert.equal(polls(r.scq), [], 'a SACK completes nothing');
  // The rest acknowledged: everything completes in order.
  assert.equal(r.feed(trpHeader(9, 16)), []);
  assert.equal(
    summary(polls(r.scq)),
    Array.from({ length: 11 }, (_, k) => `s${k + 5}:send:success:1`),
  );
  assert.is(r.qp.stateName, 'rts');
  r.close();
});

// ------------------------------------------------------------------ trp-input

test('trp-input: in-order data gets exactly one pure ACK per received vector, with the cumulative ack_psn', () => {
  const r = rig();
  const sink = r.mr(256, ['local-write', 'remote-write']);
  const wr = (psn: number, b: number) => [
    ...trpHeader(psn, 0),
    ...tagged({ last: false, stag: sink.stag, to: psn }),
    b,
  ];
  let out = r.feed(...[0, 1, 2, 3, 4].map((p) => wr(p, 0xa0 + p)));
  fromQp(out);
  assert.is(out.length, 1, 'five packets in one vector: one ACK');
  assert.ok(isPureAck(out[0]));
  assert.equal([out[0].psn, out[0].ack], [0, 5], 'psn = our next PSN (nothing sent), ack = 5');
  out = r.feed(...[5, 6, 7].map((p) => wr(p, 0xa0 + p)));
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 8]],
  );
  // Two vectors (two separate rx bursts): two ACKs.
  out = [...r.feed(wr(8, 0xa8)), ...r.feed(wr(9, 0xa9))];
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [
      [true, 9],
      [true, 10],
    ],
  );
  assert.equal(Array.from(sink.memory.subarray(0, 10)), [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9]);
  assert.is(r.g.errorCount('ddp-output', 'acks'), 4);
  assert.is(r.qp.rxPackets, 10);
  r.close();
});

test('trp-input: a duplicate is dropped (not placed again) and re-acknowledged', () => {
  const r = rig();
  const sink = r.mr(256, ['local-write', 'remote-write']);
  const wr = (psn: number, b: number) => [
    ...trpHeader(psn, 0),
    ...tagged({ last: false, stag: sink.stag, to: psn }),
    b,
  ];
  r.feed(wr(0, 1), wr(1, 2), wr(2, 3));
  // PSN 1 again, with other data: not placed, counted, and the ACK goes out again.
  let out = r.feed(wr(1, 0xee));
  assert.is(sink.memory[1], 2, 'the duplicate was not placed');
  assert.is(r.err('trp-input', 'duplicate'), 1);
  assert.is(r.qp.duplicates, 1);
  assert.equal(
    out.map((p) => [isPureAck(p), p.psn, p.ack]),
    [[true, 0, 3]],
  );
  // A whole vector of duplicates: one ACK.
  out = r.feed(wr(0, 0xee), wr(2, 0xee), wr(1, 0xee));
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 3]],
  );
  assert.is(r.err('trp-input', 'duplicate'), 4);
  assert.equal(Array.from(sink.memory.subarray(0, 3)), [1, 2, 3]);
  r.close();
});

test('trp-input: out-of-order packets are placed at once and answered with one SACK per range above the cumulative ack', () => {
  const r = rig();
  const sink = r.mr(256, ['local-write', 'remote-write']);
  const wr = (psn: number) => [...trpHeader(psn, 0), ...tagged({ last: false, stag: sink.stag, to: psn }), 0x40 + psn];
  r.feed(wr(0), wr(1));
  // 2 and 5 missing: 3, 4, 6 and 8 arrive.
  let out = r.feed(wr(3), wr(4), wr(6), wr(8));
  fromQp(out);
  for (const p of [3, 4, 6, 8]) assert.is(sink.memory[p], 0x40 + p, `PSN ${p} placed at once`);
  assert.is(sink.memory[2], 0);
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack, p.body.length]),
    [
      [TRP.DATA, 0, 2, 0], // pure ACK: cumulative 2
      [TRP.SACK, 3, 5, 0],
      [TRP.SACK, 6, 7, 0],
      [TRP.SACK, 8, 9, 0],
    ],
  );
  assert.is(r.g.errorCount('ddp-output', 'sacks'), 3);
  // A repeat of one taken above the hole: a duplicate (not placed again), answered with the
  // ACK only: nothing changed, and every range was reported less than an RTT ago.
  out = r.feed([...trpHeader(6, 0), ...tagged({ last: false, stag: sink.stag, to: 6 }), 0xee]);
  assert.is(sink.memory[6], 0x46);
  assert.is(r.err('trp-input', 'duplicate'), 1);
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [[TRP.DATA, 0, 2]],
  );
  // A new packet above a hole: the SACK of the range it joined, not of the others.
  out = r.feed(wr(9));
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [
      [TRP.DATA, 0, 2],
      [TRP.SACK, 8, 10],
    ],
  );
  // An RTT later (no sample yet: a timer tick), the next duplicate draws every range again, once.
  r.clock.advance(200_000);
  out = r.feed([...trpHeader(6, 0), ...tagged({ last: false, stag: sink.stag, to: 6 }), 0xee]);
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [
      [TRP.DATA, 0, 2],
      [TRP.SACK, 3, 5],
      [TRP.SACK, 6, 7],
      [TRP.SACK, 8, 10],
    ],
  );
  out = r.feed([...trpHeader(6, 0), ...tagged({ last: false, stag: sink.stag, to: 6 }), 0xee]);
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [[TRP.DATA, 0, 2]],
  );
  assert.is(r.g.errorCount('ddp-output', 'sacks'), 7);
  // The first hole filled: the ack moves to 5 (the ranges above were reported already).
  out = r.feed(wr(2));
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [[TRP.DATA, 0, 5]],
  );
  out = r.feed(wr(5));
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [[TRP.DATA, 0, 7]],
  );
  out = r.feed(wr(7));
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [[TRP.DATA, 0, 10]],
  );
  assert.equal(
    Array.from(sink.memory.subarray(0, 10)),
    Array.from({ length: 10 }, (_, k) => 0x40 + k),
  );
  r.close();
});

test('trp-input: packets from another address or port are dropped and counted (wrong_peer)', () => {
  const r = rig();
  const sink = r.mr(64, ['local-write', 'remote-write']);
  const wr = (psn: number, b: number) => [...trpHeader(psn, 0), ...tagged({ last: false, stag: sink.stag, to: 0 }), b];
  let out = r.feed({ payload: wr(0, 0x11), sport: PEER_PORT + 1 });
  assert.equal(out, []);
  out = r.feed({ payload: wr(0, 0x22), src: '10.0.0.3' });
  assert.equal(out, []);
  // Not even an ACK or a SACK is taken from a stranger.
  r.feed({ payload: trpHeader(0, 0, TRP.SACK), sport: 9 }, { payload: trpHeader(0, 0, TRP.FIN), src: '10.0.0.4' });
  assert.is(r.err('trp-input', 'wrong_peer'), 4);
  assert.is(r.err('trp-input', 'fin'), 0);
  assert.is(sink.memory[0], 0, 'nothing placed');
  assert.is(r.qp.rxPackets, 0);
  assert.is(r.qp.stateName, 'rts');
  // The peer's own packet still goes in.
  out = r.feed(wr(0, 0x33));
  assert.is(sink.memory[0], 0x33);
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 1]],
  );
  r.close();
});

test('trp-input: data beyond the receive window is dropped, counted and answered with the current ACK', () => {
  const r = rig({ rdma: { trp: { window: 8 } } });
  const sink = r.mr(64, ['local-write', 'remote-write']);
  const wr = (psn: number, b: number) => [
    ...trpHeader(psn, 0),
    ...tagged({ last: false, stag: sink.stag, to: psn % 64 }),
    b,
  ];
  r.feed(wr(0, 1));
  // Far ahead (2^20) and just past any window this QP can have (8 < W <= 2^16).
  let out = r.feed(wr(1 << 20, 0xee));
  assert.is(r.err('trp-input', 'out_of_window'), 1);
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 1]],
  );
  out = r.feed(wr((1 << 16) + 1, 0xee));
  assert.is(r.err('trp-input', 'out_of_window'), 2);
  assert.equal(
    out.map((p) => [p.op, p.ack]),
    [[TRP.DATA, 1]],
    'no SACK for what was dropped',
  );
  assert.equal(Array.from(sink.memory.subarray(0, 2)), [1, 0]);
  // Within the window, ahead: accepted.
  out = r.feed(wr(3, 3));
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [
      [TRP.DATA, 0, 1],
      [TRP.SACK, 3, 4],
    ],
  );
  assert.is(r.err('trp-input', 'out_of_window'), 2);
  r.close();
});

test('trp-input: an unknown TRP opcode is dropped and counted', () => {
  const r = rig();
  let out = r.feed(trpHeader(0, 0, 6), trpHeader(0, 0, 15, 0xabc), [...trpHeader(0, 0, 9), 1, 2, 3]);
  assert.equal(out, []);
  assert.is(r.err('trp-input', 'bad_opcode'), 3);
  assert.is(r.qp.stateName, 'rts');
  // The reserved low 12 bits are ignored on receive: a data packet with them set is data.
  const sink = r.mr(16, ['local-write', 'remote-write']);
  out = r.feed([...trpHeader(0, 0, TRP.DATA, 0x5a5), ...tagged({ last: false, stag: sink.stag, to: 0 }), 7]);
  assert.is(sink.memory[0], 7);
  assert.equal(
    out.map((p) => [isPureAck(p), p.ack]),
    [[true, 1]],
  );
  r.close();
});

test('trp-input: a FIN from the peer moves the QP to ERROR and flushes what is outstanding, nothing answers it', () => {
  const r = rig();
  const events: string[] = [];
  r.rdma.onEvent = (e) => events.push(e.type);
  const m = r.mr(64, ['local-write']);
  r.recv({ wrId: 'r', sg: [{ mr: m, offset: 0, length: 8 }] });
  r.post({ wrId: 's', opcode: 'send', sg: [{ mr: m, offset: 8, length: 8 }] });
  assert.equal(
    r.run().map((p) => p.psn),
    [0],
  );
  assert.equal(r.feed(trpHeader(0, 0, TRP.FIN)), []);
  assert.is(r.err('trp-input', 'fin'), 1);
  assert.is(r.qp.stateName, 'error');
  assert.equal(summary(polls(r.scq)), ['s:send:flushed:0']);
  assert.equal(summary(polls(r.rcq)), ['r:recv:flushed:0']);
  assert.ok(events.includes('qp-disconnected'), events.join(', '));
  assert.equal(r.advance(50), [], 'no retransmission of what was flushed');
  r.close();
});

// ------------------------------------------------------------------ delivery order

test('completions only when no hole precedes them: PSN 1 (message 2) before PSN 0 (message 1)', () => {
  const r = rig();
  const a = r.mr(16, ['local-write']),
    b = r.mr(16, ['local-write']);
  r.recv({ wrId: 'm1', sg: [{ mr: a, offset: 0, length: 16 }] });
  r.recv({ wrId: 'm2', sg: [{ mr: b, offset: 0, length: 16 }] });
  let out = r.feed([...trpHeader(1, 0), ...untagged({ op: OP.SEND, qn: 0, msn: 2 }), ...[0xb1, 0xb2, 0xb3]]);
  assert.equal(Array.from(b.memory.subarray(0, 3)), [0xb1, 0xb2, 0xb3], 'placed at once');
  assert.equal(polls(r.rcq), [], 'no completion while PSN 0 is missing');
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [
      [TRP.DATA, 0, 0],
      [TRP.SACK, 1, 2],
    ],
  );
  out = r.feed([...trpHeader(0, 0), ...untagged({ op: OP.SEND, qn: 0, msn: 1 }), ...[0xa1, 0xa2]]);
  assert.equal(summary(polls(r.rcq)), ['m1:recv:success:2', 'm2:recv:success:3'], 'both, in MSN order');
  assert.equal(Array.from(a.memory.subarray(0, 2)), [0xa1, 0xa2]);
  assert.equal(
    out.map((p) => [p.op, p.psn, p.ack]),
    [[TRP.DATA, 0, 2]],
  );
  r.close();
});

test('completions in order across a hole: a two-segment Send whose first segment comes last', () => {
  const r = rig();
  const a = r.mr(64, ['local-write']);
  r.recv({ wrId: 'big', sg: [{ mr: a, offset: 0, length: 64 }] });
  r.recv({ wrId: 'small', sg: [{ mr: a, offset: 32, length: 8 }] });
  // PSN 1: last segment of MSN 1 at MO 4; PSN 2: MSN 2 whole; PSN 0: first segment of MSN 1.
  r.feed([...trpHeader(1, 0), ...untagged({ op: OP.SEND, qn: 0, msn: 1, mo: 4 }), 5, 6]);
  r.feed([...trpHeader(2, 0), ...untagged({ op: OP.SEND_SE, qn: 0, msn: 2 }), 9]);
  assert.equal(polls(r.rcq), []);
  r.feed([...trpHeader(0, 0), ...untagged({ op: OP.SEND, last: false, qn: 0, msn: 1, mo: 0 }), 1, 2, 3, 4]);
  const cs = polls(r.rcq);
  assert.equal(summary(cs), ['big:recv:success:6', 'small:recv:success:1']);
  assert.is(cs[1].solicited, true, 'Send with SE: solicited');
  assert.equal(Array.from(a.memory.subarray(0, 6)), [1, 2, 3, 4, 5, 6]);
  assert.is(a.memory[32], 9);
  r.close();
});

// ------------------------------------------------------------------ ddp-input / rdmap-input: Terminates

interface Violation {
  name: string;
  code: number;
  /** Extra hdrct bits beyond M|D (R for Read Requests). */
  r?: boolean;
  setup?: (r: Rig) => { stag?: number; extra?: Record<string, number> };
  /** The offending segment (after TRP), built from what setup returned. */
  segment: (x: { stag: number; extra: Record<string, number> }) => { ddp: number[]; body: number[] };
  after?: (r: Rig) => void;
}

const violations: Violation[] = [
  {
    name: 'Write to an STag that names no MR: DDP tagged invalid STag',
    code: 0x1100,
    segment: () => ({ ddp: tagged({ stag: 0x00abcdef, to: 0x1000 }), body: [0xaa] }),
  },
  {
    name: 'Write past the end of the MR: DDP tagged base or bounds',
    code: 0x1101,
    setup: (r) => ({ stag: r.mr(100, ['local-write', 'remote-write']).stag }),
    segment: ({ stag }) => ({ ddp: tagged({ stag, to: 96 }), body: [1, 2, 3, 4, 5] }),
  },
  {
    name: 'Write to an MR without remote-write: DDP tagged invalid STag (access)',
    code: 0x1100,
    setup: (r) => ({ stag: r.mr(100, ['local-write', 'remote-read']).stag }),
    segment: ({ stag }) => ({ ddp: tagged({ last: false, stag, to: 0 }), body: [1, 2, 3] }),
  },
  {
    name: 'Write to an MR of another PD: DDP tagged invalid STag',
    code: 0x1100,
    setup: (r) => ({ stag: r.rdma.regMr(r.rdma.createPd(), 100, ['local-write', 'remote-write']).stag }),
    segment: ({ stag }) => ({ ddp: tagged({ stag, to: 0 }), body: [1] }),
  },
  {
    name: 'Read Response with no Read outstanding: DDP tagged invalid STag',
    code: 0x1100,
    segment: () => ({ ddp: tagged({ op: OP.READ_RESP, stag: 1, to: 0 }), body: [1, 2] }),
  },
  {
    name: 'Read Request from an STag that names no MR: RDMAP invalid STag, with the RDMAP header',
    code: 0x0100,
    r: true,
    segment: () => ({
      ddp: untagged({ op: OP.READ_REQ, qn: 1, msn: 1 }),
      body: readRequestBody({ sinkStag: 0x77, sinkTo: 0n, size: 16, srcStag: 0x00abcdef, srcTo: 0n }),
    }),
  },
  {
    name: 'Read Request past the end of the MR: RDMAP base or bounds, with the RDMAP header',
    code: 0x0101,
    r: true,
    setup: (r) => ({ stag: r.mr(100, ['local-write', 'remote-read']).stag }),
    segment: ({ stag }) => ({
      ddp: untagged({ op: OP.READ_REQ, qn: 1, msn: 1 }),
      body: readRequestBody({ sinkStag: 0x77, sinkTo: 0n, size: 16, srcStag: stag, srcTo: 90n }),
    }),
  },
  {
    name: 'Read Request from an MR without remote-read: RDMAP access rights, with the RDMAP header',
    code: 0x0102,
    r: true,
    setup: (r) => ({ stag: r.mr(100, ['local-write', 'remote-write']).stag }),
    segment: ({ stag }) => ({
      ddp: untagged({ op: OP.READ_REQ, qn: 1, msn: 1 }),
      body: readRequestBody({ sinkStag: 0x77, sinkTo: 0n, size: 16, srcStag: stag, srcTo: 0n }),
    }),
  },
  {
    name: 'Atomic on an MR without remote-atomic: RDMAP access rights',
    code: 0x0102,
    setup: (r) => ({ stag: r.mr(64, ['local-write', 'remote-write', 'remote-read']).stag }),
    segment: ({ stag }) => ({
      ddp: untagged({ op: OP.ATOMIC_REQ, qn: 1, msn: 1 }),
      body: atomicBody(0, 9, stag, 8n, 1n, 0n, 0n, 0n),
    }),
  },
  {
    name: 'Atomic on an STag that names no MR: RDMAP invalid STag',
    code: 0x0100,
    segment: () => ({
      ddp: untagged({ op: OP.ATOMIC_REQ, qn: 1, msn: 1 }),
      body: atomicBody(0, 9, 0x00abcdef, 8n, 1n, 0n, 0n, 0n),
    }),
  },
  {
    name: 'Atomic at an unaligned TO: RDMAP base or bounds',
    code: 0x0101,
    setup: (r) => ({ stag: r.mr(64, ALL).stag }),
    segment: ({ stag }) => ({
      ddp: untagged({ op: OP.ATOMIC_REQ, qn: 1, msn: 1 }),
      body: atomicBody(0, 9, stag, 4n, 1n, 0n, 0n, 0n),
    }),
  },
  {
    name: 'Send with no receive posted: DDP untagged no buffer',
    code: 0x1202,
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 0, msn: 1 }), body: [1, 2, 3] }),
  },
  {
    name: 'Send longer than the posted receive: DDP untagged message too long (the receive completes with local-length-error)',
    code: 0x1205,
    setup: (r) => {
      const m = r.mr(64, ['local-write']);
      r.recv({ wrId: 'short', sg: [{ mr: m, offset: 0, length: 4 }] });
      r.recv({ wrId: 'next', sg: [{ mr: m, offset: 8, length: 4 }] });
      return {};
    },
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 0, msn: 1 }), body: bytes(10, 1) }),
    after: (r) => assert.equal(summary(polls(r.rcq)), ['short:recv:local-length-error:0', 'next:recv:flushed:0']),
  },
  {
    name: 'Send on MSN 0 (already used): DDP untagged invalid MSN',
    code: 0x1203,
    setup: (r) => {
      r.recv({ wrId: 'x', sg: [] });
      return {};
    },
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 0, msn: 0 }), body: [1] }),
  },
  {
    name: 'Untagged segment on QN 5: DDP untagged invalid QN',
    code: 0x1201,
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 5, msn: 1 }), body: [1, 2] }),
  },
  {
    name: 'Tagged segment with DDP version 2: DDP tagged invalid version',
    code: 0x1104,
    setup: (r) => ({ stag: r.mr(64, ALL).stag }),
    segment: ({ stag }) => ({ ddp: tagged({ stag, to: 0, dv: 2 }), body: [1] }),
  },
  {
    name: 'Untagged segment with DDP version 0: DDP untagged invalid version',
    code: 0x1206,
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 0, msn: 1, dv: 0 }), body: [1] }),
  },
  {
    name: 'Send with RDMAP version 2: RDMAP invalid version',
    code: 0x0205,
    setup: (r) => {
      r.recv({ wrId: 'x', sg: [{ mr: r.mr(16, ['local-write']), offset: 0, length: 16 }] });
      return {};
    },
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 0, msn: 1, rv: 2 }), body: [1] }),
  },
  {
    name: 'Write with RDMAP version 0: RDMAP invalid version',
    code: 0x0205,
    setup: (r) => ({ stag: r.mr(64, ALL).stag }),
    segment: ({ stag }) => ({ ddp: tagged({ stag, to: 0, rv: 0 }), body: [1] }),
  },
  {
    name: 'Tagged Send (opcode 3 with T set): RDMAP unexpected opcode',
    code: 0x0206,
    segment: () => ({ ddp: tagged({ op: OP.SEND, stag: 0x100, to: 0 }), body: [1] }),
  },
  {
    name: 'Untagged Write (opcode 0 on QN 0): RDMAP unexpected opcode',
    code: 0x0206,
    setup: (r) => {
      r.recv({ wrId: 'x', sg: [{ mr: r.mr(16, ['local-write']), offset: 0, length: 16 }] });
      return {};
    },
    segment: () => ({ ddp: untagged({ op: OP.WRITE, qn: 0, msn: 1 }), body: [1] }),
  },
  {
    name: 'Reserved opcode 12 on QN 1: RDMAP unexpected opcode',
    code: 0x0206,
    segment: () => ({ ddp: untagged({ op: 12, qn: 1, msn: 1 }), body: bytes(28, 2) }),
  },
  {
    name: 'Send on QN 1 (a Send must travel on QN 0): RDMAP unexpected opcode',
    code: 0x0206,
    segment: () => ({ ddp: untagged({ op: OP.SEND, qn: 1, msn: 1 }), body: [1] }),
  },
];

for (const v of violations) {
  test(`Terminate: ${v.name} (0x${v.code.toString(16).padStart(4, '0')})`, () => {
    const r = rig();
    const events: string[] = [];
    r.rdma.onEvent = (e) => events.push(e.type);
    const got = v.setup?.(r) ?? {};
    const { ddp, body } = v.segment({ stag: got.stag ?? 0, extra: got.extra ?? {} });
    const out = r.feed([...trpHeader(0, 0), ...ddp, ...body]);
    fromQp(out);
    assert.is(
      out.length,
      1,
      `one packet, the Terminate: no ACK or SACK of the offending segment (got ${out.map((p) => `${p.op}/${p.psn}/${p.ack}/${hex(p.body)}`).join(' | ')})`,
    );
    const p = out[0];
    // A reliable data packet (our PSN 0) whose ACK stops before the offending segment: were
    // it acknowledged, the peer would complete that WR successfully before taking the Terminate.
    assert.equal([p.op, p.psn, p.ack], [TRP.DATA, 0, 0], 'the Terminate, not acknowledging what it terminates');
    const t = terminate(p);
    assert.is(t.msn, 1, 'Terminate MSN on QN 2 counts from 1');
    assert.is(t.code.toString(16), v.code.toString(16), 'error code');
    assert.is(t.hdrct, M | D | (v.r ? R : 0), 'hdrct');
    assert.is(t.reserved, 0);
    assert.is(t.segLen, ddp.length + body.length, 'the DDP segment length');
    assert.is(t.ddp, hex(ddp), 'the offending DDP header, byte for byte');
    assert.is(t.rdmap, v.r ? hex(body.slice(0, 28)) : '', 'the offending RDMAP header (Read Request)');
    assert.is(t.rest, 0, 'nothing after the headers');
    assert.is(r.qp.stateName, 'error');
    assert.ok(events.includes('qp-error'));
    assert.is(r.rdma.core.counters.terminatesSent, 1);
    v.after?.(r);
    // A second violation sends no second Terminate; the first is retransmitted until acknowledged.
    assert.equal(r.feed([...trpHeader(1, 0), ...ddp, ...body]), []);
    const again = r.advance(12);
    assert.ok(
      again.length >= 1 && again.every((x) => x.psn === 0 && hex(x.body) === hex(p.body)),
      'retransmitted as it was',
    );
    assert.equal(r.feed(trpHeader(2, 1)), []);
    assert.equal(r.advance(50), [], 'acknowledged: no more retransmissions');
    r.close();
  });
}

// ------------------------------------------------------------------ rdmap-input: Reads and Atomics

test('a Read Request gets its Read Response segments: sink STag, TO advancing, L on the last, the source bytes', () => {
  const r = rig({ mtu: 600 });
  const src = r.mr(4000, ['local-write', 'remote-read']);
  src.memory.set(bytes(4000, 3));
  const sinkStag = 0x12345678,
    sinkTo = 0x10_0000_0100n,
    size = 1500,
    srcTo = 300;
  const out = r.feed([
    ...trpHeader(0, 0),
    ...untagged({ op: OP.READ_REQ, qn: 1, msn: 1 }),
    ...readRequestBody({ sinkStag, sinkTo, size, srcStag: src.stag, srcTo: BigInt(srcTo) }),
  ]);
  fromQp(out);
  const per = taggedMtu(600);
  const lens = [per, per, size - 2 * per];
  assert.equal(
    out.map((p) => [p.psn, p.ack]),
    [
      [0, 1],
      [1, 1],
      [2, 1],
    ],
    'the responses carry the ACK (no separate pure ACK)',
  );
  const segs = out.map(seg);
  segs.forEach((s, k) => {
    assert.equal(
      [s.tagged, s.op, s.stag, s.to, s.last, s.data.length],
      [true, OP.READ_RESP, sinkStag, sinkTo + BigInt(k * per), k === 2, lens[k]],
      `segment ${k}`,
    );
  });
  assert.is(
    hex(Uint8Array.from(segs.flatMap((s) => Array.from(s.data)))),
    hex(src.memory.subarray(srcTo, srcTo + size)),
  );
  // A zero-length Read is answered too (one empty last segment).
  const z = r.feed([
    ...trpHeader(1, 3),
    ...untagged({ op: OP.READ_REQ, qn: 1, msn: 2 }),
    ...readRequestBody({ sinkStag: 5, sinkTo: 7n, size: 0, srcStag: 0, srcTo: 0n }),
  ]);
  assert.equal(
    z.map((p) => {
      const s = seg(p);
      return [p.psn, s.op, s.stag, s.to, s.last, s.data.length];
    }),
    [[3, OP.READ_RESP, 5, 7n, true, 0]],
  );
  assert.equal(r.feed(trpHeader(2, 4)), []);
  assert.is(r.qp.stateName, 'rts');
  r.close();
});

test('Atomic Requests get Atomic Responses (QN 3, MSN from 1) with the original value; the MR changes as RFC 7306 says', () => {
  const r = rig();
  const m = r.mr(64, ALL);
  const dv = new DataView(m.memory.buffer, m.memory.byteOffset, m.memory.byteLength);
  const v0 = 0x1122_3344_ffff_fff0n;
  dv.setBigUint64(8, v0, true);
  dv.setBigUint64(16, 5n, true);
  dv.setBigUint64(24, 0xaaaan, true);
  const ONES = 0xffff_ffff_ffff_ffffn;
  const req = (psn: number, msn: number, body: number[]) => [
    ...trpHeader(psn, 0),
    ...untagged({ op: OP.ATOMIC_REQ, qn: 1, msn }),
    ...body,
  ];
  const out = r.feed(
    req(0, 1, atomicBody(0, 0xdead0001, m.stag, 8n, 0x20n, 0n, 0n, 0n)), // fetch-add: carry into the high word
    req(1, 2, atomicBody(2, 0xdead0002, m.stag, 16n, 77n, ONES, 5n, ONES)), // cmp-swap, compare matches
    req(2, 3, atomicBody(2, 0xdead0003, m.stag, 16n, 99n, ONES, 5n, ONES)), // cmp-swap, compare no longer matches
    req(3, 4, atomicBody(1, 0xdead0004, m.stag, 24n, 0x0123_4567_89ab_cdefn, ONES, 0n, 0n)), // swap
  );
  fromQp(out);
  const resp = out.map((p) => {
    const s = seg(p);
    assert.equal([s.tagged, s.last, s.op, s.qn, s.data.length], [false, true, OP.ATOMIC_RESP, 3, 12]);
    return [p.psn, p.ack, s.msn, u32(s.data, 0), u64(s.data, 4)];
  });
  assert.equal(resp, [
    [0, 4, 1, 0xdead0001, v0],
    [1, 4, 2, 0xdead0002, 5n],
    [2, 4, 3, 0xdead0003, 77n],
    [3, 4, 4, 0xdead0004, 0xaaaan],
  ]);
  assert.is(dv.getBigUint64(8, true), v0 + 0x20n);
  assert.is(dv.getBigUint64(16, true), 77n);
  assert.is(dv.getBigUint64(24, true), 0x0123_4567_89ab_cdefn);
  r.close();
});

test('our Read: the Read Request names a sink; Read Responses (out of order too) land in the SG list and complete it once whole', () => {
  const r = rig({ mtu: 600 });
  const a = r.mr(1000, ['local-write']),
    b = r.mr(1000, ['local-write']);
  r.post({
    wrId: 'rd',
    opcode: 'read',
    sg: [
      { mr: a, offset: 100, length: 500 },
      { mr: b, offset: 0, length: 700 },
    ],
    remote: { stag: 0x4242, offset: 2 ** 32 + 16 },
  });
  const out = r.run();
  assert.is(out.length, 1);
  const s = seg(out[0]);
  assert.equal(
    [s.tagged, s.last, s.op, s.qn, s.msn, s.mo, s.data.length],
    [false, true, OP.READ_REQ, 1, 1, 0, 28],
    'Read Request: QN 1, MSN 1, 28-byte body',
  );
  const sinkStag = u32(s.data, 0),
    sinkTo = u64(s.data, 4);
  assert.equal(
    [u32(s.data, 12), u32(s.data, 16), u64(s.data, 20)],
    [1200, 0x4242, 2n ** 32n + 16n],
    'size, source STag, source TO',
  );
  const data = bytes(1200, 9);
  const per = taggedMtu(600);
  const resp = (psn: number, k: number) => {
    const to = k * per,
      len = Math.min(per, 1200 - to);
    return [
      ...trpHeader(psn, 1),
      ...tagged({ op: OP.READ_RESP, last: to + len === 1200, stag: sinkStag, to: sinkTo + BigInt(to) }),
      ...data.slice(to, to + len),
    ];
  };
  // The last segment first: placed, but the Read completes only when the first arrives.
  r.feed(resp(2, 2), resp(1, 1));
  assert.equal(polls(r.scq), []);
  r.feed(resp(0, 0));
  assert.equal(summary(polls(r.scq)), ['rd:read:success:1200']);
  assert.equal([...a.memory.subarray(100, 600), ...b.memory.subarray(0, 700)], data);
  r.close();
});

test("our Atomic: the Atomic Response's original value lands in the local 8 bytes and completes it", () => {
  const r = rig();
  const m = r.mr(16, ['local-write']);
  r.post({
    wrId: 'cs',
    opcode: 'cmp-swap',
    sg: [{ mr: m, offset: 8, length: 8 }],
    remote: { stag: 0x777, offset: 24 },
    atomic: { compare: 5n, swap: 0x1_0000_0002n },
  });
  const out = r.run();
  const s = seg(out[0]);
  assert.equal([s.op, s.qn, s.msn, s.data.length], [OP.ATOMIC_REQ, 1, 1, 52]);
  assert.equal(
    [
      u32(s.data, 0),
      u32(s.data, 8),
      u64(s.data, 12),
      u64(s.data, 20),
      u64(s.data, 28),
      u64(s.data, 36),
      u64(s.data, 44),
    ],
    [2, 0x777, 24n, 0x1_0000_0002n, 0xffff_ffff_ffff_ffffn, 5n, 0xffff_ffff_ffff_ffffn],
    'CmpSwap, STag, TO, swap data/mask, compare data/mask',
  );
  const id = u32(s.data, 4);
  // A response naming another request id is an error; this one is right.
  r.feed([
    ...trpHeader(0, 1),
    ...untagged({ op: OP.ATOMIC_RESP, qn: 3, msn: 1 }),
    ...be32(id),
    ...be64(0x0102_0304_0506_0708n),
  ]);
  assert.equal(summary(polls(r.scq)), ['cs:cmp-swap:success:8']);
  assert.is(
    new DataView(m.memory.buffer, m.memory.byteOffset).getBigUint64(8, true),
    0x0102_0304_0506_0708n,
    'host order',
  );
  r.close();
});

test("Write with Immediate received: Write segments then Immediate Data complete the receive with the immediate and the Write's length", () => {
  const r = rig();
  const sink = r.mr(256, ['local-write', 'remote-write']);
  r.recv({ wrId: 'imm', sg: [] });
  r.feed(
    [...trpHeader(0, 0), ...tagged({ last: false, stag: sink.stag, to: 10 }), 1, 2, 3],
    [...trpHeader(1, 0), ...tagged({ last: true, stag: sink.stag, to: 13 }), 4, 5],
    [...trpHeader(2, 0), ...untagged({ op: OP.IMM_SE, qn: 0, msn: 1 }), ...be32(0), ...be32(0xcafef00d)],
  );
  const cs = polls(r.rcq);
  assert.equal(summary(cs), ['imm:recv-with-imm:success:5']);
  assert.equal([cs[0].imm, cs[0].solicited], [0xcafef00d, true]);
  assert.equal(Array.from(sink.memory.subarray(10, 15)), [1, 2, 3, 4, 5]);
  r.close();
});

// ------------------------------------------------------------------ ddp-output

test('ddp-output: a large Send is segmented to the MTU (MSN fixed, MO advancing, L only on the last) and completes on the ACK', () => {
  const r = rig({ mtu: 600 });
  const m = r.mr(5000, ['local-write']);
  const data = bytes(3000, 4);
  m.memory.set(data, 100);
  r.post({
    wrId: 'big',
    opcode: 'send',
    sg: [
      { mr: m, offset: 100, length: 1000 },
      { mr: m, offset: 1100, length: 2000 },
    ],
  });
  r.post({ wrId: 'second', opcode: 'send-with-solicited', sg: [{ mr: m, offset: 0, length: 10 }] });
  const out = r.run();
  fromQp(out);
  const per = untaggedMtu(600);
  const n = Math.ceil(3000 / per);
  assert.is(out.length, n + 1);
  const segs = out.map(seg);
  for (let k = 0; k < n; k++) {
    const s = segs[k];
    assert.equal(
      [out[k].psn, s.tagged, s.op, s.qn, s.msn, s.mo, s.last, s.data.length],
      [k, false, OP.SEND, 0, 1, k * per, k === n - 1, Math.min(per, 3000 - k * per)],
      `segment ${k}`,
    );
  }
  assert.is(hex(Uint8Array.from(segs.slice(0, n).flatMap((s) => Array.from(s.data)))), hex(data));
  assert.equal([segs[n].op, segs[n].msn, segs[n].mo, segs[n].last], [OP.SEND_SE, 2, 0, true]);
  assert.equal(polls(r.scq), []);
  r.feed(trpHeader(0, n));
  assert.equal(summary(polls(r.scq)), [`big:send:success:3000`], 'complete when all its segments are acknowledged');
  r.feed(trpHeader(0, n + 1));
  assert.equal(summary(polls(r.scq)), ['second:send:success:10']);
  r.close();
});

test('ddp-output runs only when a QP has something to send (interrupt state): not in idle passes', () => {
  const r = rig();
  const calls = () => r.g.nodeCounters('ddp-output').calls;
  r.run();
  const before = calls();
  for (let i = 0; i < 10; i++) r.g.runPass();
  assert.is(calls(), before, 'ten idle passes: not called');
  const m = r.mr(64, ['local-write']);
  r.post({ wrId: 'one', opcode: 'send', sg: [{ mr: m, offset: 0, length: 8 }] });
  const out = r.run();
  assert.is(out.length, 1, 'the Send went out');
  assert.ok(calls() > before, 'called for it');
  const after = calls();
  for (let i = 0; i < 10; i++) r.g.runPass();
  assert.is(calls(), after, 'idle again: not called');
  r.close();
});

test('ddp-output: a large Write is segmented to the tagged MTU with the TO advancing', () => {
  const r = rig({ mtu: 600 });
  const m = r.mr(4096, ['local-write']);
  const data = bytes(2000, 5);
  m.memory.set(data);
  const stag = 0x00c0ffee,
    base = 2 ** 33 + 7;
  r.post({ wrId: 'w', opcode: 'write', sg: [{ mr: m, offset: 0, length: 2000 }], remote: { stag, offset: base } });
  const out = r.run();
  fromQp(out);
  const per = taggedMtu(600);
  const n = Math.ceil(2000 / per);
  const segs = out.map(seg);
  assert.is(segs.length, n);
  segs.forEach((s, k) => {
    assert.equal(
      [out[k].psn, s.tagged, s.op, s.stag, s.to, s.last, s.data.length],
      [k, true, OP.WRITE, stag, BigInt(base + k * per), k === n - 1, Math.min(per, 2000 - k * per)],
      `segment ${k}`,
    );
  });
  assert.is(hex(Uint8Array.from(segs.flatMap((s) => Array.from(s.data)))), hex(data));
  r.feed(trpHeader(0, n));
  assert.equal(summary(polls(r.scq)), ['w:write:success:2000']);
  r.close();
});

test('ddp-output: no more than `window` unacknowledged packets on the wire; each ACK opens it by what it acknowledged', () => {
  const r = rig({ mtu: 600, rdma: { trp: { window: 8 } } });
  const m = r.mr(20 * 600, ['local-write']);
  const per = untaggedMtu(600);
  r.post({ wrId: 'long', opcode: 'send', sg: [{ mr: m, offset: 0, length: 20 * per }] });
  let out = r.run();
  const sent = out;
  assert.equal(
    out.map((p) => p.psn),
    [0, 1, 2, 3, 4, 5, 6, 7],
  );
  assert.equal(r.run(), [], 'no ACK: nothing more');
  out = r.feed(trpHeader(0, 3));
  assert.equal(
    out.map((p) => p.psn),
    [8, 9, 10],
  );
  out = r.feed(trpHeader(0, 4));
  assert.equal(
    out.map((p) => p.psn),
    [11],
  );
  // A SACK does not open the window (the cumulative ACK does).
  out = r.feed(trpHeader(5, 12, TRP.SACK));
  assert.equal(
    out.map((p) => p.psn),
    [4],
    'only the hole is resent',
  );
  assert.is(hex(out[0].body), hex(sent[4].body), 'rebuilt from the WR at its offset, byte for byte');
  out = r.feed(trpHeader(0, 12));
  assert.equal(
    out.map((p) => p.psn),
    [12, 13, 14, 15, 16, 17, 18, 19],
  );
  assert.equal(r.feed(trpHeader(0, 20)), []);
  assert.equal(summary(polls(r.scq)), [`long:send:success:${20 * per}`]);
  r.close();
});

test("ddp-output: a timeout asks first (a PROBE, nothing resent); an ACK past snd_una shows it spurious, a PROBE_ACK acknowledging nothing resends the oldest at once (then F-RTO), a peer that never answers gets the second timeout's resend", () => {
  const three = () => {
    const r = rig({ rdma: { trp: { rtoInitMs: 10, rtoMinMs: 1, rtoMaxMs: 200, maxRetries: 7 } } });
    const m = r.mr(64, ['local-write']);
    for (const id of ['a', 'b', 'c']) r.post({ wrId: id, opcode: 'send', sg: [{ mr: m, offset: 0, length: 8 }] });
    assert.equal(
      r.run().map((p) => p.psn),
      [0, 1, 2],
    );
    const probe = r.advance(15, 0.25);
    assert.equal(
      probe.map((p) => [p.op, p.psn, p.body.length]),
      [[TRP.PROBE, 3, 0]],
      'the initial RTO (10 ms) sent one PROBE (our next PSN), no data',
    );
    return r;
  };
  const done = ['a:send:success:8', 'b:send:success:8', 'c:send:success:8'];
  // 1. The peer had it all, its ACK was late: nothing was sent twice.
  let r = three();
  assert.equal(r.feed(trpHeader(0, 3)), [], 'nothing to resend');
  assert.equal(r.advance(500, 5), [], 'and no timeout later: all acknowledged');
  assert.is(r.qp.retransmits, 0);
  assert.is(r.qp.spuriousTimeouts, 1);
  assert.equal(summary(polls(r.scq)), done);
  r.close();
  // 2. The answer acknowledges part of it: spurious as well (the segments are arriving).
  r = three();
  assert.equal(r.feed(trpHeader(0, 2, TRP.PROBE_ACK)).concat(r.run()), [], 'nothing resent at the answer');
  assert.is(r.qp.spuriousTimeouts, 1);
  r.close();
  // 3. The answer acknowledges nothing: PSN 0 is lost, resent at once; then F-RTO: an ACK
  // stopping right after it resends what is left.
  r = three();
  const rtx = r.feed(trpHeader(0, 0, TRP.PROBE_ACK)).concat(r.run());
  assert.equal(
    rtx.map((p) => [p.op, p.psn]),
    [[TRP.DATA, 0]],
    'the oldest resent at the answer',
  );
  assert.equal(
    r
      .feed(trpHeader(0, 1))
      .concat(r.run())
      .map((p) => p.psn),
    [1, 2],
    'PSNs 1 and 2 resent as soon as the ACK stopped short of them',
  );
  assert.is(r.qp.retransmits, 3);
  assert.is(r.qp.spuriousTimeouts, 0);
  r.feed(trpHeader(0, 3));
  assert.equal(summary(polls(r.scq)), done);
  // The peer answers PROBEs now: a later series asks at every timeout, resending nothing.
  r.post({ wrId: 'd', opcode: 'send', sg: [{ mr: r.mr(8, ['local-write']), offset: 0, length: 8 }] });
  assert.equal(
    r.run().map((p) => p.psn),
    [3],
  );
  const asks = r.advance(150, 0.25);
  assert.ok(asks.length >= 3, `several timeouts (${asks.length})`);
  assert.ok(
    asks.every((p) => p.op === TRP.PROBE),
    `only PROBEs: ${asks.map((p) => p.op)}`,
  );
  assert.is(r.qp.retransmits, 3, 'nothing resent while unanswered');
  r.close();
  // 4. A peer that never answers (urdma, an older rdma-graph): the second timeout resends the
  // oldest alone (F-RTO), and an ACK past it shows that spurious.
  r = three();
  assert.equal(
    r.advance(25, 0.25).map((p) => [p.op, p.psn]),
    [[TRP.DATA, 0]],
    'the second timeout (20 ms later) resent only PSN 0',
  );
  assert.equal(r.feed(trpHeader(0, 3)).concat(r.run()), []);
  assert.is(r.qp.retransmits, 1);
  assert.is(r.qp.spuriousTimeouts, 1);
  assert.is(r.qp.probes, 1);
  r.close();
});

test('ddp-output: a first timeout with a SACK from the peer resends everything un-SACKed at once (the peer is receiving: the holes are losses)', () => {
  const r = rig({ rdma: { trp: { rtoInitMs: 10, rtoMinMs: 1, rtoMaxMs: 200, maxRetries: 7 } } });
  const m = r.mr(64, ['local-write']);
  for (let k = 0; k < 5; k++) r.post({ wrId: k, opcode: 'send', sg: [{ mr: m, offset: 0, length: 8 }] });
  assert.equal(
    r.run().map((p) => p.psn),
    [0, 1, 2, 3, 4],
  );
  // PSN 2 arrived, nothing else (one SACKed packet above the holes: below the fast-retransmit threshold).
  assert.equal(r.feed(trpHeader(2, 3, TRP.SACK)), []);
  assert.equal(
    r.advance(15, 0.25).map((p) => p.psn),
    [0, 1, 3, 4],
    'the initial RTO resent every un-SACKed packet',
  );
  r.close();
});

test('ddp-output: RTO (RFC 6298 estimate): a PROBE at the first timeout, then the oldest unacknowledged packet resent at each, with exponential backoff, then retry-exceeded after maxRetries', () => {
  const rtoInitMs = 10,
    rtoMaxMs = 200,
    maxRetries = 7;
  const r = rig({ rdma: { trp: { rtoInitMs, rtoMinMs: 1, rtoMaxMs, maxRetries } } });
  const m = r.mr(64, ['local-write']);
  const events: string[] = [];
  r.rdma.onEvent = (e) => events.push(`${e.type}:${e.reason}`);
  r.post({ wrId: 'a', opcode: 'send', sg: [{ mr: m, offset: 0, length: 8 }] });
  r.post({ wrId: 'b', opcode: 'write', sg: [{ mr: m, offset: 8, length: 8 }], remote: { stag: 0x100, offset: 0 } });
  r.post({ wrId: 'c', opcode: 'send', sg: [{ mr: m, offset: 16, length: 8 }] });
  const first = r.run();
  assert.equal(
    first.map((p) => p.psn),
    [0, 1, 2],
  );
  // 4 ms later the first is acknowledged: one RTT sample of 4 ms, so SRTT 4, RTTVAR 2 and
  // RTO = SRTT + max(G, 4 RTTVAR) = 12 ms, restarted at the ACK; 1 and 2 stay unacknowledged.
  assert.equal(r.advance(4), [], 'no retransmission before the initial RTO');
  r.feed(trpHeader(0, 1));
  const tAck = r.clock.t;
  assert.equal(summary(polls(r.scq)), ['a:send:success:8']);
  const out = r.advance(2000, 0.25);
  // One burst per timeout: the first asks (a PROBE: a late ACK is likelier than a loss), and as
  // the peer never answers one, every later one resends only the oldest unacknowledged packet
  // ([1]: with no SACK from the peer, nothing says the rest is lost).
  const bursts: { t: number; psns: (number | string)[] }[] = [];
  for (const p of out) {
    const what = p.op === TRP.PROBE ? 'probe' : p.psn;
    const last = bursts[bursts.length - 1];
    if (last && last.t === p.t) last.psns.push(what);
    else bursts.push({ t: p.t, psns: [what] });
  }
  assert.equal(
    bursts.map((b) => b.psns),
    [['probe'], ...Array.from({ length: maxRetries - 1 }, () => [1])],
    `a PROBE, then ${maxRetries - 1} retransmissions`,
  );
  for (const p of out)
    if (p.op === TRP.DATA) assert.is(hex(p.body), hex(first[p.psn].body), `PSN ${p.psn} rebuilt byte for byte`);
  // Intervals: 12 ms, then doubling, bounded by rtoMax (tolerance: clock step + timer tick).
  const expected: number[] = [];
  for (let k = 0, rto = 12; k < maxRetries; k++, rto = Math.min(rtoMaxMs, rto * 2)) expected.push(rto);
  assert.ok(expected.includes(rtoMaxMs), 'the test reaches the bound');
  const times = [tAck, ...bursts.map((b) => b.t)];
  const got = bursts.map((b, k) => (b.t - times[k]) / 1e6);
  got.forEach((ms, k) =>
    assert.ok(
      ms >= expected[k] - 1e-6 && ms <= expected[k] + 0.5,
      `interval ${k}: ${ms} ms, expected ${expected[k]} ms (all: ${got})`,
    ),
  );
  assert.is(r.qp.timeouts, maxRetries + 1);
  assert.is(r.qp.retransmits, maxRetries - 1);
  assert.is(r.qp.probes, 1);
  // The timeout after the last retransmission fails the oldest WR with retry-exceeded, the rest flush.
  assert.equal(summary(polls(r.scq)), ['b:write:retry-exceeded:0', 'c:send:flushed:0']);
  assert.is(r.qp.stateName, 'error');
  assert.is(r.rdma.core.counters.retryExceeded, 1);
  assert.ok(
    events.some((e) => e.startsWith('qp-error:') && e.includes('retry-exceeded')),
    events.join(', '),
  );
  assert.equal(r.advance(500, 5), [], 'nothing after the QP failed');
  r.close();
});

test.run();
