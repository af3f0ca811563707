import { test } from './harness.ts';
import * as assert from 'uvu/assert';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, parseConfig, STARTUP_CONFIG, type ConfigIssue } from '../config/load.ts';
import { schemaReference, SCHEMA } from '../config/schema.ts';
import { README, withReference } from '../config/update-readme.ts';
import { DRIVER_KINDS, type Config } from '../config/types.ts';
import { validateFaultConfig } from '../drivers/fault.ts';

const root = new URL('..', import.meta.url).pathname;

/** The ConfigError `f` throws (fails the test when it throws none). */
function catchConfigError(f: () => unknown): ConfigError {
  try {
    f();
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  return assert.unreachable('no ConfigError') as never;
}

/** The ConfigError `parseConfig` throws for `yaml`. */
function configError(yaml: string): ConfigError {
  return catchConfigError(() => parseConfig(yaml, 't.yaml'));
}

// One memif interface, lines 1-4; a case adds lines 5... (4 spaces in: more keys of interfaces[0]).
const M = 'interfaces:\n  - name: m0\n    driver: memif\n    memif: {socket: s}\n';
// The same with an address on line 5.
const MA = `${M}    address: 10.0.0.1/24\n`;
const IF_KEYS =
  'name, driver, memif, af_packet, pcap, pipe, dpdk, ibverbs, mlx5dv, mac, address, gateway, mtu, rx-queues, worker, rx-placement, congestion, rx-mode, rx-queue-size, tx-queue-size, fault';
const TOP_KEYS = 'api, cpu, buffers, log, interfaces, neighbors, rdma, capture, verbs, trace';
const CIDR = 'an IPv4 host address with prefix length, a.b.c.d/N with N in 0..32';
const MAC = 'a unicast MAC address xx:xx:xx:xx:xx:xx';
const LISTEN = 'host:port with an IPv4 address, localhost or [IPv6] and a port in 0..65535';
const IFNAME = 'a lowercase letter then up to 31 of a-z, 0-9, _ and -';

/** [what it shows, YAML, the whole ConfigError message]. One row per message the loader has. */
const CASES: [string, string, string][] = [
  // ---- YAML itself
  [
    'syntax: unclosed flow sequence (and so mapping): every syntax error',
    'rdma: {port-range: [1, 2\nlog: {}\n',
    't.yaml:2:1: YAML syntax error: Flow sequence in block collection must be sufficiently indented and end with a ]\n' +
      't.yaml:2:1: YAML syntax error: Flow map in block collection must be sufficiently indented and end with a }',
  ],
  [
    'syntax: duplicate key',
    'log: {level: info}\nlog: {level: warn}\n',
    't.yaml:2:1: YAML syntax error: Map keys must be unique',
  ],
  [
    'syntax: tab indentation',
    'api:\n\tlisten: 127.0.0.1:1\n',
    't.yaml:2:1: YAML syntax error: Tabs are not allowed as indentation',
  ],
  [
    'syntax: two documents',
    'log: {}\n---\ntrace: {}\n',
    't.yaml:2:1: YAML syntax error: Source contains multiple documents; please use YAML.parseAllDocuments()',
  ],
  [
    'YAML warning: unknown tag',
    'log: {level: !!foo info}\n',
    't.yaml:1:14: YAML: Unresolved tag: tag:yaml.org,2002:foo',
  ],
  // ---- the top level
  ['top level: a list', '- api\n- log\n', `t.yaml:1:1: the top level is a list (expected a mapping of: ${TOP_KEYS})`],
  [
    'top level: a string',
    'hello\n',
    `t.yaml:1:1: the top level is the string "hello" (expected a mapping of: ${TOP_KEYS})`,
  ],
  ['a key that is a list', '? [a, b]\n: 1\n', `t.yaml:1:3: got a list as a key (expected one of: ${TOP_KEYS})`],
  // ---- unknown keys, at every level
  ['unknown key: top', 'log: {}\nmtu: 9000\n', `t.yaml:2:1: mtu: unknown key "mtu" (expected one of: ${TOP_KEYS})`],
  [
    'unknown key: an Object.prototype name',
    'log: {}\nconstructor: 1\n',
    `t.yaml:2:1: constructor: unknown key "constructor" (expected one of: ${TOP_KEYS})`,
  ],
  [
    'unknown key: api',
    'api: {port: 1}\n',
    't.yaml:1:7: api.port: unknown key "port" (expected one of: listen, token, users, group)',
  ],
  [
    'unknown key: cpu',
    'cpu: {threads: 2}\n',
    't.yaml:1:7: cpu.threads: unknown key "threads" (expected one of: workers, main-core, corelist-workers, poll, idle-poll-us, idle-yield)',
  ],
  [
    'unknown key: buffers',
    'buffers:\n  size: 2048\n',
    't.yaml:2:3: buffers.size: unknown key "size" (expected one of: count, data-size)',
  ],
  ['unknown key: log', 'log: {file: x}\n', 't.yaml:1:7: log.file: unknown key "file" (expected one of: level)'],
  [
    'unknown key: trace',
    'trace: {max: 1}\n',
    't.yaml:1:9: trace.max: unknown key "max" (expected one of: max-packets)',
  ],
  [
    'unknown key: rdma',
    'rdma: {max-qp: 1}\n',
    't.yaml:1:8: rdma.max-qp: unknown key "max-qp" (expected one of: port-range, multicast-port, max-qps, max-mrs, max-pds, max-cqs, max-srqs, max-mr-bytes, max-cq-entries, max-wr-slots, cm-retry-ms, cm-timeout-ms, cm-backlog, cm-half-open-ms, congestion, trp)',
  ],
  [
    'unknown key: rdma.trp',
    'rdma: {trp: {rto: 5}}\n',
    't.yaml:1:14: rdma.trp.rto: unknown key "rto" (expected one of: window, rto-min-ms, rto-max-ms, rto-init-ms, max-retries, ack-delay-us)',
  ],
  [
    'unknown key: an interface',
    `${M}    mtuu: 9000\n`,
    `t.yaml:5:5: interfaces[0].mtuu: unknown key "mtuu" (expected one of: ${IF_KEYS})`,
  ],
  [
    'unknown key: memif',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif: {socket: s, mode: x}\n',
    't.yaml:4:24: interfaces[0].memif.mode: unknown key "mode" (expected one of: socket, role, id, secret, buffer-size, udp-checksum)',
  ],
  [
    'unknown key: af_packet',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: v0, ring: 1}\n',
    't.yaml:4:37: interfaces[0].af_packet.ring: unknown key "ring" (expected one of: host-interface, promisc, tx-mode, block-size, qdisc-bypass, rx-ring, gso, block-timeout-ms)',
  ],
  [
    'unknown key: pcap',
    'interfaces:\n  - name: p0\n    driver: pcap\n    pcap: {rx-file: a, file: b}\n',
    't.yaml:4:24: interfaces[0].pcap.file: unknown key "file" (expected one of: rx-file, tx-file, rate, loop)',
  ],
  [
    'unknown key: pipe',
    'interfaces:\n  - name: p0\n    driver: pipe\n    pipe: {peer: p1, ring: 8}\n',
    't.yaml:4:22: interfaces[0].pipe.ring: unknown key "ring" (expected one of: peer)',
  ],
  [
    'unknown key: dpdk',
    'interfaces:\n  - name: e0\n    driver: dpdk\n    dpdk: {device: x, eal: []}\n',
    't.yaml:4:23: interfaces[0].dpdk.eal: unknown key "eal" (expected one of: device, eal-args)',
  ],
  [
    'unknown key: ibverbs',
    'interfaces:\n  - name: e0\n    driver: ibverbs\n    ibverbs: {device: x, qp: 1}\n',
    't.yaml:4:26: interfaces[0].ibverbs.qp: unknown key "qp" (expected one of: device, host-interface, port, promisc)',
  ],
  [
    'unknown key: mlx5dv',
    'interfaces:\n  - name: e0\n    driver: mlx5dv\n    mlx5dv: {device: x, qp: 1}\n',
    't.yaml:4:25: interfaces[0].mlx5dv.qp: unknown key "qp" (expected one of: device, host-interface, port, promisc, striding, cqe-compression)',
  ],
  [
    'unknown key: fault',
    `${M}    fault: {drop: 0.1}\n`,
    't.yaml:5:13: interfaces[0].fault.drop: unknown key "drop" (expected one of: direction, seed, loss, reorder, reorder-depth, reorder-delay-us, duplicate, corrupt, ce)',
  ],
  [
    'unknown key: a neighbor',
    `${MA}neighbors:\n  - {interface: m0, address: 10.0.0.2, mac: "02:00:00:00:00:02", vlan: 5}\n`,
    't.yaml:7:66: neighbors[0].vlan: unknown key "vlan" (expected one of: interface, address, mac)',
  ],
  // ---- missing keys: at the mapping that lacks them
  [
    'missing: interface name',
    'interfaces:\n  - driver: memif\n    memif: {socket: s}\n',
    `t.yaml:2:5: interfaces[0].name: missing (expected ${IFNAME})`,
  ],
  [
    'missing: interface driver',
    'interfaces:\n  - name: m0\n',
    't.yaml:2:5: interfaces[0].driver: missing (expected one of: memif, af_packet, pcap, pipe, dpdk, ibverbs, mlx5dv)',
  ],
  [
    'missing: memif socket',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif: {role: client}\n',
    't.yaml:4:12: interfaces[0].memif.socket: missing (expected a non-empty string)',
  ],
  [
    'missing: memif socket, empty options',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif:\n',
    't.yaml:4:5: interfaces[0].memif.socket: missing (expected a non-empty string)',
  ],
  [
    'missing: af_packet host-interface',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {promisc: true}\n',
    't.yaml:4:16: interfaces[0].af_packet.host-interface: missing (expected a Linux interface name of 1..15 characters without /, : or white space)',
  ],
  [
    'missing: pipe peer',
    'interfaces:\n  - name: p0\n    driver: pipe\n    pipe: {}\n',
    `t.yaml:4:11: interfaces[0].pipe.peer: missing (expected ${IFNAME})`,
  ],
  [
    'missing: dpdk device',
    'interfaces:\n  - name: e0\n    driver: dpdk\n    dpdk: {eal-args: [-l, "0"]}\n',
    't.yaml:4:11: interfaces[0].dpdk.device: missing (expected a non-empty string)',
  ],
  [
    'missing: ibverbs device',
    'interfaces:\n  - name: e0\n    driver: ibverbs\n    ibverbs: {port: 1}\n',
    't.yaml:4:14: interfaces[0].ibverbs: names no device (expected device: mlx5_0 or host-interface: enp59s0f0)',
  ],
  [
    'missing: mlx5dv device',
    'interfaces:\n  - name: e0\n    driver: mlx5dv\n    mlx5dv: {port: 2}\n',
    't.yaml:4:13: interfaces[0].mlx5dv: names no device (expected device: mlx5_0 or host-interface: enp59s0f0)',
  ],
  [
    'both: mlx5dv device and host-interface',
    'interfaces:\n  - name: e0\n    driver: mlx5dv\n    mlx5dv: {device: mlx5_0, host-interface: enp1s0}\n',
    't.yaml:4:46: interfaces[0].mlx5dv.host-interface: given with device: one names the device (expected device or host-interface, not both)',
  ],
  [
    'missing: neighbor mac',
    `${MA}neighbors:\n  - {interface: m0, address: 10.0.0.2}\n`,
    `t.yaml:7:5: neighbors[0].mac: missing (expected ${MAC})`,
  ],
  [
    "missing: the driver's options",
    'interfaces:\n  - name: p0\n    driver: pipe\n',
    't.yaml:2:5: interfaces[0].pipe: missing, driver pipe takes its options here (expected a mapping of: peer)',
  ],
  [
    "missing: the driver's options (af_packet)",
    'interfaces:\n  - name: h0\n    driver: af_packet\n',
    't.yaml:2:5: interfaces[0].af_packet: missing, driver af_packet takes its options here (expected a mapping of: host-interface, promisc, tx-mode, block-size, qdisc-bypass, rx-ring, gso, block-timeout-ms)',
  ],
  // ---- wrong types
  [
    'type: a number for a string',
    'api:\n  listen: 7070\n',
    `t.yaml:2:11: api.listen: got the number 7070 (expected ${LISTEN})`,
  ],
  [
    'type: a string for an integer',
    'buffers: {count: "64"}\n',
    't.yaml:1:18: buffers.count: got the string "64" (expected an integer in 64..1048576)',
  ],
  [
    'type: yes is a string in YAML 1.2',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: veth0, promisc: yes}\n',
    't.yaml:4:49: interfaces[0].af_packet.promisc: got the string "yes" (expected true or false)',
  ],
  [
    'type: a boolean for an enum',
    'log: {level: true}\n',
    't.yaml:1:14: log.level: got the boolean true (expected one of: error, warn, info, debug)',
  ],
  [
    'type: no value (empty), at the key',
    'trace:\n  max-packets:\n',
    't.yaml:2:3: trace.max-packets: got no value (expected an integer in 1..1000000)',
  ],
  [
    'type: no value (null)',
    'trace: {max-packets: null}\n',
    't.yaml:1:22: trace.max-packets: got no value (expected an integer in 1..1000000)',
  ],
  [
    'type: a list for a scalar',
    'log: {level: [info]}\n',
    't.yaml:1:14: log.level: got a list (expected one of: error, warn, info, debug)',
  ],
  [
    'type: a mapping for a scalar',
    'api: {listen: {host: a}}\n',
    `t.yaml:1:15: api.listen: got a mapping (expected ${LISTEN})`,
  ],
  [
    'type: a number for a nullable string',
    `${M}    mac: 12345\n`,
    `t.yaml:5:10: interfaces[0].mac: got the number 12345 (expected null or ${MAC})`,
  ],
  [
    'type: a section that is not a mapping',
    'api: 5\n',
    't.yaml:1:6: api: got the number 5 (expected a mapping of: listen, token, users, group)',
  ],
  [
    'type: interfaces that is not a list',
    'interfaces: {name: m0}\n',
    't.yaml:1:13: interfaces: got a mapping (expected a list of interfaces)',
  ],
  [
    'type: an interface that is not a mapping',
    'interfaces:\n  - m0\n',
    't.yaml:2:5: interfaces[0]: got the string "m0" (expected a mapping with name, driver and the driver\'s options)',
  ],
  [
    'type: a list item',
    'interfaces:\n  - name: e0\n    driver: dpdk\n    dpdk: {device: x, eal-args: [-l, 5]}\n',
    't.yaml:4:38: interfaces[0].dpdk.eal-args[1]: got the number 5 (expected a non-empty string)',
  ],
  [
    'type: port-range of 3 items',
    'rdma: {port-range: [1, 2, 3]}\n',
    't.yaml:1:20: rdma.port-range: got a list of 3 items (expected [lo, hi], two ports in 1..65535 with lo <= hi)',
  ],
  [
    'type: port-range of 1 item',
    'rdma: {port-range: [1]}\n',
    't.yaml:1:20: rdma.port-range: got a list of 1 item (expected [lo, hi], two ports in 1..65535 with lo <= hi)',
  ],
  // ---- numbers
  [
    'number: not finite',
    'rdma: {cm-retry-ms: .inf}\n',
    't.yaml:1:21: rdma.cm-retry-ms: Infinity is not a finite number (expected a number > 0)',
  ],
  [
    'number: not an integer',
    `${M}    mtu: 1500.5\n`,
    't.yaml:5:10: interfaces[0].mtu: 1500.5 is not an integer (expected an integer in 68..65535)',
  ],
  [
    'number: integer above the range',
    `${M}    mtu: 100000\n`,
    't.yaml:5:10: interfaces[0].mtu: 100000 is out of range (expected an integer in 68..65535)',
  ],
  [
    'number: integer below the range',
    `${M}    mtu: 67\n`,
    't.yaml:5:10: interfaces[0].mtu: 67 is out of range (expected an integer in 68..65535)',
  ],
  [
    'number: > 0',
    'rdma: {cm-timeout-ms: 0}\n',
    't.yaml:1:23: rdma.cm-timeout-ms: 0 is out of range (expected a number > 0)',
  ],
  [
    'number: a probability',
    `${M}    fault: {loss: 1.5}\n`,
    't.yaml:5:19: interfaces[0].fault.loss: 1.5 is out of range (expected a number in 0..1)',
  ],
  [
    'number: >= 0',
    'interfaces:\n  - name: p0\n    driver: pcap\n    pcap: {rx-file: a, rate: -1}\n',
    't.yaml:4:30: interfaces[0].pcap.rate: -1 is out of range (expected a number >= 0)',
  ],
  [
    'number: integer >= 0',
    'interfaces:\n  - name: p0\n    driver: pcap\n    pcap: {rx-file: a, loop: -1}\n',
    't.yaml:4:30: interfaces[0].pcap.loop: -1 is out of range (expected an integer >= 0)',
  ],
  [
    'number: a u32',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif: {socket: s, id: 4294967296}\n',
    't.yaml:4:28: interfaces[0].memif.id: 4294967296 is out of range (expected an integer in 0..4294967295)',
  ],
  [
    'number: a power of 2',
    `${M}    rx-queue-size: 1000\n`,
    't.yaml:5:20: interfaces[0].rx-queue-size: 1000 is not a power of 2 (expected a power of 2 in 16..65536)',
  ],
  [
    'number: a power of 2 below the range',
    `${M}    tx-queue-size: 8\n`,
    't.yaml:5:20: interfaces[0].tx-queue-size: 8 is out of range (expected a power of 2 in 16..65536)',
  ],
  [
    'number: a multiple of 64',
    'buffers: {data-size: 2000}\n',
    't.yaml:1:22: buffers.data-size: 2000 is not a multiple of 64 (expected a multiple of 64 in 256..65536)',
  ],
  [
    'number: fault reorder-delay-us as fault.ts has it',
    `${M}    fault: {reorder-delay-us: 0}\n`,
    't.yaml:5:31: interfaces[0].fault.reorder-delay-us: 0 is out of range (expected a number in 1..10000000)',
  ],
  // ---- strings and choices
  [
    'enum: not a choice',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif: {socket: s, role: master}\n',
    't.yaml:4:30: interfaces[0].memif.role: "master" is not a valid choice (expected one of: server, client)',
  ],
  [
    'enum: unknown driver',
    'interfaces:\n  - name: m0\n    driver: vhost\n    memif: {socket: s}\n',
    't.yaml:3:13: interfaces[0].driver: "vhost" is not a valid choice (expected one of: memif, af_packet, pcap, pipe, dpdk, ibverbs, mlx5dv)',
  ],
  [
    'string: empty',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif: {socket: ""}\n',
    't.yaml:4:21: interfaces[0].memif.socket: "" is empty (expected a non-empty string)',
  ],
  [
    'string: too long',
    'interfaces:\n  - name: m0\n    driver: memif\n    memif: {socket: s, secret: abcdefghijklmnopqrstuvwxy}\n',
    't.yaml:4:32: interfaces[0].memif.secret: "abcdefghijklmnopqrstuvwxy" is 25 characters long (expected a string of 1..24 characters)',
  ],
  [
    'string: interface name',
    'interfaces:\n  - name: Memif0\n    driver: memif\n    memif: {socket: s}\n',
    `t.yaml:2:11: interfaces[0].name: "Memif0" is not a valid interface name (expected ${IFNAME})`,
  ],
  [
    'string: interface name of 33 characters',
    `interfaces:\n  - name: ${'a'.repeat(33)}\n    driver: memif\n    memif: {socket: s}\n`,
    `t.yaml:2:11: interfaces[0].name: "${'a'.repeat(33)}" is not a valid interface name (expected ${IFNAME})`,
  ],
  [
    'string: host interface with a slash',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: eth/0}\n',
    't.yaml:4:33: interfaces[0].af_packet.host-interface: "eth/0" is not a Linux interface name (expected a Linux interface name of 1..15 characters without /, : or white space)',
  ],
  [
    'af_packet: rx-ring v2 with tx-mode ring',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: v0, tx-mode: ring, rx-ring: v2}\n',
    "t.yaml:4:61: interfaces[0].af_packet.rx-ring: rx-ring v2 with tx-mode ring (the tx ring is TPACKET_V3's: one socket has one version) (expected tx-mode: sendmmsg with rx-ring: v2)",
  ],
  [
    'af_packet: gso with tx-mode ring',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: v0, tx-mode: ring, gso: true}\n',
    't.yaml:4:57: interfaces[0].af_packet.gso: gso with rx-ring v3 or tx-mode ring (the virtio_net_hdr goes with TPACKET_V2 slots and sendmmsg) (expected gso: true with rx-ring auto or v2 and tx-mode sendmmsg)',
  ],
  [
    'interface rx-mode: an unknown mode',
    'interfaces:\n  - name: p0\n    driver: pipe\n    pipe: {peer: q}\n    rx-mode: busy\n',
    't.yaml:5:14: interfaces[0].rx-mode: "busy" is not a valid choice (expected one of: adaptive, polling, interrupt)',
  ],
  [
    'af_packet: block-timeout-ms 0',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: v0, block-timeout-ms: 0}\n',
    't.yaml:4:55: interfaces[0].af_packet.block-timeout-ms: 0 is out of range (expected an integer in 1..1000)',
  ],
  [
    'string: host interface of 16 characters',
    'interfaces:\n  - name: h0\n    driver: af_packet\n    af_packet: {host-interface: abcdefghijklmnop}\n',
    't.yaml:4:33: interfaces[0].af_packet.host-interface: "abcdefghijklmnop" is 16 characters long (expected a Linux interface name of 1..15 characters without /, : or white space)',
  ],
  [
    'string: token with white space',
    'api: {token: "a b"}\n',
    't.yaml:1:14: api.token: "a b" contains white space (expected a non-empty string without white space)',
  ],
  [
    'string: empty token',
    'api: {token: ""}\n',
    't.yaml:1:14: api.token: "" is empty (expected a non-empty string without white space)',
  ],
  // ---- addresses
  [
    'address: no prefix length',
    `${M}    address: 10.0.0.1\n`,
    `t.yaml:5:14: interfaces[0].address: "10.0.0.1" is not an IPv4 address with a prefix length (expected ${CIDR})`,
  ],
  [
    'address: an octet over 255',
    `${M}    address: 10.0.0.256/24\n`,
    `t.yaml:5:14: interfaces[0].address: "10.0.0.256/24" is not an IPv4 address with a prefix length (expected ${CIDR})`,
  ],
  [
    'address: prefix length 33',
    `${M}    address: 10.0.0.1/33\n`,
    `t.yaml:5:14: interfaces[0].address: "10.0.0.1/33" has a prefix length out of range (expected ${CIDR})`,
  ],
  [
    'address: the network address',
    `${M}    address: 10.0.0.0/24\n`,
    `t.yaml:5:14: interfaces[0].address: "10.0.0.0/24" is the network address of 10.0.0.0/24 (expected ${CIDR})`,
  ],
  [
    'address: the broadcast address',
    `${M}    address: 10.0.0.255/24\n`,
    `t.yaml:5:14: interfaces[0].address: "10.0.0.255/24" is the broadcast address of 10.0.0.0/24 (expected ${CIDR})`,
  ],
  [
    'address: the broadcast address of a /30',
    `${M}    address: 10.0.0.3/30\n`,
    `t.yaml:5:14: interfaces[0].address: "10.0.0.3/30" is the broadcast address of 10.0.0.0/30 (expected ${CIDR})`,
  ],
  [
    'gateway: not an address',
    `${MA}    gateway: 10.0.0\n`,
    't.yaml:6:14: interfaces[0].gateway: "10.0.0" is not an IPv4 address (expected an IPv4 address a.b.c.d)',
  ],
  [
    'gateway: without an address',
    `${M}    gateway: 10.0.0.254\n`,
    't.yaml:5:14: interfaces[0].gateway: "10.0.0.254" needs an address on this interface (expected address: a.b.c.d/N on the interface)',
  ],
  [
    'gateway: outside the subnet',
    `${MA}    gateway: 10.0.1.1\n`,
    't.yaml:6:14: interfaces[0].gateway: "10.0.1.1" is outside m0\'s subnet 10.0.0.0/24 (expected an address in 10.0.0.0/24)',
  ],
  [
    'gateway: the interface itself',
    `${MA}    gateway: 10.0.0.1\n`,
    't.yaml:6:14: interfaces[0].gateway: "10.0.0.1" is m0\'s own address (expected another host in 10.0.0.0/24)',
  ],
  [
    'gateway: the broadcast address',
    `${MA}    gateway: 10.0.0.255\n`,
    't.yaml:6:14: interfaces[0].gateway: "10.0.0.255" is the broadcast address of 10.0.0.0/24 (expected a host address in 10.0.0.0/24)',
  ],
  [
    'gateway: the network address',
    `${MA}    gateway: 10.0.0.0\n`,
    't.yaml:6:14: interfaces[0].gateway: "10.0.0.0" is the network address of 10.0.0.0/24 (expected a host address in 10.0.0.0/24)',
  ],
  [
    'mac: not a MAC',
    `${M}    mac: 02:fe:00:00:00\n`,
    `t.yaml:5:10: interfaces[0].mac: "02:fe:00:00:00" is not a MAC address (expected ${MAC})`,
  ],
  [
    'mac: dashes',
    `${M}    mac: 02-fe-00-00-00-01\n`,
    `t.yaml:5:10: interfaces[0].mac: "02-fe-00-00-00-01" is not a MAC address (expected ${MAC})`,
  ],
  [
    'mac: multicast',
    `${M}    mac: 03:00:00:00:00:01\n`,
    `t.yaml:5:10: interfaces[0].mac: "03:00:00:00:00:01" is a multicast address (expected ${MAC})`,
  ],
  [
    'mac: all zeros',
    `${M}    mac: 00:00:00:00:00:00\n`,
    `t.yaml:5:10: interfaces[0].mac: "00:00:00:00:00:00" is all zeros (expected ${MAC})`,
  ],
  [
    'listen: no port',
    'api: {listen: 127.0.0.1}\n',
    `t.yaml:1:15: api.listen: "127.0.0.1" is not host:port (expected ${LISTEN})`,
  ],
  [
    'listen: a host name',
    'api: {listen: "example.com:80"}\n',
    `t.yaml:1:15: api.listen: "example.com:80" has a host that is not an IPv4 address, localhost or [IPv6] (expected ${LISTEN})`,
  ],
  [
    'listen: a bad IPv6 address',
    'api: {listen: "[::g]:80"}\n',
    `t.yaml:1:15: api.listen: "[::g]:80" has a host that is not an IPv4 address, localhost or [IPv6] (expected ${LISTEN})`,
  ],
  [
    'listen: port 65536',
    'api: {listen: "127.0.0.1:65536"}\n',
    `t.yaml:1:15: api.listen: "127.0.0.1:65536" has a port out of range (expected ${LISTEN})`,
  ],
  // ---- cpu
  [
    'workers: 65',
    'cpu: {workers: 65}\n',
    't.yaml:1:16: cpu.workers: 65 is out of range (expected an integer in 0..64)',
  ],
  [
    'workers: -1',
    'cpu: {workers: -1}\n',
    't.yaml:1:16: cpu.workers: -1 is out of range (expected an integer in 0..64)',
  ],
  [
    'corelist-workers: not a list',
    'cpu: {workers: 2, corelist-workers: "1;2"}\n',
    't.yaml:1:37: cpu.corelist-workers: "1;2" is not a CPU number or a range a-b (expected CPU numbers and ranges, e.g. 1-3 or 1,3)',
  ],
  [
    'corelist-workers: a range going down',
    'cpu: {workers: 2, corelist-workers: "3-1"}\n',
    't.yaml:1:37: cpu.corelist-workers: range 3-1 goes down (expected CPU numbers and ranges, e.g. 1-3 or 1,3)',
  ],
  [
    'corelist-workers: as many CPUs as workers',
    'cpu: {workers: 2, corelist-workers: "1-3"}\n',
    't.yaml:1:37: cpu.corelist-workers: names 3 CPUs for 2 workers (expected 2 CPUs (one per worker))',
  ],
  [
    'main-core: out of range',
    'cpu: {main-core: 5000}\n',
    't.yaml:1:18: cpu.main-core: 5000 is out of range (expected an integer in 0..1023)',
  ],
  [
    'interface worker without workers',
    'interfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, worker: 0}\n',
    't.yaml:2:59: interfaces[0].worker: 0 with cpu.workers 0 (no worker threads) (expected cpu.workers >= 1, or no worker key)',
  ],
  [
    'interface worker beyond the workers',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, worker: 2}\n',
    't.yaml:3:59: interfaces[0].worker: 2 but cpu.workers is 2 (expected a worker 0..1)',
  ],
  [
    'rx-placement: one worker per queue',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, rx-queues: 2, rx-placement: [0]}\n',
    't.yaml:3:79: interfaces[0].rx-placement: names 1 worker for 2 rx queues (expected one worker per rx queue)',
  ],
  [
    'rx-placement: a worker beyond the workers',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, rx-queues: 2, rx-placement: [0, 2]}\n',
    't.yaml:3:79: interfaces[0].rx-placement: worker 2 but cpu.workers is 2 (expected workers 0..1)',
  ],
  [
    'rx-placement: queue 0 on another worker than the interface',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, worker: 0, rx-queues: 2, rx-placement: [1, 0]}\n',
    "t.yaml:3:90: interfaces[0].rx-placement: puts queue 0 on worker 1 but worker is 0 (expected queue 0 on the interface's worker (it runs the control channel))",
  ],
  [
    'rx-placement: queues of another driver over workers',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: p0, driver: pipe, pipe: {peer: p1}, rx-queues: 2, rx-placement: [0, 1]}\n  - {name: p1, driver: pipe, pipe: {peer: p0}}\n',
    't.yaml:3:76: interfaces[0].rx-placement: spreads the queues of this pipe interface over workers (expected one worker for all its queues (only memif and af_packet interfaces can be received by several workers))',
  ],
  [
    'af_packet: more queues than workers',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: h0, driver: af_packet, af_packet: {host-interface: eth9}, rx-queues: 3}\n',
    "t.yaml:3:81: interfaces[0].rx-queues: 3 on an af_packet interface with cpu.workers 2 (expected at most one queue per worker (each is one worker's socket, taking its QP numbers by UDP port))",
  ],
  [
    'af_packet: one worker for two of its queues',
    'cpu: {workers: 2}\ninterfaces:\n  - {name: h0, driver: af_packet, af_packet: {host-interface: eth9}, rx-queues: 2, rx-placement: [1, 1]}\n',
    "t.yaml:3:98: interfaces[0].rx-placement: names a worker twice (expected distinct workers: each af_packet queue is one worker's socket)",
  ],
  [
    'poll: an unknown mode',
    'cpu: {poll: busy}\n',
    't.yaml:1:13: cpu.poll: "busy" is not a valid choice (expected one of: adaptive, polling, interrupt)',
  ],
  [
    'idle-poll-us: too long',
    'cpu: {idle-poll-us: 2000000}\n',
    't.yaml:1:21: cpu.idle-poll-us: 2000000 is out of range (expected an integer in 0..1000000)',
  ],
  // ---- interfaces with each other
  [
    'duplicate interface name',
    `${M}  - name: m0\n    driver: memif\n    memif: {socket: s2}\n`,
    't.yaml:5:11: interfaces[1].name: "m0" is already the name of interfaces[0] (expected a unique name)',
  ],
  [
    'two long names with one RDMA device name (rg_ + 6 characters + a 20-bit hash)',
    'interfaces:\n  - name: longif-11fr-x\n    driver: memif\n    memif: {socket: s}\n  - name: longif-124a-x\n    driver: memif\n    memif: {socket: s2}\n',
    't.yaml:5:11: interfaces[1].name: "longif-124a-x" gets the RDMA device name rg_longif-68591, as interfaces[0] does (expected another name (its first 6 characters, or one of 12 characters or fewer))',
  ],
  [
    "another driver's options",
    `${M}    pcap: {rx-file: a}\n`,
    't.yaml:5:5: interfaces[0].pcap: pcap options on a memif interface (expected only the memif key)',
  ],
  [
    'pcap: neither file',
    'interfaces:\n  - name: p0\n    driver: pcap\n    pcap: {rate: 10}\n',
    't.yaml:4:11: interfaces[0].pcap: neither rx-file nor tx-file is set (expected at least one of them)',
  ],
  [
    'pipe: its own peer',
    'interfaces:\n  - name: p0\n    driver: pipe\n    pipe: {peer: p0}\n',
    't.yaml:4:18: interfaces[0].pipe.peer: "p0" is this interface itself (expected the name of the other end)',
  ],
  [
    'pipe: the peer is not a pipe',
    `${M}  - name: p0\n    driver: pipe\n    pipe: {peer: m0}\n`,
    't.yaml:7:18: interfaces[1].pipe.peer: "m0" is a memif interface (expected a pipe interface in this file, or a name not in this file)',
  ],
  [
    "pipe: the peer's peer is another",
    'interfaces:\n  - {name: p0, driver: pipe, pipe: {peer: p1}}\n  - {name: p1, driver: pipe, pipe: {peer: p2}}\n',
    't.yaml:2:43: interfaces[0].pipe.peer: "p1" is a pipe whose peer is "p2" (expected a pipe whose peer is "p0")',
  ],
  // ---- neighbors
  [
    'neighbor: unknown interface',
    `${MA}neighbors:\n  - {interface: m1, address: 10.0.0.2, mac: "02:00:00:00:00:02"}\n`,
    't.yaml:7:17: neighbors[0].interface: "m1" is not a configured interface (expected one of: m0)',
  ],
  [
    'neighbor: no interfaces at all',
    'neighbors:\n  - {interface: m0, address: 10.0.0.2, mac: "02:00:00:00:00:02"}\n',
    't.yaml:2:17: neighbors[0].interface: "m0" is not a configured interface (expected an interface of interfaces:, there are none)',
  ],
  [
    'neighbor: interface without an address',
    `${M}neighbors:\n  - {interface: m0, address: 10.0.0.2, mac: "02:00:00:00:00:02"}\n`,
    't.yaml:6:17: neighbors[0].interface: "m0" has no IPv4 address (expected an interface with address: a.b.c.d/N)',
  ],
  [
    'neighbor: outside the subnet',
    `${MA}neighbors:\n  - {interface: m0, address: 10.1.0.2, mac: "02:00:00:00:00:02"}\n`,
    't.yaml:7:30: neighbors[0].address: "10.1.0.2" is outside m0\'s subnet 10.0.0.0/24 (expected an address in 10.0.0.0/24)',
  ],
  [
    'neighbor: the interface itself',
    `${MA}neighbors:\n  - {interface: m0, address: 10.0.0.1, mac: "02:00:00:00:00:02"}\n`,
    't.yaml:7:30: neighbors[0].address: "10.0.0.1" is m0\'s own address (expected another host in 10.0.0.0/24)',
  ],
  [
    'neighbor: the broadcast address',
    `${MA}neighbors:\n  - {interface: m0, address: 10.0.0.255, mac: "02:00:00:00:00:02"}\n`,
    't.yaml:7:30: neighbors[0].address: "10.0.0.255" is the broadcast address of 10.0.0.0/24 (expected a host address in 10.0.0.0/24)',
  ],
  [
    'neighbor: not an address',
    `${MA}neighbors:\n  - {interface: m0, address: 10.0.0.02, mac: "02:00:00:00:00:02"}\n`,
    't.yaml:7:30: neighbors[0].address: "10.0.0.02" is not an IPv4 address (expected an IPv4 address a.b.c.d)',
  ],
  [
    'neighbor: twice',
    `${MA}neighbors:\n  - {interface: m0, address: 10.0.0.2, mac: "02:00:00:00:00:02"}\n  - {interface: m0, address: 10.0.0.2, mac: "02:00:00:00:00:03"}\n`,
    't.yaml:8:5: neighbors[1]: m0 10.0.0.2 is already in neighbors[0] (expected one entry per interface and address)',
  ],
  // ---- rdma
  [
    'port-range: lo > hi',
    'rdma:\n  port-range: [30000, 20000]\n',
    't.yaml:2:15: rdma.port-range: [30000, 20000] has lo > hi (expected lo <= hi)',
  ],
  [
    'multicast-port inside port-range',
    'rdma:\n  multicast-port: 25000\n',
    't.yaml:2:19: rdma.multicast-port: 25000 is inside port-range [20000, 29999] (a QP could take it) (expected a port outside rdma.port-range)',
  ],
  [
    'port-range over the default multicast port',
    'rdma:\n  port-range: [10000, 30000]\n',
    't.yaml:2:15: rdma.multicast-port: 19999 is inside port-range [10000, 30000] (a QP could take it) (expected a port outside rdma.port-range)',
  ],
  [
    'port-range: port 0',
    'rdma: {port-range: [0, 2]}\n',
    't.yaml:1:21: rdma.port-range[0]: 0 is out of range (expected an integer in 1..65535)',
  ],
  [
    'rto-max-ms below rto-min-ms',
    'rdma:\n  trp: {rto-min-ms: 5, rto-max-ms: 2}\n',
    't.yaml:2:36: rdma.trp.rto-max-ms: 2 is less than rto-min-ms 5 (expected a number >= rto-min-ms)',
  ],
  [
    'rto-init-ms below rto-min-ms',
    'rdma:\n  trp: {rto-init-ms: 0.5}\n',
    't.yaml:2:22: rdma.trp.rto-init-ms: 0.5 is less than rto-min-ms 5 (expected a number in rto-min-ms..rto-max-ms)',
  ],
  [
    'ack-delay-us not below rto-min-ms',
    'rdma:\n  trp: {rto-min-ms: 2, ack-delay-us: 2000}\n',
    't.yaml:2:38: rdma.trp.ack-delay-us: 2000 us is not below rto-min-ms 2 (the peer would time out waiting for the ACK) (expected an integer of µs below rto-min-ms)',
  ],
  [
    'ack-delay-us negative',
    'rdma:\n  trp: {ack-delay-us: -1}\n',
    't.yaml:2:23: rdma.trp.ack-delay-us: -1 is out of range (expected an integer in 0..1000000)',
  ],
  [
    'rto-init-ms above rto-max-ms',
    'rdma:\n  trp: {rto-init-ms: 300}\n',
    't.yaml:2:22: rdma.trp.rto-init-ms: 300 is more than rto-max-ms 200 (expected a number in rto-min-ms..rto-max-ms)',
  ],
];

