/**
 * Two data planes for UCX and MPI programs (test/verbs-ucx.test.ts, test/verbs-mpi.test.ts),
 * each serving a verbs socket. withMemifPair: A (10.10.0.1, memif server) and B (10.10.0.2, memif
 * client) in this process; both interfaces are memif0, so both devices are rg_memif0, as on the
 * README's two daemons; afterwards every verbs object the programs made must be released.
 * withDaemons: two daemon processes, joined by memif or, in two network namespaces, by a veth
 * pair (af_packet), as two hosts would be.
 */
import * as assert from 'uvu/assert';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { baseConfig, IP_A, IP_B, MAC_A, MAC_B } from './dataplane-helpers.ts';
import { ip, linkStats } from './helpers-netns.ts';
import { nextPort, type Run, runTool, serverListening } from './verbs-helpers.ts';
import { cpuWith, memifIf } from './workers-helpers.ts';

/** Frames received by memif0 of each data plane. */
export const received = async (dps: DataplaneApi[]) =>
  Promise.all(dps.map(async (dp) => (await dp.interface('memif0')).counters.rxPackets));

/** Two data planes A and B joined by memif, each serving a verbs socket; all released after `body`. */
export async function withMemifPair(body: (x: { sa: string; sb: string; dps: DataplaneApi[] }) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-ucx-'));
  const sock = `@rg-ucx-${process.pid}-${nextPort()}`;
  const a = await createDataplane(
    baseConfig({
      cpu: cpuWith(0),
      interfaces: [memifIf('memif0', sock, 'server', IP_A, MAC_A)],
      neighbors: [{ interface: 'memif0', address: IP_B, mac: MAC_B }],
    }),
  );
  const b = await createDataplane(
    baseConfig({
      cpu: cpuWith(0),
      interfaces: [memifIf('memif0', sock, 'client', IP_B, MAC_B)],
      neighbors: [{ interface: 'memif0', address: IP_A, mac: MAC_A }],
    }),
  );
  const sa = join(dir, 'a.sock'),
    sb = join(dir, 'b.sock');
  const va = a.serveVerbs({ path: sa }),
    vb = b.serveVerbs({ path: sb });
  try {
    for (let i = 0; i < 300 && (await a.interface('memif0')).state !== 'up'; i++)
      await new Promise((r) => setTimeout(r, 20));
    await body({ sa, sb, dps: [a, b] });
    // What the programs made is released when they exit (memif's rings hold buffers: no pool count here).
    for (const dp of [a, b]) {
      const count = async () =>
        (await dp.qps()).length + (await dp.mrs()).length + (await dp.cqs()).length + (await dp.pds()).length;
      for (let i = 0; i < 250 && (await count()) > 0; i++) await new Promise((r) => setTimeout(r, 20));
      assert.is(await count(), 0, 'every QP, MR, CQ and PD the programs made is released');
    }
  } finally {
    va.close();
    vb.close();
    await a.close();
    await b.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A daemon run as a user runs it (`rdma-graph start`), directly or by `ip netns exec` (which becomes it). */
interface Daemon {
  proc: ChildProcess;
  out: string;
}

const RDMA_GRAPH = join(import.meta.dirname, '..', 'bin', 'rdma-graph.mjs');

function startDaemon(config: string, ns?: string): Daemon {
  const cmd = [process.execPath, RDMA_GRAPH, 'start', '--config', config];
  const proc = ns === undefined ? spawn(cmd[0], cmd.slice(1)) : spawn('ip', ['netns', 'exec', ns, ...cmd]);
  const d: Daemon = { proc, out: '' };
  proc.stdout.on('data', (c) => (d.out += c));
  proc.stderr.on('data', (c) => (d.out += c));
  return d;
}

/** Until the daemon says its API listens and its interface `itf` is up (30 s at most). */
async function daemonUp(d: Daemon, itf: string): Promise<void> {
  const up = new RegExp(`interface ${itf} is up`);
  for (let i = 0; i < 1500 && !(/API on/.test(d.out) && up.test(d.out)); i++) {
    assert.ok(d.proc.exitCode === null && d.proc.signalCode === null, `the daemon exited:\n${d.out}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.match(d.out, up, `the daemon came up:\n${d.out}`);
}

/** What the programs of `withDaemons`' body get: the two verbs sockets, the device, the frames. */
export interface DaemonPair {
  sa: string;
  sb: string;
  /** The device both daemons show (both interfaces have the same name). */
  device: string;
  /** Frames each side received so far (A's, B's): what crossed between the two. */
  frames: () => Promise<[number, number]>;
  /** `netns`: the two network namespaces (A's, B's) and the veth end each holds; `memif`: empty. */
  ns: string[];
  links: string[];
  /** What both daemons printed so far (their log lines: a qp-error shows there). */
  logs: () => string;
}

/**
 * Two daemons as a user runs them, as two hosts would be one per host; their verbs sockets in a
 * temporary directory. `memif`: both in this network namespace, joined by memif (interface
 * memif0, 10.10.0.1 and 10.10.0.2); the frames are memif0's counters from each daemon's REST API.
 * `netns`: each in a network namespace of its own, joined by a veth pair whose ends they open with
 * af_packet (interface veth0, 10.30.0.1 and 10.30.0.2); programs in this namespace reach their
 * sockets; the frames are the veth ends' kernel counters (what went over the wire). Static
 * neighbors. Both daemons are stopped with SIGTERM (exit 0); namespaces and files removed.
 * `opts.gso` (netns): af_packet with UDP segmentation offload (af_packet.gso) on both; `opts.mtu`
 * (netns): both veth ends set to it (the daemons, with no mtu configured, take it).
 */
export async function withDaemons(
  topology: 'memif' | 'netns',
  body: (x: DaemonPair) => Promise<void>,
  opts: { gso?: boolean; mtu?: number } = {},
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), `verbs-ucx-${topology}-`));
  const tag = `${process.pid.toString(36)}${nextPort().toString(36)}`;
  const ns = topology === 'netns' ? [`rgucx-${tag}a`, `rgucx-${tag}b`] : [];
  const veth = [`rgu${tag}a`, `rgu${tag}b`];
  const itf = topology === 'netns' ? 'veth0' : 'memif0';
  const addr = topology === 'netns' ? ['10.30.0.1', '10.30.0.2'] : [IP_A, IP_B];
  const mac = [MAC_A, MAC_B];
  const daemons: Daemon[] = [];
  const cleanup = () => {
    for (const n of ns) spawnSync('ip', ['netns', 'del', n], { stdio: 'ignore' });
  };
  process.once('exit', cleanup);
  try {
    if (topology === 'netns') {
      for (const n of ns) ip('netns', 'add', n);
      ip('link', 'add', veth[0], 'type', 'veth', 'peer', 'name', veth[1]);
    }
    const configs = [0, 1].map((i) => join(dir, `${'ab'[i]}.yaml`));
    for (const i of [0, 1]) {
      if (topology === 'netns') {
        ip('link', 'set', veth[i], 'netns', ns[i]);
        spawnSync('ip', ['netns', 'exec', ns[i], 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1']);
        ip('-n', ns[i], 'link', 'set', 'lo', 'up');
        // The daemons' af_packet interfaces (no mtu configured) take the veth's.
        if (opts.mtu !== undefined) ip('-n', ns[i], 'link', 'set', veth[i], 'mtu', String(opts.mtu));
        ip('-n', ns[i], 'link', 'set', veth[i], 'up');
      }
      const driver =
        topology === 'netns'
          ? `driver: af_packet, af_packet: { host-interface: ${veth[i]}${opts.gso === true ? ', gso: true' : ''} }`
          : `driver: memif, memif: { socket: "${join(dir, 'memif.sock')}", role: ${i === 0 ? 'server' : 'client'}, id: 0 }`;
      writeFileSync(
        configs[i],
        [
          'api: { listen: "127.0.0.1:0" }',
          `verbs: { socket: "${join(dir, `${'ab'[i]}.sock`)}" }`,
          'interfaces:',
          `  - { name: ${itf}, ${driver}, mac: "${mac[i]}", address: ${addr[i]}/24 }`,
          'neighbors:',
          `  - { interface: ${itf}, address: ${addr[1 - i]}, mac: "${mac[1 - i]}" }`,
          '',
        ].join('\n'),
      );
    }
    for (const i of [0, 1]) {
      daemons.push(startDaemon(configs[i], ns[i]));
      // The memif server's socket must exist before its client starts.
      if (topology === 'memif' && i === 0)
        for (let k = 0; k < 1500 && !/API on/.test(daemons[0].out); k++) await new Promise((r) => setTimeout(r, 20));
    }
    for (const d of daemons) await daemonUp(d, itf);
    const apis = daemons.map((d) => /API on (http:\/\/[^/\s]+)/.exec(d.out)?.[1] ?? '');
    const rx = async (i: number) =>
      topology === 'netns'
        ? linkStats(veth[i], ns[i]).rxPackets
        : ((await (await fetch(`${apis[i]}/v1/interfaces/${itf}`)).json()) as { counters: { rxPackets: number } })
            .counters.rxPackets;
    const frames = async (): Promise<[number, number]> => [await rx(0), await rx(1)];
    await body({
      sa: join(dir, 'a.sock'),
      sb: join(dir, 'b.sock'),
      device: `rg_${itf}:1`,
      frames,
      ns,
      links: topology === 'netns' ? veth : [],
      logs: () => daemons.map((d) => d.out).join('\n'),
    });
    for (const d of daemons) {
      assert.ok(d.proc.exitCode === null && d.proc.signalCode === null, `the daemon ran to the end:\n${d.out}`);
      const closed = new Promise<number | null>((r) => d.proc.once('close', r));
      d.proc.kill('SIGTERM');
      assert.is(await closed, 0, `the daemon stops cleanly on SIGTERM:\n${d.out}`);
    }
  } finally {
    for (const d of daemons) if (d.proc.exitCode === null && d.proc.signalCode === null) d.proc.kill('SIGKILL');
    cleanup();
    process.removeListener('exit', cleanup);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** ucx_perftest's "Final:" row: iterations, overhead p50/avg/overall (us), MB/s avg/overall, msg/s avg/overall. */
export function ucxFinal(out: string): number[] | null {
  const m = /^\s*Final:\s+(.*)$/m.exec(out);
  return m ? m[1].trim().split(/\s+/).map(Number) : null;
}

/**
 * One ucx_perftest run over two data planes: the server preloaded against socket `sa`, the client
 * against `sb` (towards 127.0.0.1, its out-of-band TCP exchange, on a port of its own), `env`
 * before both (through env(1), which the preload survives). Both sides' exits and output.
 */
export async function ucxPerftest(
  sa: string,
  sb: string,
  common: string[],
  args: string[],
  env: string[] = [],
): Promise<{ client: Run; server: Run }> {
  const port = String(nextPort());
  const pre = env.length > 0 ? ['env', ...env] : [];
  const server = runTool(sa, [...pre, 'ucx_perftest', ...common, '-p', port]);
  await serverListening(server, Number(port));
  const client = await runTool(sb, [...pre, 'ucx_perftest', '127.0.0.1', ...common, '-p', port, ...args]).done;
  return { client, server: await server.done };
}
