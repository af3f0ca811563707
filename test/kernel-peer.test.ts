// The L2-L4 nodes on the af_packet driver against the Linux kernel as the peer: a veth pair
// with one end in a network namespace this file creates; our stack (10.77.0.1/24, its own MAC)
// on the other end, the kernel (10.77.0.2/24) in the namespace. The kernel pings us, resolves
// us by ARP, echoes UDP through us and receives UDP from us; tshark decodes what we sent.
// Needs root, iproute2, python3, iputils-ping, iputils-arping, tcpdump and tshark; without them
// each test skips with the reason (and fails under CI=true).
// Run: npm test -- kernel-peer
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AfPacketDriver } from '../drivers/af-packet.ts';
import { Interfaces, type Interface } from '../drivers/interfaces.ts';
import { type BufferPool, createPool, Graph } from '../graph/index.ts';
import { formatMac } from '../nodes/net/address.ts';
import { registerL2L4, type Netstack } from '../nodes/netstack.ts';
import { sleep } from './helpers.ts';
import {
  createVethNs,
  destroyVethNs,
  ip,
  netnsUnavailable,
  PY_RECV_UDP,
  pyInNsAsync,
  type VethNs,
} from './helpers-netns.ts';

const US_IP = '10.77.0.1';
const NS_IP = '10.77.0.2';
/** The host veth end's address during the kernel-to-kernel baseline (in a second namespace). */
const BASE_IP = '10.77.0.3';
/**
 * Our MAC: locally administered, not the host veth end's, so the host's own stack never
 * takes frames addressed to us (no af_packet promisc needed: a veth hands its packet taps every
 * frame it receives).
 */
const US_MAC = '02:fe:0a:4d:00:01';
const ECHO_PORT = 7;

/** Debian packages of the tools these tests run. */
const TOOLS: [string, string][] = [
  ['ping', 'iputils-ping'],
  ['arping', 'iputils-arping'],
  ['tcpdump', 'tcpdump'],
  ['tshark', 'tshark'],
  ['nstat', 'iproute2'],
];

function unavailableReason(): string | null {
  const r = netnsUnavailable();
  if (r !== null) return r;
  for (const [tool, pkg] of TOOLS) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
      return `${tool} not installed (Debian package ${pkg})`;
  }
  // The output parsed here is iputils' (Debian's "arping" package is another program).
  for (const tool of ['ping', 'arping']) {
    const v = spawnSync(tool, ['-V'], { encoding: 'utf8' });
    if (!/iputils/.test(`${v.stdout}${v.stderr}`))
      return `${tool} is not the iputils one (Debian package iputils-${tool})`;
  }
  return null;
}

// ------------------------------------------------------------------------------ processes

interface RunResult {
  code: number | null;
  out: string;
  err: string;
}

/**
 * Run a command without blocking the event loop (the graph runs on it: a spawnSync while it
 * runs would leave the kernel's packets unanswered). Killed after `timeoutMs`.
 */
function run(cmd: string, args: string[], timeoutMs = 15000): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '',
      err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

/** Run in the namespace and require exit status 0. */
async function inNs(ns: string, args: string[], timeoutMs?: number): Promise<string> {
  const r = await run('ip', ['netns', 'exec', ns, ...args], timeoutMs);
  if (r.code !== 0) throw new Error(`${args.join(' ')} in ${ns} exited ${r.code}: ${r.err}${r.out}`);
  return r.out;
}

interface PingResult {
  transmitted: number;
  received: number;
  loss: string;
  min: number;
  avg: number;
  max: number;
  mdev: number;
  text: string;
}

/** Parse iputils ping's summary. */
function parsePing(out: string): PingResult {
  const c = /(\d+) packets transmitted, (\d+) received.*?([\d.]+)% packet loss/.exec(out);
  const t = /rtt min\/avg\/max\/mdev = ([\d.]+)\/([\d.]+)\/([\d.]+)\/([\d.]+) ms/.exec(out);
  if (!c) throw new Error(`no ping summary in: ${out}`);
  return {
    transmitted: Number(c[1]),
    received: Number(c[2]),
    loss: `${c[3]}%`,
    min: t ? Number(t[1]) : NaN,
    avg: t ? Number(t[2]) : NaN,
    max: t ? Number(t[3]) : NaN,
    mdev: t ? Number(t[4]) : NaN,
    text: t ? t[0] : '(no rtt line)',
  };
}

