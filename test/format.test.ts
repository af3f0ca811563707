// Renderers for show runtime / show errors / show trace against hand-written VPP-layout text.
// The expected strings are written out literally (column by column, trailing blanks included:
// VPP centres header titles, so header lines end in spaces).
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import {
  formatErrors,
  formatRuntime,
  formatTrace,
  formatVppFixed,
  formatVppFloat,
  vppFormat,
  type ErrorThreadSnapshot,
  type RuntimeRow,
  type RuntimeThreadSnapshot,
  type TraceThreadSnapshot,
} from '../graph/format.ts';

const text = (...lines: string[]): string => lines.map((l) => l + '\n').join('');

// ----------------------------------------------------------------------------------- numbers

test('formatVppFloat prints %.Ne like vppinfra', () => {
  assert.is(formatVppFloat(13.8, 2), '1.38e1');
  assert.is(formatVppFloat(0.00303, 2), '3.03e-3');
  assert.is(formatVppFloat(0, 2), '0.00e0');
  assert.is(formatVppFloat(-0, 2), '0.00e0');
  assert.is(formatVppFloat(0, 4), '0.0000e0');
  assert.is(formatVppFloat(19994000, 4), '1.9994e7');
  assert.is(formatVppFloat(9.996, 2), '1.00e1');
  assert.is(formatVppFloat(0.000999999, 2), '1.00e-3');
  assert.is(formatVppFloat(5, 2), '5.00e0');
  assert.is(formatVppFloat(123456789, 2), '1.23e8');
  assert.is(formatVppFloat(-13.8, 2), '-1.38e1');
  assert.is(formatVppFloat(1e-300, 2), '1.00e-300');
  assert.is(formatVppFloat(6.1404e-2, 4), '6.1404e-2');
});

test('formatVppFloat renders NaN and infinities as vppinfra does', () => {
  assert.is(formatVppFloat(NaN, 2), '+NaN');
  assert.is(formatVppFloat(Infinity, 4), '+infinity');
  assert.is(formatVppFloat(-Infinity, 4), '-infinity');
});

test('formatVppFixed drops the leading zero below 1 like vppinfra', () => {
  assert.is(formatVppFixed(0.5, 2), '.50');
  assert.is(formatVppFixed(-0.5, 2), '-.50');
  assert.is(formatVppFixed(0.02, 2), '.02');
  assert.is(formatVppFixed(0, 2), '0.00');
  assert.is(formatVppFixed(0.004, 2), '0.00');
  assert.is(formatVppFixed(-0.004, 2), '0.00');
  assert.is(formatVppFixed(249.921875, 2), '249.92');
  assert.is(formatVppFixed(0.999, 2), '1.00');
  assert.is(formatVppFixed(10, 6), '10.000000');
  assert.is(formatVppFixed(5, 1), '5.0');
  assert.is(formatVppFixed(7, 0), '7');
});

test('vppFormat: width is a minimum and a maximum, = centres with the odd pad on the left', () => {
  assert.is(vppFormat('[%=6s]', 'abc'), '[  abc ]');
  assert.is(vppFormat('[%=7s]', 'abc'), '[  abc  ]');
  assert.is(vppFormat('[%-6s]', 'abc'), '[abc   ]');
  assert.is(vppFormat('[%6s]', 'abc'), '[   abc]');
  assert.is(vppFormat('[%-5s]', 'abcdefg'), '[abcde]');
  assert.is(vppFormat('[%=4s]', 'abcdefg'), '[abcd]');
  assert.is(vppFormat('[%5d]', 42), '[   42]');
  assert.is(vppFormat('[%3d]', 12345), '[123]');
  assert.is(vppFormat('[%-5d]', -7), '[-7   ]');
  assert.is(vppFormat('[%02d:%06d]', 7, 250), '[07:000250]');
  assert.is(vppFormat('[%.3s]', 'abcdef'), '[abc]');
  assert.is(vppFormat('%x %X %o %%', 255, 255, 8), 'ff FF 10 %');
  assert.is(vppFormat('Time %.1f, %f sec', 0.5, 10), 'Time .5, 10.000000 sec');
  assert.is(vppFormat('[%10.2e]', 0.00303), '[   3.03e-3]');
  assert.throws(() => vppFormat('%q', 1), /unsupported conversion/);
});

// ----------------------------------------------------------------------------- show runtime

const HDR =
  '             Name                 State         Calls          Vectors        Suspends         Clocks       Vectors/Call  ';
