/**
 * Segments longer than a buffer: on a link whose MTU exceeds the pool's 2048-byte buffers (9000
 * here), a QP's segment size is the link's (8962 bytes untagged), and every segment is a chain
 * of buffers (ddp-output's allocSegment, transport.ts's fillPayload). Every rdma-ops test over a
 * pipe at MTU 9000 (sizes around both segment payloads byte for byte, with the segment counts
 * on the wire, Reads, Atomics, the connection manager, the pool whole after each; not the
 * gather/scatter test laid out for 1500 bytes: its own here, across chain and segment
 * boundaries), a UD datagram of 4096 bytes (two buffers; the port's active MTU follows the link,
 * not the buffer), the Send/Write/Read sizes over memif at MTU 9000 (a zero-copy client, a copying
 * server), and the mixed fault run (loss, reordering, duplication, corruption: chains
 * retransmitted) at MTU 9000.
 */
import * as assert from 'uvu/assert';
import { rdmaOpsSuite } from './rdma-ops-helpers.ts';
import { faultRun } from './rdma-faults-helpers.ts';
import { connectManual, IP_A, IP_B, makeEnds, pattern, twoStacks, waitCompletions } from './rdma-helpers.ts';
import { deviceView } from '../dataplane/rdma-devices.ts';
import type { DeviceAttr } from '../nodes/rdma/stack.ts';

const pipe = rdmaOpsSuite('pipe', undefined, 9000, ['multiple SGEs']);

pipe('gather and scatter lists across buffer and segment boundaries at MTU 9000 (send, write, read)', async () => {
  const p = twoStacks({ mtu: 9000 });
  let ok = false;
  try {
    await p.ready;
    const A = makeEnds(p.a, { maxSge: 8 }),
      B = makeEnds(p.b, { maxSge: 8 });
    connectManual(p.a, A.qp, p.b, B.qp);
    const seg = p.a.rdma.queryQp(A.qp).segmentSize;
    assert.is(seg, 9000 - 20 - 8 - 10 - 18, 'the segment size is the link MTU less the headers, not a buffer');
    const s1 = p.a.rdma.regMr(A.pd, pattern(20000, 81), ['local-write']);
    const s2 = p.a.rdma.regMr(A.pd, pattern(20000, 82), ['local-write']);
    // SGE edges inside buffers (2048) and across segments (8962): 2047, 1, 0, 9000, 3, 5000.
    const gather = [
      { mr: s1, offset: 5, length: 2047 },
      { mr: s2, offset: 0, length: 1 },
      { mr: s2, offset: 9, length: 0 },
      { mr: s2, offset: 100, length: 9000 },
      { mr: s1, offset: 19990, length: 3 },
      { mr: s1, offset: 3000, length: 5000 },
    ];
    const total = gather.reduce((t, g) => t + g.length, 0);
    const flat = new Uint8Array(total);
    let at = 0;
    for (const g of gather) {
      flat.set(g.mr.memory.subarray(g.offset, g.offset + g.length), at);
      at += g.length;
    }
    const rw = ['local-write', 'remote-write', 'remote-read'];
    const r1 = p.b.rdma.regMr(B.pd, 20000, rw),
      r2 = p.b.rdma.regMr(B.pd, 20000, ['local-write']);
    const scatter = [
      { mr: r1, offset: 1, length: seg + 1 },
      { mr: r2, offset: 7, length: 4095 },
      { mr: r1, offset: 10000, length: 9000 },
    ];
    const txBefore = p.a.rdma.queryQp(A.qp).counters.txPackets;
    p.b.rdma.postRecv(B.qp, { wrId: 'sc', sg: scatter });
    p.a.rdma.postSend(A.qp, { wrId: 'ga', opcode: 'send', sg: gather });
    const [rc] = await waitCompletions(B.rcq, 1);
    assert.is(rc.status, 'success');
    assert.is(rc.byteLen, total);
    await waitCompletions(A.scq, 1);
    const c = p.a.rdma.queryQp(A.qp).counters;
    assert.is(c.txPackets - c.retransmits - txBefore, Math.ceil(total / seg), 'segments of the link MTU on the wire');
    let off = 0;
    for (const e of scatter) {
      const take = Math.min(e.length, total - off);
      assert.equal(e.mr.memory.subarray(e.offset, e.offset + take), flat.subarray(off, off + take));
      off += take;
    }
    // Write: gathered on A, contiguous at B; then Read it back into a scatter list on A.
    p.a.rdma.postSend(A.qp, { wrId: 'gw', opcode: 'write', sg: gather, remote: { stag: r1.stag, offset: 0 } });
    assert.is((await waitCompletions(A.scq, 1))[0].status, 'success');
    assert.equal(r1.memory.subarray(0, total), flat);
    const l1 = p.a.rdma.regMr(A.pd, 20000, ['local-write']);
    const rs = [
      { mr: l1, offset: 3, length: 2049 },
      { mr: l1, offset: 4000, length: total - 2049 },
    ];
    p.a.rdma.postSend(A.qp, { wrId: 'sr', opcode: 'read', sg: rs, remote: { stag: r1.stag, offset: 0 } });
    assert.is((await waitCompletions(A.scq, 1))[0].status, 'success');
    assert.equal(l1.memory.subarray(3, 3 + 2049), flat.subarray(0, 2049));
    assert.equal(l1.memory.subarray(4000, 4000 + total - 2049), flat.subarray(2049));
    ok = true;
  } finally {
    p.close();
  }
  if (ok) assert.is(p.lost(), 0, 'every buffer of every chain is back in its pool');
});

pipe('mixed operations with 5 % of every fault at MTU 9000: chained segments retransmitted intact', async () => {
  const r = await faultRun(0.05, 61, 'pipe', 9000);
  assert.ok(r.retransmits > 0, 'the faults forced retransmissions');
  assert.ok(r.dropped > 0, 'the injector dropped segments');
});

