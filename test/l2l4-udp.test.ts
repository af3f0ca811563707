import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { BufferFlag, formatErrors, formatTrace, OPAQUE_WORDS } from '../graph/index.ts';
import { Ip4Opaque } from '../nodes/ip4/ip4.ts';
import { formatIp4 } from '../nodes/net/address.ts';
import { setUdpDestination } from '../nodes/udp/udp-ports.ts';
import {
  hex,
  inetChecksum,
  makeStack,
  parseEth,
  parseIp4,
  parseUdp,
  PEER_IP,
  PEER_MAC,
  pseudoHeader,
  u16,
  udpFrame,
  US_IP,
  US_MAC,
} from './l2l4-helpers.ts';

const data = (n: number, seed = 3) => Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);
const PEER = [{ address: PEER_IP, mac: PEER_MAC }];

/** Parse a frame we sent to the peer as Ethernet/IPv4/UDP and check every header and checksum. */
function checkDatagram(
  frame: Uint8Array,
  o: { sport: number; dport: number; payload: number[]; src?: string; dst?: string; dstMac?: string },
) {
  const e = parseEth(frame);
  assert.equal([e.dst, e.src, e.type], [o.dstMac ?? PEER_MAC, US_MAC, 0x0800]);
  const p = parseIp4(e.payload);
  assert.ok(p.checksumOk, 'IPv4 header checksum valid (independent check)');
  assert.equal(
    [p.version, p.ihl, p.tos, p.ttl, p.proto, p.frag, p.src, p.dst],
    [4, 5, 0, 64, 17, 0x4000, o.src ?? US_IP, o.dst ?? PEER_IP],
  );
  assert.is(p.totalLength, 28 + o.payload.length);
  assert.is(e.payload.length, p.totalLength);
  const u = parseUdp(p);
  assert.ok(u.checksumOk, 'UDP checksum valid over the pseudo-header (independent check)');
  assert.equal([u.sport, u.dport, u.length], [o.sport, o.dport, 8 + o.payload.length]);
  assert.equal(Array.from(u.payload), o.payload);
  return { ip: p, udp: u };
}

test('UDP echo service: datagrams come back byte-identical with valid IPv4/UDP checksums', () => {
  const s = makeStack({ neighbors: PEER });
  s.net.udp.bind(7, 'udp-echo');
  const sizes = [0, 1, 18, 1001, 1472];
  const out = s.run(...sizes.map((n, k) => udpFrame({ sport: 40000 + k, dport: 7, payload: data(n, k) })));
  assert.is(out.length, sizes.length);
  sizes.forEach((n, k) => checkDatagram(out[k], { sport: 7, dport: 40000 + k, payload: data(n, k) }));
  const ids = out.map((f) => parseIp4(parseEth(f).payload).id);
  assert.is(new Set(ids).size, ids.length, 'a fresh identification per packet');
  assert.is(s.drops(), 0);
  assert.is(s.pool.available(), s.pool.count);
});

test('UDP: zero checksum accepted (counted), shorter UDP length trims, chained datagrams verified', () => {
  const s = makeStack({ neighbors: PEER, dataSize: 256 });
  s.net.udp.bind(7, 'udp-echo');
  const big = data(1200, 9);
  const out = s.run(
    udpFrame({ payload: data(10), checksum: 'zero' }),
    // IP payload 8+20 bytes but UDP says 8+12: the last 8 bytes are not part of the datagram.
    udpFrame({ payload: data(20), length: 20 }),
    { bytes: udpFrame({ payload: big, sport: 999 }), segments: [65, 99, 201] },
  );
  assert.is(out.length, 3);
  checkDatagram(out[0], { sport: 7, dport: 5000, payload: data(10) });
  checkDatagram(out[1], { sport: 7, dport: 5000, payload: data(20).slice(0, 12) });
  checkDatagram(out[2], { sport: 7, dport: 999, payload: big });
  assert.is(s.err('udp4-input', 'no_checksum'), 1);
  assert.is(s.pool.available(), s.pool.count);
});