const HDR_TIME =
  '             Name                 State         Calls          Vectors        Suspends       Packet-Time    Vectors/Call  ';

const ROW_TEN =
  'TenGigabitEthernet86/0/0-outpu   active               1000          256000               0          8.00e0          256.00';
const ROW_API =
  'api-rx-from-ring               event wait                0               0              12          2.00e3            0.00';
const ROW_ETH =
  'ethernet-input                   active             400000        99968750               0          1.38e1          249.92';
const ROW_IP4 =
  'ip4-lookup                       active                  0               0               0          0.00e0            0.00';
const ROW_PG =
  'pg-input                         polling               200             100               0          5.00e1             .50';
const ROW_RDMA =
  'rdma-input                       polling            400000        99968750               0          3.62e1          249.92';
const ROW_TAP =
  'tap0-rx                       interrupt wa              10              30               0          1.00e2            3.00';
const ROW_UNIX =
  'unix-epoll-input                 polling               381               0               0          1.93e3            0.00';

const rows = (): RuntimeRow[] => [
  // Deliberately not in name order.
  { name: 'unix-epoll-input', state: 'polling', calls: 381, vectors: 0, suspends: 0, clocks: 735330 },
  { name: 'rdma-input', state: 'polling', calls: 400000, vectors: 99968750, suspends: 0, clocks: 3618977750 },
  { name: 'ip4-lookup', state: 'active', calls: 0, vectors: 0, suspends: 0, clocks: 0 },
  { name: 'ethernet-input', state: 'active', calls: 400000, vectors: 99968750, suspends: 0, clocks: 1379568750 },
  {
    name: 'TenGigabitEthernet86/0/0-output',
    state: 'active',
    calls: 1000,
    vectors: 256000,
    suspends: 0,
    clocks: 2048000,
  },
  { name: 'pg-input', state: 'polling', calls: 200, vectors: 100, suspends: 0, clocks: 5000 },
  { name: 'tap0-rx', state: 'interrupt wait', calls: 10, vectors: 30, suspends: 0, clocks: 3000 },
  { name: 'api-rx-from-ring', state: 'event wait', calls: 0, vectors: 0, suspends: 12, clocks: 24000 },
];

const thread = (over: Partial<RuntimeThreadSnapshot> = {}): RuntimeThreadSnapshot => ({
  index: 1,
  name: 'vpp_wk_0',
  lcore: 2,
  time: 5.0,
  updateInterval: 10,
  internalVectorRate: 249.92,
  loopsPerSec: 77942.214,
  ratesIn: 19994000,
  ratesOut: 19994000,
  ratesDrop: 0,
  ratesPunt: 0.0303,
  rows: rows(),
  ...over,
});

const TIME_LINE = 'Time 5.0, 10.000000 sec internal node vector rate 249.92 loops/sec 77942.21';
const RATES_LINE = '  vector rates in 1.9994e7, out 1.9994e7, drop 0.0000e0, punt 3.0300e-2';

test('show runtime: one thread, sorted rows, zero-call row hidden, long name cut to 30', () => {
  assert.is(
    formatRuntime([thread()]),
    text(TIME_LINE, RATES_LINE, HDR, ROW_TEN, ROW_API, ROW_ETH, ROW_PG, ROW_RDMA, ROW_TAP, ROW_UNIX),
  );
});

test('show runtime verbose shows the zero-call row', () => {
  assert.is(
    formatRuntime([thread()], { verbose: true }),
    text(TIME_LINE, RATES_LINE, HDR, ROW_TEN, ROW_API, ROW_ETH, ROW_IP4, ROW_PG, ROW_RDMA, ROW_TAP, ROW_UNIX),
  );
});

test('show runtime: clocks per call when there are no vectors, per suspend when no calls', () => {
  const t = thread({
    rows: [
      { name: 'unix-epoll-input', state: 'polling', calls: 381, vectors: 0, suspends: 0, clocks: 735330 },
      { name: 'api-rx-from-ring', state: 'event wait', calls: 0, vectors: 0, suspends: 12, clocks: 24000 },
    ],
  });
  assert.is(formatRuntime([t]), text(TIME_LINE, RATES_LINE, HDR, ROW_API, ROW_UNIX));
});

