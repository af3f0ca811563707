/**
 * Issue 12 item 4: the capture route wrote any path as root (openSync(path, 'w'): an existing
 * file truncated, a symlink followed, a FIFO blocking the daemon in open(), errors telling
 * whether a path exists). Now the API takes a file NAME, created in capture.dir with
 * O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK; every capture stops at its count or at
 * capture.max-bytes and says so. Paths here are all inside temporary directories.
 */
import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import type { ApiClient } from '../api/client.ts';
import { PcapReader } from '../drivers/pcap-file.ts';
import { IP_A, IP_B } from './dataplane-helpers.ts';
import { apiPair, assertError, raw, type ApiPair } from './api-helpers.ts';

function dirs() {
  const root = mkdtempSync(join(tmpdir(), 'rdma-graph-capture-'));
  return {
    root,
    caps: join(root, 'caps'),
    outside: join(root, 'outside'),
    close: () => rmSync(root, { recursive: true, force: true }),
  };
}

async function capturePair(caps: string, maxBytes?: number): Promise<ApiPair & { itf: string }> {
  const p = await apiPair({ captureDir: caps, captureMaxBytes: maxBytes });
  const [i] = await p.ca.interfaces();
  return { ...p, itf: i.name };
}

/** A connected QP pair and a WRITE of `bytes` from A to B. */
async function traffic(p: ApiPair, bytes: number): Promise<void> {
  const ends = async (c: ApiClient) => {
    const { pd } = await c.createPd();
    const { cq } = await c.createCq({ depth: 64 });
    const mr = await c.createMr({ pd, length: 65536, access: ['local-write', 'remote-write'] });
    const qp = await c.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 16, maxRecvWr: 16 });
    return { cq, mr, qp };
  };
  const x = await ends(p.ca),
    y = await ends(p.cb);
  await p.ca.connect(x.qp.qpn, { remote: { ip: IP_B, port: y.qp.qpn }, mode: 'manual', remotePsn: y.qp.psn });
  await p.cb.connect(y.qp.qpn, { remote: { ip: IP_A, port: x.qp.qpn }, mode: 'manual', remotePsn: x.qp.psn });
  await p.ca.postSend(x.qp.qpn, {
    wrId: 1,
    opcode: 'write',
    sge: [{ mr: x.mr.mr, offset: 0, length: bytes }],
    remote: { stag: y.mr.stag, offset: 0 },
  });
  const r = await p.ca.pollCq(x.cq, { waitMs: 2000 });
  assert.equal(
    r.completions.map((c) => c.status),
    ['success'],
  );
}

const NAME_RULE =
  'body/file must be a file name of 1..128 letters, digits, ".", "_" and "-", not starting with "." or "-" (no path: it goes into capture.dir)';

test('paths and hostile names are refused before anything is opened, with the same words whether the path exists or not', async () => {
  const d = dirs();
  const p = await capturePair(d.caps);
  try {
    spawnSync('mkdir', ['-p', d.outside]);
    const victim = join(d.outside, 'victim');
    writeFileSync(victim, 'precious');
    const post = (file: string) =>
      raw(p.apiA.url, 'POST', `/v1/interfaces/${p.itf}/capture`, { body: { direction: 'rx', file } });
    for (const file of [
      victim,
      join(d.outside, 'absent'),
      '../outside/victim',
      '../escape.pcap',
      '..',
      '.',
      '.hidden',
      'a/b',
      'x\u0000y',
      '-r',
      'a b',
      'a\nb',
      'x'.repeat(129),
      '',
    ]) {
      assertError(await post(file), 400, NAME_RULE, `file ${JSON.stringify(file)}`);
    }
    assertError(await post('a..b'), 400, 'capture file name "a..b" contains ".."', 'a..b');
    assert.is(readFileSync(victim, 'utf8'), 'precious', 'the victim is untouched');
    assert.not.ok(existsSync(join(d.root, 'escape.pcap')), 'nothing was made outside capture.dir');
    assert.equal((await p.ca.interface(p.itf)).capture, { rx: null, tx: null, rxStopped: null, txStopped: null });
  } finally {
    await p.close();
    d.close();
  }
});

