/**
 * The verbs protocol has one ABI, native/verbs-lib/proto.h (docs/VERBS-PROTOCOL.md): the daemon's
 * copy, dataplane/verbs-server/abi.generated.ts, is what native/tools/gen-verbs-abi.mjs makes of
 * it now (through native/tools/verbs-abi.c, compiled here: a C compiler is all it needs); the
 * generator refuses a proto.h it does not print whole; the handlers serve every request it
 * declares; the daemon's ring strides are the library's; and no TypeScript keeps a copy of its
 * numbers.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RGV_OPS, RGV_STRIDES } from '../dataplane/verbs-server/abi.generated.ts';
import { HANDLERS } from '../dataplane/verbs-server/handlers.ts';
import { rqStride, sqStride } from '../dataplane/verbs-server/rings.ts';
import { ROOT } from './readme-helpers.ts';

const GENERATOR = join(ROOT, 'native/tools/gen-verbs-abi.mjs');
const GENERATED = join(ROOT, 'dataplane/verbs-server/abi.generated.ts');
const PROTO = join(ROOT, 'native/verbs-lib/proto.h');

function needCompiler(): void {
  const cc = process.env.CC || 'cc';
  if (spawnSync(cc, ['--version']).status !== 0)
    skip(`no C compiler (${cc}): native/tools/verbs-abi.c cannot be built to print proto.h's ABI`);
}

/** The generator run on `proto` (a file): the module it makes, or its error. */
function generate(proto = PROTO): { ok: true; text: string } | { ok: false; error: string } {
  const r = spawnSync(process.execPath, [GENERATOR, '--stdout', '--proto', proto], { encoding: 'utf8' });
  return r.status === 0 ? { ok: true, text: r.stdout } : { ok: false, error: r.stderr.trim() || `status ${r.status}` };
}

/** The first line where two texts differ, said; null if none. */
function firstDifference(want: string, have: string): string | null {
  const a = want.split('\n'),
    b = have.split('\n');
  for (let k = 0; k < Math.max(a.length, b.length); k++)
    if (a[k] !== b[k])
      return `line ${k + 1}: proto.h says ${JSON.stringify(a[k] ?? '(end)')}, abi.generated.ts has ${JSON.stringify(b[k] ?? '(end)')}`;
  return null;
}

