/**
 * External payload memory (DPDK's rte_pktmbuf_attach_extbuf, VPP's external buffer data): the
 * memories a pool buffer's bytes may live in instead of the pool, by id (0: none). A buffer
 * flagged BufferFlag.EXT_DATA holds no bytes of its own: its `offset` and `length` are a window
 * of memory `extId[bi]` (an RDMA MR a segment's payload is sent from, never copied into the
 * pool), and the packet's head carries EXT_CHAIN. Each id counts the buffers attached to it; its
 * owner retires it (an MR deregistered) and it goes, with its reference to the memory, once the
 * last such buffer is freed: a queued segment never reads memory that was let go. A mirror (the
 * memif driver's native table, core.ExtTable) is told every id that comes and goes, so that a
 * driver's gather reads the same bytes in place.
 */

/** Where ids are mirrored (core.ExtTable). */
export interface ExtMirror {
  set(id: number, memory: Uint8Array): void;
  clear(id: number): void;
}

export class ExtMemories {
  /** Memory by id (index 0 unused). */
  readonly mem: (Uint8Array | null)[] = [null];
  /** A DataView of each, for the checksum. */
  readonly view: (DataView | null)[] = [null];
  /**
   * Set by a driver that transmits external segments in place (memif in copy mode, af_packet
   * with sendmmsg): payloads are attached rather than copied. Without one every such segment
   * would be copied anyway, later (materialize), so the senders copy at once.
   */
  wanted = false;
  /**
   * Per interface index: whether its driver gathered external segments at its last transmit
   * (drivers/interfaces.ts's tx node writes it every burst; 1 until then). A sender whose
   * peer is through an interface that does not (a zero-copy memif client, af_packet beside a
   * memif server) copies at once instead of attaching what the tx node would copy anyway.
   */
  readonly txTakes = new Uint8Array(4096).fill(1);
  private refs = new Int32Array(16);
  private retired = new Uint8Array(16);
  private readonly freeIds: number[] = [];
  private mirrors: ExtMirror[] = [];

  /** A new id for `memory` (its owner retires it when it lets the memory go). */
  add(memory: Uint8Array): number {
    const id = this.freeIds.length > 0 ? (this.freeIds.pop() as number) : this.mem.length;
    if (id === this.mem.length) {
      this.mem.push(null);
      this.view.push(null);
    }
    if (id >= this.refs.length) {
      const r = new Int32Array(this.refs.length * 2);
      r.set(this.refs);
      this.refs = r;
      const t = new Uint8Array(this.retired.length * 2);
      t.set(this.retired);
      this.retired = t;
    }
    this.mem[id] = memory;
    this.view[id] = new DataView(memory.buffer, memory.byteOffset, memory.byteLength);
    this.refs[id] = 0;
    this.retired[id] = 0;
    for (const m of this.mirrors) m.set(id, memory);
    return id;
  }

  /** The owner lets `id` go: it goes now, or when the last buffer attached to it is freed. */
  retire(id: number): void {
    if (id <= 0 || id >= this.mem.length || this.mem[id] === null || this.retired[id] !== 0)
      throw new Error(`ext memory: id ${id} is not in use`);
    if (this.refs[id] === 0) this.release(id);
    else this.retired[id] = 1;
  }

  /** One more buffer attached to `id`. */
  ref(id: number): void {
    this.refs[id]++;
  }

  /** A buffer attached to `id` was freed. */
  unref(id: number): void {
    if (--this.refs[id] === 0 && this.retired[id] !== 0) this.release(id);
  }

  /** Buffers attached to `id` now (tests, `show buffers`). */
  attached(id: number): number {
    return id > 0 && id < this.mem.length ? this.refs[id] : 0;
  }

  /** Ids in use (listed or retired with buffers still attached). */
  inUse(): number {
    let n = 0;
    for (let id = 1; id < this.mem.length; id++) if (this.mem[id] !== null) n++;
    return n;
  }

  /** Mirror every id, those in use now first. */
  addMirror(m: ExtMirror): void {
    if (this.mirrors.includes(m)) return;
    this.mirrors.push(m);
    for (let id = 1; id < this.mem.length; id++) {
      const mem = this.mem[id];
      if (mem !== null) m.set(id, mem);
    }
  }

  private release(id: number): void {
    this.mem[id] = null;
    this.view[id] = null;
    this.retired[id] = 0;
    for (const m of this.mirrors) m.clear(id);
    this.freeIds.push(id);
  }
}
