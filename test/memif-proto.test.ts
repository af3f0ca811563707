/**
 * memif on the wire, against a peer written here byte by byte (raw SOCK_SEQPACKET sockets from
 * the core addon, regions from allocMemory, eventfds): the server's HELLO, every refusal with
 * its DISCONNECT reason, a complete handshake by hand, the ring layout (cookie, flags, head,
 * tail, 16-byte descriptors) and the head/tail/flags protocol both ways including chained
 * descriptors and interrupts; and our client's INIT / ADD_REGION / ADD_RING / CONNECT seen by
 * a hand-written server.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MemifDriver } from '../drivers/memif.ts';
import { type BufferPool, BufferFlag } from '../graph/buffer-pool.ts';
import { createPool } from '../graph/memory.ts';
import { loadCore } from '../native/addons.ts';
import { memPool, packet, sleep } from './helpers.ts';

const core = loadCore();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memif-proto-'));
let seq = 0;
const sock = () => path.join(dir, `s${seq++}.sock`);
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

const T = { ACK: 1, HELLO: 2, INIT: 3, ADD_REGION: 4, ADD_RING: 5, CONNECT: 6, CONNECTED: 7, DISCONNECT: 8 };
const VERSION = 0x0200;
const COOKIE = 0x3e31f20;
const RING_HDR = 128;
const DESC = 16;

function msg(type: number, fill: (v: DataView, b: Uint8Array) => void = () => {}): Uint8Array {
  const b = new Uint8Array(128);
  const v = new DataView(b.buffer);
  v.setUint16(0, type, true);
  fill(v, b);
  return b;
}
const str = (b: Uint8Array, at: number, len: number) =>
  Buffer.from(b.subarray(at, at + len))
    .toString('latin1')
    .replace(/\0.*$/s, '');
const put = (b: Uint8Array, at: number, s: string) => b.set(Buffer.from(s, 'latin1'), at);

const initMsg = (id: number, secret = '', version = VERSION, mode = 0) =>
  msg(T.INIT, (v, b) => {
    v.setUint16(2, version, true);
    v.setUint32(4, id, true);
    v.setUint8(8, mode);
    put(b, 9, secret);
    put(b, 33, 'hand-made');
  });

/** The next message on fd (waits up to ms, polling `drive` meanwhile). */
async function recv(
  fd: number,
  drive: () => void,
  ms = 2000,
): Promise<{ data: Uint8Array; fd: number } | { eof: true }> {
  const end = Date.now() + ms;
  for (;;) {
    drive();
    const r = core.memifRawRecv(fd);
    if (r !== null) return r;
    if (Date.now() > end) throw new Error('no message');
    await sleep(1);
  }
}

async function expectType(
  fd: number,
  drive: () => void,
  type: number,
): Promise<{ data: Uint8Array; v: DataView; fd: number }> {
  const r = await recv(fd, drive);
  assert.ok(!('eof' in r), `expected message ${type}, got end of file`);
  const m = r as { data: Uint8Array; fd: number };
  const v = new DataView(m.data.buffer, m.data.byteOffset, m.data.byteLength);
  assert.is(m.data.length, 128, 'every message is 128 bytes');
  if (v.getUint16(0, true) !== type)
    assert.unreachable(`expected message type ${type}, got ${v.getUint16(0, true)} (${str(m.data, 6, 96)})`);
  return { data: m.data, v, fd: m.fd };
}

async function expectDisconnect(fd: number, drive: () => void, reason: string): Promise<void> {
  const m = await expectType(fd, drive, T.DISCONNECT);
  assert.is(str(m.data, 6, 96), reason);
  const eof = await recv(fd, drive);
  assert.ok('eof' in eof, 'then the server closes the socket');
  core.closeFd(fd);
}

function server(
  s: string,
  opts: Partial<{ id: number; secret: string; rxQueues: number; txQueues: number; ringSize: number }> = {},
  pool: BufferPool = memPool(1024),
) {
  const d = new MemifDriver('srv', { socket: s, role: 'server', ...opts });
  d.open(pool);
  return { d, pool, drive: () => void d.poll() };
}

