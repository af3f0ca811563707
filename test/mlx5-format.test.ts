/**
 * The mlx5 formats (native/ibverbs/mlx5_format.h, the code the mlx5dv data path runs) against
 * byte fixtures written from the layouts, with no NIC:
 *
 * - CQE (64 B): struct mlx5_cqe64 in rdma-core 44's <infiniband/mlx5dv.h>, i.e. the PRM's
 *   "Completion Queue Entry Format": flags word at 0x1c (hds_ip_ext: L2_OK bit 0, L3_OK bit 1,
 *   L4_OK bit 2; then l4_hdr_type_etc: L3 type bits 2-3, L4 type bits 4-6, IP_FRAG bit 7, the
 *   be16 VPP's rdma_mlx5dv.h reads as `flags`), byte_cnt at 0x2c, wqe_counter at 0x3c,
 *   op_own at 0x3f (opcode 7:4, format 3:2, solicited 1, owner 0).
 * - Error CQE: struct mlx5_err_cqe (vendor_err_synd 0x36, syndrome 0x37); syndromes from
 *   mlx5dv.h's MLX5_CQE_SYNDROME_* (0x01 local length, 0x04 local protection).
 * - Compressed CQE: the title's byte_cnt is the number of mini-CQEs; mini-CQE arrays of 8
 *   8-byte entries {hash or checksum (be32), byte count (be32)} sit in the slot after the title
 *   and then every 8 slots from it (VPP input.c process_mini_cqes, DPDK mlx5_rx.c).
 * - Striding-RQ byte count: filler bit 31, consumed strides bits 16-29, bytes bits 0-15
 *   (VPP rdma_mlx5dv.h CQE_BC_*).
 * - Send WQE: ctrl segment (struct mlx5_wqe_ctrl_seg: opmod_idx_opcode, qpn_ds, fm_ce_se at
 *   11, imm at 12), eth segment (struct mlx5_wqe_eth_seg: cs_flags at 4, inline_hdr_sz at 12,
 *   inline_hdr_start at 14), data segment (struct mlx5_wqe_data_seg: be32 bytes, be32 lkey,
 *   be64 addr); MLX5_OPCODE_SEND 0x0a, MLX5_WQE_CTRL_CQ_UPDATE 0x08, MLX5_ETH_WQE_L3_CSUM 0x40,
 *   L4_CSUM 0x80.
 * - Doorbell records: CQ word 0 = be32(ci & 0xffffff) (the byte order VPP fixed in 2026,
 *   commit 3214ba59e30), RQ MLX5_RCV_DBR word 0 = be32(counter & 0xffff), SQ MLX5_SND_DBR
 *   word 1 = be32(counter & 0xffff).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { type VerbsAddon, verbsAddon } from '../drivers/ibverbs-addon.ts';

let v: VerbsAddon | null = null;
let why = '';
try {
  v = verbsAddon();
} catch (e) {
  why = `ibverbs.node was not built (${(e as Error).message})`;
}

const hex = (s: string) =>
  Uint8Array.from(
    s
      .replace(/\s+/g, '')
      .match(/../g)!
      .map((b) => parseInt(b, 16)),
  );
const toHex = (a: Uint8Array) => Buffer.from(a).toString('hex');

/** A ring of 2^log CQEs as software makes it: every op_own 0xf1 (invalid, hardware's). */
function ring(log: number): Uint8Array {
  const r = new Uint8Array(64 << log);
  for (let i = 0; i < 1 << log; i++) r[i * 64 + 0x3f] = 0xf1;
  return r;
}
const state = () => new Uint32Array(7);

/** A responder-send CQE of 1514 bytes, IPv4 + UDP, L3_OK and L4_OK, owner 0, as hex. */
const CQE_UDP_1514 =
  '00000000 00000000 00000000 00000000' + // 0x00 .. 0x0f
  '00000000 00000000 00000000 06280000' + // 0x1c: flags 0x06 (L3_OK, L4_OK) 0x28 (L4 UDP=2<<4, L3 IPv4=2<<2)
  '00000000 00000000 00000000 000005ea' + // 0x2c: byte_cnt 1514
  '00000000 00000000 00000000 00000020'; //  0x3f: op_own 0x20 (responder send, format 0, owner 0)

function put(r: Uint8Array, slot: number, cqe: Uint8Array): void {
  r.set(cqe, slot * 64);
}