const PING_ARGS = ['-n', '-c', '100', '-i', '0.01', '-W', '1', '-w', '10'];

/** The namespace's UDP or ICMP counters (/proc/net/snmp is per network namespace). */
async function snmp(ns: string, group: 'Udp' | 'Icmp' = 'Udp'): Promise<Record<string, number>> {
  const lines = (await inNs(ns, ['cat', '/proc/net/snmp'])).split('\n').filter((l) => l.startsWith(`${group}:`));
  const names = lines[0].split(/\s+/).slice(1),
    values = lines[1].split(/\s+/).slice(1).map(Number);
  return Object.fromEntries(names.map((n, i) => [n, values[i]]));
}

/** The namespace kernel's neighbor entry for `addr`, or null. */
function kernelNeighbor(ns: string, dev: string, addr: string): { lladdr?: string; state: string[] } | null {
  const j = JSON.parse(ip('-j', '-n', ns, 'neigh', 'show', addr, 'dev', dev)) as { lladdr?: string; state: string[] }[];
  return j.length ? j[0] : null;
}

/**
 * UDP echo client: sends one datagram per size in argv[3] (comma list) to argv[1]:argv[2] and
 * waits up to 1 s for it to come back; prints one line per datagram: "ok", "mismatch <len>",
 * "lost" or "from <addr>:<port>" when it came back from elsewhere. Then a burst: argv[4]
 * datagrams of 4..1472 bytes (a 4-byte sequence number first) back to back, collected
 * afterwards in any order: prints "burst <received> <identical>".
 */
const PY_ECHO_CLIENT = `
import os, random, socket, sys
dst = (sys.argv[1], int(sys.argv[2]))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 0))
s.settimeout(1.0)
for n in (int(x) for x in sys.argv[3].split(",")):
    data = os.urandom(n)
    s.sendto(data, dst)
    try:
        back, addr = s.recvfrom(65536)
    except socket.timeout:
        print("lost", n, flush=True); continue
    if addr != dst: print("from %s:%d" % addr, flush=True)
    elif back == data: print("ok", n, flush=True)
    else: print("mismatch", n, len(back), flush=True)
count = int(sys.argv[4])
rnd = random.Random(7)
sent = {}
for i in range(count):
    n = rnd.randint(4, 1472)
    data = i.to_bytes(4, "big") + os.urandom(n - 4)
    sent[i] = data
    s.sendto(data, dst)
got = same = 0
s.settimeout(1.0)
while got < count:
    try:
        back, addr = s.recvfrom(65536)
    except socket.timeout:
        break
    got += 1
    if addr == dst and len(back) >= 4 and sent.get(int.from_bytes(back[:4], "big")) == back: same += 1
print("burst", got, same, flush=True)
`;

/**
 * Sends argv[3] datagrams to argv[1]:argv[2] from a connected socket, then waits 0.3 s for an
 * ICMP error: prints "sent <n> refused" (ECONNREFUSED: a port unreachable came back) or
 * "sent <n> quiet".
 */
const PY_SEND_UNBOUND = `
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], int(sys.argv[2])))
n = 0
for i in range(int(sys.argv[3])):
    try:
        s.send(b"x" * (i + 1)); n += 1
    except ConnectionRefusedError:
        print("sent", n, "refused", flush=True); sys.exit(0)
    time.sleep(0.001)
s.settimeout(0.3)
try:
    s.recv(100)
    print("sent", n, "answered", flush=True)
except socket.timeout:
    print("sent", n, "quiet", flush=True)
except ConnectionRefusedError:
    print("sent", n, "refused", flush=True)
`;

// ------------------------------------------------------------------------------ the data plane

