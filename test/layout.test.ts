import { test } from './harness.ts';
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

test('the top-level layout exists (README: Architecture)', () => {
  for (const d of ['graph', 'nodes', 'drivers', 'native', 'config', 'dataplane', 'api', 'bin', 'test', 'bench']) {
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
  const files = sources('native');
  assert.ok(files.includes('native/addons.ts'), `found ${files.join(' ')}`);
  let checked = 0;
  for (const f of files) {
    for (const spec of imports(f)) {
      assert.ok(spec.startsWith('node:') || spec.startsWith('./'), `${f} imports "${spec}"`);
      checked++;
    }
  }
  assert.ok(checked >= 3, `checked ${checked} imports`);
});

test('drivers/ import only graph/, native/ and each other', () => {
  const files = sources('drivers');
  assert.ok(files.length >= 10 && files.includes('drivers/memif.ts'), `found ${files.length} driver sources`);
  let checked = 0;
  for (const f of files) {
    for (const spec of imports(f)) {
      assert.ok(
        spec.startsWith('node:') ||
          spec.startsWith('./') ||
          spec.startsWith('../graph/') ||
          spec.startsWith('../native/'),
        `${f} imports "${spec}"`,
      );
      checked++;
    }
  }
  assert.ok(checked >= 30, `checked ${checked} imports`);
});

test('nodes/ import only graph/ and each other (never drivers/, native/, config/ or api/)', () => {
  const files = sources('nodes');
  assert.ok(files.length >= 10, `found ${files.length} node sources`);
  for (const f of files) {
    for (const spec of imports(f)) {
      const to = spec.startsWith('.') ? join(f, '..', spec) : spec;
      assert.ok(
        spec.startsWith('node:') || to.startsWith('graph/') || to.startsWith('nodes/'),
        `${f} imports "${spec}"`,
      );
    }
  }
});

/**
 * Inside nodes/, each layer imports only the layers below it: net/ (addresses, the interface
 * table) < ethernet/ (L2, ARP) < ip4/ < udp/ < handoff/ (worker handoff: it reads IPv4 and UDP
 * headers, above the protocols as VPP keeps it) < netstack.ts (the L2-L4 wiring) < rdma/.
 */
const NODE_LAYERS = ['net', 'ethernet', 'ip4', 'udp', 'handoff', 'netstack.ts', 'rdma'];

test('nodes/ layers: net < ethernet < ip4 < udp < handoff < netstack < rdma; none imports a layer above it (ethernet never ip4)', () => {
  let checked = 0;
  for (const f of sources('nodes')) {
    const from = NODE_LAYERS.indexOf(f.split('/')[1]);
    if (from < 0) continue;
    for (const spec of imports(f)) {
      if (!spec.startsWith('.')) continue;
      const to = join(f, '..', spec);
      if (!to.startsWith('nodes/')) continue;
      const layer = NODE_LAYERS.indexOf(to.split('/')[1]);
      assert.ok(
        layer >= 0 && layer <= from,
        `${f} (layer ${NODE_LAYERS[from]}) imports "${spec}" (${to.split('/')[1]})`,
      );
      checked++;
    }
  }
  assert.ok(checked >= 20, `checked ${checked} imports`);
});

test('bin/ and index.ts reach the data plane only through its contract (dataplane/api.ts, create.ts, dataplane.ts, views.ts): no nodes/, drivers/, graph/, nodes/rdma/stack.ts', () => {
  const files = [...sources('bin'), 'index.ts'];
  assert.ok(files.includes('bin/main.ts'), files.join(' '));
  for (const f of files) {
    for (const spec of imports(f)) {
      if (!spec.startsWith('.')) continue;
      const to = join(f, '..', spec);
      const ok =
        to.startsWith('bin/') ||
        to.startsWith('api/') ||
        to.startsWith('config/') ||
        to === 'dataplane/dataplane.ts' ||
        to === 'dataplane/api.ts' ||
        to === 'dataplane/create.ts' ||
        to === 'dataplane/views.ts' ||
        to === 'index.ts' ||
        // exec replaces the process with the program (the core addon's execve): no data plane.
        (f === 'bin/exec.ts' && to === 'native/addons.ts');
      assert.ok(ok, `${f} imports "${spec}"`);
    }
  }
});

test('Dataplane.internals (the insides, for tests and benchmarks) is never used by api/, bin/ or index.ts', () => {
  const files = [...sources('api'), ...sources('bin'), 'index.ts'];
  assert.ok(files.length >= 5 && files.includes('bin/main.ts'), `found ${files.join(' ')}`);
  for (const f of files) {
    assert.not.match(readFileSync(join(root, f), 'utf8'), /\binternals\(/, `${f} uses Dataplane.internals`);
  }
});

test('api/ reaches the data plane only through its contract, DataplaneApi and the views (plus the pure renderers of graph/format.ts)', () => {
  const files = sources('api');
  assert.ok(files.length >= 3, `found ${files.length} api sources`);
  for (const f of files) {
    for (const spec of imports(f)) {
      const to = spec.startsWith('.') ? join(f, '..', spec) : spec;
      const ok =
        spec.startsWith('node:') ||
        !spec.startsWith('.') ||
        to.startsWith('api/') ||
        to === 'dataplane/api.ts' ||
        to === 'dataplane/views.ts' ||
        to === 'graph/format.ts';
      assert.ok(ok, `${f} imports "${spec}"`);
    }
  }
});

test('every test file takes test/suite from test/harness.ts, never from uvu directly (timeouts, hook failures, counted skips)', () => {
  const files = sources('test').filter((f) => !f.startsWith('test/fixtures/') && f !== 'test/harness.ts');
  const tests = files.filter((f) => f.endsWith('.test.ts'));
  assert.ok(tests.length >= 60, `found ${tests.length} test files`);
  for (const f of files)
    assert.not.ok(imports(f).includes('uvu'), `${f} imports uvu itself: take test and suite from the harness`);
  // Directly, or through a helper that builds its suites (rdma-ops-helpers.ts).
  const viaHarness = (f: string, seen = new Set<string>()): boolean =>
    !seen.has(f) &&
    (seen.add(f), true) &&
    imports(f).some(
      (s) =>
        /(^|\/)harness\.ts$/.test(s) ||
        (s.startsWith('./') && s.endsWith('-helpers.ts') && viaHarness(join('test', s), seen)),
    );
  for (const f of tests) assert.ok(viaHarness(f), `${f} takes its test API from the harness`);
});

test('no two source files share a basename (index.ts aside): a name says one job', () => {
  const all = ['graph', 'nodes', 'drivers', 'native', 'config', 'dataplane', 'api', 'bin', 'bench']
    .flatMap((d) => readdirSync(join(root, d), { recursive: true, encoding: 'utf8' }).map((f) => join(d, f)))
    .filter((f) => !f.startsWith('native/build') && !f.startsWith('bin/dist') && /\.(ts|mts|mjs|c|cc|h)$/.test(f));
  assert.ok(all.length >= 150, `found ${all.length} sources`);
  const seen = new Map<string, string>();
  for (const f of all) {
    const base = f.split('/').pop() as string;
    if (base === 'index.ts') continue;
    assert.not.ok(seen.has(base), `${f} and ${seen.get(base)} share the name ${base}`);
    seen.set(base, f);
  }
});

test('one IPv4 parser: the configuration and the nodes agree on every form (010.0.0.1 refused by both)', async () => {
  const { parseIp4: cfg } = await import('../config/formats.ts');
  const { ip4OrNull } = await import('../nodes/net/address.ts');
  for (const s of ['10.0.0.1', '0.0.0.0', '255.255.255.255', '010.0.0.1', '1.2.3', '256.1.1.1', '1.2.3.4 ', '00.1.1.1'])
    assert.is(cfg(s), ip4OrNull(s), s);
  assert.is(cfg('010.0.0.1'), null);
  assert.is(cfg('10.0.0.1'), 0x0a000001);
});

test('no import circle in dataplane/: its modules form a tree of imports, types included', () => {
  const files = sources('dataplane');
  assert.ok(files.length >= 10 && files.includes('dataplane/api.ts'), `found ${files.join(' ')}`);
  const edges = new Map<string, string[]>();
  for (const f of files)
    edges.set(
      f,
      imports(f)
        .filter((spec) => spec.startsWith('.'))
        .map((spec) => join(f, '..', spec))
        .filter((to) => to.startsWith('dataplane/')),
    );
  // Depth-first search for a cycle: the first found is named whole.
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (f: string): string[] | null => {
    if (state.get(f) === 'done') return null;
    if (state.get(f) === 'open') return [...path.slice(path.indexOf(f)), f];
    state.set(f, 'open');
    path.push(f);
    for (const to of edges.get(f) ?? []) {
      const c = visit(to);
      if (c) return c;
    }
    path.pop();
    state.set(f, 'done');
    return null;
  };
  for (const f of files) {
    const cycle = visit(f);
    assert.is(cycle, null, `import circle: ${cycle?.join(' -> ')}`);
  }
});

test.run();