test('CQE: one responder send: bytes, flags word, checksums; an invalid slot ends the poll', () => {
  if (v === null) skip(why);
  const r = ring(3);
  put(r, 0, hex(CQE_UDP_1514));
  const s = state();
  const got = v.mlx5PollRx(r, 3, s, 64);
  assert.equal(got, [{ bc: 1514, flags: 0x0628, syndrome: 0 }]);
  assert.is(s[0], 1, 'consumer index advanced');
  assert.equal(v.mlx5Csum(got[0].flags), { ip4: true, l4: true });
  assert.equal(v.mlx5PollRx(r, 3, s, 64), [], 'slot 1 is still hardware-owned');
});

test('CQE: the owner bit flips every pass round the ring (wrap-around)', () => {
  if (v === null) skip(why);
  const r = ring(2); // 4 CQEs
  const c = hex(CQE_UDP_1514);
  for (let i = 0; i < 4; i++) put(r, i, c);
  const s = state();
  assert.is(v.mlx5PollRx(r, 2, s, 64).length, 4);
  assert.is(s[0], 4);
  // ci 4 is slot 0 in pass 1: owner 0 there is last pass's entry, not a new one.
  assert.equal(v.mlx5PollRx(r, 2, s, 64), [], 'stale owner bit: not ours');
  r[0x3f] = 0x21; // hardware wrote slot 0 again, owner 1
  assert.equal(v.mlx5PollRx(r, 2, s, 64), [{ bc: 1514, flags: 0x0628, syndrome: 0 }]);
  assert.is(s[0], 5);
});

/** A compressed session: title at `ci` of `n` mini-CQEs, bytes 100+k, in a ring of 2^log. */
function zipped(log: number, ci: number, n: number): Uint8Array {
  const r = ring(log);
  const mask = (1 << log) - 1;
  const pass = (ci >> log) & 1;
  // Title: flags as CQE_UDP_1514's, byte_cnt = n (the mini-CQE count), op_own 0x2c | owner.
  const t = hex(CQE_UDP_1514);
  t.set([0, 0, (n >> 8) & 0xff, n & 0xff], 0x2c);
  t[0x3f] = 0x2c | pass;
  put(r, ci & mask, t);
  for (let k = 0; k < n; k++) {
    const slot = (k < 8 ? ci + 1 : ci + (k & ~7)) & mask;
    const o = slot * 64 + (k & 7) * 8;
    r.set([0x12, 0x34, 0x56, k], o); // rx hash (ignored)
    r.set([0, 0, 0, 100 + k], o + 4); // byte count
  }
  return r;
}

test('compressed CQE: a title and two mini-CQE arrays (slot after the title, then title+8) give one completion each', () => {
  if (v === null) skip(why);
  const r = zipped(4, 0, 10);
  const s = state();
  const got = v.mlx5PollRx(r, 4, s, 256);
  assert.equal(
    got.map((c) => c.bc),
    [100, 101, 102, 103, 104, 105, 106, 107, 108, 109],
  );
  assert.ok(
    got.every((c) => c.flags === 0x0628 && c.syndrome === 0),
    "every packet takes the title's flags",
  );
  assert.is(s[0], 10, 'the session consumed 10 CQE indices');
  // Slots 1..9 now say "invalid, pass 0": none looks valid when the ring comes round.
  for (let i = 1; i < 10; i++) assert.is(r[i * 64 + 0x3f], 0xf0, `slot ${i} owner reset`);
  assert.equal(v.mlx5PollRx(r, 4, s, 256), []);
});

test('compressed CQE: a burst that ends inside a session resumes it on the next call', () => {
  if (v === null) skip(why);
  const r = zipped(4, 0, 10);
  const s = state();
  assert.equal(
    v.mlx5PollRx(r, 4, s, 4).map((c) => c.bc),
    [100, 101, 102, 103],
  );
  assert.is(s[0], 0, 'consumer index stays at the title until the session is done');
  assert.equal(
    v.mlx5PollRx(r, 4, s, 256).map((c) => c.bc),
    [104, 105, 106, 107, 108, 109],
  );
  assert.is(s[0], 10);
});

test('compressed CQE: a session that wraps the ring (title at the last slot but one)', () => {
  if (v === null) skip(why);
  const log = 4;
  const r = zipped(log, 14, 9); // minis 0-7 in slot 15, mini 8 in slot (14+8)&15 = 6
  const s = state();
  s[0] = 14;
  const got = v.mlx5PollRx(r, log, s, 256);
  assert.equal(
    got.map((c) => c.bc),
    [100, 101, 102, 103, 104, 105, 106, 107, 108],
  );
  assert.is(s[0], 23);
  assert.is(r[15 * 64 + 0x3f], 0xf0, 'index 15 (pass 0) reset with owner 0');
  for (let i = 16; i < 23; i++) assert.is(r[(i & 15) * 64 + 0x3f], 0xf1, `index ${i} (pass 1) reset with owner 1`);
});

