/**
 * IGMPv2 host side (nodes/ip4/igmp4-input.ts): a group's first user sends an unsolicited
 * report and repeats it, the last one a leave to all routers; queries (general, group-specific,
 * IGMPv1's) are answered within their Max Response Time, once per group however many come;
 * another host's report suppresses ours; a bad checksum or a short message is counted. Every
 * frame sent is checked field by field (TTL 1, Router Alert, checksums computed here).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tsharkAvailable, tsharkEnv } from './helpers-tshark.ts';
import { parseIp4 as addr } from '../nodes/net/address.ts';
import {
  eth,
  inetChecksum,
  ip4,
  makeStack,
  manualClock,
  parseEth,
  PEER_IP,
  PEER_MAC,
  US_IP,
  US_MAC,
} from './l2l4-helpers.ts';

const GROUP = '239.1.2.3';
const ROUTER_ALERT = [0x94, 4, 0, 0];

function igmp(type: number, maxResp: number, group: string, checksum?: number): number[] {
  const m = [type, maxResp, 0, 0, ...group.split('.').map(Number)];
  const ck = checksum ?? inetChecksum(m);
  m[2] = ck >>> 8;
  m[3] = ck & 0xff;
  return m;
}

function query(maxResp: number, group = '0.0.0.0', checksum?: number): number[] {
  const dst = group === '0.0.0.0' ? '224.0.0.1' : group;
  const mac = group === '0.0.0.0' ? '01:00:5e:00:00:01' : '01:00:5e:01:02:03';
  return eth(
    mac,
    PEER_MAC,
    0x0800,
    ip4({
      src: PEER_IP,
      dst,
      proto: 2,
      ttl: 1,
      tos: 0xc0,
      options: ROUTER_ALERT,
      frag: 0,
      payload: igmp(0x11, maxResp, group, checksum),
    }),
  );
}

/** An IGMP message we sent: [type, group, IPv4 destination, Ethernet destination], every field checked. */
function sent(f: Uint8Array): [number, string, string, string] {
  const e = parseEth(f);
  assert.is(e.src, US_MAC);
  assert.is(e.type, 0x0800);
  const p = e.payload;
  assert.equal([p[0], p[1], p[8], p[9]], [0x46, 0xc0, 1, 2], 'IHL 6, TOS 0xc0, TTL 1, IGMP');
  assert.equal([...p.subarray(20, 24)], ROUTER_ALERT, 'the Router Alert option');
  assert.is(inetChecksum(p.subarray(0, 24)), 0, 'IPv4 header checksum (independent check)');
  assert.is((p[2] << 8) | p[3], 32, 'total length');
  assert.equal([...p.subarray(12, 16)], US_IP.split('.').map(Number));
  const m = p.subarray(24, 32);
  assert.is(inetChecksum(m), 0, 'IGMP checksum (independent check)');
  const dst = [...p.subarray(16, 20)].join('.');
  const mac = [0x01, 0x00, 0x5e, p[17] & 0x7f, p[18], p[19]].map((x) => x.toString(16).padStart(2, '0')).join(':');
  assert.is(e.dst, mac, 'the destination group MAC');
  return [m[0], [...m.subarray(4, 8)].join('.'), dst, e.dst];
}

function setup() {
  const clock = manualClock();
  const s = makeStack({ clock });
  const ix = s.net.interfaces.find('tst0');
  const groups = s.net.interfaces.groups;
  return { s, clock, ix, groups, g: addr(GROUP) };
}

test('IGMP: a join reports at once and again a second later; the last user leaves to all routers', () => {
  const { s, clock, ix, groups, g } = setup();
  groups.join(ix, g, 'tst0');
  let out = s.run();
  assert.equal(out.map(sent), [[0x16, GROUP, GROUP, '01:00:5e:01:02:03']]);
  groups.join(ix, g, 'tst0'); // a second user: nothing sent
  assert.equal(s.run(), []);
  clock.advance(1e9);
  out = s.run();
  assert.equal(out.map(sent), [[0x16, GROUP, GROUP, '01:00:5e:01:02:03']], 'the repeat');
  groups.leave(ix, g);
  assert.equal(s.run(), [], 'a user remains');
  groups.leave(ix, g);
  out = s.run();
  assert.equal(out.map(sent), [[0x17, GROUP, '224.0.0.2', '01:00:5e:00:00:02']]);
  assert.equal([s.err('igmp4-input', 'reports_sent'), s.err('igmp4-input', 'leaves_sent')], [2, 1]);
  clock.advance(20e9);
  assert.equal(s.run(), [], 'nothing after the leave');
  assert.is(s.pool.available(), s.pool.count);
});

