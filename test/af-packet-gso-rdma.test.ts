/**
 * RDMA between two data planes on the two ends of a veth pair with af_packet `gso: true` on
 * both: a QP's segments leave as GSO messages, cross the veth whole and are cut back into
 * datagrams by the receiving socket (native/core/afpacket_gso.h). SEND, WRITE and READ arrive
 * byte for byte; the counters show the messages on both sides and the veth carrying fewer
 * packets than datagrams. Needs root (veth); skipped with the reason otherwise.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { parseConfig } from '../config/load.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { linkStats, netnsUnavailable, vethPair } from './helpers-netns.ts';
import { sleep } from './helpers.ts';
import { connect, end, exchange } from './workers-helpers.ts';

const why = netnsUnavailable();
const tag = process.pid.toString(36);
const VA = `rgga${tag}`,
  VB = `rggb${tag}`;

const side = (name: string, dev: string, addr: string, gso: boolean) =>
  `interfaces:\n  - name: ${name}\n    driver: af_packet\n` +
  `    af_packet: { host-interface: ${dev}${gso ? ', gso: true' : ''} }\n    address: ${addr}/24\n`;

/** A (h0 on VA) and B (h1 on VB), once A's interface is up; each goes into `made` as it is created (to close). */
async function planes(gso: boolean, made: DataplaneApi[]): Promise<[DataplaneApi, DataplaneApi]> {
  made.push(await createDataplane(parseConfig(side('h0', VA, '10.73.0.1', gso), 'a.yaml')));
  made.push(await createDataplane(parseConfig(side('h1', VB, '10.73.0.2', gso), 'b.yaml')));
  const [a, b] = made;
  for (let i = 0; i < 200 && !(await a.interfaces()).every((x) => x.state === 'up'); i++) await sleep(20);
  return [a, b];
}

const counters = async (dp: DataplaneApi, name: string) => (await dp.hardware()).find((h) => h.name === name)!.counters;

test('gso on both ends of a veth: SEND, WRITE and READ arrive whole; segments cross as GSO messages and are cut back', async () => {
  if (why !== null) skip(`af_packet gso: ${why}`);
  vethPair(VA, VB);
  const made: DataplaneApi[] = [];
  try {
    const [a, b] = await planes(true, made);
    await sleep(100);
    const hw = (await a.hardware()).find((h) => h.name === 'h0')!;
    assert.match(String(hw.info.tx), /GSO messages/, 'show hardware says so');
    const x = await end(a, 'h0'),
      y = await end(b, 'h1');
    await connect(a, b, x, y, '10.73.0.1', '10.73.0.2');
    const kernelBefore = linkStats(VA).rxPackets;
    for (let seed = 1; seed <= 4; seed++) await exchange(a, b, x, y, seed, 35000);
    const ca = await counters(a, 'h0'),
      cb = await counters(b, 'h1');
    // B wrote 4 x 35000 bytes to A (~100 datagrams) and answered 4 READs of 20000.
    assert.ok(
      cb.txGsoMessages > 0 && cb.txGsoDatagrams > 2 * cb.txGsoMessages,
      `B sent GSO messages: ${JSON.stringify(cb)}`,
    );
    assert.ok(ca.rxGsoFrames > 0, `A cut them: ${JSON.stringify(ca)}`);
    assert.is(ca.rxGsoDropped, 0, 'none dropped');
    const crossed = linkStats(VA).rxPackets - kernelBefore;
    assert.ok(
      crossed < ca.rxPackets,
      `A's veth end carried fewer packets (${crossed}) than A received datagrams (${ca.rxPackets})`,
    );
    // Many small WRITEs back to back: datagrams too small to be GSO pieces go one by one.
    const small = Uint8Array.from({ length: 64 }, (_, i) => (i * 7 + 3) & 0xff);
    await b.writeMr(y.mr.mr, 60000, small);
    for (let k = 0; k < 64; k++)
      await b.postSend(y.qp.qpn, {
        wrId: `s${k}`,
        opcode: 'write',
        sge: [{ mr: y.mr.mr, offset: 60000 + k, length: 1 }],
        remote: { stag: x.mr.stag, offset: 61000 + k },
      });
    let done = 0;
    for (let i = 0; i < 200 && done < 64; i++) {
      const r = await b.pollCq(y.cq.cq, 64, 10);
      for (const c of r.completions) assert.is(c.status, 'success', `small WRITE ${String(c.wrId)}`);
      done += r.completions.length;
    }
    assert.is(done, 64, 'every small WRITE completed');
    assert.equal(await a.readMr(x.mr.mr, 61000, 64), small, 'and landed');
    assert.is((await counters(a, 'h0')).rxGsoDropped, 0, 'no GSO message refused');
    const qa = (await a.qps()).find((q) => q.qpn === x.qp.qpn)!;
    assert.is(qa.counters.retransmits, 0, 'nothing resent on the lossless veth');
  } finally {
    for (const d of made) await d.close();
    spawnSync('ip', ['link', 'del', VA]);
  }
});

test("no mtu configured: the interface takes its veth end's (9000) and follows it; a QP's segments are that large", async () => {
  if (why !== null) skip(`af_packet mtu: ${why}`);
  vethPair(VA, VB);
  const made: DataplaneApi[] = [];
  try {
    for (const v of [VA, VB]) spawnSync('ip', ['link', 'set', v, 'mtu', '9000']);
    const [a, b] = await planes(false, made);
    assert.is((await a.interfaces()).find((i) => i.name === 'h0')!.mtu, 9000, "the kernel's MTU");
    const x = await end(a, 'h0'),
      y = await end(b, 'h1');
    await connect(a, b, x, y, '10.73.0.1', '10.73.0.2');
    const before = (await counters(a, 'h0')).rxPackets;
    // B WRITEs 4 x 35000 bytes to A (and answers READs of 20000): at 1500 that alone is ~100 datagrams.
    for (let seed = 1; seed <= 4; seed++) await exchange(a, b, x, y, seed, 35000);
    const got = (await counters(a, 'h0')).rxPackets - before;
    assert.ok(got < 60, `A received ${got} datagrams: segments of ~9000 bytes, not 1500`);
    // Lowered by the kernel: the interface follows (the data plane's link watch).
    for (const v of [VA, VB]) spawnSync('ip', ['link', 'set', v, 'mtu', '1500']);
    let mtu = 0;
    for (let i = 0; i < 300 && mtu !== 1500; i++) {
      await sleep(20);
      mtu = (await a.interfaces()).find((i) => i.name === 'h0')!.mtu;
    }
    assert.is(mtu, 1500, "followed the kernel's down");
  } finally {
    for (const d of made) await d.close();
    spawnSync('ip', ['link', 'del', VA]);
  }
});

test.run();
