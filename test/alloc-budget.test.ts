/**
 * What the data path allocates per segment, measured by V8's sampling heap profiler
 * (bench/alloc-profile.ts) while two stacks in one process move WRITEs over a pipe at MTU 9000
 * (each segment a chain of 2 KiB buffers, filled from the MR and placed into it by
 * graph/chain-copy.ts). Once the code is optimised it is 40-75 bytes; a view object per buffer
 * on either side alone made ~490-500 (measured with each native copy turned off), so a
 * garbage-making copy put back in the data path fails here, long before anyone notices the GC
 * pauses it costs a latency run. Bytes, not time: nothing here is timed.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { startAllocProfile } from '../bench/alloc-profile.ts';
import { connectManual, makeEnds, twoStacks } from './rdma-helpers.ts';

const BUDGET = 260;

test('WRITEs of 64 KiB in 9000-byte segments allocate less than 260 bytes per segment, both stacks together', async () => {
  const p = twoStacks({ mtu: 9000, buffers: 16384 });
  try {
    await p.ready;
    const A = makeEnds(p.a, { maxSendWr: 64 }),
      B = makeEnds(p.b);
    connectManual(p.a, A.qp, p.b, B.qp);
    const src = p.a.rdma.regMr(A.pd, 65536, ['local-write']);
    const dst = p.b.rdma.regMr(B.pd, 65536, ['local-write', 'remote-write']);
    for (let i = 0; i < src.memory.length; i++) src.memory[i] = i % 251;
    let posted = 0,
      done = 0;
    const wr = {
      wrId: 0,
      opcode: 'write' as const,
      sg: [{ mr: src, offset: 0, length: 65536 }],
      remote: { stag: dst.stag, offset: 0 },
    };
    const post = () => {
      while (posted - done < 16) {
        wr.wrId = posted++;
        p.a.rdma.postSend(A.qp, wr);
      }
    };
    const run = (writes: number) =>
      new Promise<void>((resolve, reject) => {
        const until = done + writes;
        A.scq.onCompletion = (cq) => {
          for (const c of cq.poll(64)) {
            if (c.status !== 'success') return reject(new Error(`write ${c.wrId}: ${c.status}`));
            done++;
          }
          if (done >= until) resolve();
          else post();
        };
        post();
      });
    await run(4000); // the code optimised first (unoptimised code boxes numbers)
    const prof = await startAllocProfile(256);
    const tx0 = p.a.rdma.queryQp(A.qp).counters.txPackets;
    await run(3000);
    const segments = p.a.rdma.queryQp(A.qp).counters.txPackets - tx0;
    const report = await prof.stop(segments, 8);
    const per = Number(/allocated \(sampled\): (\d+) bytes each/.exec(report)?.[1]);
    assert.ok(segments >= 3000 * 7, `${segments} segments for 3000 WRITEs`);
    assert.ok(
      dst.memory.every((b, i) => b === i % 251),
      'the data arrived',
    );
    assert.ok(per < BUDGET, `${per} bytes per segment (budget ${BUDGET}):\n${report}`);
  } finally {
    p.close();
  }
});

test.run();
