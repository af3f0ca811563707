/**
 * `npm run demo`: the main job end to end. Starts two rdma-graph daemons joined by the embedded
 * default link (config/startup.yaml and config/examples/peer.yaml, with the API on an ephemeral
 * port, and so the verbs socket named after it, and the memif socket in a temporary directory so
 * a running `npm start` is not disturbed), then drives both only through rdmactl commands over the REST API: PDs, MRs, CQs,
 * QPs; a manual connect and a connection-manager connect; SEND/RECV, WRITE, READ and an atomic
 * fetch-add, each checked byte for byte; `show runtime` of both; SIGTERM to both and a check that
 * each stopped cleanly with every buffer back. Exit 0 only when every check passed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDocument } from 'yaml';
import { runCommand } from './rdmactl.ts';
import { httpCall } from './rdmactl-cli.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Daemon {
  name: string;
  proc: ChildProcess;
  url: string;
  log: string[];
  exit: Promise<number | null>;
}

function say(s: string): void {
  process.stdout.write(s);
}

class DemoFailure extends Error {}

function check(ok: boolean, what: string): void {
  if (!ok) throw new DemoFailure(what);
  say(`  ok: ${what}\n`);
}

/** A copy of `file` with the API on an ephemeral port and the memif socket in `dir`. */
function variant(file: string, dir: string, out: string): string {
  const doc = parseDocument(readFileSync(join(ROOT, file), 'utf8'));
  doc.setIn(['api', 'listen'], '127.0.0.1:0');
  const ifs = doc.get('interfaces') as { items: unknown[] };
  for (let i = 0; i < ifs.items.length; i++) {
    if (doc.getIn(['interfaces', i, 'driver']) === 'memif')
      doc.setIn(['interfaces', i, 'memif', 'socket'], join(dir, 'memif.sock'));
  }
  const path = join(dir, out);
  writeFileSync(path, doc.toString());
  return path;
}

function startDaemon(name: string, config: string): Promise<Daemon> {
  const proc = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bin/main.ts'), 'start', '--config', config], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log: string[] = [];
  const exit = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString();
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        log.push(line);
        say(`  [${name}] ${line}\n`);
        const m = /API on (http:\/\/[^ ]+)\/v1/.exec(line);
        if (m) resolve({ name, proc, url: m[1], log, exit });
      }
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', onData);
    void exit.then((code) => reject(new DemoFailure(`${name} exited with ${code} before its API came up`)));
  });
}

/** Run one rdmactl command against a daemon, echoing it like a shell session; returns its output. */
async function ctl(d: Daemon, line: string): Promise<string> {
  say(`$ rdmactl --api ${d.url} ${line}\n`);
  let text = '';
  await runCommand(
    line.split(' '),
    httpCall(d.url, null),
    { out: (s) => (text += s), bytes: (b) => (text += Buffer.from(b).toString('hex') + '\n') },
    { json: false },
  );
  say(text.replace(/^/gm, '  ').replace(/ +$/, ''));
  return text.trim();
}

async function waitLinkUp(d: Daemon): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const r = await fetch(`${d.url}/v1/interfaces`);
    const ifs = (await r.json()) as { name: string; state: string }[];
    if (ifs.length > 0 && ifs.every((i) => i.state === 'up')) return;
    if (Date.now() > deadline) throw new DemoFailure(`${d.name}: interfaces not up after 10 s: ${JSON.stringify(ifs)}`);
    await new Promise((r2) => setTimeout(r2, 50));
  }
}

function u64le(n: bigint): string {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(n);
  return b.toString('hex');
}

