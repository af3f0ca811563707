import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { formatErrors, formatTrace } from '../graph/index.ts';
import {
  arp,
  arpReplyFrame,
  arpRequestFrame,
  BCAST,
  eth,
  hex,
  makeStack,
  mac,
  OTHER_MAC,
  parseArp,
  parseEth,
  PEER_IP,
  PEER_MAC,
  US_IP,
  US_MAC,
  vlanEth,
} from './l2l4-helpers.ts';

/** The reply we expect to a request from (sha, spa) for our address, built here byte by byte. */
function expectedReply(sha: string, spa: string): string {
  return hex(eth(sha, US_MAC, 0x0806, arp({ op: 2, sha: US_MAC, spa: US_IP, tha: sha, tpa: spa })));
}

test('ARP request for our address: answered in place, sender learned, counted', () => {
  const s = makeStack();
  const out = s.run(arpRequestFrame(PEER_IP, US_IP));
  assert.is(out.length, 1);
  assert.is(hex(out[0]), expectedReply(PEER_MAC, PEER_IP), 'exact reply bytes (42, no padding)');
  const r = parseArp(parseEth(out[0]).payload);
  assert.equal([r.op, r.sha, r.spa, r.tha, r.tpa], [2, US_MAC, US_IP, PEER_MAC, PEER_IP]);
  const nb = s.net.neighbors.get(s.itf.index, PEER_IP);
  assert.ok(nb);
  assert.equal([nb.mac, nb.state], [PEER_MAC, 'reachable']);
  assert.is(s.err('arp-input', 'replies_sent'), 1);
  assert.is(s.err('arp-input', 'learned'), 1);
  assert.is(s.drops(), 0);
  assert.is(s.pool.available(), s.pool.count, 'no buffer leaked');
});

test('ARP padded to 60 bytes and sent to our MAC (unicast probe): reply trimmed to 42 bytes', () => {
  const s = makeStack();
  const f = eth(US_MAC, PEER_MAC, 0x0806, arp({ op: 1, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP }));
  const out = s.run([...f, ...new Array(60 - f.length).fill(0)]);
  assert.is(out.length, 1);
  assert.is(hex(out[0]), expectedReply(PEER_MAC, PEER_IP));
});

test('ARP probe (sender 0.0.0.0, RFC 5227) for our address is answered but teaches nothing', () => {
  const s = makeStack();
  const out = s.run(arpRequestFrame('0.0.0.0', US_IP));
  assert.is(out.length, 1);
  assert.is(hex(out[0]), expectedReply(PEER_MAC, '0.0.0.0'));
  assert.is(s.net.neighbors.entries().length, 0);
});

test('ARP not for us: consumed, not learned; but an existing entry is refreshed (merge)', () => {
  const s = makeStack();
  assert.is(s.run(arpRequestFrame(PEER_IP, '10.0.0.77')).length, 0);
  assert.is(s.net.neighbors.entries().length, 0, 'a request for someone else creates nothing');
  assert.is(s.err('arp-input', 'not_for_us'), 1);
  s.run(arpRequestFrame(PEER_IP, US_IP)); // now we know the peer
  // The peer moves to another MAC and announces it (gratuitous ARP, not addressed to us).
  assert.is(s.run(arpRequestFrame(PEER_IP, PEER_IP, OTHER_MAC)).length, 0);
  assert.is(s.net.neighbors.get(s.itf.index, PEER_IP)?.mac, OTHER_MAC);
  assert.is(s.err('arp-input', 'not_for_us'), 2);
  assert.is(s.drops(), 2, 'both consumed ARPs end in error-drop (counted)');
  assert.is(s.pool.available(), s.pool.count);
});

test('ARP reply addressed to us: learned and consumed ("ARP replies received")', () => {
  const s = makeStack();
  assert.is(s.run(arpReplyFrame('10.0.0.5', OTHER_MAC)).length, 0);
  assert.is(s.net.neighbors.get(s.itf.index, '10.0.0.5')?.mac, OTHER_MAC);
  assert.is(s.err('arp-input', 'reply_received'), 1);
  assert.is(s.drops(), 1);
});

test('static neighbors are not overwritten by ARP', () => {
  const s = makeStack({ neighbors: [{ address: PEER_IP, mac: PEER_MAC }] });
  s.run(arpReplyFrame(PEER_IP, OTHER_MAC));
  const nb = s.net.neighbors.get(s.itf.index, PEER_IP);
  assert.equal([nb?.mac, nb?.state], [PEER_MAC, 'static']);
  assert.is(s.err('arp-input', 'static_kept'), 1);
});

test('malformed and hostile ARP: each dropped with its own counter, nothing learned', () => {
  const s = makeStack();
  const good = arp({ op: 1, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP });
  const frames = [
    eth(BCAST, PEER_MAC, 0x0806, good.slice(0, 27)), // truncated
    eth(BCAST, PEER_MAC, 0x0806, arp({ op: 1, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP, htype: 6 })), // not Ethernet
    eth(BCAST, PEER_MAC, 0x0806, arp({ op: 9, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP })), // opcode
    eth(BCAST, PEER_MAC, 0x0806, arp({ op: 1, sha: '01:00:5e:00:00:01', spa: PEER_IP, tpa: US_IP })), // group sender
    arpRequestFrame(US_IP, US_IP, OTHER_MAC), // someone else claims our address
  ];
  assert.is(s.run(...frames).length, 0);
  assert.is(s.err('arp-input', 'truncated'), 1);
  assert.is(s.err('arp-input', 'bad_format'), 1);
  assert.is(s.err('arp-input', 'bad_opcode'), 1);
  assert.is(s.err('arp-input', 'bad_sender'), 1);
  assert.is(s.err('arp-input', 'conflict'), 1);
  assert.is(s.net.neighbors.entries().length, 0);
  assert.is(s.drops(), frames.length);
  assert.is(s.pool.available(), s.pool.count);
});

