/**
 * rdma-graph command line.
 *
 *   rdma-graph start [--pcap-in FILE] [--pcap-out FILE] [--trace N] [--seconds S]
 *
 * Starts the data plane on the embedded default: until the memif driver (issue 6) and the
 * start-up YAML (issue 5) exist, that is a pipe pair (pipe0 <-> pipe1) driven by the adaptive
 * loop, optionally fed from a pcap file (pcap0). SIGUSR1 prints show runtime / errors / trace;
 * SIGINT/SIGTERM (or --seconds) stops cleanly and prints them.
 */
import { Graph, createPool, formatErrors, formatRuntime, formatTrace } from './graph/index.ts';
import { Interfaces } from './drivers/interfaces.ts';
import { createPipe } from './drivers/pipe.ts';
import { PcapDriver } from './drivers/pcap.ts';

const USAGE = `usage: rdma-graph start [--pcap-in FILE] [--pcap-out FILE] [--trace N] [--seconds S]
       rdma-graph --version`;

function fail(msg: string): never {
  console.error(`rdma-graph: ${msg}\n${USAGE}`);
  process.exit(2);
}

function parseArgs(argv: string[]): { cmd: string; opts: Record<string, string> } {
  const [cmd, ...rest] = argv;
  const opts: Record<string, string> = {};
  const known = ['--pcap-in', '--pcap-out', '--trace', '--seconds'];
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (!known.includes(a)) fail(`unknown option "${a}"`);
    if (i + 1 >= rest.length) fail(`option ${a} needs a value`);
    opts[a.slice(2)] = rest[++i];
  }
  return { cmd: cmd ?? '', opts };
}

function positiveInt(name: string, v: string | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) fail(`--${name} needs a non-negative integer, got "${v}"`);
  return n;
}

async function start(opts: Record<string, string>): Promise<void> {
  const traceN = positiveInt('trace', opts.trace, 0);
  const seconds = opts.seconds === undefined ? 0 : Number(opts.seconds);
  if (!(seconds >= 0)) fail(`--seconds needs a non-negative number, got "${opts.seconds}"`);
  const pool = createPool({ count: 16384 });
  const g = new Graph({ pool });
  const ifs = new Interfaces(g);
  const [p0, p1] = createPipe('pipe0', 'pipe1');
  // Until ethernet-input exists (issue 3), received frames are cross-connected: what arrives
  // on pcap0 leaves through pipe0, what pipe1 receives leaves through pcap1 (or is dropped).
  const out = opts['pcap-out'] ? 'pcap1-output' : 'error-drop';
  g.register({ name: 'l2-xconnect', next: ['pipe0-output', out],
    errors: [{ name: 'no_output', description: 'no output interface (no --pcap-out)', severity: 'info' }],
    fn: (rt, f) => {
    const fr = f!;
    const from = g.pool.rxIf, err = g.pool.error;
    const pipe1 = ifs.get('pipe1').index;
    for (let i = 0; i < fr.n; i++) {
      const back = from[fr.vec[i]] === pipe1;
      rt.nexts[i] = back ? 1 : 0;
      if (back) err[fr.vec[i]] = rt.errorIndex(0);
    }
    if (fr.n > 0) g.enqueueToNext(rt, fr.vec, rt.nexts, fr.n);
    return fr.n;
  } });
  const log = (s: string) => console.log(`rdma-graph: ${s}`);
  try {
    if (opts['pcap-out']) ifs.add(new PcapDriver('pcap1', { txFile: opts['pcap-out'] }), { next: 'error-drop' });
    ifs.add(p0, { next: 'error-drop' });
    ifs.add(p1, { next: 'l2-xconnect' });
    if (opts['pcap-in']) ifs.add(new PcapDriver('pcap0', { rxFile: opts['pcap-in'] }), { next: 'l2-xconnect' });
    g.build();
  } catch (e) {
    fail((e as Error).message);
  }
  for (const itf of ifs.all()) log(`interface ${itf.name} (${itf.driver.kind}) mac ${itf.macString} mtu ${itf.driver.mtu} ${itf.driver.linkUp() ? 'up' : 'down'}`);
  const st = pool.stats();
  log(`buffers: ${st.count} x ${st.dataSize} B (${st.hugepages ? '2 MiB hugepages' : 'normal pages'}), ${g.clock.source} clock`);
  if (traceN > 0) g.traceAdd(opts['pcap-in'] ? 'pcap-input' : 'pipe-input', traceN);
  const show = () => {
    process.stdout.write(formatRuntime([g.runtimeSnapshot()]));
    process.stdout.write(formatErrors([g.errorSnapshot()]));
    if (traceN > 0) process.stdout.write(formatTrace([g.traceSnapshot()]));
  };
  g.start();
  log('running; SIGUSR1 prints show runtime/errors, SIGINT or SIGTERM stops');
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    process.on('SIGUSR1', show);
    if (seconds > 0) setTimeout(stop, seconds * 1000);
  });
  g.close();
  show();
  ifs.closeAll();
  const leaked = pool.count - pool.available();
  log(leaked === 0 ? 'stopped; every buffer back in the pool' : `stopped; ${leaked} buffers still allocated`);
  process.exit(leaked === 0 ? 0 : 1);
}

const { cmd, opts } = parseArgs(process.argv.slice(2));
if (cmd === '--version') {
  const { createRequire } = await import('node:module');
  console.log(createRequire(import.meta.url)('./package.json').version);
} else if (cmd === 'start') {
  await start(opts);
} else if (cmd === '' || cmd === 'help' || cmd === '--help') {
  console.log(USAGE);
} else {
  fail(`unknown command "${cmd}"`);
}
