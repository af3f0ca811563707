/**
 * A memif traffic generator for `npm run bench -- memif` (case c): a memif client sending
 * minimal RDMA WRITE segments (Ethernet/IPv4/UDP without checksum/TRP/DDP tagged, 4 payload
 * bytes: 70-byte frames) with consecutive PSNs from 0 to a QP of the receiving stack, as fast
 * as the ring takes them, draining what comes back (ACKs). testpmd cannot do this: its txonly
 * frames are not TRP, and replaying a capture would repeat PSNs.
 *
 *   node --import tsx bench/memif-gen.ts <socket> <stag> <qpn> <srcPort> <seconds> [<ack>]
 *
 * Several QPs, one per memif queue pair (bench -- workers: a queue per worker): comma lists,
 * the k-th STag / QP number / ACK for queue k (source port srcPort + k), bursts round robin.
 * <ack>: the ACK number the segments carry (the QP's send PSN; default 0).
 *
 * Prints one JSON line at the end: {"sent": N, "seconds": S}.
 */
import { MemifDriver } from '../drivers/memif.ts';
import { createPool } from '../graph/memory.ts';
import { FRAME_SIZE } from '../graph/node.ts';
import { udpFrame } from '../test/l2l4-helpers.ts';

const [socket, stagS, qpnS, sportS, secondsS, ackS] = process.argv.slice(2);
const list = (s: string | undefined) => (s ?? '0').split(',').map(Number);
const stags = list(stagS),
  qpns = list(qpnS),
  acks = list(ackS),
  sport = Number(sportS),
  seconds = Number(secondsS);

/** The frame with PSN 0; the PSN is at byte 42 (TRP header right after the UDP header). */
export function writeSegment(stagValue: number, dport: number, srcPort: number): Uint8Array {
  const be32 = (x: number) => [x >>> 24, (x >>> 16) & 0xff, (x >>> 8) & 0xff, x & 0xff];
  // TRP: PSN 0, ACK 0, DATA. DDP tagged, last, DV 1; RDMAP RV 1 WRITE; STag, TO 0; 4 bytes.
  const payload = [
    ...be32(0),
    ...be32(0),
    0,
    0,
    0x80 | 0x40 | 1,
    1 << 6,
    ...be32(stagValue),
    ...be32(0),
    ...be32(0),
    0xde,
    0xad,
    0xbe,
    0xef,
  ];
  const f = udpFrame({
    src: '10.0.0.2',
    dst: '10.0.0.1',
    srcMac: '02:00:00:00:00:02',
    dstMac: '02:00:00:00:00:01',
    sport: srcPort,
    dport,
    payload,
    checksum: 'zero',
  });
  return Uint8Array.from(f);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const pool = createPool({ count: 8192, hugepages: 'never', name: 'memif-gen' });
  const Q = qpns.length;
  const d = new MemifDriver('gen0', { socket, role: 'client', mac: '02:00:00:00:00:02', rxQueues: Q });
  d.open(pool);
  const start = Date.now();
  while (!d.poll()) {
    if (Date.now() - start > 10000) throw new Error(`memif-gen: no link: ${JSON.stringify(d.info())}`);
    await new Promise((r) => setTimeout(r, 2));
  }
  const tmpls = qpns.map((qpn, k) => {
    const t = writeSegment(stags[k], qpn, sport + k);
    const ack = acks[k] ?? 0;
    t.set([ack >>> 24, (ack >>> 16) & 0xff, (ack >>> 8) & 0xff, ack & 0xff], 46);
    return t;
  });
  const psns = new Array<number>(Q).fill(0);
  const bufs = new Uint32Array(FRAME_SIZE),
    out = new Uint32Array(FRAME_SIZE);
  const u8 = pool.u8,
    offset = pool.offset,
    length = pool.length;
  let sent = 0;
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  while (performance.now() < end) {
    for (let k = 0; k < 64; k++) {
      const q = k % Q,
        tmpl = tmpls[q],
        psn = psns[q];
      const n = pool.alloc(bufs, 0, FRAME_SIZE);
      for (let i = 0; i < n; i++) {
        const bi = bufs[i],
          o = offset[bi],
          p = (psn + i) >>> 0;
        u8.set(tmpl, o);
        u8[o + 42] = p >>> 24;
        u8[o + 43] = (p >>> 16) & 0xff;
        u8[o + 44] = (p >>> 8) & 0xff;
        u8[o + 45] = p & 0xff;
        length[bi] = 70;
      }
      const taken = d.txBurst(q, bufs, 0, n);
      if (taken < n) pool.free(bufs, taken, n - taken);
      psns[q] = (psn + taken) >>> 0;
      sent += taken;
      const m = d.rxBurst(q, out, FRAME_SIZE);
      if (m > 0) pool.free(out, 0, m);
    }
  }
  const secs = (performance.now() - t0) / 1000;
  d.close();
  process.stdout.write(JSON.stringify({ sent, seconds: secs }) + '\n');
}
