import { test } from './harness.ts';
import * as assert from 'uvu/assert';
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

test.run();
