// Renderers for `show runtime`, `show errors` and `show trace` in FD.io VPP's CLI layout.
//
// Pure functions: the engine takes snapshots of its counters and these turn them into the
// text VPP prints, so that VPP users read our tables at a glance. Behaviour follows VPP's
// sources (src/vlib/node_cli.c, src/vlib/error.c, src/vlib/trace.c, src/vlib/cli.c,
// src/vppinfra/format.c, src/vppinfra/std-formats.c); this is an independent
// implementation of the observed output, not a port of that code.
//
// Every line ends with '\n' (vlib_cli_output terminates each output with a newline).

export type Severity = 'error' | 'warn' | 'info';

export interface RuntimeRow {
  name: string;
  state: string;
  calls: number;
  vectors: number;
  suspends: number;
  clocks: number;
  /** The most clocks one call took, and that call's vectors (`show runtime max`; absent: 0). */
  maxClocks?: number;
  vectorsAtMax?: number;
  /** A process with events pending gets an extra `    events pending, ` line, as in VPP. */
  eventsPending?: boolean;
}

export interface RuntimeThreadSnapshot {
  index: number;
  name: string;
  /** Heading `Thread %d %s (lcore %u)`, or `Thread %d %s` when undefined. */
  lcore?: number;
  /** Seconds since the last clear. */
  time: number;
  /** The "%f sec" value (our stats interval, 10.0 by default). */
  updateInterval: number;
  internalVectorRate: number;
  loopsPerSec: number;
  /** Per second. */
  ratesIn: number;
  ratesOut: number;
  ratesDrop: number;
  ratesPunt: number;
  /** Any order; the renderer sorts by name like VPP. */
  rows: RuntimeRow[];
}

/** One thread's node/next-node tables (`show vlib graph`) with the packets each arc carried. */
export interface GraphThreadSnapshot {
  index: number;
  name: string;
  nodes: {
    name: string;
    type: 'input' | 'internal' | 'process';
    /** Next node names, by next index. */
    next: string[];
    /** Packets sent along each next arc since start, by next index. */
    arcPackets: number[];
  }[];
}

export interface RuntimeFormatOptions {
  /** Show rows with no calls and no suspends too. */
  verbose?: boolean;
  /** Sixth column as nanoseconds per packet (`Packet-Time`) instead of clocks. */
  time?: boolean;
  /** Clock ticks per nanosecond, used by `time` (default 1: clocks already are ns). */
  clocksPerNs?: number;
  /** With more than one thread: a last section with every node added up over the threads. */
  total?: boolean;
  /** VPP's `show runtime max`: per node its slowest call (clocks, vectors, clocks per vector) and the averages. */
  max?: boolean;
}

export interface ErrorRow {
  count: number;
  node: string;
  reason: string;
  severity: Severity;
  /** The counter's index (VPP's error heap index); shown by `verbose`. */
  index?: number;
}

export interface ErrorThreadSnapshot {
  index: number;
  name: string;
  rows: ErrorRow[];
}

export interface ErrorFormatOptions {
  /** true or 1: Index column, per-thread sections and a Total section; 2: zero counters too. */
  verbose?: boolean | number;
}

export interface TraceEntry {
  /** Nanoseconds since the data plane started. */
  timeNs: number;
  node: string;
  /** The node's formatted record; may be multi-line, may be ''. */
  text: string;
}

export interface TracePacket {
  entries: TraceEntry[];
}

export interface TraceThreadSnapshot {
  index: number;
  name: string;
  packets: TracePacket[];
}

// ---------------------------------------------------------------------------------------------
// vppinfra-style number rendering

/**
 * `%.Ne` as vppinfra prints it: `1.38e1`, `3.03e-3`, `0.00e0`, `-1.38e1` (no `+`, no zero
 * padding of the exponent; zero, including -0, prints unsigned). NaN and infinities print as
 * vppinfra does: `+NaN`, `+infinity`, `-infinity`.
 *
 * Rounding is to nearest on the N-th fraction digit of the mantissa. (vppinfra >= 25.02 adds
 * 0.5e-N to the value itself before normalising, so for %e it mis-rounds values below 1,
 * e.g. 0.00303 -> `8.03e-3`, and truncates values above 10, e.g. 13.86 -> `1.38e1`; we do
 * not copy that bug.)
 */
export function formatVppFloat(x: number, digits: number): string {
  const nonFinite = formatNonFinite(x);
  if (nonFinite !== undefined) return nonFinite;
  const d = clampDigits(digits);
  if (x === 0) return `${(0).toFixed(d)}e0`;
  const m = /^(-?[0-9.]+)e([+-])([0-9]+)$/.exec(x.toExponential(d));
  if (!m) return String(x);
  const exp = Number(m[3]);
  return `${m[1]}e${m[2] === '-' && exp !== 0 ? '-' : ''}${exp}`;
}

