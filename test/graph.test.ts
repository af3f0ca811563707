import { test } from './harness.ts';
import { manualClock } from './l2l4-helpers.ts';
import * as assert from 'uvu/assert';
import { Graph, GraphError } from '../graph/graph.ts';
import { errorTable, NodeFlag, nextTable, type Frame, type NodeRuntime } from '../graph/node.ts';
import { monotonicClock } from '../graph/clock.ts';
import { memPool } from './helpers.ts';
import { waitFor } from './rdma-helpers.ts';

/** An input node that emits the packets queued in `src` (first byte = class). */
function source(g: Graph, name: string, next: string[], queue: number[][]) {
  return g.register({
    name,
    type: 'input',
    next,
    flags: NodeFlag.TRACE_SUPPORTED,
    fn: (rt: NodeRuntime) => {
      let n = 0;
      const out = rt.scratch;
      while (queue.length > 0 && n < 256) {
        const bytes = Uint8Array.from(queue.shift() as number[]);
        out[n++] = rt.graph.pool.writePacket(bytes, 0, bytes.length);
      }
      if (n === 0) return 0;
      rt.graph.traceInput(rt, out, 0, n);
      rt.graph.enqueueToSingleNext(rt, 0, out, 0, n);
      return n;
    },
  });
}

/** classify: next = first byte (0 = a, 1 = b, 2 = c, anything else = error-drop "bad class"). */
function classifier(g: Graph) {
  return g.register({
    name: 'classify',
    next: ['sink-a', 'sink-b', 'sink-c', 'error-drop'],
    errors: [{ name: 'bad', description: 'bad class', severity: 'warn' }],
    formatTrace: (r) => `class ${r as number}`,
    fn: (rt: NodeRuntime, f: Frame | null) => {
      const fr = f as Frame;
      const pool = rt.graph.pool;
      for (let i = 0; i < fr.n; i++) {
        const bi = fr.vec[i];
        const c = pool.u8[pool.offset[bi]];
        if (c <= 2) rt.nexts[i] = c;
        else {
          rt.nexts[i] = 3;
          pool.error[bi] = rt.errorIndex(0);
        }
        if (rt.traceOn) rt.addTrace(bi, c);
      }
      rt.enqueue(fr.vec, fr.n);
      return fr.n;
    },
  });
}

function sink(g: Graph, name: string, got: number[], vectorSizes: number[]) {
  return g.register({
    name,
    flags: NodeFlag.IS_OUTPUT,
    fn: (rt: NodeRuntime, f: Frame | null) => {
      const fr = f as Frame;
      const pool = rt.graph.pool;
      vectorSizes.push(fr.n);
      for (let i = 0; i < fr.n; i++) got.push(pool.u8[pool.offset[fr.vec[i]] + 1]);
      pool.free(fr.vec, 0, fr.n);
      return fr.n;
    },
  });
}

function fanoutGraph(queue: number[][]) {
  const pool = memPool(2048);
  const g = new Graph({ pool, clock: monotonicClock() });
  const got = { a: [] as number[], b: [] as number[], c: [] as number[] };
  const sizes = { a: [] as number[], b: [] as number[], c: [] as number[] };
  source(g, 'src-input', ['classify'], queue);
  classifier(g);
  sink(g, 'sink-a', got.a, sizes.a);
  sink(g, 'sink-b', got.b, sizes.b);
  sink(g, 'sink-c', got.c, sizes.c);
  g.build();
  return { g, pool, got, sizes };
}

test('registry: unknown next names fail the build naming both nodes', () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  g.register({ name: 'a', next: ['b', 'nope'], fn: () => 0 });
  g.register({ name: 'b', next: ['ghost'], fn: () => 0 });
  try {
    g.build();
    assert.unreachable('build should fail');
  } catch (e) {
    assert.instance(e, GraphError);
    assert.match((e as Error).message, 'node "a": next node "nope" does not exist');
    assert.match((e as Error).message, 'node "b": next node "ghost" does not exist');
  }
});

