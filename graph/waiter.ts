/**
 * Sleeping when idle: waits until one of the drivers' file descriptors is readable or a
 * timeout passes, on this thread's libuv loop (the core addon's FdWaiter, uv_poll + uv_timer),
 * so the event loop keeps serving the API while the data plane sleeps.
 */
import { loadCore, type FdWaiter } from '../native/addons.ts';

export class IdleWaiter {
  private readonly w: FdWaiter;
  private waiting = false;
  private nFds = 0;

  constructor() {
    const core = loadCore();
    this.w = new core.FdWaiter();
  }

  add(fd: number): void {
    this.w.add(fd);
    this.nFds++;
  }

  remove(fd: number): void {
    this.w.remove(fd);
    this.nFds--;
  }

  /** Call `cb` once: when an fd is readable or after `timeoutMs` (-1: no timeout). */
  wait(timeoutMs: number, cb: (fd: number) => void): void {
    this.waiting = true;
    // Nothing to wait for but a wake(): still wait on a long timer, so that a running data
    // plane keeps the process alive and re-checks now and then.
    if (timeoutMs < 0 && this.nFds === 0) timeoutMs = 60_000;
    this.w.wait(timeoutMs, (fd: number) => {
      this.waiting = false;
      cb(fd);
    });
  }

  cancel(): void {
    if (this.waiting) {
      this.waiting = false;
      this.w.cancel();
    }
  }

  close(): void {
    this.cancel();
    this.w.close();
  }
}

/**
 * The dispatch loop's turns: its function once per soon(), where setImmediate's callbacks run
 * (the loop's check phase), without the Immediate object Node makes per setImmediate (with its
 * async bookkeeping, ~150 bytes of garbage per message in a two-process ping-pong).
 */
export class Turns {
  private readonly w: FdWaiter;

  /** `fn` is held here: the waiter holds it weakly. */
  constructor(private readonly fn: () => void) {
    this.w = new (loadCore().FdWaiter)();
    this.w.onTurn(fn);
  }

  soon(): void {
    this.w.soon();
  }

  close(): void {
    this.w.close();
  }
}
