/**
 * rdmactl as a process (bin/rdmactl.mjs) against the wrong servers and the wrong command lines
 * (issue 13, items 8 and 11): one line on stderr naming the URL and what was wrong, exit 3 when
 * no rdma-graph API answered, 2 for a bad command line, never a stack trace or a dumped page.
 */
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { execFile, execFileSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFresh } from '../bin/fresh.mjs';

const BIN = fileURLToPath(new URL('../bin/rdmactl.mjs', import.meta.url));
const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;

function ctl(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { env: { ...process.env, RDMACTL_API: '', RDMACTL_TOKEN: '', RDMACTL_TIMEOUT: '', ...env }, timeout: 20000 },
      (e, out, err) => {
        resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, out, err });
      },
    );
  });
}

async function listen<T extends Server | TcpServer>(s: T): Promise<{ s: T; url: string }> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const a = s.address() as { port: number };
  return { s, url: `http://127.0.0.1:${a.port}` };
}

const close = (s: Server | TcpServer) => new Promise<void>((r) => s.close(() => r()));

/** One line, naming `url`, no stack frames. */
function oneLine(err: string, url: string): void {
  const lines = err.trimEnd().split('\n');
  assert.is(lines.length, 1, err);
  assert.ok(lines[0].startsWith('rdmactl: '), err);
  assert.ok(lines[0].includes(url), `names ${url}: ${err}`);
  assert.not.match(err, /\n\s+at /);
}

test('a server answering {} to everything: show runtime is one line, exit 3', async () => {
  const { s, url } = await listen(
    createServer((_q, r) => {
      r.setHeader('content-type', 'application/json');
      r.end('{}');
    }),
  );
  try {
    const r = await ctl(['--api', url, 'show', 'runtime']);
    assert.is(r.code, 3, r.err);
    oneLine(r.err, url);
    assert.match(r.err, /GET \/v1\/runtime/);
    assert.match(r.err, /not what rdma-graph sends/);
  } finally {
    await close(s);
  }
});

test('a server that never answers: --timeout ends it, one line, exit 3', async () => {
  const held: import('node:http').ServerResponse[] = [];
  const { s, url } = await listen(
    createServer((_q, r) => {
      held.push(r);
    }),
  );
  try {
    const t0 = Date.now();
    const r = await ctl(['--api', url, '--timeout', '300', 'show', 'health']);
    assert.is(r.code, 3, r.err);
    oneLine(r.err, url);
    assert.match(r.err, /no answer from .* within 300 ms/);
    console.log(`  gave up after ${Date.now() - t0} ms (process start included)`);
  } finally {
    for (const r of held) r.destroy();
    s.closeAllConnections();
    await close(s);
  }
});

