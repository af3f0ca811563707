/**
 * The memif state array and frame bound have one definition, native/core/memif.h: the core
 * addon exports them (core.memifLayout()), and the drivers that share the array with the native
 * data path (drivers/memif.ts, drivers/memif-lane.ts) take them from there, keeping no copy.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCore } from '../native/addons.ts';
import { ROOT } from './readme-helpers.ts';

test("core.memifLayout() is memif.h's: every kSt* index, kStateLen and kMaxFrame", () => {
  const layout = loadCore().memifLayout();
  const header = readFileSync(join(ROOT, 'native/core/memif.h'), 'utf8');
  const indices = [...header.matchAll(/\bkSt([A-Z][A-Za-z]*)\s*=\s*(\d+)/g)].map((m) => [m[1], Number(m[2])] as const);
  assert.ok(indices.length >= 5, `memif.h's kSt* indices: ${indices.map(([n]) => n)}`);
  assert.equal(
    Object.entries(layout.state).sort(([, a], [, b]) => a - b),
    indices.map(([name, value]) => [name.toLowerCase(), value]),
    'one entry per kSt* index, by its name',
  );
  assert.is(layout.stateLength, Number(/\bkStateLen\s*=\s*(\d+)/.exec(header)?.[1]));
  const maxFrame = /\bkMaxFrame\s*=\s*([\d\s*]+);/.exec(header)?.[1] ?? '';
  assert.is(
    layout.maxFrame,
    maxFrame.split('*').reduce((p, x) => p * Number(x), 1),
    `kMaxFrame (${maxFrame})`,
  );
  for (const i of Object.values(layout.state)) assert.ok(i < layout.stateLength);
});

test('the memif drivers read the state indices and the frame bound from the addon, and keep no copy', () => {
  for (const f of ['drivers/memif.ts', 'drivers/memif-lane.ts']) {
    const text = readFileSync(join(ROOT, f), 'utf8');
    assert.not.match(text, /\bST_[A-Z]+\s*=\s*\d/, `${f}: a copy of a kSt* index`);
    assert.not.match(text, /256\s*\*\s*1024|262144/, `${f}: a copy of kMaxFrame`);
    assert.not.match(text, /new Uint32Array\(8\)/, `${f}: a copy of kStateLen`);
    assert.match(text, /\.memifLayout\(\)/, `${f} asks the addon`);
    assert.match(text, /new Uint32Array\(layout\.stateLength\)/, `${f} sizes the state array by it`);
    assert.match(text, /layout\.maxFrame/, `${f} bounds a frame by it`);
  }
});

test.run();
