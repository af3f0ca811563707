// core.node: TSC, shareable memory, eventfd and FdWaiter; and the addon loader's errors.
// Run: npx uvu -r tsx test native

import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { createHook, executionAsyncId, executionAsyncResource } from 'node:async_hooks';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { Worker } from 'node:worker_threads';

import { DriverUnavailableError, NATIVE_BUILD_DIR, loadAddon, loadCore, type FdWaiter } from '../native/addons.ts';
import { systemClock } from '../graph/clock.ts';

const core = loadCore();
const CORE_PATH = NATIVE_BUILD_DIR + 'core.node';
const MiB = 1 << 20;
const HUGE = 2 * MiB;

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Free 2 MiB hugepages a new mapping can take, read from sysfs (independent of the addon). */
function free2MiBPages(): number {
  const dir = '/sys/kernel/mm/hugepages/hugepages-2048kB/';
  try {
    const read = (f: string) => Number(fs.readFileSync(dir + f, 'utf8').trim());
    const extra = Math.max(0, read('nr_overcommit_hugepages') - read('surplus_hugepages'));
    return Math.max(0, read('free_hugepages') - read('resv_hugepages')) + extra;
  } catch {
    return 0;
  }
}

function meminfo(key: string): number {
  const m = fs.readFileSync('/proc/meminfo', 'utf8').match(new RegExp(`^${key}:\\s+(\\d+)`, 'm'));
  assert.ok(m, `${key} in /proc/meminfo`);
  return Number(m![1]);
}

/** Reads `len` bytes at `offset` through a second, independent open of the memfd. */
function readThroughFd(fd: number, offset: number, len: number): Buffer {
  const other = fs.openSync(`/proc/self/fd/${fd}`, 'r');
  try {
    const buf = Buffer.alloc(len);
    assert.is(fs.readSync(other, buf, 0, len, offset), len);
    return buf;
  } finally {
    fs.closeSync(other);
  }
}

function throwsWith(fn: () => unknown, type: Function, pattern: RegExp): void {
  try {
    fn();
  } catch (e) {
    assert.instance(e, type, `expected ${type.name}, got ${String(e)}`);
    assert.match((e as Error).message, pattern);
    return;
  }
  assert.unreachable(`expected a ${type.name} matching ${pattern}`);
}

/** Runs a CommonJS snippet in a child node with `c` bound to core.node. */
function runChild(body: string, args: string[] = []) {
  const src = `const c = require(${JSON.stringify(CORE_PATH)}); ${body}`;
  const env = { ...process.env };
  delete env.FORCE_COLOR;
  return spawnSync(process.execPath, [...args, '-e', src], { encoding: 'utf8', timeout: 20000, env });
}

// ---------------------------------------------------------------- loader, version, TSC

test('loadCore is cached and version matches package.json', () => {
  assert.is(loadCore(), core);
  const pkg = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.is(core.version, pkg.version);
});

test('loadAddon reports a driver that was not built as DriverUnavailableError', () => {
  if (fs.existsSync(NATIVE_BUILD_DIR + 'ibverbs.node')) {
    // Built on this machine: it must then load (no RDMA device is needed to load it).
    assert.ok(loadAddon<object>('ibverbs', 'install libibverbs-dev'));
    return;
  }
  try {
    loadAddon<object>('ibverbs', 'install libibverbs-dev');
    assert.unreachable('ibverbs.node does not exist, loadAddon must throw');
  } catch (e) {
    assert.instance(e, DriverUnavailableError);
    const err = e as DriverUnavailableError;
    assert.is(err.code, 'DRIVER_UNAVAILABLE');
    assert.is(err.driver, 'ibverbs');
    assert.is(
      err.message,
      'driver unavailable: ibverbs.node was not built (install libibverbs-dev and run npm run build)',
    );
  }
});

test('tscSource names the counter of this architecture', () => {
  const expected =
    process.arch === 'x64' || process.arch === 'ia32'
      ? 'rdtsc'
      : process.arch === 'arm64'
        ? 'cntvct'
        : 'clock_monotonic';
  assert.is(core.tscSource(), expected);
});

