/**
 * The verbs control socket (Dataplane.serveVerbs): how librdmagraph-verbs.so (native/verbs-lib/, preloaded into an
 * unmodified libibverbs program by `rdma-graph exec`) reaches this daemon. A SOCK_SEQPACKET
 * listener at `verbs.socket` (mode 0660 from the moment it exists: bound in a private directory
 * and renamed into place), one connection per opened device context, fixed little-endian
 * messages (native/verbs-lib/proto.h).
 *
 * Served: DEVICES (one device per interface with an IPv4 address), ATTACH (the opened device's
 * interface and the program's doorbell eventfd), ALLOC_PD/DEALLOC_PD, REG_MR (the program's pages
 * on a memfd sealed against shrinking, mapped here: the MR's memory is the program's)/DEREG_MR,
 * CREATE_CHANNEL/DESTROY_CHANNEL (completion channels: the program's eventfds), CREATE_CQ (with
 * its ring)/DESTROY_CQ, CREATE_SRQ/SRQ_RING/MODIFY_SRQ/DESTROY_SRQ, CREATE_QP/QP_RING/MODIFY_QP
 * (the peer from the AV's IPv4-mapped GID and dest_qp_num, PSNs, IRD/ORD, path MTU, timeout,
 * retry count)/QUERY_QP/DESTROY_QP. The rings are the data path (dataplane/verbs-server/rings.ts). A
 * connection touches only what it created, and what it created is destroyed when it closes (the
 * program exited or was killed): its rings are detached first, so nothing writes them once the
 * program can see the end of file. Every other request is answered EOPNOTSUPP; a malformed one
 * closes that connection (logged), never the daemon.
 *
 * What one program can cost (issue 26): a registration is O(1) in its length (mapped, never
 * touched or copied; at most 2^31 bytes); connections are admitted by the listener (the main
 * thread with cpu.workers) per process, per user (SO_PEERCRED) and in all (verbs.max-connections*),
 * and only while the process keeps headroom below its fd limit; a refused connection's first
 * request is answered with an errno and the reason; eventfds per connection are bounded
 * (verbs.max-fds-per-connection); accept() at EMFILE drops the waiting connection through a spare
 * fd instead of spinning; log lines a client causes are rate-limited (dataplane/verbs-server/log-limit.ts). A
 * ring's size must be exactly what the daemon computes for the object.
 */
import type { Qp } from '../../nodes/rdma/qp.ts';
import type { Cq, Srq } from '../../nodes/rdma/verbs.ts';
import { existsSync, mkdirSync, readFileSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DataplaneApi, ServeVerbsOptions, VerbsLimits, VerbsSocket } from '../api.ts';
import type { Graph } from '../../graph/index.ts';
import type { Rdma } from '../../nodes/rdma/stack.ts';
import { LogLimiter } from './log-limit.ts';
import { VERBS_LIMITS } from '../../nodes/rdma/stack.ts';
import { type Channel, CqRing, CQE_BYTES, QpRing, RING_HDR, rqStride, SrqRing, VerbsRings } from './rings.ts';
import { loadCore, NATIVE_BUILD_DIR, type FdWaiter } from '../../native/addons.ts';

/** librdmagraph-verbs.so, what `rdma-graph exec` preloads (built when libibverbs-dev is there). */
export const VERBS_LIBRARY = `${NATIVE_BUILD_DIR}librdmagraph-verbs.so`;

export const RGV_MAGIC = 0x31564752;
export const RGV_OP_DEVICES = 1;
export const RGV_OP_ALLOC_PD = 2;
export const RGV_OP_DEALLOC_PD = 3;
export const RGV_OP_REG_MR = 4;
export const RGV_OP_DEREG_MR = 5;
export const RGV_OP_CREATE_CQ = 6;
export const RGV_OP_DESTROY_CQ = 7;
export const RGV_OP_CREATE_QP = 8;
export const RGV_OP_MODIFY_QP = 9;
export const RGV_OP_DESTROY_QP = 10;
export const RGV_OP_QUERY_QP = 11;
export const RGV_OP_ATTACH = 12;
export const RGV_OP_CREATE_CHANNEL = 13;
export const RGV_OP_DESTROY_CHANNEL = 14;
export const RGV_OP_QP_RING = 15;
export const RGV_OP_CREATE_SRQ = 16;
export const RGV_OP_SRQ_RING = 17;
export const RGV_OP_DESTROY_SRQ = 18;
export const RGV_OP_MODIFY_SRQ = 19;
const RGV_NONE = 0xffffffff;
/** Requests that pass a file descriptor (SCM_RIGHTS); any other's is closed unread. */
const FD_OPS = new Set([
  RGV_OP_REG_MR,
  RGV_OP_ATTACH,
  RGV_OP_CREATE_CHANNEL,
  6 /* CREATE_CQ */,
  RGV_OP_QP_RING,
  RGV_OP_SRQ_RING,
]);
/** libibverbs' enum ibv_qp_state, in order; and the attr_mask bits the daemon reads. */
const IBV_STATES = ['reset', 'init', 'rtr', 'rts', 'sqd', 'sqe', 'error'] as const;
const IBV_QP_STATE = 1 << 0,
  IBV_QP_AV = 1 << 7,
  IBV_QP_PATH_MTU = 1 << 8,
  IBV_QP_TIMEOUT = 1 << 9,
  IBV_QP_RETRY_CNT = 1 << 10,
  IBV_QP_RQ_PSN = 1 << 12,
  IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
  IBV_QP_SQ_PSN = 1 << 16,
  IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
  IBV_QP_DEST_QPN = 1 << 20;
