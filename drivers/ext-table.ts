/**
 * Each pool's native mirror of its external memory table (core.ExtTable, graph/ext-memory.ts),
 * made by the first driver bound to the pool that gathers external payload segments in place
 * (memif in copy mode, af_packet with sendmmsg) and shared by all of them.
 */
import type { BufferPool } from '../graph/buffer-pool.ts';
import type { CoreAddon, ExtTableNative } from '../native/addons.ts';

const tables = new WeakMap<BufferPool, ExtTableNative>();

/** The pool's native table, made (and told every id from then on) at the first call. */
export function extTableOf(core: CoreAddon, pool: BufferPool): ExtTableNative {
  let t = tables.get(pool);
  if (t === undefined) {
    t = new core.ExtTable();
    tables.set(pool, t);
    pool.ext.addMirror(t);
  }
  return t;
}