async function demo(a: Daemon, b: Daemon): Promise<void> {
  say('\n# both data planes up, memif link connected\n');
  await waitLinkUp(a);
  await waitLinkUp(b);
  await ctl(a, 'show interfaces addr');
  await ctl(b, 'show interfaces addr');

  say('\n# verbs objects on A and B\n');
  const ACCESS = 'access local-write,remote-write,remote-read,remote-atomic';
  const pdA = await ctl(a, 'create pd');
  const cqA = await ctl(a, 'create cq depth 64');
  const [mrA] = (await ctl(a, `create mr pd ${pdA} length 65536 ${ACCESS}`)).split(' ');
  const [qpA, psnA] = (
    await ctl(a, `create qp pd ${pdA} send-cq ${cqA} recv-cq ${cqA} max-send-wr 64 max-recv-wr 64`)
  ).split(' ');
  const pdB = await ctl(b, 'create pd');
  const cqB = await ctl(b, 'create cq depth 64');
  const [mrB, stagB] = (await ctl(b, `create mr pd ${pdB} length 65536 ${ACCESS}`)).split(' ');
  const [qpB, psnB] = (
    await ctl(b, `create qp pd ${pdB} send-cq ${cqB} recv-cq ${cqB} max-send-wr 64 max-recv-wr 64`)
  ).split(' ');

  say("\n# manual connect: each side RTR/RTS with the other's address, QPN and initial PSN\n");
  await ctl(a, `connect ${qpA} 10.10.0.2:${qpB} psn ${psnB}`);
  await ctl(b, `connect ${qpB} 10.10.0.1:${qpA} psn ${psnA}`);

  say('\n# SEND/RECV\n');
  const hello = 'hello_from_A_over_rdma-graph';
  await ctl(b, `post recv ${qpB} wr-id recv-1 sge ${mrB}:0:4096`);
  await ctl(a, `mr write ${mrA} 0 text ${hello}`);
  await ctl(a, `post send ${qpA} send wr-id send-1 sge ${mrA}:0:${hello.length}`);
  check((await ctl(a, `poll ${cqA} wait 2000`)).includes('"send-1"'), 'A: send-1 completed');
  check(
    (await ctl(b, `poll ${cqB} wait 2000`)).includes(`"recv-1" qpn ${qpB} recv success byte-len ${hello.length}`),
    'B: recv-1 completed with the length sent',
  );
  check((await ctl(b, `mr read ${mrB} 0 ${hello.length} text`)) === hello, 'B received the bytes A sent');

  say("\n# RDMA WRITE into B's MR at offset 1000\n");
  const written = 'written_by_A_with_RDMA_WRITE';
  await ctl(a, `mr write ${mrA} 100 text ${written}`);
  await ctl(a, `post send ${qpA} write wr-id write-1 sge ${mrA}:100:${written.length} remote ${stagB}:1000`);
  check((await ctl(a, `poll ${cqA} wait 2000`)).includes('"write-1" qpn'), 'A: write-1 completed');
  check((await ctl(b, `mr read ${mrB} 1000 ${written.length} text`)) === written, "B's memory holds what A wrote");

  say("\n# RDMA READ from B's MR at offset 2000\n");
  const secret = 'B_data_that_A_reads';
  await ctl(b, `mr write ${mrB} 2000 text ${secret}`);
  await ctl(a, `post send ${qpA} read wr-id read-1 sge ${mrA}:2000:${secret.length} remote ${stagB}:2000`);
  check((await ctl(a, `poll ${cqA} wait 2000`)).includes('"read-1" qpn'), 'A: read-1 completed');
  check((await ctl(a, `mr read ${mrA} 2000 ${secret.length} text`)) === secret, "A's memory holds what it read from B");

  say('\n# atomic fetch-add on an 8-byte counter in B (host byte order)\n');
  await ctl(b, `mr write ${mrB} 4096 hex ${u64le(41n)}`);
  await ctl(a, `post send ${qpA} fetch-add wr-id fa-1 sge ${mrA}:4096:8 remote ${stagB}:4096 add 1`);
  check((await ctl(a, `poll ${cqA} wait 2000`)).includes('"fa-1" qpn'), 'A: fa-1 completed');
  check((await ctl(a, `mr read ${mrA} 4096 8 raw`)) === u64le(41n), 'A got the original value 41');
  check((await ctl(b, `mr read ${mrB} 4096 8 raw`)) === u64le(42n), "B's counter is now 42");

  say('\n# connection manager: B listens, A connects with private data\n');
  await ctl(b, `listen 18515 pd ${pdB} send-cq ${cqB} recv-cq ${cqB} max-send-wr 64 max-recv-wr 64 private-data 6f6b`);
  const [qpA2] = (
    await ctl(a, `create qp pd ${pdA} send-cq ${cqA} recv-cq ${cqA} max-send-wr 64 max-recv-wr 64`)
  ).split(' ');
  const conn = await ctl(a, `connect ${qpA2} 10.10.0.2:18515 cm private-data 6869`);
  check(conn.includes(' rts ') && conn.endsWith('private-data 6f6b'), "A's QP is in RTS and got B's private data");
  const listeners = await ctl(b, 'show listeners');
  const acceptedB = listeners.split('\n')[1]?.trim().split(/ +/).pop() ?? '';
  check(/^\d+$/.test(acceptedB), `B accepted the request as qp ${acceptedB}`);
  await ctl(b, 'show qps');
  await ctl(b, `post recv ${acceptedB} wr-id cm-recv sge ${mrB}:8192:64`);
  await ctl(a, `post send ${qpA2} send wr-id cm-send sge ${mrA}:0:8`);
  check(
    (await ctl(b, `poll ${cqB} wait 2000`)).includes(`"cm-recv" qpn ${acceptedB} recv success byte-len 8`),
    'a SEND over the CM-connected pair arrived',
  );
  await ctl(a, `poll ${cqA} wait 2000`);

  say('\n# show runtime on both\n');
  await ctl(a, 'show runtime');
  await ctl(b, 'show runtime');
  await ctl(a, 'show errors');
}

async function main(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'rdma-graph-demo-'));
  const daemons: Daemon[] = [];
  let failed = false;
  try {
    say(
      '# starting two data planes: config/startup.yaml (memif server) and config/examples/peer.yaml (memif client)\n',
    );
    daemons.push(await startDaemon('A', variant('config/startup.yaml', dir, 'a.yaml')));
    daemons.push(await startDaemon('B', variant('config/examples/peer.yaml', dir, 'b.yaml')));
    await demo(daemons[0], daemons[1]);
  } catch (e) {
    failed = true;
    say(`\ndemo: FAILED: ${e instanceof DemoFailure ? e.message : (e as Error).stack}\n`);
  } finally {
    say('\n# SIGTERM to both\n');
    for (const d of daemons) d.proc.kill('SIGTERM');
    for (const d of daemons) {
      const code = await Promise.race([d.exit, new Promise<string>((r) => setTimeout(() => r('timeout'), 10_000))]);
      const clean = code === 0 && d.log.some((l) => l.includes('every buffer back in the pool'));
      if (!clean) {
        failed = true;
        d.proc.kill('SIGKILL');
      }
      say(`  ${clean ? 'ok' : 'FAILED'}: ${d.name} stopped (exit ${code})\n`);
    }
    rmSync(dir, { recursive: true, force: true });
  }
  say(failed ? '\ndemo: FAILED\n' : '\ndemo: all checks passed\n');
  return failed ? 1 : 0;
}

process.exit(await main());
