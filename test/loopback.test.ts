/**
 * Loopback (issue 28, point 2): QPs of one data plane connected to each other, through the
 * Dataplane's methods. Two QPs on one interface (one address), a QP on interface X with one on
 * interface Y, and the same with cpu.workers: 2 and the two QPs on different workers (their
 * frames cross by the handoff queues). Every operation each way, every byte and completion
 * checked; the frames never reach a driver (the interface counters and the peer's do not move),
 * no ARP is asked for our own address, and `show runtime` / `show errors` show ip4-loopback.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import type { Config } from '../config/types.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { baseConfig, IP_A, IP_B, MAC_A, MAC_B, pipeInterface } from './dataplane-helpers.ts';
import { cpuWith, handed, memifIf } from './workers-helpers.ts';
import { pattern } from './rdma-helpers.ts';
import { bothWays, errorCount, join, side, take, vectors, wire } from './dataplane-ops-helpers.ts';

const IP_Y = '10.30.0.1',
  MAC_Y = '02:fe:00:00:00:31';
let runs = 0;

/** A on a pipe to B (A's X: IP_A, gateway B), optionally with a second interface Y (IP_Y) whose pipe has no peer. */
async function rig(withY: boolean): Promise<{ a: DataplaneApi; b: DataplaneApi; close(): Promise<void> }> {
  const n = ++runs;
  const ea = `lpa${n}`,
    eb = `lpb${n}`;
  const a = await Dataplane.create(
    baseConfig({
      interfaces: [
        // With a gateway, routing alone would send a datagram from X's address to Y's through B.
        pipeInterface(ea, eb, `${IP_A}/24`, MAC_A, { gateway: IP_B }),
        ...(withY ? [pipeInterface(`lpy${n}`, `lpnobody${n}`, `${IP_Y}/24`, MAC_Y)] : []),
      ],
      neighbors: [{ interface: ea, address: IP_B, mac: MAC_B }],
    }),
  );
  const b = await Dataplane.create(
    baseConfig({
      interfaces: [pipeInterface(eb, ea, `${IP_B}/24`, MAC_B)],
      neighbors: [{ interface: eb, address: IP_A, mac: MAC_A }],
    }),
  );
  return {
    a,
    b,
    async close() {
      await a.close();
      await b.close();
    },
  };
}

/**
 * The drivers' counts once the links are up and their gratuitous ARPs went by (each data plane
 * looks at its links every 200 ms): the same at two looks 300 ms apart.
 */
async function settled(dp: DataplaneApi): Promise<number> {
  let last = -1;
  for (let i = 0; i < 50; i++) {
    const now = await wire(dp);
    if (now === last) return now;
    last = now;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`the interfaces of a data plane never went quiet (${last} packets)`);
}

async function noBufferLost(dp: DataplaneApi): Promise<void> {
  const until = Date.now() + 3000;
  let st = await dp.buffers();
  while (st.count !== st.free && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 20));
    st = await dp.buffers();
  }
  assert.is(st.count - st.free, 0, 'no buffer lost');
}

test('two QPs on one interface (one address) connected to each other: every operation each way, none through the driver', async () => {
  const r = await rig(false);
  try {
    const { a, b } = r;
    const itf = (await a.interfaces())[0].name;
    const wireA = await settled(a),
      wireB = await settled(b);
    const x = await side(a, itf, IP_A),
      y = await side(a, itf, IP_A);
    await join(x, y);
    await bothWays(x, y, 1);
    assert.is(await wire(a), wireA, "nothing went through A's driver");
    assert.is(await wire(b), wireB, 'the peer on the wire received nothing');
    assert.ok((await vectors(a, 'ip4-loopback')).main > 2000, 'show runtime: ip4-loopback took the frames');
    assert.ok((await errorCount(a, 'ip4-loopback', /^frames to a local address/)) > 2000);
    assert.is((await a.neighbors()).filter((n) => n.address === IP_A).length, 0, 'no ARP for our own address');
  } finally {
    await r.close();
  }
});

