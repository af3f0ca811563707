/**
 * rdmactl's process side: global options, the HTTP transport (api/client.ts), output and exit
 * status. The commands themselves are in api/rdmactl.ts.
 */
import { ApiClient, ApiConnectionError, ApiError } from './client.ts';
import { DEFAULT_API, runCommand, UsageError, type Call } from './rdmactl.ts';

/** A Call over HTTP to the API at `url`. */
export function httpCall(url: string, token: string | null): Call {
  const client = new ApiClient(url, token);
  return (method, path, body, opts) => client.request(method, path, opts?.bytes !== undefined ? { bytes: opts.bytes } : { json: body });
}

/** Run rdmactl with `argv` (without node and the script); returns the exit status. */
export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let api = env.RDMACTL_API || DEFAULT_API;
  let token: string | null = env.RDMACTL_TOKEN || null;
  let json = false;
  let i = 0;
  try {
    for (; i < argv.length && argv[i].startsWith('--'); i++) {
      const a = argv[i];
      if (a === '--json') json = true;
      else if (a === '--api' || a === '--token') {
        if (i + 1 >= argv.length) throw new UsageError(`${a} needs a value`);
        if (a === '--api') api = argv[++i];
        else token = argv[++i];
      } else if (a === '--help') {
        argv = ['help'];
        i = 0;
        break;
      } else throw new UsageError(`unknown option "${a}"`);
    }
    if (!/^https?:\/\/[^/]+/.test(api)) throw new UsageError(`--api must be an http:// URL, got "${api}"`);
    await runCommand(argv.slice(i), httpCall(api, token), { out: (s) => process.stdout.write(s), bytes: (b) => process.stdout.write(b) }, { json });
    return 0;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`rdmactl: ${e.message}\n(rdmactl help lists the commands)`);
      return 2;
    }
    if (e instanceof ApiConnectionError) {
      console.error(`rdmactl: ${e.message}`);
      return 3;
    }
    if (e instanceof ApiError) {
      console.error(`rdmactl: ${e.statusCode} ${e.error}: ${e.message}`);
      return 1;
    }
    throw e;
  }
}
