/**
 * Hostile input at every receive node (issue 11; UD datagrams, issue 30): seeded random and
 * mutated frames through one stack (test/hostile-run-helpers.ts, in a worker thread). The work
 * each frame causes (frames sent, buffers allocated, completions, packets through nodes and
 * dispatches, timers started, graph passes) is counted and must stay within bounds computed from the stack's own state
 * before it, never from a value the peer sent (issue 35: nothing here is timed; the cost in µs
 * is bench/hostile.ts's, `npm run bench -- hostile`). A frame over a bound fails the test with
 * its hex dump and which count went over which bound. One that runs on for STUCK_MS (a loop
 * steered by a packet field) is stopped from here, and the test fails with that frame's hex
 * dump. Replay or extend a run:
 *
 *   HOSTILE_SEED=7 HOSTILE_FRAMES=1000000 node test/run.mjs hostile-frames
 *   node --import tsx test/hostile-frames.test.ts --seed 7
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Worker } from 'node:worker_threads';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { hexDump } from './hostile-helpers.ts';
import { BEAT_BYTES, readBeat, type HostileRun } from './hostile-run-helpers.ts';

const argSeed = process.argv.indexOf('--seed');
const SEED = Number(argSeed > 0 ? process.argv[argSeed + 1] : (process.env.HOSTILE_SEED ?? 1));
const FRAMES = Number(process.env.HOSTILE_FRAMES ?? 100_000);
const STUCK_MS = 2000;

/** Run `runHostile` in a worker (tsx registered there too); a frame stuck for STUCK_MS ends it. */
function inWorker(run: HostileRun): Promise<{ ok: boolean; report?: string[]; message?: string }> {
  // tsx's ESM entry, from its package's exports map (this file may run as CommonJS under uvu).
  const pkg = createRequire(import.meta.url).resolve('tsx/package.json');
  const entry = (JSON.parse(readFileSync(pkg, 'utf8')) as { exports: Record<string, { import: { default: string } }> })
    .exports['./esm/api'].import.default;
  const tsx = pathToFileURL(join(dirname(pkg), entry)).href;
  const me = new URL('./hostile-run-helpers.ts', import.meta.url).href;
  Atomics.store(new Int32Array(run.beat, 0, 1), 0, -1);
  const w = new Worker(
    `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(me)}); })`,
    {
      eval: true,
      workerData: { hostile: true, run },
    },
  );
  return new Promise((resolve, reject) => {
    let last = -1,
      since = Date.now();
    const watch = setInterval(() => {
      const b = readBeat(run.beat);
      // -1: the worker is still loading and setting up (no frame yet: the test's timeout covers it).
      if (b.index !== last || b.index === -1) {
        last = b.index;
        since = Date.now();
        return;
      }
      if (Date.now() - since < STUCK_MS) return;
      clearInterval(watch);
      void w.terminate();
      const what =
        b.index >= 0
          ? `frame ${b.index} of seed ${run.seed} (${b.kind}, ${b.bytes.length} bytes)`
          : 'the good exchange after the frames';
      resolve({
        ok: false,
        message: `${what} still running after ${STUCK_MS} ms: stopped${b.index >= 0 ? `\n${hexDump(b.bytes)}` : ''}`,
      });
    }, 100);
    w.on('message', (m) => {
      clearInterval(watch);
      void w.terminate();
      resolve(m);
    });
    w.on('error', (e) => {
      clearInterval(watch);
      reject(e);
    });
  });
}

test(`${FRAMES} hostile frames (seed ${SEED}): no exception, each frame's work within bounds from our own state, all counted, pool full, the stack still works`, async () => {
  const r = await inWorker({
    seed: SEED,
    frames: FRAMES,
    beat: new SharedArrayBuffer(BEAT_BYTES),
  });
  if (r.report) for (const l of r.report) console.log(`  ${l}`);
  assert.ok(r.ok, r.message);
});

test.run();
