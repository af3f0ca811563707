/**
 * native/tools/ecn-switch (issue 32): the marking switch bench/incast.ts puts in front of its tbf
 * bottleneck, since this kernel has no marking qdisc. Three namespaces: a sender (ea), the switch
 * (esw, its two ports a1 and b1) and a receiver (eb). Kernel UDP sockets send bursts with a chosen
 * ECN field (IP_TOS) and the receiver reads each datagram's field (IP_RECVTOS): ECT frames that
 * find more than K bytes in the switch's virtual queue arrive CE, the others as sent, and all of
 * them arrive (the kernel drops an IPv4 header whose checksum is wrong, so the rewritten checksum
 * is checked by every datagram received). Not-ECT frames are never marked; the reverse direction
 * never; ping crosses both ways (ARP, ICMP); short and malformed IPv4 frames cross without harm;
 * bad arguments are refused by name.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { ECN_SWITCH, EcnSwitch, type SwitchCounters } from '../bench/ecn-switch.ts';
import { netnsUnavailable, PY_SEND_FRAMES } from './helpers-netns.ts';

const SWITCH = ECN_SWITCH;
const tag = process.pid.toString(36);
const NS = { a: `ea${tag}`, b: `eb${tag}`, sw: `esw${tag}` };
const IP_A = '10.99.0.1',
  IP_B = '10.99.0.2';

/** Sends argv[3] datagrams of 1000 bytes with IP_TOS argv[2] to argv[1]:9000, back to back. */
const PY_SEND = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(sys.argv[2]))
for i in range(int(sys.argv[3])):
    s.sendto(i.to_bytes(4, "big") + b"x" * 996, (sys.argv[1], 9000))
`;

/** Prints "ready", then after argv[1] datagrams (or 3 s of silence) each one's ECN field in order. */
const PY_RECV = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s.bind(("0.0.0.0", 9000)); s.settimeout(3)
print("ready", flush=True)
got = {}
while len(got) < int(sys.argv[1]):
    try:
        data, anc, _, _ = s.recvmsg(2000, 64)
    except socket.timeout:
        break
    tos = [a[2][0] for a in anc if a[0] == socket.IPPROTO_IP and a[1] == socket.IP_TOS]
    got[int.from_bytes(data[:4], "big")] = tos[0] & 3 if tos else -1
print(" ".join(str(got[i]) for i in sorted(got)), flush=True)
`;