test('registry: duplicate names, missing functions, bad types and next-to-input are errors', () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  g.register({ name: 'x', fn: () => 0 });
  assert.throws(() => g.register({ name: 'x', fn: () => 0 }), /already registered/);
  assert.throws(() => g.register({ name: 'y' }), /needs a function/);
  assert.throws(() => g.register({ name: 'p', type: 'process' }), /needs a process generator/);
  assert.throws(() => g.register({ name: 'z', type: 'bogus' as 'input', fn: () => 0 }), /unknown type "bogus"/);
  assert.throws(
    () =>
      g.register({
        name: 'e',
        fn: () => 0,
        errors: [
          { name: 'a', description: 'a' },
          { name: 'a', description: 'b' },
        ],
      }),
    /declared twice/,
  );
  g.register({ name: 'in', type: 'input', fn: () => 0 });
  g.register({ name: 'w', next: ['in'], fn: () => 0 });
  assert.throws(() => g.build(), /next node "in" is an input node/);
  assert.throws(() => g.node('missing'), /no node named "missing"/);
});

test('registry: nodes and arcs added after build resolve at once', () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  const a = g.register({ name: 'a', fn: () => 0 });
  g.build();
  assert.throws(
    () => g.register({ name: 'late', next: ['missing'], fn: () => 0 }),
    /next node "missing" does not exist/,
  );
  g.register({ name: 'b', fn: () => 0 });
  assert.is(g.addNext(a, 'b'), 0);
  assert.is(g.addNext(a, 'b'), 0, 'same arc twice gives the same index');
  assert.is(a.nextNodes[0].name, 'b');
  assert.throws(() => g.addNext(a, 'nope'), /does not exist/);
});

test('dispatch: fan-out to several next nodes, every packet where it belongs, vectors merged per target', () => {
  const queue: number[][] = [];
  for (let i = 0; i < 700; i++) queue.push([i % 4, i & 0xff]);
  const { g, pool, got, sizes } = fanoutGraph(queue);
  // 700 packets: the input emits 256 per pass.
  let passes = 0;
  while (queue.length > 0 || g.pendingFrames > 0) {
    g.runPass();
    passes++;
  }
  assert.is(passes, 3);
  const expect = (cls: number) =>
    Array.from({ length: 700 }, (_, i) => i)
      .filter((i) => i % 4 === cls)
      .map((i) => i & 0xff);
  assert.equal(got.a, expect(0));
  assert.equal(got.b, expect(1));
  assert.equal(got.c, expect(2));
  // A pass of 256 packets splits 64/64/64 (+64 dropped), the last pass (188) 47/47/47.
  assert.equal(sizes.a, [64, 64, 47]);
  const rt = g.nodeCounters('classify');
  assert.is(rt.calls, 3);
  assert.is(rt.vectors, 700);
  assert.is(g.nodeCounters('src-input').vectors, 700);
  assert.is(g.nodeCounters('sink-b').vectors, 175);
  assert.is(g.errorCount('classify', 'bad'), 175);
  assert.is(g.nodeCounters('error-drop').vectors, 175);
  assert.is(pool.available(), pool.count, 'every buffer back in the pool');
});

test('dispatch: a frame holds at most 256 and the rest spills into a second frame', () => {
  const pool = memPool(1024);
  const g = new Graph({ pool, clock: monotonicClock() });
  const sizes: number[] = [];
  const buf = new Uint32Array(600);
  g.register({
    name: 'burst',
    type: 'input',
    next: ['merge'],
    fn: (rt) => {
      if (pool.available() < 600) return 0;
      const n = pool.alloc(buf, 0, 600);
      rt.graph.enqueueToSingleNext(rt, 0, buf, 0, n);
      return n;
    },
  });
  g.register({
    name: 'merge',
    fn: (rt, f) => {
      sizes.push(f!.n);
      pool.free(f!.vec, 0, f!.n);
      return f!.n;
    },
  });
  g.build();
  g.runPass();
  assert.equal(sizes, [256, 256, 88]);
  assert.is(pool.available(), pool.count);
});

