/**
 * The verbs socket's connections (Dataplane.serveVerbs): how librdmagraph-verbs.so
 * (native/verbs-lib/, preloaded into an unmodified libibverbs program by `rdma-graph exec`)
 * reaches this daemon. One connection per opened device context (and one per device-list
 * query); each request is one SOCK_SEQPACKET message answered by one, fixed little-endian
 * layouts (native/verbs-lib/proto.h; the protocol: docs/VERBS-PROTOCOL.md).
 *
 * This file keeps each connection's state (what it created: handlers.ts's Owned), reads its
 * requests, at most 64 per wake-up and one at a time over every connection, hands each to its
 * handler (handlers.ts) and writes the reply. A malformed request (shorter than a header, without
 * the magic, a body of the wrong size) closes that connection (logged, rate-limited:
 * log-limit.ts), never the daemon. What a connection created is destroyed when it closes (the
 * program exited or was killed): its rings are detached first, so nothing writes them once the
 * program can see the end of file. The rings themselves are the data path (rings.ts); who may
 * connect is admission.ts's, the socket and accept() listener.ts's.
 */
import type { Graph } from '../../graph/index.ts';
import type { DataplaneApi, ServeVerbsOptions, VerbsSocket } from '../api.ts';
import { loadCore, type FdWaiter } from '../../native/addons.ts';
import { RGV_MAGIC, RGV_MAX_MR_PIECES, rgv_hdr } from './abi.generated.ts';
import { ownerOf, VerbsAdmission, verbsLimits } from './admission.ts';
import { handle, type Owned, type Reply, type Server, type VerbsServed } from './handlers.ts';
import { releaseUcma } from './ucma.ts';
import { listenVerbs, type VerbsConnections } from './listener.ts';
import { LogLimiter } from './log-limit.ts';
import { message, readMessage } from './messages.ts';
import { CqGroup, VerbsRings } from './rings.ts';

export type { VerbsServed } from './handlers.ts';

export { VERBS_LIBRARY } from '../../native/addons.ts';

/** Requests read from one connection per wake-up (the rest waits for the next). */
const REQUESTS_PER_WAKEUP = 64;

/** Every ring of the connection off the data path and its fds closed: nothing writes them after this. */
function detachAll(rings: VerbsRings, own: Owned, core: ReturnType<typeof loadCore>): void {
  for (const r of own.qpRings.values()) rings.detachQp(r);
  for (const r of own.srqRings.values()) rings.detachSrq(r);
  for (const r of own.cqRings.values()) rings.detachCq(r);
  own.qpRings.clear();
  own.srqRings.clear();
  own.cqRings.clear();
  if (own.doorbell >= 0) {
    rings.detachDoorbell(own.doorbell);
    core.closeFd(own.doorbell);
    own.doorbell = -1;
  }
  for (const ch of own.channels.values()) {
    core.closeFd(ch.fd);
    ch.fd = -1;
  }
  own.channels.clear();
  if (own.async.fd >= 0) {
    core.closeFd(own.async.fd);
    own.async.fd = -1; // the rings share the holder: none writes it after this
  }
}

/** One VerbsRings (and verbs-input node) per data plane, however many sockets it serves. */
const ringsOf = new WeakMap<Graph, VerbsRings>();

/**
 * Listen on `opts.path` and serve this data plane's verbs programs (the single-threaded data
 * plane; with cpu.workers the facade listens and its workers serve): a stale socket file nobody
 * serves is replaced, one another process serves is refused (an error naming the path).
 */
export function startVerbsSocket(dp: DataplaneApi, served: VerbsServed, opts: ServeVerbsOptions): VerbsSocket {
  const core = loadCore();
  const limits = verbsLimits({ ...dp.config.verbs, ...opts.limits });
  const admission = new VerbsAdmission(limits);
  const serve = verbsConnections(dp, served, {
    ...opts,
    limits,
    closeConnection: (fd) => {
      admission.release(fd);
      core.closeFd(fd);
    },
  });
  return listenVerbs(opts.path, serve, { admission, log: opts.log });
}