test('show runtime time: Packet-Time title and nanoseconds per packet', () => {
  const t = thread({
    rows: [
      { name: 'ethernet-input', state: 'active', calls: 400000, vectors: 99968750, suspends: 0, clocks: 1379568750 },
      { name: 'unix-epoll-input', state: 'polling', calls: 381, vectors: 0, suspends: 0, clocks: 735330 },
    ],
  });
  assert.is(
    formatRuntime([t], { time: true, clocksPerNs: 2.5 }),
    text(
      TIME_LINE,
      RATES_LINE,
      HDR_TIME,
      'ethernet-input                   active             400000        99968750               0          5.52e0          249.92',
      'unix-epoll-input                 polling               381               0               0          7.72e2            0.00',
    ),
  );
});

test('show runtime: several threads get headings and a separator', () => {
  const main = thread({
    index: 0,
    name: 'vpp_main',
    lcore: undefined,
    time: 12.3,
    internalVectorRate: 0,
    loopsPerSec: 1002337.531,
    ratesIn: 0,
    ratesOut: 0,
    ratesPunt: 0,
    rows: [{ name: 'unix-epoll-input', state: 'polling', calls: 381, vectors: 0, suspends: 0, clocks: 735330 }],
  });
  const worker = thread({
    time: 12.3,
    updateInterval: 2.5,
    ratesPunt: 0,
    rows: [
      { name: 'rdma-input', state: 'polling', calls: 400000, vectors: 99968750, suspends: 0, clocks: 3618977750 },
      { name: 'ethernet-input', state: 'active', calls: 400000, vectors: 99968750, suspends: 0, clocks: 1379568750 },
    ],
  });
  assert.is(
    formatRuntime([main, worker]),
    text(
      'Thread 0 vpp_main',
      'Time 12.3, 10.000000 sec internal node vector rate 0.00 loops/sec 1002337.53',
      '  vector rates in 0.0000e0, out 0.0000e0, drop 0.0000e0, punt 0.0000e0',
      HDR,
      ROW_UNIX,
      '---------------',
      'Thread 1 vpp_wk_0 (lcore 2)',
      'Time 12.3, 2.500000 sec internal node vector rate 249.92 loops/sec 77942.21',
      '  vector rates in 1.9994e7, out 1.9994e7, drop 0.0000e0, punt 0.0000e0',
      HDR,
      ROW_ETH,
      ROW_RDMA,
    ),
  );
});

test('show runtime total: a last section adds every node up over the threads', () => {
  const a = thread({
    index: 1,
    name: 'rdma_wk_0',
    time: 10,
    internalVectorRate: 2,
    loopsPerSec: 100,
    ratesIn: 5,
    rows: [
      { name: 'memif-input', state: 'polling', calls: 10, vectors: 40, suspends: 0, clocks: 4000 },
      { name: 'ip4-input', state: 'active', calls: 10, vectors: 40, suspends: 0, clocks: 2000 },
    ],
  });
  const b = thread({
    index: 2,
    name: 'rdma_wk_1',
    time: 12,
    internalVectorRate: 4,
    loopsPerSec: 300,
    ratesIn: 7,
    rows: [{ name: 'memif-input', state: 'polling', calls: 30, vectors: 60, suspends: 0, clocks: 6000 }],
  });
  const out = formatRuntime([a, b], { total: true }).split('\n');
  const at = out.indexOf('Total (2 threads)');
  assert.ok(at > 0, out.join('\n'));
  assert.is(out[at - 1], '---------------');
  // internal vector rate weighed by calls: (2 * 20 + 4 * 30) / 50 = 3.2; Time the longest.
  assert.is(out[at + 1], 'Time 12.0, 10.000000 sec internal node vector rate 3.20 loops/sec 400.00');
  assert.match(out[at + 2], /vector rates in 1\.2000e1,/);
  const memif = out.slice(at).find((l) => l.startsWith('memif-input'))!;
  assert.equal(memif.trim().split(/\s+/).slice(0, 4), ['memif-input', 'polling', '40', '100']);
  assert.not.match(formatRuntime([a, b]), /Total/, 'only when asked');
});

test('show runtime: a process with events pending gets an extra line', () => {
  const t = thread({
    rows: [
      {
        name: 'api-rx-from-ring',
        state: 'event wait',
        calls: 0,
        vectors: 0,
        suspends: 12,
        clocks: 24000,
        eventsPending: true,
      },
    ],
  });
  assert.is(formatRuntime([t]), text(TIME_LINE, RATES_LINE, HDR, ROW_API, '    events pending, '));
});

// ------------------------------------------------------------------------------ show errors

const EHDR = '   Count                  Node                              Reason               Severity ';
const EHDR_V = '   Count                  Node                              Reason               Severity  Index';

