/**
 * A completion channel is signalled when the pass that wrote its CQE ends, not from inside the
 * node that wrote it (dataplane/verbs-server/rings.ts signalSoon): the program it wakes (asleep
 * in ibv_get_cq_event) takes the CPU at once when it shares the daemon's, and a signal from
 * inside a node left the rest of the pass (the ACK, the next segments) waiting until it slept
 * again. The event is counted in the ring at the same time (the library finds the CQ by the
 * count: a count ahead of its signal lets a program take the event before the wake-up, which then
 * finds nothing), and RGV_CQ_SIGNALLED says when the byte is sent. One signal per channel per pass, however many CQEs; none to a channel closed
 * meanwhile. A program's threads asleep at the idle point of any of its CQs (the library's idle
 * sleep, on RGV_CQ_WAKE) are woken the same way, when a pass wrote a CQE to any CQ of that
 * program: once per CQ per pass, when it ends, only while RGV_CQ_SLEEPERS says someone sleeps.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { loadCore } from '../native/addons.ts';
import { type Channel, CqGroup, CqRing, CQE_BYTES, RING_HDR, VerbsRings } from '../dataplane/verbs-server/rings.ts';
import {
  RGV_CQ_ARM_NEXT,
  RGV_CQ_ARMED,
  RGV_CQ_EVENTS,
  RGV_CQ_SIGNALLED,
  RGV_CQ_SIGNALLED_UNSET,
  RGV_CQ_SLEEPERS,
  RGV_CQ_WAKE,
} from '../dataplane/verbs-server/abi.generated.ts';
import { closeLeftovers, trackedStacks, waitFor } from './rdma-helpers.ts';
import type { Completion } from '../nodes/rdma/verbs.ts';

test.after.each(closeLeftovers);

const core = loadCore();
const ENTRIES = 16;

test('a CQE written inside a node signals its armed channel once, when the pass ends', async () => {
  const p = trackedStacks();
  await p.ready;
  const { graph, rdma } = p.a;
  const rings = new VerbsRings(graph, rdma, () => {});
  const ch: Channel = { fd: core.eventfd(), stream: false, users: 0 };
  const closed: Channel = { fd: core.eventfd(), stream: false, users: 0 };
  try {
    const arm = (r: CqRing) => Atomics.store(r.u32, RGV_CQ_ARMED / 4, RGV_CQ_ARM_NEXT);
    const ring = (c: Channel) => {
      const cq = rdma.createCq(ENTRIES);
      const r = new CqRing(cq, new ArrayBuffer(RING_HDR + ENTRIES * CQE_BYTES), ENTRIES, c);
      // As the library makes it: what a daemon that does not keep the word leaves.
      Atomics.store(r.u32, RGV_CQ_SIGNALLED / 4, RGV_CQ_SIGNALLED_UNSET);
      rings.attachCq(r);
      assert.is(Atomics.load(r.u32, RGV_CQ_SIGNALLED / 4), 0, 'taken by the daemon: nothing signalled yet');
      arm(r);
      return r;
    };
    const r1 = ring(ch),
      r2 = ring(ch),
      r3 = ring(closed);
    const done = (qpn: number): Completion => ({ wrId: 0, qpn, status: 'success', opcode: 'send', byteLen: 64 });
    // A node of the graph's completes on all three CQs (two share `ch`), then looks at the fds.
    const seen: number[] = [];
    let runs = 0;
    graph.register({
      name: 'test-completer',
      type: 'input',
      fn: () => {
        if (runs++ > 0) return 0;
        for (const r of [r1, r2, r3]) rdma.core.complete(r.cq, done(r.cq.handle));
        // The channel of `closed` goes away before the pass ends (its program's connection closed).
        core.closeFd(closed.fd);
        closed.fd = -1;
        seen.push(
          core.eventfdRead(ch.fd),
          Atomics.load(r1.u32, RGV_CQ_EVENTS / 4),
          Atomics.load(r1.u32, RGV_CQ_SIGNALLED / 4),
        );
        return 3;
      },
      formatTrace: (t) => String(t),
    });
    await new Promise<void>((resolve) => {
      const t = setInterval(() => {
        if (runs > 0) {
          clearInterval(t);
          resolve();
        }
      }, 1);
    });
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(seen, [0, 0, 0], 'neither signalled nor counted from inside the node');
    assert.is(core.eventfdRead(ch.fd), 1, 'signalled once when the pass ended, for two CQEs on two CQs');
    assert.is(Atomics.load(r1.u32, RGV_CQ_EVENTS / 4) + Atomics.load(r2.u32, RGV_CQ_EVENTS / 4), 2, 'an event per CQ');
    assert.is(Atomics.load(r3.u32, RGV_CQ_EVENTS / 4), 1, "the closed channel's CQ counted its event");
    for (const r of [r1, r2, r3])
      assert.is(
        Atomics.load(r.u32, RGV_CQ_SIGNALLED / 4),
        Atomics.load(r.u32, RGV_CQ_EVENTS / 4),
        'each CQ says its events are signalled (the library waits for that before it empties the fd)',
      );
    // Armed again, another CQE: signalled again (the channel is not left marked).
    arm(r1);
    rdma.core.complete(r1.cq, done(r1.cq.handle));
    await new Promise((r) => setTimeout(r, 20));
    assert.is(core.eventfdRead(ch.fd), 1, 'signalled again');
    for (const r of [r1, r2, r3]) rings.detachCq(r);
  } finally {
    core.closeFd(ch.fd);
  }
});

/** A connected AF_UNIX stream pair: [the daemon's end, the program's end] and their fds. */
async function streamPair(): Promise<{ daemon: net.Socket; program: net.Socket; fd: number; close: () => void }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chan-'));
  const where = path.join(dir, 's');
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(where, r));
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
  const program = net.connect(where);
  const daemon = await accepted;
  daemon.pause();
  const fd = (daemon as unknown as { _handle: { fd: number } })._handle.fd;
  return {
    daemon,
    program,
    fd,
    close: () => {
      daemon.destroy();
      program.destroy();
      server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test('a stream channel (the library makes a socketpair) gets a byte per pass; channelSignal never blocks', async () => {
  const p = trackedStacks();
  await p.ready;
  const { graph, rdma } = p.a;
  const rings = new VerbsRings(graph, rdma, () => {});
  const pair = await streamPair();
  let got = 0;
  pair.program.on('data', (b: Buffer) => (got += b.length));
  try {
    assert.ok(core.isStreamPair(pair.fd), 'a unix stream socket is a channel end');
    const efd = core.eventfd();
    assert.not.ok(core.isStreamPair(efd), 'an eventfd is not');
    core.closeFd(efd);
    const ch: Channel = { fd: pair.fd, stream: true, users: 0 };
    const cq = rdma.createCq(ENTRIES);
    const r = new CqRing(cq, new ArrayBuffer(RING_HDR + ENTRIES * CQE_BYTES), ENTRIES, ch);
    rings.attachCq(r);
    let runs = 0;
    graph.register({
      name: 'test-stream-completer',
      type: 'input',
      fn: () => {
        if (runs >= 2) return 0;
        runs++;
        Atomics.store(r.u32, RGV_CQ_ARMED / 4, RGV_CQ_ARM_NEXT);
        for (let k = 0; k < 3; k++)
          rdma.core.complete(r.cq, { wrId: k, qpn: cq.handle, status: 'success', opcode: 'send', byteLen: 8 });
        return 3;
      },
      formatTrace: (t) => String(t),
    });
    await waitFor('two passes signalled', () => runs >= 2 && got >= 2, 2000);
    await new Promise((res) => setTimeout(res, 20));
    assert.is(got, 2, 'one byte per pass (three CQEs each), none from inside the node');
    assert.is(Atomics.load(r.u32, RGV_CQ_EVENTS / 4), 2, 'an event per armed pass');
    rings.detachCq(r);
    // A program that kept a copy of the daemon's end can make it blocking and leave it full: the
    // send still returns (MSG_DONTWAIT), false once full. A blocking write would hang this test.
    pair.program.pause();
    let sent = 0;
    while (sent < 1 << 22 && core.channelSignal(pair.fd, { blockingForTest: true })) sent++;
    assert.ok(sent > 0 && sent < 1 << 22, `full after ${sent} bytes, and then refused`);
    assert.not.ok(core.channelSignal(pair.fd), 'still full: refused, not blocked');
  } finally {
    pair.close();
  }
});

test("a completion on one CQ wakes the sleepers (RGV_CQ_SLEEPERS) of every CQ of that program, once per pass, when the pass ends; another program's, never", async () => {
  const p = trackedStacks();
  await p.ready;
  const { graph, rdma } = p.a;
  const rings = new VerbsRings(graph, rdma, () => {});
  // The loaded addon is one object: its futexWake, watched for this test.
  const real = core.futexWake;
  const woken: { ring: Uint32Array; index: number; inNode: boolean; wake: number }[] = [];
  let inNode = false;
  core.futexWake = (u32: Uint32Array, index: number) => {
    woken.push({ ring: u32, index, inNode, wake: Atomics.load(u32, RGV_CQ_WAKE / 4) });
    return real(u32, index);
  };
  try {
    const ring = (group: CqGroup) => {
      const r = new CqRing(
        rdma.createCq(ENTRIES),
        new ArrayBuffer(RING_HDR + ENTRIES * CQE_BYTES),
        ENTRIES,
        null,
        null,
        group,
      );
      rings.attachCq(r);
      return r;
    };
    // One program's CQs: a thread asleep at the idle point of one, completions on the other
    // (UCX polls a send and a receive CQ). Another program's CQ with a sleeper of its own.
    const mine = new CqGroup();
    const asleep = ring(mine),
      busy = ring(mine),
      theirs = ring(new CqGroup());
    const done = (qpn: number): Completion => ({ wrId: 0, qpn, status: 'success', opcode: 'send', byteLen: 64 });
    let passesLeft = 0; // passes in which the node still completes
    graph.register({
      name: 'test-sleepers',
      type: 'input',
      fn: () => {
        if (passesLeft === 0) return 0;
        passesLeft--;
        inNode = true;
        for (let k = 0; k < 5; k++) rdma.core.complete(busy.cq, done(busy.cq.handle));
        // Read the CQEs back as the program would, so the ring never fills.
        Atomics.store(busy.u32, 0, busy.prod);
        inNode = false;
        return 5;
      },
      formatTrace: (t) => String(t),
    });
    // Nobody asleep (the default): no wake-up, and nothing deferred (a deferred call ends the
    // graph's turn: a polling ib_send_lat's p50 went 26.8 -> 39.2 us when every pass deferred).
    const defer = graph.defer.bind(graph);
    let deferred = 0;
    graph.defer = (fn: () => void) => {
      deferred++;
      defer(fn);
    };
    passesLeft = 2;
    graph.wake();
    await waitFor('the passes', () => passesLeft === 0);
    await new Promise((r) => setTimeout(r, 20));
    assert.is(woken.length, 0, 'no sleeper, no wake-up');
    assert.is(deferred, 0, 'no sleeper, nothing deferred to the end of the turn');
    // A count left up (asleep, or hostile): it costs one wake a pass, no more.
    Atomics.store(asleep.u32, RGV_CQ_SLEEPERS / 4, 1);
    Atomics.store(theirs.u32, RGV_CQ_SLEEPERS / 4, 1);
    let wakes = 0;
    for (const passes of [1, 2]) {
      woken.length = 0;
      passesLeft = passes;
      graph.wake(); // asleep (adaptive, idle): the input node only runs in a pass
      await waitFor('the passes', () => passesLeft === 0);
      await new Promise((r) => setTimeout(r, 20));
      assert.is(woken.length, passes, `one wake-up per pass (${passes})`);
      for (const w of woken) {
        assert.is(w.ring, asleep.u32, "only the program's CQ with sleepers");
        assert.is(w.index, RGV_CQ_WAKE / 4, 'on its wake word');
        assert.is(w.wake, ++wakes, 'which moved first (a wait begun late returns at once)');
        assert.is(w.inNode, false, 'when the pass ended, not inside the node');
      }
    }
    assert.is(Atomics.load(theirs.u32, RGV_CQ_WAKE / 4), 0, "the other program's wake word never moved");
    // A CQ destroyed leaves its program's group: its sleepers are not looked for after.
    rings.detachCq(asleep);
    woken.length = 0;
    passesLeft = 1;
    graph.wake();
    await waitFor('the pass', () => passesLeft === 0);
    await new Promise((r) => setTimeout(r, 20));
    assert.is(woken.length, 0, 'a detached CQ is not woken');
    for (const r of [busy, theirs]) rings.detachCq(r);
  } finally {
    core.futexWake = real;
  }
});

test.run();
