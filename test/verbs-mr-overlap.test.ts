/**
 * The same pages registered many times are one memory (issue 28.1): a program (native/tools/
 * verbs-mem.c, unmodified libibverbs calls, the library preloaded) registers overlapping MRs,
 * the same range twice, sub-page malloc buffers and a range over pages it unmapped and mapped
 * again; a peer data plane WRITEs and READs through every rkey, and the program's own view,
 * every other MR's view and the peer's reads must agree. Deregistering one MR leaves the others
 * working; pages registered again after their MR is gone stay where they are. System V shared memory registered stays the segment (the daemon attaches it: REG_SHM),
 * seen by another attachment; a range partly such memory, or a hostile REG_SHM, is refused.
 * Other shared mappings (POSIX shm, a /dev/shm file, a memfd, anonymous shared memory) stay
 * their file, seen by another mapping of it; one the program truncates under the daemon gives
 * zero pages there, not SIGBUS; a disk file, or one the program has no descriptor for, is refused.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { DataplaneApi } from '../dataplane/api.ts';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { loadCore, NATIVE_BUILD_DIR } from '../native/addons.ts';
import {
  RGV_ACCESS_LOCAL_WRITE,
  RGV_MAX_MR_PIECES,
  RGV_OP_ALLOC_PD,
  RGV_OP_REG_MR,
  RGV_OP_REG_SHM,
  rgv_handle,
  rgv_mr,
  rgv_mr_piece,
  rgv_reg_mr,
  rgv_reg_shm,
} from '../dataplane/verbs-server/abi.generated.ts';
import { decode, encode, message, readMessage } from '../dataplane/verbs-server/messages.ts';
import { IP_A, IP_B, twoDataplanes } from './dataplane-helpers.ts';

const MEM = `${NATIVE_BUILD_DIR}verbs-mem`;
const PAGE = 4096;
const TMPFS_MAGIC = 0x01021994;

const ready = () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (!existsSync(MEM)) skip('native/build/Release/verbs-mem was not built (libibverbs-dev)');
};

/** verbs-mem against `socket`: one command, its one-line answer. */
function program(socket: string, wrap: readonly string[] = []) {
  const env = { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket, TMPDIR: dirname(socket) };
  const p = wrap.length ? spawn(wrap[0], [...wrap.slice(1), MEM], { env }) : spawn(MEM, [], { env });
  let out = '',
    err = '';
  const lines: string[] = [];
  p.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      lines.push(out.slice(0, i));
      out = out.slice(i + 1);
    }
  });
  p.stderr.on('data', (d) => (err += d));
  const next = async (what: string) => {
    const until = Date.now() + 10_000;
    while (lines.length === 0) {
      if (Date.now() > until || p.exitCode !== null) throw new Error(`no answer to "${what}"; stderr: ${err}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    return lines.shift() as string;
  };
  return {
    p,
    err: () => err,
    ready: () => next('start'),
    async cmd(c: string): Promise<string> {
      p.stdin.write(`${c}\n`);
      return next(c);
    },
    /** A registration: its rkey (fails the test when refused). */
    async reg(addr: number, len: number): Promise<{ k: number; rkey: number }> {
      const r = await this.cmd(`reg ${addr} ${len}`);
      const m = /^reg (\d+) lkey \d+ rkey (\d+)$/.exec(r);
      assert.ok(m, `reg ${addr} ${len}: ${r} ${err}`);
      return { k: Number(m![1]), rkey: Number(m![2]) };
    },
    async show(addr: number, len: number): Promise<Uint8Array> {
      return Uint8Array.from(Buffer.from(await this.cmd(`show ${addr} ${len}`), 'hex'));
    },
    async map(n: number): Promise<number> {
      const a = Number(/^map (\d+)$/.exec(await this.cmd(`map ${n}`))![1]);
      assert.ok(a > 0 && a % PAGE === 0, 'mmap gave pages');
      return a;
    },
  };
}

/** The peer: a QP on data plane B with a 1 MiB MR of its own, connected to the program's QP. */
async function peer(b: DataplaneApi, prog: ReturnType<typeof program>) {
  const pd = await b.createPd();
  const cq = await b.createCq({ depth: 256 });
  const mr = await b.createMr({ pd: pd.pd, length: 1 << 20, access: ['local-write'] });
  const qp = await b.createQp({ pd: pd.pd, sendCq: cq.cq, recvCq: cq.cq, maxSendWr: 64, maxRecvWr: 8 });
  const m = /^qp (\d+) rts rc 0$/.exec(await prog.cmd(`qp ${IP_B} ${qp.qpn} ${qp.psn}`));
  assert.ok(m, `the program's QP: ${prog.err()}`);
  await b.connect(qp.qpn, { remote: { ip: IP_A, port: Number(m![1]) }, mode: 'manual', remotePsn: qp.psn + 1 });
  let id = 0;
  const one = async (opcode: 'write' | 'read', rkey: number, addr: number, at: number, n: number) => {
    const wrId = `${opcode}${++id}`;
    await b.postSend(qp.qpn, {
      wrId,
      opcode,
      sge: [{ mr: mr.mr, offset: at, length: n }],
      remote: { stag: rkey, offset: addr },
    });
    const r = await b.pollCq(cq.cq, 1, 5000);
    assert.is(r.completions.length, 1, `${opcode} through rkey ${rkey} at ${addr} completes`);
    return r.completions[0];
  };
  return {
    /** WRITE `data` to virtual address `addr` through `rkey`; its completion status. */
    async write(rkey: number, addr: number, data: Uint8Array): Promise<string> {
      await b.writeMr(mr.mr, 0, data);
      return (await one('write', rkey, addr, 0, data.length)).status;
    },
    /** READ `n` bytes at `addr` through `rkey`. */
    async read(rkey: number, addr: number, n: number): Promise<Uint8Array> {
      const c = await one('read', rkey, addr, 65536, n);
      assert.is(c.status, 'success', `READ through rkey ${rkey} at ${addr}`);
      return b.readMr(mr.mr, 65536, n);
    },
  };
}

const pattern = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed * 7 + 1) & 0xff);