for (const [name, yaml, want] of CASES) {
  test(`error: ${name}`, () => {
    const e = configError(yaml);
    assert.is(e.message, want);
    assert.is(e.issues.length, want.split('\n').length, 'one issue per line');
    assert.is(e.source, 't.yaml');
  });
}

test('a missing or unreadable file is a ConfigError naming the path and the OS error', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rg-config-'));
  try {
    const missing = join(dir, 'nope.yaml');
    let e = catchConfigError(() => loadConfig(missing));
    assert.is(
      e.message,
      `${missing}: cannot read the configuration file: ENOENT: no such file or directory, open '${missing}'`,
    );
    assert.equal(e.issues, [
      {
        path: '',
        line: 0,
        column: 0,
        message: `cannot read the configuration file: ENOENT: no such file or directory, open '${missing}'`,
      },
    ]);
    e = catchConfigError(() => loadConfig(dir));
    assert.is(e.message, `${dir}: cannot read the configuration file: EISDIR: illegal operation on a directory, read`);
    // A file that reads is checked, and its errors name it.
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'log:\n  level: loud\n');
    e = catchConfigError(() => loadConfig(bad));
    assert.is(
      e.message,
      `${bad}:2:10: log.level: "loud" is not a valid choice (expected one of: error, warn, info, debug)`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every issue at once, in the order of the file, each with its path, line and column', () => {
  const yaml = [
    'api: {listen: "127.0.0.1:99999"}', // 1
    'interfaces:', // 2
    '  - name: m0', // 3
    '    driver: memif', // 4
    '    memif: {socket: s, role: master}', // 5
    '    mtu: 100000', // 6
    'rdma: {max-qps: 0}', // 7
  ].join('\n');
  const e = configError(yaml);
  const want: ConfigIssue[] = [
    {
      path: 'api.listen',
      line: 1,
      column: 15,
      message: `"127.0.0.1:99999" has a port out of range (expected ${LISTEN})`,
    },
    {
      path: 'interfaces[0].memif.role',
      line: 5,
      column: 30,
      message: '"master" is not a valid choice (expected one of: server, client)',
    },
    {
      path: 'interfaces[0].mtu',
      line: 6,
      column: 10,
      message: '100000 is out of range (expected an integer in 68..65535)',
    },
    { path: 'rdma.max-qps', line: 7, column: 17, message: '0 is out of range (expected an integer in 1..65536)' },
  ];
  assert.equal(e.issues, want);
  assert.is(e.message, want.map((i) => `t.yaml:${i.line}:${i.column}: ${i.path}: ${i.message}`).join('\n'));
});

