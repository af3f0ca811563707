/**
 * libfabric over rdma-graph (issue 30.3): Debian's unmodified fi_pingpong (libfabric-bin) between
 * two data planes, its verbs provider on librdmagraph-verbs.so, in the endpoint types it offers:
 * FI_EP_MSG (RC QPs through librdmacm) and FI_EP_DGRAM (UD QPs), and FI_EP_RDM through the
 * ofi_rxd utility provider over verbs' datagrams (`-p "verbs;ofi_rxd"`: 1 MiB messages, which
 * rxd cuts into datagrams and acknowledges itself) and through ofi_rxm over its RC connections
 * (`-p "verbs;ofi_rxm"`: every size to 6 MiB, eager and rendezvous), each with fi_pingpong's own
 * data check (-c).
 * rxd's client used to poll for ever in its finalize: the server acknowledged the client's last
 * message and destroyed its QP at once, and that acknowledgement, still in the send ring, was
 * dropped (a UD QP's posted datagrams now go out before its destroy; test/verbs-ud checks it).
 *
 * fi_pingpong exchanges its addresses over TCP first (to the address it then reaches over
 * RDMA), and libfabric's verbs provider offers FI_EP_MSG only on a kernel interface that is up,
 * not loopback, and carries an address rdma_cm binds to a device: the test gives the daemons'
 * addresses to a veth of a network namespace of its own and runs both programs there (the
 * README says how a user does the same).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { netnsUnavailable } from './helpers-netns.ts';
import { type Run, withTwoDaemons } from './verbs-helpers.ts';

const RG = join(import.meta.dirname, '..', 'bin', 'rdma-graph.mjs');

/** `cmd` under rdma-graph exec against verbs socket `socket`, inside network namespace `ns`. */
function inNs(ns: string, socket: string, cmd: string[], timeoutMs = 60_000) {
  const p = spawn('ip', ['netns', 'exec', ns, process.execPath, RG, 'exec', '--socket', socket, '--', ...cmd]);
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
  const done = new Promise<Run>((res) =>
    p.on('close', (code, signal) => {
      clearTimeout(timer);
      res({ code, signal, out });
    }),
  );
  return { done, kill: () => p.kill('SIGKILL') };
}

/** fi_pingpong's result rows: size -> [#sent, #ack] (the ack column is "=N"). */
function rows(out: string): Map<string, [number, number]> {
  const m = new Map<string, [number, number]>();
  for (const l of out.split('\n')) {
    const r = /^(\d+[km]?)\s+(\d+)\s+=(\d+)\s+\S+\s+[\d.]+s\s/.exec(l);
    if (r) m.set(r[1], [Number(r[2]), Number(r[3])]);
  }
  return m;
}

test('fi_pingpong -p verbs: msg and dgram endpoints, and rdm through ofi_rxd and ofi_rxm, between two data planes, data checked (-c)', async () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (libibverbs-dev)');
  if (spawnSync('fi_pingpong', ['-h']).error) skip('fi_pingpong is not installed (Debian package libfabric-bin)');
  const why = netnsUnavailable();
  if (why !== null) skip(why);
  const ns = `rgfi-${process.pid}`;
  const ip = (...args: string[]) => spawnSync('ip', ['netns', 'exec', ns, 'ip', ...args], { encoding: 'utf8' });
  assert.is(spawnSync('ip', ['netns', 'add', ns]).status, 0, 'netns add');
  try {
    assert.is(ip('link', 'set', 'lo', 'up').status, 0);
    assert.is(ip('link', 'add', 'rgfi0', 'type', 'veth', 'peer', 'name', 'rgfi1').status, 0, 'veth');
    for (const l of ['rgfi0', 'rgfi1']) assert.is(ip('link', 'set', l, 'up').status, 0);
    for (const a of [IP_A, IP_B]) assert.is(ip('addr', 'add', `${a}/32`, 'dev', 'rgfi0').status, 0);
    await withTwoDaemons(async ({ a, b }) => {
      let port = 47600 + (process.pid % 200);
      for (const [prov, ep, sizes] of [
        ['verbs', 'msg', 'all'],
        ['verbs', 'dgram', 'all'],
        ['verbs;ofi_rxd', 'rdm', '1048576'],
        // RDM over verbs' MSG endpoints (RC QPs): what MPI libraries on libfabric use most.
        ['verbs;ofi_rxm', 'rdm', 'all'],
      ]) {
        const ctl = String(port++);
        const common = ['fi_pingpong', '-p', prov, '-e', ep, '-I', '10', '-S', sizes, '-c'];
        const server = inNs(ns, b, [...common, '-B', ctl]);
        let cli: Run | null = null;
        // The server opens its TCP control port within a moment: the client tries again until then.
        for (let k = 0; k < 50; k++) {
          cli = await inNs(ns, a, [...common, '-P', ctl, IP_B]).done;
          if (!/failed to connect: Connection refused/.test(cli.out)) break;
          await new Promise((r) => setTimeout(r, 100));
        }
        const srv = await server.done;
        const what = `-p "${prov}" -e ${ep}`;
        assert.is(cli?.code, 0, `${what} client:\n${cli?.out}\nserver:\n${srv.out}`);
        assert.is(srv.code, 0, `${what} server:\n${srv.out}`);
        const r = rows(cli?.out ?? '');
        // Every size fi_pingpong tried went 10 times each way, checked by it (-c): from 0 B to
        // the endpoint's largest (a datagram's is the path MTU's: 1k here).
        if (sizes === 'all') assert.ok(r.has('0') && r.has('64') && r.has('1k'), `${what}: its sizes:\n${cli?.out}`);
        if (ep !== 'dgram') assert.ok(r.has('1m'), `${what}: 1 MiB:\n${cli?.out}`);
        for (const [size, [sent, ack]] of r) assert.ok(sent === 10 && ack === 10, `${what} ${size}: ${sent}/${ack}`);
        assert.not.match(cli?.out ?? '', /error|corrupt/i, `${what}:\n${cli?.out}`);
      }
    });
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
  }
});

test.run();
