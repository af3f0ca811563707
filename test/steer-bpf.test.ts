/**
 * drivers/steer-bpf.ts: the socket filters that split an af_packet interface between workers by
 * UDP destination port, run by runBpf (the kernel's semantics for the instructions used) on the
 * hand-built frames of test/steer-bpf-cases.ts; test/steer-bpf-kernel.test.ts has the kernel run
 * the same programs on the same frames, test/worker-af-packet.test.ts runs them in a data plane.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { acceptPorts, flatten, rejectPorts, runBpf } from '../drivers/steer-bpf.ts';
import { CASES, PROGRAMS, expected } from './steer-bpf-cases.ts';

const program = (name: string) => {
  const p = PROGRAMS.find((x) => x.name === name);
  if (p === undefined) throw new Error(`no program "${name}"`);
  return p;
};
const verdicts = (name: string, pick: (c: (typeof CASES)[number]) => boolean) => {
  const p = program(name);
  return CASES.filter(pick).map((c) => [c.name, runBpf(p.prog, c.seen ?? c.frame) > 0]);
};

test('every program on every frame of the table: taken exactly where the table says, whole', () => {
  let n = 0;
  for (const p of PROGRAMS)
    for (const c of CASES) {
      const snap = runBpf(p.prog, c.seen ?? c.frame);
      assert.is(snap > 0, expected(p, c), `${p.name}: ${c.name}`);
      if (snap > 0) assert.is(snap, 0x40000, `${p.name}: ${c.name}: the whole frame`);
      n++;
    }
  assert.ok(n >= 8 * 50, `${n} verdicts`);
});

test("a worker's filter takes exactly the UDP datagrams of its QP numbers; the owner's the rest", () => {
  const ports = (c: (typeof CASES)[number]) => c.name.startsWith('UDP to port ');
  assert.equal(
    verdicts('worker 1 of 2', (c) => ports(c) && [24999, 25000, 27000, 29999, 30000, 7].includes(c.dport as number)),
    [
      ['UDP to port 7', false],
      ['UDP to port 24999', false],
      ['UDP to port 25000', true],
      ['UDP to port 27000', true],
      ['UDP to port 29999', true],
      ['UDP to port 30000', false],
    ],
  );
  assert.equal(
    verdicts('owner of 2', (c) => ports(c) && [24999, 25000, 29999, 30000].includes(c.dport as number)),
    [
      ['UDP to port 24999', true],
      ['UDP to port 25000', false],
      ['UDP to port 29999', false],
      ['UDP to port 30000', true],
    ],
  );
});

test('IPv4 options are stepped over; later fragments, ARP, TCP, non-IPv4 go to the owner; cut IPv4 frames to nobody', () => {
  const names = [
    'IHL 7 (8 bytes of options), port 26000',
    'a first fragment (MF, offset 0), port 26000',
    'a later fragment (offset 16)',
    'ARP request',
    'TCP to port 26000',
    'UDP to 26000 cut to 30 bytes',
  ];
  const pick = (c: (typeof CASES)[number]) => names.includes(c.name);
  assert.equal(verdicts('worker 1 of 2', pick), [
    [names[0], true],
    [names[1], true],
    [names[2], false],
    [names[3], false],
    [names[4], false],
    [names[5], false],
  ]);
  assert.equal(verdicts('owner of 2', pick), [
    [names[0], false],
    [names[1], false],
    [names[2], true],
    [names[3], true],
    [names[4], true],
    [names[5], false],
  ]);
});

test('several ranges, and bad ranges refused', () => {
  const ports = [99, 100, 199, 200, 299, 300, 399, 400];
  assert.equal(
    verdicts('two ranges', (c) => c.name.startsWith('UDP to port ') && ports.includes(c.dport as number)).map(
      (v) => v[1],
    ),
    [false, true, true, false, false, true, true, false],
  );
  const p = program('two ranges').prog;
  assert.is(flatten(p).length, 4 * p.length);
  assert.equal(Array.from(flatten(p).subarray(4, 8)), [p[1].code, p[1].jt, p[1].jf, p[1].k]);
  assert.throws(() => acceptPorts([]), /1 to 64 port ranges/);
  assert.throws(() => acceptPorts(Array.from({ length: 65 }, () => [1, 2] as [number, number])), /1 to 64/);
  assert.throws(() => acceptPorts([[5, 4]]), /lo <= hi/);
  assert.throws(() => rejectPorts([[0, 70000]]), /0\.\.65535/);
});

test('the table: frames all different (the kernel test tells them apart by their bytes)', () => {
  const seen = new Map<string, string>();
  for (const c of CASES) {
    const hex = Buffer.from(c.frame).toString('hex');
    assert.is(seen.get(hex), undefined, `${c.name} is the same frame as ${seen.get(hex)}`);
    seen.set(hex, c.name);
    assert.ok(c.frame.length >= 14, `${c.name}: an Ethernet header at least`);
  }
});

test.run();
