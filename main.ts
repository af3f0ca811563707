/**
 * rdma-graph command line.
 *
 *   rdma-graph start [--config FILE]   build the data plane from FILE, open its interfaces, serve the API
 *   rdma-graph check [--config FILE]   validate FILE and exit (0 valid, 2 not)
 *   rdma-graph --version
 *
 * FILE defaults to config/startup.yaml (the embedded default). SIGINT/SIGTERM shut down
 * cleanly: QPs send FIN, the API closes, interfaces close (memif sockets are removed).
 */
import { loadConfig, ConfigError } from './config/load.ts';
import type { Config } from './config/types.ts';
import { Dataplane, DataplaneError, VERSION, type Logger } from './dataplane.ts';
import { startApi } from './api/server.ts';

const DEFAULT_CONFIG = 'config/startup.yaml';
const USAGE = `usage: rdma-graph start [--config FILE]     run the data plane and its REST API
       rdma-graph check [--config FILE]     validate a start-up file
       rdma-graph --version
FILE defaults to ${DEFAULT_CONFIG}.`;

function usage(msg: string): never {
  console.error(`rdma-graph: ${msg}\n${USAGE}`);
  process.exit(2);
}

function parseArgs(argv: string[]): { cmd: string; config: string } {
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
  return { cmd, config };
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

async function start(file: string): Promise<void> {
  const config = load(file);
  const log = makeLogger(config.log.level);
  log('info', `rdma-graph ${VERSION}, config ${file}`);
  let dp: Dataplane;
  try {
    dp = await Dataplane.create(config, { log });
  } catch (e) {
    log('error', (e as Error).message);
    process.exit(1);
  }
  const st = dp.pool.stats();
  log('info', `buffers: ${st.count} x ${st.dataSize} B (${st.hugepages ? '2 MiB hugepages' : 'normal pages'}), graph on the main thread`);
  for (const itf of await dp.interfaces()) {
    log('info', `interface ${itf.name} (${itf.driver}) mac ${itf.mac} ${itf.addresses.join(' ') || 'no address'} mtu ${itf.mtu} ${itf.state}`);
  }
  let api: { url: string; close(): Promise<void> };
  try {
    api = await startApi(dp, { host: config.api.host, port: config.api.port, token: config.api.token });
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const why = err.code === 'EADDRINUSE' ? `${config.api.host}:${config.api.port} is in use (another rdma-graph? set api.listen)` : err.message;
    log('error', `cannot start the API: ${why}`);
    await dp.close();
    process.exit(1);
  }
  log('info', `API on ${api.url}/v1 (${config.api.token ? 'token required' : 'no token'}); rdmactl --api ${api.url} show runtime`);
  const signal = await new Promise<string>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
  log('info', `${signal}: shutting down`);
  const qps = (await dp.qps()).length;
  await api.close();
  await dp.close();
  const leaked = dp.pool.count - dp.pool.available();
  log(leaked === 0 ? 'info' : 'warn', `stopped (${qps} QP${qps === 1 ? '' : 's'} closed with FIN); ${leaked === 0 ? 'every buffer back in the pool' : `${leaked} buffers still allocated`}`);
  process.exit(leaked === 0 ? 0 : 1);
}

function check(file: string): void {
  const c = load(file);
  const ifs = c.interfaces.map((i) => `${i.name} (${i.driver})`).join(', ') || 'none';
  console.log(`rdma-graph: ${file}: valid; interfaces: ${ifs}; api ${c.api.host}:${c.api.port}`);
}

const { cmd, config } = parseArgs(process.argv.slice(2));
if (cmd === '--version' || cmd === 'version') console.log(VERSION);
else if (cmd === 'start') {
  await start(config).catch((e) => {
    console.error(`rdma-graph: error: ${e instanceof DataplaneError ? e.message : (e as Error).stack}`);
    process.exit(1);
  });
} else if (cmd === 'check') check(config);
else if (cmd === '' || cmd === 'help' || cmd === '--help' || cmd === '-h') console.log(USAGE);
else usage(`unknown command "${cmd}"`);
