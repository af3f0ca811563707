import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { TimerWheel } from '../graph/timer-wheel.ts';

const T = 100_000; // 100 µs tick

function collect(w: TimerWheel, now: number): [number, number][] {
  const out: [number, number][] = [];
  w.advance(now, (o, u) => out.push([o, u]));
  return out;
}

test('timers expire at their tick, in order, not before', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 16 });
  w.start(0, 3 * T, 1, 30);
  w.start(0, 1 * T, 1, 10);
  w.start(0, 2 * T, 2, 20);
  assert.equal(collect(w, 0.5 * T), []);
  assert.equal(collect(w, 1 * T), [[1, 10]]);
  assert.equal(collect(w, 3 * T), [
    [2, 20],
    [1, 30],
  ]);
  assert.is(w.size, 0);
});

test('delays are rounded up to whole ticks and never fire in the current tick', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 16 });
  w.start(0.7 * T, 0, 0, 1); // due now: still the next tick
  w.start(0.7 * T, 0.4 * T, 0, 2); // 1.1 ticks -> tick 2
  assert.equal(collect(w, 0.9 * T), []);
  assert.equal(collect(w, 1.0 * T), [[0, 1]]);
  assert.equal(collect(w, 1.9 * T), []);
  assert.equal(collect(w, 2.0 * T), [[0, 2]]);
});

test('timers beyond one rotation wait for their round', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 8 });
  w.start(0, 20 * T, 0, 20); // 2.5 rotations away, same slot as tick 4 and 12
  w.start(0, 4 * T, 0, 4);
  assert.equal(collect(w, 4 * T), [[0, 4]]);
  assert.equal(collect(w, 12 * T), []);
  assert.equal(collect(w, 19 * T), []);
  assert.equal(collect(w, 20 * T), [[0, 20]]);
});

test('a jump of many rotations fires everything due exactly once', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 8 });
  for (let i = 1; i <= 50; i++) w.start(0, i * T, 0, i);
  const got = collect(w, 1000 * T)
    .map(([, u]) => u)
    .sort((a, b) => a - b);
  assert.equal(
    got,
    Array.from({ length: 50 }, (_, i) => i + 1),
  );
  assert.is(w.size, 0);
});

test('stop: O(1) unlink from the middle of a slot list; stale handles are harmless', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 4 });
  const a = w.start(0, T, 0, 1);
  const b = w.start(0, T, 0, 2);
  const c = w.start(0, T, 0, 3);
  assert.ok(w.stop(b));
  assert.ok(w.isRunning(a) && !w.isRunning(b) && w.isRunning(c));
  assert.equal(
    collect(w, T)
      .map(([, u]) => u)
      .sort(),
    [1, 3],
  );
  assert.not.ok(w.stop(a), 'already expired');
  // The slot of a is reused by a new timer: the old handle must not stop it.
  const d = w.start(T, T, 0, 4);
  assert.not.ok(w.stop(a));
  assert.ok(w.isRunning(d));
});

test('timers started from the expiry callback', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 8 });
  w.start(0, T, 0, 1);
  const seen: number[] = [];
  w.advance(5 * T, (_o, u) => {
    seen.push(u);
    if (u < 3) w.start(T * u, T, 0, u + 1);
  });
  assert.equal(seen, [1, 2, 3], 'restarted timers already due fire in the same advance');
});

test('nextDueNs reports the earliest timer, -1 when none', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 8 });
  assert.is(w.nextDueNs(), -1);
  w.start(0, 30 * T, 0, 1); // beyond a rotation: reported no later than one rotation
  assert.is(w.nextDueNs(), 8 * T);
  w.start(0, 5 * T, 0, 2);
  w.start(0, 3 * T, 0, 3);
  assert.is(w.nextDueNs(), 3 * T);
});

test('capacity grows beyond the initial size', () => {
  const w = new TimerWheel(0, { tickNs: T, slots: 64, capacity: 4 });
  for (let i = 0; i < 1000; i++) w.start(0, ((i % 50) + 1) * T, 0, i);
  assert.is(w.size, 1000);
  assert.is(collect(w, 100 * T).length, 1000);
});

test('bad arguments are refused', () => {
  assert.throws(() => new TimerWheel(0, { slots: 100 }), /power of two/);
  assert.throws(() => new TimerWheel(0, { tickNs: 0 }), /tick must be > 0/);
  const w = new TimerWheel(0);
  assert.throws(() => w.start(0, -1, 0, 0), /delay must be >= 0/);
});

test.run();
