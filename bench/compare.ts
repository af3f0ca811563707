/**
 * npm run bench -- compare REF [bench ...] [--rounds N] [--seconds N] [--keep]
 *
 * A regression guard: builds commit REF (anything `git rev-parse` takes) in a temporary git
 * worktree (node_modules linked from this tree, the native code compiled there), then runs the
 * chosen benchmarks (default: graph rdma) alternately in REF's tree and in this working tree,
 * `--rounds` times each (default 3), so that the machine's drift falls on both sides alike.
 * Every number a benchmark's JSON line carries becomes a figure: the median of each side and
 * their ratio (working tree / REF) are printed. Nothing is asserted; whether a higher ratio is
 * better depends on the figure (Gbit/s, Mpps: higher; ns, us: lower).
 *
 * How far to trust a ratio: the `apart` column says "yes" when every run of one side is beyond
 * every run of the other (their ranges do not overlap), "no" when they overlap: with a few rounds
 * on a machine that drifts, a ratio whose runs overlap is not a difference. The converse is
 * weak with few rounds: identical sides come out apart by chance with probability 2/C(2n, n) for
 * n rounds (1/3 for 2, 1/10 for 3, 1/126 for 5). And before each side's
 * run this process reads an 8 MiB buffer for half a second (`machine.memoryProbe`, M buffers of
 * 2 KiB touched per second, as the data path touches its pool's): the machine's own drift between
 * the two sides' runs, in the same table. On the 2-core VM this probe alone moved 1.4x from one
 * half second to the next (its host's neighbours), as the memory-bound figures do.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');

export interface CompareOptions {
  ref: string;
  benches: string[];
  rounds: number;
  seconds: number;
  keep: boolean;
}

/** Parse `compare`'s arguments (what follows the word); throws with a message naming the bad one. */
export function parseCompareArgs(args: string[], known: string[]): CompareOptions {
  const o: CompareOptions = { ref: '', benches: [], rounds: 3, seconds: 2, keep: false };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--rounds' || a === '--seconds') {
      const v = Number(args[++i]);
      if (!Number.isInteger(v) || v < 1 || v > 100)
        throw new Error(`bench compare: ${a} needs a whole number 1..100, got "${args[i] ?? ''}"`);
      if (a === '--rounds') o.rounds = v;
      else o.seconds = v;
    } else if (a === '--keep') o.keep = true;
    else if (a.startsWith('--')) throw new Error(`bench compare: unknown option "${a}"`);
    else if (o.ref === '') o.ref = a;
    else if (!known.includes(a))
      throw new Error(`bench compare: unknown benchmark "${a}" (known: ${known.join(', ')})`);
    else o.benches.push(a);
  }
  if (o.ref === '') throw new Error('bench compare: name the commit to compare with (npm run bench -- compare REF)');
  if (o.benches.length === 0) o.benches = ['graph', 'rdma'];
  return o;
}

/** Every finite number of a benchmark's JSON lines, by a dotted path ("rdma.writeGbps", "l2l4[18].mpps"). */
export function figures(out: string): Map<string, number> {
  const m = new Map<string, number>();
  const seen = new Map<string, number>();
  for (const line of out.split('\n')) {
    if (!line.startsWith('{')) continue;
    let o: unknown;
    try {
      o = JSON.parse(line);
    } catch {
      continue;
    }
    if (o === null || typeof o !== 'object' || Array.isArray(o)) continue;
    const rec = o as Record<string, unknown>;
    let id = typeof rec.bench === 'string' ? rec.bench : 'bench';
    if (typeof rec.payload === 'number') id += `[${rec.payload}]`;
    const n = seen.get(id) ?? 0;
    seen.set(id, n + 1);
    if (n > 0) id += `#${n + 1}`;
    walk(rec, id, m, 0);
  }
  return m;
}

function walk(v: unknown, at: string, m: Map<string, number>, depth: number): void {
  if (typeof v === 'number') {
    if (Number.isFinite(v)) m.set(at, v);
  } else if (v !== null && typeof v === 'object' && depth < 6) {
    if (Array.isArray(v)) {
      if (v.length <= 16) v.forEach((x, i) => walk(x, `${at}[${i}]`, m, depth + 1));
    } else for (const [k, x] of Object.entries(v)) if (k !== 'bench') walk(x, `${at}.${k}`, m, depth + 1);
  }
}

/**
 * What the machine gives a memory-bound loop now: `seconds` of reads of three header-like bytes
 * per 2 KiB buffer over an 8 MiB array (a data path's pool, from its cache's point of view), in
 * millions of buffers per second.
 */
