/**
 * The verbs socket's requests, one handler each (docs/VERBS-PROTOCOL.md section 3). HANDLERS
 * maps every request native/verbs-lib/proto.h declares (RGV_OPS, generated into
 * abi.generated.ts) to the function that serves it, and tsc refuses the table when a request
 * has no handler or a handler no request. A handler decodes its body as its request's struct
 * (a body of another size drops the connection), does the verb on this data plane, and returns
 * its reply's struct or the errno it failed with; a request whose op is unknown is answered
 * EOPNOTSUPP. The connection's state (Owned: what it created, its doorbell and channels) is
 * kept by connections.ts, which reads the requests and writes the replies.
 *
 * Served: DEVICES (one device per interface with an IPv4 address), ATTACH (the opened device's
 * interface and the program's doorbell eventfd), ALLOC_PD/DEALLOC_PD, REG_MR (the program's
 * pages on a memfd sealed against shrinking, mapped here: the MR's memory is the program's)/
 * DEREG_MR, ALLOC_MW/DEALLOC_MW (memory windows: bound by the send queue's BIND_MW work requests),
 * CREATE_CHANNEL/DESTROY_CHANNEL (completion channels: the program's eventfds),
 * CREATE_CQ (with its ring)/DESTROY_CQ, CREATE_SRQ/SRQ_RING/MODIFY_SRQ/DESTROY_SRQ,
 * CREATE_QP/QP_RING/MODIFY_QP (the peer from the AV's IPv4-mapped GID and dest_qp_num, PSNs,
 * IRD/ORD, path MTU, timeout, retry count)/QUERY_QP/DESTROY_QP. A connection touches only what
 * it created. A registration is O(1) in its length (mapped, never touched or copied; at most
 * 2^31 bytes); a ring's size must be exactly what the daemon computes for the object; eventfds
 * per connection are bounded (verbs.max-fds-per-connection) and refused in the fd reserve.
 */
import type { Graph } from '../../graph/index.ts';
import type { CoreAddon } from '../../native/addons.ts';
import type { Qp, QpStateName } from '../../nodes/rdma/qp.ts';
import { type Rdma, VERBS_LIMITS } from '../../nodes/rdma/stack.ts';
import type { AccessName, Cq, Srq } from '../../nodes/rdma/verbs.ts';
import { DDP_UNTAGGED_BYTES } from '../../nodes/rdma/wire.ts';
import { ibMtu } from '../rdma-devices.ts';
import type { DataplaneApi, VerbsLimits } from '../api.ts';
import {
  type AbiStruct,
  RGV_ACCESS_LOCAL_WRITE,
  RGV_ACCESS_REMOTE_ATOMIC,
  RGV_ACCESS_MW_BIND,
  RGV_ACCESS_REMOTE_READ,
  RGV_ACCESS_REMOTE_WRITE,
  RGV_ATTR_AV,
  RGV_ATTR_DEST_QPN,
  RGV_ATTR_MAX_DEST_RD_ATOMIC,
  RGV_ATTR_MAX_QP_RD_ATOMIC,
  RGV_ATTR_PATH_MTU,
  RGV_ATTR_RETRY_CNT,
  RGV_ATTR_RQ_PSN,
  RGV_ATTR_SQ_PSN,
  RGV_ATTR_STATE,
  RGV_ATTR_QKEY,
  RGV_QPT_RC,
  RGV_QPT_UD,
  RGV_QP_BLOCK_SELF_MCAST_LB,
  RGV_ATTR_TIMEOUT,
  RGV_MAX_DEVICES,
  RGV_MAX_MR_PIECES,
  rgv_mr_piece,
  RGV_NONE,
  RGV_OPS,
  RGV_QPS_ERR,
  RGV_QPS_INIT,
  RGV_QPS_RESET,
  RGV_QPS_RTR,
  RGV_QPS_RTS,
  RGV_QPS_SQD,
  RGV_QPS_SQE,
  RGV_RING_HDR,
  rgv_cqe,
  rgv_sge,
} from './abi.generated.ts';
import { fdHeadroom } from './admission.ts';
import type { LogLimiter } from './log-limit.ts';
import { decode, type Decoded, type Encodable, encodeInto, Errno } from './messages.ts';
import { type AsyncFd, type Channel, type CqGroup, CqRing, QpRing, rqStride, SrqRing, VerbsRings } from './rings.ts';
import { ucma, ucmaChannel } from './ucma.ts';

/** The graph and RDMA stack of the data plane a verbs server serves (its rings run on that graph). */
export interface VerbsServed {
  graph: Graph;
  rdma: Rdma;
  /** Call `cb` when an interface's link goes up or down; returns the unsubscribe. */
  onLink?: (cb: (ifname: string, up: boolean) => void) => () => void;
}

