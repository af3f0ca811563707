/**
 * Kernel-peer test helpers: veth pairs with one end in a network namespace the test creates,
 * and small python3 raw/UDP socket tools run inside it (`ip netns exec`). Needs root, iproute2
 * and python3; `netnsUnavailable()` says why a test cannot run (pass it to the harness's skip()).
 *
 * Names are unique per process (pid) and per pair; every namespace and veth made here is also
 * removed when the process exits, whatever happened to the test that made it.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';

export interface VethNs {
  /** Network namespace holding `peer`. */
  ns: string;
  /** The end left in our namespace (what af_packet opens). */
  host: string;
  /** The end inside `ns`. */
  peer: string;
  peerMac: Uint8Array;
  hostMac: Uint8Array;
  /** IPv4 address of `peer` (prefix /24), or null when none was asked for. */
  peerIp: string | null;
}

/** Why kernel-peer tests cannot run here, or null when they can. */
export function netnsUnavailable(): string | null {
  if (process.platform !== 'linux') return 'needs Linux';
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'needs root (CAP_NET_ADMIN, CAP_NET_RAW)';
  for (const tool of ['ip', 'python3']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
      return `${tool} not installed (${tool === 'ip' ? 'iproute2' : 'python3'})`;
  }
  const probe = `rgprobe-${process.pid}`;
  const r = spawnSync('ip', ['netns', 'add', probe], { encoding: 'utf8' });
  if (r.status !== 0) return `cannot create a network namespace: ${(r.stderr || '').trim()}`;
  spawnSync('ip', ['netns', 'del', probe]);
  return null;
}

const live = new Set<VethNs>();
let seq = 0;
let exitHook = false;

/** Run `ip` with arguments; throws with its stderr when it fails. */
/**
 * A veth pair `a`/`b` in our namespace, both up, IPv6 off (no router solicitations on the
 * wire). The caller deletes it (`ip link del a`) when done.
 */
export function vethPair(a: string, b: string): void {
  ip('link', 'add', a, 'type', 'veth', 'peer', 'name', b);
  for (const d of [a, b]) spawnSync('sh', ['-c', `echo 1 > /proc/sys/net/ipv6/conf/${d}/disable_ipv6`]);
  ip('link', 'set', a, 'up');
  ip('link', 'set', b, 'up');
}

