/**
 * The connection manager (PROTOCOL.md section 6), in band on UDP. REQ/ACCEPT/REJECT carry,
 * after a TRP header with psn 0 and ack 0: private-data length(2) ird(2) ord(2) and up to 512
 * bytes of private data; the datagram length must be exactly 16 + that length.
 *
 * Active side: `connect` sends REQ from the QP's port to the listener and resends it every
 * `retryMs` until ACCEPT or REJECT arrives or `timeoutMs` passes (urdma sends it once). The
 * ACCEPT's source port is the peer QP's port; IRD/ORD are settled and the QP goes to RTS.
 *
 * Passive side: a listener port is bound to cm-input. A REQ makes the listener's `accept`
 * callback create a QP (on a new port), IRD := REQ.ord and ORD := REQ.ird (REJECT if either
 * is over the limit), the QP goes to RTS and ACCEPT goes out from its port. A repeated REQ
 * (our ACCEPT was lost) gets the same ACCEPT again, not a second QP.
 */
import { type Frame, type Graph, type NodeRuntime, OPAQUE_WORDS } from '../../graph/index.ts';
import { formatIp4, Ip4Opaque } from '../ip4/ip4.ts';
import type { RdmaCore } from './core.ts';
import { MAX_RD_ATOMIC, type Qp } from './qp.ts';
import { CM_MAX_PRIVATE_DATA, CM_PARAMS_BYTES, TRP_HEADER_BYTES, TrpOp } from './wire.ts';

export const CM_INPUT = 'cm-input';

export const CmError = { MALFORMED: 0, NO_LISTENER: 1, UNEXPECTED: 2, REQUESTS: 3 } as const;
const ERRORS = [
  { name: 'malformed', description: 'CM message with a bad length or values', severity: 'error' },
  { name: 'no_listener', description: 'REQ to a port with no listener', severity: 'warn' },
  { name: 'unexpected', description: 'ACCEPT/REJECT for a QP not connecting', severity: 'info' },
  { name: 'requests', description: 'connection requests received', severity: 'info' },
] as const;

export interface ConnectRequest {
  /** The peer's address and (data) port. */
  address: string;
  port: number;
  listenPort: number;
  ird: number;
  ord: number;
  privateData: Uint8Array;
}

/** What a listener's accept callback returns: a QP in INIT to connect, or a rejection. */
export type AcceptDecision = { qp: Qp; privateData?: Uint8Array } | { reject: true; privateData?: Uint8Array; reason?: string };

export interface Listener {
  port: number;
  accept: (req: ConnectRequest) => AcceptDecision;
  /** Peer "address:port" -> the QP we created for it (repeated REQs). */
  readonly conns: Map<string, Qp>;
}

export interface PendingConnect {
  qp: Qp;
  startNs: number;
  timeoutNs: number;
  retryNs: number;
  req: Uint8Array;
  resolve: (r: { privateData: Uint8Array }) => void;
  reject: (e: Error) => void;
}

/** Hooks the verbs layer gives the CM (QP state changes live there). */
export interface CmHooks {
  established(qp: Qp, peerAddr: number, peerPort: number, ird: number, ord: number): void;
  failed(qp: Qp, reason: string): void;
}

export class ConnectionManager {
  readonly core: RdmaCore;
  readonly listeners = new Map<number, Listener>();
  readonly pending = new Map<number, PendingConnect>(); // by QP index
  hooks!: CmHooks;
  rt!: NodeRuntime;

  constructor(core: RdmaCore) {
    this.core = core;
  }

  static message(op: number, ird: number, ord: number, pd: Uint8Array): Uint8Array {
    const m = new Uint8Array(TRP_HEADER_BYTES + CM_PARAMS_BYTES + pd.length);
    const v = new DataView(m.buffer);
    v.setUint16(8, op << 12);
    v.setUint16(10, pd.length);
    v.setUint16(12, ird);
    v.setUint16(14, ord);
    m.set(pd, 16);
    return m;
  }

  send(msg: Uint8Array, dst: number, dstPort: number, srcPort: number): void {
    this.core.net.udp.sendTo(msg, dst, dstPort, srcPort);
  }

  /** Start an active connect (the QP is bound to its port and in INIT). */
  connect(p: PendingConnect, dst: number, dstPort: number): void {
    this.pending.set(p.qp.index, p);
    this.send(p.req, dst, dstPort, p.qp.qpn);
    this.core.graph.startTimer(this.rt, p.retryNs, p.qp.index);
  }

  cancel(qp: Qp, reason: string): void {
    const p = this.pending.get(qp.index);
    if (!p) return;
    this.pending.delete(qp.index);
    p.reject(new Error(reason));
  }

  /** REQ retransmission timer. */
  timer(index: number): void {
    const p = this.pending.get(index);
    if (!p) return;
    const now = this.core.graph.clock.nowNs();
    if (now - p.startNs >= p.timeoutNs) {
      this.pending.delete(index);
      const why = `connect to ${formatIp4(p.qp.remoteAddr)}:${p.qp.remotePort} timed out after ${Math.round(p.timeoutNs / 1e6)} ms`;
      this.hooks.failed(p.qp, why);
      p.reject(new Error(why));
      return;
    }
    this.send(p.req, p.qp.remoteAddr, p.qp.remotePort, p.qp.qpn);
    this.core.graph.startTimer(this.rt, p.retryNs, index);
  }