test('HELLO: version 2.0, name, ring and region limits of the interface', async () => {
  const s = sock();
  const { d, drive } = server(s, { rxQueues: 3, txQueues: 2, ringSize: 256 });
  try {
    const fd = core.memifRawConnect(s);
    const h = await expectType(fd, drive, T.HELLO);
    assert.is(str(h.data, 2, 32), 'rdma-graph 0.1.0');
    assert.is(h.v.getUint16(34, true), VERSION, 'min version');
    assert.is(h.v.getUint16(36, true), VERSION, 'max version');
    assert.is(h.v.getUint16(38, true), 255, 'max region index');
    assert.is(h.v.getUint16(40, true), 1, 'max M2S (server to client) ring index = txQueues - 1');
    assert.is(h.v.getUint16(42, true), 2, 'max S2M (client to server) ring index = rxQueues - 1');
    assert.is(h.v.getUint8(44), 8, 'max log2 ring size');
    core.closeFd(fd);
  } finally {
    d.close();
  }
});

test('refusals, each with its DISCONNECT reason: message size, order, version, mode, id, secret, missing fds, bad rings', async () => {
  const s = sock();
  const { d, drive } = server(s, { id: 3, secret: 'k' });
  const opened = async () => {
    const fd = core.memifRawConnect(s);
    await expectType(fd, drive, T.HELLO);
    return fd;
  };
  try {
    let fd = await opened();
    core.memifRawSend(fd, new Uint8Array(64));
    await expectDisconnect(fd, drive, 'Invalid message size');
    fd = await opened();
    core.memifRawSend(fd, msg(T.CONNECT));
    await expectDisconnect(fd, drive, 'Unexpected message');
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k', 0x0100));
    await expectDisconnect(fd, drive, 'Incompatible memif version');
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k', VERSION, 1));
    await expectDisconnect(fd, drive, 'Only ethernet mode supported');
    fd = await opened();
    core.memifRawSend(fd, initMsg(4, 'k'));
    await expectDisconnect(fd, drive, 'ID not found');
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'x'));
    await expectDisconnect(fd, drive, 'Incorrect secret');
    fd = await opened();
    core.memifRawSend(fd, initMsg(3));
    await expectDisconnect(fd, drive, 'Secret required');
    // Past INIT: a region without its fd.
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k'));
    await expectType(fd, drive, T.ACK);
    core.memifRawSend(
      fd,
      msg(T.ADD_REGION, (v) => {
        v.setUint16(2, 0, true);
        v.setBigUint64(4, 4096n, true);
      }),
    );
    await expectDisconnect(fd, drive, 'Missing region fd');
    // A region fd smaller than the size claimed (mapping it would fault).
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k'));
    await expectType(fd, drive, T.ACK);
    const small = core.allocMemory(4096, { hugepages: 'never' });
    core.memifRawSend(
      fd,
      msg(T.ADD_REGION, (v) => {
        v.setUint16(2, 0, true);
        v.setBigUint64(4, 1n << 20n, true);
      }),
      small.fd,
    );
    await expectDisconnect(fd, drive, 'Region fd smaller than the region');
    // A ring outside its region, found at CONNECT.
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k'));
    await expectType(fd, drive, T.ACK);
    core.memifRawSend(
      fd,
      msg(T.ADD_REGION, (v) => {
        v.setUint16(2, 0, true);
        v.setBigUint64(4, 4096n, true);
      }),
      small.fd,
    );
    await expectType(fd, drive, T.ACK);
    const efd = core.eventfd();
    core.memifRawSend(
      fd,
      msg(T.ADD_RING, (v) => {
        v.setUint16(2, 1, true);
        v.setUint16(4, 0, true);
        v.setUint16(6, 0, true);
        v.setUint32(8, 0, true);
        v.setUint8(12, 10);
      }),
      efd,
    );
    await expectType(fd, drive, T.ACK);
    core.memifRawSend(fd, msg(T.CONNECT));
    await expectDisconnect(fd, drive, 'Ring beyond its region');
    // A ring index the interface does not have.
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k'));
    await expectType(fd, drive, T.ACK);
    core.memifRawSend(
      fd,
      msg(T.ADD_RING, (v) => {
        v.setUint16(2, 1, true);
        v.setUint16(4, 5, true);
        v.setUint8(12, 4);
      }),
      efd,
    );
    await expectDisconnect(fd, drive, 'Invalid ring index');
    // A ring larger than the server allows.
    fd = await opened();
    core.memifRawSend(fd, initMsg(3, 'k'));
    await expectType(fd, drive, T.ACK);
    core.memifRawSend(
      fd,
      msg(T.ADD_RING, (v) => {
        v.setUint16(2, 1, true);
        v.setUint8(12, 11);
      }),
      efd,
    );
    await expectDisconnect(fd, drive, 'Invalid ring size');
    core.closeFd(efd);
    assert.not.ok(d.linkUp());
    assert.is(
      d.stats().refused,
      4,
      "four refused by the interface at INIT (version, mode, two secrets; the unknown id is nobody's)",
    );
  } finally {
    d.close();
  }
});