test('the checks across keys are sorted in among the others by position', () => {
  const yaml = [
    'interfaces:', // 1
    '  - name: m0', // 2
    '    driver: memif', // 3
    '    memif: {socket: s}', // 4
    '  - name: m0', // 5: a duplicate (found after the walk)
    '    driver: memif', // 6
    '    memif: {socket: s2}', // 7
    '    mtu: 1', // 8: out of range (found during the walk)
    'cpu: {workers: 70}', // 9
  ].join('\n');
  const e = configError(yaml);
  assert.equal(
    e.issues.map((i) => [i.line, i.path]),
    [
      [5, 'interfaces[1].name'],
      [8, 'interfaces[1].mtu'],
      [9, 'cpu.workers'],
    ],
  );
});

test('a value the walk rejected is not looked at again by the checks across keys', () => {
  // The bad address gives one issue; the gateway and the neighbor are not checked against it.
  const e = configError(
    `${M}    address: 10.0.0.1/40\n    gateway: 10.9.9.9\nneighbors:\n  - {interface: m0, address: 10.7.0.2, mac: "02:00:00:00:00:02"}\n`,
  );
  assert.equal(
    e.issues.map((i) => i.path),
    ['interfaces[0].address'],
  );
});

// ------------------------------------------------------------------ what loads