test('dispatch: a node that sends back to itself gets a fresh frame in the same pass', () => {
  const pool = memPool(64);
  const g = new Graph({ pool, clock: monotonicClock() });
  let calls = 0;
  g.register({
    name: 'in',
    type: 'input',
    next: ['loop'],
    fn: (rt) => {
      if (calls > 0) return 0;
      const bi = pool.allocOne();
      pool.opaque[bi * 8] = 3;
      g.enqueueOne(rt, 0, bi);
      return 1;
    },
  });
  g.register({
    name: 'loop',
    next: ['loop', 'error-drop'],
    fn: (rt, f) => {
      calls++;
      const bi = f!.vec[0];
      if (--pool.opaque[bi * 8] > 0) g.enqueueOne(rt, 0, bi);
      else g.enqueueOne(rt, 1, bi);
      return 1;
    },
  });
  g.build();
  g.runPass();
  assert.is(calls, 3);
  assert.is(g.pendingFrames, 0);
  assert.is(pool.available(), pool.count);
});

test('input states: a disabled input node is not polled; nextIndex names arcs', () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  let polls = 0;
  const inp = g.register({
    name: 'in',
    type: 'input',
    next: ['x', 'error-drop'],
    fn: () => {
      polls++;
      return 0;
    },
  });
  g.register({ name: 'x', fn: () => 0 });
  g.build();
  g.runPass();
  assert.is(polls, 1);
  g.setInputState(inp, 'disabled');
  g.runPass();
  assert.is(polls, 1, 'not polled while disabled');
  assert.is(g.runtimeSnapshot().rows.find((r) => r.name === 'in')!.state, 'disabled');
  g.setInputState(inp, 'polling');
  g.runPass();
  assert.is(polls, 2);
  assert.is(g.nextIndex(inp, 'error-drop'), 1);
  assert.throws(() => g.nextIndex(inp, 'nope'), /has no next node "nope"/);
  assert.throws(() => g.setInputState(g.node('x'), 'disabled'), /not an input node/);
});

test('interrupt state: called only in a pass after interrupt(), once per interrupt; a node re-arms itself for what it left', () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  let calls = 0,
    queued = 0;
  const inp = g.register({
    name: 'in',
    type: 'input',
    state: 'interrupt',
    fn: (rt) => {
      calls++;
      // Takes at most 2 per call, as a node that fills a frame; says when more is left.
      const took = Math.min(queued, 2);
      queued -= took;
      if (queued > 0) g.interrupt(rt);
      return took;
    },
  });
  g.build();
  for (let i = 0; i < 5; i++) g.runPass();
  assert.is(calls, 0, 'not called without an interrupt');
  assert.is(g.runtimeSnapshot().rows.find((r) => r.name === 'in')?.calls ?? 0, 0);
  queued = 5;
  g.interrupt(inp);
  g.interrupt(inp); // twice before a pass: one call
  g.runPass();
  assert.equal([calls, queued], [1, 3]);
  g.runPass();
  g.runPass();
  assert.equal([calls, queued], [3, 0], 'the rest in the passes after, one call each');
  g.runPass();
  assert.is(calls, 3, 'nothing left: not called again');
  // Switched to polling: called every pass; back to interrupt: looked at once, then not.
  g.setInputState(inp, 'polling');
  g.runPass();
  g.runPass();
  assert.is(calls, 5);
  g.setInputState(inp, 'interrupt');
  g.runPass();
  g.runPass();
  assert.is(calls, 6, 'once after the switch (it may have missed an interrupt), then idle');
});

