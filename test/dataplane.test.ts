import { test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { DataplaneError } from '../dataplane/views.ts';
import { IP_A, IP_B, twoDataplanes } from './dataplane-helpers.ts';

async function ends(dp: DataplaneApi) {
  const { pd } = await dp.createPd();
  const { cq } = await dp.createCq({ depth: 256 });
  const mr = await dp.createMr({
    pd,
    length: 65536,
    access: ['local-write', 'remote-write', 'remote-read', 'remote-atomic'],
  });
  const qp = await dp.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 64, maxRecvWr: 64 });
  return { pd, cq, mr, qp };
}

async function pollOne(dp: DataplaneApi, cq: number) {
  const r = await dp.pollCq(cq, 16, 2000);
  assert.is(r.completions.length, 1, `one completion on cq ${cq}: ${JSON.stringify(r)}`);
  return r.completions[0];
}

test('two data planes over a cross-pool pipe: manual connect, SEND/RECV, WRITE, READ, fetch-add through the facade', async () => {
  const { a, b, close } = await twoDataplanes();
  try {
    const [ia] = await a.interfaces();
    assert.is(ia.state, 'up');
    assert.equal(ia.addresses, [`${IP_A}/24`]);
    const x = await ends(a),
      y = await ends(b);
    assert.is(x.qp.local.ip, IP_A);
    await a.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
    const qy = await b.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
    assert.is(qy.state, 'rts');
    const msg = new TextEncoder().encode('hello over the facade');
    await a.writeMr(x.mr.mr, 100, msg);
    await b.postRecv(y.qp.qpn, { wrId: 'r1', sge: [{ mr: y.mr.mr, offset: 0, length: 4096 }] });
    await a.postSend(x.qp.qpn, { wrId: 7, opcode: 'send', sge: [{ mr: x.mr.mr, offset: 100, length: msg.length }] });
    assert.equal(await pollOne(a, x.cq), {
      wrId: 7,
      qpn: x.qp.qpn,
      status: 'success',
      opcode: 'send',
      byteLen: msg.length,
    });
    const rc = await pollOne(b, y.cq);
    assert.is(rc.wrId, 'r1');
    assert.is(rc.byteLen, msg.length);
    assert.equal(await b.readMr(y.mr.mr, 0, msg.length), msg);
    // WRITE 5000 bytes into B at offset 8192, READ them back into A at 20000.
    const big = Uint8Array.from({ length: 5000 }, (_, i) => (i * 31) & 0xff);
    await a.writeMr(x.mr.mr, 0, big);
    await a.postSend(x.qp.qpn, {
      wrId: 'w',
      opcode: 'write',
      sge: [{ mr: x.mr.mr, offset: 0, length: 5000 }],
      remote: { stag: y.mr.stag, offset: 8192 },
    });
    assert.is((await pollOne(a, x.cq)).status, 'success');
    assert.equal(await b.readMr(y.mr.mr, 8192, 5000), big);
    await a.postSend(x.qp.qpn, {
      wrId: 'r',
      opcode: 'read',
      sge: [{ mr: x.mr.mr, offset: 20000, length: 5000 }],
      remote: { stag: y.mr.stag, offset: 8192 },
    });
    assert.is((await pollOne(a, x.cq)).opcode, 'read');
    assert.equal(await a.readMr(x.mr.mr, 20000, 5000), big);
    // fetch-add on B's 8 bytes at 0 (host order) with a decimal string.
    const t = new Uint8Array(8);
    new DataView(t.buffer).setBigUint64(0, 1000n, true);
    await b.writeMr(y.mr.mr, 0, t);
    await a.postSend(x.qp.qpn, {
      wrId: 'fa',
      opcode: 'fetch-add',
      sge: [{ mr: x.mr.mr, offset: 40000, length: 8 }],
      remote: { stag: y.mr.stag, offset: 0 },
      atomic: { add: '9007199254740993' },
    });
    assert.is((await pollOne(a, x.cq)).opcode, 'fetch-add');
    const orig = await a.readMr(x.mr.mr, 40000, 8);
    assert.is(new DataView(orig.buffer).getBigUint64(0, true), 1000n);
    const now = await b.readMr(y.mr.mr, 0, 8);
    assert.is(new DataView(now.buffer).getBigUint64(0, true), 1000n + 9007199254740993n);
    const q = await a.getQp(x.qp.qpn);
    assert.ok(q.counters.txPackets >= 5, 'QP counters move');
    assert.equal(q.remote, { ip: IP_B, port: y.qp.qpn });
  } finally {
    await close();
  }
});

