/**
 * Two QPs from data plane A (interface h0) to B (h1) writing as fast as they can, for the tests
 * of congestion control through a kernel bottleneck (rdma-congestion-veth, rdma-congestion-ecn).
 */
import * as assert from 'uvu/assert';
import type { DataplaneApi } from '../dataplane/api.ts';
import { connect, end, type End } from './workers-helpers.ts';

export const WRITES = 40; // 64 KiB writes per QP
export const WRITE_SIZE = 65536;

type QpView = Awaited<ReturnType<DataplaneApi['qps']>>[number];

/**
 * Two QPs A -> B, each posting WRITES writes of WRITE_SIZE, 8 outstanding; every completion must
 * be a success. Returns the writes each QP had completed when the first one finished all of its
 * own (so a caller can tell whether one starved), the milliseconds from the first post to the
 * last completion, and both QPs' views at the end.
 */
export async function twoQpsWrite(
  a: DataplaneApi,
  b: DataplaneApi,
  addrA: string,
  addrB: string,
  what: string,
): Promise<{ first: number[]; ms: number; views: QpView[] }> {
  const xs: End[] = [],
    ys: End[] = [];
  for (let k = 0; k < 2; k++) {
    xs.push(await end(a, 'h0'));
    ys.push(await end(b, 'h1'));
    await connect(a, b, xs[k], ys[k], addrA, addrB);
  }
  const posted = [0, 0],
    done = [0, 0];
  const t0 = performance.now();
  let first: number[] = [];
  for (let spins = 0; (done[0] < WRITES || done[1] < WRITES) && spins < 20000; spins++) {
    for (let k = 0; k < 2; k++) {
      while (posted[k] < WRITES && posted[k] - done[k] < 8) {
        await a.postSend(xs[k].qp.qpn, {
          wrId: posted[k]++,
          opcode: 'write',
          sge: [{ mr: xs[k].mr.mr, offset: 0, length: WRITE_SIZE }],
          remote: { stag: ys[k].mr.stag, offset: 0 },
        });
      }
      const r = await a.pollCq(xs[k].cq.cq, 16, 5);
      for (const c of r.completions) assert.is(c.status, 'success', `${what}: qp ${k} write ${String(c.wrId)}`);
      done[k] += r.completions.length;
    }
    if (first.length === 0 && (done[0] === WRITES || done[1] === WRITES)) first = [...done];
  }
  assert.equal(done, [WRITES, WRITES], `${what}: both QPs completed every write`);
  const ms = performance.now() - t0;
  const all = await a.qps();
  return { first, ms, views: xs.map((x) => all.find((q) => q.qpn === x.qp.qpn)!) };
}
