/**
 * The live view in a real browser (issue 34): Debian's chromium driven by playwright-core,
 * against two daemons joined by memif with RDMA WRITE traffic between them made through the API.
 * The page loads without console errors, draws the configured interfaces' input nodes, shows a
 * node's packets/s rise under traffic and fall after, lists a QP made through the API within
 * 2 s, pauses and resumes; a screenshot under traffic goes to test/artifacts/live-view.png.
 * Skips without chromium (.ci/run installs it).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as assert from 'uvu/assert';
import { ApiClient } from '../api/client.ts';
import { skip, test } from './harness.ts';
import { sleep, watchDaemon, withTeardown, type RunningDaemon } from './helpers.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const ARTIFACTS = join(ROOT, 'test/artifacts');

/** A start-up file for one end of the memif link, everything in `dir`. */
function config(dir: string, role: 'server' | 'client'): string {
  const [me, peer] = role === 'server' ? [1, 2] : [2, 1];
  const file = join(dir, `${role}.yaml`);
  writeFileSync(
    file,
    `api: { listen: "127.0.0.1:0" }\nverbs: { socket: ${join(dir, `verbs-${role}.sock`)} }\n` +
      `interfaces:\n  - { name: memif0, driver: memif, memif: { socket: ${join(dir, 'memif.sock')}, role: ${role} }, ` +
      `mac: "02:fe:00:00:00:0${me}", address: 10.10.0.${me}/24 }\n` +
      `neighbors:\n  - { interface: memif0, address: 10.10.0.${peer}, mac: "02:fe:00:00:00:0${peer}" }\n`,
  );
  return file;
}

function start(file: string): RunningDaemon {
  return watchDaemon(
    spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bin/main.ts'), 'start', '--config', file], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | null | undefined | false>): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error(`not within ${ms} ms: ${what}`);
    await sleep(100);
  }
}

/** A connected RC pair A -> B and a loop of 64 KiB RDMA WRITEs from A while `running()`. */
async function writePair(a: ApiClient, b: ApiClient) {
  const pa = await a.createPd();
  const cqa = await a.createCq({ depth: 256 });
  const mra = await a.createMr({ pd: pa.pd, length: 65536, access: ['local-write'] });
  const pb = await b.createPd();
  const cqb = await b.createCq({ depth: 256 });
  const mrb = await b.createMr({ pd: pb.pd, length: 65536, access: ['local-write', 'remote-write'] });
  const qa = await a.createQp({ pd: pa.pd, sendCq: cqa.cq, recvCq: cqa.cq, maxSendWr: 64, maxRecvWr: 64 });
  const created = performance.now();
  const qb = await b.createQp({ pd: pb.pd, sendCq: cqb.cq, recvCq: cqb.cq, maxSendWr: 64, maxRecvWr: 64 });
  await a.connect(qa.qpn, { mode: 'manual', remote: { ip: '10.10.0.2', port: qb.qpn }, remotePsn: qb.psn });
  await b.connect(qb.qpn, { mode: 'manual', remote: { ip: '10.10.0.1', port: qa.qpn }, remotePsn: qa.psn });
  let stop = false;
  let writes = 0;
  const loop = (async () => {
    while (!stop) {
      for (let i = 0; i < 8; i++)
        await a.postSend(qa.qpn, {
          wrId: `w${writes + i}`,
          opcode: 'write',
          sge: [{ mr: mra.mr, offset: 0, length: 65536 }],
          remote: { stag: mrb.stag, offset: 0 },
        });
      let done = 0;
      while (done < 8) {
        const r = await a.pollCq(cqa.cq, { max: 8, waitMs: 2000 });
        if (r.completions.length === 0) throw new Error('a WRITE did not complete within 2 s');
        for (const c of r.completions) if (c.status !== 'success') throw new Error(`WRITE ${c.wrId}: ${c.status}`);
        done += r.completions.length;
      }
      writes += 8;
    }
  })();
  return {
    qpn: qa.qpn,
    created,
    async stop() {
      stop = true;
      await loop;
      return writes;
    },
  };
}