/** What one connection (one opened device context) created: destroyed when it closes. */
export interface Owned {
  /** "pid N (comm)" of the connected program (SO_PEERCRED), for QpView.owner. */
  owner: string;
  /** Its uid (SO_PEERCRED; -1 unknown): the key its connection-level log lines are limited by. */
  uid: number;
  /** The key of this connection's own log lines ("pid N (comm), connection K"). */
  logKey: string;
  pds: Set<number>;
  mrs: Set<number>;
  mws: Set<number>;
  cqs: Set<number>;
  srqs: Set<number>;
  /** QPN -> the receive PSN it was given at RTR (for ibv_query_qp; the daemon's view has the send one). */
  qps: Map<number, number>;
  /** The program's doorbell eventfd (ATTACH), -1 before. */
  doorbell: number;
  /** Its async-event eventfd (ASYNC_FD), shared with its rings. */
  async: AsyncFd;
  /** The interface of the device it opened (ATTACH): its QPs take that address. */
  ifname: string | undefined;
  channels: Map<number, Channel>;
  nextChannel: number;
  cqRings: Map<number, CqRing>;
  /** The same rings, as the group whose sleepers a completion on any of them wakes. */
  cqGroup: CqGroup;
  qpRings: Map<number, QpRing>;
  srqRings: Map<number, SrqRing>;
}

/** What every connection of one verbs server shares. */
export interface Server {
  dp: DataplaneApi;
  internals: VerbsServed;
  rings: VerbsRings;
  core: CoreAddon;
  limits: VerbsLimits;
  /** What clients cause in the log, rate-limited. */
  lines: LogLimiter;
}

/** A request's name in proto.h's RGV_OPS (DEVICES, ALLOC_PD, ...). */
export type OpName = keyof typeof RGV_OPS;
type RequestOf<K extends OpName> = (typeof RGV_OPS)[K]['request'];
type ReplyOf<K extends OpName> = (typeof RGV_OPS)[K]['reply'];
/** reply()'s arguments: the members of the op's reply struct, or none when it has no body. */
type ReplyArgs<K extends OpName> = ReplyOf<K> extends AbiStruct ? [values: Encodable<ReplyOf<K>>] : [];
type ReplyValues<K extends OpName> = ReplyOf<K> extends AbiStruct ? Encodable<ReplyOf<K>> : never;

/** A reply's body and its header's count (records of a DEVICES reply, else 0). */
export interface Reply {
  body: Uint8Array;
  count: number;
}

/** One request as its handler sees it. */
export interface Call<K extends OpName> {
  readonly server: Server;
  readonly own: Owned;
  /** The body as the request's struct; throws (the connection is dropped) when it is not that struct's size. */
  body(): RequestOf<K> extends AbiStruct ? Decoded<RequestOf<K>> : Record<string, never>;
  /**
   * The body as the request's struct followed by `count` records of `records` (REG_MR's
   * pieces); throws (the connection is dropped) when it is not that long.
   */
  bodyWith<R extends AbiStruct>(
    count: (head: RequestOf<K> extends AbiStruct ? Decoded<RequestOf<K>> : never) => number,
    records: R,
  ): { head: RequestOf<K> extends AbiStruct ? Decoded<RequestOf<K>> : never; list: Decoded<R>[] };
  /** How many fds came with the request. */
  fdCount(): number;
  /**
   * The registration's pieces mapped as one view of `span` bytes (mapVerbsPieces closes every
   * passed fd either way); `pieces` [fdIndex, offset, length] x n.
   */
  mapPieces(pieces: readonly number[], span: number): ArrayBuffer;
  /** System V segment `shmid`'s [offset, offset + span), attached if the program's uid may (native mapVerbsShm). */
  mapShm(shmid: number, offset: number, span: number): ArrayBuffer;
  /** A file descriptor came with the request (only a request that passes one keeps it). */
  hasFd(): boolean;
  /**
   * The passed memfd of `bytes`, mapped and never touched here: O(1) whatever its size
   * (mapVerbsMemory closes the fd either way; hugetlb memory is refused).
   */
  mapPassed(bytes: number): ArrayBuffer;
  /**
   * The passed fd if it is an eventfd the connection may keep (the caller owns it now), else the
   * errno: EINVAL (none, or not an eventfd), EMFILE (the connection holds
   * verbs.max-fds-per-connection already), ENFILE (the daemon is into its fd reserve).
   */
  takeEventfd(): { fd: number } | { errno: number };
  /**
   * As takeEventfd, for a completion channel: an eventfd, or (`stream` true) the daemon's end of
   * the program's AF_UNIX stream socketpair, signalled by a byte sent with MSG_DONTWAIT (no guard
   * timer, which an eventfd write needs: 1.7 us a signal on the 2-core VM).
   */
  takeChannelFd(): { fd: number; stream: boolean } | { errno: number };
  /** The reply: the op's reply struct with these members (nothing for an op whose reply has no body). */
  reply(...values: ReplyArgs<K>): Reply;
  /** A reply of records of the op's reply struct (DEVICES). */
  records(list: ReplyValues<K>[]): Reply;
}

