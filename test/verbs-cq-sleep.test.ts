/**
 * With RDMA_GRAPH_SLEEP_US set (not the default: UCX's shared-memory traffic beside a verbs CQ
 * would be late by the sleep), a verbs program polling a CQ that stays empty spins for a while,
 * then sleeps until the daemon writes a completion to any CQ of the program (native/verbs-lib/ring.c
 * SPIN_NS / SLEEP_NS, RGV_CQ_SLEEPERS, RGV_CQ_WAKE; the daemon's futex wake-up:
 * dataplane/verbs-server/rings.ts): an idle program stops taking a
 * core from the data planes, and a completion is not late by the sleep. Through an unmodified
 * libibverbs program's own calls (native/tools/verbs-idle.c: a thread polls the receive CQ of
 * two RC QPs connected to each other, with ibv_poll_cq or ibv_start_poll, while the main thread
 * waits, then posts a SEND). Skips (fails under CI=true) without the library or the tool.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { withVerbsSocket } from './verbs-helpers.ts';

const IDLE = `${NATIVE_BUILD_DIR}verbs-idle`;
/** Sleeps on, as the README suggests for a program that waits on its CQs alone. */
const SLEEP = { RDMA_GRAPH_SLEEP_US: '100' };

interface Idle {
  cpuMs: number;
  switches: number;
  lateUs: number;
  out: string;
}

/** verbs-idle against one daemon: `ms` of an empty CQ (busy: posting elsewhere), then the completion. */
async function idle(
  ms: number,
  ex: boolean | 'event',
  env: Record<string, string | undefined> = {},
  busy = false,
  other = false,
  rounds = 1,
): Promise<Idle> {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(IDLE))
    skip('the verbs library or verbs-idle was not built (libibverbs-dev)');
  return withVerbsSocket('verbs-idle-', async (socket) => {
    const r = await new Promise<{ code: number | null; out: string }>((resolve) =>
      execFile(
        IDLE,
        [
          String(ms),
          ...(ex === 'event' ? ['event'] : ex ? ['ex'] : []),
          ...(rounds > 1 ? ['rounds', String(rounds)] : []),
          ...(busy ? ['busy'] : []),
          ...(other ? ['other'] : []),
        ],
        { timeout: 60_000, env: { ...process.env, ...env, LD_PRELOAD: VERBS_LIBRARY, RDMA_GRAPH_SOCKET: socket } },
        (e, out, err) => resolve({ code: e === null ? 0 : typeof e.code === 'number' ? e.code : null, out: out + err }),
      ),
    );
    assert.is(r.code, 0, r.out);
    const m = /^idle \d+ ms: cpu ([\d.]+) ms, voluntary switches (\d+), completion seen (\d+) us after the post$/m.exec(
      r.out,
    );
    assert.ok(m, r.out);
    return { cpuMs: Number(m[1]), switches: Number(m[2]), lateUs: Number(m[3]), out: r.out };
  });
}

for (const ex of [false, true]) {
  const how = ex ? 'ibv_start_poll' : 'ibv_poll_cq';

  test(`${how} on a CQ empty for 1 s, RDMA_GRAPH_SLEEP_US=100: the program sleeps (a few % of a core), where by default it spins`, async () => {
    const slept = await idle(1000, ex, SLEEP);
    // Spinning takes the whole second (1000 ms measured on an idle machine); sleeps of at most
    // 100 us, each after 64 empty polls, ~40 ms.
    assert.ok(slept.cpuMs < 250, `it slept: ${slept.cpuMs} ms of CPU in 1 s\n${slept.out}`);
    assert.ok(slept.switches > 500, `each sleep is a voluntary switch (${slept.switches})\n${slept.out}`);
    const spun = await idle(1000, ex);
    assert.ok(spun.cpuMs > 300, `by default it spins (${spun.cpuMs} ms of CPU)\n${spun.out}`);
    assert.ok(spun.switches < 100, `and yields, never sleeps (${spun.switches} voluntary switches)\n${spun.out}`);
  });

  test(`${how}: the daemon wakes a sleeper when the completion comes, not the sleep's end`, async () => {
    // Sleeps of up to 1 s: the SEND comes 1.2 s after the last completion, 1 s into a sleep
    // begun after 200 us of spinning. Left to its timeout, the program would see it ~0.8 s late.
    const r = await idle(1200, ex, { RDMA_GRAPH_SLEEP_US: '1000000' });
    assert.ok(r.lateUs < 300_000, `seen ${r.lateUs} us after the post\n${r.out}`);
    assert.ok(r.switches < 20, `a handful of long sleeps (${r.switches} voluntary switches)\n${r.out}`);
  });
}