/**
 * `%.Nf` as vppinfra prints it: like C, except that a non-zero magnitude below 1 has no
 * leading zero (`.50`, `-.50`, `.02`, as in VPP's Vectors/Call column), and a value that
 * rounds to zero prints as unsigned `0.00`. (Exact decimal ties such as 48.735, stored just
 * below the tie, may round down here where vppinfra's float addition rounds them up.)
 */
export function formatVppFixed(x: number, digits: number): string {
  const nonFinite = formatNonFinite(x);
  if (nonFinite !== undefined) return nonFinite;
  const d = clampDigits(digits);
  const a = Math.abs(x);
  let s: string;
  if (a >= 1e21) {
    // toFixed switches to exponent notation here; print the integer digits instead.
    s = BigInt(Math.round(a)).toString() + (d > 0 ? '.' + '0'.repeat(d) : '');
  } else {
    s = a.toFixed(d);
  }
  if (/^[0.]*$/.test(s)) return s; // rounds to zero: "0.00", unsigned
  if (s.startsWith('0.')) s = s.slice(1);
  return x < 0 ? '-' + s : s;
}

function formatNonFinite(x: number): string | undefined {
  if (Number.isNaN(x)) return '+NaN';
  if (x === Infinity) return '+infinity';
  if (x === -Infinity) return '-infinity';
  return undefined;
}

function clampDigits(digits: number): number {
  if (!Number.isFinite(digits) || digits < 0) return 0;
  return Math.min(100, Math.trunc(digits));
}

function formatInteger(x: number, base: number, upper: boolean): string {
  if (!Number.isFinite(x)) return formatNonFinite(x) as string;
  const s = BigInt(Math.trunc(x)).toString(base);
  return upper ? s.toUpperCase() : s;
}

// ---------------------------------------------------------------------------------------------
// A tiny format() with vppinfra's width semantics

/** Code points, so truncation never splits a surrogate pair. */
function chars(s: string): string[] {
  return Array.from(s);
}

/**
 * Fits `s` to `width` like vppinfra's justify(): the width is a minimum and a maximum
 * (longer text is cut to its first `width` characters); '-' pads on the right, '+' on the
 * left, '=' centres with the odd pad character on the left. Width 0 leaves `s` alone.
 */
export function vppJustify(s: string, width: number, justify: '-' | '+' | '=', pad = ' '): string {
  if (width <= 0) return s;
  const cs = chars(s);
  if (cs.length >= width) return cs.slice(0, width).join('');
  const n = width - cs.length;
  let left = 0;
  let right = 0;
  if (justify === '-') right = n;
  else if (justify === '+') left = n;
  else {
    right = Math.floor(n / 2);
    left = n - right;
  }
  return pad.repeat(left) + s + pad.repeat(right);
}

/**
 * A small subset of vppinfra's format(): `%[-+=][0][width][.precision][l|ll|L|w]conv` with
 * conv one of `s v S d u x X o c f e g %`. Width is a minimum and a maximum (see vppJustify);
 * the default justification is right ('+'); a leading 0 in the width pads with '0'.
 * `%s`/`%v` take a string (`.N` keeps its first N characters), `%S` replaces '_' with ' ',
 * `%d %u %x %X %o` take an integer (truncated toward zero), `%f`/`%g` print fixed notation
 * (6 digits by default), `%e` prints vppinfra's exponent notation, `%c` a character code or
 * string. Any other conversion throws a RangeError (a bug in the caller's format string).
 */
