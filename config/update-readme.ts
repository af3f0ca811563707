/**
 * Rewrite the generated key reference in config/README.md from the schema:
 *
 *   node --import tsx config/update-readme.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { schemaReference } from './schema.ts';

export const README = fileURLToPath(new URL('./README.md', import.meta.url));
export const BEGIN =
  '<!-- BEGIN GENERATED: schemaReference() in config/schema.ts; node --import tsx config/update-readme.ts -->\n';
export const END = '<!-- END GENERATED -->\n';

/** The README text with the reference between the markers replaced by `schemaReference()`. */
export function withReference(text: string): string {
  const b = text.indexOf(BEGIN);
  const e = text.indexOf(END);
  if (b < 0 || e < b) throw new Error(`${README}: the GENERATED markers are missing`);
  return text.slice(0, b + BEGIN.length) + schemaReference() + text.slice(e);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(README, withReference(readFileSync(README, 'utf8')));
}
