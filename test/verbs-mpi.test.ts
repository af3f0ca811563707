/**
 * Open MPI over rdma-graph (issue 30.2): Debian's mpirun starts each rank under `rdma-graph exec`
 * (MPMD: the ranks of the first app context on daemon A, those of the second on B), with
 * `--mca pml ucx --mca osc ucx`, UCX restricted to rc_verbs and ud_verbs and Open MPI's BTLs to
 * `self` (no vader shared memory, no TCP): every message between ranks crosses a data plane. The
 * job is native/tools/mpi-check.c, compiled here with mpicc: a ping-pong between the first and the
 * last rank from 8 B to 1 MiB with every byte checked, MPI_Allreduce over all ranks, and MPI_Put
 * and MPI_Get between windows (osc ucx: the window memory registered through UCP), checked.
 * Two ranks (one per daemon), then four (two per daemon), over two daemons run as a user runs them
 * (`rdma-graph start`) joined by memif, the ping-pong's frames counted by both daemons' interface
 * counters; then the same two jobs with the daemons in two network namespaces joined by a veth
 * pair (af_packet), as two hosts would be, the frames counted on the veth ends, and the two-rank
 * job once more with their sockets on UDP segmentation offload (gso: true). Then the 4-rank job
 * over libfabric instead of UCX (`--mca pml cm --mca mtl ofi`, provider "verbs;ofi_rxm": RDM
 * over our RC QPs, through librdmacm), in a namespace whose veth holds the daemons' addresses
 * (libfabric's verbs provider wants them on a kernel interface). Last,
 * bench/mpi.ts's program (native/tools/mpi-pingpong.c) over Open MPI's own TCP: its rows parse as
 * the bench reads them, and each bad argument is refused by name (nothing timed).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { netnsUnavailable } from './helpers-netns.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import {
  compileMpi,
  type Job,
  mpirunOverDaemons,
  mpirunPrefix,
  mpiUnavailable,
  runJob,
  MPI_JOB_RUNS,
  runMpiJob,
  UCX_UD_WIREUP_RACE,
} from './mpi-helpers.ts';
import { withDaemons } from './ucx-helpers.ts';
import { MEMIF_PEER_MTU } from '../drivers/memif.ts';
import { parsePingpong } from '../bench/mpi.ts';

const RDMA_GRAPH = join(import.meta.dirname, '..', 'bin', 'rdma-graph.mjs');

/** The ping-pong's sizes and iterations, as mpi-check.c runs them. */
const SIZES = Array.from({ length: 18 }, (_, i) => 8 << i);
const iterations = (size: number) => (size <= 4096 ? 100 : size <= 65536 ? 20 : 10);
/** The bytes each direction of the ping-pong carries. */
const BYTES = SIZES.reduce((s, n) => s + n * iterations(n), 0);
/** Frames each direction needs at least over the veth (its bytes in 1500-byte frames). */
const MIN_FRAMES = Math.floor(BYTES / 1500);
/** The same over memif, whose link between two daemons takes up to MEMIF_PEER_MTU (drivers/memif.ts). */
const MIN_MEMIF_FRAMES = Math.floor(BYTES / MEMIF_PEER_MTU);

let dir = '';
let program = '';

/** mpi-check compiled with Open MPI's mpicc (once). */
function build(): string {
  const why = mpiUnavailable();
  if (why !== null) skip(why);
  if (program !== '') return program;
  dir = mkdtempSync(join(tmpdir(), 'verbs-mpi-'));
  return (program = compileMpi('mpi-check', dir));
}

/**
 * mpirun with `perSide` ranks on A's socket, then `perSide` on B's; its exit and output (run
 * again while UCX's own UD wireup race ends it: mpi-helpers.ts, runMpiJob).
 */
const mpirun = (sa: string, sb: string, perSide: number, prog: string, device: string): Promise<Job> =>
  runMpiJob(mpirunOverDaemons(sa, sb, perSide, [prog], device), 150_000);

