/**
 * A hostile memif peer (issue 12): native/tools/memif-hostile, a client that speaks the protocol
 * and then misbehaves, against our server running in its own process
 * (test/memif-victim-helpers.ts). Every case ends with the server process alive and answering,
 * the link dropped with a reason that names the problem (or the bad frames counted and dropped
 * while the link stays up, where the protocol allows that), every buffer back in the pool, and a
 * good client able to connect afterwards.
 */
import { skip, test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { MemifDriver } from '../drivers/memif.ts';
import { Dataplane } from '../dataplane/dataplane.ts';
import { baseConfig, MAC_A, pipeInterface } from './dataplane-helpers.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { memPool, sleep } from './helpers.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const HOSTILE = join(NATIVE_BUILD_DIR, 'memif-hostile');
const dir = mkdtempSync(join(tmpdir(), 'hostile-memif-'));
let seq = 0;
const victims: ChildProcess[] = [];
test.after(() => {
  for (const p of victims) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL'); // a failed test's victim
  rmSync(dir, { recursive: true, force: true });
});

interface Victim {
  proc: ChildProcess;
  events: Record<string, unknown>[];
  /** The next line matching `pred`, within `ms`. */
  next(pred: (e: Record<string, unknown>) => boolean, ms?: number): Promise<Record<string, unknown>>;
  status(ms?: number): Promise<Record<string, unknown>>;
  stop(): Promise<Record<string, unknown>>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

async function victim(sock: string, ...args: string[]): Promise<Victim> {
  const proc = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/memif-victim-helpers.ts'), sock, ...args], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  victims.push(proc);
  const events: Record<string, unknown>[] = [];
  const waiters: {
    pred: (e: Record<string, unknown>) => boolean;
    resolve: (e: Record<string, unknown>) => void;
    from: number;
  }[] = [];
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    proc.on('exit', (code, signal) => r({ code, signal })),
  );
  createInterface({ input: proc.stdout! }).on('line', (l) => {
    const e = JSON.parse(l) as Record<string, unknown>;
    events.push(e);
    for (let i = waiters.length - 1; i >= 0; i--) if (waiters[i].pred(e)) waiters.splice(i, 1)[0].resolve(e);
  });
  const v: Victim = {
    proc,
    events,
    exit,
    next(pred, ms = 5000) {
      const seen = events.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const t = setTimeout(
          () =>
            reject(new Error(`victim: nothing matching within ${ms} ms; events: ${JSON.stringify(events.slice(-5))}`)),
          ms,
        );
        waiters.push({
          pred,
          from: events.length,
          resolve: (e) => {
            clearTimeout(t);
            resolve(e);
          },
        });
        void exit.then((x) =>
          reject(
            new Error(
              `victim exited (${x.code ?? x.signal}) while waiting; events: ${JSON.stringify(events.slice(-5))}`,
            ),
          ),
        );
      });
    },
    async status(ms = 3000) {
      const n = events.length;
      proc.stdin!.write('status\n');
      return v.next((e) => e.alive === true && events.indexOf(e) >= n, ms);
    },
    async stop() {
      proc.stdin!.write('stop\n');
      const f = await v.next((e) => e.final === true);
      await exit;
      return f;
    },
  };
  await v.next((e) => e.listening !== undefined);
  return v;
}

function hostile(args: string[], ms = 20_000): { out: string; code: number | null } {
  const r = spawnSync(HOSTILE, args, { encoding: 'utf8', timeout: ms });
  return { out: r.stdout + r.stderr, code: r.status };
}