  /** One CM message (data at the TRP header). */
  input(rt: NodeRuntime, bytes: Uint8Array, src: number, srcPort: number, dstPort: number, qpIndex: number): void {
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (bytes.length < TRP_HEADER_BYTES + CM_PARAMS_BYTES) return rt.countError(CmError.MALFORMED);
    const op = v.getUint16(8) >>> 12;
    if (op !== TrpOp.REQ && op !== TrpOp.ACCEPT && op !== TrpOp.REJECT) return rt.countError(CmError.MALFORMED);
    const pdLen = v.getUint16(10), ird = v.getUint16(12), ord = v.getUint16(14);
    if (bytes.length !== TRP_HEADER_BYTES + CM_PARAMS_BYTES + pdLen || pdLen > CM_MAX_PRIVATE_DATA) return rt.countError(CmError.MALFORMED);
    const pd = bytes.slice(16, 16 + pdLen);
    if (op === TrpOp.REQ) {
      rt.countError(CmError.REQUESTS);
      const l = this.listeners.get(dstPort);
      if (!l) return rt.countError(CmError.NO_LISTENER);
      const key = `${src}:${srcPort}`;
      const have = l.conns.get(key);
      if (have && !have.destroyed) {
        this.send(ConnectionManager.message(TrpOp.ACCEPT, have.ird, have.ord, have.privateData), src, srcPort, have.qpn);
        return;
      }
      if (ird > MAX_RD_ATOMIC || ord > MAX_RD_ATOMIC) {
        this.send(ConnectionManager.message(TrpOp.REJECT, 0, 0, new Uint8Array(0)), src, srcPort, dstPort);
        return;
      }
      let d: AcceptDecision;
      try {
        d = l.accept({ address: formatIp4(src), port: srcPort, listenPort: dstPort, ird, ord, privateData: pd });
      } catch (e) {
        d = { reject: true, reason: (e as Error).message };
      }
      if ('reject' in d) {
        this.send(ConnectionManager.message(TrpOp.REJECT, 0, 0, d.privateData ?? new Uint8Array(0)), src, srcPort, dstPort);
        return;
      }
      const qp = d.qp;
      // Passive side: IRD := REQ.ord, ORD := REQ.ird, each within what the QP allows.
      this.hooks.established(qp, src, srcPort, Math.min(ord, qp.cfg.ird) || 1, Math.min(ird, qp.cfg.ord) || 1);
      qp.privateData = d.privateData ?? new Uint8Array(0);
      qp.cmRole = 'passive';
      l.conns.set(key, qp);
      this.send(ConnectionManager.message(TrpOp.ACCEPT, qp.ird, qp.ord, qp.privateData), src, srcPort, qp.qpn);
      return;
    }
    const p = qpIndex >= 0 ? this.pending.get(qpIndex) : undefined;
    // Only the host we sent the REQ to answers it (from the port of the QP it made).
    if (!p || src !== p.qp.remoteAddr) return rt.countError(CmError.UNEXPECTED);
    this.pending.delete(qpIndex);
    if (op === TrpOp.ACCEPT) {
      // Our ORD may not exceed the peer's IRD; our IRD serves the peer's ORD.
      this.hooks.established(p.qp, src, srcPort, Math.max(p.qp.ird, Math.min(ord, p.qp.cfg.ird)), Math.min(p.qp.ord, ird) || 1);
      p.resolve({ privateData: pd });
    } else {
      const why = `connection rejected by ${formatIp4(src)}:${srcPort}`;
      this.hooks.failed(p.qp, why);
      const e = new Error(why) as Error & { privateData?: Uint8Array };
      e.privateData = pd;
      p.reject(e);
    }
  }
}

export function registerCmInput(graph: Graph, cm: ConnectionManager): NodeRuntime {
  const rt = graph.register({
    name: CM_INPUT, errors: ERRORS, runtimeData: cm, fn: cmInput, timer: (r, user) => (r.runtimeData as ConnectionManager).timer(user),
    formatTrace: (r) => String(r),
  });
  cm.rt = rt;
  return rt;
}

function cmInput(rt: NodeRuntime, frame: Frame | null): number {
  const f = frame as Frame;
  const cm = rt.runtimeData as ConnectionManager;
  const pool = rt.graph.pool;
  const op = pool.opaque;
  for (let i = 0; i < f.n; i++) {
    const bi = f.vec[i];
    const w = bi * OPAQUE_WORDS;
    const ports = op[w + Ip4Opaque.PORTS];
    // ACCEPT/REJECT concern the QP on the destination port (-1 on a listener's port, which
    // udp4-input hands over directly: no RDMA opaque word is set there).
    const dstPort = ports & 0xffff;
    cm.input(rt, pool.packetBytes(bi), op[w + Ip4Opaque.REMOTE], ports >>> 16, dstPort, cm.core.qpByPort[dstPort]);
  }
  pool.free(f.vec, 0, f.n);
  return f.n;
}
