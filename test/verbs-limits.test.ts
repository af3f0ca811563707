/**
 * Issue 26, findings 3, 4, 6 and part of 7: what one local program can cost the daemon through
 * its verbs socket. A registration costs the same whatever its length (up to max_mr_size, 2 GiB);
 * one process, one user, or a daemon short of file descriptors cannot take the socket from the
 * others (verbs.max-connections*, verbs.max-fds-per-connection, and a spare fd for EMFILE);
 * malformed requests cannot flood the log; the socket is 0660 from the moment it exists; hugetlb
 * memory is refused. Clients here are raw (the protocol of native/verbs-lib/proto.h), in this
 * process or in a small Python script, and unmodified ibverbs-utils through `rdma-graph exec`.
 */
import { skip, test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { execFile, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import net from 'node:net';
import { join } from 'node:path';
import { Dataplane, VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { createDataplane } from '../dataplane/create.ts';
import { loadCore } from '../native/addons.ts';
import { baseConfig, twoDataplanes } from './dataplane-helpers.ts';
import { cpuWith, memifIf } from './workers-helpers.ts';
import { ROOT } from './readme-helpers.ts';
import { watchDaemon } from './helpers.ts';
import {
  type AbiStruct,
  RGV_ACCESS_LOCAL_WRITE,
  RGV_MAGIC,
  RGV_OP_ALLOC_PD,
  RGV_OP_ATTACH,
  RGV_OP_CREATE_CHANNEL,
  RGV_OP_DEVICES,
  RGV_OP_REG_MR,
  rgv_attach,
  rgv_handle,
  rgv_hdr,
  rgv_mr,
  rgv_reg_mr,
} from '../dataplane/verbs-server/abi.generated.ts';
import { bodyText, decode, encode, message, readMessage } from '../dataplane/verbs-server/messages.ts';

const core = loadCore();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const havePython = () => {
  if (spawnSync('python3', ['-c', 'import os, socket; os.memfd_create; socket.send_fds']).status !== 0)
    skip('python3 (3.9 or later) is not installed');
};

/** Python struct's code of each integer type of the ABI. */
const PY = { char: 's', u8: 'B', i16: 'h', u16: 'H', u32: 'I', u64: 'Q' } as const;
/** Python's struct format of an ABI struct: little-endian, no padding (proto.h's structs have none). */
const py = (s: AbiStruct) =>
  `<${Object.values(s.fields)
    .map((f) => (f.type === 'char' || f.count > 1 ? `${f.count}s` : PY[f.type]))
    .join('')}`;
/** Python's unpack_from arguments for one member of a reply's header in `r`: its format and offset. */
const pyHdr = (m: keyof typeof rgv_hdr.fields) => `'<${PY[rgv_hdr.fields[m].type]}', r, ${rgv_hdr.fields[m].offset}`;

interface Reply {
  eof: boolean;
  status: number;
  body: DataView;
  /** The payload as text (a refusal's reason). */
  text: string;
}

/** The handle a reply carries (ALLOC_PD). */
const handleOf = (r: Reply) => decode(rgv_handle, r.body).handle;
/** REG_MR's body: `bytes` at `base`, local-write, in PD `pd`. */
const regMr = (pd: number, base: number, bytes: number) =>
  encode(rgv_reg_mr, { pd, access: RGV_ACCESS_LOCAL_WRITE, span: bytes, start: base, addr: base, length: bytes });

/** The next message on `fd` (polled, this loop keeps turning), or eof. */
async function reply(fd: number, what = 'a reply'): Promise<Reply> {
  for (let t = 0; t < 5000; t++) {
    const m = core.seqpacketRecv(fd);
    if (m !== null) {
      if ('eof' in m) return { eof: true, status: 0, body: new DataView(new ArrayBuffer(0)), text: '' };
      const r = readMessage(m.data);
      assert.ok(r !== null, `${what}: ${m.data.length} bytes, not a message`);
      return { eof: false, status: r.status, body: r.body, text: bodyText(r.body) };
    }
    await new Promise((r) => setImmediate(r));
    if (t > 100) await sleep(1);
  }
  throw new Error(`no ${what}`);
}

/** A raw client connection: one request at a time. */
function client(socket: string) {
  const fd = core.memifRawConnect(socket);
  let seq = 0;
  return {
    fd,
    async call(op: number, body?: Uint8Array, pass = -1): Promise<Reply> {
      assert.is(core.seqpacketSend(fd, message(op, ++seq, body), pass), 0, `op ${op} sent`);
      return reply(fd, `reply to op ${op}`);
    },
    close: () => core.closeFd(fd),
  };
}

/** Data plane A of a pair serving its verbs socket in a fresh directory (mode 0711: others may traverse it). */
async function withDaemon(
  body: (x: { socket: string; dir: string; dp: DataplaneApi; logged: string[] }) => Promise<void>,
  over: Parameters<typeof twoDataplanes>[0] = {},
): Promise<void> {
  const dir = fs.mkdtempSync(join(tmpdir(), 'verbs-limits-'));
  fs.chmodSync(dir, 0o711);
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes(over);
  const logged: string[] = [];
  const vs = dps.a.serveVerbs({ path: socket, log: (_l, m) => logged.push(m) });
  try {
    await body({ socket, dir, dp: dps.a, logged });
  } finally {
    vs.close();
    await dps.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** `rdma-graph exec --socket SOCKET -- ibv_devinfo`, unmodified: its exit and output. */
const devinfo = (socket: string) =>
  runAsync([process.execPath, join(ROOT, 'bin/rdma-graph.mjs'), 'exec', '--socket', socket, '--', 'ibv_devinfo']);

/** Skips without the library or ibverbs-utils' ibv_devinfo. */
function haveDevinfo(): void {
  if (!fs.existsSync(VERBS_LIBRARY))
    skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync('ibv_devinfo', ['--help']).error) skip('ibverbs-utils is not installed (ibv_devinfo)');
}

/** utime + stime of a process, in clock ticks (/proc/PID/stat fields 14 and 15). */
function cpuTicks(pid: number): number {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}
const TICKS_PER_S = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** A command's exit code and output, without blocking this loop (it serves the socket). */
const runAsync = (cmd: string[], env: NodeJS.ProcessEnv = process.env) =>
  new Promise<{ code: number | null; out: string }>((resolve) =>
    execFile(cmd[0], cmd.slice(1), { timeout: 30_000, env }, (e, out, err) =>
      resolve({ code: e === null ? 0 : typeof e.code === 'number' ? e.code : null, out: out + err }),
    ),
  );

// ------------------------------------------------------------------ finding 3: REG_MR in O(1)

/**
 * A Python client: ALLOC_PD, "ready", then (once told "go" on stdin) one REG_MR per size on a
 * sparse memfd sealed against shrinking (nothing of it is ever touched: only the daemon's own
 * work shows), a JSON line per reply; it keeps its connection (and so the MRs) until its stdin
 * closes.
 */
const REG_CLIENT = `
import fcntl, json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
seq = 0
def call(op, body=b'', fd=None):
    global seq
    seq += 1
    msg = struct.pack('${py(rgv_hdr)}', ${RGV_MAGIC}, op, 0, seq, 0) + body
    if fd is None:
        s.send(msg)
    else:
        socket.send_fds(s, [msg], [fd])
    r = s.recv(512)
    if len(r) == 0:
        return None, b''
    return struct.unpack_from(${pyHdr('status')})[0], r[${rgv_hdr.size}:]
st, b = call(${RGV_OP_ALLOC_PD})
pd = struct.unpack_from('${py(rgv_handle)}', b)[0]
print('ready', flush=True)
sys.stdin.readline()
for n in [int(x) for x in sys.argv[2:]]:
    fd = os.memfd_create('big-mr', os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(fd, n)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    base = 0x7f0000000000
    st, b = call(${RGV_OP_REG_MR}, struct.pack('${py(rgv_reg_mr)}', pd, ${RGV_ACCESS_LOCAL_WRITE}, n, base, base, n, 0, 0), fd)
    os.close(fd)
    print(json.dumps({'size': n, 'status': st, 'mr': struct.unpack_from('${py(rgv_mr)}', b)[0] if st == 0 else None}), flush=True)
sys.stdin.read()
`;

test('REG_MR of 255 MiB, 1 GiB and 2 GiB (max_mr_size): each registered, the loop turning meanwhile, no memory of the size and little CPU spent on it', async () => {
  havePython();
  await withDaemon(async ({ socket, dp }) => {
    const sizes = [255 * 2 ** 20, 2 ** 30, 2 ** 31];
    // A heartbeat: a timer of this thread's loop, which the data plane shares.
    let turns = 0;
    const beat = setInterval(() => turns++, 1);
    const p = spawn('python3', ['-c', REG_CLIENT, socket, ...sizes.map(String)], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const exited = new Promise((r) => p.on('exit', r));
    try {
      for (let t = 0; t < 3000 && !/^ready$/m.test(out) && p.exitCode === null; t++) await sleep(5);
      assert.match(out, /^ready$/m, out);
      // From here on only the registrations run (and this loop, and the graph).
      const rss0 = process.memoryUsage().rss;
      const cpu0 = process.cpuUsage();
      const turns0 = turns;
      p.stdin.write('go\n');
      const until = Date.now() + 120_000;
      while (out.split('\n').filter((l) => l.startsWith('{')).length < sizes.length && Date.now() < until) {
        if (p.exitCode !== null) break;
        await sleep(2);
      }
      const turns1 = turns;
      const cpu = process.cpuUsage(cpu0);
      const rss1 = process.memoryUsage().rss;
      const replies = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { size: number; status: number; mr: number | null });
      assert.is(replies.length, sizes.length, `a reply per registration:\n${out}`);
      for (const r of replies) assert.is(r.status, 0, `${r.size} bytes registered (status ${r.status})`);
      const mrs = await dp.mrs();
      assert.equal(
        replies.map((r) => mrs.find((m) => m.mr === r.mr)?.length),
        sizes,
        'the daemon holds each MR at its full length',
      );
      // The loop (the data plane's too: it runs between its turns) kept turning: its timer fired.
      assert.ok(turns1 > turns0, `the heartbeat fired during the registrations (${turns1 - turns0} times)`);
      // O(1) in the length: 3.3 GB registered, mapped but never touched.
      const grew = rss1 - rss0;
      assert.ok(grew < 128 * 2 ** 20, `RSS grew by ${(grew / 2 ** 20).toFixed(0)} MiB for 3.3 GB registered`);
      const cpuMs = (cpu.user + cpu.system) / 1000;
      assert.ok(
        cpuMs < 500,
        `${cpuMs.toFixed(0)} ms of CPU for three registrations (a bound on work: touching 3.3 GB costs seconds)`,
      );
    } finally {
      clearInterval(beat);
      p.stdin.end();
      p.kill();
      await exited;
    }
  });
});

// ------------------------------------------------------------------ finding 4: connections and fds

const EMFILE = 24,
  ENFILE = 23,
  EINVAL = 22;

/** ATTACH's body: the interface name. */
const attach = (name: string) => encode(rgv_attach, { ifname: name });

/**
 * A Python client as another user: connects, asks for the devices; prints "devices N" or
 * "refused ERRNO TEXT" or "eof" or "error WHAT".
 */
const DEVICES_CLIENT = `
import socket, struct, sys
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(sys.argv[1])
    s.send(struct.pack('${py(rgv_hdr)}', ${RGV_MAGIC}, ${RGV_OP_DEVICES}, 0, 7, 0))
    r = s.recv(65536)
    if len(r) == 0:
        print('eof')
    else:
        st = struct.unpack_from(${pyHdr('status')})[0]
        if st == 0:
            print('devices', struct.unpack_from(${pyHdr('count')})[0])
        else:
            print('refused', -st, r[${rgv_hdr.size}:].decode(errors='replace'))
except Exception as e:
    print('error', e)
`;

test('one process opening connections until refused: refused at verbs.max-connections-per-pid with the reason, its fds per connection bounded; another user, ibv_devinfo and the API still served', async () => {
  havePython();
  haveDevinfo();
  if (process.getuid?.() !== 0) skip('needs root (setpriv to another uid)');
  if (spawnSync('setpriv', ['--help']).error) skip('setpriv (util-linux) is not installed');
  await withDaemon(async ({ socket, dp, logged }) => {
    const lim = dp.config.verbs;
    const itf = (await dp.interfaces())[0].name;
    const held: ReturnType<typeof client>[] = [];
    const efds: number[] = [];
    let refused: Reply | null = null;
    try {
      // Connections until one is refused (at most 300: more than the daemon-wide 256 of before).
      for (let k = 0; k < 300 && refused === null; k++) {
        const c = client(socket);
        const r = await c.call(RGV_OP_DEVICES);
        if (r.eof || r.status !== 0) {
          refused = r;
          c.close();
          break;
        }
        held.push(c);
      }
      assert.ok(refused !== null, `refused at some point (held ${held.length})`);
      assert.is(held.length, lim.maxConnectionsPerPid, 'as many connections as verbs.max-connections-per-pid');
      assert.not.ok(refused!.eof, 'the refused connection is answered, not just closed');
      assert.is(-refused!.status, EMFILE, 'EMFILE');
      assert.match(
        refused!.text,
        new RegExp(`pid ${process.pid} .*has ${held.length} connections.*verbs\\.max-connections-per-pid`),
      );
      assert.match(logged.join('\n'), /refused a connection of pid \d+/);
      // Each held connection hands over eventfds (its doorbell, then channels) until refused.
      let channels = 0;
      for (const c of held) {
        const e = core.eventfd();
        efds.push(e);
        assert.is((await c.call(RGV_OP_ATTACH, attach(itf), e)).status, 0, 'ATTACH');
        for (let n = 0; n < 100; n++) {
          const ch = core.eventfd();
          efds.push(ch);
          const r = await c.call(RGV_OP_CREATE_CHANNEL, undefined, ch);
          if (r.status !== 0) {
            assert.is(-r.status, EMFILE, `a channel past the limit: EMFILE (${r.status})`);
            break;
          }
          channels++;
        }
      }
      assert.is(
        channels,
        held.length * (lim.maxFdsPerConnection - 1),
        'doorbell and channels: verbs.max-fds-per-connection per connection',
      );
      // While this process holds all it may: another user is served...
      const other = await runAsync([
        'setpriv',
        '--reuid=65534',
        '--regid=0',
        '--clear-groups',
        '/usr/bin/python3',
        '-c',
        DEVICES_CLIENT,
        socket,
      ]);
      assert.match(other.out, /^devices 1$/m, `uid 65534 (group 0: the socket is 0660) is served: ${other.out}`);
      // ...and so is another program of the same user, unmodified, through rdma-graph exec.
      {
        const info = await devinfo(socket);
        assert.is(info.code, 0, info.out);
        assert.match(info.out, new RegExp(`hca_id:\\s+rg_${itf}`), info.out);
      }
      // The data plane answers its facade meanwhile.
      assert.is((await dp.interfaces())[0].name, itf);
      assert.is((await dp.health()).status, 'ok');
    } finally {
      for (const c of held) c.close();
      for (const e of efds) core.closeFd(e);
    }
    // Closed connections give their place back.
    for (let t = 0; t < 200 && (await dp.pds()).length > 0; t++) await sleep(10);
    const again = client(socket);
    assert.is((await again.call(RGV_OP_DEVICES)).status, 0, 'a new connection after the others closed');
    again.close();
  });
});

/**
 * A Python client (another process of this user): opens connections one by one, asking each for
 * the devices, until one is refused or it has `argv[2]`; prints "ok" or "refused ERRNO TEXT" per
 * connection, then holds them until its stdin closes.
 */
const HOLD_CLIENT = `
import socket, struct, sys
held = []
for k in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(sys.argv[1])
    s.send(struct.pack('${py(rgv_hdr)}', ${RGV_MAGIC}, ${RGV_OP_DEVICES}, 0, k + 1, 0))
    r = s.recv(65536)
    st = struct.unpack_from(${pyHdr('status')})[0] if len(r) >= ${rgv_hdr.size} else None
    if st == 0:
        held.append(s)
        print('ok', flush=True)
    else:
        print('refused', -st if st is not None else 'eof', r[${rgv_hdr.size}:].decode(errors='replace'), flush=True)
        break
sys.stdin.read()
`;

test("CREATE_CHANNEL takes an eventfd or a unix stream socket (the library's socketpair end), nothing else: EINVAL", async () => {
  await withDaemon(async ({ socket, dp }) => {
    const itf = (await dp.interfaces())[0].name;
    const c = client(socket);
    const other = client(socket); // a SOCK_SEQPACKET socket: not a channel
    const dir = fs.mkdtempSync(join(tmpdir(), 'chan-'));
    const server = net.createServer();
    await new Promise<void>((r) => server.listen(join(dir, 's'), r));
    const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
    const peer = net.connect(join(dir, 's'));
    const end = await accepted;
    const mem = core.allocMemory(4096);
    const doorbell = core.eventfd(),
      efd = core.eventfd();
    try {
      assert.is((await c.call(RGV_OP_DEVICES)).status, 0);
      assert.is((await c.call(RGV_OP_ATTACH, attach(itf), doorbell)).status, 0, 'ATTACH');
      const create = async (fd: number) => (await c.call(RGV_OP_CREATE_CHANNEL, undefined, fd)).status;
      const streamFd = (end as unknown as { _handle: { fd: number } })._handle.fd;
      assert.is(await create(streamFd), 0, 'a unix stream socket');
      assert.is(await create(efd), 0, 'an eventfd');
      assert.is(-(await create(mem.fd)), EINVAL, 'a memfd: EINVAL');
      assert.is(-(await create(other.fd)), EINVAL, 'a seqpacket socket: EINVAL');
      assert.is(-(await create(-1)), EINVAL, 'no fd: EINVAL');
    } finally {
      c.close();
      other.close();
      core.closeFd(doorbell);
      core.closeFd(efd);
      end.destroy();
      peer.destroy();
      server.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("an unmodified program refused at verbs.max-connections-per-uid says why, in the daemon's words", async () => {
  haveDevinfo();
  await withDaemon(
    async ({ socket }) => {
      const held = [client(socket), client(socket)];
      try {
        for (const c of held) assert.is((await c.call(RGV_OP_DEVICES)).status, 0);
        const info = await devinfo(socket);
        assert.not.equal(info.code, 0, info.out);
        assert.match(info.out, /refused: .*has 2 connections.*verbs\.max-connections-per-uid/, info.out);
      } finally {
        for (const c of held) c.close();
      }
    },
    { a: { verbs: { ...baseConfig().verbs, maxConnectionsPerUid: 2 } } },
  );
});

test('with cpu.workers: 2 the limits hold for the whole daemon (the main thread counts, the workers give back): per process, per user, in all; a closed connection frees its place', async () => {
  havePython();
  const root = process.getuid?.() === 0 && !spawnSync('setpriv', ['--help']).error;
  const dp = await createDataplane(
    baseConfig({
      cpu: cpuWith(2),
      interfaces: [memifIf('m0', `@rg-vlimits-${process.pid}`, 'server', '10.71.0.1', '02:fe:00:00:71:01')],
      verbs: { ...baseConfig().verbs, maxConnections: 6, maxConnectionsPerUid: 5, maxConnectionsPerPid: 4 },
    }),
  );
  const dir = fs.mkdtempSync(join(tmpdir(), 'verbs-limits-w-'));
  fs.chmodSync(dir, 0o711);
  const socket = join(dir, 'verbs.sock');
  const vs = dp.serveVerbs({ path: socket });
  const mine: ReturnType<typeof client>[] = [];
  /** A HOLD_CLIENT (as uid 65534, group 0, with `nobody`), its output so far. */
  const hold = (nobody: boolean) => {
    const cmd = ['/usr/bin/python3', '-c', HOLD_CLIENT, socket, '10'];
    const p = spawn(
      nobody ? 'setpriv' : cmd[0],
      nobody ? ['--reuid=65534', '--regid=0', '--clear-groups', ...cmd] : cmd.slice(1),
      {
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    const h = { p, out: '', exited: new Promise((r) => p.on('exit', r)) };
    p.stdout.on('data', (d) => (h.out += d));
    p.stderr.on('data', (d) => (h.out += d));
    return h;
  };
  const until = async (h: ReturnType<typeof hold>) => {
    for (let t = 0; t < 2000 && !/refused[^\n]*\n/.test(h.out) && h.p.exitCode === null; t++) await sleep(5);
    return h.out;
  };
  const others: ReturnType<typeof hold>[] = [];
  try {
    for (let k = 0; k < 4; k++) {
      const c = client(socket);
      mine.push(c);
      assert.is((await c.call(RGV_OP_DEVICES)).status, 0, `connection ${k + 1} of this process`);
    }
    const fifth = client(socket);
    const r = await fifth.call(RGV_OP_DEVICES);
    fifth.close();
    assert.is(-r.status, EMFILE, 'the fifth of this process: EMFILE');
    assert.match(r.text, /has 4 connections open, the most one process may have/);
    // Another process of this user (on the other worker): one more, then the user's 5 are taken.
    others.push(hold(false));
    assert.match(
      await until(others[0]),
      new RegExp(
        `^ok\\nrefused 87 uid ${process.getuid?.()} has 5 connections open, the most one user may have \\(verbs\\.max-connections-per-uid\\)$`,
        'm',
      ),
      others[0].out,
    );
    if (root) {
      // Another user: one more, then the daemon's 6 are taken.
      others.push(hold(true));
      assert.match(
        await until(others[1]),
        /^ok\nrefused 87 6 connections are open, the most the daemon serves \(verbs\.max-connections\)$/m,
        others[1].out,
      );
    }
    // Two of this process's connections close (their worker hands the fds back): places free.
    mine.pop()!.close();
    mine.pop()!.close();
    let again: Reply | null = null;
    for (let t = 0; t < 100; t++) {
      const c = client(socket);
      again = await c.call(RGV_OP_DEVICES);
      if (again.status === 0) {
        mine.push(c);
        break;
      }
      c.close();
      await sleep(20);
    }
    assert.is(again?.status, 0, `a place freed by a closed connection: ${again?.text}`);
  } finally {
    for (const c of mine) c.close();
    for (const h of others) {
      h.p.stdin.end();
      h.p.kill();
      await h.exited;
    }
    vs.close();
    await dp.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** `rdma-graph start` of `cfg` under prlimit; its log lines and API URL. */
function startDaemon(cfg: string, nofile: number) {
  return watchDaemon(
    spawn(
      'prlimit',
      [`--nofile=${nofile}:${nofile}`, process.execPath, join(ROOT, 'bin/rdma-graph.mjs'), 'start', '--config', cfg],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    ),
  );
}

/** GET url: the status and body, or the error's text (within 5 s). */
async function get(url: string): Promise<{ status: number; body: string }> {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(5000) });
    return { status: r.status, body: await r.text() };
  } catch (e) {
    return { status: 0, body: String((e as Error).cause ?? e) };
  }
}

test('a daemon short of file descriptors (prlimit --nofile=96): a flood of connections and eventfds is refused before the last ones, the accept loop does not spin, the API answers', async () => {
  const dir = fs.mkdtempSync(join(tmpdir(), 'verbs-nofile-'));
  const socket = join(dir, 'verbs.sock');
  const cfg = join(dir, 'c.yaml');
  fs.writeFileSync(
    cfg,
    `api: { listen: "127.0.0.1:0" }\nverbs: { socket: ${socket} }\ninterfaces:\n` +
      `  - { name: memif0, driver: memif, memif: { socket: ${join(dir, 'm.sock')}, role: server }, mac: "02:fe:00:00:00:01", address: 10.10.0.1/24 }\n`,
  );
  // 96: at 64 the daemon itself could die of EMFILE while Node's module loader (run through tsx
  // from a checkout) opened its sources in parallel at start-up (once in a fresh-clone CI run);
  // the flood below still exhausts 96 long before its 40 connections of 40 channels each.
  const d = startDaemon(cfg, 96);
  const held: number[] = [];
  try {
    const url = await d.url;
    const pid = d.proc.pid!;
    // prlimit execs node: the daemon is that pid.
    assert.match(fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'), /rdma-graph\.mjs/);
    // Connections, each attached with its doorbell and as many channels as it may, until the
    // daemon refuses a connection; then more connections, left waiting in the listen queue.
    let refused: Reply | null = null;
    for (let k = 0; k < 40 && refused === null; k++) {
      let c: number;
      try {
        c = core.memifRawConnect(socket);
      } catch {
        break; // the listen queue is full: the daemon takes none
      }
      held.push(c);
      core.seqpacketSend(c, message(RGV_OP_ATTACH, 1, attach('memif0')), held[held.push(core.eventfd()) - 1]);
      const r = await reply(c, 'an ATTACH reply').catch(() => null);
      if (r === null || r.eof || r.status !== 0) {
        refused = r;
        break;
      }
      for (let n = 0; n < 40; n++) {
        const e = core.eventfd();
        held.push(e);
        core.seqpacketSend(c, message(RGV_OP_CREATE_CHANNEL, 2 + n), e);
        const x = await reply(c, 'a CREATE_CHANNEL reply').catch(() => null);
        if (x === null || x.eof || x.status !== 0) break;
      }
    }
    assert.ok(refused !== null, 'a connection was refused');
    assert.not.ok(refused!.eof, 'told why, not just closed');
    assert.is(-refused!.status, ENFILE, `ENFILE: ${refused!.text}`);
    assert.match(refused!.text, /file descriptors/);
    for (let k = 0; k < 8; k++) {
      try {
        held.push(core.memifRawConnect(socket));
      } catch {
        break;
      }
    }
    // The accept loop does not spin: the daemon's CPU over a second is far from a core's.
    await sleep(200);
    const t0 = cpuTicks(pid),
      w0 = Date.now();
    await sleep(1000);
    const used = (cpuTicks(pid) - t0) / TICKS_PER_S,
      wall = (Date.now() - w0) / 1000;
    assert.ok(used < 0.3 * wall, `the daemon used ${(used * 1000).toFixed(0)} ms of CPU in ${wall.toFixed(2)} s`);
    // The API answers meanwhile.
    const h = await get(`${url}/v1/health`);
    assert.is(h.status, 200, `GET /v1/health: ${h.status} ${h.body}\n${d.lines.slice(-20).join('\n')}`);
  } finally {
    for (const fd of held) core.closeFd(fd);
    d.proc.kill('SIGTERM');
    const t = setTimeout(() => d.proc.kill('SIGKILL'), 10_000);
    await d.exit;
    clearTimeout(t);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * A process serving a verbs listener (listenVerbs: what the daemon's main thread runs) whose
 * fd table is then filled to its limit; prints "full" and keeps serving.
 */
const FULL_LISTENER = `
import { openSync } from 'node:fs';
import { listenVerbs } from ${JSON.stringify(join(ROOT, 'dataplane/verbs-server/listener.ts'))};
const held = [];
listenVerbs(process.argv[1], { adopt: (fd) => held.push(fd), connections: () => held.length, close() {} });
try {
  for (;;) held.push(openSync('/dev/null', 'r'));
} catch {}
console.log('full ' + held.length);
setInterval(() => {}, 1000);
`;

test('EMFILE at the listener: a waiting connection is taken off the queue and closed (a spare fd), the accept loop does not spin', async () => {
  const dir = fs.mkdtempSync(join(tmpdir(), 'verbs-emfile-'));
  const socket = join(dir, 'verbs.sock');
  const p = spawn(
    'prlimit',
    ['--nofile=200:200', process.execPath, '--import', 'tsx', '--input-type=module', '-e', FULL_LISTENER, socket],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const exited = new Promise((r) => p.on('exit', r));
  const conns: number[] = [];
  try {
    for (let t = 0; t < 3000 && !/^full \d+/m.test(out); t++) {
      if (p.exitCode !== null) break;
      await sleep(10);
    }
    assert.match(out, /^full \d+/m, out);
    for (let k = 0; k < 3; k++) conns.push(core.memifRawConnect(socket));
    await sleep(300);
    const t0 = cpuTicks(p.pid!),
      w0 = Date.now();
    await sleep(1000);
    const used = (cpuTicks(p.pid!) - t0) / TICKS_PER_S,
      wall = (Date.now() - w0) / 1000;
    assert.ok(used < 0.3 * wall, `the listener used ${(used * 1000).toFixed(0)} ms of CPU in ${wall.toFixed(2)} s`);
    for (const c of conns) {
      const m = core.seqpacketRecv(c);
      assert.equal(m, { eof: true }, 'the waiting connection was closed, not left in the queue');
    }
  } finally {
    for (const c of conns) core.closeFd(c);
    p.kill('SIGKILL');
    await exited;
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ------------------------------------------------------------------ finding 6: the log

test('20,000 malformed requests: a bounded number of log lines, which say how many were suppressed', async () => {
  let logged: string[] = [];
  await withDaemon(async ({ socket, dp, logged: l }) => {
    logged = l;
    // 10,000 on one connection: registrations of memory that is not a sealed memfd (refused, logged).
    const c = client(socket);
    const pd = handleOf(await c.call(RGV_OP_ALLOC_PD));
    const file = join(tmpdir(), `verbs-limits-file-${process.pid}`);
    fs.writeFileSync(file, new Uint8Array(8192));
    const ffd = fs.openSync(file, 'r+');
    try {
      for (let n = 0; n < 10_000; n++) {
        const r = await c.call(RGV_OP_REG_MR, regMr(pd, 0x10000000, 8192), ffd);
        assert.is(r.status, -22);
      }
    } finally {
      fs.closeSync(ffd);
      fs.rmSync(file);
      c.close();
    }
    // 10,000 connections of this process, each closed for a request without the magic.
    const junk = new Uint8Array(rgv_hdr.size).fill(0x5a);
    for (let n = 0; n < 10_000; n++) {
      const x = core.memifRawConnect(socket);
      core.seqpacketSend(x, junk);
      assert.ok((await reply(x, 'the end of a dropped connection')).eof);
      core.closeFd(x);
    }
    for (let t = 0; t < 100 && (await dp.pds()).length > 0; t++) await sleep(10);
  }); // closing the socket says what was still being counted
  const about = logged.filter((l) => /dropped a connection|refused a registration|suppressed/.test(l));
  assert.ok(
    about.length <= 40,
    `${about.length} lines for 20,000 malformed requests:\n${about.slice(0, 5).join('\n')}`,
  );
  let total = 0;
  for (const l of about) {
    const m = /(\d+) more lines? suppressed/.exec(l);
    total += m ? Number(m[1]) : 1;
  }
  assert.is(total, 20_000, `every malformed request is a line or counted in one:\n${about.join('\n')}`);
  assert.ok(
    about.some((l) => /refused a registration/.test(l)) && about.some((l) => /dropped a connection/.test(l)),
    'both kinds are said',
  );
});

// ------------------------------------------------------------------ finding 7: socket mode, hugetlb

test('the verbs socket is 0660 from the moment it exists, whatever the umask (bound in a private directory)', async () => {
  const dir = fs.mkdtempSync(join(tmpdir(), 'verbs-mode-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  // Every mode the path had when the listener changed it (chmod after bind: the window).
  const seen: number[] = [];
  const cjsFs = createRequire(import.meta.url)('node:fs') as typeof fs;
  const chmod = cjsFs.chmodSync;
  cjsFs.chmodSync = (p, m) => {
    if (String(p) === socket) seen.push(fs.lstatSync(p).mode & 0o777);
    return chmod(p, m);
  };
  syncBuiltinESMExports();
  const umask = process.umask(0);
  let vs: ReturnType<Dataplane['serveVerbs']> | null = null;
  try {
    vs = dps.a.serveVerbs({ path: socket });
    seen.push(fs.lstatSync(socket).mode & 0o777);
  } finally {
    process.umask(umask);
    cjsFs.chmodSync = chmod;
    syncBuiltinESMExports();
  }
  try {
    assert.equal(
      seen,
      seen.map(() => 0o660),
      `modes of the socket as the listener made it: ${seen.map((m) => m.toString(8))}`,
    );
    assert.ok(fs.lstatSync(socket).isSocket());
    assert.equal(fs.readdirSync(dir), ['verbs.sock'], 'nothing else left in its directory (the private one is gone)');
    // It serves.
    const c = client(socket);
    assert.is((await c.call(RGV_OP_DEVICES)).status, 0);
    c.close();
    // A second daemon on the same path is refused, the first keeps its socket.
    assert.throws(() => dps.b.serveVerbs({ path: socket }), /another process serves it/);
    assert.ok(fs.lstatSync(socket).isSocket());
  } finally {
    vs?.close();
    await dps.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

const HUGE_DIR = '/sys/kernel/mm/hugepages/hugepages-2048kB/';

test('hugetlb memory is refused with a clear reason (a hole punched in it faults again from a pool that may be empty: SIGBUS)', async () => {
  // One more 2 MiB page in the pool, when this is root, so the registration could be mapped.
  let restore: string | null = null;
  try {
    restore = fs.readFileSync(`${HUGE_DIR}nr_hugepages`, 'utf8').trim();
    fs.writeFileSync(`${HUGE_DIR}nr_hugepages`, String(Number(restore) + 1));
  } catch {
    restore = null;
  }
  try {
    await withDaemon(async ({ socket, dp, logged }) => {
      let mem: ReturnType<typeof core.allocMemory> | null = null;
      try {
        mem = core.allocMemory(2 ** 21, { hugepages: 'require', name: 'verbs-huge' });
      } catch {
        mem = null;
      }
      if (mem === null) skip('no 2 MiB hugepage could be reserved (needs root and a writable nr_hugepages)');
      const c = client(socket);
      try {
        const pd = handleOf(await c.call(RGV_OP_ALLOC_PD));
        const r = await c.call(RGV_OP_REG_MR, regMr(pd, 0x10000000, 2 ** 21), mem!.fd);
        assert.is(r.status, -22, 'EINVAL');
        assert.is((await dp.mrs()).length, 0, 'nothing registered');
        assert.match(logged.join('\n'), /refused a registration: .*hugetlb/);
      } finally {
        c.close();
      }
    });
  } finally {
    if (restore !== null) fs.writeFileSync(`${HUGE_DIR}nr_hugepages`, restore);
  }
});

test.run();
