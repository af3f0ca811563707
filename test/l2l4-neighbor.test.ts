import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { formatTrace } from '../graph/index.ts';
import { NeighborTable } from '../nodes/ethernet/neighbor.ts';
import { parseIp4 as ipNum } from '../nodes/net/address.ts';
import {
  arp,
  arpReplyFrame,
  arpRequestFrame,
  BCAST,
  eth,
  hex,
  makeStack,
  manualClock,
  parseArp,
  parseEth,
  parseIp4,
  parseUdp,
  PEER_IP,
  PEER_MAC,
  udpFrame,
  US_IP,
  US_MAC,
} from './l2l4-helpers.ts';

const SEC = 1e9;
const FAR = '10.0.0.3';
const FAR_MAC = '02:00:00:00:00:03';

function expectArpRequest(f: Uint8Array, target: string) {
  assert.is(
    hex(f),
    hex(eth(BCAST, US_MAC, 0x0806, arp({ op: 1, sha: US_MAC, spa: US_IP, tpa: target }))),
    `ARP request for ${target}`,
  );
}

test('unresolved neighbor: ARP request out, datagrams held; the reply releases them in order', () => {
  const clock = manualClock();
  const s = makeStack({ clock });
  for (let k = 0; k < 3; k++) s.net.udp.sendTo(Uint8Array.of(k, k, k), FAR, 9000, 8000 + k);
  const out = s.run();
  assert.is(out.length, 1, 'only the ARP request: one per neighbor, not one per packet');
  expectArpRequest(out[0], FAR);
  assert.is(s.err('ip4-rewrite', 'held'), 3);
  assert.equal(s.net.neighbors.get(s.itf.index, FAR), {
    interface: s.itf.index,
    address: FAR,
    mac: null,
    state: 'incomplete',
    age: 0,
    held: 3,
  });
  clock.advance(0.2 * SEC);
  const rel = s.run(arpReplyFrame(FAR, FAR_MAC));
  assert.is(rel.length, 3);
  rel.forEach((f, k) => {
    const e = parseEth(f);
    assert.equal([e.dst, e.src], [FAR_MAC, US_MAC]);
    const p = parseIp4(e.payload);
    assert.ok(p.checksumOk);
    const u = parseUdp(p);
    assert.ok(u.checksumOk);
    assert.equal([p.dst, u.sport, Array.from(u.payload)], [FAR, 8000 + k, [k, k, k]]);
  });
  assert.is(s.net.neighbors.get(s.itf.index, FAR)?.state, 'reachable');
  // Later traffic goes straight out.
  s.net.udp.sendTo(Uint8Array.of(9), FAR, 9000, 8000);
  assert.is(s.run().length, 1);
  assert.is(s.err('arp-input', 'requests_sent'), 1);
  assert.is(s.pool.available(), s.pool.count);
});

test('the echo service answers an unknown peer after resolving it (request -> held -> reply -> sent)', () => {
  const s = makeStack();
  s.net.udp.bind(7, 'udp-echo');
  const out = s.run(udpFrame({ payload: [1, 2, 3] }));
  assert.is(out.length, 1);
  expectArpRequest(out[0], PEER_IP);
  const o2 = s.run(arpReplyFrame(PEER_IP, PEER_MAC));
  assert.is(o2.length, 1);
  assert.equal(Array.from(parseUdp(parseIp4(parseEth(o2[0]).payload)).payload), [1, 2, 3]);
  assert.is(s.inputs, 2);
  assert.is(s.drops(), 1, 'the consumed ARP reply');
});

test('no reply: requests every retransmit interval (rate limit), then held packets dropped and counted', () => {
  const clock = manualClock();
  const s = makeStack({ clock, neighbor: { retransmitMs: 1000, maxProbes: 3, holdMax: 4 } });
  for (let k = 0; k < 6; k++) s.net.udp.sendTo(Uint8Array.of(k), FAR, 9, 9);
  let out = s.run();
  assert.is(out.length, 1);
  assert.is(s.err('ip4-rewrite', 'held'), 4);
  assert.is(s.err('ip4-rewrite', 'hold_queue_full'), 2);
  // More packets within the interval: no new request.
  clock.advance(0.5 * SEC);
  s.net.udp.sendTo(Uint8Array.of(9), FAR, 9, 9);
  assert.is(s.run().length, 0);
  assert.is(s.err('ip4-rewrite', 'hold_queue_full'), 3);
  clock.advance(0.5 * SEC);
  out = s.run();
  assert.is(out.length, 1, 'second request after 1 s');
  expectArpRequest(out[0], FAR);
  clock.advance(1 * SEC);
  assert.is(s.run().length, 1, 'third request after 2 s');
  clock.advance(0.9 * SEC);
  assert.is(s.run().length, 0);
  assert.is(s.net.neighbors.get(s.itf.index, FAR)?.held, 4, 'still held just before the timeout');
  clock.advance(0.1 * SEC);
  assert.is(s.run().length, 0);
  assert.is(s.err('arp-input', 'resolution_failed'), 4, 'held packets dropped at 3 s');
  assert.is(s.err('arp-input', 'requests_sent'), 3);
  assert.is(s.net.neighbors.get(s.itf.index, FAR), null, 'the incomplete entry is gone');
  // 7 datagrams + 3 requests: 3 requests out, 3 dropped as hold-full, 4 as no reply.
  assert.is(s.drops(), 7);
  assert.is(s.pool.available(), s.pool.count);
});

