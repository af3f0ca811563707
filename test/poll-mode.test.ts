/**
 * cpu.poll and cpu.idle-poll-us reach the graph (issue 17): `polling` never sleeps, `interrupt`
 * sleeps as soon as a pass finds nothing, `adaptive` keeps polling idle-poll-us with nothing to
 * do, then sleeps. Observed on an idle data plane through the graph's own sleep counter and
 * state, and in `show runtime`'s node state.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Dataplane } from '../dataplane/dataplane.ts';
import type { Config } from '../config/types.ts';
import { baseConfig, pipeInterface } from './dataplane-helpers.ts';

let n = 0;
async function idlePlane(
  cpu: Config['cpu'],
  rxMode: 'adaptive' | 'polling' | 'interrupt' | null,
  body: (g: ReturnType<typeof Dataplane.internals>['graph'], dp: Dataplane) => Promise<void>,
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

test('cpu.poll: polling never sleeps; interrupt sleeps at once; adaptive after idle-poll-us', async () => {
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'polling', idlePollUs: 200 },
    null,
    async (g) => {
      await wait(300);
      assert.is(g.sleeps, 0, 'polling: the graph never slept');
      assert.is(g.isSleeping, false);
    },
  );
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'interrupt', idlePollUs: 500_000 },
    null,
    async (g, dp) => {
      await wait(100);
      assert.ok(g.sleeps > 0, 'interrupt: asleep well before the idle-poll time it ignores');
      assert.is(g.isSleeping, true);
      const rt = (await dp.runtime())[0];
      assert.ok(
        rt.rows.some((x) => x.state === 'interrupt wait'),
        `show runtime says it waits: ${JSON.stringify(rt.rows.map((x) => x.state))}`,
      );
    },
  );
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'adaptive', idlePollUs: 400_000 },
    null,
    async (g) => {
      await wait(150);
      assert.is(g.sleeps, 0, 'adaptive: still polling within idle-poll-us (400 ms)');
      await wait(600);
      assert.ok(g.sleeps > 0, 'adaptive: asleep after idle-poll-us');
    },
  );
});

test("an interface's rx-mode polling keeps an interrupt-mode graph awake (VPP: a thread with a polling interface polls)", async () => {
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'interrupt', idlePollUs: 200 },
    'polling',
    async (g) => {
      await wait(300);
      assert.is(g.sleeps, 0, 'never slept');
    },
  );
  await idlePlane(
    { workers: 0, mainCore: null, corelistWorkers: null, poll: 'interrupt', idlePollUs: 200 },
    'interrupt',
    async (g) => {
      await wait(100);
      assert.ok(g.sleeps > 0, 'the same graph with the interface in interrupt mode sleeps');
    },
  );
});

test.run();
