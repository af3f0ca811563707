#!/usr/bin/env node
// clang-format over native/'s C and C++ sources (.clang-format: Google style, 120 columns):
//   node native/tools/clang-format.mjs           rewrite them (npm run format)
//   node native/tools/clang-format.mjs --check   fail, naming the files, if one is not formatted (npm test)
// Without clang-format (Debian package clang-format) --check says so and passes, except in strict
// mode (CI set), where a check that cannot run is a failure, as a skipped test is.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const check = process.argv.includes('--check');
const files = readdirSync(join(ROOT, 'native'), { recursive: true, encoding: 'utf8' })
  .filter((f) => /\.(c|cc|h)$/.test(f) && !f.startsWith('build'))
  .map((f) => join(ROOT, 'native', f))
  .sort();
const ci = (process.env.CI ?? '').trim().toLowerCase();
const strict = ci !== '' && ci !== 'false' && ci !== '0';

if (spawnSync('clang-format', ['--version']).error) {
  const msg = 'clang-format is not installed (Debian package clang-format): native/ formatting not checked';
  if (check && !strict) {
    console.log(`rdma-graph: ${msg}`);
    process.exit(0);
  }
  console.error(`rdma-graph: ${msg}`);
  process.exit(1);
}
const r = spawnSync('clang-format', [check ? '--dry-run' : '-i', ...(check ? ['--Werror'] : []), ...files], {
  encoding: 'utf8',
});
if (r.status !== 0) {
  const bad = [...new Set([...r.stderr.matchAll(/^(\/[^:]+):\d+:\d+: error/gm)].map((m) => relative(ROOT, m[1])))];
  console.error(
    bad.length > 0
      ? `rdma-graph: not formatted (npm run format rewrites them): ${bad.join(', ')}`
      : `rdma-graph: clang-format failed: ${r.stderr.trim().split('\n').slice(0, 5).join('\n')}`,
  );
  process.exit(1);
}
