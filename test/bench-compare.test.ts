/**
 * bench/compare.ts's argument parsing and the figures it takes from benchmarks' JSON lines (the
 * comparison itself builds a worktree and runs benchmarks: `npm run bench -- compare REF`).
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { apart, figures, memoryProbe, parseCompareArgs } from '../bench/compare.ts';

const KNOWN = ['graph', 'rdma', 'l2l4'];

test('compare: REF, the benchmarks (default graph and rdma), --rounds and --seconds; bad arguments named', () => {
  assert.equal(parseCompareArgs(['HEAD~1'], KNOWN), {
    ref: 'HEAD~1',
    benches: ['graph', 'rdma'],
    rounds: 3,
    seconds: 2,
    keep: false,
  });
  assert.equal(parseCompareArgs(['v1', 'l2l4', '--rounds', '5', '--seconds', '1', '--keep'], KNOWN), {
    ref: 'v1',
    benches: ['l2l4'],
    rounds: 5,
    seconds: 1,
    keep: true,
  });
  const err = (args: string[]) => {
    try {
      parseCompareArgs(args, KNOWN);
    } catch (e) {
      return (e as Error).message;
    }
    return 'no error';
  };
  assert.is(err([]), 'bench compare: name the commit to compare with (npm run bench -- compare REF)');
  assert.is(err(['HEAD', 'nope']), 'bench compare: unknown benchmark "nope" (known: graph, rdma, l2l4)');
  assert.is(err(['HEAD', '--rounds', '0']), 'bench compare: --rounds needs a whole number 1..100, got "0"');
  assert.is(err(['HEAD', '--seconds']), 'bench compare: --seconds needs a whole number 1..100, got ""');
  assert.is(err(['HEAD', '--fast']), 'bench compare: unknown option "--fast"');
});

test('compare: every finite number of the JSON lines, by path; text lines and non-numbers ignored', () => {
  const out = [
    'machine: 2 cores',
    '{"bench":"graph","mpps":7.5,"nsPerPacketPerNode":6.25,"vector":256}',
    '{"bench":"l2l4","payload":18,"mpps":3,"perNode":[{"ns":1.5}],"note":"x"}',
    '{"bench":"l2l4","payload":18,"mpps":4}',
    '{"bench":"rdma","two":{"gbps":2.5,"bad":null,"inf":1e999}}',
    '{not json',
  ].join('\n');
  assert.equal(
    [...figures(out)],
    [
      ['graph.mpps', 7.5],
      ['graph.nsPerPacketPerNode', 6.25],
      ['graph.vector', 256],
      ['l2l4[18].payload', 18],
      ['l2l4[18].mpps', 3],
      ['l2l4[18].perNode[0].ns', 1.5],
      ['l2l4[18]#2.payload', 18],
      ['l2l4[18]#2.mpps', 4],
      ['rdma.two.gbps', 2.5],
    ],
  );
});

test("compare: apart only when one side's runs all lie beyond the other's", () => {
  assert.is(apart([1, 2], [3, 4]), 'yes');
  assert.is(apart([5, 6, 7], [1, 2, 4.9]), 'yes');
  assert.is(apart([1, 3], [2, 4]), 'no', 'overlapping ranges');
  assert.is(apart([1, 2], [2, 3]), 'no', 'touching ranges');
  assert.is(apart([1], []), 'no', 'one side absent');
});

test('compare: the memory probe gives a rate (millions of buffers a second, finite and above 0)', () => {
  const r = memoryProbe(0.05);
  assert.ok(Number.isFinite(r) && r > 0, `a rate: ${r}`);
});

test.run();