function hostileAsync(args: string[]): Promise<{ out: string; code: number | null }> {
  return new Promise((resolve) => {
    const p = spawn(HOSTILE, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('exit', (code) => resolve({ out, code }));
  });
}

/** A well-behaved client connects, the victim sees it up, and frames arrive from the victim. */
async function goodClientWorks(v: Victim, sock: string): Promise<void> {
  const pool = memPool(1024, 2048);
  const c = new MemifDriver('good0', { socket: sock, role: 'client', ringSize: 64 });
  c.open(pool);
  try {
    const out = new Uint32Array(256);
    let got = 0;
    const end = Date.now() + 5000;
    while (got === 0 && Date.now() < end) {
      const n = c.rxBurst(0, out, 256);
      got += n;
      if (n > 0) pool.free(out, 0, n);
      await sleep(2);
    }
    assert.ok(
      got > 0,
      `a good client gets frames from the victim afterwards (link ${c.linkUp()}, ${JSON.stringify(c.info().lastDisconnect)})`,
    );
    const st = await v.status();
    assert.is(st.up, true);
  } finally {
    c.close();
  }
  assert.is(pool.available(), pool.count);
}

async function finishVictim(v: Victim): Promise<Record<string, unknown>> {
  const f = await v.stop();
  const x = await v.exit;
  assert.is(x.code, 0, `the victim exits cleanly (signal ${x.signal})`);
  assert.is(f.lost, 0, "every buffer back in the victim's pool");
  return f;
}

function ready(): void {
  if (!existsSync(HOSTILE)) skip(`${HOSTILE} not built (npm run build)`);
}

test('descriptors rewritten while the server copies: each read once, bad frames dropped and counted, no crash', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const v = await victim(sock);
  const h = await hostileAsync(['flip', sock, '1.5']);
  assert.match(h.out, /^connected$/m, h.out);
  const st = await v.status();
  assert.is(st.alive, true, 'the server survived');
  const stats = st.stats as { rxErrors: number; rxPackets: number };
  assert.ok(stats.rxErrors > 0, `bad frames counted (${stats.rxErrors} of ${stats.rxErrors + stats.rxPackets})`);
  await v.next((e) => e.down === true);
  await goodClientWorks(v, sock);
  await finishVictim(v);
});

test("frames left in the client's memory (the rx pattern) while it rewrites their descriptors and bytes: read in place or copied in, no crash, no buffer lost", async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const v = await victim(sock, 'defer');
  const h = await hostileAsync(['deferflip', sock, '1.5']);
  assert.match(h.out, /^connected$/m, h.out);
  const st = await v.status();
  assert.is(st.alive, true, 'the server survived');
  const stats = st.stats as { rxErrors: number; rxPackets: number; rxDeferred: number };
  const w = st.windows as { copiedIn: number };
  assert.ok(stats.rxDeferred > 0, `frames received in place: ${stats.rxDeferred} of ${stats.rxPackets}`);
  assert.ok(w.copiedIn > 0, `windows copied in before their slots went back: ${w.copiedIn}`);
  assert.ok(stats.rxErrors > 0, `bad frames counted (${stats.rxErrors})`);
  console.log(
    `  ${stats.rxPackets} frames taken, ${stats.rxDeferred} in place, ${w.copiedIn} copied in late, ${stats.rxErrors} dropped as bad`,
  );
  await v.next((e) => e.down === true);
  await goodClientWorks(v, sock);
  await finishVictim(v);
});

test('interrupt fds: a pipe is refused; blocking eventfds are made non-blocking, and one made blocking again drops the link', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const v = await victim(sock);
  const p = hostile(['pipe', sock]);
  assert.match(p.out, /disconnect: Interrupt fd is not an eventfd/, p.out);
  const first = await v.next((e) => e.down === true);
  assert.is(first.reason, 'Interrupt fd is not an eventfd');
  const h = await hostileAsync(['blocking', sock, '1']);
  assert.match(h.out, /^connected$/m, h.out);
  const down = await v.next((e) => e.down === true && e !== first);
  assert.is(down.reason, 'Interrupt fd made blocking by the peer');
  const st = await v.status();
  assert.is(st.alive, true, 'the data plane never blocked');
  await goodClientWorks(v, sock);
  await finishVictim(v);
});

test('a region not sealed against shrinking is refused before it is mapped (truncating it would be SIGBUS)', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const v = await victim(sock);
  const h = hostile(['unsealed', sock, '0.5']);
  assert.match(h.out, /disconnect: Region not sealed against shrinking \(F_SEAL_SHRINK\)/, h.out);
  assert.not.match(h.out, /^connected$/m);
  const st = await v.status();
  assert.is(st.alive, true);
  await goodClientWorks(v, sock);
  await finishVictim(v);
});

test('a head jumping past the ring drops the link with its reason', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const v = await victim(sock);
  const h = hostile(['jump', sock]);
  assert.match(h.out, /disconnect: Ring index beyond the ring size/, h.out);
  const down = await v.next((e) => e.down === true);
  assert.is(down.reason, 'Ring index beyond the ring size');
  await goodClientWorks(v, sock);
  await finishVictim(v);
});

