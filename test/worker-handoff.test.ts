/**
 * The two handoff nodes against hostile input, one thread playing both workers:
 *
 * - worker-handoff (frames off the wire): too short for Ethernet, IPv4 or UDP, header lengths
 *   below 20 or past the frame, later fragments, other protocols, ports of this worker or of no
 *   worker. Only a whole UDP header naming another worker's QP number goes into the queue to
 *   that worker (as received on its interface); ARP goes on and is copied; IGMP too; a group's
 *   datagram on the multicast port goes to the workers with groups; a full queue drops and
 *   counts; one publish and at most one kick per queue per vector.
 * - handoff-input (slots from another worker): lengths of 0 or past the slot, kinds that are
 *   neither received nor to transmit, interface indices this worker does not have or has no
 *   device of, each counted and skipped; good slots go to ethernet-input or to the interface's
 *   tx node with their interface; an empty pool leaves frames waiting; the eventfd is read only
 *   after the graph slept armed.
 *
 * Nothing is lost or leaked: every buffer is back in the pool at the end.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Graph } from '../graph/graph.ts';
import type { Frame, NodeRuntime } from '../graph/node.ts';
import {
  HANDOFF_RX,
  HANDOFF_SLOT_HEADER,
  HANDOFF_TX,
  HandoffConsumer,
  HandoffInbox,
  HandoffProducer,
  handoffQueue,
} from '../graph/handoff-queue.ts';
import { handoffTable, registerWorkerHandoff } from '../nodes/handoff/worker-handoff.ts';
import { addHandoffInterface, registerHandoffInput } from '../nodes/handoff/handoff-input.ts';
import { loadCore } from '../native/addons.ts';
import { memPool } from './helpers.ts';

const core = loadCore();

/** An Ethernet frame: type, then an IPv4 header of `ihl` words (protocol, fragment field) and a UDP port. */
function ip4(opts: {
  ihl?: number;
  proto?: number;
  frag?: number;
  dport?: number;
  len?: number;
  dst?: number[];
}): Uint8Array {
  const ihl = opts.ihl ?? 5;
  const f = new Uint8Array(opts.len ?? 14 + Math.max(ihl * 4, 20) + 8 + 10);
  f.set([0x08, 0x00], 12);
  f[14] = 0x40 | ihl;
  const ip = 14;
  if (f.length > ip + 9) f[ip + 9] = opts.proto ?? 17;
  if (opts.dst !== undefined && f.length >= ip + 20) f.set(opts.dst, ip + 16);
  if (f.length > ip + 7) {
    f[ip + 6] = (opts.frag ?? 0) >> 8;
    f[ip + 7] = (opts.frag ?? 0) & 0xff;
  }
  const u = ip + ihl * 4;
  if (f.length > u + 3) {
    f[u + 2] = (opts.dport ?? 0) >> 8;
    f[u + 3] = (opts.dport ?? 0) & 0xff;
  }
  return f;
}

function arp(): Uint8Array {
  const f = new Uint8Array(42);
  f.fill(0xff, 0, 6);
  f.set([0x08, 0x06], 12);
  return f;
}

/** Sinks counting what reaches them (and the rxIf / txIf they carry), freeing the buffers. */
function sinks(g: Graph, names: string[]) {
  const got: Record<string, { n: number; ifs: number[]; last?: Uint8Array }> = {};
  for (const name of names) {
    got[name] = { n: 0, ifs: [] };
    g.register({
      name,
      fn: (_rt: NodeRuntime, f: Frame | null) => {
        const pool = g.pool;
        for (let i = 0; i < f!.n; i++) {
          const bi = f!.vec[i];
          got[name].ifs.push(name.endsWith('-tx') ? pool.txIf[bi] : pool.rxIf[bi]);
          got[name].last = pool.packetBytes(bi);
        }
        got[name].n += f!.n;
        pool.free(f!.vec, 0, f!.n);
        return f!.n;
      },
    });
  }
  return got;
}

/** The multicast port of the sender's table. */
const MCAST_PORT = 19999;

/**
 * Worker 0 of 2 (worker 1 owns QP numbers 25000..29999): worker-handoff, its queue to worker 1
 * read back here; `groups`: the groups each worker joined.
 */
