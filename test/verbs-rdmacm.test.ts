/**
 * librdmacm programs, unmodified (issue 29): Debian's librdmacm.so runs on the library's answer
 * to its kernel interface (native/verbs-lib/ucma.c: /dev/infiniband/rdma_cm, the ucma commands,
 * the event fd) and the daemon's connection manager (dataplane/verbs-server/ucma.ts,
 * nodes/rdma/cm.ts). rping (rdmacm-utils) in both roles between two data planes, with its own
 * data check (-v prints each ping, -V verifies it) and on one data plane (loopback); ucmatose
 * with 4 connections; rdma_server/rdma_client (synchronous ids, rdma_getaddrinfo, migrated
 * ids) and rdma_xserver/rdma_xclient (RC: a small inline SEND the QP was not asked room for); rstream and riostream (rsockets) at sizes around the segment size, rcopy (a file, byte
 * for byte); perftest's -R
 * (rdma_cm) variants; cmtime (twenty connections at once); udaddy (the UD port space: datagram service requests, nodes/rdma/sidr.ts); mckey (rdma_join_multicast: UD multicast, nodes/rdma/multicast.ts). The hostile cases: a connect to a port nobody listens on is REJECTED
 * at once, garbage written to rdma_cm fails with EINVAL in that program only, and a peer killed
 * mid-run ends the other side's run.
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import type { DataplaneApi } from '../dataplane/api.ts';
import { Dataplane, VERBS_LIBRARY } from '../dataplane/dataplane.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { netnsUnavailable } from './helpers-netns.ts';
import { errorCount } from './dataplane-ops-helpers.ts';
import { nextPort, type Run, runTool, type Tool, withTwoDaemons } from './verbs-helpers.ts';

/** Datagrams a data plane's UD QPs took (ud-input). */
const delivered = (dp: DataplaneApi) => errorCount(dp, 'ud-input', /datagrams delivered/);

/** What the library refused, as the programs printed it (none expected). */
const refusals = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.includes('rdma-graph verbs:'))
    .join('\n');

const ready = () => {
  if (!existsSync(VERBS_LIBRARY)) skip('librdmagraph-verbs.so was not built (libibverbs-dev)');
  if (spawnSync('rping', ['-h']).error) skip('rping is not installed (Debian package rdmacm-utils)');
};

/** Until data plane `dp` listens for connection requests on `port` (the rping server is ready). */
async function cmListening(dp: DataplaneApi, server: Tool, port: number): Promise<void> {
  const cm = Dataplane.internals(dp).rdma.cm;
  while (!cm.listeners.has(port)) {
    const r = server.exited;
    if (r !== null)
      assert.unreachable(`the server exited before it listened on ${port}: ${r.code} ${r.signal}\n${r.out}`);
    await new Promise((res) => setTimeout(res, 10));
  }
}

/** `server` on one verbs socket, then `client` on another once the server listens on `port`; both results. */
async function cmPair(
  sockets: { server: string; client: string; dp: DataplaneApi },
  port: number,
  server: string[],
  client: string[],
): Promise<[Run, Run]> {
  const s = runTool(sockets.server, server, 60_000, 'exec');
  await cmListening(sockets.dp, s, port);
  const c = await runTool(sockets.client, client, 60_000, 'exec').done;
  return [await s.done, c];
}

/** Both ended with status 0 and printed no refusal. */
function bothOk(what: string, [srv, cli]: [Run, Run]): void {
  assert.is(cli.code, 0, `${what} client:\n${cli.out}\nserver:\n${srv.out}`);
  assert.is(srv.code, 0, `${what} server:\n${srv.out}\nclient:\n${cli.out}`);
  assert.is(refusals(cli.out + srv.out), '', `${what}: nothing refused`);
}

test('rping: server on one data plane, client on the other, 100 pings verified', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpB }) => {
    const port = nextPort();
    const [srv, cli] = await cmPair(
      { server: b, client: a, dp: dpB },
      port,
      ['rping', '-s', '-a', IP_B, '-p', String(port), '-C', '100', '-V'],
      ['rping', '-c', '-a', IP_B, '-p', String(port), '-C', '100', '-v', '-V'],
    );
    bothOk('rping', [srv, cli]);
    const pings = cli.out.split('\n').filter((l) => /^ping data: rdma-ping-\d+: /.test(l));
    assert.is(pings.length, 100, `100 pings printed:\n${cli.out}`);
  });
});

