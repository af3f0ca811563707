/**
 * rdma_cm for unmodified librdmacm programs: the UCMA_CHANNEL and UCMA requests
 * (native/verbs-lib/proto.h, last section). The library (native/verbs-lib/ucma.c) answers
 * librdmacm's kernel interface, the ucma commands written to /dev/infiniband/rdma_cm, and sends
 * each one here converted and checked; this runs them on the data plane's in-band connection
 * manager (nodes/rdma/cm.ts: REQ, ACCEPT, REJECT, FIN).
 *
 * A channel is an open of rdma_cm: the program's eventfd, kept readable exactly while the channel
 * holds events (signalled when the first is queued, drained when GET_EVENT takes the last), at
 * most RGV_UCMA_MAX_EVENTS of them. An id lives on one channel (MIGRATE_ID moves it and its
 * events). Ids, listeners and held requests are the connection's own and go with it.
 *
 * As librdmacm drives an InfiniBand or RoCE device, the program moves its QPs itself with the
 * attributes INIT_QP_ATTR answers, and the connection manager only carries what they need:
 * - active: CONNECT sends REQ from the program's QP (in INIT) with its initial PSN; the peer's
 *   ACCEPT is CONNECT_RESPONSE (its QP's port and initial PSN, IRD/ORD, private data), which
 *   librdmacm turns into RTR and RTS and then the ACCEPT command: the handshake's third packet (a
 *   pure ACK from the QP) goes out then.
 * - passive: a REQ to a listening port is held (the listener's backlog counts it) and is a
 *   CONNECT_REQUEST with a new id; the program creates its QP, moves it to RTS toward the
 *   requester and ACCEPTs naming it: ACCEPT goes out from that QP's port, and ESTABLISHED follows
 *   the peer's first packet. A request nobody answers within the half-open timeout is rejected.
 * - DISCONNECT sends a FIN; a connected id whose QP went to error (the peer's FIN, its program's
 *   death, retries exhausted) or away gets DISCONNECTED, once (a watch every WATCH_MS).
 *
 * The UD port space (RDMA_PS_UDP, UD QPs: udaddy) runs datagram service requests instead
 * (nodes/rdma/sidr.ts): CONNECT sends SIDR_REQ from the program's UD QP; a listening UD id's
 * request is a CONNECT_REQUEST, answered by ACCEPT (SIDR_REP naming the program's UD QP and its
 * Q_Key) or REJECT; the requester gets ESTABLISHED (param.ud) or UNREACHABLE. No connection,
 * no DISCONNECTED.
 *
 * Not served (errno and a line from the library): the IPoIB port space, multicast, AF_IB
 * addresses, IPv6 addresses other than IPv4-mapped ones, options.
 */
import { formatIp4, isIp4Multicast } from '../../nodes/net/address.ts';
import { MCAST_QPN } from '../../nodes/rdma/multicast.ts';
import {
  acceptDeferred,
  CmConnectError,
  ConnectionManager,
  type Listener,
  rejectDeferred,
} from '../../nodes/rdma/cm.ts';
import { type Qp, QpState } from '../../nodes/rdma/qp.ts';
import type { Rdma } from '../../nodes/rdma/stack.ts';
import {
  sidrAnswer,
  sidrCancel,
  sidrConnect,
  sidrKey,
  sidrRequestMessage,
  type SidrRequest,
} from '../../nodes/rdma/sidr.ts';
import { randomU32 } from '../../nodes/rdma/random.ts';
import { CmRejectReason, SidrStatus, TrpOp } from '../../nodes/rdma/wire.ts';
import {
  RGV_ATTR_AV,
  RGV_ATTR_DEST_QPN,
  RGV_ATTR_MAX_DEST_RD_ATOMIC,
  RGV_ATTR_MAX_QP_RD_ATOMIC,
  RGV_ATTR_PATH_MTU,
  RGV_ATTR_QKEY,
  RGV_ATTR_RETRY_CNT,
  RGV_ATTR_RNR_RETRY,
  RGV_ATTR_RQ_PSN,
  RGV_ATTR_SQ_PSN,
  RGV_ATTR_STATE,
  RGV_ATTR_TIMEOUT,
  RGV_CM_ADDR_ERROR,
  RGV_CM_ADDR_RESOLVED,
  RGV_CM_CONNECT_REQUEST,
  RGV_CM_CONNECT_RESPONSE,
  RGV_CM_DISCONNECTED,
  RGV_CM_MULTICAST_JOIN,
  RGV_CM_ESTABLISHED,
  RGV_CM_REJECTED,
  RGV_CM_ROUTE_RESOLVED,
  RGV_CM_TIMEWAIT_EXIT,
  RGV_CM_UNREACHABLE,
  RGV_MTU_4096,
  RGV_QPS_INIT,
  RGV_QPS_RTR,
  RGV_QPS_RTS,
  RGV_UCMA_ACCEPT,
  RGV_UCMA_BIND,
  RGV_UCMA_CLOSE,
  RGV_UCMA_JOIN,
  RGV_UCMA_LEAVE,
  RGV_UCMA_CONNECT,
  RGV_UCMA_CREATE_ID,
  RGV_UCMA_DESTROY_ID,
  RGV_UCMA_DISCONNECT,
  RGV_UCMA_GET_EVENT,
  RGV_UCMA_INIT_QP_ATTR,
  RGV_UCMA_LISTEN,
  RGV_UCMA_MAX_EVENTS,
  RGV_UCMA_MAX_PRIVATE_DATA,
  RGV_UCMA_MIGRATE_ID,
  RGV_UCMA_QUERY,
  RGV_UCMA_REJECT,
  RGV_UCMA_RESOLVE_ADDR,
  RGV_UCMA_RESOLVE_ROUTE,
  type rgv_handle,
  type rgv_ucma,
  type rgv_ucma_reply,
} from './abi.generated.ts';
import type { DataplaneApi } from '../api.ts';
import type { CoreAddon } from '../../native/addons.ts';
import type { LogLimiter } from './log-limit.ts';
import { type Decoded, type Encodable, Errno } from './messages.ts';

