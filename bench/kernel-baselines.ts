/**
 * Kernel baselines the benchmarks measure in the same run: iperf3 TCP, one stream, between two
 * network namespaces over a veth pair (root), and sockperf UDP ping-pong on loopback (half-RTT).
 */
import { spawn, spawnSync } from 'node:child_process';

export interface Out {
  code: number | null;
  out: string;
}

/** A command's exit code and everything it printed (killed after `timeoutMs`). */
export function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<Out> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env: { ...process.env, ...env } });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, out });
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * iperf3 TCP, one stream, namespace to namespace over a veth pair: Gbit/s, or the reason not.
 * offloads false: TSO, GSO, GRO and checksum offload off on both ends, so the kernel moves
 * MTU-sized segments as we do (with them on it moves 64 KiB super-segments through the veth).
 */
export async function iperf3(seconds: number, offloads = true): Promise<{ gbps: number | null; why?: string }> {
  if (process.getuid?.() !== 0) return { gbps: null, why: 'needs root (network namespaces)' };
  if (spawnSync('iperf3', ['--version']).error) return { gbps: null, why: 'iperf3 is not installed' };
  const tag = `pt${process.pid % 10000}`;
  const sh = (c: string) => spawnSync('sh', ['-c', c], { stdio: 'ignore' }).status === 0;
  const A = `${tag}a`,
    B = `${tag}b`;
  try {
    const ok =
      sh(`ip netns add ${A} && ip netns add ${B}`) &&
      sh(`ip link add ${A}v type veth peer name ${B}v`) &&
      sh(`ip link set ${A}v netns ${A} && ip link set ${B}v netns ${B}`) &&
      sh(`ip -n ${A} addr add 10.99.0.1/24 dev ${A}v && ip -n ${A} link set ${A}v up && ip -n ${A} link set lo up`) &&
      sh(`ip -n ${B} addr add 10.99.0.2/24 dev ${B}v && ip -n ${B} link set ${B}v up && ip -n ${B} link set lo up`);
    if (!ok) return { gbps: null, why: 'could not make the namespaces and veth pair' };
    if (!offloads) {
      const off = 'tso off gso off gro off tx off rx off';
      if (spawnSync('ethtool', ['--version']).error) return { gbps: null, why: 'ethtool is not installed' };
      if (!sh(`ip netns exec ${A} ethtool -K ${A}v ${off} && ip netns exec ${B} ethtool -K ${B}v ${off}`))
        return { gbps: null, why: 'ethtool -K could not turn the veth offloads off' };
    }
    const server = run('ip', ['netns', 'exec', A, 'iperf3', '-s', '-1', '-B', '10.99.0.1']);
    await sleep(500);
    const c = await run('ip', ['netns', 'exec', B, 'iperf3', '-c', '10.99.0.1', '-t', String(seconds), '-J']);
    await server;
    const bps = JSON.parse(c.out).end?.sum_received?.bits_per_second;
    return typeof bps === 'number' ? { gbps: bps / 1e9 } : { gbps: null, why: 'iperf3 gave no result' };
  } catch (e) {
    return { gbps: null, why: (e as Error).message };
  } finally {
    sh(`ip netns del ${A}; ip netns del ${B}`);
  }
}

/**
 * sockperf UDP 64-B ping-pong on loopback: half-RTT p50/p99/p99.9 in µs (over its "valid
 * duration": sockperf leaves out its first 400 ms), or the reason not. `spin`: both ends poll
 * their socket without sleeping (`--timeout 0`: epoll never waits), as a busy-polling program
 * would; else sockperf's default (epoll sleeps until the datagram comes).
 */
export async function sockperf(
  seconds: number,
  udpPort: number,
  spin = false,
): Promise<{ p50: number | null; p99: number | null; p999: number | null; why?: string }> {
  if (spawnSync('sockperf', ['--version']).error)
    return { p50: null, p99: null, p999: null, why: 'sockperf is not installed' };
  const p = String(udpPort);
  const mode = spin ? ['--timeout', '0'] : [];
  const server = spawn('sockperf', ['sr', '-i', '127.0.0.1', '-p', p, ...mode], { stdio: 'ignore' });
  await sleep(500);
  const c = await run('sockperf', ['pp', '-i', '127.0.0.1', '-p', p, '-m', '64', '-t', String(seconds), ...mode]);
  server.kill('SIGKILL');
  const pct = (q: string) => {
    const m = new RegExp(`percentile ${q} =\\s+([\\d.]+)`).exec(c.out);
    return m ? Number(m[1]) : null;
  };
  return { p50: pct('50.000'), p99: pct('99.000'), p999: pct('99.900') };
}
