/**
 * Routes that look at and steer the data plane as a whole: health, interfaces, neighbors,
 * runtime, errors, trace, capture, fault injection, events.
 */
import type { RuntimeThreadSnapshot } from '../../graph/format.ts';
import { HttpError } from '../errors.ts';
import * as S from '../schemas.ts';
import type { Ctx, RouteDef } from './route.ts';

type Name = { name: string };
type Fault = {
  direction: 'rx' | 'tx' | 'both';
  off?: true;
  seed?: number;
  loss?: number;
  reorder?: number;
  reorderDepth?: number;
  reorderDelayUs?: number;
  duplicate?: number;
  corrupt?: number;
  ce?: number;
};

/** Rows with neither calls nor suspends are left out unless verbose, as `show runtime` does. */
export function visibleRuntime(threads: RuntimeThreadSnapshot[], verbose: boolean): RuntimeThreadSnapshot[] {
  return verbose ? threads : threads.map((t) => ({ ...t, rows: t.rows.filter((r) => r.calls > 0 || r.suspends > 0) }));
}

export const statusRoutes: RouteDef[] = [
  {
    method: 'GET',
    path: '/v1/health',
    tag: 'status',
    summary: 'status, version, uptime',
    status: 200,
    response: S.HealthView,
    errors: [],
    handler: ({ dp }: Ctx) => dp.health(),
  },
  {
    method: 'GET',
    path: '/v1/buffers',
    tag: 'status',
    summary: 'packet buffer pool: count, free, data size',
    status: 200,
    response: S.BufferView,
    errors: [],
    handler: ({ dp }: Ctx) => dp.buffers(),
  },
  {
    method: 'GET',
    path: '/v1/version',
    tag: 'status',
    summary: 'version, Node, platform, which drivers this build can open',
    status: 200,
    response: S.VersionView,
    errors: [],
    handler: ({ dp }: Ctx) => dp.version(),
  },
  {
    method: 'GET',
    path: '/v1/devices',
    tag: 'status',
    summary:
      'the RDMA devices as ibv_devinfo -v shows them, one per interface with an IPv4 address: name, limits, atomic capability, the port and its GID',
    status: 200,
    response: { type: 'array', items: S.DeviceView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.devices(),
  },
  {
    method: 'GET',
    path: '/v1/hardware',
    tag: 'interfaces',
    summary:
      'interfaces with their driver details (memif role, socket, peer, rings, last disconnect; af_packet rings) and driver counters',
    status: 200,
    response: { type: 'array', items: S.HardwareView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.hardware(),
  },
  {
    method: 'GET',
    path: '/v1/threads',
    tag: 'runtime',
    summary:
      "the data plane's threads as VPP's show threads lists them: the main thread, then each worker, with its LWP, scheduling policy, pinned CPU (lcore), core and socket",
    status: 200,
    response: { type: 'array', items: S.ThreadView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.threads(),
  },
  {
    method: 'GET',
    path: '/v1/rx-placement',
    tag: 'interfaces',
    summary:
      "which thread polls which interface rx queue, per input node, with its rx-mode (VPP's show interface rx-placement; with cpu.workers, a memif interface's queues and an af_packet interface's sockets spread over the workers)",
    status: 200,
    response: { type: 'array', items: S.RxPlacementView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.rxPlacement(),
  },
  {
    method: 'GET',
    path: '/v1/interfaces',
    tag: 'interfaces',
    summary: 'interfaces: driver, MAC, addresses, MTU, state, counters',
    status: 200,
    response: { type: 'array', items: S.InterfaceView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.interfaces(),
  },
  {
    method: 'GET',
    path: '/v1/interfaces/{name}',
    tag: 'interfaces',
    summary: 'one interface',
    params: S.NameParams,
    status: 200,
    response: S.InterfaceView,
    errors: [404],
    handler: ({ dp, params }: Ctx<Name>) => dp.interface(params.name),
  },
  {
    method: 'POST',
    path: '/v1/interfaces/{name}/capture',
    tag: 'interfaces',
    summary:
      'start a pcap capture of rx, tx or both into new files of capture.dir (both: FILE for rx, FILE-tx.pcap for tx; 409 if one exists)',
    params: S.NameParams,
    body: S.CaptureStart,
    status: 200,
    response: S.InterfaceView,
    errors: [404, 409, 503],
    handler: ({
      dp,
      params,
      body,
    }: Ctx<Name, never, { direction: 'rx' | 'tx' | 'both'; file: string; count?: number }>) =>
      dp.capture(params.name, body),
  },
  {
    method: 'DELETE',
    path: '/v1/interfaces/{name}/capture',
    tag: 'interfaces',
    summary: 'stop capturing and close the files',
    params: S.NameParams,
    status: 204,
    errors: [404],
    handler: async ({ dp, params }: Ctx<Name>) => {
      await dp.stopCapture(params.name);
    },
  },
  {
    method: 'POST',
    path: '/v1/interfaces/{name}/fault',
    tag: 'interfaces',
    summary: 'set the fault injector of rx, tx or both ({direction, off: true} removes it)',
    params: S.NameParams,
    body: S.FaultSet,
    status: 200,
    response: S.InterfaceView,
    errors: [404, 503],
    handler: ({ dp, params, body }: Ctx<Name, never, Fault>) => {
      const { direction, off, ...cfg } = body;
      if (off && Object.keys(cfg).length > 0)
        throw new HttpError(400, `body/off: true removes the injector; it takes no ${Object.keys(cfg).join(', ')}`);
      return dp.setFault(params.name, direction, off ? null : cfg);
    },
  },
  {
    method: 'POST',
    path: '/v1/interfaces/clear',
    tag: 'interfaces',
    summary:
      "zero every interface's counters, as VPP's clear interfaces (show interfaces, GET /v1/interfaces and /metrics count from zero; the driver's own counters of show hardware go on)",
    status: 204,
    errors: [],
    handler: ({ dp }: Ctx) => dp.clearInterfaces(),
  },
  {
    method: 'POST',
    path: '/v1/ping',
    tag: 'interfaces',
    summary:
      'ICMP echo requests from the data plane (routed and ARP-resolved as any packet); answers when each has its reply or timed out',
    body: S.PingRequest,
    status: 200,
    response: S.PingResult,
    errors: [404, 409],
    handler: ({
      dp,
      body,
      signal,
    }: Ctx<
      never,
      never,
      { address: string; count?: number; intervalMs?: number; size?: number; timeoutMs?: number; seq?: number }
    >) => dp.ping(body, signal),
  },
  {
    method: 'GET',
    path: '/v1/neighbors',
    tag: 'interfaces',
    summary: 'the neighbor (ARP) table',
    status: 200,
    response: { type: 'array', items: S.NeighborView },
    errors: [],
    handler: ({ dp }: Ctx) => dp.neighbors(),
  },
  {
    method: 'GET',
    path: '/v1/runtime',
    tag: 'runtime',
    summary: 'per-thread figures and per-node calls, vectors, suspends, clocks (rows with no calls only with verbose)',
    querystring: S.VerboseQuery,
    status: 200,
    response: S.RuntimeResponse,
    errors: [],
    handler: async ({ dp, query }: Ctx<never, { verbose?: string }>) => ({
      threads: visibleRuntime(await dp.runtime(), query.verbose === '1' || query.verbose === 'true'),
    }),
  },
  {
    method: 'POST',
    path: '/v1/runtime/clear',
    tag: 'runtime',
    summary: 'zero the runtime counters',
    status: 204,
    errors: [],
    handler: ({ dp }: Ctx) => dp.clearRuntime(),
  },
  {
    method: 'GET',
    path: '/v1/errors',
    tag: 'runtime',
    summary: 'error counters: node, reason, severity, count',
    status: 200,
    response: S.ErrorsResponse,
    errors: [],
    handler: async ({ dp }: Ctx) => ({ threads: await dp.errors() }),
  },
  {
    method: 'POST',
    path: '/v1/errors/clear',
    tag: 'runtime',
    summary: 'zero the error counters',
    status: 204,
    errors: [],
    handler: ({ dp }: Ctx) => dp.clearErrors(),
  },
  {
    method: 'POST',
    path: '/v1/trace',
    tag: 'trace',
    summary: 'trace the next COUNT packets of an input node',
    body: S.TraceAdd,
    status: 204,
    errors: [503],
    handler: ({ dp, body }: Ctx<never, never, { node: string; count: number }>) => dp.traceAdd(body.node, body.count),
  },
  {
    method: 'GET',
    path: '/v1/trace',
    tag: 'trace',
    summary: 'the traced packets',
    status: 200,
    response: S.TraceResponse,
    errors: [],
    handler: async ({ dp }: Ctx) => ({ threads: await dp.trace() }),
  },
  {
    method: 'DELETE',
    path: '/v1/trace',
    tag: 'trace',
    summary: 'forget the traced packets',
    status: 204,
    errors: [],
    handler: ({ dp }: Ctx) => dp.clearTrace(),
  },
  {
    method: 'GET',
    path: '/v1/trace/nodes',
    tag: 'trace',
    summary: 'the nodes trace add accepts',
    status: 200,
    response: S.TraceNodes,
    errors: [],
    handler: ({ dp }: Ctx) => dp.traceNodes(),
  },
  {
    method: 'GET',
    path: '/v1/events',
    tag: 'status',
    summary: 'recent RDMA events (QP established/error/disconnected, CQ error, SRQ limit, CM) after seq SINCE',
    querystring: S.EventsQuery,
    status: 200,
    response: { type: 'array', items: S.EventView },
    errors: [],
    handler: ({ dp, query }: Ctx<never, { since?: number }>) => dp.recentEvents(query.since ?? 0),
  },
];
