/**
 * What `rdma-graph start` would find taken, found without taking it (`rdma-graph check`): the
 * API's address (bound for a moment and let go), each memif server socket and the verbs socket
 * (served when something accepts a connection there: the probe connects and hangs up at once, as
 * start itself does before it replaces a stale file). The words are start's own.
 */
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import type { Config } from '../config/types.ts';
import { verbsSocketPath } from '../config/load.ts';
import { loadCore } from '../native/addons.ts';

/** Start's message for an API address it cannot listen on. */
export function apiListenError(host: string, port: number, err: NodeJS.ErrnoException): string {
  return err.code === 'EADDRINUSE' ? `${host}:${port} is in use (another rdma-graph? set api.listen)` : err.message;
}

/** Whether a process accepts connections on the SOCK_SEQPACKET socket at `path` ("@name": abstract). */
export function socketServed(path: string): boolean {
  const abstract = path.startsWith('@') || path.startsWith('abstract:');
  if (!abstract && !existsSync(path)) return false;
  const core = loadCore();
  try {
    core.closeFd(core.memifRawConnect(path));
    return true;
  } catch {
    return false; // nobody answers: a stale file start would replace
  }
}

/** Null when `host:port` can be listened on now (port 0 always can), else start's reason. */
function apiTaken(host: string, port: number): Promise<string | null> {
  if (port === 0) return Promise.resolve(null);
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', (e: NodeJS.ErrnoException) => resolve(apiListenError(host, port, e)));
    srv.listen({ host, port, exclusive: true }, () => srv.close(() => resolve(null)));
  });
}

/** What start would refuse in `config` for a resource another process holds: one line each, with `file`'s line where known. */
export async function preflight(config: Config, file: string): Promise<string[]> {
  const out: string[] = [];
  const api = await apiTaken(config.api.host, config.api.port);
  if (api !== null) out.push(`${file}: api.listen: cannot start the API: ${api}`);
  const seen = new Set<string>();
  for (const i of config.interfaces) {
    const m = i.memif;
    if (i.driver !== 'memif' || m === undefined || m.role !== 'server' || seen.has(m.socket)) continue;
    seen.add(m.socket);
    if (socketServed(m.socket))
      out.push(`${file}:${i.line}: interface ${i.name}: socket ${m.socket} is in use by another memif server`);
  }
  const verbs = verbsSocketPath(config);
  if (verbs !== null && socketServed(verbs))
    out.push(`${file}: verbs.socket ${verbs}: another process serves it (another rdma-graph?)`);
  return out;
}
