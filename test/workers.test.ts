/**
 * cpu.workers: data plane A runs two worker threads, one memif interface on each; B (this
 * thread, workers: 0) is the peer of both. Checked through the Dataplane's own methods, as the
 * API uses them: placement and `show runtime` per thread, RDMA on each worker's interface
 * (SEND, WRITE, READ both ways, data compared), objects routed by handle and QP number,
 * cross-worker QPs refused, a crashing worker restarted with the daemon still serving, pinning.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import type { Config } from '../config/types.ts';
import { createDataplane } from '../dataplane/create.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { baseConfig } from './dataplane-helpers.ts';
import { eth, inetChecksum, ip4 } from './l2l4-helpers.ts';
import { sleep } from './helpers.ts';
import { connect, end, exchange, memifIf, pollOne } from './workers-helpers.ts';
import { bash, blocks, daemon, README, ROOT, runSessions } from './readme-helpers.ts';
import { runTool } from './verbs-helpers.ts';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let sockets = 0;

const MAC = (side: number, k: number) => `02:fe:00:00:0${side}:0${k}`;
const IP = (side: number, k: number) => `10.8${k}.0.${side}`;

/** A (workers) with m0 and m1, B (main thread) with n0 and n1; m_k <-> n_k. */
async function pair(over: Partial<Config['cpu']> = {}, workers = 2, placement: (number | null)[] = [null, null]) {
  const s = [0, 1].map((k) => `@rg-workers-${process.pid}-${++sockets}-${k}`);
  const logs: string[] = [];
  const a = await createDataplane(
    baseConfig({
      cpu: {
        workers,
        mainCore: null,
        corelistWorkers: null,
        poll: 'adaptive',
        idlePollUs: 200,
        idleYield: true,
        ...over,
      },
      interfaces: [0, 1].map((k) => memifIf(`m${k}`, s[k], 'server', IP(1, k), MAC(1, k), placement[k])),
      neighbors: [0, 1].map((k) => ({ interface: `m${k}`, address: IP(2, k), mac: MAC(2, k) })),
    }),
    { log: (l, m) => logs.push(`${l}: ${m}`) },
  );
  const b = await createDataplane(
    baseConfig({
      interfaces: [0, 1].map((k) => memifIf(`n${k}`, s[k], 'client', IP(2, k), MAC(2, k))),
      neighbors: [0, 1].map((k) => ({ interface: `n${k}`, address: IP(1, k), mac: MAC(1, k) })),
    }),
  );
  const up = async () => {
    for (let i = 0; i < 200; i++) {
      const all = [...(await a.interfaces()), ...(await b.interfaces())];
      if (all.every((x) => x.state === 'up')) return;
      await sleep(20);
    }
    assert.unreachable(
      `links not up: ${JSON.stringify([...(await a.interfaces()), ...(await b.interfaces())].map((x) => [x.name, x.state]))}`,
    );
  };
  await up();
  return {
    a,
    b,
    logs,
    up,
    async close() {
      await a.close();
      await b.close();
    },
  };
}

test('two workers: interfaces placed round robin, one show runtime section per worker with its own input node', async () => {
  const p = await pair();
  try {
    const rt = await p.a.runtime();
    assert.equal(
      rt.map((t) => [t.index, t.name]),
      [
        [1, 'rdma_wk_0'],
        [2, 'rdma_wk_1'],
      ],
    );
    assert.ok(
      rt.every((t) => t.rows.some((r) => r.name === 'memif-input' && r.calls > 0)),
      'each worker polls its memif',
    );
    const itfs = await p.a.interfaces();
    assert.equal(
      itfs.map((i) => [i.name, i.index]),
      [
        ['m0', 1],
        ['m1', 2],
      ],
      'one numbering across the workers, in file order',
    );
    assert.is((await p.a.interface('m1')).index, 2);
    assert.equal(
      (await p.a.hardware()).map((h) => h.index),
      [1, 2],
    );
    assert.is((await p.a.health()).interfaces, 2);
    assert.equal(
      (await p.a.devices()).map((d) => [d.name, d.interface, d.ports.length]),
      [
        ['rg_m0', 'm0', 1],
        ['rg_m1', 'm1', 1],
      ],
      'one device per interface, not one per worker',
    );
    assert.is((await p.a.buffers()).count, 2 * 8192, "the workers' pools together");
  } finally {
    await p.close();
  }
});