test('interrupt state: an interrupt wakes a sleeping loop, which calls the node', async () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock(), idlePollUs: 50 });
  let calls = 0;
  const inp = g.register({
    name: 'in',
    type: 'input',
    state: 'interrupt',
    fn: () => {
      calls++;
      return 1;
    },
  });
  g.build();
  g.start();
  try {
    await waitFor('asleep', () => g.isSleeping);
    assert.is(calls, 0);
    g.interrupt(inp);
    await waitFor('called', () => calls === 1);
    await waitFor('asleep again', () => g.isSleeping);
    assert.is(calls, 1, 'called once for one interrupt');
  } finally {
    g.close();
  }
});

test('poll phases: work, then transmit, then receive inputs, the drain right after the last burst', () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  const seen: string[] = [];
  const input = (name: string, pollPhase?: 'work' | 'transmit' | 'receive') =>
    g.register({
      name,
      type: 'input',
      ...(pollPhase === undefined ? {} : { pollPhase }),
      next: ['up'],
      fn: (rt: NodeRuntime) => {
        seen.push(name);
        if (name !== 'rx') return 0;
        // A device input: one packet up the graph.
        const n = g.pool.alloc(rt.scratch, 0, 1);
        g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
        return n;
      },
    });
  // Registered in the opposite order of their phases, and one with no phase (a receive input).
  input('rx', 'receive');
  input('other');
  input('tx', 'transmit');
  input('rings', 'work');
  g.register({
    name: 'up',
    fn: (_rt: NodeRuntime, f: Frame | null) => {
      seen.push('up');
      g.pool.free((f as Frame).vec, 0, (f as Frame).n);
      return (f as Frame).n;
    },
  });
  g.build();
  g.runPass();
  assert.equal(seen, ['rings', 'tx', 'rx', 'other', 'up'], 'registration order only within a phase');
  // An input registered after build joins its phase.
  input('tx2', 'transmit');
  seen.length = 0;
  g.runPass();
  assert.equal(seen, ['rings', 'tx', 'tx2', 'rx', 'other', 'up']);
  assert.throws(
    () => g.register({ name: 'bad', type: 'input', pollPhase: 'soon' as 'work', fn: () => 0 }),
    /node "bad": unknown pollPhase "soon" \(work, transmit, receive\)/,
  );
  assert.throws(
    () => g.register({ name: 'bad2', pollPhase: 'work', fn: () => 0 }),
    /node "bad2": pollPhase is for input nodes; this is an internal node/,
  );
});
test('counters: clear snapshots, later work counts from the clear', () => {
  const queue: number[][] = Array.from({ length: 10 }, (_, i) => [0, i]);
  const { g } = fanoutGraph(queue);
  g.runPass();
  assert.is(g.nodeCounters('sink-a').vectors, 10);
  assert.ok(g.nodeCounters('sink-a').clocks > 0);
  g.clearRuntime();
  assert.is(g.nodeCounters('sink-a').vectors, 0);
  assert.is(g.nodeCounters('sink-a').calls, 0);
  // Shared totals are not reset in place.
  assert.ok(g.runtime.counts[g.node('sink-a').index * 4 + 1] === 10);
  queue.push([0, 1], [0, 2], [1, 3]);
  g.runPass();
  assert.is(g.nodeCounters('sink-a').vectors, 2);
  const snap = g.runtimeSnapshot();
  const row = snap.rows.find((r) => r.name === 'sink-a')!;
  assert.is(row.vectors, 2);
  assert.is(row.calls, 1);
  assert.is(row.state, 'active');
  assert.is(snap.rows.find((r) => r.name === 'src-input')!.state, 'polling');
  assert.ok(snap.ratesIn > 0 && snap.ratesOut > 0);
  assert.instance(g.runtime.counts.buffer, SharedArrayBuffer);
});

