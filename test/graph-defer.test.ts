/**
 * Graph.defer (how completions reach the application) and the loop's timer check: callbacks run
 * when a turn's passes end, outside every node, and what they post goes out in one more pass of
 * the same turn; outside a turn they are microtasks; one that throws stops neither the others nor
 * the loop. The timer wheel is looked at once per tick of it while the loop polls, not per pass.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Graph } from '../graph/graph.ts';
import { systemClock, type Clock } from '../graph/clock.ts';
import { memPool } from './helpers.ts';

const turn = () => new Promise((r) => setImmediate(r));

/**
 * A polling graph with one input node that, when `posted` is set, takes it (the work a deferred
 * callback posted) and logs "sent" with the turn it went out in; `arm()` makes the next pass
 * defer `cb` from inside the node.
 */
function rig(spinUs = 50) {
  const g = new Graph({ pool: memPool(64), mode: 'polling', spinUs });
  const log: string[] = [];
  let turnNo = 0,
    armed: (() => void) | null = null,
    posted = false;
  g.register({
    name: 'rig-input',
    type: 'input',
    fn: () => {
      if (armed !== null) {
        const cb = armed;
        armed = null;
        log.push(`defer in node, turn ${turnNo}`);
        g.defer(cb);
        return 1;
      }
      if (posted) {
        posted = false;
        log.push(`sent, turn ${turnNo}`);
        return 1;
      }
      return 0;
    },
  });
  // Count event-loop turns from outside the graph (each of our immediates runs once per turn).
  let counting = true;
  const tick = () => {
    turnNo++;
    if (counting) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    g,
    log,
    arm: (cb: () => void) => {
      armed = cb;
      g.wake();
    },
    post: () => {
      posted = true;
      g.wake();
    },
    stop: () => {
      counting = false;
      g.close();
    },
  };
}

test("defer: the callback runs after the turn's passes, and what it posts goes out in that same turn", async () => {
  const r = rig();
  r.g.start();
  try {
    await turn();
    let ranIn = -1;
    r.arm(() => {
      ranIn = r.log.length;
      r.log.push('callback');
      r.post();
    });
    for (let i = 0; i < 20 && !r.log.some((l) => l.startsWith('sent')); i++) await turn();
    assert.ok(ranIn >= 1, `the callback ran: ${r.log.join(' | ')}`);
    assert.equal(r.log.length, 3, r.log.join(' | '));
    const turnOf = (l: string) => Number(/turn (\d+)/.exec(l)?.[1]);
    assert.is(
      turnOf(r.log[2]),
      turnOf(r.log[0]),
      `posted work went out in the turn that deferred: ${r.log.join(' | ')}`,
    );
  } finally {
    r.stop();
  }
});

test('defer: outside a turn the callback is a microtask', async () => {
  const g = new Graph({ pool: memPool(64), mode: 'polling', spinUs: 50 });
  g.register({ name: 'idle-input', type: 'input', fn: () => 0 });
  g.build();
  const order: string[] = [];
  g.defer(() => order.push('deferred'));
  order.push('sync');
  await Promise.resolve();
  assert.equal(order, ['sync', 'deferred']);
});

test('defer: a callback that throws leaves the others and the loop running, and its error surfaces uncaught', async () => {
  const r = rig();
  const seen: unknown[] = [];
  const onUncaught = (e: unknown) => seen.push(e);
  // Our own listener for the test's span: the rethrown error must reach it, not crash the run.
  const before = process.listeners('uncaughtException');
  process.removeAllListeners('uncaughtException');
  process.on('uncaughtException', onUncaught);
  r.g.start();
  try {
    await turn();
    let second = false;
    r.arm(() => {
      throw new Error('application bug');
    });
    // A second callback deferred in the same turn, from a timer-free second arming.
    for (let i = 0; i < 20 && r.log.length === 0; i++) await turn();
    r.arm(() => {
      second = true;
      r.post();
    });
    for (let i = 0; i < 50 && !r.log.some((l) => l.startsWith('sent')); i++) await turn();
    assert.ok(second, `the later callback ran: ${r.log.join(' | ')}`);
    assert.ok(
      r.log.some((l) => l.startsWith('sent')),
      `the loop went on: ${r.log.join(' | ')}`,
    );
    assert.is(seen.length, 1);
    assert.match(String((seen[0] as Error).message), 'application bug');
  } finally {
    r.stop();
    process.removeListener('uncaughtException', onUncaught);
    for (const l of before) process.on('uncaughtException', l as (e: Error) => void);
  }
});

test('timers: a polling loop reads the time once per tick of its wheel, and a timer still fires on time', async () => {
  const base = systemClock();
  let reads = 0;
  const clock: Clock = {
    tsc: base.tsc,
    tick: base.tick,
    slot: base.slot,
    nowNs: () => {
      reads++;
      return base.nowNs();
    },
    tickNs: base.tickNs,
    clocksPerNs: () => base.clocksPerNs(),
    source: base.source,
  };
  const g = new Graph({ pool: memPool(64), mode: 'polling', spinUs: 50, clock, timerTickNs: 100_000 });
  let passes = 0,
    firedAt = -1;
  g.register({ name: 'poll-input', type: 'input', fn: () => (passes++, 0) });
  const owner = g.register({
    name: 'timer-owner',
    type: 'internal',
    fn: () => 0,
    timer: (_rt, user) => {
      if (user === 1) firedAt = base.nowNs();
    },
  });
  g.build();
  g.start();
  try {
    await turn();
    const t0 = base.nowNs();
    g.startTimer(owner, 20e6, 1);
    const far = g.startTimer(owner, 60e9, 2); // keeps the wheel busy after the first fires
    const r0 = reads,
      p0 = passes;
    await new Promise((r) => setTimeout(r, 60));
    const r1 = reads - r0,
      p1 = passes - p0,
      ticks = (base.nowNs() - t0) / 100_000;
    // The wheel's time is read about once per 100-us tick, not every pass.
    assert.ok(p1 > 20 * r1, `${p1} passes read the time ${r1} times`);
    assert.ok(r1 < ticks + 200, `${r1} reads of the time in ${ticks.toFixed(0)} ticks`);
    for (let i = 0; i < 100 && firedAt < 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(firedAt > 0, 'the timer fired');
    // Not early (by more than a tick); late only by what a loaded machine delays a turn.
    const late = firedAt - (t0 + 20e6);
    assert.ok(late >= -100_000 && late < 1e9, `fired ${(late / 1e6).toFixed(3)} ms after due`);
    g.stopTimer(far);
  } finally {
    g.close();
  }
});

test.run();
