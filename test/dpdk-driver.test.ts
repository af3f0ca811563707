/**
 * The dpdk driver on DPDK's own virtual devices (issue 15, first part): one EAL and one
 * mempool per process, the mempool as the data plane's buffer pool (zero copy: a buffer index
 * goes out and the same index comes back), a data plane started on a net_ring vdev, and the
 * configuration errors. Skips (fails under CI=true) when dpdk.node was not built.
 */
import { skip, test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Dataplane } from '../dataplane/dataplane.ts';
import { DataplaneError } from '../dataplane/views.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { PcapReader } from '../drivers/pcap-file.ts';
import { Testpmd, testpmdUnavailable } from './helpers-dpdk.ts';
import { createVethNs, destroyVethNs, netnsUnavailable } from './helpers-netns.ts';
import { baseConfig, pipeInterface } from './dataplane-helpers.ts';
import { sleep } from './helpers.ts';

const ready = () => {
  if (!existsSync(`${NATIVE_BUILD_DIR}dpdk.node`)) skip('dpdk.node was not built (install libdpdk-dev, npm run build)');
};

/** The process's mempool outlives a data plane: after close every mbuf must be back in it. */
const assertMempoolWhole = (dp: DataplaneApi) => {
  const { pool } = Dataplane.internals(dp);
  assert.is(pool.count - pool.available(), 0, 'every mbuf is back in the mempool after close');
};

const dpdkInterface = (name: string, device: string, address: string, mac: string, ealArgs: string[] = []) =>
  pipeInterface(name, 'unused', address, mac, {
    driver: 'dpdk',
    pipe: undefined,
    dpdk: { device, ealArgs },
    rxQueueSize: 512,
    txQueueSize: 512,
  });

/**
 * A UD QP attached to a group, then detached: show hardware's `multicast` at each step (the
 * port told of the group's MAC, then of none); what it said while the group was joined.
 */
async function multicastMode(dp: DataplaneApi): Promise<string> {
  const mode = async () => String((await dp.hardware())[0].info.multicast);
  assert.is(await mode(), 'null', 'nothing told before a group is joined');
  const pd = await dp.createPd();
  const cq = await dp.createCq({ depth: 4 });
  const qp = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, type: 'ud' });
  await dp.attachMcast(qp.qpn, '239.9.9.9');
  const joined = await mode();
  await dp.detachMcast(qp.qpn, '239.9.9.9');
  assert.is(await mode(), 'no group joined');
  await dp.destroyQp(qp.qpn);
  return joined;
}

test('net_ring loopback: frames out come back in as the same buffers, bytes intact; the pool is whole after', async () => {
  ready();
  const dp = await Dataplane.create(
    baseConfig({
      buffers: { count: 2048, dataSize: 2048 },
      interfaces: [dpdkInterface('ring1', 'net_ring1', '10.77.1.1/24', '02:fe:00:00:01:01')],
    }),
  );
  try {
    const { pool, ifs } = Dataplane.internals(dp);
    assert.is(pool.memory.owner, 'dpdk', 'the buffer pool is the mempool');
    assert.is(pool.count, 2048);
    const drv = ifs.all()[0].driver;
    assert.is(drv.kind, 'dpdk');
    assert.ok(drv.linkUp());
    await sleep(50); // the graph's own start-up traffic (a gratuitous ARP) has come and gone
    const bufs = new Uint32Array(64),
      back = new Uint32Array(256);
    assert.is(pool.alloc(bufs, 0, 64), 64);
    for (let i = 0; i < 64; i++) {
      const bi = bufs[i];
      pool.length[bi] = 60 + i;
      for (let k = 0; k < 60 + i; k++) pool.u8[pool.offset[bi] + k] = (i * 7 + k) & 0xff;
    }
    const sent = [...bufs];
    // The graph polls this port too, but runs only between awaits: tx and rx here are one turn.
    assert.is(drv.txBurst(0, bufs, 0, 64), 64);
    const n = drv.rxBurst(0, back, 256);
    assert.is(n, 64, 'every frame came back');
    assert.equal([...back.subarray(0, n)], sent, 'the same buffers, in order: nothing was copied');
    for (let i = 0; i < n; i++) {
      const bi = back[i];
      assert.is(pool.length[bi], 60 + i);
      assert.ok(
        pool.u8.subarray(pool.offset[bi], pool.offset[bi] + 60 + i).every((b, k) => b === ((i * 7 + k) & 0xff)),
        `frame ${i} bytes`,
      );
    }
    pool.free(back, 0, n);
    const hw = (await dp.hardware())[0];
    assert.is(hw.info.pmd, 'net_ring');
    assert.ok(Number(hw.counters.tx_good_packets) >= 64);
    // Frames still in the ring when the port closes are drained back into the mempool.
    assert.is(pool.alloc(bufs, 0, 64), 64);
    for (let i = 0; i < 64; i++) pool.length[bufs[i]] = 60;
    assert.is(drv.txBurst(0, bufs, 0, 64), 64);
  } finally {
    await dp.close();
  }
  assertMempoolWhole(dp);
});

