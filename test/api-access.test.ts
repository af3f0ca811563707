/**
 * Who the API serves (issue 26, README "Security"): a real listening API and a second local user
 * (uid 65534 through setpriv, as root) with curl. By default only the daemon's user and root
 * are served: another user is refused, whatever it asks. Users api.users lets in see the
 * objects but cannot read, write or deregister the memory of a program that registered it
 * through the verbs socket, nor touch its QPs; a holder of api.token can.
 */
import { skip, test } from './harness.ts';
import type { DataplaneApi } from '../dataplane/api.ts';
import * as assert from 'uvu/assert';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Dataplane } from '../dataplane/dataplane.ts';
import { startApi } from '../api/server.ts';
import { loadCore } from '../native/addons.ts';
import { tcpPeerUid } from '../api/peer.ts';
import { LocalAccess } from '../api/access.ts';
import { baseConfig, pipeInterface } from './dataplane-helpers.ts';
import {
  RGV_ACCESS_LOCAL_WRITE,
  RGV_OP_ALLOC_PD,
  RGV_OP_REG_MR,
  rgv_handle,
  rgv_mr,
  rgv_reg_mr,
} from '../dataplane/verbs-server/abi.generated.ts';
import { decode, encode, message, readMessage } from '../dataplane/verbs-server/messages.ts';

const NOBODY = 65534;

function canSwitchUser(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (to run curl as uid 65534 with setpriv)';
  if (spawnSync('setpriv', ['--version']).error) return 'setpriv is not installed (util-linux)';
  if (spawnSync('curl', ['--version']).error) return 'curl is not installed';
  return null;
}

/** curl as `uid` (null: as this process): status and body. Asynchronous: the API answers from this process. */
function curl(
  uid: number | null,
  method: string,
  url: string,
  opts: { data?: string; json?: unknown; token?: string } = {},
): Promise<{ status: number; body: string; err: string }> {
  const args = ['-sS', '-o', '-', '-w', '\n%{http_code}', '-X', method, url];
  if (opts.data !== undefined) args.push('-H', 'content-type: application/octet-stream', '--data-binary', opts.data);
  if (opts.json !== undefined) args.push('-H', 'content-type: application/json', '-d', JSON.stringify(opts.json));
  if (opts.token !== undefined) args.push('-H', `authorization: Bearer ${opts.token}`);
  const cmd =
    uid === null
      ? ['curl', ...args]
      : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'curl', ...args];
  return new Promise((resolve) =>
    execFile(cmd[0], cmd.slice(1), { encoding: 'utf8', timeout: 20_000 }, (_e, stdout, stderr) => {
      const nl = stdout.lastIndexOf('\n');
      resolve({ status: Number(stdout.slice(nl + 1)), body: stdout.slice(0, nl), err: stderr });
    }),
  );
}

async function plane(): Promise<DataplaneApi> {
  return Dataplane.create(
    baseConfig({
      interfaces: [
        pipeInterface('acc0', 'acc1', '10.93.0.1/24', '02:fe:00:00:93:01'),
        pipeInterface('acc1', 'acc0', '10.93.0.2/24', '02:fe:00:00:93:02'),
      ],
    }),
  );
}

