/**
 * QP numbers a destroyed QP gave up, kept out of reuse until half the port range has been given up
 * after them (issue 30.2). A QP's number is its UDP port, drawn at random from `rdma.port-range`;
 * drawn again soon after, it would take packets still meant for the old QP, and programs that
 * keep a peer's address after the peer's QP is gone (UCX's ud_verbs matches a connection request
 * by the sender's address and QPN: openucx/ucx PR 11092) would take the new QP for the old one.
 * NICs hand out QPNs in turn for the same reason. A fixed ring and a bitmap: no allocation after
 * construction, O(1) per QP.
 */
export class PortQuarantine {
  private readonly lo: number;
  private readonly held: Uint8Array;
  private readonly ring: Int32Array;
  private head = 0;
  private count = 0;

  constructor(lo: number, hi: number) {
    const span = hi - lo + 1;
    this.lo = lo;
    this.held = new Uint8Array(span);
    this.ring = new Int32Array(Math.max(1, span >> 1));
  }

  /** `port` was given up: out of reuse until `span / 2` more have been (the oldest returns first). */
  retire(port: number): void {
    const i = port - this.lo;
    if (i < 0 || i >= this.held.length || this.held[i] === 1) return;
    if (this.count === this.ring.length) {
      this.held[this.ring[this.head] - this.lo] = 0;
      this.head = (this.head + 1) % this.ring.length;
      this.count--;
    }
    this.ring[(this.head + this.count) % this.ring.length] = port;
    this.held[i] = 1;
    this.count++;
  }

  /** Whether `port` was given up too recently to be drawn again (when others are free). */
  has(port: number): boolean {
    const i = port - this.lo;
    return i >= 0 && i < this.held.length && this.held[i] === 1;
  }
}
