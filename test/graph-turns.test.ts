/**
 * The dispatch loop's turns (graph/waiter.ts Turns, the core addon's FdWaiter.onTurn/soon): its
 * function once per soon(), in the event loop's check phase, with no object made per turn (what
 * setImmediate made per turn was about half of a two-process ping-pong's garbage). Timers and
 * I/O still run between turns; a throw is an uncaught exception; close() drops an armed turn.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { startAllocProfile } from '../bench/alloc-profile.ts';
import { Graph, type NodeRuntime } from '../graph/index.ts';
import { createPool } from '../graph/memory.ts';
import { Turns } from '../graph/waiter.ts';
import { loadCore } from '../native/addons.ts';

const tick = () => new Promise<void>((r) => setTimeout(r, 0));

test('soon() calls the function once, however often it is called before the turn', async () => {
  let calls = 0;
  const t = new Turns(() => calls++);
  try {
    t.soon();
    t.soon();
    t.soon();
    assert.is(calls, 0, 'not called synchronously');
    await tick();
    assert.is(calls, 1);
    await tick();
    assert.is(calls, 1, 'not again without soon()');
    t.soon();
    await tick();
    assert.is(calls, 2);
  } finally {
    t.close();
  }
});

test('a turn that arms the next one leaves room for timers and I/O between turns; close() drops an armed turn', async () => {
  let turns = 0;
  const t: Turns = new Turns(() => {
    turns++;
    t.soon();
  });
  t.soon();
  const at = await new Promise<number>((resolve) => setTimeout(() => resolve(turns), 20));
  assert.ok(at > 10, `turns ran meanwhile (${at})`);
  const read = await new Promise<number>((resolve) => {
    // A pipe's I/O: a child's output comes in while the turns keep going.
    const c = spawn(process.execPath, ['-e', 'process.stdout.write("x")']);
    c.stdout.on('data', () => resolve(turns));
  });
  assert.ok(read > at, 'I/O callbacks ran between turns');
  t.close();
  const after = turns;
  await tick();
  await tick();
  assert.is(turns, after, 'closed: the armed turn never ran');
});

test("a throw from the turn's function is an uncaught exception; an armed turn keeps the process alive until it runs", () => {
  const addons = new URL('../native/addons.ts', import.meta.url).pathname;
  const script = `
    import { loadCore } from ${JSON.stringify(addons)};
    const w = new (loadCore().FdWaiter)();
    let n = 0;
    // A collection between the turns (one once came by itself in CI): the turn still runs.
    process.on('uncaughtException', (e) => { console.log('caught', e.message); w.soon(); setImmediate(() => gc()); });
    const turn = () => { n++; if (n === 1) throw new Error('boom'); console.log('turn', n); w.close(); };
    w.onTurn(turn);
    // The waiter holds its function weakly (a dropped graph is collected): hold it here, or a
    // collection between the two turns leaves the second nothing to call.
    globalThis.held = turn;
    w.soon();
  `;
  const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  assert.is(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim().split('\n'), ['caught boom', 'turn 2']);
});

test('the loop of a polling graph makes less than 120 bytes of garbage per turn (57 measured; setImmediate made 346)', async () => {
  // Nothing but the loop: an input node with nothing to do, polling (one pass a turn).
  const g = new Graph({ pool: createPool({ count: 64, hugepages: 'never' }), mode: 'polling' });
  g.register({ name: 'nothing', type: 'input', fn: (_rt: NodeRuntime) => 0 });
  g.start();
  try {
    await new Promise((r) => setTimeout(r, 300)); // optimised first
    const loops0 = g.runtime.loops;
    const prof = await startAllocProfile(128);
    await new Promise((r) => setTimeout(r, 1000));
    const turns = g.runtime.loops - loops0;
    const report = await prof.stop(turns, 6);
    const per = Number(/allocated \(sampled\): (\d+) bytes each/.exec(report)?.[1]);
    assert.ok(turns > 10_000, `the loop turned (${turns})`);
    // What is left is Node's per-callback cost (napi_make_callback's, as processImmediate's).
    assert.ok(per < 120, `${per} bytes per turn, budget 120:\n${report}`);
  } finally {
    g.close();
  }
});

test('FdWaiter.soon() without onTurn() and after close() throws', () => {
  const w = new (loadCore().FdWaiter)();
  assert.throws(() => w.soon(), /no onTurn\(\) function/);
  assert.throws(() => (w as unknown as { onTurn(x: unknown): void }).onTurn(5), /fn must be a function/);
  w.close();
  assert.throws(() => w.onTurn(() => {}), /the waiter is closed/);
  assert.throws(() => w.soon(), /the waiter is closed/);
});

test.run();
