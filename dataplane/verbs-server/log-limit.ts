/**
 * Log lines that a client can cause, rate-limited (issue 26, finding 6): the verbs socket logs
 * what a program did wrong, and a program can do it 20,000 times in five seconds. Per key (a
 * connection, a user): the first `burst` lines are written; after that none, but once per
 * `intervalMs` a summary with how many were suppressed and the last of them; a key quiet for a
 * whole interval starts over; `end(key)` writes what is still counted (the connection closed).
 * So a flood costs at most `burst` lines, then one a second, then one at its end.
 *
 *   const lines = new LogLimiter((level, msg) => log(level, msg), 'verbs socket: ');
 *   lines.say('uid 0', 'warn', 'dropped a connection: ...');
 */

type Level = 'warn' | 'info';

interface KeyState {
  said: number;
  suppressed: number;
  last: string;
  level: Level;
  timer: ReturnType<typeof setTimeout> | null;
}

export class LogLimiter {
  private readonly keys = new Map<string, KeyState>();

  constructor(
    private readonly log: ((level: Level, msg: string) => void) | undefined,
    /** Put before a summary line ("verbs socket: "). */
    private readonly prefix = '',
    private readonly burst = 5,
    private readonly intervalMs = 1000,
  ) {}

  /** Write `msg` (whole, prefix included), or count it as suppressed under `key`. */
  say(key: string, level: Level, msg: string): void {
    if (this.log === undefined) return;
    let st = this.keys.get(key);
    if (st === undefined) {
      st = { said: 0, suppressed: 0, last: '', level, timer: null };
      this.keys.set(key, st);
    }
    if (st.said < this.burst) {
      st.said++;
      this.log(level, msg);
    } else {
      st.suppressed++;
      st.last = msg;
      st.level = level;
    }
    if (st.timer === null) this.arm(key, st);
  }

  /** The key is done (its connection closed): say what is still counted, forget it. */
  end(key: string): void {
    const st = this.keys.get(key);
    if (st === undefined) return;
    if (st.timer !== null) clearTimeout(st.timer);
    this.keys.delete(key);
    this.summary(key, st);
  }

  /** End every key. */
  close(): void {
    for (const key of [...this.keys.keys()]) this.end(key);
  }

  private arm(key: string, st: KeyState): void {
    st.timer = setTimeout(() => {
      st.timer = null;
      if (st.suppressed === 0) {
        this.keys.delete(key); // a quiet interval: the next line starts a fresh burst
        return;
      }
      this.summary(key, st);
      this.arm(key, st);
    }, this.intervalMs);
    st.timer.unref?.();
  }

  private summary(key: string, st: KeyState): void {
    if (st.suppressed === 0 || this.log === undefined) return;
    const n = st.suppressed;
    st.suppressed = 0;
    const last = this.prefix !== '' && st.last.startsWith(this.prefix) ? st.last.slice(this.prefix.length) : st.last;
    this.log(st.level, `${this.prefix}${n} more line${n === 1 ? '' : 's'} suppressed (${key}; the last: ${last})`);
  }
}