const DEFAULTS: Config = {
  source: 't.yaml',
  api: { host: '127.0.0.1', port: 7070, token: null, users: [], group: null },
  cpu: { workers: 0, mainCore: null, corelistWorkers: null, poll: 'adaptive', idlePollUs: 200, idleYield: true },
  buffers: { count: 16384, dataSize: 2048 },
  log: { level: 'info' },
  interfaces: [],
  neighbors: [],
  rdma: {
    portRange: [20000, 29999],
    multicastPort: 19999,
    maxQps: 1024,
    maxMrs: 4096,
    cmRetryMs: 100,
    cmTimeoutMs: 5000,
    cmBacklog: 64,
    cmHalfOpenMs: 5000,
    congestion: 'auto',
    maxPds: 4096,
    maxCqs: 4096,
    maxSrqs: 1024,
    maxMrBytes: 4 * 2 ** 30,
    maxCqEntries: 4 * 2 ** 20,
    maxWrSlots: 2 ** 20,
    trp: { window: 512, rtoMinMs: 5, rtoMaxMs: 200, rtoInitMs: null, maxRetries: 7, ackDelayUs: 100 },
  },
  capture: { dir: 'run/captures', maxBytes: 64 * 2 ** 20 },
  verbs: {
    socket: null,
    maxConnections: 256,
    maxConnectionsPerUid: 64,
    maxConnectionsPerPid: 16,
    maxFdsPerConnection: 32,
    warmUp: 2000,
    wireWarmUp: 1000,
  },
  trace: { maxPackets: 1000 },
};