test('rdtsc increases over a busy loop at a plausible rate', () => {
  const h0 = process.hrtime.bigint();
  const t0 = core.rdtsc();
  let x = 0;
  while (process.hrtime.bigint() - h0 < 5_000_000n) x += Math.sqrt(x + 1);
  const t1 = core.rdtsc();
  const ns = Number(process.hrtime.bigint() - h0);
  assert.type(t0, 'number');
  assert.ok(Number.isInteger(t0) && t0 > 0, `rdtsc() = ${t0}`);
  assert.ok(t1 > t0, `rdtsc went from ${t0} to ${t1}`);
  const hz = ((t1 - t0) / ns) * 1e9;
  // Anything from a 1 MHz generic timer to a 100 GHz counter; CLOCK_MONOTONIC is 1e9.
  assert.ok(hz > 1e6 && hz < 1e11, `counter rate ${hz} Hz`);
  assert.ok(x > 0);
});

test('rdtscStore writes the counter into the Float64Array given to tscInto, returns nothing; a bad slot is refused', () => {
  const clock = systemClock(); // the process's clock has its slot in place first
  const slot = new Float64Array(2);
  core.tscInto(slot);
  try {
    assert.is(core.rdtscStore(), undefined);
    const a = slot[0];
    let x = 0;
    for (let i = 0; i < 100_000; i++) x += Math.sqrt(i);
    core.rdtscStore();
    const b = slot[0];
    assert.ok(Number.isInteger(a) && a > 0 && b > a, `the slot went from ${a} to ${b}`);
    assert.is(slot[1], 0, 'only the first element');
    assert.ok(Math.abs(core.rdtsc() - b) < 1e12, 'the same counter rdtsc() reads');
    for (const bad of [new Float32Array(1), new Float64Array(0), [1], 3, undefined])
      assert.throws(
        () => (core.tscInto as (v: unknown) => void)(bad),
        /tscInto\(slot\): slot must be a Float64Array of at least one element/,
      );
  } finally {
    core.tscInto(clock.slot); // the process's clock reads through its own slot again
  }
  const before = clock.slot[0];
  clock.tick();
  assert.ok(clock.slot[0] > before, 'the clock ticks again');
});

// ---------------------------------------------------------------- allocMemory

test('allocMemory (no hugepages) is writable, zeroed, page-rounded and shared through its fd', () => {
  const m = core.allocMemory(10_000, { hugepages: 'never', name: 'test-pool' });
  assert.instance(m.buffer, ArrayBuffer);
  assert.is(m.hugepages, false);
  assert.is(m.fallbackReason, null);
  assert.ok(m.fd >= 0);
  assert.ok(m.pageSize >= 4096 && (m.pageSize & (m.pageSize - 1)) === 0, `pageSize ${m.pageSize}`);
  assert.ok(m.size >= 10_000 && m.size % m.pageSize === 0 && m.size < 10_000 + m.pageSize);
  assert.is(m.buffer.byteLength, m.size);
  const u8 = new Uint8Array(m.buffer);
  assert.ok(
    u8.every((b) => b === 0),
    'fresh memory is zero-filled',
  );

  // JS writes -> visible through an independent read of the memfd.
  u8.set([0xde, 0xad, 0xbe, 0xef], 8190);
  u8[m.size - 1] = 0x5a;
  assert.equal([...readThroughFd(m.fd, 8190, 4)], [0xde, 0xad, 0xbe, 0xef]);
  assert.equal([...readThroughFd(m.fd, m.size - 1, 1)], [0x5a]);

  // Writes through the fd -> visible in the ArrayBuffer (MAP_SHARED).
  const other = fs.openSync(`/proc/self/fd/${m.fd}`, 'r+');
  try {
    fs.writeSync(other, Buffer.from([1, 2, 3]), 0, 3, 100);
    assert.equal([...u8.subarray(100, 103)], [1, 2, 3]);
    // The size is sealed: a peer holding the fd cannot shrink it under our mapping.
    assert.throws(
      () => fs.ftruncateSync(other, 0),
      (e: NodeJS.ErrnoException) => e.code === 'EPERM',
    );
  } finally {
    fs.closeSync(other);
  }
  const target = fs.readlinkSync(`/proc/self/fd/${m.fd}`);
  assert.match(target, /^\/memfd:test-pool/);
});