test('udp4-input drops: bad checksum, bad length, truncated, no listener; all accounted for', () => {
  const s = makeStack({ neighbors: PEER });
  s.net.udp.bind(7, 'udp-echo');
  const good = udpFrame({ payload: data(12) });
  const badCk = udpFrame({ payload: data(12), checksum: 0x1234 });
  const frames = [
    badCk,
    udpFrame({ payload: data(12), length: 21 }), // longer than the IP payload
    udpFrame({ payload: data(12), length: 7 }), // shorter than a header
    udpFrame({ payload: [], ip: { totalLength: 20 + 6 } }).slice(0, 14 + 26), // 6 bytes of UDP
    udpFrame({ payload: data(12), dport: 9 }), // nobody listens
    good,
  ];
  const out = s.run(...frames);
  assert.is(out.length, 1);
  assert.is(s.err('udp4-input', 'bad_checksum'), 1);
  assert.is(s.err('udp4-input', 'bad_length'), 2);
  assert.is(s.err('udp4-input', 'truncated'), 1);
  assert.is(s.err('udp4-input', 'no_listener'), 1);
  assert.is(out.length + s.drops(), frames.length, 'every input accounted for');
  assert.is(s.pool.available(), s.pool.count);
  assert.match(formatErrors([s.g.errorSnapshot()]), /\s+1\s+udp4-input\s+no listener on UDP port\s+warn/);
});

test('UDP API: a callback listener gets payload + peer in opaque words and answers through send()', () => {
  const s = makeStack({ neighbors: PEER });
  const got: { payload: number[]; peer: string; ports: [number, number]; local: string }[] = [];
  const name = s.net.udp.listen(4791, (bufs, n, pool) => {
    for (let i = 0; i < n; i++) {
      const bi = bufs[i],
        w = bi * OPAQUE_WORDS;
      got.push({
        payload: Array.from(pool.packetBytes(bi)),
        peer: formatIp4(pool.opaque[w + Ip4Opaque.REMOTE]),
        ports: [pool.opaque[w + Ip4Opaque.PORTS] >>> 16, pool.opaque[w + Ip4Opaque.PORTS] & 0xffff],
        local: formatIp4(pool.opaque[w + Ip4Opaque.LOCAL]),
      });
      // Reverse the payload in place and send it back to where it came from.
      const o = pool.offset[bi],
        l = pool.length[bi];
      pool.u8.subarray(o, o + l).reverse();
    }
    assert.is(s.net.udp.send(bufs, 0, n), n);
  });
  assert.is(name, 'udp-listen-4791');
  const out = s.run(udpFrame({ sport: 1111, dport: 4791, payload: [1, 2, 3, 4, 5] }));
  assert.equal(got, [{ payload: [1, 2, 3, 4, 5], peer: PEER_IP, ports: [1111, 4791], local: US_IP }]);
  assert.is(out.length, 1);
  checkDatagram(out[0], { sport: 4791, dport: 1111, payload: [5, 4, 3, 2, 1] });
  assert.is(s.g.nodeCounters('udp4-send').vectors, 1, 'entered through the udp4-send input node');
});

test('UDP API: sendTo from the control plane; a computed checksum of 0 goes out as 0xFFFF', () => {
  const s = makeStack({ neighbors: PEER });
  // Choose the last two payload bytes so that the one's complement sum is 0xffff (checksum 0).
  const head = data(10);
  const partial = [
    ...pseudoHeader(US_IP, PEER_IP, 17, 20),
    ...u16(6000),
    ...u16(6001),
    ...u16(20),
    0,
    0,
    ...head,
    0,
    0,
  ];
  const sum = ~inetChecksum(partial) & 0xffff;
  const fill = 0xffff - sum;
  const payload = [...head, fill >>> 8, fill & 0xff];
  assert.ok(s.net.udp.sendTo(Uint8Array.from(payload), PEER_IP, 6001, 6000));
  const out = s.run();
  assert.is(out.length, 1);
  const { udp } = checkDatagram(out[0], { sport: 6000, dport: 6001, payload });
  assert.is(udp.checksum, 0xffff, 'RFC 768: a computed 0 is sent as all ones');
});

test('UDP API: datagrams still queued when the graph closes go back to the pool', () => {
  const s = makeStack({ neighbors: PEER });
  const before = s.pool.available();
  for (let i = 0; i < 3; i++) assert.ok(s.net.udp.sendTo(Uint8Array.from(data(100)), PEER_IP, 6001, 6000));
  assert.is(s.pool.available(), before - 3, 'queued, not yet sent');
  s.g.close();
  assert.is(s.pool.available(), before);
});

