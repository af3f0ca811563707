// The af_packet driver against the Linux kernel: a veth pair with one end in a network namespace
// this file creates (root, iproute2, python3). Without them each test skips with the reason
// (and fails under CI=true).
// Run: npm test -- af-packet
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readFileSync, readlinkSync } from 'node:fs';
import { AfPacketDriver } from '../drivers/af-packet.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { BufferFlag, type BufferPool } from '../graph/buffer-pool.ts';
import { Graph, createPool, type Frame, type NodeRuntime } from '../graph/index.ts';
import { memPool, sleep } from './helpers.ts';
import {
  PY_RECV_FRAMES,
  PY_RECV_UDP,
  PY_SEND_FRAMES,
  PY_TAP_COUNT,
  createVethNs,
  destroyVethNs,
  ip,
  linkFlags,
  linkStats,
  netnsUnavailable,
  pyAsync,
  pyInNs,
  pyInNsAsync,
  type VethNs,
} from './helpers-netns.ts';

const unavailable = netnsUnavailable();
let P: VethNs | null = null;

test.before(() => {
  if (unavailable === null) P = createVethNs({ peerCidr: '10.77.1.2/24' });
});
test.after(() => {
  if (P) destroyVethNs(P);
});

/** The shared pair; the test is skipped, with the reason, where none can be made. */
function pair(): VethNs {
  if (unavailable !== null) skip(`af_packet kernel tests: ${unavailable}`);
  if (P === null) throw new Error('the veth pair was not set up');
  return P;
}

// ------------------------------------------------------------------------------ frames

const TYPE_TEST = 0x88b5; // IEEE 802 local experimental EtherType
const hex = (u: Uint8Array) => Buffer.from(u).toString('hex');

function eth(dst: Uint8Array, src: Uint8Array, type: number, payload: Uint8Array): Uint8Array {
  const f = new Uint8Array(14 + payload.length);
  f.set(dst, 0);
  f.set(src, 6);
  f[12] = type >> 8;
  f[13] = type & 0xff;
  f.set(payload, 14);
  return f;
}

/** A test frame of `len` bytes: EtherType 0x88b5, then a 4-byte sequence number, then a pattern. */
function testFrame(dst: Uint8Array, src: Uint8Array, seq: number, len: number): Uint8Array {
  const p = new Uint8Array(len - 14);
  new DataView(p.buffer).setUint32(0, seq);
  for (let i = 4; i < p.length; i++) p[i] = (seq * 7 + i) & 0xff;
  return eth(dst, src, TYPE_TEST, p);
}

