import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { README, renderReadme, routeReference } from '../api/reference.ts';
import { apiRoutes } from '../api/server.ts';

test('api/README.md lists every route the server registers (regenerate: node --import tsx api/reference.ts)', () => {
  const text = readFileSync(README, 'utf8');
  assert.is(renderReadme(text), text);
  const table = routeReference();
  for (const r of apiRoutes({ token: false }))
    assert.ok(table.includes(`| \`${r.method} ${r.path}\` |`), `${r.method} ${r.path} in the table`);
});

test.run();