test("RDMA on each worker's interface: SEND, WRITE, READ both ways, data compared; handles and QPNs from each worker's range", async () => {
  const p = await pair();
  try {
    for (const k of [0, 1]) {
      const x = await end(p.a, `m${k}`),
        y = await end(p.b, `n${k}`);
      if (k === 1)
        assert.ok(
          x.pd.pd > 1 << 24 && x.cq.cq > 1 << 24 && x.mr.mr > 1 << 24,
          `worker 1's handles: ${JSON.stringify(x)}`,
        );
      assert.is(x.qp.local.ip, IP(1, k));
      await connect(p.a, p.b, x, y, IP(1, k), IP(2, k));
      await exchange(p.a, p.b, x, y, k);
      const q = await p.a.getQp(x.qp.qpn);
      assert.equal(q.remote, { ip: IP(2, k), port: y.qp.qpn });
    }
    const qps = await p.a.qps();
    assert.is(qps.length, 2);
    assert.ok(qps[0].qpn < qps[1].qpn, 'worker 0 takes the lower half of the port range');
  } finally {
    await p.close();
  }
});

test("a QP's objects must be on one worker; unknown handles and QPNs say not-found", async () => {
  const p = await pair();
  try {
    const pd0 = await p.a.createPd({ interface: 'm0' });
    const cq1 = await p.a.createCq({ depth: 16, interface: 'm1' });
    const err = await p.a.createQp({ pd: pd0.pd, sendCq: cq1.cq, recvCq: cq1.cq }).then(
      () => null,
      (e: Error & { kind: string }) => e,
    );
    assert.is(err?.kind, 'invalid');
    assert.match(err!.message, /pd \d+ is on worker 0 but send-cq \d+ on worker 1/);
    assert.match(
      await p.a.createPd({ worker: 2 }).then(
        () => 'made',
        (e: Error) => e.message,
      ),
      /worker 2: cpu.workers is 2/,
    );
    for (const call of [() => p.a.getMr(99 << 24), () => p.a.getQp(65000), () => p.a.createPd({ interface: 'nope' })])
      assert.is(
        await call().then(
          () => 'ok',
          (e: Error & { kind: string }) => e.kind,
        ),
        'not-found',
      );
  } finally {
    await p.close();
  }
});

