/**
 * `import { Dataplane } from 'rdma-graph'` from plain Node (no loader flags): the package's
 * own entry registers the TypeScript loader. Run as a separate process through the package's
 * self-reference, as an embedding application would.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { blocks, EMBED, README } from './readme-helpers.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

test('an application imports rdma-graph and drives a data plane through the facade', () => {
  const script = `
    import { Dataplane, DataplaneError, parseConfig, VERSION } from 'rdma-graph';
    const cfg = parseConfig('interfaces: [{name: p0, driver: pipe, pipe: {peer: p1}, address: 10.9.0.1/24}, {name: p1, driver: pipe, pipe: {peer: p0}, address: 10.8.0.1/24}]');
    const dp = await Dataplane.create(cfg);
    const ifs = await dp.interfaces();
    const pd = await dp.createPd();
    let kind = null;
    try { await dp.destroyPd(pd.pd + 100); } catch (e) { kind = e instanceof DataplaneError ? e.kind : String(e); }
    await dp.close();
    console.log(JSON.stringify({ version: VERSION, ifs: ifs.map((i) => [i.name, i.state]), pd: pd.pd, kind }));
  `;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
  const r = JSON.parse(out.trim().split('\n').pop()!);
  const { version } = JSON.parse(
    execFileSync(process.execPath, ['-p', 'JSON.stringify(require("./package.json"))'], {
      cwd: ROOT,
      encoding: 'utf8',
    }),
  );
  assert.is(r.version, version);
  assert.equal(r.ifs, [
    ['p0', 'up'],
    ['p1', 'up'],
  ]);
  assert.is(typeof r.pd, 'number');
  assert.is(r.kind, 'not-found');
});

test("the README's embedding snippet, as written (its '...' line printing the PD), from plain Node", () => {
  const block = blocks(README).find((b) => b.startsWith(EMBED));
  assert.ok(block, 'the README shows the snippet');
  const lines = block.split('\n');
  assert.is(lines.filter((l) => l.trim() === '...').length, 1, 'one elided line');
  const script = lines.map((l) => (l.trim() === '...' ? 'console.log(JSON.stringify({ pd }));' : l)).join('\n');
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
  const r = JSON.parse(out.trim().split('\n').pop()!);
  assert.is(typeof r.pd, 'number', out);
});

test.run();