function sender(poolSize = 64, slots = 64, kickFd = -1, groups = new Int32Array(2)) {
  const pool = memPool(poolSize);
  const g = new Graph({ pool });
  const got = sinks(g, ['ethernet-input']);
  const queue: { bytes: Uint8Array; rxIf: number }[] = [];
  g.register({
    name: 'frames-input',
    type: 'input',
    next: ['worker-handoff'],
    fn: (rt) => {
      let n = 0;
      for (const q of queue.splice(0)) {
        const bi = pool.writePacket(q.bytes, 0, q.bytes.length);
        pool.rxIf[bi] = q.rxIf;
        rt.scratch[n++] = bi;
      }
      if (n > 0) g.enqueueToSingleNext(rt, 0, rt.scratch, 0, n);
      return n;
    },
  });
  const mem = handoffQueue(1518, kickFd, slots);
  registerWorkerHandoff(
    g,
    handoffTable(
      0,
      [
        [20000, 24999],
        [25000, 29999],
      ],
      [null, new HandoffProducer(mem)],
      groups,
      MCAST_PORT,
    ),
  );
  g.build();
  const toWorker1 = new HandoffConsumer(mem);
  /** What worker 1 finds in its queue: [interface, kind, length] per slot. */
  const handed = (): [number, number, number][] => {
    const out: [number, number, number][] = [];
    for (let n = toWorker1.available(); n > 0; n = toWorker1.available())
      for (let i = 0; i < n; i++) {
        const w = toWorker1.slot();
        out.push([toWorker1.u32[w + 1] & 0xffffff, toWorker1.u32[w + 1] >>> 24, toWorker1.u32[w]]);
        toWorker1.pop();
      }
    toWorker1.release();
    return out;
  };
  const count = (reason: string) =>
    g.errorSnapshot().rows.find((r) => r.node === 'worker-handoff' && r.reason === reason)?.count ?? 0;
  return { pool, g, got, queue, count, handed, toWorker1 };
}

test('worker-handoff: only a whole UDP header with another worker’s QP number leaves this worker, as received on its interface', () => {
  const r = sender();
  const frames: [string, Uint8Array, number, 'eth' | 'handed'][] = [
    ['shorter than Ethernet', new Uint8Array(5), 1, 'eth'],
    ['IPv4 cut in its header', ip4({ dport: 26000, len: 30 }), 1, 'eth'],
    ['UDP to worker 1', ip4({ dport: 26000 }), 1, 'handed'],
    ['IHL 15, frame ends before UDP', ip4({ ihl: 15, dport: 26000, len: 14 + 60 + 2 }), 1, 'eth'],
    ['IHL 15 with a whole UDP header', ip4({ ihl: 15, dport: 26000 }), 2, 'handed'],
    ['IHL 2 (below 20 bytes)', ip4({ ihl: 2, dport: 26000 }), 1, 'eth'],
    ['a later fragment', ip4({ frag: 0x0010, dport: 26000 }), 1, 'eth'],
    ['TCP, not UDP', ip4({ proto: 6, dport: 26000 }), 1, 'eth'],
    ["UDP to this worker's QP number", ip4({ dport: 20001 }), 1, 'eth'],
    ['UDP to no QP number', ip4({ dport: 80 }), 1, 'eth'],
  ];
  for (const [, bytes, rxIf] of frames) r.queue.push({ bytes, rxIf });
  r.g.runPass();
  assert.is(r.got['ethernet-input'].n, frames.filter((f) => f[3] === 'eth').length);
  assert.equal(
    r.handed(),
    frames.filter((f) => f[3] === 'handed').map((f) => [f[2], HANDOFF_RX, f[1].length]),
    'in the queue to worker 1: each with its interface index, as received',
  );
  assert.is(r.count("frames handed to the QP's worker"), 2);
  assert.is(r.pool.available(), r.pool.count, 'every buffer back (the handed ones freed here)');
});

test('worker-handoff: ARP goes on here and a copy goes to the other worker; a full queue drops and counts, never more', () => {
  const r = sender(64, 4);
  r.queue.push({ bytes: arp(), rxIf: 1 });
  r.g.runPass();
  assert.is(r.got['ethernet-input'].n, 1);
  assert.equal(r.handed(), [[1, HANDOFF_RX, 42]]);
  assert.is(r.count('ARP copies sent to the other workers'), 1);
  // Four slots: three UDP frames and an ARP fill it; the rest of the vector finds it full.
  for (let i = 0; i < 3; i++) r.queue.push({ bytes: ip4({ dport: 26000 + i }), rxIf: 1 });
  r.queue.push({ bytes: arp(), rxIf: 1 });
  for (let i = 0; i < 5; i++) r.queue.push({ bytes: ip4({ dport: 27000 + i }), rxIf: 1 });
  r.queue.push({ bytes: arp(), rxIf: 1 });
  r.g.runPass();
  assert.is(r.count("frames handed to the QP's worker"), 3);
  assert.is(r.count("dropped: the handoff queue to the QP's worker was full"), 5);
  assert.is(r.count("ARP copy dropped: the worker's handoff queue was full"), 1);
  assert.is(r.got['ethernet-input'].n, 3, 'both ARPs went on here regardless');
  assert.is(r.handed().length, 4);
  assert.is(r.pool.available(), r.pool.count);
});

