/**
 * A completion channel is signalled when the pass that wrote its CQE ends, not from inside the
 * node that wrote it (dataplane/verbs-server/rings.ts signalSoon): the program it wakes (asleep
 * in ibv_get_cq_event) takes the CPU at once when it shares the daemon's, and a signal from
 * inside a node left the rest of the pass (the ACK, the next segments) waiting until it slept
 * again. The event is counted in the ring at the same time (the library finds the CQ by the
 * count: a count ahead of its signal lets a program take the event before the wake-up, which then
 * finds nothing). One signal per channel per pass, however many CQEs; none to a channel closed
 * meanwhile. Sleepers on a CQ's producer index (the library's idle sleep) are woken the same way:
 * once per CQ per pass, when it ends, only while RGV_CQ_SLEEPERS says someone sleeps.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { loadCore } from '../native/addons.ts';
import { type Channel, CqRing, CQE_BYTES, RING_HDR, VerbsRings } from '../dataplane/verbs-server/rings.ts';
import {
  RGV_CQ_ARM_NEXT,
  RGV_CQ_ARMED,
  RGV_CQ_EVENTS,
  RGV_CQ_PROD,
  RGV_CQ_SLEEPERS,
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
  const ch: Channel = { fd: core.eventfd(), users: 0 };
  const closed: Channel = { fd: core.eventfd(), users: 0 };
  try {
    const arm = (r: CqRing) => Atomics.store(r.u32, RGV_CQ_ARMED / 4, RGV_CQ_ARM_NEXT);
    const ring = (c: Channel) => {
      const cq = rdma.createCq(ENTRIES);
      const r = new CqRing(cq, new ArrayBuffer(RING_HDR + ENTRIES * CQE_BYTES), ENTRIES, c);
      rings.attachCq(r);
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
        seen.push(core.eventfdRead(ch.fd), Atomics.load(r1.u32, RGV_CQ_EVENTS / 4));
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
    assert.equal(seen, [0, 0], 'neither signalled nor counted from inside the node');
    assert.is(core.eventfdRead(ch.fd), 1, 'signalled once when the pass ended, for two CQEs on two CQs');
    assert.is(Atomics.load(r1.u32, RGV_CQ_EVENTS / 4) + Atomics.load(r2.u32, RGV_CQ_EVENTS / 4), 2, 'an event per CQ');
    assert.is(Atomics.load(r3.u32, RGV_CQ_EVENTS / 4), 1, "the closed channel's CQ counted its event");
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

test('a CQ with sleepers (RGV_CQ_SLEEPERS) is woken once per pass that wrote it CQEs, when the pass ends; one without, never', async () => {
  const p = trackedStacks();
  await p.ready;
  const { graph, rdma } = p.a;
  const rings = new VerbsRings(graph, rdma, () => {});
  // The loaded addon is one object: its futexWake, watched for this test.
  const real = core.futexWake;
  const woken: { ring: Uint32Array; index: number; inNode: boolean }[] = [];
  let inNode = false;
  core.futexWake = (u32: Uint32Array, index: number) => {
    woken.push({ ring: u32, index, inNode });
    return real(u32, index);
  };
  try {
    const ring = () => {
      const r = new CqRing(rdma.createCq(ENTRIES), new ArrayBuffer(RING_HDR + ENTRIES * CQE_BYTES), ENTRIES, null);
      rings.attachCq(r);
      return r;
    };
    const asleep = ring(),
      awake = ring();
    // A program that left its count up (asleep, or hostile): it costs one wake a pass, no more.
    Atomics.store(asleep.u32, RGV_CQ_SLEEPERS / 4, 1);
    const done = (qpn: number): Completion => ({ wrId: 0, qpn, status: 'success', opcode: 'send', byteLen: 64 });
    let passesLeft = 0; // passes in which the node still completes
    graph.register({
      name: 'test-sleepers',
      type: 'input',
      fn: () => {
        if (passesLeft === 0) return 0;
        passesLeft--;
        inNode = true;
        for (let k = 0; k < 5; k++) rdma.core.complete(asleep.cq, done(asleep.cq.handle));
        for (let k = 0; k < 2; k++) rdma.core.complete(awake.cq, done(awake.cq.handle));
        // Read the CQEs back as the program would, so the rings never fill.
        Atomics.store(asleep.u32, 0, asleep.prod);
        Atomics.store(awake.u32, 0, awake.prod);
        inNode = false;
        return 7;
      },
      formatTrace: (t) => String(t),
    });
    for (const passes of [1, 2]) {
      woken.length = 0;
      passesLeft = passes;
      graph.wake(); // asleep (adaptive, idle): the input node only runs in a pass
      await waitFor('the passes', () => passesLeft === 0);
      await new Promise((r) => setTimeout(r, 20));
      assert.is(woken.length, passes, `one wake-up per pass (${passes})`);
      for (const w of woken) {
        assert.is(w.ring, asleep.u32, 'only the CQ with sleepers');
        assert.is(w.index, RGV_CQ_PROD / 4, 'on its producer index');
        assert.is(w.inNode, false, 'when the pass ended, not inside the node');
      }
    }
    for (const r of [asleep, awake]) rings.detachCq(r);
  } finally {
    core.futexWake = real;
  }
});

test.run();
