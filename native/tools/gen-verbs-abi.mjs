#!/usr/bin/env node
// Writes dataplane/verbs-server/abi.generated.ts, the daemon's copy of the verbs protocol's ABI,
// from native/verbs-lib/proto.h. The one source is proto.h; native/tools/verbs-abi.c prints what
// the C compiler makes of it (every constant, enum member, struct member offset and size, and the
// requests' table RGV_OPS), and this turns that into TypeScript. Run by `npm run build` (native/CMakeLists.txt, after the
// printer is compiled) and by hand; test/verbs-abi.test.ts runs it with --stdout and fails while
// the committed file differs. The protocol itself: docs/VERBS-PROTOCOL.md.
//
//   node native/tools/gen-verbs-abi.mjs                 compile the printer (cc), write the file
//   node native/tools/gen-verbs-abi.mjs --printer BIN   use a printer already built
//   node native/tools/gen-verbs-abi.mjs --check         write nothing; exit 1 naming the first
//                                                       difference when the file is not current
//   node native/tools/gen-verbs-abi.mjs --stdout        print the file instead of writing it
//   ... --proto FILE                                    another proto.h (the drift test's edits)
//
// Besides the printer's own check (the members it lists cover each struct), this refuses a name
// proto.h defines and the printer does not print (a constant, an enum member, a struct), a
// request whose op, body or fd is not declared, and an op without a row in RGV_OPS.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const PROTO = join(ROOT, 'native/verbs-lib/proto.h');
const PRINTER_SOURCE = join(ROOT, 'native/tools/verbs-abi.c');
const OUT = join(ROOT, 'dataplane/verbs-server/abi.generated.ts');

class AbiError extends Error {}

/**
 * Compile the printer into a temporary directory with the system's C compiler (against `proto`,
 * copied beside it as ../verbs-lib/proto.h when it is another file); its output.
 */