test("worker-handoff: a group's datagram on the multicast port is copied to the workers with groups, kept only where this one has any; IGMP is copied to all; what is cut or not to a group is not", () => {
  const groups = new Int32Array(2);
  const r = sender(64, 4, -1, groups);
  const GROUP = [239, 1, 2, 3];
  const toGroup = () => ip4({ dport: MCAST_PORT, dst: GROUP });
  // Nobody joined: it stays (ethernet-input drops and counts it there).
  r.queue.push({ bytes: toGroup(), rxIf: 1 });
  r.g.runPass();
  assert.equal([r.got['ethernet-input'].n, r.handed().length], [1, 0]);
  // Worker 1 joined a group: a copy goes there, none stays here.
  groups[1] = 1;
  r.queue.push({ bytes: toGroup(), rxIf: 1 });
  r.g.runPass();
  assert.equal([r.got['ethernet-input'].n, r.handed()], [1, [[1, HANDOFF_RX, 52]]]);
  // Both joined: a copy there and the frame here.
  groups[0] = 2;
  r.queue.push({ bytes: toGroup(), rxIf: 2 });
  r.g.runPass();
  assert.equal([r.got['ethernet-input'].n, r.handed()], [2, [[2, HANDOFF_RX, 52]]]);
  groups[0] = 0;
  // Not copied: unicast to the multicast port, a group's datagram to another port, a UDP header
  // the frame does not hold, a later fragment.
  for (const bytes of [
    ip4({ dport: MCAST_PORT, dst: [10, 0, 0, 1] }),
    ip4({ dport: 80, dst: GROUP }),
    ip4({ dport: MCAST_PORT, dst: GROUP, len: 14 + 20 + 2 }),
    ip4({ dport: MCAST_PORT, dst: GROUP, frag: 0x0010 }),
  ])
    r.queue.push({ bytes, rxIf: 1 });
  r.g.runPass();
  assert.equal([r.got['ethernet-input'].n, r.handed().length], [6, 0]);
  // IGMP (even cut short) goes on here and to every other worker, whatever they joined.
  groups[1] = 0;
  r.queue.push({ bytes: ip4({ proto: 2, dst: [224, 0, 0, 1] }), rxIf: 1 });
  r.queue.push({ bytes: ip4({ proto: 2, len: 14 + 20 }), rxIf: 1 });
  r.g.runPass();
  assert.equal([r.got['ethernet-input'].n, r.handed().length], [8, 2]);
  assert.is(r.count('IGMP copies sent to the other workers'), 2);
  // A full queue: the copies that find no room are counted, the frames here go on.
  groups[0] = 1;
  groups[1] = 1;
  for (let i = 0; i < 6; i++) r.queue.push({ bytes: toGroup(), rxIf: 1 });
  r.g.runPass();
  assert.is(r.handed().length, 4, 'four slots');
  assert.is(r.count("copies of a group's datagram sent to the workers with members"), 2 + 4);
  assert.is(r.count("IGMP or group datagram copy dropped: the worker's handoff queue was full"), 2);
  assert.is(r.got['ethernet-input'].n, 14);
  assert.is(r.pool.available(), r.pool.count, 'every buffer back');
});

test('worker-handoff: a vector of frames for a sleeping worker is one publish and one kick', () => {
  const fd = core.eventfd();
  try {
    const r = sender(64, 64, fd);
    assert.is(r.toWorker1.arm(), false, 'worker 1 is about to sleep');
    for (let i = 0; i < 20; i++) r.queue.push({ bytes: ip4({ dport: 25000 + i }), rxIf: 1 });
    r.g.runPass();
    assert.is(core.eventfdRead(fd), 1, 'one eventfd write for the vector');
    assert.is(r.handed().length, 20);
    for (let i = 0; i < 20; i++) r.queue.push({ bytes: ip4({ dport: 25000 + i }), rxIf: 1 });
    r.g.runPass();
    assert.is(core.eventfdRead(fd), 0, 'not armed again: no kick');
    assert.is(r.handed().length, 20);
    assert.is(r.pool.available(), r.pool.count);
  } finally {
    core.closeFd(fd);
  }
});