test("worker 1: a listener accepts a CM connect, atomics, and a lossy link (fault on the worker's interface) still delivers", async () => {
  const p = await pair();
  try {
    const pd = await p.a.createPd({ interface: 'm1' });
    const cq = await p.a.createCq({ depth: 256, interface: 'm1' });
    const mr = await p.a.createMr({
      pd: pd.pd,
      length: 65536,
      access: ['local-write', 'remote-write', 'remote-read', 'remote-atomic'],
    });
    const l = await p.a.listen({ port: 18600, pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, maxSendWr: 16, maxRecvWr: 16 });
    assert.is(l.port, 18600);
    const y = await end(p.b, 'n1');
    const res = await p.b.connect(y.qp.qpn, { remote: { ip: IP(1, 1), port: 18600 }, mode: 'cm' });
    assert.is(res.state, 'rts');
    const [ls] = await p.a.listenersList();
    assert.is(ls.accepted.length, 1);
    const accepted = await p.a.getQp(ls.accepted[0]);
    assert.is(accepted.state, 'rts');
    assert.ok(
      accepted.qpn >= 25000,
      `the accepted QP is worker 1's (qpn ${accepted.qpn} in the upper half of 20000..29999)`,
    );
    // fetch-add from B on A's MR (worker 1).
    const t = new Uint8Array(8);
    new DataView(t.buffer).setBigUint64(0, 41n, true);
    await p.a.writeMr(mr.mr, 0, t);
    await p.b.postSend(y.qp.qpn, {
      wrId: 'fa',
      opcode: 'fetch-add',
      sge: [{ mr: y.mr.mr, offset: 0, length: 8 }],
      remote: { stag: mr.stag, offset: 0 },
      atomic: { add: '1' },
    });
    assert.is((await pollOne(p.b, y.cq.cq)).status, 'success');
    assert.is(new DataView((await p.a.readMr(mr.mr, 0, 8)).buffer).getBigUint64(0, true), 42n);
    // 30 % of what worker 1 receives is lost: 20 WRITEs of 3000 bytes all complete, data intact.
    await p.a.setFault('m1', 'rx', { seed: 5, loss: 0.3 });
    const data = Uint8Array.from({ length: 3000 }, (_, i) => (i * 13) & 0xff);
    await p.b.writeMr(y.mr.mr, 0, data);
    for (let i = 0; i < 20; i++)
      await p.b.postSend(y.qp.qpn, {
        wrId: i,
        opcode: 'write',
        sge: [{ mr: y.mr.mr, offset: 0, length: 3000 }],
        remote: { stag: mr.stag, offset: 8 + i * 3000 },
      });
    let done = 0;
    while (done < 20) {
      const r = await p.b.pollCq(y.cq.cq, 64, 3000);
      assert.ok(r.completions.length > 0, `completions stalled at ${done}`);
      for (const c of r.completions) assert.is(c.status, 'success');
      done += r.completions.length;
    }
    for (let i = 0; i < 20; i++) assert.equal(await p.a.readMr(mr.mr, 8 + i * 3000, 3000), data, `write ${i}`);
    const m1 = await p.a.interface('m1');
    assert.ok(m1.fault.rx !== null && m1.fault.rx.dropped > 0, JSON.stringify(m1.fault));
    assert.is((await p.a.interface('m0')).fault.rx, null, "worker 0's interface has no fault");
    await p.a.unlisten(18600);
    assert.equal(await p.a.listenersList(), []);
  } finally {
    await p.close();
  }
});

test("handoff: a QP on worker 1 over worker 0's interface; its frames cross through worker-handoff both ways (counted)", async () => {
  const p = await pair();
  try {
    // Worker 1 gets m0's traffic for its QPs through the handoff queue (m0 is remote there).
    const pd = await p.a.createPd({ interface: 'm0', worker: 1 });
    const cq = await p.a.createCq({ depth: 256, interface: 'm0', worker: 1 });
    assert.ok(pd.pd > 1 << 24 && cq.cq > 1 << 24, 'made on worker 1');
    const mr = await p.a.createMr({ pd: pd.pd, length: 65536, access: ['local-write', 'remote-write', 'remote-read'] });
    const qp = await p.a.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: 'm0' });
    assert.ok(qp.qpn >= 25000, `worker 1's QP number (${qp.qpn})`);
    assert.is(qp.local.ip, IP(1, 0), "m0's address");
    const y = await end(p.b, 'n0');
    await p.a.connect(qp.qpn, { remote: { ip: IP(2, 0), port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
    await p.b.connect(y.qp.qpn, { remote: { ip: IP(1, 0), port: qp.qpn }, mode: 'manual', remotePsn: qp.psn });
    const big = Uint8Array.from({ length: 40000 }, (_, i) => (i * 11) & 0xff);
    await p.b.writeMr(y.mr.mr, 0, big);
    await p.b.postSend(y.qp.qpn, {
      wrId: 'w',
      opcode: 'write',
      sge: [{ mr: y.mr.mr, offset: 0, length: big.length }],
      remote: { stag: mr.stag, offset: 1000 },
    });
    assert.is((await pollOne(p.b, y.cq.cq)).status, 'success');
    assert.equal(await p.a.readMr(mr.mr, 1000, big.length), big, 'WRITE landed on worker 1');
    await p.a.postSend(qp.qpn, {
      wrId: 'rd',
      opcode: 'read',
      sge: [{ mr: mr.mr, offset: 50000, length: 10000 }],
      remote: { stag: y.mr.stag, offset: 0 },
    });
    assert.is((await pollOne(p.a, cq.cq)).status, 'success');
    assert.equal(await p.a.readMr(mr.mr, 50000, 10000), big.subarray(0, 10000), 'READ by worker 1 went out through m0');
    const errs = await p.a.errors();
    const count = (thread: string, node: string, reason: string) =>
      errs.find((t) => t.name === thread)?.rows.find((r) => r.node === node && r.reason === reason)?.count ?? 0;
    assert.ok(count('rdma_wk_0', 'worker-handoff', "frames handed to the QP's worker") > 20, JSON.stringify(errs));
    const itfs = await p.a.interfaces();
    assert.equal(
      itfs.map((i) => i.name),
      ['m0', 'm1'],
      'each interface once, whatever the workers have of it',
    );
  } finally {
    await p.close();
  }
});

const enc = (t: string) => new TextEncoder().encode(t);

/** A UD QP (Q_Key 0x5151) on `itf`, on `worker` when given, in RTS. */
async function udOn(dp: DataplaneApi, itf: string, worker?: number) {
  const on = worker === undefined ? {} : { worker };
  const pd = await dp.createPd({ interface: itf, ...on });
  const cq = await dp.createCq({ depth: 64, interface: itf, ...on });
  const mr = await dp.createMr({ pd: pd.pd, length: 8192, access: ['local-write'] });
  const qp = await dp.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: itf, type: 'ud' });
  await dp.modifyQp(qp.qpn, { state: 'init', qkey: 0x5151 });
  await dp.modifyQp(qp.qpn, { state: 'rtr' });
  await dp.modifyQp(qp.qpn, { state: 'rts' });
  return { cq: cq.cq, mr: mr.mr, qp };
}