test('the live view in chromium: input nodes, rates rising and falling with traffic, a new QP within 2 s, no console errors', async () => {
  if (!existsSync(CHROMIUM)) skip(`no chromium at ${CHROMIUM} (apt-get install chromium; or set CHROMIUM)`);
  const { chromium } = await import('playwright-core');
  // The browser first: if it cannot start, nothing else was.
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const dir = mkdtempSync(join(tmpdir(), 'rg-live-'));
  const server = start(config(dir, 'server'));
  const client = start(config(dir, 'client'));
  await withTeardown(
    async () => {
      const a = new ApiClient(await server.url);
      const b = new ApiClient(await client.url);
      await until('the memif link up on both ends', 10_000, async () => {
        const [x, y] = await Promise.all([a.interface('memif0'), b.interface('memif0')]);
        return x.state === 'up' && y.state === 'up';
      });
      const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
      const problems: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
      });
      page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
      page.on('requestfailed', (r) => {
        // The event stream is cut when the page closes at the end; any other failure counts.
        if (!r.url().endsWith('/live/events')) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
      });
      await page.goto(`${await server.url}/`);
      const frames = async () => Number((await page.locator('body').getAttribute('data-frames')) ?? 0);
      await until('a first frame drawn', 5000, async () => (await frames()) >= 1);

      // The input node of every configured interface, as the data plane places them.
      const placement = (await (await fetch(`${await server.url}/v1/rx-placement`)).json()) as {
        nodes: { node: string }[];
      }[];
      const inputs = placement.flatMap((t) => t.nodes.map((n) => n.node));
      assert.ok(inputs.includes('memif-input'), inputs.join(' '));
      for (const node of inputs)
        assert.ok(await page.locator(`#graph g.node[data-node="${node}"]`).count(), `the graph shows ${node}`);
      const arcs = await page.locator('#graph path.arc').count();
      assert.ok(arcs >= 10, `${arcs} arcs drawn`);

      const pps = async (node: string) =>
        Number(await page.locator(`#graph g.node[data-node="${node}"]`).getAttribute('data-pps'));
      assert.is(await pps('memif-input'), 0, 'no traffic yet');

      // Traffic: the QP made through the API is in the table within 2 s.
      const w = await writePair(a, b);
      await until(
        `QP ${w.qpn} in the table`,
        2000,
        async () => (await page.locator(`#qps tr[data-qpn="${w.qpn}"]`).count()) > 0,
      );
      const shown = performance.now() - w.created;
      assert.ok(shown < 2000, `QP shown ${shown.toFixed(0)} ms after it was made`);
      const rising = await until('memif-input packets/s rises under traffic', 5000, async () => {
        const v = await pps('memif-input');
        return v > 0 ? v : null;
      });
      await until(
        'an arc drawn as carrying traffic',
        3000,
        async () => (await page.locator('#graph path.arc.hot').count()) > 0,
      );
      await until('bytes/s of the QP in its row', 3000, async () =>
        /[1-9]/.test(await page.locator(`#qps tr[data-qpn="${w.qpn}"] td:nth-child(7)`).innerText()),
      );
      await sleep(600);
      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: join(ARTIFACTS, 'live-view.png'), fullPage: true });
      const writes = await w.stop();
      assert.ok(writes >= 8, `${writes} WRITEs of 64 KiB`);
      await until('memif-input packets/s falls to 0 after traffic', 3000, async () => (await pps('memif-input')) === 0);

      // Pause: no frame drawn while paused; resume: frames again.
      await page.click('#pause');
      assert.is(await page.locator('#status').innerText(), 'paused');
      const paused = await frames();
      await sleep(1200);
      assert.is(await frames(), paused, 'no frame drawn while paused');
      await page.click('#pause');
      await until('frames again after resume', 3000, async () => (await frames()) > paused);

      assert.equal(problems, [], 'no console errors, page errors or failed requests');
      console.log(`    memif-input peaked at ${rising.toFixed(0)} packets/s; QP shown after ${shown.toFixed(0)} ms`);
      await page.close();
    },
    async () => {
      await browser.close();
      for (const d of [client, server]) {
        d.proc.kill('SIGTERM');
        assert.is(await d.exit, 0, d.lines.join('\n'));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  );
});

test.run();