test('an empty file, a file of comments, empty sections: the defaults and no interfaces', () => {
  assert.equal(parseConfig('', 't.yaml'), DEFAULTS);
  assert.equal(parseConfig('# nothing here\n\n   # at all\n', 't.yaml'), DEFAULTS);
  assert.equal(
    parseConfig('api:\ncpu:\nbuffers: {}\nlog: ~\ninterfaces:\nneighbors: []\nrdma: {trp: }\ntrace:\n', 't.yaml'),
    DEFAULTS,
  );
  assert.equal(parseConfig('null\n', 't.yaml'), DEFAULTS);
  assert.is(parseConfig('').source, '<string>');
});

test("defaults of an interface and of each driver's options", () => {
  const yaml = `interfaces:
  - {name: m0, driver: memif, memif: {socket: run/m.sock}}
  - {name: h0, driver: af_packet, af_packet: {host-interface: veth0}}
  - {name: c0, driver: pcap, pcap: {tx-file: out.pcap}}
  - {name: p0, driver: pipe, pipe: {peer: elsewhere}}
  - {name: d0, driver: dpdk, dpdk: {device: "0000:3b:00.0"}}
  - {name: i0, driver: ibverbs, ibverbs: {device: mlx5_0}}
  - {name: x0, driver: mlx5dv, mlx5dv: {device: mlx5_1}}
  - {name: f0, driver: pipe, pipe: {peer: other}, fault: {}}
`;
  const common = {
    mac: null,
    address: null,
    gateway: null,
    mtu: null, // 1500, or the link's own (a memif link to another rdma-graph data plane)
    rxQueues: 1,
    worker: null,
    rxPlacement: null,
    rxMode: null,
    congestion: null,
    rxQueueSize: 1024,
    txQueueSize: 1024,
    fault: null,
  };
  const cfg = parseConfig(yaml, 't.yaml');
  assert.equal(cfg.interfaces, [
    {
      name: 'm0',
      driver: 'memif',
      memif: { socket: 'run/m.sock', role: 'server', id: 0, secret: null, bufferSize: 2048, udpChecksum: null },
      ...common,
      line: 2,
    },
    {
      name: 'h0',
      driver: 'af_packet',
      afPacket: {
        hostInterface: 'veth0',
        promisc: false,
        txMode: 'sendmmsg',
        blockSize: 65536,
        qdiscBypass: true,
        rxRing: 'auto',
        gso: false,
        blockTimeoutMs: 1,
      },
      ...common,
      line: 3,
    },
    { name: 'c0', driver: 'pcap', pcap: { rxFile: null, txFile: 'out.pcap', rate: 0, loop: 1 }, ...common, line: 4 },
    { name: 'p0', driver: 'pipe', pipe: { peer: 'elsewhere' }, ...common, line: 5 },
    { name: 'd0', driver: 'dpdk', dpdk: { device: '0000:3b:00.0', ealArgs: [] }, ...common, line: 6 },
    {
      name: 'i0',
      driver: 'ibverbs',
      ibverbs: { device: 'mlx5_0', hostInterface: null, port: 1, promisc: false },
      ...common,
      line: 7,
    },
    {
      name: 'x0',
      driver: 'mlx5dv',
      mlx5dv: {
        device: 'mlx5_1',
        hostInterface: null,
        port: 1,
        promisc: false,
        striding: true,
        cqeCompression: true,
      },
      ...common,
      line: 8,
    },
    {
      name: 'f0',
      driver: 'pipe',
      pipe: { peer: 'other' },
      ...common,
      line: 9,
      fault: {
        direction: 'rx',
        config: { seed: 1, loss: 0, reorder: 0, reorderDepth: 8, reorderDelayUs: 500, duplicate: 0, corrupt: 0, ce: 0 },
      },
    },
  ]);
});

