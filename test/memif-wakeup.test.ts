/**
 * memif's receive path and the sleeping engine (issue 17): an interrupt (the peer's kick) may be
 * taken only when the ring is really empty, and a taken kick is followed by another look. Two
 * ways to strand a frame in the ring while the engine sleeps, both seen here before the fix:
 * the driver's refill calls the receive path with max 0 right after the link comes up, which
 * took the kick of the first frame without taking the frame (the sender then waited for ever at
 * frame 0); and a frame published and kicked between the look and the drain lost its kick (with
 * the gap widened, within a few hundred frames). The receiver runs in its own process
 * (test/memif-sleeper-helpers.ts: a graph that sleeps as soon as it is idle) with
 * RDMA_GRAPH_MEMIF_RX_GAP_US=200 widening the gap between the look and the drain;
 * native/tools/memif-hostile's `trickle` mode sends single frames at random moments and waits
 * for each to be taken.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { ROOT } from './readme-helpers.ts';

const HOSTILE = join(NATIVE_BUILD_DIR, 'memif-hostile');

test('a sleeping engine misses no memif kick: 300 single frames at random moments, the first one right after the link comes up, each taken at once', async () => {
  if (!existsSync(HOSTILE)) skip(`${HOSTILE} not built (npm run build)`);
  const dir = mkdtempSync(join(tmpdir(), 'memif-wakeup-'));
  const sock = join(dir, 'm.sock');
  const rx = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/memif-sleeper-helpers.ts'), sock], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, RDMA_GRAPH_MEMIF_RX_GAP_US: '200' },
  });
  // Listened for from the start: a receiver that dies early has exited before any later look.
  const exited = new Promise<void>((r) => rx.once('exit', () => r()));
  const lines: Record<string, number | boolean>[] = [];
  createInterface({ input: rx.stdout! }).on('line', (l) => lines.push(JSON.parse(l)));
  const next = async (n: number) => {
    const end = Date.now() + 10_000;
    while (lines.length < n && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    assert.ok(lines.length >= n, 'the receiver answers');
    return lines[n - 1];
  };
  try {
    await next(1); // listening
    const out = await new Promise<string>((resolve) => {
      const p = spawn(HOSTILE, ['trickle', sock, '300'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let o = '';
      p.stdout.on('data', (d) => (o += d));
      p.stderr.on('data', (d) => (o += d));
      p.on('close', () => resolve(o));
    });
    assert.match(out, /^connected$/m, out);
    assert.not.match(out, /stuck/, `a frame was never taken: a lost wake-up\n${out}`);
    assert.match(out, /^stalls 0 of 300$/m, `frames waited 250 ms or more: lost wake-ups\n${out}`);
    rx.stdin!.write('status\n');
    const st = await next(2);
    assert.is(st.received, 300, 'every frame arrived');
    assert.ok(
      (st.sleeps as number) > 50,
      `the engine slept between frames (${st.sleeps} sleeps): the wake path was used`,
    );
  } finally {
    rx.stdin!.end();
    // It ends when its stdin closes; one that does not is killed rather than waited for forever.
    const kill = setTimeout(() => rx.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(kill);
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
