/** bin/fresh.mjs: whether `bundle` is newer than every source listed in `inputs` (paths relative to the `root` directory URL). */
export function isFresh(root: URL, bundle: string, inputs: string): boolean;
