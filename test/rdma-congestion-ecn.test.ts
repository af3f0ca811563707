/**
 * Congestion control through a bottleneck that marks ECN (issue 32): two data planes on af_packet,
 * A on veth VA and B on veth VB, and between them native/tools/ecn-switch (ports SA and SB), which
 * marks CE on ECT frames towards B that find more than 15 kB in its virtual queue (drained at 0.95
 * x 200 Mbit/s), in front of a tbf on SB (200 Mbit/s, a 30 KB drop-tail queue): this kernel has
 * no marking qdisc, so the switch is the marking element. Two QPs on A write to B at once, as fast
 * as they can. With reno (auto on af_packet) and dctcp the QPs' data leaves ECT(0), the switch
 * marks it, B echoes the marks and A's QPs reduce their windows for them (ecnReductions; DCTCP's
 * alpha measures the fraction); both QPs complete and neither starves. With `none` the data is
 * not ECT, nothing is marked, and the queue's drops are what the QPs meet: it resends more than
 * the QPs that heard the marks. Needs root (veth, tc); skipped with the reason otherwise.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { parseConfig } from '../config/load.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import { createDataplane } from '../dataplane/create.ts';
import { ECN_SWITCH, EcnSwitch, type SwitchCounters } from '../bench/ecn-switch.ts';
import { netnsUnavailable, vethPair } from './helpers-netns.ts';
import { sleep } from './helpers.ts';
import { twoQpsWrite, WRITES as N, WRITE_SIZE as SIZE } from './congestion-helpers.ts';

const SWITCH = ECN_SWITCH;
const why =
  netnsUnavailable() ??
  (spawnSync('sh', ['-c', 'command -v tc']).status !== 0
    ? 'tc not installed'
    : existsSync(SWITCH)
      ? null
      : `${SWITCH} was not built (npm run build)`);
const tag = process.pid.toString(36);
const VA = `rgea${tag}`,
  SA = `rgesa${tag}`,
  SB = `rgesb${tag}`,
  VB = `rgeb${tag}`;
const SEG = 1500 - 20 - 8 - 10 - 14;

function side(name: string, dev: string, addr: string, congestion: string): string {
  return (
    `rdma: { congestion: ${congestion} }\ninterfaces:\n  - name: ${name}\n    driver: af_packet\n` +
    `    af_packet: { host-interface: ${dev} }\n    address: ${addr}/24\n`
  );
}

interface Run {
  /** Writes each QP had completed when the first QP completed all of its own. */
  first: number[];
  retransmits: number;
  ecnReductions: number[];
  ceMarks: number[];
  alpha: number[];
  algorithm: string;
  /** The switch's counters at the end. */
  sw: SwitchCounters;
}

async function run(congestion: string): Promise<Run> {
  vethPair(VA, SA);
  vethPair(SB, VB);
  let a: DataplaneApi | null = null,
    b: DataplaneApi | null = null,
    sw: EcnSwitch | null = null;
  try {
    const tc = spawnSync(
      'tc',
      ['qdisc', 'add', 'dev', SB, 'root', 'tbf', 'rate', '200mbit', 'burst', '16k', 'limit', '30k'],
      {
        encoding: 'utf8',
      },
    );
    assert.is(tc.status, 0, `tc tbf: ${tc.stderr}`);
    sw = new EcnSwitch([SA, SB, '200e6', '15000']);
    await sw.ready();
    a = await createDataplane(parseConfig(side('h0', VA, '10.73.0.1', congestion), 'a.yaml'));
    b = await createDataplane(parseConfig(side('h1', VB, '10.73.0.2', congestion), 'b.yaml'));
    for (let i = 0; i < 200 && !(await a.interfaces()).every((x) => x.state === 'up'); i++) await sleep(20);
    await sleep(100);
    const { first, views } = await twoQpsWrite(a, b, '10.73.0.1', '10.73.0.2', congestion);
    const counters = await sw.stop();
    return {
      first,
      retransmits: views.reduce((s, q) => s + q.counters.retransmits, 0),
      ecnReductions: views.map((q) => q.congestion.ecnReductions),
      ceMarks: views.map((q) => q.congestion.ceMarks),
      alpha: views.map((q) => q.congestion.alpha),
      algorithm: views[0].congestion.algorithm,
      sw: counters,
    };
  } finally {
    sw?.p.kill('SIGKILL');
    await a?.close();
    await b?.close();
    spawnSync('ip', ['link', 'del', VA]);
    spawnSync('ip', ['link', 'del', SB]);
  }
}

const resent = (r: Run) => (r.retransmits * SEG) / (2 * N * SIZE);
const say = (r: Run) =>
  `${r.algorithm}: ECT ${r.sw.ect}, marked ${r.sw.marked}, tbf refused ${r.sw.ab.dropped}, ` +
  `echoed marks per QP [${r.ceMarks}], ECN reductions [${r.ecnReductions}], resent ${(100 * resent(r)).toFixed(1)} %`;

test('two QPs through a marking bottleneck: reno and dctcp back off at the marks, share, and resend less than none', async () => {
  if (why !== null) skip(`a marking bottleneck: ${why}`);
  const reno = await run('auto');
  const dctcp = await run('dctcp');
  const none = await run('none');
  console.log(
    `  ecn-switch + tbf 200 Mbit/s, 2 QPs x ${N} x 64 KiB:\n    ${[reno, dctcp, none].map(say).join('\n    ')}`,
  );
  assert.is(reno.algorithm, 'reno', 'auto is reno on af_packet');
  for (const r of [reno, dctcp]) {
    assert.ok(
      r.sw.ect > 0 && r.sw.marked > 0,
      `${r.algorithm}: its data left ECT(0) and the switch marked some (${say(r)})`,
    );
    for (let k = 0; k < 2; k++) {
      assert.ok(r.ceMarks[k] > 0, `${r.algorithm}: B echoed the marks to QP ${k} (${say(r)})`);
      assert.ok(r.ecnReductions[k] > 0, `${r.algorithm}: QP ${k} reduced its window for them (${say(r)})`);
    }
    assert.ok(Math.min(...r.first) >= 1, `${r.algorithm}: neither starves (${r.first} when one finished)`);
  }
  assert.ok(
    dctcp.alpha.every((x) => x > 0 && x <= 1),
    `dctcp's alpha estimates a fraction marked: ${dctcp.alpha}`,
  );
  assert.is(none.sw.ect, 0, 'none sends not-ECT');
  assert.is(none.sw.marked, 0);
  assert.ok(
    resent(reno) < resent(none) && resent(dctcp) < resent(none),
    `the QPs that heard the marks resent less than none (${[reno, dctcp, none].map(say).join('; ')})`,
  );
});

test.run();