pipe('UD at MTU 9000: a 4096-byte datagram (two buffers) arrives whole; 4097 bytes is over the path MTU', async () => {
  const p = twoStacks({ mtu: 9000 });
  let ok = false;
  try {
    await p.ready;
    const end = (s: typeof p.a) => {
      const pd = s.rdma.createPd();
      const cq = s.rdma.createCq(64);
      const qp = s.rdma.createQp({ pd, sendCq: cq, recvCq: cq, type: 'ud', maxSendWr: 8, maxRecvWr: 8 });
      for (const state of ['init', 'rtr', 'rts'] as const)
        s.rdma.modifyQp(qp, { state, qkey: state === 'init' ? 0x1111 : undefined });
      return { qp, cq, mr: s.rdma.regMr(pd, 16384, ['local-write']) };
    };
    const a = end(p.a),
      b = end(p.b);
    assert.ok(p.a.graph.pool.dataSize < 4096, 'the datagram is longer than a buffer');
    a.mr.memory.set(pattern(8192, 91));
    p.b.rdma.postRecv(b.qp, { wrId: 1, sg: [{ mr: b.mr, offset: 0, length: 40 + 4096 }] });
    p.a.rdma.postSend(a.qp, {
      wrId: 2,
      opcode: 'send',
      sg: [{ mr: a.mr, offset: 5, length: 4096 }],
      ud: { address: '10.0.0.2', qpn: b.qp.qpn, qkey: 0x1111 },
    });
    const [r] = await waitCompletions(b.cq, 1);
    assert.is(r.status, 'success');
    assert.is(r.byteLen, 40 + 4096, 'the GRH and the whole message');
    assert.equal(b.mr.memory.subarray(40, 40 + 4096), a.mr.memory.subarray(5, 5 + 4096));
    await waitCompletions(a.cq, 1);
    p.a.rdma.postSend(a.qp, {
      wrId: 3,
      opcode: 'send',
      sg: [{ mr: a.mr, offset: 0, length: 4097 }],
      ud: { address: '10.0.0.2', qpn: b.qp.qpn, qkey: 0x1111 },
    });
    const [big] = await waitCompletions(a.cq, 1);
    assert.is(big.status, 'local-length-error', 'the largest UD message is the largest IB MTU the link holds: 4096');
    ok = true;
  } finally {
    p.close();
  }
  if (ok) assert.is(p.lost(), 0, 'every buffer back');
});

pipe("a device's port: active MTU and segment bytes from the link's MTU, not the 2048-byte buffers", () => {
  const port = (mtu: number) =>
    deviceView(
      { name: 'memif0', mac: '02:fe:00:00:00:01', mtu, up: true, address: '10.0.0.1' },
      {} as DeviceAttr,
      'test',
    ).ports[0];
  assert.is(port(1500).activeMtu, 1024);
  assert.is(port(1500).segmentBytes, 1500 - 20 - 8 - 10);
  assert.is(port(9000).activeMtu, 4096, 'what perftest sets as path_mtu: RC segments of the whole link then');
  assert.is(port(9000).segmentBytes, 9000 - 20 - 8 - 10);
});

for (const [mtu, active] of [
  [9000, 4096],
  [1500, 1024],
] as const) {
  pipe(
    `path_mtu at MTU ${mtu}: the port's active MTU (${active}) or more takes the whole link; a smaller one is kept (a WRITE's packets say so)`,
    async () => {
      const whole = mtu - 20 - 8 - 10 - 14;
      for (const [pathMtu, tagged] of [
        [active, whole],
        [4096, whole],
        [active / 2, active / 2],
        [256, 256],
      ] as const) {
        const p = twoStacks({ mtu });
        try {
          await p.ready;
          const A = makeEnds(p.a),
            B = makeEnds(p.b);
          for (const [s, q, peer, ip] of [
            [p.a, A.qp, B.qp, IP_B],
            [p.b, B.qp, A.qp, IP_A],
          ] as const) {
            s.rdma.modifyQp(q, { state: 'init' });
            s.rdma.modifyQp(q, { state: 'rtr', remote: { address: ip, port: peer.qpn }, rqPsn: peer.isn, pathMtu });
            s.rdma.modifyQp(q, { state: 'rts' });
          }
          const untagged = tagged === whole ? whole - 4 : tagged;
          assert.is(p.a.rdma.queryQp(A.qp).segmentSize, untagged, `path_mtu ${pathMtu}: segment size`);
          const n = 100_000;
          const src = p.a.rdma.regMr(A.pd, pattern(n, 7), ['local-write']);
          const dst = p.b.rdma.regMr(B.pd, n, ['local-write', 'remote-write']);
          const before = p.a.rdma.queryQp(A.qp).counters.txPackets;
          p.a.rdma.postSend(A.qp, {
            wrId: 'w',
            opcode: 'write',
            sg: [{ mr: src, offset: 0, length: n }],
            remote: { stag: dst.stag, offset: 0 },
          });
          const [c] = await waitCompletions(A.scq, 1);
          assert.is(c.status, 'success');
          assert.equal(dst.memory, src.memory, `path_mtu ${pathMtu}: the bytes`);
          assert.is(
            p.a.rdma.queryQp(A.qp).counters.txPackets - before,
            Math.ceil(n / tagged),
            `path_mtu ${pathMtu}: ${tagged}-byte WRITE segments`,
          );
        } finally {
          p.close();
        }
      }
    },
  );
}

pipe.run();

rdmaOpsSuite('memif', ['a manually connected pair', 'send: sizes', 'write: sizes', 'read: sizes'], 9000).run();