export type Handler<K extends OpName> = (call: Call<K>) => Promise<Reply | number>;

/** errno for a refused verb, by DataplaneError kind. */
/** How long ibv_destroy_qp of a UD QP waits at most for its posted datagrams to go out (VerbsRings.sendPosted). */
const UD_SEND_POSTED_MS = 100;

const KIND_ERRNO: Record<string, number> = {
  invalid: Errno.EINVAL,
  'not-found': Errno.ENOENT,
  state: Errno.EINVAL,
  busy: Errno.EBUSY,
  'too-large': Errno.ENOMEM,
  resource: Errno.ENOMEM,
  unavailable: Errno.ENODEV,
};

/** rgv_reg_mr.access bits, by our names. */
const ACCESS: [number, AccessName][] = [
  [RGV_ACCESS_LOCAL_WRITE, 'local-write'],
  [RGV_ACCESS_REMOTE_WRITE, 'remote-write'],
  [RGV_ACCESS_REMOTE_READ, 'remote-read'],
  [RGV_ACCESS_REMOTE_ATOMIC, 'remote-atomic'],
  [RGV_ACCESS_MW_BIND, 'mw-bind'],
];
const ACCESS_ALL = ACCESS.reduce((a, [bit]) => a | bit, 0);

/** enum rgv_qp_state <-> our state names. */
const QP_STATES = new Map<number, QpStateName>([
  [RGV_QPS_RESET, 'reset'],
  [RGV_QPS_INIT, 'init'],
  [RGV_QPS_RTR, 'rtr'],
  [RGV_QPS_RTS, 'rts'],
  [RGV_QPS_SQD, 'sqd'],
  [RGV_QPS_SQE, 'sqe'],
  [RGV_QPS_ERR, 'error'],
]);
const QP_STATE_VALUES = new Map([...QP_STATES].map(([v, name]) => [name, v]));

/** ATTACH_MCAST/DETACH_MCAST: a QP of this connection's own and an IPv4 multicast group. */
async function mcast(
  c: Call<'ATTACH_MCAST'> | Call<'DETACH_MCAST'>,
  verb: 'attachMcast' | 'detachMcast',
): Promise<Reply | number> {
  const { qpn, group } = c.body();
  if (!c.own.qps.has(qpn)) return Errno.ENOENT;
  if (group[0] >>> 4 !== 0xe) return Errno.EINVAL; // not 224.0.0.0/4
  await c.server.dp[verb](qpn, group.join('.'));
  return c.reply();
}

/** DEALLOC_PD, DEREG_MR (and destroyWithRing's): a handle of this connection's own, destroyed. */
async function destroyOwn(
  call: { body(): { handle: number }; reply(): Reply },
  owned: { has(h: number): boolean; delete(h: number): boolean },
  destroy: (h: number) => Promise<void>,
): Promise<Reply | number> {
  const { handle } = call.body();
  if (!owned.has(handle)) return Errno.ENOENT;
  await destroy(handle);
  owned.delete(handle);
  return call.reply();
}

/** DESTROY_CQ/QP/SRQ: the object first (its flushed work completes into the rings), then its ring. */
function destroyWithRing<R>(
  call: { body(): { handle: number }; reply(): Reply },
  owned: { has(h: number): boolean; delete(h: number): boolean },
  rings: Map<number, R>,
  destroy: (h: number) => Promise<void>,
  detach: (r: R) => void,
): Promise<Reply | number> {
  return destroyOwn(call, owned, async (h) => {
    await destroy(h);
    const r = rings.get(h);
    if (r !== undefined) detach(r);
    rings.delete(h);
  });
}

/** Every request proto.h declares, served (tsc checks the table is exhaustive). */
/** What REG_MR and REG_SHM have in common: the PD, the access bits, the buffer in its pages. */
interface Registration {
  pd: number;
  access: number;
  span: number;
  start: number;
  addr: number;
  length: number;
}

/** 0 when the registration is well formed, else its errno. */
function badRegistration(own: Owned, r: Registration): number {
  if (!own.pds.has(r.pd)) return Errno.ENOENT;
  // The buffer lies in the pages: [addr, addr + length) within [start, start + span).
  const skip = r.addr - r.start;
  if ((r.access & ~ACCESS_ALL) !== 0 || r.span < 1 || r.span > VERBS_LIMITS.maxMrLength + 2 ** 22) return Errno.EINVAL;
  if (r.length < 1 || r.length > VERBS_LIMITS.maxMrLength || skip < 0 || skip + r.length > r.span) return Errno.EINVAL;
  if (r.addr + r.length > 2 ** 53) return Errno.EINVAL;
  return 0;
}