test("multicast: UD QPs on two workers attached to one group each take the group's datagrams (copied by the receiving worker); a member on another worker than the sender takes the loopback copy; IGMP queries reach every worker", async () => {
  const p = await pair();
  try {
    const GROUP = '239.7.7.7';
    // Both over m0, which worker 0 receives: worker 1's member gets copies through worker-handoff.
    const q0 = await udOn(p.a, 'm0', 0),
      q1 = await udOn(p.a, 'm0', 1);
    assert.ok(q0.qp.qpn < 25000 && q1.qp.qpn >= 25000, `one QP on each worker (${q0.qp.qpn}, ${q1.qp.qpn})`);
    assert.equal(await p.a.attachMcast(q0.qp.qpn, GROUP), [GROUP]);
    assert.equal(await p.a.attachMcast(q1.qp.qpn, GROUP), [GROUP]);
    assert.equal((await p.a.getQp(q1.qp.qpn)).multicast, [GROUP], "worker 1's QP says it");
    const x = await udOn(p.b, 'n0');
    const send = async (wrId: string, text: string) => {
      await p.b.writeMr(x.mr, 0, enc(text));
      await p.b.postSend(x.qp.qpn, {
        wrId,
        opcode: 'send',
        sge: [{ mr: x.mr, offset: 0, length: text.length }],
        ud: { ip: GROUP, qpn: 0xffffff, qkey: 0x5151 },
      });
      assert.is((await pollOne(p.b, x.cq)).status, 'success');
    };
    for (const q of [q0, q1])
      for (const k of [0, 1])
        await p.a.postRecv(q.qp.qpn, { wrId: `r${k}`, sge: [{ mr: q.mr, offset: k * 2048, length: 2048 }] });
    await send('s1', 'to both workers');
    for (const q of [q0, q1]) {
      const c = await pollOne(p.a, q.cq);
      assert.equal([c.status, c.byteLen, c.srcQp], ['success', 40 + 15, x.qp.qpn]);
      assert.equal(await p.a.readMr(q.mr, 40, 15), enc('to both workers'));
    }
    const errs = await p.a.errors();
    const count = (thread: string, node: string, reason: string) =>
      errs.find((t) => t.name === thread)?.rows.find((r) => r.node === node && r.reason === reason)?.count ?? 0;
    assert.is(
      count('rdma_wk_0', 'worker-handoff', "copies of a group's datagram sent to the workers with members"),
      1,
      JSON.stringify(errs),
    );
    // Worker 0's member leaves: worker 0 (receiving) keeps nothing, worker 1's still gets it.
    assert.equal(await p.a.detachMcast(q0.qp.qpn, GROUP), []);
    await send('s2', 'to worker one');
    const c1 = await pollOne(p.a, q1.cq);
    assert.equal(await p.a.readMr(q1.mr, 2048 + 40, 13), enc('to worker one'));
    assert.is(c1.status, 'success');
    assert.equal((await p.a.pollCq(q0.cq, 4, 50)).completions, [], 'detached on worker 0: nothing');
    // An IGMP general query comes in on m0 (worker 0, no group of its own now): worker 1 gets a
    // copy and answers for its group within the query's 1 s.
    await sleep(1200); // worker 1's two unsolicited reports are out
    const count2 = async (thread: string, node: string, reason: string) =>
      (await p.a.errors()).find((t) => t.name === thread)?.rows.find((r) => r.node === node && r.reason === reason)
        ?.count ?? 0;
    const sent0 = await count2('rdma_wk_1', 'igmp4-input', 'IGMP membership reports sent');
    assert.ok(sent0 >= 1, `worker 1 reported its group on joining (${sent0})`);
    const igmp = [0x11, 10, 0, 0, 0, 0, 0, 0];
    const ck = inetChecksum(igmp);
    igmp[2] = ck >>> 8;
    igmp[3] = ck & 0xff;
    const frame = eth(
      '01:00:5e:00:00:01',
      MAC(2, 0),
      0x0800,
      ip4({ src: IP(2, 0), dst: '224.0.0.1', proto: 2, ttl: 1, payload: igmp }),
    );
    const { pool, ifs } = Dataplane.internals(p.b);
    const bufs = new Uint32Array(1);
    assert.is(pool.alloc(bufs, 0, 1), 1);
    pool.u8.set(frame, pool.offset[bufs[0]]);
    pool.length[bufs[0]] = frame.length;
    const n0 = ifs.all().find((i) => i.name === 'n0')!.driver;
    assert.is(n0.txBurst(0, bufs, 0, 1), 1, 'the query went out on n0');
    for (
      let i = 0;
      i < 150 && (await count2('rdma_wk_1', 'igmp4-input', 'IGMP membership reports sent')) === sent0;
      i++
    )
      await sleep(20);
    assert.ok(
      (await count2('rdma_wk_0', 'worker-handoff', 'IGMP copies sent to the other workers')) >= 1,
      'worker 0 copied the query to worker 1',
    );
    assert.is(await count2('rdma_wk_1', 'igmp4-input', 'IGMP membership queries received'), 1);
    assert.is(await count2('rdma_wk_1', 'igmp4-input', 'IGMP membership reports sent'), sent0 + 1, 'worker 1 answered');
    // Loopback: a member on worker 1 only, the sender on worker 0: the copy crosses to worker 1.
    await p.a.postRecv(q1.qp.qpn, { wrId: 'r2', sge: [{ mr: q1.mr, offset: 4096, length: 2048 }] });
    await p.a.writeMr(q0.mr, 6000, enc('looped'));
    await p.a.postSend(q0.qp.qpn, {
      wrId: 'l',
      opcode: 'send',
      sge: [{ mr: q0.mr, offset: 6000, length: 6 }],
      ud: { ip: GROUP, qpn: 0xffffff, qkey: 0x5151 },
    });
    assert.is((await pollOne(p.a, q0.cq)).status, 'success');
    const lc = await pollOne(p.a, q1.cq);
    assert.equal([lc.status, lc.srcQp], ['success', q0.qp.qpn]);
    assert.equal(
      await p.a.readMr(q1.mr, 4096 + 40, 6),
      enc('looped'),
      "worker 0's send looped back to worker 1's member",
    );
  } finally {
    await p.close();
  }
});

