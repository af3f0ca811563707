/**
 * A completion channel shared by two CQs, through an unmodified libibverbs program's own calls
 * (native/tools/verbs-channel.c, librdmagraph-verbs.so preloaded): each CQ's event reported once,
 * the channel's fd readable exactly while an event is left to report (what a program that polls
 * or epolls the fd relies on), EAGAIN when non-blocking with none, and a blocked call woken again
 * after re-arming; and still not readable after the last when the daemon's byte comes long after
 * its count (the library's look takes an event by its count; taking the last one waits for the
 * byte, RGV_CQ_SIGNALLED). Skips (fails under CI=true) without the library or the program.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { NATIVE_BUILD_DIR, loadCore } from '../native/addons.ts';
import { assertChecks, runTool, withVerbsSocket } from './verbs-helpers.ts';

const PROGRAM = `${NATIVE_BUILD_DIR}verbs-channel`;

const CHECKS = [
  'two QPs connected (loopback), a CQ of each on one channel',
  'both CQs armed',
  'no event yet: the fd is not readable',
  'a SEND completes on both CQs',
  'the fd is readable',
  'ibv_get_cq_event reports one of the two CQs, with its context',
  "the fd stays readable while the other CQ's event is left",
  'the second call reports the other CQ',
  'then the fd is not readable',
  'a non-blocking call with nothing left: EAGAIN',
  're-armed',
  'the next SEND completes',
  'two blocking calls report the two CQs',
  'their completions are there',
  'and the fd is not readable after the last',
  'more rounds: each reports both CQs',
  'and the fd is never readable after the last',
  'the channel is destroyed once its CQs are',
];

test('two CQs on one completion channel: each event reported once, the fd readable while one is left', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(PROGRAM))
    skip('the verbs library or verbs-channel was not built (libibverbs-dev)');
  await withVerbsSocket('verbs-channel-', async (socket) => {
    const { out, code } = await runTool(socket, [PROGRAM]).done;
    assertChecks(out, code, CHECKS);
  });
});

test('a byte that comes 0.5 ms after its count: the fd is still not readable after the last', async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(PROGRAM))
    skip('the verbs library or verbs-channel was not built (libibverbs-dev)');
  // The in-process daemon's signal sleeps 0.5 ms before it sends: the program's look (1 ms, so
  // that these waits keep it) sees each count that long before its byte.
  const core = loadCore();
  const signal = core.channelSignal;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  let late = 0;
  core.channelSignal = (fd, opts) => {
    late++;
    Atomics.wait(nap, 0, 0, 0.5);
    return signal.call(core, fd, opts);
  };
  const saved = process.env.RDMA_GRAPH_EVENT_SPIN_US;
  process.env.RDMA_GRAPH_EVENT_SPIN_US = '1000';
  try {
    await withVerbsSocket('verbs-channel-late-', async (socket) => {
      const { out, code } = await runTool(socket, [PROGRAM, '100']).done;
      assertChecks(out, code, CHECKS);
    });
  } finally {
    core.channelSignal = signal;
    if (saved === undefined) delete process.env.RDMA_GRAPH_EVENT_SPIN_US;
    else process.env.RDMA_GRAPH_EVENT_SPIN_US = saved;
  }
  assert.ok(late >= 200, `the late signal was used (${late} signals)`);
});

test.run();
