import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Graph, formatErrors } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { PcapDriver } from '../drivers/pcap.ts';
import { PcapReader } from '../drivers/pcap-file.ts';
import { createPipe } from '../drivers/pipe.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import { memPool } from './helpers.ts';
import {
  arp,
  arpRequestFrame,
  eth,
  hex,
  icmpEcho,
  ip4,
  manualClock,
  OTHER_MAC,
  PEER_IP,
  PEER_MAC,
  pingFrame,
  udp,
  udpFrame,
  US_IP,
  US_MAC,
  vlanEth,
} from './l2l4-helpers.ts';

function writePcap(path: string, frames: number[][]): void {
  const parts: Uint8Array[] = [];
  const gh = new DataView(new ArrayBuffer(24));
  gh.setUint32(0, 0xa1b2c3d4, true);
  gh.setUint16(4, 2, true);
  gh.setUint16(6, 4, true);
  gh.setUint32(16, 65535, true);
  gh.setUint32(20, 1, true);
  parts.push(new Uint8Array(gh.buffer));
  frames.forEach((fr, k) => {
    const rh = new DataView(new ArrayBuffer(16));
    rh.setUint32(0, 1700000000, true);
    rh.setUint32(4, k, true);
    rh.setUint32(8, fr.length, true);
    rh.setUint32(12, fr.length, true);
    parts.push(new Uint8Array(rh.buffer), Uint8Array.from(fr));
  });
  writeFileSync(path, Buffer.concat(parts));
}

const payload = (n: number) => Array.from({ length: n }, (_, i) => (i * 5 + 1) & 0xff);