/**
 * A worker receiving from another: handoff-input over one queue, interface 1 with its device
 * here (tx node if1-tx), interface 2 another worker's (no device), nothing beyond 2.
 */
function receiver(poolSize = 64, kickFd = -1) {
  const pool = memPool(poolSize);
  const g = new Graph({ pool });
  const got = sinks(g, ['ethernet-input', 'if1-tx', 'if2-tx']);
  const mem = handoffQueue(200, kickFd, 16);
  const inbox = new HandoffInbox(g, [mem], [1], kickFd);
  const rt = registerHandoffInput(g, inbox, 2);
  addHandoffInterface(g, rt, 1, 'if1-tx');
  addHandoffInterface(g, rt, 2, null);
  g.build();
  const from1 = new HandoffProducer(mem);
  /** A slot as worker 1 would write it, header fields as given (hostile ones too). */
  const slot = (len: number, ifIndex: number, kind: number, fill = 0xab) => {
    const at = from1.reserve();
    assert.ok(at >= 0, 'room in the queue');
    from1.u8.fill(fill, at, at + Math.min(len, from1.maxFrame));
    from1.commit(len, ifIndex, kind);
  };
  const count = (reason: string) =>
    g.errorSnapshot().rows.find((r) => r.node === 'handoff-input' && r.reason === reason)?.count ?? 0;
  return { pool, g, got, inbox, from1, slot, count };
}

test('handoff-input: hostile slots are counted and skipped; good ones go to ethernet-input or the tx node with their interface', () => {
  const r = receiver();
  r.slot(0, 1, HANDOFF_RX); // no frame
  r.slot(r.from1.maxFrame + 1, 1, HANDOFF_RX); // past the slot
  r.slot(0xffffffff, 1, HANDOFF_TX); // far past it
  r.slot(60, 1, 0); // neither kind
  r.slot(60, 1, 7);
  r.slot(60, 0, HANDOFF_RX); // interface 0 is none
  r.slot(60, 3, HANDOFF_RX); // no interface 3 here
  r.slot(60, 0xffffff, HANDOFF_TX);
  r.slot(60, 2, HANDOFF_TX); // to transmit on an interface whose device is elsewhere
  r.slot(60, 1, HANDOFF_RX); // good: received on 1
  r.slot(60, 2, HANDOFF_RX); // good: received on 2 (ARP copies, frames for our QPs)
  r.slot(r.from1.maxFrame, 1, HANDOFF_TX); // good: to transmit on 1, as long as a slot holds
  r.from1.publish();
  r.g.runPass();
  assert.is(r.count('handoff slots with no frame or one past the slot'), 3);
  assert.is(r.count('handoff slots neither received nor to transmit'), 2);
  assert.is(r.count('handoff slots naming an interface this worker does not have'), 3);
  assert.is(r.count('frames to transmit on an interface this worker has no device of'), 1);
  assert.equal(r.got['ethernet-input'].ifs, [1, 2]);
  assert.equal(r.got['if1-tx'].ifs, [1]);
  assert.is(r.got['if1-tx'].last?.length, r.from1.maxFrame);
  assert.is(r.got['if2-tx'].n, 0, 'never sent back into a remote interface');
  assert.is(r.inbox.from[0].available(), 0, 'every slot consumed');
  assert.is(r.pool.available(), r.pool.count);
});

test('handoff-input: with no buffer the frames wait in the queue (counted), and come through once there are', () => {
  const r = receiver(8);
  for (let i = 0; i < 12; i++) r.slot(100, 1, HANDOFF_RX, i);
  r.from1.publish();
  r.g.runPass();
  assert.is(r.got['ethernet-input'].n, 8, 'as many as the pool holds');
  assert.is(r.count('handoff frames left waiting: no buffer'), 1);
  assert.is(r.inbox.from[0].available(), 4, 'the rest still in the queue');
  // Hold every buffer: the next pass takes nothing and counts it again.
  const held = new Uint32Array(8);
  assert.is(r.pool.alloc(held, 0, 8), 8);
  r.g.runPass();
  assert.is(r.count('handoff frames left waiting: no buffer'), 2);
  assert.is(r.got['ethernet-input'].n, 8);
  r.pool.free(held, 0, 8);
  r.g.runPass();
  assert.is(r.got['ethernet-input'].n, 12, 'the rest, once buffers are back');
  assert.equal(r.got['ethernet-input'].last, new Uint8Array(100).fill(11), 'in order, bytes intact');
  assert.is(r.pool.available(), r.pool.count);
});

