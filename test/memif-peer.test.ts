/**
 * Two rdma-graph data planes in separate processes joined by memif: this process and a child
 * (`node --import tsx test/memif-peer-helpers.ts`, a whole data plane with the L2-L4 nodes and
 * an RDMA responder). ARP and ping answered by the child's stack; then a full stack here
 * that resolves the child by ARP and runs RDMA through the connection manager (Send echo,
 * Write, Read, fetch-add) with every byte checked; the child restarting (the link comes back by
 * itself); the child killed mid-burst (every buffer of ours comes back); a clean shutdown in
 * the child with its pool whole.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MemifDriver } from '../drivers/memif.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { Graph, type BufferPool } from '../graph/index.ts';
import { createPool } from '../graph/memory.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import { registerRdma } from '../nodes/rdma/stack.ts';
import { memPool, packet, sleep } from './helpers.ts';
import {
  arpRequestFrame,
  inetChecksum,
  parseArp,
  parseEth,
  parseIp4,
  PEER_IP,
  PEER_MAC,
  pingFrame,
  US_IP,
  US_MAC,
} from './l2l4-helpers.ts';
import { pattern, waitCompletions, waitFor } from './rdma-helpers.ts';

const CHILD = fileURLToPath(new URL('./memif-peer-helpers.ts', import.meta.url));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memif-peer-'));
const children = new Set<ChildProcess>();

interface Child {
  proc: ChildProcess;
  lines: { event: string; up?: boolean; lost?: number }[];
  next(event: string, ms?: number): Promise<{ event: string; up?: boolean; lost?: number }>;
}

function startChild(socket: string, role: 'server' | 'client'): Child {
  const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, socket, role], {
    stdio: ['pipe', 'pipe', 'inherit'],
    cwd: path.dirname(CHILD) + '/..',
  });
  children.add(proc);
  proc.on('exit', () => children.delete(proc));
  const lines: Child['lines'] = [];
  let buf = '';
  proc.stdout!.setEncoding('utf8');
  proc.stdout!.on('data', (d: string) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      lines.push(JSON.parse(buf.slice(0, i)));
      buf = buf.slice(i + 1);
    }
  });
  let seen = 0;
  return {
    proc,
    lines,
    async next(event, ms = 15000) {
      const end = Date.now() + ms;
      for (;;) {
        while (seen < lines.length) {
          const l = lines[seen++];
          if (l.event === event) return l;
        }
        if (Date.now() > end) throw new Error(`child: no "${event}" within ${ms} ms (got ${JSON.stringify(lines)})`);
        await sleep(5);
      }
    },
  };
}

test.after(() => {
  for (const c of children) c.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Frames through a bare driver: send `frames`, collect what comes back until `want` arrived. */
async function roundTrip(d: MemifDriver, pool: BufferPool, frames: number[][], want: number): Promise<Uint8Array[]> {
  const bufs = Uint32Array.from(frames, (f) => packet(pool, f));
  let off = 0;
  const got: Uint8Array[] = [];
  const out = new Uint32Array(256);
  const end = Date.now() + 5000;
  while (got.length < want) {
    if (off < bufs.length) off += d.txBurst(0, bufs, off, bufs.length - off);
    const n = d.rxBurst(0, out, 256);
    for (let i = 0; i < n; i++) got.push(pool.packetBytes(out[i]));
    if (n > 0) pool.free(out, 0, n);
    if (Date.now() > end)
      throw new Error(
        `${got.length} of ${want} frames came back (${off} sent): ${JSON.stringify(d.stats())} ${JSON.stringify(d.info())}`,
      );
    await sleep(1);
  }
  return got;
}

