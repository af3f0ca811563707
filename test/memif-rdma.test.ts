/**
 * The RDMA tests over memif: two stacks in one process joined by a memif pair (A a zero-copy
 * client, B a copying server, twoStacks({ link: 'memif' })): every rdma-ops test (every opcode,
 * sizes up to 16 MiB both ways, gather/scatter, SRQ, bursts, the connection manager) and the
 * 10 000-operation fault run at 5 % of every fault at once.
 */
import * as assert from 'uvu/assert';
import { rdmaOpsSuite } from './rdma-ops-helpers.ts';
import { faultRun, OPS } from './rdma-faults-helpers.ts';

const ops = rdmaOpsSuite('memif');

ops('10 000 mixed operations with 5 % loss, reordering, duplication and corruption at once, over memif', async () => {
  const r = await faultRun(0.05, 51, 'memif');
  assert.ok(r.retransmits > 0);
  console.log(
    `  memif faults 5%: ${OPS} ops in ${r.ms.toFixed(0)} ms, ${((r.bytes * 8) / (r.ms * 1e3)).toFixed(1)} Mbit/s payload, ${r.retransmits} retransmissions, ${r.dropped} dropped by the injector`,
  );
});

ops.run();