test('connection manager through a listener; the accepted QP shows its listener; reject and timeout kinds', async () => {
  const { a, b, close } = await twoDataplanes();
  try {
    const x = await ends(a);
    const { pd } = await b.createPd();
    const { cq } = await b.createCq({ depth: 64 });
    const l = await b.listen({
      port: 18515,
      pd,
      sendCq: cq,
      recvCq: cq,
      maxSendWr: 16,
      maxRecvWr: 16,
      privateData: new Uint8Array([9, 8]),
    });
    assert.is(l.port, 18515);
    const res = await a.connect(x.qp.qpn, {
      remote: { ip: IP_B, port: 18515 },
      mode: 'cm',
      privateData: new Uint8Array([1, 2, 3]),
    });
    assert.is(res.state, 'rts');
    assert.equal(Array.from(res.privateData!), [9, 8]);
    const [ls] = await b.listenersList();
    assert.is(ls.accepted.length, 1);
    const qb = await b.getQp(ls.accepted[0]);
    assert.is(qb.listener, 18515);
    assert.is(qb.state, 'rts');
    assert.equal(qb.remote, { ip: IP_A, port: x.qp.qpn });
    // No listener on 18516: REJECTED at once, as a closed TCP port answers with RST.
    const x2 = await ends(a);
    const closed = await a.connect(x2.qp.qpn, { remote: { ip: IP_B, port: 18516 }, mode: 'cm', timeoutMs: 5000 }).then(
      () => null,
      (e) => e,
    );
    assert.instance(closed, DataplaneError);
    assert.is(closed.kind, 'rejected', closed.message);
    assert.match(closed.message, /no listener on the port$/);
    // Nothing answers (A's receive side loses everything meanwhile): the request times out.
    const [ifA] = await a.interfaces();
    await a.setFault(ifA.name, 'rx', { seed: 1, loss: 1 });
    const x4 = await ends(a);
    const err = await a.connect(x4.qp.qpn, { remote: { ip: IP_B, port: 18516 }, mode: 'cm', timeoutMs: 150 }).then(
      () => null,
      (e) => e,
    );
    await a.setFault(ifA.name, 'rx', null);
    assert.instance(err, DataplaneError);
    assert.is(err.kind, 'timeout', err.message);
    // A listener whose QP parameters fail (pd destroyed after listen is refused: pd busy? use a destroyed CQ instead).
    const { cq: cq2 } = await b.createCq({ depth: 4 });
    await b.listen({ port: 18517, pd, sendCq: cq2, recvCq: cq2, maxSendWr: 99999, maxRecvWr: 4 });
    const x3 = await ends(a);
    const rej = await a.connect(x3.qp.qpn, { remote: { ip: IP_B, port: 18517 }, mode: 'cm' }).then(
      () => null,
      (e) => e,
    );
    assert.instance(rej, DataplaneError);
    assert.is(rej.kind, 'rejected', rej.message);
  } finally {
    await close();
  }
});

test('facade errors carry kinds; nothing else escapes', async () => {
  const { a, close } = await twoDataplanes();
  try {
    const kind = (p: Promise<unknown>) =>
      p.then(
        () => 'ok',
        (e) => (e instanceof DataplaneError ? e.kind : `not a DataplaneError: ${e}`),
      );
    assert.is(await kind(a.destroyPd(999)), 'not-found');
    const { pd } = await a.createPd();
    assert.is(await kind(a.createMr({ pd, length: -1, access: [] })), 'invalid');
    assert.is(await kind(a.createMr({ pd, length: 2 ** 40, access: [] })), 'too-large');
    assert.is(await kind(a.createMr({ pd, length: 16, access: ['fly'] })), 'invalid');
    const mr = await a.createMr({ pd, length: 16, access: ['local-write'] });
    assert.is(await kind(a.destroyPd(pd)), 'busy');
    assert.is(await kind(a.writeMr(mr.mr, 10, new Uint8Array(7))), 'too-large');
    assert.is(await kind(a.readMr(mr.mr, 17, 0)), 'invalid');
    const { cq } = await a.createCq({ depth: 8 });
    const qp = await a.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 4, maxRecvWr: 4 });
    assert.is(await kind(a.postSend(qp.qpn, { wrId: 1, opcode: 'send' })), 'state');
    assert.is(await kind(a.postSend(qp.qpn, { wrId: 1, opcode: 'jump' as 'send' })), 'invalid');
    assert.is(
      await kind(a.connect(qp.qpn, { remote: { ip: '192.168.9.9', port: 1 }, mode: 'manual', remotePsn: 0 })),
      'invalid',
    );
    assert.is((await a.getQp(qp.qpn)).state, 'reset', 'a refused manual connect leaves the QP as it was');
    const cqErr = await a.destroyCq(cq).then(
      () => null,
      (e) => e,
    );
    assert.match(cqErr?.message, /in use by 1 QP\(s\)/, 'one QP using a CQ for send and receive counts once');
    assert.is(await kind(a.traceAdd('no-such-node', 3)), 'invalid');
    assert.is(await kind(a.interface('eth9')), 'not-found');
    assert.is(await kind(a.pollCq(cq, 0)), 'invalid');
    await a.destroyQp(qp.qpn);
    await a.destroyCq(cq);
    assert.is(await kind(a.getQp(qp.qpn)), 'not-found');
  } finally {
    await close();
  }
});