function sh(...cmd: string[]): void {
  const r = spawnSync(cmd[0], cmd.slice(1), { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd.join(' ')}: ${r.stderr}`);
}
const inNs = (ns: string, ...cmd: string[]) => sh('ip', 'netns', 'exec', ns, ...cmd);

function unavailable(): string | null {
  const why = netnsUnavailable();
  if (why !== null) return why;
  if (!existsSync(SWITCH)) return `${SWITCH} was not built (npm run build)`;
  return null;
}

function topology(): void {
  teardown();
  for (const n of Object.values(NS)) sh('ip', 'netns', 'add', n);
  sh('ip', 'link', 'add', 'a0', 'netns', NS.a, 'type', 'veth', 'peer', 'name', 'a1', 'netns', NS.sw);
  sh('ip', 'link', 'add', 'b0', 'netns', NS.b, 'type', 'veth', 'peer', 'name', 'b1', 'netns', NS.sw);
  for (const [ns, dev, addr] of [
    [NS.a, 'a0', IP_A],
    [NS.b, 'b0', IP_B],
  ]) {
    inNs(ns, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1');
    inNs(ns, 'ip', 'addr', 'add', `${addr}/24`, 'dev', dev);
    inNs(ns, 'ip', 'link', 'set', dev, 'up');
  }
  inNs(NS.sw, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1');
  for (const d of ['a1', 'b1']) inNs(NS.sw, 'ip', 'link', 'set', d, 'up');
}

/** Switches started and not yet stopped (a failed test's one is killed by teardown). */
const running = new Set<ChildProcess>();

function teardown(): void {
  for (const p of running) p.kill('SIGKILL');
  running.clear();
  for (const n of Object.values(NS)) spawnSync('ip', ['netns', 'del', n]);
}

/** The switch between a1 and b1 at `rate` bit/s with threshold `k` bytes, once it says ready. */
async function startSwitch(rate: number, k: number): Promise<EcnSwitch> {
  const sw = new EcnSwitch(['a1', 'b1', String(rate), String(k)], NS.sw);
  running.add(sw.p);
  await sw.ready();
  return sw;
}

/** The switch's counters at exit (SIGTERM). */
async function stopSwitch(sw: EcnSwitch): Promise<SwitchCounters> {
  running.delete(sw.p);
  return sw.stop();
}

/** `n` datagrams from ea to eb with IP_TOS `tos`; each one's ECN field as received, in order. */
async function burst(tos: number, n: number, from = NS.a, to = NS.b, dst = IP_B): Promise<number[]> {
  const rx = spawn('ip', ['netns', 'exec', to, 'python3', '-c', PY_RECV, String(n)]);
  const lines = createInterface({ input: rx.stdout! })[Symbol.asyncIterator]();
  assert.is((await lines.next()).value, 'ready');
  inNs(from, 'python3', '-c', PY_SEND, dst, String(tos), String(n));
  const out = (await lines.next()).value as string;
  return out.trim() === '' ? [] : out.trim().split(' ').map(Number);
}

test('ECT frames that find the virtual queue above K arrive CE, with a valid header checksum; not-ECT never; all delivered', async () => {
  const why = unavailable();
  if (why !== null) skip(why);
  topology();
  try {
    // 100 kbit/s drained (a 1042-byte frame in 88 ms): a burst fills the queue; K = 3000 bytes.
    let sw = await startSwitch(1e5, 3000);
    inNs(NS.a, 'ping', '-c', '1', '-W', '2', IP_B); // ARP and ICMP, both ways
    await new Promise((r) => setTimeout(r, 300)); // the ping's bytes drained
    const ect0 = await burst(2, 40);
    assert.is(ect0.length, 40, 'every ECT(0) datagram arrived (its rewritten IPv4 checksum is right)');
    const first = ect0.indexOf(3);
    assert.ok(first >= 2 && first <= 4, `the first frames found the queue below 3000 bytes: ${ect0.join(' ')}`);
    assert.ok(
      ect0.slice(0, first).every((x) => x === 2) && ect0.slice(first).every((x) => x === 3),
      `ECT(0) until the queue passed K, CE after: ${ect0.join(' ')}`,
    );
    let c = await stopSwitch(sw);
    assert.is(c.marked, ect0.filter((x) => x === 3).length, 'the switch counted the marks the receiver saw');
    sw = await startSwitch(1e5, 3000); // an empty queue again
    const ect1 = await burst(1, 20);
    assert.is(ect1.length, 20);
    assert.ok(ect1.includes(3) && ect1[0] === 1, `ECT(1) is marked too: ${ect1.join(' ')}`);
    const plain = await burst(0, 30);
    assert.equal(plain, new Array(30).fill(0), 'a not-ECT datagram is never marked, and each one arrives');
    // The reverse direction (b1 -> a1) is not marked, whatever the queue.
    const back = await burst(2, 20, NS.b, NS.a, IP_A);
    assert.equal(back, new Array(20).fill(2), 'frames from B to A are never marked');
    c = await stopSwitch(sw);
    assert.is(c.marked, ect1.filter((x) => x === 3).length);
    assert.ok(c.notEct >= 30, `not-ECT frames counted: ${JSON.stringify(c)}`);
    assert.ok(c.ab.frames >= 50 && c.ba.frames >= 20);
    assert.is(c.ab.dropped, 0);
  } finally {
    teardown();
  }
});

test('a virtual rate above the offered load marks nothing', async () => {
  const why = unavailable();
  if (why !== null) skip(why);
  topology();
  try {
    const sw = await startSwitch(1e9, 1e6);
    inNs(NS.a, 'ping', '-c', '1', '-W', '2', IP_B);
    const got = await burst(2, 40);
    assert.equal(got, new Array(40).fill(2));
    const c = await stopSwitch(sw);
    assert.is(c.marked, 0);
    assert.is(c.ect, 40);
  } finally {
    teardown();
  }
});

test('short and malformed IPv4 frames cross the switch unharmed, and it keeps marking after them', async () => {
  const why = unavailable();
  if (why !== null) skip(why);
  topology();
  try {
    const sw = await startSwitch(1e4, 0); // a 1042-byte frame drains in 0.9 s
    const mac = 'ffffffffffff' + '020000000001';
    const frames = [
      `${mac}0800`, // an Ethernet header and nothing
      `${mac}080045`, // one byte of IPv4
      `${mac}0800${'46'}02${'00'.repeat(18)}`, // IHL 6 (24 bytes) in a 20-byte header, ECT(0)
      `${mac}0800${'4f'}02${'00'.repeat(30)}`, // IHL 15 (60 bytes) in 32
      `${mac}0800${'65'}02${'00'.repeat(18)}`, // version 6 in an IPv4 EtherType
    ];
    const sent = spawnSync('ip', ['netns', 'exec', NS.a, 'python3', '-c', PY_SEND_FRAMES, 'a0'], {
      input: frames.join('\n') + '\n',
      encoding: 'utf8',
    });
    assert.is(sent.stdout.trim(), String(frames.length), sent.stderr);
    inNs(NS.a, 'ping', '-c', '1', '-W', '2', IP_B);
    const got = await burst(2, 10);
    // K = 0: each one finds the bytes of the one before it (the first may find the queue drained).
    assert.equal(got.slice(1), new Array(9).fill(3), `ECT datagrams marked: ${got.join(' ')}`);
    const c = await stopSwitch(sw);
    assert.ok(c.ab.frames >= frames.length + 11, JSON.stringify(c));
    assert.is(c.marked, got.filter((x) => x === 3).length, 'only the well-formed ECT datagrams were marked');
    assert.is(c.ect, 10, 'the malformed frames were not taken for ECT IPv4');
  } finally {
    teardown();
  }
});

test('the switch exits (1) when an interface it serves disappears, and says which', async () => {
  const why = unavailable();
  if (why !== null) skip(why);
  topology();
  try {
    const sw = await startSwitch(1e6, 1000);
    const exited = new Promise<number | null>((r) => sw.p.once('close', r));
    spawnSync('ip', ['netns', 'del', NS.b]); // b0 and its peer b1 go with it
    const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 5000))]);
    assert.is(code, 1, `exit code: ${String(code)}`);
    assert.match(sw.err, /ecn-switch: interface b1 is gone/);
  } finally {
    teardown();
  }
});

test('bad arguments are refused by name', () => {
  if (!existsSync(SWITCH)) skip(`${SWITCH} was not built (npm run build)`);
  const run = (...args: string[]) => spawnSync(SWITCH, args, { encoding: 'utf8' });
  const usage = run('a1');
  assert.is(usage.status, 2);
  assert.match(usage.stderr, /usage: ecn-switch A B RATE_BPS K_BYTES \[GAMMA\]/);
  for (const [args, what] of [
    [['x', 'y', 'fast', '100'], /RATE_BPS must be a number in \[1000, 1e\+12\], got "fast"/],
    [['x', 'y', '1e6', '-1'], /K_BYTES must be a number in \[0, 1e\+09\], got "-1"/],
    [['x', 'y', '1e6', '100', '2'], /GAMMA must be a number in \[0.01, 1\], got "2"/],
  ] as const) {
    const r = run(...args);
    assert.is(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, what);
  }
  if (netnsUnavailable() === null) {
    const r = run('no-such-if0', 'lo', '1e6', '100');
    assert.is(r.status, 1);
    assert.match(r.stderr, /no interface "no-such-if0"/);
  }
});

test.run();