/** Serve verbs connections on data plane `dp` (each handed over by adopt). */
export function verbsConnections(
  dp: DataplaneApi,
  internals: VerbsServed,
  opts: Omit<ServeVerbsOptions, 'path'> & {
    /**
     * How a connection's fd is closed (default here, at once). A worker hands it back to the main
     * thread, which closes it: the main thread then knows which fds a worker still holds, and
     * closes those if the worker dies, so their programs see the end of file.
     */
    closeConnection?: (fd: number) => void;
  },
): VerbsConnections {
  const core = loadCore();
  const closeConn = opts.closeConnection ?? ((fd: number) => core.closeFd(fd));
  const limits = verbsLimits({ ...dp.config.verbs, ...opts.limits });
  const waiter: FdWaiter = new core.FdWaiter();
  const conns = new Map<number, Owned>();
  /** What clients cause in the log: per connection, and per user for what ends a connection. */
  const lines = new LogLimiter(opts.log, 'verbs socket: ');
  let closed = false,
    waiting = false,
    connSeq = 0;
  let rings = ringsOf.get(internals.graph);
  if (rings === undefined) {
    rings = new VerbsRings(internals.graph, internals.rdma, (m) => opts.log?.('warn', m));
    ringsOf.set(internals.graph, rings);
  }
  const vr = rings;
  const server: Server = { dp, internals, rings: vr, core, limits, lines };
  // A link going up or down: each connection on that interface's device is told through its
  // async fd (the library asks for the devices and returns IBV_EVENT_PORT_ACTIVE / _ERR).
  const unLink =
    internals.onLink?.((ifname) => {
      for (const own of conns.values())
        if (own.ifname === ifname && own.async.fd >= 0) core.eventfdSignal(own.async.fd);
    }) ?? (() => {});
  /** Destroy what a closed connection created: QPs (each sends FIN), SRQs, memory windows, MRs, CQs, then PDs. */
  const release = async (own: Owned) => {
    detachAll(vr, own, core);
    releaseUcma(own); // its rdma_cm ids, listeners and channels
    for (const q of own.qps.keys()) await dp.destroyQp(q).catch(() => undefined);
    for (const h of own.srqs) await dp.destroySrq(h).catch(() => undefined);
    for (const h of own.mws) await dp.destroyMw(h).catch(() => undefined);
    for (const h of own.mrs) await dp.destroyMr(h).catch(() => undefined);
    for (const h of own.cqs) await dp.destroyCq(h).catch(() => undefined);
    for (const h of own.pds) await dp.destroyPd(h).catch(() => undefined);
  };
  const drop = (fd: number, why: string | null) => {
    const own = conns.get(fd);
    if (why !== null)
      lines.say(
        `uid ${own?.uid ?? -1}`,
        'warn',
        `verbs socket: dropped a connection: ${why} (${own?.owner ?? 'unknown process'})`,
      );
    if (own) lines.end(own.logKey);
    waiter.remove(fd);
    conns.delete(fd);
    if (own) detachAll(vr, own, core); // before the program sees the end of file and flushes its rings
    closeConn(fd);
    if (own) void release(own);
  };
  const serve = async (fd: number) => {
    for (let k = 0; k < REQUESTS_PER_WAKEUP && conns.has(fd); k++) {
      const m = core.seqpacketRecv(fd);
      if (m === null) return;
      if ('eof' in m) return drop(fd, null);
      const q = m.truncated ? null : readMessage(m.data);
      if (q === null || q.magic !== RGV_MAGIC) {
        for (const f of m.fds) core.closeFd(f);
        return drop(
          fd,
          m.truncated
            ? `a request over ${m.data.length} bytes or with over ${RGV_MAX_MR_PIECES} fds`
            : q === null
              ? `a request of ${m.data.length} bytes (at least ${rgv_hdr.size} expected)`
              : 'a request without the RGV1 magic',
        );
      }
      const own = conns.get(fd) as Owned;
      let r: Reply | number;
      try {
        r = await handle(server, own, q.op, q.body, m.fds);
      } catch (e) {
        return drop(fd, (e as Error).message);
      }
      // Closed while the verb ran (the socket closing): what it just made is released too.
      if (!conns.has(fd)) return void release(own);
      const resp =
        typeof r === 'number' ? message(q.op, q.seq, undefined, -r) : message(q.op, q.seq, r.body, 0, r.count);
      const err = core.seqpacketSend(fd, resp);
      if (err !== 0) return drop(fd, `send failed (errno ${err})`);
    }
  };
  // One request at a time over every connection, as before workers: adopt() starts waiting only
  // when nothing is waiting or being served.
  let busy = false;
  const loop = () => {
    if (closed || waiting || busy || conns.size === 0) return;
    waiting = true;
    waiter.wait(-1, (fd: number) => {
      waiting = false;
      if (closed) return;
      if (fd >= 0 && conns.has(fd)) {
        busy = true;
        serve(fd).then(
          () => {
            busy = false;
            loop();
          },
          (e: Error) => {
            busy = false;
            drop(fd, e.message);
            loop();
          },
        );
      } else loop();
    });
  };
  return {
    adopt(c: number) {
      const peer = core.seqpacketPeer(c);
      // The listener admitted it (verbs.max-connections* over the whole daemon); this is a last stop.
      if (closed || conns.size >= limits.maxConnections) {
        lines.say(
          `uid ${peer?.uid ?? -1}`,
          'warn',
          `verbs socket: refused a connection: ${closed ? 'shutting down' : `${limits.maxConnections} are open`}`,
        );
        closeConn(c);
        return;
      }
      const owner = ownerOf(peer);
      conns.set(c, {
        owner,
        uid: peer?.uid ?? -1,
        logKey: `${owner}, connection ${++connSeq}`,
        pds: new Set(),
        mrs: new Set(),
        mws: new Set(),
        cqs: new Set(),
        srqs: new Set(),
        qps: new Map(),
        doorbell: -1,
        async: { fd: -1 },
        ifname: undefined,
        channels: new Map(),
        nextChannel: 1,
        cqRings: new Map(),
        cqGroup: new CqGroup(),
        qpRings: new Map(),
        srqRings: new Map(),
      });
      waiter.add(c);
      if (!waiting) loop();
    },
    connections: () => conns.size,
    close() {
      if (closed) return;
      closed = true;
      unLink();
      waiter.close();
      for (const [c, own] of conns) {
        detachAll(vr, own, core);
        closeConn(c);
        void release(own);
      }
      conns.clear();
      lines.close();
    },
  };
}
