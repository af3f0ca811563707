/**
 * The live view's sampler against a data plane that counts what it is asked: no call without a
 * subscriber, the latest frame handed at once to a late subscriber, a failure said once however
 * many ticks it lasts, and nothing after the last subscriber goes.
 */
import * as assert from 'uvu/assert';
import type { DataplaneApi } from '../dataplane/api.ts';
import { LiveSampler } from '../api/live-sampler.ts';
import { test } from './harness.ts';
import { sleep } from './helpers.ts';
import { waitFor } from './rdma-helpers.ts';

/** A facade with one thread and no node, interface or QP, that counts its calls and can fail. */
function countingDp() {
  const st = { calls: 0, fail: null as string | null };
  const call = async <T>(v: T): Promise<T> => {
    st.calls++;
    if (st.fail !== null) throw new Error(st.fail);
    return v;
  };
  const thread = {
    index: 0,
    name: 'main',
    time: 1,
    updateInterval: 10,
    internalVectorRate: 0,
    loopsPerSec: 0,
    ratesIn: 0,
    ratesOut: 0,
    ratesDrop: 0,
    ratesPunt: 0,
    rows: [],
  };
  const dp = {
    runtime: () => call([thread]),
    nodeGraph: () => call([{ index: 0, name: 'main', nodes: [] }]),
    interfaces: () => call([]),
    qps: () => call([]),
    errors: () => call([{ index: 0, name: 'main', rows: [] }]),
  } as unknown as DataplaneApi;
  return { dp, st };
}

test('sampler: no call without a subscriber; frames while one listens; the latest at once to a late one; none after the last goes', async () => {
  const { dp, st } = countingDp();
  const sampler = new LiveSampler(dp, 20);
  await sleep(100);
  assert.is(st.calls, 0, 'nothing asked with no subscriber');
  const got: string[] = [];
  const stop = sampler.subscribe({ frame: (j) => got.push(j) });
  // Waited for, not slept on: a loaded machine may run the 20 ms interval late (it does not
  // catch up), and 3 frames take longer than 150 ms.
  await waitFor('3 frames', () => got.length >= 3, 5000);
  assert.is(st.calls, sampler.samples * 5, 'five facade calls a sample');
  const late: string[] = [];
  const stopLate = sampler.subscribe({ frame: (j) => late.push(j) });
  assert.is(late.length, 1, 'the latest frame at once');
  assert.is(late[0], got.at(-1));
  stop();
  stopLate();
  await sleep(30);
  const after = st.calls;
  await sleep(150);
  assert.is(st.calls, after, 'nothing asked after the last subscriber went');
  assert.equal(Object.keys(JSON.parse(got[0])).sort(), ['errors', 'interfaces', 'interval', 'qps', 'threads', 'time']);
});

test('sampler: a failing data plane is said once, not every tick, and again only when the reason changes', async () => {
  const { dp, st } = countingDp();
  const said: string[] = [];
  const sampler = new LiveSampler(dp, 10, (m) => said.push(m));
  st.fail = 'data plane closed';
  const stop = sampler.subscribe({ frame: () => {} });
  await sleep(120);
  assert.ok(st.calls >= 10, `${st.calls} calls`);
  assert.equal(said, ['live view: sampling failed: data plane closed']);
  st.fail = 'worker 1 is gone';
  await sleep(50);
  assert.equal(said, ['live view: sampling failed: data plane closed', 'live view: sampling failed: worker 1 is gone']);
  stop();
});

test.run();
