/**
 * `npm ci` is clean with the npm the README names (11.19): every dependency with an install
 * script is reviewed in package.json's allowScripts (npm 11's install-scripts warning), as npm
 * itself reports it.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const json = (f: string) => JSON.parse(readFileSync(`${ROOT}${f}`, 'utf8')) as Record<string, unknown>;

test('every dependency with an install script is in allowScripts, and npm install-scripts ls finds none unreviewed', () => {
  const lock = json('package-lock.json') as { packages: Record<string, { hasInstallScript?: boolean }> };
  const allow = (json('package.json').allowScripts ?? {}) as Record<string, boolean>;
  const scripted = Object.entries(lock.packages)
    .filter(([path, p]) => path !== '' && p.hasInstallScript === true)
    .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
  assert.ok(scripted.length > 0, 'esbuild has a postinstall script');
  for (const name of scripted)
    assert.is(allow[name], true, `${name} runs an install script: allowScripts must name it`);
  const README = readFileSync(`${ROOT}README.md`, 'utf8');
  const named = /npm (\d+\.\d+)/.exec(README.slice(0, README.indexOf('## Using it')))?.[1];
  assert.ok(named, 'the README names the npm it was made clean with');
  const version = spawnSync('npm', ['--version'], { encoding: 'utf8' }).stdout.trim();
  if (!version.startsWith(`${named}.`)) skip(`npm ${version} here, the README names npm ${named}`);
  const r = spawnSync('npm', ['install-scripts', 'ls'], { cwd: ROOT, encoding: 'utf8' });
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /^No packages with unreviewed install scripts\.$/m, r.stdout + r.stderr);
});

test.run();
