/**
 * An af_packet interface received by two workers (cpu.workers 2, rx-queues 2): each worker's
 * AF_PACKET socket on the kernel interface carries a socket filter (drivers/steer-bpf.ts) so the
 * kernel hands worker 1 the datagrams of its QP numbers and worker 0 (the owner) everything else.
 * Data plane A on one end of a veth pair, B (one thread) on the other; QPs on both of A's workers
 * exchange SEND/WRITE/READ with B, data compared, and nothing is handed between A's workers.
 * Needs root (a veth pair); skipped with the reason otherwise, a failure with CI=true.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { parseConfig } from '../config/load.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { netnsUnavailable, vethPair } from './helpers-netns.ts';
import { sleep } from './helpers.ts';
import { connect, end, exchange, handed } from './workers-helpers.ts';

const why = netnsUnavailable();
const tag = process.pid.toString(36);
const VA = `rgwa${tag}`,
  VB = `rgwb${tag}`;

function side(name: string, dev: string, addr: string, workers: number, queues: number): string {
  return (
    `cpu: { workers: ${workers} }\ninterfaces:\n  - name: ${name}\n    driver: af_packet\n` +
    `    af_packet: { host-interface: ${dev} }\n    address: ${addr}/24\n    rx-queues: ${queues}\n`
  );
}

test("two workers on one kernel interface, split by UDP port: each gets its own QPs' datagrams, no handoff", async () => {
  if (why !== null) skip(`af_packet over workers: ${why}`);
  vethPair(VA, VB);
  let a: DataplaneApi | null = null,
    b: DataplaneApi | null = null;
  try {
    a = await createDataplane(parseConfig(side('h0', VA, '10.71.0.1', 2, 2), 'a.yaml'));
    b = await createDataplane(parseConfig(side('h1', VB, '10.71.0.2', 0, 1), 'b.yaml'));
    for (let i = 0; i < 200 && !(await a.interfaces()).every((x) => x.state === 'up'); i++) await sleep(20);
    await sleep(100); // past the gratuitous ARPs each side sends when its link comes up
    // rx-ring auto: TPACKET_V2 (no block timeout to wait out at every hop).
    const ring = (await b.hardware()).find((h) => h.name === 'h1')?.info['rx ring'];
    assert.match(String(ring), /^TPACKET_V2, .*no block timeout/, `B's ring: ${ring}`);
    const ca0 = (await a.interface('h0')).counters,
      cb0 = (await b.interface('h1')).counters;
    const before = (await a.runtime()).map((t) => t.rows.find((r) => r.name === 'af-packet-input')?.vectors ?? 0);
    for (const k of [0, 1]) {
      const x = await end(a, 'h0', k),
        y = await end(b, 'h1');
      assert.is(x.qp.qpn >= 25000, k === 1, `A's QP on worker ${k} (${x.qp.qpn})`);
      await connect(a, b, x, y, '10.71.0.1', '10.71.0.2');
      await exchange(a, b, x, y, k, 30000);
      // rdma.congestion auto: reno on an af_packet interface, on every worker.
      const view = (await a.qps()).find((q) => q.qpn === x.qp.qpn);
      assert.is(view?.congestion.algorithm, 'reno', `A's QP on worker ${k}: congestion control`);
      assert.ok((view?.congestion.cwnd ?? 0) >= 2, `A's QP on worker ${k}: a window`);
    }
    assert.equal(await handed(a), [0, 0], "the kernel gave each worker its own QPs' datagrams");
    const after = (await a.runtime()).map((t) => t.rows.find((r) => r.name === 'af-packet-input')?.vectors ?? 0);
    assert.ok(after[1] - before[1] > 10, `worker 1 received on its own socket: ${before} -> ${after}`);
    assert.ok(after[0] - before[0] > 10, `and worker 0 on its: ${before} -> ${after}`);
    // The interface's counters add both sockets up: what B sent since, A received, and back. The
    // last ACKs may still be on their way when the exchange returns, longer than 100 ms on a
    // loaded machine (the workers are other threads): then read until the counters stop moving.
    await sleep(100);
    let ca = (await a.interface('h0')).counters,
      cb = (await b.interface('h1')).counters;
    for (let i = 0; i < 200; i++) {
      await sleep(20);
      const na = (await a.interface('h0')).counters,
        nb = (await b.interface('h1')).counters;
      const still = JSON.stringify([na, nb]) === JSON.stringify([ca, cb]);
      ca = na;
      cb = nb;
      if (still) break;
    }
    const d = (x: typeof ca, y: typeof ca, k: 'rxPackets' | 'txPackets') => x[k] - y[k];
    assert.ok(d(ca, ca0, 'rxPackets') > 40, JSON.stringify(ca));
    assert.is(
      d(ca, ca0, 'rxPackets'),
      d(cb, cb0, 'txPackets'),
      `A received what B sent: ${JSON.stringify([ca0, ca, cb0, cb])}`,
    );
    assert.is(
      d(cb, cb0, 'rxPackets'),
      d(ca, ca0, 'txPackets'),
      `B received what A sent: ${JSON.stringify([ca0, ca, cb0, cb])}`,
    );
    const listed = (await a.interfaces()).find((x) => x.name === 'h0');
    assert.is(listed?.counters.rxPackets, ca.rxPackets, 'the list says the same');
    const ev = (await a.errors()).flatMap((t) => t.rows.filter((r) => r.node === 'worker-handoff'));
    assert.ok(
      ev.some((r) => r.reason === 'ARP copies sent to the other workers' && r.count > 0),
      `ARP reached the owner's socket only and was copied: ${JSON.stringify(ev)}`,
    );
  } finally {
    if (a !== null) await a.close();
    if (b !== null) await b.close();
    spawnSync('ip', ['link', 'del', VA], { stdio: 'ignore' });
  }
});

test('rx-queues 2 on an af_packet interface without workers is refused at start-up', () => {
  assert.throws(
    () => parseConfig(side('h0', 'eth9', '10.71.0.1', 0, 2), 'c.yaml'),
    /rx-queues: 2 on an af_packet interface with cpu.workers 0/,
  );
});

test.run();
