/**
 * rdmactl without a daemon: command lines to API requests (a recording transport), usage
 * errors, and the VPP-layout renderers fed with real views from two live data planes.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { runCommand, UsageError, type Call } from '../api/rdmactl.ts';
import { formatInterfaces, formatNeighbors, formatQps } from '../api/render.ts';
import {
  formatBuffers,
  formatDevice,
  formatDevices,
  formatHardware,
  formatMemif,
  formatVersion,
} from '../api/rdmactl-show.ts';
import { baseConfig, IP_A, IP_B, MAC_B, twoDataplanes } from './dataplane-helpers.ts';

interface Req {
  method: string;
  path: string;
  body?: unknown;
  bytes?: number[];
}

function recorder(reply: unknown = {}): { call: Call; reqs: Req[] } {
  const reqs: Req[] = [];
  const call: Call = async (method, path, body, opts) => {
    reqs.push({
      method,
      path,
      ...(body === undefined ? {} : { body }),
      ...(opts?.bytes ? { bytes: Array.from(opts.bytes) } : {}),
    });
    return reply;
  };
  return { call, reqs };
}

const sink = () => {
  const o = {
    text: '',
    out(s: string) {
      o.text += s;
    },
    bytes(b: Uint8Array) {
      o.text += Buffer.from(b).toString('hex');
    },
  };
  return o;
};

const CASES: [string, Req][] = [
  ['create pd', { method: 'POST', path: '/v1/pds', body: {} }],
  [
    'create mr pd 1 length 4096 access local-write,remote-write',
    { method: 'POST', path: '/v1/mrs', body: { pd: 1, length: 4096, access: ['local-write', 'remote-write'] } },
  ],
  ['create cq depth 64', { method: 'POST', path: '/v1/cqs', body: { depth: 64 } }],
  ['create srq pd 1 max-wr 32', { method: 'POST', path: '/v1/srqs', body: { pd: 1, maxWr: 32 } }],
  [
    'create qp pd 1 send-cq 2 recv-cq 3 max-send-wr 16 max-recv-wr 8 interface memif0',
    {
      method: 'POST',
      path: '/v1/qps',
      body: { pd: 1, sendCq: 2, recvCq: 3, maxSendWr: 16, maxRecvWr: 8, interface: 'memif0' },
    },
  ],
  [
    'connect 20000 10.10.0.2:20001',
    {
      method: 'POST',
      path: '/v1/qps/20000/connect',
      body: { remote: { ip: '10.10.0.2', port: 20001 }, mode: 'manual' },
    },
  ],
  [
    'connect 20000 10.10.0.2:20001 psn 4000000000',
    {
      method: 'POST',
      path: '/v1/qps/20000/connect',
      body: { remote: { ip: '10.10.0.2', port: 20001 }, mode: 'manual', remotePsn: 4000000000 },
    },
  ],
  [
    'modify qp 20000 rtr remote 10.10.0.2:20001 rq-psn 7',
    {
      method: 'POST',
      path: '/v1/qps/20000/modify',
      body: { state: 'rtr', remote: { ip: '10.10.0.2', port: 20001 }, rqPsn: 7 },
    },
  ],
  ['modify qp 20000 rts sq-psn 9', { method: 'POST', path: '/v1/qps/20000/modify', body: { state: 'rts', sqPsn: 9 } }],
  [
    'connect 20000 10.10.0.2:18515 cm private-data 0102ff ord 4',
    {
      method: 'POST',
      path: '/v1/qps/20000/connect',
      body: { remote: { ip: '10.10.0.2', port: 18515 }, mode: 'cm', privateData: 'AQL/', ord: 4 },
    },
  ],
  [
    'listen 18515 pd 1 send-cq 2 recv-cq 2',
    { method: 'POST', path: '/v1/listeners', body: { port: 18515, pd: 1, sendCq: 2, recvCq: 2 } },
  ],
  ['create mr pd 1 length 64', { method: 'POST', path: '/v1/mrs', body: { pd: 1, length: 64 } }],
  ['create qp pd 1 send-cq 2 recv-cq 2', { method: 'POST', path: '/v1/qps', body: { pd: 1, sendCq: 2, recvCq: 2 } }],
  ['unlisten 18515', { method: 'DELETE', path: '/v1/listeners/18515' }],
  ['modify qp 20000 error', { method: 'POST', path: '/v1/qps/20000/modify', body: { state: 'error' } }],
  [
    'post recv 20000 wr-id r1 sge 4:0:1024,5:8:16',
    {
      method: 'POST',
      path: '/v1/qps/20000/recv',
      body: {
        wrId: 'r1',
        sge: [
          { mr: 4, offset: 0, length: 1024 },
          { mr: 5, offset: 8, length: 16 },
        ],
      },
    },
  ],
  [
    'post srq-recv 3 wr-id 77 sge 4:0:64',
    { method: 'POST', path: '/v1/srqs/3/recv', body: { wrId: 77, sge: [{ mr: 4, offset: 0, length: 64 }] } },
  ],
  [
    'post send 20000 write wr-id 9 sge 4:0:100 remote 0x301:4096 unsignaled',
    {
      method: 'POST',
      path: '/v1/qps/20000/send',
      body: {
        wrId: 9,
        opcode: 'write',
        sge: [{ mr: 4, offset: 0, length: 100 }],
        remote: { stag: 0x301, offset: 4096 },
        signaled: false,
      },
    },
  ],
  [
    'post send 20000 cmp-swap wr-id cs sge 4:0:8 remote 769:0 compare 18446744073709551615 swap 5',
    {
      method: 'POST',
      path: '/v1/qps/20000/send',
      body: {
        wrId: 'cs',
        opcode: 'cmp-swap',
        sge: [{ mr: 4, offset: 0, length: 8 }],
        remote: { stag: 769, offset: 0 },
        atomic: { swap: '5', compare: '18446744073709551615' },
      },
    },
  ],
  [
    'post send 20000 write-with-imm wr-id 1 remote 1:0 imm 4294967295',
    {
      method: 'POST',
      path: '/v1/qps/20000/send',
      body: { wrId: 1, opcode: 'write-with-imm', remote: { stag: 1, offset: 0 }, imm: 4294967295 },
    },
  ],
  ['poll 2 max 8 wait 500', { method: 'GET', path: '/v1/cqs/2/completions?max=8&waitMs=500' }],
  ['mr write 4 16 text hi', { method: 'PUT', path: '/v1/mrs/4/data?offset=16', bytes: [0x68, 0x69] }],
  ['mr write 4 0 hex 00ff', { method: 'PUT', path: '/v1/mrs/4/data?offset=0', bytes: [0, 255] }],
  ['destroy qp 20000', { method: 'DELETE', path: '/v1/qps/20000' }],
  ['trace add memif-input 10', { method: 'POST', path: '/v1/trace', body: { node: 'memif-input', count: 10 } }],
  ['clear runtime', { method: 'POST', path: '/v1/runtime/clear' }],
  ['clear trace', { method: 'DELETE', path: '/v1/trace' }],
  [
    'capture memif0 both /tmp/x.pcap count 100',
    {
      method: 'POST',
      path: '/v1/interfaces/memif0/capture',
      body: { direction: 'both', file: '/tmp/x.pcap', count: 100 },
    },
  ],
  ['capture memif0 off', { method: 'DELETE', path: '/v1/interfaces/memif0/capture' }],
  [
    'fault memif0 rx seed 7 loss 0.05 reorder-depth 4',
    {
      method: 'POST',
      path: '/v1/interfaces/memif0/fault',
      body: { direction: 'rx', seed: 7, reorderDepth: 4, loss: 0.05 },
    },
  ],
  [
    'fault memif0 tx ce 0.02',
    { method: 'POST', path: '/v1/interfaces/memif0/fault', body: { direction: 'tx', ce: 0.02 } },
  ],
  ['fault memif0 off', { method: 'POST', path: '/v1/interfaces/memif0/fault', body: { direction: 'both', off: true } }],
  ['show qp 20000', { method: 'GET', path: '/v1/qps/20000' }],
  // VPP's unique prefixes and the commands VPP and rdma-core users reach for.
  ['sh int', { method: 'GET', path: '/v1/interfaces' }],
  ['sh run', { method: 'GET', path: '/v1/runtime' }],
  ['show runtim verbose', { method: 'GET', path: '/v1/runtime?verbose=1' }],
  ['sh hard', { method: 'GET', path: '/v1/hardware' }],
  ['show hardware-interfaces', { method: 'GET', path: '/v1/hardware' }],
  ['show memif', { method: 'GET', path: '/v1/hardware' }],
  ['show buffers', { method: 'GET', path: '/v1/buffers' }],
  ['show ip neighbors', { method: 'GET', path: '/v1/neighbors' }],
  ['sh ip nei', { method: 'GET', path: '/v1/neighbors' }],
  ['show version', { method: 'GET', path: '/v1/version' }],
  ['show dev', { method: 'GET', path: '/v1/devices' }],
  ['show device rg_m0', { method: 'GET', path: '/v1/devices' }],
  ['cl err', { method: 'POST', path: '/v1/errors/clear' }],
  ['cre p', { method: 'POST', path: '/v1/pds', body: {} }],
];

for (const [line, want] of CASES) {
  test(`rdmactl ${line}`, async () => {
    const { call, reqs } = recorder({
      pd: 1,
      mr: 4,
      stag: 769,
      cq: 2,
      srq: 3,
      qpn: 20000,
      state: 'rts',
      local: { ip: IP_A, port: 20000 },
      remote: null,
      port: 18515,
      completions: [],
      error: null,
      rtt: { srttUs: 0, rttvarUs: 0, rtoUs: 0 },
      counters: {},
    });
    // --json: the recorder's one canned answer is not every view (rendering it is tested below).
    await runCommand(line.split(' '), call, sink(), { json: true });
    assert.equal(reqs, [want]);
  });
}

const BAD: [string, RegExp][] = [
  ['show', /show: missing \(expected runtime, errors, interfaces, hardware/],
  ['show q 1', /show: "q" is ambiguous: qps, qp/],
  ['c', /^command "c" is ambiguous: clear, capture, create, connect$/],
  ['ping', /^ping: missing IP$/],
  ['ping 10.10.0.2 repeat 2 count 2', /^ping: give repeat or count, not both$/],
  ['ping 10.10.0.2 interval 0', /^ping: interval must be 0\.001\.\.60 seconds, got 0$/],
  ['ping 10.10.0.2 size x', /^ping: size must be a non-negative integer, got "x"$/],
  ['show qp x', /show qp: QPN must be a non-negative integer, got "x"/],
  ['create mr pd 1', /create mr: needs pd PD and length N/],
  ['create qp pd 1 send-cq 2', /create qp: missing recv-cq/],
  ['create qp pd 1 send-cq 2 recv-cq 2 colour blue', /unknown word "colour"/],
  ['connect 20000 10.10.0.2', /connect: expected IP:PORT, got "10.10.0.2"/],
  ['post send 20000 send', /post send: missing wr-id/],
  ['post send 20000 send wr-id 1 sge 1:2', /sge 0 must be MR:OFFSET:LENGTH, got "1:2"/],
  ['post send 20000 fetch-add wr-id 1 add -1', /add must be an unsigned decimal integer, got "-1"/],
  ['post send 20000 write wr-id 1 remote 5', /remote must be STAG:OFFSET/],
  ['mr write 4 0', /give the data as text STRING or hex HEX/],
  ['mr write 4 0 hex abc', /expected hex bytes/],
  ['fault memif0 rx loss lots', /loss must be a number, got "lots"/],
  ['trace add memif-input', /trace add: missing COUNT/],
  ['clear everything', /clear: unknown "everything" \(expected interfaces, runtime, errors, trace\)/],
  ['destroy table 1', /destroy: unknown "table" \(expected pd, mr, cq, srq, qp\)/],
  ['poll 1 max 99999999999999999999', /too large/],
  ['frobnicate', /^unknown command "frobnicate" \(expected show, clear/],
];

for (const [line, re] of BAD) {
  test(`rdmactl ${line}: usage error, no request`, async () => {
    const { call, reqs } = recorder();
    const err = await runCommand(line.split(' '), call, sink(), { json: false }).then(
      () => null,
      (e) => e,
    );
    assert.instance(err, UsageError, String(err));
    assert.match(err.message, re);
    assert.is(reqs.length, 0);
  });
}

test('renderers on live views: show interfaces / neighbors / qps in VPP columns', async () => {
  const { a, b, close } = await twoDataplanes();
  try {
    const { pd } = await a.createPd();
    const { cq } = await a.createCq({ depth: 16 });
    const qa = await a.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 8, maxRecvWr: 8 });
    const pb = await b.createPd();
    const cb = await b.createCq({ depth: 16 });
    const qb = await b.createQp({ pd: pb.pd, sendCq: cb.cq, recvCq: cb.cq, maxSendWr: 8, maxRecvWr: 8 });
    await a.connect(qa.qpn, { remote: { ip: IP_B, port: qb.qpn }, mode: 'manual', remotePsn: qb.psn });
    await b.connect(qb.qpn, { remote: { ip: IP_A, port: qa.qpn }, mode: 'manual', remotePsn: qa.psn });
    await a.postSend(qa.qpn, { wrId: 1, opcode: 'write', remote: { stag: 0, offset: 0 } });
    await a.pollCq(cq, 4, 1000);
    const ifs = await a.interfaces();
    const text = formatInterfaces(ifs).split('\n');
    assert.is(
      text[0],
      '              Name               Idx    State  MTU (L3/IP4/IP6/MPLS)     Counter          Count     ',
    );
    const c = ifs[0].counters;
    assert.ok(c.txPackets > 0 && c.rxPackets > 0);
    // Name %-32s, Idx %=5d, State %=10s, MTU %=21s (odd padding on the left), then %-16s%16d.
    assert.is(
      text[1],
      `${ifs[0].name.padEnd(32)}  ${ifs[0].index}  ${'    up    '}${'      1500/0/0/0     '}${'rx packets'.padEnd(16)}${String(c.rxPackets).padStart(16)}`,
    );
    assert.ok(text.includes(`${' '.repeat(68)}tx bytes        ${String(c.txBytes).padStart(16)}`), text.join('\n'));
    const n = formatNeighbors(await a.neighbors()).split('\n');
    // %=12s %=40s %=6s %=20s %=24s
    assert.is(
      n[0],
      `${'    Time    '}${' '.repeat(19)}IP${' '.repeat(19)} Flags${'      Ethernet      '}${'        Interface       '}`,
    );
    assert.match(n[1], new RegExp(`^ +\\d*\\.\\d{4} +${IP_B.replace(/\./g, '\\.')} +S +${MAC_B} +${ifs[0].name}$`));
    const q = formatQps(await a.qps()).split('\n');
    assert.match(q[0], /^ +QPN +State +Local +Remote +SQ\/RQ +Tx-packets +Rx-packets +Retrans +SRTT-us +Owner$/);
    const row = q[1];
    assert.match(
      row,
      new RegExp(`^ *${qa.qpn} +rts +${IP_A}:${qa.qpn} +${IP_B}:${qb.qpn} +0/0 +\\d+ +\\d+ +\\d+ +\\d+\\.\\d +-$`),
    );
    const txp = (await a.getQp(qa.qpn)).counters.txPackets;
    assert.ok(txp >= 1);
    assert.is(Number(row.trim().split(/ +/)[5]), txp);
  } finally {
    await close();
  }
});

test('show device, version, buffers, hardware, memif on a live data plane', async () => {
  const { a, close } = await twoDataplanes({ a: { rdma: { ...baseConfig().rdma, maxQps: 77 } } });
  try {
    const devs = await a.devices();
    assert.equal(
      devs.map((d) => [d.name, d.interface]),
      (await a.interfaces()).map((i) => [`rg_${i.name}`, i.name]),
    );
    const dev = formatDevice(devs[0]).split('\n');
    assert.is(dev[0], `hca_id:\trg_${devs[0].interface}`);
    assert.ok(dev.includes('\tmax_qp:\t\t\t\t77'), dev.join('\n'));
    assert.ok(dev.includes('\tatomic_cap:\t\t\tATOMIC_HCA (1)'), dev.join('\n'));
    assert.ok(dev.includes(`\t\t\tGID[  0]:\t\t::ffff:${IP_A}, RoCE v2`), dev.join('\n'));
    // MTU 1500: segments carry 1462 bytes; the largest IB MTU within it is 1024 (3).
    assert.ok(dev.includes('\t\t\tactive_mtu:\t\t1024 (3)'), dev.join('\n'));
    assert.ok(dev.includes('\t\t\tsegment_bytes:\t\t1462 (interface MTU 1500)'), dev.join('\n'));
    assert.match(formatDevices(devs, 'nothing'), /^no device nothing \(devices: rg_/);
    const ver = formatVersion(await a.version());
    assert.match(ver, /^rdma-graph v\d+\.\d+\.\d+ on Node v20/);
    // dpdk is listed when dpdk.node was built, ibverbs and mlx5dv when ibverbs.node was.
    assert.match(ver, /\ndrivers: memif, af_packet, pcap, pipe(, dpdk)?(, ibverbs, mlx5dv)?\n/);
    const avail = (await a.version()).drivers;
    assert.is(
      /, dpdk[,\n]/.test(ver),
      avail.some((d) => d.name === 'dpdk' && d.available),
    );
    assert.is(
      ver.includes(', ibverbs, mlx5dv\n'),
      avail.some((d) => d.name === 'ibverbs' && d.available),
    );
    const buf = await a.buffers();
    const b = formatBuffers(buf).split('\n');
    assert.match(
      b[1],
      new RegExp(`^default +0 +${buf.dataSize} +${buf.count} +${buf.free} +${buf.count - buf.free} *$`),
    );
    const hw = formatHardware(await a.hardware()).split('\n');
    assert.match(hw[0], /^ +Name +Idx +Link +Hardware$/);
    assert.match(hw[1], /^pa\d+ +1 +up +pa\d+$/);
    assert.is(hw[2], '  pipe: 1 rx queue, 1 tx queue, MTU 1500');
    assert.is(formatMemif(await a.hardware()), 'no memif interfaces\n');
  } finally {
    await close();
  }
});

test('show memif and show hardware print what the memif driver says, nulls left out', () => {
  const h = {
    name: 'memif0',
    index: 1,
    driver: 'memif',
    mac: '02:fe:00:00:00:01',
    mtu: 1500,
    state: 'down' as const,
    rxQueues: 1,
    txQueues: 1,
    info: {
      role: 'client',
      socket: 'run/memif.sock',
      id: '0',
      state: 'idle',
      peer: null,
      'zero-copy': 'no',
      rings: '1 rx, 1 tx, 1024 slots',
      regions: '0',
      'buffer-size': '2048',
      'last disconnect': 'Interface id already in use (by the peer)',
      'last connect error': null,
    },
    counters: { rxPackets: 0, disconnects: 3 },
  };
  assert.is(
    formatMemif([h]),
    'interface memif0\n  role client id 0 socket run/memif.sock\n  state idle link down zero-copy no\n  rings 1 rx, 1 tx, 1024 slots, regions 0, buffer-size 2048\n  last disconnect: Interface id already in use (by the peer)\n',
  );
  const hw = formatHardware([h]);
  assert.match(hw, /\n  last disconnect: Interface id already in use \(by the peer\)\n/);
  assert.not.match(hw, /peer:|last connect error/);
  assert.match(hw, /\n    disconnects +3\n/);
  assert.not.match(hw, /rxPackets/);
});

test.run();
