#!/usr/bin/env node
// Runs the uvu suite (through tsx) and ends with one plain summary line, "N passed, N failed,
// N skipped", that CI systems read. Exit status is uvu's. Extra arguments narrow the run to
// test files matching a pattern, as with uvu itself: npm test -- graph. test/hw/ is left out.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const uvu = require.resolve('uvu').replace(/dist[\/]index.js$/, 'bin.js');
// --hw: the tests of test/hw/ instead (hardware no machine here has; npm run test:hw).
const hw = process.argv[2] === '--hw';
const pattern = process.argv[hw ? 3 : 2];
const args = [
  uvu,
  '-r',
  'tsx',
  hw ? 'test/hw' : 'test',
  ...(pattern ? [pattern] : []),
  '-i',
  'run.mjs',
  '-i',
  'helpers',
  ...(hw ? [] : ['-i', '^hw/']),
];
const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
let out = '';
child.stdout.on('data', (d) => {
  process.stdout.write(d);
  out += d;
});
child.on('close', (code, signal) => {
  const plain = out.replace(/\x1b\[[0-9;]*m/g, '');
  const num = (label) => {
    const m = new RegExp(`^\\s*${label}:\\s+(\\d+)`, 'm').exec(plain);
    return m ? Number(m[1]) : 0;
  };
  const total = num('Total'),
    passed = num('Passed'),
    skipped = num('Skipped');
  const failed = code === 0 ? total - passed - skipped : Math.max(total - passed - skipped, 1);
  console.log(`\n${passed} passed, ${failed} failed, ${skipped} skipped`);
  process.exit(code ?? (signal ? 1 : 0));
});