test('closing the graph returns packets still held for an unresolved neighbor to the pool', () => {
  const s = makeStack({ neighbor: { holdMax: 4 } });
  for (let k = 0; k < 3; k++) s.net.udp.sendTo(Uint8Array.of(k), FAR, 9, 9);
  assert.is(s.run().length, 1, 'the ARP request');
  assert.is(s.net.neighbors.get(s.itf.index, FAR)?.held, 3);
  assert.is(s.pool.count - s.pool.available(), 3, 'the held datagrams are out of the pool');
  s.g.close();
  assert.is(s.pool.available(), s.pool.count);
});

test('aging: an unused entry is deleted after ageSec; a used one is re-probed and kept if it answers', () => {
  const clock = manualClock();
  const s = makeStack({ clock, neighbor: { ageSec: 60, retransmitMs: 1000, maxProbes: 2 } });
  s.run(arpRequestFrame(PEER_IP, US_IP), arpReplyFrame(FAR, FAR_MAC));
  assert.is(s.net.neighbors.entries().length, 2);
  clock.advance(30 * SEC);
  // FAR is confirmed again half way: its age restarts.
  s.run(arpReplyFrame(FAR, FAR_MAC));
  clock.advance(30 * SEC);
  assert.equal(s.run(), []);
  assert.is(s.net.neighbors.get(s.itf.index, PEER_IP), null, 'PEER aged out (unused, unconfirmed for 60 s)');
  assert.is(s.err('arp-input', 'aged'), 1);
  assert.is(s.net.neighbors.get(s.itf.index, FAR)?.state, 'reachable');
  // FAR is used to transmit, then reaches its age: it is probed, not dropped.
  s.net.udp.sendTo(Uint8Array.of(1), FAR, 9, 9);
  assert.is(s.run().length, 1);
  clock.advance(30 * SEC);
  const probe = s.run();
  assert.is(probe.length, 1);
  expectArpRequest(probe[0], FAR);
  assert.is(s.net.neighbors.get(s.itf.index, FAR)?.state, 'probe');
  s.net.udp.sendTo(Uint8Array.of(2), FAR, 9, 9);
  assert.is(s.run().length, 1, 'a probed entry is still used');
  s.run(arpReplyFrame(FAR, FAR_MAC));
  assert.is(s.net.neighbors.get(s.itf.index, FAR)?.state, 'reachable', 'the answer confirms it');
  // Used again but silent now: probed maxProbes times, then deleted.
  s.net.udp.sendTo(Uint8Array.of(3), FAR, 9, 9);
  s.run();
  clock.advance(60 * SEC);
  assert.is(s.run().length, 1);
  clock.advance(1 * SEC);
  assert.is(s.run().length, 1);
  clock.advance(1 * SEC);
  s.run();
  assert.is(s.net.neighbors.get(s.itf.index, FAR), null);
  assert.is(s.err('arp-input', 'aged'), 2);
  assert.is(s.pool.available(), s.pool.count);
});