/** The MR over the buffer's bytes of `pages` (the span as the daemon maps it). */
async function registered(c: Call<'REG_MR'> | Call<'REG_SHM'>, r: Registration, pages: ArrayBuffer): Promise<Reply> {
  const names = ACCESS.filter(([bit]) => r.access & bit).map(([, name]) => name);
  const skip = r.addr - r.start;
  const memory = new Uint8Array(pages, skip, r.length);
  const mr = await c.server.dp.createMr({
    pd: r.pd,
    length: r.length,
    access: names,
    memory,
    base: r.addr,
    owner: c.own.owner,
  });
  c.own.mrs.add(mr.mr);
  return c.reply({ handle: mr.mr, stag: mr.stag });
}

export const HANDLERS: { readonly [K in OpName]: Handler<K> } = {
  async DEVICES(c) {
    // The daemon's device view (dataplane/rdma-devices.ts): what GET /v1/devices and rdmactl show.
    const devs = (await c.server.dp.devices()).slice(0, RGV_MAX_DEVICES);
    const u32 = (v: number) => Math.min(v, 0xffffffff);
    const guidBytes = (g: string) =>
      g.split(':').flatMap((w) => [parseInt(w.slice(0, 2), 16), parseInt(w.slice(2), 16)]);
    return c.records(
      devs.map((d) => {
        const p = d.ports[0];
        return {
          name: d.name,
          ifname: d.interface,
          // The MAC back from its EUI-64 (dataplane/rdma-devices.ts eui64).
          mac: ((g) => [g[0] ^ 2, g[1], g[2], g[5], g[6], g[7]])(guidBytes(d.nodeGuid)),
          link_up: p.state === 'active' ? 1 : 0,
          active_mtu: ibMtu(p.activeMtu),
          ipv4: p.address.split('.').map((x) => Number(x)),
          mtu: p.mtu,
          max_qp: d.maxQp,
          max_qp_wr: d.maxQpWr,
          max_sge: d.maxSge,
          max_cqe: d.maxCqe,
          max_rd_atom: d.maxQpRdAtom,
          max_cq: d.maxCq,
          max_mr: d.maxMr,
          max_pd: d.maxPd,
          max_srq: d.maxSrq,
          max_srq_wr: d.maxSrqWr,
          max_srq_sge: d.maxSrqSge,
          max_inline: d.maxInline,
          max_msg_sz: u32(d.maxMsgSz),
          max_mtu: ibMtu(p.maxMtu),
          vendor_id: d.vendorId,
          vendor_part_id: d.vendorPartId,
          hw_ver: d.hwVer,
          page_size_cap: d.pageSizeCap,
          max_sge_rd: d.maxSgeRd,
          max_res_rd_atom: d.maxResRdAtom,
          max_mr_size: d.maxMrSize,
          node_guid: guidBytes(d.nodeGuid),
          fw_ver: d.fwVer,
          max_mcast_grp: d.maxMcastGrp,
          max_mcast_qp_attach: d.maxMcastQpAttach,
          max_total_mcast_qp_attach: d.maxTotalMcastQpAttach,
          pad: 0,
        };
      }),
    );
  },

  async ATTACH(c) {
    const { ifname } = c.body();
    const own = c.own;
    if (own.doorbell >= 0) return Errno.EBUSY;
    // The opened device: its interface is where this context's QPs live (their address).
    const itf = (await c.server.dp.interfaces()).find((i) => i.name === ifname && i.addresses.length > 0);
    if (itf === undefined) return Errno.ENODEV;
    const t = c.takeEventfd();
    if ('errno' in t) return t.errno;
    own.ifname = ifname;
    own.doorbell = t.fd;
    c.server.rings.attachDoorbell(t.fd);
    return c.reply();
  },

  async ALLOC_PD(c) {
    c.body();
    const { pd } = await c.server.dp.createPd();
    c.own.pds.add(pd);
    return c.reply({ handle: pd });
  },

  DEALLOC_PD: (c) => destroyOwn(c, c.own.pds, (h) => c.server.dp.destroyPd(h)),

  async REG_MR(c) {
    if (!c.hasFd()) return Errno.EINVAL;
    // The struct, then its pieces (none: the one memfd holds the span from offset 0).
    const { head, list } = c.bodyWith((h) => Math.min(h.pieces, RGV_MAX_MR_PIECES + 1), rgv_mr_piece);
    const bad = badRegistration(c.own, head);
    if (bad !== 0) return bad;
    const { pieces, span } = head;
    if (pieces > RGV_MAX_MR_PIECES || (pieces === 0 && c.fdCount() !== 1)) return Errno.EINVAL;
    // The same pages registered twice are one memory: the library passes the memfds they are
    // already on, and the daemon maps them one after another into one view (native mapVerbsPieces).
    const pages =
      pieces === 0
        ? c.mapPassed(span)
        : c.mapPieces(
            list.flatMap((p) => [p.fd, p.offset, p.length]),
            span,
          );
    return registered(c, head, pages);
  },

  /** Pages of one System V segment: attached here (native mapVerbsShm checks whose it is). */
  async REG_SHM(c) {
    const head = c.body();
    const bad = badRegistration(c.own, head);
    if (bad !== 0) return bad;
    return registered(c, head, c.mapShm(head.shmid, head.offset, head.span));
  },

  DEREG_MR: (c) => destroyOwn(c, c.own.mrs, (h) => c.server.dp.destroyMr(h)),

  async ALLOC_MW(c) {
    const { pd, type } = c.body();
    if (!c.own.pds.has(pd)) return Errno.ENOENT;
    if (type !== 1 && type !== 2) return Errno.EINVAL;
    const mw = await c.server.dp.createMw({ pd, type, owner: c.own.owner });
    c.own.mws.add(mw.mw);
    return c.reply({ handle: mw.mw, rkey: mw.rkey });
  },

  DEALLOC_MW: (c) => destroyOwn(c, c.own.mws, (h) => c.server.dp.destroyMw(h)),

  async CREATE_CHANNEL(c) {
    c.body();
    const t = c.takeChannelFd();
    if ('errno' in t) return t.errno;
    const h = c.own.nextChannel++;
    c.own.channels.set(h, { fd: t.fd, stream: t.stream, users: 0 });
    return c.reply({ handle: h });
  },

  /** The eventfd the daemon writes when a QP goes to ERROR or a CQ overflows (once per connection). */
  async ASYNC_FD(c) {
    c.body();
    if (c.own.async.fd >= 0) return Errno.EBUSY;
    const t = c.takeEventfd();
    if ('errno' in t) return t.errno;
    c.own.async.fd = t.fd;
    return c.reply();
  },

  async DESTROY_CHANNEL(c) {
    const { handle } = c.body();
    const ch = c.own.channels.get(handle);
    if (ch === undefined) return Errno.ENOENT;
    if (ch.users > 0) return Errno.EBUSY;
    c.own.channels.delete(handle);
    c.server.core.closeFd(ch.fd);
    ch.fd = -1;
    return c.reply();
  },

  async CREATE_CQ(c) {
    const { entries, channel: chan, bytes } = c.body();
    const own = c.own;
    if (!c.hasFd() || entries < 1 || entries > VERBS_LIMITS.maxCqe || (entries & (entries - 1)) !== 0)
      return Errno.EINVAL;
    if (bytes !== RGV_RING_HDR + entries * rgv_cqe.size) return Errno.EINVAL;
    const channel = chan === RGV_NONE ? null : (own.channels.get(chan) ?? null);
    if (chan !== RGV_NONE && channel === null) return Errno.ENOENT;
    const mem = c.mapPassed(bytes);
    const { cq, depth } = await c.server.dp.createCq({ depth: entries });
    own.cqs.add(cq);
    const ring = new CqRing(c.server.internals.rdma.cqs.get(cq) as Cq, mem, entries, channel, c.own.async, own.cqGroup);
    c.server.rings.attachCq(ring);
    own.cqRings.set(cq, ring);
    return c.reply({ handle: cq, entries: depth });
  },

  DESTROY_CQ: (c) =>
    destroyWithRing(
      c,
      c.own.cqs,
      c.own.cqRings,
      (h) => c.server.dp.destroyCq(h),
      (r) => c.server.rings.detachCq(r),
    ),

  async CREATE_SRQ(c) {
    const q = c.body();
    if (!c.own.pds.has(q.pd)) return Errno.ENOENT;
    const v = await c.server.dp.createSrq({
      pd: q.pd,
      maxWr: Math.max(1, q.max_wr),
      maxSge: Math.max(1, q.max_sge),
      ...(q.limit > 0 ? { limit: q.limit } : {}),
    });
    c.own.srqs.add(v.srq);
    return c.reply({ handle: v.srq, max_wr: v.maxWr, max_sge: v.maxSge });
  },

  async MODIFY_SRQ(c) {
    const { srq, limit } = c.body();
    if (!c.own.srqs.has(srq)) return Errno.ENOENT;
    await c.server.dp.modifySrq(srq, limit);
    return c.reply();
  },

  async SRQ_RING(c) {
    const { srq: h, entries, stride, bytes } = c.body();
    const own = c.own;
    if (!own.srqs.has(h)) return Errno.ENOENT;
    if (own.srqRings.has(h) || !c.hasFd()) return Errno.EINVAL;
    const srq = c.server.internals.rdma.srqs.get(h) as Srq;
    if (entries !== VerbsRings.pow2AtLeast(srq.maxWr) || stride !== rqStride(srq.maxSge)) return Errno.EINVAL;
    if (bytes !== RGV_RING_HDR + entries * stride) return Errno.EINVAL;
    const ring = new SrqRing(srq, c.mapPassed(bytes), entries, stride);
    c.server.rings.attachSrq(ring);
    own.srqRings.set(h, ring);
    return c.reply();
  },

  DESTROY_SRQ: (c) =>
    destroyWithRing(
      c,
      c.own.srqs,
      c.own.srqRings,
      (h) => c.server.dp.destroySrq(h),
      (r) => c.server.rings.detachSrq(r),
    ),

  async CREATE_QP(c) {
    const q = c.body();
    const own = c.own;
    if (!own.pds.has(q.pd) || !own.cqs.has(q.send_cq) || !own.cqs.has(q.recv_cq)) return Errno.ENOENT;
    if (q.srq !== RGV_NONE && !own.srqs.has(q.srq)) return Errno.ENOENT;
    if (q.qp_type !== RGV_QPT_RC && q.qp_type !== RGV_QPT_UD) return Errno.EINVAL;
    if ((q.flags & ~RGV_QP_BLOCK_SELF_MCAST_LB) !== 0 || (q.flags !== 0 && q.qp_type !== RGV_QPT_UD))
      return Errno.EINVAL;
    const qp = await c.server.dp.createQp({
      type: q.qp_type === RGV_QPT_UD ? 'ud' : 'rc',
      ...(q.flags & RGV_QP_BLOCK_SELF_MCAST_LB ? { multicastLoopback: false } : {}),
      pd: q.pd,
      sendCq: q.send_cq,
      recvCq: q.recv_cq,
      srq: q.srq === RGV_NONE ? null : q.srq,
      ...(own.ifname !== undefined ? { interface: own.ifname } : {}),
      maxSendWr: Math.max(1, q.max_send_wr),
      maxRecvWr: Math.max(1, q.max_recv_wr),
      maxSge: Math.max(1, q.max_sge),
      // At least what the send WQE's gather list takes (16 bytes an entry), as rxe gives: its
      // ring slot holds that much anyway, and programs post small inline sends without asking
      // (rdma_xclient: 16 bytes with max_inline_data 0; mlx5 gives an RC QP some 60). More than
      // the limit is refused as asked, never cut down (libfabric finds the largest by trying).
      maxInline: Math.max(q.max_inline, Math.min(VERBS_LIMITS.maxInline, Math.max(1, q.max_sge) * rgv_sge.size)),
      // ibv_create_qp has no IRD/ORD: ibv_modify_qp sets them later, up to what the QP was made with.
      ird: VERBS_LIMITS.maxRdAtomic,
      ord: VERBS_LIMITS.maxRdAtomic,
    });
    own.qps.set(qp.qpn, 0);
    c.server.dp.noteQpOwner(qp.qpn, own.owner);
    return c.reply({
      qpn: qp.qpn,
      max_send_wr: qp.maxSendWr,
      max_recv_wr: qp.maxRecvWr,
      max_sge: qp.maxSge,
      max_inline: qp.maxInline,
    });
  },

  async QP_RING(c) {
    const q = c.body();
    const own = c.own;
    if (!own.qps.has(q.qpn)) return Errno.ENOENT;
    if (own.qpRings.has(q.qpn) || !c.hasFd()) return Errno.EINVAL;
    const qp = c.server.internals.rdma.qpsByQpn.get(q.qpn) as Qp;
    const srqRing = qp.srq ? own.srqRings.get(qp.srq.handle) : null;
    if (srqRing === undefined) return Errno.EINVAL; // its SRQ has no ring
    const size = VerbsRings.qpRingBytes(qp, qp.srq !== null);
    if (
      q.sq_entries !== size.sq ||
      q.rq_entries !== size.rq ||
      q.sq_stride !== size.sqStride ||
      q.rq_stride !== size.rqStride ||
      q.bytes !== size.bytes
    )
      return Errno.EINVAL;
    const ring = new QpRing(
      qp,
      c.mapPassed(q.bytes),
      size.sq,
      size.rq,
      size.sqStride,
      size.rqStride,
      srqRing,
      c.own.async,
    );
    c.server.rings.attachQp(ring);
    own.qpRings.set(q.qpn, ring);
    return c.reply();
  },

  ATTACH_MCAST: (c) => mcast(c, 'attachMcast'),
  DETACH_MCAST: (c) => mcast(c, 'detachMcast'),

  async MODIFY_QP(c) {
    const q = c.body();
    if (!c.own.qps.has(q.qpn)) return Errno.ENOENT;
    const mask = q.mask;
    if (!(mask & RGV_ATTR_STATE)) return Errno.EOPNOTSUPP; // attributes alone, no transition: not yet
    const state = QP_STATES.get(q.state);
    if (state === undefined) return Errno.EINVAL;
    let remote: { ip: string; port: number } | undefined;
    if (mask & RGV_ATTR_AV) {
      const gid = q.dgid;
      // The peer's GID 0: its IPv4 address, IPv4-mapped (::ffff:a.b.c.d).
      if (!gid.subarray(0, 10).every((b) => b === 0) || gid[10] !== 0xff || gid[11] !== 0xff) return Errno.EINVAL;
      if (!(mask & RGV_ATTR_DEST_QPN)) return Errno.EINVAL;
      remote = { ip: [...gid.subarray(12, 16)].join('.'), port: q.dest_qpn };
    }
    const rqPsn = mask & RGV_ATTR_RQ_PSN ? q.rq_psn : undefined;
    // A controlled Q_Key (the high bit) is for privileged programs only, as the kernel's rule.
    if (mask & RGV_ATTR_QKEY && q.qkey & 0x80000000 && c.own.uid !== 0) return Errno.EPERM;
    await c.server.dp.modifyQp(q.qpn, {
      qkey: mask & RGV_ATTR_QKEY ? q.qkey : undefined,
      state,
      remote,
      rqPsn,
      sqPsn: mask & RGV_ATTR_SQ_PSN ? q.sq_psn : undefined,
      // 0 (no READs or atomics that way) is allowed by verbs; ours need at least one slot.
      ord: mask & RGV_ATTR_MAX_QP_RD_ATOMIC ? Math.max(1, q.max_rd_atomic) : undefined,
      ird: mask & RGV_ATTR_MAX_DEST_RD_ATOMIC ? Math.max(1, q.max_dest_rd_atomic) : undefined,
      // enum rgv_mtu 1..5: 256..4096 bytes (anything else: EINVAL from the verb).
      pathMtu: mask & RGV_ATTR_PATH_MTU ? 128 << q.path_mtu : undefined,
      // 4.096 us x 2^timeout; 0 is "infinite" on InfiniBand: ours keeps its own then.
      ackTimeoutUs:
        mask & RGV_ATTR_TIMEOUT && q.timeout > 0 ? Math.ceil(4.096 * 2 ** Math.min(31, q.timeout)) : undefined,
      retryCount: mask & RGV_ATTR_RETRY_CNT ? Math.min(7, q.retry_cnt) : undefined,
    });
    if (rqPsn !== undefined) c.own.qps.set(q.qpn, rqPsn);
    // The ring's state word (and an async event for ERROR) now, not at the ring's next poll.
    const ring = c.own.qpRings.get(q.qpn);
    if (ring !== undefined) c.server.rings.sync(ring);
    return c.reply();
  },

  async QUERY_QP(c) {
    const { handle: qpn } = c.body();
    const rqPsn = c.own.qps.get(qpn);
    if (rqPsn === undefined) return Errno.ENOENT;
    const q = await c.server.dp.getQp(qpn);
    // The largest IB MTU the QP's segments (payload plus the DDP/RDMAP header) hold.
    const mtu = ibMtu(q.segmentSize + DDP_UNTAGGED_BYTES);
    return c.reply({
      state: QP_STATE_VALUES.get(q.state) ?? -1,
      dest_qpn: q.remote?.port ?? 0,
      rq_psn: rqPsn,
      sq_psn: q.psn,
      max_rd_atomic: q.ord,
      max_dest_rd_atomic: q.ird,
      path_mtu: mtu,
      max_send_wr: q.maxSendWr,
      max_recv_wr: q.maxRecvWr,
      max_sge: q.maxSge,
      max_inline: q.maxInline,
      dest_ipv4: q.remote ? q.remote.ip.split('.').map(Number) : [0, 0, 0, 0],
      qkey: q.qkey ?? 0,
    });
  },

  DESTROY_QP: (c) =>
    // ibv_destroy_qp tells the peer nothing (a last ACK only). A UD QP's posted datagrams go out first.
    destroyWithRing(
      c,
      c.own.qps,
      c.own.qpRings,
      async (q) => {
        const r = c.own.qpRings.get(q);
        if (r !== undefined) await c.server.rings.sendPosted(r, UD_SEND_POSTED_MS);
        await c.server.dp.destroyQp(q, { quiet: true });
      },
      (r) => c.server.rings.detachQp(r),
    ),

  // rdma_cm for librdmacm programs (ucma.ts).
  UCMA_CHANNEL: ucmaChannel,
  UCMA: ucma,
};