interface Plane {
  p: VethNs;
  pool: BufferPool;
  g: Graph;
  net: Netstack;
  ifs: Interfaces;
  itf: Interface;
  drv: AfPacketDriver;
  /** Our own tx capture (Interfaces.capture) and tcpdump's on the namespace end. */
  txPcap: string;
  nsPcap: string;
  tcpdump: { tcpdump: ChildProcess | null };
  /** tcpdump's stderr (its exit summary: captured, received by filter, dropped by kernel). */
  tcpdumpLog: { text: string };
  /** The kernel pinging the host veth end (moved into a second namespace) over the same pair. */
  baseline: PingResult;
  stopped: boolean;
}

const unavailable = unavailableReason();
let planeP: Promise<Plane> | null = null;
/**
 * What setUp made, undone in reverse order by the after hook whatever happened (also when
 * setUp failed half-way); the namespaces and veths are also removed at process exit.
 */
const undo: (() => void | Promise<void>)[] = [];

/** The data plane (set up on first use); the test is skipped, with the reason, where it cannot be. */
async function plane(): Promise<Plane> {
  if (unavailable !== null) skip(`kernel-peer tests: ${unavailable}`);
  if (planeP === null) planeP = setUp();
  return planeP;
}

const disableIpv6 = (dev: string) => `p=/proc/sys/net/ipv6/conf/${dev}/disable_ipv6; [ -e $p ] && echo 1 > $p; true`;

/**
 * Kernel to kernel over the very veth pair our stack will use: the host end goes into a
 * second namespace with BASE_IP, the namespace pings it, and the end comes back (addresses are
 * gone after the move) before af_packet opens it.
 */
async function baselinePing(p: VethNs): Promise<PingResult> {
  const ns2 = `${p.ns}-k`;
  ip('netns', 'add', ns2);
  // Deleting the namespace while the end is in it deletes the pair (createVethNs's exit hook
  // then finds nothing left to do).
  const del = () => {
    spawnSync('ip', ['netns', 'del', ns2], { stdio: 'ignore' });
  };
  process.once('exit', del);
  try {
    ip('link', 'set', p.host, 'netns', ns2);
    ip('netns', 'exec', ns2, 'sh', '-c', disableIpv6(p.host));
    ip('-n', ns2, 'addr', 'add', `${BASE_IP}/24`, 'dev', p.host);
    ip('-n', ns2, 'link', 'set', p.host, 'up');
    const r = await run('ip', ['netns', 'exec', p.ns, 'ping', ...PING_ARGS, BASE_IP], 20000);
    ip('-n', ns2, 'link', 'set', p.host, 'netns', String(process.pid));
    return parsePing(r.out + r.err);
  } finally {
    del();
    process.removeListener('exit', del);
  }
}