test('CQE: a responder error is one completion with its syndrome; unknown opcodes and impossible sessions stop the ring', () => {
  if (v === null) skip(why);
  const r = ring(3);
  const e = new Uint8Array(64);
  e[0x36] = 0x39; // vendor syndrome
  e[0x37] = 0x01; // MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR
  e[0x3f] = 0xe0; // MLX5_CQE_RESP_ERR, owner 0
  put(r, 0, e);
  put(
    r,
    1,
    hex(CQE_UDP_1514).map((b, i) => (i === 0x3f ? 0x50 : b)),
  ); // MLX5_CQE_RESIZE_CQ: not ours
  const s = state();
  assert.equal(v.mlx5PollRx(r, 3, s, 64), [{ bc: 0, flags: 0, syndrome: 1 }]);
  assert.is(s[6], 1, 'error CQEs counted');
  assert.is(s[4], 1, 'unknown opcode: broken');
  assert.is(s[5], 0x50);
  assert.is(s[0], 1, 'the unknown CQE is not consumed');
  for (const n of [0, 17]) {
    const z = zipped(4, 0, 1);
    z.set([0, 0, 0, n], 0x2c); // a session of 0, or of more CQEs than the ring holds
    const zs = state();
    assert.equal(v.mlx5PollRx(z, 4, zs, 256), [], `session of ${n}`);
    assert.is(zs[4], 1, `session of ${n}: broken`);
  }
});

test('send CQE: requester completion names its WQE; REQ_ERR carries the syndrome (LOCAL_PROT_ERR)', () => {
  if (v === null) skip(why);
  const r = ring(2);
  const ok = new Uint8Array(64);
  ok.set([0x01, 0x23], 0x3c); // wqe_counter 0x0123
  ok[0x3f] = 0x00; // MLX5_CQE_REQ, owner 0
  const bad = new Uint8Array(64);
  bad.set([0x01, 0x40], 0x3c);
  bad[0x37] = 0x04; // MLX5_CQE_SYNDROME_LOCAL_PROT_ERR (CSIT-1906's first tx CQE on CX6)
  bad[0x3f] = 0xd0; // MLX5_CQE_REQ_ERR
  put(r, 0, ok);
  put(r, 1, bad);
  const s = state();
  assert.equal(v.mlx5PollTx(r, 2, s, 32), [
    { wqeCounter: 0x123, syndrome: 0 },
    { wqeCounter: 0x140, syndrome: 4 },
  ]);
  assert.is(s[0], 2);
  assert.is(s[6], 1);
});

test('striding RQ byte count: filler bit, consumed strides, bytes', () => {
  if (v === null) skip(why);
  assert.equal(v.mlx5StridingBc(0x8000_0000 + (5 << 16)), { filler: true, strides: 5, bytes: 0 });
  assert.equal(v.mlx5StridingBc((3 << 16) | 4000), { filler: false, strides: 3, bytes: 4000 });
  assert.equal(v.mlx5StridingBc((1 << 16) | 60), { filler: false, strides: 1, bytes: 60 });
  assert.equal(v.mlx5StridingBc(0x3fff_ffff), { filler: false, strides: 0x3fff, bytes: 0xffff });
});

test('checksum flags: IPv4 L3_OK, UDP/TCP L4_OK; IPv6, fragments and other L4 types are not', () => {
  if (v === null) skip(why);
  const f = (l3ok: boolean, l4ok: boolean, l3type: number, l4type: number, frag = false) =>
    ((l3ok ? 1 : 0) << 9) | ((l4ok ? 1 : 0) << 10) | (l3type << 2) | (l4type << 4) | (frag ? 1 << 7 : 0);
  assert.equal(v.mlx5Csum(f(true, true, 2, 2)), { ip4: true, l4: true }, 'IPv4 UDP');
  assert.equal(v.mlx5Csum(f(true, true, 2, 4)), { ip4: true, l4: true }, 'IPv4 TCP with ACK and data');
  assert.equal(v.mlx5Csum(f(true, false, 2, 2)), { ip4: true, l4: false }, 'L4 bad');
  assert.equal(v.mlx5Csum(f(false, true, 2, 2)), { ip4: false, l4: true }, 'L3 bad');
  assert.equal(v.mlx5Csum(f(true, true, 1, 2)), { ip4: false, l4: true }, 'IPv6 is not IPv4');
  assert.equal(v.mlx5Csum(f(true, true, 2, 2, true)), { ip4: true, l4: false }, 'a fragment has no L4 checksum');
  assert.equal(v.mlx5Csum(f(true, true, 2, 5)), { ip4: true, l4: false }, 'L4 type 5 is not TCP/UDP');
  assert.equal(v.mlx5Csum(f(true, true, 2, 0)), { ip4: true, l4: false }, 'no L4');
});

