/**
 * Sleeping when idle: waits until one of the drivers' file descriptors is readable or a
 * timeout passes, on this thread's libuv loop (the core addon's FdWaiter, uv_poll + uv_timer),
 * so the event loop keeps serving the API while the data plane sleeps. And the loop's turns
 * (Turns: uv_check + uv_idle, no object per turn as setImmediate makes).
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
 * The dispatch loops' turns: each Turns' function once per soon(), where setImmediate's
 * callbacks run (the event loop's check phase), without the Immediate object Node makes per
 * setImmediate (with its async bookkeeping, ~150 bytes of garbage per message in a two-process
 * ping-pong). All the loops of a thread share one native turn (FdWaiter.onTurn/soon), as
 * processImmediate runs every immediate queued before it in one call: a native turn per loop
 * costs a callback into JavaScript per loop (two stacks in one process, measured: SEND round
 * trip 12.6-13.1 -> 15.8-17.2 us).
 */
export class Turns {
  private closed = false;

  constructor(private readonly fn: () => void) {}

  /** Run the function once, in the thread's next turn (twice before it: once). */
  soon(): void {
    if (!this.closed) threadTurns.add(this);
  }

  /** An armed turn is dropped. */
  close(): void {
    this.closed = true;
  }

  /** The shared turn's call (never when closed). */
  run(): void {
    if (!this.closed) this.fn();
  }
}

/** This thread's one native turn and the Turns waiting for it, in the order they asked. */
class ThreadTurns {
  private w: FdWaiter | null = null;
  private queued: (Turns | null)[] = [];
  private n = 0;
  private running: (Turns | null)[] = [];

  add(t: Turns): void {
    for (let i = 0; i < this.n; i++) if (this.queued[i] === t) return;
    if (this.n === this.queued.length) this.queued.push(t);
    else this.queued[this.n] = t;
    this.n++;
    if (this.w === null) {
      this.w = new (loadCore().FdWaiter)();
      this.w.onTurn(this.turn);
    }
    this.w.soon();
  }

  // Those that ask during the turn (each loop asks for its next one) go to the next turn. A
  // throw does not keep the others from running: the first is thrown again at the end (an
  // uncaught exception, as from an immediate).
  private readonly turn = (): void => {
    const list = this.queued,
      n = this.n;
    this.queued = this.running;
    this.n = 0;
    this.running = list;
    let error: unknown = null;
    let threw = false;
    for (let i = 0; i < n; i++) {
      const t = list[i] as Turns;
      list[i] = null;
      try {
        t.run();
      } catch (e) {
        if (!threw) {
          threw = true;
          error = e;
        }
      }
    }
    if (threw) throw error;
  };
}

const threadTurns = new ThreadTurns();