/** A verbs program's MR: ALLOC_PD and REG_MR over a raw verbs-socket connection (kept open). */
async function programMr(socket: string, bytes: Uint8Array) {
  const core = loadCore();
  const fd = core.memifRawConnect(socket);
  const req = (op: number, body?: Uint8Array, pass = -1) => {
    assert.is(core.seqpacketSend(fd, message(op, 0, body), pass), 0);
  };
  const reply = async () => {
    for (let k = 0; k < 500; k++) {
      const m = core.seqpacketRecv(fd);
      const r = m !== null && 'data' in m ? readMessage(m.data) : null;
      if (r !== null) return r;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('no reply');
  };
  req(RGV_OP_ALLOC_PD);
  const pd = decode(rgv_handle, (await reply()).body).handle;
  const mem = core.allocMemory(4096, { name: 'api-access', hugepages: 'never' });
  new Uint8Array(mem.buffer).set(bytes);
  const base = 0x20000000;
  req(
    RGV_OP_REG_MR,
    encode(rgv_reg_mr, { pd, access: RGV_ACCESS_LOCAL_WRITE, span: 4096, start: base, addr: base, length: 4096 }),
    mem.fd,
  );
  const r = await reply();
  assert.is(r.status, 0, 'REG_MR accepted');
  return { mr: decode(rgv_mr, r.body).handle, mem, close: () => core.closeFd(fd) };
}

test('the peer of a loopback connection is known by uid: this process, and uid 65534 through setpriv', async () => {
  const why = canSwitchUser();
  if (why !== null) skip(why);
  const seen: (number | null)[] = [];
  const srv = createServer((req, res) => {
    seen.push(tcpPeerUid(req.socket));
    res.end('ok');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const api = {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    close: () => new Promise((r) => srv.close(r)),
  };
  try {
    assert.is((await curl(null, 'GET', `${api.url}/v1/health`)).status, 200);
    assert.is((await curl(NOBODY, 'GET', `${api.url}/v1/health`)).status, 200);
    assert.equal(seen, [process.getuid!(), NOBODY]);
  } finally {
    await api.close();
  }
});

test("by default another local user is refused (403, naming its uid): it cannot list nor read a program's memory", async () => {
  const why = canSwitchUser();
  if (why !== null) skip(why);
  const dp = await plane();
  const dir = mkdtempSync(join(tmpdir(), 'api-access-'));
  const vs = dp.serveVerbs({ path: join(dir, 'verbs.sock') });
  const api = await startApi(dp, { port: 0 });
  const prog = await programMr(vs.path, new TextEncoder().encode('secret of a root program'));
  try {
    for (const [method, path] of [
      ['GET', '/v1/mrs'],
      ['GET', `/v1/mrs/${prog.mr}/data`],
      ['PUT', `/v1/mrs/${prog.mr}/data`],
      ['GET', '/v1/health'],
      ['POST', '/v1/pds'],
    ]) {
      const r = await curl(NOBODY, method, `${api.url}${path}`, method === 'PUT' ? { data: 'overwritten' } : {});
      assert.is(r.status, 403, `${method} ${path} as uid 65534: ${r.body}`);
      assert.match(r.body, /the request came from uid 65534/);
      assert.match(r.body, /set api\.token/);
    }
    // Nothing was changed, and root reads the program's bytes.
    const mine = await curl(null, 'GET', `${api.url}/v1/mrs/${prog.mr}/data?length=24`);
    assert.is(mine.status, 200);
    assert.is(mine.body, 'secret of a root program');
    const list = JSON.parse((await curl(null, 'GET', `${api.url}/v1/mrs`)).body) as {
      mr: number;
      owner: string | null;
    }[];
    assert.match(list.find((m) => m.mr === prog.mr)?.owner ?? '', /^pid \d+/, 'the MR says which program owns it');
    const shown = await new Promise<string>((resolve) =>
      execFile(process.execPath, ['bin/rdmactl.mjs', '--api', api.url, 'show', 'mrs'], { encoding: 'utf8' }, (_e, o) =>
        resolve(o),
      ),
    );
    assert.match(shown, new RegExp(`^${prog.mr} .* pid \\d+ \\(node\\)$`, 'm'), `rdmactl show mrs:\n${shown}`);
  } finally {
    prog.close();
    await api.close();
    vs.close();
    await dp.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("api.users: a user let in works with the API's own objects but cannot touch a verbs program's memory; the token's holder can", async () => {
  const why = canSwitchUser();
  if (why !== null) skip(why);
  const dp = await plane();
  const dir = mkdtempSync(join(tmpdir(), 'api-access-'));
  const vs = dp.serveVerbs({ path: join(dir, 'verbs.sock') });
  const prog = await programMr(vs.path, new TextEncoder().encode('program bytes'));
  const api = await startApi(dp, { port: 0, access: { users: ['nobody'] } });
  try {
    // Its own objects: a PD and an MR made through the API, written and read back.
    const pd = JSON.parse((await curl(NOBODY, 'POST', `${api.url}/v1/pds`, { json: {} })).body).pd as number;
    const made = await curl(NOBODY, 'POST', `${api.url}/v1/mrs`, { json: { pd, length: 64, access: ['local-write'] } });
    assert.is(made.status, 201, made.body);
    const mr = JSON.parse(made.body).mr as number;
    assert.is((await curl(NOBODY, 'PUT', `${api.url}/v1/mrs/${mr}/data`, { data: 'mine' })).status, 200);
    assert.is((await curl(NOBODY, 'GET', `${api.url}/v1/mrs/${mr}/data?length=4`)).body, 'mine');
    // The program's MR: listed, with its owner, but not to be read, written or deregistered.
    const list = JSON.parse((await curl(NOBODY, 'GET', `${api.url}/v1/mrs`)).body) as {
      mr: number;
      owner: string | null;
    }[];
    assert.match(list.find((m) => m.mr === prog.mr)?.owner ?? '', /^pid \d+/);
    for (const [method, data] of [
      ['GET', undefined],
      ['PUT', 'overwritten'],
    ] as const) {
      const r = await curl(NOBODY, method, `${api.url}/v1/mrs/${prog.mr}/data`, data === undefined ? {} : { data });
      assert.is(r.status, 403, `${method} as a user let in: ${r.body}`);
      assert.match(r.body, new RegExp(`mr ${prog.mr} belongs to pid \\d+`));
    }
    assert.is((await curl(NOBODY, 'DELETE', `${api.url}/v1/mrs/${prog.mr}`)).status, 403);
    assert.equal(
      [...new Uint8Array(prog.mem.buffer, 0, 13)],
      [...new TextEncoder().encode('program bytes')],
      "the program's memory is as it wrote it",
    );
    assert.is(
      (await curl(null, 'GET', `${api.url}/v1/mrs/${prog.mr}/data?length=13`)).body,
      'program bytes',
      'root reads it',
    );
  } finally {
    await api.close();
  }
  // With a token, the token is what counts: its holder reads the program's bytes, as uid 65534 too.
  const tapi = await startApi(dp, { port: 0, token: 's3cret', access: { users: ['nobody'] } });
  try {
    assert.is((await curl(NOBODY, 'GET', `${tapi.url}/v1/mrs/${prog.mr}/data?length=13`)).status, 401, 'no token');
    const r = await curl(NOBODY, 'GET', `${tapi.url}/v1/mrs/${prog.mr}/data?length=13`, { token: 's3cret' });
    assert.is(r.status, 200, r.body);
    assert.is(r.body, 'program bytes');
  } finally {
    prog.close();
    await tapi.close();
    vs.close();
    await dp.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('api.users and api.group name users and groups of this host; group members are let in', () => {
  const dir = mkdtempSync(join(tmpdir(), 'api-access-'));
  try {
    const passwd = join(dir, 'passwd'),
      group = join(dir, 'group');
    spawnSync('sh', [
      '-c',
      `printf 'root:x:0:0::/root:/bin/sh\\nalice:x:1001:1001::/h:/bin/sh\\nbob:x:1002:1002::/h:/bin/sh\\ncarol:x:1003:2000::/h:/bin/sh\\n' > ${passwd}; printf 'rdma:x:2000:bob\\nalice:x:1001:\\n' > ${group}`,
    ]);
    const a = new LocalAccess({ ownerUid: 1001, group: 'rdma', passwd, groupFile: group });
    assert.equal(a.caller(1001), { kind: 'owner', uid: 1001 });
    assert.equal(a.caller(0), { kind: 'owner', uid: 0 });
    assert.equal(a.caller(1002), { kind: 'user', uid: 1002 }, 'a listed member');
    assert.equal(a.caller(1003), { kind: 'user', uid: 1003 }, 'its primary group');
    const refused = a.caller(4242);
    assert.is(refused.kind, 'refused');
    assert.match((refused as { why: string }).why, /uid 4242.*api\.users or api\.group/);
    assert.is(a.caller(null).kind, 'refused', 'an unknown peer');
    assert.equal(new LocalAccess({ ownerUid: 1001, users: ['bob', 1003], passwd, groupFile: group }).caller(1002), {
      kind: 'user',
      uid: 1002,
    });
    assert.throws(
      () => new LocalAccess({ users: ['mallory'], passwd, groupFile: group }),
      /api\.users: no local user "mallory"/,
    );
    assert.throws(
      () => new LocalAccess({ group: 'wheel', passwd, groupFile: group }),
      /api\.group: no local group "wheel"/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