/** A client written by hand: region 0 = one C2S ring, one S2C ring, then 2048-byte buffers. */
async function handClient(s: string, drive: () => void, log2 = 4) {
  const size = 1 << log2;
  const ringBytes = RING_HDR + DESC * size;
  const bufAt = 2 * ringBytes;
  const mem = core.allocMemory(bufAt + 2 * size * 2048, { hugepages: 'never', name: 'hand-client' });
  const v = new DataView(mem.buffer);
  const u8 = new Uint8Array(mem.buffer);
  for (const r of [0, ringBytes]) v.setUint32(r, COOKIE, true);
  const efC2S = core.eventfd(),
    efS2C = core.eventfd();
  const fd = core.memifRawConnect(s);
  await expectType(fd, drive, T.HELLO);
  core.memifRawSend(fd, initMsg(0));
  await expectType(fd, drive, T.ACK);
  core.memifRawSend(
    fd,
    msg(T.ADD_REGION, (m) => {
      m.setUint16(2, 0, true);
      m.setBigUint64(4, BigInt(mem.size), true);
    }),
    mem.fd,
  );
  await expectType(fd, drive, T.ACK);
  core.memifRawSend(
    fd,
    msg(T.ADD_RING, (m) => {
      m.setUint16(2, 1, true);
      m.setUint16(4, 0, true);
      m.setUint32(8, 0, true);
      m.setUint8(12, log2);
    }),
    efC2S,
  );
  await expectType(fd, drive, T.ACK);
  core.memifRawSend(
    fd,
    msg(T.ADD_RING, (m) => {
      m.setUint16(2, 0, true);
      m.setUint16(4, 0, true);
      m.setUint32(8, ringBytes, true);
      m.setUint8(12, log2);
    }),
    efS2C,
  );
  await expectType(fd, drive, T.ACK);
  core.memifRawSend(
    fd,
    msg(T.CONNECT, (_, b) => put(b, 2, 'hand0')),
  );
  const c = await expectType(fd, drive, T.CONNECTED);
  const ring = (r: number) => ({
    flags: () => v.getUint16(r + 4, true),
    head: () => v.getUint16(r + 6, true),
    setHead: (x: number) => v.setUint16(r + 6, x, true),
    tail: () => v.getUint16(r + 64, true),
    desc: (slot: number) => {
      const at = r + RING_HDR + (slot & (size - 1)) * DESC;
      return {
        get flags() {
          return v.getUint16(at, true);
        },
        set flags(x) {
          v.setUint16(at, x, true);
        },
        get region() {
          return v.getUint16(at + 2, true);
        },
        set region(x) {
          v.setUint16(at + 2, x, true);
        },
        get length() {
          return v.getUint32(at + 4, true);
        },
        set length(x) {
          v.setUint32(at + 4, x, true);
        },
        get offset() {
          return v.getUint32(at + 8, true);
        },
        set offset(x) {
          v.setUint32(at + 8, x, true);
        },
      };
    },
  });
  return {
    fd,
    mem,
    u8,
    c2s: ring(0),
    s2c: ring(ringBytes),
    efC2S,
    efS2C,
    bufAt,
    size,
    connectedName: str(c.data, 2, 32),
  };
}