test("Debian's mckey with daemon A on two worker threads (its QPs go to the interface's worker): two receiving QPs take 20 datagrams each to the group from mckey -s on B; the group is left after", async () => {
  if (spawnSync('mckey', ['-h']).error) skip('mckey is not installed (Debian package rdmacm-utils)');
  const dir = mkdtempSync(join(tmpdir(), 'rg-workers-mckey-'));
  const file = join(dir, 'startup-workers.yaml');
  writeFileSync(file, readFileSync('config/startup.yaml', 'utf8').replace(/^  workers: 0$/m, '  workers: 2'));
  const a = await daemon(['--config', file]);
  const b = await daemon(['--config', 'config/examples/peer.yaml']);
  const groupsOnA = async () =>
    ((await (await fetch('http://127.0.0.1:7070/v1/interfaces')).json()) as { groups: unknown[] }[])[0].groups;
  try {
    for (let i = 0; i < 250; i++) {
      const st = await Promise.all(
        [7070, 7071].map(
          async (port) =>
            ((await (await fetch(`http://127.0.0.1:${port}/v1/interfaces`)).json()) as { state: string }[])[0].state,
        ),
      );
      if (st.every((x) => x === 'up')) break;
      await sleep(20);
    }
    const G = '239.1.1.9';
    const recv = runTool(
      join(ROOT, 'run', 'verbs-7070.sock'),
      ['mckey', '-m', G, '-b', '10.10.0.1', '-c', '2', '-C', '20', '-S', '512'],
      60_000,
      'exec',
    );
    for (let i = 0; i < 500 && JSON.stringify(await groupsOnA()) !== JSON.stringify([{ group: G, users: 2 }]); i++) {
      if (recv.exited !== null) assert.unreachable(`mckey exited before it joined:\n${recv.exited.out}`);
      await sleep(10);
    }
    const send = await runTool(
      join(ROOT, 'run', 'verbs-7071.sock'),
      ['mckey', '-m', G, '-b', '10.10.0.2', '-s', '-C', '20', '-S', '512'],
      60_000,
      'exec',
    ).done;
    const got = await recv.done;
    for (const r of [got, send]) {
      assert.is(r.code, 0, r.out);
      assert.match(r.out, /joined dgid: ::ffff:239\.1\.1\.9[^]*return status 0/, r.out);
    }
    assert.equal(await groupsOnA(), [], 'the QPs gone: the group is left');
  } finally {
    a.proc.kill('SIGTERM');
    b.proc.kill('SIGTERM');
    await a.exit;
    await b.exit;
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a worker that throws is reported and started again with its interface; the others and the API keep going', async () => {
  const p = await pair();
  try {
    const x = await end(p.a, 'm0');
    (p.a as unknown as { crashWorker(k: number): void }).crashWorker(1);
    for (let i = 0; i < 200 && !p.logs.some((l) => /rdma_wk_1\) running again/.test(l)); i++) await sleep(20);
    assert.ok(
      p.logs.some((l) => /^error: worker 1 \(rdma_wk_1\) stopped: .*told to crash/s.test(l)),
      p.logs.join('\n'),
    );
    assert.ok(
      p.logs.some((l) => /rdma_wk_1\) running again/.test(l)),
      p.logs.join('\n'),
    );
    await p.up();
    assert.equal((await p.a.getQp(x.qp.qpn)).qpn, x.qp.qpn, "worker 0's QP is untouched");
    assert.is((await p.a.runtime()).length, 2);
    const y = await end(p.a, 'm1');
    assert.ok(y.qp.qpn > x.qp.qpn, 'the restarted worker makes QPs again');
    // And carries traffic: on its own interface, and over worker 0's through the handoff queues
    // whose indices outlived the old thread.
    for (const [mine, theirs, k] of [
      [y, await end(p.b, 'n1'), 1],
      [
        await (async () => {
          const pd = await p.a.createPd({ interface: 'm0', worker: 1 });
          const cq = await p.a.createCq({ depth: 64, worker: 1 });
          const mr = await p.a.createMr({ pd: pd.pd, length: 65536, access: ['local-write', 'remote-write'] });
          const qp = await p.a.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, interface: 'm0' });
          return { pd, cq, mr, qp };
        })(),
        await end(p.b, 'n0'),
        0,
      ],
    ] as const) {
      await p.a.connect(mine.qp.qpn, {
        remote: { ip: IP(2, k), port: theirs.qp.qpn },
        mode: 'manual',
        remotePsn: theirs.qp.psn,
      });
      await p.b.connect(theirs.qp.qpn, {
        remote: { ip: IP(1, k), port: mine.qp.qpn },
        mode: 'manual',
        remotePsn: mine.qp.psn,
      });
      const data = Uint8Array.from({ length: 9000 }, (_, i) => (i + k) & 0xff);
      await p.b.writeMr(theirs.mr.mr, 0, data);
      await p.b.postSend(theirs.qp.qpn, {
        wrId: 'w',
        opcode: 'write',
        sge: [{ mr: theirs.mr.mr, offset: 0, length: data.length }],
        remote: { stag: mine.mr.stag, offset: 0 },
      });
      assert.is((await pollOne(p.b, theirs.cq.cq)).status, 'success', `WRITE to the restarted worker over m${k}`);
      assert.equal(await p.a.readMr(mine.mr.mr, 0, data.length), data);
    }
  } finally {
    await p.close();
  }
});

