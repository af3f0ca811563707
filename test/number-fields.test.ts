// graph/number-fields.ts: the per-connection classes keep one hidden class (V8 map) whatever
// values their number fields take, so a QP whose PSNs start above 2^31 does not deoptimise the
// data path compiled for the QPs before it. Checked in a fresh node (its own map trees) with
// --allow-natives-syntax (%HaveSameMap).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from './harness.ts';
import * as assert from 'uvu/assert';

const FIXTURE = fileURLToPath(new URL('./fixtures/maps/hidden-classes.ts', import.meta.url));

test('Qp, SendWr, RespSlot, Mr, Mw and the verbs rings: an object made before another took values outside 31 bits has the map of one made after', () => {
  const r = spawnSync(process.execPath, ['--allow-natives-syntax', '--import', 'tsx', FIXTURE], { encoding: 'utf8' });
  assert.is(r.status, 0, `the fixture ran: ${r.stderr}`);
  const got = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as Record<
    string,
    { numberFields: number; firstSameAsLater: boolean; usedSameAsLater: boolean }
  >;
  assert.equal(Object.keys(got).sort(), ['CqRing', 'Mr', 'Mw', 'Qp', 'QpRing', 'RespSlot', 'SendWr', 'SrqRing']);
  for (const [name, c] of Object.entries(got)) {
    assert.ok(c.numberFields >= 2, `${name}: number fields found (${c.numberFields})`);
    assert.ok(c.usedSameAsLater, `${name}: the object that took the values has the later one's map`);
    assert.ok(c.firstSameAsLater, `${name}: the first object's map was not deprecated by the other's values`);
  }
});
test.run();