test('a fault from the start-up config is on from the start; the API-level setter changes and removes it', async () => {
  const { a, b, close } = await twoDataplanes({ ifA: { fault: { direction: 'rx', config: { seed: 3, loss: 0.5 } } } });
  try {
    const x = await ends(a),
      y = await ends(b);
    await a.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
    await b.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
    // 50 % of what A receives is lost: WRITEs still complete (retransmission), and the injector counted.
    for (let i = 0; i < 20; i++)
      await a.postSend(x.qp.qpn, {
        wrId: i,
        opcode: 'write',
        sge: [{ mr: x.mr.mr, offset: 0, length: 3000 }],
        remote: { stag: y.mr.stag, offset: 0 },
      });
    let done = 0;
    while (done < 20) {
      const r = await a.pollCq(x.cq, 64, 3000);
      assert.ok(r.completions.length > 0, `completions stalled at ${done}`);
      for (const c of r.completions) assert.is(c.status, 'success');
      done += r.completions.length;
    }
    const [ia] = await a.interfaces();
    assert.ok(
      ia.fault.rx !== null && ia.fault.rx.dropped > 0 && ia.fault.rx.packets > ia.fault.rx.dropped,
      JSON.stringify(ia.fault),
    );
    assert.is(ia.fault.tx, null);
    // A lost ACKs (its receive side): its timeouts asked (PROBEs) and found the data had arrived,
    // or resent what an answer showed missing.
    const ca = (await a.getQp(x.qp.qpn)).counters;
    assert.ok(ca.timeouts + ca.retransmits > 0 && ca.probes > 0, JSON.stringify(ca));
    const off = await a.setFault(ia.name, 'rx', null);
    assert.equal(off.fault, { rx: null, tx: null });
    const bad = await a.setFault(ia.name, 'tx', { loss: 2 }).then(
      () => null,
      (e) => e,
    );
    assert.is(bad?.kind, 'invalid');
    assert.match(bad.message, /loss/);
  } finally {
    await close();
  }
});

test('a link that comes up later gets a gratuitous ARP (sent once, when it comes up) and a log line', async () => {
  // A's pipe end waits for its peer (link down at start); B comes later.
  const { baseConfig, pipeInterface } = await import('./dataplane-helpers.ts');
  const { Dataplane } = await import('../dataplane/dataplane.ts');
  const lines: string[] = [];
  const a = await Dataplane.create(
    baseConfig({ interfaces: [pipeInterface('garp-a', 'garp-b', `${IP_A}/24`, '02:fe:00:00:01:0a')] }),
    { log: (_l, m) => lines.push(m) },
  );
  const garps = async (dp: typeof a) =>
    (await dp.errors())[0].rows.find((r) => r.node === 'arp-input' && r.reason === 'gratuitous ARPs sent')?.count ?? 0;
  assert.is((await a.interfaces())[0].state, 'down');
  assert.is(await garps(a), 0);
  const b = await Dataplane.create(
    baseConfig({ interfaces: [pipeInterface('garp-b', 'garp-a', `${IP_B}/24`, '02:fe:00:00:01:0b')] }),
  );
  try {
    assert.is(await garps(b), 1, 'B is up at creation: it announces at once');
    for (let i = 0; i < 50 && (await garps(a)) === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.is(await garps(a), 1, 'A announced when its link came up');
    // B takes it in on one of its own passes, after A sent it.
    const rxB = async () => (await b.interfaces())[0].counters.rxPackets;
    for (let i = 0; i < 50 && (await rxB()) === 0; i++) await new Promise((r) => setTimeout(r, 20));
    const rx = await rxB();
    assert.ok(rx >= 1, `B received it (${rx} packets)`);
    assert.ok(lines.includes('interface garp-a is up'), lines.join('\n'));
    await new Promise((r) => setTimeout(r, 450));
    assert.is(await garps(a), 1, 'once, not on every look');
  } finally {
    await a.close();
    await b.close();
  }
});

test('close sends FIN: the peer QP goes to error and its posted receive is flushed; buffers all back', async () => {
  const { a, b } = await twoDataplanes();
  const x = await ends(a),
    y = await ends(b);
  await a.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
  await b.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
  await b.postRecv(y.qp.qpn, { wrId: 'pending', sge: [{ mr: y.mr.mr, offset: 0, length: 64 }] });
  await a.close();
  const c = await pollOne(b, y.cq);
  assert.equal([c.wrId, c.status], ['pending', 'flushed']);
  assert.is((await b.getQp(y.qp.qpn)).state, 'error');
  const ba = await a.buffers();
  assert.is(ba.free, ba.count, 'A: every buffer back');
  await b.close();
  const bb = await b.buffers();
  assert.is(bb.free, bb.count, 'B: every buffer back');
});

test.run();
