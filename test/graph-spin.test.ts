import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { PerformanceObserver } from 'node:perf_hooks';
import { Graph } from '../graph/graph.ts';
import { memPool } from './helpers.ts';

/** A polling graph whose input counts its calls and may ask the loop to yield on a given call. */
function counting(spinUs: number, yieldEvery = 0) {
  const g = new Graph({ pool: memPool(64), mode: 'polling', spinUs });
  const c = { calls: 0 };
  g.register({
    name: 'count-input',
    type: 'input',
    fn: () => {
      c.calls++;
      if (yieldEvery > 0 && c.calls % yieldEvery === 0) g.yieldSoon();
      return 0;
    },
  });
  return { g, c };
}

/** Passes per event-loop turn, measured over `turns` setImmediate turns of our own. */
async function passesPerTurn(c: { calls: number }, turns: number): Promise<number> {
  await new Promise((r) => setImmediate(r));
  const c0 = c.calls;
  for (let i = 0; i < turns; i++) await new Promise((r) => setImmediate(r));
  return (c.calls - c0) / turns;
}

test('spin: alone on the thread, one event-loop turn runs many empty passes', async () => {
  const { g, c } = counting(2000);
  g.start();
  try {
    const per = await passesPerTurn(c, 20);
    assert.ok(per > 5, `passes per turn ${per}`);
  } finally {
    g.close();
  }
});

test('spin: with no spin budget, or a second graph running on the thread, an empty pass ends the turn', async () => {
  const a = counting(0);
  a.g.start();
  try {
    const per = await passesPerTurn(a.c, 20);
    assert.ok(per <= 2, `no spin: passes per turn ${per}`);
  } finally {
    a.g.close();
  }
  const x = counting(2000),
    y = counting(2000);
  x.g.start();
  y.g.start();
  try {
    const per = await passesPerTurn(x.c, 20);
    assert.ok(per <= 2, `two graphs: passes per turn ${per}`);
  } finally {
    x.g.close();
    y.g.close();
  }
});

test('spin: yieldSoon ends the turn after the pass that asked', async () => {
  const { g, c } = counting(2000, 1);
  g.start();
  try {
    const per = await passesPerTurn(c, 20);
    assert.ok(per <= 2, `passes per turn ${per}`);
  } finally {
    g.close();
  }
});

test('an idle polling loop makes next to no garbage: its clock is read through a slot, not returned', async () => {
  // Each empty pass reads the counter per node and the loop reads it per pass; a double returned
  // from a call that is not inlined is a new heap number. Reading them as numbers made ~6
  // scavenges per million empty passes here (111 in 17.6 million); through the slot, ~0.4.
  const { g, c } = counting(50);
  const gcs = { n: 0 };
  const obs = new PerformanceObserver((l) => (gcs.n += l.getEntries().length));
  obs.observe({ entryTypes: ['gc'] });
  g.start();
  try {
    await new Promise((r) => setTimeout(r, 50)); // compiled by now
    const c0 = c.calls,
      g0 = gcs.n;
    while (c.calls - c0 < 3_000_000) await new Promise((r) => setTimeout(r, 20));
    const passes = c.calls - c0,
      n = gcs.n - g0;
    assert.ok(
      n <= 4,
      `${n} garbage collections in ${passes} empty passes (${((1e6 * n) / passes).toFixed(2)} per million)`,
    );
  } finally {
    obs.disconnect();
    g.close();
  }
});

test.run();