test('a hand-written client: full handshake, then frames both ways through the rings, chained, with interrupts', async () => {
  const s = sock();
  const { d, pool, drive } = server(s, {}, memPool(1024));
  try {
    const h = await handClient(s, drive);
    assert.is(h.connectedName, 'srv', 'CONNECTED names the server interface');
    assert.ok(d.linkUp());
    assert.is(d.info().remoteIfName, 'hand0');
    // Client to server: one 100-byte frame, then a 3000-byte frame in two chained descriptors.
    const f1 = Uint8Array.from({ length: 100 }, (_, i) => i);
    const f2 = Uint8Array.from({ length: 3000 }, (_, i) => (i * 13) & 255);
    const slots: [Uint8Array, number, number][] = [
      [f1, 0, 100],
      [f2, 0, 2048],
      [f2, 2048, 952],
    ];
    slots.forEach(([src, from, len], k) => {
      const dsc = h.c2s.desc(k);
      dsc.region = 0;
      dsc.offset = h.bufAt + k * 2048;
      dsc.length = len;
      dsc.flags = k === 1 ? 1 : 0; // MEMIF_DESC_FLAG_NEXT on the first half of f2
      h.u8.set(src.subarray(from, from + len), h.bufAt + k * 2048);
    });
    assert.is(h.c2s.flags(), 0, 'the server starts with interrupts on (flags 0)');
    h.c2s.setHead(3);
    core.eventfdWrite(h.efC2S);
    const out = new Uint32Array(256);
    const n = d.rxBurst(0, out, 256);
    assert.is(n, 2, 'two frames from three descriptors');
    assert.ok(Buffer.from(pool.packetBytes(out[0])).equals(Buffer.from(f1)));
    assert.ok(Buffer.from(pool.packetBytes(out[1])).equals(Buffer.from(f2)));
    assert.is(pool.segments(out[1]), 2, 'a 3000-byte frame in 2048-byte pool buffers');
    pool.free(out, 0, n);
    assert.is(h.c2s.tail(), 3, 'the server published tail = 3');
    assert.is(h.c2s.flags(), 1, 'busy: the server masks interrupts (MASK_INT)');
    assert.is(d.rxBurst(0, out, 256), 0);
    assert.is(h.c2s.flags(), 1, 'a first empty poll keeps them masked (traffic may resume)');
    await sleep(2);
    assert.is(d.rxBurst(0, out, 256), 0);
    assert.is(h.c2s.flags(), 0, 'idle for 50 µs: interrupts back on');
    assert.is(core.eventfdRead(h.efC2S), 0, 'the server consumed the kick');
    assert.is(d.stats().interrupts, 1);
    // Server to client: the client offers 4 empty buffers; the server fills two with a 2100-byte frame.
    for (let k = 0; k < 4; k++) {
      const dsc = h.s2c.desc(k);
      dsc.region = 0;
      dsc.offset = h.bufAt + (16 + k) * 2048;
      dsc.length = 2048;
      dsc.flags = 0;
    }
    h.s2c.setHead(4);
    const f3 = Uint8Array.from({ length: 2100 }, (_, i) => (i * 7 + 1) & 255);
    const bi = packet(pool, f3);
    assert.is(d.txBurst(0, Uint32Array.of(bi), 0, 1), 1);
    assert.is(h.s2c.tail(), 2, 'two slots used');
    assert.is(h.s2c.desc(0).flags, 1, 'first chained');
    assert.is(h.s2c.desc(0).length, 2048);
    assert.is(h.s2c.desc(1).flags, 0);
    assert.is(h.s2c.desc(1).length, 52);
    const got = new Uint8Array(2100);
    got.set(h.u8.subarray(h.bufAt + 16 * 2048, h.bufAt + 17 * 2048), 0);
    got.set(h.u8.subarray(h.bufAt + 17 * 2048, h.bufAt + 17 * 2048 + 52), 2048);
    assert.ok(Buffer.from(got).equals(Buffer.from(f3)), "bytes in the client's buffers");
    assert.is(core.eventfdRead(h.efS2C), 1, "the server kicked (the client's ring flags are 0)");
    // Only two empty buffers left: a frame needing three is refused, not cut.
    const big = packet(pool, new Uint8Array(5000));
    assert.is(d.txBurst(0, Uint32Array.of(big), 0, 1), 0, 'no room for a 3-slot frame');
    pool.freeOne(big);
    // A corrupt head (beyond the ring) ends the connection.
    h.c2s.setHead(h.c2s.tail() + 100);
    d.rxBurst(0, out, 256);
    assert.not.ok(d.linkUp());
    assert.is(d.info().lastDisconnect?.reason, 'Ring index beyond the ring size');
    await expectDisconnect(h.fd, drive, 'Ring index beyond the ring size');
    core.closeFd(h.efC2S);
    core.closeFd(h.efS2C);
  } finally {
    d.close();
  }
  assert.is(pool.available(), pool.count);
});