export const RGV_HDR_BYTES = 16;
export const RGV_DEVICE_BYTES = 132;
export const RGV_MAX_DEVICES = 64;
const EOPNOTSUPP = 95;
/** Refusals of a connection or an fd: one process's limits, the daemon's fd headroom, a user's or everyone's. */
const EMFILE = 24,
  ENFILE = 23,
  EUSERS = 87;
/** errno for a refused verb, by DataplaneError kind. */
const ERRNO: Record<string, number> = {
  invalid: 22, // EINVAL
  'not-found': 2, // ENOENT
  state: 22,
  busy: 16, // EBUSY
  'too-large': 12, // ENOMEM
  resource: 12,
  unavailable: 19, // ENODEV
};
const ACCESS_BITS = ['local-write', 'remote-write', 'remote-read', 'remote-atomic'] as const;

/** What one connection (one opened device context) created: destroyed when it closes. */
interface Owned {
  /** "pid N (comm)" of the connected program (SO_PEERCRED), for QpView.owner. */
  owner: string;
  /** Its uid (SO_PEERCRED; -1 unknown): the key its connection-level log lines are limited by. */
  uid: number;
  /** The key of this connection's own log lines ("pid N (comm), connection K"). */
  logKey: string;
  pds: Set<number>;
  mrs: Set<number>;
  cqs: Set<number>;
  srqs: Set<number>;
  /** QPN -> the receive PSN it was given at RTR (for ibv_query_qp; the daemon's view has the send one). */
  qps: Map<number, number>;
  /** The program's doorbell eventfd (RGV_OP_ATTACH), -1 before. */
  doorbell: number;
  /** The interface of the device it opened (RGV_OP_ATTACH): its QPs take that address. */
  ifname: string | undefined;
  channels: Map<number, Channel>;
  nextChannel: number;
  cqRings: Map<number, CqRing>;
  qpRings: Map<number, QpRing>;
  srqRings: Map<number, SrqRing>;
}

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
  for (const ch of own.channels.values()) core.closeFd(ch.fd);
  own.channels.clear();
}

/** One VerbsRings (and verbs-input node) per data plane, however many sockets it serves. */
const ringsOf = new WeakMap<Graph, VerbsRings>();

/** The graph and RDMA stack of the data plane a verbs server serves (its rings run on that graph). */
export interface VerbsServed {
  graph: Graph;
  rdma: Rdma;
}

/** The `verbs:` defaults (config/schema.ts), for a configuration built without them. */
export const DEFAULT_VERBS_LIMITS: VerbsLimits = {
  maxConnections: 256,
  maxConnectionsPerUid: 64,
  maxConnectionsPerPid: 16,
  maxFdsPerConnection: 32,
};

/** The limits of a `verbs:` section, defaults for any key it lacks. */
export function verbsLimits(v: Partial<VerbsLimits> | undefined): VerbsLimits {
  const out = { ...DEFAULT_VERBS_LIMITS };
  for (const k of Object.keys(out) as (keyof VerbsLimits)[]) if (typeof v?.[k] === 'number') out[k] = v[k] as number;
  return out;
}

/**
 * File descriptors kept free for the rest of the daemon (the API's connections, captures,
 * interfaces): no verbs connection or eventfd is taken at or above fdLimit - this.
 */
export function fdReserve(limit: number): number {
  return Math.max(16, Math.floor(limit / 8));
}

/** Whether `fd` (just received: the lowest free number) leaves the process its fd reserve. */
function fdHeadroom(core: ReturnType<typeof loadCore>, fd: number, share = 1): boolean {
  const limit = core.fdLimit();
  return fd < limit - fdReserve(limit) * share;
}

export interface VerbsSocketOptions extends ServeVerbsOptions {
  /** Most QPs of the data plane (rdma.max-qps), for ibv_query_device. */
  maxQps: number;
}

