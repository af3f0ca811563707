/**
 * The data plane's contract is enforced by the compiler (issue 27): both facades implement
 * DataplaneApi, and the worker protocol is typed from it, so a method a worker does not serve,
 * a misspelt call or wrong arguments fail `tsc`. Each case compiles a small file against the
 * project's types and checks tsc's verdict; the first compiles clean, so a failure below is the
 * case's own.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSC = join(ROOT, 'node_modules/.bin/tsc');

/** tsc on `source` (a module under test/, so its relative imports resolve): exit status and output. */
function compile(source: string): { status: number | null; out: string } {
  const dir = mkdtempSync(join(ROOT, 'test/.facade-types-'));
  try {
    writeFileSync(join(dir, 'case.ts'), source);
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ extends: '../../tsconfig.json', include: ['case.ts'], compilerOptions: { noEmit: true } }),
    );
    const r = spawnSync(TSC, ['-p', join(dir, 'tsconfig.json')], { encoding: 'utf8', timeout: 60_000 });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const HEAD = `
import type { CallTable } from '../../dataplane/workers/protocol.ts';
import type { DataplaneApi } from '../../dataplane/api.ts';
import { WorkerDataplane } from '../../dataplane/workers/facade.ts';
import { Dataplane } from '../../dataplane/dataplane.ts';
export const both: DataplaneApi[] = [] as (Dataplane | WorkerDataplane)[];
`;

test('the two facades implement DataplaneApi and a worker call table made from a Dataplane type-checks', () => {
  const r = compile(
    HEAD +
      `declare const dp: Dataplane;
       declare const full: CallTable;
       export const t: CallTable = { ...full, getQp: (qpn) => dp.getQp(qpn) };`,
  );
  assert.is(r.status, 0, r.out);
});

test('a worker call table missing a method of DataplaneApi fails tsc, naming the method', () => {
  const r = compile(
    HEAD +
      `declare const full: CallTable;
       const { getQp: _, ...rest } = full;
       export const t: CallTable = rest;`,
  );
  assert.not.equal(r.status, 0, 'tsc refuses it');
  assert.match(r.out, /getQp/);
});

test('a misspelt method or wrong arguments in a call to a worker fail tsc', () => {
  const misspelt = compile(HEAD + `declare const full: CallTable; export const x = full.getQP(1);`);
  assert.not.equal(misspelt.status, 0);
  assert.match(misspelt.out, /getQP/);
  const wrongArgs = compile(HEAD + `declare const full: CallTable; export const x = full.getQp('one');`);
  assert.not.equal(wrongArgs.status, 0);
  assert.match(wrongArgs.out, /string/);
});

test('DataplaneApi and the local Dataplane agree: a method the contract declares but Dataplane lacks fails tsc', () => {
  const r = compile(
    `import type { DataplaneApi } from '../../dataplane/api.ts';
     import type { Dataplane } from '../../dataplane/dataplane.ts';
     type Grown = DataplaneApi & { destroyEverything(): Promise<void> };
     declare const dp: Dataplane;
     export const g: Grown = dp;`,
  );
  assert.not.equal(r.status, 0);
  assert.match(r.out, /destroyEverything/);
});

test.run();
