/**
 * Clock.tickNs: the time node code reads (trp-input, trp-output, ddp-output), derived from the
 * cycle counter the dispatch loop reads at every node dispatch instead of a clock read per
 * packet; kept on the monotonic clock.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { systemClock, nowNs } from '../graph/clock.ts';
import { setTimeout as sleep } from 'node:timers/promises';

test('tickNs: the time of the last tick, read from no clock; follows the monotonic clock across rebases', async () => {
  const c = systemClock();
  // The rate is measured from the first tickNs on, over 5 ms; until then every call reads the clock.
  c.tick();
  c.tickNs();
  await sleep(10);
  c.tick();
  c.tickNs();
  // Without a tick the time stays where the last tick put it: nothing is read.
  const a = c.tickNs();
  await sleep(3);
  assert.is(c.tickNs(), a, 'no tick, no change (3 ms later)');
  // Ticking for 30 ms (30 rebases' worth): between the monotonic clock read before the tick and
  // the one after (50 us either way: a thread in a VM stops for milliseconds, so a bare
  // difference of two reads proves nothing), and never backwards.
  let last = 0,
    steps = 0,
    out = 0,
    say = '';
  const end = nowNs() + 30e6;
  for (;;) {
    const before = nowNs();
    c.tick();
    const t = c.tickNs();
    const after = nowNs();
    if (t < last) assert.unreachable(`tickNs went backwards: ${t} after ${last}`);
    last = t;
    if (t < before - 50_000 || t > after + 50_000) {
      out++;
      say = `${(t - before).toFixed(0)} ns after the read before, ${(after - t).toFixed(0)} before the read after`;
    }
    steps++;
    if (after >= end) break;
  }
  assert.ok(steps > 100, `ticked ${steps} times`);
  assert.is(out, 0, `${out} of ${steps} outside the reads around them, e.g. ${say}`);
  // A stretch of more than a millisecond between ticks (the loop slept): rebased, not extrapolated stale.
  await sleep(5);
  const before = nowNs();
  c.tick();
  const t = c.tickNs(),
    after = nowNs();
  assert.ok(t >= before - 50_000 && t <= after + 50_000, `after a 5 ms gap: ${t - before} ns after the read before`);
});

test.run();