test('an HTML page (200 and 404): one line with a short snippet, never the page, exit 3', async () => {
  const page = `<!doctype html><html><head><title>Welcome</title></head><body>${'x'.repeat(5000)}</body></html>`;
  const { s, url } = await listen(
    createServer((q, r) => {
      r.statusCode = q.url === '/v1/health' ? 200 : 404;
      r.setHeader('content-type', 'text/html');
      r.end(page);
    }),
  );
  try {
    const ok = await ctl(['--api', url, 'show', 'health']);
    assert.is(ok.code, 3, ok.err);
    oneLine(ok.err, url);
    assert.match(ok.err, /not JSON/);
    const nf = await ctl(['--api', url, 'show', 'qps']);
    assert.is(nf.code, 3, nf.err);
    oneLine(nf.err, url);
    assert.match(nf.err, /HTTP 404 Not Found \(text\/html: <!doctype html>/);
    assert.ok(nf.err.length < 400, `short: ${nf.err.length} characters`);
  } finally {
    await close(s);
  }
});

test('a port that does not speak HTTP: one line, exit 3', async () => {
  const socks: Socket[] = [];
  const { s, url } = await listen(
    createTcpServer((c) => {
      socks.push(c);
      c.end('SSH-2.0-OpenSSH_9.2\r\nProtocol mismatch.\r\n');
    }),
  );
  try {
    const r = await ctl(['--api', url, '--timeout', '3000', 'show', 'health']);
    assert.is(r.code, 3, r.err);
    oneLine(r.err, url);
  } finally {
    for (const c of socks) c.destroy();
    await close(s);
  }
});

test('-h, --help, -V, --version; no arguments: usage on stderr, exit 2; a usage error: one line with one hint', async () => {
  for (const a of ['-h', '--help']) {
    const r = await ctl([a]);
    assert.is(r.code, 0);
    assert.match(r.out, /^usage: rdmactl /);
  }
  for (const a of ['-V', '--version']) {
    const r = await ctl([a]);
    assert.is(r.code, 0);
    assert.is(r.out, `rdmactl ${VERSION}\n`);
  }
  const none = await ctl([]);
  assert.is(none.code, 2);
  assert.is(none.out, '');
  assert.match(none.err, /^usage: rdmactl /);
  const bad = await ctl(['frobnicate']);
  assert.is(bad.code, 2);
  assert.is(
    bad.err,
    'rdmactl: unknown command "frobnicate" (expected show, clear, trace, capture, fault, create, connect, listen, unlisten, modify, post, poll, mr, destroy, ping, monitor, help) (rdmactl help lists the commands)\n',
  );
  assert.is((bad.err.match(/help/g) ?? []).length, 2, 'one hint (and the word help in the list)');
  const t = await ctl(['--timeout', 'soon', 'show', 'health']);
  assert.is(t.code, 2);
  assert.match(t.err, /--timeout \(or RDMACTL_TIMEOUT\) must be milliseconds/);
});

test('the compiled rdmactl: bin/build-cli.mjs bundles it; it runs without tsx; used only while newer than its sources', () => {
  const root = fileURLToPath(new URL('..', import.meta.url));
  // Two levels below the package root, as bin/dist is (the bundle finds package.json from there).
  const out = join(root, 'bin', `.dist-test-${process.pid}`);
  try {
    execFileSync(process.execPath, [join(root, 'bin/build-cli.mjs'), '--out', out], { stdio: 'pipe' });
    const inputs = JSON.parse(readFileSync(join(out, 'rdmactl.inputs.json'), 'utf8')) as string[];
    assert.ok(inputs.includes('api/rdmactl-cli.ts') && inputs.includes('api/client.ts'), inputs.join(' '));
    assert.not.ok(
      inputs.some((f) => f.startsWith('nodes/') || f.startsWith('dataplane/')),
      'no data plane in the CLI',
    );
    const bundle = readFileSync(join(out, 'rdmactl.mjs'), 'utf8');
    assert.not.ok(/from ["']tsx/.test(bundle), 'no TypeScript loader');
    const run = (args: string[]) => {
      const code = `const { main } = await import(${JSON.stringify(pathToFileURL(join(out, 'rdmactl.mjs')).href)}); process.exitCode = await main(${JSON.stringify(args)});`;
      try {
        return {
          code: 0,
          out: execFileSync(process.execPath, ['--input-type=module', '-e', code], {
            encoding: 'utf8',
            stdio: 'pipe',
            env: { ...process.env, RDMACTL_API: '' },
          }),
          err: '',
        };
      } catch (e) {
        const x = e as { status: number; stdout: string; stderr: string };
        return { code: x.status, out: x.stdout, err: x.stderr };
      }
    };
    assert.equal(run(['--version']), { code: 0, out: `rdmactl ${VERSION}\n`, err: '' });
    const refused = run(['--api', 'http://127.0.0.1:1', 'show', 'version']);
    assert.is(refused.code, 3);
    oneLine(refused.err, 'http://127.0.0.1:1');
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test('isFresh: the bundle counts only while no source listed beside it is newer', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fresh-'));
  try {
    const root = pathToFileURL(`${dir}/`);
    mkdirSync(join(dir, 'src'));
    writeFileSync(join(dir, 'src/a.ts'), '');
    writeFileSync(join(dir, 'src/b.ts'), '');
    writeFileSync(join(dir, 'out.mjs'), '');
    writeFileSync(join(dir, 'inputs.json'), JSON.stringify(['src/a.ts', 'src/b.ts']));
    const at = (f: string, s: number) => utimesSync(join(dir, f), s, s);
    at('src/a.ts', 1000);
    at('src/b.ts', 1000);
    at('out.mjs', 2000);
    assert.ok(isFresh(root, 'out.mjs', 'inputs.json'));
    at('src/b.ts', 3000);
    assert.not.ok(isFresh(root, 'out.mjs', 'inputs.json'), 'a source edited after the build');
    at('src/b.ts', 1000);
    rmSync(join(dir, 'src/a.ts'));
    assert.not.ok(isFresh(root, 'out.mjs', 'inputs.json'), 'a source gone');
    writeFileSync(join(dir, 'inputs.json'), '[]');
    assert.not.ok(isFresh(root, 'out.mjs', 'inputs.json'), 'an empty list');
    assert.not.ok(isFresh(root, 'missing.mjs', 'inputs.json'), 'no bundle');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