/** The job's output checked: every size ran, every rank's data was right, nothing refused. */
function checkJob(r: Job, ranks: number): void {
  assert.is(r.code, 0, `mpirun exits 0:\n${r.out}`);
  assert.match(r.out, new RegExp(`^mpi-check: ok ${ranks}$`, 'm'), `every rank checked its data:\n${r.out}`);
  // Every rank, B's as well as A's, was kept to the daemons' transports (mpirun's -x reaches
  // only its own app context).
  for (let k = 0; k < ranks; k++)
    assert.match(r.out, new RegExp(`^rank ${k} UCX_TLS=rc_verbs,ud_verbs$`, 'm'), `rank ${k}'s UCX_TLS:\n${r.out}`);
  for (const size of SIZES)
    assert.match(r.out, new RegExp(`^pingpong ${size} ${iterations(size)} `, 'm'), `ping-pong of ${size} B ran`);
  for (const n of [1, 65536]) assert.match(r.out, new RegExp(`^allreduce ${n} ok$`, 'm'), `allreduce of ${n}`);
  assert.match(r.out, /^rma 65536 ok$/m, 'MPI_Put and MPI_Get between windows');
  assert.not.match(r.out, /UCX {2}(ERROR|WARN)|rdma-graph verbs:|FAIL/, `nothing refused or failed:\n${r.out}`);
  const line = (size: number) => r.out.match(new RegExp(`^pingpong ${size} .*$`, 'm'))?.[0];
  console.log(`  ${ranks} ranks: ${line(8)} (us, MB/s); ${line(1 << 20)}`);
}

/** Both sides received at least the ping-pong's `min` frames (`before` and `after`: A's, B's). */
function crossed(before: number[], after: number[], where: string, min: number): void {
  for (const i of [0, 1])
    assert.ok(after[i] - before[i] >= min, `${where} ${'AB'[i]} received ${after[i] - before[i]} frames (>= ${min})`);
}

test('mpirun --mca pml ucx over two daemons joined by memif: 2 ranks (one per daemon) and 4 (two per daemon), ping-pong 8 B..1 MiB and MPI_Allreduce, data checked, through both data planes', async () => {
  const prog = build();
  await withDaemons('memif', async ({ sa, sb, device, frames }) => {
    for (const perSide of [1, 2]) {
      const before = await frames();
      checkJob(await mpirun(sa, sb, perSide, prog, device), 2 * perSide);
      crossed(before, await frames(), "the memif interface's counters of daemon", MIN_MEMIF_FRAMES);
    }
  });
});

test('the same jobs with the two daemons in two network namespaces joined by a veth pair (af_packet), as two hosts', async () => {
  const prog = build();
  const why = netnsUnavailable();
  if (why !== null) skip(why);
  await withDaemons('netns', async ({ sa, sb, device, frames }) => {
    for (const perSide of [1, 2]) {
      const before = await frames();
      checkJob(await mpirun(sa, sb, perSide, prog, device), 2 * perSide);
      crossed(before, await frames(), 'the veth end of daemon', MIN_FRAMES);
    }
  });
});

test("the 2-rank job again with both daemons' af_packet sockets on UDP segmentation offload (gso: true, as bench mpi runs them)", async () => {
  const prog = build();
  const why = netnsUnavailable();
  if (why !== null) skip(why);
  await withDaemons(
    'netns',
    async ({ sa, sb, device, frames }) => {
      const before = await frames();
      checkJob(await mpirun(sa, sb, 1, prog, device), 2);
      const after = await frames();
      // The veth carries a GSO message as one packet: fewer packets than the ping-pong's
      // datagrams, and at least one per message of the sizes below a segment (100 each).
      for (const i of [0, 1]) {
        const n = after[i] - before[i];
        const small = 100 * SIZES.filter((x) => x <= 1024).length;
        assert.ok(
          n >= small && n < MIN_FRAMES,
          `the veth end of daemon ${'AB'[i]} received ${n} packets (${small}..${MIN_FRAMES})`,
        );
      }
    },
    { gso: true },
  );
});