test('a descriptor pointing outside its region is dropped and counted, the frames around it arrive', async () => {
  const s = sock();
  const { d, pool, drive } = server(s, {}, memPool(256));
  try {
    const h = await handClient(s, drive);
    const at = [h.bufAt, h.mem.size - 10, h.bufAt + 2048];
    for (let k = 0; k < 3; k++) {
      const dsc = h.c2s.desc(k);
      dsc.region = 0;
      dsc.offset = at[k];
      dsc.length = 64;
      dsc.flags = 0;
    }
    h.c2s.setHead(3);
    const out = new Uint32Array(8);
    const n = d.rxBurst(0, out, 8);
    assert.is(n, 2);
    assert.is(d.stats().rxErrors, 1);
    assert.is(h.c2s.tail(), 3, 'the bad one is consumed too');
    pool.free(out, 0, n);
    core.closeFd(h.fd);
    core.closeFd(h.efC2S);
    core.closeFd(h.efS2C);
  } finally {
    d.close();
  }
});

test('our client seen by a hand-written server: INIT, ADD_REGION x2 (zero copy), ADD_RING, CONNECT; rings initialised', async () => {
  const s = sock();
  const lfd = core.memifRawListen(s);
  const pool = createPool({ count: 1024, hugepages: 'never' });
  const c = new MemifDriver('cli', {
    socket: s,
    role: 'client',
    id: 9,
    secret: 'open sesame',
    ringSize: 64,
    rxQueues: 2,
  });
  c.open(pool);
  try {
    let fd = -1;
    for (let i = 0; i < 200 && fd < 0; i++) {
      c.poll();
      fd = core.memifRawAccept(lfd);
      if (fd < 0) await sleep(2);
    }
    assert.ok(fd >= 0, 'the client connected');
    core.memifRawSend(
      fd,
      msg(T.HELLO, (v, b) => {
        put(b, 2, 'hand-server');
        v.setUint16(34, VERSION, true);
        v.setUint16(36, VERSION, true);
        v.setUint16(38, 255, true);
        v.setUint16(40, 0, true);
        v.setUint16(42, 0, true);
        v.setUint8(44, 5);
      }),
    );
    const drive = () => void c.poll();
    const init = await expectType(fd, drive, T.INIT);
    assert.is(init.v.getUint16(2, true), VERSION);
    assert.is(init.v.getUint32(4, true), 9, 'interface id');
    assert.is(init.v.getUint8(8), 0, 'ethernet mode');
    assert.is(str(init.data, 9, 24), 'open sesame');
    assert.is(str(init.data, 33, 32), 'rdma-graph 0.1.0');
    const r0 = await expectType(fd, drive, T.ADD_REGION);
    assert.is(r0.v.getUint16(2, true), 0);
    assert.ok(r0.fd >= 0, 'region 0 fd passed');
    const r0size = Number(r0.v.getBigUint64(4, true));
    assert.is(
      r0size,
      2 * (128 + 16 * 32) + 32 * 2048,
      "one C2S and one S2C ring of 32 slots (the server allows 2^5 and one ring each way), then the C2S ring's 32 slot buffers of 2048 bytes (frames it gathers from MRs)",
    );
    const r1 = await expectType(fd, drive, T.ADD_REGION);
    assert.is(r1.v.getUint16(2, true), 1);
    assert.is(Number(r1.v.getBigUint64(4, true)), pool.memory.buffer.byteLength, 'region 1 is the whole pool memory');
    const ringMsgs = [await expectType(fd, drive, T.ADD_RING), await expectType(fd, drive, T.ADD_RING)];
    assert.equal(
      ringMsgs.map((m) => [
        m.v.getUint16(2, true),
        m.v.getUint16(4, true),
        m.v.getUint16(6, true),
        m.v.getUint32(8, true),
        m.v.getUint8(12),
        m.fd >= 0,
      ]),
      [
        [1, 0, 0, 0, 5, true],
        [0, 0, 0, 128 + 16 * 32, 5, true],
      ],
      'C2S ring 0 at offset 0, then S2C ring 0, each with an eventfd',
    );
    const conn = await expectType(fd, drive, T.CONNECT);
    assert.is(str(conn.data, 2, 32), 'cli');
    const map = new DataView(core.memifMapFd(r0.fd, r0size));
    assert.is(map.getUint32(0, true), COOKIE, 'ring cookie');
    assert.is(map.getUint32(128 + 16 * 32, true), COOKIE);
    for (let k = 0; k < [init, r0, r1, ...ringMsgs, conn].length; k++) core.memifRawSend(fd, msg(T.ACK));
    core.memifRawSend(
      fd,
      msg(T.CONNECTED, (_, b) => put(b, 2, 'hand-srv0')),
    );
    for (let i = 0; i < 100 && !c.linkUp(); i++) {
      c.poll();
      await sleep(1);
    }
    assert.ok(c.linkUp());
    assert.is(c.info().remoteIfName, 'hand-srv0');
    assert.is(c.info().rxRings, 1, 'the server offered one ring each way');
    // The client hands the server empty pool buffers (zero copy: region 1, the pool's offsets).
    c.rxBurst(0, new Uint32Array(8), 8);
    const s2c = 128 + 16 * 32;
    assert.is(map.getUint16(s2c + 6, true), 32, 'S2C head: every slot offered');
    assert.is(map.getUint16(s2c + 128 + 2, true), 1, 'descriptor region 1');
    assert.is(map.getUint32(s2c + 128 + 4, true), pool.dataSize, 'descriptor length = pool data size');
    assert.is(
      (map.getUint32(s2c + 128 + 8, true) - pool.headroom) % pool.stride,
      0,
      "offset = a pool buffer's data start",
    );
    // A frame whose payload is a window of an MR (sent in place): the zero-copy client copies it
    // into the C2S ring's own slot buffers (region 0, after the rings), not into the pool.
    assert.ok(c.txExternal(), 'it gathers payloads sent from an MR');
    const mem = Uint8Array.from({ length: 4000 }, (_, i) => (i * 7 + 3) & 0xff);
    const id = pool.ext.add(mem);
    const frame = (): number => {
      const h = pool.allocChain(2);
      pool.u8.fill(0x5a, pool.offset[h], pool.offset[h] + 20);
      pool.length[h] = 20;
      pool.flags[h] |= BufferFlag.EXT_CHAIN;
      pool.attachExt(pool.next[h], id, 100, 3000);
      return h;
    };
    const one = new Uint32Array(1);
    const send = (): number => {
      one[0] = frame();
      const taken = c.txBurst(0, one, 0, 1);
      if (taken === 0) pool.free(one, 0, 1);
      return taken;
    };
    assert.is(send(), 1);
    const slots = 2 * (RING_HDR + DESC * 32);
    assert.is(map.getUint16(6, true), 2, 'C2S head: 3020 bytes over two 2048-byte slots');
    assert.equal(
      [0, 1].map((k) => {
        const d = RING_HDR + k * DESC; // flags u16, region u16, length u32, offset u32
        return [
          map.getUint16(d, true),
          map.getUint16(d + 2, true),
          map.getUint32(d + 4, true),
          map.getUint32(d + 8, true),
        ];
      }),
      [
        [1, 0, 2048, slots],
        [0, 0, 972, slots + 2048],
      ],
      'descriptors: flags (NEXT), region 0, length, offset of the slot buffers',
    );
    const got = new Uint8Array(map.buffer, slots, 3020);
    assert.equal(got.subarray(0, 20), new Uint8Array(20).fill(0x5a), 'the header');
    assert.equal(got.subarray(20), mem.subarray(100, 3100), "the MR's bytes");
    // A hostile server: the C2S tail far past the head. It is ignored (nothing reclaimed), so the
    // ring fills at its 32 slots and further frames are refused, not sent over slots in flight.
    map.setUint16(64, 0xfff0, true); // C2S tail (the ring at offset 0)
    let more = 0;
    while (more < 100 && send() === 1) more++;
    assert.is(more, 15, 'fifteen more two-slot frames fill the ring; then refused');
    assert.is(map.getUint16(6, true), 32);
    // The tail where a server that took them all would put it: room again.
    map.setUint16(64, 32, true);
    assert.is(send(), 1, 'the slots came back');
    const st = c.stats();
    assert.is(st.txGathered, 17);
    assert.is(st.txErrors, 0);
    assert.ok(c.linkUp(), 'still up');
    core.memifRawSend(
      fd,
      msg(T.DISCONNECT, (v, b) => {
        v.setUint32(2, 5, true);
        put(b, 6, 'bye now');
      }),
    );
    for (let i = 0; i < 100 && c.linkUp(); i++) {
      c.poll();
      await sleep(1);
    }
    assert.equal(c.info().lastDisconnect, { reason: 'bye now', code: 5, byPeer: true, wasUp: true });
    assert.is(pool.available(), pool.count, 'the refilled buffers came back');
    for (const f of [r0.fd, r1.fd, ...ringMsgs.map((m) => m.fd), fd]) core.closeFd(f);
  } finally {
    c.close();
    core.closeFd(lfd);
  }
});

test.run();
