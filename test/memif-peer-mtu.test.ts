/**
 * A memif link between two rdma-graph data planes takes a large MTU by itself (drivers/memif.ts
 * linkMtu, issue 31's segment-size lever): with no `mtu` configured both ends read the peer's
 * name in the memif handshake and take MEMIF_PEER_MTU, so an RC QP's segments are ~32 KiB
 * chains instead of 1444 bytes, and sends UDP without checksums (memif.udp-checksum null); a
 * configured `mtu` or `udp-checksum` is kept whatever the peer; the size is bounded
 * by the buffers and the ring (peerMtu). A peer that is not rdma-graph (DPDK's testpmd) keeps
 * 1500: test/memif-dpdk.test.ts.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDataplane } from '../dataplane/create.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { MEMIF_PEER_MTU, peerMtu } from '../drivers/memif.ts';
import { segmentPayload } from '../nodes/rdma/wire.ts';
import { baseConfig, IP_A, IP_B, MAC_A, MAC_B } from './dataplane-helpers.ts';
import { cpuWith, memifIf } from './workers-helpers.ts';

/** The MTU with the tests' buffers (2048 bytes, pool and memif) and rings (1024 slots): MEMIF_PEER_MTU. */
const PEER_MTU = MEMIF_PEER_MTU;

/** Two data planes joined by memif (A server, B client), each interface's `mtu` and `memif.udp-checksum` as given. */
async function pair(
  mtu: [number | null, number | null],
  body: (a: DataplaneApi, b: DataplaneApi) => Promise<void>,
  udpChecksum: boolean | null = null,
) {
  const dir = mkdtempSync(join(tmpdir(), 'memif-mtu-'));
  const sock = join(dir, 'm.sock');
  const make = (i: 0 | 1) =>
    createDataplane(
      baseConfig({
        cpu: cpuWith(0),
        interfaces: [
          (() => {
            const itf = memifIf('memif0', sock, i === 0 ? 'server' : 'client', [IP_A, IP_B][i], [MAC_A, MAC_B][i]);
            return { ...itf, mtu: mtu[i], memif: { ...itf.memif!, udpChecksum } };
          })(),
        ],
        neighbors: [{ interface: 'memif0', address: [IP_B, IP_A][i], mac: [MAC_B, MAC_A][i] }],
      }),
    );
  const a = await make(0);
  const b = await make(1);
  try {
    for (let k = 0; k < 300 && (await b.interface('memif0')).state !== 'up'; k++)
      await new Promise((r) => setTimeout(r, 20));
    assert.is((await b.interface('memif0')).state, 'up', 'the memif link came up');
    await body(a, b);
  } finally {
    await a.close();
    await b.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** B's count of UDP datagrams that came without a checksum (udp4-input no_checksum). */
async function noChecksum(b: DataplaneApi): Promise<number> {
  const rows = (await b.errors()).flatMap((t) => t.rows);
  return rows.find((r) => r.node === 'udp4-input' && r.reason === 'UDP without checksum (accepted)')?.count ?? 0;
}

/**
 * A QP on each, connected; a WRITE of `bytes` (a pattern) from A into B's MR, checked; A's
 * segment size, B's frames and how many of them came without a UDP checksum.
 */
async function writeAcross(
  a: DataplaneApi,
  b: DataplaneApi,
  bytes: number,
): Promise<{ segment: number; frames: number; bare: number }> {
  const ra = Dataplane.internals(a as Dataplane).rdma,
    rb = Dataplane.internals(b as Dataplane).rdma;
  const side = (r: typeof ra) => {
    const pd = r.createPd();
    const cq = r.createCq(64);
    const qp = r.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 8, maxRecvWr: 8 });
    const mr = r.regMr(pd, bytes, ['local-write', 'remote-write']);
    return { pd, cq, qp, mr };
  };
  const A = side(ra),
    B = side(rb);
  ra.modifyQp(A.qp, { state: 'init' });
  rb.modifyQp(B.qp, { state: 'init' });
  ra.modifyQp(A.qp, { state: 'rtr', remote: { address: IP_B, port: B.qp.qpn }, rqPsn: B.qp.isn });
  rb.modifyQp(B.qp, { state: 'rtr', remote: { address: IP_A, port: A.qp.qpn }, rqPsn: A.qp.isn });
  ra.modifyQp(A.qp, { state: 'rts' });
  rb.modifyQp(B.qp, { state: 'rts' });
  for (let i = 0; i < bytes; i++) A.mr.memory[i] = (i * 7 + 3) & 0xff;
  const before = (await b.interface('memif0')).counters.rxPackets;
  const bare = await noChecksum(b);
  const done = new Promise<string>((resolve) => {
    A.cq.onCompletion = (cq) => {
      for (const c of cq.poll(8)) resolve(c.status);
    };
  });
  ra.postSend(A.qp, {
    wrId: 1,
    opcode: 'write',
    sg: [{ mr: A.mr, offset: 0, length: bytes }],
    remote: { stag: B.mr.stag, offset: 0 },
  });
  assert.is(await done, 'success', 'the WRITE completes');
  for (let i = 0; i < bytes; i++)
    if (B.mr.memory[i] !== ((i * 7 + 3) & 0xff)) assert.unreachable(`byte ${i} of the WRITE differs`);
  return {
    segment: ra.queryQp(A.qp).segmentSize,
    frames: (await b.interface('memif0')).counters.rxPackets - before,
    bare: (await noChecksum(b)) - bare,
  };
}