test('ethernet-input: destination MAC filter, EtherType dispatch, VLAN policy; every frame accounted for', () => {
  const s = makeStack();
  s.net.interfaces.subscribeMulticast(s.itf.index, '01:00:5e:00:00:fb');
  const req = arp({ op: 1, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP });
  const frames = [
    mac(US_MAC).slice(0, 6).concat([2, 0, 0]), // 9 bytes: truncated
    eth(OTHER_MAC, PEER_MAC, 0x0806, req), // unicast for someone else
    eth('01:00:5e:00:00:01', PEER_MAC, 0x0806, req), // multicast, not subscribed
    eth('01:00:5e:00:00:fb', PEER_MAC, 0x0806, req), // subscribed multicast: answered
    eth(US_MAC, PEER_MAC, 0x0806, req), // unicast to us: answered
    eth(BCAST, PEER_MAC, 0x0806, req), // broadcast: answered
    eth(US_MAC, PEER_MAC, 0x86dd, new Array(40).fill(0)), // IPv6
    eth(US_MAC, PEER_MAC, 0x88cc, new Array(40).fill(0)), // LLDP: unknown EtherType
    eth(US_MAC, PEER_MAC, 46, new Array(46).fill(0)), // 802.3 length field
    vlanEth(US_MAC, PEER_MAC, 0x0005, 0x0806, req), // VLAN 5: dropped
    vlanEth(US_MAC, PEER_MAC, 0xa000, 0x0806, req), // priority tag (PCP 5, VID 0): popped, answered
    [...mac(US_MAC), ...mac(PEER_MAC), 0x88, 0xa8, 0, 5, 0x81, 0, 0, 6, 0x08, 0x06, ...req], // QinQ
    [...mac(US_MAC), ...mac(PEER_MAC), 0x81, 0x00, 0x00], // tag cut short
  ];
  const out = s.run(...frames);
  assert.is(out.length, 4, 'four ARP replies');
  for (const f of out)
    assert.is(
      hex(f),
      hex(eth(PEER_MAC, US_MAC, 0x0806, arp({ op: 2, sha: US_MAC, spa: US_IP, tha: PEER_MAC, tpa: PEER_IP }))),
      'untagged reply',
    );
  const e = (n: string) => s.err('ethernet-input', n);
  assert.is(e('truncated'), 2);
  assert.is(e('not_our_mac'), 1);
  assert.is(e('mcast_not_subscribed'), 1);
  assert.is(e('ip6'), 1);
  assert.is(e('unknown_ethertype'), 1);
  assert.is(e('llc'), 1);
  assert.is(e('vlan'), 2);
  assert.is(e('priority_tag'), 1, 'info counter, not a drop');
  assert.is(out.length + s.drops(), frames.length, 'every input accounted for');
  assert.is(s.pool.available(), s.pool.count);
  const errs = formatErrors([s.g.errorSnapshot()]);
  assert.match(errs, /\s+2\s+ethernet-input\s+VLAN-tagged frame \(no sub-ifs\)\s+warn/);
  assert.match(errs, /\s+4\s+arp-input\s+ARP replies sent\s+info/);
});

test('frames on an interface with no IPv4 configuration are dropped and counted', () => {
  const s = makeStack();
  // Receive on an index the table does not know (as if the interface was never configured).
  s.drv.rx.push({ bytes: arpRequestFrame(PEER_IP, US_IP) });
  s.g.node('list-input'); // exists
  const saved = s.net.interfaces.configured[s.itf.index];
  s.net.interfaces.configured[s.itf.index] = 0;
  s.g.runPass();
  s.net.interfaces.configured[s.itf.index] = saved;
  assert.is(s.err('ethernet-input', 'not_configured'), 1);
  assert.is(s.pool.available(), s.pool.count);
});

test('gratuitous ARP on interface up', () => {
  const s = makeStack();
  assert.ok(s.net.announce(s.itf.index));
  const out = s.run();
  assert.is(out.length, 1);
  assert.is(hex(out[0]), hex(eth(BCAST, US_MAC, 0x0806, arp({ op: 1, sha: US_MAC, spa: US_IP, tpa: US_IP }))));
  assert.is(s.err('arp-input', 'gratuitous_sent'), 1);
  assert.throws(() => s.net.announce(9), /not configured/);
});

test('show trace: ethernet-input and arp-input records read like VPP', () => {
  const s = makeStack();
  s.g.traceAdd('list-input', 2);
  s.run(
    arpRequestFrame(PEER_IP, US_IP),
    eth(OTHER_MAC, PEER_MAC, 0x0806, arp({ op: 1, sha: PEER_MAC, spa: PEER_IP, tpa: US_IP })),
  );
  const text = formatTrace([s.g.traceSnapshot()]);
  assert.match(text, `ARP: ${PEER_MAC} -> ff:ff:ff:ff:ff:ff next arp-input`);
  assert.match(
    text,
    `request, type ethernet/IP4, address size 6/4\n  ${PEER_MAC}/${PEER_IP} -> 00:00:00:00:00:00/${US_IP}\n  reply sent`,
  );
  assert.match(text, /: tst0-output\n/);
  assert.match(text, `ARP: ${PEER_MAC} -> ${OTHER_MAC} next error-drop`);
  assert.match(text, /error-drop\n\s+ethernet-input: unicast to another MAC/);
});

test.run();