/** The DEVICES response: one record per interface with an IPv4 address (at most 64). */
async function devices(dp: DataplaneApi, seq: number, maxQps: number): Promise<Uint8Array> {
  const itfs = (await dp.interfaces()).filter((i) => i.addresses.length > 0).slice(0, RGV_MAX_DEVICES);
  const out = new Uint8Array(RGV_HDR_BYTES + itfs.length * RGV_DEVICE_BYTES);
  const v = new DataView(out.buffer);
  header(v, RGV_OP_DEVICES, 0, seq, itfs.length);
  const enc = new TextEncoder();
  itfs.forEach((itf, k) => {
    const o = RGV_HDR_BYTES + k * RGV_DEVICE_BYTES;
    out.set(enc.encode(`rdmagraph_${itf.name}`).subarray(0, 63), o);
    out.set(enc.encode(itf.name).subarray(0, 31), o + 64);
    out.set(
      itf.mac.split(':').map((h) => parseInt(h, 16)),
      o + 96,
    );
    out[o + 102] = itf.state === 'up' ? 1 : 0;
    out.set(
      itf.addresses[0]
        .split('/')[0]
        .split('.')
        .map((x) => Number(x)),
      o + 104,
    );
    v.setUint32(o + 108, itf.mtu, true);
    v.setUint32(o + 112, maxQps, true);
    v.setUint32(o + 116, VERBS_LIMITS.maxWr, true);
    v.setUint32(o + 120, VERBS_LIMITS.maxSge, true);
    v.setUint32(o + 124, VERBS_LIMITS.maxCqe, true);
    v.setUint32(o + 128, VERBS_LIMITS.maxRdAtomic, true);
  });
  return out;
}

/** "pid 1234 (ib_write_bw)": the peer's pid and its command name (/proc, at most 15 bytes). */
function ownerOf(peer: { pid: number } | null): string {
  if (peer === null) return 'unknown process';
  let comm = '';
  try {
    comm = readFileSync(`/proc/${peer.pid}/comm`, 'utf8').trim().slice(0, 15);
  } catch {
    // gone already, or another pid namespace
  }
  return comm ? `pid ${peer.pid} (${comm})` : `pid ${peer.pid}`;
}

/** A reply payload of little-endian u32 words. */
function u32s(...words: number[]): Uint8Array {
  const out = new Uint8Array(4 * words.length);
  const v = new DataView(out.buffer);
  words.forEach((x, k) => v.setUint32(4 * k, x >>> 0, true));
  return out;
}

function header(v: DataView, op: number, status: number, seq: number, count: number): void {
  v.setUint32(0, RGV_MAGIC, true);
  v.setUint16(4, op, true);
  v.setInt16(6, status, true);
  v.setUint32(8, seq, true);
  v.setUint32(12, count, true);
}

/**
 * Listen on `opts.path`: a stale socket file nobody serves is replaced, one another process
 * serves is refused (an error naming the path).
 */
