/**
 * GET /metrics: every line is valid Prometheus text exposition format 0.0.4 (checked by a small
 * parser written here), and the values are those the JSON routes answer with.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { renderFamilies } from '../api/metrics.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { apiPair, raw } from './api-helpers.ts';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Parsed {
  types: Map<string, string>;
  help: Map<string, string>;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function parseValue(s: string, line: string): number {
  if (s === 'NaN') return NaN;
  if (s === '+Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  assert.match(s, /^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/, `a float value in: ${line}`);
  return Number(s);
}

/** Undo the format's escapes; a backslash before anything but `allowed` fails. */
function unescape(s: string, allowed: string[], line: string): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] !== '\\') {
      out += s[i];
      continue;
    }
    const e = s[++i];
    assert.ok(e !== undefined && allowed.includes(e), `escape \\${e ?? ''} in: ${line}`);
    out += e === 'n' ? '\n' : e;
  }
  return out;
}

/** Parse the text format strictly; any deviation fails the assertion naming the line. */
function parseExposition(text: string): Parsed {
  assert.ok(text.endsWith('\n'), 'the text ends with a line feed');
  const out: Parsed = { types: new Map(), help: new Map(), samples: [] };
  const seenSeries = new Set<string>();
  const done = new Set<string>();
  let current: string | null = null;
  for (const line of text.slice(0, -1).split('\n')) {
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
      if (!m) {
        assert.ok(!/^# (HELP|TYPE)\b/.test(line), `malformed HELP/TYPE line: ${line}`);
        continue; // a plain comment
      }
      const [, kind, name, rest] = m;
      assert.match(name, NAME, `metric name in: ${line}`);
      if (kind === 'TYPE') {
        assert.ok(['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest), `type in: ${line}`);
        assert.ok(!out.types.has(name), `one TYPE line for ${name}`);
        assert.ok(!out.samples.some((s) => s.name === name), `TYPE of ${name} before its samples`);
        out.types.set(name, rest);
      } else {
        assert.ok(!out.help.has(name), `one HELP line for ${name}`);
        out.help.set(name, unescape(rest, ['\\', 'n'], line));
      }
      continue;
    }
    assert.ok(line.trim() !== '', 'no blank lines');
    // name{label="value",...} value [timestamp]
    const nm = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line);
    assert.ok(nm, `a sample starts with a metric name: ${line}`);
    const name = nm![1];
    let i = name.length;
    const labels: Record<string, string> = {};
    if (line[i] === '{') {
      i++;
      while (line[i] !== '}') {
        const lm = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(line.slice(i));
        assert.ok(lm, `label name="value" at ${i} in: ${line}`);
        const lname = lm![1];
        assert.match(lname, LABEL);
        assert.ok(!(lname in labels), `label ${lname} once in: ${line}`);
        i += lm![0].length;
        let end = i;
        while (line[end] !== '"') {
          assert.ok(line[end] !== undefined, `unterminated label value in: ${line}`);
          end += line[end] === '\\' ? 2 : 1;
        }
        labels[lname] = unescape(line.slice(i, end), ['\\', '"', 'n'], line);
        i = end;
        i++;
        if (line[i] === ',') i++;
        else assert.is(line[i], '}', `, or } after a label in: ${line}`);
      }
      i++;
    }
    const rest = line.slice(i);
    const vm = /^ (\S+)( -?\d+)?$/.exec(rest);
    assert.ok(vm, `" value [timestamp]" after the labels in: ${line}`);
    const value = parseValue(vm![1], line);
    assert.ok(out.types.has(name), `${name} has a TYPE line before its samples`);
    assert.ok(out.help.has(name), `${name} has a HELP line`);
    if (current !== name) {
      assert.ok(!done.has(name), `the samples of ${name} are together`);
      if (current !== null) done.add(current);
      current = name;
    }
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    assert.ok(!seenSeries.has(key), `one sample per series: ${line}`);
    seenSeries.add(key);
    if (out.types.get(name) === 'counter') {
      assert.match(name, /_total$/, `counter ${name} ends in _total`);
      assert.ok(value >= 0, `counter ${name} is not negative`);
    }
    out.samples.push({ name, labels, value });
  }
  return out;
}

function one(p: Parsed, name: string, labels: Record<string, string>): number {
  const hits = p.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  assert.is(hits.length, 1, `one ${name} ${JSON.stringify(labels)}, found ${hits.length}`);
  return hits[0].value;
}

test('label values and help text are escaped, and the parser reads them back', () => {
  const text = renderFamilies([
    {
      name: 'x_total',
      type: 'counter',
      help: 'back\\slash and\nnewline',
      samples: [{ labels: { a: 'q"uote', b: 'back\\slash', c: 'new\nline', d: 'ünï 🚀 {},=' }, value: 3 }],
    },
    {
      name: 'y',
      type: 'gauge',
      help: 'g',
      samples: [
        { labels: {}, value: NaN },
        { labels: { k: 'v' }, value: Infinity },
        { labels: { k: 'w' }, value: 1.5e-7 },
      ],
    },
  ]);
  assert.is(
    text,
    [
      '# HELP x_total back\\\\slash and\\nnewline',
      '# TYPE x_total counter',
      'x_total{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="ünï 🚀 {},="} 3',
      '# HELP y g',
      '# TYPE y gauge',
      'y NaN',
      'y{k="v"} +Inf',
      'y{k="w"} 1.5e-7',
      '',
    ].join('\n'),
  );
  const p = parseExposition(text);
  assert.equal(p.samples[0].labels, { a: 'q"uote', b: 'back\\slash', c: 'new\nline', d: 'ünï 🚀 {},=' });
  assert.is(p.help.get('x_total'), 'back\\slash and\nnewline');
  assert.ok(Number.isNaN(p.samples[1].value));
  // The parser does reject what is not the format.
  for (const bad of [
    'x_total 1\n',
    '# TYPE x_total counter\n# HELP x_total h\nx_total{a="b} 1\n',
    '# TYPE y gauge\n# HELP y h\ny{a="\\t"} 1\n',
    '# TYPE y gauge\n# HELP y h\ny 1 2 3\n',
    '# TYPE y gauge\n# HELP y h\ny{1a="b"} 1\n',
  ]) {
    let threw = false;
    try {
      parseExposition(bad);
    } catch {
      threw = true; // (uvu's assert.throws passes its own assertion errors through)
    }
    assert.ok(threw, `rejects ${JSON.stringify(bad)}`);
  }
});

test('GET /metrics after traffic: valid exposition, content type 0.0.4, values equal to the JSON routes', async () => {
  const p = await apiPair();
  const { ca, cb } = p;
  try {
    // Traffic: a connected pair, a WRITE and a SEND.
    const { pd } = await ca.createPd();
    const { cq } = await ca.createCq({ depth: 64 });
    const mr = await ca.createMr({ pd, length: 8192, access: ['local-write', 'remote-write'] });
    const qa = await ca.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 8, maxRecvWr: 8 });
    const bpd = (await cb.createPd()).pd;
    const bcq = (await cb.createCq({ depth: 64 })).cq;
    const bmr = await cb.createMr({ pd: bpd, length: 8192, access: ['local-write', 'remote-write'] });
    const qb = await cb.createQp({ pd: bpd, sendCq: bcq, recvCq: bcq, maxSendWr: 8, maxRecvWr: 8 });
    await ca.connect(qa.qpn, { remote: { ip: IP_B, port: qb.qpn }, mode: 'manual', remotePsn: qb.psn });
    await cb.connect(qb.qpn, { remote: { ip: IP_A, port: qa.qpn }, mode: 'manual', remotePsn: qa.psn });
    await ca.postSend(qa.qpn, {
      wrId: 1,
      opcode: 'write',
      sge: [{ mr: mr.mr, offset: 0, length: 6000 }],
      remote: { stag: bmr.stag, offset: 0 },
    });
    assert.is((await ca.pollCq(cq, { waitMs: 2000 })).completions.length, 1);
    const idle = await ca.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 8, maxRecvWr: 8 });

    const before = {
      ifs: await ca.interfaces(),
      rt: await ca.runtime({ verbose: true }),
      errs: await ca.errors(),
      qps: await ca.qps(),
    };
    const res = await raw(p.apiA.url, 'GET', '/metrics');
    const after = {
      ifs: await ca.interfaces(),
      rt: await ca.runtime({ verbose: true }),
      errs: await ca.errors(),
      qps: await ca.qps(),
      health: await ca.health(),
      buffers: await ca.buffers(),
    };
    assert.is(res.status, 200);
    assert.is(res.type, 'text/plain; version=0.0.4; charset=utf-8');
    const m = parseExposition(res.text);

    /** A counter read between two JSON reads lies between them. */
    const between = (v: number, lo: number, hi: number, what: string) =>
      assert.ok(lo <= v && v <= hi, `${what}: ${lo} <= ${v} <= ${hi}`);

    const up = one(m, 'rdmagraph_uptime_seconds', {});
    assert.ok(up > 0 && up <= after.health.uptime, `uptime ${up} <= ${after.health.uptime}`);
    assert.is(one(m, 'rdmagraph_buffers', {}), after.buffers.count);
    between(one(m, 'rdmagraph_buffers_free', {}), 0, after.buffers.count, 'free buffers');

    for (const [i, itf] of after.ifs.entries()) {
      const l = { interface: itf.name, driver: itf.driver };
      for (const [k, metric] of [
        ['rxPackets', 'rx_packets'],
        ['rxBytes', 'rx_bytes'],
        ['txPackets', 'tx_packets'],
        ['txBytes', 'tx_bytes'],
        ['rxDrops', 'rx_drops'],
        ['txDrops', 'tx_drops'],
        ['rxErrors', 'rx_errors'],
        ['txErrors', 'tx_errors'],
      ] as const) {
        between(
          one(m, `rdmagraph_interface_${metric}_total`, l),
          before.ifs[i].counters[k],
          itf.counters[k],
          `${itf.name} ${k}`,
        );
      }
      assert.ok(itf.counters.txBytes > 6000, 'the WRITE went out');
      assert.is(one(m, 'rdmagraph_interface_link_up', l), itf.state === 'up' ? 1 : 0);
    }

    const rows = (x: typeof before.rt) =>
      new Map(x.threads.flatMap((t) => t.rows.map((r) => [`${t.name}/${r.name}`, r] as const)));
    const rb = rows(before.rt),
      ra = rows(after.rt);
    assert.is(
      m.samples.filter((s) => s.name === 'rdmagraph_node_calls_total').length,
      ra.size,
      'a calls sample per node, idle ones too',
    );
    for (const [key, r] of ra) {
      const [thread, node] = key.split('/');
      const l = { node, thread };
      between(one(m, 'rdmagraph_node_calls_total', l), rb.get(key)!.calls, r.calls, `${key} calls`);
      between(one(m, 'rdmagraph_node_vectors_total', l), rb.get(key)!.vectors, r.vectors, `${key} vectors`);
      between(one(m, 'rdmagraph_node_suspends_total', l), rb.get(key)!.suspends, r.suspends, `${key} suspends`);
      between(one(m, 'rdmagraph_node_clocks_total', l), rb.get(key)!.clocks, r.clocks, `${key} clocks`);
    }
    assert.ok(
      one(m, 'rdmagraph_node_vectors_total', { node: 'trp-input', thread: 'main' }) > 0,
      'trp-input counted packets',
    );

    const errRows = after.errs.threads.flatMap((t) => t.rows);
    const errBefore = before.errs.threads.flatMap((t) => t.rows);
    assert.is(m.samples.filter((s) => s.name === 'rdmagraph_errors_total').length, errRows.length);
    for (const [j, e] of errRows.entries())
      between(
        one(m, 'rdmagraph_errors_total', { node: e.node, reason: e.reason, severity: e.severity }),
        errBefore[j].count,
        e.count,
        `${e.node}: ${e.reason}`,
      );

    assert.is(after.qps.length, 2);
    for (const [j, q] of after.qps.entries()) {
      const l = { qpn: String(q.qpn), state: q.state };
      const b = before.qps[j];
      between(
        one(m, 'rdmagraph_qp_tx_packets_total', l),
        b.counters.txPackets,
        q.counters.txPackets,
        `qp ${q.qpn} tx packets`,
      );
      between(
        one(m, 'rdmagraph_qp_rx_packets_total', l),
        b.counters.rxPackets,
        q.counters.rxPackets,
        `qp ${q.qpn} rx packets`,
      );
      between(one(m, 'rdmagraph_qp_tx_bytes_total', l), b.counters.txBytes, q.counters.txBytes, `qp ${q.qpn} tx bytes`);
      between(one(m, 'rdmagraph_qp_rx_bytes_total', l), b.counters.rxBytes, q.counters.rxBytes, `qp ${q.qpn} rx bytes`);
      between(
        one(m, 'rdmagraph_qp_retransmits_total', l),
        b.counters.retransmits,
        q.counters.retransmits,
        `qp ${q.qpn} retransmits`,
      );
      between(
        one(m, 'rdmagraph_qp_timeouts_total', l),
        b.counters.timeouts,
        q.counters.timeouts,
        `qp ${q.qpn} timeouts`,
      );
      assert.is(one(m, 'rdmagraph_qp_srtt_seconds', l), q.rtt.srttUs / 1e6);
      // Congestion control (a memif link: none, the whole TRP window; 0 before RTS).
      assert.is(one(m, 'rdmagraph_qp_cwnd_segments', l), q.congestion.cwnd);
      assert.is(one(m, 'rdmagraph_qp_ssthresh_segments', l), q.congestion.ssthresh);
      assert.is(one(m, 'rdmagraph_qp_ce_marks_total', l), q.congestion.ceMarks);
      assert.is(one(m, 'rdmagraph_qp_losses_total', l), q.congestion.losses);
    }
    assert.ok(
      one(m, 'rdmagraph_qp_tx_bytes_total', { qpn: String(qa.qpn), state: 'rts' }) >= 6000,
      'the WRITE counted on its QP',
    );
    assert.is(one(m, 'rdmagraph_qp_tx_packets_total', { qpn: String(idle.qpn), state: 'reset' }), 0);
    assert.is(m.types.get('rdmagraph_qp_srtt_seconds'), 'gauge');
    assert.is(m.types.get('rdmagraph_qp_cwnd_segments'), 'gauge');
    assert.is(m.types.get('rdmagraph_qp_ce_marks_total'), 'counter');
    assert.ok(
      one(m, 'rdmagraph_qp_cwnd_segments', { qpn: String(qa.qpn), state: 'rts' }) > 0,
      'an RTS QP has a window',
    );
    assert.is(m.types.get('rdmagraph_interface_link_up'), 'gauge');
  } finally {
    await p.close();
  }
});

test.run();
