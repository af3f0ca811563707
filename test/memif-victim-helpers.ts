/**
 * The attacked side of test/hostile-memif.test.ts, in its own process (a crash there is a
 * failed test, not a dead test runner): a memif server on SOCKET that receives (and frees)
 * whatever comes, transmits one 60-byte frame to the client every millisecond while the link
 * is up, and reports on stdout, one JSON line each: {up} / {down, reason} for every connect and
 * disconnect, {alive, ...stats} for every "status" line on stdin, and at "stop" (or stdin's end)
 * {final, lost, stats, info} after closing: `lost` is buffers not back in the pool.
 *
 *   node --import tsx test/memif-victim-helpers.ts SOCKET
 */
import { createInterface } from 'node:readline';
import { MemifDriver } from '../drivers/memif.ts';
import { memPool } from './helpers.ts';

const sock = process.argv[2];
const pool = memPool(4096, 2048);
const d = new MemifDriver('victim0', { socket: sock, role: 'server', ringSize: 64 });
d.open(pool);
const out = new Uint32Array(256);
const one = new Uint32Array(1);
const say = (o: object) => process.stdout.write(JSON.stringify(o) + '\n');
let up = false;
let connects = 0,
  disconnects = 0;
let lastTx = 0;

const timer = setInterval(() => {
  // A burst loop as the engine runs it: receive, free, poll the control channel.
  for (let k = 0; k < 64; k++) {
    const n = d.rxBurst(0, out, 256);
    if (n > 0) pool.free(out, 0, n);
    if (n === 0) break;
  }
  // Counted, not sampled: a link can come up and go down between two polls.
  const st = d.stats();
  for (; connects < st.connects; connects++) say({ up: true });
  for (; disconnects < st.disconnects; disconnects++)
    say({ down: true, reason: d.info().lastDisconnect?.reason ?? null });
  up = d.linkUp();
  const now = Date.now();
  if (up && now - lastTx >= 1) {
    lastTx = now;
    const bi = pool.allocOne();
    if (bi !== 0xffffffff) {
      pool.length[bi] = 60;
      one[0] = bi;
      if (d.txBurst(0, one, 0, 1) === 0) pool.freeOne(bi);
    }
  }
}, 0);

const rl = createInterface({ input: process.stdin });
const stop = () => {
  clearInterval(timer);
  d.close();
  say({ final: true, lost: pool.count - pool.available(), stats: d.stats(), info: d.info() });
  process.exit(0);
};
rl.on('line', (l) => {
  if (l === 'status')
    say({ alive: true, up: d.linkUp(), stats: d.stats(), reason: d.info().lastDisconnect?.reason ?? null });
  if (l === 'stop') stop();
});
rl.on('close', stop);
say({ listening: sock });
