/**
 * What RDMA software looks for before it calls a verb (issue 28, point 4), inside programs run
 * with `rdma-graph exec`: /dev/infiniband/uverbsN as a character device, /sys/class/infiniband
 * and /sys/class/infiniband_verbs as the kernel has them (native/verbs-lib/probes.c), so that
 * UCX lists rc_verbs on our device; the same commands outside see the host's own paths. Against
 * the two daemons the README starts (its probe block run as written), and `ibv_devinfo -v`,
 * `rdmactl show device` and GET /v1/devices compared field by field. Then the probe paths'
 * edges from a Python program: long paths, "..", writes, fork, the private tree removed at exit
 * and after a kill.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import type { DeviceView } from '../dataplane/views.ts';
import { bash, blocks, type Daemon, daemon, PROBES, README, ROOT } from './readme-helpers.ts';

let a: Daemon | null = null;
let b: Daemon | null = null;

test.before(async () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync('ibv_devinfo', ['--help']).error) skip('ibverbs-utils is not installed (ibv_devinfo)');
  if (spawnSync('ucx_info', ['-v']).error) skip('ucx-utils is not installed (ucx_info)');
  if (spawnSync('python3', ['-V']).error) skip('python3 is not installed');
  // The README's two daemons, as it starts them (the embedded default and the peer).
  a = await daemon([]);
  b = await daemon(['--config', 'config/examples/peer.yaml']);
  const up = bash(
    'for i in $(seq 50); do node bin/rdmactl.mjs show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1',
  );
  assert.is(up.code, 0, `memif link up:\n${up.out}`);
});

test.after(async () => {
  for (const d of [a, b]) {
    if (d === null) continue;
    d.proc.kill('SIGTERM');
    assert.is(await d.exit, 0, d.out);
  }
});

test("the README's probe block as written: ls, cat and ucx_info see rg_memif0 inside exec; outside, the host's paths", () => {
  const block = blocks(README).find((x) => x.startsWith(PROBES));
  assert.ok(block, 'the README shows the probe block');
  const r = bash(block);
  assert.is(r.code, 0, r.out);
  assert.match(r.out, /^crw-rw-rw- 1 \S+ \S+ 231, 192 .* uverbs0$/m, 'a character device, 231:192');
  assert.not.match(r.out, /rdma_cm/, 'no rdma_cm (not supported)');
  assert.match(r.out, /^\/sys\/class\/infiniband:\n(total \d+\n)?d\S+ .* rg_memif0$/m, 'the device directory');
  assert.match(r.out, /^RoCE v2$/m, 'the GID type');
  assert.match(r.out, /Transport: rc_verbs\n#\s+Device: rg_memif0:1$/m, 'UCX lists rc_verbs on the device');
  // The same commands outside exec: the host's own paths (none here), nothing of ours.
  const out = bash(
    'ls -l /dev/infiniband /sys/class/infiniband; cat /sys/class/infiniband/rg_memif0/ports/1/gid_attrs/types/0',
  );
  assert.not.match(out.out, /rg_memif0\n|RoCE v2|231, 192/, out.out);
  if (!existsSync('/dev/infiniband')) {
    assert.is.not(out.code, 0);
    assert.match(out.out, /cannot access '\/dev\/infiniband': No such file or directory/);
  }
  const ucx = bash('ucx_info -d');
  assert.not.match(ucx.out, /rg_memif0/, 'UCX outside exec knows nothing of rg_memif0');
});

/** `ibv_devinfo -v` / `rdmactl show device` text: hca_id -> (field -> its line), port fields as `port.NAME`. */
function fields(text: string): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  let cur: Map<string, string> | null = null;
  for (const line of text.split('\n')) {
    const h = /^hca_id:\t(\S+)$/.exec(line);
    if (h) out.set(h[1], (cur = new Map([['hca_id', line]])));
    const dev = /^\t([a-z_]+):\t/.exec(line);
    if (cur && dev && !cur.has(dev[1])) cur.set(dev[1], line);
    const port = /^\t\t\t([a-z_]+|GID\[\s*\d+\]):\t/.exec(line);
    if (cur && port && !cur.has(`port.${port[1]}`)) cur.set(`port.${port[1]}`, line);
  }
  return out;
}

