/**
 * What one live-view sample costs the data plane's thread (issue 34): the facade calls, the frame
 * and its JSON (api/live-frame.ts), as api/live-sampler.ts runs them every 500 ms while a page
 * is open, timed on a data plane of this process with `qps` QPs (for npm run bench -- rdma with
 * RDMA_BENCH_LIVE=1).
 */
import { liveFrame, takeSample } from '../api/live-frame.ts';
import { LIVE_INTERVAL_MS } from '../api/live-sampler.ts';
import { twoDataplanes } from '../test/dataplane-helpers.ts';

export async function liveSampleCost(
  samples = 200,
  qps = 8,
): Promise<{ medianMs: number; p90Ms: number; frameBytes: number; shareOfThread: number }> {
  const dps = await twoDataplanes();
  try {
    const { pd } = await dps.a.createPd();
    const { cq } = await dps.a.createCq({ depth: 16 });
    for (let i = 0; i < qps; i++) await dps.a.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 8, maxRecvWr: 8 });
    const first = await takeSample(dps.a);
    let prev = first;
    const times: number[] = [];
    let frameBytes = 0;
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      const cur = await takeSample(dps.a);
      frameBytes = JSON.stringify(liveFrame(prev, cur, first)).length;
      times.push(performance.now() - t0);
      prev = cur;
    }
    times.sort((x, y) => x - y);
    const medianMs = times[Math.floor(samples / 2)];
    return {
      medianMs,
      p90Ms: times[Math.floor(samples * 0.9)],
      frameBytes,
      shareOfThread: medianMs / LIVE_INTERVAL_MS,
    };
  } finally {
    await dps.close();
  }
}