test('an interface that sends UDP without a checksum (memif udp-checksum: false): the field is 0, the rest of the frame as software sends it', () => {
  const payload = Uint8Array.from({ length: 333 }, (_, k) => (k * 7) & 0xff);
  const send = (off?: { ip4: boolean; udp: boolean; udpNone?: boolean }) => {
    const s = makeStack({ txChecksumOffload: off, neighbors: [{ address: PEER_IP, mac: PEER_MAC }] });
    assert.ok(s.net.udp.sendTo(payload, PEER_IP, 6001, 6000));
    const out = s.run();
    assert.is(out.length, 1);
    return { f: out[0], flags: s.drv.txFlags[0] };
  };
  const soft = send();
  const none = send({ ip4: false, udp: false, udpNone: true });
  assert.not.equal((soft.f[40] << 8) | soft.f[41], 0, 'software computes one');
  assert.is((none.f[40] << 8) | none.f[41], 0, 'no checksum: 0');
  assert.is(none.flags & BufferFlag.TX_UDP_CKSUM, 0, 'nothing asked of a NIC');
  const same = Uint8Array.from(none.f);
  same[40] = soft.f[40];
  same[41] = soft.f[41];
  assert.is(hex(same), hex(soft.f), 'otherwise the same frame');
});

test('transmit checksum offload: the IPv4 and UDP checksums are left to the NIC (flags, pseudo-header sum); finished as a NIC would, the frame is the one software sends', () => {
  const payloads = [0, 1, 99, 1000, 1472].map((n) => Uint8Array.from({ length: n }, (_, k) => (k * 13 + n) & 0xff));
  const send = (off?: { ip4: boolean; udp: boolean }) => {
    const s = makeStack({ txChecksumOffload: off, neighbors: [{ address: PEER_IP, mac: PEER_MAC }] });
    for (const p of payloads) assert.ok(s.net.udp.sendTo(p, PEER_IP, 6001, 6000));
    const out = s.run();
    assert.is(out.length, payloads.length);
    return { out, flags: s.drv.txFlags.slice() };
  };
  const soft = send();
  const hard = send({ ip4: true, udp: true });
  const sum = (b: Uint8Array, from: number, to: number) => {
    let x = 0;
    for (let k = from; k < to; k += 2) x += (b[k] << 8) | (k + 1 < to ? b[k + 1] : 0);
    while (x > 0xffff) x = (x & 0xffff) + (x >>> 16);
    return x;
  };
  hard.out.forEach((f, i) => {
    assert.is(soft.flags[i] & (BufferFlag.TX_IP4_CKSUM | BufferFlag.TX_UDP_CKSUM), 0, 'software: no request');
    assert.is(hard.flags[i] & BufferFlag.TX_IP4_CKSUM, BufferFlag.TX_IP4_CKSUM, 'IPv4 checksum requested');
    assert.is(hard.flags[i] & BufferFlag.TX_UDP_CKSUM, BufferFlag.TX_UDP_CKSUM, 'UDP checksum requested');
    assert.is((f[24] << 8) | f[25], 0, 'IPv4 checksum field left 0');
    assert.not.equal(hex(f), hex(soft.out[i]), 'not finished in software');
    // What the NIC does: the IPv4 header sum, and the UDP sum seeded with the pseudo-header sum
    // already in the field.
    const done = Uint8Array.from(f);
    const ip = ~sum(done, 14, 34) & 0xffff;
    done[24] = ip >> 8;
    done[25] = ip & 0xff;
    const u = ~sum(done, 34, done.length) & 0xffff || 0xffff;
    done[40] = u >> 8;
    done[41] = u & 0xff;
    assert.is(hex(done), hex(soft.out[i]), `payload ${payloads[i].length}: the same frame`);
  });
});

test('UDP API: bindings by address and wildcard, unbind, double bind refused', () => {
  const s = makeStack({ neighbors: PEER });
  const seen: string[] = [];
  s.net.udp.listen(
    5555,
    (b, n, pool) => {
      seen.push('exact');
      pool.free(b, 0, n);
    },
    { address: US_IP, name: 'exact-5555' },
  );
  s.net.udp.listen(5556, (b, n, pool) => {
    seen.push('wild');
    pool.free(b, 0, n);
  });
  assert.throws(() => s.net.udp.bind(5556, 'udp-echo'), /already bound to udp-listen-5556/);
  assert.throws(() => s.net.udp.bind(0, 'udp-echo'), /1\.\.65535/);
  assert.throws(() => s.net.udp.bind(7, 'no-such-node'), /does not exist/);
  s.run(udpFrame({ dport: 5555, payload: [1] }), udpFrame({ dport: 5556, payload: [2] }));
  assert.equal(seen, ['exact', 'wild']);
  assert.equal(
    s.net.udp.bound().map((b) => `${b.address}:${b.port}>${b.next}`),
    [`${US_IP}:5555>exact-5555`, '0.0.0.0:5556>udp-listen-5556'],
  );
  assert.ok(s.net.udp.unbind(5556));
  assert.not.ok(s.net.udp.unbind(5556));
  s.run(udpFrame({ dport: 5556, payload: [3] }));
  assert.is(s.err('udp4-input', 'no_listener'), 1);
  assert.is(s.pool.available(), s.pool.count);
});