test('an existing name, a planted symlink or FIFO: 409 naming the file, nothing followed, nothing truncated, no hang; both directions are all or nothing', async () => {
  const d = dirs();
  const p = await capturePair(d.caps);
  try {
    const post = (file: string, direction = 'rx') =>
      raw(p.apiA.url, 'POST', `/v1/interfaces/${p.itf}/capture`, { body: { direction, file } });
    // The first capture makes capture.dir (0700) and a 0600 file.
    assert.is((await post('first.pcap')).status, 200);
    assert.is(statSync(d.caps).mode & 0o777, 0o700);
    assert.is(statSync(join(d.caps, 'first.pcap')).mode & 0o777, 0o600);
    await p.ca.stopCapture(p.itf);
    spawnSync('mkdir', ['-p', d.outside]);
    const victim = join(d.outside, 'victim');
    writeFileSync(victim, 'precious');
    writeFileSync(join(d.caps, 'old.pcap'), 'keep me');
    symlinkSync(victim, join(d.caps, 'link.pcap'));
    symlinkSync(join(d.outside, 'not-there'), join(d.caps, 'dangling.pcap'));
    assert.is(spawnSync('mkfifo', [join(d.caps, 'fifo.pcap')]).status, 0);
    // A FIFO is never opened (that would block until a reader came: the harness's timeout would end it).
    for (const name of ['first.pcap', 'old.pcap', 'link.pcap', 'dangling.pcap', 'fifo.pcap']) {
      const r = await post(name);
      assertError(
        r,
        409,
        `capture file ${name} already exists in capture.dir (${d.caps}): pick another name, or remove it`,
        name,
      );
    }
    assert.is(readFileSync(victim, 'utf8'), 'precious');
    assert.is(readFileSync(join(d.caps, 'old.pcap'), 'utf8'), 'keep me');
    assert.not.ok(existsSync(join(d.outside, 'not-there')), 'the dangling link was not followed');
    // both: new.pcap would be made, new-tx.pcap exists: refused, and new.pcap is gone again.
    writeFileSync(join(d.caps, 'new-tx.pcap'), 'keep me too');
    assertError(await post('new.pcap', 'both'), 409, /^capture file new-tx\.pcap already exists/, 'both, tx exists');
    assert.not.ok(existsSync(join(d.caps, 'new.pcap')), 'the rx file made before the refusal is removed');
    assert.equal(readdirSync(d.caps).sort(), [
      'dangling.pcap',
      'fifo.pcap',
      'first.pcap',
      'link.pcap',
      'new-tx.pcap',
      'old.pcap',
    ]);
    // The data plane still answers.
    assert.is((await p.ca.health()).status, 'ok');
  } finally {
    await p.close();
    d.close();
  }
});

test('capture.dir that is a symlink (to a directory elsewhere) is refused: nothing is created through it', async () => {
  const d = dirs();
  spawnSync('mkdir', ['-p', join(d.outside, 'real')]);
  symlinkSync(join(d.outside, 'real'), d.caps);
  const p = await capturePair(d.caps);
  try {
    const r = await raw(p.apiA.url, 'POST', `/v1/interfaces/${p.itf}/capture`, {
      body: { direction: 'rx', file: 'through.pcap' },
    });
    assertError(r, 503, `capture.dir ${d.caps} is a symbolic link: make it a directory`, 'a symlinked capture.dir');
    assert.equal(readdirSync(join(d.outside, 'real')), [], 'nothing was made where the link points');
    assert.equal((await p.ca.interface(p.itf)).capture, { rx: null, tx: null, rxStopped: null, txStopped: null });
  } finally {
    await p.close();
    d.close();
  }
});

test('a capture stops before capture.max-bytes and at its count, says so in the view, and leaves a valid pcap file', async () => {
  const d = dirs();
  const p = await capturePair(d.caps, 4096);
  try {
    const cap = await p.ca.capture(p.itf, { direction: 'both', file: 'small.pcap' });
    assert.equal(cap.capture, {
      rx: join(d.caps, 'small.pcap'),
      tx: join(d.caps, 'small-tx.pcap'),
      rxStopped: null,
      txStopped: null,
    });
    await traffic(p, 3000);
    await traffic(p, 3000);
    const v = (await p.ca.interface(p.itf)).capture;
    assert.match(String(v.txStopped), /^stopped at \d+ bytes: the next packet would pass the limit of 4096$/);
    const tx = statSync(join(d.caps, 'small-tx.pcap')).size;
    assert.ok(tx <= 4096 && tx > 3000, `tx file ${tx} bytes`);
    const reader = PcapReader.open(join(d.caps, 'small-tx.pcap'));
    assert.ok(reader.count >= 1, 'whole records only');
    await p.ca.stopCapture(p.itf);
    const counted = await p.ca.capture(p.itf, { direction: 'tx', file: 'one.pcap', count: 1 });
    assert.is(counted.capture.txStopped, null);
    await traffic(p, 100);
    assert.is((await p.ca.interface(p.itf)).capture.txStopped, 'stopped after 1 packets, the count asked for');
    assert.is(PcapReader.open(join(d.caps, 'one.pcap')).count, 1);
  } finally {
    await p.close();
    d.close();
  }
});

test.run();
