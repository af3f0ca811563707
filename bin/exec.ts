/**
 * `rdma-graph exec [--config FILE | --socket PATH] -- COMMAND [ARG...]`: COMMAND with
 * librdmagraph-verbs.so preloaded and RDMA_GRAPH_SOCKET set (absolute), so that its libibverbs
 * calls reach the daemon. The node process becomes COMMAND (execve through the core addon): same
 * PID, its exit status and signals are COMMAND's, and no node process stays beside it. Imports
 * only the configuration loader and the addon loader, so that bin/build-cli.mjs compiles it into
 * bin/dist/exec.mjs and bin/rdma-graph.mjs runs it without a TypeScript loader.
 */
import { existsSync } from 'node:fs';
import { ConfigError, loadConfig, STARTUP_CONFIG, verbsSocketPath } from '../config/load.ts';
import { loadCore, VERBS_LIBRARY, verbsProgramEnv } from '../native/addons.ts';
const USAGE = 'usage: rdma-graph exec [--config FILE | --socket PATH] -- COMMAND [ARG...]';

function fail(msg: string, status = 2): never {
  console.error(`rdma-graph: ${msg}${status === 2 ? `\n${USAGE}` : ''}`);
  process.exit(status);
}

/** Run `exec` with the words after "exec"; returns only on a bad command line (it exits). */
export function exec(argv: string[]): never {
  const dash = argv.indexOf('--');
  const opts = dash < 0 ? argv : argv.slice(0, dash),
    command = dash < 0 ? [] : argv.slice(dash + 1);
  let socket: string | null = null,
    file = STARTUP_CONFIG;
  for (let i = 0; i < opts.length; i++) {
    const a = opts[i];
    if ((a === '--socket' || a === '--config' || a === '-c') && i + 1 >= opts.length) fail(`option ${a} needs a value`);
    if (a === '--socket') socket = opts[++i];
    else if (a === '--config' || a === '-c') file = opts[++i];
    else fail(`exec: unknown option "${a}" (the command goes after "--")`);
  }
  if (command.length === 0) fail('exec needs a command after "--", e.g. rdma-graph exec -- ibv_devinfo');
  if (!existsSync(VERBS_LIBRARY))
    fail(`${VERBS_LIBRARY} was not built: install libibverbs-dev and run npm run build`, 1);
  let path = socket;
  if (path === null) {
    try {
      path = verbsSocketPath(loadConfig(file));
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      console.error(e.message);
      fail(`${file}: ${e.issues.length} error${e.issues.length === 1 ? '' : 's'}`);
    }
  }
  if (path === null)
    fail(
      `exec: ${file} sets no verbs.socket and its API port is 0, so its daemon's socket is named after the port it got: give --socket PATH (the daemon's start-up line names it)`,
    );
  const env = verbsProgramEnv(path);
  try {
    loadCore().execve(
      command[0],
      command,
      Object.entries(env).map(([k, v]) => `${k}=${v ?? ''}`),
    );
  } catch (e) {
    // ENOENT, EACCES...: "exec NAME: No such file or directory", with a shell's status.
    const code = (e as NodeJS.ErrnoException).code;
    fail(`exec ${(e as Error).message}`, code === 'ENOENT' ? 127 : 126);
  }
  return fail('exec returned without replacing the process', 1);
}
