/**
 * A second rdma-graph data plane in its own process, for test/memif-peer.test.ts:
 *
 *   node --import tsx test/memif-peer-helpers.ts <socket> <server|client>
 *
 * One memif interface (02:00:00:00:00:01, 10.0.0.1/24, no static neighbor: ARP does the work),
 * the L2-L4 nodes and the RDMA layer on the adaptive loop. An RDMA responder listens on port
 * 7000: each connection gets a QP; the accept private data carries the stag and length of a
 * 64 KiB MR (remote read, write, atomic) filled with pattern(65536, 99); every Send it receives
 * it sends back (an echo). It reports on stdout, one JSON object a line: {event: 'link', up}
 * when the link changes, {event: 'closed', lost} after "quit" on stdin.
 */
import { Graph } from '../graph/index.ts';
import { createPool } from '../graph/memory.ts';
import { Interfaces } from '../drivers/interfaces.ts';
import { MemifDriver } from '../drivers/memif.ts';
import { registerL2L4 } from '../nodes/netstack.ts';
import { registerRdma } from '../nodes/rdma/stack.ts';
import type { Qp } from '../nodes/rdma/qp.ts';
import { memPool } from './helpers.ts';
import { pattern } from './rdma-helpers.ts';

const [socket, role] = process.argv.slice(2) as [string, 'server' | 'client'];
const say = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');

const pool = role === 'client' ? createPool({ count: 8192, hugepages: 'never', name: 'memif-peer' }) : memPool(8192);
const graph = new Graph({ pool, threadName: 'peer', idlePollUs: 50 });
const net = registerL2L4(graph);
const ifs = new Interfaces(graph);
const drv = new MemifDriver('memif0', { socket, role, mac: '02:00:00:00:00:01' });
const itf = ifs.add(drv);
net.addInterface({
  index: itf.index,
  name: drv.name,
  mac: drv.mac,
  address: '10.0.0.1/24',
  mtu: drv.mtu,
  output: itf.output.name,
});
const rdma = registerRdma(graph, net);
graph.build();
graph.start();

const pd = rdma.createPd();
const cq = rdma.createCq(4096);
const mr = rdma.regMr(pd, pattern(65536, 99), ['local-write', 'remote-write', 'remote-read', 'remote-atomic']);
const SLOT = 16384,
  SLOTS = 32;
const recvMr = rdma.regMr(pd, SLOT * SLOTS, ['local-write']);
const qps = new Map<number, Qp>();
rdma.listen(7000, () => {
  const qp = rdma.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 256, maxRecvWr: 256 });
  qps.set(qp.qpn, qp);
  rdma.modifyQp(qp, { state: 'init' }); // receives can be posted from INIT on
  for (let i = 0; i < SLOTS; i++) rdma.postRecv(qp, { wrId: i, sg: [{ mr: recvMr, offset: i * SLOT, length: SLOT }] });
  const pdata = new Uint8Array(8);
  new DataView(pdata.buffer).setUint32(0, mr.stag, true);
  new DataView(pdata.buffer).setUint32(4, mr.length, true);
  return { qp, privateData: pdata };
});
// Echo: a received Send goes back from the same slot, then the slot is posted again.
const echoing = new Map<number, { qp: Qp; slot: number }>();
let echoId = 1_000_000;
cq.onCompletion = () => {
  for (const c of cq.poll(256)) {
    const qp = qps.get(c.qpn);
    if (qp === undefined) continue;
    if (c.opcode === 'recv' && c.status === 'success') {
      const id = echoId++;
      echoing.set(id, { qp, slot: c.wrId as number });
      rdma.postSend(qp, {
        wrId: id,
        opcode: 'send',
        sg: [{ mr: recvMr, offset: (c.wrId as number) * SLOT, length: c.byteLen }],
      });
    } else if (c.opcode === 'send') {
      const e = echoing.get(c.wrId as number);
      echoing.delete(c.wrId as number);
      if (e !== undefined && c.status === 'success')
        rdma.postRecv(e.qp, { wrId: e.slot, sg: [{ mr: recvMr, offset: e.slot * SLOT, length: SLOT }] });
    }
  }
};

let up = false;
const watch = setInterval(() => {
  if (drv.linkUp() !== up) {
    up = drv.linkUp();
    say({ event: 'link', up, info: drv.info() });
  }
}, 5);

process.stdin.setEncoding('utf8');
process.stdin.on('data', (d: string) => {
  if (!d.includes('quit')) return;
  clearInterval(watch);
  graph.close();
  ifs.closeAll();
  say({ event: 'closed', lost: pool.count - pool.available() });
  process.exit(0);
});
say({ event: 'started', pid: process.pid });
