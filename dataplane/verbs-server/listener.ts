/**
 * The verbs socket's listener (docs/VERBS-PROTOCOL.md sections 1 and 6): it binds the socket,
 * accepts connections, and admits or refuses each. The socket: SOCK_SEQPACKET at `verbs.socket`,
 * mode 0660 from the moment it exists (bound in a private directory and renamed into place,
 * native/core/verbs_socket.cc), a stale file replaced and a live one refused. Every connection
 * it accepts is admitted (admission.ts) or refused, and an admitted one handed to whoever serves
 * it (connections.ts: this data plane's; with cpu.workers the main thread picks a worker). A refused connection's first request is answered with the errno and
 * the reason as text, then closed. At the fd limit a spare fd lets accept() take a waiting
 * connection off the queue and close it, so the loop never spins on one it cannot take.
 */
import { existsSync, mkdirSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import type { VerbsSocket } from '../api.ts';
import { loadCore, type FdWaiter } from '../../native/addons.ts';
import { RGV_MAX_REASON } from './abi.generated.ts';
import { fdHeadroom, type Refusal, type VerbsAdmission } from './admission.ts';
import { LogLimiter } from './log-limit.ts';
import { message, readMessage } from './messages.ts';

/** What a listener hands its accepted connections to (one data plane's, or a worker's). */
export interface VerbsConnections {
  /** Serve connection `fd` (accepted already); closes it when too many are open. */
  adopt(fd: number): void;
  connections(): number;
  close(): void;
}

/** Refused connections held at once to answer their first request with the reason. */
const MAX_REFUSING = 16;
/** How long a refused connection may take to send that request. */
const REFUSING_MS = 2000;
/** Accepts per wake-up of the listener (the rest on the next turn of the loop). */
const ACCEPT_BURST = 64;
/** After accept fails without a spare fd (or for another reason): the listener rests this long. */
const ACCEPT_BACKOFF_MS = 100;

/**
 * Listen on `path` and give every accepted connection to `serve` (startVerbsSocket: this data
 * plane's; with cpu.workers the main thread picks a worker per connection). With `admission`,
 * a connection it refuses is held (at most MAX_REFUSING, and only with fds to spare) until its
 * first request, which is answered with the refusal's errno and reason as text, then closed.
 */
export function listenVerbs(
  path: string,
  serve: Pick<VerbsConnections, 'adopt' | 'connections' | 'close'>,
  opts: { admission?: VerbsAdmission; log?: (level: 'info' | 'warn', msg: string) => void } = {},
): VerbsSocket {
  const core = loadCore();
  const abstract = path.startsWith('@');
  if (!abstract) {
    mkdirSync(dirname(path), { recursive: true });
    if (existsSync(path)) {
      let live = false;
      try {
        core.closeFd(core.memifRawConnect(path));
        live = true;
      } catch {
        // Nobody answers: a stale file of a daemon that died.
      }
      if (live) throw new Error(`verbs.socket ${path}: another process serves it (another rdma-graph?)`);
      unlinkSync(path);
    }
  }
  let lfd: number;
  try {
    // 0660 from the moment the file exists (never the umask's mode: bound in a private directory).
    lfd = core.verbsListen(path, 0o660);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST')
      throw new Error(`verbs.socket ${path}: another process serves it (another rdma-graph?)`);
    throw e;
  }
  const lines = new LogLimiter(opts.log, 'verbs socket: ');
  const waiter: FdWaiter = new core.FdWaiter();
  const refusing = new Map<number, Refusal & { until: number }>();
  let closed = false,
    watching = true,
    backoff: ReturnType<typeof setTimeout> | null = null;
  const hangUp = (fd: number) => {
    waiter.remove(fd);
    refusing.delete(fd);
    core.closeFd(fd);
  };
  const refuse = (fd: number, r: Refusal) => {
    lines.say(`uid ${r.uid}`, 'warn', `verbs socket: refused a connection of ${r.owner} (uid ${r.uid}): ${r.reason}`);
    // Told why only while that costs nothing the daemon needs: else closed at once.
    if (refusing.size >= MAX_REFUSING || !fdHeadroom(core, fd, 0.5)) return core.closeFd(fd);
    refusing.set(fd, { ...r, until: Date.now() + REFUSING_MS });
    waiter.add(fd);
  };
  /** A refused connection's first request: its errno and the reason, then the end. */
  const answer = (fd: number) => {
    const r = refusing.get(fd) as Refusal;
    const m = core.seqpacketRecv(fd);
    if (m === null) return; // woken for nothing: wait on
    if ('data' in m) {
      if (m.fd >= 0) core.closeFd(m.fd);
      const q = readMessage(m.data);
      if (q !== null) {
        const text = new TextEncoder().encode(r.reason).subarray(0, RGV_MAX_REASON);
        core.seqpacketSend(fd, message(q.op, q.seq, text, -r.errno));
      }
    }
    hangUp(fd);
  };
  const acceptSome = () => {
    for (let k = 0; k < ACCEPT_BURST; k++) {
      const c = core.verbsAccept(lfd);
      if (c === -1) return;
      if (c === -2) {
        lines.say('out of fds', 'warn', 'verbs socket: out of file descriptors: a waiting connection was closed');
        continue;
      }
      if (c < 0) {
        // Out of descriptors with no spare to give back, or accept failing otherwise: rest.
        lines.say('accept', 'warn', 'verbs socket: accept fails: the listener rests 100 ms');
        waiter.remove(lfd);
        watching = false;
        backoff = setTimeout(() => {
          backoff = null;
          if (closed) return;
          waiter.add(lfd);
          watching = true;
          loop();
        }, ACCEPT_BACKOFF_MS);
        return;
      }
      const no = opts.admission?.admit(c) ?? null;
      if (no !== null) refuse(c, no);
      else serve.adopt(c);
    }
  };
  const loop = () => {
    if (closed || waiter.waiting || (!watching && refusing.size === 0)) return;
    const timeout =
      refusing.size === 0 ? -1 : Math.max(0, Math.min(...[...refusing.values()].map((r) => r.until)) - Date.now());
    waiter.wait(timeout, (fd: number) => {
      if (closed) return;
      if (fd === lfd) acceptSome();
      else if (fd >= 0 && refusing.has(fd)) answer(fd);
      const now = Date.now();
      for (const [f, r] of refusing) if (r.until <= now) hangUp(f);
      loop();
    });
  };
  waiter.add(lfd);
  loop();
  return {
    path,
    connections: () => serve.connections(),
    close() {
      if (closed) return;
      closed = true;
      if (backoff !== null) clearTimeout(backoff);
      waiter.close();
      for (const fd of refusing.keys()) core.closeFd(fd);
      refusing.clear();
      serve.close();
      core.verbsUnlisten(lfd);
      lines.close();
      if (!abstract && existsSync(path)) unlinkSync(path);
    },
  };
}
