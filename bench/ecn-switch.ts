/**
 * native/tools/ecn-switch as a child process, for bench/incast.ts and the tests that put it on a
 * path (test/ecn-switch.test.ts, test/rdma-congestion-ecn.test.ts): started (in a network
 * namespace or not), its "ready" awaited, its counters read (SIGUSR1) and at its stop (SIGTERM).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';

export const ECN_SWITCH = join(NATIVE_BUILD_DIR, 'ecn-switch');

/** What the switch counts (A->B is `ab`). */
export interface SwitchCounters {
  ab: { frames: number; bytes: number; dropped: number };
  ba: { frames: number; bytes: number; dropped: number };
  ect: number;
  marked: number;
  notEct: number;
  vqMaxBytes: number;
}

export class EcnSwitch {
  readonly p: ChildProcess;
  private readonly lines: AsyncIterator<string>;
  /** What it wrote to stderr so far. */
  err = '';

  /** `ecn-switch A B RATE_BPS K_BYTES [GAMMA]`, inside network namespace `ns` if given. */
  constructor(args: string[], ns?: string) {
    this.p = ns === undefined ? spawn(ECN_SWITCH, args) : spawn('ip', ['netns', 'exec', ns, ECN_SWITCH, ...args]);
    this.p.stderr!.on('data', (d: Buffer) => (this.err += d.toString()));
    this.lines = createInterface({ input: this.p.stdout! })[Symbol.asyncIterator]();
  }

  private async line(): Promise<string> {
    const l = await this.lines.next();
    if (l.done) throw new Error(`ecn-switch exited: ${this.err}`);
    return l.value;
  }

  /** Resolves once both its sockets are bound. */
  async ready(): Promise<void> {
    const l = await this.line();
    if (l !== 'ready') throw new Error(`ecn-switch said "${l}", not ready: ${this.err}`);
  }

  /** Its counters now. */
  async counters(): Promise<SwitchCounters> {
    this.p.kill('SIGUSR1');
    return JSON.parse(await this.line()) as SwitchCounters;
  }

  /** Stopped (SIGTERM); its counters at the end. */
  async stop(): Promise<SwitchCounters> {
    this.p.kill('SIGTERM');
    return JSON.parse(await this.line()) as SwitchCounters;
  }
}