test('two rdma-graph data planes over memif with no mtu or udp-checksum configured: both take the peer MTU, segments of ~32 KiB, no UDP checksum, data intact', async () => {
  await pair([null, null], async (a, b) => {
    // The QP reads the link's MTU when it connects: no wait for the link watch.
    const r = await writeAcross(a, b, 1 << 20);
    assert.is(r.segment, segmentPayload(PEER_MTU, false), "A's QP segments at the peer MTU");
    // 1 MiB in ~32 KiB segments: 33 frames, where 1444-byte segments would take 727.
    assert.ok(r.frames <= Math.ceil((1 << 20) / segmentPayload(PEER_MTU, true)) + 8, `${r.frames} frames`);
    assert.ok(
      r.bare >= Math.floor((1 << 20) / segmentPayload(PEER_MTU, true)),
      `${r.bare} datagrams without a checksum`,
    );
    for (const dp of [a, b]) {
      let mtu = 0;
      for (let k = 0; k < 50 && mtu !== PEER_MTU; k++) {
        mtu = (await dp.interface('memif0')).mtu;
        if (mtu !== PEER_MTU) await new Promise((res) => setTimeout(res, 20));
      }
      assert.is(mtu, PEER_MTU, 'the interface view shows the MTU the link took');
      const port = (await dp.devices())[0].ports[0];
      assert.is(port.mtu, PEER_MTU, "the verbs device's port shows it too");
      assert.is(port.segmentBytes, segmentPayload(PEER_MTU, false) + 18, 'with its segment size');
    }
  });
});

test('a configured mtu and udp-checksum are kept whatever the peer: 1500 and checksums on A, the peer MTU on B', async () => {
  await pair(
    [1500, null],
    async (a, b) => {
      const r = await writeAcross(a, b, 256 << 10);
      assert.is(r.bare, 0, 'every datagram from A carries its UDP checksum (udp-checksum: true)');
      assert.is(r.segment, segmentPayload(1500, false), "A's pinned 1500");
      assert.ok(r.frames >= Math.floor((256 << 10) / segmentPayload(1500, true)), `${r.frames} frames of 1444 bytes`);
      assert.is((await a.interface('memif0')).mtu, 1500);
      await new Promise((res) => setTimeout(res, 300)); // a link-watch pass
      assert.is((await a.interface('memif0')).mtu, 1500, 'still 1500 after the link watch');
      assert.is((await b.interface('memif0')).mtu, PEER_MTU, 'B (none configured) takes the peer MTU');
    },
    true,
  );
});

test('peerMtu: bounded by 32 buffers of the smaller buffer size and a quarter of the ring; null when that leaves <= 1500', () => {
  assert.is(peerMtu(2048, 2048, 1024), MEMIF_PEER_MTU, 'the defaults (2048-byte buffers, 1024-slot rings)');
  assert.is(segmentPayload(MEMIF_PEER_MTU, true), 32768, 'a tagged segment carries exactly 32 KiB');
  assert.is(peerMtu(65535, 65535, 16384), MEMIF_PEER_MTU, 'never above MEMIF_PEER_MTU');
  assert.is(peerMtu(512, 2048, 1024), 32 * 512 - 64, 'small pool buffers');
  assert.is(peerMtu(2048, 512, 1024), 32 * 512 - 64, 'small memif buffers');
  assert.is(peerMtu(2048, 2048, 16), 4 * 2048 - 64, 'a 16-slot ring: frames of at most 4 slots');
  assert.is(peerMtu(2048, 2048, 2), null, 'a 2-slot ring: no larger MTU');
  assert.is(peerMtu(128, 128, 1024), 32 * 128 - 64, '128-byte buffers: 4032');
  assert.is(peerMtu(48, 2048, 1024), null, '48-byte pool buffers: no larger MTU than 1500');
});

test.run();
