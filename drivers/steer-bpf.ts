/**
 * Classic BPF socket filters that split one kernel interface's frames between worker threads by
 * UDP destination port (cpu.workers with an af_packet interface received by several workers):
 * each worker's AF_PACKET socket carries a filter, so the kernel hands it only the datagrams of
 * its own QP numbers, and the interface's owner everything else (ARP, ICMP, other UDP, IPv4
 * fragments after the first, non-IPv4). No frame reaches two sockets and none needs a handoff.
 *
 * Why filters and not PACKET_FANOUT: a fanout program picks a member by its index in the group,
 * and the kernel orders members by when they joined, reordering them when one leaves, so a
 * restarted worker would silently get another's frames. A filter names ports, not positions.
 * The cost is one filter run per socket per frame (a dozen instructions); the frame is copied
 * into one ring only.
 *
 * `acceptPorts(ranges)`: IPv4, UDP, not a later fragment, destination port inside one of the
 * ranges. `rejectPorts(ranges)`: everything except that. IPv4 options are allowed for (the UDP
 * header is found through the header length). An 802.1Q tag the kernel stripped is not in the
 * data the filter sees, so tagged frames are steered as untagged ones.
 */

/** One instruction: struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }. */
export interface BpfInsn {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

// Opcodes (linux/filter.h, linux/bpf_common.h).
const LD_H_ABS = 0x28,
  LD_B_ABS = 0x30,
  LDX_B_MSH = 0xb1,
  LD_H_IND = 0x48,
  JEQ_K = 0x15,
  JGT_K = 0x25,
  JGE_K = 0x35,
  JSET_K = 0x45,
  RET_K = 0x06;

/** Largest snap length: the whole frame. */
const ACCEPT = 0x40000;

const insn = (code: number, k: number, jt = 0, jf = 0): BpfInsn => ({ code, jt, jf, k });

/**
 * The program: datagrams to a port of one of `ranges` end at RET `inRange`, anything else at
 * RET `other`. Layout: 8 header instructions, two tests per range, RET other, RET in.
 */
function portProgram(ranges: readonly (readonly [number, number])[], inRange: number, other: number): BpfInsn[] {
  if (ranges.length === 0 || ranges.length > 64)
    throw new RangeError(`steer-bpf: 1 to 64 port ranges, got ${ranges.length}`);
  for (const [lo, hi] of ranges)
    if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo >= 0 && hi <= 65535 && lo <= hi))
      throw new RangeError(`steer-bpf: a port range is two ports lo <= hi in 0..65535, got [${lo}, ${hi}]`);
  const OTHER = 8 + 2 * ranges.length,
    IN = OTHER + 1;
  const off = (at: number, target: number) => target - at - 1; // jumps count from the next instruction
  const prog: BpfInsn[] = [
    insn(LD_H_ABS, 12), // 0: EtherType
    insn(JEQ_K, 0x0800, 0, off(1, OTHER)), // 1: IPv4?
    insn(LD_B_ABS, 23), // 2: protocol
    insn(JEQ_K, 17, 0, off(3, OTHER)), // 3: UDP?
    insn(LD_H_ABS, 20), // 4: flags and fragment offset
    insn(JSET_K, 0x1fff, off(5, OTHER), 0), // 5: a later fragment has no UDP header
    insn(LDX_B_MSH, 14), // 6: x = IHL * 4
    insn(LD_H_IND, 16), // 7: A = the destination port (14 + x + 2)
  ];
  ranges.forEach(([lo, hi], r) => {
    const at = 8 + 2 * r,
      next = r === ranges.length - 1 ? OTHER : at + 2;
    prog.push(insn(JGE_K, lo, 0, off(at, next))); // below lo: not this range
    prog.push(insn(JGT_K, hi, off(at + 1, next), off(at + 1, IN))); // above hi: not this range
  });
  prog.push(insn(RET_K, other), insn(RET_K, inRange));
  return prog;
}

/** Only IPv4 UDP datagrams (not later fragments) to a port in one of `ranges`. */
export function acceptPorts(ranges: readonly (readonly [number, number])[]): BpfInsn[] {
  return portProgram(ranges, ACCEPT, 0);
}

/** Everything except IPv4 UDP datagrams to a port in one of `ranges`. */
export function rejectPorts(ranges: readonly (readonly [number, number])[]): BpfInsn[] {
  return portProgram(ranges, 0, ACCEPT);
}

/** Flat [code, jt, jf, k, ...] for the native side. */
export function flatten(prog: readonly BpfInsn[]): Uint32Array {
  const out = new Uint32Array(prog.length * 4);
  prog.forEach((p, i) => out.set([p.code, p.jt, p.jf, p.k], i * 4));
  return out;
}

/**
 * Runs a program the way the kernel does, for the tests: the snap length it returns for
 * `frame` (0: dropped). Only the instructions above.
 */
export function runBpf(prog: readonly BpfInsn[], frame: Uint8Array): number {
  let a = 0,
    x = 0;
  const v = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  for (let pc = 0; pc < prog.length; pc++) {
    const p = prog[pc];
    switch (p.code) {
      case LD_H_ABS:
        if (p.k + 2 > frame.length) return 0;
        a = v.getUint16(p.k);
        break;
      case LD_B_ABS:
        if (p.k + 1 > frame.length) return 0;
        a = frame[p.k];
        break;
      case LDX_B_MSH:
        if (p.k + 1 > frame.length) return 0;
        x = (frame[p.k] & 0x0f) * 4;
        break;
      case LD_H_IND:
        if (x + p.k + 2 > frame.length) return 0;
        a = v.getUint16(x + p.k);
        break;
      case JEQ_K:
        pc += a === p.k ? p.jt : p.jf;
        break;
      case JGT_K:
        pc += a > p.k ? p.jt : p.jf;
        break;
      case JGE_K:
        pc += a >= p.k ? p.jt : p.jf;
        break;
      case JSET_K:
        pc += a & p.k ? p.jt : p.jf;
        break;
      case RET_K:
        return p.k;
      default:
        throw new Error(`runBpf: opcode 0x${p.code.toString(16)}`);
    }
  }
  return 0;
}
