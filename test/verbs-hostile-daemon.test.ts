/**
 * librdmagraph-verbs.so against a daemon it must not trust (issue 26, findings 2 and 7): a hostile
 * process on the socket path (test/verbs-hostile-helpers.ts) that answers with wrapping sizes,
 * huge counts, bad handles and messages nobody asked for, or that runs as another uid. Unmodified
 * `ibv_rc_pingpong -s 65536` and verbs-check (native/tools/verbs-check.c, -x: a failed verb ends
 * it with status 1) must each end by themselves: no signal, a line saying what was refused, a
 * non-zero exit status; one that overwrites a QP ring's done index while the program polls does
 * not crash or hang it. Then: the daemon's writes into a program's eventfds never block, and a
 * peer's RDMA WRITE at the edges of an MR registered in the middle of a page leaves the bytes
 * around it alone.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { rgv_device } from '../dataplane/verbs-server/abi.generated.ts';
import { loadCore, NATIVE_BUILD_DIR } from '../native/addons.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { ROOT } from './readme-helpers.ts';
import { nextPort, withTwoDaemons } from './verbs-helpers.ts';

const CHECK = `${NATIVE_BUILD_DIR}verbs-check`;
const HELPER = join(ROOT, 'test', 'verbs-hostile-helpers.ts');
const NOBODY = 65534;

const ready = () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (!existsSync(CHECK)) skip('native/build/Release/verbs-check was not built (libibverbs-dev)');
  if (spawnSync('ibv_rc_pingpong', ['--help']).error) skip('ibverbs-utils is not installed (ibv_rc_pingpong)');
};

interface Hostile {
  child: ChildProcess;
  /** Its stdout so far (JSON lines). */
  out(): string;
  kill(): void;
}