test('rping the other way, server bound to any address (INADDR_ANY), and loopback on one data plane', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpA }) => {
    let port = nextPort();
    bothOk(
      'rping B to A',
      await cmPair(
        { server: a, client: b, dp: dpA },
        port,
        ['rping', '-s', '-a', '0.0.0.0', '-p', String(port), '-C', '5', '-V'],
        ['rping', '-c', '-a', IP_A, '-p', String(port), '-C', '5', '-V'],
      ),
    );
    port = nextPort();
    bothOk(
      'rping loopback',
      await cmPair(
        { server: a, client: a, dp: dpA },
        port,
        ['rping', '-s', '-a', IP_A, '-p', String(port), '-C', '5', '-V'],
        ['rping', '-c', '-a', IP_A, '-p', String(port), '-C', '5', '-V'],
      ),
    );
  });
});

test('ucmatose -c 4, rdma_server/rdma_client, rdma_xserver/rdma_xclient, rstream, riostream and rcopy (rsockets)', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpB }) => {
    const on = { server: b, client: a, dp: dpB };
    let port = nextPort();
    bothOk(
      'ucmatose',
      await cmPair(
        on,
        port,
        ['ucmatose', '-p', String(port), '-c', '4'],
        ['ucmatose', '-s', IP_B, '-p', String(port), '-c', '4'],
      ),
    );
    port = nextPort();
    bothOk(
      'rdma_server/rdma_client',
      await cmPair(on, port, ['rdma_server', '-p', String(port)], ['rdma_client', '-s', IP_B, '-p', String(port)]),
    );
    // rdma_xclient posts a 16-byte inline SEND from a QP made with max_inline_data 0: a QP's
    // inline room is at least its gather list's (16 bytes an entry, as rxe's; mlx5's is larger).
    port = nextPort();
    bothOk(
      'rdma_xserver/rdma_xclient',
      await cmPair(on, port, ['rdma_xserver', '-p', String(port)], ['rdma_xclient', '-s', IP_B, '-p', String(port)]),
    );
    // Around the segment size (1500-byte MTU: a segment holds some 1400 bytes) and well above.
    for (const tool of ['rstream', 'riostream'])
      for (const size of ['1400', '1500', '65536']) {
        port = nextPort();
        const r = await cmPair(
          on,
          port,
          [tool, '-p', String(port), '-S', size, '-C', '200'],
          [tool, '-s', IP_B, '-p', String(port), '-S', size, '-C', '200'],
        );
        bothOk(`${tool} -S ${size}`, r);
        assert.match(r[1].out, /Gb\/sec/, `${tool} -S ${size} printed its result:\n${r[1].out}`);
      }
    // rcopy (rsockets): a file of 3 MB and 17 bytes from a program on one data plane to the
    // other's, which writes it where the client asked; byte for byte. Its server keeps waiting
    // for the next client: stopped once the copy is done.
    const dir = mkdtempSync(join(tmpdir(), 'rg-rcopy-'));
    try {
      const src = join(dir, 'src'),
        dst = join(dir, 'dst');
      writeFileSync(src, randomBytes(3_000_017));
      port = nextPort();
      const s = runTool(b, ['rcopy', '-p', String(port)], 60_000, 'exec');
      await cmListening(dpB, s, port);
      const c = await runTool(a, ['rcopy', src, `${IP_B}:${dst}`, '-p', String(port)], 60_000, 'exec').done;
      s.kill();
      const srv = await s.done;
      assert.is(c.code, 0, `rcopy client:\n${c.out}\nserver:\n${srv.out}`);
      assert.match(c.out, /^3000017 bytes in /m, c.out);
      assert.ok(existsSync(dst) && readFileSync(dst).equals(readFileSync(src)), 'rcopy: the copy is the file');
      assert.is(refusals(c.out + srv.out), '', 'rcopy: nothing refused');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test('cmtime -c 20: twenty connections set up and torn down at once, each step timed', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpB }) => {
    const port = nextPort();
    const requests = () => errorCount(dpB, 'cm-input', /connection and datagram service requests/);
    const before = await requests();
    // The server serves until it is stopped.
    const server = runTool(b, ['cmtime', '-b', IP_B, '-p', String(port), '-c', '20'], 60_000, 'exec');
    await cmListening(dpB, server, port);
    const cli = await runTool(a, ['cmtime', '-s', IP_B, '-p', String(port), '-c', '20'], 60_000, 'exec').done;
    server.kill();
    await server.done;
    assert.is(cli.code, 0, cli.out);
    assert.is(refusals(cli.out), '', 'nothing refused');
    for (const step of ['create id', 'resolve addr', 'resolve route', 'create qp', 'connect', 'disconnect', 'destroy'])
      assert.match(
        cli.out,
        new RegExp(`^${step}\\s*:\\s+[0-9.]+\\s+[0-9.]+\\s+[0-9.]+\\s+[0-9.]+$`, 'm'),
        `${step}:\n${cli.out}`,
      );
    assert.ok((await requests()) - before >= 20, `at least 20 requests reached the server's daemon`);
  });
});

