/**
 * drivers/steer-bpf.ts: the socket filters that split an af_packet interface between workers by
 * UDP destination port, run by runBpf (the kernel's semantics for the instructions used) on
 * hand-built frames; test/worker-af-packet.test.ts has the kernel run them.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { acceptPorts, flatten, rejectPorts, runBpf } from '../drivers/steer-bpf.ts';
import { arp, eth, ip4, udpFrame } from './l2l4-helpers.ts';

const u = (port: number, ip: object = {}) => Uint8Array.from(udpFrame({ dport: port, payload: [1, 2, 3, 4], ip }));
const w1 = acceptPorts([[25000, 29999]]);
const w0 = rejectPorts([[25000, 29999]]);

test("a worker's filter takes exactly the UDP datagrams of its QP numbers; the owner's the rest", () => {
  for (const [port, mine] of [
    [24999, false],
    [25000, true],
    [27000, true],
    [29999, true],
    [30000, false],
    [7, false],
  ] as const) {
    assert.is(runBpf(w1, u(port)) > 0, mine, `worker 1, port ${port}`);
    assert.is(runBpf(w0, u(port)) > 0, !mine, `owner, port ${port}`);
  }
});

test('IPv4 options are stepped over; later fragments, ARP, TCP, non-IPv4 and cut frames go to the owner', () => {
  assert.ok(
    runBpf(w1, u(26000, { options: [1, 1, 1, 0, 0x94, 4, 0, 0] })) > 0,
    'IHL 7: the port is found past the options',
  );
  assert.is(runBpf(w1, u(26000, { frag: 0x2000 })) > 0, true, 'a first fragment (MF, offset 0) has the UDP header');
  const later = u(26000, { frag: 0x0010 });
  assert.is(runBpf(w1, later), 0, 'a later fragment has no UDP header');
  assert.ok(runBpf(w0, later) > 0);
  const a = Uint8Array.from(
    eth(
      'ff:ff:ff:ff:ff:ff',
      '02:00:00:00:00:02',
      0x0806,
      arp({ op: 1, sha: '02:00:00:00:00:02', spa: '10.0.0.2', tha: '00:00:00:00:00:00', tpa: '10.0.0.1' }),
    ),
  );
  assert.is(runBpf(w1, a), 0);
  assert.ok(runBpf(w0, a) > 0, "ARP is the owner's");
  const tcp = Uint8Array.from(
    eth(
      '02:00:00:00:00:01',
      '02:00:00:00:00:02',
      0x0800,
      ip4({ src: '10.0.0.2', dst: '10.0.0.1', proto: 6, payload: [0x61, 0xa8, 0x65, 0x90, 0, 0, 0, 0] }),
    ),
  );
  assert.is(runBpf(w1, tcp), 0, 'TCP to port 26000 is not a QP');
  assert.is(runBpf(w1, u(26000).subarray(0, 30)), 0, 'a cut frame is dropped by this filter');
});

test('several ranges, and bad ranges refused', () => {
  const p = acceptPorts([
    [100, 199],
    [300, 399],
  ]);
  assert.equal(
    [99, 100, 199, 200, 299, 300, 399, 400].map((x) => runBpf(p, u(x)) > 0),
    [false, true, true, false, false, true, true, false],
  );
  assert.is(flatten(p).length, 4 * p.length);
  assert.throws(() => acceptPorts([]), /1 to 64 port ranges/);
  assert.throws(() => acceptPorts([[5, 4]]), /lo <= hi/);
  assert.throws(() => rejectPorts([[0, 70000]]), /0\.\.65535/);
});

test.run();