test('the connection manager and ping on our own address; a QP connected to itself', async () => {
  const r = await rig(false);
  try {
    const { a } = r;
    const itf = (await a.interfaces())[0].name;
    const wireA = await settled(a);
    // ping: the echo request and its reply both loop back.
    const p = await a.ping({ address: IP_A, count: 3, intervalMs: 10, timeoutMs: 2000 });
    assert.equal([p.sent, p.received], [3, 3], 'ping of our own address');
    // CM: a listener and a QP of the same data plane, one address.
    const pd = await a.createPd({ interface: itf });
    const cq = await a.createCq({ depth: 64, interface: itf });
    const mr = await a.createMr({ pd: pd.pd, length: 4096, access: ['local-write'] });
    const used = new Set((await a.qps()).map((q) => q.qpn));
    let port = 21000;
    while (used.has(port)) port++;
    await a.listen({ port, pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, maxSendWr: 16, maxRecvWr: 16, interface: itf });
    const y = await side(a, itf, IP_A);
    const c = await a.connect(y.qp.qpn, { remote: { ip: IP_A, port }, mode: 'cm', privateData: new Uint8Array([7]) });
    assert.is(c.state, 'rts');
    const [l] = (await a.listenersList()).filter((x) => x.port === port);
    assert.is(l.accepted.length, 1);
    const qpn = l.accepted[0];
    await a.postRecv(qpn, { wrId: 'cm', sge: [{ mr: mr.mr, offset: 0, length: 4096 }] });
    await a.writeMr(y.mr.mr, 0, pattern(777, 4));
    await a.postSend(y.qp.qpn, { wrId: 'cm', opcode: 'send', sge: [{ mr: y.mr.mr, offset: 0, length: 777 }] });
    assert.is((await take(y, 1))[0].status, 'success');
    const rc = (await a.pollCq(cq.cq, 4, 5000)).completions;
    assert.equal(
      rc.map((x) => [x.wrId, x.qpn, x.byteLen, x.status]),
      [['cm', qpn, 777, 'success']],
    );
    assert.equal(await a.readMr(mr.mr, 0, 777), pattern(777, 4));
    await a.unlisten(port);
    // A QP whose peer is itself (its own address and QP number), as a NIC allows.
    const s = await side(a, itf, IP_A);
    await a.connect(s.qp.qpn, { remote: { ip: IP_A, port: s.qp.qpn }, mode: 'manual', remotePsn: s.qp.psn });
    await a.postRecv(s.qp.qpn, { wrId: 'self', sge: [{ mr: s.mr.mr, offset: 8192, length: 100 }] });
    await a.writeMr(s.mr.mr, 0, pattern(100, 5));
    await a.postSend(s.qp.qpn, { wrId: 1, opcode: 'send', sge: [{ mr: s.mr.mr, offset: 0, length: 100 }] });
    const both = await take(s, 2);
    assert.equal(both.map((x) => [x.wrId, x.opcode, x.status]).sort(), [
      [1, 'send', 'success'],
      ['self', 'recv', 'success'],
    ]);
    assert.equal(await a.readMr(s.mr.mr, 8192, 100), pattern(100, 5));
    assert.is(await wire(a), wireA, 'none of it went through the driver');
    await noBufferLost(a);
  } finally {
    await r.close();
  }
});

test('a QP on interface X connected to a QP on interface Y of the same data plane: every operation each way', async () => {
  const r = await rig(true);
  try {
    const { a, b } = r;
    const [X, Y] = (await a.interfaces()).map((i) => i.name);
    const wireA = await settled(a),
      wireB = await settled(b);
    const x = await side(a, X, IP_A),
      y = await side(a, Y, IP_Y);
    await join(x, y);
    await bothWays(x, y, 2);
    assert.is(await wire(a), wireA, "nothing went through A's drivers");
    assert.is(await wire(b), wireB, 'nothing reached the gateway');
    assert.equal(
      (await a.neighbors()).filter((n) => n.address === IP_A || n.address === IP_Y),
      [],
      'no ARP for our own addresses',
    );
  } finally {
    await r.close();
  }
});

/** A with cpu.workers: 2 and two memif interfaces nobody connects to: m0 on worker 0 (IP_A), m1 on worker 1 (IP_Y). */
function twoWorkers(): Promise<DataplaneApi> {
  const n = ++runs;
  const config: Config = baseConfig({
    cpu: cpuWith(2),
    interfaces: [
      memifIf('m0', `@rg-loop-${process.pid}-${n}-0`, 'server', IP_A, MAC_A, 0),
      memifIf('m1', `@rg-loop-${process.pid}-${n}-1`, 'server', IP_Y, MAC_Y, 1),
    ],
  });
  return createDataplane(config);
}

test('cpu.workers: 2, the two QPs on different workers (X on worker 0 with Y on worker 1, and both on X): every operation each way through the handoff queues', async () => {
  const a = await twoWorkers();
  try {
    for (const [k, [itfX, itfY, ipY]] of [
      ['m0', 'm1', IP_Y],
      ['m0', 'm0', IP_A],
    ].entries()) {
      const before = await handed(a);
      const x = await side(a, itfX, IP_A, 0),
        y = await side(a, itfY, ipY, 1);
      assert.ok(x.pd.pd < 1 << 24 && y.pd.pd >= 1 << 24, 'x on worker 0, y on worker 1');
      await join(x, y);
      await bothWays(x, y, 10 + k);
      const after = await handed(a);
      assert.ok(after[0] - before[0] > 1000 && after[1] - before[1] > 1000, `both workers handed frames: ${after}`);
    }
    assert.is(await wire(a), 0, 'nothing went through a driver');
    const v = await vectors(a, 'ip4-loopback');
    assert.ok(v.rdma_wk_0 > 1000 && v.rdma_wk_1 > 1000, `ip4-loopback ran on both workers: ${JSON.stringify(v)}`);
    assert.is(await errorCount(a, 'worker-handoff', /full|longer/), 0, 'no frame dropped at a queue');
  } finally {
    await a.close();
  }
});

test.run();
