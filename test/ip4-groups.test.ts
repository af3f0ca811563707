/**
 * nodes/net/ip4-groups.ts's shared counts (cpu.workers >= 2): each worker keeps the number of
 * groups its interfaces joined in its slot of one Int32Array, which worker-handoff and
 * ip4-rewrite's loopback copy (joinedElsewhere) read.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Ip4Groups } from '../nodes/net/ip4-groups.ts';

const G1 = 0xef050505, // 239.5.5.5
  G2 = 0xef060606;

test('shareCounts: the slot counts groups joined (first user) and left (last user); joinedElsewhere reads the other slots only', () => {
  const counts = new Int32Array(3);
  counts[1] = 7; // stale: the slot starts at 0
  const a = new Ip4Groups(2);
  assert.is(a.joinedElsewhere(), false, 'no shared counts yet');
  a.shareCounts(counts, 1);
  assert.is(counts[1], 0);
  a.join(0, G1, 'i0');
  a.join(0, G1, 'i0'); // a second user: no new group
  a.join(1, G2, 'i1');
  assert.is(counts[1], 2);
  assert.is(a.joinedElsewhere(), false, "this worker's own groups are not elsewhere");
  counts[2] = 1;
  assert.is(a.joinedElsewhere(), true);
  a.leave(0, G1);
  assert.is(counts[1], 2, 'one user of G1 left');
  a.leave(0, G1);
  a.leave(1, G2);
  assert.is(counts[1], 0);
  counts[2] = 0;
  assert.is(a.joinedElsewhere(), false);
});

test('shareCounts: a join a later watcher refuses is not counted; a slot outside the array is refused', () => {
  const counts = new Int32Array(2);
  const a = new Ip4Groups(1);
  a.shareCounts(counts, 0);
  a.watch(() => {
    throw new Error('the device refuses');
  });
  assert.throws(() => a.join(0, G1, 'i0'), /refuses/);
  assert.is(counts[0], 0);
  assert.throws(() => new Ip4Groups(1).shareCounts(counts, 2), /no slot/);
});
test.run();
