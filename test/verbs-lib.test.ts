/**
 * librdmagraph-verbs.so with unmodified libibverbs programs (ibverbs-utils): the daemon's verbs
 * socket (dataplane/verbs-server/connections.ts) served by a data plane in this process, the programs preloaded
 * as `rdma-graph exec` does: devices and their queries, memory registration, QPs through their
 * rings, a daemon that goes away, hostile clients, refused registrations, `rdma-graph exec`.
 * The data path with real programs (ibv_rc_pingpong, perftest) is test/verbs-apps.test.ts.
 * Skips (a failure in strict mode) without the library or ibverbs-utils.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatQps } from '../api/render.ts';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { loadCore, NATIVE_BUILD_DIR } from '../native/addons.ts';
import { IP_A, IP_B, MAC_A, twoDataplanes } from './dataplane-helpers.ts';
import { Rng } from './hostile-helpers.ts';
import { ROOT } from './readme-helpers.ts';
import {
  RGV_ACCESS_LOCAL_WRITE,
  RGV_MAGIC,
  RGV_OP_ALLOC_PD,
  RGV_OP_DEVICES,
  RGV_OP_REG_MR,
  RGV_OPS,
  rgv_device,
  rgv_handle,
  rgv_hdr,
  rgv_reg_mr,
} from '../dataplane/verbs-server/abi.generated.ts';
import { decode, encode, message, readMessage } from '../dataplane/verbs-server/messages.ts';

const LIB = VERBS_LIBRARY;

/** Skips the test, saying what is missing, without the library or ibverbs-utils. */
const ready = () => {
  if (!existsSync(LIB)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync('ibv_devinfo', ['--help']).error) skip('ibverbs-utils is not installed (ibv_devinfo)');
};

/** A program with the library preloaded against `socket`, run without blocking this loop (it serves the socket). */
const run = (socket: string, cmd: string[]) =>
  new Promise<{ code: number | null; signal: string | null; out: string }>((resolve) => {
    execFile(
      cmd[0],
      cmd.slice(1),
      { timeout: 20_000, env: { ...process.env, LD_PRELOAD: LIB, RDMA_GRAPH_SOCKET: socket } },
      (e, out, err) =>
        resolve({
          code: e === null ? 0 : typeof e.code === 'number' ? e.code : null,
          signal: e?.signal ?? null,
          out: out + err,
        }),
    );
  });

/** EUI-64 of a MAC, as ibv_devices prints a node GUID. */
const guid = (mac: string) => {
  const m = mac.split(':').map((h) => parseInt(h, 16));
  return [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]].map((b) => b.toString(16).padStart(2, '0')).join('');
};