export function vppFormat(fmt: string, ...args: (string | number)[]): string {
  let out = '';
  let ai = 0;
  const next = (): string | number => (ai < args.length ? args[ai++] : '');
  let i = 0;
  while (i < fmt.length) {
    const pct = fmt.indexOf('%', i);
    if (pct < 0) {
      out += fmt.slice(i);
      break;
    }
    out += fmt.slice(i, pct);
    i = pct + 1;
    if (fmt[i] === '%') {
      out += '%';
      i++;
      continue;
    }
    let justify: '-' | '+' | '=' = '+';
    if (fmt[i] === '-' || fmt[i] === '+' || fmt[i] === '=') justify = fmt[i++] as '-' | '+' | '=';
    let pad = ' ';
    if (fmt[i] === '0') pad = '0';
    let width = 0;
    let precision: number | undefined;
    if (fmt[i] === '*') {
      width = Number(next()) || 0;
      i++;
    } else {
      while (i < fmt.length && fmt[i] >= '0' && fmt[i] <= '9') width = width * 10 + Number(fmt[i++]);
    }
    if (fmt[i] === '.') {
      i++;
      precision = 0;
      if (fmt[i] === '*') {
        precision = Number(next()) || 0;
        i++;
      } else {
        while (i < fmt.length && fmt[i] >= '0' && fmt[i] <= '9') precision = precision * 10 + Number(fmt[i++]);
      }
    }
    while (fmt[i] === 'l' || fmt[i] === 'L' || fmt[i] === 'w') i++;
    const conv = fmt[i++];
    if (conv === undefined) break; // a lone trailing '%' and flags: vppinfra prints nothing for it
    let field: string;
    switch (conv) {
      case 's':
      case 'v':
      case 'S': {
        let v = String(next());
        if (precision !== undefined) v = chars(v).slice(0, precision).join('');
        field = conv === 'S' ? v.replace(/_/g, ' ') : v;
        break;
      }
      case 'c': {
        const v = next();
        field = typeof v === 'number' ? String.fromCodePoint(v) : v.slice(0, 1);
        break;
      }
      case 'd':
      case 'u':
        field = formatInteger(Number(next()), 10, false);
        break;
      case 'x':
      case 'X':
        field = formatInteger(Number(next()), 16, conv === 'X');
        break;
      case 'o':
        field = formatInteger(Number(next()), 8, false);
        break;
      case 'f':
      case 'g':
        field = formatVppFixed(Number(next()), precision ?? 6);
        break;
      case 'e':
        field = formatVppFloat(Number(next()), precision ?? 6);
        break;
      default:
        throw new RangeError(`vppFormat: unsupported conversion '%${conv}' in ${JSON.stringify(fmt)}`);
    }
    out += vppJustify(field, width, justify, pad);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// show runtime

function byName(a: string, b: string): number {
  // vec_cmp: byte-wise, then shorter first; plain code-unit comparison for our names.
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * `show runtime [time] [verbose]` (VPP >= 20.05 layout, node_cli.c show_node_runtime and
 * format_vlib_node_stats). With more than one thread each thread gets a `Thread N name`
 * heading and threads are separated by a `---------------` line.
 */
export function formatRuntime(threads: RuntimeThreadSnapshot[], opts: RuntimeFormatOptions = {}): string {
  const useTime = opts.time === true;
  const clocksPerNs = opts.clocksPerNs !== undefined && opts.clocksPerNs > 0 ? opts.clocksPerNs : 1;
  const lines: string[] = [];
  // More than one thread (cpu.workers): every thread's section (as VPP), then with `total` the sums.
  const sections: [RuntimeThreadSnapshot, string | null][] = threads.map((t) => [
    t,
    threads.length < 2
      ? null
      : t.lcore !== undefined
        ? vppFormat('Thread %d %s (lcore %u)', t.index, t.name, t.lcore)
        : vppFormat('Thread %d %s', t.index, t.name),
  ]);
  if (opts.total === true && threads.length > 1)
    sections.push([runtimeTotal(threads), `Total (${threads.length} threads)`]);
  sections.forEach(([t, heading], j) => {
    if (heading !== null) {
      if (j > 0) lines.push('---------------');
      lines.push(heading);
    }
    lines.push(
      vppFormat(
        'Time %.1f, %f sec internal node vector rate %.2f loops/sec %.2f',
        t.time,
        t.updateInterval,
        t.internalVectorRate,
        t.loopsPerSec,
      ),
      vppFormat(
        '  vector rates in %.4e, out %.4e, drop %.4e, punt %.4e',
        t.ratesIn,
        t.ratesOut,
        t.ratesDrop,
        t.ratesPunt,
      ),
      opts.max === true
        ? vppFormat(
            '%=30s%=17s%=16s%=16s%=16s%=16s',
            'Name',
            'Max Node Clocks',
            'Vectors at Max',
            'Max Clocks',
            'Avg Clocks',
            'Avg Vectors/Call',
          )
        : vppFormat(
            '%=30s%=12s%=16s%=16s%=16s%=16s%=16s',
            'Name',
            'State',
            'Calls',
            'Vectors',
            'Suspends',
            useTime ? 'Packet-Time' : 'Clocks',
            'Vectors/Call',
          ),
    );
    const rows = [...t.rows].sort((a, b) => byName(a.name, b.name));
    for (const r of rows) {
      if (!opts.verbose && !r.calls && !r.suspends) continue;
      // Per packet, else per call, else per suspend.
      let per = 0;
      if (r.vectors > 0) per = r.clocks / r.vectors;
      else if (r.calls > 0) per = r.clocks / r.calls;
      else if (r.suspends > 0) per = r.clocks / r.suspends;
      if (useTime) per /= clocksPerNs;
      const vpc = r.calls > 0 ? r.vectors / r.calls : 0;
      if (opts.max === true) {
        // VPP's max form: the slowest call, its vectors, its clocks per vector, then the averages.
        const maxc = r.maxClocks ?? 0,
          maxn = r.vectorsAtMax ?? 0;
        lines.push(
          vppFormat('%-30s%=17.2e%=16d%=16.2e%=16.2e%=16.2e', r.name, maxc, maxn, maxn > 0 ? maxc / maxn : 0, per, vpc),
        );
        continue;
      }
      lines.push(
        vppFormat('%-30s%=12s%16Ld%16Ld%16Ld%16.2e%16.2f', r.name, r.state, r.calls, r.vectors, r.suspends, per, vpc),
      );
      if (r.eventsPending) lines.push('    events pending, ');
    }
  });
  return lines.map((l) => l + '\n').join('');
}

/**
 * The threads added together: per node (by name) calls, vectors, suspends and clocks summed, the
 * rates summed, the internal vector rate recomputed from the sums, Time the longest.
 */
export function runtimeTotal(threads: RuntimeThreadSnapshot[]): RuntimeThreadSnapshot {
  const rows = new Map<string, RuntimeRow>();
  let intV = 0,
    intC = 0;
  for (const t of threads) {
    for (const r of t.rows) {
      const have = rows.get(r.name);
      if (have === undefined)
        rows.set(r.name, {
          name: r.name,
          state: r.state,
          calls: r.calls,
          vectors: r.vectors,
          suspends: r.suspends,
          clocks: r.clocks,
          maxClocks: r.maxClocks ?? 0,
          vectorsAtMax: r.vectorsAtMax ?? 0,
        });
      else {
        have.calls += r.calls;
        have.vectors += r.vectors;
        have.suspends += r.suspends;
        have.clocks += r.clocks;
        // The slowest call of any thread.
        if ((r.maxClocks ?? 0) > (have.maxClocks ?? 0)) {
          have.maxClocks = r.maxClocks;
          have.vectorsAtMax = r.vectorsAtMax;
        }
      }
    }
    // internalVectorRate = internal vectors / internal calls per thread: weigh it by the calls.
    const calls = t.rows.reduce((n, r) => n + r.calls, 0);
    intV += t.internalVectorRate * calls;
    intC += calls;
  }
  const sum = (f: (t: RuntimeThreadSnapshot) => number) => threads.reduce((n, t) => n + f(t), 0);
  return {
    index: -1,
    name: 'total',
    time: Math.max(...threads.map((t) => t.time)),
    updateInterval: threads[0].updateInterval,
    internalVectorRate: intC > 0 ? intV / intC : 0,
    loopsPerSec: sum((t) => t.loopsPerSec),
    ratesIn: sum((t) => t.ratesIn),
    ratesOut: sum((t) => t.ratesOut),
    ratesDrop: sum((t) => t.ratesDrop),
    ratesPunt: sum((t) => t.ratesPunt),
    rows: [...rows.values()],
  };
}

// ---------------------------------------------------------------------------------------------
// show errors

function verboseLevel(v: boolean | number | undefined): number {
  if (v === true) return 1;
  if (typeof v === 'number' && Number.isFinite(v)) return Math.trunc(v);
  return 0;
}

/**
 * `show errors [verbose [N]]` (error.c show_errors). Rows appear in the order given, thread
 * after thread; like VPP, the plain form lists each thread's rows one after the other without
 * headings and does not add threads together. `verbose` adds the Index column, a
 * `Thread N (name):` line before each thread's rows and a `Total:` section with the sums of
 * the non-zero counters over all threads. Zero counters are hidden unless verbose >= 2.
 * A row without an `index` gets a blank Index cell.
 */
export function formatErrors(threads: ErrorThreadSnapshot[], opts: ErrorFormatOptions = {}): string {
  const verbose = verboseLevel(opts.verbose);
  const lines: string[] = [];
  const idx = (r: ErrorRow): string => (r.index === undefined ? '' : formatInteger(r.index, 10, false));
  // VPP's columns are 35 wide; a longer node name or reason widens its column instead of
  // being cut (every row stays aligned).
  let nodeLen = 0,
    reasonLen = 0;
  for (const t of threads)
    for (const r of t.rows) {
      if (r.node.length > nodeLen) nodeLen = r.node.length;
      if (r.reason.length > reasonLen) reasonLen = r.reason.length;
    }
  const nw = Math.max(35, nodeLen + 2),
    rw = Math.max(35, reasonLen + 2);
  const head = `%=10s%=${nw}s%=${rw}s%=10s`,
    row = `%10lu%=${nw}s%=${rw}s%=10s`;
  if (verbose) lines.push(vppFormat(`${head}%=6s`, 'Count', 'Node', 'Reason', 'Severity', 'Index'));
  else lines.push(vppFormat(head, 'Count', 'Node', 'Reason', 'Severity'));

  const sums = new Map<string, { row: ErrorRow; sum: number }>();
  for (const t of threads) {
    if (verbose) lines.push(vppFormat('Thread %u (%s):', t.index, t.name));
    for (const r of t.rows) {
      const key = r.index !== undefined ? `#${r.index}` : `${r.node}\u0000${r.reason}`;
      const acc = sums.get(key);
      if (acc) acc.sum += r.count;
      else sums.set(key, { row: r, sum: r.count });
      if (r.count === 0 && verbose < 2) continue;
      lines.push(
        verbose
          ? vppFormat(`${row}%=6s`, r.count, r.node, r.reason, r.severity, idx(r))
          : vppFormat(row, r.count, r.node, r.reason, r.severity),
      );
    }
  }
  if (verbose) {
    lines.push('Total:');
    for (const { row, sum } of sums.values()) {
      // VPP's Total rows use other widths (node 40, reason 20, widened to fit) and have no Severity.
      if (sum)
        lines.push(
          vppFormat(
            `%10lu%=${Math.max(40, nodeLen + 2)}s%=${Math.max(20, reasonLen + 2)}s%=10s`,
            sum,
            row.node,
            row.reason,
            idx(row),
          ),
        );
    }
  }
  return lines.map((l) => l + '\n').join('');
}

// ---------------------------------------------------------------------------------------------
// show trace

/**
 * vppinfra's format_time_interval with "h:m:s:u": hours, minutes and seconds as two digits
 * and microseconds as six; whole days are dropped (the hours wrap at 24). Negative and
 * non-finite times print as 00:00:00:000000.
 */
export function formatTraceTime(timeNs: number): string {
  const ns = Number.isFinite(timeNs) && timeNs > 0 ? timeNs : 0;
  const us = Math.floor(ns / 1e3);
  const totalSec = Math.floor(us / 1e6);
  const two = (n: number): string => String(n).padStart(2, '0');
  return `${two(Math.floor(totalSec / 3600) % 24)}:${two(Math.floor(totalSec / 60) % 60)}:${two(totalSec % 60)}:${String(us % 1e6).padStart(6, '0')}`;
}

/**
 * `show trace [max N]` (trace.c cli_show_trace_buffer and format_vlib_trace): per thread a
 * `------------------- Start of thread N name -------------------` line, then
 * `No packets in trace buffer` or each packet (sorted by the time of its first entry) as
 * `Packet N`, a blank line, `<h:m:s:u>: <node>` whenever the node changes, each line of the
 * node's record indented by two spaces, and a blank line. At most `max` packets (default 50)
 * are shown per thread, followed by VPP's "Limiting display" notice on its own line.
 */
export function formatTrace(threads: TraceThreadSnapshot[], opts: { max?: number } = {}): string {
  const max = opts.max !== undefined && Number.isFinite(opts.max) ? Math.max(0, Math.trunc(opts.max)) : 50;
  let s = '';
  for (const t of threads) {
    s += `------------------- Start of thread ${t.index} ${t.name} -------------------\n`;
    if (t.packets.length === 0) {
      s += 'No packets in trace buffer\n';
      continue;
    }
    const first = (p: TracePacket): number => (p.entries.length ? p.entries[0].timeNs : 0);
    const packets = t.packets.map((p, i) => ({ p, i })).sort((a, b) => first(a.p) - first(b.p) || a.i - b.i);
    for (let i = 0; i < packets.length; i++) {
      if (i === max) {
        s += `Limiting display to ${max} packets. To display more specify max.\n`;
        break;
      }
      s += `Packet ${i + 1}\n`;
      let prev: string | undefined;
      for (const e of packets[i].p.entries) {
        if (e.node !== prev) s += `\n${formatTraceTime(e.timeNs)}: ${e.node}`;
        prev = e.node;
        // VPP prints "\n  " before each record; a record's further lines carry their own
        // indentation there, so we indent each non-empty further line by two spaces.
        e.text.split('\n').forEach((line, k) => {
          s += k === 0 || line !== '' ? `\n  ${line}` : '\n';
        });
      }
      s += '\n\n';
    }
  }
  return s;
}
