/**
 * DPDK's testpmd (Debian's dpdk-dev, 22.11) as a memif peer, for tests and benchmarks: started
 * in interactive mode with commands on stdin (`start`, `stop`, `show port stats 0`, `quit`),
 * without hugepages, both lcores on one CPU, its runtime directory removed when it exits.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';

const TESTPMD = 'dpdk-testpmd';
let seq = 0;

/** Why testpmd cannot run here (not root, not installed), or null when it can. */
export function testpmdUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'DPDK testpmd tests need root (run as root)';
  const r = spawnSync('sh', ['-c', `command -v ${TESTPMD}`], { encoding: 'utf8' });
  if (r.status !== 0) return `${TESTPMD} not found (apt-get install dpdk-dev)`;
  return null;
}

export interface TestpmdOptions {
  /** net_memif arguments, e.g. "role=client,socket=/tmp/x.sock". */
  memif: string;
  /** Forwarding mode: macswap, txonly, rxonly, io... */
  mode: string;
  /** Extra application arguments (after --). */
  args?: string[];
  /** EAL --lcores (default both lcores on CPU 1: "0@1,1@1"). */
  lcores?: string;
  /** testpmd is terminated after this many seconds whatever happens to us (default 120). */
  maxSeconds?: number;
}

export interface PortStats {
  rxPackets: number;
  txPackets: number;
  rxBytes: number;
  txBytes: number;
}

export class Testpmd {
  readonly proc: ChildProcess;
  readonly prefix: string;
  output = '';
  private exited = false;

  constructor(o: TestpmdOptions) {
    removeStaleRuntimeDirs();
    this.prefix = `rg-test-${process.pid}-${seq++}`;
    const eal = [
      '--no-huge',
      '-m',
      '1024',
      '--no-shconf',
      '--iova-mode=va',
      '--no-pci',
      '--no-telemetry',
      '--log-level=warning',
      `--lcores=${o.lcores ?? '0@1,1@1'}`,
      '--file-prefix',
      this.prefix,
      `--vdev=net_memif0,${o.memif}`,
    ];
    const app = ['-i', `--forward-mode=${o.mode}`, '--no-mlockall', '--total-num-mbufs=16384', ...(o.args ?? [])];
    // stdbuf: testpmd's stdout is a pipe, fully buffered otherwise (nothing to read until exit).
    // timeout: a testpmd whose parent died (it ignores its stdin closing) does not stay behind.
    const limit = String(o.maxSeconds ?? 120);
    this.proc = spawn('timeout', ['-k', '5', limit, 'stdbuf', '-o0', '-e0', TESTPMD, ...eal, '--', ...app], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const add = (d: Buffer) => {
      this.output += d.toString('utf8');
    };
    this.proc.stdout!.on('data', add);
    this.proc.stderr!.on('data', add);
    this.proc.on('exit', () => {
      this.exited = true;
      this.cleanup();
    });
  }

  /** Resolves with the first match of `re` in the output after `from` (throws after ms). */
  async waitFor(re: RegExp, ms = 10000, from = 0): Promise<RegExpMatchArray> {
    const end = Date.now() + ms;
    for (;;) {
      const m = this.output.slice(from).match(re);
      if (m) return m;
      if (this.exited) throw new Error(`testpmd exited before printing ${re}:\n${this.output.slice(-3000)}`);
      if (Date.now() > end)
        throw new Error(`testpmd did not print ${re} within ${ms} ms:\n${this.output.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  send(cmd: string): void {
    this.proc.stdin!.write(cmd + '\n');
  }

  /** Ready for commands (port started). */
  async ready(): Promise<void> {
    await this.waitFor(/testpmd> /, 20000);
  }

  /**
   * `start`, resolved once forwarding runs. testpmd flushes its rx queues when it starts, so a
   * frame sent before that may be thrown away: send only after this resolves.
   */
  async start(): Promise<void> {
    const from = this.output.length;
    this.send('start');
    await this.waitFor(/packet forwarding - ports=[\s\S]*?testpmd> /, 10000, from);
  }

  /** `show port stats 0`: the port's packet counters. */
  async stats(): Promise<PortStats> {
    const from = this.output.length;
    this.send('show port stats 0');
    const m = await this.waitFor(
      /NIC statistics for port 0[\s\S]*?RX-packets:\s+(\d+)[\s\S]*?RX-bytes:\s+(\d+)[\s\S]*?TX-packets:\s+(\d+)[\s\S]*?TX-bytes:\s+(\d+)/,
      5000,
      from,
    );
    return { rxPackets: Number(m[1]), rxBytes: Number(m[2]), txPackets: Number(m[3]), txBytes: Number(m[4]) };
  }

  /** `quit`, then SIGTERM (timeout passes it on) if it has not exited after ms. */
  async quit(ms = 5000): Promise<void> {
    if (this.exited) return;
    this.send('quit');
    const end = Date.now() + ms;
    while (!this.exited && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    if (!this.exited) {
      this.proc.kill('SIGTERM');
      while (!this.exited) await new Promise((r) => setTimeout(r, 10));
    }
    this.cleanup();
  }

  /** testpmd leaves /var/run/dpdk/<prefix> behind even with --no-shconf. */
  private cleanup(): void {
    fs.rmSync(`/var/run/dpdk/${this.prefix}`, { recursive: true, force: true });
    try {
      fs.rmdirSync('/var/run/dpdk');
    } catch {
      // not empty (someone else's DPDK) or already gone
    }
  }
}

/** Runtime directories of testpmds started by processes that died before cleaning up. */
function removeStaleRuntimeDirs(): void {
  let names: string[];
  try {
    names = fs.readdirSync('/var/run/dpdk');
  } catch {
    return;
  }
  for (const n of names) {
    const m = /^rg-test-(\d+)-\d+$/.exec(n);
    if (m === null || Number(m[1]) === process.pid) continue;
    try {
      process.kill(Number(m[1]), 0);
    } catch {
      fs.rmSync(`/var/run/dpdk/${n}`, { recursive: true, force: true });
    }
  }
}
