/**
 * `rdmactl ping IP [repeat|count N] [interval SECONDS] [size BYTES] [timeout SECONDS]`, as VPP's
 * ping: one echo request at a time through POST /v1/ping (so each reply line appears as it
 * comes), icmp_seq counting from 1 in every run, then the statistics line, also when Ctrl-C
 * (SIGINT) stops it early. Exit status 1 (NoReplyError) when nothing answered, as ping(8).
 */
import { Args, numOpt, intOpt, UsageError } from './rdmactl-args.ts';
import type { Call, CtlOutput } from './rdmactl.ts';
import type { PingResult } from '../dataplane/views.ts';

/** No echo reply at all: exit 1. */
export class NoReplyError extends Error {}

export function formatPingReply(r: PingResult['replies'][number]): string {
  return `${r.bytes} bytes from ${r.from}: icmp_seq=${r.seq} ttl=${r.ttl} time=${r.timeMs.toFixed(4)} ms\n`;
}

export function formatPingStatistics(sent: number, received: number): string {
  const loss = sent === 0 ? 0 : ((sent - received) * 100) / sent;
  return `\nStatistics: ${sent} sent, ${received} received, ${Number.isInteger(loss) ? loss : loss.toFixed(1)}% packet loss\n`;
}

export async function pingCommand(words: string[], call: Call, io: CtlOutput, json: boolean): Promise<void> {
  const a = new Args(words, 'ping');
  const address = a.word('IP');
  const o = a.options(['repeat', 'count', 'interval', 'size', 'timeout']);
  if (o.has('repeat') && o.has('count')) throw new UsageError('ping: give repeat or count, not both');
  const count = intOpt(o, o.has('repeat') ? 'repeat' : 'count', 'ping') ?? 5;
  const interval = numOpt(o, 'interval', 'ping') ?? 1;
  const timeout = numOpt(o, 'timeout', 'ping') ?? 1;
  const size = intOpt(o, 'size', 'ping');
  if (count < 1 || count > 100_000) throw new UsageError(`ping: repeat must be 1..100000, got ${count}`);
  if (!(interval >= 0.001 && interval <= 60))
    throw new UsageError(`ping: interval must be 0.001..60 seconds, got ${interval}`);
  if (!(timeout >= 0.001 && timeout <= 60))
    throw new UsageError(`ping: timeout must be 0.001..60 seconds, got ${timeout}`);
  const results: PingResult[] = [];
  let received = 0,
    inFlight = 0;
  // Ctrl-C: stop, and count what went out (a request still waiting for its answer is lost).
  let interrupt = () => {};
  const interrupted = new Promise<'interrupted'>((res) => (interrupt = () => res('interrupted')));
  process.on('SIGINT', interrupt);
  try {
    for (let i = 0; i < count; i++) {
      const started = Date.now();
      const request = call(
        'POST',
        '/v1/ping',
        {
          address,
          count: 1,
          seq: (i % 0xffff) + 1,
          timeoutMs: Math.round(timeout * 1000),
          ...(size !== undefined ? { size } : {}),
        },
        { timeoutMs: Math.round(timeout * 1000) + 5000 },
      );
      inFlight = 1;
      const r = await Promise.race([request, interrupted]);
      if (r === 'interrupted') {
        void request.catch(() => {});
        break;
      }
      inFlight = 0;
      const v = r as PingResult;
      if (typeof v !== 'object' || v === null || !Array.isArray(v.replies))
        throw new UsageError('ping: the API did not answer as rdma-graph does');
      results.push(v);
      received += v.received;
      if (!json) for (const x of v.replies) io.out(formatPingReply(x));
      const wait = interval * 1000 - (Date.now() - started);
      if (i + 1 < count && wait > 0) {
        let timer: NodeJS.Timeout | undefined;
        const slept = await Promise.race([new Promise((res) => (timer = setTimeout(res, wait))), interrupted]);
        clearTimeout(timer);
        if (slept === 'interrupted') break;
      }
    }
  } finally {
    process.off('SIGINT', interrupt);
  }
  const sent = results.reduce((s, r) => s + r.sent, 0) + inFlight;
  if (json)
    io.out(
      JSON.stringify(
        { address, sent, received, replies: results.flatMap((r) => r.replies), lost: results.flatMap((r) => r.lost) },
        null,
        2,
      ) + '\n',
    );
  else io.out(formatPingStatistics(sent, received));
  if (received === 0) throw new NoReplyError(`no reply from ${address}`);
}