/** A reply's body and count (handlers.ts's Reply). */
interface Reply {
  body: Uint8Array;
  count: number;
}

/** What this file uses of the verbs server and of a connection (handlers.ts's Server and Owned). */
interface Server {
  dp: DataplaneApi;
  internals: { rdma: Rdma };
  core: CoreAddon;
  limits: { maxFdsPerConnection: number };
  lines: LogLimiter;
}
interface Owned {
  owner: string;
  logKey: string;
}

/** One request as handlers.ts hands it over (its Call, for UCMA_CHANNEL and UCMA). */
interface Call<Req, Rep> {
  readonly server: Server;
  readonly own: Owned;
  body(): Req;
  reply(values: Rep): Reply;
  takeEventfd(): { fd: number } | { errno: number };
}
type ChannelCall = Call<Record<string, never>, Encodable<typeof rgv_handle>>;
type UcmaCall = Call<Decoded<typeof rgv_ucma>, Encodable<typeof rgv_ucma_reply>>;

/** The errnos this file answers besides messages.ts's (Linux values). */
const E = {
  ...Errno,
  EAGAIN: 11,
  EAFNOSUPPORT: 97,
  EADDRINUSE: 98,
  EADDRNOTAVAIL: 99,
  EISCONN: 106,
  ETIMEDOUT: 110,
  ECONNREFUSED: 111,
  EHOSTUNREACH: 113,
  ECANCELED: 125,
} as const;

/** librdmacm's port spaces (enum rdma_port_space). */
const PS_TCP = 0x0106;
const PS_IB = 0x013f;
/** The UD port space (udaddy's): datagram service requests (nodes/rdma/sidr.ts), UD QPs. */
const PS_UDP = 0x0111;
/** ibv_qp_type's IBV_QPT_UD. */
const QPT_UD = 4;
/** The Q_Key of RDMA_PS_UDP ids' QPs (the kernel's RDMA_UDP_QKEY). */
const UDP_QKEY = 0x01234567;
/** IB CM's reject reason "consumer defined" (what librdmacm shows for a program's rdma_reject). */
const REJECT_CONSUMER = 28;
/** IB CM's reject reason "invalid service ID": nobody listens there (RoCE's rping shows "error 8"). */
const REJECT_INVALID_SERVICE_ID = 8;
/** The most ids one connection holds. */
const MAX_IDS = 4096;
/** How often connected and accepting ids are looked at (ESTABLISHED, DISCONNECTED). */
const WATCH_MS = 2;
/** A listener's backlog at most (the kernel's default somaxconn). */
const MAX_BACKLOG = 1024;
/** Ports a listen without a bound port takes one of. */
const EPHEMERAL_LO = 49152;
const EPHEMERAL_HI = 65535;

type IdState =
  | 'idle'
  | 'bound'
  | 'addr'
  | 'route'
  | 'listening'
  | 'connecting'
  | 'responded'
  | 'requested'
  | 'accepted'
  | 'connected'
  | 'disconnected'
  | 'failed';

interface Peer {
  addr: number;
  port: number;
  isn: number;
}

interface Ev {
  /** The id it is about (a new one for CONNECT_REQUEST). */
  id: CmId;
  /** The id whose count it is (the listening id for CONNECT_REQUEST). */
  counted: CmId;
  event: number;
  status: number;
  qpn: number;
  ird: number;
  ord: number;
  pd: Uint8Array;
  /** A UD id's event (param.ud): the peer's address and the serving QP's Q_Key. */
  ud?: boolean;
  addr?: number;
  qkey?: number;
  /** A membership's event (MULTICAST_JOIN): its uid and handle, and its count too. */
  mc?: Mc;
}

/** A UD id's membership of a multicast group (JOIN): what LEAVE names. */
interface Mc {
  handle: number;
  uidLo: number;
  uidHi: number;
  id: CmId;
  group: number;
  /** Its events GET_EVENT has returned (LEAVE's answer: librdmacm waits for their acks). */
  reported: number;
}

interface UChannel {
  handle: number;
  fd: number;
  queue: Ev[];
  dropped: number;
}

interface CmId {
  handle: number;
  /** Of the UD port space (RDMA_PS_UDP): datagram service requests, no connection. */
  ud: boolean;
  uidLo: number;
  uidHi: number;
  channel: UChannel;
  state: IdState;
  src: number;
  srcPort: number;
  dst: number;
  dstPort: number;
  /** Events GET_EVENT has returned that count for this id (DESTROY_ID's and MIGRATE_ID's answer). */
  reported: number;
  /** A listening id's port. */
  listenPort: number;
  /** Its port was taken for it (bind to port 0): reserved until it goes. */
  ephemeral: boolean;
  /** A request's listening id and the listener's key for it ("address:port"). */
  parent: CmId | null;
  key: string;
  /** The requester's (passive) or acceptor's (active) QP port and initial PSN. */
  peer: Peer | null;
  /** The QP it connects (CONNECT, ACCEPT). */
  qpn: number;
  /** IRD and ORD as settled with the peer. */
  ird: number;
  ord: number;
  /** When the request was held or the ACCEPT sent (ns of the graph's clock). */
  sinceNs: number;
}

interface UcmaState {
  channels: Map<number, UChannel>;
  ids: Map<number, CmId>;
  mcs: Map<number, Mc>;
  next: number;
  rdma: Rdma;
  server: Server;
  own: Owned;
}

const STATES = new WeakMap<Owned, UcmaState>();
/** Ids whose QP is looked at every WATCH_MS, with their connection's state. */
const watched = new Map<CmId, UcmaState>();
let watchTimer: ReturnType<typeof setInterval> | null = null;

function stateOf(c: { server: Server; own: Owned }): UcmaState {
  let s = STATES.get(c.own);
  if (s === undefined) {
    s = {
      channels: new Map(),
      ids: new Map(),
      mcs: new Map(),
      next: 1,
      rdma: c.server.internals.rdma,
      server: c.server,
      own: c.own,
    };
    STATES.set(c.own, s);
  }
  return s;
}

