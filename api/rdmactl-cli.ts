/**
 * rdmactl's process side: global options, the HTTP transport (api/client.ts), output and exit
 * status. The commands themselves are in api/rdmactl.ts.
 *
 * Exit status: 0 done, 1 the API refused (its message is printed), 2 bad command line, 3 no
 * rdma-graph API answered (nothing listening, no answer within --timeout, or something else
 * answered). Every failure is one line on stderr; never a stack trace.
 */
import { createRequire } from 'node:module';
import { ApiClient, ApiConnectionError, ApiError, ApiForeignError } from './client.ts';
import { NoReplyError } from './rdmactl-ping.ts';
import { DEFAULT_API, ForeignAnswerError, HELP, NotFound, runCommand, UsageError, type Call } from './rdmactl.ts';

export const DEFAULT_TIMEOUT_MS = 10_000;

/** A Call over HTTP to the API at `url`; JSON calls that get something else back are foreign answers. */
export function httpCall(url: string, token: string | null, timeoutMs = DEFAULT_TIMEOUT_MS): Call {
  const client = new ApiClient(url, token, { timeoutMs });
  return async (method, path, body, opts) => {
    const v = await client.request(method, path, {
      ...(opts?.bytes !== undefined ? { bytes: opts.bytes } : { json: body }),
      ...(opts?.timeoutMs !== undefined ? { timeoutMs: Math.max(timeoutMs, opts.timeoutMs) } : {}),
    });
    if (opts?.raw === true) {
      if (!(v instanceof Uint8Array))
        throw new ForeignAnswerError(
          `${url} answered ${method} ${path} with text, not the raw bytes the rdma-graph API sends: is --api right?`,
        );
    } else if (typeof v === 'string' || v instanceof Uint8Array) {
      throw new ForeignAnswerError(
        `${url} answered ${method} ${path} with ${typeof v === 'string' ? 'text' : 'bytes'}, not JSON: is --api pointing at the rdma-graph API?`,
      );
    }
    return v;
  };
}

/** REST field names in the API's messages, as the command line spells them. */
const CLI_WORDS: Record<string, string> = {
  maxSendWr: 'max-send-wr',
  maxRecvWr: 'max-recv-wr',
  maxSge: 'max-sge',
  maxInline: 'max-inline',
  maxWr: 'max-wr',
  sendCq: 'send-cq',
  recvCq: 'recv-cq',
  wrId: 'wr-id',
  remotePsn: 'psn',
  rqPsn: 'rq-psn',
  sqPsn: 'sq-psn',
  invalidateStag: 'invalidate',
  timeoutMs: 'timeout-ms',
  privateData: 'private-data',
  waitMs: 'wait',
  intervalMs: 'interval',
  sge: 'sge',
  reorderDepth: 'reorder-depth',
  reorderDelayUs: 'reorder-delay-us',
};

/** "body/sge/0/length must be ..." -> "sge 0 length must be ...", maxSendWr -> max-send-wr. */
export function cliWords(message: string): string {
  return message
    .replace(/\b(?:body|querystring|params)\/([A-Za-z0-9/]+)/g, (_, path: string) =>
      path
        .split('/')
        .map((w) => CLI_WORDS[w] ?? w)
        .join(' '),
    )
    .replace(
      /\b(maxSendWr|maxRecvWr|maxSge|maxInline|maxWr|sendCq|recvCq|wrId|remotePsn|rqPsn|sqPsn|invalidateStag|timeoutMs|privateData|waitMs|intervalMs|reorderDepth|reorderDelayUs)\b/g,
      (w) => CLI_WORDS[w],
    );
}

/** The package's version: package.json one level up from api/, two from the compiled bin/dist/. */
function ownVersion(): string {
  const req = createRequire(import.meta.url);
  for (const p of ['../package.json', '../../package.json']) {
    try {
      const pkg = req(p) as { name?: string; version?: string };
      if (pkg.name === 'rdma-graph' && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // not this one
    }
  }
  return 'unknown';
}

/**
 * The API's base URL from what --api (or RDMACTL_API) gives: `http://HOST:PORT`, the same with
 * the API's `/v1` (the README's curl base) or a trailing slash, or `HOST:PORT` alone.
 */
export function apiBase(given: string): string {
  let url = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(given) ? given : `http://${given}`;
  url = url.replace(/\/+$/, '').replace(/\/v1$/, '');
  if (!/^http:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?(\/[^?#\s]*)?$/.test(url))
    throw new UsageError(
      `--api must be http://HOST:PORT, HOST:PORT or either ending in /v1 (the API does not speak TLS), got "${given}"`,
    );
  return url;
}

/** Run rdmactl with `argv` (without node and the script); returns the exit status. */
export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let api = env.RDMACTL_API || DEFAULT_API;
  let token: string | null = env.RDMACTL_TOKEN || null;
  let timeoutText = env.RDMACTL_TIMEOUT || String(DEFAULT_TIMEOUT_MS);
  let json = false,
    quiet = false;
  let i = 0;
  try {
    if (argv.length === 0) {
      process.stderr.write(HELP);
      return 2;
    }
    for (; i < argv.length && argv[i].startsWith('-'); i++) {
      const a = argv[i];
      if (a === '--json') json = true;
      else if (a === '--quiet' || a === '-q') quiet = true;
      else if (a === '--help' || a === '-h') {
        process.stdout.write(HELP);
        return 0;
      } else if (a === '--version' || a === '-V') {
        process.stdout.write(`rdmactl ${ownVersion()}\n`);
        return 0;
      } else if (a === '--api' || a === '--token' || a === '--timeout') {
        if (i + 1 >= argv.length) throw new UsageError(`${a} needs a value`);
        const v = argv[++i];
        if (a === '--api') api = v;
        else if (a === '--token') token = v;
        else timeoutText = v;
      } else throw new UsageError(`unknown option "${a}"`);
    }
    api = apiBase(api);
    if (!/^[0-9]{1,7}$/.test(timeoutText) || Number(timeoutText) < 1)
      throw new UsageError(`--timeout (or RDMACTL_TIMEOUT) must be milliseconds, 1..9999999, got "${timeoutText}"`);
    await runCommand(
      argv.slice(i),
      httpCall(api, token, Number(timeoutText)),
      { out: (s) => process.stdout.write(s), bytes: (b) => process.stdout.write(b) },
      { json, quiet },
    );
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`rdmactl: ${e.message} (rdmactl help lists the commands)`);
      return 2;
    }
    if (e instanceof ApiConnectionError || e instanceof ApiForeignError || e instanceof ForeignAnswerError) {
      console.error(`rdmactl: ${e.message.includes(api) ? '' : `${api}: `}${e.message}`);
      return 3;
    }
    if (e instanceof NoReplyError || e instanceof NotFound) {
      console.error(`rdmactl: ${e.message}`);
      return 1;
    }
    if (e instanceof ApiError) {
      console.error(
        `rdmactl: ${e.statusCode} ${e.error}: ${cliWords(e.message)}${e.statusCode === 401 && token === null && !e.message.includes('--token') ? ' (give it with --token TOKEN or RDMACTL_TOKEN)' : ''}`,
      );
      return 1;
    }
    // A bug of ours: still one line, no stack (RDMACTL_DEBUG=1 shows it).
    console.error(`rdmactl: internal error: ${(e as Error)?.message ?? String(e)}`);
    if (env.RDMACTL_DEBUG) console.error((e as Error)?.stack);
    return 1;
  }
}