test('a data plane on net_ring: its ARP for a neighbor comes back to it (seen in rx), buffers return to the mempool', async () => {
  ready();
  const dp = await Dataplane.create(
    baseConfig({
      buffers: { count: 2048, dataSize: 2048 },
      interfaces: [dpdkInterface('ring2', 'net_ring2', '10.77.2.1/24', '02:fe:00:00:02:01')],
    }),
  );
  try {
    const r = await dp.ping({ address: '10.77.2.9', count: 1, timeoutMs: 200 });
    assert.is(r.received, 0, 'nobody is there');
    await sleep(100);
    const itf = (await dp.interfaces())[0];
    assert.ok(itf.counters.txPackets >= 2 && itf.counters.rxPackets >= 2, JSON.stringify(itf.counters));
  } finally {
    await dp.close();
  }
  // The echo request still held for the unresolved neighbor went back too.
  assertMempoolWhole(dp);
});

test('net_memif in our process against our own memif driver: ping both ways, then an RDMA WRITE and a SEND with the DPDK side on zero copy', async () => {
  ready();
  const dir = mkdtempSync(join(tmpdir(), 'dpdk-memif-'));
  const sock = join(dir, 'memif.sock');
  const server = await Dataplane.create(
    baseConfig({
      interfaces: [
        pipeInterface('memif0', 'unused', '10.78.0.1/24', '02:fe:00:00:78:01', {
          driver: 'memif',
          pipe: undefined,
          memif: { socket: sock, role: 'server', id: 0, secret: null, bufferSize: 2048, udpChecksum: true },
        }),
      ],
    }),
  );
  let client: DataplaneApi | null = null;
  try {
    client = await Dataplane.create(
      baseConfig({
        buffers: { count: 4096, dataSize: 2048 },
        interfaces: [
          dpdkInterface(
            'dm0',
            `net_memif0,role=client,socket=${sock},socket-abstract=no,id=0`,
            '10.78.0.2/24',
            '02:fe:00:00:78:02',
          ),
        ],
      }),
    );
    const c = client;
    const end = Date.now() + 5000;
    while (
      !((await c.interfaces())[0].state === 'up' && (await server.interfaces())[0].state === 'up') &&
      Date.now() < end
    )
      await sleep(20);
    assert.is((await c.interfaces())[0].state, 'up', 'the DPDK memif client connected');
    // The dpdk link coming up is noticed (polled link state): a gratuitous ARP goes out of it.
    const errCount = async (dp: DataplaneApi, node: string, reason: RegExp) =>
      (await dp.errors())
        .flatMap((t) => t.rows)
        .filter((r) => r.node === node && reason.test(r.reason))
        .reduce((n, r) => n + r.count, 0);
    const until = Date.now() + 3000;
    while ((await errCount(c, 'arp-input', /^gratuitous ARPs sent$/)) === 0 && Date.now() < until) await sleep(20);
    assert.ok(
      (await errCount(c, 'arp-input', /^gratuitous ARPs sent$/)) >= 1,
      'a gratuitous ARP when the link came up',
    );
    const p1 = await c.ping({ address: '10.78.0.1', count: 3, intervalMs: 10 });
    assert.is(p1.received, 3, 'DPDK side pings the memif side');
    const p2 = await server.ping({ address: '10.78.0.2', count: 3, intervalMs: 10 });
    assert.is(p2.received, 3, 'and back');
    // RDMA: a QP on each side, manual connect, WRITE from DPDK to memif, SEND the other way.
    const mk = async (dp: DataplaneApi) => {
      const { pd } = await dp.createPd();
      const { cq } = await dp.createCq({ depth: 64 });
      const mr = await dp.createMr({ pd, length: 65536, access: ['local-write', 'remote-write'] });
      const qp = await dp.createQp({ pd, sendCq: cq, recvCq: cq });
      return { cq, mr, qp };
    };
    const a = await mk(c),
      b = await mk(server);
    await c.connect(a.qp.qpn, { remote: { ip: '10.78.0.1', port: b.qp.qpn }, mode: 'manual', remotePsn: b.qp.psn });
    await server.connect(b.qp.qpn, {
      remote: { ip: '10.78.0.2', port: a.qp.qpn },
      mode: 'manual',
      remotePsn: a.qp.psn,
    });
    const data = new Uint8Array(20000).map((_, i) => (i * 13) & 0xff);
    await c.writeMr(a.mr.mr, 0, data);
    await c.postSend(a.qp.qpn, {
      wrId: 'w',
      opcode: 'write',
      sge: [{ mr: a.mr.mr, offset: 0, length: data.length }],
      remote: { stag: b.mr.stag, offset: 100 },
    });
    const wc = await c.pollCq(a.cq, 4, 3000);
    assert.equal(
      wc.completions.map((x) => [x.wrId, x.status]),
      [['w', 'success']],
    );
    assert.equal(
      await server.readMr(b.mr.mr, 100, data.length),
      data,
      'the WRITE landed byte for byte (14 segments over DPDK)',
    );
    await c.postRecv(a.qp.qpn, { wrId: 'r', sge: [{ mr: a.mr.mr, offset: 30000, length: 64 }] });
    await server.writeMr(b.mr.mr, 0, new TextEncoder().encode('over dpdk'));
    await server.postSend(b.qp.qpn, { wrId: 's', opcode: 'send', sge: [{ mr: b.mr.mr, offset: 0, length: 9 }] });
    const rc = await c.pollCq(a.cq, 4, 3000);
    assert.equal(
      rc.completions.map((x) => [x.wrId, x.status, x.byteLen]),
      [['r', 'success', 9]],
    );
    assert.is(new TextDecoder().decode(await c.readMr(a.mr.mr, 30000, 9)), 'over dpdk');
  } finally {
    await client?.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  assertMempoolWhole(client!);
});

test('dpdk-testpmd as the peer (its memif server in macswap, our net_memif client): 100 frames come back byte for byte, MACs swapped', async () => {
  ready();
  const why = testpmdUnavailable();
  if (why !== null) skip(why);
  const dir = mkdtempSync(join(tmpdir(), 'dpdk-testpmd-'));
  const sock = join(dir, 'memif.sock');
  const t = new Testpmd({ memif: `role=server,socket=${sock},socket-abstract=no`, mode: 'macswap', maxSeconds: 60 });
  let dp: DataplaneApi | null = null;
  try {
    await t.ready();
    await t.start();
    dp = await Dataplane.create(
      baseConfig({
        buffers: { count: 4096, dataSize: 2048 },
        capture: { dir, maxBytes: 2 ** 20 },
        interfaces: [
          dpdkInterface(
            'tp0',
            `net_memif1,role=client,socket=${sock},socket-abstract=no`,
            '10.79.0.2/24',
            '02:fe:00:00:79:02',
          ),
        ],
      }),
    );
    const d = dp;
    const end = Date.now() + 10000;
    while ((await d.interfaces())[0].state !== 'up' && Date.now() < end) await sleep(20);
    assert.is((await d.interfaces())[0].state, 'up', `connected to testpmd:\n${t.output.slice(-1500)}`);
    const { pool, ifs } = Dataplane.internals(d);
    const drv = ifs.all()[0].driver;
    const peerMac = [0x02, 0xfe, 0, 0, 0x79, 0xee];
    const frame = (i: number, probe = false) => {
      const f = new Uint8Array(64 + i);
      f.set(peerMac, 0);
      f.set(drv.mac, 6);
      f[12] = 0x88;
      f[13] = probe ? 0xb6 : 0xb5; // IEEE local experimental: ethernet-input drops them after the capture
      for (let k = 14; k < f.length; k++) f[k] = (i + k * 3) & 0xff;
      return f;
    };
    const send = (frames: Uint8Array[]) => {
      const bufs = new Uint32Array(frames.length);
      assert.is(pool.alloc(bufs, 0, frames.length), frames.length);
      frames.forEach((f, i) => {
        pool.u8.set(f, pool.offset[bufs[i]]);
        pool.length[bufs[i]] = f.length;
      });
      assert.is(drv.txBurst(0, bufs, 0, frames.length), frames.length);
    };
    const seen = async () => (await d.interfaces())[0].counters.rxPackets;
    // The path is ready when a probe frame has come back (both sides' rings serviced), not
    // merely when the link is up; probes (0x88b6) that come back later are left out below.
    const rx0 = await seen();
    for (let k = 0; k < 20 && (await seen()) === rx0; k++) {
      send([frame(0, true)]);
      await sleep(250);
    }
    assert.ok((await seen()) > rx0, `a probe came back through testpmd:\n${t.output.slice(-1500)}`);
    await d.capture('tp0', { direction: 'rx', file: 'back.pcap', count: 200 });
    const rx1 = await seen();
    send(Array.from({ length: 100 }, (_, i) => frame(i)));
    const until = Date.now() + 5000;
    while ((await seen()) < rx1 + 100 && Date.now() < until) await sleep(10);
    await d.stopCapture('tp0');
    const pcap = PcapReader.open(join(dir, 'back.pcap'));
    const got = Array.from({ length: pcap.count }, (_, i) => pcap.packet(i)).filter((p) => p[13] === 0xb5);
    if (got.length !== 100) {
      const tp = await t.stats().catch((e: Error) => e.message);
      t.send('stop'); // testpmd prints its forwarding statistics (TX-dropped)
      await sleep(300);
      assert.is(
        got.length,
        100,
        `reflected: our rx ${(await seen()) - rx1}, testpmd ${JSON.stringify(tp)}:\n${t.output.slice(-1500)}`,
      );
    }
    for (let i = 0; i < 100; i++) {
      const want = frame(i);
      want.set(drv.mac, 0);
      want.set(peerMac, 6);
      assert.equal([...got[i]], [...want], `frame ${i}`);
    }
  } finally {
    await dp?.close();
    await t.quit();
    rmSync(dir, { recursive: true, force: true });
  }
  assertMempoolWhole(dp!);
});

test('net_af_packet on a veth to the kernel in a namespace: the kernel pings us and our UDP echo answers it; the kernel finds no checksum error', async () => {
  ready();
  const nowhy = netnsUnavailable();
  if (nowhy !== null) skip(nowhy);
  const v = createVethNs({ peerCidr: '10.80.0.2/24' });
  const dir = mkdtempSync(join(tmpdir(), 'dpdk-afp-'));
  let dp: DataplaneApi | null = null;
  const inNs = (args: string[]) =>
    new Promise<string>((resolve) =>
      execFile('ip', ['netns', 'exec', v.ns, ...args], { timeout: 20000 }, (_e, out, err) => resolve(out + err)),
    );
  const csumErrors = async () => {
    const t = await inNs(['cat', '/proc/net/snmp']);
    const get = (g: string) => {
      const [h, d] = t.split('\n').filter((l) => l.startsWith(`${g}:`));
      const names = h.split(/\s+/),
        vals = d.split(/\s+/);
      return Number(vals[names.indexOf('InCsumErrors')]);
    };
    return get('Icmp') + get('Udp');
  };
  try {
    dp = await Dataplane.create(
      baseConfig({
        buffers: { count: 4096, dataSize: 2048 },
        capture: { dir, maxBytes: 2 ** 22 },
        interfaces: [
          dpdkInterface('ap0', `net_af_packet9,iface=${v.host},qpairs=1`, '10.80.0.1/24', '02:fe:00:00:80:01'),
        ],
      }),
    );
    Dataplane.internals(dp).net.udp.bind(7, 'udp-echo');
    // DPDK's net_af_packet ignores TP_STATUS_CSUMNOTREADY: a datagram the kernel sends over veth
    // with its checksum left to offload arrives unfinished and udp4-input drops it (counted).
    // So the kernel end computes its checksums (rdma-graph's own af_packet driver needs no such step).
    await inNs(['ethtool', '-K', v.peer, 'tx', 'off']);
    await dp.capture('ap0', { direction: 'tx', file: 'tx.pcap', count: 1000 });
    const before = await csumErrors();
    const ping = await inNs(['ping', '-n', '-c', '20', '-i', '0.01', '-W', '1', '10.80.0.1']);
    assert.match(ping, /20 packets transmitted, 20 received, 0% packet loss/, ping);
    const echo = await inNs([
      'python3',
      '-c',
      'import os,socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(1)\nok=0\nfor n in (0,1,100,1000,1472):\n d=os.urandom(n); s.sendto(d,("10.80.0.1",7))\n b,a=s.recvfrom(65536); ok+= (b==d and a==("10.80.0.1",7))\nprint("echo",ok)',
    ]);
    assert.match(echo, /^echo 5$/m, echo);
    assert.is(await csumErrors(), before, 'the kernel counted no ICMP or UDP checksum error in what we sent');
    await dp.stopCapture('ap0');
    // tshark's verdict on every IPv4, ICMP and UDP checksum we sent (1 = Good).
    if (spawnSync('tshark', ['-v']).status !== 0) {
      skip('tshark is not installed (Debian package tshark)');
    } else {
      const r = spawnSync(
        'tshark',
        [
          '-n',
          '-r',
          join(dir, 'tx.pcap'),
          '-o',
          'ip.check_checksum:TRUE',
          '-o',
          'udp.check_checksum:TRUE',
          '-Y',
          'icmp || udp',
          '-T',
          'fields',
          '-e',
          'ip.checksum.status',
          '-e',
          'icmp.checksum.status',
          '-e',
          'udp.checksum.status',
        ],
        { encoding: 'utf8', env: { ...process.env, HOME: dir } },
      );
      assert.is(r.status, 0, r.stderr);
      const rows = r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split('\t'));
      assert.is(rows.length, 25, `20 echo replies and 5 UDP echoes:\n${r.stdout}`);
      for (const [ip, icmp, udp] of rows) {
        assert.is(ip, '1', 'IPv4 header checksum Good');
        assert.is(icmp || udp, '1', `ICMP or UDP checksum Good: ${[ip, icmp, udp]}`);
      }
    }
    const hw = (await dp.hardware())[0];
    assert.is(hw.info.pmd, 'net_af_packet');
    // net_af_packet keeps no multicast list and has no all-multicast mode: a joined group is
    // left to what the device passes, and show hardware says so.
    assert.match(await multicastMode(dp), /^not filtered by the port/);
  } finally {
    await dp?.close();
    destroyVethNs(v);
    rmSync(dir, { recursive: true, force: true });
  }
  assertMempoolWhole(dp!);
});

