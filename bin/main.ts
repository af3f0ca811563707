/**
 * rdma-graph command line.
 *
 *   rdma-graph start [--config FILE]   build the data plane from FILE, open its interfaces, serve the API
 *   rdma-graph check [--config FILE]   validate FILE and exit (0 valid, 2 not)
 *   rdma-graph exec [--config FILE | --socket PATH] -- COMMAND...
 *                                      run an unmodified libibverbs program on the daemon that
 *                                      serves that verbs socket (LD_PRELOAD of librdmagraph-verbs.so)
 *   rdma-graph --version
 *
 * FILE defaults to the package's config/startup.yaml (the embedded default), wherever the
 * command runs from; relative paths inside a file (memif sockets...) are relative to the
 * working directory. SIGINT/SIGTERM shut down cleanly: QPs send FIN, the API closes,
 * interfaces close (memif sockets are removed). Under `npm start` this process is npm's child
 * (npm's shell execs it); the PID a shell gets from `npm start &` is npm's, which passes SIGINT
 * and SIGTERM on to it.
 */
import { existsSync, realpathSync } from 'node:fs';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { STARTUP_CONFIG, loadConfig, ConfigError, verbsSocketPath } from '../config/load.ts';
import type { Config } from '../config/types.ts';
import { driverUnavailable, VERBS_LIBRARY, warmUp } from '../dataplane/dataplane.ts';
import type { DataplaneApi, VerbsSocket } from '../dataplane/api.ts';
import { apiListenError, createDataplane, preflight, wireWarmUp } from '../dataplane/create.ts';
import { DataplaneError, type Logger, VERSION } from '../dataplane/views.ts';
import { startApi } from '../api/server.ts';

/** The package's root directory, with a trailing slash. */
const ROOT = fileURLToPath(new URL('../', import.meta.url));

/**
 * How the user who started the daemon runs the package's command `name` from where they stand
 * (the daemon's working directory): its bare name when that is on PATH and is this package's,
 * `npx name` where this package is a dependency of the directory's project, else `node` and the
 * script (relative inside the checkout, absolute elsewhere).
 */
function commandHint(name: 'rdmactl' | 'rdma-graph', cwd = process.cwd()): string {
  const script = join(ROOT, 'bin', `${name}.mjs`);
  const real = (p: string) => {
    try {
      return realpathSync(p);
    } catch {
      return null;
    }
  };
  for (const dir of (process.env.PATH ?? '').split(':'))
    if (dir !== '' && isAbsolute(dir) && real(join(dir, name)) === real(script)) return name;
  if (real(join(cwd, 'node_modules', 'rdma-graph')) === real(ROOT)) return `npx ${name}`;
  const rel = relative(cwd, script);
  const path = rel.startsWith('..') || isAbsolute(rel) ? script : rel;
  return `node ${shellWord(path)}`;
}

/** `s` as one word of a POSIX shell command line. */
function shellWord(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The embedded default, found from the package (not from the working directory). */
const DEFAULT_CONFIG = STARTUP_CONFIG;
const USAGE = `usage: rdma-graph start [--config FILE]     run the data plane and its REST API
       rdma-graph check [--config FILE]     say whether start would run FILE (exit 0), or why not (exit 2)
       rdma-graph exec [--config FILE | --socket PATH] -- COMMAND [ARG...]
                                            run a libibverbs program on the daemon of FILE's verbs.socket (or PATH)
       rdma-graph --version
FILE defaults to the embedded default, ${DEFAULT_CONFIG}.`;

function usage(msg: string): never {
  console.error(`rdma-graph: ${msg}\n${USAGE}`);
  process.exit(2);
}

function parseArgs(argv: string[]): { cmd: string; config: string; isDefault: boolean } {
  const [cmd = '', ...rest] = argv;
  let config = DEFAULT_CONFIG;
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (a === '--config' || a === '-c') {
      if (i + 1 >= rest.length) usage(`option ${a} needs a file`);
      config = rest[++i];
    } else if (a.startsWith('--config=')) config = a.slice('--config='.length);
    else usage(`unknown option "${a}"`);
  }
  return { cmd, config, isDefault: config === DEFAULT_CONFIG };
}