test('a worker that dies takes its QPs to ERROR: outstanding requests flushed to their CQs, a qp-error event each, its handles say so until destroyed', async () => {
  const p = await pair();
  try {
    // x: a working QP on worker 1 with a SEND already completed and polled (retired), then
    // three receives nobody will fill. x2: its peer never connects, so its requests stay out.
    const x = await end(p.a, 'm1'),
      y = await end(p.b, 'n1');
    await connect(p.a, p.b, x, y, IP(1, 1), IP(2, 1));
    await p.b.postRecv(y.qp.qpn, { wrId: 'yr', sge: [{ mr: y.mr.mr, offset: 0, length: 64 }] });
    await p.a.postSend(x.qp.qpn, { wrId: 'done', opcode: 'send', sge: [{ mr: x.mr.mr, offset: 0, length: 8 }] });
    assert.is((await pollOne(p.a, x.cq.cq)).wrId, 'done');
    for (const w of ['r0', 'r1', 'r2'])
      await p.a.postRecv(x.qp.qpn, { wrId: w, sge: [{ mr: x.mr.mr, offset: 0, length: 64 }] });
    const x2 = await end(p.a, 'm1'),
      y2 = await end(p.b, 'n1');
    await p.a.connect(x2.qp.qpn, { remote: { ip: IP(2, 1), port: y2.qp.qpn }, mode: 'manual', remotePsn: y2.qp.psn });
    await p.a.postSend(x2.qp.qpn, {
      wrId: 'quiet',
      opcode: 'write',
      signaled: false,
      sge: [{ mr: x2.mr.mr, offset: 0, length: 100 }],
      remote: { stag: y2.mr.stag, offset: 0 },
    });
    await p.a.postSend(x2.qp.qpn, { wrId: 's', opcode: 'send', sge: [{ mr: x2.mr.mr, offset: 0, length: 100 }] });
    const w0 = await end(p.a, 'm0');
    const since = (await p.a.recentEvents()).at(-1)?.seq ?? 0;
    (p.a as unknown as { crashWorker(k: number): void }).crashWorker(1);
    for (let i = 0; i < 200 && !p.logs.some((l) => /rdma_wk_1\) running again/.test(l)); i++) await sleep(20);
    assert.ok(
      p.logs.some((l) => /worker 1: 2 QPs \(\d+, \d+\) in error, 5 work requests flushed/.test(l)),
      p.logs.join('\n'),
    );
    for (const q of [x, x2]) assert.is((await p.a.getQp(q.qp.qpn)).state, 'error', `QP ${q.qp.qpn} in error`);
    assert.is((await p.a.getQp(w0.qp.qpn)).state, w0.qp.state, "worker 0's QP untouched");
    const r = await p.a.pollCq(x.cq.cq, 16, 0);
    assert.equal(
      r.completions.map((c) => [c.wrId, c.status, c.opcode, c.qpn]),
      [
        ['r0', 'flushed', 'recv', x.qp.qpn],
        ['r1', 'flushed', 'recv', x.qp.qpn],
        ['r2', 'flushed', 'recv', x.qp.qpn],
      ],
      'the receives nobody filled, not the SEND already polled',
    );
    assert.match(String(r.error), /worker 1 stopped .*its QPs are in error/);
    assert.equal(
      (await p.a.pollCq(x2.cq.cq, 16, 0)).completions.map((c) => [c.wrId, c.status, c.opcode]),
      [
        ['quiet', 'flushed', 'write'],
        ['s', 'flushed', 'send'],
      ],
      'the unsignaled request is flushed too',
    );
    assert.equal((await p.a.pollCq(x.cq.cq, 16, 0)).completions, [], 'each flushed once');
    const ev = (await p.a.recentEvents(since)).filter((e) => e.type === 'qp-error');
    assert.equal(ev.map((e) => e.qpn).sort(), [x.qp.qpn, x2.qp.qpn].sort());
    assert.ok(
      (await p.a.qps()).some((q) => q.qpn === x.qp.qpn && q.state === 'error'),
      'listed in error',
    );
    await p.a.postSend(x.qp.qpn, { wrId: 'late', opcode: 'send' }).then(
      () => assert.unreachable('posting on a dead QP'),
      (e: Error & { kind?: string }) => {
        assert.is(e.kind, 'state');
        assert.match(e.message, /QP \d+ was on worker 1 stopped .*destroy it/);
      },
    );
    await p.a.readMr(x.mr.mr, 0, 8).then(
      () => assert.unreachable('reading a dead MR'),
      (e: Error) => assert.match(e.message, /memory region \d+ was on worker 1 stopped/),
    );
    for (const q of [x, x2]) {
      await p.a.destroyQp(q.qp.qpn);
      await p.a.destroyCq(q.cq.cq);
      await p.a.destroyMr(q.mr.mr);
      await p.a.destroyPd(q.pd.pd);
    }
    await p.a.getQp(x.qp.qpn).then(
      () => assert.unreachable('forgotten'),
      (e: Error & { kind?: string }) => assert.is(e.kind, 'not-found'),
    );
    // The restarted worker numbers its objects apart from the dead ones.
    const z = await end(p.a, 'm1');
    assert.ok(z.pd.pd > (1 << 24) + (1 << 20), `a new handle block: ${z.pd.pd}`);
  } finally {
    await p.close();
  }
});