function csum16(b: Uint8Array, sum = 0): number {
  for (let i = 0; i + 1 < b.length; i += 2) sum += (b[i] << 8) | b[i + 1];
  if (b.length & 1) sum += b[b.length - 1] << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

const ip4 = (s: string) => Uint8Array.from(s.split('.').map(Number));

function udpFrame(
  dstMac: Uint8Array,
  srcMac: Uint8Array,
  src: string,
  dst: string,
  sport: number,
  dport: number,
  data: Uint8Array,
): Uint8Array {
  const udp = new Uint8Array(8 + data.length);
  const uv = new DataView(udp.buffer);
  uv.setUint16(0, sport);
  uv.setUint16(2, dport);
  uv.setUint16(4, udp.length);
  udp.set(data, 8);
  const pseudo = new Uint8Array(12);
  pseudo.set(ip4(src), 0);
  pseudo.set(ip4(dst), 4);
  pseudo[9] = 17;
  new DataView(pseudo.buffer).setUint16(10, udp.length);
  const c = 0xffff - csum16(udp, csum16(pseudo));
  uv.setUint16(6, c === 0 ? 0xffff : c);
  const iph = new Uint8Array(20);
  const iv = new DataView(iph.buffer);
  iph[0] = 0x45;
  iv.setUint16(2, 20 + udp.length);
  iv.setUint16(6, 0x4000);
  iph[8] = 64;
  iph[9] = 17;
  iph.set(ip4(src), 12);
  iph.set(ip4(dst), 16);
  iv.setUint16(10, 0xffff - csum16(iph));
  const pkt = new Uint8Array(20 + udp.length);
  pkt.set(iph, 0);
  pkt.set(udp, 20);
  return eth(dstMac, srcMac, 0x0800, pkt);
}

function arpRequest(srcMac: Uint8Array, srcIp: string, targetIp: string): Uint8Array {
  const a = new Uint8Array(28);
  const v = new DataView(a.buffer);
  v.setUint16(0, 1); // Ethernet
  v.setUint16(2, 0x0800);
  a[4] = 6;
  a[5] = 4;
  v.setUint16(6, 1); // request
  a.set(srcMac, 8);
  a.set(ip4(srcIp), 14);
  a.set(ip4(targetIp), 24);
  return eth(new Uint8Array(6).fill(0xff), srcMac, 0x0806, a);
}

/** Poll rxBurst for up to `ms`, keeping the frames `want` accepts (freeing every buffer). */
async function receive(
  d: AfPacketDriver,
  pool: BufferPool,
  ms: number,
  want: (b: Uint8Array) => boolean,
  count: number,
  onPacket?: (bi: number) => void,
): Promise<Uint8Array[]> {
  const out = new Uint32Array(256);
  const got: Uint8Array[] = [];
  const end = performance.now() + ms;
  while (got.length < count && performance.now() < end) {
    const n = d.rxBurst(0, out, out.length);
    for (let i = 0; i < n; i++) {
      const b = pool.packetBytes(out[i]);
      if (want(b)) {
        got.push(b);
        if (onPacket) onPacket(out[i]);
      }
    }
    if (n > 0) pool.free(out, 0, n);
    else await sleep(1);
  }
  return got;
}

const isTest = (b: Uint8Array) => b.length >= 14 && ((b[12] << 8) | b[13]) === TYPE_TEST;

/** Frames into fresh pool buffers (chained when longer than the pool's data size). */
function toPool(pool: BufferPool, frames: Uint8Array[]): Uint32Array {
  const v = new Uint32Array(frames.length);
  frames.forEach((f, i) => {
    v[i] = pool.writePacket(f, 0, f.length);
    assert.ok(v[i] !== 0xffffffff, 'pool has room');
  });
  return v;
}

/** The socket inode behind fd, or null when the fd is not open (or not a socket). */
function socketInode(fd: number): string | null {
  try {
    const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
    return m ? m[1] : null;
  } catch {
    return null;
  }
}

/** /proc/net/packet rows: inode -> {proto, ifindex}. */
function packetSockets(): Map<string, { proto: string; ifindex: number }> {
  const m = new Map<string, { proto: string; ifindex: number }>();
  for (const line of readFileSync('/proc/net/packet', 'utf8').split('\n').slice(1)) {
    const c = line.trim().split(/\s+/);
    if (c.length >= 9) m.set(c[8], { proto: c[3], ifindex: Number(c[4]) });
  }
  return m;
}

/** The kernel's promiscuity count of an interface (`ip -d link`). */
function promiscuity(dev: string): number {
  return (JSON.parse(ip('-j', '-d', 'link', 'show', 'dev', dev)) as { promiscuity: number }[])[0].promiscuity;
}

// ------------------------------------------------------------------------------ tests

test('open: name host-<if>, MAC and MTU from the kernel, link up, the fd is a bound packet socket; close is idempotent', () => {
  const p = pair();
  const pool = createPool({ count: 256 });
  const d = new AfPacketDriver({ hostIf: p.host });
  assert.is(d.kind, 'af_packet');
  assert.is(d.name, `host-${p.host}`);
  assert.is(hex(d.mac), hex(p.hostMac), 'MAC read from the kernel (SIOCGIFHWADDR)');
  assert.is(d.mtu, 1500);
  assert.is(d.rxWaitFd(0), -1, 'no fd before open');
  d.open(pool);
  try {
    assert.ok(d.linkUp(), 'veth with both ends up has carrier');
    assert.not.ok(d.broughtUp);
    const fd = d.rxWaitFd(0);
    const inode = socketInode(fd);
    assert.ok(inode !== null, `fd ${fd} is a socket`);
    const row = packetSockets().get(inode!);
    assert.ok(row, 'listed in /proc/net/packet');
    assert.is(row!.proto, '0003', 'bound to ETH_P_ALL');
    assert.is(row!.ifindex, d.hostInfo.ifindex, 'bound to the interface');
    assert.is(d.socket!.txMode, 'sendmmsg');
    assert.equal(d.socket!.warnings, []);
    d.close();
    d.close();
    assert.is(d.rxWaitFd(0), -1);
    assert.not.ok(d.linkUp());
    assert.not.ok(packetSockets().has(inode!), 'socket closed');
    assert.is(d.rxBurst(0, new Uint32Array(4), 4), 0, 'rx after close: nothing');
  } finally {
    d.close();
  }
  assert.is(promiscuity(p.host), 0, 'not promiscuous unless asked');
  const pr = new AfPacketDriver({ hostIf: p.host, promisc: true });
  pr.open(pool);
  assert.is(promiscuity(p.host), 1, 'promisc: true adds a PACKET_MR_PROMISC membership');
  pr.close();
  assert.is(promiscuity(p.host), 0, 'and close() drops it');
  const named = new AfPacketDriver({ hostIf: p.host, name: 'uplink', mac: '02:00:00:00:00:99', mtu: 1400 });
  assert.is(named.name, 'uplink');
  assert.is(hex(named.mac), '020000000099');
  assert.is(named.mtu, 1400);
  assert.is(pool.available(), pool.count);
});

test("mtu: none given, the kernel interface's (up to a ring block); linkMtu follows the kernel's down, and back up to the MTU opened with", () => {
  pair();
  const q = createVethNs();
  const pool = memPool(256);
  try {
    ip('link', 'set', q.host, 'mtu', '9000');
    const d = new AfPacketDriver({ hostIf: q.host });
    assert.is(d.mtu, 9000, "the kernel's MTU");
    assert.is(d.linkMtu(), null, 'not open: null');
    d.open(pool);
    try {
      assert.is(d.linkMtu(), 9000);
      ip('link', 'set', q.host, 'mtu', '4000');
      assert.is(d.linkMtu(), 4000, 'lowered by the kernel: followed');
      ip('link', 'set', q.host, 'mtu', '12000');
      assert.is(d.linkMtu(), 9000, 'raised past what the socket was opened for: capped');
    } finally {
      d.close();
    }
    assert.is(d.linkMtu(), null, 'closed: null');
    // A kernel MTU larger than a ring block holds: the block's worth, not a refusal.
    ip('link', 'set', q.host, 'mtu', '65535');
    const big = new AfPacketDriver({ hostIf: q.host, blockSize: 16384, rxRing: 'v3' });
    assert.is(big.mtu, 16384 - 18 - 130);
    // Given: pinned at open, still lowered with the kernel's.
    ip('link', 'set', q.host, 'mtu', '9000');
    const pinned = new AfPacketDriver({ hostIf: q.host, mtu: 1500 });
    pinned.open(pool);
    try {
      assert.is(pinned.linkMtu(), 1500);
      ip('link', 'set', q.host, 'mtu', '1280');
      assert.is(pinned.linkMtu(), 1280);
    } finally {
      pinned.close();
    }
  } finally {
    destroyVethNs(q);
  }
  assert.is(pool.available(), pool.count);
});

test('errors: no such interface (ENODEV, named), not Ethernet, MTU above the kernel, bad options, opened twice', () => {
  const p = pair();
  try {
    new AfPacketDriver({ hostIf: 'rgnoexist0' });
    assert.unreachable('should throw');
  } catch (e) {
    const err = e as Error & { code?: string };
    assert.is(err.code, 'ENODEV');
    assert.match(err.message, /no such kernel interface "rgnoexist0"/);
  }
  try {
    new AfPacketDriver({ hostIf: 'lo' });
    assert.unreachable('should throw');
  } catch (e) {
    assert.is((e as { code?: string }).code, 'EPROTONOSUPPORT');
    assert.match((e as Error).message, /not Ethernet/);
  }
  assert.throws(
    () => new AfPacketDriver({ hostIf: p.host, mtu: 9000 }),
    /larger than kernel interface .*MTU 1500 .*ip link set dev/,
  );
  assert.throws(() => new AfPacketDriver({ hostIf: p.host, blockSize: 3000 }), /blockSize must be a power of 2/);
  assert.throws(
    () => new AfPacketDriver({ hostIf: p.host, blockSize: 1024 }),
    /blockSize must be a power of 2 in 4096/,
  );
  assert.throws(() => new AfPacketDriver({ hostIf: p.host, txMode: 'xdp' as 'ring' }), /txMode/);
  assert.throws(() => new AfPacketDriver({ hostIf: 'a-name-too-long-for-linux' }), /1 to 15 characters/);
  const d = new AfPacketDriver({ hostIf: p.host });
  const pool = memPool(64);
  d.open(pool);
  try {
    assert.throws(() => d.open(pool), /already open/);
  } finally {
    d.close();
  }
  assert.throws(() => d.open(pool), /already closed/);
});

test('errors: without CAP_NET_RAW open() fails with EPERM and says so (child process without the capability)', () => {
  const p = pair();
  const root = new URL('..', import.meta.url).pathname;
  const code = `
    const { AfPacketDriver } = await import(${JSON.stringify(root + 'drivers/af-packet.ts')});
    const { memPool } = await import(${JSON.stringify(root + 'test/helpers.ts')});
    const d = new AfPacketDriver({ hostIf: ${JSON.stringify(p.host)} });
    try { d.open(memPool(16)); console.log(JSON.stringify({ opened: true })); }
    catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message, mac: Buffer.from(d.mac).toString('hex') })); }`;
  const node = [process.execPath, '--import', 'tsx', '--input-type=module', '-e', code];
  // Root without CAP_NET_RAW (setpriv, util-linux: reads the sources wherever they are), or
  // else the unprivileged user nobody.
  const setpriv = spawnSync('sh', ['-c', 'command -v setpriv']).status === 0;
  const r = setpriv
    ? spawnSync('setpriv', ['--bounding-set', '-net_raw', '--', ...node], { cwd: root, encoding: 'utf8' })
    : spawnSync(node[0], node.slice(1), { uid: 65534, gid: 65534, cwd: root, encoding: 'utf8' });
  if (!setpriv && r.status !== 0 && /EACCES|permission denied/i.test(r.stderr)) {
    skip(`no setpriv, and user nobody cannot read the sources here: ${r.stderr.trim().split('\n')[0]}`);
  }
  assert.is(r.status, 0, r.stderr);
  const res = JSON.parse(r.stdout.trim().split('\n').pop() as string);
  assert.is(res.code, 'EPERM');
  assert.match(res.message, 'af_packet needs CAP_NET_RAW (run as root)');
  assert.match(res.message, p.host);
  assert.is(res.mac, hex(p.hostMac), 'the constructor (unprivileged ioctls) worked; open() refused');
});

for (const rxRing of ['v3', 'v2'] as const)
  test(`rx (${rxRing} ring): frames the kernel sends from the namespace arrive byte for byte in pool buffers, chained past the data size, timestamped`, async () => {
    const p = pair();
    const pool = memPool(256, 512); // 512-byte buffers: frames above that are chained
    const d = new AfPacketDriver({ hostIf: p.host, rxRing });
    d.open(pool);
    try {
      const sizes = [60, 64, 100, 511, 512, 513, 1000, 1024, 1025, 1514, 60, 1514, 777, 300, 1500, 200];
      const frames = sizes.map((len, i) => testFrame(p.hostMac, p.peerMac, i, len));
      const sent = pyInNs(p.ns, PY_SEND_FRAMES, [p.peer], frames.map(hex).join('\n') + '\n');
      assert.equal(sent, [String(frames.length)]);
      const segs: number[] = [];
      const stamps: number[] = [];
      const got = await receive(d, pool, 1000, isTest, frames.length, (bi) => {
        segs.push(pool.segments(bi));
        assert.ok(pool.flags[bi] & BufferFlag.TIMESTAMP_VALID, 'timestamp flag');
        stamps.push(pool.tsSec[bi] + pool.tsNsec[bi] / 1e9);
        assert.is(pool.offset[bi], pool.dataStart(bi), 'data starts after the headroom');
      });
      assert.equal(got.map(hex), frames.map(hex), 'every frame, in order, byte for byte');
      assert.equal(
        segs,
        sizes.map((l) => Math.ceil(l / 512)),
        'chained by 512-byte buffers',
      );
      const now = Date.now() / 1000;
      assert.ok(
        stamps.every((t) => Math.abs(t - now) < 10),
        `kernel receive timestamps near now: ${stamps[0]} vs ${now}`,
      );
      const c = d.counters();
      assert.ok(c.rxPackets >= frames.length, `rxPackets ${c.rxPackets}`);
      assert.ok(c.rxBytes >= sizes.reduce((a, b) => a + b, 0));
      assert.is(c.rxErrors, 0);
      assert.is(c.rxDrops, 0);
    } finally {
      d.close();
    }
    assert.is(pool.available(), pool.count, 'no buffer leaked');
  });

test('rx: UDP from the kernel stack over veth carries a partial checksum (TP_STATUS_CSUMNOTREADY): flagged L4_CKSUM_OK', async () => {
  const p = pair();
  const pool = memPool(64);
  const d = new AfPacketDriver({ hostIf: p.host });
  d.open(pool);
  const ours = '10.77.1.1';
  ip(
    '-n',
    p.ns,
    'neigh',
    'replace',
    ours,
    'lladdr',
    [...p.hostMac].map((b) => b.toString(16).padStart(2, '0')).join(':'),
    'dev',
    p.peer,
  );
  try {
    const payload = 'checksum offload';
    pyInNs(
      p.ns,
      `import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"${payload}", ("${ours}", 4791))`,
      [],
    );
    let flags = 0;
    const got = await receive(
      d,
      pool,
      1000,
      (b) => b[12] === 0x08 && b[13] === 0x00 && b[23] === 17,
      1,
      (bi) => {
        flags = pool.flags[bi];
      },
    );
    assert.is(got.length, 1, 'the datagram arrived');
    const f = got[0];
    assert.is(new TextDecoder().decode(f.subarray(42)), payload);
    assert.ok(flags & BufferFlag.L4_CKSUM_OK, 'L4_CKSUM_OK set');
    assert.ok(d.stats().rxCsumPartial >= 1, 'counted as checksum-partial');
    // The checksum field holds only the folded pseudo-header sum: a full check would fail.
    const udpLen = (f[38] << 8) | f[39];
    const pseudo = new Uint8Array(12);
    pseudo.set(f.subarray(26, 34), 0);
    pseudo[9] = 17;
    pseudo[10] = udpLen >> 8;
    pseudo[11] = udpLen & 0xff;
    assert.is.not(csum16(f.subarray(34, 34 + udpLen), csum16(pseudo)), 0xffff, 'not a valid full UDP checksum');
    // Frames from a raw socket (CHECKSUM_NONE) carry no such flag.
    pyInNs(p.ns, PY_SEND_FRAMES, [p.peer], hex(testFrame(p.hostMac, p.peerMac, 7, 64)) + '\n');
    let rawFlags = -1;
    await receive(d, pool, 1000, isTest, 1, (bi) => {
      rawFlags = pool.flags[bi];
    });
    assert.is(rawFlags & BufferFlag.L4_CKSUM_OK, 0);
  } finally {
    ip('-n', p.ns, 'neigh', 'del', ours, 'dev', p.peer);
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

for (const rxRing of ['v3', 'v2'] as const)
  test(`rx (${rxRing} ring): an 802.1Q tag the kernel strips (TP_STATUS_VLAN_VALID) is put back in the frame, also across chained buffers`, async () => {
    const p = pair();
    const pool = memPool(64, 512);
    const d = new AfPacketDriver({ hostIf: p.host, rxRing });
    d.open(pool);
    try {
      // dst, src, 8100, PCP 5 / VID 42, then the inner EtherType and payload
      const tag = (inner: Uint8Array) => {
        const t = new Uint8Array(inner.length + 4);
        t.set(inner.subarray(0, 12), 0);
        t.set([0x81, 0x00, 0xa0, 0x2a], 12);
        t.set(inner.subarray(12), 16);
        return t;
      };
      const tagged = [tag(testFrame(p.hostMac, p.peerMac, 99, 100)), tag(testFrame(p.hostMac, p.peerMac, 100, 1200))];
      pyInNs(p.ns, PY_SEND_FRAMES, [p.peer], tagged.map(hex).join('\n') + '\n');
      const segs: number[] = [];
      const got = await receive(
        d,
        pool,
        1000,
        (b) => b[12] === 0x81 && b[13] === 0x00,
        2,
        (bi) => segs.push(pool.segments(bi)),
      );
      assert.equal(got.map(hex), tagged.map(hex), 'tags restored in place');
      assert.equal(segs, [1, 3], '1204 bytes in 512-byte buffers');
      assert.is(d.stats().rxVlan, 2, 'the kernel had stripped them (hv1.tp_vlan_tci)');
    } finally {
      d.close();
    }
    assert.is(pool.available(), pool.count);
  });

test('rx: when the pool runs dry frames wait in the ring (counted), none lost; delivered once buffers return', async () => {
  const p = pair();
  const pool = memPool(16);
  const d = new AfPacketDriver({ hostIf: p.host });
  d.open(pool);
  const held: number[] = [];
  try {
    const frames = Array.from({ length: 40 }, (_, i) => testFrame(p.hostMac, p.peerMac, i, 100));
    pyInNs(p.ns, PY_SEND_FRAMES, [p.peer], frames.map(hex).join('\n') + '\n');
    await sleep(10);
    const out = new Uint32Array(256);
    const first = await until(() => {
      const n = d.rxBurst(0, out, 256);
      for (let i = 0; i < n; i++) held.push(out[i]);
      return held.length === 16;
    }, 1000);
    assert.ok(first, `the whole pool was delivered (${held.length})`);
    assert.is(pool.available(), 0);
    assert.is(d.rxBurst(0, out, 256), 0, 'nothing without buffers');
    assert.ok(d.stats().rxNoBuffers >= 1, 'counted');
    const bytes = held.map((bi) => hex(pool.packetBytes(bi)));
    pool.free(Uint32Array.from(held), 0, held.length);
    held.length = 0;
    const rest = await receive(d, pool, 1000, isTest, 24);
    assert.equal([...bytes, ...rest.map(hex)], frames.map(hex), 'all 40, in order: nothing lost');
    assert.is(d.stats().kernelDrops, 0);
  } finally {
    if (held.length) pool.free(Uint32Array.from(held), 0, held.length);
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

test('rx (v3 ring; v2 slots are sized for the link MTU): frames longer than a ring block arrive truncated; they are dropped and counted (rxErrors), the rest flow', async () => {
  pair();
  const q = createVethNs();
  const pool = memPool(256);
  try {
    ip('link', 'set', q.host, 'mtu', '9000');
    ip('-n', q.ns, 'link', 'set', q.peer, 'mtu', '9000');
    // Our MTU 1500 on a 9000-byte kernel link, 4 KiB blocks: an 8000-byte frame cannot fit.
    const d = new AfPacketDriver({ hostIf: q.host, mtu: 1500, blockSize: 4096, rxFrames: 64, rxRing: 'v3' });
    d.open(pool);
    try {
      const frames = [
        testFrame(q.hostMac, q.peerMac, 1, 100),
        testFrame(q.hostMac, q.peerMac, 2, 8000),
        testFrame(q.hostMac, q.peerMac, 3, 200),
      ];
      pyInNs(q.ns, PY_SEND_FRAMES, [q.peer], frames.map(hex).join('\n') + '\n');
      const got = await receive(d, pool, 1000, isTest, 2);
      assert.equal(got.map(hex), [hex(frames[0]), hex(frames[2])], 'the frames around it arrive whole');
      await sleep(10);
      assert.is(d.rxBurst(0, new Uint32Array(8), 8), 0, 'nothing else: the truncated frame was not delivered');
      assert.is(d.stats().rxTruncated, 1);
      assert.is(d.counters().rxErrors, 1);
    } finally {
      d.close();
    }
  } finally {
    destroyVethNs(q);
  }
  assert.is(pool.available(), pool.count);
});

for (const txMode of ['sendmmsg', 'ring'] as const) {
  test(`tx (${txMode}): frames reach the kernel byte for byte, chains gathered, oversize and runt frames dropped and counted`, async () => {
    const p = pair();
    const pool = memPool(256, 512);
    const d = new AfPacketDriver({ hostIf: p.host, txMode });
    d.open(pool);
    try {
      assert.is(d.socket!.txMode, txMode);
      const sizes = [60, 64, 512, 513, 1000, 1514, 100, 1025, 64, 1514];
      const frames = sizes.map((len, i) => testFrame(p.peerMac, d.mac, 1000 + i, len));
      const oversize = testFrame(p.peerMac, d.mac, 5000, 1600);
      const runt = testFrame(p.peerMac, d.mac, 5001, 20).subarray(0, 10); // shorter than an Ethernet header
      const rx = pyInNsAsync(p.ns, PY_RECV_FRAMES, [p.peer, TYPE_TEST.toString(16), String(frames.length), '3']);
      await rx.ready;
      const before = linkStats(p.peer, p.ns).rxPackets;
      const all = [...frames.slice(0, 5), oversize, ...frames.slice(5, 8), runt, ...frames.slice(8)];
      const bufs = toPool(pool, all);
      assert.ok(pool.segments(bufs[5]) === 4, 'the oversize frame is a 4-buffer chain');
      const taken = d.txBurst(0, bufs, 0, bufs.length);
      assert.is(taken, bufs.length, 'all taken (the oversize and the runt frames as errors)');
      assert.is(pool.available(), pool.count, 'every taken buffer freed');
      const lines = await rx.done;
      assert.equal(lines, frames.map(hex), 'the kernel received each frame exactly, in order, and neither bad one');
      const c = d.counters();
      assert.is(c.txPackets, frames.length);
      assert.is(
        c.txBytes,
        sizes.reduce((a, b) => a + b, 0),
      );
      assert.is(c.txErrors, 2, 'the oversize and the runt frames');
      assert.is(c.txDrops, 0);
      assert.ok(linkStats(p.peer, p.ns).rxPackets - before >= frames.length, 'peer interface counters');
    } finally {
      d.close();
    }
    assert.is(pool.available(), pool.count);
  });
}

test('tx: with PACKET_QDISC_BYPASS (default) a tap on our end does not see what we send; qdiscBypass: false shows it', async () => {
  const p = pair();
  const pool = memPool(64);
  const seen: Record<string, number> = {};
  for (const bypass of [true, false]) {
    const d = new AfPacketDriver({ hostIf: p.host, qdiscBypass: bypass });
    d.open(pool);
    try {
      const tap = pyAsync(PY_TAP_COUNT, [p.host, TYPE_TEST.toString(16), '0.3']);
      const peer = pyInNsAsync(p.ns, PY_RECV_FRAMES, [p.peer, TYPE_TEST.toString(16), '3', '2']);
      await tap.ready;
      await peer.ready;
      const bufs = toPool(
        pool,
        [1, 2, 3].map((i) => testFrame(p.peerMac, d.mac, i, 64)),
      );
      assert.is(d.txBurst(0, bufs, 0, 3), 3);
      assert.is((await peer.done).length, 3, 'the peer receives them either way');
      seen[String(bypass)] = Number((await tap.done).pop());
      assert.is(await receive(d, pool, 20, isTest, 1).then((r) => r.length), 0, 'our rx never sees our own tx');
    } finally {
      d.close();
    }
  }
  assert.equal(seen, { true: 0, false: 3 });
  assert.is(pool.available(), pool.count);
});

test('rx: PACKET_IGNORE_OUTGOING: frames another socket sends out of our interface are not received', async () => {
  const p = pair();
  const pool = memPool(64);
  const d = new AfPacketDriver({ hostIf: p.host });
  d.open(pool);
  try {
    const peer = pyInNsAsync(p.ns, PY_RECV_FRAMES, [p.peer, TYPE_TEST.toString(16), '5', '2']);
    await peer.ready;
    const frames = [1, 2, 3, 4, 5].map((i) => hex(testFrame(p.peerMac, p.hostMac, i, 64)));
    assert.equal(await pyAsync(PY_SEND_FRAMES, [p.host], frames.join('\n') + '\n').done, ['5']);
    assert.equal(await peer.done, frames, 'they went out of our interface');
    assert.is((await receive(d, pool, 50, isTest, 1)).length, 0, 'outgoing frames are not in our rx ring');
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

test('tx + rx with the kernel stack: UDP datagrams delivered to a kernel socket, an ARP request answered', async () => {
  const p = pair();
  const pool = createPool({ count: 512 });
  const d = new AfPacketDriver({ hostIf: p.host });
  d.open(pool);
  try {
    const ours = '10.77.1.1';
    const udp = pyInNsAsync(p.ns, PY_RECV_UDP, [p.peerIp!, '9999', '3', '3']);
    await udp.ready;
    const payloads = [
      Uint8Array.from([1, 2, 3]),
      new Uint8Array(1472).map((_, i) => i & 0xff),
      new TextEncoder().encode('hello kernel'),
    ];
    const bufs = toPool(
      pool,
      payloads.map((pl) => udpFrame(p.peerMac, d.mac, ours, p.peerIp!, 5555, 9999, pl)),
    );
    assert.is(d.txBurst(0, bufs, 0, bufs.length), 3);
    const lines = await udp.done;
    assert.equal(
      lines,
      payloads.map((pl) => `${ours} ${hex(pl)}`),
      'the kernel accepted IPv4 + UDP checksums and delivered',
    );

    const arp = toPool(pool, [arpRequest(d.mac, ours, p.peerIp!)]);
    assert.is(d.txBurst(0, arp, 0, 1), 1);
    const replies = await receive(d, pool, 1000, (b) => b[12] === 0x08 && b[13] === 0x06 && b[21] === 2, 1);
    assert.is(replies.length, 1, 'ARP reply received');
    const r = replies[0];
    assert.is(hex(r.subarray(0, 6)), hex(d.mac), 'unicast to us');
    assert.is(hex(r.subarray(22, 28)), hex(p.peerMac), 'sender MAC: the namespace end');
    assert.is(Array.from(r.subarray(28, 32)).join('.'), p.peerIp, 'sender IP');
    assert.is(Array.from(r.subarray(38, 42)).join('.'), ours, 'target IP');
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

test('PACKET_STATISTICS: a ring too small for a burst drops in the kernel; counted, accumulated, received + dropped = sent', async () => {
  const p = pair();
  const pool = createPool({ count: 1024 });
  // 8 blocks of 4 KiB: room for about 200 small frames.
  const d = new AfPacketDriver({ hostIf: p.host, blockSize: 4096, rxFrames: 16 });
  d.open(pool);
  try {
    assert.is(d.socket!.blocks, 8);
    const N = 3000;
    const lines: string[] = [];
    for (let i = 0; i < N; i++) lines.push(hex(testFrame(p.hostMac, p.peerMac, i, 64)));
    pyInNs(p.ns, PY_SEND_FRAMES, [p.peer], lines.join('\n') + '\n');
    await sleep(20); // let the last partial block time out
    const got = await receive(d, pool, 300, isTest, N);
    const s = d.stats();
    assert.ok(got.length > 0 && got.length < N, `received ${got.length} of ${N}`);
    assert.ok(s.kernelDrops > 0, `kernel drops ${s.kernelDrops}`);
    assert.is(s.kernelPackets, s.rxPackets + s.kernelDrops, 'tp_packets = delivered + tp_drops');
    assert.ok(
      got.length + s.kernelDrops >= N && got.length <= N,
      `received ${got.length} + dropped ${s.kernelDrops} covers ${N} sent`,
    );
    const seqs = got.map((b) => new DataView(b.buffer, b.byteOffset).getUint32(14));
    assert.ok(
      seqs.every((v, i) => i === 0 || v > seqs[i - 1]),
      'what arrived is in order',
    );
    assert.is(d.counters().rxDrops, s.kernelDrops, 'counters().rxDrops are the kernel drops');
    const again = d.stats();
    assert.is(again.kernelDrops, s.kernelDrops, 'accumulated: a second read does not reset them');
    assert.is(again.kernelPackets, s.kernelPackets);
  } finally {
    d.close();
  }
  assert.is(d.counters().rxDrops > 0, true, 'counters survive close');
  assert.is(pool.available(), pool.count);
});

/** A graph with one af_packet interface whose packets go to a sink that counts test frames. */
function graphWith(d: AfPacketDriver, pool: BufferPool) {
  const g = new Graph({ pool, idlePollUs: 200 });
  const seen = { test: 0, other: 0, rxIf: new Set<number>() };
  g.register({
    name: 'afp-sink',
    fn: (rt: NodeRuntime, fr: Frame | null) => {
      const f = fr as Frame;
      for (let i = 0; i < f.n; i++) {
        const bi = f.vec[i],
          o = pool.offset[bi];
        if (((pool.u8[o + 12] << 8) | pool.u8[o + 13]) === TYPE_TEST) seen.test++;
        else seen.other++;
        seen.rxIf.add(pool.rxIf[bi]);
      }
      rt.graph.pool.free(f.vec, 0, f.n);
      return f.n;
    },
  });
  const ifs = new Interfaces(g);
  const itf = ifs.add(d, { next: 'afp-sink' });
  return { g, ifs, itf, seen };
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) return false;
    await sleep(2);
  }
  return true;
}

for (const rxRing of ['v3', 'v2'] as const)
  test(`the socket fd wakes the sleeping engine (${rxRing} ring): traffic is processed, then it sleeps again; no buffer leak`, async () => {
    const p = pair();
    const pool = createPool({ count: 1024 });
    const d = new AfPacketDriver({ hostIf: p.host, rxRing });
    const { g, ifs, itf, seen } = graphWith(d, pool);
    g.start();
    try {
      assert.ok(await until(() => g.isSleeping, 500), 'idle engine sleeps');
      const calls = g.nodeCounters('af-packet-input').calls;
      await sleep(30);
      assert.is(g.nodeCounters('af-packet-input').calls, calls, 'no polling while asleep');
      const wakes = g.wakeups;
      const frames = Array.from({ length: 50 }, (_, i) => hex(testFrame(p.hostMac, p.peerMac, i, 128)));
      const tx = pyInNsAsync(p.ns, PY_SEND_FRAMES, [p.peer], frames.join('\n') + '\n');
      assert.equal(await tx.done, ['50']);
      assert.ok(await until(() => seen.test === 50, 1000), `engine woke and processed the frames (${seen.test} of 50)`);
      assert.ok(g.wakeups > wakes, 'woken by the fd');
      assert.equal([...seen.rxIf], [itf.index], 'rxIf is the interface');
      assert.ok(await until(() => g.isSleeping, 500), 'asleep again');
      assert.is(itf.counters().rxPackets, seen.test + seen.other);
    } finally {
      g.stop();
      ifs.closeAll();
      g.close();
    }
    assert.is(pool.available(), pool.count, 'no buffer leaked');
  });

test('the rx ring by default: TPACKET_V2 with sendmmsg (no latency floor), TPACKET_V3 with the TX ring (which needs it); v2 with the TX ring is refused', () => {
  const p = pair();
  assert.is(new AfPacketDriver({ hostIf: p.host }).rxRing, 'v2');
  assert.is(new AfPacketDriver({ hostIf: p.host, txMode: 'sendmmsg' }).rxRing, 'v2');
  assert.is(new AfPacketDriver({ hostIf: p.host, txMode: 'ring' }).rxRing, 'v3');
  assert.is(new AfPacketDriver({ hostIf: p.host, rxRing: 'v3' }).rxRing, 'v3');
  assert.throws(
    () => new AfPacketDriver({ hostIf: p.host, txMode: 'ring', rxRing: 'v2' }),
    /rxRing 'v2' needs txMode 'sendmmsg'/,
  );
});

test('rx ring v2 hands a lone frame over at once; v3 holds it in its block until the block timeout (here 1000 ms)', async () => {
  const p = pair();
  for (const rxRing of ['v3', 'v2'] as const) {
    const pool = memPool(64, 2048);
    const d = new AfPacketDriver({ hostIf: p.host, rxRing, blockTimeoutMs: 1000 });
    d.open(pool);
    try {
      const frame = testFrame(p.hostMac, p.peerMac, 7, 100);
      const out = new Uint32Array(64);
      // v3: up to 3 tries. The block a frame lands in may have been opened by another frame just
      // before, or the sender (a python3 start, slow on a loaded machine) may have taken most of
      // the timeout: either makes the kernel retire it sooner. A v2 ring never holds it.
      let got = 0;
      for (let attempt = 0; attempt < (rxRing === 'v3' ? 3 : 1); attempt++) {
        // Whatever the kernel sent before is taken first.
        await sleep(1100);
        for (let n = d.rxBurst(0, out, 64); n > 0; n = d.rxBurst(0, out, 64)) pool.free(out, 0, n);
        pyInNs(p.ns, PY_SEND_FRAMES, [p.peer], hex(frame) + '\n');
        // 200 ms: far less than the v3 block timeout, far more than a frame's way over a veth.
        got = 0;
        const end = Date.now() + 200;
        while (Date.now() < end && got === 0) {
          const n = d.rxBurst(0, out, 64);
          for (let i = 0; i < n; i++) if (isTest(pool.packetBytes(out[i]))) got++;
          pool.free(out, 0, n);
          await sleep(5);
        }
        if (got === 0) break;
      }
      if (rxRing === 'v2') assert.is(got, 1, 'v2: the frame is ours as soon as the kernel wrote it');
      else assert.is(got, 0, 'v3: the frame waits in a block the kernel has not retired yet (in one of 3 tries)');
    } finally {
      d.close();
    }
    assert.is(pool.available(), pool.count);
  }
});

test('link: a down interface is set up at open as VPP does (bringUp: false leaves it); carrier follows the peer; a downed socket neither spins the engine nor takes tx', async () => {
  pair();
  const q = createVethNs({ hostUp: false });
  const pool = createPool({ count: 512 });
  try {
    assert.not.ok(linkFlags(q.host).includes('UP'), 'starts down');
    const d0 = new AfPacketDriver({ hostIf: q.host, bringUp: false });
    d0.open(pool);
    assert.not.ok(d0.linkUp(), 'left down');
    assert.not.ok(d0.broughtUp);
    assert.not.ok(linkFlags(q.host).includes('UP'));
    d0.close();

    const d = new AfPacketDriver({ hostIf: q.host });
    const { g, ifs, seen } = graphWith(d, pool);
    try {
      assert.ok(d.broughtUp, 'open() set it up');
      assert.ok(linkFlags(q.host).includes('UP'));
      assert.ok(await until(() => d.linkUp(), 1000), 'carrier with the peer up');

      ip('-n', q.ns, 'link', 'set', q.peer, 'down');
      assert.ok(await until(() => !d.linkUp(), 1000), 'no carrier when the peer is down');
      ip('-n', q.ns, 'link', 'set', q.peer, 'up');
      assert.ok(await until(() => d.linkUp(), 1000), 'carrier back');

      g.start();
      assert.ok(await until(() => g.isSleeping, 500), 'sleeps');
      const errs = d.stats().socketErrors;
      assert.is(errs, 0, 'set up before bind(): no ENETDOWN left pending by the open');
      ip('link', 'set', q.host, 'down');
      await sleep(50);
      const calls = g.nodeCounters('af-packet-input').calls;
      await sleep(200);
      const spun = g.nodeCounters('af-packet-input').calls - calls;
      assert.ok(spun < 100, `the engine sleeps on a downed socket (${spun} polls in 200 ms)`);
      assert.ok(d.stats().socketErrors > errs, 'the ENETDOWN it left was read and counted');
      assert.not.ok(d.linkUp());

      const bufs = toPool(pool, [testFrame(q.peerMac, d.mac, 1, 64)]);
      assert.is(d.txBurst(0, bufs, 0, 1), 0, 'refused while down');
      assert.is(d.counters().txDrops, 1);
      pool.free(bufs, 0, 1);

      ip('link', 'set', q.host, 'up');
      assert.ok(await until(() => d.linkUp(), 1000), 'up again');
      const frames = Array.from({ length: 10 }, (_, i) => hex(testFrame(q.hostMac, q.peerMac, i, 80)));
      await pyInNsAsync(q.ns, PY_SEND_FRAMES, [q.peer], frames.join('\n') + '\n').done;
      assert.ok(await until(() => seen.test === 10, 1000), `receiving again after down/up (${seen.test} of 10)`);
      const again = toPool(pool, [testFrame(q.peerMac, d.mac, 2, 64)]);
      assert.is(d.txBurst(0, again, 0, 1), 1, 'transmitting again after down/up');
    } finally {
      g.stop();
      ifs.closeAll();
      g.close();
    }
  } finally {
    destroyVethNs(q);
  }
  assert.is(pool.available(), pool.count);
});

// ------------------------------------------------------------------------------ gso

const payloadOf = (k: number, n: number) => new Uint8Array(n).map((_, i) => (k * 31 + i) & 0xff);

test('gso tx: runs of UDP datagrams of one flow and one size leave as one message each; the kernel gets every datagram intact, in order', async () => {
  const p = pair();
  const pool = memPool(256, 2048);
  const d = new AfPacketDriver({ hostIf: p.host, gso: true });
  d.open(pool);
  try {
    assert.is(d.socket!.gso, true);
    const ours = '10.77.1.1';
    const toA = pyInNsAsync(p.ns, PY_RECV_UDP, [p.peerIp!, '9997', '32', '3']);
    const toB = pyInNsAsync(p.ns, PY_RECV_UDP, [p.peerIp!, '9996', '1', '3']);
    await toA.ready;
    await toB.ready;
    // A run of 20 x 1000 bytes ended by a shorter one, another flow's datagram, a run of 6 x 1200.
    const a = [...Array.from({ length: 20 }, (_, k) => payloadOf(k, 1000)), payloadOf(20, 300)];
    const b = payloadOf(99, 1000);
    const c = Array.from({ length: 6 }, (_, k) => payloadOf(50 + k, 1200));
    // Then 5 datagrams too small to be a GSO message's pieces (a receiver refuses under 64 bytes).
    const e = Array.from({ length: 5 }, (_, k) => payloadOf(70 + k, 40));
    const frame = (port: number, x: Uint8Array) => udpFrame(p.peerMac, d.mac, ours, p.peerIp!, 5555, port, x);
    const frames = [...a.map((x) => frame(9997, x)), frame(9996, b), ...[...c, ...e].map((x) => frame(9997, x))];
    const before = linkStats(p.peer, p.ns).rxPackets;
    const bufs = toPool(pool, frames);
    assert.is(d.txBurst(0, bufs, 0, bufs.length), frames.length);
    assert.equal(
      await toA.done,
      [...a, ...c, ...e].map((x) => `${ours} ${hex(x)}`),
      'flow A: every datagram, in order',
    );
    assert.equal(await toB.done, [`${ours} ${hex(b)}`], 'flow B');
    const s = d.stats();
    assert.is(s.txPackets, frames.length, 'txPackets counts datagrams');
    assert.is(s.txGsoMessages, 2, 'the two runs, not the small datagrams');
    // 21 + 6, and the first small datagram ends the second run as its shorter last piece.
    assert.is(s.txGsoDatagrams, 28);
    assert.is(s.txErrors, 0);
    const crossed = linkStats(p.peer, p.ns).rxPackets - before;
    assert.ok(crossed >= 7 && crossed < 15, `the veth carried each run whole: ${crossed} packets for 33 datagrams`);
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

/**
 * Frame `f` as a packet whose bytes [from, to) are a window of memory `id` at `memOff` (where
 * the caller put the same bytes), the rest in pool buffers before and after it.
 */
function extFrame(pool: BufferPool, f: Uint8Array, from: number, to: number, id: number, memOff: number): number {
  const head = pool.allocChain(3);
  const e = pool.next[head],
    t = pool.next[e];
  pool.u8.set(f.subarray(0, from), pool.offset[head]);
  pool.length[head] = from;
  pool.flags[head] |= BufferFlag.EXT_CHAIN;
  pool.attachExt(e, id, memOff, to - from);
  pool.u8.set(f.subarray(to), pool.offset[t]);
  pool.length[t] = f.length - to;
  return head;
}

test('tx (sendmmsg): payload windows of external memory (an MR sent in place) go out as their bytes, also inside GSO messages; a window the table does not hold is a tx error, never read', async () => {
  const p = pair();
  for (const gso of [false, true]) {
    const pool = memPool(256, 2048);
    const d = new AfPacketDriver({ hostIf: p.host, gso });
    assert.not.ok(d.txExternal(), 'not open: no');
    d.open(pool);
    try {
      assert.ok(d.txExternal(), 'sendmmsg gathers them');
      assert.ok(pool.ext.wanted, 'and says so to the senders');
      const ours = '10.77.1.1';
      const rx = pyInNsAsync(p.ns, PY_RECV_UDP, [p.peerIp!, '9995', '4', '3']);
      await rx.ready;
      const mem = new Uint8Array(8192);
      const id = pool.ext.add(mem);
      const data = Array.from({ length: 4 }, (_, k) => payloadOf(k + (gso ? 40 : 0), 1200));
      const bufs = new Uint32Array(6);
      data.forEach((x, k) => {
        const f = udpFrame(p.peerMac, d.mac, ours, p.peerIp!, 5555, 9995, x);
        // The frame's bytes 100..1100 from the memory (the rest of it in the pool).
        mem.set(f.subarray(100, 1100), 1000 * k + 3);
        bufs[k] = extFrame(pool, f, 100, 1100, id, 1000 * k + 3);
      });
      // Two that must not be read: an id nobody listed, and a window running past its memory.
      const bad = udpFrame(p.peerMac, d.mac, ours, p.peerIp!, 5555, 9995, payloadOf(9, 1200));
      bufs[4] = extFrame(pool, bad, 100, 1100, id + 1, 0);
      bufs[5] = extFrame(pool, bad, 100, 1100, id, 8192 - 500);
      assert.is(d.txBurst(0, bufs, 0, 6), 6, 'all taken (the two bad ones dropped)');
      assert.equal(
        await rx.done,
        data.map((x) => `${ours} ${hex(x)}`),
        `gso ${gso}: every datagram byte for byte`,
      );
      const s = d.stats();
      assert.is(s.txErrors, 2, 'the two bad windows counted');
      if (gso) assert.ok(s.txGsoMessages >= 1, 'the good ones went as a GSO message');
    } finally {
      d.close();
    }
  }
  // The TX ring gathers nothing in place: a window reaching it is a tx error, not pool bytes.
  const pool = memPool(64, 2048);
  const r = new AfPacketDriver({ hostIf: p.host, txMode: 'ring' });
  r.open(pool);
  try {
    assert.not.ok(r.txExternal(), 'the TX ring copies');
    const id = pool.ext.add(new Uint8Array(4096));
    const f = udpFrame(p.peerMac, r.mac, '10.77.1.1', p.peerIp!, 5555, 9995, payloadOf(3, 1200));
    const bufs = Uint32Array.of(extFrame(pool, f, 100, 1100, id, 0));
    assert.is(r.txBurst(0, bufs, 0, 1), 1, 'taken');
    const s = r.stats();
    assert.is(s.txErrors, 1, 'as an error');
    assert.is(s.txPackets, 0, 'nothing sent');
  } finally {
    r.close();
  }
  assert.is(pool.available(), pool.count);
});

/** Sends each stdin line "VNETHEX FRAMEHEX" with PACKET_VNET_HDR on argv[1]; prints ok or the errno per line. */
const PY_SEND_VNET = `
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.setsockopt(263, 15, 1)
s.bind((sys.argv[1], 0))
for line in sys.stdin:
    if not line.strip(): continue
    v, f = line.split()
    try:
        s.send(bytes.fromhex(v) + bytes.fromhex(f)); print("ok", flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
`;

/** A GSO message as a kernel sender makes it: header for the whole, payload cut every `seg` bytes. */
function gsoMessage(dst: Uint8Array, src: Uint8Array, payload: Uint8Array, seg: number, type = 5) {
  const f = udpFrame(dst, src, '10.77.1.2', '10.77.1.1', 4000, 5000, payload);
  new DataView(f.buffer).setUint16(18, 0x1234); // IPv4 ID: the datagrams get 0x1234 + i
  const v = new Uint8Array(10);
  const dv = new DataView(v.buffer);
  v[0] = 1; // NEEDS_CSUM
  v[1] = type;
  dv.setUint16(2, 42, true);
  dv.setUint16(4, seg, true);
  dv.setUint16(6, 34, true);
  dv.setUint16(8, 6, true);
  return `${hex(v)} ${hex(f)}`;
}

test('gso rx: a GSO message from the kernel is cut into its datagrams (lengths, IDs, IPv4 checksums right, L4 OK); messages that cannot be cut are dropped and counted, the ring goes on', async () => {
  const p = pair();
  const pool = memPool(512, 2048);
  const d = new AfPacketDriver({ hostIf: p.host, gso: true });
  d.open(pool);
  try {
    assert.match(String(d.hardware().info['rx ring']), /GSO messages cut into datagrams/);
    const good = payloadOf(1, 10 * 700 + 123);
    const again = payloadOf(2, 3 * 1400 + 1);
    const lines = [
      gsoMessage(d.mac, p.peerMac, good, 700),
      gsoMessage(d.mac, p.peerMac, payloadOf(3, 5000), 40), // pieces under 64 bytes (and 125 of them)
      gsoMessage(d.mac, p.peerMac, payloadOf(4, 64 * 100 + 1), 100), // 65 datagrams
      gsoMessage(d.mac, p.peerMac, again, 1400),
    ];
    const sent = pyInNs(p.ns, PY_SEND_VNET, [p.peer], lines.join('\n') + '\n');
    assert.is(sent[0], 'ok', 'the kernel took the first message');
    assert.is(sent[3], 'ok', 'and the last');
    const hostile = sent.slice(1, 3).filter((x) => x === 'ok').length;
    const isUdp = (b: Uint8Array) => b.length >= 42 && b[12] === 8 && b[13] === 0 && b[23] === 17;
    const flagsOk: boolean[] = [];
    const got = await receive(d, pool, 2000, isUdp, 11 + 4, (bi) =>
      flagsOk.push((pool.flags[bi] & BufferFlag.L4_CKSUM_OK) !== 0),
    );
    const expect = (payload: Uint8Array, seg: number) =>
      Array.from({ length: Math.ceil(payload.length / seg) }, (_, i) => payload.subarray(i * seg, (i + 1) * seg));
    const chunks = [...expect(good, 700), ...expect(again, 1400)];
    assert.is(got.length, chunks.length, 'each datagram of the two good messages, nothing of the others');
    got.forEach((b, i) => {
      const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
      const k = i < 11 ? i : i - 11;
      assert.is(b.length, 42 + chunks[i].length, `datagram ${i}: length`);
      assert.is(v.getUint16(16), 28 + chunks[i].length, `datagram ${i}: IPv4 total length`);
      assert.is(v.getUint16(18), 0x1234 + k, `datagram ${i}: IPv4 ID`);
      assert.is(csum16(b.subarray(14, 34)), 0xffff, `datagram ${i}: IPv4 header checksum`);
      assert.is(v.getUint16(38), 8 + chunks[i].length, `datagram ${i}: UDP length`);
      assert.equal(hex(b.subarray(42)), hex(chunks[i]), `datagram ${i}: payload`);
    });
    assert.ok(flagsOk.every(Boolean), 'L4 checksum OK on each');
    const s = d.stats();
    assert.is(s.rxGsoFrames, 2);
    assert.is(s.rxGsoDatagrams, chunks.length);
    assert.is(s.rxGsoDropped, hostile, `the messages that cannot be cut (${hostile} of 2 the kernel let through)`);
    assert.ok(hostile >= 1, 'at least one hostile message reached the ring');
    assert.is(d.counters().rxErrors, hostile);
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

test("gso rx: a GSO frame of another kind (TCPv4: the kernel's own traffic on the same veth) goes up whole, not counted as dropped", async () => {
  const p = pair();
  const pool = memPool(256, 2048);
  const d = new AfPacketDriver({ hostIf: p.host, gso: true });
  d.open(pool);
  try {
    // IPv4/TCP, 3000 bytes of payload cut every 1000 (a TCPv4 GSO header: hdr_len 54, csum at 34 + 16).
    const payload = payloadOf(7, 3000);
    const ip = new Uint8Array(40 + payload.length);
    const iv = new DataView(ip.buffer);
    ip[0] = 0x45;
    iv.setUint16(2, ip.length);
    iv.setUint16(6, 0x4000);
    ip[8] = 64;
    ip[9] = 6;
    ip.set(ip4('10.77.1.2'), 12);
    ip.set(ip4('10.77.1.1'), 16);
    iv.setUint16(10, 0xffff - csum16(ip.subarray(0, 20)));
    iv.setUint16(20, 4000);
    iv.setUint16(22, 5000);
    ip[32] = 5 << 4; // data offset
    ip[33] = 0x10; // ACK
    iv.setUint16(34, 65535);
    ip.set(payload, 40);
    const frame = eth(d.mac, p.peerMac, 0x0800, ip);
    const v = new DataView(new ArrayBuffer(10));
    v.setUint8(0, 1);
    v.setUint8(1, 1); // VIRTIO_NET_HDR_GSO_TCPV4
    v.setUint16(2, 54, true);
    v.setUint16(4, 1000, true);
    v.setUint16(6, 34, true);
    v.setUint16(8, 16, true);
    const sent = pyInNs(p.ns, PY_SEND_VNET, [p.peer], `${hex(new Uint8Array(v.buffer))} ${hex(frame)}\n`);
    assert.is(sent[0], 'ok', 'the kernel took the TCP GSO message');
    const got = await receive(d, pool, 2000, (b) => b.length === frame.length, 1);
    assert.is(got.length, 1, 'one frame, as the kernel handed it over');
    assert.equal(hex(got[0].subarray(54)), hex(payload));
    assert.is(d.stats().rxGsoDropped, 0);
    assert.is(d.stats().rxGsoFrames, 0);
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

/** Prints "ready", then "flags csum_start csum_offset udp_dst_port" per UDP frame seen on argv[1] (PACKET_VNET_HDR), argv[2] of them. */
const PY_RECV_VNET = `
import socket, sys, struct, select, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(263, 15, 1)
s.bind((sys.argv[1], 0))
print("ready", flush=True)
got = 0; deadline = time.time() + 3
while got < int(sys.argv[2]) and time.time() < deadline:
    r, _, _ = select.select([s], [], [], 0.2)
    if not r: continue
    d = s.recv(70000)
    fl, gt, hl, gs, cs, co = struct.unpack("<BBHHHH", d[:10]); f = d[10:]
    if len(f) >= 42 and f[12:14] == b"\\x08\\x00" and f[23] == 17:
        print(fl, cs, co, int.from_bytes(f[36:38], "big"), flush=True); got += 1
`;

test('gso tx: checksum offload: udp4-encap leaves the pseudo-header sum, the frame goes with NEEDS_CSUM at the UDP header; without the flag it goes as it is', async () => {
  const p = pair();
  const pool = memPool(64, 2048);
  const d = new AfPacketDriver({ hostIf: p.host, gso: true });
  d.open(pool);
  try {
    assert.equal(d.txChecksumOffload(), { ip4: false, udp: true }, "gso: UDP checksums are the kernel's");
    assert.equal(new AfPacketDriver({ hostIf: p.host }).txChecksumOffload(), { ip4: false, udp: false });
    const rx = pyInNsAsync(p.ns, PY_RECV_VNET, [p.peer, '2']);
    await rx.ready;
    const bufs = toPool(pool, [
      udpFrame(p.peerMac, d.mac, '10.77.1.1', p.peerIp!, 5555, 9994, payloadOf(1, 100)),
      udpFrame(p.peerMac, d.mac, '10.77.1.1', p.peerIp!, 5555, 9993, payloadOf(2, 100)),
    ]);
    pool.flags[bufs[0]] |= BufferFlag.TX_UDP_CKSUM;
    assert.is(d.txBurst(0, bufs, 0, 2), 2);
    const lines = (await rx.done).sort();
    assert.equal(lines, ['0 0 0 9993', '1 34 6 9994'], 'NEEDS_CSUM at offset 34 + 6 for the flagged frame only');
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

test('gso: refused with the TX ring or rxRing v3; blockSize too small for a 64 KiB message refused', () => {
  const p = pair();
  assert.throws(() => new AfPacketDriver({ hostIf: p.host, gso: true, txMode: 'ring' }), /gso needs txMode 'sendmmsg'/);
  assert.throws(
    () => new AfPacketDriver({ hostIf: p.host, gso: true, rxRing: 'v3' }),
    /gso needs txMode 'sendmmsg' and rxRing 'v2'/,
  );
  assert.throws(
    () => new AfPacketDriver({ hostIf: p.host, gso: true, blockSize: 65536 }),
    /gso needs blockSize of at least 131072/,
  );
  const d = new AfPacketDriver({ hostIf: p.host, gso: true, rxFrames: 4096 });
  assert.match(
    String(d.hardware().info['rx ring']),
    /^TPACKET_V2, 512 blocks of 131072 bytes/,
    'at most 512 slots of 128 KiB',
  );
});

test.run();