const E_1532 = '      1532             rdma-0-tx                       no free tx slots            error  ';
const E_12 = '        12             udp-local                   no listener for dst port        info   ';
const E_100 = '       100             rdma-0-tx                       no free tx slots            error  ';
const E_1532_V = '      1532             rdma-0-tx                       no free tx slots            error     7  ';
const E_0_V = '         0             rdma-input                     buffer alloc error           error     3  ';
const E_12_V = '        12             udp-local                   no listener for dst port        info     20  ';
const E_100_V = '       100             rdma-0-tx                       no free tx slots            error     7  ';
// Total rows: node %=40, reason %=20 widened to the longest reason + 2 (never cut; 26 here), index %=10, no severity.
const T_1532 = '      1532                rdma-0-tx                    no free tx slots          7    ';
const T_1632 = '      1632                rdma-0-tx                    no free tx slots          7    ';
const T_12 = '        12                udp-local                no listener for dst port     20    ';

const errThread0 = (): ErrorThreadSnapshot => ({
  index: 0,
  name: 'vpp_main',
  rows: [
    { count: 1532, node: 'rdma-0-tx', reason: 'no free tx slots', severity: 'error', index: 7 },
    { count: 0, node: 'rdma-input', reason: 'buffer alloc error', severity: 'error', index: 3 },
    { count: 12, node: 'udp-local', reason: 'no listener for dst port', severity: 'info', index: 20 },
  ],
});

test('show errors hides zero counters', () => {
  assert.is(formatErrors([errThread0()]), text(EHDR, E_1532, E_12));
});

test('show errors verbose: Index column, thread line and Total section', () => {
  assert.is(
    formatErrors([errThread0()], { verbose: true }),
    text(EHDR_V, 'Thread 0 (vpp_main):', E_1532_V, E_12_V, 'Total:', T_1532, T_12),
  );
  assert.is(
    formatErrors([errThread0()], { verbose: 1 }),
    text(EHDR_V, 'Thread 0 (vpp_main):', E_1532_V, E_12_V, 'Total:', T_1532, T_12),
  );
});

test('show errors verbose 2 shows zero counters (but Total still skips zero sums)', () => {
  assert.is(
    formatErrors([errThread0()], { verbose: 2 }),
    text(EHDR_V, 'Thread 0 (vpp_main):', E_1532_V, E_0_V, E_12_V, 'Total:', T_1532, T_12),
  );
});

const errThread1 = (): ErrorThreadSnapshot => ({
  index: 1,
  name: 'vpp_wk_0',
  rows: [
    { count: 100, node: 'rdma-0-tx', reason: 'no free tx slots', severity: 'error', index: 7 },
    { count: 0, node: 'udp-local', reason: 'no listener for dst port', severity: 'info', index: 20 },
  ],
});

test('show errors with several threads lists each thread without summing, like VPP', () => {
  assert.is(formatErrors([errThread0(), errThread1()]), text(EHDR, E_1532, E_12, E_100));
});

test('show errors verbose with several threads sums in Total', () => {
  assert.is(
    formatErrors([errThread0(), errThread1()], { verbose: true }),
    text(EHDR_V, 'Thread 0 (vpp_main):', E_1532_V, E_12_V, 'Thread 1 (vpp_wk_0):', E_100_V, 'Total:', T_1632, T_12),
  );
});

test('show errors with no counters prints only the header', () => {
  assert.is(formatErrors([]), text(EHDR));
  assert.is(
    formatErrors([{ index: 0, name: 'vpp_main', rows: [] }], { verbose: true }),
    text(EHDR_V, 'Thread 0 (vpp_main):', 'Total:'),
  );
});

test('show errors never cuts a reason: a longer one widens the column, every row aligned', () => {
  const long = 'ACK outside [snd_una - window, snd_nxt] (dropped)';
  const out = formatErrors([
    {
      index: 0,
      name: 'vpp_main',
      rows: [
        { index: 0, count: 3, node: 'trp-input', reason: long, severity: 'error' },
        { index: 1, count: 12, node: 'udp-local', reason: 'no listener for dst port', severity: 'info' },
      ],
    },
  ]);
  const lines = out.split('\n').filter((l) => l !== '');
  assert.ok(lines[1].includes(long), lines[1]);
  assert.is(new Set(lines.map((l) => l.length)).size, 1, 'header and rows the same width');
  const sev = lines[0].indexOf('Severity') - 1; // %=10s: "Severity" has one space before it
  assert.equal(
    lines.slice(1).map((l) => l.slice(sev, sev + 10).trim()),
    ['error', 'info'],
    'severity in its column',
  );
});