test('transmit errors: no route, datagram over MTU, bad tx interface; gateway routing', () => {
  const s = makeStack({ neighbors: [...PEER, { address: '10.0.0.254', mac: '02:00:00:00:00:fe' }], mtu: 600 });
  assert.ok(s.net.udp.sendTo(Uint8Array.of(1), '192.168.1.1', 9, 9));
  assert.ok(s.net.udp.sendTo(new Uint8Array(600 - 28 + 1), PEER_IP, 9, 9));
  assert.ok(s.net.udp.sendTo(new Uint8Array(600 - 28), PEER_IP, 9, 9));
  // A producer that names a tx interface which has no IPv4 config.
  const bi = s.pool.allocOne();
  setUdpDestination(s.pool, bi, 0x0a000002, 9, 9);
  s.pool.opaque[bi * OPAQUE_WORDS + Ip4Opaque.L4] = 17 | (40 << 16);
  s.pool.length[bi] = 8; // a UDP header the producer wrote itself (content irrelevant here)
  s.g.enqueueOne(s.g.node('udp4-send'), 0, bi); // through udp4-encap, which re-routes: delivered
  const out = s.run();
  assert.is(s.err('udp4-encap', 'no_route'), 1);
  assert.is(s.err('udp4-encap', 'too_big'), 1);
  assert.is(out.length, 2, 'the datagram that fits, and the re-routed one');
  assert.equal(out.map((f) => parseIp4(parseEth(f).payload).totalLength).sort(), [36, 600]);
  // ip4-rewrite itself refuses an unknown interface index.
  const b2 = s.pool.allocOne();
  setUdpDestination(s.pool, b2, 0x0a000002, 9, 9);
  s.pool.opaque[b2 * OPAQUE_WORDS + Ip4Opaque.L4] = 17 | (40 << 16);
  s.g.enqueueOne(s.g.node('arp-input'), 1, b2); // arp-input's arc 1 is ip4-rewrite
  s.run();
  assert.is(s.err('ip4-rewrite', 'bad_interface'), 1);
  assert.is(s.pool.available(), s.pool.count);

  const gw = makeStack({ gateway: '10.0.0.254', neighbors: [{ address: '10.0.0.254', mac: '02:00:00:00:00:fe' }] });
  assert.ok(gw.net.udp.sendTo(Uint8Array.of(7, 7), '192.168.1.1', 9, 10));
  const o2 = gw.run();
  assert.is(o2.length, 1);
  checkDatagram(o2[0], { sport: 10, dport: 9, payload: [7, 7], dst: '192.168.1.1', dstMac: '02:00:00:00:00:fe' });
});

test('show trace: the UDP echo path from wire to wire', () => {
  const s = makeStack({ neighbors: PEER });
  s.net.udp.bind(7, 'udp-echo');
  s.g.traceAdd('list-input', 1);
  s.run(udpFrame({ sport: 5000, dport: 7, payload: data(28) }));
  const text = formatTrace([s.g.traceSnapshot()]);
  for (const node of [
    'list-input',
    'ethernet-input',
    'ip4-input',
    'udp4-input',
    'udp-echo',
    'udp4-encap',
    'ip4-rewrite',
    'tst0-output',
    'tst0-tx',
  ]) {
    assert.match(text, new RegExp(`: ${node}\\n`), node);
  }
  assert.match(text, /UDP: 10\.0\.0\.2:5000 -> 10\.0\.0\.1:7 length 36 checksum 0x[0-9a-f]{4}\n    next udp-echo/);
  assert.match(text, 'echo 28 bytes back to 10.0.0.2:5000');
  assert.match(text, /UDP: 10\.0\.0\.1:7 -> 10\.0\.0\.2:5000 length 36 checksum 0x[0-9a-f]{4}\n    via tst0/);
  assert.match(
    text,
    `IP4: ${US_MAC} -> ${PEER_MAC} via ${PEER_IP} on tst0\n  UDP: ${US_IP} -> ${PEER_IP}\n    tos 0x00, ttl 64, length 56`,
  );
});

test.run();