function ip4(bytes: Uint8Array): number {
  return ((bytes[0] << 24) | (bytes[1] << 16) | (bytes[2] << 8) | bytes[3]) >>> 0;
}

function bytes4(a: number): number[] {
  return [a >>> 24, (a >>> 16) & 0xff, (a >>> 8) & 0xff, a & 0xff];
}

function nowNs(s: UcmaState): number {
  return s.rdma.graph.clock.nowNs();
}

/** Queue an event on the id's channel (the eventfd readable from the first one on). */
function post(s: UcmaState, ev: Omit<Ev, 'counted' | 'qpn' | 'ird' | 'ord' | 'pd'> & Partial<Ev>): boolean {
  const ch = (ev.counted ?? ev.id).channel;
  if (ch.queue.length >= RGV_UCMA_MAX_EVENTS) {
    ch.dropped++;
    s.server.lines.say(
      s.own.logKey,
      'warn',
      `verbs socket: rdma_cm channel ${ch.handle} holds ${RGV_UCMA_MAX_EVENTS} events: one dropped (${s.own.owner})`,
    );
    return false;
  }
  ch.queue.push({ counted: ev.id, qpn: 0, ird: 0, ord: 0, pd: new Uint8Array(0), ...ev });
  if (ch.queue.length === 1) s.server.core.eventfdSignal(ch.fd);
  return true;
}

/**
 * DISCONNECTED for `id`, and TIMEWAIT_EXIT after the retransmission timeout's ceiling (what
 * RoCE's CM timewait stands for: the connection's last packets are gone), if the id and its
 * channel are still there then.
 */
function disconnected(s: UcmaState, id: CmId): void {
  post(s, { id, event: RGV_CM_DISCONNECTED, status: 0 });
  const t = setTimeout(() => {
    if (s.ids.get(id.handle) === id && s.channels.get(id.channel.handle) === id.channel)
      post(s, { id, event: RGV_CM_TIMEWAIT_EXIT, status: 0 });
  }, s.rdma.core.rtoMaxNs / 1e6);
  t.unref?.();
}

function watch(s: UcmaState, id: CmId): void {
  watched.set(id, s);
  if (watchTimer === null) {
    watchTimer = setInterval(watchTick, WATCH_MS);
    watchTimer.unref?.();
  }
}

function unwatch(id: CmId): void {
  watched.delete(id);
  if (watched.size === 0 && watchTimer !== null) {
    clearInterval(watchTimer);
    watchTimer = null;
  }
}

function liveQp(s: UcmaState, qpn: number): Qp | undefined {
  const qp = s.rdma.qpsByQpn.get(qpn);
  return qp === undefined || qp.destroyed ? undefined : qp;
}

/** ESTABLISHED for accepted ids the peer answered, DISCONNECTED for connections whose QP failed. */
function watchTick(): void {
  for (const [id, s] of watched) {
    const qp = liveQp(s, id.qpn);
    const down = qp === undefined || qp.state === QpState.ERROR;
    if (id.state === 'accepted') {
      if (down) {
        id.state = 'disconnected';
        disconnected(s, id);
        unwatch(id);
      } else if (!qp.halfOpen) {
        id.state = 'connected';
        post(s, { id, event: RGV_CM_ESTABLISHED, status: 0, qpn: id.peer?.port ?? 0, ird: id.ird, ord: id.ord });
      } else if (nowNs(s) - id.sinceNs > s.rdma.cm.halfOpenTimeoutNs) {
        // The requester never answered our ACCEPT: the connection is not made.
        id.state = 'failed';
        s.rdma.modifyQp(qp, { state: 'error' });
        post(s, { id, event: RGV_CM_UNREACHABLE, status: -E.ETIMEDOUT });
        unwatch(id);
      }
    } else if (id.state === 'requested') {
      if (nowNs(s) - id.sinceNs > s.rdma.cm.halfOpenTimeoutNs) {
        const l = id.parent ? s.rdma.cm.listeners.get(id.parent.listenPort) : undefined;
        if (l) answerHeld(s, l, id);
        id.state = 'failed';
        unwatch(id);
      }
    } else if (id.state === 'connected' || id.state === 'responded') {
      if (down) {
        id.state = 'disconnected';
        disconnected(s, id);
        unwatch(id);
      }
    } else if (id.state !== 'connecting') unwatch(id);
  }
}

/** The device (node GUID) whose interface has address `a`; zeros when none. */
async function guidOf(s: UcmaState, a: number): Promise<number[]> {
  if (a === 0) return [0, 0, 0, 0, 0, 0, 0, 0];
  const addr = formatIp4(a);
  const d = (await s.server.dp.devices()).find((x) => x.ports[0]?.address === addr);
  if (d === undefined) return [0, 0, 0, 0, 0, 0, 0, 0];
  return d.nodeGuid.split(':').flatMap((w) => [parseInt(w.slice(0, 2), 16), parseInt(w.slice(2), 16)]);
}

/** The program's QP `qpn`, if this process made it (any of its connections). */
async function programQp(s: UcmaState, qpn: number): Promise<Qp | undefined> {
  const qp = liveQp(s, qpn);
  if (qp === undefined) return undefined;
  const view = await s.server.dp.getQp(qpn).catch(() => null);
  return view !== null && view.owner === s.own.owner ? qp : undefined;
}

