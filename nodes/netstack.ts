/**
 * The L2–L4 node set (README: Architecture, The graph) registered on a graph in one call, and the handles
 * whoever wires a data plane needs: the per-interface table, the neighbor table, the UDP API.
 *
 *   ethernet-input -> arp-input                         (reply, learn; neighbor timers)
 *                  -> ip4-input -> icmp4-echo           (reply in place)
 *                               -> udp4-input -> bound nodes (udp-echo, QPs, callbacks)
 *   udp4-send (input) / udp-echo / upper layers -> udp4-encap -> ip4-rewrite -> <if>-output
 *   icmp4-ping (input: echo requests of `ping`)               -> ip4-rewrite
 *   ip4-rewrite, to one of our own addresses -> ip4-loopback -> ethernet-input (as received
 *                                               on the address's interface; no driver)
 *
 * Wiring order: `registerL2L4` first (device input nodes name `ethernet-input` as their
 * next), then the drivers' interfaces, then `addInterface` for each with the index and output
 * node the drivers' registry gave it. Nodes are registered in an order in which every named
 * next node exists, so this works before or after `graph.build()`.
 */
import type { Graph, NodeRuntime } from '../graph/index.ts';
import { registerArpInput } from './ethernet/arp-input.ts';
import { registerEthernetInput } from './ethernet/ethernet-input.ts';
import { type NeighborOptions, NeighborTable } from './ethernet/neighbor.ts';
import { registerIcmp4Echo } from './ip4/icmp4-echo.ts';
import { Igmp4, registerIgmp4Input } from './ip4/igmp4-input.ts';
import { Pinger, registerIcmp4Ping } from './ip4/icmp4-ping.ts';
import { registerIp4Input } from './ip4/ip4-input.ts';
import { type InterfaceTableConfig, InterfaceTable } from './net/interface-table.ts';
import { registerIp4Rewrite } from './ip4/ip4-rewrite.ts';
import { registerIp4Loopback, setLoopbackNext } from './ip4/ip4-loopback.ts';
import { registerUdpEcho } from './udp/udp-echo.ts';
import { UdpApi } from './udp/udp-ports.ts';
import { registerUdp4Encap } from './udp/udp4-encap.ts';
import { registerUdp4Input } from './udp/udp4-input.ts';
import { registerUdp4Send, UdpSendQueue } from './udp/udp4-send.ts';

export interface NetstackOptions {
  /** Highest interface index + 1 the tables hold (default 64). */
  maxInterfaces?: number;
  neighbor?: NeighborOptions;
  /** Slots of the UDP API's send queue (a power of 2, default 4096). */
  sendQueue?: number;
}

export interface StaticNeighbor {
  address: string;
  mac: string | Uint8Array;
}

export interface NetInterfaceConfig extends InterfaceTableConfig {
  /** Static neighbors on this interface (configuration). */
  neighbors?: StaticNeighbor[];
}

export interface Netstack {
  readonly graph: Graph;
  readonly interfaces: InterfaceTable;
  readonly neighbors: NeighborTable;
  readonly udp: UdpApi;
  /** Echo requests from the data plane (ping) and their replies. */
  readonly pinger: Pinger;
  /** The registered nodes by name. */
  readonly nodes: Record<string, NodeRuntime>;
  /** Configure an interface for IPv4 (see InterfaceTableConfig) and its static neighbors. */
  addInterface(cfg: NetInterfaceConfig): void;
  /** Gratuitous ARP on interface `index` (call when it comes up). */
  announce(index: number): boolean;
}

export function registerL2L4(graph: Graph, opts: NetstackOptions = {}): Netstack {
  const interfaces = new InterfaceTable(graph, opts.maxInterfaces ?? 64);
  const neighbors = new NeighborTable(graph, interfaces, opts.neighbor);
  const udp = new UdpApi(graph);
  const queue = new UdpSendQueue(opts.sendQueue ?? 4096);
  const pinger = new Pinger(graph);
  // Every node after the nodes it names as next; ip4-loopback closes the cycle back to
  // ethernet-input once that exists.
  const list = [
    registerIp4Loopback(graph, interfaces),
    registerIp4Rewrite(graph, interfaces, neighbors),
    registerIcmp4Ping(graph, pinger),
    registerUdp4Encap(graph, interfaces),
    registerUdpEcho(graph),
    registerUdp4Send(graph, queue),
    registerUdp4Input(graph, udp),
    registerIcmp4Echo(graph, interfaces, pinger),
    registerIgmp4Input(graph, new Igmp4(graph, interfaces)),
    registerIp4Input(graph, interfaces),
    registerArpInput(graph, interfaces, neighbors),
    registerEthernetInput(graph, interfaces),
  ];
  setLoopbackNext(graph, 'ethernet-input');
  udp.attach(graph.node('udp4-input'), queue, graph.node('udp4-send'));
  const nodes: Record<string, NodeRuntime> = {};
  for (const rt of list) nodes[rt.name] = rt;
  return {
    graph,
    interfaces,
    neighbors,
    udp,
    pinger,
    nodes,
    addInterface(cfg: NetInterfaceConfig): void {
      interfaces.add(cfg);
      for (const nb of cfg.neighbors ?? []) neighbors.addStatic(cfg.index, nb.address, nb.mac);
    },
    announce(index: number): boolean {
      return neighbors.announce(index);
    },
  };
}
