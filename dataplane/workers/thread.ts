/**
 * One worker thread (cpu.workers): a whole data plane (graph, interfaces, RDMA) over the
 * interfaces placed on it, named rdma_wk_N in `show runtime`, pinned when corelist-workers says
 * so. The main thread (dataplane/workers/facade.ts) sends it method calls and gets the results; log
 * lines and events come back as they happen. A call's AbortSignal is a marker the main thread
 * can fire with an "abort" message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../../config/types.ts';
import { Dataplane } from '../dataplane.ts';
import { pinThread } from '../pin.ts';
import { verbsConnections } from '../verbs-server/connections.ts';
import type { VerbsConnections } from '../verbs-server/listener.ts';
import { DataplaneError, type Logger } from '../views.ts';
import type { CallName, CallTable, FromWorker, ToWorker, WorkerInit } from './protocol.ts';

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
  // Every call the facade can make, one handler each (CallTable is exhaustive over DataplaneApi).
  const calls: CallTable = {
    adoptVerbs: (fd) => {
      served ??= verbsConnections(dp, dp.verbsServed(), {
        log,
        closeConnection: (c) => post({ t: 'closeFd', fd: c }),
      });
      served.adopt(fd);
    },
    closeVerbs: () => {
      served?.close();
      served = null;
    },
    verbsConnections: () => served?.connections() ?? 0,
    close: () => dp.close(),
    health: () => dp.health(),
    buffers: () => dp.buffers(),
    hardware: () => dp.hardware(),
    devices: () => dp.devices(),
    version: () => dp.version(),
    interfaces: () => dp.interfaces(),
    interface: (name) => dp.interface(name),
    rxPlacement: () => dp.rxPlacement(),
    threads: () => dp.threads(),
    neighbors: () => dp.neighbors(),
    ping: (req, signal) => dp.ping(req, signal),
    capture: (name, opts) => dp.capture(name, opts),
    stopCapture: (name) => dp.stopCapture(name),
    setFault: (name, direction, cfg) => dp.setFault(name, direction, cfg),
    runtime: () => dp.runtime(),
    nodeGraph: () => dp.nodeGraph(),
    clearRuntime: () => dp.clearRuntime(),
    errors: () => dp.errors(),
    clearErrors: () => dp.clearErrors(),
    clearInterfaces: () => dp.clearInterfaces(),
    traceAdd: (node, count) => dp.traceAdd(node, count),
    trace: () => dp.trace(),
    clearTrace: () => dp.clearTrace(),
    traceNodes: () => dp.traceNodes(),
    recentEvents: (since) => dp.recentEvents(since),
    createPd: (req) => dp.createPd(req),
    pds: () => dp.pds(),
    destroyPd: (h) => dp.destroyPd(h),
    createMr: (req) => dp.createMr(req),
    getMr: (h) => dp.getMr(h),
    mrs: () => dp.mrs(),
    destroyMr: (h) => dp.destroyMr(h),
    createMw: (req) => dp.createMw(req),
    mws: () => dp.mws(),
    destroyMw: (h) => dp.destroyMw(h),
    writeMr: (h, offset, data) => dp.writeMr(h, offset, data),
    readMr: (h, offset, length) => dp.readMr(h, offset, length),
    createCq: (req) => dp.createCq(req),
    cqs: () => dp.cqs(),
    getCq: (h) => dp.getCq(h),
    pollCq: (h, max, waitMs, signal) => dp.pollCq(h, max, waitMs, signal),
    destroyCq: (h) => dp.destroyCq(h),
    createSrq: (req) => dp.createSrq(req),
    srqs: () => dp.srqs(),
    modifySrq: (h, limit) => dp.modifySrq(h, limit),
    postSrqRecv: (h, req) => dp.postSrqRecv(h, req),
    destroySrq: (h) => dp.destroySrq(h),
    createQp: (req) => dp.createQp(req),
    qps: () => dp.qps(),
    getQp: (qpn) => dp.getQp(qpn),
    connect: (qpn, req) => dp.connect(qpn, req),
    modifyQp: (qpn, req) => dp.modifyQp(qpn, req),
    attachMcast: (qpn, group) => dp.attachMcast(qpn, group),
    detachMcast: (qpn, group) => dp.detachMcast(qpn, group),
    noteQpOwner: (qpn, owner) => dp.noteQpOwner(qpn, owner),
    destroyQp: (qpn, opts) => dp.destroyQp(qpn, opts),
    postRecv: (qpn, req) => dp.postRecv(qpn, req),
    postSend: (qpn, req) => dp.postSend(qpn, req),
    listen: (req) => dp.listen(req),
    listenersList: () => dp.listenersList(),
    unlisten: (p) => dp.unlisten(p),
  };
  const aborts = new Map<number, AbortController>();
  const serve = async (m: ToWorker): Promise<void> => {
    if (m.t === 'abort') return aborts.get(m.id)?.abort();
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
      if (!Object.hasOwn(calls, m.method)) throw new DataplaneError('invalid', `no data plane method "${m.method}"`);
      const f = calls[m.method as CallName] as (...a: unknown[]) => unknown;
      post({ t: 'result', id: m.id, r: await f(...args) });
    } catch (e) {
      const err = e as Error;
      post({
        t: 'result',
        id: m.id,
        e: { kind: e instanceof DataplaneError ? e.kind : null, message: err.message, stack: err.stack ?? String(e) },
      });
    } finally {
      aborts.delete(m.id);
    }
  };
  port.on('message', (m: ToWorker) => void serve(m));
  post({ t: 'ready' });
}

main().catch((e: Error) =>
  post({ t: 'fatal', kind: e instanceof DataplaneError ? e.kind : 'unavailable', message: e.message }),
);
