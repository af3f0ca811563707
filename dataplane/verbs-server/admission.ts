/**
 * Who may connect to the verbs socket, and what one connection may hold of the daemon's file
 * descriptors (docs/VERBS-PROTOCOL.md section 6.1). The `verbs:` limits (issue 26), the fd
 * reserve kept for the rest of the daemon, and VerbsAdmission, which the listener (listener.ts)
 * asks for every connection it accepts.
 */
import { readFileSync } from 'node:fs';
import type { VerbsLimits } from '../api.ts';
import { loadCore } from '../../native/addons.ts';
import { Errno } from './messages.ts';

/** The `verbs:` defaults (config/schema.ts), for a configuration built without them. */
export const DEFAULT_VERBS_LIMITS: VerbsLimits = {
  maxConnections: 256,
  maxConnectionsPerUid: 64,
  maxConnectionsPerPid: 16,
  maxFdsPerConnection: 32,
};

/** The limits of a `verbs:` section, defaults for any key it lacks. */
export function verbsLimits(v: Partial<VerbsLimits> | undefined): VerbsLimits {
  const out = { ...DEFAULT_VERBS_LIMITS };
  for (const k of Object.keys(out) as (keyof VerbsLimits)[]) if (typeof v?.[k] === 'number') out[k] = v[k] as number;
  return out;
}

/**
 * File descriptors kept free for the rest of the daemon (the API's connections, captures,
 * interfaces): no verbs connection or eventfd is taken at or above fdLimit - this.
 */
export function fdReserve(limit: number): number {
  return Math.max(16, Math.floor(limit / 8));
}

/** Whether `fd` (just received: the lowest free number) leaves the process its fd reserve (times `share`). */
export function fdHeadroom(core: ReturnType<typeof loadCore>, fd: number, share = 1): boolean {
  const limit = core.fdLimit();
  return fd < limit - fdReserve(limit) * share;
}

/** "pid 1234 (ib_write_bw)": the peer's pid and its command name (/proc, at most 15 bytes). */
export function ownerOf(peer: { pid: number } | null): string {
  if (peer === null) return 'unknown process';
  let comm = '';
  try {
    comm = readFileSync(`/proc/${peer.pid}/comm`, 'utf8').trim().slice(0, 15);
  } catch {
    // gone already, or another pid namespace
  }
  return comm ? `pid ${peer.pid} (${comm})` : `pid ${peer.pid}`;
}

/** A connection the admission refused: why, and the errno its first request is answered with. */
export interface Refusal {
  errno: number;
  reason: string;
  /** "pid N (comm)", uid: who was refused (for the log). */
  owner: string;
  uid: number;
}

/**
 * Who may connect (the listener asks at accept, by SO_PEERCRED): at most maxConnectionsPerPid
 * connections of one process, maxConnectionsPerUid of one user, maxConnections in all, and none
 * that would take the process into its fd reserve. The listener counts every connection it
 * admitted until release(fd), which whoever closes the connection calls first (the data plane,
 * or with cpu.workers the main thread when a worker hands the fd back), so the limits hold for
 * the whole daemon.
 */
export class VerbsAdmission {
  private readonly peers = new Map<number, { pid: number; uid: number }>();
  private readonly perPid = new Map<number, number>();
  private readonly perUid = new Map<number, number>();

  constructor(readonly limits: VerbsLimits) {}

  /** Admit connection `fd` (counted from now on), or why not. */
  admit(fd: number): Refusal | null {
    const core = loadCore();
    const peer = core.seqpacketPeer(fd) ?? { pid: -1, uid: -1 };
    const owner = ownerOf(peer.pid >= 0 ? peer : null);
    const refuse = (errno: number, reason: string): Refusal => ({ errno, reason, owner, uid: peer.uid });
    const limit = core.fdLimit();
    if (!fdHeadroom(core, fd))
      return refuse(
        Errno.ENFILE,
        `the daemon is short of file descriptors (the lowest free is ${fd} of its limit ${limit}, ${fdReserve(limit)} kept for the rest of it): try again later`,
      );
    const l = this.limits;
    if (this.peers.size >= l.maxConnections)
      return refuse(
        Errno.EUSERS,
        `${this.peers.size} connections are open, the most the daemon serves (verbs.max-connections)`,
      );
    const u = this.perUid.get(peer.uid) ?? 0;
    if (u >= l.maxConnectionsPerUid)
      return refuse(
        Errno.EUSERS,
        `uid ${peer.uid} has ${u} connections open, the most one user may have (verbs.max-connections-per-uid)`,
      );
    const p = this.perPid.get(peer.pid) ?? 0;
    if (p >= l.maxConnectionsPerPid)
      return refuse(
        Errno.EMFILE,
        `${owner} has ${p} connections open, the most one process may have (verbs.max-connections-per-pid)`,
      );
    this.peers.set(fd, peer);
    this.perUid.set(peer.uid, u + 1);
    this.perPid.set(peer.pid, p + 1);
    return null;
  }

  /** Connection `fd` is being closed: no longer counted (call before closing it). */
  release(fd: number): void {
    const peer = this.peers.get(fd);
    if (peer === undefined) return;
    this.peers.delete(fd);
    const down = (m: Map<number, number>, k: number) => {
      const n = (m.get(k) ?? 1) - 1;
      if (n > 0) m.set(k, n);
      else m.delete(k);
    };
    down(this.perUid, peer.uid);
    down(this.perPid, peer.pid);
  }

  /** Connections admitted and not released. */
  get size(): number {
    return this.peers.size;
  }
}