const FULL = `# every key, none at its default
api:
  listen: "[::1]:8080"
  token: t0k3n
cpu:
  workers: 2
  main-core: 0
  corelist-workers: "0-1"
  poll: interrupt
  idle-poll-us: 75
buffers:
  count: 65536
  data-size: 4096
log:
  level: debug
interfaces:
  - name: m0
    driver: memif
    memif:
      socket: /run/rg/m0.sock
      role: client
      id: 3
      secret: sesame
      buffer-size: 4096
      udp-checksum: false
    mac: 02:FE:00:00:00:0A
    address: 10.1.0.1/16
    gateway: 10.1.255.254
    mtu: 9000
    rx-queues: 2
    worker: 1
    rx-mode: polling
    congestion: dctcp
    rx-queue-size: 512
    tx-queue-size: 256
    fault:
      direction: both
      seed: 7
      loss: 0.1
      reorder: 0.2
      reorder-depth: 4
      reorder-delay-us: 250
      duplicate: 0.3
      corrupt: 0.4
      ce: 0.5
  - name: p-a
    driver: pipe
    pipe: {peer: p_b}
    address: 192.168.7.0/31
  - name: p_b
    driver: pipe
    pipe: {peer: p-a}
    address: 192.168.7.1/31
  - name: c0
    driver: pcap
    pcap: {rx-file: in.pcap, tx-file: out.pcap, rate: 2.5, loop: 0}
    address: 172.16.0.9/32
  - name: h0
    driver: af_packet
    af_packet: {host-interface: veth-rg.1, promisc: true, tx-mode: ring, block-size: 1048576, qdisc-bypass: false, rx-ring: v3, block-timeout-ms: 5}
  - name: d0
    driver: dpdk
    dpdk: {device: net_tap0, eal-args: [--no-pci, --vdev=net_tap0]}
  - name: i0
    driver: ibverbs
    ibverbs: {device: mlx5_0, port: 2}
  - name: x0
    driver: mlx5dv
    mlx5dv: {host-interface: enp59s0f1, port: 255, promisc: true, striding: false, cqe-compression: false}
neighbors:
  - {interface: m0, address: 10.1.2.3, mac: "02:AB:00:00:00:01"}
  - {interface: p-a, address: 192.168.7.1, mac: "02:00:00:00:07:01"}
  - {interface: m0, address: 10.1.255.254, mac: "02:00:00:00:00:fe"}
rdma:
  port-range: [1, 65000]
  multicast-port: 65001
  max-qps: 65536
  max-mrs: 1048575
  cm-retry-ms: 50
  cm-timeout-ms: 2000.5
  cm-backlog: 3
  cm-half-open-ms: 750
  congestion: dctcp
  max-pds: 7
  max-cqs: 8
  max-srqs: 9
  max-mr-bytes: 1048576
  max-cq-entries: 4096
  max-wr-slots: 65536
  trp: {window: 32768, rto-min-ms: 0.5, rto-max-ms: 1000, rto-init-ms: 20, max-retries: 255, ack-delay-us: 250}
capture:
  dir: /var/tmp/caps
  max-bytes: 4096
verbs:
  socket: "@rdma-graph-verbs"
  max-connections: 1000
  max-connections-per-uid: 100
  max-connections-per-pid: 10
  max-fds-per-connection: 8
  warm-up: 0
  wire-warm-up: 10
trace:
  max-packets: 1000000
`;