test('connections that never send INIT: at most 8 wait, the rest are turned away, and they time out', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const v = await victim(sock);
  const h = hostile(['noinit', sock, '40', '2.6']);
  const m = /hellos (\d+) disconnects (\d+) closed (\d+)/.exec(h.out);
  assert.ok(m, h.out);
  const [hellos, disconnects, closed] = [Number(m![1]), Number(m![2]), Number(m![3])];
  assert.is(hellos, 8, 'eight admitted (HELLO sent)');
  assert.is(closed, 40, 'every connection closed by the server: 32 at once, 8 after the 2 s wait');
  assert.is(disconnects, 40, 'each with a DISCONNECT saying why');
  const st = await v.status();
  assert.is((st.stats as { socketRefused: number }).socketRefused, 40);
  await goodClientWorks(v, sock);
  await finishVictim(v);
});

test('the daemon logs every dropped memif connection with its reason', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const lines: string[] = [];
  const dp = await Dataplane.create(
    baseConfig({
      interfaces: [
        {
          ...pipeInterface('memif0', 'unused', '10.9.0.1/24', MAC_A),
          driver: 'memif',
          pipe: undefined,
          memif: { socket: sock, role: 'server', id: 0, secret: null, bufferSize: 2048, udpChecksum: true },
        },
      ],
    }),
    { log: (level, msg) => lines.push(`${level} ${msg}`) },
  );
  try {
    // Refused while connecting (the link never comes up): only the count shows it. The data
    // plane runs in this process: the hostile client must not block it (spawnSync would).
    const p = await hostileAsync(['pipe', sock]);
    assert.match(p.out, /disconnect: Interrupt fd is not an eventfd/, p.out);
    const end = Date.now() + 3000;
    while (!lines.some((l) => l.includes('connection dropped')) && Date.now() < end) await sleep(20);
    assert.ok(
      lines.includes('warn interface memif0: connection dropped: Interrupt fd is not an eventfd'),
      lines.join('\n'),
    );
  } finally {
    await dp.close();
  }
});

test('a second memif client on a taken id: both sides log the refusal once, with the reason; show hardware has it', async () => {
  ready();
  const sock = join(dir, `s${seq++}.sock`);
  const logs: Record<string, string[]> = { server: [], first: [], second: [] };
  const make = (who: string, role: 'server' | 'client', addr: string) =>
    Dataplane.create(
      baseConfig({
        interfaces: [
          {
            ...pipeInterface('memif0', 'unused', addr, MAC_A),
            driver: 'memif',
            pipe: undefined,
            memif: { socket: sock, role, id: 3, secret: null, bufferSize: 2048, udpChecksum: true },
          },
        ],
      }),
      { log: (level, msg) => logs[who].push(`${level} ${msg}`) },
    );
  const server = await make('server', 'server', '10.9.0.1/24');
  const first = await make('first', 'client', '10.9.0.2/24');
  let second: DataplaneApi | null = null;
  try {
    const until = async (what: string, ok: () => boolean) => {
      const end = Date.now() + 5000;
      while (!ok() && Date.now() < end) await sleep(20);
      assert.ok(ok(), `${what}:\n${JSON.stringify(logs, null, 1)}`);
    };
    await until('first client up', () => logs.first.includes('info interface memif0 is up'));
    second = await make('second', 'client', '10.9.0.3/24');
    const refusedHere = 'warn interface memif0: refused a peer ("rdma-graph 0.1.0"): Already connected';
    const refusedThere = 'warn interface memif0: the peer refused the connection: Already connected';
    await until('both sides logged', () => logs.server.includes(refusedHere) && logs.second.includes(refusedThere));
    // The second client retries every 250 ms: 1.5 s more of refusals, no more lines (one per 30 s).
    await sleep(1500);
    const hw = (await server.hardware())[0];
    assert.ok((hw.counters.refused ?? 0) >= 4, `refused ${hw.counters.refused}: the client kept retrying`);
    assert.is(hw.info['last refused'], '"rdma-graph 0.1.0": Already connected');
    assert.is((await second.hardware())[0].info['last disconnect'], 'Already connected (the peer refused us)');
    assert.is(logs.server.filter((l) => l.startsWith('warn')).length, 1, logs.server.join('\n'));
    assert.is(logs.second.filter((l) => l.startsWith('warn')).length, 1, logs.second.join('\n'));
    assert.not.ok(
      logs.first.some((l) => l.startsWith('warn')),
      'the first client is not disturbed',
    );
    assert.ok((await first.interfaces())[0].state === 'up');
  } finally {
    await second?.close();
    await first.close();
    await server.close();
  }
});

test.run();