test('a thread asleep at the idle point of one CQ is woken by a completion on another CQ of the program (UCX polls several)', async () => {
  // The thread polls a CQ that never completes 64 times per poll of the receive CQ, so it
  // sleeps at that CQ's idle points; the SEND completes on the receive CQ 1 s into a sleep of up
  // to 1 s. Woken only by its own CQ, it would see it ~0.8 s late.
  const r = await idle(1200, false, { RDMA_GRAPH_SLEEP_US: '1000000' }, false, true);
  assert.ok(r.lateUs < 300_000, `seen ${r.lateUs} us after the post\n${r.out}`);
  assert.ok(r.switches < 20, `a handful of long sleeps (${r.switches} voluntary switches)\n${r.out}`);
  // Sleeps of 100 us: it sleeps (as in the first test), on the other CQ as much as on its own.
  const slept = await idle(1000, false, SLEEP, false, true);
  assert.ok(slept.cpuMs < 250, `it slept: ${slept.cpuMs} ms of CPU in 1 s\n${slept.out}`);
});

test('a program that posts while it waits (for something its polled CQ will not show) keeps spinning', async () => {
  // The main thread exchanges a SEND over other QPs and another CQ every few hundred us: each
  // post restarts the spin (2 ms here, longer than one exchange on a loaded machine); the CQ
  // itself stays empty for the whole second, so without that rule it would sleep throughout.
  const spin = { ...SLEEP, RDMA_GRAPH_SPIN_US: '2000' };
  const busy = await idle(1000, false, spin, true);
  assert.ok(busy.switches < 1000, `posting: it kept spinning (${busy.switches} voluntary switches)\n${busy.out}`);
  const idleToo = await idle(1000, false, spin);
  assert.ok(idleToo.switches > 3000, `not posting: it slept (${idleToo.switches} voluntary switches)\n${idleToo.out}`);
});

test('ibv_get_cq_event looks again before it sleeps, for RDMA_GRAPH_EVENT_SPIN_US: 50 us by default (an idle wait costs no CPU to speak of), 1 s of it spends the second looking', async () => {
  // The thread waits on a completion channel; the SEND comes after 1 s. Sleeping after 50 us
  // (the default), the wait takes well under a millisecond of CPU; looking for a whole second,
  // most of it (1000 ms measured on an idle machine; the yields every 64 looks give others their
  // turn).
  const short = await idle(1000, 'event', { RDMA_GRAPH_EVENT_SPIN_US: undefined });
  assert.ok(short.cpuMs < 100, `a 50-us look is bounded: ${short.cpuMs} ms of CPU in 1 s\n${short.out}`);
  const long = await idle(1000, 'event', { RDMA_GRAPH_EVENT_SPIN_US: '1000000' });
  assert.ok(long.cpuMs > 300, `it looked before it slept: ${long.cpuMs} ms of CPU in 1 s\n${long.out}`);
  const bad = await idle(300, 'event', { RDMA_GRAPH_EVENT_SPIN_US: 'some' });
  assert.match(
    bad.out,
    /rdma-graph verbs: RDMA_GRAPH_EVENT_SPIN_US="some" is not a whole number of microseconds from 0 to 1000000: event spins of 50 us/,
  );
  assert.ok(bad.cpuMs < 100, `the default kept (a 50-us look): ${bad.cpuMs} ms of CPU\n${bad.out}`);
});

test('the look follows the waits: events 2 ms apart stop costing a look each (500 us of looking at most)', async () => {
  // 100 SENDs 2 ms apart, each waited for on the channel. Looking 500 us before each sleep
  // would take ~50 ms of CPU (52.6 measured with the look kept fixed); the waits are more than
  // four looks long, so each halves the next look and the rest cost next to nothing (2.9 ms).
  const r = await idle(2, 'event', { RDMA_GRAPH_EVENT_SPIN_US: '500' }, false, false, 100);
  assert.ok(r.cpuMs < 20, `the looks shrank: ${r.cpuMs} ms of CPU over 100 waits\n${r.out}`);
});

test('RDMA_GRAPH_SLEEP_US or _SPIN_US not understood: said, and the default kept', async () => {
  const bad = await idle(300, false, { RDMA_GRAPH_SLEEP_US: 'lots' });
  assert.match(
    bad.out,
    /rdma-graph verbs: RDMA_GRAPH_SLEEP_US="lots" is not a whole number of microseconds from 0 to 1000000: sleeps of 0 us/,
  );
  assert.ok(bad.switches < 100, `no sleeps, the default (${bad.switches} voluntary switches)\n${bad.out}`);
  const r = await idle(300, false, { ...SLEEP, RDMA_GRAPH_SPIN_US: '-1' });
  assert.match(
    r.out,
    /rdma-graph verbs: RDMA_GRAPH_SPIN_US="-1" is not a whole number of microseconds from 0 to 1000000: spins of 200 us/,
  );
  assert.ok(r.switches > 100, `the default sleeps were kept (${r.switches} voluntary switches)\n${r.out}`);
});

test.run();