test('a full example: the normalised Config, every key taken', () => {
  const base = {
    mac: null,
    address: null,
    gateway: null,
    mtu: null,
    rxQueues: 1,
    worker: null,
    rxPlacement: null,
    rxMode: null,
    congestion: null,
    rxQueueSize: 1024,
    txQueueSize: 1024,
    fault: null,
  };
  const want: Config = {
    source: 'full.yaml',
    api: { host: '::1', port: 8080, token: 't0k3n', users: [], group: null },
    cpu: { workers: 2, mainCore: 0, corelistWorkers: '0-1', poll: 'interrupt', idlePollUs: 75, idleYield: true },
    buffers: { count: 65536, dataSize: 4096 },
    log: { level: 'debug' },
    interfaces: [
      {
        name: 'm0',
        driver: 'memif',
        memif: {
          socket: '/run/rg/m0.sock',
          role: 'client',
          id: 3,
          secret: 'sesame',
          bufferSize: 4096,
          udpChecksum: false,
        },
        mac: '02:fe:00:00:00:0a',
        address: '10.1.0.1/16',
        gateway: '10.1.255.254',
        mtu: 9000,
        rxQueues: 2,
        worker: 1,
        rxPlacement: null,
        rxMode: 'polling',
        congestion: 'dctcp',
        rxQueueSize: 512,
        txQueueSize: 256,
        fault: {
          direction: 'both',
          config: {
            seed: 7,
            loss: 0.1,
            reorder: 0.2,
            reorderDepth: 4,
            reorderDelayUs: 250,
            duplicate: 0.3,
            corrupt: 0.4,
            ce: 0.5,
          },
        },
        line: 17,
      },
      { ...base, name: 'p-a', driver: 'pipe', pipe: { peer: 'p_b' }, address: '192.168.7.0/31', line: 46 },
      { ...base, name: 'p_b', driver: 'pipe', pipe: { peer: 'p-a' }, address: '192.168.7.1/31', line: 50 },
      {
        ...base,
        name: 'c0',
        driver: 'pcap',
        pcap: { rxFile: 'in.pcap', txFile: 'out.pcap', rate: 2.5, loop: 0 },
        address: '172.16.0.9/32',
        line: 54,
      },
      {
        ...base,
        name: 'h0',
        driver: 'af_packet',
        afPacket: {
          hostInterface: 'veth-rg.1',
          promisc: true,
          txMode: 'ring',
          blockSize: 1048576,
          qdiscBypass: false,
          rxRing: 'v3', // v2 needs tx-mode sendmmsg (checked below)
          gso: false,
          blockTimeoutMs: 5,
        },
        line: 58,
      },
      {
        ...base,
        name: 'd0',
        driver: 'dpdk',
        dpdk: { device: 'net_tap0', ealArgs: ['--no-pci', '--vdev=net_tap0'] },
        line: 61,
      },
      {
        ...base,
        name: 'i0',
        driver: 'ibverbs',
        ibverbs: { device: 'mlx5_0', hostInterface: null, port: 2, promisc: false },
        line: 64,
      },
      {
        ...base,
        name: 'x0',
        driver: 'mlx5dv',
        mlx5dv: {
          device: null,
          hostInterface: 'enp59s0f1',
          port: 255,
          promisc: true,
          striding: false,
          cqeCompression: false,
        },
        line: 67,
      },
    ],
    neighbors: [
      { interface: 'm0', address: '10.1.2.3', mac: '02:ab:00:00:00:01' },
      { interface: 'p-a', address: '192.168.7.1', mac: '02:00:00:00:07:01' },
      { interface: 'm0', address: '10.1.255.254', mac: '02:00:00:00:00:fe' },
    ],
    rdma: {
      portRange: [1, 65000],
      multicastPort: 65001,
      maxQps: 65536,
      maxMrs: 1048575,
      cmRetryMs: 50,
      cmTimeoutMs: 2000.5,
      cmBacklog: 3,
      cmHalfOpenMs: 750,
      congestion: 'dctcp',
      maxPds: 7,
      maxCqs: 8,
      maxSrqs: 9,
      maxMrBytes: 1048576,
      maxCqEntries: 4096,
      maxWrSlots: 65536,
      trp: { window: 32768, rtoMinMs: 0.5, rtoMaxMs: 1000, rtoInitMs: 20, maxRetries: 255, ackDelayUs: 250 },
    },
    capture: { dir: '/var/tmp/caps', maxBytes: 4096 },
    verbs: {
      socket: '@rdma-graph-verbs',
      maxConnections: 1000,
      maxConnectionsPerUid: 100,
      maxConnectionsPerPid: 10,
      maxFdsPerConnection: 8,
      warmUp: 0,
      wireWarmUp: 10,
    },
    trace: { maxPackets: 1000000 },
  };
  assert.equal(parseConfig(FULL, 'full.yaml'), want);
});

