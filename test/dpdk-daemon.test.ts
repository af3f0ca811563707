/**
 * The dpdk driver in a daemon of its own: the README's DPDK line (config/examples/dpdk-memif.yaml,
 * DPDK's net_memif client) beside the embedded default (our memif server) in another process, and
 * the README's rdmactl session run as written across the two. Then what a daemon says when the
 * EAL or the device is wrong. Needs dpdk.node (skips, or fails under CI=true, without it).
 */
import { skip, test } from './harness.ts';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NATIVE_BUILD_DIR } from '../native/addons.ts';
import { bash, blocks, daemon, DPDK_LINE, README, RDMACTL, ROOT } from './readme-helpers.ts';
import { withTeardown } from './helpers.ts';

const ready = () => {
  if (!existsSync(`${NATIVE_BUILD_DIR}dpdk.node`)) skip('dpdk.node was not built (install libdpdk-dev, npm run build)');
};

test("the README's dpdk peer beside the embedded default: the rdmactl session runs as written across them", async () => {
  ready();
  assert.ok(
    blocks(README).some((b) => b === DPDK_LINE),
    'the README shows the line',
  );
  const a = await daemon([]);
  let b: Awaited<ReturnType<typeof daemon>> | null = null;
  await withTeardown(
    async () => {
      b = await daemon([], DPDK_LINE);
      const B = 'node bin/rdmactl.mjs --api http://127.0.0.1:7071';
      const up = bash(
        `for i in $(seq 100); do ${B} show interfaces | grep -q " up " && exit 0; sleep 0.1; done; exit 1`,
      );
      assert.is(up.code, 0, `the DPDK memif client connected:\n${up.out}\n${b.out}`);
      const hw = bash(`${B} show hardware`);
      assert.match(hw.out, /net_memif/, `B's port is DPDK's net_memif:\n${hw.out}`);
      const ctl = bash(blocks(README).find((x) => x.startsWith(RDMACTL)) as string);
      assert.is(ctl.code, 0, ctl.out);
      assert.match(
        ctl.out,
        /Statistics: 3 sent, 3 received, 0% packet loss/,
        `ping from A to the DPDK side:\n${ctl.out.slice(0, 2000)}`,
      );
      assert.match(ctl.out, /wr-id "s1" qpn \d+ send success byte-len 5/);
      assert.match(ctl.out, /wr-id "r1" qpn \d+ recv success byte-len 5/);
      assert.match(ctl.out, /^hello$/m);
      for (const w of ['w1', 'r2', 'f1']) assert.match(ctl.out, new RegExp(`wr-id "${w}" qpn \\d+ \\S+ success`));
      assert.match(ctl.out, /^18515\nqp \d+ rts 10\.10\.0\.1:\d+ -> 10\.10\.0\.2:\d+$/m, 'the connection manager');
    },
    async () => {
      a.proc.kill('SIGTERM');
      b?.proc.kill('SIGTERM');
      assert.is(await a.exit, 0, a.out);
      if (b) {
        // B runs under npm: what counts is the daemon's own way out (npm's exit status is npm's),
        // read once every holder of the output pipes has gone.
        await b.closed;
        assert.match(b.out, /stopped \(\d+ QPs? closed with FIN\); every buffer back in the pool/, b.out);
        // net_memif's "Failed to register mp action callback" (no multi-process IPC without shared
        // files) is explained once, never shown as DPDK's error.
        assert.not.match(b.out, /Failed to register mp action callback/, b.out);
        assert.is(b.out.split('net_memif cannot register its multi-process callback').length, 2, b.out);
      }
    },
  );
});

test("a daemon refuses a bad EAL argument and an unknown PCI device with DPDK's words, naming the interface and line", () => {
  ready();
  const dir = mkdtempSync(join(tmpdir(), 'dpdk-daemon-'));
  const start = (device: string, ealArgs: string[]) => {
    const f = join(dir, 'bad.yaml');
    writeFileSync(
      f,
      [
        'api:',
        '  listen: 127.0.0.1:7079',
        'interfaces:',
        '  - name: d0',
        '    driver: dpdk',
        `    dpdk: { device: "${device}", eal-args: ${JSON.stringify(ealArgs)} }`,
        '    address: 10.1.0.1/24',
      ].join('\n'),
    );
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'bin/main.ts', 'start', '--config', f], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    return { code: r.status, out: r.stdout + r.stderr };
  };
  try {
    const eal = start('net_ring0', ['--no-such-eal-option']);
    assert.is(eal.code, 1, eal.out);
    assert.match(
      eal.out,
      /error: interface d0 \(line 4\): DPDK EAL: rte_eal_init: Invalid 'command line' arguments/,
      eal.out,
    );
    assert.not.match(eal.out, /Usage:/, "EAL's usage text is not dumped on the daemon's output");
    const pci = start('0000:ff:1f.7', []);
    assert.is(pci.code, 1, pci.out);
    assert.match(
      pci.out,
      /error: interface d0 \(line 4\): DPDK device "0000:ff:1f\.7": rte_dev_probe\("0000:ff:1f\.7"\): No such device/,
      pci.out,
    );
    assert.not.match(pci.out, /Requested device \S+ cannot be used/, 'EAL probed no other PCI device of the machine');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