test("perftest's rdma_cm variants: ib_send_bw -R, ib_write_lat -R, ib_read_bw -R -q 4", async () => {
  ready();
  if (spawnSync('ib_send_bw', ['-h']).error) skip('perftest is not installed');
  await withTwoDaemons(async ({ a, b, dpB }) => {
    for (const cmd of [
      ['ib_send_bw', '-R', '-F', '-n', '500'],
      ['ib_write_lat', '-R', '-F', '-n', '500'],
      ['ib_read_bw', '-R', '-F', '-n', '200', '-q', '4'],
    ]) {
      const port = nextPort();
      const r = await cmPair(
        { server: b, client: a, dp: dpB },
        port,
        [...cmd, '-p', String(port)],
        [...cmd, '-p', String(port), IP_B],
      );
      bothOk(cmd.join(' '), r);
      assert.match(r[1].out, /^\s+\d+\s+\d+\s+[\d.]+/m, `${cmd[0]} printed its figures:\n${r[1].out}`);
    }
  });
});

test("fio's rdma engine: send (data verified by fio's receiver), write and read verbs", async () => {
  ready();
  if (spawnSync('fio', ['--version']).error) skip('fio is not installed');
  await withTwoDaemons(async ({ a, b, dpB }) => {
    // fio's rdma server is its reader (rw=read), its client the writer (rw=write) whatever the
    // verb. The receiver checks data only for send (its io_us hold what arrived): there it
    // verifies fio's pattern; write and read move data into buffers fio does not look at, and
    // the check is that every byte crossed the data plane.
    // (No verify state file: fio would leave one in the working directory.)
    const job = (port: number) => [
      '--ioengine=rdma',
      `--port=${port}`,
      '--bs=64k',
      '--size=2m',
      '--verify_state_save=0',
    ];
    const receiver = (port: number) => [
      ...job(port),
      '--rw=read',
      '--iodepth=16',
      '--verify=pattern',
      '--verify_pattern=0x5aa5c33c',
      '--do_verify=1',
    ];
    const sender = (port: number, verb: string, pattern: string) => [
      ...job(port),
      `--hostname=${IP_B}`,
      '--rw=write',
      '--iodepth=1',
      `--verb=${verb}`,
      `--buffer_pattern=${pattern}`,
    ];
    const fio = async (verb: string, pattern: string) => {
      const port = nextPort();
      const before = (await dpB.interfaces())[0].counters.rxBytes;
      const r = await cmPair(
        { server: b, client: a, dp: dpB },
        port,
        ['fio', '--name=srv', ...receiver(port)],
        ['fio', '--name=cli', ...sender(port, verb, pattern)],
      );
      return { r, moved: (await dpB.interfaces())[0].counters.rxBytes - before };
    };
    for (const verb of ['send', 'write', 'read']) {
      const { r, moved } = await fio(verb, '0x5aa5c33c');
      bothOk(`fio --verb=${verb}`, r);
      assert.match(r[1].out, /err= 0:.*\n\s+write: IOPS=\d+, BW=.*\(2048KiB\//, `${verb}: 2 MiB written:\n${r[1].out}`);
      assert.not.match(r[0].out + r[1].out, /verify|bad pattern/i, r[0].out);
      // read pulls the 2 MiB towards the client: B receives the requests, not the data.
      if (verb !== 'read') assert.ok(moved >= 2 * 1024 * 1024, `${verb}: ${moved} bytes reached B`);
    }
    // The check can fail: a pattern the receiver does not expect is reported by fio. (Its
    // receiver then exits; its sender, given the flushed completion, waits on for an event that
    // never comes, as fio does over any RDMA device: it is stopped here, its job process too.)
    const port = nextPort();
    const srv = runTool(b, ['fio', '--name=srv', ...receiver(port)], 60_000, 'exec');
    await cmListening(dpB, srv, port);
    const name = `--name=cli${port}`;
    const cli = runTool(a, ['fio', name, ...sender(port, 'send', '0x11223344')], 60_000, 'exec');
    const bad = await srv.done;
    spawnSync('pkill', ['-KILL', '-f', `^fio ${name} `]);
    await cli.done;
    assert.match(bad.out, /verify failed|bad pattern/, `fio's receiver saw the wrong pattern:\n${bad.out}`);
  });
});

test('the events in order through pyverbs (librdmacm), loopback on one data plane: ... ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT', async () => {
  ready();
  if (spawnSync('/usr/bin/python3', ['-c', 'import pyverbs.cmid']).status !== 0)
    skip('pyverbs is not installed (Debian package python3-pyverbs)');
  // A listening id and a connecting id on channels of their own; each event waited for in turn
  // (CMEvent blocks), with how long it took.
  const py = [
    'import sys, time',
    'from pyverbs.cmid import CMID, CMEvent, CMEventChannel, AddrInfo, ConnParam',
    'from pyverbs.qp import QPInitAttr, QPCap',
    'import pyverbs.cm_enums as ce',
    'import pyverbs.enums as e',
    'ip, port = sys.argv[1], sys.argv[2]',
    'sch, cch = CMEventChannel(), CMEventChannel()',
    'lid = CMID(creator=sch, port_space=ce.RDMA_PS_TCP)',
    'lid.bind_addr(AddrInfo(src=ip, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE))',
    'lid.listen()',
    'cid = CMID(creator=cch, port_space=ce.RDMA_PS_TCP)',
    'cid.resolve_addr(AddrInfo(dst=ip, dst_service=port, port_space=ce.RDMA_PS_TCP))',
    'def ev(ch, who):',
    '    t = time.monotonic()',
    '    x = CMEvent(ch)',
    "    print(who, x.event_str(), '%.2f' % (time.monotonic() - t), flush=True)",
    '    return x',
    "x = ev(cch, 'client'); x.ack_cm_event()",
    'cid.resolve_route()',
    "x = ev(cch, 'client'); x.ack_cm_event()",
    'attr = lambda: QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4))',
    'cid.create_qp(attr())',
    'cid.connect(ConnParam())',
    "x = ev(sch, 'server')",
    'child = CMID(creator=x, listen_id=lid)',
    'x.ack_cm_event()',
    'child.create_qp(attr())',
    'child.accept(ConnParam())',
    "x = ev(cch, 'client'); x.ack_cm_event()",
    "x = ev(sch, 'server'); x.ack_cm_event()",
    'cid.disconnect()',
    "for ch, who in ((cch, 'client'), (sch, 'server'), (cch, 'client'), (sch, 'server')):",
    '    x = ev(ch, who); x.ack_cm_event()',
  ].join('\n');
  await withTwoDaemons(async ({ a }) => {
    const r = await runTool(a, ['/usr/bin/python3', '-c', py, IP_A, String(nextPort())], 30_000, 'exec').done;
    assert.is(r.code, 0, r.out);
    const events = r.out
      .trim()
      .split('\n')
      .map((l) => l.split(' ').slice(0, 2).join(' '));
    assert.equal(events, [
      'client RDMA_CM_EVENT_ADDR_RESOLVED',
      'client RDMA_CM_EVENT_ROUTE_RESOLVED',
      'server RDMA_CM_EVENT_CONNECT_REQUEST',
      'client RDMA_CM_EVENT_ESTABLISHED',
      'server RDMA_CM_EVENT_ESTABLISHED',
      'client RDMA_CM_EVENT_DISCONNECTED',
      'server RDMA_CM_EVENT_DISCONNECTED',
      'client RDMA_CM_EVENT_TIMEWAIT_EXIT',
      'server RDMA_CM_EVENT_TIMEWAIT_EXIT',
    ]);
    // TIMEWAIT_EXIT comes the retransmission timeout's ceiling (rdma.trp.rto-max-ms, 200 ms) after.
    const wait = Number(/^client RDMA_CM_EVENT_TIMEWAIT_EXIT (\S+)$/m.exec(r.out)?.[1]);
    assert.ok(wait >= 0.15 && wait < 2, `TIMEWAIT_EXIT after ${wait} s`);
  });
});

test('hostile: no listener, garbage written to rdma_cm, a peer killed mid-run', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpB }) => {
    // A connect to a port nobody listens on is REJECTED at once (status 8, IB CM's "invalid
    // service ID", as on RoCE), not left to time out.
    const t0 = Date.now();
    const lone = await runTool(a, ['rping', '-c', '-a', IP_B, '-p', String(nextPort()), '-C', '1'], 30_000, 'exec')
      .done;
    assert.ok(lone.code !== 0 && lone.signal === null, `rping to nobody fails:\n${lone.out}`);
    assert.match(lone.out, /RDMA_CM_EVENT_REJECTED, error 8\b/, lone.out);
    assert.ok(Date.now() - t0 < 3000, `and at once (${Date.now() - t0} ms)`);

    // Garbage: each write fails (EINVAL: short, unknown, longer than written, too short a body,
    // no such id; EAGAIN: no event; EFAULT: a response address that is not the program's).
    const py = [
      'import errno, os, struct',
      "fd = os.open('/dev/infiniband/rdma_cm', os.O_RDWR)",
      'os.set_blocking(fd, False)',
      "h = lambda c, i, o: struct.pack('<IHH', c, i, o)",
      "cases = [b'', b'abc', h(99, 0, 0), h(0, 100, 0) + bytes(8), h(1, 8, 4) + bytes(8),",
      "         h(1, 16, 4) + struct.pack('<QII', 0, 12345, 0), h(12, 8, 300) + struct.pack('<Q', 16),",
      "         h(0, 24, 4) + struct.pack('<QQHB5x', 0, 16, 0x0106, 2), h(200, 0, 0) + os.urandom(300)]",
      'out = []',
      'for c in cases:',
      '    try:',
      '        os.write(fd, c); out.append("ok")',
      '    except OSError as e:',
      '        out.append(errno.errorcode[e.errno])',
      "print(' '.join(out))",
    ].join('\n');
    const g = await runTool(a, ['python3', '-c', py], 20_000, 'exec').done;
    assert.is(g.code, 0, g.out);
    assert.is(g.out.trim(), 'EINVAL EINVAL EINVAL EINVAL EINVAL EINVAL EAGAIN EFAULT EINVAL', g.out);

    // A client killed mid-run: the server's connection ends (DISCONNECTED, or its work requests
    // flushed) and it exits by itself.
    const port = nextPort();
    const server = runTool(b, ['rping', '-s', '-a', IP_B, '-p', String(port), '-C', '1000000'], 30_000, 'exec');
    await cmListening(dpB, server, port);
    const client = runTool(a, ['rping', '-c', '-a', IP_B, '-p', String(port), '-C', '1000000'], 30_000);
    await new Promise((r) => setTimeout(r, 1000));
    assert.is(client.exited, null, 'the client is still pinging');
    client.kill();
    await client.done;
    const t1 = Date.now();
    const srv = await server.done;
    assert.is(srv.signal, null, `the server ended by itself:\n${srv.out}`);
    assert.ok(Date.now() - t1 < 10_000, 'within the retry time');
  });
});

