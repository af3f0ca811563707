/**
 * createDataplane: the data plane a configuration asks for. With cpu.workers 0, one graph on
 * this thread (Dataplane); with N >= 1, N worker threads each running one, and this thread
 * keeping the facade (workers/facade.ts) that carries each call to the worker owning its object.
 * Either way the caller gets the one contract, DataplaneApi.
 *
 *   const dp = await createDataplane(loadConfig('config/startup.yaml'), { log });
 */
import type { Config } from '../config/types.ts';
import type { DataplaneApi } from './api.ts';
import { Dataplane } from './dataplane.ts';
import type { Logger } from './views.ts';
import { startWorkers } from './workers/facade.ts';

/** What `rdma-graph check` runs before start would (preflight.ts): part of the contract. */
export { apiListenError, preflight } from './preflight.ts';
/** The start-up warm-up over a link between two throwaway data planes (config verbs.wire-warm-up). */
export { wireWarmUp } from './wire-warm-up.ts';

export async function createDataplane(config: Config, opts: { log?: Logger } = {}): Promise<DataplaneApi> {
  if (config.cpu.workers > 0) return startWorkers(config, opts.log ?? (() => {}));
  return Dataplane.create(config, opts);
}