/** Forget an id: its queued events, its listener and the requests it holds, its watch. */
function dropId(s: UcmaState, id: CmId): void {
  s.ids.delete(id.handle);
  for (const m of [...s.mcs.values()]) if (m.id === id) s.mcs.delete(m.handle);
  if (id.ephemeral) reservedOf(s).delete(id.srcPort);
  unwatch(id);
  for (const ch of s.channels.values()) {
    const before = ch.queue.length;
    ch.queue = ch.queue.filter((e) => e.id !== id && e.counted !== id);
    if (before > 0 && ch.queue.length === 0) s.server.core.eventfdDrain(ch.fd);
  }
  const cm = s.rdma.cm;
  if (id.state === 'listening') {
    // The requests it holds are answered (REJECT) before the port closes, not left to time out.
    const l = cm.listeners.get(id.listenPort);
    for (const key of [...(l?.deferred?.keys() ?? [])]) rejectDeferred(cm, l as Listener, key);
    for (const key of [...(l?.sidr?.held.keys() ?? [])])
      sidrAnswer(cm, l as Listener, key, SidrStatus.REJECTED, 0, 0, new Uint8Array(0));
    for (const child of s.ids.values())
      if (child.parent === id) {
        if (child.state === 'requested') child.state = 'failed';
        child.parent = null;
      }
    try {
      s.rdma.unlisten(id.listenPort);
    } catch {
      // already gone
    }
  }
  if (id.state === 'requested' && id.parent !== null) {
    const l = cm.listeners.get(id.parent.listenPort);
    if (l) answerHeld(s, l, id);
  }
  if (id.state === 'connecting') {
    const qp = liveQp(s, id.qpn);
    if (qp && id.ud) sidrCancel(cm, qp);
    else if (qp) cm.cancel(qp, `rdma_cm id ${id.handle} destroyed`);
  }
}

function newHandle(s: UcmaState): number {
  for (let k = 0; k < MAX_IDS * 4; k++) {
    const h = s.next;
    s.next = s.next >= 0x7fffffff ? 1 : s.next + 1;
    if (!s.ids.has(h) && !s.channels.has(h) && !s.mcs.has(h)) return h;
  }
  return 0;
}

/** UCMA_CHANNEL: the program's eventfd for a new channel (an open of rdma_cm). */
export async function ucmaChannel(c: ChannelCall): Promise<Reply | number> {
  c.body();
  const s = stateOf(c);
  if (s.channels.size >= c.server.limits.maxFdsPerConnection) return E.EMFILE;
  const t = c.takeEventfd();
  if ('errno' in t) return t.errno;
  const handle = newHandle(s);
  if (handle === 0) {
    c.server.core.closeFd(t.fd);
    return E.ENOMEM;
  }
  s.channels.set(handle, { handle, fd: t.fd, queue: [], dropped: 0 });
  return c.reply({ handle });
}

/** Everything of the connection's rdma_cm: at its close. */
export function releaseUcma(own: Owned): void {
  const s = STATES.get(own);
  if (s === undefined) return;
  for (const id of [...s.ids.values()]) {
    if (id.state === 'connected' || id.state === 'accepted' || id.state === 'responded') {
      const qp = liveQp(s, id.qpn);
      if (qp) s.rdma.disconnect(qp);
    }
    dropId(s, id);
  }
  for (const ch of s.channels.values()) s.server.core.closeFd(ch.fd);
  s.channels.clear();
  STATES.delete(own);
}

type Req = Decoded<typeof rgv_ucma>;
type ReplyValues = Encodable<typeof rgv_ucma_reply>;

/** UCMA: one rdma_cm command. */
export async function ucma(c: UcmaCall): Promise<Reply | number> {
  const q = c.body();
  const s = stateOf(c);
  const out = (v: Partial<ReplyValues> = {}) => c.reply(v as ReplyValues);
  if (q.cmd === RGV_UCMA_CREATE_ID) {
    const ch = s.channels.get(q.channel);
    if (ch === undefined) return E.EINVAL;
    const ud = q.ps === PS_UDP && q.qp_type === QPT_UD;
    if (q.ps !== PS_TCP && q.ps !== PS_IB && !ud) return E.EOPNOTSUPP;
    if (s.ids.size >= MAX_IDS) return E.ENOMEM;
    const handle = newHandle(s);
    if (handle === 0) return E.ENOMEM;
    const id = newId(handle, ch, q.uid_lo, q.uid_hi);
    id.ud = ud;
    s.ids.set(handle, id);
    return out({ id: handle });
  }
  if (q.cmd === RGV_UCMA_GET_EVENT) return getEvent(c, s, q);
  if (q.cmd === RGV_UCMA_LEAVE) {
    const m = s.mcs.get(q.id);
    if (m === undefined) return E.EINVAL;
    s.mcs.delete(m.handle);
    // Its JOIN event, if still queued, goes: librdmacm waits only for those it was told of.
    const ch = m.id.channel;
    const before = ch.queue.length;
    ch.queue = ch.queue.filter((e) => e.mc !== m);
    if (before > 0 && ch.queue.length === 0) c.server.core.eventfdDrain(ch.fd);
    return out({ count: m.reported });
  }
  if (q.cmd === RGV_UCMA_CLOSE) {
    const ch = s.channels.get(q.channel);
    if (ch === undefined) return E.EINVAL;
    for (const id of [...s.ids.values()]) if (id.channel === ch) dropId(s, id);
    s.channels.delete(ch.handle);
    c.server.core.closeFd(ch.fd);
    return out();
  }
  const id = s.ids.get(q.id);
  if (id === undefined) return E.EINVAL;
  switch (q.cmd) {
    case RGV_UCMA_DESTROY_ID: {
      if (id.state === 'connected' || id.state === 'accepted') {
        const qp = liveQp(s, id.qpn);
        if (qp) s.rdma.disconnect(qp);
      }
      dropId(s, id);
      return out({ count: id.reported });
    }
    case RGV_UCMA_MIGRATE_ID: {
      const to = s.channels.get(q.channel);
      if (to === undefined) return E.EINVAL;
      const from = id.channel;
      if (from !== to) {
        const moving = from.queue.filter((e) => e.id === id || e.counted === id);
        from.queue = from.queue.filter((e) => e.id !== id && e.counted !== id);
        if (moving.length > 0 && from.queue.length === 0) c.server.core.eventfdDrain(from.fd);
        id.channel = to;
        for (const e of moving) post(s, e);
      }
      return out({ count: id.reported });
    }
    case RGV_UCMA_BIND:
      return bind(c, s, id, q);
    case RGV_UCMA_RESOLVE_ADDR:
      return resolveAddr(c, s, id, q);
    case RGV_UCMA_RESOLVE_ROUTE:
      if (id.state !== 'addr') return E.EINVAL;
      id.state = 'route';
      post(s, { id, event: RGV_CM_ROUTE_RESOLVED, status: 0 });
      return out();
    case RGV_UCMA_QUERY:
      return out({
        node_guid: await guidOf(s, id.src),
        src_ipv4: bytes4(id.src),
        dst_ipv4: bytes4(id.dst),
        src_port: id.srcPort,
        dst_port: id.dstPort,
      });
    case RGV_UCMA_LISTEN:
      return listen(c, s, id, q);
    case RGV_UCMA_CONNECT:
      return connect(c, s, id, q);
    case RGV_UCMA_ACCEPT:
      return accept(c, s, id, q);
    case RGV_UCMA_REJECT: {
      if (id.state !== 'requested') return E.EINVAL;
      const l = id.parent ? s.rdma.cm.listeners.get(id.parent.listenPort) : undefined;
      if (l) answerHeld(s, l, id, privateData(q));
      id.state = 'failed';
      unwatch(id);
      return out();
    }
    case RGV_UCMA_DISCONNECT: {
      if (id.ud) return E.EINVAL; // nothing is connected (as the kernel's: no CM id under it)
      const was = id.state;
      if (was !== 'connected' && was !== 'accepted' && was !== 'responded' && was !== 'disconnected') return E.EINVAL;
      // The FIN goes even when DISCONNECTED came first (librdmacm moves the QP to ERROR before
      // this command, which the watch may have seen): sent once per QP.
      const qp = liveQp(s, id.qpn);
      if (qp) s.rdma.disconnect(qp);
      if (was === 'disconnected') return out();
      id.state = 'disconnected';
      unwatch(id);
      disconnected(s, id);
      return out();
    }
    case RGV_UCMA_INIT_QP_ATTR:
      return initQpAttr(c, id, q);
    case RGV_UCMA_JOIN:
      return join(c, s, id, q);
    default:
      return E.EINVAL;
  }
}

