// Whether a compiled file is newer than every source it was built from (the list beside it,
// written by bin/build-cli.mjs). Plain ESM so the launchers can ask before any loader exists.
import { readFileSync, statSync } from 'node:fs';

/** `root` a directory URL; `bundle` and `inputs` (a JSON list of paths) relative to it. */
export function isFresh(root, bundle, inputs) {
  try {
    const built = statSync(new URL(bundle, root)).mtimeMs;
    const list = JSON.parse(readFileSync(new URL(inputs, root), 'utf8'));
    return (
      Array.isArray(list) &&
      list.length > 0 &&
      list.every((f) => typeof f === 'string' && statSync(new URL(f, root)).mtimeMs <= built)
    );
  } catch {
    return false;
  }
}