function printFresh(proto) {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-abi-'));
  try {
    let source = PRINTER_SOURCE;
    if (proto !== PROTO) {
      mkdirSync(join(dir, 'tools'));
      mkdirSync(join(dir, 'verbs-lib'));
      source = join(dir, 'tools/verbs-abi.c');
      copyFileSync(PRINTER_SOURCE, source);
      copyFileSync(proto, join(dir, 'verbs-lib/proto.h'));
    }
    const bin = join(dir, 'verbs-abi');
    const cc = process.env.CC || 'cc';
    execFileSync(cc, ['-std=c11', '-Wall', '-Wextra', '-o', bin, source], { stdio: ['ignore', 'pipe', 'pipe'] });
    return execFileSync(bin, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw new AbiError(`${relative(ROOT, PRINTER_SOURCE)}: ${e.stderr?.toString().trim() || e.message}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The printer's lines as a model: constants, enums, structs, ops, strides. */
function parse(text) {
  const abi = { constants: [], enums: [], structs: [], ops: [], strides: [] };
  let en = null,
    st = null;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const w = line.split(' ');
    const num = (s) => {
      if (!/^-?\d+$/.test(s)) throw new AbiError(`verbs-abi printed "${line}": not a number`);
      return Number(s);
    };
    switch (w[0]) {
      case 'constant':
        abi.constants.push({ name: w[1], value: num(w[2]) });
        break;
      case 'enum':
        abi.enums.push((en = { name: w[1], members: [] }));
        break;
      case 'member':
        if (en === null) throw new AbiError(`verbs-abi printed a member outside an enum: ${line}`);
        en.members.push({ name: w[1], value: num(w[2]) });
        break;
      case 'struct':
        abi.structs.push((st = { name: w[1], size: num(w[2]), fields: [] }));
        break;
      case 'field':
        if (st === null) throw new AbiError(`verbs-abi printed a field outside a struct: ${line}`);
        st.fields.push({ name: w[1], offset: num(w[2]), type: w[3], count: num(w[4]) });
        break;
      case 'op':
        abi.ops.push({ name: w[1], value: num(w[2]), request: w[3], reply: w[4], records: num(w[5]) !== 0, fd: w[6] });
        break;
      case 'stride':
        abi.strides.push(w.slice(1).map(num));
        break;
      default:
        throw new AbiError(`verbs-abi printed a line this generator does not know: ${line}`);
    }
  }
  return abi;
}

/** Every name proto.h defines (its text, comments out): what the printer must have printed. */
function declared(proto) {
  const text = proto.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/.*$/gm, '');
  const constants = [...text.matchAll(/^\s*#\s*define\s+(RGV_[A-Z0-9_]+)[ \t]+\S/gm)].map((m) => m[1]);
  const enums = [...text.matchAll(/\benum\s+(rgv_\w+)\s*\{([^}]*)\}/g)].map((m) => ({
    name: m[1],
    members: [...m[2].matchAll(/\b(RGV_[A-Z0-9_]+)\s*=/g)].map((x) => x[1]),
  }));
  const structs = [...text.matchAll(/\bstruct\s+(rgv_\w+)\s*\{/g)].map((m) => m[1]);
  return { constants, enums, structs };
}

/** The printer's model against proto.h's names and itself; throws naming the first problem. */
function check(abi, proto) {
  const d = declared(proto);
  const printed = (what, names, have) => {
    for (const n of names)
      if (!have.includes(n))
        throw new AbiError(
          `native/verbs-lib/proto.h declares ${what} ${n}, which native/tools/verbs-abi.c does not print: add it there`,
        );
    for (const n of have)
      if (!names.includes(n))
        throw new AbiError(
          `native/tools/verbs-abi.c prints ${what} ${n}, which native/verbs-lib/proto.h does not declare`,
        );
  };
  printed(
    'the constant',
    d.constants,
    abi.constants.map((c) => c.name),
  );
  printed(
    'the enum',
    d.enums.map((e) => e.name),
    abi.enums.map((e) => e.name),
  );
  for (const e of d.enums)
    printed(
      `in enum ${e.name} the member`,
      e.members,
      abi.enums.find((x) => x.name === e.name).members.map((m) => m.name),
    );
  printed(
    'the struct',
    d.structs,
    abi.structs.map((s) => s.name),
  );
  const ops = abi.enums.find((e) => e.name === 'rgv_op');
  const fds = abi.enums.find((e) => e.name === 'rgv_fd');
  if (ops === undefined || fds === undefined) throw new AbiError('proto.h has no enum rgv_op or enum rgv_fd');
  for (const op of abi.ops) {
    const m = ops.members.find((x) => x.name === `RGV_OP_${op.name}`);
    if (m === undefined || m.value !== op.value)
      throw new AbiError(`RGV_OPS row ${op.name}: no such member of enum rgv_op`);
    for (const body of [op.request, op.reply])
      if (body !== 'none' && !abi.structs.some((s) => s.name === body))
        throw new AbiError(`RGV_OPS row ${op.name}: struct ${body} is not declared in proto.h`);
    if (!fds.members.some((x) => x.name === op.fd))
      throw new AbiError(`RGV_OPS row ${op.name}: ${op.fd} is no member of enum rgv_fd`);
    if (op.records && op.reply === 'none') throw new AbiError(`RGV_OPS row ${op.name}: records of no body`);
  }
  for (const m of ops.members) {
    const rows = abi.ops.filter((o) => `RGV_OP_${o.name}` === m.name).length;
    if (rows !== 1) throw new AbiError(`${m.name} has ${rows} rows in RGV_OPS (one wanted)`);
  }
  for (const s of abi.structs)
    for (const f of s.fields)
      if (!['char', 'u8', 'i16', 'u16', 'u32', 'u64'].includes(f.type))
        throw new AbiError(`struct ${s.name}: member ${f.name} of type ${f.type}, which the daemon cannot read`);
}

const num = (v) => (v >= 0x10000 ? `0x${v.toString(16)}` : String(v));

/** The TypeScript module. */
function render(abi) {
  const out = [];
  const p = (s = '') => out.push(s);
  p('/**');
  p(" * The verbs protocol's ABI: native/verbs-lib/proto.h as the C compiler lays it out. Generated by");
  p(' * native/tools/gen-verbs-abi.mjs (through native/tools/verbs-abi.c): do not edit. Regenerate with');
  p(' * `npm run build` or `node native/tools/gen-verbs-abi.mjs`; test/verbs-abi.test.ts fails while this');
  p(' * file and proto.h differ. What each item means: docs/VERBS-PROTOCOL.md; how the daemon reads and');
  p(' * writes them: dataplane/verbs-server/messages.ts.');
  p(' */');
  p();
  p("/** A member's type: little-endian integers, `char` a NUL-terminated text of `count` bytes. */");
  p("export type AbiType = 'char' | 'u8' | 'i16' | 'u16' | 'u32' | 'u64';");
  p();
  p('/** A struct member: its byte offset, type and element count (more than 1: an array). */');
  p('export interface AbiField {');
  p('  readonly offset: number;');
  p('  readonly type: AbiType;');
  p('  readonly count: number;');
  p('}');
  p();
  p('export interface AbiStruct {');
  p('  readonly name: string;');
  p('  readonly size: number;');
  p('  readonly fields: { readonly [name: string]: AbiField };');
  p('}');
  p();
  p('// ------------------------------------------------------------------ constants (#define)');
  p();
  for (const c of abi.constants) p(`export const ${c.name} = ${num(c.value)};`);
  p();
  p('// ------------------------------------------------------------------ enums');
  for (const e of abi.enums) {
    p();
    p(`/** enum ${e.name} */`);
    for (const m of e.members) p(`export const ${m.name} = ${num(m.value)};`);
  }
  p();
  p('// ------------------------------------------------------------------ structs');
  for (const s of abi.structs) {
    p();
    p(`/** struct ${s.name} (${s.size} bytes) */`);
    p(`export const ${s.name} = {`);
    p(`  name: '${s.name}',`);
    p(`  size: ${s.size},`);
    p('  fields: {');
    for (const f of s.fields) p(`    ${f.name}: { offset: ${f.offset}, type: '${f.type}', count: ${f.count} },`);
    p('  },');
    p('} as const satisfies AbiStruct;');
  }
  p();
  p('// ------------------------------------------------------------------ requests (RGV_OPS)');
  p();
  p('/**');
  p(" * Every request the daemon serves, by name: its op, its body and its reply's (null: none; `records`:");
  p(' * the reply holds `count` of them), and the fd it passes.');
  p(' */');
  p('export const RGV_OPS = {');
  const body = (b) => (b === 'none' ? 'null' : b);
  const fd = (f) => `'${f.replace(/^RGV_FD_/, '').toLowerCase()}'`;
  for (const o of abi.ops)
    p(
      `  ${o.name}: { op: ${o.value}, request: ${body(o.request)}, reply: ${body(o.reply)}, records: ${o.records}, fd: ${fd(o.fd)} },`,
    );
  p('} as const;');
  p();
  p(
    '/** rgv_sq_stride(max_sge, max_inline) and rgv_rq_stride(max_sge) at a few sizes: [max_sge, max_inline, sq, rq]. */',
  );
  p('export const RGV_STRIDES = [');
  for (const s of abi.strides) p(`  [${s.join(', ')}],`);
  p('] as const;');
  return out.join('\n') + '\n';
}

/**
 * The generated module's text (throws AbiError naming what is wrong): from `printer`'s output,
 * or from a printer compiled now against `proto` (default native/verbs-lib/proto.h).
 */
export function generate(printer, proto = PROTO) {
  const text = printer ? execFileSync(printer, { encoding: 'utf8' }) : printFresh(proto);
  const abi = parse(text);
  check(abi, readFileSync(proto, 'utf8'));
  return render(abi);
}

/** The first line where `want` (generated) and `have` (the file) differ, said; null if none. */
export function firstDifference(want, have) {
  const a = want.split('\n'),
    b = have.split('\n');
  for (let k = 0; k < Math.max(a.length, b.length); k++)
    if (a[k] !== b[k])
      return `line ${k + 1}: proto.h says ${JSON.stringify(a[k] ?? '(end of file)')}, the file has ${JSON.stringify(b[k] ?? '(end of file)')}`;
  return null;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const at = args.indexOf('--printer');
  const printer = at >= 0 ? args[at + 1] : undefined;
  const protoAt = args.indexOf('--proto');
  const proto = protoAt >= 0 ? args[protoAt + 1] : PROTO;
  const rel = relative(ROOT, OUT);
  try {
    if (printer !== undefined && !existsSync(printer)) throw new AbiError(`no printer at ${printer}`);
    if (proto !== PROTO && !args.includes('--stdout') && !args.includes('--check'))
      throw new AbiError(
        '--proto goes with --stdout or --check: the file is written from native/verbs-lib/proto.h only',
      );
    const text = generate(printer, proto);
    if (args.includes('--stdout')) process.stdout.write(text);
    else if (args.includes('--check')) {
      const diff = firstDifference(text, existsSync(OUT) ? readFileSync(OUT, 'utf8') : '');
      if (diff !== null) {
        console.error(
          `${rel} is not what native/verbs-lib/proto.h says (${diff}): run node native/tools/gen-verbs-abi.mjs`,
        );
        process.exit(1);
      }
    } else if (!existsSync(OUT) || readFileSync(OUT, 'utf8') !== text) {
      writeFileSync(OUT, text);
      console.log(`gen-verbs-abi: wrote ${rel}`);
    }
  } catch (e) {
    console.error(`gen-verbs-abi: ${e instanceof AbiError ? e.message : e.stack}`);
    process.exit(1);
  }
}