/** What both must show, the same: ibv_devinfo -v's fields for what the daemon decides. */
const SHARED = [
  'hca_id',
  'transport',
  'fw_ver',
  'node_guid',
  'sys_image_guid',
  'vendor_id',
  'vendor_part_id',
  'hw_ver',
  'phys_port_cnt',
  'max_mr_size',
  'page_size_cap',
  'max_qp',
  'max_qp_wr',
  'max_sge',
  'max_sge_rd',
  'max_cq',
  'max_cqe',
  'max_mr',
  'max_pd',
  'max_qp_rd_atom',
  'max_res_rd_atom',
  'max_qp_init_rd_atom',
  'atomic_cap',
  'max_srq',
  'max_srq_wr',
  'max_srq_sge',
  'max_pkeys',
  'port.state',
  'port.max_mtu',
  'port.active_mtu',
  'port.link_layer',
  'port.max_msg_sz',
  'port.pkey_tbl_len',
  'port.gid_tbl_len',
  'port.GID[  0]',
];

test('ibv_devinfo -v, rdmactl show device and GET /v1/devices: the same devices, names and figures, field by field', async () => {
  const info = bash('node bin/rdma-graph.mjs exec -- ibv_devinfo -v');
  assert.is(info.code, 0, info.out);
  const ctl = bash('node bin/rdmactl.mjs show device');
  assert.is(ctl.code, 0, ctl.out);
  const verbs = fields(info.out);
  const rdmactl = fields(ctl.out);
  assert.equal([...rdmactl.keys()], [...verbs.keys()], 'the same devices');
  assert.equal([...verbs.keys()], ['rg_memif0']);
  for (const [name, v] of verbs) {
    const c = rdmactl.get(name)!;
    for (const k of SHARED) {
      assert.ok(v.has(k), `ibv_devinfo -v shows ${k}:\n${info.out}`);
      assert.is(c.get(k), v.get(k), `${name} ${k}: rdmactl's line is ibv_devinfo's`);
    }
    // Any other field both show is the same too.
    for (const [k, line] of c) if (v.has(k)) assert.is(line, v.get(k), `${name} ${k}`);
  }
  // The REST view: the same figures, as ibv_devinfo prints them.
  const rest = (await (await fetch('http://127.0.0.1:7070/v1/devices')).json()) as DeviceView[];
  assert.equal(
    rest.map((d) => d.name),
    [...verbs.keys()],
  );
  const hex = (n: number, w = 0) => `0x${n.toString(16).padStart(w, '0')}`;
  const mtu = (bytes: number) => `${bytes} (${Math.log2(bytes) - 7})`;
  for (const d of rest) {
    const v = verbs.get(d.name)!;
    const value = (k: string) => v.get(k)?.split('\t').pop();
    const p = d.ports[0];
    const want: [string, string | number][] = [
      ['transport', `${d.transport} (0)`],
      ['fw_ver', d.fwVer],
      ['node_guid', d.nodeGuid],
      ['sys_image_guid', d.sysImageGuid],
      ['vendor_id', hex(d.vendorId, 4)],
      ['vendor_part_id', d.vendorPartId],
      ['hw_ver', hex(d.hwVer)],
      ['phys_port_cnt', d.ports.length],
      ['max_mr_size', hex(d.maxMrSize)],
      ['page_size_cap', hex(d.pageSizeCap)],
      ['max_qp', d.maxQp],
      ['max_qp_wr', d.maxQpWr],
      ['max_sge', d.maxSge],
      ['max_sge_rd', d.maxSgeRd],
      ['max_cq', d.maxCq],
      ['max_cqe', d.maxCqe],
      ['max_mr', d.maxMr],
      ['max_pd', d.maxPd],
      ['max_qp_rd_atom', d.maxQpRdAtom],
      ['max_res_rd_atom', d.maxResRdAtom],
      ['max_qp_init_rd_atom', d.maxQpInitRdAtom],
      ['max_srq', d.maxSrq],
      ['max_srq_wr', d.maxSrqWr],
      ['max_srq_sge', d.maxSrqSge],
      ['port.state', p.state === 'active' ? 'PORT_ACTIVE (4)' : 'PORT_DOWN (1)'],
      ['port.max_mtu', mtu(p.maxMtu)],
      ['port.active_mtu', mtu(p.activeMtu)],
      ['port.link_layer', p.linkLayer],
      ['port.max_msg_sz', hex(d.maxMsgSz)],
      ['port.GID[  0]', `${p.gid}, ${p.gidType}`],
    ];
    for (const [k, w] of want) assert.is(value(k), String(w), `${d.name} ${k}: GET /v1/devices says ${w}`);
    // The daemon's own limits (config/startup.yaml and the defaults), not figures of the library's.
    assert.equal([d.maxQp, d.maxMr, d.maxCq, d.maxPd, d.maxSrq, d.maxMrSize], [1024, 4096, 4096, 4096, 1024, 2 ** 31]);
  }
});

/** A Python program preloaded against daemon A (`rdma-graph exec`), its tree under `base`; its output. */
function python(script: string, base: string, args: string[] = []) {
  return spawnSync('node', ['bin/rdma-graph.mjs', 'exec', '--', 'python3', '-c', script, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, XDG_RUNTIME_DIR: base },
  });
}