async function withProgram(
  body: (prog: ReturnType<typeof program>, pr: Awaited<ReturnType<typeof peer>>) => Promise<void>,
  said?: RegExp,
  wrap: readonly string[] = [],
) {
  const dir = mkdtempSync(join(tmpdir(), 'verbs-mr-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  const prog = program(socket, wrap);
  try {
    assert.is(await prog.ready(), 'ready', prog.err());
    await body(prog, await peer(dps.b, prog));
    if (said === undefined) assert.is(prog.err(), '', 'the library said nothing');
    else assert.match(prog.err(), said, 'the library said why');
  } finally {
    prog.p.kill('SIGKILL');
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

test('overlapping MRs, the same range twice and a range over all of them are one memory: WRITE through any rkey, READ through every other', async () => {
  ready();
  await withProgram(async (prog, pr) => {
    const A = await prog.map(16 * PAGE);
    const mrs = [
      await prog.reg(A + 100, 5000), // pages 0-1
      await prog.reg(A + 3000, 20000), // pages 0-5: over the first and past it
      await prog.reg(A + 100, 5000), // the first again, exactly
      await prog.reg(A + 2 * PAGE + 17, 100), // inside the second only
      await prog.reg(A, 16 * PAGE), // all of them and pages none had
    ];
    // A WRITE through each MR's rkey at a spot inside it: the program sees it, and READs through
    // every other MR covering the spot return it.
    const spots = [A + 200, A + 4 * PAGE + 5, A + 150, A + 2 * PAGE + 20, A + 12 * PAGE + 9];
    const covers = (k: number, at: number) =>
      [
        [A + 100, 5000],
        [A + 3000, 20000],
        [A + 100, 5000],
        [A + 2 * PAGE + 17, 100],
        [A, 16 * PAGE],
      ].map(([s, n]) => at >= s && at + 64 <= s + n)[k];
    for (const [i, at] of spots.entries()) {
      const data = pattern(64, i);
      assert.is(await pr.write(mrs[i].rkey, at, data), 'success', `WRITE through MR ${i}`);
      assert.equal(await prog.show(at, 64), data, `the program sees the WRITE through MR ${i}`);
      for (const [k, m] of mrs.entries())
        if (covers(k, at)) assert.equal(await pr.read(m.rkey, at, 64), data, `READ through MR ${k} of MR ${i}'s WRITE`);
    }
    // The program's own writes are what every MR reads.
    assert.is(await prog.cmd(`fill ${A + 4096 + 50} 100 119`), 'fill 0');
    for (const k of [0, 1, 2, 4])
      assert.equal(await pr.read(mrs[k].rkey, A + 4096 + 50, 100), new Uint8Array(100).fill(119));
    // One MR deregistered: the others are intact, both ways.
    assert.is(await prog.cmd(`dereg ${mrs[1].k}`), `dereg ${mrs[1].k} 0`);
    const after = pattern(64, 99);
    assert.is(await pr.write(mrs[4].rkey, A + 3 * PAGE, after), 'success');
    assert.equal(await prog.show(A + 3 * PAGE, 64), after, 'a WRITE through the big MR after the dereg');
    assert.equal(await pr.read(mrs[3].rkey, A + 2 * PAGE + 20, 64), await prog.show(A + 2 * PAGE + 20, 64));
    assert.is(await pr.write(mrs[0].rkey, A + 1000, after), 'success');
    assert.equal(await prog.show(A + 1000, 64), after, 'and through the first');
  });
});

test('sub-page malloc buffers registered one by one and then together; pages mapped anew under a live MR are shared anew', async () => {
  ready();
  await withProgram(async (prog, pr) => {
    // Small buffers from the allocator share pages with each other (and with its bookkeeping).
    const bufs: number[] = [];
    for (let i = 0; i < 4; i++) bufs.push(Number(/^malloc (\d+)$/.exec(await prog.cmd('malloc 200'))![1]));
    const each = [];
    for (const b of bufs) each.push(await prog.reg(b, 200));
    const lo = Math.min(...bufs),
      hi = Math.max(...bufs) + 200;
    const all = await prog.reg(lo, hi - lo);
    for (const [i, b] of bufs.entries()) {
      const data = pattern(200, 10 + i);
      assert.is(await pr.write(each[i].rkey, b, data), 'success');
      assert.equal(await prog.show(b, 200), data, `malloc buffer ${i}`);
      assert.equal(await pr.read(all.rkey, b, 200), data, `read through the MR over all of them`);
    }
    // A cache's lazy deregistration: the pages are unmapped and new ones mapped at the same
    // address while the old MR is live; a new registration there must share the new pages.
    const C = await prog.map(2 * PAGE);
    const old = await prog.reg(C, 2 * PAGE);
    const before = pattern(64, 42);
    assert.is(await pr.write(old.rkey, C, before), 'success');
    assert.is(await prog.cmd(`remap ${C} ${2 * PAGE} 51`), 'remap 0');
    const fresh = await prog.reg(C + 10, 5000);
    const data = pattern(64, 43);
    assert.is(await pr.write(fresh.rkey, C + 100, data), 'success');
    assert.equal(await prog.show(C + 100, 64), data, 'the WRITE through the new MR reaches the new pages');
    assert.equal(await pr.read(fresh.rkey, C + 4000, 64), new Uint8Array(64).fill(51), 'the new pages are read');
    assert.equal(await pr.read(old.rkey, C, 64), before, 'the old MR keeps the old pages (as a NIC pins them)');
  });
});

test('pages registered, deregistered and registered again stay on their memfd (a registration cache re-registers so); pages given back are let go, and at most 64 idle regions are kept', async () => {
  ready();
  await withProgram(async (prog, pr) => {
    const backing = async (addr: number) => {
      const m = /^backing (\d+) (\d+)$/.exec(await prog.cmd(`backing ${addr}`));
      assert.ok(m, 'backing answered');
      return { ino: Number(m![1]), memfds: Number(m![2]) };
    };
    const A = await prog.map(16 * PAGE);
    const first = await prog.reg(A, 16 * PAGE);
    const on = await backing(A);
    assert.is(await prog.cmd(`dereg ${first.k}`), `dereg ${first.k} 0`);
    // Registered again (UCX's cache does, each time its memory hooks saw our remap): no new
    // memfd, no copy, no remap: the pages are where the first registration put them.
    for (let round = 0; round < 3; round++) {
      const again = await prog.reg(A + PAGE, 8 * PAGE);
      assert.is((await backing(A + PAGE)).ino, on.ino, `round ${round}: the same memfd under the pages`);
      const data = pattern(256, 60 + round);
      assert.is(await pr.write(again.rkey, A + 2 * PAGE + 8, data), 'success');
      assert.equal(await prog.show(A + 2 * PAGE + 8, 256), data, `round ${round}: the WRITE is the program's`);
      assert.is(await prog.cmd(`fill ${A + 5 * PAGE} 64 ${round + 7}`), 'fill 0');
      assert.equal(await pr.read(again.rkey, A + 5 * PAGE, 64), new Uint8Array(64).fill(round + 7), 'and READ back');
      assert.is(await prog.cmd(`dereg ${again.k}`), `dereg ${again.k} 0`);
    }
    assert.is((await backing(A)).memfds, on.memfds, 'one memfd held for the idle pages');
    // The program gives the pages back: the next registration lets the memfd (and its memory) go.
    assert.is(await prog.cmd(`unmap ${A} ${16 * PAGE}`), 'unmap 0');
    const B = await prog.map(PAGE);
    const other = await prog.reg(B, PAGE);
    assert.is((await backing(B)).memfds, on.memfds, "the unmapped pages' memfd closed, B's opened");
    assert.is(await prog.cmd(`dereg ${other.k}`), `dereg ${other.k} 0`);
    // Many buffers registered once each: the oldest idle ones go beyond 64.
    const bufs: number[] = [];
    for (let i = 0; i < 80; i++) {
      const b = await prog.map(PAGE);
      bufs.push(b);
      const r = await prog.reg(b, PAGE);
      assert.is(await prog.cmd(`dereg ${r.k}`), `dereg ${r.k} 0`);
    }
    const held = (await backing(B)).memfds;
    assert.ok(held <= 64 && held >= 60, `at most 64 idle memfds held (${held})`);
    const oldest = (await backing(bufs[0])).ino,
      newest = (await backing(bufs[79])).ino;
    const r0 = await prog.reg(bufs[0], PAGE),
      r79 = await prog.reg(bufs[79], PAGE);
    assert.is.not((await backing(bufs[0])).ino, oldest, 'the oldest idle pages moved again');
    assert.is((await backing(bufs[79])).ino, newest, 'the newest stayed');
    const data = pattern(100, 99);
    assert.is(await pr.write(r0.rkey, bufs[0], data), 'success');
    assert.equal(await prog.show(bufs[0], 100), data, 'the moved pages work');
    assert.is(await pr.write(r79.rkey, bufs[79] + 1000, data), 'success');
    assert.equal(await prog.show(bufs[79] + 1000, 100), data);
  });
});

test('idle regions hold at most 256 MiB: of two 160 MiB buffers registered and deregistered in turn, the older one moves again at its next registration, the newer stays', async () => {
  ready();
  await withProgram(async (prog, pr) => {
    const ino = async (addr: number) => Number(/^backing (\d+) \d+$/.exec(await prog.cmd(`backing ${addr}`))![1]);
    const N = 160 << 20;
    const A = await prog.map(N),
      B = await prog.map(N);
    for (const x of [A, B]) {
      const r = await prog.reg(x, N);
      assert.is(await prog.cmd(`dereg ${r.k}`), `dereg ${r.k} 0`);
    }
    const a0 = await ino(A),
      b0 = await ino(B);
    const rb = await prog.reg(B, N);
    assert.is(await ino(B), b0, 'the newer (160 MiB idle) stayed');
    const ra = await prog.reg(A, N);
    assert.is.not(await ino(A), a0, 'the older went beyond 256 MiB: moved again');
    const data = pattern(256, 5);
    assert.is(await pr.write(ra.rkey, A + N - 4096, data), 'success');
    assert.equal(await prog.show(A + N - 4096, 256), data);
    assert.is(await pr.write(rb.rkey, B + 12345, data), 'success');
    assert.equal(await prog.show(B + 12345, 256), data);
  });
});

test('memory the program does not have is refused with EFAULT, and the process lives on', async () => {
  ready();
  await withProgram(async (prog) => {
    const C = await prog.map(4 * PAGE);
    // A page in the middle unmapped: a registration over it has nothing to share there.
    assert.is(await prog.cmd(`unmap ${C + PAGE} ${PAGE}`), 'unmap 0');
    assert.match(await prog.cmd(`reg ${C} ${4 * PAGE}`), /^reg \d+ errno 14$/, 'EFAULT, as a NIC says');
    // Its neighbours still register (the refused one left nothing behind).
    await prog.reg(C, PAGE);
    await prog.reg(C + 2 * PAGE, 2 * PAGE);
    assert.is(await prog.cmd(`map 0`), 'map 0', 'still answering');
  });
});

test("another thread's writes while its pages are registered are not lost (UCX's async thread writes them so)", async () => {
  ready();
  await withProgram(async (prog) => {
    // A thread writes 64 KiB of fresh pages without pause while the main thread registers and
    // deregisters them 300 times, each registration moving them onto a new memfd. Before each
    // word is written again the writer checks its last write is there (and all at the end).
    const r = await prog.cmd('race 300');
    const m = /^race (\d+) (\d+)$/.exec(r);
    assert.ok(m, r);
    assert.ok(Number(m[2]) > 100_000, `the writer ran meanwhile (${m[2]} writes)`);
    assert.is(Number(m[1]), 0, `writes lost: ${m[1]} of ${m[2]}`);
  });
});

test('System V shared memory (UCX allocates its buffers so) stays the segment when registered: a WRITE through the MR is seen by another attachment, the program writes are READ back', async () => {
  ready();
  await withProgram(async (prog, pr) => {
    const m = /^shm (\d+) (\d+)$/.exec(await prog.cmd(`shm ${16 * PAGE}`));
    assert.ok(m !== null && Number(m[1]) > 0, 'a segment attached');
    const [S, id] = [Number(m![1]), Number(m![2])];
    await prog.cmd(`fill ${S} ${16 * PAGE} 7`);
    const { rkey } = await prog.reg(S + 100, 5000);
    // The daemon attached the segment itself: the program's attachment and the daemon's.
    assert.is(await prog.cmd(`nattch ${id}`), 'nattch 2', 'the segment lives on, attached by the daemon too');
    const data = pattern(4000, 9);
    assert.is(await pr.write(rkey, S + 200, data), 'success');
    assert.equal(await prog.show(S + 200, 4000), data, 'the program sees the WRITE');
    const peek = Uint8Array.from(Buffer.from(await prog.cmd(`peek ${id} 200 4000`), 'hex'));
    assert.equal(peek, data, 'so does another attachment of the segment (what another process sharing it sees)');
    await prog.cmd(`fill ${S + 4200} 64 90`);
    assert.equal(await pr.read(rkey, S + 4200, 64), new Uint8Array(64).fill(90), "the peer READs the program's write");
    assert.is(await prog.cmd(`dereg 0`), 'dereg 0 0');
    // The whole segment again, from its first page: one more registration over the same pages.
    const again = await prog.reg(S, 16 * PAGE);
    assert.is(await pr.write(again.rkey, S + 8 * PAGE, data), 'success');
    const peek2 = Uint8Array.from(Buffer.from(await prog.cmd(`peek ${id} ${8 * PAGE} 4000`), 'hex'));
    assert.equal(peek2, data, 'through the second registration as well');
  });
});

/** The other mapping's bytes (what another process sharing the file sees). */
async function other(prog: ReturnType<typeof program>, at: number, off: number, n: number): Promise<Uint8Array> {
  const r = await prog.cmd(`other ${at} ${off} ${n}`);
  assert.match(r, /^[0-9a-f]*$/, `other: ${r}`);
  return Uint8Array.from(Buffer.from(r, 'hex'));
}

const root = process.getuid?.() === 0;
for (const kind of ['posix', 'file', 'memfd', 'anon'] as const)
  test(`a shared mapping (${kind}) stays shared when registered: a WRITE through the MR is seen through another mapping of the file, and that mapping's writes are READ back; registered twice, one memory`, async () => {
    ready();
    if (kind === 'anon' && !root)
      skip('anonymous shared memory is reached only through /proc/self/map_files, which needs CAP_SYS_ADMIN');
    await withProgram(async (prog, pr) => {
      const m = /^share (\d+)$/.exec(await prog.cmd(`share ${kind} ${16 * PAGE}`));
      assert.ok(m, `shared memory made (${kind})`);
      const S = Number(m![1]);
      await prog.cmd(`fill ${S} ${16 * PAGE} 7`);
      const { rkey } = await prog.reg(S + 100, 5 * PAGE);
      const data = pattern(4000, 3);
      assert.is(await pr.write(rkey, S + 200, data), 'success');
      assert.equal(await prog.show(S + 200, 4000), data, 'the program sees the WRITE');
      assert.equal(await other(prog, S, 200, 4000), data, 'so does another mapping of the same file');
      assert.is(await prog.cmd(`otherfill ${S} ${3 * PAGE} 64 90`), 'otherfill 0');
      assert.equal(
        await pr.read(rkey, S + 3 * PAGE, 64),
        new Uint8Array(64).fill(90),
        "the peer READs the other mapping's write",
      );
      // Over the first registration and past it: the same file, the same pages.
      const again = await prog.reg(S, 16 * PAGE);
      const more = pattern(3000, 5);
      assert.is(await pr.write(again.rkey, S + 2 * PAGE, more), 'success');
      assert.equal(await other(prog, S, 2 * PAGE, 3000), more, 'through the second registration as well');
      assert.equal(await pr.read(rkey, S + 2 * PAGE, 3000), more, 'and the first MR reads it');
      assert.is(await prog.cmd('dereg 0'), 'dereg 0 0');
      assert.is(await pr.write(again.rkey, S + 12 * PAGE, data), 'success');
      assert.equal(await other(prog, S, 12 * PAGE, 4000), data, 'the second MR after the first is gone');
    });
  });

test('a shared file shrunk under its registration: the daemon survives (a zero page where the bytes were, counted), the MR reads zeros, other registrations work', async () => {
  ready();
  const core = loadCore();
  const before = core.verbsMemoryFaults();
  await withProgram(async (prog, pr) => {
    const S = Number(/^share (\d+)$/.exec(await prog.cmd(`share posix ${4 * PAGE}`))![1]);
    const { rkey } = await prog.reg(S, 4 * PAGE);
    assert.is(await prog.cmd(`shrink ${S}`), 'shrink 0', 'the program truncates the file to nothing');
    // The daemon places this WRITE past the file's end: SIGBUS without the guard (this process).
    assert.is(await pr.write(rkey, S + PAGE, pattern(2000, 1)), 'success', 'the WRITE is taken');
    assert.ok(core.verbsMemoryFaults() > before, 'the daemon met the shrunk file and mapped a zero page');
    const back = await pr.read(rkey, S + 2 * PAGE, 64);
    assert.equal(back, new Uint8Array(64), 'a page of the shrunk file reads as zeros');
    const A = await prog.map(2 * PAGE);
    const { rkey: r2 } = await prog.reg(A, 2 * PAGE);
    const data = pattern(1000, 8);
    assert.is(await pr.write(r2, A + 10, data), 'success');
    assert.equal(await prog.show(A + 10, 1000), data, 'a new registration works');
  });
});

test('a shared mapping of a disk file is refused (EINVAL) with a line: the daemon would wait on its page faults', async () => {
  ready();
  if (statfsSync(tmpdir()).type === TMPFS_MAGIC) skip(`${tmpdir()} is tmpfs here: no disk file to map`);
  await withProgram(async (prog) => {
    const S = Number(/^share (\d+)$/.exec(await prog.cmd(`share disk ${2 * PAGE}`))![1]);
    assert.match(await prog.cmd(`reg ${S} ${2 * PAGE}`), /^reg \d+ errno 22$/, 'EINVAL');
    await prog.cmd(`fill ${S} 64 33`);
    assert.equal(
      await other(prog, S, 0, 64),
      new Uint8Array(64).fill(33),
      'still the file: another mapping sees the write',
    );
  }, /ibv_reg_mr: \[0x[0-9a-f]+, 0x[0-9a-f]+\) is a shared mapping of \/.*verbs-mem-\w+, a file on a disk filesystem: refused \(EINVAL\)/);
});

test('a shared mapping the program has no descriptor for (anonymous, without CAP_SYS_ADMIN) is refused (EINVAL) with a line, not moved off its memory', async () => {
  ready();
  const setpriv = spawnSync('setpriv', ['--version']);
  if (setpriv.error) skip('setpriv is not installed (util-linux)');
  if (!root) skip('needs root to drop the capabilities in question (an unprivileged program lacks them anyway)');
  await withProgram(
    async (prog) => {
      const S = Number(/^share (\d+)$/.exec(await prog.cmd(`share anon ${2 * PAGE}`))![1]);
      assert.match(await prog.cmd(`reg ${S} ${2 * PAGE}`), /^reg \d+ errno 22$/, 'EINVAL');
      const A = await prog.map(PAGE);
      await prog.reg(A, PAGE); // private memory still registers
    },
    /ibv_reg_mr: \[0x[0-9a-f]+, 0x[0-9a-f]+\) is a shared mapping of \/dev\/zero \(deleted\), and this process has no read-write descriptor on it/,
    ['setpriv', '--bounding-set=-all', '--inh-caps=-all', '--'],
  );
});

test('a range partly System V shared memory is refused (EINVAL) with a line, not moved off the segment', async () => {
  ready();
  await withProgram(async (prog) => {
    const m = /^shm (\d+) (\d+)$/.exec(await prog.cmd(`shm ${PAGE}`));
    const id = Number(m![2]);
    const A = await prog.map(3 * PAGE);
    assert.is(await prog.cmd(`shmat ${A + PAGE} ${id}`), 'shmat 0', 'the segment attached between two anonymous pages');
    assert.match(await prog.cmd(`reg ${A} ${3 * PAGE}`), /^reg \d+ errno 22$/, 'EINVAL');
    assert.is(await prog.cmd(`nattch ${id}`), 'nattch 2', 'both attachments are still the segment');
    await prog.reg(A + PAGE, PAGE); // the segment's page alone registers
  }, /ibv_reg_mr: \[0x[0-9a-f]+, 0x[0-9a-f]+\) is partly System V shared memory: refused \(EINVAL\)/);
});

test('REG_SHM from a hostile program: a segment that does not exist, a range past its end: refused (EINVAL), nothing registered', async () => {
  if (!existsSync(VERBS_LIBRARY)) skip('the verbs library was not built (libibverbs-dev)');
  const mk = spawnSync('ipcmk', ['-M', String(2 * PAGE)], { encoding: 'utf8' });
  if (mk.error) skip('ipcmk is not installed (util-linux)');
  const id = Number(/(\d+)\s*$/.exec(mk.stdout)?.[1]);
  assert.ok(Number.isInteger(id), `ipcmk made a segment: ${mk.stdout}`);
  const dir = mkdtempSync(join(tmpdir(), 'verbs-mr-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const logged: string[] = [];
  const vs = dps.a.serveVerbs({ path: socket, log: (_l, msg) => logged.push(msg) });
  const core = loadCore();
  const c = core.memifRawConnect(socket);
  const reply = async () => {
    for (let k = 0; k < 300; k++) {
      const m = core.seqpacketRecv(c);
      const r = m !== null && 'data' in m ? readMessage(m.data) : null;
      if (r !== null) return r;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('no reply');
  };
  try {
    assert.is(core.seqpacketSend(c, message(RGV_OP_ALLOC_PD, 1)), 0);
    const pd = decode(rgv_handle, (await reply()).body).handle;
    const reg = (shmid: number, offset: number, span: number) =>
      encode(rgv_reg_shm, {
        pd,
        access: RGV_ACCESS_LOCAL_WRITE,
        span,
        start: 0x30000000,
        addr: 0x30000000,
        length: span,
        offset,
        shmid,
      });
    for (const [what, body] of [
      ['no such segment', reg(0x7ffffff0, 0, PAGE)],
      ['past its end', reg(id, PAGE, 2 * PAGE)],
      ['an offset not a page multiple', reg(id, 100, PAGE)],
    ] as const) {
      assert.is(core.seqpacketSend(c, message(RGV_OP_REG_SHM, 2, body)), 0);
      assert.is((await reply()).status, -22, `${what}: EINVAL`);
    }
    assert.is((await dps.a.mrs()).length, 0, 'nothing was registered');
    assert.ok(
      logged.some((l) => /refused a registration: mapVerbsShm: segment \d+: Invalid argument/.test(l)) &&
        logged.some((l) => /mapVerbsShm: \[4096, 12288\) is not in segment/.test(l)),
      `the daemon said why:\n${logged.join('\n')}`,
    );
    // The segment itself, whole: registered (root may; the daemon attaches it).
    assert.is(core.seqpacketSend(c, message(RGV_OP_REG_SHM, 3, reg(id, 0, 2 * PAGE))), 0);
    const ok = await reply();
    assert.is(ok.status, 0, 'the whole segment registers');
    assert.ok(decode(rgv_mr, ok.body).stag > 0, 'with its key');
    assert.is((await dps.a.mrs()).length, 1, 'one MR');
  } finally {
    core.closeFd(c);
    vs.close();
    await dps.close();
    spawnSync('ipcrm', ['-m', String(id)]);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('REG_MR pieces from a hostile program: every inconsistency refused (EINVAL) or the connection dropped, nothing mapped wrong', async () => {
  if (!existsSync(VERBS_LIBRARY)) skip('the verbs library was not built (libibverbs-dev)');
  const dir = mkdtempSync(join(tmpdir(), 'verbs-mr-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  const core = loadCore();
  const reply = async (fd: number) => {
    for (let k = 0; k < 300; k++) {
      const m = core.seqpacketRecv(fd);
      if (m !== null && 'eof' in m) return null;
      const r = m !== null && 'data' in m ? readMessage(m.data) : null;
      if (r !== null) return r;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('no reply');
  };
  // Two sealed memfds of 4 pages; the first's bytes 1, the second's 2.
  const m1 = core.allocMemory(4 * PAGE, { name: 'mr-piece-1', hugepages: 'never' });
  const m2 = core.allocMemory(4 * PAGE, { name: 'mr-piece-2', hugepages: 'never' });
  new Uint8Array(m1.buffer).fill(1);
  new Uint8Array(m2.buffer).fill(2);
  let c = core.memifRawConnect(socket);
  try {
    assert.is(core.seqpacketSend(c, message(RGV_OP_ALLOC_PD, 1)), 0);
    const pd = decode(rgv_handle, (await reply(c))!.body).handle;
    const base = 0x20000000;
    const reg = (span: number, pieces: [number, number, number][], count = pieces.length) => {
      const head = encode(rgv_reg_mr, {
        pd,
        access: RGV_ACCESS_LOCAL_WRITE,
        span,
        start: base,
        addr: base + 10,
        length: span - 20,
        pieces: count,
      });
      const recs = pieces.map(([fd, offset, length]) => encode(rgv_mr_piece, { fd, offset, length }));
      return Uint8Array.from([...head, ...recs.flatMap((r) => [...r])]);
    };
    const cases: [string, Uint8Array, number[]][] = [
      [
        'pieces longer than the span',
        reg(2 * PAGE, [
          [0, 0, PAGE],
          [1, 0, 2 * PAGE],
        ]),
        [m1.fd, m2.fd],
      ],
      [
        'pieces shorter than the span',
        reg(3 * PAGE, [
          [0, 0, PAGE],
          [1, 0, PAGE],
        ]),
        [m1.fd, m2.fd],
      ],
      [
        'a piece naming an fd not passed',
        reg(2 * PAGE, [
          [0, 0, PAGE],
          [1, 0, PAGE],
        ]),
        [m1.fd],
      ],
      ['an fd passed and in no piece', reg(PAGE, [[0, 0, PAGE]]), [m1.fd, m2.fd]],
      ['a piece past its memfd', reg(2 * PAGE, [[0, 3 * PAGE, 2 * PAGE]]), [m1.fd]],
      ['an offset off the page size', reg(PAGE, [[0, 100, PAGE]]), [m1.fd]],
      [
        'a length off the page size',
        reg(2 * PAGE, [
          [0, 0, PAGE + 100],
          [1, 0, PAGE - 100],
        ]),
        [m1.fd, m2.fd],
      ],
      ['no pieces and two fds', reg(PAGE, []), [m1.fd, m2.fd]],
      [
        `${RGV_MAX_MR_PIECES + 1} pieces`,
        reg(
          (RGV_MAX_MR_PIECES + 1) * PAGE,
          Array.from({ length: RGV_MAX_MR_PIECES + 1 }, () => [0, 0, PAGE] as [number, number, number]),
        ),
        [m1.fd],
      ],
    ];
    for (const [what, body, fds] of cases) {
      assert.is(core.seqpacketSend(c, message(RGV_OP_REG_MR, 2, body), fds), 0, what);
      const r = await reply(c);
      assert.ok(r !== null, `${what}: answered, not dropped`);
      assert.is(r!.status, -22, `${what}: EINVAL`);
    }
    assert.is((await dps.a.mrs()).length, 0, 'nothing registered');
    // A valid one: the second memfd's page 1, then the first's pages 2-3, in that order.
    const ok = reg(3 * PAGE, [
      [0, PAGE, PAGE],
      [1, 2 * PAGE, 2 * PAGE],
    ]);
    assert.is(core.seqpacketSend(c, message(RGV_OP_REG_MR, 3, ok), [m2.fd, m1.fd]), 0);
    const r = await reply(c);
    assert.is(r?.status, 0, 'the pieces registered');
    const mr = decode(rgv_mr, r!.body).handle;
    const seen = await dps.a.readMr(mr, 0, 3 * PAGE - 20);
    assert.equal([seen[0], seen[PAGE - 11], seen[PAGE - 10], seen[3 * PAGE - 21]], [2, 2, 1, 1], 'the pieces in order');
    // A body that does not hold the records it announces: the connection is dropped.
    assert.is(core.seqpacketSend(c, message(RGV_OP_REG_MR, 4, reg(PAGE, [[0, 0, PAGE]], 3)), [m1.fd]), 0);
    assert.is(await reply(c), null, 'dropped');
    core.closeFd(c);
    c = core.memifRawConnect(socket);
    assert.is(core.seqpacketSend(c, message(RGV_OP_ALLOC_PD, 5)), 0);
    assert.is((await reply(c))?.status, 0, 'the daemon serves on');
  } finally {
    core.closeFd(c);
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** pyverbs registering bytearrays (Python's own small-object allocator: sub-page, shared arenas). */
const PYVERBS = String.raw`
import ctypes, json, sys
import pyverbs.device as d, pyverbs.pd as p, pyverbs.mr as m, pyverbs.enums as e
ctx = d.Context(name=d.get_device_list()[0].name.decode())
pd = p.PD(ctx)
acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
bufs = [bytearray(300) for _ in range(6)]
addr = [ctypes.addressof((ctypes.c_char * 300).from_buffer(b)) for b in bufs]
lo, hi = min(addr), max(addr) + 300
regs = [(addr[0], 300), (addr[0], 300), (addr[1], 300), (addr[0] + 100, 150), (lo, hi - lo)]
mrs = [m.MR(pd, n, acc, address=a) for a, n in regs]
print(json.dumps({'mrs': [{'rkey': r.rkey, 'addr': a, 'len': n} for r, (a, n) in zip(mrs, regs)]}), flush=True)
for line in sys.stdin:
    w = line.split()
    if w[0] == 'show':
        print(ctypes.string_at(int(w[1]), int(w[2])).hex(), flush=True)
    elif w[0] == 'fill':
        ctypes.memset(int(w[1]), int(w[3]), int(w[2])); print('fill 0', flush=True)
    elif w[0] == 'dereg':
        mrs[int(w[1])].close(); print('dereg 0', flush=True)
`;

test("Python's allocator: pyverbs registers bytearrays twice, inside each other and over several; each MR's writes are every other's and the program's", async () => {
  ready();
  if (spawnSync('/usr/bin/python3', ['-c', 'import pyverbs.mr']).status !== 0)
    skip('python3-pyverbs is not installed (apt-get install python3-pyverbs)');
  const dir = mkdtempSync(join(tmpdir(), 'verbs-mr-'));
  const socket = join(dir, 'verbs.sock');
  const dps = await twoDataplanes();
  const vs = dps.a.serveVerbs({ path: socket });
  const py = spawn('/usr/bin/python3', ['-c', PYVERBS], {
    env: { ...process.env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket },
  });
  let out = '',
    err = '';
  py.stdout.on('data', (d) => (out += d));
  py.stderr.on('data', (d) => (err += d));
  const line = async () => {
    const until = Date.now() + 10_000;
    while (!out.includes('\n')) {
      if (Date.now() > until || py.exitCode !== null) throw new Error(`python: ${err}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    const i = out.indexOf('\n');
    const l = out.slice(0, i);
    out = out.slice(i + 1);
    return l;
  };
  const cmd = async (c: string) => {
    py.stdin.write(`${c}\n`);
    return line();
  };
  try {
    const { mrs } = JSON.parse(await line()) as { mrs: { rkey: number; addr: number; len: number }[] };
    const all = await dps.a.mrs();
    // The daemon's view of each MR (what DDP places into and READs read), found by its STag.
    const daemon = mrs.map((x) => all.find((v) => v.stag === x.rkey)!.mr);
    const covering = (at: number, n: number) =>
      mrs.map((x, k) => (at >= x.addr && at + n <= x.addr + x.len ? k : -1)).filter((k) => k >= 0);
    for (const [i, x] of mrs.entries()) {
      const at = x.addr + Math.floor(x.len / 2) - 8;
      const data = pattern(16, 60 + i);
      await dps.a.writeMr(daemon[i], at - x.addr, data);
      assert.equal(Buffer.from(await cmd(`show ${at} 16`), 'hex'), Buffer.from(data), `Python sees MR ${i}'s write`);
      for (const k of covering(at, 16))
        assert.equal(await dps.a.readMr(daemon[k], at - mrs[k].addr, 16), data, `MR ${k} reads MR ${i}'s write`);
    }
    // Python writes; every MR over the bytes reads it; one MR closed, the others intact.
    const at = mrs[0].addr + 120;
    assert.is(await cmd(`fill ${at} 40 201`), 'fill 0');
    const ks = covering(at, 40);
    assert.ok(ks.length >= 3, 'several MRs cover it');
    for (const k of ks) assert.equal(await dps.a.readMr(daemon[k], at - mrs[k].addr, 40), new Uint8Array(40).fill(201));
    assert.is(await cmd('dereg 1'), 'dereg 0');
    await dps.a.writeMr(daemon[0], 5, Uint8Array.of(9, 8, 7));
    assert.is(await cmd(`show ${mrs[0].addr + 5} 3`), '090807', 'MR 0 after MR 1 (the same bytes) was closed');
    assert.is(err, '', 'nothing on stderr');
  } finally {
    py.kill('SIGKILL');
    vs.close();
    await dps.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
