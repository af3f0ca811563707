/**
 * UD multicast (PROTOCOL.md section 9.1): the UD QPs attached to each IPv4 multicast group
 * (ibv_attach_mcast; rdma_join_multicast attaches through it). A datagram to a group travels to
 * the group's address and the stack's multicast port (`rdma.multicast-port`), and every UD QP
 * attached to the group on the interface it arrives on takes a copy (ud-input), each checked
 * against its own Q_Key. A work request names the group as InfiniBand does: an address handle
 * with the group's GID and the multicast QPN 0xFFFFFF.
 *
 * Attaching joins the group on the QP's interface (a QP with no address: the interface its
 * datagrams to the group leave by, InterfaceTable.multicastInterface) (net/ip4-groups.ts: ip4-input and
 * ethernet-input then take its datagrams) and, for the first member on this stack, binds the
 * multicast port to ud-input (a group's datagram has no TRP state: udp4-input hands it over). Bounded by our own limits: MAX_GROUPS_PER_IF groups an interface,
 * MCAST_QPS_PER_GROUP QPs a group; a datagram's fan-out is a walk over that list.
 */
import { formatIp4, isIp4Multicast } from '../net/address.ts';
import { MAX_GROUPS_PER_IF } from '../net/ip4-groups.ts';
import type { Netstack } from '../netstack.ts';
import type { Qp } from './qp.ts';
import { VerbsError } from './verbs.ts';

/** The QPN a send to a multicast group names (InfiniBand's, 0xFFFFFF). */
export const MCAST_QPN = 0xffffff;
/** Most UD QPs attached to one group on one stack (ibv_device_attr.max_mcast_qp_attach). */
export const MCAST_QPS_PER_GROUP = 32;
/** Groups one stack's QPs attach to at most (max_mcast_grp): one interface's table. */
export const MCAST_GROUPS = MAX_GROUPS_PER_IF;
/** The multicast port when `rdma.multicast-port` is not set: just below the default port range. */
export const DEFAULT_MCAST_PORT = 19999;

/** A group's members on one interface. */
interface Members {
  ix: number;
  qps: Qp[];
}

export class McastTable {
  /** group address -> members (the group is joined on one interface per stack here). */
  private readonly byGroup = new Map<number, Members>();
  /** QP -> the groups it is attached to. */
  private readonly byQp = new Map<Qp, number[]>();
  private bound = false;

  constructor(
    private readonly net: Netstack,
    /** The UDP port multicast datagrams go to. */
    readonly port: number,
  ) {}

  /** Groups with members. */
  get groups(): number {
    return this.byGroup.size;
  }

  /** Data path: the QPs attached to `group`, arriving on interface `ix` (undefined: none). */
  members(group: number, ix: number): readonly Qp[] | undefined {
    const m = this.byGroup.get(group);
    return m === undefined || m.ix !== ix ? undefined : m.qps;
  }

  /** Control path: the QPs attached to `group` (any interface). */
  attached(group: number): readonly Qp[] {
    return this.byGroup.get(group)?.qps ?? [];
  }

  /** The groups `qp` is attached to. */
  groupsOf(qp: Qp): readonly number[] {
    return this.byQp.get(qp) ?? [];
  }

  /** ibv_attach_mcast: `qp` (a UD QP with an address) takes the datagrams to `group`. */
  attach(qp: Qp, group: number): void {
    const where = `qp ${qp.qpn}: attach to ${formatIp4(group)}`;
    if (!qp.cfg.ud) throw new VerbsError('invalid', `${where}: only a UD QP joins a multicast group`);
    if (!isIp4Multicast(group)) throw new VerbsError('invalid', `${where}: not an IPv4 multicast group (224.0.0.0/4)`);
    const ifs = this.net.interfaces;
    const ix = ifs.multicastInterface(qp.localAddr, group);
    if (ix === 0) throw new VerbsError('invalid', `${where}: no interface with an address to join it on`);
    const mine = this.byQp.get(qp) ?? [];
    if (mine.includes(group)) return; // attached already: as a NIC, a second attach is no error
    let m = this.byGroup.get(group);
    if (m !== undefined && m.ix !== ix)
      throw new VerbsError(
        'invalid',
        `${where}: the group is joined on interface ${ifs.names[m.ix]} here, not ${ifs.names[ix]}`,
      );
    if (m !== undefined && m.qps.length >= MCAST_QPS_PER_GROUP)
      throw new VerbsError(
        'resource',
        `${where}: the group has ${MCAST_QPS_PER_GROUP} QPs attached, the most it takes`,
      );
    if (m === undefined && this.byGroup.size >= MCAST_GROUPS)
      throw new VerbsError('resource', `${where}: ${MCAST_GROUPS} groups have members, the most this stack keeps`);
    if (!this.bound) {
      try {
        this.net.udp.bind(this.port, 'ud-input');
      } catch (e) {
        throw new VerbsError(
          'invalid',
          `${where}: the multicast port ${this.port} (rdma.multicast-port) is taken: ${(e as Error).message}`,
        );
      }
      this.bound = true;
    }
    try {
      if (m === undefined) ifs.groups.join(ix, group, ifs.names[ix]);
    } catch (e) {
      this.unbindIfIdle();
      throw new VerbsError('resource', `${where}: ${(e as Error).message}`);
    }
    if (m === undefined) {
      m = { ix, qps: [] };
      this.byGroup.set(group, m);
    }
    m.qps.push(qp);
    mine.push(group);
    this.byQp.set(qp, mine);
  }

  /** ibv_detach_mcast; throws when `qp` is not attached to `group`. */
  detach(qp: Qp, group: number): void {
    const mine = this.byQp.get(qp);
    const k = mine?.indexOf(group) ?? -1;
    if (mine === undefined || k < 0)
      throw new VerbsError('not-found', `qp ${qp.qpn} is not attached to ${formatIp4(group)}`);
    mine.splice(k, 1);
    if (mine.length === 0) this.byQp.delete(qp);
    const m = this.byGroup.get(group) as Members;
    m.qps.splice(m.qps.indexOf(qp), 1);
    if (m.qps.length === 0) {
      this.byGroup.delete(group);
      this.net.interfaces.groups.leave(m.ix, group);
    }
    this.unbindIfIdle();
  }

  /** A QP destroyed: out of every group. */
  detachAll(qp: Qp): void {
    for (const g of [...(this.byQp.get(qp) ?? [])]) this.detach(qp, g);
  }

  private unbindIfIdle(): void {
    if (this.bound && this.byGroup.size === 0) {
      this.net.udp.unbind(this.port);
      this.bound = false;
    }
  }
}