test('Open MPI over libfabric (--mca pml cm --mca mtl ofi, verbs;ofi_rxm over our RC QPs): 4 ranks, two per daemon, data checked, through both data planes', async () => {
  const prog = build();
  const why = netnsUnavailable();
  if (why !== null) skip(why);
  // libfabric's verbs provider offers a device only where its address is on a kernel interface
  // that is up and not loopback (README, libfabric): a veth of a namespace of our own holds the
  // daemons' two addresses, and mpirun and its ranks run in it (the verbs sockets are files).
  const ns = `rgmpi-${process.pid}`;
  const inNs = (...a: string[]) => spawnSync('ip', ['netns', 'exec', ns, ...a], { encoding: 'utf8' });
  assert.is(spawnSync('ip', ['netns', 'add', ns]).status, 0, 'netns add');
  try {
    assert.is(inNs('ip', 'link', 'set', 'lo', 'up').status, 0);
    assert.is(inNs('ip', 'link', 'add', 'rgm0', 'type', 'veth', 'peer', 'name', 'rgm1').status, 0, 'veth');
    for (const l of ['rgm0', 'rgm1']) assert.is(inNs('ip', 'link', 'set', l, 'up').status, 0);
    for (const a of [IP_A, IP_B]) assert.is(inNs('ip', 'addr', 'add', `${a}/32`, 'dev', 'rgm0').status, 0);
    await withDaemons('memif', async ({ sa, sb, frames }) => {
      const rank = (sock: string) => ['-np', '2', process.execPath, RDMA_GRAPH, 'exec', '--socket', sock, '--', prog];
      const cmd = [
        ...['ip', 'netns', 'exec', ns, ...mpirunPrefix()],
        ...['--mca', 'pml', 'cm', '--mca', 'mtl', 'ofi', '--mca', 'mtl_ofi_provider_include', 'verbs;ofi_rxm'],
        ...['--mca', 'osc', 'pt2pt', '--mca', 'btl', 'self', '--mca', 'mpi_yield_when_idle', '1'],
        ...rank(sa),
        ':',
        ...rank(sb),
      ];
      const before = await frames();
      const r = await runJob(cmd, 150_000);
      assert.is(r.code, 0, `mpirun exits 0:\n${r.out}`);
      assert.match(r.out, /^mpi-check: ok 4$/m, `every rank checked its data:\n${r.out}`);
      for (const size of SIZES)
        assert.match(r.out, new RegExp(`^pingpong ${size} ${iterations(size)} `, 'm'), `ping-pong of ${size} B ran`);
      for (const n of [1, 65536]) assert.match(r.out, new RegExp(`^allreduce ${n} ok$`, 'm'), `allreduce of ${n}`);
      assert.match(r.out, /^rma 65536 ok$/m, 'MPI_Put and MPI_Get between windows (osc pt2pt over the MTL)');
      // libfabric probes the veth's IPv6 link-local address too: that line, and nothing else of ours.
      const ours = r.out.split('\n').filter((l) => l.startsWith('rdma-graph verbs:') && !/address family 10/.test(l));
      assert.equal(ours, [], 'nothing refused');
      assert.not.match(r.out, /unreachable|FAIL/, r.out);
      crossed(before, await frames(), "the memif interface's counters of daemon", MIN_MEMIF_FRAMES);
      const line = (size: number) => r.out.match(new RegExp(`^pingpong ${size} .*$`, 'm'))?.[0];
      console.log(`  4 ranks over ofi_rxm: ${line(8)} (us, MB/s); ${line(1 << 20)}`);
    });
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
  }
});

