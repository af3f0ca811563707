/**
 * A completion channel shared by two CQs, through an unmodified libibverbs program's own calls
 * (native/tools/verbs-channel.c, librdmagraph-verbs.so preloaded): each CQ's event reported once,
 * the channel's fd readable exactly while an event is left to report (what a program that polls
 * or epolls the fd relies on), EAGAIN when non-blocking with none, and a blocked call woken again
 * after re-arming. Skips (fails under CI=true) without the library or the program.
 */
import { skip, test } from './harness.ts';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
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

test.run();