async function setUp(): Promise<Plane> {
  const p = createVethNs({ peerCidr: `${NS_IP}/24` });
  undo.push(() => destroyVethNs(p));
  const baseline = await baselinePing(p);
  spawnSync('sh', ['-c', disableIpv6(p.host)]);
  ip('link', 'set', p.host, 'up');
  ip('-n', p.ns, 'neigh', 'flush', 'dev', p.peer);
  const addrs = JSON.parse(ip('-j', 'addr', 'show', 'dev', p.host)) as { addr_info: unknown[] }[];
  if (addrs[0].addr_info.length !== 0)
    throw new Error(`host veth end ${p.host} has addresses: ${JSON.stringify(addrs[0].addr_info)}`);

  const dir = mkdtempSync(join(tmpdir(), 'rg-kpeer-'));
  undo.push(() => rmSync(dir, { recursive: true, force: true }));
  const txPcap = join(dir, 'tx.pcap'),
    nsPcap = join(dir, 'ns.pcap');
  // tcpdump on the namespace end: it sees what we send as received frames (our af_packet tx
  // bypasses the qdisc and the host end's taps). -Z root: it writes into our private directory.
  // --immediate-mode: without it libpcap's ring blocks retire after 1 s, and what the last
  // block held when tcpdump is stopped never reaches the file. Its ring then has one slot per
  // snaplen: -s 2048 (not the default 262144) so a 64-datagram burst fits.
  const tcpdump = spawn(
    'ip',
    [
      'netns',
      'exec',
      p.ns,
      'tcpdump',
      '-i',
      p.peer,
      '-n',
      '--immediate-mode',
      '-s',
      '2048',
      '-B',
      '4096',
      '-U',
      '-Z',
      'root',
      '-w',
      nsPcap,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const tcpdumpLog = { text: '' };
  const td = { tcpdump: tcpdump as ChildProcess | null };
  undo.push(() => stopTcpdump(td));
  await new Promise<void>((res, rej) => {
    const t = setTimeout(() => rej(new Error(`tcpdump did not start: ${tcpdumpLog.text}`)), 5000);
    tcpdump.stderr!.on('data', (d: Buffer) => {
      tcpdumpLog.text += d.toString();
      if (/listening on/.test(tcpdumpLog.text)) {
        clearTimeout(t);
        res();
      }
    });
    tcpdump.on('error', (e) => {
      clearTimeout(t);
      rej(e);
    });
    tcpdump.on('exit', (code) => {
      clearTimeout(t);
      rej(new Error(`tcpdump exited ${code}: ${tcpdumpLog.text}`));
    });
  });

  const pool = createPool({ count: 1024 });
  const g = new Graph({ pool });
  const net = registerL2L4(g);
  const ifs = new Interfaces(g);
  const drv = new AfPacketDriver({ hostIf: p.host, mac: US_MAC });
  const itf = ifs.add(drv, { next: 'ethernet-input' });
  const x: Plane = {
    p,
    pool,
    g,
    net,
    ifs,
    itf,
    drv,
    txPcap,
    nsPcap,
    tcpdump: td,
    tcpdumpLog,
    baseline,
    stopped: false,
  };
  undo.push(() => stopPlane(x));
  net.addInterface({
    index: itf.index,
    name: itf.name,
    mac: drv.mac,
    address: `${US_IP}/24`,
    mtu: drv.mtu,
    output: itf.output.name,
  });
  net.udp.bind(ECHO_PORT, 'udp-echo');
  ifs.capture(itf.name, { tx: txPcap });
  g.start();
  net.announce(itf.index);
  return x;
}

/** Stop the graph and our capture, close the interface; idempotent. */
function stopPlane(x: Plane): void {
  if (x.stopped) return;
  x.stopped = true;
  x.g.stop();
  x.ifs.closeAll(); // stops the capture too
  x.g.close();
}

/** Stop tcpdump (SIGINT: it writes what it has and prints its summary); idempotent. */
async function stopTcpdump(td: { tcpdump: ChildProcess | null }): Promise<void> {
  const t = td.tcpdump;
  if (t === null) return;
  td.tcpdump = null;
  if (t.exitCode !== null || t.signalCode !== null) return;
  const done = new Promise<void>((res) => t.on('close', () => res()));
  t.kill('SIGINT');
  await Promise.race([done, sleep(3000)]);
  if (t.exitCode === null && t.signalCode === null) t.kill('SIGKILL');
}

test.after(async () => {
  while (undo.length > 0) {
    try {
      await (undo.pop() as () => void | Promise<void>)();
    } catch (e) {
      console.error(`kernel-peer cleanup: ${(e as Error).message}`);
    }
  }
});

// ------------------------------------------------------------------------------ tests

test('the kernel pings us: 100 pings, 0 % loss (and the kernel pinging itself over the same veth, for comparison)', async () => {
  const x = await plane();
  const replies = x.g.errorCount('icmp4-echo', 'replies');
  const icmp = await snmp(x.p.ns, 'Icmp');
  const r = await run('ip', ['netns', 'exec', x.p.ns, 'ping', ...PING_ARGS, US_IP], 20000);
  const ours = parsePing(r.out + r.err);
  const rl = await run(
    'ip',
    ['netns', 'exec', x.p.ns, 'ping', '-n', '-c', '20', '-i', '0.01', '-s', '1472', '-W', '1', '-w', '5', US_IP],
    10000,
  );
  const large = parsePing(rl.out);
  const icmpAfter = await snmp(x.p.ns, 'Icmp');
  const b = x.baseline;
  console.log(
    `  ping RTT through our stack (af_packet, 56 B): min/avg/max/mdev = ${ours.min}/${ours.avg}/${ours.max}/${ours.mdev} ms, ${ours.received}/${ours.transmitted} replies`,
  );
  console.log(
    `  ping RTT kernel to kernel over the same veth:  min/avg/max/mdev = ${b.min}/${b.avg}/${b.max}/${b.mdev} ms, ${b.received}/${b.transmitted} replies`,
  );
  console.log(
    `  ping RTT through our stack, 1472 B:            min/avg/max/mdev = ${large.min}/${large.avg}/${large.max}/${large.mdev} ms, ${large.received}/${large.transmitted} replies`,
  );
  assert.is(b.received, 100, `baseline: ${b.text} (${b.loss} loss)`);
  assert.is(ours.transmitted, 100, r.out + r.err);
  assert.is(ours.received, 100, `${ours.loss} loss: ${r.out}${r.err}`);
  assert.is(ours.loss, '0%');
  assert.ok(Number.isFinite(ours.avg), ours.text);
  assert.is(large.received, 20, `1472-byte pings: ${large.loss} loss`);
  // ping (a raw socket as root: it gets a copy before icmp_rcv checks the checksum) counts a
  // reply with a bad checksum as received, silently; the namespace's ICMP counters do not.
  assert.is(icmpAfter.InCsumErrors - icmp.InCsumErrors, 0, 'the namespace counted no ICMP checksum errors');
  assert.is(icmpAfter.InEchoReps - icmp.InEchoReps, 120, 'the namespace kernel took 120 echo replies');
  assert.is(x.g.errorCount('icmp4-echo', 'replies') - replies, 120, 'one reply per echo request');
  assert.is(x.g.errorCount('icmp4-echo', 'bad_checksum'), 0);
});

test("ARP: arping gets our MAC, the kernel neighbor table learns it; we learn the kernel's, and resolve it ourselves", async () => {
  const x = await plane();
  const { p, net, itf, g } = x;
  const peerMac = formatMac(p.peerMac);
  // After the pings the kernel knows us already; start both tables empty.
  ip('-n', p.ns, 'neigh', 'flush', 'dev', p.peer);
  net.neighbors.flush(itf.index);
  assert.is(kernelNeighbor(p.ns, p.peer, US_IP), null, 'kernel entry flushed');
  assert.is(net.neighbors.get(itf.index, NS_IP), null, 'our entry flushed');

  // The kernel resolves us: arping (its own raw socket: it does not touch the neighbor table).
  const a = await run('ip', ['netns', 'exec', p.ns, 'arping', '-c', '3', '-w', '4', '-I', p.peer, US_IP], 10000);
  const replies = [...(a.out + a.err).matchAll(/Unicast reply from ([\d.]+) \[([0-9A-Fa-f:]+)\]/g)];
  assert.is(replies.length, 3, `arping: ${a.out}${a.err}`);
  for (const m of replies) {
    assert.is(m[1], US_IP);
    assert.is(m[2].toLowerCase(), US_MAC, "the reply carries our MAC, not the host veth end's");
  }
  assert.match(a.out, /Received 3 response\(s\)/);
  assert.is(a.code, 0);
  const ours = net.neighbors.get(itf.index, NS_IP);
  assert.is(ours?.mac, peerMac, "we learned the kernel's MAC from the requests addressed to us");
  assert.is(ours?.state, 'reachable');

  // The kernel's own resolution: one ping, then its neighbor table has our MAC.
  await inNs(p.ns, ['ping', '-n', '-q', '-c', '1', '-W', '1', US_IP]);
  const k = kernelNeighbor(p.ns, p.peer, US_IP);
  assert.ok(k, 'the kernel has an entry for us');
  assert.is(k!.lladdr, US_MAC);
  assert.ok(
    k!.state.some((s) => ['REACHABLE', 'STALE', 'DELAY'].includes(s)),
    `state ${k!.state}`,
  );

  // We resolve the kernel: a datagram to it with an empty table is held, we ask, it answers.
  net.neighbors.flush(itf.index);
  ip('-n', p.ns, 'neigh', 'flush', 'dev', p.peer);
  const req = g.errorCount('arp-input', 'requests_sent'),
    rep = g.errorCount('arp-input', 'reply_received');
  const sink = pyInNsAsync(p.ns, PY_RECV_UDP, [NS_IP, '9100', '1', '2']);
  await sink.ready;
  assert.ok(net.udp.sendTo(Uint8Array.from([1, 2, 3]), NS_IP, 9100, 9101));
  const got = await sink.done;
  assert.equal(got, [`${US_IP} 010203`], 'the held datagram went out after the reply');
  assert.is(g.errorCount('arp-input', 'requests_sent') - req, 1, 'one ARP request');
  assert.is(g.errorCount('arp-input', 'reply_received') - rep, 1, 'one reply');
  assert.is(net.neighbors.get(itf.index, NS_IP)?.mac, peerMac);
  assert.is(kernelNeighbor(p.ns, p.peer, US_IP)?.lladdr, US_MAC, 'the kernel learned us from our request');
});

test('UDP echo: a kernel socket gets every datagram back byte-identical (0..1472 bytes, one by one and in a burst)', async () => {
  const x = await plane();
  const sizes = [0, 1, 2, 3, 7, 8, 9, 100, 101, 255, 256, 511, 512, 1000, 1024, 1400, 1471, 1472];
  for (let k = 0; k < 60; k++) sizes.push((k * 379 + 11) % 1473);
  const burst = 64;
  const before = await snmp(x.p.ns);
  const partial = x.drv.stats().rxCsumPartial;
  const out = (
    await inNs(
      x.p.ns,
      ['python3', '-c', PY_ECHO_CLIENT, US_IP, String(ECHO_PORT), sizes.join(','), String(burst)],
      30000,
    )
  )
    .trim()
    .split('\n');
  const after = await snmp(x.p.ns);
  const single = out.slice(0, -1);
  assert.equal(
    single,
    sizes.map((n) => `ok ${n}`),
    'each datagram back, byte-identical, from our address and port 7',
  );
  assert.is(out[out.length - 1], `burst ${burst} ${burst}`, 'every burst datagram back byte-identical');
  assert.is(after.InDatagrams - before.InDatagrams, sizes.length + burst, 'the kernel accepted every echo');
  assert.is(after.InCsumErrors, 0, 'no UDP checksum errors in the namespace');
  assert.is(after.InErrors - before.InErrors, 0);
  assert.ok(
    x.drv.stats().rxCsumPartial - partial >= sizes.length + burst,
    "the kernel's datagrams came checksum-partial (L4_CKSUM_OK path)",
  );
  assert.is(x.g.errorCount('udp4-input', 'bad_checksum'), 0);
});

test('we send to a kernel UDP socket: it receives the exact payloads (the kernel checked our checksums)', async () => {
  const x = await plane();
  const payloads: Uint8Array[] = [];
  for (const n of [0, 1, 2, 100, 555, 1471, 1472])
    payloads.push(Uint8Array.from({ length: n }, (_, i) => (i * 31 + n) & 0xff));
  for (let k = 0; k < 33; k++)
    payloads.push(Uint8Array.from({ length: (k * 97) % 1473 }, (_, i) => (i ^ (k * 13)) & 0xff));
  const before = await snmp(x.p.ns);
  const sink = pyInNsAsync(x.p.ns, PY_RECV_UDP, [NS_IP, '9200', String(payloads.length), '2']);
  await sink.ready;
  for (const pl of payloads) assert.ok(x.net.udp.sendTo(pl, NS_IP, 9200, 5555), 'taken');
  const got = await sink.done;
  const after = await snmp(x.p.ns);
  assert.equal(
    got,
    payloads.map((pl) => `${US_IP} ${Buffer.from(pl).toString('hex')}`),
  );
  assert.is(after.InDatagrams - before.InDatagrams, payloads.length);
  assert.is(after.InCsumErrors, 0, 'Udp InCsumErrors stays 0');
  assert.is(after.InErrors - before.InErrors, 0);
  // nstat reads the same counters (and keeps its own history: -a shows absolute values).
  const nstat = await inNs(x.p.ns, ['nstat', '-a', '-s', '-z', 'UdpInCsumErrors']);
  assert.match(nstat, /UdpInCsumErrors\s+0\s/);
});

test('datagrams to a port nobody bound are dropped and counted exactly ("no_listener"), no ICMP unreachable', async () => {
  const x = await plane();
  const N = 25;
  const before = x.g.errorCount('udp4-input', 'no_listener');
  const drops = x.g.nodeCounters('error-drop').vectors;
  const out = (await inNs(x.p.ns, ['python3', '-c', PY_SEND_UNBOUND, US_IP, '9', String(N)])).trim();
  assert.is(out, `sent ${N} quiet`, 'all sent, no port unreachable came back');
  const counted = () => x.g.errorCount('udp4-input', 'no_listener') - before;
  for (let t = 0; t < 100 && counted() < N; t++) await sleep(10);
  await sleep(50); // nothing more arrives
  assert.is(counted(), N, 'exactly the number sent');
  assert.ok(x.g.nodeCounters('error-drop').vectors - drops >= 1, 'through error-drop');
});

/** The protocols tshark dissects here: the layers we build. Payloads go to "data". */
const DISSECT = ['frame', 'eth', 'ethertype', 'arp', 'ip', 'udp', 'icmp', 'data'];
let disableArgs: string[] | null = null;

/**
 * Every other protocol of this tshark disabled (tshark 4.0 has no "--disable-protocol ALL"):
 * our payloads are random bytes, which port-based dissectors (WAP-WSP on 9200, ...) would
 * report as malformed application messages, saying nothing about our headers.
 */
function tsharkDisableArgs(): string[] {
  if (disableArgs !== null) return disableArgs;
  const r = spawnSync('tshark', ['-G', 'protocols'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`tshark -G protocols exited ${r.status}: ${r.stderr}`);
  const names = r.stdout
    .split('\n')
    .map((l) => l.split('\t')[2])
    .filter((n) => n !== undefined && n.length > 0);
  for (const p of DISSECT) if (!names.includes(p)) throw new Error(`tshark has no protocol "${p}"`);
  disableArgs = names
    .filter((n) => !DISSECT.includes(n) && !n.startsWith('_ws'))
    .flatMap((n) => ['--disable-protocol', n]);
  return disableArgs;
}

/** tshark's verdict on a capture: fields per frame, tab-separated. */
function tshark(file: string, filter?: string): string[][] {
  const fields = [
    'frame.number',
    'eth.src',
    'eth.type',
    'ip.checksum.status',
    'udp.checksum.status',
    'icmp.checksum.status',
    'icmp.type',
    '_ws.expert.severity',
    '_ws.expert.group',
    '_ws.expert.message',
  ];
  const args = [
    '-r',
    file,
    '-n',
    ...tsharkDisableArgs(),
    '-o',
    'ip.check_checksum:TRUE',
    '-o',
    'udp.check_checksum:TRUE',
    '-T',
    'fields',
    '-E',
    'separator=/t',
    '-E',
    'occurrence=a',
    '-E',
    'aggregator=|',
  ];
  if (filter) args.push('-Y', filter);
  for (const f of fields) args.push('-e', f);
  const r = spawnSync('tshark', args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`tshark -r ${file} exited ${r.status}: ${r.stderr}`);
  return r.stdout
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => l.split('\t'));
}

// tshark field values: checksum status 0 = Bad, 1 = Good, 2 = Unverified; expert severity and
// group as epan/proto.h numbers.
const GOOD = '1';
const PI_WARN = 0x00600000;
const PI_CHECKSUM = 0x01000000,
  PI_MALFORMED = 0x07000000;

interface Verdict {
  frames: number;
  ip: number;
  udp: number;
  icmp: number;
  arp: number;
  bad: string[];
}

function judge(rows: string[][]): Verdict {
  const v: Verdict = { frames: rows.length, ip: 0, udp: 0, icmp: 0, arp: 0, bad: [] };
  for (const r of rows) {
    const [no, , type, ipSt, udpSt, icmpSt, , sev, grp, msg] = r;
    if (type === '0x0806') v.arp++;
    else if (type === '0x0800') {
      v.ip++;
      if (ipSt !== GOOD) v.bad.push(`frame ${no}: IPv4 checksum status ${ipSt}`);
      if (udpSt !== '') {
        v.udp++;
        if (udpSt !== GOOD) v.bad.push(`frame ${no}: UDP checksum status ${udpSt}`);
      }
      if (icmpSt !== '') {
        v.icmp++;
        if (icmpSt !== GOOD) v.bad.push(`frame ${no}: ICMP checksum status ${icmpSt}`);
      }
    } else v.bad.push(`frame ${no}: EtherType ${type}`);
    const sevs = sev ? sev.split('|').map(Number) : [],
      grps = grp ? grp.split('|').map(Number) : [];
    const msgs = msg ? msg.split('|') : [];
    sevs.forEach((s, i) => {
      const g = grps[i];
      if (s >= PI_WARN || g === PI_CHECKSUM || g === PI_MALFORMED)
        v.bad.push(`frame ${no}: expert ${s.toString(16)}/${(g ?? 0).toString(16)} ${msgs[i] ?? ''}`);
    });
  }
  return v;
}

test('independent decoding: tshark finds every IPv4/UDP/ICMP checksum we sent Good, no expert warnings or errors', async () => {
  const x = await plane();
  // Our capture closes with the interface; then tcpdump writes what it has and exits.
  stopPlane(x);
  await sleep(100);
  await stopTcpdump(x.tcpdump);
  const dropped = /(\d+) packets? dropped by kernel/.exec(x.tcpdumpLog.text);
  assert.ok(dropped, `tcpdump's summary: ${x.tcpdumpLog.text}`);
  assert.is(dropped![1], '0', 'tcpdump lost nothing');

  const ours = judge(tshark(x.txPcap));
  const seen = judge(tshark(x.nsPcap, `eth.src == ${US_MAC}`));
  const kernel = tshark(x.nsPcap, `eth.src != ${US_MAC} && udp`);
  const kernelBad = kernel.filter((r) => r[4] !== GOOD).length;
  const say = (v: Verdict) =>
    `${v.frames} frames: ${v.arp} ARP, ${v.ip} IPv4 (${v.icmp} ICMP, ${v.udp} UDP); ${v.bad.length ? `${v.bad.length} problems` : 'all checksums Good, no expert warnings'}`;
  console.log(`  tshark, our tx capture (Interfaces.capture): ${say(ours)}`);
  console.log(`  tshark, tcpdump on the namespace end, frames from us: ${say(seen)}`);
  console.log(
    `  (the kernel's own UDP in that capture: ${kernel.length} datagrams, ${kernelBad} not Good: checksum-partial, as sent over veth)`,
  );
  assert.equal(ours.bad, [], 'our tx capture');
  assert.equal(seen.bad, [], 'what the namespace received from us');
  // The earlier tests sent 120 echo replies (plus 1 for the ARP test's ping) and
  // 78 + 64 echoes, 1 + 40 datagrams; more when a test ran twice is fine, fewer is not.
  assert.ok(ours.icmp >= 121, `ICMP replies in our capture: ${ours.icmp}`);
  assert.ok(ours.udp >= 78 + 64 + 41, `UDP datagrams in our capture: ${ours.udp}`);
  assert.ok(ours.arp >= 1, 'ARP in our capture');
  assert.is(seen.ip, ours.ip, 'every IPv4 packet we sent arrived in the namespace');
  assert.is(seen.icmp, ours.icmp);
  assert.is(seen.udp, ours.udp);
});

test('teardown: graph stopped, interface closed, no buffer leaked', async () => {
  const x = await plane();
  stopPlane(x);
  assert.not.ok(x.g.isRunning);
  assert.is(x.pool.available(), x.pool.count, 'every buffer back in the pool');
  const c = x.itf.counters();
  assert.is(c.txErrors, 0, 'no tx errors');
  assert.is(c.txDrops, 0, 'no tx refused');
});

test.run();