test('udaddy (RDMA_PS_UDP): 4 ids x 50 datagrams of 1024 B each way; to nobody: UNREACHABLE, status 1', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpA, dpB }) => {
    // udaddy's port is fixed (7174); its messages fill the path MTU of the 1500-byte link (1024).
    const args = ['-c', '4', '-C', '50', '-S', '1024'];
    const before = [await delivered(dpA), await delivered(dpB)];
    const [srv, cli] = await cmPair(
      { server: b, client: a, dp: dpB },
      7174,
      ['udaddy', '-b', IP_B, ...args],
      ['udaddy', '-s', IP_B, ...args],
    );
    bothOk('udaddy', [srv, cli]);
    for (const r of [srv, cli]) assert.match(r.out, /data transfers complete\n[^]*return status 0/, r.out);
    // Each side's UD QPs took the other's 200 datagrams through the data planes.
    assert.is((await delivered(dpB)) - before[1], 200, 'B delivered the requests');
    assert.is((await delivered(dpA)) - before[0], 200, 'A delivered the replies');
    // Nobody listens (the server is gone): the datagram service request is answered at once.
    const t0 = Date.now();
    const lone = await runTool(a, ['udaddy', '-s', IP_B], 30_000, 'exec').done;
    assert.ok(Date.now() - t0 < 3000, `at once (${Date.now() - t0} ms)`);
    assert.match(lone.out, /RDMA_CM_EVENT_UNREACHABLE, error: 1\b/, lone.out);
    assert.is(refusals(lone.out), '', 'nothing refused');
  });
});

