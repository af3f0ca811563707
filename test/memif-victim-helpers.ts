/**
 * The attacked side of test/hostile-memif.test.ts, in its own process (a crash there is a
 * failed test, not a dead test runner): a memif server on SOCKET that receives (and frees)
 * whatever comes, transmits one 60-byte frame to the client every millisecond while the link
 * is up, and reports on stdout, one JSON line each: {up} / {down, reason} for every connect and
 * disconnect, {alive, ...stats} for every "status" line on stdin, and at "stop" (or stdin's end)
 * {final, lost, stats, info} after closing: `lost` is buffers not back in the pool.
 *
 *   node --import tsx test/memif-victim-helpers.ts SOCKET [defer]
 *
 * With `defer`, the pool's rx pattern (graph/peer-windows.ts) has frames of 512 bytes or more whose
 * first byte is 0xaa left in the client's memory: the victim reads each such packet's bytes as
 * ddp-input places them (ChainCopy) and keeps the last one of a burst until the next (so that the
 * driver copies it in before the client gets its slots back); its status adds the windows'
 * counters.
 */
import { createInterface } from 'node:readline';
import { MemifDriver } from '../drivers/memif.ts';
import { BufferFlag } from '../graph/buffer-pool.ts';
import { chainCopier } from '../graph/chain-copy.ts';
import { peerWindowsOf } from '../graph/peer-windows.ts';
import { memPool } from './helpers.ts';

const sock = process.argv[2];
const defer = process.argv[3] === 'defer';
const pool = memPool(4096, 2048);
const d = new MemifDriver('victim0', { socket: sock, role: 'server', ringSize: 64 });
d.open(pool);
const windows = peerWindowsOf(pool);
if (defer) windows.setPattern({ headBytes: 64, minBytes: 512, rules: Uint8Array.of(0, 0xff, 0xaa) });
const scratch = new Uint8Array(1 << 18);
let kept = 0xffffffff;
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
    if (defer && n > 0) {
      if (kept !== 0xffffffff) pool.freeOne(kept);
      kept = 0xffffffff;
      for (let i = 0; i < n; i++)
        if (pool.flags[out[i]] & BufferFlag.PEER_CHAIN)
          chainCopier(pool).toMem(out[i], 0, scratch, 0, Math.min(scratch.length, pool.packetLength(out[i])));
      kept = out[n - 1];
      if (n > 1) pool.free(out, 0, n - 1);
      continue;
    }
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
  if (kept !== 0xffffffff) pool.freeOne(kept);
  d.close();
  say({ final: true, lost: pool.count - pool.available(), stats: d.stats(), info: d.info() });
  process.exit(0);
};
rl.on('line', (l) => {
  if (l === 'status')
    say({
      alive: true,
      up: d.linkUp(),
      stats: d.stats(),
      windows: windows.counters(),
      reason: d.info().lastDisconnect?.reason ?? null,
    });
  if (l === 'stop') stop();
});
rl.on('close', stop);
say({ listening: sock });