const EDGES = `
import errno, os, stat, sys
dev = '/dev/infiniband/uverbs0'
st = os.stat(dev)
print('uverbs0', stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), oct(st.st_mode & 0o777))
print('lstat', stat.S_ISCHR(os.lstat(dev).st_mode), 'access', os.access(dev, os.R_OK | os.W_OK))
print('dotdot', os.listdir('/sys/class/infiniband/rg_memif0/ports/../../../infiniband/./'))
print('double-slash', open('/sys/class/infiniband//rg_memif0/node_type').read().strip())
print('realpath', os.path.realpath('/sys/class/infiniband/rg_memif0/ports/1/../1'))
for p in ['/sys/class/infiniband/' + 'a' * 5000, '/dev/infiniband/' + 'b/' * 3000]:
    try:
        os.stat(p)
        print('long', 'found')
    except OSError as e:
        print('long', errno.errorcode[e.errno])
try:
    open('/sys/class/infiniband/rg_memif0/node_type', 'w')
    print('write', 'allowed')
except OSError as e:
    print('write', errno.errorcode[e.errno])
print('ibdev', open('/sys/class/infiniband_verbs/uverbs0/ibdev').read().strip())
print('numa', open('/sys/class/infiniband/rg_memif0/device/numa_node').read().strip())
print('rdma_cm', os.path.exists('/dev/infiniband/rdma_cm'))
pid = os.fork()
if pid == 0:
    print('child', stat.S_ISCHR(os.stat(dev).st_mode), flush=True)
    sys.exit(0)
os.waitpid(pid, 0)
print('parent after child', stat.S_ISCHR(os.stat(dev).st_mode), len(os.listdir(sys.argv[1])))
`;

test('probe paths: "..", "//", long paths, writes, a forked child; the private tree goes at exit', () => {
  const base = mkdtempSync(join(tmpdir(), 'probes-'));
  try {
    const r = python(EDGES, base, [base]);
    assert.is(r.status, 0, r.stdout + r.stderr);
    for (const line of [
      'uverbs0 True 231 192 0o666',
      'lstat True access True',
      "dotdot ['rg_memif0']",
      'double-slash 1: CA',
      'realpath /sys/class/infiniband/rg_memif0/ports/1',
      'long ENAMETOOLONG',
      'write EACCES',
      'ibdev rg_memif0',
      'numa -1',
      'rdma_cm False',
      'child True',
      'parent after child True 1',
    ])
      assert.ok(r.stdout.split('\n').includes(line), `"${line}" in:\n${r.stdout}${r.stderr}`);
    assert.is(r.stdout.match(/^long ENAMETOOLONG$/gm)?.length, 2, r.stdout);
    assert.equal(readdirSync(base), [], 'the trees of the program and its child are gone at exit');
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test('a tree a killed program left behind is removed by the next program, another live one is not', async () => {
  const base = mkdtempSync(join(tmpdir(), 'probes-'));
  const hold = () => {
    const p = spawn(
      'node',
      [
        'bin/rdma-graph.mjs',
        'exec',
        '--',
        'python3',
        '-c',
        "import os, time; os.stat('/dev/infiniband'); print('ready', os.getpid(), flush=True); time.sleep(60)",
      ],
      { cwd: ROOT, env: { ...process.env, XDG_RUNTIME_DIR: base }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    const pid = new Promise<number>((resolve) =>
      p.stdout.on('data', (d: Buffer) => {
        const m = /ready (\d+)\n/.exec((out += String(d)));
        if (m) resolve(Number(m[1]));
      }),
    );
    return { p, pid, closed: new Promise((resolve) => p.on('close', resolve)) };
  };
  const killed = hold();
  const live = hold();
  try {
    const [killedPid, livePid] = await Promise.all([killed.pid, live.pid]);
    assert.is(readdirSync(base).length, 2, 'one tree each');
    process.kill(killedPid, 'SIGKILL'); // python itself: no atexit
    await killed.closed;
    assert.ok(
      readdirSync(base).some((f) => f.startsWith(`rdma-graph-probes.${killedPid}.`)),
      'the killed program left its tree',
    );
    const r = python("import os; print(sorted(os.listdir('/sys/class/infiniband')))", base);
    assert.is(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /\['rg_memif0'\]/);
    const left = readdirSync(base);
    assert.is(left.length, 1, left.join(' '));
    assert.ok(left[0].startsWith(`rdma-graph-probes.${livePid}.`), `only the live one's remains: ${left[0]}`);
    process.kill(livePid, 'SIGTERM');
  } finally {
    killed.p.kill('SIGKILL');
    live.p.kill('SIGKILL');
    rmSync(base, { recursive: true, force: true });
  }
});

test.run();