test('the fd of an allocMemory buffer cannot be closed with closeFd', () => {
  const m = core.allocMemory(4096, { hugepages: 'never', name: 'owned' });
  throwsWith(() => core.closeFd(m.fd), Error, /belongs to an allocMemory\(\) buffer/);
  assert.ok(fs.fstatSync(m.fd).size === m.size, 'fd still open');
});

test("hugepages 'require' throws a clear error, or gives hugepages when some are free", () => {
  const need = 2; // 4 MiB
  if (free2MiBPages() < need) {
    try {
      core.allocMemory(need * HUGE, { hugepages: 'require', name: 'req' });
      assert.unreachable('no free hugepages: require must throw');
    } catch (e) {
      assert.instance(e, Error);
      assert.is((e as NodeJS.ErrnoException).code, 'ERR_HUGEPAGES_UNAVAILABLE');
      assert.match(
        (e as Error).message,
        /hugepages required but only \d+ free 2 MiB pages \(need 2\); reserve with: echo \d+ > \/proc\/sys\/vm\/nr_hugepages/,
      );
    }
  } else {
    const m = core.allocMemory(need * HUGE - 5, { hugepages: 'require', name: 'req' });
    assert.is(m.hugepages, true);
    assert.is(m.pageSize, HUGE);
    assert.is(m.size, need * HUGE);
    new Uint8Array(m.buffer)[HUGE + 7] = 0x42;
    assert.equal([...readThroughFd(m.fd, HUGE + 7, 1)], [0x42]);
  }
});

test("hugepages 'auto' falls back to normal pages with a reason, or uses hugepages", () => {
  const m = core.allocMemory(3 * MiB, { hugepages: 'auto', name: 'auto' });
  if (m.hugepages) {
    assert.is(m.pageSize, HUGE);
    assert.is(m.size, 4 * MiB);
    assert.is(m.fallbackReason, null);
  } else {
    assert.ok(m.pageSize < HUGE);
    assert.is(m.size, 3 * MiB);
    assert.type(m.fallbackReason, 'string');
    assert.match(m.fallbackReason!, /2 MiB|hugetlb/);
  }
  assert.is(m.buffer.byteLength, m.size);
  // Default options are 'auto' too.
  const d = core.allocMemory(4096);
  assert.ok(d.size >= 4096);
});

test('allocMemory rejects bad arguments with TypeError/RangeError saying what is wrong', () => {
  const a = core.allocMemory as (...args: unknown[]) => unknown;
  throwsWith(() => a(0), RangeError, /bytes must be in \[1, 68719476736\], got 0/);
  throwsWith(() => a(-4096), RangeError, /bytes must be in/);
  throwsWith(() => a(2 ** 36 + 1), RangeError, /bytes must be in/);
  throwsWith(() => a(1.5), RangeError, /bytes must be an integer/);
  throwsWith(() => a(NaN), RangeError, /bytes must be an integer/);
  throwsWith(() => a('4096'), TypeError, /bytes must be a number, got a string/);
  throwsWith(() => a(), TypeError, /bytes must be a number, got undefined/);
  throwsWith(() => a(4096, { hugepages: 'sometimes' }), RangeError, /'auto', 'never' or 'require', got 'sometimes'/);
  throwsWith(() => a(4096, { hugepages: true }), TypeError, /opts\.hugepages must be a string/);
  throwsWith(() => a(4096, 'never'), TypeError, /opts must be an object/);
  throwsWith(() => a(4096, { name: '' }), RangeError, /opts\.name must be 1 to 249 bytes/);
  throwsWith(() => a(4096, { name: 'x'.repeat(250) }), RangeError, /opts\.name must be 1 to 249 bytes/);
  throwsWith(() => a(4096, { name: 42 }), TypeError, /opts\.name must be a string/);
});