/** The hostile daemon on `socket` in `mode` (as `uid` if given), once it listens. */
async function hostile(socket: string, mode: string, uid?: number): Promise<Hostile> {
  const child = spawn(process.execPath, ['--import', 'tsx', HELPER, socket, mode], {
    cwd: ROOT,
    ...(uid === undefined ? {} : { uid, gid: uid }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '',
    err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  const until = Date.now() + 20_000;
  while (!out.includes('"listening":true')) {
    if (child.exitCode !== null || child.signalCode !== null || Date.now() > until) {
      if (uid !== undefined && /EACCES|permission denied/i.test(err))
        skip(`user ${uid} cannot read the sources here to run the hostile daemon: ${err.trim().split('\n')[0]}`);
      assert.unreachable(`the hostile daemon did not listen on ${socket}: ${child.exitCode} ${err}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { child, out: () => out, kill: () => child.kill('SIGKILL') };
}

interface Run {
  code: number | null;
  signal: string | null;
  out: string;
  pid: number;
}

/** A program preloaded against `socket`, given `input` on its stdin (left open), killed after `timeoutMs`. */
function program(
  socket: string,
  cmd: string[],
  opts: { input?: string; env?: Record<string, string>; timeoutMs?: number } = {},
): { child: ChildProcess; done: Promise<Run> } {
  const child = spawn(cmd[0], cmd.slice(1), {
    env: { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket, ...opts.env },
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  child.stdin!.on('error', () => {}); // a program that already exited
  if (opts.input !== undefined) child.stdin!.write(opts.input);
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 15_000);
  return {
    child,
    done: new Promise((resolve) =>
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, out, pid: child.pid ?? 0 });
      }),
    ),
  };
}

/** It ended by itself (no signal: neither a crash nor our timeout), with a non-zero status and `line`. */
function refused(r: Run, line: RegExp, what: string): void {
  assert.is(r.signal, null, `${what}: killed by ${r.signal} (a crash, or it hung until the test's timeout)\n${r.out}`);
  assert.ok(r.code !== null && r.code !== 0, `${what}: exit status ${r.code}, not an error\n${r.out}`);
  assert.match(r.out, line, `${what}: says what was refused\n${r.out}`);
}

/**
 * ibv_rc_pingpong's TCP side: reads the client's "LID:QPN:PSN:GID" (52 bytes), answers with a
 * peer at ::ffff:127.0.0.1, QPN 0x000200, PSN 0x000123 (the client then goes to RTR/RTS and sends).
 */
async function fakePingpongServer(): Promise<{ port: number; server: Server }> {
  const msg = Buffer.alloc(52);
  msg.write('0000:000200:000123:00000000000000000000ffff7f000001');
  const server = createServer((s) => {
    let got = 0;
    s.on('data', (d) => {
      got += d.length;
      if (got >= 52 && got - d.length < 52) s.write(msg);
    });
    s.on('error', () => {});
  });
  const port = nextPort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  return { port, server };
}

const pingpong = (socket: string, port: number, extra: string[] = [], env?: Record<string, string>) =>
  program(socket, ['ibv_rc_pingpong', '-g', '0', '-s', '65536', '-n', '3', ...extra, '-p', String(port), '127.0.0.1'], {
    env,
  });

/** verbs-check -x: a QP towards a peer that never answers, then an inline-if-allowed SEND of 8000 bytes. */
const QP_SEND = 'qp 127.0.0.1 512 1\nisend 8000\nexit\n';

/** A hostile daemon in `mode` in a fresh directory; body gets its socket. */
async function withHostile(mode: string, body: (socket: string, h: Hostile) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-hostile-'));
  const socket = join(dir, 'verbs.sock');
  const h = await hostile(socket, mode);
  try {
    await body(socket, h);
  } finally {
    h.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Both programs against the hostile daemon in `mode`: each refuses with `line`. */
async function bothRefuse(mode: string, line: RegExp, checkInput = QP_SEND): Promise<void> {
  ready();
  const { port, server } = await fakePingpongServer();
  try {
    await withHostile(mode, async (socket) => {
      const [pp, ck] = await Promise.all([
        pingpong(socket, port).done,
        program(socket, [CHECK, '-x'], { input: checkInput }).done,
      ]);
      refused(pp, line, `ibv_rc_pingpong -s 65536 (${mode})`);
      refused(ck, line, `verbs-check (${mode})`);
    });
  } finally {
    server.close();
  }
}

test('a daemon answering max_inline 0xffffffff for 0 asked (the SIGSEGV in op_post_send with ibv_rc_pingpong -s 65536): refused at ibv_create_qp', async () => {
  await bothRefuse(
    'inline',
    /rdma-graph verbs: the daemon answered max_inline 4294967295 for 0 asked \(at most \d+\): refused/,
  );
});

test('a daemon whose QUERY_QP says max_inline 0xffffffff for a QP made with 0: refused, the daemon is no longer trusted', async () => {
  await bothRefuse(
    'query-inline',
    /rdma-graph verbs: the daemon answered max_inline 4294967295 in QUERY_QP for QP \d+, made with 0: refused/,
  );
});

test('a daemon answering max_sge 0x10000000 (the WQE stride wraps in u32): refused', async () => {
  await bothRefuse(
    'sge',
    /rdma-graph verbs: the daemon answered max_sge 268435456 for 1 asked \(at most 32\): refused/,
  );
});

test('a daemon answering max_send_wr 0xffffffff and max_recv_wr 0x80000001: refused', async () => {
  await bothRefuse(
    'depth',
    /rdma-graph verbs: the daemon answered max_send_wr 4294967295 for (1|8) asked \(at most 16384\): refused/,
  );
});

test('a daemon answering 0x7fffffff CQ entries for a ring of 512 (or 16): refused', async () => {
  await bothRefuse(
    'cqe',
    /rdma-graph verbs: the daemon answered cqe 2147483647 for \d+ asked \(at most (512|16)\): refused/,
  );
});

test('a device list with max_qp_wr, max_sge and max_cqe 0xffffffff: the device is refused, no device is listed', async () => {
  await bothRefuse(
    'device',
    /rdma-graph verbs: the daemon answered max_qp 4294967295 for device rg_hostile0 \(0 to \d+\): refused/,
  );
});

test('a device list whose count says 0x7fffffff devices in the bytes of one: refused', async () => {
  await bothRefuse(
    'count',
    new RegExp(`rdma-graph verbs: the daemon answered 2147483647 devices in ${rgv_device.size} bytes: refused`),
  );
});

test('a device named "../../../tmp/x" (a name becomes paths under /sys/class/infiniband): refused', async () => {
  await bothRefuse(
    'name',
    /rdma-graph verbs: the daemon answered device 0 named "\.\.\/\.\.\/\.\.\/tmp\/x" \(1 to 15 of \[A-Za-z0-9_-\], each name once\): refused/,
  );
});

test('bad handles: a QPN of 32 bits (ibv_rc_pingpong), a completion channel handle 0xffffffff (verbs-check): refused', async () => {
  ready();
  const { port, server } = await fakePingpongServer();
  try {
    await withHostile('handle', async (socket) => {
      const [pp, ck] = await Promise.all([
        pingpong(socket, port).done,
        program(socket, [CHECK, '-x'], { input: 'event\n' }).done,
      ]);
      refused(
        pp,
        /rdma-graph verbs: the daemon answered QPN 4294967295 \(QPNs are 24 bits\): refused/,
        'ibv_rc_pingpong',
      );
      refused(
        ck,
        /rdma-graph verbs: the daemon answered channel handle 4294967295 \(not a handle\): refused/,
        'verbs-check',
      );
    });
  } finally {
    server.close();
  }
});

test('a reply later than the library waits (5 s): that call fails with EAGAIN, the late reply is dropped by its sequence number, and every later call gets its own answer', async () => {
  ready();
  await withHostile('slow', async (socket) => {
    const r = await program(socket, [CHECK], { input: 'pd\npd\npd\nexit\n', timeoutMs: 30_000 }).done;
    assert.is(r.signal, null, r.out);
    assert.is(r.code, 0, r.out);
    // The second ALLOC_PD timed out; its answer (handle 1002) came before the third's and was
    // not taken for it.
    // stdout in order (the library's stderr line may land anywhere among them: two pipes).
    const stdout = r.out
      .split('\n')
      .filter((l) => !l.startsWith('rdma-graph verbs: '))
      .join('\n');
    assert.match(stdout, /^pd failed 11\npd 1003\npd 1004$/m, r.out);
    assert.match(r.out, /rdma-graph verbs: the daemon answered a request that had timed out \(op 2\): dropped/, r.out);
  });
});

/** Clock ticks (utime + stime) a process has used, from /proc/PID/stat. */
function cpuTicks(pid: number): number {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

test('a message nobody asked for while the program waits in ibv_get_cq_event: it keeps sleeping (no 100 % CPU), and ends when the daemon goes away', async () => {
  ready();
  const { port, server } = await fakePingpongServer();
  try {
    await withHostile('unsolicited', async (socket, h) => {
      const pp = pingpong(socket, port, ['-e']);
      const ck = program(socket, [CHECK, '-x'], { input: 'event\n' });
      // Both wait in ibv_get_cq_event; the daemon sends its message after 300 ms of quiet.
      await new Promise((r) => setTimeout(r, 1000));
      const pids = [pp.child.pid!, ck.child.pid!];
      const t0 = pids.map(cpuTicks);
      await new Promise((r) => setTimeout(r, 1000));
      const used = pids.map((p, i) => cpuTicks(p) - t0[i]);
      h.kill(); // the daemon goes away: both must end by themselves
      const [a, b] = await Promise.all([pp.done, ck.done]);
      assert.ok(
        used.every((t) => t < 20),
        `CPU ticks (1/100 s) used in 1 s waiting: ibv_rc_pingpong -e ${used[0]}, verbs-check ${used[1]}\n${a.out}\n${b.out}`,
      );
      const line = /rdma-graph verbs: the daemon sent a message nobody asked for \(op 30583, 16 bytes\): ignored/;
      refused(a, line, 'ibv_rc_pingpong -e');
      refused(b, line, 'verbs-check');
      assert.match(a.out, /the daemon closed the connection/);
      assert.match(b.out, /^event rc 0 notify 104$/m, 'the wait ends, the next verb fails with ECONNRESET');
    });
  } finally {
    server.close();
  }
});

test("a daemon that overwrites a QP's send-queue done index while the program polls its CQ (what the library's nap reads): no crash, no hang; it ends when the daemon goes away", async () => {
  ready();
  const { port, server } = await fakePingpongServer();
  try {
    await withHostile('done', async (socket, h) => {
      // It posts its receives and first SEND, then polls a CQ that never fills: every 64th empty
      // poll reads the done index (native/verbs-lib/ring.c, sq_pending_bytes).
      const pp = pingpong(socket, port);
      const until = Date.now() + 10_000;
      while (!/"scribbled":[1-9]/.test(h.out()) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 1000));
      const n = Math.max(...[...h.out().matchAll(/"scribbled":(\d+)/g)].map((m) => Number(m[1])));
      assert.ok(n > 100, `the daemon overwrote the done index while the program polled (${n} times)\n${h.out()}`);
      h.kill(); // the daemon goes away: the program must end by itself
      const r = await pp.done;
      refused(r, /the daemon closed the connection/, 'ibv_rc_pingpong -s 65536 (done index overwritten)');
    });
  } finally {
    server.close();
  }
});

test("a daemon that puts a CQ's producer index 2^31 past its consumer, every entry naming the QP, as the program resets and destroys it: the library's CQ clean leaves such a ring alone; the program ends by itself", async () => {
  ready();
  const RESET = `${NATIVE_BUILD_DIR}verbs-reset`;
  if (!existsSync(RESET)) skip('native/build/Release/verbs-reset was not built (libibverbs-dev)');
  await withHostile('cqprod', async (socket, h) => {
    // verbs-reset resets a QP and destroys another (native/verbs-lib/ring.c rg_cq_clean after
    // each); this daemon moves no packet, so its checks fail, but it must get that far and end.
    const r = await program(socket, [RESET], { timeoutMs: 20_000 }).done;
    const n = Math.max(0, ...[...h.out().matchAll(/"spoiled":(\d+)/g)].map((m) => Number(m[1])));
    assert.ok(n >= 2, `the daemon spoiled the CQ ring at the reset and the destroy (${n} times)\n${h.out()}`);
    assert.is(r.signal, null, `killed by ${r.signal} (a crash, or a walk of 2^31 entries until the timeout)\n${r.out}`);
    assert.match(r.out, /^done \d+ failures$/m, `it got to its end\n${r.out}`);
    // The spoiled ring was left alone (its producer index is beyond what a ring holds): the
    // program's next poll, bounded by the 16 it asks, took what the daemon wrote there. A clean
    // that walked it would have taken all 2^31 "entries" (~5 s here) and left none.
    assert.match(r.out, /^FAIL RESET: .*: modify rc 0, 16 completions, /m, r.out);
  });
});

test("the daemon's credentials: another uid on an abstract name or in a directory others can write is refused; RDMA_GRAPH_DAEMON_UID, or a socket in its owner's own directory, is trusted", async () => {
  ready();
  if (process.getuid?.() !== 0) skip('needs root (the hostile daemon runs as uid 65534)');
  const dir = mkdtempSync(join(tmpdir(), 'verbs-hostile-cred-'));
  const open = join(dir, 'open'),
    own = join(dir, 'own');
  for (const d of [open, own]) mkdirSync(d);
  chmodSync(dir, 0o755);
  chmodSync(open, 0o1777); // like /tmp: anyone can bind a socket there
  chownSync(own, NOBODY, NOBODY);
  chmodSync(own, 0o755); // only its owner can
  const abstract = `@rdma-graph-hostile-${process.pid}`;
  const hs: Hostile[] = [];
  try {
    for (const [socket, why] of [
      [abstract, /an abstract socket has no owner to check/],
      [join(open, 'verbs.sock'), new RegExp(`its directory ${open.replace(/[/.]/g, '\\$&')} is writable by others`)],
    ] as [string, RegExp][]) {
      const h = await hostile(socket, 'benign', NOBODY);
      hs.push(h);
      assert.is(JSON.parse(h.out().split('\n')[0]).uid, NOBODY, 'the hostile daemon runs as nobody');
      const who = new RegExp(
        `rdma-graph verbs: the daemon at ${socket.replace(/[/.]/g, '\\$&')} is uid 65534 \\(pid ${h.child.pid}\\): not root, not this program's uid 0, not RDMA_GRAPH_DAEMON_UID \\(unset\\)`,
      );
      const [pp, ck] = await Promise.all([
        pingpong(socket, nextPort()).done,
        program(socket, [CHECK, '-x'], { input: 'exit\n' }).done,
      ]);
      for (const [r, what] of [
        [pp, 'ibv_rc_pingpong'],
        [ck, 'verbs-check'],
      ] as [Run, string][]) {
        refused(r, who, `${what} against ${socket}`);
        assert.match(r.out, why, `${what}: says which check failed\n${r.out}`);
      }
      // Trusted when the program says so.
      const ok = await program(socket, ['ibv_devices'], { env: { RDMA_GRAPH_DAEMON_UID: String(NOBODY) } }).done;
      assert.is(ok.code, 0, ok.out);
      assert.match(ok.out, /rg_hostile0/, 'RDMA_GRAPH_DAEMON_UID=65534: its devices are listed');
    }
    // The owner of the socket file, in a directory only that owner can write: trusted (a daemon
    // run by a service user, its socket shared with a group).
    const h = await hostile(join(own, 'verbs.sock'), 'benign', NOBODY);
    hs.push(h);
    const ok = await program(join(own, 'verbs.sock'), ['ibv_devices']).done;
    assert.is(ok.code, 0, ok.out);
    assert.match(ok.out, /rg_hostile0/, 'the socket file owner in its own directory is trusted');
    // What the daemon says is printed by the program: its firmware text without the escape in it.
    const info = await program(join(own, 'verbs.sock'), ['ibv_devinfo']).done;
    assert.is(info.code, 0, info.out);
    assert.match(info.out, /^\s*fw_ver:\s+hostile\?\[2J$/m, info.out);
    assert.not.match(info.out, /\x1b/, 'no escape reaches the terminal');
  } finally {
    for (const h of hs) h.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a peer's RDMA WRITE at the end of an MR registered in the middle of a page, and one past its end or before its start: the bytes around the MR in the program are untouched", async () => {
  ready();
  await withTwoDaemons(async ({ a, dpB }) => {
    const x = program(a, [CHECK], { timeoutMs: 60_000 });
    let out = '';
    x.child.stdout!.on('data', (d) => (out += d));
    const line = async (re: RegExp): Promise<RegExpExecArray> => {
      const until = Date.now() + 10_000;
      for (;;) {
        const m = re.exec(out);
        if (m) {
          out = out.slice(m.index + m[0].length);
          return m;
        }
        if (Date.now() > until) assert.unreachable(`no ${re} from verbs-check:\n${out}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    try {
      const [, , stag, off, len] = (await line(/^mr (\d+) stag (\d+) offset (\d+) length (\d+) pd \d+$/m)).map(Number);
      const buf = Number((await line(/^buf (\d+)$/m))[1]);
      assert.ok(off !== 0 && (off + len) % 4096 !== 0, 'the MR starts and ends inside a page');
      const pd = await dpB.createPd({});
      const cq = await dpB.createCq({ depth: 16 });
      const src = await dpB.createMr({ pd: pd.pd, length: 4096, access: ['local-write'] });
      await dpB.writeMr(src.mr, 0, new Uint8Array(64).fill(0x5c));
      /** A fresh QP pair (a refused WRITE puts both in error): WRITE n bytes at the program's address `at`. */
      const write = async (at: number, n: number) => {
        const qp = await dpB.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq });
        x.child.stdin!.write(`qp ${IP_B} ${qp.qpn} ${qp.psn}\n`);
        const mine = Number((await line(/^qp (\d+) rts rc 0$/m))[1]);
        await dpB.connect(qp.qpn, { remote: { ip: IP_A, port: mine }, mode: 'manual', remotePsn: qp.psn + 1 });
        await dpB.postSend(qp.qpn, {
          wrId: at,
          opcode: 'write',
          sge: [{ mr: src.mr, offset: 0, length: n }],
          remote: { stag, offset: at },
        });
        const until = Date.now() + 10_000;
        for (;;) {
          const got = await dpB.pollCq(cq.cq, 1);
          if (got.completions.length > 0) {
            await dpB.destroyQp(qp.qpn);
            return got.completions[0].status;
          }
          if (Date.now() > until) assert.unreachable(`no completion for the WRITE at ${at}`);
          await new Promise((r) => setTimeout(r, 10));
        }
      };
      const edges = async () => {
        x.child.stdin!.write('edges 32\n');
        return (await line(/^edges ([0-9a-f]+) ([0-9a-f]+)$/m)).slice(1);
      };
      const untouched = 'a5'.repeat(32);
      assert.is(await write(buf + len - 16, 16), 'success', 'the last 16 bytes of the MR');
      x.child.stdin!.write(`show ${len - 16} 16\n`);
      await line(new RegExp(`^${'5c'.repeat(16)}$`, 'm'));
      assert.equal(await edges(), [untouched, untouched], 'a WRITE that ends at addr + len');
      assert.not.equal(await write(buf + len - 8, 16), 'success', 'a WRITE 8 bytes past the end is refused');
      assert.equal(await edges(), [untouched, untouched], 'nothing of it landed past the end');
      assert.not.equal(await write(buf + len, 8), 'success', 'a WRITE just past the end is refused');
      assert.not.equal(await write(buf - 8, 16), 'success', 'a WRITE starting 8 bytes before addr is refused');
      assert.equal(await edges(), [untouched, untouched], 'the bytes around the MR are as the program left them');
      await dpB.destroyMr(src.mr);
      await dpB.destroyCq(cq.cq);
      await dpB.destroyPd(pd.pd);
      x.child.stdin!.write('exit\n');
      const r = await x.done;
      assert.is(r.signal, null, r.out);
      assert.is(r.code, 0, `the program exits normally (free() of its block is fine)\n${r.out}`);
    } finally {
      x.child.kill('SIGKILL');
    }
  });
});

test("eventfds a program passed: the daemon's write never blocks, even when the program makes the fd blocking and its counter full between the daemon's checks and its write; its reads never block", async () => {
  const core = loadCore();
  // The window cannot be hit on purpose from another process; the addon's test switch plays the
  // peer inside it: after the checks, it clears O_NONBLOCK and fills the counter (2^64 - 2).
  const fd = core.eventfd();
  const t0 = Date.now();
  assert.is(core.eventfdSignal(fd, { raceForTest: true }), false, 'no write happened');
  assert.ok(Date.now() - t0 < 1000, `the write gave up after ${Date.now() - t0} ms instead of blocking`);
  // Now blocking: reads take the counter, then find nothing, without blocking either.
  assert.ok(core.eventfdDrain(fd) > 1e19, 'the counter the peer left');
  const t1 = Date.now();
  assert.is(core.eventfdDrain(fd), 0, 'an empty blocking eventfd: nothing to read');
  // A blocking one with room is written (the library's completion channels are blocking eventfds).
  assert.is(core.eventfdSignal(fd), true, 'a blocking eventfd with room is written');
  assert.is(core.eventfdDrain(fd), 1);
  assert.ok(Date.now() - t1 < 1000, `${Date.now() - t1} ms`);
  core.closeFd(fd);
});

test.run();