/** proto.h with `edit` applied, in a temporary file given to `body`. */
function withProto(edit: (text: string) => string, body: (path: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-abi-test-'));
  try {
    const text = readFileSync(PROTO, 'utf8');
    const edited = edit(text);
    assert.is.not(edited, text, 'the edit changed proto.h');
    writeFileSync(join(dir, 'proto.h'), edited);
    body(join(dir, 'proto.h'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('dataplane/verbs-server/abi.generated.ts is what native/verbs-lib/proto.h says (regenerate: node native/tools/gen-verbs-abi.mjs)', () => {
  needCompiler();
  const g = generate();
  assert.ok(g.ok, `the generator failed: ${!g.ok && g.error}`);
  const diff = firstDifference(g.ok ? g.text : '', readFileSync(GENERATED, 'utf8'));
  assert.is(diff, null, `abi.generated.ts is stale, ${diff}: run node native/tools/gen-verbs-abi.mjs`);
});

test('a changed offset in proto.h is a difference the drift check names', () => {
  needCompiler();
  const have = readFileSync(GENERATED, 'utf8');
  // A ring header word moved, and two members of a struct swapped (same size, other offsets).
  withProto(
    (t) => t.replace('#define RGV_QP_SQ_CONS 64u', '#define RGV_QP_SQ_CONS 96u'),
    (p) => {
      const g = generate(p);
      assert.ok(g.ok, !g.ok ? g.error : '');
      assert.match(firstDifference(g.ok ? g.text : '', have) ?? '', /RGV_QP_SQ_CONS = 96.*RGV_QP_SQ_CONS = 64/);
    },
  );
  withProto(
    (t) =>
      t.replace('  uint32_t handle;\n  uint32_t stag; /* lkey and rkey */', '  uint32_t stag;\n  uint32_t handle;'),
    (p) => {
      const g = generate(p);
      assert.ok(g.ok, !g.ok ? g.error : '');
      assert.match(firstDifference(g.ok ? g.text : '', have) ?? '', /handle: \{ offset: 4.*handle: \{ offset: 0/);
    },
  );
});

test('the generator refuses a proto.h the printer does not print whole: a new member, a new constant, a request without its row', () => {
  needCompiler();
  // rgv_qp_ring's pad split in two: the printer lists pad only, and two bytes are no member.
  withProto(
    (t) =>
      t.replace(
        '  uint32_t sq_stride, rq_stride;   /* rgv_sq_stride(max_sge, max_inline), rgv_rq_stride(max_sge) */\n  uint32_t pad;',
        '  uint32_t sq_stride, rq_stride;\n  uint16_t pad;\n  uint16_t flags;',
      ),
    (p) => {
      const g = generate(p);
      assert.not.ok(g.ok);
      assert.match(!g.ok ? g.error : '', /struct rgv_qp_ring: bytes 22\.\.24 are no member listed here/);
    },
  );
  withProto(
    (t) => t.replace('#define RGV_MAX_DEVICES 64u', '#define RGV_MAX_DEVICES 64u\n#define RGV_MAX_THINGS 3u'),
    (p) => {
      const g = generate(p);
      assert.not.ok(g.ok);
      assert.match(
        !g.ok ? g.error : '',
        /declares the constant RGV_MAX_THINGS, which native\/tools\/verbs-abi\.c does not print/,
      );
    },
  );
  withProto(
    (t) =>
      t
        .replace(/ {2}X\(MODIFY_SRQ,[^\n]*\n/, '')
        .replace(/\\\n\n\/\* Every request and reply/, '\n\n/* Every request and reply'),
    (p) => {
      const g = generate(p);
      assert.not.ok(g.ok);
      assert.match(!g.ok ? g.error : '', /RGV_OP_MODIFY_SRQ has 0 rows in RGV_OPS/);
    },
  );
});

test('the daemon serves every request proto.h declares, and only those (HANDLERS against RGV_OPS)', () => {
  assert.equal(Object.keys(HANDLERS).sort(), Object.keys(RGV_OPS).sort());
  const ops = Object.values(RGV_OPS).map((o) => o.op);
  assert.is(new Set(ops).size, ops.length, 'one op number per request');
});

test("the daemon's ring strides are proto.h's rgv_sq_stride and rgv_rq_stride", () => {
  assert.ok(RGV_STRIDES.length >= 20);
  for (const [sge, inl, sq, rq] of RGV_STRIDES) {
    assert.is(sqStride(sge, inl), sq, `sq stride of ${sge} SGEs, ${inl} inline bytes`);
    assert.is(rqStride(sge), rq, `rq stride of ${sge} SGEs`);
  }
});

test('no TypeScript keeps its own copy of the ABI: the magic, header offsets and op numbers come from abi.generated.ts', () => {
  const files = [
    'dataplane/verbs-server/connections.ts',
    'dataplane/verbs-server/handlers.ts',
    'dataplane/verbs-server/listener.ts',
    'dataplane/verbs-server/admission.ts',
    'dataplane/verbs-server/messages.ts',
    'dataplane/verbs-server/rings.ts',
    'test/verbs-lib.test.ts',
    'test/verbs-rings.test.ts',
    'test/verbs-limits.test.ts',
    'test/verbs-hostile-helpers.ts',
    'test/api-access.test.ts',
  ];
  for (const f of files) {
    const text = readFileSync(join(ROOT, f), 'utf8');
    assert.ok(/abi\.generated\.ts|messages\.ts/.test(text), `${f} takes the ABI from abi.generated.ts`);
    // The magic, a DataView at a literal header or body offset, an op number written by hand.
    for (const copy of [
      /0x31564752/i,
      /\b(get|set)U?[Ii]nt(16|32)\(\s*(4|6|8|12|16)\b/,
      /\bo \+ \d+/,
      /\bRGV_HDR_BYTES\b/,
    ])
      assert.not.match(text, copy, `${f} has a copy of the ABI: ${copy}`);
  }
});

test.run();