/** How a file is named in messages: as given, and "(the embedded default)" for the default. */
function named(file: string, isDefault: boolean): string {
  return isDefault ? `${file} (the embedded default)` : file;
}

const LEVELS = ['error', 'warn', 'info', 'debug'] as const;

function makeLogger(level: Config['log']['level']): Logger {
  const max = LEVELS.indexOf(level);
  return (l, msg) => {
    if (LEVELS.indexOf(l) > max) return;
    const line = `rdma-graph: ${l === 'info' ? '' : `${l}: `}${msg}`;
    if (l === 'error' || l === 'warn') console.error(line);
    else console.log(line);
  };
}

function load(file: string): Config {
  try {
    return loadConfig(file);
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      console.error(`rdma-graph: ${file}: ${e.issues.length} error${e.issues.length === 1 ? '' : 's'}`);
      process.exit(2);
    }
    throw e;
  }
}

async function start(file: string, isDefault: boolean): Promise<void> {
  const config = load(file);
  const log = makeLogger(config.log.level);
  // Signal listeners go in before anything is announced: a supervisor that sends SIGTERM as soon
  // as it reads the API line must find them there (until then Node's default kills the process,
  // leaving the socket behind). They stay for the whole shutdown: with `once`, Node would restore
  // the default action as the first signal is handled, and a repeated SIGTERM (npm forwarding, a
  // supervisor repeating itself) would kill the daemon half-way.
  let stopping: string | undefined;
  let stop: (sig: string) => void = () => {};
  const stopped = new Promise<string>((resolve) => (stop = resolve));
  const onSignal = (sig: string) => {
    if (stopping !== undefined) log('info', `${sig}: already shutting down`);
    else stop((stopping = sig));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  log('info', `rdma-graph ${VERSION}, config ${named(file, isDefault)}`);
  if (config.interfaces.length === 0)
    log('warn', 'no interfaces configured: the data plane has nothing to receive from or send to');
  let dp: DataplaneApi;
  try {
    dp = await createDataplane(config, { log });
  } catch (e) {
    log('error', (e as Error).message);
    process.exit(1);
  }
  const st = await dp.buffers();
  log(
    'info',
    `buffers: ${st.count} x ${st.dataSize} B (${st.hugepages ? '2 MiB hugepages' : 'normal pages'}), ${
      config.cpu.workers === 0
        ? 'graph on the main thread'
        : `${config.cpu.workers} worker thread${config.cpu.workers === 1 ? '' : 's'} (rdma_wk_0..${config.cpu.workers - 1}), API on the main thread`
    }`,
  );
  for (const itf of await dp.interfaces()) {
    log(
      'info',
      `interface ${itf.name} (${itf.driver}) mac ${itf.mac} ${itf.addresses.join(' ') || 'no address'} mtu ${itf.mtu} ${itf.state}`,
    );
  }
  let api: { url: string; close(): Promise<void> };
  try {
    api = await startApi(dp, {
      host: config.api.host,
      port: config.api.port,
      token: config.api.token,
      access: { users: config.api.users, group: config.api.group },
    });
  } catch (e) {
    log(
      'error',
      `cannot start the API: ${apiListenError(config.api.host, config.api.port, e as NodeJS.ErrnoException)}`,
    );
    await dp.close();
    process.exit(1);
  }
  let verbs: VerbsSocket;
  try {
    const path = verbsSocketPath(config, Number(new URL(api.url).port)) as string;
    verbs = dp.serveVerbs({ path, log: (l, m) => log(l, m) });
  } catch (e) {
    log('error', `cannot open the verbs socket: ${(e as Error).message}`);
    await api.close();
    await dp.close();
    process.exit(1);
  }
  if (config.verbs.wireWarmUp > 0) {
    const w =
      config.cpu.workers > 0
        ? { outcome: 'skipped', message: 'wire warm-up skipped: cpu.workers (each worker is an isolate of its own)' }
        : await wireWarmUp(config.verbs.wireWarmUp, config.cpu.poll);
    log(w.outcome === 'failed' ? 'warn' : 'info', w.message);
  }
  if (config.verbs.warmUp > 0) {
    for (const w of await warmUp(dp, verbs.path, config.verbs.warmUp))
      log(w.outcome === 'failed' ? 'warn' : 'info', w.message);
  }
  log(
    'info',
    existsSync(VERBS_LIBRARY)
      ? `verbs socket ${verbs.path}: ${commandHint('rdma-graph')} exec --socket ${shellWord(verbs.path.startsWith('@') ? verbs.path : resolve(verbs.path))} -- ibv_devinfo`
      : `verbs socket ${verbs.path} (librdmagraph-verbs.so was not built: install libibverbs-dev, npm run build)`,
  );
  log(
    'info',
    `API on ${api.url}/v1 (${config.api.token ? 'token required' : 'no token'}); ${commandHint('rdmactl')} --api ${api.url} show runtime`,
  );
  const signal = await stopped;
  log('info', `${signal}: shutting down`);
  const qps = (await dp.qps()).length;
  verbs.close();
  await api.close();
  await dp.close();
  const after = await dp.buffers();
  const leaked = after.count - after.free;
  log(
    leaked === 0 ? 'info' : 'warn',
    `stopped (${qps} QP${qps === 1 ? '' : 's'} closed with FIN); ${leaked === 0 ? 'every buffer back in the pool' : `${leaked} buffers still allocated`}`,
  );
  process.exit(leaked === 0 ? 0 : 1);
}

/**
 * Validate `file` and say what `start` would: the drivers it cannot open here and what another
 * process holds (the API's address, a memif server socket, the verbs socket: dataplane/
 * preflight.ts, found without taking them) are errors (exit 2, with start's own words), a data
 * plane without interfaces or an af_packet interface whose kernel interface is not there (now)
 * are warnings.
 */
async function check(file: string, isDefault: boolean): Promise<void> {
  const c = load(file);
  const errors: string[] = [],
    warnings: string[] = [];
  for (const i of c.interfaces) {
    const why = driverUnavailable(i.driver);
    if (why !== null) errors.push(`${file}:${i.line}: interface ${i.name}: ${why}`);
    const host = i.afPacket?.hostInterface;
    if (host !== undefined && !existsSync(`/sys/class/net/${host}`))
      warnings.push(`${file}:${i.line}: interface ${i.name}: kernel interface "${host}" does not exist (now)`);
  }
  if (c.interfaces.length === 0)
    warnings.push(`${file}: no interfaces: the data plane would have nothing to receive from or send to`);
  errors.push(...(await preflight(c, file)));
  for (const w of warnings) console.error(`rdma-graph: warning: ${w}`);
  for (const e of errors) console.error(`rdma-graph: ${e}`);
  const ifs = c.interfaces.map((i) => `${i.name} (${i.driver})`).join(', ') || 'none';
  if (errors.length > 0) {
    console.error(
      `rdma-graph: ${named(file, isDefault)}: valid YAML, but start would refuse it (${errors.length} error${errors.length === 1 ? '' : 's'})`,
    );
    process.exit(2);
  }
  console.log(
    `rdma-graph: ${named(file, isDefault)}: valid; interfaces: ${ifs}; api ${c.api.host}:${c.api.port}${warnings.length ? ` (${warnings.length} warning${warnings.length === 1 ? '' : 's'})` : ''}`,
  );
}

async function main(argv: string[]): Promise<void> {
  // exec takes its own options and passes everything after "--" to the command.
  if (argv[0] === 'exec') return (await import('./exec.ts')).exec(argv.slice(1));
  const { cmd, config, isDefault } = parseArgs(argv);
  if (cmd === '--version' || cmd === 'version') console.log(VERSION);
  else if (cmd === 'start') {
    await start(config, isDefault).catch((e) => {
      console.error(`rdma-graph: error: ${e instanceof DataplaneError ? e.message : (e as Error).stack}`);
      process.exit(1);
    });
  } else if (cmd === 'check') await check(config, isDefault);
  else if (cmd === '' || cmd === 'help' || cmd === '--help' || cmd === '-h') console.log(USAGE);
  else usage(`unknown command "${cmd}"`);
}

await main(process.argv.slice(2));
