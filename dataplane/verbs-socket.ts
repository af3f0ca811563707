/**
 * The verbs control socket (Dataplane.serveVerbs): how librdmagraph-verbs.so (native/verbs-lib/, preloaded into an
 * unmodified libibverbs program by `rdma-graph exec`) reaches this daemon. A SOCK_SEQPACKET
 * listener at `verbs.socket` (mode 0660), one connection per opened device context, fixed
 * little-endian messages (native/verbs-lib/proto.h).
 *
 * Served today: RGV_OP_DEVICES, one device per interface with an IPv4 address. Every other
 * request is answered EOPNOTSUPP; a malformed one closes that connection (logged), never the
 * daemon. Connections are bounded (MAX_CONNECTIONS) and each request is answered from the
 * daemon's own state, so nothing a client sends sizes an allocation.
 */
import { chmodSync, existsSync, mkdirSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Dataplane } from './dataplane.ts';
import { VERBS_LIMITS } from './verbs.ts';
import { loadCore, NATIVE_BUILD_DIR, type FdWaiter } from '../native/load.ts';

/** librdmagraph-verbs.so, what `rdma-graph exec` preloads (built when libibverbs-dev is there). */
export const VERBS_LIBRARY = `${NATIVE_BUILD_DIR}librdmagraph-verbs.so`;

export const RGV_MAGIC = 0x31564752;
export const RGV_OP_DEVICES = 1;
export const RGV_HDR_BYTES = 16;
export const RGV_DEVICE_BYTES = 132;
export const RGV_MAX_DEVICES = 64;
const EOPNOTSUPP = 95;
const MAX_CONNECTIONS = 256;

export interface VerbsSocketOptions {
  /** Path of the socket (a relative one against the working directory), or "@name" (abstract). */
  path: string;
  /** Most QPs of the data plane (rdma.max-qps), for ibv_query_device. */
  maxQps: number;
  log?: (level: 'info' | 'warn', msg: string) => void;
}

export interface VerbsSocket {
  path: string;
  /** Connected applications (device contexts and device-list queries in progress). */
  connections(): number;
  close(): void;
}

/** The DEVICES response: one record per interface with an IPv4 address (at most 64). */
async function devices(dp: Dataplane, seq: number, maxQps: number): Promise<Uint8Array> {
  const itfs = (await dp.interfaces()).filter((i) => i.addresses.length > 0).slice(0, RGV_MAX_DEVICES);
  const out = new Uint8Array(RGV_HDR_BYTES + itfs.length * RGV_DEVICE_BYTES);
  const v = new DataView(out.buffer);
  header(v, RGV_OP_DEVICES, 0, seq, itfs.length);
  const enc = new TextEncoder();
  itfs.forEach((itf, k) => {
    const o = RGV_HDR_BYTES + k * RGV_DEVICE_BYTES;
    out.set(enc.encode(`rdmagraph_${itf.name}`).subarray(0, 63), o);
    out.set(enc.encode(itf.name).subarray(0, 31), o + 64);
    out.set(
      itf.mac.split(':').map((h) => parseInt(h, 16)),
      o + 96,
    );
    out[o + 102] = itf.state === 'up' ? 1 : 0;
    out.set(
      itf.addresses[0]
        .split('/')[0]
        .split('.')
        .map((x) => Number(x)),
      o + 104,
    );
    v.setUint32(o + 108, itf.mtu, true);
    v.setUint32(o + 112, maxQps, true);
    v.setUint32(o + 116, VERBS_LIMITS.maxWr, true);
    v.setUint32(o + 120, VERBS_LIMITS.maxSge, true);
    v.setUint32(o + 124, VERBS_LIMITS.maxCqe, true);
    v.setUint32(o + 128, VERBS_LIMITS.maxRdAtomic, true);
  });
  return out;
}

function header(v: DataView, op: number, status: number, seq: number, count: number): void {
  v.setUint32(0, RGV_MAGIC, true);
  v.setUint16(4, op, true);
  v.setInt16(6, status, true);
  v.setUint32(8, seq, true);
  v.setUint32(12, count, true);
}

/**
 * Listen on `opts.path`: a stale socket file nobody serves is replaced, one another process
 * serves is refused (an error naming the path).
 */
export function startVerbsSocket(dp: Dataplane, opts: VerbsSocketOptions): VerbsSocket {
  const core = loadCore();
  const path = opts.path;
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
  const lfd = core.seqpacketListen(path);
  if (!abstract) chmodSync(path, 0o660);
  const waiter: FdWaiter = new core.FdWaiter();
  const conns = new Set<number>();
  let closed = false;
  const drop = (fd: number, why: string | null) => {
    if (why !== null) opts.log?.('warn', `verbs socket: dropped a connection: ${why}`);
    waiter.remove(fd);
    conns.delete(fd);
    core.closeFd(fd);
  };
  const serve = async (fd: number) => {
    // Bounded: at most 64 messages per wake-up per connection; the rest waits for the next.
    for (let k = 0; k < 64 && conns.has(fd); k++) {
      const m = core.seqpacketRecv(fd);
      if (m === null) return;
      if ('eof' in m) return drop(fd, null);
      if (m.fd >= 0) core.closeFd(m.fd); // no request passes a descriptor yet
      if (m.data.length !== RGV_HDR_BYTES) return drop(fd, `a request of ${m.data.length} bytes (16 expected)`);
      const q = new DataView(m.data.buffer, m.data.byteOffset, m.data.length);
      if (q.getUint32(0, true) !== RGV_MAGIC) return drop(fd, 'a request without the RGV1 magic');
      const op = q.getUint16(4, true),
        seq = q.getUint32(8, true);
      let resp: Uint8Array;
      if (op === RGV_OP_DEVICES) resp = await devices(dp, seq, opts.maxQps);
      else {
        resp = new Uint8Array(RGV_HDR_BYTES);
        header(new DataView(resp.buffer), op, -EOPNOTSUPP, seq, 0);
      }
      if (!conns.has(fd)) return;
      const err = core.seqpacketSend(fd, resp);
      if (err !== 0) return drop(fd, `send failed (errno ${err})`);
    }
  };
  const loop = () => {
    if (closed) return;
    waiter.wait(-1, (fd: number) => {
      if (closed) return;
      if (fd === lfd) {
        for (let c = core.seqpacketAccept(lfd); c >= 0; c = core.seqpacketAccept(lfd)) {
          if (conns.size >= MAX_CONNECTIONS) {
            opts.log?.('warn', `verbs socket: refused a connection: ${MAX_CONNECTIONS} are open`);
            core.closeFd(c);
            continue;
          }
          conns.add(c);
          waiter.add(c);
        }
        loop();
      } else if (fd >= 0 && conns.has(fd)) {
        serve(fd).then(loop, (e: Error) => {
          drop(fd, e.message);
          loop();
        });
      } else loop();
    });
  };
  waiter.add(lfd);
  loop();
  return {
    path,
    connections: () => conns.size,
    close() {
      if (closed) return;
      closed = true;
      waiter.close();
      for (const c of conns) core.closeFd(c);
      conns.clear();
      core.closeFd(lfd);
      if (!abstract && existsSync(path)) unlinkSync(path);
    },
  };
}