test('pcap in -> L2-L4 graph -> pcap out: the replies written are exactly the expected frames', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rg-l2l4-'));
  try {
    const good = [
      arpRequestFrame(PEER_IP, US_IP), // teaches us the peer too
      pingFrame({ id: 0x77, seq: 1, data: payload(40), ip: { id: 0x1111 } }),
      udpFrame({ sport: 5000, dport: 7, payload: payload(33) }),
    ];
    const udpBase = { src: PEER_IP, dst: US_IP, proto: 17 };
    const bad: [string, string, number[]][] = [
      ['ethernet-input', 'truncated', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]],
      ['ip4-input', 'bad_checksum', pingFrame({ data: payload(8), ip: { checksum: 0xabcd } })],
      ['udp4-input', 'bad_checksum', udpFrame({ payload: payload(8), checksum: 0x4242 })],
      [
        'ethernet-input',
        'not_our_mac',
        eth(
          OTHER_MAC,
          PEER_MAC,
          0x0800,
          ip4({ ...udpBase, payload: udp({ src: PEER_IP, dst: US_IP, sport: 1, dport: 7, payload: [] }) }),
        ),
      ],
      ['ip4-input', 'fragment', udpFrame({ payload: payload(8), ip: { frag: 0x2000 } })],
      ['ip4-input', 'options', udpFrame({ payload: payload(8), ip: { options: [0x01, 0x01, 0x01, 0x00] } })],
      ['ethernet-input', 'unknown_ethertype', eth(US_MAC, PEER_MAC, 0x9000, payload(46))],
      [
        'ip4-input',
        'unknown_protocol',
        eth(US_MAC, PEER_MAC, 0x0800, ip4({ ...udpBase, proto: 132, payload: payload(16) })),
      ],
      ['udp4-input', 'no_listener', udpFrame({ payload: payload(8), dport: 9 })],
      ['ip4-input', 'ttl0', udpFrame({ payload: payload(8), ip: { ttl: 0 } })],
      [
        'ethernet-input',
        'vlan',
        vlanEth(US_MAC, PEER_MAC, 100, 0x0806, arp({ op: 1, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP })),
      ],
    ];
    const inFile = join(dir, 'in.pcap'),
      outFile = join(dir, 'out.pcap');
    writePcap(inFile, [...good, ...bad.map(([, , f]) => f)]);

    const pool = memPool(256);
    const g = new Graph({ pool, clock: manualClock() });
    const net = registerL2L4(g);
    const ifs = new Interfaces(g);
    const drv = new PcapDriver('pcap0', { rxFile: inFile, txFile: outFile, mac: US_MAC });
    const itf = ifs.add(drv);
    net.addInterface({
      index: itf.index,
      name: 'pcap0',
      mac: drv.mac,
      address: `${US_IP}/24`,
      mtu: drv.mtu,
      output: itf.output.name,
    });
    net.udp.bind(7, 'udp-echo');
    g.build();
    for (let k = 0; k < 20 && (!drv.done() || g.runPass() > 0); k++) g.runPass();
    ifs.closeAll();

    const r = PcapReader.open(outFile);
    const got = Array.from({ length: r.count }, (_, i) =>
      hex(r.data.subarray(r.dataOffset[i], r.dataOffset[i] + r.inclLen[i])),
    );
    const expected = [
      eth(PEER_MAC, US_MAC, 0x0806, arp({ op: 2, sha: US_MAC, spa: US_IP, tha: PEER_MAC, tpa: PEER_IP })),
      eth(
        PEER_MAC,
        US_MAC,
        0x0800,
        ip4({ src: US_IP, dst: PEER_IP, proto: 1, id: 0x1111, ttl: 64, payload: icmpEcho(0, 0x77, 1, payload(40)) }),
      ),
      // The first packet through ip4-rewrite: identification 1.
      eth(
        PEER_MAC,
        US_MAC,
        0x0800,
        ip4({
          src: US_IP,
          dst: PEER_IP,
          proto: 17,
          id: 1,
          ttl: 64,
          payload: udp({ src: US_IP, dst: PEER_IP, sport: 7, dport: 5000, payload: payload(33) }),
        }),
      ),
    ].map(hex);
    assert.equal(got, expected);

    for (const [node, name] of bad) assert.is(g.errorCount(node, name), 1, `${node} ${name}`);
    assert.is(g.nodeCounters('error-drop').vectors, bad.length);
    assert.is(r.count + g.nodeCounters('error-drop').vectors, good.length + bad.length, 'every input accounted for');
    assert.is(pool.available(), pool.count, 'no buffer leaked');
    const errs = formatErrors([g.errorSnapshot()]);
    assert.match(errs, /\s+1\s+ip4-input\s+IPv4 fragment \(no reassembly\)\s+warn/);
    assert.match(errs, /\s+1\s+icmp4-echo\s+ICMP echo replies sent\s+info/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('two stacks back to back over a pipe: ARP both ways, UDP echo round trip, ping', () => {
  const pool = memPool(512);
  const [pa, pb] = createPipe('pa', 'pb', { macA: US_MAC, macB: PEER_MAC });
  const side = (drv: typeof pa, address: string) => {
    const g = new Graph({ pool, clock: manualClock() });
    const net = registerL2L4(g);
    const ifs = new Interfaces(g);
    const itf = ifs.add(drv);
    net.addInterface({ index: itf.index, name: drv.name, mac: drv.mac, address, output: itf.output.name });
    g.build();
    return { g, net, ifs, itf };
  };
  const a = side(pa, `${US_IP}/24`),
    b = side(pb, `${PEER_IP}/24`);
  b.net.udp.bind(7, 'udp-echo');
  const back: number[][] = [];
  a.net.udp.listen(6000, (bufs, n, p) => {
    for (let i = 0; i < n; i++) back.push(Array.from(p.packetBytes(bufs[i])));
    p.free(bufs, 0, n);
  });
  const spin = () => {
    for (let k = 0; k < 50; k++) if (a.g.runPass() + b.g.runPass() === 0) break;
  };
  a.net.announce(a.itf.index);
  spin();
  assert.is(b.net.neighbors.entries().length, 0, 'a gratuitous ARP does not create entries');
  for (let k = 0; k < 5; k++) assert.ok(a.net.udp.sendTo(Uint8Array.from(payload(100 + k)), PEER_IP, 7, 6000));
  spin();
  assert.equal(
    back,
    [0, 1, 2, 3, 4].map((k) => payload(100 + k)),
  );
  assert.is(a.net.neighbors.get(a.itf.index, PEER_IP)?.mac, PEER_MAC);
  assert.is(b.net.neighbors.get(b.itf.index, US_IP)?.mac, US_MAC, 'B learned A from its request');
  assert.is(b.g.errorCount('arp-input', 'replies_sent'), 1);
  assert.is(a.g.errorCount('ip4-rewrite', 'held'), 5);
  // B pings A through the graph (an ICMP echo built by hand, sent out of B's output node).
  const ping = pingFrame({ src: PEER_IP, dst: US_IP, data: payload(16) });
  const bi = pool.writePacket(Uint8Array.from(ping), 0, ping.length);
  b.g.enqueueOne(b.g.node('arp-input'), b.net.interfaces.attach(b.g.node('arp-input'))[b.itf.index], bi);
  spin();
  assert.is(a.g.errorCount('icmp4-echo', 'replies'), 1);
  assert.is(b.g.errorCount('icmp4-echo', 'echo_reply'), 1, 'the reply reached B (no pinger there: counted)');
  a.ifs.closeAll();
  b.ifs.closeAll();
  assert.is(pool.available(), pool.count);
});

test.run();
