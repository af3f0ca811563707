import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { BufferFlag, formatTrace } from '../graph/index.ts';
import { foldSum, ip4HeaderSum20, rangeSum } from '../nodes/ip4/ip4.ts';
import { parseIp4 as parseIp4Addr } from '../nodes/net/address.ts';
import {
  eth,
  icmpEcho,
  inetChecksum,
  ip4,
  makeStack,
  parseEth,
  parseIp4,
  PEER_IP,
  PEER_MAC,
  pingFrame,
  udpFrame,
  US_IP,
  US_MAC,
} from './l2l4-helpers.ts';

const data = (n: number, seed = 1) => Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff);

/** Check an echo reply to a request carrying (id, seq, payload): returns the parsed IP. */
function checkEchoReply(frame: Uint8Array, id: number, seq: number, payload: number[]) {
  const e = parseEth(frame);
  assert.equal([e.dst, e.src, e.type], [PEER_MAC, US_MAC, 0x0800]);
  const p = parseIp4(e.payload);
  assert.ok(p.checksumOk, 'IPv4 header checksum valid (independent check)');
  assert.equal([p.version, p.ihl, p.src, p.dst, p.proto, p.ttl], [4, 5, US_IP, PEER_IP, 1, 64]);
  assert.is(p.totalLength, 20 + 8 + payload.length);
  assert.is(e.payload.length, p.totalLength, 'no padding or trailing bytes echoed');
  assert.is(inetChecksum(p.payload), 0, 'ICMP checksum valid over the whole message (independent check)');
  const m = p.payload;
  assert.equal([m[0], m[1], m[4] * 256 + m[5], m[6] * 256 + m[7]], [0, 0, id, seq]);
  assert.equal(Array.from(m.subarray(8)), payload, 'echo data unchanged');
  return p;
}

test('ICMP echo request: answered with valid IPv4 and ICMP checksums', () => {
  const s = makeStack();
  const payload = data(56);
  const out = s.run(pingFrame({ id: 0x1234, seq: 9, data: payload }));
  assert.is(out.length, 1);
  const p = checkEchoReply(out[0], 0x1234, 9, payload);
  assert.is(p.frag, 0x4000, 'DF kept');
  assert.is(s.err('icmp4-echo', 'replies'), 1);
  assert.is(s.pool.available(), s.pool.count);
});

test('ICMP echo: odd-length data, Ethernet padding trimmed, TTL 1 accepted (a host does not forward)', () => {
  const s = makeStack();
  const small = data(3);
  const f = pingFrame({ data: small, ip: { ttl: 1 } });
  const padded = [...f, ...new Array(60 - f.length).fill(0xee)];
  const out = s.run(padded, pingFrame({ data: data(1001), seq: 2 }));
  assert.is(out.length, 2);
  checkEchoReply(out[0], 7, 1, small);
  checkEchoReply(out[1], 7, 2, data(1001));
});

test('ICMP echo of a chained packet (odd segment boundaries): checksum over every segment', () => {
  const s = makeStack({ dataSize: 256 });
  const payload = data(3001, 5);
  const frame = pingFrame({ data: payload, seq: 3 });
  // 14+20 bytes of headers, then segments of odd sizes: the ICMP message crosses odd boundaries.
  const out = s.run({ bytes: frame, segments: [101, 77, 255, 3, 256] });
  assert.is(out.length, 1);
  assert.ok(s.drv.txSegments[0] > 1, 'the reply went out chained (in place)');
  checkEchoReply(out[0], 7, 3, payload);
  assert.is(s.pool.available(), s.pool.count);
});

test('ip4-input drops: each reason its own counter; every input accounted for; nothing leaks', () => {
  const s = makeStack();
  const icmp = icmpEcho(8, 1, 1, data(16));
  const base = { src: PEER_IP, dst: US_IP, proto: 1, payload: icmp };
  const frame = (f: Partial<Parameters<typeof ip4>[0]>) => eth(US_MAC, PEER_MAC, 0x0800, ip4({ ...base, ...f }));
  const good = frame({});
  const cases: [string, number[]][] = [
    ['too_short', eth(US_MAC, PEER_MAC, 0x0800, good.slice(14, 14 + 19))],
    ['bad_version', frame({ version: 6 })],
    ['bad_ihl', frame({ ihl: 4 })],
    ['bad_length', frame({ totalLength: 19 })],
    ['truncated', frame({ totalLength: 20 + icmp.length + 1 })],
    ['bad_checksum', frame({ checksum: 0x1234 })],
    ['options', frame({ options: [0x94, 0x04, 0, 0] })], // router alert
    ['fragment', frame({ frag: 0x2000 })], // more fragments
    ['fragment', frame({ frag: 0x0010 })], // a later fragment
    ['ttl0', frame({ ttl: 0 })],
    ['martian_source', frame({ src: '224.0.0.1' })],
    ['martian_source', frame({ src: '127.0.0.1' })],
    ['not_for_us', frame({ dst: '10.0.0.9' })],
    ['broadcast', frame({ dst: '10.0.0.255' })],
    ['broadcast', frame({ dst: '255.255.255.255' })],
    ['broadcast', frame({ dst: '239.1.2.3' })],
    ['unknown_protocol', frame({ proto: 6 })],
    ['unknown_protocol', frame({ proto: 47 })],
  ];
  const out = s.run(...cases.map(([, f]) => f), good);
  assert.is(out.length, 1, 'only the good ping is answered');
  const want = new Map<string, number>();
  for (const [name] of cases) want.set(name, (want.get(name) ?? 0) + 1);
  for (const [name, n] of want) assert.is(s.err('ip4-input', name), n, name);
  assert.is(s.drops(), cases.length);
  assert.is(out.length + s.drops(), s.inputs, 'every input accounted for');
  assert.is(s.pool.available(), s.pool.count);
});

