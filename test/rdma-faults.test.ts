/**
 * Reliability under faults over a pipe: 10 000 mixed operations per fault level with loss,
 * reordering, duplication and corruption at once on both directions (faultRun in
 * rdma-faults-helpers.ts); goodput per level is printed for orientation (not asserted).
 */
import { test } from './harness.ts';
import { faultRun, OPS } from './rdma-faults-helpers.ts';

const results: Record<string, { ms: number; bytes: number }> = {};
for (const p of [0, 0.01, 0.05, 0.1]) {
  test(`10 000 mixed operations with ${p * 100} % loss, reordering, duplication and corruption at once`, async () => {
    const r = await faultRun(p, 1 + Math.round(p * 1000));
    results[p] = r;
    const mbps = (r.bytes * 8) / (r.ms * 1e3);
    console.log(
      `  faults ${p * 100}%: ${OPS} ops in ${r.ms.toFixed(0)} ms, ${mbps.toFixed(1)} Mbit/s payload, ${r.retransmits} retransmissions, ${r.dropped} dropped by the injector` +
        (results[0] ? `, goodput ${(r.bytes / r.ms / (results[0].bytes / results[0].ms)).toFixed(2)} of lossless` : ''),
    );
  });
}

test.run();
