/**
 * The receiving side of test/memif-wakeup.test.ts, in its own process (the memif test hook
 * RDMA_GRAPH_MEMIF_RX_GAP_US is read when an interface opens): a graph that sleeps as soon as it
 * is idle (idle poll 0) with a memif server on SOCKET whose frames a sink counts and frees. It
 * prints {"listening":true}, then one {received, sleeps, wakeups} line for every line on stdin,
 * and closes at stdin's end.
 *
 *   node --import tsx test/memif-sleeper-helpers.ts SOCKET
 */
import { createInterface } from 'node:readline';
import { MemifDriver } from '../drivers/memif.ts';
import { Graph } from '../graph/index.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { memPool } from './helpers.ts';

const pool = memPool(2048, 2048);
const g = new Graph({ pool, idlePollUs: 0 });
const ifs = new Interfaces(g);
let received = 0;
g.register({
  name: 'count-sink',
  fn: (_rt, f) => {
    received += f!.n;
    pool.free(f!.vec, 0, f!.n);
    return f!.n;
  },
});
ifs.add(new MemifDriver('sleeper0', { socket: process.argv[2], role: 'server', ringSize: 64 }), { next: 'count-sink' });
g.build();
g.start();
const say = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
say({ listening: true });
createInterface({ input: process.stdin })
  .on('line', () => say({ received, sleeps: g.sleeps, wakeups: g.wakeups }))
  .on('close', () => {
    g.close();
    ifs.closeAll();
  });