test('error counters: per node, with severity, cleared by snapshot', () => {
  const queue: number[][] = [
    [9, 0],
    [9, 1],
    [0, 2],
  ];
  const { g } = fanoutGraph(queue);
  g.runPass();
  const rows = g.errorSnapshot().rows.filter((r) => r.count > 0);
  assert.equal(
    rows.map((r) => [r.count, r.node, r.reason, r.severity]),
    [[2, 'classify', 'bad class', 'warn']],
  );
  g.clearErrors();
  assert.is(g.errorCount('classify', 'bad'), 0);
  queue.push([7, 0]);
  g.runPass();
  assert.is(g.errorCount('classify', 'bad'), 1);
  assert.throws(() => g.errorCount('classify', 'nope'), /has no error "nope"/);
});

test('trace: the next N packets of an input node, each with its path and records', () => {
  const queue: number[][] = [
    [0, 1],
    [9, 2],
    [1, 3],
    [2, 4],
  ];
  const { g, pool } = fanoutGraph(queue);
  assert.throws(() => g.traceAdd('classify', 5), /not an input node that supports trace \(these do: src-input\)/);
  g.traceAdd('src-input', 2);
  g.runPass();
  const t = g.traceSnapshot();
  assert.is(t.packets.length, 2);
  assert.equal(
    t.packets[0].entries.map((e) => e.node),
    ['src-input', 'classify', 'sink-a'],
  );
  assert.equal(
    t.packets[0].entries.map((e) => e.text),
    ['', 'class 0', ''],
  );
  assert.equal(
    t.packets[1].entries.map((e) => e.node),
    ['src-input', 'classify', 'error-drop'],
  );
  assert.is(t.packets[1].entries[2].text, 'classify: bad class');
  const times = t.packets[0].entries.map((e) => e.timeNs);
  assert.ok(
    times.every((x, i) => i === 0 || x >= times[i - 1]),
    'timestamps do not go backwards',
  );
  // Budget used up: further packets are not traced.
  queue.push([0, 5]);
  g.runPass();
  assert.is(g.traceSnapshot().packets.length, 2);
  g.clearTrace();
  assert.is(g.traceSnapshot().packets.length, 0);
  assert.is(pool.available(), pool.count);
});

test('timers: a node timer fires in the pass after its delay; stop cancels', () => {
  // A manual clock: wall-clock sleeps overshoot on a loaded machine (an 8 ms sleep once took 15).
  const clock = manualClock();
  const g = new Graph({ pool: memPool(16), clock, timerTickNs: 100_000 });
  const fired: number[] = [];
  const rt = g.register({
    name: 't',
    fn: () => 0,
    timer: (_rt, user) => {
      fired.push(user);
    },
  });
  g.build();
  g.startTimer(rt, 5e6, 1);
  const h2 = g.startTimer(rt, 5e6, 2);
  g.startTimer(rt, 15e6, 3);
  assert.ok(g.stopTimer(h2));
  assert.not.ok(g.stopTimer(h2), 'second stop is a no-op');
  g.runPass();
  assert.equal(fired, []);
  clock.advance(8e6);
  g.runPass();
  assert.equal(fired, [1]);
  clock.advance(12e6);
  g.runPass();
  assert.equal(fired, [1, 3]);
  const plain = g.register({ name: 'no-timer', fn: () => 0 });
  assert.throws(() => g.startTimer(plain, 1, 1), /has no timer function/);
});

test('process nodes: sleep, events and counters', async () => {
  const g = new Graph({ pool: memPool(16), clock: monotonicClock() });
  const log: string[] = [];
  const p = g.register({
    name: 'proc',
    type: 'process',
    *process(ctx) {
      log.push('start');
      yield ctx.sleep(2);
      log.push('slept');
      yield ctx.waitEvent();
      log.push(
        `event ${ctx
          .takeEvents()
          .map((e) => e.type)
          .join(',')}`,
      );
      yield ctx.waitEventOrTimeout(3);
      log.push(`timeout ${ctx.takeEvents().length}`);
    },
  });
  g.start();
  // Waits with deadlines, not fixed sleeps: a loaded CI machine once took longer than 20 ms.
  await waitFor('the process to wait for an event', () => p.processState === 'event wait');
  assert.equal(log, ['start', 'slept']);
  g.signalEvent(p, 'go');
  await waitFor('the process to end', () => p.processState === 'done');
  assert.equal(log, ['start', 'slept', 'event go', 'timeout 0']);
  assert.is(p.processState, 'done');
  const c = g.nodeCounters('proc');
  assert.is(c.calls, 4);
  assert.is(c.suspends, 3);
  g.close();
});

