/**
 * Received payload left in a memif peer's memory (core.RxWindows, native/core/rx_windows.h).
 *
 * A memif server copies every frame it receives out of the client's buffers, and DDP then copies
 * the payload again into the MR or the receive's list: three copies of each byte sent towards a
 * server, two the other way. With a pattern set (the RDMA stack's: a DDP segment,
 * nodes/rdma/rx-defer.ts), the server copies only such a frame's first bytes (its headers) into
 * a pool buffer and chains buffers flagged PEER_DATA whose bytes are still in the client's
 * buffers; the packet's head is flagged PEER_CHAIN. ChainCopy (ddp-input's placement) reads
 * them there. The ring slots go back to the client only at the driver's next look at the ring:
 * first, whatever is still alive then is copied into its own buffer. A node that sends such a
 * packet on to a node not flagged NodeFlag.PEER_DATA_OK (trp-input and ddp-input are) calls
 * `BufferPool.settlePeer` first (udp4-input, trp-input), and so do whatever reads a packet's
 * bytes otherwise (an rx capture or fault injector, readPacket and so the worker handoff,
 * ddp-input for a segment that straddles two SG entries).
 *
 * One table per pool, shared by its memif drivers and its ChainCopy.
 */
import { BufferFlag, type BufferPool } from './buffer-pool.ts';
import { loadCore, type RxDeferPattern, type RxWindowsNative } from '../native/addons.ts';

export type { RxDeferPattern };

const tables = new WeakMap<BufferPool, RxWindowsNative>();

/** The pool's windows table, made on first use. */
export function peerWindowsOf(pool: BufferPool): RxWindowsNative {
  let t = tables.get(pool);
  if (t === undefined) {
    t = new (loadCore().RxWindows)({
      memory: pool.memory.buffer,
      count: pool.count,
      flags: pool.flags,
      next: pool.next,
      flagNext: BufferFlag.NEXT_PRESENT,
      flagPeer: BufferFlag.PEER_DATA,
      flagPeerChain: BufferFlag.PEER_CHAIN,
    });
    tables.set(pool, t);
    pool.peerWindows = t;
  }
  return t;
}
