/**
 * `show threads` (VPP's threads_cli.c): what the kernel says about the calling thread, its LWP
 * (task id), scheduling policy and priority, the CPU it is pinned to and that CPU's core and
 * socket. Read from /proc/thread-self and /sys on the thread itself, so a worker answers for
 * its own thread.
 */
import { readFileSync, readlinkSync } from 'node:fs';
import type { ThreadView } from './views.ts';

/** Linux's SCHED_* numbers, as VPP prints them. */
const POLICIES: Record<number, string> = { 0: 'other', 1: 'fifo', 2: 'rr', 3: 'batch', 5: 'idle', 6: 'deadline' };

/** A number from a sysfs file, or null where there is none (no such CPU, no topology). */
function sysNumber(path: string): number | null {
  try {
    const n = Number(readFileSync(path, 'utf8').trim());
    return Number.isInteger(n) ? n : null;
  } catch {
    return null;
  }
}

/** The calling thread as `show threads` lists it; `lcore` is the CPU it is pinned to, if it is. */
export function currentThread(index: number, name: string, type: string, lcore: number | null): ThreadView {
  // "PID/task/TID"
  const lwp = Number(readlinkSync('/proc/thread-self').split('/').pop());
  // Fields after the command name (which may hold spaces and parentheses): field N at N - 3.
  const stat = readFileSync(`/proc/thread-self/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const policy = Number(f[41 - 3]),
    priority = Number(f[40 - 3]),
    ranOn = Number(f[39 - 3]);
  const cpu = lcore ?? null;
  const topo = (what: string) =>
    cpu === null ? null : sysNumber(`/sys/devices/system/cpu/cpu${cpu}/topology/${what}`);
  return {
    index,
    name,
    type,
    lwp,
    policy: POLICIES[policy] ?? `policy ${policy}`,
    priority,
    lcore: cpu,
    core: topo('core_id'),
    socket: topo('physical_package_id'),
    cpu: ranOn,
  };
}
