/**
 * A QP's reset and destroy in a completion queue other QPs share, through an unmodified
 * libibverbs program's own calls (native/tools/verbs-reset.c, librdmagraph-verbs.so preloaded):
 * the QP's completions that the program has not polled leave the CQ, flushed or successful (as
 * the IBA's Reset state has it and rdma-core's mlx5 provider does, at reset and at destroy),
 * another QP's stay, and a reset QP connects and receives again.
 */
import { skip, test } from './harness.ts';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { assertChecks, runTool, withVerbsSocket } from './verbs-helpers.ts';

const RESET = `${NATIVE_BUILD_DIR}verbs-reset`;

const CHECKS = [
  'three RC QPs on one CQ, two connected (loopback)',
  'receives and a SEND posted',
  "RESET: the QP's completions leave the CQ (its received SEND's and its flushed receive's), another QP's stays",
  'the reset QP connected again: a SEND to it arrives',
  "destroy: the QP's flushed receives never reach the CQ, the others' completions do",
];

test("a reset or destroyed QP's completions leave the CQ it shares; a reset QP is used again", async () => {
  if (!existsSync(VERBS_LIBRARY) || !existsSync(RESET))
    skip('the verbs library or verbs-reset was not built (libibverbs-dev)');
  await withVerbsSocket('verbs-reset-', async (socket) => {
    const { out, code } = await runTool(socket, [RESET], 30_000).done;
    assertChecks(out, code, CHECKS);
  });
});

test.run();