test('mckey (rdma_join_multicast): 2 QPs take 50 datagrams of 1024 B each to 239.1.1.7, IGMP both ways; -l loops none back; the group is left after', async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpA, dpB }) => {
    const group = '239.1.1.7';
    const groupAddr = 0xef010107;
    const rdmaB = Dataplane.internals(dpB).rdma;
    const ifsB = rdmaB.net.interfaces;
    const multicast = () => errorCount(dpB, 'ud-input', /multicast group with members/);
    const loops = () => errorCount(dpA, 'ip4-rewrite', /multicast copies to this data plane/);
    const igmp = (dp: DataplaneApi) => errorCount(dp, 'igmp4-input', /IGMP membership reports sent/);
    const before = [await delivered(dpB), await multicast(), await loops(), await igmp(dpA), await igmp(dpB)];
    const recv = runTool(b, ['mckey', '-m', group, '-b', IP_B, '-c', '2', '-C', '50', '-S', '1024'], 60_000, 'exec');
    // Both receiving QPs attached (librdmacm's ibv_attach_mcast after the join's event) before
    // the sender starts: a datagram to a group nobody joined is dropped.
    while (rdmaB.core.mcast.attached(groupAddr).length < 2) {
      if (recv.exited !== null) assert.unreachable(`mckey exited before it joined:\n${recv.exited.out}`);
      await new Promise((res) => setTimeout(res, 10));
    }
    // The sender joins as a full member too; -l: its datagrams are not looped back to it
    // (ibv_create_qp_ex's IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
    const send = await runTool(
      a,
      ['mckey', '-m', group, '-b', IP_A, '-s', '-l', '-C', '50', '-S', '1024'],
      60_000,
      'exec',
    ).done;
    const got = await recv.done;
    bothOk('mckey', [got, send]);
    for (const r of [got, send]) assert.match(r.out, /joined dgid: ::ffff:239\.1\.1\.7[^]*return status 0/, r.out);
    assert.is((await multicast()) - before[1], 50, 'B took 50 datagrams to the group');
    assert.is((await delivered(dpB)) - before[0], 100, 'each of its 2 QPs had a copy of each');
    assert.equal(ifsB.groups.list(ifsB.find(IP_B)), [], 'the QPs gone: the group is left');
    assert.is((await loops()) - before[2], 0, '-l: no copy looped back on A');
    // Each data plane announced the group when it joined it (IGMPv2 reports, at least one).
    assert.ok((await igmp(dpA)) > before[3] && (await igmp(dpB)) > before[4], 'IGMP reports from both');
  });
});