// ------------------------------------------------------------------------------- show trace

const traceThreads = (): TraceThreadSnapshot[] => [
  {
    index: 0,
    name: 'vpp_main',
    packets: [
      // Given out of time order: VPP sorts packets by the time of their first record.
      {
        entries: [
          // 1 day, 1 h, 1 min, 1 s and 250.9 us: the day is not shown.
          { timeNs: 90_061_000_250_900, node: 'urdma-rx', text: 'qp 17 psn 5' },
          { timeNs: 90_061_000_251_000, node: 'urdma-rx', text: 'qp 17 psn 6' },
          { timeNs: 90_061_000_999_999, node: 'urdma-tx', text: 'ack psn 6' },
        ],
      },
      {
        entries: [
          {
            timeNs: 9_155_832_000,
            node: 'rdma-input',
            text: 'rdma: rdma0 (1) next-node ethernet-input l2-ok l3-ok l4-ok ip4 udp',
          },
          {
            timeNs: 9_155_840_500,
            node: 'ethernet-input',
            text: 'frame: flags 0x1, hw-if-index 1, sw-if-index 1\nIP4: 02:fe:00:00:00:01 -> 02:fe:00:00:00:02',
          },
          {
            timeNs: 9_155_841_000,
            node: 'ip4-input',
            text: 'UDP: 10.0.0.1 -> 10.0.0.2\n  tos 0x00, ttl 64, length 92, checksum 0x0000\n  fragment id 0x0000\nUDP: 4791 -> 4791\n  length 72, checksum 0x0000',
          },
          { timeNs: 9_155_842_000, node: 'error-drop', text: '' },
        ],
      },
    ],
  },
  { index: 1, name: 'vpp_wk_0', packets: [] },
];

const PACKET_1 = [
  'Packet 1',
  '',
  '00:00:09:155832: rdma-input',
  '  rdma: rdma0 (1) next-node ethernet-input l2-ok l3-ok l4-ok ip4 udp',
  '00:00:09:155840: ethernet-input',
  '  frame: flags 0x1, hw-if-index 1, sw-if-index 1',
  '  IP4: 02:fe:00:00:00:01 -> 02:fe:00:00:00:02',
  '00:00:09:155841: ip4-input',
  '  UDP: 10.0.0.1 -> 10.0.0.2',
  '    tos 0x00, ttl 64, length 92, checksum 0x0000',
  '    fragment id 0x0000',
  '  UDP: 4791 -> 4791',
  '    length 72, checksum 0x0000',
  '00:00:09:155842: error-drop',
  '  ',
  '',
];

test('show trace: two packets, multi-line records, then an empty thread', () => {
  assert.is(
    formatTrace(traceThreads()),
    text(
      '------------------- Start of thread 0 vpp_main -------------------',
      ...PACKET_1,
      'Packet 2',
      '',
      '01:01:01:000250: urdma-rx',
      '  qp 17 psn 5',
      '  qp 17 psn 6',
      '01:01:01:000999: urdma-tx',
      '  ack psn 6',
      '',
      '------------------- Start of thread 1 vpp_wk_0 -------------------',
      'No packets in trace buffer',
    ),
  );
});

test('show trace max limits the packets shown per thread', () => {
  assert.is(
    formatTrace(traceThreads(), { max: 1 }),
    text(
      '------------------- Start of thread 0 vpp_main -------------------',
      ...PACKET_1,
      'Limiting display to 1 packets. To display more specify max.',
      '------------------- Start of thread 1 vpp_wk_0 -------------------',
      'No packets in trace buffer',
    ),
  );
});

test('show trace shows at most 50 packets by default', () => {
  const packets = Array.from({ length: 51 }, (_, i) => ({
    entries: [{ timeNs: (i + 1) * 1000, node: 'pg-input', text: `packet ${i + 1}` }],
  }));
  const out = formatTrace([{ index: 0, name: 'vpp_main', packets }]);
  assert.ok(out.includes('Packet 50\n\n00:00:00:000050: pg-input\n  packet 50\n\n'));
  assert.not.ok(out.includes('Packet 51'));
  assert.ok(out.endsWith('\nLimiting display to 50 packets. To display more specify max.\n'));
});

test('show trace with an empty buffer', () => {
  assert.is(
    formatTrace([{ index: 0, name: 'vpp_main', packets: [] }]),
    text('------------------- Start of thread 0 vpp_main -------------------', 'No packets in trace buffer'),
  );
});

test.run();
