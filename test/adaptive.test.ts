import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Graph } from '../graph/graph.ts';
import type { Frame, NodeRuntime } from '../graph/node.ts';
import { loadCore } from '../native/addons.ts';
import { memPool, sleep } from './helpers.ts';

const core = loadCore();

function dropSink(g: Graph, got: { n: number }) {
  g.register({
    name: 'sink',
    fn: (rt: NodeRuntime, f: Frame | null) => {
      got.n += f!.n;
      rt.graph.pool.free(f!.vec, 0, f!.n);
      return f!.n;
    },
  });
}

test('adaptive: sleeps when idle, an fd becoming readable wakes it, then it sleeps again', async () => {
  const pool = memPool(256);
  const g = new Graph({ pool, idlePollUs: 200 });
  const fd = core.eventfd();
  const got = { n: 0 };
  g.register({
    name: 'efd-input',
    type: 'input',
    next: ['sink'],
    fn: (rt) => {
      const k = core.eventfdRead(fd);
      if (k === 0) return 0;
      const n = pool.alloc(rt.scratch, 0, k);
      g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  dropSink(g, got);
  g.addWaitFd(fd);
  g.start();
  try {
    await sleep(30);
    assert.ok(g.isSleeping, 'idle loop sleeps');
    const polls = g.nodeCounters('efd-input').calls;
    await sleep(30);
    assert.is(g.nodeCounters('efd-input').calls, polls, 'no polling while asleep');
    const wakes = g.wakeups;
    core.eventfdWrite(fd, 3);
    await sleep(30);
    assert.is(got.n, 3, 'woken by the fd and processed the packets');
    assert.ok(g.wakeups > wakes);
    assert.ok(g.isSleeping, 'asleep again after the work');
    assert.is(pool.available(), pool.count);
  } finally {
    g.close();
    core.closeFd(fd);
  }
});

test('adaptive: a due timer wakes the sleeping loop', async () => {
  const g = new Graph({ pool: memPool(16), idlePollUs: 100 });
  let firedAt = -1;
  const t0 = performance.now();
  const rt = g.register({
    name: 'tmr',
    fn: () => 0,
    timer: () => {
      firedAt = performance.now() - t0;
    },
  });
  g.start();
  try {
    g.startTimer(rt, 400e6, 7);
    while (!g.isSleeping) await sleep(1);
    assert.is(firedAt, -1, 'asleep before the timer is due');
    const passes = g.nodeCounters('tmr').calls;
    const wakeups = g.wakeups;
    while (firedAt < 0) await sleep(5); // (the harness's timeout ends a wait that never does)
    assert.ok(firedAt >= 399, `fired at ${firedAt.toFixed(1)} ms: not before it was due at 400`);
    assert.ok(g.wakeups > wakeups, 'the sleeping loop was woken for it');
    assert.ok(g.nodeCounters('tmr').calls - passes < 10, 'woken, not polling its way to the deadline');
  } finally {
    g.close();
  }
});

test('adaptive: wake() from outside the loop (a driver without an fd) resumes polling', async () => {
  const pool = memPool(64);
  const g = new Graph({ pool, idlePollUs: 100 });
  const queue: number[] = [];
  const got = { n: 0 };
  g.register({
    name: 'q-input',
    type: 'input',
    next: ['sink'],
    fn: (rt) => {
      let n = 0;
      while (queue.length) {
        queue.pop();
        rt.scratch[n++] = pool.allocOne();
      }
      g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  dropSink(g, got);
  g.start();
  try {
    await sleep(20);
    assert.ok(g.isSleeping);
    queue.push(1, 2);
    await sleep(20);
    assert.is(got.n, 0, 'no fd, no wake: still asleep');
    g.wake();
    await sleep(20);
    assert.is(got.n, 2);
  } finally {
    g.close();
  }
});

test('a busy loop still yields to the event loop between passes', async () => {
  const pool = memPool(1024);
  const g = new Graph({ pool });
  const got = { n: 0 };
  // Busy for up to 1 s of wall time, then idle. If the loop never yielded, the 5 ms timer
  // could only fire after the busy phase ends; it must fire while the loop is still busy.
  const t0 = performance.now();
  let busyUntil = -1;
  g.register({
    name: 'busy-input',
    type: 'input',
    next: ['sink'],
    fn: (rt) => {
      if (performance.now() - t0 > 1000) {
        if (busyUntil < 0) busyUntil = performance.now() - t0;
        return 0;
      }
      const n = pool.alloc(rt.scratch, 0, 256);
      g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  dropSink(g, got);
  g.start();
  try {
    await sleep(5);
    const firedAt = performance.now() - t0;
    assert.is(busyUntil, -1, `the timer fired at ${firedAt.toFixed(1)} ms, only after the busy phase ended`);
    assert.ok(got.n > 0, 'and the loop made progress meanwhile');
  } finally {
    g.close();
  }
  assert.is(pool.available(), pool.count);
});

test.run();