test('IGMP: queries answered within their Max Response Time, once per group; suppression; bad ones counted', () => {
  const { s, clock, ix, groups, g } = setup();
  groups.join(ix, g, 'tst0');
  groups.join(ix, addr('239.9.9.9'), 'tst0');
  s.run();
  clock.advance(1e9);
  s.run(); // the repeats
  // A general query (Max Response Time 1 s), three times: one report per group within the second.
  assert.equal(s.run(query(10), query(10), query(10)), [], 'no report before its random delay');
  assert.is(s.err('igmp4-input', 'queries'), 3);
  clock.advance(1e9 + 1);
  const out = s.run().map(sent);
  assert.equal(out.map((m) => m[1]).sort(), ['239.1.2.3', '239.9.9.9']);
  assert.ok(out.every((m) => m[0] === 0x16 && m[2] === m[1]));
  // A group-specific query for one group, then another host's report for it: ours is suppressed.
  s.run(query(100, GROUP));
  s.run(
    eth(
      '01:00:5e:01:02:03',
      PEER_MAC,
      0x0800,
      ip4({ src: PEER_IP, dst: GROUP, proto: 2, ttl: 1, options: ROUTER_ALERT, payload: igmp(0x16, 0, GROUP) }),
    ),
  );
  assert.is(s.err('igmp4-input', 'reports_seen'), 1);
  clock.advance(11e9);
  assert.equal(s.run(), [], 'suppressed by the other report');
  // An IGMPv1 query (Max Response Time 0): within 10 s.
  s.run(query(0, GROUP));
  clock.advance(10e9 + 1);
  assert.equal(s.run().map(sent), [[0x16, GROUP, GROUP, '01:00:5e:01:02:03']]);
  // A bad checksum and a short message: counted, nothing scheduled.
  s.run(query(10, '0.0.0.0', 0x1234));
  s.run(
    eth(
      '01:00:5e:00:00:01',
      PEER_MAC,
      0x0800,
      ip4({ src: PEER_IP, dst: '224.0.0.1', proto: 2, ttl: 1, payload: [0x11, 10, 0, 0] }),
    ),
  );
  assert.equal([s.err('igmp4-input', 'bad_checksum'), s.err('igmp4-input', 'truncated')], [1, 1]);
  clock.advance(2e9);
  assert.equal(s.run(), []);
  assert.is(s.pool.available(), s.pool.count);
});

test('IGMP: with no group joined, a query to all systems is not taken (its MAC is not ours)', () => {
  const { s } = setup();
  assert.equal(s.run(query(10)), []);
  assert.is(s.err('igmp4-input', 'queries'), 0);
  assert.is(s.err('ethernet-input', 'mcast_not_subscribed'), 1);
  assert.is(s.pool.available(), s.pool.count);
});

/** A pcap file (Ethernet) of `frames`. */
function pcap(frames: Uint8Array[]): Buffer {
  const head = Buffer.alloc(24);
  head.writeUInt32LE(0xa1b2c3d4, 0);
  head.writeUInt16LE(2, 4);
  head.writeUInt16LE(4, 6);
  head.writeUInt32LE(65535, 16);
  head.writeUInt32LE(1, 20);
  const recs = frames.map((f, i) => {
    const r = Buffer.alloc(16);
    r.writeUInt32LE(i, 0);
    r.writeUInt32LE(f.length, 8);
    r.writeUInt32LE(f.length, 12);
    return Buffer.concat([r, Buffer.from(f)]);
  });
  return Buffer.concat([head, ...recs]);
}

test('IGMP: tshark decodes what we send as IGMPv2 report and leave, checksums good, Router Alert, TTL 1', () => {
  const why = tsharkAvailable();
  if (why !== null) skip(why);
  const { s, ix, groups, g } = setup();
  groups.join(ix, g, 'tst0');
  const frames = s.run();
  groups.leave(ix, g);
  frames.push(...s.run());
  const dir = mkdtempSync(join(tmpdir(), 'igmp-'));
  try {
    const file = join(dir, 'igmp.pcap');
    writeFileSync(file, pcap(frames));
    const fields = [
      'igmp.version',
      'igmp.type',
      'igmp.maddr',
      'igmp.checksum.status',
      'ip.opt.ra',
      'ip.ttl',
      'ip.checksum.status',
    ];
    const r = spawnSync(
      'tshark',
      ['-r', file, '-o', 'ip.check_checksum:TRUE', '-T', 'fields', ...fields.flatMap((f) => ['-e', f])],
      {
        encoding: 'utf8',
        env: tsharkEnv(),
        timeout: 60_000,
      },
    );
    assert.is(r.status, 0, r.stderr);
    assert.equal(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split('\t')),
      [
        ['2', '0x16', GROUP, '1', '0', '1', '1'],
        ['2', '0x17', GROUP, '1', '0', '1', '1'],
      ],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