test('a data plane in another process: ARP and ping answered over memif, byte for byte', async () => {
  const socket = path.join(dir, 'a', 'memif.sock');
  const pool = memPool(1024);
  const d = new MemifDriver('raw0', { socket, role: 'server', mac: PEER_MAC });
  d.open(pool);
  const child = startChild(socket, 'client');
  try {
    await waitFor('link up here', () => d.poll(), 15000);
    await child.next('link');
    // ARP: who has 10.0.0.1?
    const [reply] = await roundTrip(d, pool, [arpRequestFrame(PEER_IP, US_IP)], 1);
    const e = parseEth(reply);
    assert.is(e.type, 0x0806);
    assert.is(e.dst, PEER_MAC);
    assert.equal(
      parseArp(e.payload),
      { op: 2, sha: US_MAC, spa: US_IP, tha: PEER_MAC, tpa: PEER_IP },
      'the child answers with its MAC',
    );
    // Ping: 20 echo requests, each answered with the same id, sequence and data.
    const data = Array.from({ length: 56 }, (_, i) => (i * 3) & 255);
    const t0 = performance.now();
    const replies = await roundTrip(
      d,
      pool,
      Array.from({ length: 20 }, (_, i) => pingFrame({ id: 0x4242, seq: i + 1, data })),
      20,
    );
    const ms = performance.now() - t0;
    replies.forEach((r, i) => {
      const eth = parseEth(r);
      assert.is(eth.dst, PEER_MAC);
      assert.is(eth.src, US_MAC);
      const ip = parseIp4(eth.payload);
      assert.ok(ip.checksumOk, 'IPv4 checksum');
      assert.is(ip.src, US_IP);
      assert.is(ip.dst, PEER_IP);
      assert.is(ip.proto, 1);
      const icmp = ip.payload;
      assert.is(icmp[0], 0, 'echo reply');
      assert.is(inetChecksum(icmp), 0, 'ICMP checksum');
      assert.is((icmp[4] << 8) | icmp[5], 0x4242);
      assert.is((icmp[6] << 8) | icmp[7], i + 1, 'in order');
      assert.equal(Array.from(icmp.subarray(8)), data);
    });
    console.log(`  20 pings to the other process over memif in ${ms.toFixed(2)} ms`);
    child.proc.stdin!.write('quit\n');
    const closed = await child.next('closed');
    assert.is(closed.lost, 0, "the child's pool is whole after its shutdown");
    await waitFor('link down here', () => !d.poll(), 5000);
    assert.is(d.info().lastDisconnect?.reason, 'Interface closed', 'the child said goodbye');
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
  assert.not.ok(fs.existsSync(socket), 'socket file removed');
});

test('RDMA between two processes over memif: CM connect after ARP, send echo, write, read, atomics; child restart; child killed mid-burst', async () => {
  const socket = `@rdma-graph-peer-${process.pid}`;
  const pool = createPool({ count: 8192, hugepages: 'never', name: 'memif-peer-parent' });
  const graph = new Graph({ pool, idlePollUs: 50 });
  const net = registerL2L4(graph);
  const ifs = new Interfaces(graph);
  const drv = new MemifDriver('memif0', { socket, role: 'client', mac: PEER_MAC });
  const itf = ifs.add(drv);
  net.addInterface({
    index: itf.index,
    name: drv.name,
    mac: drv.mac,
    address: `${PEER_IP}/24`,
    mtu: drv.mtu,
    output: itf.output.name,
  });
  const rdma = registerRdma(graph, net);
  graph.build();
  graph.start();
  let child = startChild(socket, 'server');
  try {
    await waitFor('link up', () => drv.linkUp(), 10000);
    assert.is(drv.info().zeroCopy, true, 'this side is a zero-copy client');
    const pd = rdma.createPd();
    const scq = rdma.createCq(1024),
      rcq = rdma.createCq(1024);
    const connectQp = async () => {
      const qp = rdma.createQp({ pd, sendCq: scq, recvCq: rcq, maxSendWr: 256, maxRecvWr: 256 });
      const res = await rdma.connect(qp, US_IP, 7000, { timeoutMs: 5000 });
      const v = new DataView(res.privateData.buffer, res.privateData.byteOffset);
      return { qp, stag: v.getUint32(0, true), length: v.getUint32(4, true) };
    };
    const { qp, stag, length } = await connectQp();
    assert.is(length, 65536);
    const nb = net.neighbors.get(itf.index, US_IP);
    assert.ok(
      nb !== null && nb.mac === US_MAC && nb.state !== 'static',
      `the child resolved by ARP: ${JSON.stringify(nb)}`,
    );
    // Send echo: 30 messages of up to 16 KiB (the child has 32 receives posted) come back unchanged.
    const src = rdma.regMr(pd, pattern(30 * 16384, 5), []);
    const back = rdma.regMr(pd, 30 * 16384, ['local-write']);
    for (let i = 0; i < 30; i++) rdma.postRecv(qp, { wrId: i, sg: [{ mr: back, offset: i * 16384, length: 16384 }] });
    for (let i = 0; i < 30; i++)
      rdma.postSend(qp, {
        wrId: i,
        opcode: 'send',
        sg: [{ mr: src, offset: i * 16384, length: 1 + ((i * 977) % 16384) }],
      });
    const sends = await waitCompletions(scq, 30, 10000);
    assert.ok(
      sends.every((c) => c.status === 'success'),
      JSON.stringify(sends.filter((c) => c.status !== 'success')),
    );
    const echoes = await waitCompletions(rcq, 30, 10000);
    for (const c of echoes) {
      const i = c.wrId as number,
        len = 1 + ((i * 977) % 16384);
      assert.is(c.byteLen, len);
      assert.ok(
        Buffer.from(back.memory.subarray(i * 16384, i * 16384 + len)).equals(
          Buffer.from(src.memory.subarray(i * 16384, i * 16384 + len)),
        ),
        `echo ${i}`,
      );
    }
    // Read the child's MR, write part of it, read that back; fetch-add.
    const rd = rdma.regMr(pd, 65536, ['local-write']);
    rdma.postSend(qp, {
      wrId: 'read',
      opcode: 'read',
      sg: [{ mr: rd, offset: 0, length: 65536 }],
      remote: { stag, offset: 0 },
    });
    const [r1] = await waitCompletions(scq, 1, 10000);
    assert.equal([r1.status, r1.byteLen], ['success', 65536]);
    assert.ok(Buffer.from(rd.memory).equals(Buffer.from(pattern(65536, 99))), "the child's MR, read byte for byte");
    const wr = rdma.regMr(pd, pattern(30000, 6), []);
    rdma.postSend(qp, {
      wrId: 'write',
      opcode: 'write',
      sg: [{ mr: wr, offset: 0, length: 30000 }],
      remote: { stag, offset: 1000 },
    });
    rdma.postSend(qp, {
      wrId: 'read2',
      opcode: 'read',
      sg: [{ mr: rd, offset: 0, length: 32000 }],
      remote: { stag, offset: 0 },
    });
    const w = await waitCompletions(scq, 2, 10000);
    assert.equal(
      w.map((c) => [c.wrId, c.status]),
      [
        ['write', 'success'],
        ['read2', 'success'],
      ],
    );
    const expect = pattern(65536, 99).subarray(0, 32000);
    expect.set(pattern(30000, 6), 1000);
    assert.ok(
      Buffer.from(rd.memory.subarray(0, 32000)).equals(Buffer.from(expect)),
      'the write landed at offset 1000 only',
    );
    const at = rdma.regMr(pd, 8, ['local-write']);
    const before = new DataView(expect.buffer).getBigUint64(0, true);
    rdma.postSend(qp, {
      wrId: 'fadd',
      opcode: 'fetch-add',
      sg: [{ mr: at, offset: 0, length: 8 }],
      remote: { stag, offset: 0 },
      atomic: { add: 5n },
    });
    const [fa] = await waitCompletions(scq, 1, 10000);
    assert.is(fa.status, 'success');
    assert.is(at.view.getBigUint64(0, true), before, 'fetch-add returns the old value');

    // The child restarts: our link goes down and comes back by itself; a new connection works.
    child.proc.stdin!.write('quit\n');
    assert.is((await child.next('closed')).lost, 0, 'child pool whole');
    await waitFor('link down', () => !drv.linkUp(), 5000);
    rdma.destroyQp(qp);
    child = startChild(socket, 'server');
    await waitFor('link back', () => drv.linkUp(), 10000);
    const second = await connectQp();
    const ping = rdma.regMr(pd, pattern(100, 8), []);
    const pong = rdma.regMr(pd, 100, ['local-write']);
    rdma.postRecv(second.qp, { wrId: 'pong', sg: [{ mr: pong, offset: 0, length: 100 }] });
    rdma.postSend(second.qp, { wrId: 'ping', opcode: 'send', sg: [{ mr: ping, offset: 0, length: 100 }] });
    await waitCompletions(rcq, 1, 10000);
    assert.ok(Buffer.from(pong.memory).equals(Buffer.from(ping.memory)), 'echo after the restart');
    await waitCompletions(scq, 1, 10000);

    // Killed mid-burst: a stream of writes, then SIGKILL. Nothing of ours is lost.
    const big = rdma.regMr(pd, pattern(65536, 9), []);
    for (let i = 0; i < 200; i++)
      rdma.postSend(second.qp, {
        wrId: `w${i}`,
        opcode: 'write',
        sg: [{ mr: big, offset: 0, length: 60000 }],
        remote: { stag: second.stag, offset: 0 },
      });
    await sleep(5);
    child.proc.kill('SIGKILL');
    await waitFor('link down after the kill', () => !drv.linkUp(), 5000);
    assert.match(drv.info().lastDisconnect?.reason ?? '', /peer closed the control socket/);
    rdma.destroyQp(second.qp);
    await sleep(50);
    assert.is(drv.counters().txPackets > 0, true);
  } finally {
    graph.close();
    ifs.closeAll();
    for (const c of children) c.kill('SIGKILL');
  }
  assert.is(pool.available(), pool.count, 'every buffer of ours came back after the peer vanished mid-burst');
});

test.run();