test('corelist-workers pins each worker: show runtime says its lcore', async () => {
  const p = await pair({ corelistWorkers: '0' }, 1);
  try {
    const rt = await p.a.runtime();
    assert.equal(
      rt.map((t) => [t.name, t.lcore]),
      [['rdma_wk_0', 0]],
    );
  } finally {
    await p.close();
  }
});

test("the README's workers block: the daemon with two pinned workers, show runtime per worker, a clean stop", async () => {
  const block = blocks(README).find((b) => b.startsWith('npm start -- --config config/examples/workers.yaml'));
  assert.ok(block, 'the README shows the block');
  // Every line of it runs: the start, then the rdmactl line.
  const lines = block.split('\n');
  assert.is(lines.length, 2, `the block is a start line and an rdmactl line:\n${block}`);
  const [start, show] = lines;
  const d = await daemon([], start);
  try {
    assert.match(d.out, /2 worker threads \(rdma_wk_0\.\.1\), API on the main thread/);
    let r = bash(show);
    for (let i = 0; i < 50 && !/memif-input +polling +[1-9]/.test(r.out); i++) {
      await sleep(50);
      r = bash(show);
    }
    assert.is(r.code, 0, r.out);
    const heads = r.out.split('\n').filter((l) => l.startsWith('Thread '));
    assert.equal(heads, ['Thread 1 rdma_wk_0 (lcore 0)', 'Thread 2 rdma_wk_1 (lcore 1)']);
    assert.ok(r.out.includes('\nTotal (2 threads)\n'), r.out);
  } finally {
    d.proc.kill('SIGTERM');
  }
  assert.is(await d.exit, 0, d.out);
  await d.closed;
  assert.match(d.out, /stopped \(0 QPs closed with FIN\); every buffer back in the pool/);
});

test("the README's rdmactl, verbs and curl sessions run unchanged with daemon A on two worker threads", async () => {
  // The embedded default with cpu.workers: 2 (its memif0 on worker 0, remote on worker 1).
  const dir = mkdtempSync(join(tmpdir(), 'rg-workers-'));
  const file = join(dir, 'startup-workers.yaml');
  const text = readFileSync('config/startup.yaml', 'utf8');
  assert.match(text, /^  workers: 0$/m);
  writeFileSync(file, text.replace(/^  workers: 0$/m, '  workers: 2'));
  try {
    await runSessions(['--config', file], (a) => assert.match(a.out, /2 worker threads/));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