export function ip(...args: string[]): string {
  try {
    return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(' ')}: ${(err.stderr || err.message).trim()}`);
  }
}

function macOf(args: string[]): Uint8Array {
  const j = JSON.parse(ip('-j', ...args)) as { address: string }[];
  return Uint8Array.from(j[0].address.split(':'), (x) => parseInt(x, 16));
}

function disableIpv6(path: string, ns?: string): void {
  // Keeps IPv6 autoconfiguration (router solicitations, DAD, MLD) off the wire; no IPv6: fine.
  if (ns === undefined) {
    if (existsSync(path)) writeFileSync(path, '1');
  } else {
    spawnSync('ip', ['netns', 'exec', ns, 'sh', '-c', `[ -e ${path} ] && echo 1 > ${path}; true`]);
  }
}

/**
 * Create a namespace and a veth pair, move the peer into the namespace, optionally give the peer
 * an IPv4 address (`peerCidr`, e.g. "10.77.1.2/24"), and set both ends up (`hostUp: false`
 * leaves the host end administratively down). IPv6 is disabled on both ends.
 */
export function createVethNs(opts: { peerCidr?: string; hostUp?: boolean } = {}): VethNs {
  const tag = `${process.pid.toString(36)}${(seq++).toString(36)}`;
  const p: VethNs = {
    ns: `rgtest-${tag}`,
    host: `rgv${tag}a`,
    peer: `rgv${tag}b`,
    peerMac: new Uint8Array(6),
    hostMac: new Uint8Array(6),
    peerIp: null,
  };
  if (!exitHook) {
    exitHook = true;
    process.on('exit', () => {
      for (const x of live) destroyVethNs(x);
    });
  }
  ip('netns', 'add', p.ns);
  live.add(p);
  try {
    ip('link', 'add', p.host, 'type', 'veth', 'peer', 'name', p.peer);
    ip('link', 'set', p.peer, 'netns', p.ns);
    disableIpv6(`/proc/sys/net/ipv6/conf/${p.host}/disable_ipv6`);
    disableIpv6(`/proc/sys/net/ipv6/conf/${p.peer}/disable_ipv6`, p.ns);
    ip('-n', p.ns, 'link', 'set', 'lo', 'up');
    if (opts.peerCidr) {
      ip('-n', p.ns, 'addr', 'add', opts.peerCidr, 'dev', p.peer);
      p.peerIp = opts.peerCidr.split('/')[0];
    }
    ip('-n', p.ns, 'link', 'set', p.peer, 'up');
    if (opts.hostUp !== false) ip('link', 'set', p.host, 'up');
    p.peerMac = macOf(['-n', p.ns, 'link', 'show', 'dev', p.peer]);
    p.hostMac = macOf(['link', 'show', 'dev', p.host]);
  } catch (e) {
    destroyVethNs(p);
    throw e;
  }
  return p;
}

/** Remove the pair and the namespace. Never throws; idempotent. */
export function destroyVethNs(p: VethNs): void {
  // Deleting the host end takes the peer with it at once; deleting only the namespace would
  // leave the host end around until the kernel's asynchronous namespace cleanup.
  spawnSync('ip', ['link', 'del', p.host], { stdio: 'ignore' });
  spawnSync('ip', ['netns', 'del', p.ns], { stdio: 'ignore' });
  live.delete(p);
}

/** Interface flags as `ip -j link` lists them ("UP", "LOWER_UP", "NO-CARRIER"...). */
export function linkFlags(dev: string, ns?: string): string[] {
  const j = JSON.parse(ip('-j', ...(ns ? ['-n', ns] : []), 'link', 'show', 'dev', dev)) as { flags: string[] }[];
  return j[0].flags;
}

/** An interface's kernel counters (`ip -s -j link`): rx/tx packets, bytes, dropped. */
export function linkStats(
  dev: string,
  ns?: string,
): { rxPackets: number; txPackets: number; rxDropped: number; txDropped: number } {
  const j = JSON.parse(ip('-s', '-j', ...(ns ? ['-n', ns] : []), 'link', 'show', 'dev', dev)) as {
    stats64: { rx: { packets: number; dropped: number }; tx: { packets: number; dropped: number } };
  }[];
  const s = j[0].stats64;
  return { rxPackets: s.rx.packets, txPackets: s.tx.packets, rxDropped: s.rx.dropped, txDropped: s.tx.dropped };
}

/** Sends each stdin line (hex) as one frame on argv[1] through a raw AF_PACKET socket. */
export const PY_SEND_FRAMES = `
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
n = 0
for line in sys.stdin:
    line = line.strip()
    if line:
        s.send(bytes.fromhex(line))
        n += 1
print(n, flush=True)
`;

/**
 * Prints "ready", then the hex of each incoming frame on argv[1] whose EtherType is argv[2]
 * (hex), until argv[3] frames or argv[4] seconds.
 */
export const PY_RECV_FRAMES = `
import socket, sys, select, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
want = int(sys.argv[2], 16); n = int(sys.argv[3]); deadline = time.time() + float(sys.argv[4])
print("ready", flush=True)
got = 0
while got < n:
    t = deadline - time.time()
    if t <= 0: break
    r, _, _ = select.select([s], [], [], t)
    if not r: break
    data, addr = s.recvfrom(65536)
    if addr[2] == socket.PACKET_OUTGOING: continue
    if len(data) >= 14 and int.from_bytes(data[12:14], "big") == want:
        print(data.hex(), flush=True); got += 1
`;

/**
 * Like PY_RECV_FRAMES but counts outgoing frames too (a tap on our own end sees what is sent
 * through it, unless the sender bypassed the qdisc and taps): prints "ready", then the number
 * of frames of EtherType argv[2] seen in argv[3] seconds.
 */
export const PY_TAP_COUNT = `
import socket, sys, select, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
want = int(sys.argv[2], 16); deadline = time.time() + float(sys.argv[3])
print("ready", flush=True)
n = 0
while True:
    t = deadline - time.time()
    if t <= 0: break
    r, _, _ = select.select([s], [], [], t)
    if not r: break
    data = s.recv(65536)
    if len(data) >= 14 and int.from_bytes(data[12:14], "big") == want: n += 1
print(n, flush=True)
`;

/** Run python3 code in this (the host) namespace without blocking; see pyInNsAsync. */
export function pyAsync(code: string, args: string[], input?: string): PyChild {
  return pyRun([], code, args, input);
}

/** Prints "ready", then "<src ip> <payload hex>" per UDP datagram to argv[1]:argv[2], until argv[3] or argv[4] s. */
export const PY_RECV_UDP = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(float(sys.argv[4]))
print("ready", flush=True)
for _ in range(int(sys.argv[3])):
    try:
        data, addr = s.recvfrom(65536)
    except socket.timeout:
        break
    print(addr[0], data.hex(), flush=True)
`;

/** Run python3 code inside the namespace and wait for it; stdin `input`, returns stdout lines. */
export function pyInNs(ns: string, code: string, args: string[], input = ''): string[] {
  const r = spawnSync('ip', ['netns', 'exec', ns, 'python3', '-c', code, ...args], {
    input,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`python3 in ${ns} failed (${r.status}): ${r.stderr}`);
  return r.stdout.split('\n').filter((l) => l.length > 0);
}

export interface PyChild {
  child: ChildProcess;
  /** Resolves when the script printed "ready". */
  ready: Promise<void>;
  /** Resolves with the stdout lines after "ready" when the script exits. */
  done: Promise<string[]>;
}

/** Start python3 code inside the namespace without blocking the event loop. */
export function pyInNsAsync(ns: string, code: string, args: string[], input?: string): PyChild {
  return pyRun(['ip', 'netns', 'exec', ns], code, args, input);
}

function pyRun(prefix: string[], code: string, args: string[], input?: string): PyChild {
  const ns = prefix.length ? prefix[prefix.length - 1] : 'this namespace';
  const cmd = [...prefix, 'python3', '-c', code, ...args];
  const child = spawn(cmd[0], cmd.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '',
    err = '';
  let readyResolve!: () => void, readyReject!: (e: Error) => void;
  const ready = new Promise<void>((res, rej) => {
    readyResolve = res;
    readyReject = rej;
  });
  const done = new Promise<string[]>((res, rej) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (/^ready$/m.test(out)) readyResolve();
    });
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.on('error', (e) => {
      readyReject(e);
      rej(e);
    });
    child.on('close', (code) => {
      const lines = out.split('\n').filter((l) => l.length > 0 && l !== 'ready');
      if (code !== 0) {
        const e = new Error(`python3 in ${ns} exited ${code}: ${err}`);
        readyReject(e);
        rej(e);
      } else {
        readyResolve();
        res(lines);
      }
    });
  });
  if (input !== undefined) child.stdin!.end(input);
  else child.stdin!.end();
  return { child, ready, done };
}