export function memoryProbe(seconds = 0.5): number {
  const bytes = 8 << 20,
    stride = 2048;
  const b = new Uint8Array(bytes).fill(1);
  let acc = 0,
    n = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < seconds * 1000) {
    for (let i = 0; i < bytes; i += stride) acc += b[i] + b[i + 12] + b[i + 14];
    n += bytes / stride;
    t = performance.now();
  }
  return acc < 0 ? 0 : n / (t - t0) / 1e3;
}

/** "yes" when every run of one side lies beyond every run of the other, "no" when they overlap. */
export function apart(a: number[], b: number[]): 'yes' | 'no' {
  if (a.length === 0 || b.length === 0) return 'no';
  return Math.min(...a) > Math.max(...b) || Math.min(...b) > Math.max(...a) ? 'yes' : 'no';
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

/** Build REF in a worktree, run the benchmarks alternately, print the table. */
export async function runCompare(o: CompareOptions): Promise<void> {
  const git = (...a: string[]) => execFileSync('git', ['-C', ROOT, ...a], { encoding: 'utf8' }).trim();
  let sha: string;
  try {
    sha = git('rev-parse', '--verify', `${o.ref}^{commit}`);
  } catch {
    throw new Error(`bench compare: "${o.ref}" is not a commit of this repository`);
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), `rg-compare-${sha.slice(0, 8)}-`));
  const cores = os.cpus().length;
  console.log(
    `bench compare: ${o.benches.join(', ')} at ${sha.slice(0, 12)} (${o.ref}) vs the working tree, ` +
      `${o.rounds} alternating round(s) of ${o.seconds} s; ${cores} cores (${os.cpus()[0]?.model ?? 'unknown CPU'})`,
  );
  try {
    git('worktree', 'add', '--detach', dir, sha);
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
    console.log(`  building ${sha.slice(0, 12)} in ${dir} ...`);
    const b = spawnSync('npm', ['run', 'build'], { cwd: dir, encoding: 'utf8' });
    if (b.status !== 0)
      throw new Error(`bench compare: building ${o.ref} failed:\n${(b.stdout + b.stderr).slice(-2000)}`);
    const sides = [
      { name: 'ref', cwd: dir, runs: new Map<string, number[]>() },
      { name: 'work', cwd: ROOT, runs: new Map<string, number[]>() },
    ];
    for (let r = 0; r < o.rounds; r++) {
      // Alternate which side goes first, so neither always runs on a warmer (or hotter) machine.
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) {
        if (!existsSync(path.join(s.cwd, 'bench', 'run.ts')))
          throw new Error(`bench compare: ${s.cwd} has no bench/run.ts`);
        const probe = s.runs.get('machine.memoryProbe') ?? [];
        probe.push(memoryProbe());
        s.runs.set('machine.memoryProbe', probe);
        const p = spawnSync(
          process.execPath,
          ['--import', 'tsx', 'bench/run.ts', ...o.benches, '--json', '--seconds', String(o.seconds)],
          { cwd: s.cwd, encoding: 'utf8', maxBuffer: 64 << 20 },
        );
        const f = figures(p.stdout ?? '');
        if (p.status !== 0 || f.size === 0)
          console.log(
            `  round ${r + 1} ${s.name}: exit ${p.status}, ${f.size} figures: ${(p.stderr ?? '').trim().split('\n').slice(-2).join(' | ')}`,
          );
        for (const [k, v] of f) {
          const xs = s.runs.get(k) ?? [];
          xs.push(v);
          s.runs.set(k, xs);
        }
        console.log(`  round ${r + 1}/${o.rounds}: ${s.name} done (${f.size} figures)`);
      }
    }
    const [ref, work] = sides;
    const keys = [...new Set([...ref.runs.keys(), ...work.runs.keys()])];
    const w = Math.max(6, ...keys.map((k) => k.length));
    console.log(
      `  ${'figure'.padEnd(w)}  ${'ref'.padStart(12)}  ${'work'.padStart(12)}  work/ref  apart  (medians of ${o.rounds}; apart: no run of one side within the other's range)`,
    );
    for (const k of keys) {
      const a = ref.runs.get(k),
        c = work.runs.get(k);
      const ma = a ? median(a) : null,
        mc = c ? median(c) : null;
      const ratio = ma !== null && mc !== null && ma !== 0 ? (mc / ma).toFixed(3) : 'n/a';
      const f = (x: number | null) => (x === null ? 'absent' : Number(x.toPrecision(6)).toString()).padStart(12);
      console.log(`  ${k.padEnd(w)}  ${f(ma)}  ${f(mc)}  ${ratio.padStart(8)}  ${apart(a ?? [], c ?? []).padStart(5)}`);
    }
  } finally {
    if (o.keep) console.log(`  kept ${dir}`);
    else {
      spawnSync('git', ['-C', ROOT, 'worktree', 'remove', '--force', dir]);
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
