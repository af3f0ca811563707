/**
 * The documents that are generated stay in step with their sources (issue 27): the file map of
 * docs/ARCHITECTURE.md with the files' header comments, every source file has one, and the
 * README points to the architecture document.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARCHITECTURE, headline, ROOT, withFileMap } from '../docs/update-architecture.ts';

test('docs/ARCHITECTURE.md has the file map of the tree as it is (regenerate: node --import tsx docs/update-architecture.ts)', () => {
  const text = readFileSync(ARCHITECTURE, 'utf8');
  const want = withFileMap(text);
  if (want !== text) {
    const a = text.split('\n'),
      b = want.split('\n');
    const k = a.findIndex((l, i) => l !== b[i]);
    assert.unreachable(`the file map differs from line ${k + 1}:\n  has:  ${a[k]}\n  want: ${b[k]}`);
  }
});

test('a file without a header comment is refused by the map, naming it', () => {
  assert.throws(() => headline('package.json'), /package\.json: no header comment/);
  assert.match(headline('graph/graph.ts'), /^The vector engine: /);
});

test('the README points to docs/ARCHITECTURE.md and CONTRIBUTING.md, and both exist', () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  assert.match(readme, /\]\(docs\/ARCHITECTURE\.md\)/);
  assert.match(readme, /\]\(CONTRIBUTING\.md\)/);
  assert.ok(readFileSync(join(ROOT, 'CONTRIBUTING.md'), 'utf8').length > 200);
});

test.run();
