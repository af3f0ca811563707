/**
 * What the worker tests share: one QP's objects on a data plane (optionally on a given worker),
 * polling a CQ for one completion, a manual connect of two QPs, and one exchange of SEND, WRITE
 * and READ between them with the data compared.
 */
import * as assert from 'uvu/assert';
import type { Config, InterfaceConfig } from '../config/types.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { baseConfig } from './dataplane-helpers.ts';
import { sleep } from './helpers.ts';
import type { CqView, MrView, PdView, QpView } from '../dataplane/views.ts';

export interface End {
  pd: PdView;
  cq: CqView;
  mr: MrView;
  qp: QpView;
}

/** A PD, CQ, 64 KiB MR and QP over interface `itf` (on `worker` when given). */
export async function end(dp: DataplaneApi, itf: string, worker?: number): Promise<End> {
  const on = worker === undefined ? {} : { worker };
  const pd = await dp.createPd({ interface: itf, ...on });
  const cq = await dp.createCq({ depth: 256, interface: itf, ...on });
  const mr = await dp.createMr({ pd: pd.pd, length: 65536, access: ['local-write', 'remote-write', 'remote-read'] });
  const qp = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: itf });
  return { pd, cq, mr, qp };
}

export async function pollOne(dp: DataplaneApi, cq: number) {
  for (let i = 0; i < 500; i++) {
    const r = await dp.pollCq(cq, 1, 10);
    if (r.completions.length > 0) return r.completions[0];
  }
  throw new Error(`no completion on cq ${cq}`);
}