test('transmit checksum offload on net_tap: the port computes IPv4 and UDP checksums we leave to it; the kernel accepts every echo', async () => {
  ready();
  const nowhy = netnsUnavailable(); // root and iproute2: the same needs as the namespace tests
  if (nowhy !== null) skip(nowhy);
  const tap = `rgtap${process.pid % 10000}`;
  const sh = (cmd: string, args: string[]) =>
    new Promise<string>((resolve) => execFile(cmd, args, { timeout: 20000 }, (_e, out, err) => resolve(out + err)));
  const csumErrors = async () => {
    const t = await sh('cat', ['/proc/net/snmp']);
    const get = (g: string) => {
      const [h, d] = t.split('\n').filter((l) => l.startsWith(`${g}:`));
      return Number(d.split(/\s+/)[h.split(/\s+/).indexOf('InCsumErrors')]);
    };
    return get('Udp');
  };
  let dp: DataplaneApi | null = null;
  try {
    dp = await Dataplane.create(
      baseConfig({
        buffers: { count: 4096, dataSize: 2048 },
        interfaces: [dpdkInterface('tp1', `net_tap7,iface=${tap}`, '10.82.0.2/24', '02:fe:00:00:82:02')],
      }),
    );
    const { net, ifs } = Dataplane.internals(dp);
    net.udp.bind(7, 'udp-echo');
    const hw = (await dp.hardware())[0];
    assert.is(hw.info.pmd, 'net_tap');
    assert.match(String(hw.info['tx offloads']), /IPV4_CKSUM/, JSON.stringify(hw.info));
    assert.match(String(hw.info['tx offloads']), /UDP_CKSUM/);
    assert.is(net.interfaces.txOffload[ifs.all()[0].index], 3, 'the graph leaves both checksums to the port');
    await sh('ip', ['addr', 'add', '10.82.0.1/24', 'dev', tap]);
    await sh('ip', ['link', 'set', tap, 'up']);
    const before = await csumErrors();
    // Every echo goes out through udp4-encap and ip4-rewrite with both checksums left to the
    // port; the kernel drops a datagram whose IPv4 or UDP checksum is wrong.
    const echo = await sh('python3', [
      '-c',
      'import os,socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(1)\nok=0\nfor n in (0,1,100,1000,1472)*4:\n d=os.urandom(n); s.sendto(d,("10.82.0.2",7))\n try:\n  b,a=s.recvfrom(65536); ok+= (b==d and a==("10.82.0.2",7))\n except socket.timeout: pass\nprint("echo",ok)',
    ]);
    assert.match(echo, /^echo 20$/m, echo);
    assert.is(await csumErrors(), before, 'the kernel counted no UDP checksum error');
    // net_tap takes a multicast list.
    assert.is(await multicastMode(dp), "the port's multicast list");
  } finally {
    await dp?.close();
  }
  assertMempoolWhole(dp!);
});

test('bad configurations: an unknown vdev and other EAL arguments name the interface and the reason', async () => {
  ready();
  const refused = async (c: ReturnType<typeof baseConfig>, re: RegExp) => {
    const e = await Dataplane.create(c).then(
      (dp) => (dp.close(), null),
      (x: unknown) => x,
    );
    assert.instance(e, DataplaneError);
    assert.match((e as Error).message, re);
  };
  await refused(
    baseConfig({ interfaces: [dpdkInterface('bad0', 'net_nosuchpmd0', '10.77.3.1/24', '02:fe:00:00:03:01')] }),
    /^interface bad0 \(line 1\): DPDK device "net_nosuchpmd0": rte_dev_probe\("net_nosuchpmd0"\): /,
  );
  await refused(
    baseConfig({
      interfaces: [dpdkInterface('bad1', 'net_ring3', '10.77.4.1/24', '02:fe:00:00:04:01', ['--log-level=debug'])],
    }),
    /^interface bad1 \(line 1\): dpdk\.eal-args differ from another dpdk interface's/,
  );
});

test.run();