test('api.users and api.group: local users and groups of this host (names or ids); others are refused where they stand', () => {
  const api = (yaml: string) => parseConfig(yaml, 't.yaml').api;
  assert.equal(api('api: {users: [root, "65534"], group: root}\n'), {
    host: '127.0.0.1',
    port: 7070,
    token: null,
    users: ['root', '65534'],
    group: 'root',
  });
  const err = (yaml: string) => {
    try {
      parseConfig(yaml, 't.yaml');
    } catch (e) {
      return (e as Error).message;
    }
    return 'accepted';
  };
  assert.match(
    err('api:\n  users: [no-such-user-here]\n'),
    /t\.yaml:2:\d+: api\.users\[0\]: "no-such-user-here" is not a user of this host/,
  );
  assert.match(
    err('api:\n  group: no-such-group-here\n'),
    /t\.yaml:2:\d+: api\.group: "no-such-group-here" is not a group of this host/,
  );
});

test('api.listen: localhost, IPv6, port 0', () => {
  const api = (listen: string, token = '') =>
    parseConfig(`api: {listen: "${listen}"${token ? `, token: ${token}` : ''}}`).api;
  assert.equal(api('localhost:0'), { host: 'localhost', port: 0, token: null, users: [], group: null });
  // Not loopback: only with a token (test/api-guard.test.ts has the refusal).
  assert.equal(api('[::]:7070', 't'), { host: '::', port: 7070, token: 't', users: [], group: null });
  assert.equal(api('0.0.0.0:65535', 't'), { host: '0.0.0.0', port: 65535, token: 't', users: [], group: null });
});

test('aliases are followed; an issue in aliased content points at the anchor', () => {
  const cfg = parseConfig(
    `${MA}    fault: &lossy {loss: 0.5}\n  - {name: m1, driver: memif, memif: {socket: t}, fault: *lossy}\n`,
  );
  assert.equal(cfg.interfaces[1].fault, cfg.interfaces[0].fault);
  assert.is(cfg.interfaces[1].fault?.config.loss, 0.5);
  const e = configError(
    `${MA}    fault: &lossy {loss: 5}\n  - {name: m1, driver: memif, memif: {socket: t}, fault: *lossy}\n`,
  );
  assert.equal(
    e.issues.map((i) => `${i.line}:${i.column} ${i.path}`),
    ['6:26 interfaces[0].fault.loss', '6:26 interfaces[1].fault.loss'],
  );
});

test('the fault ranges of the schema are those of drivers/fault.ts validateFaultConfig', () => {
  const fault =
    SCHEMA.keys.interfaces.type === 'list' && SCHEMA.keys.interfaces.items.type === 'map'
      ? SCHEMA.keys.interfaces.items.keys.fault
      : undefined;
  assert.ok(fault !== undefined && fault.type === 'map');
  for (const [key, s] of Object.entries(fault.keys)) {
    if (s.type !== 'int' && s.type !== 'number') continue;
    const camelKey = key.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    const ok = (v: number) => {
      let yamlOk = true;
      try {
        parseConfig(`${M}    fault: {${key}: ${v}}\n`);
      } catch {
        yamlOk = false;
      }
      let faultOk = true;
      try {
        validateFaultConfig({ [camelKey]: v }, 'f');
      } catch {
        faultOk = false;
      }
      assert.is(
        yamlOk,
        faultOk,
        `${key}: ${v}: YAML ${yamlOk ? 'accepts' : 'rejects'}, fault.ts ${faultOk ? 'accepts' : 'rejects'}`,
      );
      return yamlOk;
    };
    const lo = s.type === 'number' && s.above !== undefined ? s.above : s.min!;
    const hi = s.max!;
    assert.ok(ok(hi), `${key}: ${hi} accepted`);
    assert.not.ok(ok(hi + 1), `${key}: ${hi + 1} rejected`);
    assert.not.ok(ok(lo - 1), `${key}: ${lo - 1} rejected`);
    if (s.type === 'int') assert.not.ok(ok(lo + 0.5), `${key}: ${lo + 0.5} rejected`);
  }
});

// ------------------------------------------------------------------ the shipped files

function yamlFiles(dir: string): string[] {
  return (readdirSync(join(root, dir), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => join(dir, f))
    .sort();
}

test('every shipped configuration loads (config/**/*.yaml)', () => {
  const files = yamlFiles('config');
  assert.ok(files.length >= 10, `found ${files.join(', ')}`);
  const drivers = new Set<string>();
  for (const f of files) {
    const cfg = loadConfig(join(root, f));
    for (const itf of cfg.interfaces) drivers.add(itf.driver);
  }
  assert.equal([...drivers].sort(), [...DRIVER_KINDS].sort(), 'the examples cover every driver');
  for (const kind of DRIVER_KINDS)
    assert.ok(files.includes(`config/examples/${kind}.yaml`), `config/examples/${kind}.yaml`);
});

test('startup.yaml: one memif server on run/memif.sock, 10.10.0.1/24; peer.yaml is its client', () => {
  const s = loadConfig(STARTUP_CONFIG);
  assert.is(STARTUP_CONFIG, join(root, 'config/startup.yaml'));
  assert.equal(s.api, { host: '127.0.0.1', port: 7070, token: null, users: [], group: null });
  assert.equal(
    s.interfaces.map((i) => [i.name, i.driver, i.memif?.role, i.memif?.socket, i.address, i.mac]),
    [['memif0', 'memif', 'server', 'run/memif.sock', '10.10.0.1/24', '02:fe:00:00:00:01']],
  );
  assert.equal(s.neighbors, [{ interface: 'memif0', address: '10.10.0.2', mac: '02:fe:00:00:00:02' }]);
  const p = loadConfig(join(root, 'config/examples/peer.yaml'));
  assert.equal(p.api, { host: '127.0.0.1', port: 7071, token: null, users: [], group: null });
  assert.equal(
    p.interfaces.map((i) => [i.name, i.driver, i.memif?.role, i.memif?.socket, i.memif?.id, i.address, i.mac]),
    [['memif0', 'memif', 'client', 'run/memif.sock', s.interfaces[0].memif?.id, '10.10.0.2/24', '02:fe:00:00:00:02']],
  );
  assert.equal(p.neighbors, [{ interface: 'memif0', address: '10.10.0.1', mac: '02:fe:00:00:00:01' }]);
});

test("config/README.md's workers rule is the loader's: N workers load, each limit it names is refused", () => {
  const rule = /^- \*\*Workers\.\*\*[^]*?(?=\n- )/m.exec(readFileSync(README, 'utf8'))?.[0] ?? '';
  assert.match(rule, /`cpu\.workers: 0` \(the default\) runs the graph on the main thread; N runs N worker/);
  const ok = parseConfig(
    'cpu: {workers: 2, corelist-workers: "0-1"}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, worker: 1, rx-queues: 2, rx-placement: [1, 0]}\n',
    't.yaml',
  );
  assert.is(ok.cpu.workers, 2);
  const cases: [string, string][] = [
    [
      'below `cpu.workers`',
      'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, worker: 2}\n',
    ],
    [
      'one worker per rx queue',
      'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, rx-queues: 2, rx-placement: [0]}\n',
    ],
    [
      "queue 0 on the interface's",
      'cpu: {workers: 2}\ninterfaces:\n  - {name: m0, driver: memif, memif: {socket: s}, worker: 0, rx-queues: 2, rx-placement: [1, 0]}\n',
    ],
    ['exactly one\n  CPU per worker', 'cpu: {workers: 2, corelist-workers: "1-3"}\n'],
  ];
  for (const [words, yaml] of cases) {
    assert.ok(rule.includes(words), `the rule says "${words}":\n${rule}`);
    configError(yaml);
  }
});

test('config/README.md holds exactly the generated key reference', () => {
  const readme = readFileSync(README, 'utf8');
  assert.is(withReference(readme), readme, 'run: node --import tsx config/update-readme.ts');
  const ref = schemaReference();
  assert.ok(readme.includes(ref));
  // One row per key of the schema, nested ones included.
  for (const key of [
    'api.listen',
    'interfaces[].memif.buffer-size',
    'interfaces[].fault.reorder-delay-us',
    'neighbors[].mac',
    'rdma.trp.rto-init-ms',
    'trace.max-packets',
  ]) {
    assert.ok(ref.includes(`| \`${key}\` |`), key);
  }
});

test.run();
