import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;

function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(join(root, p)).isDirectory()) return sources(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

function imports(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);
}

test('the top-level layout of DESIGN.md exists', () => {
  for (const d of ['graph', 'nodes', 'drivers', 'native', 'config', 'api', 'test', 'bench']) {
    assert.ok(statSync(join(root, d)).isDirectory(), `${d}/ exists`);
  }
});

test('graph/ imports nothing from nodes/, drivers/ or api/ (only itself, native/ and node:)', () => {
  const files = sources('graph');
  assert.ok(files.length >= 8, `found ${files.length} graph sources`);
  for (const f of files) {
    for (const spec of imports(f)) {
      const ok = spec.startsWith('node:') || spec.startsWith('./') || spec.startsWith('../native/');
      assert.ok(ok, `${f} imports "${spec}"`);
    }
  }
});

test('native/ imports nothing above it', () => {
  for (const f of sources('native')) {
    for (const spec of imports(f)) assert.ok(spec.startsWith('node:') || spec.startsWith('./'), `${f} imports "${spec}"`);
  }
});

test('drivers/ import only graph/, native/ and each other', () => {
  for (const f of sources('drivers')) {
    for (const spec of imports(f)) {
      assert.ok(spec.startsWith('node:') || spec.startsWith('./') || spec.startsWith('../graph/') || spec.startsWith('../native/'), `${f} imports "${spec}"`);
    }
  }
});

test('nodes/ import only graph/ and each other (never drivers/, native/, config/ or api/)', () => {
  const files = sources('nodes');
  assert.ok(files.length >= 10, `found ${files.length} node sources`);
  for (const f of files) {
    for (const spec of imports(f)) {
      const to = spec.startsWith('.') ? join(f, '..', spec) : spec;
      assert.ok(spec.startsWith('node:') || to.startsWith('graph/') || to.startsWith('nodes/'), `${f} imports "${spec}"`);
    }
  }
});

test('api/ reaches the data plane only through the Dataplane facade (plus the pure renderers of graph/format.ts)', () => {
  const files = sources('api');
  assert.ok(files.length >= 3, `found ${files.length} api sources`);
  for (const f of files) {
    for (const spec of imports(f)) {
      const to = spec.startsWith('.') ? join(f, '..', spec) : spec;
      const ok = spec.startsWith('node:') || !spec.startsWith('.') || to.startsWith('api/') || to === 'dataplane.ts' || to === 'graph/format.ts';
      assert.ok(ok, `${f} imports "${spec}"`);
    }
  }
});

test.run();