/** Connect x (on a, address ipA) and y (on b, address ipB) to each other. */
export async function connect(
  a: DataplaneApi,
  b: DataplaneApi,
  x: End,
  y: End,
  ipA: string,
  ipB: string,
): Promise<void> {
  await a.connect(x.qp.qpn, { remote: { ip: ipB, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
  await b.connect(y.qp.qpn, { remote: { ip: ipA, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
}

/** SEND x -> y, WRITE of `size` bytes y -> x, READ of 20000 bytes by x; data compared. */
export async function exchange(
  a: DataplaneApi,
  b: DataplaneApi,
  x: End,
  y: End,
  seed: number,
  size = 20000,
): Promise<void> {
  const msg = new TextEncoder().encode(`hello ${seed}`);
  await a.writeMr(x.mr.mr, 100, msg);
  await b.postRecv(y.qp.qpn, { wrId: 'r', sge: [{ mr: y.mr.mr, offset: 0, length: 4096 }] });
  await a.postSend(x.qp.qpn, { wrId: 1, opcode: 'send', sge: [{ mr: x.mr.mr, offset: 100, length: msg.length }] });
  assert.is((await pollOne(a, x.cq.cq)).status, 'success');
  assert.is((await pollOne(b, y.cq.cq)).byteLen, msg.length);
  assert.equal(await b.readMr(y.mr.mr, 0, msg.length), msg, 'SEND arrived');
  const big = Uint8Array.from({ length: size }, (_, i) => (i * 13 + seed) & 0xff);
  await b.writeMr(y.mr.mr, 0, big);
  await b.postSend(y.qp.qpn, {
    wrId: 'w',
    opcode: 'write',
    sge: [{ mr: y.mr.mr, offset: 0, length: big.length }],
    remote: { stag: x.mr.stag, offset: 30000 },
  });
  assert.is((await pollOne(b, y.cq.cq)).status, 'success');
  assert.equal(await a.readMr(x.mr.mr, 30000, big.length), big, 'WRITE landed');
  await a.postSend(x.qp.qpn, {
    wrId: 'rd',
    opcode: 'read',
    sge: [{ mr: x.mr.mr, offset: 0, length: 20000 }],
    remote: { stag: y.mr.stag, offset: 0 },
  });
  const rd = await pollOne(a, x.cq.cq);
  assert.is(rd.status, 'success');
  assert.is(rd.opcode, 'read');
  assert.equal(await a.readMr(x.mr.mr, 0, 20000), big.subarray(0, 20000), 'READ returned the bytes');
}

/** A memif interface entry on `worker` with `rxQueues` queue pairs (UDP checksums off unless asked). */
export function memifIf(
  name: string,
  socket: string,
  role: 'server' | 'client',
  ip: string,
  mac: string,
  worker: number | null = null,
  rxQueues = 1,
  udpChecksum = false,
): InterfaceConfig {
  return {
    name,
    driver: 'memif',
    memif: { socket, role, id: 0, secret: null, bufferSize: 2048, udpChecksum },
    mac,
    address: `${ip}/24`,
    gateway: null,
    mtu: 1500,
    rxQueues,
    worker,
    rxPlacement: null,
    rxMode: null,
    congestion: null,
    rxQueueSize: 1024,
    txQueueSize: 1024,
    fault: null,
    line: 1,
  };
}

export const IP_A = '10.70.0.1',
  IP_B = '10.70.0.2';
const MAC_A = '02:fe:00:00:07:01',
  MAC_B = '02:fe:00:00:07:02';
let pairs = 0;

export function cpuWith(workers: number): Config['cpu'] {
  return { workers, mainCore: null, corelistWorkers: null, poll: 'adaptive', idlePollUs: 200, idleYield: true };
}

/** Data plane A: memif server m0 (IP_A) with `queues` queue pairs over `workers` workers (`over`: other keys). */
export function serverA(
  sock: string,
  workers: number,
  queues: number,
  logs: string[] = [],
  rdma: Partial<Config['rdma']> = {},
  udpChecksum = false,
  over: Partial<Config> = {},
): Promise<DataplaneApi> {
  const base = baseConfig();
  return createDataplane(
    baseConfig({
      cpu: cpuWith(workers),
      interfaces: [memifIf('m0', sock, 'server', IP_A, MAC_A, null, queues, udpChecksum)],
      neighbors: [{ interface: 'm0', address: IP_B, mac: MAC_B }],
      rdma: { ...base.rdma, ...rdma },
      ...over,
    }),
    { log: (l, m) => logs.push(`${l}: ${m}`) },
  );
}

export interface MemifPair {
  a: DataplaneApi;
  b: DataplaneApi;
  logs: string[];
  close(): Promise<void>;
}

/**
 * A (server m0, IP_A) and B (client n0, IP_B) over one memif link of `queues` queue pairs, with
 * `workersA` / `workersB` worker threads; resolves once both ends are up.
 */
export async function memifPair(
  o: {
    workersA?: number;
    workersB?: number;
    queues?: number;
    sock?: string;
    a?: DataplaneApi;
    rdma?: Partial<Config['rdma']>;
    /** Checksum UDP (needed when a fault injector corrupts frames). */
    udpChecksum?: boolean;
    /** B's queue pairs when not `queues`. */
    queuesB?: number;
  } = {},
): Promise<MemifPair> {
  const sock = o.sock ?? `@rg-wpair-${process.pid}-${++pairs}`;
  const queues = o.queues ?? 2;
  const logs: string[] = [];
  const a = o.a ?? (await serverA(sock, o.workersA ?? 2, queues, logs, o.rdma, o.udpChecksum ?? false));
  const base = baseConfig();
  const b = await createDataplane(
    baseConfig({
      cpu: cpuWith(o.workersB ?? 2),
      interfaces: [memifIf('n0', sock, 'client', IP_B, MAC_B, null, o.queuesB ?? queues, o.udpChecksum ?? false)],
      neighbors: [{ interface: 'n0', address: IP_A, mac: MAC_A }],
      rdma: { ...base.rdma, ...o.rdma },
    }),
  );
  for (let i = 0; i < 300; i++) {
    const all = [...(await a.interfaces()), ...(await b.interfaces())];
    if (all.every((x) => x.state === 'up')) break;
    await sleep(20);
  }
  return {
    a,
    b,
    logs,
    async close() {
      await a.close();
      await b.close();
    },
  };
}

/** Frames each of two workers' worker-handoff node handed to another worker (show errors). */
export async function handed(dp: DataplaneApi): Promise<number[]> {
  const errs = await dp.errors();
  return ['rdma_wk_0', 'rdma_wk_1'].map(
    (t) =>
      errs
        .find((x) => x.name === t)
        ?.rows.find((r) => r.node === 'worker-handoff' && r.reason === "frames handed to the QP's worker")?.count ?? 0,
  );
}