test('handoff-input: the eventfd is read after the graph slept armed, not on a pass that did not sleep', () => {
  const fd = core.eventfd();
  try {
    const r = receiver(64, fd);
    // The sleep guard arms; the graph then does not sleep (another guard kept it awake).
    assert.is(r.inbox.arm(), false);
    r.slot(60, 1, HANDOFF_RX);
    r.from1.publish();
    r.g.runPass();
    assert.is(r.got['ethernet-input'].n, 1);
    assert.is(core.eventfdRead(fd), 1, 'the kick left for the next sleep to find (it wakes at once and reads it)');
    // Armed, and this time it sleeps: the pass after reads the eventfd.
    assert.is(r.inbox.arm(), false);
    r.slot(60, 1, HANDOFF_RX);
    r.from1.publish();
    r.g.sleeps++; // as Graph.sleep counts
    r.g.runPass();
    assert.is(core.eventfdRead(fd), 0, 'drained by handoff-input');
    // Busy: frames and passes, no arming, no kick.
    for (let i = 0; i < 5; i++) {
      r.slot(60, 1, HANDOFF_RX);
      r.from1.publish();
      r.g.runPass();
    }
    assert.is(core.eventfdRead(fd), 0);
    assert.is(r.got['ethernet-input'].n, 7);
    assert.is(r.pool.available(), r.pool.count);
  } finally {
    core.closeFd(fd);
  }
});

test('handoff-input: 20 000 seeded random slots (any length, interface and kind): each taken or counted, nothing leaked', () => {
  const r = receiver(32);
  let seed = 0x2545f491;
  const rnd = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return seed >>> 0;
  };
  const pick = (xs: number[]) => xs[rnd() % xs.length];
  let good = 0,
    sent = 0;
  for (let round = 0; round < 2000; round++) {
    for (let i = 0; i < 10; i++, sent++) {
      const len = pick([0, 1, 14, 60, r.from1.maxFrame, r.from1.maxFrame + 1, rnd(), rnd() % 300]);
      const ifIndex = pick([0, 1, 2, 3, 0xffffff, rnd()]);
      const kind = pick([0, HANDOFF_RX, HANDOFF_TX, 3, 0xff]);
      r.slot(len, ifIndex, kind, rnd() & 0xff);
      const fits = len >= 1 && len <= r.from1.maxFrame;
      const ix = ifIndex & 0xffffff;
      if (fits && ((kind === HANDOFF_RX && (ix === 1 || ix === 2)) || (kind === HANDOFF_TX && ix === 1))) good++;
    }
    r.from1.publish();
    r.g.runPass();
  }
  const errors = r.g
    .errorSnapshot()
    .rows.filter((x) => x.node === 'handoff-input')
    .reduce((n, x) => n + x.count, 0);
  assert.is(r.got['ethernet-input'].n + r.got['if1-tx'].n, good, 'every good slot delivered');
  assert.is(errors, sent - good, 'every other one counted');
  assert.is(r.got['if2-tx'].n, 0);
  assert.is(r.pool.available(), r.pool.count);
});

test('worker-handoff to handoff-input: a frame crosses with its bytes and interface', () => {
  const a = sender();
  const b = receiver();
  const f = ip4({ dport: 26000 });
  f[30] = 0x5a;
  a.queue.push({ bytes: f, rxIf: 2 });
  a.g.runPass();
  // Carry the slot over by hand (the two rigs have their own queues).
  const c = a.toWorker1;
  assert.is(c.available(), 1);
  const w = c.slot();
  const at = b.from1.reserve();
  b.from1.u8.set(c.u8.subarray((w << 2) + HANDOFF_SLOT_HEADER, (w << 2) + HANDOFF_SLOT_HEADER + c.u32[w]), at);
  b.from1.commit(c.u32[w], c.u32[w + 1] & 0xffffff, c.u32[w + 1] >>> 24);
  c.pop();
  c.release();
  b.from1.publish();
  b.g.runPass();
  assert.equal(b.got['ethernet-input'].ifs, [2]);
  assert.equal(b.got['ethernet-input'].last, f);
  assert.is(a.pool.available(), a.pool.count);
  assert.is(b.pool.available(), b.pool.count);
});

test.run();