export function startVerbsSocket(dp: DataplaneApi, served: VerbsServed, opts: VerbsSocketOptions): VerbsSocket {
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

/** What a listener hands its accepted connections to (one data plane's, or a worker's). */
export interface VerbsConnections {
  /** Serve connection `fd` (accepted already); closes it when too many are open. */
  adopt(fd: number): void;
  connections(): number;
  close(): void;
}

/** A connection the admission refused: why, and the errno its first request is answered with. */
export interface Refusal {
  errno: number;
  reason: string;
  /** "pid N (comm)", uid: who was refused (for the log). */
  owner: string;
  uid: number;
}

/**
 * Who may connect (the listener asks at accept, by SO_PEERCRED): at most maxConnectionsPerPid
 * connections of one process, maxConnectionsPerUid of one user, maxConnections in all, and none
 * that would take the process into its fd reserve. The listener counts every connection it
 * admitted until release(fd), which whoever closes the connection calls first (the data plane,
 * or with cpu.workers the main thread when a worker hands the fd back), so the limits hold for
 * the whole daemon.
 */
export class VerbsAdmission {
  private readonly peers = new Map<number, { pid: number; uid: number }>();
  private readonly perPid = new Map<number, number>();
  private readonly perUid = new Map<number, number>();

  constructor(readonly limits: VerbsLimits) {}

  /** Admit connection `fd` (counted from now on), or why not. */
  admit(fd: number): Refusal | null {
    const core = loadCore();
    const peer = core.seqpacketPeer(fd) ?? { pid: -1, uid: -1 };
    const owner = ownerOf(peer.pid >= 0 ? peer : null);
    const refuse = (errno: number, reason: string): Refusal => ({ errno, reason, owner, uid: peer.uid });
    const limit = core.fdLimit();
    if (!fdHeadroom(core, fd))
      return refuse(
        ENFILE,
        `the daemon is short of file descriptors (the lowest free is ${fd} of its limit ${limit}, ${fdReserve(limit)} kept for the rest of it): try again later`,
      );
    const l = this.limits;
    if (this.peers.size >= l.maxConnections)
      return refuse(
        EUSERS,
        `${this.peers.size} connections are open, the most the daemon serves (verbs.max-connections)`,
      );
    const u = this.perUid.get(peer.uid) ?? 0;
    if (u >= l.maxConnectionsPerUid)
      return refuse(
        EUSERS,
        `uid ${peer.uid} has ${u} connections open, the most one user may have (verbs.max-connections-per-uid)`,
      );
    const p = this.perPid.get(peer.pid) ?? 0;
    if (p >= l.maxConnectionsPerPid)
      return refuse(
        EMFILE,
        `${owner} has ${p} connections open, the most one process may have (verbs.max-connections-per-pid)`,
      );
    this.peers.set(fd, peer);
    this.perUid.set(peer.uid, u + 1);
    this.perPid.set(peer.pid, p + 1);
    return null;
  }

  /** Connection `fd` is being closed: no longer counted (call before closing it). */
  release(fd: number): void {
    const peer = this.peers.get(fd);
    if (peer === undefined) return;
    this.peers.delete(fd);
    const down = (m: Map<number, number>, k: number) => {
      const n = (m.get(k) ?? 1) - 1;
      if (n > 0) m.set(k, n);
      else m.delete(k);
    };
    down(this.perUid, peer.uid);
    down(this.perPid, peer.pid);
  }

  /** Connections admitted and not released. */
  get size(): number {
    return this.peers.size;
  }
}

/** Refused connections held at once to answer their first request with the reason. */
const MAX_REFUSING = 16;
/** How long a refused connection may take to send that request. */
const REFUSING_MS = 2000;
/** Accepts per wake-up of the listener (the rest on the next turn of the loop). */
const ACCEPT_BURST = 64;
/** After accept fails without a spare fd (or for another reason): the listener rests this long. */
const ACCEPT_BACKOFF_MS = 100;

/**
 * Listen on `path` and give every accepted connection to `serve` (startVerbsSocket: this data
 * plane's; with cpu.workers the main thread picks a worker per connection). With `admission`,
 * a connection it refuses is held (at most MAX_REFUSING, and only with fds to spare) until its
 * first request, which is answered with the refusal's errno and reason as text, then closed.
 */
export function listenVerbs(
  path: string,
  serve: Pick<VerbsConnections, 'adopt' | 'connections' | 'close'>,
  opts: { admission?: VerbsAdmission; log?: (level: 'info' | 'warn', msg: string) => void } = {},
): VerbsSocket {
  const core = loadCore();
  const abstract = path.startsWith('@');
  if (!abstract) {
    mkdirSync(dirname(path), { recursive: true });
    if (existsSync(path)) {
      let live = false;
      try {
        core.closeFd(core.memifRawConnect(path));
        live = true;
      } catch {
        // Nobody answers: a stale file of a daemon that died.
      }
      if (live) throw new Error(`verbs.socket ${path}: another process serves it (another rdma-graph?)`);
      unlinkSync(path);
    }
  }
  let lfd: number;
  try {
    // 0660 from the moment the file exists (never the umask's mode: bound in a private directory).
    lfd = core.verbsListen(path, 0o660);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST')
      throw new Error(`verbs.socket ${path}: another process serves it (another rdma-graph?)`);
    throw e;
  }
  const lines = new LogLimiter(opts.log, 'verbs socket: ');
  const waiter: FdWaiter = new core.FdWaiter();
  const refusing = new Map<number, Refusal & { until: number }>();
  let closed = false,
    watching = true,
    backoff: ReturnType<typeof setTimeout> | null = null;
  const hangUp = (fd: number) => {
    waiter.remove(fd);
    refusing.delete(fd);
    core.closeFd(fd);
  };
  const refuse = (fd: number, r: Refusal) => {
    lines.say(`uid ${r.uid}`, 'warn', `verbs socket: refused a connection of ${r.owner} (uid ${r.uid}): ${r.reason}`);
    // Told why only while that costs nothing the daemon needs: else closed at once.
    if (refusing.size >= MAX_REFUSING || !fdHeadroom(core, fd, 0.5)) return core.closeFd(fd);
    refusing.set(fd, { ...r, until: Date.now() + REFUSING_MS });
    waiter.add(fd);
  };
  /** A refused connection's first request: its errno and the reason, then the end. */
  const answer = (fd: number) => {
    const r = refusing.get(fd) as Refusal;
    const m = core.seqpacketRecv(fd);
    if (m === null) return; // woken for nothing: wait on
    if ('data' in m) {
      if (m.fd >= 0) core.closeFd(m.fd);
      if (m.data.length >= RGV_HDR_BYTES) {
        const q = new DataView(m.data.buffer, m.data.byteOffset, m.data.length);
        const text = new TextEncoder().encode(r.reason).subarray(0, 480);
        const resp = new Uint8Array(RGV_HDR_BYTES + text.length);
        header(new DataView(resp.buffer), q.getUint16(4, true), -r.errno, q.getUint32(8, true), 0);
        resp.set(text, RGV_HDR_BYTES);
        core.seqpacketSend(fd, resp);
      }
    }
    hangUp(fd);
  };
  const acceptSome = () => {
    for (let k = 0; k < ACCEPT_BURST; k++) {
      const c = core.verbsAccept(lfd);
      if (c === -1) return;
      if (c === -2) {
        lines.say('out of fds', 'warn', 'verbs socket: out of file descriptors: a waiting connection was closed');
        continue;
      }
      if (c < 0) {
        // Out of descriptors with no spare to give back, or accept failing otherwise: rest.
        lines.say('accept', 'warn', 'verbs socket: accept fails: the listener rests 100 ms');
        waiter.remove(lfd);
        watching = false;
        backoff = setTimeout(() => {
          backoff = null;
          if (closed) return;
          waiter.add(lfd);
          watching = true;
          loop();
        }, ACCEPT_BACKOFF_MS);
        return;
      }
      const no = opts.admission?.admit(c) ?? null;
      if (no !== null) refuse(c, no);
      else serve.adopt(c);
    }
  };
  const loop = () => {
    if (closed || waiter.waiting || (!watching && refusing.size === 0)) return;
    const timeout =
      refusing.size === 0 ? -1 : Math.max(0, Math.min(...[...refusing.values()].map((r) => r.until)) - Date.now());
    waiter.wait(timeout, (fd: number) => {
      if (closed) return;
      if (fd === lfd) acceptSome();
      else if (fd >= 0 && refusing.has(fd)) answer(fd);
      const now = Date.now();
      for (const [f, r] of refusing) if (r.until <= now) hangUp(f);
      loop();
    });
  };
  waiter.add(lfd);
  loop();
  return {
    path,
    connections: () => serve.connections(),
    close() {
      if (closed) return;
      closed = true;
      if (backoff !== null) clearTimeout(backoff);
      waiter.close();
      for (const fd of refusing.keys()) core.closeFd(fd);
      refusing.clear();
      serve.close();
      core.verbsUnlisten(lfd);
      lines.close();
      if (!abstract && existsSync(path)) unlinkSync(path);
    },
  };
}

/** Serve verbs connections on data plane `dp` (each handed over by adopt). */
export function verbsConnections(
  dp: DataplaneApi,
  internals: VerbsServed,
  opts: Omit<VerbsSocketOptions, 'path'> & {
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
  /** Destroy what a closed connection created: QPs (each sends FIN), MRs, CQs, then PDs. */
  let rings = ringsOf.get(internals.graph);
  if (rings === undefined) {
    rings = new VerbsRings(internals.graph, internals.rdma, (m) => opts.log?.('warn', m));
    ringsOf.set(internals.graph, rings);
  }
  const vr = rings;
  const release = async (own: Owned) => {
    detachAll(vr, own, core);
    for (const q of own.qps.keys()) await dp.destroyQp(q).catch(() => undefined);
    for (const h of own.srqs) await dp.destroySrq(h).catch(() => undefined);
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
  /** One verb: its reply payload, or the errno it failed with. */
  const verb = async (own: Owned, op: number, body: DataView, passedFd: number): Promise<Uint8Array | number> => {
    const box = { fd: FD_OPS.has(op) ? passedFd : -1 };
    if (box.fd < 0 && passedFd >= 0) core.closeFd(passedFd);
    try {
      return await verbWith(own, op, body, box);
    } finally {
      if (box.fd >= 0) core.closeFd(box.fd);
    }
  };
  /** One verb; `box.fd` is the fd it was passed (-1 once taken: mapped or kept). */
  const verbWith = async (
    own: Owned,
    op: number,
    body: DataView,
    box: { fd: number },
  ): Promise<Uint8Array | number> => {
    const want = (n: number) => {
      if (body.byteLength !== n) throw new Error(`op ${op}: ${body.byteLength} bytes of body, ${n} expected`);
    };
    /** DEALLOC_PD, DEREG_MR, DESTROY_CQ, DESTROY_QP: a u32 handle of this connection's own. */
    const destroyOwn = async (
      owned: { has(h: number): boolean; delete(h: number): boolean },
      destroy: (h: number) => Promise<void>,
    ) => {
      want(4);
      const h = body.getUint32(0, true);
      if (!owned.has(h)) return ERRNO['not-found'];
      await destroy(h);
      owned.delete(h);
      return u32s();
    };
    /**
     * The passed memfd of `bytes`, mapped and never touched here: O(1) whatever its size
     * (mapVerbsMemory closes the fd either way; hugetlb memory is refused).
     */
    const mapPassed = (bytes: number): ArrayBuffer => {
      const fd = box.fd;
      box.fd = -1;
      return core.mapVerbsMemory(fd, bytes);
    };
    /**
     * The passed fd if it is an eventfd the connection may keep (the caller owns it now), else
     * the errno: EINVAL (none, or not an eventfd), EMFILE (the connection holds
     * verbs.max-fds-per-connection already), ENFILE (the daemon is into its fd reserve).
     */
    const takeEventfd = (): { fd: number } | { errno: number } => {
      if (box.fd < 0 || !core.isEventfd(box.fd)) return { errno: ERRNO.invalid };
      if ((own.doorbell >= 0 ? 1 : 0) + own.channels.size >= limits.maxFdsPerConnection) return { errno: EMFILE };
      if (!fdHeadroom(core, box.fd)) return { errno: ENFILE };
      const fd = box.fd;
      box.fd = -1;
      return { fd };
    };
    try {
      if (op === RGV_OP_ALLOC_PD) {
        want(0);
        const { pd } = await dp.createPd();
        own.pds.add(pd);
        return u32s(pd);
      }
      if (op === RGV_OP_DEALLOC_PD) return await destroyOwn(own.pds, (h) => dp.destroyPd(h));
      if (op === RGV_OP_DEREG_MR) return await destroyOwn(own.mrs, (h) => dp.destroyMr(h));
      if (op === RGV_OP_REG_MR) {
        if (box.fd < 0) return ERRNO.invalid;
        want(40);
        const pd = body.getUint32(0, true),
          access = body.getUint32(4, true),
          u64 = (at: number) => Number(body.getBigUint64(at, true));
        const span = u64(8),
          start = u64(16),
          addr = u64(24),
          length = u64(32);
        if (!own.pds.has(pd)) return ERRNO['not-found'];
        // The buffer lies in the pages: [addr, addr + length) within [start, start + span).
        const skip = addr - start;
        if (access > 15 || span < 1 || span > VERBS_LIMITS.maxMrLength + 2 ** 22) return ERRNO.invalid;
        if (length < 1 || length > VERBS_LIMITS.maxMrLength || skip < 0 || skip + length > span) return ERRNO.invalid;
        if (addr + length > 2 ** 53) return ERRNO.invalid;
        const pages = new Uint8Array(mapPassed(span));
        const names = ACCESS_BITS.filter((_, b) => access & (1 << b));
        const memory = pages.subarray(skip, skip + length);
        const mr = await dp.createMr({ pd, length, access: names, memory, base: addr, owner: own.owner });
        own.mrs.add(mr.mr);
        return u32s(mr.mr, mr.stag);
      }
      if (op === RGV_OP_ATTACH) {
        want(32);
        if (own.doorbell >= 0) return ERRNO.busy;
        // The opened device: its interface is where this context's QPs live (their address).
        const raw = new Uint8Array(body.buffer, body.byteOffset, 32);
        const name = new TextDecoder().decode(raw.subarray(0, raw.indexOf(0) < 0 ? 32 : raw.indexOf(0)));
        const itf = (await dp.interfaces()).find((i) => i.name === name && i.addresses.length > 0);
        if (itf === undefined) return ERRNO.unavailable;
        const t = takeEventfd();
        if ('errno' in t) return t.errno;
        own.ifname = name;
        const fd = t.fd;
        own.doorbell = fd;
        vr.attachDoorbell(fd);
        return u32s();
      }
      if (op === RGV_OP_CREATE_CHANNEL) {
        want(0);
        const t = takeEventfd();
        if ('errno' in t) return t.errno;
        const fd = t.fd;
        const h = own.nextChannel++;
        own.channels.set(h, { fd, users: 0 });
        return u32s(h);
      }
      if (op === RGV_OP_DESTROY_CHANNEL) {
        want(4);
        const ch = own.channels.get(body.getUint32(0, true));
        if (ch === undefined) return ERRNO['not-found'];
        if (ch.users > 0) return ERRNO.busy;
        own.channels.delete(body.getUint32(0, true));
        core.closeFd(ch.fd);
        return u32s();
      }
      if (op === RGV_OP_CREATE_CQ) {
        want(16);
        const entries = body.getUint32(0, true),
          chan = body.getUint32(4, true),
          bytes = Number(body.getBigUint64(8, true));
        if (box.fd < 0 || entries < 1 || entries > VERBS_LIMITS.maxCqe || (entries & (entries - 1)) !== 0)
          return ERRNO.invalid;
        if (bytes !== RING_HDR + entries * CQE_BYTES) return ERRNO.invalid;
        const channel = chan === RGV_NONE ? null : (own.channels.get(chan) ?? null);
        if (chan !== RGV_NONE && channel === null) return ERRNO['not-found'];
        const mem = mapPassed(bytes);
        const { cq, depth } = await dp.createCq({ depth: entries });
        own.cqs.add(cq);
        const ring = new CqRing(internals.rdma.cqs.get(cq) as Cq, mem, entries, channel);
        vr.attachCq(ring);
        own.cqRings.set(cq, ring);
        return u32s(cq, depth);
      }
      /** DESTROY_CQ/QP/SRQ: the object first (its flushed work completes into the rings), then its ring. */
      const destroyWithRing = <R>(
        owned: { has(h: number): boolean; delete(h: number): boolean },
        rings: Map<number, R>,
        destroy: (h: number) => Promise<void>,
        detach: (r: R) => void,
      ) =>
        destroyOwn(owned, async (h) => {
          await destroy(h);
          const r = rings.get(h);
          if (r !== undefined) detach(r);
          rings.delete(h);
        });
      if (op === RGV_OP_DESTROY_CQ)
        return await destroyWithRing(
          own.cqs,
          own.cqRings,
          (h) => dp.destroyCq(h),
          (r) => vr.detachCq(r),
        );
      if (op === RGV_OP_DESTROY_QP)
        // ibv_destroy_qp tells the peer nothing (a last ACK only).
        return await destroyWithRing(
          own.qps,
          own.qpRings,
          (q) => dp.destroyQp(q, { quiet: true }),
          (r) => vr.detachQp(r),
        );
      if (op === RGV_OP_DESTROY_SRQ)
        return await destroyWithRing(
          own.srqs,
          own.srqRings,
          (h) => dp.destroySrq(h),
          (r) => vr.detachSrq(r),
        );
      if (op === RGV_OP_CREATE_SRQ) {
        want(16);
        const f = (k: number) => body.getUint32(4 * k, true);
        if (!own.pds.has(f(0))) return ERRNO['not-found'];
        const v = await dp.createSrq({
          pd: f(0),
          maxWr: Math.max(1, f(1)),
          maxSge: Math.max(1, f(2)),
          ...(f(3) > 0 ? { limit: f(3) } : {}),
        });
        own.srqs.add(v.srq);
        return u32s(v.srq, v.maxWr, v.maxSge);
      }
      if (op === RGV_OP_MODIFY_SRQ) {
        want(8);
        const h = body.getUint32(0, true);
        if (!own.srqs.has(h)) return ERRNO['not-found'];
        await dp.modifySrq(h, body.getUint32(4, true));
        return u32s();
      }
      if (op === RGV_OP_SRQ_RING) {
        want(24);
        const h = body.getUint32(0, true),
          entries = body.getUint32(4, true),
          stride = body.getUint32(8, true),
          bytes = Number(body.getBigUint64(16, true));
        if (!own.srqs.has(h)) return ERRNO['not-found'];
        if (own.srqRings.has(h) || box.fd < 0) return ERRNO.invalid;
        const srq = internals.rdma.srqs.get(h) as Srq;
        if (entries !== VerbsRings.pow2AtLeast(srq.maxWr) || stride !== rqStride(srq.maxSge)) return ERRNO.invalid;
        if (bytes !== RING_HDR + entries * stride) return ERRNO.invalid;
        const ring = new SrqRing(srq, mapPassed(bytes), entries, stride);
        vr.attachSrq(ring);
        own.srqRings.set(h, ring);
        return u32s();
      }
      if (op === RGV_OP_QP_RING) {
        want(32);
        const f = (k: number) => body.getUint32(4 * k, true);
        const qpn = f(0),
          bytes = Number(body.getBigUint64(24, true));
        if (!own.qps.has(qpn)) return ERRNO['not-found'];
        if (own.qpRings.has(qpn) || box.fd < 0) return ERRNO.invalid;
        const qp = internals.rdma.qpsByQpn.get(qpn) as Qp;
        const srqRing = qp.srq ? own.srqRings.get(qp.srq.handle) : null;
        if (srqRing === undefined) return ERRNO.invalid; // its SRQ has no ring
        const size = VerbsRings.qpRingBytes(qp, qp.srq !== null);
        if (
          f(1) !== size.sq ||
          f(2) !== size.rq ||
          f(3) !== size.sqStride ||
          f(4) !== size.rqStride ||
          bytes !== size.bytes
        )
          return ERRNO.invalid;
        const ring = new QpRing(qp, mapPassed(bytes), size.sq, size.rq, size.sqStride, size.rqStride, srqRing);
        vr.attachQp(ring);
        own.qpRings.set(qpn, ring);
        return u32s();
      }
      if (op === RGV_OP_CREATE_QP) {
        want(32);
        const f = (k: number) => body.getUint32(4 * k, true);
        const [pd, sendCq, recvCq, srq] = [f(0), f(1), f(2), f(7)];
        if (!own.pds.has(pd) || !own.cqs.has(sendCq) || !own.cqs.has(recvCq)) return ERRNO['not-found'];
        if (srq !== RGV_NONE && !own.srqs.has(srq)) return ERRNO['not-found'];
        const qp = await dp.createQp({
          pd,
          sendCq,
          recvCq,
          srq: srq === RGV_NONE ? null : srq,
          ...(own.ifname !== undefined ? { interface: own.ifname } : {}),
          maxSendWr: Math.max(1, f(3)),
          maxRecvWr: Math.max(1, f(4)),
          maxSge: Math.max(1, f(5)),
          maxInline: f(6),
          // ibv_create_qp has no IRD/ORD: ibv_modify_qp sets them later, up to what the QP was made with.
          ird: VERBS_LIMITS.maxRdAtomic,
          ord: VERBS_LIMITS.maxRdAtomic,
        });
        own.qps.set(qp.qpn, 0);
        dp.noteQpOwner(qp.qpn, own.owner);
        return u32s(qp.qpn, qp.maxSendWr, qp.maxRecvWr, qp.maxSge, qp.maxInline);
      }
      if (op === RGV_OP_MODIFY_QP) {
        want(52);
        const qpn = body.getUint32(0, true),
          mask = body.getUint32(4, true),
          state = body.getUint32(8, true);
        if (!own.qps.has(qpn)) return ERRNO['not-found'];
        if (!(mask & IBV_QP_STATE)) return EOPNOTSUPP; // attributes alone, no transition: not yet
        if (state >= IBV_STATES.length) return ERRNO.invalid;
        let remote: { ip: string; port: number } | undefined;
        if (mask & IBV_QP_AV) {
          const gid = new Uint8Array(body.buffer, body.byteOffset + 12, 16);
          // The peer's GID 0: its IPv4 address, IPv4-mapped (::ffff:a.b.c.d).
          if (!gid.subarray(0, 10).every((b) => b === 0) || gid[10] !== 0xff || gid[11] !== 0xff) return ERRNO.invalid;
          if (!(mask & IBV_QP_DEST_QPN)) return ERRNO.invalid;
          remote = { ip: [...gid.subarray(12, 16)].join('.'), port: body.getUint32(28, true) };
        }
        const rqPsn = mask & IBV_QP_RQ_PSN ? body.getUint32(32, true) : undefined;
        await dp.modifyQp(qpn, {
          state: IBV_STATES[state],
          remote,
          rqPsn,
          sqPsn: mask & IBV_QP_SQ_PSN ? body.getUint32(36, true) : undefined,
          // 0 (no READs or atomics that way) is allowed by verbs; ours need at least one slot.
          ord: mask & IBV_QP_MAX_QP_RD_ATOMIC ? Math.max(1, body.getUint32(40, true)) : undefined,
          ird: mask & IBV_QP_MAX_DEST_RD_ATOMIC ? Math.max(1, body.getUint32(44, true)) : undefined,
          // enum ibv_mtu 1..5: 256..4096 bytes (anything else: EINVAL from the verb).
          pathMtu: mask & IBV_QP_PATH_MTU ? 128 << body.getUint8(48) : undefined,
          // 4.096 us x 2^timeout; 0 is "infinite" on InfiniBand: ours keeps its own then.
          ackTimeoutUs:
            mask & IBV_QP_TIMEOUT && body.getUint8(49) > 0
              ? Math.ceil(4.096 * 2 ** Math.min(31, body.getUint8(49)))
              : undefined,
          retryCount: mask & IBV_QP_RETRY_CNT ? Math.min(7, body.getUint8(50)) : undefined,
        });
        if (rqPsn !== undefined) own.qps.set(qpn, rqPsn);
        return u32s();
      }
      if (op === RGV_OP_QUERY_QP) {
        want(4);
        const qpn = body.getUint32(0, true);
        const rqPsn = own.qps.get(qpn);
        if (rqPsn === undefined) return ERRNO['not-found'];
        const q = await dp.getQp(qpn);
        // The largest IB MTU the QP's segments (payload plus the 18 DDP/RDMAP bytes) hold.
        const room = q.segmentSize + 18;
        const mtu = room >= 4096 ? 5 : room >= 2048 ? 4 : room >= 1024 ? 3 : room >= 512 ? 2 : 1;
        const ip = q.remote ? q.remote.ip.split('.').map(Number) : [0, 0, 0, 0];
        return u32s(
          IBV_STATES.indexOf(q.state),
          q.remote?.port ?? 0,
          rqPsn,
          q.psn,
          q.ord,
          q.ird,
          mtu,
          q.maxSendWr,
          q.maxRecvWr,
          q.maxSge,
          q.maxInline,
          // dest_ipv4: four bytes in network order, read as one little-endian word
          ip[0] | (ip[1] << 8) | (ip[2] << 16) | (ip[3] << 24),
        );
      }
      return EOPNOTSUPP;
    } catch (e) {
      const kind = (e as { kind?: string }).kind;
      if (kind !== undefined && kind in ERRNO) return ERRNO[kind];
      if ((e as Error).message.startsWith('mapVerbsMemory')) {
        lines.say(own.logKey, 'warn', `verbs socket: refused a registration: ${(e as Error).message} (${own.owner})`);
        return ERRNO.invalid;
      }
      throw e;
    }
  };
  const serve = async (fd: number) => {
    // Bounded: at most 64 messages per wake-up per connection; the rest waits for the next.
    for (let k = 0; k < 64 && conns.has(fd); k++) {
      const m = core.seqpacketRecv(fd);
      if (m === null) return;
      if ('eof' in m) return drop(fd, null);
      if (m.data.length < RGV_HDR_BYTES) {
        if (m.fd >= 0) core.closeFd(m.fd);
        return drop(fd, `a request of ${m.data.length} bytes (at least 16 expected)`);
      }
      const q = new DataView(m.data.buffer, m.data.byteOffset, m.data.length);
      if (q.getUint32(0, true) !== RGV_MAGIC) {
        if (m.fd >= 0) core.closeFd(m.fd);
        return drop(fd, 'a request without the RGV1 magic');
      }
      const op = q.getUint16(4, true),
        seq = q.getUint32(8, true);
      let resp: Uint8Array;
      if (op === RGV_OP_DEVICES) {
        if (m.fd >= 0) core.closeFd(m.fd);
        resp = await devices(dp, seq, opts.maxQps);
      } else {
        const body = new DataView(m.data.buffer, m.data.byteOffset + RGV_HDR_BYTES, m.data.length - RGV_HDR_BYTES);
        let r: Uint8Array | number;
        const own = conns.get(fd) as Owned;
        try {
          r = await verb(own, op, body, m.fd);
        } catch (e) {
          return drop(fd, (e as Error).message);
        }
        // Closed while the verb ran (the socket closing): what it just made is released too.
        if (!conns.has(fd)) return void release(own);
        resp = new Uint8Array(RGV_HDR_BYTES + (typeof r === 'number' ? 0 : r.length));
        header(new DataView(resp.buffer), op, typeof r === 'number' ? -r : 0, seq, 0);
        if (typeof r !== 'number') resp.set(r, RGV_HDR_BYTES);
      }
      if (!conns.has(fd)) return;
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
        cqs: new Set(),
        srqs: new Set(),
        qps: new Map(),
        doorbell: -1,
        ifname: undefined,
        channels: new Map(),
        nextChannel: 1,
        cqRings: new Map(),
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