test('hugepageInfo matches /proc/meminfo', () => {
  const h = core.hugepageInfo();
  assert.is(h.total, meminfo('HugePages_Total'));
  assert.is(h.free, meminfo('HugePages_Free'));
  assert.is(h.reserved, meminfo('HugePages_Rsvd'));
  assert.is(h.surplus, meminfo('HugePages_Surp'));
  assert.is(h.pageSize, meminfo('Hugepagesize') * 1024);
});

// ---------------------------------------------------------------- eventfd

test('eventfd counter round trip', () => {
  const fd = core.eventfd();
  try {
    assert.ok(fd >= 0);
    assert.is(core.eventfdRead(fd), 0, 'empty counter reads 0 (EAGAIN)');
    core.eventfdWrite(fd);
    core.eventfdWrite(fd, 41);
    assert.is(core.eventfdRead(fd), 42);
    assert.is(core.eventfdRead(fd), 0, 'read resets the counter');
    core.eventfdWrite(fd, 2 ** 40);
    assert.is(core.eventfdRead(fd), 2 ** 40);
    throwsWith(() => core.eventfdWrite(fd, 0), RangeError, /n must be in \[1, /);
    throwsWith(() => core.eventfdWrite(-1), RangeError, /fd must be in \[0, /);
    throwsWith(() => (core.eventfdRead as (x: unknown) => number)('3'), TypeError, /fd must be a number/);
  } finally {
    core.closeFd(fd);
  }
  try {
    core.eventfdRead(fd);
    assert.unreachable('reading a closed fd must throw');
  } catch (e) {
    assert.is((e as NodeJS.ErrnoException).code, 'EBADF');
    assert.match((e as Error).message, /eventfdRead\(\d+\): Bad file descriptor/);
  }
  try {
    core.closeFd(fd);
    assert.unreachable('closing twice must throw');
  } catch (e) {
    assert.is((e as NodeJS.ErrnoException).code, 'EBADF');
    assert.is((e as NodeJS.ErrnoException).syscall, 'close');
  }
});

// ---------------------------------------------------------------- FdWaiter

/** A waiter plus eventfds that are all released after the test body. */
async function withWaiter(nfds: number, body: (w: FdWaiter, fds: number[]) => Promise<void>) {
  const w = new core.FdWaiter();
  const fds = Array.from({ length: nfds }, () => core.eventfd());
  try {
    await body(w, fds);
  } finally {
    w.close();
    for (const fd of fds) core.closeFd(fd);
  }
}

function waitOnce(w: FdWaiter, timeoutMs: number): Promise<{ fd: number; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => w.wait(timeoutMs, (fd) => resolve({ fd, ms: performance.now() - t0 })));
}

test('FdWaiter: a timeout fires cb(-1) after roughly the timeout', async () => {
  await withWaiter(1, async (w, [fd]) => {
    w.add(fd);
    const p = waitOnce(w, 30);
    assert.is(w.waiting, true);
    const r = await p;
    assert.is(r.fd, -1);
    assert.ok(r.ms >= 29, `fired after ${r.ms} ms: not before its timeout`);
    assert.is(w.waiting, false);
  });
});

test('FdWaiter: timeouts of 0 and fractions fire asynchronously, no fd needed', async () => {
  await withWaiter(0, async (w) => {
    let called = 0;
    w.wait(0, (fd) => {
      called++;
      assert.is(fd, -1);
    });
    assert.is(called, 0, 'never synchronously');
    await delay(20);
    assert.is(called, 1);
    // 0.2 ms rounds up to 1 ms: it fires before a 200 ms timer armed after it (libuv runs
    // timers in deadline order).
    const order: string[] = [];
    const late = new Promise<void>((r) => setTimeout(() => r(void order.push('200 ms timer')), 200));
    const r = await waitOnce(w, 0.2).then((x) => (order.push('wait'), x));
    await late;
    assert.is(r.fd, -1);
    assert.equal(order, ['wait', '200 ms timer']);
  });
});

test('FdWaiter: an eventfd written from a setTimeout fires cb(fd) exactly once', async () => {
  await withWaiter(2, async (w, [a, b]) => {
    w.add(a);
    w.add(b);
    const calls: number[] = [];
    const t0 = performance.now();
    let ms = 0;
    w.wait(5000, (fd) => {
      calls.push(fd);
      ms = performance.now() - t0;
    });
    setTimeout(() => core.eventfdWrite(b), 25);
    // Until the callback came (5 s at most), not a fixed 80 ms: after a stall of the loaded
    // machine both timers fire in one pass, and the wait's poll comes only after it.
    for (let t = 0; t < 1000 && calls.length === 0; t++) await delay(5);
    assert.equal(calls, [b]);
    assert.ok(ms >= 20, `fired after ${ms} ms: not before the write`);
    // Level-triggered fd still readable, but the wait is over: no second call.
    core.eventfdWrite(a);
    await delay(30);
    assert.equal(calls, [b]);
    // The next wait sees the still-readable fds at once (not its 5 s timeout: fd -1).
    const r = await waitOnce(w, 5000);
    assert.ok(r.fd === a || r.fd === b, `fd ${r.fd}`);
  });
});

test('FdWaiter: the callback runs in its own async context, microtasks drain after it', async () => {
  const ids: number[] = [];
  const hook = createHook({
    init(id, type) {
      if (type === 'FdWaiter') ids.push(id);
    },
  }).enable();
  try {
    await withWaiter(0, async (w) => {
      assert.is(ids.length, 1, 'constructing an FdWaiter creates one async resource');
      const order: string[] = [];
      let eid = 0;
      let resource: object | undefined;
      await new Promise<void>((resolve) => {
        w.wait(0, () => {
          eid = executionAsyncId();
          resource = executionAsyncResource();
          order.push('cb');
          setImmediate(() => {
            order.push('immediate');
            resolve();
          });
          queueMicrotask(() => order.push('microtask'));
        });
      });
      assert.is(eid, ids[0], 'cb runs with the waiter as execution context (MakeCallback)');
      assert.is(resource, w);
      assert.equal(order, ['cb', 'microtask', 'immediate']);
    });
  } finally {
    hook.disable();
  }
});

test('FdWaiter: the callback may wait again; this is the waiter', async () => {
  await withWaiter(1, async (w, [fd]) => {
    w.add(fd);
    const seen: number[] = [];
    await new Promise<void>((resolve) => {
      w.wait(0, function (this: unknown, first) {
        assert.is(this, w);
        seen.push(first);
        w.wait(5000, (second) => {
          seen.push(second);
          resolve();
        });
        core.eventfdWrite(fd);
      });
    });
    assert.equal(seen, [-1, fd]);
  });
});

test('FdWaiter: cancel prevents the callback; the waiter can wait again', async () => {
  await withWaiter(1, async (w, [fd]) => {
    w.add(fd);
    let called = 0;
    w.wait(10, () => called++);
    w.cancel();
    assert.is(w.waiting, false);
    core.eventfdWrite(fd);
    await delay(50);
    assert.is(called, 0);
    w.cancel(); // no-op when idle
    const r = await waitOnce(w, 5000);
    assert.is(r.fd, fd);
  });
});

test('FdWaiter: wait while waiting throws; nothing to wait for throws', async () => {
  await withWaiter(1, async (w, [fd]) => {
    throwsWith(() => w.wait(-1, () => {}), Error, /nothing to wait for/);
    throwsWith(() => w.wait(Infinity, () => {}), Error, /nothing to wait for/);
    w.add(fd);
    let called = 0;
    w.wait(20, () => called++);
    throwsWith(() => w.wait(20, () => called++), Error, /already waiting/);
    await delay(60);
    assert.is(called, 1, 'only the first wait calls back');
    throwsWith(() => w.wait(NaN, () => {}), RangeError, /NaN/);
    throwsWith(() => (w.wait as (...a: unknown[]) => void)('5', () => {}), TypeError, /timeoutMs must be a number/);
    throwsWith(() => (w.wait as (...a: unknown[]) => void)(5), TypeError, /cb must be a function/);
  });
});

test('FdWaiter: add/remove', async () => {
  await withWaiter(2, async (w, [a, b]) => {
    w.add(a);
    throwsWith(() => w.add(a), Error, /fd \d+ is already added/);
    w.add(b);
    w.remove(a);
    throwsWith(() => w.remove(a), Error, /fd \d+ was not added/);
    core.eventfdWrite(a);
    let r = await waitOnce(w, 40);
    assert.is(r.fd, -1, 'a removed fd does not wake the waiter');
    w.add(a); // re-adding after remove works
    r = await waitOnce(w, 5000);
    assert.is(r.fd, a);
    core.eventfdRead(a);
    // Adding while a wait is pending arms the new fd too.
    const p = waitOnce(w, 5000);
    w.remove(a);
    const c = core.eventfd();
    try {
      w.add(c);
      core.eventfdWrite(c);
      r = await p;
      assert.is(r.fd, c);
      w.remove(c);
    } finally {
      core.closeFd(c);
    }
    // Regular files cannot be polled: add() says so.
    const f = fs.openSync(new URL(import.meta.url), 'r');
    try {
      throwsWith(() => w.add(f), Error, /cannot poll fd/);
    } finally {
      fs.closeSync(f);
    }
  });
});

test('FdWaiter: wait refuses an fd closed without remove()', async () => {
  const w = new core.FdWaiter();
  const fd = core.eventfd();
  try {
    w.add(fd);
    core.closeFd(fd);
    throwsWith(() => w.wait(10, () => {}), Error, /was closed without FdWaiter\.remove\(\) first/);
    assert.is(w.waiting, false);
  } finally {
    w.close();
  }
});

test('FdWaiter: close is idempotent, drops a pending wait, and later calls throw', async () => {
  await withWaiter(1, async (w, [fd]) => {
    w.add(fd);
    let called = 0;
    w.wait(10, () => called++);
    w.close();
    assert.is(w.closed, true);
    assert.is(w.waiting, false);
    w.close();
    w.cancel();
    core.eventfdWrite(fd);
    await delay(50);
    assert.is(called, 0);
    throwsWith(() => w.add(fd), Error, /FdWaiter\.add: the waiter is closed/);
    throwsWith(() => w.remove(fd), Error, /the waiter is closed/);
    throwsWith(() => w.wait(1, () => {}), Error, /the waiter is closed/);
  });
});

test('FdWaiter: a throw in the callback is an uncaught exception', async () => {
  const caught: unknown[] = [];
  const handler = (e: unknown) => caught.push(e);
  const saved = process.listeners('uncaughtException');
  process.removeAllListeners('uncaughtException');
  process.on('uncaughtException', handler);
  try {
    await withWaiter(0, async (w) => {
      w.wait(0, () => {
        throw new Error('boom from cb');
      });
      await delay(30);
      assert.is(caught.length, 1);
      assert.is((caught[0] as Error).message, 'boom from cb');
      // The waiter is still usable.
      assert.is((await waitOnce(w, 1)).fd, -1);
    });
  } finally {
    process.off('uncaughtException', handler);
    for (const l of saved) process.on('uncaughtException', l);
  }
});

test('FdWaiter: a pending wait keeps the process alive, an idle waiter does not', () => {
  // An idle waiter kept referenced: held by it, the child would be killed by the 20 s timeout.
  const idle = runChild(`const w = new c.FdWaiter(); w.add(c.eventfd()); globalThis.keep = w;`);
  assert.is(idle.signal, null, 'the idle waiter did not hold the process');
  assert.is(idle.status, 0, idle.stderr);
  const pending = runChild(
    `const w = new c.FdWaiter(); w.add(c.eventfd()); const t0 = Date.now();
     w.wait(400, (fd) => process.stdout.write(\`fired \${fd} \${Date.now() - t0}\\n\`));`,
  );
  assert.is(pending.status, 0, pending.stderr);
  const m = pending.stdout.match(/^fired -1 (\d+)/);
  assert.ok(m, `child printed: ${pending.stdout}`);
  // The callback ran: the process stayed alive for the pending wait (it would have ended first).
  assert.ok(Number(m![1]) >= 399, `timer fired after ${m![1]} ms`);
  // A cancelled wait of an hour: held by it, the child would be killed by runChild's 20 s timeout.
  const cancelled = runChild(
    `const w = new c.FdWaiter(); w.add(c.eventfd()); w.wait(3600000, () => console.log('BAD')); w.cancel();`,
  );
  assert.is(cancelled.signal, null, 'the cancelled wait did not hold the process');
  assert.is(cancelled.status, 0);
  assert.is(cancelled.stdout, '');
});

test('GC: finalizers release memory and uv handles; pending waits survive GC', () => {
  const r = runChild(
    `const fs = require('fs');
     const count = () => fs.readdirSync('/proc/self/fd').length;
     const maps = () => fs.readFileSync('/proc/self/maps', 'utf8').split('\\n').filter((l) => l.includes('/memfd:gc-test')).length;
     (async () => {
       const fds0 = count();
       for (let i = 0; i < 300; i++) {
         const w = new c.FdWaiter(); const fd = c.eventfd(); w.add(fd);
         if (i % 2) { w.wait(100000, () => {}); w.cancel(); }
         w.remove(fd); c.closeFd(fd);
         c.allocMemory(256 * 1024, { hugepages: 'never', name: 'gc-test' });
       }
       const during = maps();
       // A waiter referenced by nothing but its pending wait must survive GC and fire.
       let fired = 0;
       (() => { new c.FdWaiter().wait(60, () => { fired++; }); })();
       for (let i = 0; i < 10 && (maps() > 0 || count() > fds0 || !fired); i++) { gc(); await new Promise((r) => setTimeout(r, 20)); }
       console.log(JSON.stringify({ during, after: maps(), fds0, fds: count(), fired }));
     })();`,
    ['--expose-gc'],
  );
  assert.is(r.status, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  assert.ok(s.during > 0, 'mappings existed before GC');
  assert.is(s.after, 0, 'every mapping was unmapped');
  assert.is(s.fds, s.fds0, 'every memfd was closed');
  assert.is(s.fired, 1, 'a pending wait keeps its waiter from being collected');
});

test('worker threads: each has its own loop; terminating one with a pending wait is clean', async () => {
  const src = `
    const c = require(${JSON.stringify(CORE_PATH)});
    const { parentPort, workerData } = require('node:worker_threads');
    const w = new c.FdWaiter();
    w.add(workerData.fd);
    globalThis.mem = c.allocMemory(1 << 20, { hugepages: 'never', name: 'worker' });
    w.wait(-1, (f) => {
      parentPort.postMessage({ fired: f, count: c.eventfdRead(workerData.fd) });
      w.wait(-1, () => {});
    });
    parentPort.postMessage('armed');`;
  for (let round = 0; round < 5; round++) {
    const fd = core.eventfd();
    try {
      const worker = new Worker(src, { eval: true, workerData: { fd } });
      const fired = await new Promise<{ fired: number; count: number }>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('message', (m) => {
          if (m === 'armed') core.eventfdWrite(fd, 3);
          else resolve(m);
        });
      });
      assert.equal(fired, { fired: fd, count: 3 });
      assert.is(await worker.terminate(), 1);
    } finally {
      core.closeFd(fd);
    }
  }
});

