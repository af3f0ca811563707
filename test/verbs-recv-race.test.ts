/**
 * A Send that reaches the data plane before the receive its program had just posted (issue 31:
 * perftest runs end without error at every size). A program posts receives into its ring in
 * shared memory; the data plane takes them in once per pass, and a Send may be processed in the
 * same pass before that. With iWARP's rules a Send finding no receive ends the connection (a
 * Terminate, "no receive buffer posted"), so ddp-input and ud-input first take in what the ring
 * holds (Qp.recvSource). `ib_send_bw -a` between two daemons in two network namespaces on
 * af_packet (where it ended at 4 to 256 bytes in 4 of 4 runs without that, at load 5 to 7):
 * every size from 2 B to 8 MiB reports, and neither daemon saw a Terminate. Needs root (veth)
 * and perftest; skipped with the reason otherwise.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { netnsUnavailable } from './helpers-netns.ts';
import { withDaemons } from './ucx-helpers.ts';
import { pair } from './verbs-helpers.ts';

test('ib_send_bw -a between two netns daemons: every size from 2 B to 8 MiB, no Terminate', async () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (install libibverbs-dev, npm run build)');
  if (spawnSync('ib_send_bw', ['--help']).error) skip('perftest is not installed (ib_send_bw)');
  const why = netnsUnavailable();
  if (why !== null) skip(why);
  await withDaemons('netns', async ({ sa, sb, device, logs }) => {
    const [s, c] = await pair(sa, sb, ['ib_send_bw', '-d', device.split(':')[0], '-F', '-a', '-n', '100']);
    assert.is(s.code, 0, `server exits 0\n${s.out}`);
    assert.is(c.code, 0, `client exits 0\n${c.out}`);
    for (let k = 1; k <= 23; k++)
      assert.match(c.out, new RegExp(`^\\s*${2 ** k}\\s+100\\s`, 'm'), `a result row for ${2 ** k} bytes`);
    assert.not.match(logs(), /qp-error/, 'no QP error in either daemon');
  });
});

test.run();
