#!/usr/bin/env node
// Runs the uvu suite and ends with one plain line, "N passed, N failed, N skipped", that CI
// systems read. The tests run in a child process (test/runner.ts under tsx) that reports its
// counts on fd 3; this one exits 0 only when that report came and says nothing failed, so a
// test that calls process.exit(), a crash in a native addon or a hook that throws cannot end
// the run green. Strict mode (CI set, or --strict): a skipped test is a failure.
//
//   node test/run.mjs [--strict] [PATTERN]      test/*.test.ts whose name matches PATTERN
//   node test/run.mjs --hw [PATTERN]            test/hw/: hardware no machine here has
//   node test/run.mjs --dir DIR [PATTERN]       every .ts file of DIR (the runner's fixtures)
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const runner = fileURLToPath(new URL('./runner.ts', import.meta.url));
const child = spawn(process.execPath, ['--import', 'tsx', runner, ...process.argv.slice(2)], {
  stdio: ['ignore', 'inherit', 'inherit', 'pipe'],
});

let result = null;
let early = null;
let file = '';
let buf = '';
child.stdio[3].on('data', (d) => {
  buf += d;
  let nl;
  while ((nl = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    let m;
    try {
      m = JSON.parse(line);
    } catch {
      continue;
    }
    if (m.type === 'file') file = m.name;
    else if (m.type === 'result') result = m;
    else if (m.type === 'early') early = m;
  }
});

child.on('error', (e) => {
  console.error(`could not start the test process: ${e.message}`);
  process.exit(1);
});

child.on('close', (code, signal) => {
  if (result === null) {
    const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
    const at = early?.at || (file ? `file ${file}` : 'loading');
    console.log(`\nThe test process ${how} before it reported its counts (during ${at}): the run failed.`);
    console.log('\n0 passed, 1 failed, 0 skipped');
    process.exit(1);
  }
  console.log(`\n${result.passed} passed, ${result.failed} failed, ${result.skipped} skipped`);
  process.exit(result.ok && code === 0 ? 0 : 1);
});
