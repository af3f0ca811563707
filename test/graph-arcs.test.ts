/**
 * The packets each next arc carries (Graph.graphSnapshot, drawn by the live view): counted by
 * every way a node hands packets on (enqueueToNext with runs of mixed next indices,
 * enqueueToSingleNext, enqueueOne), arcs added after build included, never cleared.
 */
import * as assert from 'uvu/assert';
import { Graph } from '../graph/graph.ts';
import { monotonicClock } from '../graph/clock.ts';
import type { Frame, NodeRuntime } from '../graph/node.ts';
import { test } from './harness.ts';
import { memPool } from './helpers.ts';

function arcsOf(g: Graph, node: string): Record<string, number> {
  const n = g.graphSnapshot().nodes.find((x) => x.name === node)!;
  return Object.fromEntries(n.next.map((to, i) => [to, n.arcPackets[i]]));
}

test('arcs: packets counted per next arc by enqueueToNext, enqueueToSingleNext and enqueueOne; late arcs too', () => {
  const pool = memPool(4096);
  const g = new Graph({ pool, clock: monotonicClock() });
  const queue: number[] = [];
  g.register({
    name: 'src-input',
    type: 'input',
    next: ['split'],
    fn: (rt: NodeRuntime) => {
      const n = Math.min(queue.length, rt.scratch.length);
      for (let i = 0; i < n; i++) rt.scratch[i] = pool.writePacket(Uint8Array.of(queue[i]), 0, 1);
      queue.splice(0, n);
      if (n > 0) g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  // Byte 0 -> one, 1 -> two, 2 -> one at a time through enqueueOne to 'single'.
  g.register({
    name: 'split',
    next: ['one', 'two', 'single'],
    fn: (rt: NodeRuntime, f: Frame | null) => {
      const fr = f as Frame;
      let k = 0;
      for (let i = 0; i < fr.n; i++) {
        const bi = fr.vec[i];
        const c = pool.u8[pool.offset[bi]];
        if (c === 2) g.enqueueOne(rt, 2, bi);
        else {
          rt.scratch[k] = bi;
          rt.nexts[k++] = c;
        }
      }
      g.enqueueToNext(rt, rt.scratch, rt.nexts, k);
      return fr.n;
    },
  });
  const sink = (rt: NodeRuntime, f: Frame | null) => {
    pool.free((f as Frame).vec, 0, (f as Frame).n);
    return (f as Frame).n;
  };
  for (const name of ['one', 'two', 'single', 'late']) g.register({ name, fn: sink });
  g.build();

  queue.push(0, 0, 1, 0, 1, 1, 1, 2, 0, 2);
  g.runPass();
  assert.equal(arcsOf(g, 'src-input'), { split: 10 });
  assert.equal(arcsOf(g, 'split'), { one: 4, two: 4, single: 2 });
  assert.equal(arcsOf(g, 'one'), {}, 'a node with no next arcs');

  // A whole vector to one arc (the frame moves on whole), and counts add up across passes.
  queue.push(...new Array(300).fill(1));
  g.runPass(); // 256
  g.runPass(); // 44
  assert.equal(arcsOf(g, 'split'), { one: 4, two: 304, single: 2 });
  assert.equal(arcsOf(g, 'src-input'), { split: 310 });

  // An arc added at run time starts at zero and counts; the others keep theirs.
  const split = g.node('split');
  const late = g.addNext(split, 'late');
  assert.is(late, 3);
  assert.equal(arcsOf(g, 'split'), { one: 4, two: 304, single: 2, late: 0 });
  const bi = pool.writePacket(Uint8Array.of(9), 0, 1);
  g.enqueueOne(split, late, bi);
  g.drain();
  assert.equal(arcsOf(g, 'split'), { one: 4, two: 304, single: 2, late: 1 });

  // clear runtime leaves the arcs alone (readers take differences).
  g.clearRuntime();
  assert.equal(arcsOf(g, 'split').two, 304);
});

test.run();
