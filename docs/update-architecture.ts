/**
 * Regenerates the file map of docs/ARCHITECTURE.md (between its GENERATED markers) from each
 * source file's header comment, its first sentence: the map cannot drift from the files
 * (test/docs.test.ts compares). Run after adding, renaming or re-describing a file:
 *
 *   node --import tsx docs/update-architecture.ts
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const ARCHITECTURE = join(ROOT, 'docs/ARCHITECTURE.md');
export const BEGIN = '<!-- BEGIN GENERATED: the file map; node --import tsx docs/update-architecture.ts -->\n';
export const END = '<!-- END GENERATED -->\n';

/** The folders mapped, in the order the map shows them, with what each is for. */
export const FOLDERS: [string, string][] = [
  ['graph', 'the vector engine: buffers, nodes, frames, the dispatch loop, counters, trace'],
  ['nodes', 'protocol nodes, one per file with its registration, processing and trace formatter'],
  ['drivers', 'the Driver interface and every driver, in TypeScript'],
  ['native', 'the addons and programs built with cmake-js (C++ and C)'],
  ['config', 'the start-up YAML'],
  ['dataplane', 'the data plane contract, its implementations, the verbs server and the worker threads'],
  ['api', 'the REST API and rdmactl'],
  ['bin', 'the commands'],
  ['bench', 'npm run bench'],
  ['docs', 'these documents and their generators'],
];
const SOURCE = /\.(ts|mts|mjs|c|cc|h|lua)$/;
const SKIP = /^(native\/build|bin\/dist)(\/|$)/;

/** A file's header comment, first sentence, one line; throws naming a file without one. */
export function headline(path: string): string {
  const text = readFileSync(join(ROOT, path), 'utf8');
  const lines = text.split('\n');
  let i = lines[0].startsWith('#!') ? 1 : 0;
  const out: string[] = [];
  if (lines[i]?.trimStart().startsWith('/*')) {
    for (; i < lines.length; i++) {
      const l = lines[i];
      out.push(
        l
          .replace(/^\s*\/\*+\s?/, '')
          .replace(/\*+\/\s*$/, '')
          .replace(/^\s*\*\s?/, ''),
      );
      if (l.includes('*/')) break;
    }
  } else if (/^\s*(\/\/|--)/.test(lines[i] ?? '')) {
    for (; i < lines.length && /^\s*(\/\/|--)/.test(lines[i]); i++) out.push(lines[i].replace(/^\s*(\/\/|--)\s?/, ''));
  }
  const flat = out.join(' ').replace(/\s+/g, ' ').trim();
  if (flat === '') throw new Error(`${path}: no header comment (every source file says what it is in its first lines)`);
  // Sentences end at a full stop followed by a space (not "e.g." nor a file name like graph.ts);
  // the first, and the second too when the first is a bare name ("arp-input.").
  const sentences = flat.replace(/\b(e\.g|i\.e|vs|etc)\./g, '$1\u2024').split(/(?<=[^.\s]\.)\s+/);
  let head = sentences[0];
  if (head.length < 50 && sentences.length > 1) head += ` ${sentences[1]}`;
  head = head.replace(/\u2024/g, '.');
  return head.length > 300 ? `${head.slice(0, 297)}...` : head;
}

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => SOURCE.test(f) && !SKIP.test(f))
    .sort();
}

/** The generated map: a table per folder, a row per source file. */
export function fileMap(): string {
  let out = '';
  for (const [dir, what] of FOLDERS) {
    out += `\n### ${dir}/: ${what}\n\n| File | What it is |\n|---|---|\n`;
    for (const f of sources(dir)) out += `| \`${relative(dir, f)}\` | ${headline(f).replace(/\|/g, '\\|')} |\n`;
  }
  return out + '\n';
}

/** ARCHITECTURE.md with the map between the markers replaced. */
export function withFileMap(text: string): string {
  const b = text.indexOf(BEGIN);
  const e = text.indexOf(END);
  if (b < 0 || e < b) throw new Error(`${ARCHITECTURE}: the GENERATED markers are missing`);
  return text.slice(0, b + BEGIN.length) + fileMap() + text.slice(e);
}

if (process.argv[1] === fileURLToPath(import.meta.url))
  writeFileSync(ARCHITECTURE, withFileMap(readFileSync(ARCHITECTURE, 'utf8')));
