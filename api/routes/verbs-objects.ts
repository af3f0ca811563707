/**
 * Routes of the verbs objects that are not QPs: protection domains, memory regions (and their
 * bytes), completion queues (and polling them), shared receive queues.
 */
import type { RecvIn } from '../../dataplane/views.ts';
import type { IncomingMessage } from 'node:http';
import { HttpError } from '../errors.ts';
import { checkRead, mrReadStream, writeFromBody } from '../mr-data.ts';
import * as S from '../schemas.ts';
import { mayTouch, OCTETS, type Ctx, type RouteDef } from './route.ts';

/** Most bytes one MR data request moves (PUT body limit; GET answers 413 beyond it). */
export const MR_DATA_MAX = 64 * 1024 * 1024;

type Pd = { pd: number };
type Mr = { mr: number };
type Cq = { cq: number };
type Srq = { srq: number };

export const verbsRoutes: RouteDef[] = [
  // ---------------------------------------------------------------- PD
  {
    method: 'POST',
    path: '/v1/pds',
    tag: 'verbs',
    summary: 'create a protection domain (409 past rdma.max-pds)',
    body: S.PdCreate,
    status: 201,
    response: S.PdView,
    errors: [404, 409],
    handler: ({ dp, body }: Ctx<never, never, { interface?: string } | undefined>) => dp.createPd(body ?? {}),
  },
  {
    method: 'GET',
    path: '/v1/pds',
    tag: 'verbs',
    summary: 'protection domains',
    status: 200,
    response: { type: 'array', items: S.PdView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.pds(),
  },
  {
    method: 'DELETE',
    path: '/v1/pds/{pd}',
    tag: 'verbs',
    summary: 'destroy a protection domain (409 while MRs, QPs or SRQs use it)',
    params: S.PdParams,
    status: 204,
    errors: [404, 409],
    handler: ({ dp, params }: Ctx<Pd>) => dp.destroyPd(params.pd),
  },
  // ---------------------------------------------------------------- MR
  {
    method: 'POST',
    path: '/v1/mrs',
    tag: 'verbs',
    summary: 'register a memory region the data plane allocates (zero-filled; 409 past rdma.max-mr-bytes)',
    body: S.MrCreate,
    status: 201,
    response: S.MrView,
    errors: [404, 409, 413, 503],
    handler: ({ dp, body }: Ctx<never, never, { pd: number; length: number; access?: string[] }>) => dp.createMr(body),
  },
  {
    method: 'GET',
    path: '/v1/mrs',
    tag: 'verbs',
    summary: 'memory regions',
    status: 200,
    response: { type: 'array', items: S.MrView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.mrs(),
  },
  {
    method: 'GET',
    path: '/v1/mrs/{mr}',
    tag: 'verbs',
    summary: 'one memory region',
    params: S.MrParams,
    status: 200,
    response: S.MrView,
    errors: [404],
    handler: ({ dp, params }: Ctx<Mr>) => dp.getMr(params.mr),
  },
  {
    method: 'DELETE',
    path: '/v1/mrs/{mr}',
    tag: 'verbs',
    summary: 'deregister a memory region',
    params: S.MrParams,
    status: 204,
    errors: [404],
    handler: async ({ dp, params, caller }: Ctx<Mr>) => {
      await mayTouch(caller, `mr ${params.mr}`, async () => (await dp.getMr(params.mr)).owner);
      return dp.destroyMr(params.mr);
    },
  },
  {
    method: 'PUT',
    path: '/v1/mrs/{mr}/data',
    tag: 'verbs',
    summary: `write the request's raw bytes into the MR at OFFSET (at most ${MR_DATA_MAX / 1048576} MiB a request)`,
    params: S.MrParams,
    querystring: S.OffsetQuery,
    consumes: OCTETS,
    bodyLimit: MR_DATA_MAX,
    status: 200,
    response: S.Written,
    errors: [404, 411, 413, 503],
    handler: async ({ dp, params, query, body, caller, transfers }: Ctx<Mr, { offset?: number }, IncomingMessage>) => {
      await mayTouch(caller, `mr ${params.mr}`, async () => (await dp.getMr(params.mr)).owner);
      const offset = query.offset ?? 0;
      if (body === undefined || body === null) return dp.writeMr(params.mr, offset, new Uint8Array(0));
      const release = transfers.take('PUT /v1/mrs/{mr}/data');
      try {
        return await writeFromBody(dp, params.mr, offset, body, MR_DATA_MAX, 'PUT /v1/mrs/{mr}/data');
      } finally {
        release();
      }
    },
  },
  {
    method: 'GET',
    path: '/v1/mrs/{mr}/data',
    tag: 'verbs',
    summary: `read LENGTH raw bytes of the MR at OFFSET (default: to its end; at most ${MR_DATA_MAX / 1048576} MiB a request)`,
    params: S.MrParams,
    querystring: S.ReadQuery,
    status: 200,
    produces: OCTETS,
    errors: [404, 413, 503],
    handler: async ({ dp, params, query, reply, caller, transfers }: Ctx<Mr, { offset?: number; length?: number }>) => {
      await mayTouch(caller, `mr ${params.mr}`, async () => (await dp.getMr(params.mr)).owner);
      const offset = query.offset ?? 0;
      let length = query.length;
      if (length === undefined) length = Math.max(0, (await dp.getMr(params.mr)).length - offset);
      if (length > MR_DATA_MAX)
        throw new HttpError(
          413,
          `querystring/length: ${length} bytes is more than one request reads (${MR_DATA_MAX}); read in pieces with offset and length`,
        );
      await checkRead(dp, params.mr, offset, length);
      reply.type(OCTETS);
      reply.header('content-length', length);
      // Streamed a chunk at a time as the client takes it (api/mr-data.ts).
      return mrReadStream(dp, params.mr, offset, length, transfers.take('GET /v1/mrs/{mr}/data'));
    },
  },
  // ---------------------------------------------------------------- CQ
  {
    method: 'POST',
    path: '/v1/cqs',
    tag: 'verbs',
    summary: 'create a completion queue (409 past rdma.max-cqs or rdma.max-cq-entries)',
    body: S.CqCreate,
    status: 201,
    response: S.CqView,
    errors: [404, 409, 413],
    handler: ({ dp, body }: Ctx<never, never, { depth: number; interface?: string }>) => dp.createCq(body),
  },
  {
    method: 'GET',
    path: '/v1/cqs',
    tag: 'verbs',
    summary: 'completion queues',
    status: 200,
    response: { type: 'array', items: S.CqView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.cqs(),
  },
  {
    method: 'GET',
    path: '/v1/cqs/{cq}',
    tag: 'verbs',
    summary: 'one completion queue',
    params: S.CqParams,
    status: 200,
    response: S.CqView,
    errors: [404],
    handler: ({ dp, params }: Ctx<Cq>) => dp.getCq(params.cq),
  },
  {
    method: 'GET',
    path: '/v1/cqs/{cq}/completions',
    tag: 'verbs',
    summary: 'take up to MAX completions, waiting up to WAITMS for the first',
    params: S.CqParams,
    querystring: S.PollQuery,
    status: 200,
    response: S.PollResult,
    errors: [404],
    handler: ({ dp, params, query, signal }: Ctx<Cq, { max?: number; waitMs?: number }>) =>
      dp.pollCq(params.cq, query.max ?? 64, query.waitMs ?? 0, signal),
  },
  {
    method: 'DELETE',
    path: '/v1/cqs/{cq}',
    tag: 'verbs',
    summary: 'destroy a completion queue (409 while QPs use it)',
    params: S.CqParams,
    status: 204,
    errors: [404, 409],
    handler: ({ dp, params }: Ctx<Cq>) => dp.destroyCq(params.cq),
  },
  // ---------------------------------------------------------------- SRQ
  {
    method: 'POST',
    path: '/v1/srqs',
    tag: 'verbs',
    summary: 'create a shared receive queue (409 past rdma.max-srqs or rdma.max-wr-slots)',
    body: S.SrqCreate,
    status: 201,
    response: S.SrqView,
    errors: [404, 409, 413],
    handler: ({ dp, body }: Ctx<never, never, { pd: number; maxWr: number; maxSge?: number; limit?: number }>) =>
      dp.createSrq(body),
  },
  {
    method: 'GET',
    path: '/v1/srqs',
    tag: 'verbs',
    summary: 'shared receive queues',
    status: 200,
    response: { type: 'array', items: S.SrqView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.srqs(),
  },
  {
    method: 'POST',
    path: '/v1/srqs/{srq}/modify',
    tag: 'verbs',
    summary: 'arm the limit event',
    params: S.SrqParams,
    body: S.SrqModify,
    status: 200,
    response: S.SrqView,
    errors: [404],
    handler: ({ dp, params, body }: Ctx<Srq, never, { limit: number }>) => dp.modifySrq(params.srq, body.limit),
  },
  {
    method: 'POST',
    path: '/v1/srqs/{srq}/recv',
    tag: 'verbs',
    summary: 'post a receive to a shared receive queue',
    params: S.SrqParams,
    body: S.RecvRequest,
    status: 202,
    response: S.Posted,
    errors: [404, 503],
    handler: async ({ dp, params, body }: Ctx<Srq, never, RecvIn>) => {
      await dp.postSrqRecv(params.srq, body);
      return { wrId: body.wrId };
    },
  },
  {
    method: 'DELETE',
    path: '/v1/srqs/{srq}',
    tag: 'verbs',
    summary: 'destroy a shared receive queue (409 while QPs use it)',
    params: S.SrqParams,
    status: 204,
    errors: [404, 409],
    handler: ({ dp, params }: Ctx<Srq>) => dp.destroySrq(params.srq),
  },
];