test('memifRx/memifTx (the per-burst calls) refuse bad arguments saying which, and an unknown handle bursts nothing', () => {
  const c = core as unknown as {
    memifRx(h: unknown, q: unknown, out: unknown, max?: unknown): number;
    memifTx(h: unknown, q: unknown, bufs: unknown, off: unknown, n: unknown): number;
  };
  const out = new Uint32Array(8);
  assert.throws(() => c.memifRx(0, 0, new Float64Array(8), 8), /memifRx: out must be a Uint32Array/);
  assert.throws(
    () => c.memifRx('x', 0, out, 8),
    /memifRx\(handle, queue, out, max\): handle, queue and max must be numbers/,
  );
  assert.throws(() => c.memifRx(0, 0, out), /must be numbers/);
  assert.throws(() => c.memifTx(0, 0, [1, 2], 0, 1), /memifTx: bufs must be a Uint32Array/);
  assert.throws(
    () => c.memifTx(0, 0, out, 4, 5),
    (e: Error) => e instanceof RangeError && /off \+ n beyond bufs/.test(e.message),
  );
  assert.throws(
    () => c.memifTx(0, null, out, 0, 1),
    /memifTx\(handle, queue, bufs, off, n\): handle, queue, off and n must be numbers/,
  );
  // No memif has handle 1e6: nothing received or taken, nothing written.
  out.fill(7);
  assert.is(c.memifRx(1e6, 0, out, 8), 0);
  assert.is(c.memifTx(1e6, 0, out, 0, 8), 0);
  assert.equal([...out], new Array(8).fill(7));
});

