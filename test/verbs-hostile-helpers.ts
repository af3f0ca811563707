/**
 * A hostile daemon for test/verbs-hostile-daemon.test.ts, in its own process (so that it can run
 * as another uid, and a program it feeds can be watched from the test's loop): it listens on
 * SOCKET (a path, or "@name" in the abstract namespace) and speaks the verbs socket's protocol
 * (native/verbs-lib/proto.h) as the daemon does, except where MODE says to lie:
 *
 *   benign       every answer as the real daemon would give it
 *   inline       CREATE_QP and QUERY_QP: max_inline 0xffffffff (whatever was asked)
 *   query-inline QUERY_QP alone: max_inline 0xffffffff (CREATE_QP answers truly)
 *   sge          CREATE_QP: max_sge 0x10000000 (16 x max_sge wraps to 0 in u32)
 *   depth        CREATE_QP: max_send_wr 0xffffffff, max_recv_wr 0x80000001
 *   cqe          CREATE_CQ: 0x7fffffff entries
 *   device       DEVICES: max_qp, max_qp_wr, max_sge, max_cqe 0xffffffff, max_rd_atom 0x10000
 *   count        DEVICES: count 0x7fffffff with one device's bytes
 *   handle       CREATE_QP: QPN 0xffffffff (QPNs are 24 bits); CREATE_CHANNEL: handle 0xffffffff
 *   unsolicited  true answers, then a message nobody asked for once a program that made a CQ
 *                has been idle for 300 ms (waiting in ibv_get_cq_event)
 *
 * Prints {"listening":true,"uid":N} once it listens. Runs until killed.
 *
 *   node --import tsx test/verbs-hostile-helpers.ts SOCKET MODE
 */
import { loadCore } from '../native/addons.ts';

const [socket, mode] = process.argv.slice(2);
const core = loadCore();
const MAGIC = 0x31564752;
const ALL = 0xffffffff;

const listener = core.seqpacketListen(socket);
process.stdout.write(JSON.stringify({ listening: true, uid: process.getuid?.() }) + '\n');

interface Conn {
  fd: number;
  last: number;
  nudged: boolean;
  /** It made a CQ: a program that may wait for its events. */
  cq: boolean;
  qp: { qpn: number; sendWr: number; recvWr: number; sge: number; inline: number; state: number } | null;
}
const conns: Conn[] = [];
let next = 1;

function reply(c: Conn, op: number, seq: number, body: Uint8Array, count = 0, status = 0): void {
  const out = new Uint8Array(16 + body.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, MAGIC, true);
  v.setUint16(4, op, true);
  v.setInt16(6, status, true);
  v.setUint32(8, seq, true);
  v.setUint32(12, count, true);
  out.set(body, 16);
  core.seqpacketSend(c.fd, out);
}

function u32s(...w: number[]): Uint8Array {
  const out = new Uint8Array(4 * w.length);
  const v = new DataView(out.buffer);
  w.forEach((x, k) => v.setUint32(4 * k, x >>> 0, true));
  return out;
}

function device(): Uint8Array {
  const d = new Uint8Array(132);
  const v = new DataView(d.buffer);
  const enc = new TextEncoder();
  d.set(enc.encode('rdmagraph_hostile0'), 0);
  d.set(enc.encode('hostile0'), 64);
  d.set([2, 0, 0, 0, 0, 1], 96);
  d[102] = 1;
  d.set([127, 0, 0, 1], 104);
  v.setUint32(108, 1500, true);
  const lie = mode === 'device';
  v.setUint32(112, lie ? ALL : 256, true);
  v.setUint32(116, lie ? ALL : 16384, true);
  v.setUint32(120, lie ? ALL : 32, true);
  v.setUint32(124, lie ? ALL : 1 << 20, true);
  v.setUint32(128, lie ? 0x10000 : 16, true);
  return d;
}

function serve(c: Conn, data: Uint8Array): void {
  if (data.length < 16) return;
  const v = new DataView(data.buffer, data.byteOffset, data.length);
  const op = v.getUint16(4, true),
    seq = v.getUint32(8, true);
  const f = (k: number) => (data.length >= 20 + 4 * k ? v.getUint32(16 + 4 * k, true) : 0);
  switch (op) {
    case 1: // DEVICES
      return reply(c, op, seq, device(), mode === 'count' ? 0x7fffffff : 1);
    case 2: // ALLOC_PD
      return reply(c, op, seq, u32s(next++));
    case 4: // REG_MR
      return reply(c, op, seq, u32s(next++, 0x1000 + next++));
    case 6: // CREATE_CQ: entries as asked
      c.cq = true;
      return reply(c, op, seq, u32s(next++, mode === 'cqe' ? 0x7fffffff : f(0)));
    case 8: {
      // CREATE_QP: pd, send_cq, recv_cq, max_send_wr, max_recv_wr, max_sge, max_inline, srq
      const q = {
        qpn: mode === 'handle' ? ALL : 0x100 + next++,
        sendWr: Math.max(1, f(3)),
        recvWr: Math.max(1, f(4)),
        sge: Math.max(1, f(5)),
        inline: f(6),
        state: 0,
      };
      c.qp = { ...q };
      if (mode === 'inline') q.inline = ALL;
      if (mode === 'sge') q.sge = 0x10000000;
      if (mode === 'depth') [q.sendWr, q.recvWr] = [ALL, 0x80000001];
      return reply(c, op, seq, u32s(q.qpn, q.sendWr, q.recvWr, q.sge, q.inline));
    }
    case 9: // MODIFY_QP: qpn, mask, state
      if (c.qp !== null) c.qp.state = f(2);
      return reply(c, op, seq, new Uint8Array(0));
    case 11: {
      // QUERY_QP: state, dest_qpn, rq_psn, sq_psn, ord, ird, path_mtu, caps, dest_ipv4
      const q = c.qp ?? { qpn: 0, sendWr: 1, recvWr: 1, sge: 1, inline: 0, state: 0 };
      const inl = mode === 'inline' || mode === 'query-inline' ? ALL : q.inline;
      return reply(c, op, seq, u32s(q.state, 0x200, 0, 0, 1, 1, 3, q.sendWr, q.recvWr, q.sge, inl, 0x0100007f));
    }
    case 13: // CREATE_CHANNEL
      return reply(c, op, seq, u32s(mode === 'handle' ? ALL : next++));
    case 16: // CREATE_SRQ: pd, max_wr, max_sge
      return reply(c, op, seq, u32s(next++, Math.max(1, f(1)), Math.max(1, f(2))));
    default: // ATTACH, the destroys, QP_RING, SRQ_RING, MODIFY_SRQ: done
      return reply(c, op, seq, new Uint8Array(0));
  }
}

function tick(): void {
  for (;;) {
    const fd = core.seqpacketAccept(listener);
    if (fd < 0) break;
    conns.push({ fd, last: Date.now(), nudged: false, cq: false, qp: null });
  }
  for (const c of [...conns]) {
    for (;;) {
      const m = core.seqpacketRecv(c.fd);
      if (m === null) break;
      if ('eof' in m) {
        core.closeFd(c.fd);
        conns.splice(conns.indexOf(c), 1);
        break;
      }
      if (m.fd >= 0) core.closeFd(m.fd); // rings, memory, eventfds: not needed to lie
      c.last = Date.now();
      serve(c, m.data);
    }
    if (mode === 'unsolicited' && !c.nudged && conns.includes(c) && c.cq && Date.now() - c.last > 300) {
      c.nudged = true;
      reply(c, 0x7777, 0, new Uint8Array(0));
    }
  }
  setTimeout(tick, 1);
}
tick();