test("UCX's UD wireup race is told apart from every other end of a job: only it is run again", async () => {
  // Its three faces, as jobs here ended with them (UCX 1.13.1's messages, abridged).
  const races = [
    "[vm:20257:a:20309]       ud_ep.c:891  Assertion `ep->dest_ep_id == ctl->conn_rep.src_ep_id' failed: ep=0x55ec [id=2 dest_ep_id=2 flags=0x0] crep [neth->dest=412 dst_ep_id=2 src_ep_id=3]",
    "[vm:21394:a:21444]       ud_ep.c:721  Assertion `((int16_t)((ep->tx.acked_psn) - (ep->tx.psn)) < 0)' failed: ep 0x5589: flags=0x114 acked_psn=3 must be smaller than current_psn=2",
    [
      '[vm:25004:0:25004] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x7fa2d2a4d000)',
      '==== backtrace (tid:  25004) ====',
      ' 0  /lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2dc) [0x7ff57d6bfe9c]',
      ' 1  /lib/x86_64-linux-gnu/libucs.so.0(+0x2908c) [0x7ff57d6c008c]',
      ' 2  /lib/x86_64-linux-gnu/libucs.so.0(+0x2923a) [0x7ff57d6c023a]',
      ' 3  /lib/x86_64-linux-gnu/libucp.so.0(+0xbbe57) [0x7ff57d7aee57]',
      ' 4  /lib/x86_64-linux-gnu/ucx/libuct_ib.so.0(uct_ud_ep_process_rx+0x246) [0x7ff57d3c7046]',
    ].join('\n'),
  ];
  const others = [
    'mpi-check: rank 1: ping-pong of 65536 B: byte 17 is 0x00, not 0x5a',
    '[vm:1:0:1] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x10)\n==== backtrace ====\n 0  /lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2dc)\n 1  ./mpi-check(main+0x40)',
    'rdma-graph verbs: ibv_post_send: the daemon is gone',
  ];
  for (const r of races) assert.ok(UCX_UD_WIREUP_RACE.test(`some output\n${r}\nmore`), r);
  for (const o of others) assert.not.ok(UCX_UD_WIREUP_RACE.test(o), o);
  // runMpiJob: a job that keeps ending with the race runs MPI_JOB_RUNS times; any other failure once.
  const dir = mkdtempSync(join(tmpdir(), 'mpi-race-'));
  try {
    const count = join(dir, 'runs');
    const job = (text: string) => ['sh', '-c', `echo x >> ${count}; printf '%s\\n' "$1"; exit 134`, 'sh', text];
    const runs = () => readFileSync(count, 'utf8').split('\n').length - 1;
    const said: string[] = [];
    const raced = await runMpiJob(job(races[0]), 10_000, (l) => said.push(l));
    assert.is(raced.code, 134);
    assert.is(runs(), MPI_JOB_RUNS, 'the race every time: run MPI_JOB_RUNS times');
    assert.is(said.length, MPI_JOB_RUNS - 1, 'each rerun said');
    assert.match(said[0], /UCX's UD wireup race \(README: UCX 1\.13\) ended run 1 of the job: .*ud_ep\.c:891/);
    rmSync(count);
    said.length = 0;
    const other = await runMpiJob(job(others[0]), 10_000, (l) => said.push(l));
    assert.is(other.code, 134);
    assert.is(runs(), 1, 'another failure: run once');
    assert.is(said.length, 0, 'and nothing said of it');
    // The race once, then success: run twice, the job passes.
    rmSync(count);
    const once = [
      'sh',
      '-c',
      `echo x >> ${count}; [ $(wc -l < ${count}) -gt 1 ] && exit 0; printf '%s\\n' "$1"; exit 134`,
      'sh',
      races[1],
    ];
    const healed = await runMpiJob(once, 10_000, (l) => said.push(l));
    assert.is(healed.code, 0);
    assert.is(runs(), 2, 'the race, then a clean run: run twice');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("bench/mpi.ts's program, mpi-pingpong: its rows parse as the bench reads them; bad arguments are refused by name", async () => {
  build();
  const pp = compileMpi('mpi-pingpong', dir);
  // Two ranks of this machine over Open MPI's own TCP (no data plane: the program and its parser only).
  const job = (args: string[]) =>
    runJob([...mpirunPrefix(), '-np', '2', '--mca', 'pml', 'ob1', '--mca', 'btl', 'tcp,self', pp, ...args], 60_000);
  const r = await job(['0.2', '5', '8', '65536']);
  assert.is(r.code, 0, r.out);
  for (const size of [8, 65536]) {
    const f = parsePingpong(r.out, size);
    assert.ok(f !== null && f.us > 0 && f.mbps > 0, `a row for ${size} B:\n${r.out}`);
  }
  assert.match(r.out, /^mpi-pingpong: ok$/m);
  const refused: [string[], string][] = [
    [['0.2', '5'], 'needs SECONDS, WARMUP and at least one SIZE'],
    [['x', '5', '8'], 'SECONDS must be a number'],
    [['0.2', '-1', '8'], 'WARMUP must be an integer'],
    [['0.2', '5', '0'], 'each SIZE must be an integer'],
  ];
  for (const [args, why] of refused) {
    const bad = await job(args);
    assert.ok(bad.code !== 0, `${args.join(' ')} is refused:\n${bad.out}`);
    assert.ok(bad.out.includes(`mpi-pingpong: ${why}`), `${args.join(' ')}: "${why}":\n${bad.out}`);
  }
});

test.after(() => {
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

test.run();