test('IP4_CKSUM_OK from the driver skips header checksum verification', () => {
  const s = makeStack();
  const bad = pingFrame({ data: data(8), ip: { checksum: 0xbeef } });
  const out = s.run({ bytes: bad, flags: BufferFlag.IP4_CKSUM_OK }, bad);
  assert.is(out.length, 1, 'the flagged one is trusted, the other fails');
  assert.is(s.err('ip4-input', 'bad_checksum'), 1);
  assert.ok(parseIp4(parseEth(out[0]).payload).checksumOk, 'the reply gets a correct new checksum');
});

test('icmp4-echo: bad checksum, truncated, echo replies and other types are counted and dropped', () => {
  const s = makeStack();
  const m = (payload: number[]) => eth(US_MAC, PEER_MAC, 0x0800, ip4({ src: PEER_IP, dst: US_IP, proto: 1, payload }));
  const frames = [
    pingFrame({ data: data(8), checksum: 0x0bad }),
    m([8, 0, 0xf7, 0xff, 0, 0, 0]), // 7 bytes
    m(icmpEcho(0, 1, 1, data(8))), // an echo reply nobody asked for
    m(icmpEcho(3, 0, 0, data(28))), // destination unreachable
  ];
  assert.is(s.run(...frames).length, 0);
  assert.is(s.err('icmp4-echo', 'bad_checksum'), 1);
  assert.is(s.err('icmp4-echo', 'truncated'), 1);
  assert.is(s.err('icmp4-echo', 'echo_reply'), 1);
  assert.is(s.err('icmp4-echo', 'other_type'), 1);
  assert.is(s.drops(), frames.length);
  assert.is(s.pool.available(), s.pool.count);
});

test('the unrolled header sum and the word sums agree with the byte-pair checksum', () => {
  const s = makeStack();
  const pool = s.pool;
  const bi = pool.allocOne();
  let seed = 12345;
  const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 24;
  for (let k = 0; k < 300; k++) {
    const len = 20 + (k % 97);
    const b = Array.from({ length: len }, rnd);
    if (k % 10 === 0) b.fill(0xff);
    pool.u8.set(b, pool.offset[bi]);
    const ref = inetChecksum(b);
    assert.is(
      ~rangeSum(pool.view, pool.u8, pool.offset[bi], len) & 0xffff,
      ref === 0xffff ? 0xffff : ref,
      `range ${len}`,
    );
    assert.is(
      ~ip4HeaderSum20(pool.view, pool.offset[bi]) & 0xffff,
      inetChecksum(b.slice(0, 20)) === 0xffff ? 0xffff : inetChecksum(b.slice(0, 20)),
    );
  }
  assert.is(foldSum(5 * 0xffffffff), 0xffff);
  assert.is(parseIp4Addr('255.255.255.255'), 0xffffffff);
  pool.freeOne(bi);
});

test('show trace: ip4-input and icmp4-echo records', () => {
  const s = makeStack();
  s.g.traceAdd('list-input', 1);
  s.run(pingFrame({ id: 1, seq: 2, data: data(4), ip: { id: 0x42 } }));
  const text = formatTrace([s.g.traceSnapshot()]);
  assert.match(text, `ICMP: ${PEER_IP} -> ${US_IP}\n    tos 0x00, ttl 64, length 32, checksum 0x`);
  assert.match(text, 'fragment id 0x0042, flags DONT_FRAGMENT\n    checksum ok, next icmp4-echo');
  assert.match(
    text,
    /icmp4-echo\n  ICMP echo_request code 0 checksum 0x[0-9a-f]{4} id 1 seq 2 length 12\n    echo reply sent/,
  );
  assert.match(text, /tst0-output/);
});

test('UDP with IP options is refused before UDP sees it', () => {
  const s = makeStack();
  s.run(udpFrame({ payload: data(4), ip: { options: [1, 1, 1, 0] } }));
  assert.is(s.err('ip4-input', 'options'), 1);
  assert.is(s.g.nodeCounters('udp4-input').vectors, 0);
});

test.run();