test("a listener's backlog full: the next request is REJECTED at once, the held ones when it goes", async () => {
  ready();
  await withTwoDaemons(async ({ a, b, dpB }) => {
    const port = nextPort();
    // A listener (librdmacm through ctypes) with a backlog of 1 that never takes its requests.
    const py = [
      'import ctypes, socket, struct, time',
      "cm = ctypes.CDLL('librdmacm.so.1')",
      'cm.rdma_create_event_channel.restype = ctypes.c_void_p',
      'ch = ctypes.c_void_p(cm.rdma_create_event_channel())',
      'cid = ctypes.c_void_p()',
      'assert cm.rdma_create_id(ch, ctypes.byref(cid), None, 0x0106) == 0',
      `sa = struct.pack('<H', socket.AF_INET) + struct.pack('>H', ${port}) + socket.inet_aton('${IP_B}') + bytes(8)`,
      'assert cm.rdma_bind_addr(cid, ctypes.create_string_buffer(sa, 16)) == 0',
      'assert cm.rdma_listen(cid, 1) == 0',
      "print('listening', flush=True)",
      'time.sleep(60)',
    ].join('\n');
    const listener = runTool(b, ['python3', '-c', py], 60_000, 'exec');
    await cmListening(dpB, listener, port);
    const l = Dataplane.internals(dpB).rdma.cm.listeners.get(port);
    const rping = () => runTool(a, ['rping', '-c', '-a', IP_B, '-p', String(port), '-C', '1'], 30_000, 'exec');
    const held = rping();
    for (let i = 0; i < 500 && (l?.deferred?.size ?? 0) < 1; i++) await new Promise((r) => setTimeout(r, 10));
    assert.is(l?.deferred?.size, 1, 'the first request is held');
    const t0 = Date.now();
    const second = await rping().done;
    assert.ok(Date.now() - t0 < 3000, `REJECTED at once (${Date.now() - t0} ms)`);
    assert.match(second.out, /RDMA_CM_EVENT_REJECTED, error 28/, second.out);
    assert.is(held.exited, null, 'the held one still waits');
    const t1 = Date.now();
    listener.kill();
    const first = await held.done;
    assert.ok(Date.now() - t1 < 3000, `the held request is REJECTED when its listener goes (${Date.now() - t1} ms)`);
    assert.match(first.out, /RDMA_CM_EVENT_REJECTED, error 28/, first.out);
  });
});