test('futexWake wakes a thread of another process asleep on a word of shared memory; bad arguments refused', async () => {
  const core = loadCore();
  const mem = core.allocMemory(4096, { hugepages: 'never', name: 'futex-test' });
  const u32 = new Uint32Array(mem.buffer);
  assert.is(core.futexWake(u32, 3), 0, 'nobody asleep: none woken');
  // A python3 child maps the same memfd and waits (FUTEX_WAIT, shared) on word 3 while it is 0,
  // for at most 5 s; it prints how long it slept.
  const script = [
    'import ctypes, mmap, os, sys, time',
    'fd = os.open(sys.argv[1], os.O_RDWR)',
    'm = mmap.mmap(fd, 4096)',
    'addr = ctypes.addressof(ctypes.c_char.from_buffer(m)) + 12',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'class TS(ctypes.Structure): _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]',
    'print("waiting", flush=True)',
    't = time.monotonic()',
    'libc.syscall(202, ctypes.c_void_p(addr), 0, 0, ctypes.byref(TS(5, 0)), None, 0)',
    'print(f"slept {time.monotonic() - t:.3f}", flush=True)',
  ].join('\n');
  const child = spawn('python3', ['-c', script, `/proc/${process.pid}/fd/${mem.fd}`]);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const closed = new Promise<void>((r) => child.on('close', () => r()));
  const deadline = Date.now() + 10_000;
  while (!out.includes('waiting') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  let woken = 0;
  // The child may not be in its wait yet when it has printed: wake until it says it woke.
  while (!out.includes('slept') && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    woken += core.futexWake(u32, 3);
  }
  await closed;
  const slept = Number(/slept ([\d.]+)/.exec(out)?.[1]);
  assert.is(woken, 1, `one thread woken\n${out}`);
  assert.ok(slept < 4, `woken, not timed out after 5 s (${slept} s)\n${out}`);
  assert.throws(() => core.futexWake(new Int32Array(4) as unknown as Uint32Array, 0), /u32 must be a Uint32Array/);
  assert.throws(() => core.futexWake(u32, 1024), /futexWake: index must be in \[0, 1023\], got 1024/);
  assert.throws(() => core.futexWake(u32, -1), /index must be in \[0, 1023\], got -1/);
  assert.throws(() => core.futexWake(u32, 1.5), /index must be an integer, got the number 1.5/);
  assert.throws(() => core.futexWake(u32, '1' as unknown as number), /index must be a number/);
  assert.throws(() => core.futexWake(new Uint32Array(0), 0), /index must be in \[0, -1\], got 0/);
});

test.run();
