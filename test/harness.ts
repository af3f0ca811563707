/**
 * The suite's test API: uvu's `test` and `suite`, with what uvu 0.5 leaves to chance closed.
 *
 * - Every test and hook has a timeout (DEFAULT_TIMEOUT_MS, or `{ timeout }` as a third
 *   argument): a promise that never settles fails its test instead of hanging the run.
 * - A hook that throws is recorded (uvu drops the exception and reports nothing: its runner's
 *   `finally` returns), so test/runner.ts fails the run and prints the error.
 * - `skip(reason)` inside a test, or in a `before` hook for the whole suite, records a skip
 *   with its reason. In strict mode (CI, or `--strict`) a skip is a failure; `test.only` and
 *   `test.skip` are refused there too, since each leaves tests out silently.
 *
 * Every test file imports `test` (or `suite`) from here, never from 'uvu' (test/layout.test.ts
 * checks). Run through test/run.mjs; a file run on its own (`node --import tsx test/x.test.ts`)
 * still works, with uvu's own reporting.
 */
import * as uvu from 'uvu';

/** A test or hook that takes longer than this fails (it can ask for more with `{ timeout }`). */
export const DEFAULT_TIMEOUT_MS = 180_000;

export interface TestOptions {
  /** Milliseconds before the test (or hook) fails as not finished. */
  timeout?: number;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Callback = (context: Record<string, any>) => unknown;

export interface Hook {
  (fn: Callback, options?: TestOptions): void;
  each(fn: Callback, options?: TestOptions): void;
}

export interface Test {
  (name: string, fn: Callback, options?: TestOptions): void;
  only(name: string, fn: Callback, options?: TestOptions): void;
  skip(name?: string, fn?: Callback): void;
  before: Hook;
  after: Hook;
  run(): void;
}

/** Thrown by `skip()`; the wrapper turns it into a recorded skip (or, strict, a failure). */
export class Skip extends Error {
  override name = 'Skip';
}

/** What a failure says: a skip in strict mode says why it counts, anything else its stack. */
export function failureText(e: unknown): string {
  if (e instanceof Skip) return `${STRICT_SKIP}: ${e.message}`;
  return e instanceof Error ? (e.stack ?? e.message) : String(e);
}

const STRICT_SKIP = 'could not run, and in strict mode (CI) a skip is a failure';

/** Ends the current test (or, from a `before` hook, every test of the suite) as skipped. */
export function skip(reason: string): never {
  throw new Skip(reason);
}

export interface TestRecord {
  file: string;
  suite: string;
  name: string;
  outcome: 'pass' | 'fail' | 'skip';
  reason?: string;
  ms: number;
}

export interface HookFailure {
  file: string;
  suite: string;
  hook: string;
  message: string;
}

/** What the runner reads back: shared through globalThis so every copy of this module agrees. */
export interface HarnessState {
  strict: boolean;
  /** The test file being loaded (set by the runner before each import). */
  file: string;
  /** "file › test" while a test or hook runs, for a report of where the process died. */
  current: string;
  tests: TestRecord[];
  hooks: HookFailure[];
  /** Registration errors (test.only / test.skip in strict mode), per file. */
  refused: { file: string; message: string }[];
  /** Every suite with the tests it registered, and whether its run() was called. */
  suites: { file: string; suite: string; tests: number; ran: boolean }[];
}

const KEY = Symbol.for('rdma-graph.test-harness');
const g = globalThis as unknown as Record<symbol, HarnessState | undefined>;
export const state: HarnessState = (g[KEY] ??= {
  strict: isStrictEnv(process.env),
  file: '',
  current: '',
  tests: [],
  hooks: [],
  refused: [],
  suites: [],
});

/** CI systems set CI=true (or 1); anything but unset, '', 'false' or '0' means strict. */
export function isStrictEnv(env: NodeJS.ProcessEnv): boolean {
  const ci = (env.CI ?? '').trim().toLowerCase();
  return ci !== '' && ci !== 'false' && ci !== '0';
}

/** Run `fn`, failing with a clear message when it has not settled within `ms`. */
async function withTimeout(fn: () => unknown, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s (timeout)`)), ms);
  });
  try {
    await Promise.race([Promise.resolve().then(fn), late]);
  } finally {
    clearTimeout(timer);
  }
}

function timeoutOf(o: TestOptions | undefined): number {
  const t = o?.timeout ?? DEFAULT_TIMEOUT_MS;
  if (!(t > 0 && Number.isFinite(t))) throw new Error(`test timeout must be a positive number of ms, got ${t}`);
  return t;
}

function wrap(inner: uvu.Test, suiteName: string): Test {
  const file = state.file;
  const mine = { file, suite: suiteName, tests: 0, ran: false };
  state.suites.push(mine);
  /** Set by a `before` hook that called skip(): every test of the suite is then skipped. */
  let suiteSkip: string | null = null;

  const record = (name: string, outcome: TestRecord['outcome'], ms: number, reason?: string) =>
    state.tests.push({ file, suite: suiteName, name, outcome, ms, ...(reason !== undefined ? { reason } : {}) });

  const register =
    (into: (name: string, fn: uvu.Callback) => void) => (name: string, fn: Callback, options?: TestOptions) => {
      const ms = timeoutOf(options);
      mine.tests++;
      into(name, async (ctx) => {
        if (suiteSkip !== null) {
          record(name, 'skip', 0, suiteSkip);
          return;
        }
        state.current = `${file} › ${name}`;
        const t0 = performance.now();
        try {
          await withTimeout(() => fn(ctx), ms, `test "${name}"`);
          record(name, 'pass', performance.now() - t0);
        } catch (e) {
          const elapsed = performance.now() - t0;
          if (e instanceof Skip) {
            if (state.strict) {
              record(name, 'fail', elapsed, e.message);
              throw new Error(failureText(e));
            }
            record(name, 'skip', elapsed, e.message);
            console.log(`  SKIP: ${e.message}`);
            return;
          }
          record(name, 'fail', elapsed, (e instanceof Error ? e.message : String(e)).split('\n')[0]);
          throw e;
        } finally {
          state.current = '';
        }
      });
    };

  const hook = (into: (fn: uvu.Callback) => void, kind: string) => (fn: Callback, options?: TestOptions) => {
    const ms = timeoutOf(options);
    into(async (ctx) => {
      state.current = `${file} › ${kind} hook`;
      try {
        await withTimeout(() => fn(ctx), ms, `${kind} hook`);
      } catch (e) {
        if (e instanceof Skip && kind === 'before' && !state.strict) {
          suiteSkip = e.message;
          console.log(`  SKIP (every test of ${suiteName || file}): ${e.message}`);
          return;
        }
        state.hooks.push({ file, suite: suiteName, hook: kind, message: failureText(e) });
        throw e;
      } finally {
        state.current = '';
      }
    });
  };

  const t = register(inner) as Test;
  t.only = (name, fn, options) => {
    if (state.strict) {
      state.refused.push({ file, message: `test.only("${name}") leaves the file's other tests out (strict mode)` });
      return;
    }
    register(inner.only)(name, fn, options);
  };
  t.skip = (name) => {
    if (state.strict) {
      state.refused.push({ file, message: `test.skip("${name ?? ''}") in strict mode: a skip is a failure` });
      return;
    }
    record(name ?? '(unnamed)', 'skip', 0, 'test.skip');
    inner.skip(name);
  };
  const before = hook(inner.before, 'before') as Hook;
  before.each = hook(inner.before.each, 'before.each');
  const after = hook(inner.after, 'after') as Hook;
  after.each = hook(inner.after.each, 'after.each');
  t.before = before;
  t.after = after;
  t.run = () => {
    mine.ran = true;
    inner.run();
  };
  return t;
}

/** A named suite (uvu's `suite`), with the harness's timeouts, skips and hook checks. */
export function suite(name = ''): Test {
  return wrap(uvu.suite(name), name);
}

/** The file's default suite. Each file gets its own, bound to the file being loaded. */
export const test: Test = new Proxy(function () {} as unknown as Test, {
  apply: (_t, _this, args: Parameters<Test>) => current().call(undefined, ...args),
  get: (_t, key: keyof Test) => current()[key],
});

const perFile = new Map<string, Test>();
function current(): Test {
  let t = perFile.get(state.file);
  if (t === undefined) {
    t = wrap(uvu.suite(''), '');
    perFile.set(state.file, t);
  }
  return t;
}
