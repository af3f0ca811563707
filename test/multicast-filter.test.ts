/**
 * The device's multicast filter follows the groups (Driver.multicastFilter): a NIC that is not
 * promiscuous drops a group's frames unless told of its MAC. On af_packet the socket's
 * PACKET_MR_MULTICAST memberships put each joined group's MAC (and all-systems') in the kernel
 * interface's list, as `ip maddr show` prints it, and take it out when the last group with
 * that MAC is left or the data plane closes. A filter that refuses a group refuses the join
 * before IGMP announces it. The af_packet test needs root (a veth pair); skipped with the reason
 * otherwise.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { parseConfig } from '../config/load.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { parseIp4 } from '../nodes/net/address.ts';
import { netnsUnavailable, vethPair } from './helpers-netns.ts';
import { sleep } from './helpers.ts';
import { makeStack } from './l2l4-helpers.ts';

const why = netnsUnavailable();
const tag = process.pid.toString(36);
const VA = `rgma${tag}`,
  VB = `rgmb${tag}`;

/** The link-layer multicast addresses the kernel interface `dev` receives (`ip maddr show`). */
function maddrs(dev: string): string[] {
  const r = spawnSync('ip', ['maddr', 'show', 'dev', dev], { encoding: 'utf8' });
  assert.is(r.status, 0, `ip maddr show dev ${dev}: ${r.stderr}`);
  return [...r.stdout.matchAll(/^\s+link\s+([0-9a-f:]{17})/gm)].map((m) => m[1]);
}

test('af_packet: a joined group is in the kernel interface multicast list until its last member leaves', async () => {
  if (why !== null) skip(`af_packet on a veth pair: ${why}`);
  vethPair(VA, VB);
  let dp: DataplaneApi | null = null;
  try {
    const before = maddrs(VA);
    // 239.5.5.5 and 239.133.5.5 share a MAC (the low 23 bits): it stays while either is joined.
    const mac = '01:00:5e:05:05:05';
    assert.not.ok(before.includes(mac), `not in the list before: ${before.join(' ')}`);
    dp = await createDataplane(
      parseConfig(
        `interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: { host-interface: ${VA} }\n    address: 10.73.0.1/24\n`,
        'filter.yaml',
      ),
    );
    const pd = await dp.createPd();
    const cq = await dp.createCq({ depth: 16 });
    const qp = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, type: 'ud' });
    const qp2 = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, type: 'ud' });
    assert.not.ok(maddrs(VA).includes(mac), 'a QP alone joins nothing');
    await dp.attachMcast(qp.qpn, '239.5.5.5');
    const joined = maddrs(VA);
    assert.ok(joined.includes(mac), `the group's MAC after attach: ${joined.join(' ')}`);
    assert.ok(joined.includes('01:00:5e:00:00:01'), `all-systems with it: ${joined.join(' ')}`);
    await dp.attachMcast(qp2.qpn, '239.133.5.5');
    await dp.detachMcast(qp.qpn, '239.5.5.5');
    assert.ok(maddrs(VA).includes(mac), 'still there: 239.133.5.5 has the same MAC');
    await dp.detachMcast(qp2.qpn, '239.133.5.5');
    assert.not.ok(maddrs(VA).includes(mac), `gone with the last group: ${maddrs(VA).join(' ')}`);
    // Joined again, then the data plane closes: the socket's membership goes with it.
    await dp.attachMcast(qp.qpn, '239.5.5.5');
    assert.ok(maddrs(VA).includes(mac));
    await dp.close();
    dp = null;
    await sleep(10);
    assert.not.ok(maddrs(VA).includes(mac), `gone when the data plane closed: ${maddrs(VA).join(' ')}`);
  } finally {
    await dp?.close();
    spawnSync('ip', ['link', 'del', VA]);
  }
});

test('a filter that refuses a group refuses the join: nothing joined, the watchers after it never told, the list as it was', () => {
  const s = makeStack();
  const t = s.net.interfaces,
    ix = s.itf.index;
  const told: string[][] = [];
  let refuse = false;
  t.follow(ix, {
    multicast: (macs) => {
      const list = [...Array(macs.length / 6).keys()].map((k) =>
        [...macs.subarray(k * 6, k * 6 + 6)].map((b) => b.toString(16).padStart(2, '0')).join(':'),
      );
      if (refuse) throw new Error('the device has no room');
      told.push(list);
    },
  });
  const seen: string[] = [];
  t.groups.watch((_ix, g, joined) => seen.push(`${joined ? '+' : '-'}${g.toString(16)}`));
  t.subscribeMulticast(ix, '33:33:00:00:00:01');
  t.groups.join(ix, parseIp4('239.1.1.1'), s.itf.name);
  assert.equal(told.at(-1), ['33:33:00:00:00:01', '01:00:5e:00:00:01', '01:00:5e:01:01:01']);
  refuse = true;
  assert.throws(() => t.groups.join(ix, parseIp4('239.2.2.2'), s.itf.name), /no room/);
  assert.not.ok(t.groups.member(ix, parseIp4('239.2.2.2')), 'not joined');
  assert.equal(seen, ['+ef010101'], 'the watcher after the filter never heard of 239.2.2.2');
  assert.throws(() => t.subscribeMulticast(ix, '33:33:00:00:00:02'), /no room/);
  refuse = false;
  t.groups.leave(ix, parseIp4('239.1.1.1'));
  assert.equal(told.at(-1), ['33:33:00:00:00:01'], 'the refused subscription is not kept either');
  assert.equal(seen, ['+ef010101', '-ef010101']);
});

test.run();
