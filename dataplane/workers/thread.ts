/**
 * One worker thread (cpu.workers): a whole data plane (graph, interfaces, RDMA) over the
 * interfaces placed on it, named rdma_wk_N in `show runtime`, pinned when corelist-workers says
 * so. The main thread (dataplane/workers/facade.ts) sends it method calls and gets the results; log
 * lines and events come back as they happen. A call's AbortSignal is a marker the main thread
 * can fire with an "abort" message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../../config/types.ts';
import { Dataplane, pinThread } from '../dataplane.ts';
import { type VerbsConnections, verbsConnections } from '../verbs-server/server.ts';
import { DataplaneError, type Logger } from '../views.ts';
import { CALLABLE, type FromWorker, type ToWorker, type WorkerInit } from './protocol.ts';

const init = workerData as WorkerInit;
const port = parentPort!;
const post = (m: FromWorker) => port.postMessage(m);
const log: Logger = (level, msg) => post({ t: 'log', level, msg });

async function main(): Promise<void> {
  if (init.cpu !== null) pinThread(init.cpu, 'cpu.corelist-workers');
  const config: Config = init.config;
  const dp = await Dataplane.create(config, {
    log,
    thread: { index: init.index + 1, name: `rdma_wk_${init.index}`, lcore: init.cpu ?? undefined },
    handleBase: init.handleBase,
    handoff: init.handoff,
    onEvent: (e) => post({ t: 'event', e }),
  });
  // Verbs programs the main thread's listener gives this worker (one fd per connection).
  let served: VerbsConnections | null = null;
  const aborts = new Map<number, AbortController>();
  port.on('message', async (m: ToWorker) => {
    if (m.t === 'abort') return void aborts.get(m.id)?.abort();
    if (m.t === 'crash') {
      // Test hook (test/workers.test.ts): an exception nobody catches, as a bug would throw.
      setImmediate(() => {
        throw new Error(`worker ${init.index} was told to crash`);
      });
      return;
    }
    const args = m.args.map((a) => {
      if (a === null || typeof a !== 'object' || !('__signal' in a)) return a;
      const c = new AbortController();
      aborts.set(m.id, c);
      return c.signal;
    });
    try {
      let r: unknown;
      if (m.method === 'adoptVerbs') {
        served ??= verbsConnections(dp, {
          maxQps: config.rdma.maxQps,
          log,
          closeConnection: (fd) => post({ t: 'closeFd', fd }),
        });
        served.adopt(args[0] as number);
      } else if (m.method === 'closeVerbs') {
        served?.close();
        served = null;
      } else if (m.method === 'verbsConnections') {
        r = served?.connections() ?? 0;
      } else {
        if (!CALLABLE.has(m.method)) throw new DataplaneError('invalid', `no data plane method "${m.method}"`);
        const f = (dp as unknown as Record<string, (...a: unknown[]) => unknown>)[m.method];
        r = await f.apply(dp, args);
      }
      post({ t: 'result', id: m.id, r });
    } catch (e) {
      const err = e as Error;
      post({
        t: 'result',
        id: m.id,
        e: { kind: e instanceof DataplaneError ? e.kind : null, message: err.message, stack: err.stack ?? '' },
      });
    } finally {
      aborts.delete(m.id);
    }
  });
  post({ t: 'ready' });
}

main().catch((e: Error) =>
  post({ t: 'fatal', kind: e instanceof DataplaneError ? e.kind : 'unavailable', message: e.message }),
);
