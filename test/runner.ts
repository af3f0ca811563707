/**
 * The test process that test/run.mjs starts (node --import tsx test/runner.ts ...). It loads
 * the test files one by one (a file that fails to load, say for a missing native module,
 * fails alone, naming what is missing), runs the suites uvu queued, and counts from the
 * harness's records (test/harness.ts): passed, failed (tests, hooks, loads, refusals) and
 * skipped, with every skip's reason. The result goes to fd 3 as one JSON line for run.mjs,
 * which also notices a process that died or exited before the end.
 *
 *   runner.ts [--strict] [--hw] [--dir DIR] [PATTERN]
 *
 * Default: test/*.test.ts; --hw: test/hw/*.test.ts (never strict: that hardware is nowhere
 * here); --dir: every .ts file of DIR (the runner's own fixtures). PATTERN is a
 * case-insensitive regular expression on the file name, as with uvu.
 */
import { readdirSync, writeSync, fstatSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

interface Args {
  strict: boolean;
  hw: boolean;
  dir: string | null;
  pattern: RegExp | null;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { strict: false, hw: false, dir: null, pattern: null };
  for (let i = 0; i < argv.length; i++) {
    const s = argv[i];
    if (s === '--strict') a.strict = true;
    else if (s === '--hw') a.hw = true;
    else if (s === '--dir') {
      const d = argv[++i];
      if (d === undefined) throw new Error('--dir needs a directory');
      a.dir = d;
    } else if (s.startsWith('-'))
      throw new Error(`unknown option ${s} (runner.ts [--strict] [--hw] [--dir DIR] [PATTERN])`);
    else if (a.pattern !== null) throw new Error(`one pattern only (got a second: ${s})`);
    else a.pattern = new RegExp(s, 'i');
  }
  return a;
}

/** Result channel to run.mjs: fd 3 when it is a pipe the parent gave us. */
const channel = (() => {
  try {
    const st = fstatSync(3);
    return st.isFIFO() || st.isSocket() ? 3 : -1;
  } catch {
    return -1;
  }
})();
const send = (m: object) => {
  if (channel >= 0) writeSync(channel, JSON.stringify(m) + '\n');
};

const args = parseArgs(process.argv.slice(2));
const root = resolve(import.meta.dirname, '..');
const dir = resolve(root, args.dir ?? (args.hw ? 'test/hw' : 'test'));
const namePattern = args.dir !== null ? /\.ts$/ : /\.test\.ts$/;
const files = readdirSync(dir)
  .filter((f) => namePattern.test(f) && (args.pattern === null || args.pattern.test(f)))
  .sort();

// uvu must see UVU_DEFER before it loads (through the harness), or it runs each file by itself.
const G = globalThis as unknown as { UVU_DEFER: number; UVU_QUEUE: unknown[][]; UVU_INDEX: number };
G.UVU_DEFER = 1;
G.UVU_QUEUE = [];
const { state, isStrictEnv, Skip, failureText } = await import('./harness.ts');
state.strict = !args.hw && (args.strict || isStrictEnv(process.env));

type Run = () => Promise<[string | true, number, number, number]>;
const loads: { file: string; message: string }[] = [];
let finished = false;
let where = '';
process.on('exit', (code) => {
  if (finished) return;
  const at = state.current || where;
  console.error(`\nThe test process exited (code ${code}) before the run finished, during ${at}.`);
  send({ type: 'early', at, code });
  process.exitCode = 1;
});

const t0 = performance.now();
for (const [i, f] of files.entries()) {
  const name = relative(join(root, 'test'), join(dir, f));
  G.UVU_QUEUE.push([name]);
  G.UVU_INDEX = i;
  state.file = name;
  where = `loading ${name}`;
  try {
    await import(pathToFileURL(join(dir, f)).href);
  } catch (e) {
    // skip() at a file's top level: the whole file cannot run here (a failure when strict).
    if (e instanceof Skip && !state.strict) {
      state.tests.push({ file: name, suite: '', name: '(the whole file)', outcome: 'skip', reason: e.message, ms: 0 });
      for (const x of state.suites) if (x.file === name) x.ran = true; // not run on purpose: skipped
      console.log(`  SKIP (${name}): ${e.message}`);
      continue;
    }
    loads.push({ file: name, message: failureText(e) });
  }
}

const write = (s: string) => process.stdout.write(s);
let uvuSkipped = 0,
  notRun = 0,
  unrecorded = 0;
for (const group of G.UVU_QUEUE) {
  const name = group[0] as string;
  where = name;
  send({ type: 'file', name });
  write(`\x1b[1m\x1b[4m${name}\x1b[24m\x1b[22m\n`);
  const load = loads.find((l) => l.file === name);
  if (load) {
    write(`  \x1b[41m FAIL \x1b[49m could not load ${name}:\n    ${load.message.replace(/\n/g, '\n    ')}\n\n`);
    continue;
  }
  for (const r of state.refused.filter((r) => r.file === name)) write(`  \x1b[41m FAIL \x1b[49m ${r.message}\n`);
  for (const run of group.slice(1) as Run[]) {
    const before = state.tests.length;
    let res: Awaited<ReturnType<Run>> | null = null;
    try {
      res = await run();
    } catch (e) {
      // uvu runs `after` hooks in a `finally`: one that throws escapes its runner. The
      // harness recorded it; the tests' own outcomes are in the records.
      write(`\n  \x1b[41m FAIL \x1b[49m ${name}: ${e instanceof Error ? e.message : String(e)}\n`);
    }
    const mine = state.tests.slice(before);
    const okCount = mine.filter((t) => t.outcome !== 'fail').length;
    if (res !== null) {
      const [errs, ran, skipped, max] = res;
      uvuSkipped += skipped;
      // Passed by uvu but not seen by the harness: registered with uvu directly.
      const outside = Math.max(0, ran - okCount);
      unrecorded += outside;
      // Registered but never started: a `before` hook failed (or before.each stopped the rest).
      notRun += Math.max(0, max - mine.length - outside);
      if (errs !== true) write('\n' + errs + '\n');
    }
  }
}
where = 'the summary';

const skips = state.tests.filter((t) => t.outcome === 'skip');
const passedTests = state.tests.filter((t) => t.outcome === 'pass').length;
const failedTests = state.tests.filter((t) => t.outcome === 'fail').length;
const afterHooks = state.hooks.filter((h) => h.hook === 'after');
// Tests registered in a suite whose run() was never called: uvu would not run them, silently.
const unrun = state.suites.filter((x) => x.tests > 0 && !x.ran);
const unrunTests = unrun.reduce((n, x) => n + x.tests, 0);
const failed = failedTests + notRun + unrecorded + unrunTests + loads.length + state.refused.length + afterHooks.length;
const total = passedTests + failedTests + skips.length + notRun + unrecorded + unrunTests;
const skipped = skips.length + uvuSkipped;
const ms = performance.now() - t0;

write(`\n  Total:     ${total + uvuSkipped} tests in ${files.length} files`);
write(`\n  Passed:    ${passedTests}`);
write(`\n  Failed:    ${failed}`);
write(`\n  Skipped:   ${skipped}${state.strict ? ' (strict mode: a skip is a failure)' : ''}`);
write(`\n  Duration:  ${(ms / 1000).toFixed(1)} s\n`);
// Named again at the end: a long run's output may reach a reader only by its head and tail.
const fails = state.tests.filter((t) => t.outcome === 'fail');
if (fails.length) {
  write(`\nFailed (${fails.length}):\n`);
  for (const f of fails) write(`  ${f.file} › ${f.name}${f.reason ? `: ${f.reason.slice(0, 200)}` : ''}\n`);
}
if (skips.length || uvuSkipped) {
  write(`\nSkipped (${skipped}):\n`);
  for (const s of skips) write(`  ${s.file} › ${s.name}: ${s.reason}\n`);
  if (uvuSkipped) write(`  ${uvuSkipped} left out by test.skip or test.only\n`);
}
if (state.hooks.length) {
  write(`\nHooks that failed (${state.hooks.length}; uvu alone would not report them):\n`);
  for (const h of state.hooks)
    write(`  ${h.file}${h.suite ? ` (${h.suite})` : ''} › ${h.hook}: ${h.message.split('\n')[0]}\n`);
}
if (loads.length) {
  write(`\nFiles that could not load (${loads.length}):\n`);
  for (const l of loads) write(`  ${l.file}: ${l.message.split('\n')[0]}\n`);
}
if (notRun > 0) write(`\n${notRun} test(s) never started: a hook before them failed\n`);
for (const x of unrun)
  write(`\n${x.file}${x.suite ? ` (${x.suite})` : ''}: ${x.tests} test(s) never ran: the file does not call .run()\n`);
if (unrecorded > 0) write(`\n${unrecorded} test(s) ran outside test/harness.ts (import test from './harness.ts')\n`);
const slow = state.tests
  .filter((t) => t.ms > 10_000)
  .sort((a, b) => b.ms - a.ms)
  .slice(0, 8);
if (slow.length) {
  write(`\nSlowest tests:\n`);
  for (const s of slow) write(`  ${(s.ms / 1000).toFixed(1)} s  ${s.file} › ${s.name}\n`);
}

const ok = failed === 0 && state.hooks.length === 0;
send({ type: 'result', passed: passedTests, failed, skipped, strict: state.strict, ok });
finished = true;
process.exit(ok ? 0 : 1);