function newId(handle: number, channel: UChannel, uidLo: number, uidHi: number): CmId {
  return {
    handle,
    ud: false,
    uidLo,
    uidHi,
    channel,
    state: 'idle',
    src: 0,
    srcPort: 0,
    dst: 0,
    dstPort: 0,
    reported: 0,
    listenPort: 0,
    ephemeral: false,
    parent: null,
    key: '',
    peer: null,
    qpn: 0,
    ird: 1,
    ord: 1,
    sinceNs: 0,
  };
}

function privateData(q: Req): Uint8Array {
  return q.private_data.slice(0, Math.min(q.private_data_len, RGV_UCMA_MAX_PRIVATE_DATA - 1));
}

/**
 * A loopback address (127.0.0.0/8) stands for the daemon's first interface address, as the
 * kernel's rdma_cm binds a loopback address to its first RDMA device (cma_bind_loopback): the
 * daemon has no loopback network of its own. 0 when it has no interface with an address.
 */
function unloop(s: UcmaState, a: number): number {
  if (a >>> 24 !== 127) return a;
  const ifs = s.rdma.net.interfaces;
  for (const ix of ifs.list) if (ifs.address[ix] !== 0) return ifs.address[ix];
  return 0;
}

function bind(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Reply | number {
  if (id.state !== 'idle') return E.EINVAL;
  const given = ip4(q.src_ipv4);
  const a = unloop(s, given);
  if (given !== 0 && a === 0) return E.EADDRNOTAVAIL;
  if (a !== 0 && s.rdma.net.interfaces.localInterface(a) === 0) return E.EADDRNOTAVAIL;
  // Port 0: one now, as the kernel's bind does (programs ask which before they listen: qperf).
  const port = q.src_port !== 0 ? q.src_port : ephemeralPort(s);
  if (port === 0) return E.EADDRINUSE;
  if (q.src_port === 0) reservedOf(s).add(port);
  id.src = a;
  id.srcPort = port;
  id.ephemeral = q.src_port === 0;
  id.state = 'bound';
  return c.reply({} as ReplyValues);
}

/** Ports bound ids took with port 0 (until they listen on it or go), per RDMA stack. */
const reserved = new WeakMap<Rdma, Set<number>>();

function reservedOf(s: UcmaState): Set<number> {
  let r = reserved.get(s.rdma);
  if (r === undefined) reserved.set(s.rdma, (r = new Set()));
  return r;
}

/** A free port of the ephemeral range (no listener, no UDP binding, not reserved), or 0. */
function ephemeralPort(s: UcmaState): number {
  const r = reservedOf(s);
  for (let k = 0; k < 64; k++) {
    const p = EPHEMERAL_LO + Math.floor(Math.random() * (EPHEMERAL_HI - EPHEMERAL_LO + 1));
    if (!r.has(p) && !s.rdma.cm.listeners.has(p) && s.rdma.net.udp.lookup(0, p) < 0) return p;
  }
  return 0;
}

function resolveAddr(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Reply | number {
  if (id.state !== 'idle' && id.state !== 'bound' && id.state !== 'addr') return E.EINVAL;
  const dst = unloop(s, ip4(q.dst_ipv4));
  const want = unloop(s, ip4(q.src_ipv4)) || id.src;
  if (want !== 0 && s.rdma.net.interfaces.localInterface(want) === 0) return E.EADDRNOTAVAIL;
  const ifs = s.rdma.net.interfaces;
  const ix = dst === 0 ? 0 : ifs.routeFrom(want, dst);
  id.dst = dst;
  id.dstPort = q.dst_port;
  if (ix === 0) {
    post(s, { id, event: RGV_CM_ADDR_ERROR, status: -E.EHOSTUNREACH });
    return c.reply({} as ReplyValues);
  }
  id.src = want !== 0 ? want : ifs.address[ix];
  id.state = 'addr';
  post(s, { id, event: RGV_CM_ADDR_RESOLVED, status: 0 });
  return c.reply({} as ReplyValues);
}

function listen(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Reply | number {
  if (id.state === 'listening') return c.reply({} as ReplyValues); // a new backlog: kept as it was
  if (id.state !== 'bound' && id.state !== 'idle') return E.EINVAL;
  // As the kernel's: 0 (or more than the most) is the most.
  const backlog = q.backlog > 0 && q.backlog < MAX_BACKLOG ? q.backlog : MAX_BACKLOG;
  const ports = id.srcPort !== 0 ? [id.srcPort] : Array.from({ length: 64 }, () => ephemeralPort(s));
  for (const port of ports) {
    try {
      if (id.ud) s.rdma.listen(port, () => ({ reject: true }), { backlog, sidr: (req) => sidrRequest(s, id, req) });
      else s.rdma.listen(port, (req) => request(s, id, req), { backlog });
    } catch {
      continue;
    }
    const l = s.rdma.cm.listeners.get(port) as Listener;
    l.rejectWhenFull = true;
    id.srcPort = port;
    id.listenPort = port;
    id.state = 'listening';
    return c.reply({} as ReplyValues);
  }
  return E.EADDRINUSE;
}

/**
 * A new id in 'requested' for a request from `src`:`port` to listening id `listener` (port
 * `listenPort`), for the caller to fill in and post; or why there is none.
 */
function requestedId(s: UcmaState, listener: CmId, src: number, port: number, listenPort: number): CmId | string {
  if (listener.state !== 'listening' || !s.ids.has(listener.handle)) return 'not listening';
  if (listener.src !== 0 && s.rdma.net.interfaces.routeFrom(listener.src, src) === 0)
    return 'no route from the bound address';
  if (s.ids.size >= MAX_IDS || listener.channel.queue.length >= RGV_UCMA_MAX_EVENTS) return 'too many ids or events';
  const handle = newHandle(s);
  if (handle === 0) return 'no id';
  const id = newId(handle, listener.channel, listener.uidLo, listener.uidHi);
  const ifs = s.rdma.net.interfaces;
  id.state = 'requested';
  id.parent = listener;
  id.dst = src;
  id.dstPort = port;
  id.src = listener.src !== 0 ? listener.src : ifs.address[ifs.routeFrom(0, src)];
  id.srcPort = listenPort;
  id.sinceNs = nowNs(s);
  s.ids.set(handle, id);
  return id;
}

/** A REQ to a listening id: a new id and CONNECT_REQUEST; the answer waits for the program. */
function request(
  s: UcmaState,
  listener: CmId,
  req: { address: string; port: number; listenPort: number; ird: number; ord: number; privateData: Uint8Array },
): { defer: true } | { reject: true; reason: string } {
  const src = ip4(new Uint8Array(req.address.split('.').map(Number)));
  const id = requestedId(s, listener, src, req.port, req.listenPort);
  if (typeof id === 'string') return { reject: true, reason: id };
  id.key = `${src}:${req.port}`;
  id.ird = Math.max(1, req.ord);
  id.ord = Math.max(1, req.ird);
  // What the requester offers, from this side: its ORD is our responder resources, its IRD our initiator depth.
  post(s, {
    id,
    counted: listener,
    event: RGV_CM_CONNECT_REQUEST,
    status: 0,
    qpn: req.port,
    ird: id.ird,
    ord: id.ord,
    pd: req.privateData.slice(0, RGV_UCMA_MAX_PRIVATE_DATA - 1),
  });
  watch(s, id);
  return { defer: true };
}

async function connect(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Promise<Reply | number> {
  if (id.state !== 'route' && id.state !== 'addr') return id.state === 'connected' ? E.EISCONN : E.EINVAL;
  if (id.ud) return connectUd(c, s, id, q);
  const qp = await programQp(s, q.qpn);
  if (qp === undefined) return E.EINVAL;
  if (qp.state !== QpState.INIT || s.rdma.cm.pending.has(qp.index)) return E.EINVAL;
  const pd = privateData(q);
  id.qpn = qp.qpn;
  id.ird = Math.max(1, Math.min(q.responder_resources || qp.cfg.ird, qp.cfg.ird));
  id.ord = Math.max(1, Math.min(q.initiator_depth || qp.cfg.ord, qp.cfg.ord));
  id.state = 'connecting';
  // The QP sends REQ to the listener and takes the answer from its address.
  qp.remoteAddr = id.dst;
  qp.remotePort = id.dstPort;
  qp.cmRole = 'active';
  const cm = s.rdma.cm;
  const p = new Promise<{ privateData: Uint8Array }>((resolve, reject) =>
    cm.connect(
      {
        qp,
        startNs: nowNs(s),
        // The REQ sent again every rdma.cm-retry-ms until rdma.cm-timeout-ms has passed.
        timeoutNs: s.server.dp.config.rdma.cmTimeoutMs * 1e6,
        retryNs: s.server.dp.config.rdma.cmRetryMs * 1e6,
        req: ConnectionManager.message(TrpOp.REQ, id.ird, id.ord, pd, qp.isn, 0),
        resolve,
        reject,
        deferred: (a) => {
          id.peer = { addr: a.src, port: a.srcPort, isn: a.psn };
          // Our ORD at most the peer's IRD; our IRD serves the peer's ORD.
          id.ord = Math.max(1, Math.min(id.ord, a.ird));
          id.ird = Math.max(id.ird, Math.min(a.ord, qp.cfg.ird));
        },
      },
      id.dst,
      id.dstPort,
    ),
  );
  p.then(
    (r) => {
      if (!s.ids.has(id.handle) || id.state !== 'connecting') return;
      id.state = 'responded';
      post(s, {
        id,
        event: RGV_CM_CONNECT_RESPONSE,
        status: 0,
        qpn: id.peer?.port ?? 0,
        ird: id.ird,
        ord: id.ord,
        pd: r.privateData.slice(0, RGV_UCMA_MAX_PRIVATE_DATA - 1),
      });
      watch(s, id);
    },
    (e: Error) => {
      if (!s.ids.has(id.handle) || id.state !== 'connecting') return;
      id.state = 'failed';
      const code = e instanceof CmConnectError ? e.code : 'cancelled';
      if (code === 'rejected')
        post(s, {
          id,
          event: RGV_CM_REJECTED,
          status:
            (e as CmConnectError).rejectReason === CmRejectReason.NO_LISTENER
              ? REJECT_INVALID_SERVICE_ID
              : REJECT_CONSUMER,
          pd: ((e as CmConnectError).privateData ?? new Uint8Array(0)).slice(0, RGV_UCMA_MAX_PRIVATE_DATA - 1),
        });
      else post(s, { id, event: RGV_CM_UNREACHABLE, status: code === 'timeout' ? -E.ETIMEDOUT : -E.ECANCELED });
    },
  );
  return c.reply({} as ReplyValues);
}

async function accept(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Promise<Reply | number> {
  if (id.state === 'responded') {
    // The active side after CONNECT_RESPONSE (its QP in RTS now): the handshake's third packet.
    const qp = liveQp(s, id.qpn);
    if (qp === undefined || qp.state !== QpState.RTS) return E.EINVAL;
    s.rdma.core.sendAck(qp);
    id.state = 'connected';
    watch(s, id);
    return c.reply({} as ReplyValues);
  }
  if (id.state !== 'requested') return E.EINVAL;
  const l = id.parent ? s.rdma.cm.listeners.get(id.parent.listenPort) : undefined;
  if (l === undefined) return E.EINVAL;
  const qp = await programQp(s, q.qpn);
  if (qp === undefined || id.state !== 'requested') return E.EINVAL;
  if (id.ud) {
    // The datagram service's answer: this UD QP, with its Q_Key, serves the requester. Nothing
    // is connected and no event follows (as on InfiniBand: the SIDR REP is the end of it).
    if (!qp.cfg.ud) return E.EINVAL;
    try {
      sidrAnswer(s.rdma.cm, l, id.key, SidrStatus.SUCCESS, qp.qpn, qp.qkey, privateData(q));
    } catch {
      return E.EINVAL;
    }
    id.uidLo = q.uid_lo;
    id.uidHi = q.uid_hi;
    id.qpn = qp.qpn;
    id.state = 'connected';
    unwatch(id);
    return c.reply({} as ReplyValues);
  }
  try {
    acceptDeferred(s.rdma.cm, l, id.key, qp, privateData(q));
  } catch (e) {
    c.server.lines.say(
      c.own.logKey,
      'warn',
      `verbs socket: rdma_accept refused: ${(e as Error).message} (${c.own.owner})`,
    );
    return E.EINVAL;
  }
  id.uidLo = q.uid_lo;
  id.uidHi = q.uid_hi;
  id.qpn = qp.qpn;
  id.peer = { addr: qp.remoteAddr, port: qp.remotePort, isn: qp.peerIsn };
  id.state = 'accepted';
  id.sinceNs = nowNs(s);
  watch(s, id);
  return c.reply({} as ReplyValues);
}

/** What librdmacm gives ibv_modify_qp for `state`: the peer's address, QP, PSN, IRD and ORD. */
function initQpAttr(c: UcmaCall, id: CmId, q: Req): Reply | number {
  const state = q.qpn;
  if (id.ud) {
    // A UD QP: the Q_Key at INIT (librdmacm's rdma_create_qp takes it through RTR and RTS).
    if (state === RGV_QPS_INIT)
      return c.reply({ mask: RGV_ATTR_STATE | RGV_ATTR_QKEY, state, ud: 1, qkey: UDP_QKEY } as ReplyValues);
    if (state === RGV_QPS_RTR) return c.reply({ mask: RGV_ATTR_STATE, state, ud: 1 } as ReplyValues);
    if (state === RGV_QPS_RTS) return c.reply({ mask: RGV_ATTR_STATE | RGV_ATTR_SQ_PSN, state, ud: 1 } as ReplyValues);
    return E.EINVAL;
  }
  if (state === RGV_QPS_INIT) return c.reply({ mask: RGV_ATTR_STATE, state } as ReplyValues);
  if (state === RGV_QPS_RTR) {
    let peer: Peer | null = id.peer;
    if (id.state === 'requested' && id.parent !== null) {
      const s = STATES.get(c.own);
      const d = s?.rdma.cm.listeners.get(id.parent.listenPort)?.deferred?.get(id.key);
      if (d !== undefined) peer = { addr: d.src, port: d.srcPort, isn: d.peerIsn };
    }
    if (peer === null) return E.EINVAL;
    return c.reply({
      mask:
        RGV_ATTR_STATE |
        RGV_ATTR_AV |
        RGV_ATTR_PATH_MTU |
        RGV_ATTR_DEST_QPN |
        RGV_ATTR_RQ_PSN |
        RGV_ATTR_MAX_DEST_RD_ATOMIC,
      state,
      dst_ipv4: bytes4(peer.addr),
      qpn: peer.port,
      rq_psn: peer.isn,
      path_mtu: RGV_MTU_4096,
      responder_resources: id.ird,
      initiator_depth: id.ord,
    } as ReplyValues);
  }
  if (state === RGV_QPS_RTS) {
    if (id.peer === null && id.state !== 'requested') return E.EINVAL;
    return c.reply({
      mask: RGV_ATTR_STATE | RGV_ATTR_TIMEOUT | RGV_ATTR_RETRY_CNT | RGV_ATTR_RNR_RETRY | RGV_ATTR_MAX_QP_RD_ATOMIC,
      state,
      responder_resources: id.ird,
      initiator_depth: id.ord,
      retry_count: 7,
      rnr_retry_count: 7,
    } as ReplyValues);
  }
  return E.EINVAL;
}

/**
 * JOIN (rdma_join_multicast) on a UD id whose address is bound or resolved: MULTICAST_JOIN at
 * once, its param.ud naming the group (IPv4-mapped GID, QPN 0xFFFFFF, the port space's Q_Key).
 * The join itself sends nothing: the attach does (its IGMP report, nodes/ip4/igmp4-input.ts); librdmacm attaches the
 * id's QP to the group (ibv_attach_mcast) when it takes the event, which is where datagrams
 * start to arrive. Join flags: full member (0) or send-only full member (1, not attached).
 */
function join(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Reply | number {
  const group = ip4(q.dst_ipv4);
  if (!id.ud || !isIp4Multicast(group) || q.backlog > 1) return E.EINVAL;
  if (id.src === 0 || (id.state !== 'bound' && id.state !== 'addr' && id.state !== 'route')) return E.EINVAL;
  if (s.mcs.size >= MAX_IDS) return E.ENOMEM;
  const handle = newHandle(s);
  if (handle === 0) return E.ENOMEM;
  const m: Mc = { handle, uidLo: q.uid_lo, uidHi: q.uid_hi, id, group, reported: 0 };
  if (
    !post(s, {
      id,
      event: RGV_CM_MULTICAST_JOIN,
      status: 0,
      ud: true,
      addr: group,
      qkey: UDP_QKEY,
      qpn: MCAST_QPN,
      mc: m,
    })
  )
    return E.ENOMEM;
  s.mcs.set(handle, m);
  return c.reply({ id: handle } as ReplyValues);
}

function getEvent(c: UcmaCall, s: UcmaState, q: Req): Reply | number {
  const ch = s.channels.get(q.channel);
  if (ch === undefined) return E.EINVAL;
  const ev = ch.queue.shift();
  if (ev === undefined) return E.EAGAIN;
  if (ch.queue.length === 0) c.server.core.eventfdDrain(ch.fd);
  ev.counted.reported++;
  if (ev.mc !== undefined) ev.mc.reported++;
  const pd = ev.pd.slice(0, RGV_UCMA_MAX_PRIVATE_DATA - 1);
  const privateDataOut = new Uint8Array(RGV_UCMA_MAX_PRIVATE_DATA);
  privateDataOut.set(pd);
  return c.reply({
    uid_lo: (ev.mc ?? ev.counted).uidLo,
    uid_hi: (ev.mc ?? ev.counted).uidHi,
    id: (ev.mc ?? ev.id).handle,
    event: ev.event,
    status: ev.status >>> 0,
    count: ev.counted.handle,
    qpn: ev.qpn,
    responder_resources: ev.ird,
    initiator_depth: ev.ord,
    retry_count: 7,
    rnr_retry_count: 7,
    private_data_len: pd.length,
    private_data: privateDataOut,
    ud: ev.ud === true ? 1 : 0,
    qkey: ev.qkey ?? 0,
    dst_ipv4: bytes4(ev.addr ?? 0),
  } as ReplyValues);
}

/** Refuse the request `id` stands for, held by listener `l` (a REQ's or a SIDR_REQ's), if it still waits. */
function answerHeld(s: UcmaState, l: Listener, id: CmId, pd?: Uint8Array): void {
  if (!id.ud) return rejectDeferred(s.rdma.cm, l, id.key, pd);
  if (l.sidr?.held.has(id.key) === true)
    sidrAnswer(s.rdma.cm, l, id.key, SidrStatus.REJECTED, 0, 0, pd ?? new Uint8Array(0));
}

/** A SIDR_REQ to a listening UD id: a new id and CONNECT_REQUEST; the answer waits for the program. */
function sidrRequest(s: UcmaState, listener: CmId, req: SidrRequest): boolean {
  const id = requestedId(s, listener, req.src, req.srcPort, req.listenPort);
  if (typeof id === 'string') return false;
  id.ud = true;
  id.key = sidrKey(req.src, req.srcPort);
  post(s, {
    id,
    counted: listener,
    event: RGV_CM_CONNECT_REQUEST,
    status: 0,
    qpn: req.srcPort,
    pd: req.privateData.slice(0, RGV_UCMA_MAX_PRIVATE_DATA - 1),
    ud: true,
    addr: req.src,
  });
  watch(s, id);
  return true;
}

/**
 * CONNECT of a UD id: a datagram service request from the program's UD QP to the listener
 * (SIDR_REQ, resent every rdma.cm-retry-ms until rdma.cm-timeout-ms); its answer is ESTABLISHED
 * with the serving QP, its Q_Key and the address to reach it, or UNREACHABLE with the SIDR
 * status (1: nobody listens there, 2: refused) or -ETIMEDOUT.
 */
async function connectUd(c: UcmaCall, s: UcmaState, id: CmId, q: Req): Promise<Reply | number> {
  const qp = await programQp(s, q.qpn);
  if (qp === undefined || !qp.cfg.ud || s.rdma.cm.sidrPending.has(qp.index)) return E.EINVAL;
  if (id.state !== 'route' && id.state !== 'addr') return E.EINVAL;
  id.qpn = qp.qpn;
  id.state = 'connecting';
  const cfg = s.server.dp.config.rdma;
  // A random id, from the source QPs' initial PSNs come from: an answer must echo it (a spoofer
  // must guess 32 bits). Never 0, the ACK field of anything else.
  const reqId = randomU32() || 1;
  sidrConnect(s.rdma.cm, {
    qp,
    reqId,
    dst: id.dst,
    dstPort: id.dstPort,
    startNs: nowNs(s),
    timeoutNs: cfg.cmTimeoutMs * 1e6,
    retryNs: cfg.cmRetryMs * 1e6,
    msg: sidrRequestMessage(reqId, privateData(q)),
    done: (a) => {
      if (!s.ids.has(id.handle) || id.state !== 'connecting') return;
      if (a instanceof CmConnectError) {
        id.state = 'failed';
        post(s, { id, event: RGV_CM_UNREACHABLE, status: a.code === 'timeout' ? -E.ETIMEDOUT : -E.ECANCELED });
      } else if (a.status !== SidrStatus.SUCCESS) {
        id.state = 'failed';
        post(s, { id, event: RGV_CM_UNREACHABLE, status: a.status, pd: a.privateData, ud: true, addr: id.dst });
      } else {
        id.state = 'connected';
        const pd = a.privateData.slice(0, RGV_UCMA_MAX_PRIVATE_DATA - 1);
        post(s, { id, event: RGV_CM_ESTABLISHED, status: 0, qpn: a.qpn, pd, ud: true, addr: id.dst, qkey: a.qkey });
      }
    },
  });
  return c.reply({} as ReplyValues);
}