test('enqueue: a whole vector to one next moves the frame itself; allSame skips the scan', () => {
  const pool = memPool(1024);
  const g = new Graph({ pool, clock: monotonicClock() });
  const seen: { vec: Uint32Array; n: number }[] = [];
  g.register({
    name: 'in',
    type: 'input',
    next: ['a'],
    fn: (rt) => {
      if (pool.available() < pool.count) return 0;
      const n = pool.alloc(rt.scratch, 0, 200);
      g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  g.register({
    name: 'a',
    next: ['b', 'error-drop'],
    fn: (rt, f) => {
      seen.push({ vec: f!.vec, n: f!.n });
      rt.nexts.fill(0, 0, f!.n);
      g.enqueueToNext(rt, f!.vec, rt.nexts, f!.n, true);
      return f!.n;
    },
  });
  g.register({
    name: 'b',
    fn: (_rt, f) => {
      seen.push({ vec: f!.vec, n: f!.n });
      pool.free(f!.vec, 0, f!.n);
      return f!.n;
    },
  });
  g.build();
  g.runPass();
  assert.is(seen.length, 2);
  assert.is(seen[1].vec, seen[0].vec, 'node b got the very frame node a was called with');
  assert.is(seen[1].n, 200);
  assert.is(pool.available(), pool.count);
});

test('a node that throws is reported by the loop; the other frames of the pass still run', async () => {
  const pool = memPool(64);
  const g = new Graph({ pool, clock: monotonicClock(), idlePollUs: 100 });
  const errors: string[] = [];
  g.onError = (e) => errors.push(e.message);
  const got: number[] = [];
  let fed = false;
  g.register({
    name: 'in',
    type: 'input',
    next: ['bad', 'good'],
    fn: (rt) => {
      if (fed) return 0;
      fed = true;
      const a = pool.allocOne(),
        b = pool.allocOne();
      g.enqueueOne(rt, 0, a);
      g.enqueueOne(rt, 1, b);
      return 2;
    },
  });
  g.register({
    name: 'bad',
    fn: (_rt, f) => {
      pool.free(f!.vec, 0, f!.n);
      throw new Error('boom');
    },
  });
  g.register({
    name: 'good',
    fn: (_rt, f) => {
      got.push(f!.n);
      pool.free(f!.vec, 0, f!.n);
      return f!.n;
    },
  });
  g.start();
  await new Promise((r) => setTimeout(r, 20));
  g.close();
  assert.equal(errors.length, 1);
  assert.match(errors[0], 'node "bad" threw: Error: boom');
  assert.is(g.errorsThrown, 1);
  assert.equal(got, [1], 'the frame queued after the failing one ran');
  assert.is(g.pendingFrames, 0);
  assert.is(pool.available(), pool.count);
});

test('nextTable / errorTable: names and indices come from one table, in its order', () => {
  const n = nextTable({ DROP: 'error-drop', IP4: 'ip4-input', ARP: 'arp-input' });
  assert.equal(n.names, ['error-drop', 'ip4-input', 'arp-input']);
  assert.equal([n.index.DROP, n.index.IP4, n.index.ARP], [0, 1, 2]);
  const e = errorTable({
    A: { name: 'a', description: 'first' },
    B: { name: 'b', description: 'second', severity: 'warn' },
  });
  assert.equal(
    e.list.map((x) => x.name),
    ['a', 'b'],
  );
  assert.equal([e.code.A, e.code.B], [0, 1]);
  assert.ok(Object.isFrozen(e.code) && Object.isFrozen(n.index));
});

test.run();
