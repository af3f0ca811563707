/**
 * Only the caller's own mistakes are 4xx (issue 27): a request the data plane refuses is a
 * DataplaneError of its kind; anything else thrown inside (a bug: a TypeError in a node, say)
 * is a 500 whose stack goes to the log, never a 400 that blames the caller.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { Dataplane } from '../dataplane/dataplane.ts';
import { buildServer } from '../api/server.ts';
import { twoDataplanes } from './dataplane-helpers.ts';

test('a bug inside the data plane is a 500 with its stack in the log; a caller mistake on the same route a 4xx', async () => {
  const dps = await twoDataplanes();
  const logged: string[] = [];
  const app = await buildServer(dps.a, { log: (_level, m) => logged.push(m) });
  try {
    const post = (body: unknown) =>
      app.inject({
        method: 'POST',
        url: '/v1/pds',
        headers: { 'content-type': 'application/json' },
        payload: body as object,
      });
    // The caller's mistake: an interface that does not exist.
    const mistake = await post({ interface: 'nope' });
    assert.is(mistake.statusCode, 404, mistake.body);
    assert.equal(logged, [], 'nothing logged for a caller mistake');
    // A bug: the RDMA stack throws a TypeError.
    const { rdma } = Dataplane.internals(dps.a);
    rdma.createPd = () => {
      throw new TypeError('a bug in createPd');
    };
    const bug = await post({});
    assert.is(bug.statusCode, 500, bug.body);
    assert.match(JSON.parse(bug.body).message, /internal error in POST \/v1\/pds: a bug in createPd/);
    assert.is(logged.length, 1);
    assert.match(logged[0], /TypeError: a bug in createPd\n\s+at /, 'the stack is in the log');
    // A RangeError deep inside is no more the caller's than a TypeError.
    rdma.createPd = () => {
      throw new RangeError('offset out of bounds');
    };
    assert.is((await post({})).statusCode, 500);
  } finally {
    await app.close();
    await dps.close();
  }
});

test.run();