test('size bound: past maxDynamic the oldest dynamic entry is evicted; static entries stay', () => {
  const clock = manualClock();
  const s = makeStack({
    clock,
    neighbor: { maxDynamic: 4 },
    neighbors: [{ address: '10.0.0.200', mac: '02:00:00:00:00:c8' }],
  });
  for (let k = 10; k < 16; k++) {
    s.run(arpReplyFrame(`10.0.0.${k}`, `02:00:00:00:01:${k.toString(16).padStart(2, '0')}`));
    clock.advance(1 * SEC);
  }
  const addrs = s.net.neighbors.entries().map((e) => `${e.address} ${e.state}`);
  assert.equal(addrs, [
    '10.0.0.12 reachable',
    '10.0.0.13 reachable',
    '10.0.0.14 reachable',
    '10.0.0.15 reachable',
    '10.0.0.200 static',
  ]);
  assert.is(s.err('arp-input', 'evicted'), 2);
  // Refreshing 10.0.0.12 makes 10.0.0.13 the oldest.
  s.run(arpReplyFrame('10.0.0.12', '02:00:00:00:01:0c'));
  clock.advance(1 * SEC);
  s.run(arpReplyFrame('10.0.0.16', '02:00:00:00:01:10'));
  assert.equal(
    s.net.neighbors.entries().map((e) => e.address),
    ['10.0.0.12', '10.0.0.14', '10.0.0.15', '10.0.0.16', '10.0.0.200'],
  );
  // An incomplete entry with held packets evicted: the packets are dropped and counted.
  const t = makeStack({ clock, neighbor: { maxDynamic: 1 } });
  t.net.udp.sendTo(Uint8Array.of(1), FAR, 9, 9);
  t.run();
  clock.advance(SEC / 10);
  t.run(arpReplyFrame('10.0.0.50', OTHER));
  assert.is(t.err('arp-input', 'evicted_held'), 1);
  assert.is(t.pool.available(), t.pool.count);
});
const OTHER = '02:00:00:00:00:50';

test('a static neighbor added while packets wait releases them', () => {
  const s = makeStack();
  s.net.udp.sendTo(Uint8Array.of(1, 2), FAR, 9, 9);
  assert.is(s.run().length, 1); // the ARP request
  s.net.neighbors.addStatic(s.itf.index, FAR, FAR_MAC);
  const out = s.run();
  assert.is(out.length, 1);
  assert.is(parseEth(out[0]).dst, FAR_MAC);
  assert.ok(s.net.neighbors.delete(s.itf.index, FAR));
  assert.not.ok(s.net.neighbors.delete(s.itf.index, FAR));
  assert.is(s.pool.available(), s.pool.count);
});

test('flush: learned and incomplete entries go (held packets dropped and counted), static ones stay', () => {
  const s = makeStack({ neighbors: [{ address: '10.0.0.200', mac: '02:00:00:00:00:c8' }] });
  s.run(arpRequestFrame(PEER_IP, US_IP));
  s.net.udp.sendTo(Uint8Array.of(1), FAR, 9, 9);
  s.net.udp.sendTo(Uint8Array.of(2), FAR, 9, 9);
  s.run();
  assert.is(s.net.neighbors.entries().length, 3);
  assert.is(s.net.neighbors.flush(), 2);
  s.run();
  assert.equal(
    s.net.neighbors.entries().map((e) => `${e.address} ${e.state}`),
    ['10.0.0.200 static'],
  );
  assert.is(s.err('arp-input', 'evicted_held'), 2);
  assert.is(s.pool.available(), s.pool.count, 'nothing stays held after a flush');
});

test('neighbor hash: random inserts and deletes agree with a Map (backward-shift deletion)', () => {
  const s = makeStack({ clock: manualClock(), neighbor: { capacity: 64, maxDynamic: 64 } });
  const nt: NeighborTable = s.net.neighbors;
  const ref = new Map<number, boolean>();
  let seed = 7;
  const rnd = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8) % n;
  for (let step = 0; step < 3000; step++) {
    const a = 0x0a000000 + 2 + rnd(100);
    if (rnd(3) === 0) {
      assert.is(nt.delete(s.itf.index, a), ref.delete(a));
    } else if (!ref.has(a) && ref.size < 60) {
      nt.addStatic(s.itf.index, a, '02:00:00:00:00:77');
      ref.set(a, true);
    }
    if (step % 100 === 0)
      for (let x = 2; x < 102; x++) assert.is(nt.lookup(s.itf.index, 0x0a000000 + x) >= 0, ref.has(0x0a000000 + x));
  }
  assert.is(nt.size, ref.size);
  assert.is(nt.lookup(s.itf.index, ipNum('10.0.0.1')) >= 0, false);
});

test('show trace: a held packet says what it waits for', () => {
  const s = makeStack();
  s.g.traceAdd('udp4-send', 1);
  s.net.udp.sendTo(Uint8Array.of(1), FAR, 9, 9);
  s.run();
  const text = formatTrace([s.g.traceSnapshot()]);
  assert.match(text, 'datagram of 1 bytes from the UDP API');
  assert.match(text, `held awaiting ARP for ${FAR} on tst0 (1 held)`);
  const r = parseArp(parseEth(s.drv.tx[0]).payload);
  assert.is(r.tpa, FAR);
});

test.run();
