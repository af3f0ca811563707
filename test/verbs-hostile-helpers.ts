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
 *   name         DEVICES: the device named "../../../tmp/x" (a name becomes paths: probes.c)
 *   handle       CREATE_QP: QPN 0xffffffff (QPNs are 24 bits); CREATE_CHANNEL: handle 0xffffffff
 *   unsolicited  true answers, then a message nobody asked for once a program that made a CQ
 *                has been idle for 300 ms (waiting in ibv_get_cq_event)
 *   slow         ALLOC_PD: the connection's second is answered only when its third comes (after
 *                the library gave up waiting), just before the third's answer; handles 1000 + n
 *   done         true answers; every QP ring passed is mapped and its send queue's done index
 *                (RGV_QP_SQ_DONE) overwritten with a random value every millisecond while the
 *                program polls (no work request is ever completed); prints {"scribbled":N}
 *                each second
 *   cqprod       true answers; each CQ ring passed is mapped, and before answering a DESTROY_QP,
 *                or a MODIFY_QP to RESET, the QP's CQ rings get a producer index 2^31 past the
 *                consumer's and every entry the QP's number (what the library's CQ clean walks)
 *
 * Prints {"listening":true,"uid":N} once it listens. Runs until killed.
 *
 *   node --import tsx test/verbs-hostile-helpers.ts SOCKET MODE
 */
import { loadCore } from '../native/addons.ts';
import {
  type AbiStruct,
  RGV_CQ_CONS,
  RGV_CQ_PROD,
  RGV_QP_SQ_DONE,
  RGV_QPS_RESET,
  RGV_RING_HDR,
  rgv_cqe,
  RGV_MTU_1024,
  RGV_MTU_4096,
  RGV_OPS,
  rgv_cq,
  rgv_create_cq,
  rgv_create_qp,
  rgv_create_srq,
  rgv_device,
  rgv_handle,
  rgv_modify_qp,
  rgv_mr,
  rgv_qp,
  rgv_qp_attr,
  rgv_qp_ring,
  rgv_srq,
} from '../dataplane/verbs-server/abi.generated.ts';
import { decode, type Decoded, encode, message, readMessage } from '../dataplane/verbs-server/messages.ts';

const [socket, mode] = process.argv.slice(2);
const core = loadCore();
const ALL = 0xffffffff;
const { DEVICES, ALLOC_PD, REG_MR, CREATE_CQ, CREATE_QP, MODIFY_QP, QUERY_QP, CREATE_CHANNEL, CREATE_SRQ, DESTROY_QP } =
  RGV_OPS;

const listener = core.seqpacketListen(socket);
process.stdout.write(JSON.stringify({ listening: true, uid: process.getuid?.() }) + '\n');

interface Conn {
  fd: number;
  last: number;
  nudged: boolean;
  /** It made a CQ: a program that may wait for its events. */
  cq: boolean;
  qp: { qpn: number; sendWr: number; recvWr: number; sge: number; inline: number; state: number } | null;
  /** slow: ALLOC_PDs so far, and the one held back. */
  pds?: number;
  held?: { op: number; seq: number; handle: number } | null;
}
const conns: Conn[] = [];
let next = 1;

function reply(c: Conn, op: number, seq: number, body: Uint8Array, count = 0, status = 0): void {
  core.seqpacketSend(c.fd, message(op, seq, body, status, count));
}

const none = new Uint8Array(0);

function device(): Uint8Array {
  const lie = mode === 'device';
  return encode(rgv_device, {
    name: mode === 'name' ? '../../../tmp/x' : 'rg_hostile0',
    ifname: 'hostile0',
    mac: [2, 0, 0, 0, 0, 1],
    link_up: 1,
    active_mtu: RGV_MTU_1024,
    ipv4: [127, 0, 0, 1],
    mtu: 1500,
    max_qp: lie ? ALL : 256,
    max_qp_wr: lie ? ALL : 16384,
    max_sge: lie ? ALL : 32,
    max_cqe: lie ? ALL : 1 << 20,
    max_rd_atom: lie ? 0x10000 : 16,
    max_cq: 256,
    max_mr: 256,
    max_pd: 256,
    max_srq: 256,
    max_srq_wr: 16384,
    max_srq_sge: 32,
    max_sge_rd: 32,
    max_inline: 64,
    max_msg_sz: 2 ** 31,
    max_mtu: RGV_MTU_4096,
    max_res_rd_atom: 256 * 16,
    page_size_cap: 4096,
    max_mr_size: 2 ** 31,
    node_guid: [0, 0, 0, 0xff, 0xfe, 0, 0, 1],
    fw_ver: 'hostile\x1b[2J',
  });
}

/** The request's body as `s`, its members zero where the body is short (a lie needs no more). */
function body<S extends AbiStruct>(s: S, data: DataView): Decoded<S> {
  const full = new Uint8Array(s.size);
  full.set(new Uint8Array(data.buffer, data.byteOffset, Math.min(data.byteLength, s.size)));
  return decode(s, new DataView(full.buffer));
}

/** mode cqprod: the CQ rings' words (the CQ's handle: its ring), and how many times they were spoiled. */
const cqRings = new Map<number, Uint32Array>();
let spoiled = 0;

/** mode cqprod: every CQ ring's producer 2^31 ahead of its consumer, every entry naming `qpn`. */
function spoil(qpn: number): void {
  for (const u of cqRings.values()) {
    const entries = (u.length * 4 - RGV_RING_HDR) / rgv_cqe.size;
    for (let i = 0; i < entries; i++) u[(RGV_RING_HDR + i * rgv_cqe.size + rgv_cqe.fields.qp_num.offset) / 4] = qpn;
    u[RGV_CQ_PROD / 4] = (u[RGV_CQ_CONS / 4] + 0x80000000) >>> 0;
    spoiled++;
  }
  process.stdout.write(JSON.stringify({ spoiled }) + '\n');
}

/** mode done: the QP rings' words, and how many times their done index was overwritten. */
const rings: Uint32Array[] = [];
let scribbled = 0;

function serve(c: Conn, data: Uint8Array, fds: number[]): void {
  const q = readMessage(data);
  if (q === null) return;
  const { op, seq } = q;
  if (mode === 'done' && op === RGV_OPS.QP_RING.op && fds.length > 0)
    rings.push(new Uint32Array(core.mapVerbsMemory(fds.shift() as number, body(rgv_qp_ring, q.body).bytes))); // closes it
  switch (op) {
    case DEVICES.op:
      return reply(c, op, seq, device(), mode === 'count' ? 0x7fffffff : 1);
    case ALLOC_PD.op:
      if (mode === 'slow') {
        c.pds = (c.pds ?? 0) + 1;
        if (c.pds === 2) return void (c.held = { op, seq, handle: 1002 });
        const h = c.held;
        c.held = null;
        if (h) reply(c, h.op, h.seq, encode(rgv_handle, { handle: h.handle })); // late
        return reply(c, op, seq, encode(rgv_handle, { handle: 1000 + c.pds }));
      }
      return reply(c, op, seq, encode(rgv_handle, { handle: next++ }));
    case REG_MR.op:
      return reply(c, op, seq, encode(rgv_mr, { handle: next++, stag: 0x1000 + next++ }));
    case CREATE_CQ.op: {
      // entries as asked
      c.cq = true;
      const r = body(rgv_create_cq, q.body);
      const handle = next++;
      if (mode === 'cqprod' && fds.length > 0)
        cqRings.set(handle, new Uint32Array(core.mapVerbsMemory(fds.shift() as number, r.bytes))); // closes it
      return reply(c, op, seq, encode(rgv_cq, { handle, entries: mode === 'cqe' ? 0x7fffffff : r.entries }));
    }
    case DESTROY_QP.op:
      if (mode === 'cqprod') spoil(body(rgv_handle, q.body).handle);
      return reply(c, op, seq, none);
    case CREATE_QP.op: {
      const r = body(rgv_create_qp, q.body);
      const qp = {
        qpn: mode === 'handle' ? ALL : 0x100 + next++,
        sendWr: Math.max(1, r.max_send_wr),
        recvWr: Math.max(1, r.max_recv_wr),
        sge: Math.max(1, r.max_sge),
        inline: r.max_inline,
        state: 0,
      };
      c.qp = { ...qp };
      if (mode === 'inline') qp.inline = ALL;
      if (mode === 'sge') qp.sge = 0x10000000;
      if (mode === 'depth') [qp.sendWr, qp.recvWr] = [ALL, 0x80000001];
      return reply(
        c,
        op,
        seq,
        encode(rgv_qp, {
          qpn: qp.qpn,
          max_send_wr: qp.sendWr,
          max_recv_wr: qp.recvWr,
          max_sge: qp.sge,
          max_inline: qp.inline,
        }),
      );
    }
    case MODIFY_QP.op: {
      const m = body(rgv_modify_qp, q.body);
      if (c.qp !== null) c.qp.state = m.state;
      if (mode === 'cqprod' && m.state === RGV_QPS_RESET) spoil(m.qpn);
      return reply(c, op, seq, none);
    }
    case QUERY_QP.op: {
      const qp = c.qp ?? { qpn: 0, sendWr: 1, recvWr: 1, sge: 1, inline: 0, state: 0 };
      const inl = mode === 'inline' || mode === 'query-inline' ? ALL : qp.inline;
      return reply(
        c,
        op,
        seq,
        encode(rgv_qp_attr, {
          state: qp.state,
          dest_qpn: 0x200,
          rq_psn: 0,
          sq_psn: 0,
          max_rd_atomic: 1,
          max_dest_rd_atomic: 1,
          path_mtu: RGV_MTU_1024,
          max_send_wr: qp.sendWr,
          max_recv_wr: qp.recvWr,
          max_sge: qp.sge,
          max_inline: inl,
          dest_ipv4: [127, 0, 0, 1],
        }),
      );
    }
    case CREATE_CHANNEL.op:
      return reply(c, op, seq, encode(rgv_handle, { handle: mode === 'handle' ? ALL : next++ }));
    case CREATE_SRQ.op: {
      const r = body(rgv_create_srq, q.body);
      return reply(
        c,
        op,
        seq,
        encode(rgv_srq, { handle: next++, max_wr: Math.max(1, r.max_wr), max_sge: Math.max(1, r.max_sge) }),
      );
    }
    default: // ATTACH, the destroys, QP_RING, SRQ_RING, MODIFY_SRQ: done
      return reply(c, op, seq, none);
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
      c.last = Date.now();
      serve(c, m.data, m.fds);
      for (const f of m.fds) core.closeFd(f); // rings, memory, eventfds: not needed to lie (a map stays)
    }
    if (mode === 'unsolicited' && !c.nudged && conns.includes(c) && c.cq && Date.now() - c.last > 300) {
      c.nudged = true;
      reply(c, 0x7777, 0, none);
    }
  }
  for (const r of rings) {
    r[RGV_QP_SQ_DONE / 4] = (Math.random() * 0x100000000) >>> 0;
    scribbled++;
  }
  setTimeout(tick, 1);
}
if (mode === 'done') setInterval(() => process.stdout.write(JSON.stringify({ scribbled }) + '\n'), 1000);
tick();