test('send WQE: ctrl + eth with 18 bytes inline + one data segment, byte for byte', () => {
  if (v === null) skip(why);
  const frame = Uint8Array.from({ length: 60 }, (_, i) => i + 1);
  const w = new Uint8Array(64).fill(0xee);
  const ds = v.mlx5BuildSendWqe(w, 0x0102, 0xabcd, frame, 0x11223344, 0x7f00, 0x1000_0000, 0xc0, true, 0, 60);
  assert.is(ds, 4);
  const want = hex(
    // ctrl: opmod_idx_opcode = 0x0102 << 8 | SEND; qpn_ds = 0xabcd << 8 | 4; fm_ce_se = CQ_UPDATE; imm 0
    '00 01 02 0a  00 ab cd 04  00 00 00 08  00 00 00 00' +
      // eth: cs_flags 0xc0 (L3|L4) at 4; inline_hdr_sz 18 at 12; the frame's first 18 bytes from 14
      '00 00 00 00  c0 00 00 00  00 00 00 00  00 12 01 02' +
      '03 04 05 06  07 08 09 0a  0b 0c 0d 0e  0f 10 11 12' +
      // data: 60 - 18 = 42 bytes, lkey, addr + 18
      '00 00 00 2a  11 22 33 44  00 00 7f 00  10 00 00 12',
  );
  assert.is(toHex(w), toHex(want));
  assert.equal(v.mlx5ParseSendWqe(w), {
    index: 0x0102,
    opcode: 0x0a,
    qpn: 0xabcd,
    ds: 4,
    signaled: true,
    csFlags: 0xc0,
    inlineBytes: 18,
    dataBytes: 42,
    lkey: 0x11223344,
    addr: 0x7f00_1000_0012n,
  });
});

test('send WQE: a frame of 18 bytes or fewer goes fully inline (3 units, no data segment)', () => {
  if (v === null) skip(why);
  const frame = Uint8Array.from({ length: 14 }, (_, i) => 0xa0 + i);
  const w = new Uint8Array(64).fill(0xee);
  assert.is(v.mlx5BuildSendWqe(w, 0xffff, 1, frame, 5, 0, 0x1000, 0, false, 0, 14), 3);
  const p = v.mlx5ParseSendWqe(w);
  assert.is(p.index, 0xffff);
  assert.is(p.ds, 3);
  assert.is(p.signaled, false);
  assert.is(p.inlineBytes, 14);
  assert.is(toHex(w.subarray(30, 44)), toHex(frame));
  assert.ok(
    w.subarray(48).every((b) => b === 0),
    'no data segment',
  );
});

test('doorbell records: CQ 24-bit, RQ and SQ 16-bit counters, big-endian, SQ in word 1', () => {
  if (v === null) skip(why);
  assert.is(toHex(v.mlx5Doorbell('cq', 0x01234567)), '0023456700000000');
  assert.is(toHex(v.mlx5Doorbell('rq', 0x12345)), '0000234500000000');
  assert.is(toHex(v.mlx5Doorbell('sq', 0x10005)), '0000000000000005');
  assert.throws(() => v!.mlx5Doorbell('xx' as 'cq', 1), /cq, rq or sq/);
});

test('receive WQE segments: data segment and the striding-RQ SRQ next segment', () => {
  if (v === null) skip(why);
  const d = new Uint8Array(16);
  v.mlx5DataSeg(d, 2048, 0x00c0ffee, 0x1, 0x2345_6789);
  assert.is(toHex(d), '00000800' + '00c0ffee' + '00000001' + '23456789');
  const n = new Uint8Array(16).fill(0xff);
  v.mlx5SrqNextSeg(n, 0x0203);
  assert.is(toHex(n), '0000' + '0203' + '00'.repeat(12));
});

test('format functions refuse buffers smaller than their ring or entry', () => {
  if (v === null) skip(why);
  assert.throws(() => v!.mlx5PollRx(new Uint8Array(64), 3, state(), 8), /needs 512/);
  assert.throws(() => v!.mlx5ParseSendWqe(new Uint8Array(32)), /needs 64/);
  assert.throws(() => v!.mlx5PollRx(ring(3), 3, new Uint32Array(2), 8), /Uint32Array of 7/);
});

test.run();
