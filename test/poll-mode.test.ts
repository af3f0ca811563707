/**
 * cpu.poll and cpu.idle-poll-us reach the graph (issue 17): `polling` never sleeps, `interrupt`
 * sleeps as soon as a pass finds nothing, `adaptive` keeps polling idle-poll-us with nothing to
 * do, then sleeps. Observed on an idle data plane through the graph's own sleep counter and
 * state, and in `show runtime`'s node state; the idle-poll time itself on a graph whose clock
 * the test moves (no wall time is measured). cpu.idle-yield: an idle turn gives the CPU up while a
 * verbs program is attached (sched_yield through the graph's idleYield), and only then.
 */
import { test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { Dataplane } from '../dataplane/dataplane.ts';
import type { Config } from '../config/types.ts';
import { baseConfig, pipeInterface } from './dataplane-helpers.ts';
import { Graph } from '../graph/graph.ts';
import { memPool } from './helpers.ts';
import { manualClock } from './l2l4-helpers.ts';

let n = 0;
async function idlePlane(
  cpu: Config['cpu'],
  rxMode: 'adaptive' | 'polling' | 'interrupt' | null,
  body: (g: ReturnType<typeof Dataplane.internals>['graph'], dp: DataplaneApi) => Promise<void>,
) {
  const name = `pm${++n}`;
  const dp = await Dataplane.create(
    baseConfig({
      cpu,
      interfaces: [pipeInterface(name, `${name}x`, '10.77.0.1/24', '02:fe:00:00:77:01', { rxMode })],
    }),
  );
  try {
    await body(Dataplane.internals(dp).graph, dp);
  } finally {
    await dp.close();
  }
}
const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
const turns = async (n: number) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};
/** Until `cond` holds (a liveness wait: the harness's timeout ends a wait that never does). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await wait(5);
}

test('cpu.poll: polling never sleeps; interrupt sleeps at once; adaptive after idle-poll-us', async () => {
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'polling', idlePollUs: 200, idleYield: true },
    null,
    async (g) => {
      await wait(300);
      assert.is(g.sleeps, 0, 'polling: the graph never slept');
      assert.is(g.isSleeping, false);
    },
  );
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'interrupt', idlePollUs: 500_000, idleYield: true },
    null,
    async (g, dp) => {
      // The idle-poll time (500 ms) does not apply: it goes to sleep on the first idle pass.
      assert.is(g.idlePollUs, 0, 'interrupt: no idle polling');
      await until(() => g.sleeps > 0);
      assert.is(g.isSleeping, true);
      const rt = (await dp.runtime())[0];
      assert.ok(
        rt.rows.some((x) => x.state === 'interrupt wait'),
        `show runtime says it waits: ${JSON.stringify(rt.rows.map((x) => x.state))}`,
      );
    },
  );
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'adaptive', idlePollUs: 400_000, idleYield: true },
    null,
    async (g) => {
      assert.is(g.pollMode, 'adaptive');
      assert.is(g.idlePollUs, 400_000, 'cpu.idle-poll-us reached the graph');
      await until(() => g.sleeps > 0);
    },
  );
});

test('adaptive: polls idle-poll-us of the graph clock with nothing to do, then sleeps; work starts the count again', async () => {
  const clock = manualClock();
  const g = new Graph({ pool: memPool(64), clock, mode: 'adaptive', idlePollUs: 400_000 });
  let work = 0;
  g.register({ name: 'idle-input', type: 'input', fn: () => (work > 0 ? (work--, 1) : 0) });
  g.start();
  try {
    await turns(50);
    assert.is(g.sleeps, 0, 'the clock has not moved: still polling after 50 event-loop turns');
    clock.advance(399_000_000);
    await turns(20);
    assert.is(g.sleeps, 0, 'idle for 399 ms: still polling');
    work = 1;
    await turns(5);
    assert.is(work, 0, 'the pass found work');
    clock.advance(399_000_000);
    await turns(20);
    assert.is(g.sleeps, 0, 'idle for 399 ms since the work: still polling');
    clock.advance(2_000_000);
    await turns(20);
    assert.is(g.sleeps, 1, 'idle for 401 ms: asleep');
    assert.is(g.isSleeping, true);
  } finally {
    g.close();
  }
});

test('idle yield: a polling graph gives its CPU up after idle turns only while somebody asked (a verbs program attached), never in a turn with work', async () => {
  for (const mode of ['polling', 'adaptive'] as const) {
    let yields = 0,
      work = 0;
    const clock = manualClock(); // adaptive never reaches idle-poll-us: it keeps polling
    const g = new Graph({ pool: memPool(64), clock, mode, idlePollUs: 400_000, idleYield: () => yields++ });
    g.register({ name: 'idle-input', type: 'input', fn: () => (work > 0 ? (work--, 1) : 0) });
    g.start();
    try {
      await turns(30);
      assert.is(yields, 0, `${mode}: nobody asked: no yield`);
      const release = g.addIdleYieldUser();
      await turns(30);
      assert.ok(yields >= 20, `${mode}: idle turns yield (${yields} of 30)`);
      const before = yields;
      work = 1_000_000; // every turn has work now
      await turns(30);
      assert.ok(yields - before <= 1, `${mode}: turns with work do not yield (${yields - before})`);
      work = 0;
      release();
      release(); // twice: counted once
      await turns(5);
      const after = yields;
      await turns(30);
      assert.is(yields, after, `${mode}: released: no more yields`);
    } finally {
      g.close();
    }
  }
});

test('idle yield while spinning: every empty pass of a spinning turn gives the CPU up (a program may be waiting on this CPU for the rest of the turn)', async () => {
  let yields = 0;
  const g = new Graph({ pool: memPool(64), mode: 'polling', spinUs: 200, idleYield: () => yields++ });
  g.register({ name: 'idle-input', type: 'input', fn: () => 0 });
  g.start();
  try {
    const release = g.addIdleYieldUser();
    await turns(10);
    assert.ok(yields > 20, `more yields than turns: each empty pass yields (${yields} in 10 turns)`);
    release();
  } finally {
    g.close();
  }
});

test("an interface's rx-mode polling keeps an interrupt-mode graph awake (VPP: a thread with a polling interface polls)", async () => {
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'interrupt', idlePollUs: 200, idleYield: true },
    'polling',
    async (g) => {
      await wait(300);
      assert.is(g.sleeps, 0, 'never slept');
    },
  );
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'interrupt', idlePollUs: 200, idleYield: true },
    'interrupt',
    async (g) => {
      await until(() => g.sleeps > 0);
    },
  );
});

test.run();