test('qperf -cm1 (its TCP control connection to the same addresses, on the loopback of a network namespace)', async () => {
  ready();
  if (spawnSync('qperf', ['--version']).error) skip('qperf is not installed');
  const why = netnsUnavailable();
  if (why !== null) skip(why);
  // qperf reaches its peer over TCP, then over RDMA at the same address: the daemons' addresses
  // are also on the kernel's loopback, in a namespace of the test's own.
  const ns = `rgq-${process.pid}`;
  const ip = (...args: string[]) => spawnSync('ip', ['netns', 'exec', ns, 'ip', ...args], { encoding: 'utf8' });
  assert.is(spawnSync('ip', ['netns', 'add', ns]).status, 0, 'netns add');
  try {
    assert.is(ip('link', 'set', 'lo', 'up').status, 0);
    for (const a of [IP_A, IP_B]) assert.is(ip('addr', 'add', `${a}/32`, 'dev', 'lo').status, 0);
    await withTwoDaemons(async ({ a, b }) => {
      const rg = join(import.meta.dirname, '..', 'bin', 'rdma-graph.mjs');
      const inNs = (socket: string, cmd: string[]) => {
        const p = spawn('ip', ['netns', 'exec', ns, process.execPath, rg, 'exec', '--socket', socket, '--', ...cmd]);
        let out = '';
        p.stdout.on('data', (d) => (out += d));
        p.stderr.on('data', (d) => (out += d));
        const timer = setTimeout(() => p.kill('SIGTERM'), 60_000);
        const done = new Promise<Run>((res) =>
          p.on('close', (code, signal) => {
            clearTimeout(timer);
            res({ code, signal, out });
          }),
        );
        return { done, kill: () => p.kill('SIGTERM') };
      };
      const lp = String(nextPort());
      const server = inNs(b, ['qperf', '-lp', lp]);
      try {
        // rc_lat waits for completions on a channel and ends when SIGALRM interrupts that wait.
        const tests = ['rc_bw', 'rc_lat', 'rc_rdma_write_bw', 'rc_rdma_read_bw'];
        let cli: Run | null = null;
        // The server listens on its TCP port within a moment: the client tries again until then.
        for (let k = 0; k < 50; k++) {
          cli = await inNs(a, ['qperf', '-lp', lp, IP_B, '-cm1', '-t', '1', '-to', '20', ...tests]).done;
          if (!/failed to connect|Connection refused/i.test(cli.out)) break;
          await new Promise((r) => setTimeout(r, 100));
        }
        assert.is(cli?.code, 0, cli?.out);
        for (const t of tests)
          assert.match(cli?.out ?? '', new RegExp(`^${t}:\\n\\s+(bw|latency)\\s+=\\s+[\\d.]+ \\S+`, 'm'), cli?.out);
        assert.is(refusals(cli?.out ?? ''), '', 'nothing refused');
      } finally {
        server.kill();
        await server.done;
      }
    });
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
  }
});

test('the daemon goes away: a waiting rping server is told DEVICE_REMOVAL and exits', async () => {
  ready();
  await withTwoDaemons(async ({ a, dpA, stopA }) => {
    const port = nextPort();
    const server = runTool(a, ['rping', '-s', '-a', IP_A, '-p', String(port), '-C', '1'], 30_000, 'exec');
    await cmListening(dpA, server, port);
    const t0 = Date.now();
    stopA();
    const r = await server.done;
    assert.ok(Date.now() - t0 < 5000, `it ends (${Date.now() - t0} ms)`);
    assert.is(r.signal, null, r.out);
    assert.match(r.out, /device removal/i, r.out);
  });
});

test.run();