/** Two data planes over a pipe, A serving its verbs socket in a fresh directory, for `body`. */
async function withVerbsDaemon(
  body: (x: { socket: string; dps: Awaited<ReturnType<typeof twoDataplanes>> }) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-lib-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  try {
    await body({ socket, dps });
  } finally {
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
  assert.not.ok(existsSync(socket), 'the socket file is removed on close');
}

test('ibv_devices and ibv_devinfo -v, unmodified: one device per interface, port state from the link, GID 0 the IPv4 address (RoCE v2)', async () => {
  ready();
  await withVerbsDaemon(async ({ socket, dps }) => {
    assert.is(statSync(socket).mode & 0o777, 0o660, 'the socket is 0660');
    assert.throws(
      () => dps.b.serveVerbs({ path: socket }),
      /verbs\.socket .*verbs\.sock: another process serves it/,
      'a socket a live daemon serves is not taken over',
    );
    const name = `rg_${(await dps.a.interfaces())[0].name}`;
    const list = await run(socket, ['ibv_devices']);
    assert.is(list.code, 0, list.out);
    assert.match(list.out, new RegExp(`^\\s+${name}\\s+${guid(MAC_A)}$`, 'm'), list.out);
    const info = await run(socket, ['ibv_devinfo', '-v']);
    assert.is(info.code, 0, info.out);
    for (const re of [
      new RegExp(`^hca_id:\\s+${name}$`, 'm'),
      /^\s+state:\s+PORT_ACTIVE \(4\)$/m,
      /^\s+link_layer:\s+Ethernet$/m,
      /^\s+max_mtu:\s+4096 \(5\)$/m, // what a QP takes (a larger path MTU than the link's is clamped to it)
      /^\s+active_mtu:\s+1024 \(3\)$/m, // a 1500-byte IP MTU carries 1024-byte segments, not 2048
      new RegExp(`^\\s+max_qp:\\s+${dps.a.config.rdma.maxQps}$`, 'm'),
      /^\s+max_qp_rd_atom:\s+\d+$/m,
      /^\s+atomic_cap:\s+ATOMIC_HCA \(1\)$/m,
      new RegExp(`^\\s+GID\\[\\s*0\\]:\\s+::ffff:${IP_A.replace(/\./g, '\\.')}, RoCE v2$`, 'm'),
    ])
      assert.match(info.out, re, info.out);
  });
});

const CHECK = `${NATIVE_BUILD_DIR}verbs-check`;

const checkReady = () => {
  ready();
  if (!existsSync(CHECK)) skip('native/build/Release/verbs-check was not built (libibverbs-dev)');
};

/** verbs-check with the library preloaded against `socket`, and its output. */
function startCheck(socket: string) {
  const p = spawn(CHECK, [], { env: { ...process.env, LD_PRELOAD: LIB, RDMA_GRAPH_SOCKET: socket } });
  return { p, io: reader(p) };
}

/** What a child prints (stdout and stderr), and a wait for a line matching `re`. */
function reader(p: ReturnType<typeof spawn>) {
  let out = '';
  p.stdout!.on('data', (d) => (out += d));
  p.stderr!.on('data', (d) => (out += d));
  return {
    out: () => out,
    exited: new Promise((r) => p.on('exit', r)),
    async line(re: RegExp): Promise<RegExpExecArray> {
      const until = Date.now() + 10_000;
      for (;;) {
        const m = re.exec(out);
        if (m) return m;
        if (Date.now() > until) throw new Error(`no ${re} from verbs-check:\n${out}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
  };
}

test("ibv_reg_mr shares the program's memory with the daemon both ways; a killed program's MR and PD are released", async () => {
  checkReady();
  await withVerbsDaemon(async ({ socket, dps }) => {
    const dp = dps.a;
    const { p, io } = startCheck(socket);
    const line = io.line;
    const exited = io.exited;
    try {
      const [, h, stag, , len, pd] = (await line(/^mr (\d+) stag (\d+) offset (\d+) length (\d+) pd (\d+)$/m)).map(
        Number,
      );
      const mr = (await dp.mrs()).find((m) => m.mr === h);
      assert.ok(mr, `mr ${h} is the daemon's`);
      // Exactly the registered buffer (the pages around it are shared, not part of the MR).
      const { owner, ...rest } = mr;
      assert.equal(rest, { mr: h, pd, stag, length: len, access: ['local-write', 'remote-write', 'remote-read'] });
      assert.match(owner ?? '', /^pid \d+ \(verbs-check\)$/, 'the program that registered it');
      const seen = await dp.readMr(h, 0, len);
      assert.ok(
        seen.every((b, i) => b === ((i * 7 + 3) & 0xff)),
        'the daemon reads what the program wrote before registering',
      );
      const msg = new TextEncoder().encode('from the daemon');
      await dp.writeMr(h, 10, msg);
      p.stdin.write(`show 10 ${msg.length}\n`);
      await line(new RegExp(`^${Buffer.from(msg).toString('hex')}$`, 'm'));
      p.kill('SIGKILL');
      await exited;
      const until = Date.now() + 3000;
      while (
        ((await dp.mrs()).some((m) => m.mr === h) || (await dp.pds()).some((x) => x.pd === pd)) &&
        Date.now() < until
      )
        await new Promise((r) => setTimeout(r, 20));
      assert.not.ok(
        (await dp.mrs()).some((m) => m.mr === h),
        "the killed program's MR is deregistered",
      );
      assert.not.ok(
        (await dp.pds()).some((x) => x.pd === pd),
        'and its PD destroyed',
      );
    } finally {
      p.kill('SIGKILL');
    }
  });
});

test("a QP through ibv_create_qp and ibv_modify_qp: RTS towards the AV's IPv4 GID and dest_qp_num, IRD/ORD as asked; a receive posted through its ring reaches the daemon; SIGKILL destroys it", async () => {
  checkReady();
  await withVerbsDaemon(async ({ socket, dps }) => {
    const dp = dps.a;
    const { p, io } = startCheck(socket);
    try {
      await io.line(/^mr \d+/m);
      const peer = 23456;
      p.stdin.write(`qp ${IP_B} ${peer} 1000\n`);
      const qpn = Number((await io.line(/^qp (\d+) rts rc 0$/m))[1]);
      const q = (await dp.qps()).find((x) => x.qpn === qpn);
      assert.ok(q, `qp ${qpn} is the daemon's: ${io.out()}`);
      assert.is(q!.state, 'rts');
      assert.equal(q!.remote, { ip: IP_B, port: peer });
      assert.equal([q!.ird, q!.ord], [4, 2], 'IRD from max_dest_rd_atomic, ORD from max_rd_atomic');
      assert.equal([q!.maxSendWr, q!.maxRecvWr], [8, 8]);
      assert.is(q!.segmentSize, 512, 'path_mtu IBV_MTU_512 at RTR');
      // timeout 14 at RTS: 4.096 us x 2^14, the initial RTO.
      assert.ok(Math.abs(q!.rtt.rtoUs - 67109) < 1, `RTO from the timeout attribute: ${q!.rtt.rtoUs}`);
      assert.is(q!.owner, `pid ${p.pid} (verbs-check)`, 'the owning process (SO_PEERCRED)');
      assert.match(formatQps(await dp.qps()), new RegExp(`^ +${qpn} +rts .* pid ${p.pid} \\(verbs-check\\)$`, 'm'));
      p.stdin.write('ex\n');
      // The extended verbs through verbs.h's inline helpers (an extended context): query_device_ex
      // answers, create_cq_ex makes a CQ, create_qp_ex without CQs is EINVAL as on a NIC.
      const ex = await io.line(/^ex query_device_ex (-?\d+) max_qp (\d+) create_cq_ex (\d+) create_qp_ex (\d+)$/m);
      assert.equal(ex.slice(1).map(Number), [0, dp.config.rdma.maxQps, 0, 22], ex[0]);
      p.stdin.write('query\n');
      // What it was given: RTR rq_psn 1000, max_dest_rd_atomic 4; RTS sq_psn 1001, max_rd_atomic 2;
      // path_mtu 512: 512-byte segments (the 1500-byte link would carry 1444).
      await io.line(
        new RegExp(
          `^query rc 0 state 3 dest ${peer} rqpsn 1000 sqpsn 1001 ird 4 ord 2 mtu 2 gid ${IP_B.replace(/\./g, '\\.')} send 8 recv 8$`,
          'm',
        ),
      );
      p.stdin.write('post\n');
      await io.line(/^post 0$/m);
      // The receive went through the shared ring: the verbs-input node posted it.
      const until0 = Date.now() + 3000;
      while ((await dp.getQp(qpn)).rqPosted < 1 && Date.now() < until0) await new Promise((r) => setTimeout(r, 10));
      assert.is((await dp.getQp(qpn)).rqPosted, 1, 'the daemon has the posted receive');
      p.kill('SIGKILL');
      await io.exited;
      const until = Date.now() + 3000;
      while ((await dp.qps()).some((x) => x.qpn === qpn) && Date.now() < until)
        await new Promise((r) => setTimeout(r, 20));
      assert.not.ok(
        (await dp.qps()).some((x) => x.qpn === qpn),
        "the killed program's QP is destroyed",
      );
      assert.is((await dp.cqs()).length, 0, 'and its CQ');
    } finally {
      p.kill('SIGKILL');
    }
  });
});

test('QP types not built are refused by name (a UC QP, XRC, raw packet), EOPNOTSUPP; RC and UD are made', async () => {
  checkReady();
  await withVerbsDaemon(async ({ socket }) => {
    const { p, io } = startCheck(socket);
    try {
      await io.line(/^mr \d+ /m);
      const cases: [number, string][] = [
        [3, 'a UC QP'],
        [9, 'an XRC send QP'],
        [10, 'an XRC receive QP'],
        [8, 'a raw packet QP'],
      ];
      for (const [type, name] of cases) {
        p.stdin!.write(`qptype ${type}\n`);
        await io.line(new RegExp(`^qptype ${type} refused 95$`, 'm'));
        assert.ok(
          io
            .out()
            .includes(
              `rdma-graph verbs: ${name} is not supported (RC and UD QPs, SRQs, CQs with channels, PDs and MRs are): EOPNOTSUPP\n`,
            ),
          io.out(),
        );
      }
      for (const type of [2, 4]) {
        p.stdin!.write(`qptype ${type}\n`);
        await io.line(new RegExp(`^qptype ${type} created 0$`, 'm'));
      }
      assert.not.match(io.out(), /other than RC/);
      p.stdin!.write('exit\n');
      await io.exited;
    } finally {
      p.kill('SIGKILL');
    }
  });
});

test("a signal interrupts a blocked ibv_get_cq_event as it interrupts the kernel's read: EINTR unless the handler has SA_RESTART", async () => {
  ready();
  // qperf ends each test with SIGALRM (no SA_RESTART) and counts on the blocked
  // ibv_get_cq_event returning EINTR; with SA_RESTART the kernel restarts the read.
  const py = [
    'import ctypes, signal, threading, time',
    // The process's own scope: the preloaded library's verbs (libibverbs.so.1's handle would
    // find libibverbs' own).
    'v = ctypes.CDLL(None, use_errno=True)',
    'P = ctypes.c_void_p',
    'v.ibv_get_device_list.restype = ctypes.POINTER(P)',
    'for f in ("ibv_open_device", "ibv_create_comp_channel", "ibv_create_cq"): getattr(v, f).restype = P',
    'v.ibv_open_device.argtypes = [P]',
    'v.ibv_create_comp_channel.argtypes = [P]',
    'v.ibv_create_cq.argtypes = [P, ctypes.c_int, P, P, ctypes.c_int]',
    'v.ibv_get_cq_event.argtypes = [P, P, P]',
    'n = ctypes.c_int()',
    'ctx = v.ibv_open_device(v.ibv_get_device_list(ctypes.byref(n))[0])',
    'ch = v.ibv_create_comp_channel(ctx)',
    'assert v.ibv_create_cq(ctx, 16, None, ch, 0)',
    'def wait():',
    '    cq, cc = P(), P()',
    '    t = time.monotonic()',
    '    r = v.ibv_get_cq_event(ch, ctypes.byref(cq), ctypes.byref(cc))',
    "    return '%d %d %.1f' % (r, ctypes.get_errno(), time.monotonic() - t)",
    'signal.signal(signal.SIGALRM, lambda *a: None)',
    'signal.signal(signal.SIGUSR1, lambda *a: None)',
    'signal.setitimer(signal.ITIMER_REAL, 0.5)',
    "print('no SA_RESTART:', wait(), flush=True)",
    // Every handler restartable (Python's SIGINT one too): the alarm at 0.5 s does not end the
    // wait; SIGUSR1 at 1.5 s, made interrupting just before it is sent, does.
    'signal.siginterrupt(signal.SIGALRM, False)',
    'signal.siginterrupt(signal.SIGUSR1, False)',
    'signal.siginterrupt(signal.SIGINT, False)',
    'main = threading.main_thread().ident',
    'def later():',
    '    time.sleep(1.5)',
    '    signal.siginterrupt(signal.SIGUSR1, True)',
    '    signal.pthread_kill(main, signal.SIGUSR1)',
    'threading.Thread(target=later).start()',
    'signal.setitimer(signal.ITIMER_REAL, 0.5)',
    "print('SA_RESTART:', wait(), flush=True)",
  ].join('\n');
  await withVerbsDaemon(async ({ socket }) => {
    const r = await run(socket, ['python3', '-c', py]);
    assert.is(r.code, 0, r.out);
    const m = /^no SA_RESTART: -1 4 (\S+)\nSA_RESTART: -1 4 (\S+)$/m.exec(r.out);
    assert.ok(m, `both waits end with EINTR (errno 4):\n${r.out}`);
    assert.ok(Number(m[1]) >= 0.4 && Number(m[1]) < 1.2, `the first at the alarm (${m[1]} s)`);
    assert.ok(Number(m[2]) >= 1.3, `the second not at the restartable alarm, at the later signal (${m[2]} s)`);
  });
});

test("the daemon going away: the program's next verb fails with an errno at once, it does not hang", async () => {
  checkReady();
  const dir = mkdtempSync(join(tmpdir(), 'verbs-lib-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  const { p, io } = startCheck(socket);
  try {
    await io.line(/^mr \d+/m);
    p.stdin.write('pd\n');
    await io.line(/^pd \d+$/m);
    vs.close(); // the daemon stops serving: its end of every connection closes
    const t0 = Date.now();
    p.stdin.write('pd\n');
    const m = await io.line(/^pd failed (\d+)$/m);
    assert.ok([104, 32].includes(Number(m[1])), `ECONNRESET or EPIPE, got errno ${m[1]}`);
    assert.ok(Date.now() - t0 < 3000, `failed within ${Date.now() - t0} ms (the library's timeout is 5 s)`);
  } finally {
    p.kill('SIGKILL');
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('hostile clients: 3000 seeded random requests (valid ops near real handles, bad sizes, random fds) never stop the daemon, and leave nothing behind', async () => {
  await withVerbsDaemon(async ({ socket, dps }) => {
    const core = loadCore();
    const dp = dps.a;
    const rng = new Rng(16);
    const mem = core.allocMemory(8192, { name: 'verbs-hostile', hugepages: 'never' }); // a sealed memfd
    const file = join(tmpdir(), `verbs-hostile-${process.pid}`);
    writeFileSync(file, new Uint8Array(8192));
    const ffd = openSync(file, 'r');
    // The body size of each op (proto.h's RGV_OPS).
    const BODY = new Map(Object.values(RGV_OPS).map((o) => [o.op as number, o.request?.size ?? 0]));
    const OPS = Object.values(RGV_OPS).length;
    const efd = core.eventfd();
    let conn = core.memifRawConnect(socket);
    let replies = 0,
      drops = 0;
    const handles: number[] = [1, 2, 3];
    try {
      for (let n = 0; n < 3000; n++) {
        const op = rng.chance(0.9) ? 1 + rng.int(OPS) : rng.int(65536);
        const size = rng.chance(0.8) ? (BODY.get(op) ?? 0) : rng.int(120);
        const b = rng.fill(new Uint8Array(rgv_hdr.size + size));
        const v = new DataView(b.buffer);
        if (rng.chance(0.95)) v.setUint32(rgv_hdr.fields.magic.offset, RGV_MAGIC, true);
        v.setUint16(rgv_hdr.fields.op.offset, op, true);
        // Body words near real handles and QPNs as often as random.
        for (let k = rgv_hdr.size; k + 4 <= b.length; k += 4)
          if (rng.chance(0.6)) v.setUint32(k, rng.pick(handles), true);
        const pass = rng.chance(0.15) ? rng.pick([mem.fd, ffd, efd]) : -1;
        assert.is(core.seqpacketSend(conn, b, pass), 0, `request ${n} sent`);
        let got: ReturnType<typeof core.seqpacketRecv> = null;
        for (let t = 0; got === null && t < 2000; t++) {
          await new Promise((r) => setImmediate(r));
          got = core.seqpacketRecv(conn);
        }
        assert.ok(got !== null, `request ${n} (op ${op}, ${size} bytes) answered or refused within its time`);
        if ('eof' in got) {
          drops++;
          core.closeFd(conn);
          conn = core.memifRawConnect(socket);
        } else {
          replies++;
          const r = readMessage(got.data);
          if (r !== null && r.status === 0 && r.body.byteLength >= rgv_handle.size)
            handles.push(decode(rgv_handle, r.body).handle);
          if (handles.length > 64) handles.splice(3, 1);
        }
      }
    } finally {
      core.closeFd(conn);
      core.closeFd(efd);
      closeSync(ffd);
      rmSync(file);
    }
    assert.ok(replies > 1000 && drops > 10, `both kinds happened: ${replies} replies, ${drops} drops`);
    const until = Date.now() + 5000;
    const left = async () =>
      (await dp.qps()).length +
      (await dp.mrs()).length +
      (await dp.cqs()).length +
      (await dp.srqs()).length +
      (await dp.pds()).length;
    while ((await left()) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.is(await left(), 0, 'every object the clients made was released when their connections closed');
    // The daemon still serves: a DEVICES request on a fresh connection lists the interface.
    const c = core.memifRawConnect(socket);
    assert.is(core.seqpacketSend(c, message(RGV_OP_DEVICES, 0)), 0);
    let d: ReturnType<typeof core.seqpacketRecv> = null;
    for (let t = 0; d === null && t < 2000; t++) {
      await new Promise((r) => setImmediate(r));
      d = core.seqpacketRecv(c);
    }
    core.closeFd(c);
    assert.ok(
      d !== null && 'data' in d && d.data.length === rgv_hdr.size + rgv_device.size,
      'one device listed after the storm',
    );
    const st = await dp.buffers();
    assert.is(st.count - st.free, 0, 'no buffer lost');
  });
});

test('registration refused: memory that is not a sealed memfd, a PD of another connection', async () => {
  ready();
  await withVerbsDaemon(async ({ socket, dps }) => {
    const core = loadCore();
    const req = (fd: number, op: number, body?: Uint8Array, pass = -1) => {
      assert.is(core.seqpacketSend(fd, message(op, 9, body), pass), 0);
    };
    const reply = async (fd: number) => {
      for (let k = 0; k < 300; k++) {
        const m = core.seqpacketRecv(fd);
        const r = m !== null && 'data' in m ? readMessage(m.data) : null;
        if (r !== null) return r;
        await new Promise((r) => setTimeout(r, 10));
      }
      throw new Error('no reply');
    };
    const a = core.memifRawConnect(socket),
      b = core.memifRawConnect(socket);
    try {
      req(a, RGV_OP_ALLOC_PD);
      const pd = decode(rgv_handle, (await reply(a)).body).handle;
      // A regular file, not a memfd: no seals, so it could shrink under the daemon (SIGBUS).
      const f = join(tmpdir(), `verbs-lib-file-${process.pid}`);
      writeFileSync(f, new Uint8Array(8192));
      const ffd = openSync(f, 'r+');
      const base = 0x10000000;
      const regMr = encode(rgv_reg_mr, {
        pd,
        access: RGV_ACCESS_LOCAL_WRITE,
        span: 8192,
        start: base,
        addr: base,
        length: 8192,
      });
      req(a, RGV_OP_REG_MR, regMr, ffd);
      closeSync(ffd);
      rmSync(f);
      assert.is((await reply(a)).status, -22, 'EINVAL');
      // b registers memory under a's PD: not its own.
      const mem = core.allocMemory(8192, { name: 'verbs-lib-mr', hugepages: 'never' });
      req(b, RGV_OP_REG_MR, regMr, mem.fd);
      assert.is((await reply(b)).status, -2, 'ENOENT: only its own PDs');
      assert.is((await dps.a.mrs()).length, 0, 'nothing was registered');
    } finally {
      core.closeFd(a);
      core.closeFd(b);
    }
  });
});

test('no daemon: no devices, and the reason; a malformed request closes that connection only', async () => {
  ready();
  const dir = mkdtempSync(join(tmpdir(), 'verbs-lib-'));
  const socket = join(dir, 'verbs.sock');
  try {
    const none = await run(socket, ['ibv_devices']);
    assert.is(none.signal, null, none.out);
    assert.match(
      none.out,
      new RegExp(`rdma-graph verbs: no devices: the daemon at ${socket}: No such file or directory`),
    );
    assert.not.match(none.out, /\brg_\w+/);
    // A stale socket file (its daemon died without removing it) is replaced.
    const core = loadCore();
    core.closeFd(core.seqpacketListen(socket));
    assert.ok(existsSync(socket));
    const dps = await twoDataplanes();
    const logged: string[] = [];
    const vs = dps.a.serveVerbs({ path: socket, log: (_l, m) => logged.push(m) });
    try {
      const fd = core.memifRawConnect(socket);
      assert.is(core.seqpacketSend(fd, Uint8Array.of(1, 2, 3)), 0);
      const until = Date.now() + 3000;
      let got: ReturnType<typeof core.seqpacketRecv> = null;
      while (got === null && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 10));
        got = core.seqpacketRecv(fd);
      }
      assert.equal(got, { eof: true }, 'the daemon closed that connection');
      core.closeFd(fd);
      assert.match(logged.join('\n'), /dropped a connection: a request of 3 bytes \(at least 16 expected\)/);
      const after = await run(socket, ['ibv_devices']);
      assert.match(after.out, /\brg_\w+/, 'and still serves the next program');
      assert.is(vs.connections(), 0);
    } finally {
      await dps.close(); // closes the verbs socket it serves too
    }
    assert.not.ok(existsSync(socket), 'closing the data plane closed its verbs socket');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('rdma-graph exec -- COMMAND: the library preloaded, the socket made absolute, the exit status passed on', async () => {
  ready();
  const dir = mkdtempSync(join(tmpdir(), 'verbs-lib-'));
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: join(dir, 'verbs.sock') });
  try {
    const cli = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) =>
        execFile(
          process.execPath,
          [join(ROOT, 'bin/rdma-graph.mjs'), 'exec', ...args],
          { cwd: dir, timeout: 30_000 },
          (e, out, err) =>
            resolve({ code: e === null ? 0 : typeof e.code === 'number' ? e.code : null, out: out + err }),
        ),
      );
    const ok = await cli(['--socket', 'verbs.sock', '--', 'ibv_devices']);
    assert.is(ok.code, 0, ok.out);
    assert.match(ok.out, /\brg_\w+/);
    const env = await cli([
      '--socket',
      'verbs.sock',
      '--',
      'sh',
      '-c',
      'echo "$RDMA_GRAPH_SOCKET $LD_PRELOAD"; exit 7',
    ]);
    assert.is(env.code, 7, 'the exit status of the command');
    assert.match(env.out, new RegExp(`^${join(dir, 'verbs.sock')} ${LIB}`, 'm'));
    const bad = await cli(['--', 'no-such-program-here']);
    assert.is(bad.code, 127, bad.out);
    assert.match(bad.out, /rdma-graph: exec no-such-program-here: No such file or directory\n/);
  } finally {
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
