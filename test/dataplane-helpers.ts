/**
 * Start-up configurations built in code (no YAML) and a pair of Dataplanes in this process
 * joined by a pipe whose ends live in the two data planes (they copy across their pools).
 */
import type { Config, InterfaceConfig } from '../config/types.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { Dataplane } from '../dataplane/dataplane.ts';

let pairs = 0;

export function baseConfig(over: Partial<Config> = {}): Config {
  return {
    source: '<test>',
    api: { host: '127.0.0.1', port: 0, token: null, users: [], group: null },
    cpu: { workers: 0, mainCore: null, corelistWorkers: null, poll: 'adaptive', idlePollUs: 200, idleYield: true },
    buffers: { count: 8192, dataSize: 2048 },
    log: { level: 'info' },
    interfaces: [],
    neighbors: [],
    rdma: {
      portRange: [20000, 29999],
      multicastPort: 19999,
      maxQps: 256,
      maxMrs: 1024,
      cmRetryMs: 50,
      cmTimeoutMs: 2000,
      cmBacklog: 64,
      cmHalfOpenMs: 5000,
      congestion: 'auto',
      maxPds: 4096,
      maxCqs: 4096,
      maxSrqs: 1024,
      maxMrBytes: 2 ** 32,
      maxCqEntries: 2 ** 22,
      maxWrSlots: 2 ** 20,
      trp: { window: 256, rtoMinMs: 1, rtoMaxMs: 200, rtoInitMs: null, maxRetries: 7, ackDelayUs: 100 },
    },
    capture: { dir: 'run/captures', maxBytes: 64 * 2 ** 20 },
    verbs: {
      socket: 'run/verbs.sock',
      maxConnections: 256,
      maxConnectionsPerUid: 64,
      maxConnectionsPerPid: 16,
      maxFdsPerConnection: 32,
      warmUp: 0,
      wireWarmUp: 0,
    },
    trace: { maxPackets: 1000 },
    ...over,
  };
}

export function pipeInterface(
  name: string,
  peer: string,
  address: string,
  mac: string,
  over: Partial<InterfaceConfig> = {},
): InterfaceConfig {
  return {
    name,
    driver: 'pipe',
    pipe: { peer },
    mac,
    address,
    gateway: null,
    mtu: 1500,
    rxQueues: 1,
    worker: null,
    rxPlacement: null,
    rxMode: null,
    congestion: null,
    rxQueueSize: 4096,
    txQueueSize: 1024,
    fault: null,
    line: 1,
    ...over,
  };
}

export const MAC_A = '02:fe:00:00:00:01';
export const MAC_B = '02:fe:00:00:00:02';
export const IP_A = '10.10.0.1';
export const IP_B = '10.10.0.2';

/** Two data planes A (10.10.0.1) and B (10.10.0.2) joined by a pipe, static neighbors. */
export async function twoDataplanes(
  over: { a?: Partial<Config>; b?: Partial<Config>; ifA?: Partial<InterfaceConfig> } = {},
): Promise<{ a: DataplaneApi; b: DataplaneApi; close(): Promise<void> }> {
  const n = ++pairs;
  const ea = `pa${n}`,
    eb = `pb${n}`;
  const a = await Dataplane.create(
    baseConfig({
      interfaces: [pipeInterface(ea, eb, `${IP_A}/24`, MAC_A, over.ifA)],
      neighbors: [{ interface: ea, address: IP_B, mac: MAC_B }],
      ...over.a,
    }),
  );
  const b = await Dataplane.create(
    baseConfig({
      interfaces: [pipeInterface(eb, ea, `${IP_B}/24`, MAC_B)],
      neighbors: [{ interface: eb, address: IP_A, mac: MAC_A }],
      ...over.b,
    }),
  );
  return {
    a,
    b,
    async close() {
      await a.close();
      await b.close();
    },
  };
}
