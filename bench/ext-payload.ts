/**
 * What sending a payload from the MR in place saves (issue 31; graph/ext-memory.ts), measured
 * in one run: two stacks in one process joined by memif, B (the server) WRITEs 64 KiB with 16
 * outstanding to A (the zero-copy client), and every `chunkMs` the payloads switch between sent
 * in place (the memif server gathers them from the MR) and copied into the pool first (as
 * before: `pool.ext.wanted` off), so that a loaded machine's drift falls on both alike. CPU time
 * (both stacks: one thread) and bytes are summed per mode; `mtu` the memif link's (9000: segments
 * of 8962 bytes). Prints, never asserts.
 */
import { connectManual, makeEnds, twoStacks } from '../test/rdma-helpers.ts';

const MSG = 65536;

export interface ExtPayloadResult {
  /** Gbit/s and CPU ns per byte written, payloads sent in place and copied. */
  inPlace: { gbps: number; nsPerByte: number };
  copied: { gbps: number; nsPerByte: number };
}

export async function extPayloadBench(seconds: number, mtu = 1500, chunkMs = 100): Promise<ExtPayloadResult> {
  const p = twoStacks({ link: 'memif', buffers: 16384, mtu });
  try {
    await p.ready;
    const A = makeEnds(p.a),
      B = makeEnds(p.b, { maxSendWr: 64 });
    connectManual(p.a, A.qp, p.b, B.qp);
    const src = p.b.rdma.regMr(B.pd, MSG, ['local-write']);
    const dst = p.a.rdma.regMr(A.pd, MSG, ['local-write', 'remote-write']);
    const ext = p.b.graph.pool.ext;
    let posted = 0,
      done = 0;
    const post = () => {
      while (posted - done < 16)
        p.b.rdma.postSend(B.qp, {
          wrId: posted++,
          opcode: 'write',
          sg: [{ mr: src, offset: 0, length: MSG }],
          remote: { stag: dst.stag, offset: 0 },
        });
    };
    const acc = [
      { cpuUs: 0, bytes: 0, ms: 0 },
      { cpuUs: 0, bytes: 0, ms: 0 },
    ];
    const warm = performance.now() + 1000; // JIT warm-up, not counted
    const end = warm + seconds * 1000;
    let mode = 0, // 0: in place, 1: copied
      t0 = 0,
      d0 = 0,
      c0 = process.cpuUsage();
    await new Promise<void>((resolve, reject) => {
      B.scq.onCompletion = (cq) => {
        for (const c of cq.poll(64)) {
          if (c.status !== 'success') return reject(new Error(`write: ${c.status}`));
          done++;
        }
        const now = performance.now();
        if (now >= warm && (t0 === 0 || now - t0 >= chunkMs)) {
          if (t0 !== 0) {
            const c = process.cpuUsage(c0);
            acc[mode].cpuUs += c.user + c.system;
            acc[mode].bytes += (done - d0) * MSG;
            acc[mode].ms += now - t0;
          }
          if (now >= end) return resolve();
          mode = 1 - mode;
          ext.wanted = mode === 0;
          t0 = now;
          d0 = done;
          c0 = process.cpuUsage();
        }
        post();
      };
      post();
    });
    const fig = (a: (typeof acc)[number]) => ({
      gbps: (a.bytes * 8) / (a.ms / 1000) / 1e9,
      nsPerByte: (a.cpuUs * 1000) / a.bytes,
    });
    return { inPlace: fig(acc[0]), copied: fig(acc[1]) };
  } finally {
    p.close();
  }
}
