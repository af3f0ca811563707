/**
 * The wire warm-up (config `verbs.wire-warm-up`): before `rdma-graph start` announces its API,
 * two throwaway data planes in this process, joined by a memif link of their own, each serve a
 * verbs socket, and native/tools/verbs-warm-up.c in its `pair` mode runs against each (one
 * drives, one answers: SENDs, WRITEs, READs, WRITEs with immediate, atomics and UD datagrams
 * across the link); then both data planes close.
 *
 * The verbs warm-up (warm-up.ts) runs on loopback QPs: its frames never reach a driver, so the
 * code only traffic over a link runs (the drivers' bursts with frames in them, device-input and
 * interface-output, ip4-rewrite's route to a neighbour, the input nodes' branches for a peer's
 * frames) is first run by the first job, which V8 then deoptimises and compiles again while the
 * job waits (`--trace-deopt` on a fresh daemon: six deopts and some twenty TurboFan compilations
 * during its first `ib_send_lat`). V8's code and type feedback belong to the functions, not to the
 * data planes, so traffic between two other data planes of this isolate trains the same code;
 * and it is a verbs program's traffic, through the same rings and completion sinks as a user's
 * (RDMA driven from JavaScript instead left the verbs path's functions seeing other classes:
 * completeSq deoptimised for a wrong map once the verbs warm-up ran after it).
 *
 * It warms memif's driver (the embedded default) and every node; af_packet's, DPDK's and the
 * verbs drivers' own burst code stay cold. With cpu.workers each worker is an isolate of its own
 * that this does not reach (the verbs warm-up does run on each): skipped. Nothing leaves the
 * process: the sockets are in a private directory (mode 0700, removed after), the addresses are
 * TEST-NET-1's. A warm-up that cannot run says so and the daemon starts without it.
 *
 * Measured on the 2-core VM (fresh daemons of config/startup.yaml and examples/peer.yaml, three
 * alternated rounds of `ib_send_lat -n 2000` three times each): the first job's average was 60.2,
 * 42.1 and 63.9 us with p99 1.4-1.7 ms without it, 13.4, 17.3 and 45.1 us with p99 33-299 us
 * with its 1000 rounds (~0.6 s); the later jobs 11-27 us either way. `--trace-deopt` on daemon A:
 * six deopts during the first job without it, none with it.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseConfig } from '../config/load.ts';
import type { Config } from '../config/types.ts';
import { VERBS_LIBRARY, verbsProgramEnv } from '../native/addons.ts';
import type { VerbsSocket } from './api.ts';
import { Dataplane } from './dataplane.ts';
import { WARM_UP_PROGRAM } from './warm-up.ts';

export interface WireWarmUpResult {
  outcome: 'done' | 'skipped' | 'failed';
  message: string;
}

/** The driving side stops after this long, done or not. */
const BUDGET_MS = 1500;
/**
 * Both programs killed if they have not exited by then (B waits 8 s past A's budget for A's last
 * SEND; a completion may take 5 s: a loaded machine's start).
 */
const KILL_MS = 20_000;
/** Waiting for the link to come up, at most. */
const LINK_MS = 5000;
const MACS = ['02:fe:77:00:00:01', '02:fe:77:00:00:02'];
const IPS = ['192.0.2.1', '192.0.2.2']; // TEST-NET-1: routed nowhere