/** Op number -> its name in RGV_OPS. */
const OP_NAMES = new Map<number, OpName>(
  (Object.entries(RGV_OPS) as [OpName, (typeof RGV_OPS)[OpName]][]).map(([name, spec]) => [spec.op, name]),
);

const EMPTY = new Uint8Array(0);

/** `list` as structs `s` one after the other (none: no body). */
function encodeAll(s: AbiStruct | null, list: object[]): Uint8Array {
  if (s === null) return EMPTY;
  const body = new Uint8Array(s.size * list.length);
  const v = new DataView(body.buffer);
  list.forEach((x, k) => encodeInto(s, x, v, k * s.size));
  return body;
}

/**
 * One request of connection `own`: its reply, or the errno it failed with. `passedFd` (-1: none)
 * is closed unless the request takes it (it passes one: REG_MR, ATTACH, ...) and its handler
 * keeps it. Throws, which drops the connection, for a body of the wrong size or a bug.
 */
export async function handle(
  server: Server,
  own: Owned,
  op: number,
  body: DataView,
  passedFds: readonly number[],
): Promise<Reply | number> {
  const core = server.core;
  const name = OP_NAMES.get(op);
  const spec = name === undefined ? undefined : RGV_OPS[name];
  // What the op may pass: several memfds (REG_MR), one fd, or none; the rest closed now.
  const keep = spec === undefined || spec.fd === 'none' ? 0 : spec.fd === 'memfds' ? RGV_MAX_MR_PIECES : 1;
  for (let k = keep; k < passedFds.length; k++) core.closeFd(passedFds[k]);
  /** The passed fds while nobody took them (mapped or kept), else none. */
  let fds = passedFds.slice(0, keep);
  /** The first of them, or -1. */
  let fd = fds.length > 0 ? fds[0] : -1;
  const taken = () => {
    fds = [];
    fd = -1;
  };
  if (spec === undefined) return Errno.EOPNOTSUPP;
  const request: AbiStruct | null = spec.request;
  const call: Call<OpName> = {
    server,
    own,
    body: () => {
      const want = request?.size ?? 0;
      if (body.byteLength !== want) throw new Error(`op ${op}: ${body.byteLength} bytes of body, ${want} expected`);
      return (request === null ? {} : decode(request, body)) as never;
    },
    bodyWith: (count, records) => {
      const size = request?.size ?? 0;
      if (request === null || body.byteLength < size)
        throw new Error(`op ${op}: ${body.byteLength} bytes of body, at least ${size} expected`);
      const head = decode(request, body) as never;
      const n = count(head);
      const want = size + n * records.size;
      if (body.byteLength !== want)
        throw new Error(`op ${op}: ${body.byteLength} bytes of body, ${want} expected (${n} records)`);
      const list = Array.from({ length: n }, (_, k) =>
        decode(records, new DataView(body.buffer, body.byteOffset + size + k * records.size, records.size)),
      );
      return { head, list } as never;
    },
    hasFd: () => fd >= 0,
    fdCount: () => fds.length,
    mapPassed: (bytes) => {
      const f = fd;
      for (let k = 1; k < fds.length; k++) core.closeFd(fds[k]);
      taken();
      return core.mapVerbsMemory(f, bytes);
    },
    mapPieces: (pieces, span) => {
      const all = fds;
      taken();
      return core.mapVerbsPieces(all, pieces, span);
    },
    mapShm: (shmid, offset, span) => core.mapVerbsShm(shmid, offset, span, own.uid),
    takeEventfd: () => takeFd(false),
    takeChannelFd: () => takeFd(true),
    reply: (...values: object[]) => ({ body: encodeAll(spec.reply, [values[0] ?? {}]), count: 0 }),
    records: (list) => ({ body: encodeAll(spec.reply, list as object[]), count: list.length }),
  };
  /** The passed eventfd (or, `orStream`, stream socket) the connection may keep: takeEventfd. */
  function takeFd(orStream: boolean): { fd: number; stream: boolean } | { errno: number } {
    const stream = orStream && fd >= 0 && core.isStreamPair(fd);
    if (fd < 0 || (!stream && !core.isEventfd(fd))) return { errno: Errno.EINVAL };
    if (
      (own.doorbell >= 0 ? 1 : 0) + (own.async.fd >= 0 ? 1 : 0) + own.channels.size >=
      server.limits.maxFdsPerConnection
    )
      return { errno: Errno.EMFILE };
    if (!fdHeadroom(core, fd)) return { errno: Errno.ENFILE };
    const f = fd;
    taken();
    return { fd: f, stream };
  }
  try {
    return await (HANDLERS[name as OpName] as Handler<OpName>)(call);
  } catch (e) {
    const kind = (e as { kind?: string }).kind;
    if (kind !== undefined && kind in KIND_ERRNO) return KIND_ERRNO[kind];
    if (/^mapVerbs(Memory|Pieces|Shm)/.test((e as Error).message)) {
      server.lines.say(
        own.logKey,
        'warn',
        `verbs socket: refused a registration: ${(e as Error).message} (${own.owner})`,
      );
      return Errno.EINVAL;
    }
    throw e;
  } finally {
    for (const f of fds) core.closeFd(f);
  }
}
