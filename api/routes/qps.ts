/**
 * Routes of queue pairs (create, query, connect, modify, destroy, post receive and send) and of
 * the listeners that accept connection requests.
 */
import type { Endpoint, QpCreate, RecvIn, SendIn } from '../../dataplane/views.ts';
import * as S from '../schemas.ts';
import { base64, mayTouch, privateData, type Ctx, type RouteDef } from './route.ts';

type Qpn = { qpn: number };
type ConnectBody = {
  remote: Endpoint;
  mode: 'manual' | 'cm';
  remotePsn?: number;
  privateData?: string;
  ird?: number;
  ord?: number;
  timeoutMs?: number;
};
type ListenBody = QpCreate & { port: number; privateData?: string };
type ModifyBody = {
  state: 'reset' | 'init' | 'rtr' | 'rts' | 'sqd' | 'sqe' | 'error';
  remote?: Endpoint;
  rqPsn?: number;
  sqPsn?: number;
  ird?: number;
  ord?: number;
};

export const qpRoutes: RouteDef[] = [
  {
    method: 'POST',
    path: '/v1/qps',
    tag: 'qps',
    summary: 'create a QP in RESET (its QPN is its UDP port; 409 past rdma.max-wr-slots)',
    body: S.QpCreate,
    status: 201,
    response: S.QpView,
    errors: [404, 409, 413, 503],
    handler: ({ dp, body }: Ctx<never, never, QpCreate>) => dp.createQp(body),
  },
  {
    method: 'GET',
    path: '/v1/qps',
    tag: 'qps',
    summary: 'QPs: state, addresses, IRD/ORD, counters, RTT',
    status: 200,
    response: { type: 'array', items: S.QpView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.qps(),
  },
  {
    method: 'GET',
    path: '/v1/qps/{qpn}',
    tag: 'qps',
    summary: 'one QP',
    params: S.QpParams,
    status: 200,
    response: S.QpView,
    errors: [404],
    handler: ({ dp, params }: Ctx<Qpn>) => dp.getQp(params.qpn),
  },
  {
    method: 'POST',
    path: '/v1/qps/{qpn}/connect',
    tag: 'qps',
    summary:
      "to RTS: manual (straight to the peer QP) or cm (through the peer's listener: 409 on REJECT, 504 on timeout)",
    params: S.QpParams,
    body: S.Connect,
    status: 200,
    response: S.ConnectResult,
    errors: [404, 409, 413, 504],
    handler: async ({ dp, params, body, caller }: Ctx<Qpn, never, ConnectBody>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      const { privateData: pd, ...rest } = body;
      const res = await dp.connect(params.qpn, { ...rest, privateData: privateData(pd, 'body/privateData') });
      const { privateData: back, ...view } = res;
      return back === undefined ? view : { ...view, privateData: base64(back) };
    },
  },
  {
    method: 'POST',
    path: '/v1/qps/{qpn}/modify',
    tag: 'qps',
    summary: 'move a QP to another state (RTR needs remote)',
    params: S.QpParams,
    body: S.QpModify,
    status: 200,
    response: S.QpView,
    errors: [404, 409],
    handler: async ({ dp, params, body, caller }: Ctx<Qpn, never, ModifyBody>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      return dp.modifyQp(params.qpn, body);
    },
  },
  {
    method: 'DELETE',
    path: '/v1/qps/{qpn}',
    tag: 'qps',
    summary: 'destroy a QP: FIN to the peer, its work requests flushed to its CQs',
    params: S.QpParams,
    status: 204,
    errors: [404],
    handler: async ({ dp, params, caller }: Ctx<Qpn>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      return dp.destroyQp(params.qpn);
    },
  },
  {
    method: 'POST',
    path: '/v1/qps/{qpn}/multicast',
    tag: 'qps',
    summary:
      "attach a UD QP to an IPv4 multicast group (ibv_attach_mcast): sends to the group's address with qpn 16777215 reach it",
    params: S.QpParams,
    body: S.McastJoin,
    status: 200,
    response: S.McastGroups,
    errors: [404, 409],
    handler: async ({ dp, params, body, caller }: Ctx<Qpn, never, { group: string }>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      return { groups: await dp.attachMcast(params.qpn, body.group) };
    },
  },
  {
    method: 'DELETE',
    path: '/v1/qps/{qpn}/multicast/{group}',
    tag: 'qps',
    summary: 'detach a UD QP from a multicast group (ibv_detach_mcast)',
    params: S.QpGroupParams,
    status: 200,
    response: S.McastGroups,
    errors: [404],
    handler: async ({ dp, params, caller }: Ctx<Qpn & { group: string }>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      return { groups: await dp.detachMcast(params.qpn, params.group) };
    },
  },
  {
    method: 'POST',
    path: '/v1/qps/{qpn}/recv',
    tag: 'qps',
    summary: 'post a receive',
    params: S.QpParams,
    body: S.RecvRequest,
    status: 202,
    response: S.Posted,
    errors: [404, 409, 503],
    handler: async ({ dp, params, body, caller }: Ctx<Qpn, never, RecvIn>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      await dp.postRecv(params.qpn, body);
      return { wrId: body.wrId };
    },
  },
  {
    method: 'POST',
    path: '/v1/qps/{qpn}/send',
    tag: 'qps',
    summary: 'post a send, write, read or atomic (the completion comes on the send CQ)',
    params: S.QpParams,
    body: S.SendRequest,
    status: 202,
    response: S.Posted,
    errors: [404, 409, 413, 503],
    handler: async ({ dp, params, body, caller }: Ctx<Qpn, never, SendIn>) => {
      await mayTouch(caller, `qp ${params.qpn}`, async () => (await dp.getQp(params.qpn)).owner);
      await dp.postSend(params.qpn, body);
      return { wrId: body.wrId };
    },
  },
  {
    method: 'POST',
    path: '/v1/listeners',
    tag: 'qps',
    summary: 'accept connection requests on PORT: each gets a new QP made from these parameters',
    body: S.ListenerCreate,
    status: 201,
    response: S.ListenerView,
    errors: [404, 409, 413, 503],
    handler: ({ dp, body }: Ctx<never, never, ListenBody>) => {
      const { privateData: pd, ...rest } = body;
      return dp.listen({ ...rest, privateData: privateData(pd, 'body/privateData') });
    },
  },
  {
    method: 'GET',
    path: '/v1/listeners',
    tag: 'qps',
    summary: 'listeners and the QPs they accepted',
    status: 200,
    response: { type: 'array', items: S.ListenerView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.listenersList(),
  },
  {
    method: 'DELETE',
    path: '/v1/listeners/{port}',
    tag: 'qps',
    summary: 'stop listening (the QPs it accepted stay)',
    params: S.ListenerParams,
    status: 204,
    errors: [404],
    handler: ({ dp, params }: Ctx<{ port: number }>) => dp.unlisten(params.port),
  },
];