function side(k: 0 | 1, dir: string, poll: Config['cpu']['poll']): Config {
  const o = 1 - k;
  return parseConfig(
    `api: { listen: 127.0.0.1:0 }\n` +
      `cpu: { poll: ${poll} }\n` +
      `buffers: { count: 4096 }\n` +
      `interfaces:\n  - name: warm${k}\n    driver: memif\n` +
      `    memif: { socket: "${join(dir, 'memif.sock')}", role: ${k === 0 ? 'server' : 'client'}, id: 0 }\n` +
      `    mac: "${MACS[k]}"\n    address: ${IPS[k]}/24\n` +
      `neighbors:\n  - { interface: warm${k}, address: ${IPS[o]}, mac: "${MACS[o]}" }\n`,
    `<wire warm-up ${k === 0 ? 'a' : 'b'}>`,
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * `rounds` rounds of verbs traffic (at most BUDGET_MS) between two throwaway data planes polled
 * as `poll`. Closes both, whatever happens.
 */
export async function wireWarmUp(rounds: number, poll: Config['cpu']['poll']): Promise<WireWarmUpResult> {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(WARM_UP_PROGRAM))
    return {
      outcome: 'skipped',
      message:
        'wire warm-up skipped: the verbs library or verbs-warm-up was not built (install libibverbs-dev, npm run build)',
    };
  const t0 = performance.now();
  const dps: Dataplane[] = [];
  const sockets: VerbsSocket[] = [];
  let dir: string | null = null;
  try {
    dir = mkdtempSync(join(tmpdir(), 'rdma-graph-wire-warm-up-'));
    for (const k of [0, 1] as const) {
      const dp = await Dataplane.create(side(k, dir, poll));
      dps.push(dp);
      sockets.push(dp.serveVerbs({ path: join(dir, `verbs${k}.sock`) }));
    }
    const until = performance.now() + LINK_MS;
    for (;;) {
      const up = await Promise.all(dps.map(async (d) => (await d.interfaces())[0].state === 'up'));
      if (up.every(Boolean)) break;
      if (performance.now() > until)
        return {
          outcome: 'failed',
          message: `wire warm-up failed: its memif link did not come up in ${LINK_MS} ms; the daemon runs without it`,
        };
      await sleep(10);
    }
    const [a, b] = await runPair(sockets, rounds);
    const took = Math.round(performance.now() - t0);
    if (a.code === 0 && b.code === 0) return { outcome: 'done', message: `${a.last} (${took} ms in all)` };
    const why = a.code !== 0 ? a : b;
    return {
      outcome: 'failed',
      message: `wire warm-up failed (${a.code !== 0 ? 'driving' : 'answering'} side, ${why.code === null ? 'killed' : `exit ${why.code}`}): ${why.last || 'no output'}; the daemon runs without it`,
    };
  } catch (e) {
    return { outcome: 'failed', message: `wire warm-up failed: ${(e as Error).message}; the daemon runs without it` };
  } finally {
    for (const s of sockets) s.close();
    for (const d of dps) await d.close();
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  }
}

interface Ran {
  code: number | null;
  /** Its last line of output. */
  last: string;
}

/**
 * The two sides of verbs-warm-up's pair mode, A on the first socket: each one's "peer ..." line,
 * and B's "ready", go to the other's stdin. Both are killed after KILL_MS.
 */
function runPair(sockets: VerbsSocket[], rounds: number): Promise<Ran[]> {
  const kids = ['a', 'b'].map((s, k) =>
    spawn(WARM_UP_PROGRAM, ['pair', s, String(rounds), String(BUDGET_MS)], {
      env: verbsProgramEnv(sockets[k].path),
      stdio: ['pipe', 'pipe', 'pipe'],
    }),
  );
  const timer = setTimeout(() => kids.forEach((c) => c.kill('SIGKILL')), KILL_MS);
  return Promise.all(
    kids.map(
      (c, k) =>
        new Promise<Ran>((resolve) => {
          let last = '',
            told = 0;
          const other = kids[1 - k];
          const take = (l: string) => {
            // Its "peer ..." line, then (B) "ready": the other side's stdin.
            if (told < 2 && (l.startsWith('peer ') || l === 'ready')) {
              told++;
              other.stdin?.write(`${l}\n`);
            } else if (l.trim() !== '') last = l.slice(0, 300);
          };
          createInterface({ input: c.stdout! }).on('line', take);
          createInterface({ input: c.stderr! }).on('line', take);
          c.stdin!.on('error', () => {}); // the other side may have gone: its own exit says why
          c.on('error', (e) => resolve({ code: -1, last: e.message }));
          c.on('close', (code) => resolve({ code, last }));
        }),
    ),
  ).finally(() => clearTimeout(timer));
}
