/**
 * The runner itself (test/run.mjs, test/runner.ts, test/harness.ts): each fixture of
 * test/fixtures/runner/ is a small test file that goes wrong in one way uvu 0.5 lets through
 * (a throwing hook, a missing native module, a test that exits or dies, a skip, a hang, a
 * test.only). Each run here is a real `node test/run.mjs --dir ...` whose exit status and
 * summary line are checked.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const RUN = fileURLToPath(new URL('./run.mjs', import.meta.url));
const FIXTURES = fileURLToPath(new URL('./fixtures/runner', import.meta.url));

interface Outcome {
  status: number | null;
  out: string;
  counts: { passed: number; failed: number; skipped: number } | null;
}

/** Run the fixtures whose names match `pattern`; CI is cleared so only --strict decides. */
function run(pattern: string, strict = false): Outcome {
  const env = { ...process.env };
  delete env.CI;
  const r = spawnSync(process.execPath, [RUN, ...(strict ? ['--strict'] : []), '--dir', FIXTURES, pattern], {
    encoding: 'utf8',
    env,
    timeout: 60_000,
  });
  const out = (r.stdout + r.stderr).replace(/\x1b\[[0-9;]*m/g, '');
  const m = /^(\d+) passed, (\d+) failed, (\d+) skipped$/m.exec(out);
  return {
    status: r.status,
    out,
    counts: m ? { passed: Number(m[1]), failed: Number(m[2]), skipped: Number(m[3]) } : null,
  };
}

function expect(o: Outcome, status: number, counts: Outcome['counts'], ...texts: string[]) {
  assert.is(o.status, status, `exit status (output:\n${o.out})`);
  assert.equal(o.counts, counts, `summary line (output:\n${o.out})`);
  for (const t of texts) assert.ok(o.out.includes(t), `output says "${t}":\n${o.out}`);
}

test('passing tests: exit 0 and the counts', () => {
  expect(run('^pass\\.ts$'), 0, { passed: 2, failed: 0, skipped: 0 });
});

test('a failed assertion fails the run; the summary names it again with its first line', () => {
  const o = run('^fail\\.ts$');
  expect(o, 1, { passed: 1, failed: 1, skipped: 0 }, 'arithmetic is broken on purpose');
  const summary = o.out.slice(o.out.indexOf('Total:'));
  assert.match(summary, /Failed \(1\):\n  \S*fail\.ts › fails: arithmetic is broken on purpose\n/);
});

test('a before hook that throws fails the run, counts its unrun tests and prints the error', () => {
  expect(
    run('^before-throws\\.ts$'),
    1,
    { passed: 0, failed: 2, skipped: 0 },
    'fixture: could not create the veth pair',
    '2 test(s) never started',
  );
});

test('a file that registers tests and never calls test.run() fails the run, naming it', () => {
  expect(
    run('^(pass|no-run)\\.ts$'),
    1,
    { passed: 2, failed: 2, skipped: 0 },
    'fixtures/runner/no-run.ts: 2 test(s) never ran: the file does not call .run()',
  );
});

test('an after hook that throws fails the run', () => {
  expect(run('^after-throws\\.ts$'), 1, { passed: 1, failed: 1, skipped: 0 }, 'fixture: 3 buffers leaked');
});

test('a file that cannot load fails alone, naming what is missing; the other files run', () => {
  expect(
    run('^(pass|load-missing)\\.ts$'),
    1,
    { passed: 2, failed: 1, skipped: 0 },
    'could not load fixtures/runner/load-missing.ts',
    'fixture-missing-addon.node',
  );
});

test('a skip is counted and its reason listed; strict mode makes it a failure', () => {
  expect(
    run('^skip\\.ts$'),
    0,
    { passed: 1, failed: 0, skipped: 1 },
    'skip.ts › needs a widget: fixture: no widget attached',
  );
  expect(run('^skip\\.ts$', true), 1, { passed: 1, failed: 1, skipped: 0 }, 'a skip is a failure: fixture: no widget');
});

test('skip() in a before hook skips every test of the file; strict mode fails them', () => {
  expect(run('^suite-skip\\.ts$'), 0, { passed: 0, failed: 0, skipped: 2 }, 'second: fixture: no network namespaces');
  expect(run('^suite-skip\\.ts$', true), 1, { passed: 0, failed: 2, skipped: 0 }, 'fixture: no network namespaces');
});

test('skip() at the top of a file skips the file; strict mode fails it', () => {
  expect(
    run('^file-skip\\.ts$'),
    0,
    { passed: 0, failed: 0, skipped: 1 },
    '(the whole file): fixture: dpdk.node was not built',
  );
  expect(
    run('^file-skip\\.ts$', true),
    1,
    { passed: 0, failed: 1, skipped: 0 },
    'a skip is a failure: fixture: dpdk.node',
  );
});

test('a test that never settles fails on its timeout and the next test still runs', () => {
  expect(run('^timeout\\.ts$'), 1, { passed: 1, failed: 1, skipped: 0 }, 'did not finish within 0.3 s');
});

test('process.exit(0) inside a test fails the run and says where', () => {
  expect(
    run('^exit\\.ts$'),
    1,
    { passed: 0, failed: 1, skipped: 0 },
    'before it reported its counts',
    'exit.ts › exits',
  );
});

test('a test process killed by a signal fails the run', () => {
  expect(run('^crash\\.ts$'), 1, { passed: 0, failed: 1, skipped: 0 }, 'killed by SIGKILL', 'crash.ts');
});

test('test.only: its left-out tests count as skipped; refused in strict mode', () => {
  expect(run('^only\\.ts$'), 0, { passed: 1, failed: 0, skipped: 1 }, 'left out by test.skip or test.only');
  expect(run('^only\\.ts$', true), 1, { passed: 1, failed: 1, skipped: 0 }, "leaves the file's other tests out");
});

test('a test registered with uvu directly, outside the harness, fails the run', () => {
  expect(run('^bare-uvu\\.ts$'), 1, { passed: 0, failed: 1, skipped: 0 }, 'ran outside test/harness.ts');
});

test('CI=true in the environment means strict mode', () => {
  const r = spawnSync(process.execPath, [RUN, '--dir', FIXTURES, '^skip\\.ts$'], {
    encoding: 'utf8',
    env: { ...process.env, CI: 'true' },
    timeout: 60_000,
  });
  assert.is(r.status, 1, r.stdout);
  assert.match(r.stdout, /^1 passed, 1 failed, 0 skipped$/m);
});

test.run();
