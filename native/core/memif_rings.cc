// memif data path: regions and rings, receive and transmit bursts, interrupts, zero copy and
// the orphan list (the Memif methods declared in memif.h).
#include "memif.h"

namespace rg {
namespace memifimpl {

void Memif::PushDone(Lane& L, uint32_t bi, uint32_t& done_n) {
  if (done_n < L.pool->done_cap)
    L.pool->done[done_n++] = bi;
  else
    L.orphans->push_back(bi);
}

// Recycle a buffer we did not hand out: back to the stash, or to `done` when it is full.
void Memif::Recycle(Lane& L, uint32_t bi, uint32_t& stash_n, uint32_t& done_n) {
  PoolView& p = *L.pool;
  if (stash_n < p.stash_cap)
    p.stash[stash_n++] = bi;
  else if (done_n < p.done_cap)
    p.done[done_n++] = bi;
  else
    L.orphans->push_back(bi);
}

// Client receive ring: give the server empty buffers (zero-copy: pool buffers from the
// stash; copy mode: the slot's own buffer in region 0).
void Memif::Refill(Lane& L, Ring& r) {
  uint16_t head = r.head;
  uint32_t room = r.size - static_cast<uint16_t>(head - r.last);
  if (room == 0) return;
  if (zc_) {
    PoolView& p = *L.pool;
    uint32_t stash_n = p.state[kStStash];
    if (room > stash_n) room = stash_n;
    for (uint32_t k = 0; k < room; k++) {
      const uint32_t bi = p.stash[--stash_n];
      const uint16_t s = head & r.mask;
      r.shadow[s] = bi;
      Desc& d = r.desc[s];
      d.flags = 0;
      d.region = 1;
      d.offset = p.DataStart(bi);
      d.length = p.data_size;
      head++;
    }
    p.state[kStStash] = stash_n;
  } else {
    for (uint32_t k = 0; k < room; k++) {
      const uint16_t s = head & r.mask;
      Desc& d = r.desc[s];
      d.flags = 0;
      d.region = 0;
      d.offset = r.buffers + s * buffer_size_;
      d.length = buffer_size_;
      head++;
    }
  }
  if (head != r.head) {
    r.head = head;
    Store16Release(r.head_p(), head);
  }
}

// Validates one descriptor of a copy-mode receive; the address of its bytes or nullptr.
const uint8_t* Memif::DescData(const Desc& d) const {
  if (d.region >= regions_.size()) return nullptr;
  const Region& reg = regions_[d.region];
  if (reg.addr == nullptr || uint64_t{d.offset} + d.length > reg.size) return nullptr;
  return reg.addr + d.offset;
}

// Copy mode: start the cache misses of a frame kRxPrefetchAhead slots on while this one is copied.
// Its bytes were just written by the peer's core and its destination buffer may be cold; a
// frame's misses, taken one after another, cost more than the copy (memif-input in the memif
// bench's spine, 6 alternated runs: median 65 -> 39 ns a frame; 16 ahead did no better). Only
// a hint: the descriptor is read into a local copy and bounds-checked (DescData) before its
// address is used at all, and the frame itself is read and checked again when its turn comes.
void Memif::PrefetchAhead(const PoolView& p, const Ring& r, uint16_t cur, uint32_t stash_n) const {
  const volatile Desc& sd = r.desc[(cur + kRxPrefetchAhead) & r.mask];
  Desc d;
  d.region = sd.region;
  d.length = sd.length;
  d.offset = sd.offset;
  const uint8_t* src = DescData(d);
  if (src != nullptr) {
    __builtin_prefetch(src);
    if (d.length > 64) __builtin_prefetch(src + 64);
  }
  if (stash_n > kRxPrefetchAhead) __builtin_prefetch(p.mem + p.DataStart(p.stash[stash_n - 1 - kRxPrefetchAhead]), 1);
}

// The peer owns the descriptors it publishes and may rewrite them at any moment (a double
// fetch is a hole): each descriptor of a frame is read once, volatile, into chain_, validated
// there, and only the copy is used afterwards. Stash pops are counted from the copies.
uint32_t Memif::RxRing(Lane& L, Ring& r, uint32_t* out, uint32_t max) {
  PoolView& p = *L.pool;
  const bool c2s = server_;  // the server receives on C2S rings, the client on S2C rings
  if (r.holding) Settle(r);
  // Payload left in the client's memory: a server's own queues in copy mode, a pattern set.
  const bool defer = c2s && !zc_ && &L == &own_ && win_ != nullptr && defer_env_ && win_->active();
  uint16_t cur = r.last;
  const uint16_t last = c2s ? Load16Acquire(r.head_p()) : Load16Acquire(r.tail_p());
  uint16_t avail = static_cast<uint16_t>(last - cur);
  if (avail > r.size) {
    L.fault = "Ring index beyond the ring size";
    return 0;
  }
  // A client's receive ring holds only the buffers it gave (head); a server publishing its
  // tail past them would hand us slots we never filled.
  if (!c2s && avail > static_cast<uint16_t>(r.head - cur)) {
    L.fault = "Ring tail beyond the buffers given to the peer";
    return 0;
  }
  if (avail == 0) {
    if (!c2s) Refill(L, r);
    return 0;
  }
  uint32_t stash_n = p.state[kStStash];
  uint32_t done_n = p.state[kStDone];
  const uint32_t ds = p.data_size;
  uint32_t n = 0;
  uint64_t bytes = 0;
  Desc* const chain = L.chain;
  // A burst ends after the frame that reaches kRxBurstBytes (common.h): what one pass places.
  while (n < max && avail > 0 && bytes < kRxBurstBytes) {
    if (!zc_ && avail > kRxPrefetchAhead) PrefetchAhead(p, r, cur, stash_n);
    // The frame: descriptors up to one without NEXT, each copied once.
    uint32_t segs = 0;
    uint64_t total = 0;
    bool complete = false, bad = false, starved = false;
    while (segs < avail && segs < kMaxChain) {
      const volatile Desc& sd = r.desc[(cur + segs) & r.mask];
      Desc& d = chain[segs];
      d.flags = sd.flags;
      d.region = sd.region;
      d.length = sd.length;
      d.offset = sd.offset;
      if (zc_) {
        if (d.length > ds || r.shadow[(cur + segs) & r.mask] == kInvalid) bad = true;
      } else if (DescData(d) == nullptr) {
        bad = true;
      }
      total += d.length;
      segs++;
      if (!(d.flags & memif::kDescFlagNext)) {
        complete = true;
        break;
      }
    }
    if (!complete) {
      // The rest of the frame is not published yet, unless it cannot ever be.
      if (segs < kMaxChain && segs < r.size) break;
      bad = true;
    }
    if (bad || total > kMaxFrame) {
      L.rx_errors++;
      for (uint32_t k = 0; k < segs; k++) {
        uint32_t& sh = zc_ ? r.shadow[(cur + k) & r.mask] : dummy_;
        if (zc_ && sh != kInvalid) {
          Recycle(L, sh, stash_n, done_n);
          sh = kInvalid;
        }
      }
      cur += segs;
      avail -= segs;
      continue;
    }
    if (zc_) {
      // The buffers are the pool's: hand them over as they are.
      uint32_t head = kInvalid, prev = kInvalid;
      for (uint32_t k = 0; k < segs; k++) {
        const uint16_t s = (cur + k) & r.mask;
        const uint32_t bi = r.shadow[s];
        r.shadow[s] = kInvalid;
        p.offset[bi] = p.DataStart(bi);
        p.length[bi] = chain[k].length;
        p.flags[bi] = 0;
        // The peer's core just wrote it: ethernet-input's read would miss, one frame at a time.
        if (k == 0) __builtin_prefetch(p.mem + p.DataStart(bi));
        if (prev != kInvalid) {
          p.flags[prev] = p.f_next;
          p.next[prev] = bi;
        } else {
          head = bi;
        }
        prev = bi;
      }
      out[n++] = head;
    } else if (uint32_t dhead = 0; defer && RxDefer(L, r, segs, total, stash_n, &dhead, &starved)) {
      out[n++] = dhead;
    } else if (starved) {
      L.rx_no_buffers++;
      break;
    } else {
      const uint32_t need = total == 0 ? 1 : static_cast<uint32_t>((total + ds - 1) / ds);
      if (need > stash_n) {
        L.rx_no_buffers++;
        break;
      }
      uint32_t bi = p.stash[--stash_n];
      const uint32_t head = bi;
      uint8_t* dst = p.mem + p.DataStart(bi);
      uint32_t w = 0;
      bool dry = false;
      p.offset[bi] = p.DataStart(bi);
      p.flags[bi] = 0;
      for (uint32_t k = 0; k < segs && !dry; k++) {
        const Desc& d = chain[k];
        const uint8_t* src = DescData(d);
        uint32_t len = d.length;
        while (len > 0) {
          if (w == ds) {
            // `need` came from these same lengths, so the stash has them; checked all the same.
            if (stash_n == 0) {
              dry = true;
              break;
            }
            p.length[bi] = w;
            const uint32_t nb = p.stash[--stash_n];
            p.flags[bi] = p.f_next;
            p.next[bi] = nb;
            bi = nb;
            p.offset[bi] = p.DataStart(bi);
            p.flags[bi] = 0;
            dst = p.mem + p.DataStart(bi);
            w = 0;
          }
          uint32_t take = std::min(len, ds - w);
          std::memcpy(dst + w, src, take);
          w += take;
          src += take;
          len -= take;
        }
      }
      p.length[bi] = w;
      p.flags[bi] = 0;
      if (dry) {
        // Give the chain back and drop the frame.
        for (uint32_t b = head;;) {
          const bool more = (p.flags[b] & p.f_next) != 0;
          const uint32_t nx = p.next[b];
          Recycle(L, b, stash_n, done_n);
          if (!more || b == bi) break;
          b = nx;
        }
        L.rx_errors++;
        cur += segs;
        avail -= segs;
        continue;
      }
      out[n++] = head;
    }
    bytes += total;
    if (segs > 1) L.rx_chained++;
    cur += segs;
    avail -= segs;
  }
  r.last = cur;
  if (c2s) {
    if (r.held.empty())
      Store16Release(r.tail_p(), cur);
    else
      r.holding = true;  // published at the next look (Settle), once what still lives is copied in
  }
  p.state[kStStash] = stash_n;
  p.state[kStDone] = done_n;
  if (!c2s) Refill(L, r);
  L.rx_packets += n;
  L.rx_bytes += bytes;
  return n;
}

// The frame chain[0..segs) (validated, `total` bytes) of a server's receive ring: when it is at
// least the pattern's minBytes, its first headBytes lie in its first descriptor and (copied
// first, then read) match the pattern, those bytes are copied into a head buffer and the rest is
// left where it is: one pool buffer per piece of up to dataSize bytes of a descriptor, flagged
// peer, its window in `win_`, held by the ring (Settle). *head: the packet; *dry when the frame
// matched but the stash lacks buffers for it (the caller stops the burst). A client may rewrite
// the payload until it is placed (its own data); the headers are read from our copy only.
bool Memif::RxDefer(Lane& L, Ring& r, uint32_t segs, uint64_t total, uint32_t& stash_n, uint32_t* head, bool* dry) {
  PoolView& p = *L.pool;
  const Desc* const chain = L.chain;
  const uint32_t hb = win_->head_bytes(), ds = p.data_size;
  if (total < win_->min_bytes() || chain[0].length < hb || hb > ds) return false;
  uint8_t hdr[RxWindows::kMaxHead];
  std::memcpy(hdr, DescData(chain[0]), hb);
  if (!win_->Matches(hdr)) return false;
  uint32_t need = 1;
  for (uint32_t k = 0; k < segs; k++) {
    const uint32_t len = chain[k].length - (k == 0 ? hb : 0);
    need += (len + ds - 1) / ds;
  }
  if (need > stash_n) {
    *dry = true;
    return false;
  }
  if (r.held.capacity() < p.stash_cap) r.held.reserve(p.stash_cap);
  const uint32_t h = p.stash[--stash_n];
  p.offset[h] = p.DataStart(h);
  p.length[h] = hb;
  std::memcpy(p.mem + p.DataStart(h), hdr, hb);
  p.flags[h] = win_->f_peer_chain();
  uint32_t prev = h;
  for (uint32_t k = 0; k < segs; k++) {
    const uint8_t* src = DescData(chain[k]);
    uint32_t len = chain[k].length;
    if (k == 0) {
      src += hb;
      len -= hb;
    }
    while (len > 0) {
      const uint32_t take = std::min(len, ds);
      const uint32_t b = p.stash[--stash_n];
      const uint32_t base = p.DataStart(b);
      p.offset[b] = base;
      p.length[b] = take;
      p.flags[b] = win_->f_peer();
      win_->Set(b, src, base, take);
      p.flags[prev] |= p.f_next;
      p.next[prev] = b;
      r.held.push_back(b);
      prev = b;
      src += take;
      len -= take;
    }
  }
  L.rx_deferred++;
  *head = h;
  return true;
}

// Held windows still flagged peer (their packets still alive: held by a node past the pass that
// received them) are copied into their own buffers; then the slots go back to the client.
void Memif::Settle(Ring& r) {
  for (const uint32_t bi : r.held) win_->CopyIn(bi);
  r.held.clear();
  r.holding = false;
  Store16Release(r.tail_p(), r.last);
}

// One receive burst on rx queue q with lane L's buffers (the owner's queues and a MemifLane's
// alike); stops at a protocol error, left in L.fault for the owner to disconnect.
uint32_t Memif::RxQueue(Lane& L, uint32_t q, uint32_t* out, uint32_t max) {
  Ring& r = rx_[q];
  uint32_t n = RxRing(L, r, out, max);
  if (L.fault != nullptr) return n;
  if (n > 0) {
    r.empty_since = 0;
    if (!r.masked) Mask(q, r);
    return n;
  }
  if (r.masked) {
    // Traffic stopped a moment ago: keep polling with interrupts off (the sender need not kick
    // on every burst) for idle_ns_ (the engine's idle-poll time), then switch them on. The hold eventfd keeps the
    // engine from sleeping meanwhile: it must not sleep on a ring whose sender will not kick.
    const uint64_t now = NowNs();
    if (r.empty_since == 0) r.empty_since = now;
    if (now - r.empty_since < idle_ns_) return 0;
    Unmask(q, r);
    // A frame published before the sender saw the flag cleared would otherwise wait for the
    // next kick: look once more.
    n = RxRing(L, r, out, max);
    if (L.fault != nullptr) return n;
    if (n > 0) {
      r.empty_since = 0;
      Mask(q, r);
    }
  }
  // Take the kick only when the ring really is empty: not when `max` (0 from the driver's
  // refill) or a lack of buffers stopped the look with frames still in it, or the kick of those
  // frames would be gone while they wait. And after taking one, look again: a frame published
  // (and kicked) between the look and the drain would otherwise stay in the ring while the engine
  // sleeps. (RDMA_GRAPH_MEMIF_RX_GAP_US widens that gap for test/memif-wakeup.test.ts.)
  if (rx_gap_us_ > 0) usleep(rx_gap_us_);
  if (max > 0 && RingEmpty(r) && EventRead(r.fd)) {
    L.interrupts++;
    if (n == 0 && !r.masked) {
      n = RxRing(L, r, out, max);
      if (n > 0 && L.fault == nullptr) {
        r.empty_since = 0;
        Mask(q, r);
      }
    }
  }
  return n;
}

// A protocol error the data path found on one of our queues: end the connection.
void Memif::TakeFault() {
  const char* f = own_.fault;
  own_.fault = nullptr;
  if (f != nullptr) Disconnect(f, true, true);
}

// One receive burst on queue q into out (at most max): memifRx's body.
uint32_t Memif::RxBurst(uint32_t q, uint32_t* out, uint32_t max) {
  if (released_ || !pool_bound_) return 0;
  pool_.state[kStDone] = 0;
  if (q == 0 && (phase_ != Phase::kConnected || ++busy_polls_ >= kBusyControlEvery)) {
    busy_polls_ = 0;
    Poll();
  }
  if (phase_ != Phase::kConnected || q >= rx_.size() || !rx_[q].present) return 0;
  const uint32_t n = RxQueue(own_, q, out, max);
  if (own_.fault != nullptr) {
    TakeFault();
    return n;
  }
  if (q == 0 && n == 0) {
    // Control channel: every empty poll once interrupts are back on, every kIdleControlEvery-th
    // while masked (traffic a moment ago): its syscalls (accept4, recvmsg) cost more than an
    // empty poll, and checked every 16th they added ~5 % to a ping-pong's round trip (measured).
    // Transmitted zero-copy buffers still come back every kIdleReclaimEvery-th.
    const bool masked = rx_[0].masked;
    if (!masked || ++idle_polls_ >= kIdleControlEvery) {
      idle_polls_ = 0;
      busy_polls_ = 0;
      Poll();
    }
    if (zc_ && phase_ == Phase::kConnected && (!masked || ++reclaim_polls_ >= kIdleReclaimEvery)) {
      reclaim_polls_ = 0;
      ReclaimAll();
    }
  }
  return n;
}

bool Memif::RxQuickEmpty(uint32_t q) {
  if (released_ || !pool_bound_ || phase_ != Phase::kConnected || q >= rx_.size() || rx_gap_us_ > 0) return false;
  Ring& r = rx_[q];
  // Masked since a look that found it empty (empty_since set), and nothing published since.
  if (!r.present || !r.masked || r.empty_since == 0 || r.holding || !RingEmpty(r)) return false;
  // A client's ring holds a buffer in every slot (else the full poll refills it).
  if (!server_ && static_cast<uint16_t>(r.head - r.last) != r.size) return false;
  // Empty for idle_ns_ already: the full poll unmasks it (read each poll, as there: an unmask
  // late by even a few polls would let the engine try to sleep on a masked ring first).
  if (NowNs() - r.empty_since >= idle_ns_) return false;
  if (q == 0) {
    if (busy_polls_ + 1 >= kBusyControlEvery || idle_polls_ + 1 >= kIdleControlEvery) return false;
    if (zc_ && reclaim_polls_ + 1 >= kIdleReclaimEvery) return false;
    busy_polls_++;
    idle_polls_++;
    if (zc_) reclaim_polls_++;
  }
  pool_.state[kStDone] = 0;
  return true;
}

// Nothing published that we have not taken (a server's C2S head, a client's S2C tail).
bool Memif::RingEmpty(Ring& r) { return (server_ ? Load16Acquire(r.head_p()) : Load16Acquire(r.tail_p())) == r.last; }

uint64_t Memif::NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Receiving: no kicks wanted; the queue's hold eventfd turns readable so the engine polls on.
void Memif::Mask(uint32_t q, Ring& r) {
  Store16Relaxed(r.flags_p(), memif::kRingFlagMaskInt);
  r.masked = true;
  if (!hold_set_[q]) {
    uint64_t one = 1;
    if (write(hold_[q], &one, sizeof one) == static_cast<ssize_t>(sizeof one)) hold_set_[q] = 1;
  }
}

// Idle: kicks wanted again (the store is ordered before any later read of head/tail), and
// the engine may sleep.
void Memif::Unmask(uint32_t q, Ring& r) {
  Store16Relaxed(r.flags_p(), 0);
  r.masked = false;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  ClearHold(q);
}

void Memif::ClearHold(uint32_t q) {
  if (hold_set_[q]) {
    uint64_t v;
    if (read(hold_[q], &v, sizeof v) >= 0 || errno == EAGAIN) hold_set_[q] = 0;
  }
}

// Zero-copy transmit rings: buffers the server has moved tail past go to `done`.
void Memif::Reclaim(Lane& L, Ring& r) {
  PoolView& p = *L.pool;
  uint32_t done_n = p.state[kStDone];
  const uint16_t tail = Load16Acquire(r.tail_p());
  uint16_t last = r.last;
  if (static_cast<uint16_t>(tail - last) > static_cast<uint16_t>(r.head - last)) return;  // tail beyond head: ignore
  while (last != tail && done_n < p.done_cap) {
    uint32_t& sh = r.shadow[last & r.mask];
    if (sh != kInvalid) {
      p.done[done_n++] = sh;
      sh = kInvalid;
    }
    last++;
  }
  r.last = last;
  p.state[kStDone] = done_n;
}

void Memif::ReclaimAll() {
  for (Ring& r : tx_)
    if (r.present) Reclaim(own_, r);
}

void Memif::Kick(Lane& L, Ring& r) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (Load16Relaxed(r.flags_p()) & memif::kRingFlagMaskInt) return;
  const int w = EventWrite(r.fd);
  if (w > 0)
    L.kicks++;
  else if (w < 0)
    L.fault = "Interrupt fd made blocking by the peer";
}

// Gathers a pool packet's segments and where each one's bytes are: in the pool, or (a segment
// flagged f_ext, `ext_ok`: copy mode) in the external memory its id names, the window checked
// against that memory's length. 0 when the chain or a segment is invalid, or external where
// it cannot be (zero copy: its bytes are in no region the peer maps).
uint32_t Memif::Gather(const PoolView& p, uint32_t head, uint32_t* segs, const uint8_t** src, uint64_t* total,
                       bool ext_ok, bool* ext) const {
  uint32_t bi = head, n = 0;
  uint64_t len = 0;
  for (;;) {
    if (bi >= p.count || n == kMaxTxSegs) return 0;
    if (p.f_ext != 0 && (p.flags[bi] & p.f_ext)) {
      if (!ext_ok || p.ext == nullptr) return 0;
      const uint8_t* at = p.ext->Window(p.ext_id[bi], p.offset[bi], p.length[bi]);
      if (at == nullptr) return 0;
      src[n] = at;
      if (ext != nullptr) *ext = true;
    } else {
      if (uint64_t{p.offset[bi]} + p.length[bi] > p.mem_len) return 0;
      src[n] = p.mem + p.offset[bi];
    }
    segs[n++] = bi;
    len += p.length[bi];
    if (!(p.flags[bi] & p.f_next)) break;
    bi = p.next[bi];
  }
  *total = len;
  return n;
}

// One transmit burst of n buffers on queue q: memifTx's body; how many were taken.
uint32_t Memif::TxBurst(uint32_t q, const uint32_t* bufs, uint32_t n) {
  if (released_ || !pool_bound_) return 0;
  if (n > 256) n = 256;  // one frame's worth per call: `done` always has room
  pool_.state[kStDone] = 0;
  if (phase_ != Phase::kConnected || ntx_run_ == 0 || n == 0) {
    own_.tx_refused += n;
    return 0;
  }
  const uint32_t taken = TxQueue(own_, q, bufs, n);
  if (own_.fault != nullptr) TakeFault();
  return taken;
}

// One transmit burst on tx queue q with lane L's buffers; queues beyond the rings the peer
// took share them (with queues over threads, one thread at a time: Shared::txmu).
uint32_t Memif::TxQueue(Lane& L, uint32_t q, const uint32_t* bufs, uint32_t n) {
  if (ntx_run_ == 0) {
    L.tx_refused += n;
    return 0;
  }
  uint32_t k = q % ntx_run_, idx = 0;
  for (; idx < tx_.size(); idx++) {
    if (tx_[idx].present && k-- == 0) break;
  }
  Ring& r = tx_[idx];
  // Queues spread over threads: a ring two of them map to (the peer took fewer rings than there
  // are queues) is used by one at a time.
  std::unique_lock<std::mutex> g;
  if (shared_ != nullptr) g = std::unique_lock<std::mutex>(shared_->txmu[idx]);
  uint32_t taken = zc_ ? TxZeroCopy(L, r, bufs, n) : TxCopy(L, r, bufs, n);
  L.tx_refused += n - taken;
  return taken;
}

uint32_t Memif::TxZeroCopy(Lane& L, Ring& r, const uint32_t* bufs, uint32_t n) {
  Reclaim(L, r);
  PoolView& p = *L.pool;
  uint16_t slot = r.head;
  uint32_t free = r.size - static_cast<uint16_t>(slot - r.last);
  uint32_t done_n = p.state[kStDone];
  uint32_t taken = 0, sent = 0;
  uint64_t bytes = 0;
  uint32_t segs[kMaxTxSegs];
  const uint8_t* src[kMaxTxSegs];
  for (; taken < n; taken++) {
    uint64_t total = 0;
    bool ext = false;
    const uint32_t ns = Gather(p, bufs[taken], segs, src, &total, zc_gather_, &ext);
    if (ns == 0) {
      L.tx_errors++;
      PushDone(L, bufs[taken], done_n);
      continue;
    }
    if (ext) {
      // A payload from an MR: copied once, into this ring's own slot buffers (no pool buffer
      // held for it: the frame's buffers are done at once). The slots' shadows stay kInvalid (a
      // free slot's is: Reclaim clears each one it passes), so Reclaim reports nothing for them.
      bool bad = false;
      const uint32_t used = CopyFrame(r, slot, free, p, segs, src, ns, &bad);
      if (used == 0) break;  // ring full (a client's own slots are never invalid)
      slot = static_cast<uint16_t>(slot + used);
      free -= used;
      PushDone(L, bufs[taken], done_n);
      bytes += total;
      sent++;
      L.tx_gathered++;
      if (used > 1) L.tx_chained++;
      continue;
    }
    if (ns > free) break;
    for (uint32_t s = 0; s < ns; s++) {
      const uint32_t bi = segs[s];
      const uint16_t i = slot & r.mask;
      Desc& d = r.desc[i];
      d.flags = s + 1 < ns ? memif::kDescFlagNext : 0;
      d.region = 1;
      d.length = p.length[bi];
      d.offset = p.offset[bi];
      r.shadow[i] = s == 0 ? bufs[taken] : kInvalid;
      slot++;
    }
    free -= ns;
    bytes += total;
    sent++;
    if (ns > 1) L.tx_chained++;
  }
  p.state[kStDone] = done_n;
  if (slot != r.head) {
    r.head = slot;
    Store16Release(r.head_p(), slot);
    Kick(L, r);
  }
  L.tx_packets += sent;
  L.tx_bytes += bytes;
  return taken;
}

uint32_t Memif::TxCopy(Lane& L, Ring& r, const uint32_t* bufs, uint32_t n) {
  PoolView& p = *L.pool;
  // Server: fills the client's empty buffers from tail to head. Client (copy mode): writes
  // into its own slot buffers at head, up to the tail the server published.
  uint16_t slot;
  uint32_t free;
  if (server_) {
    slot = r.head;  // our tail
    uint16_t h = Load16Acquire(r.head_p());
    free = static_cast<uint16_t>(h - slot);
    if (free > r.size) {
      L.fault = "Ring index beyond the ring size";
      return 0;
    }
  } else {
    slot = r.head;
    free = r.size - static_cast<uint16_t>(slot - Load16Acquire(r.tail_p()));
    if (free > r.size) {
      L.fault = "Ring index beyond the ring size";
      return 0;
    }
  }
  uint32_t done_n = p.state[kStDone];
  uint32_t taken = 0, sent = 0;
  uint64_t bytes = 0;
  uint32_t segs[kMaxTxSegs];
  const uint8_t* srcs[kMaxTxSegs];
  for (; taken < n; taken++) {
    uint64_t total = 0;
    bool ext = false;
    const uint32_t ns = Gather(p, bufs[taken], segs, srcs, &total, true, &ext);
    if (ns == 0) {
      L.tx_errors++;
      PushDone(L, bufs[taken], done_n);
      continue;
    }
    bool bad = false;
    const uint32_t used = CopyFrame(r, slot, free, p, segs, srcs, ns, &bad);
    if (bad) return TxFail(L, taken, done_n);
    if (used == 0) break;  // ring full mid-frame: the frame stays with the caller
    slot = static_cast<uint16_t>(slot + used);
    free -= used;
    PushDone(L, bufs[taken], done_n);
    bytes += total;
    sent++;
    if (ext) L.tx_gathered++;
    if (used > 1) L.tx_chained++;
  }
  p.state[kStDone] = done_n;
  if (slot != r.head) {
    r.head = slot;
    Store16Release(server_ ? r.tail_p() : r.head_p(), slot);
    Kick(L, r);
  }
  L.tx_packets += sent;
  L.tx_bytes += bytes;
  return taken;
}

uint32_t Memif::CopyFrame(Ring& r, uint16_t slot, uint32_t free, const PoolView& p, const uint32_t* segs,
                          const uint8_t* const* srcs, uint32_t ns, bool* bad) {
  if (free == 0) return 0;
  uint32_t used = 1, w = 0, room;
  uint8_t* dst;
  Desc* d = &r.desc[slot & r.mask];
  if (!DescRoom(r, slot, &dst, &room)) {
    *bad = true;
    return 0;
  }
  for (uint32_t s = 0; s < ns; s++) {
    const uint8_t* src = srcs[s];
    uint32_t len = p.length[segs[s]];
    while (len > 0) {
      if (w == room) {
        if (used == free) return 0;
        d->length = w;
        d->flags = memif::kDescFlagNext;
        slot++;
        used++;
        d = &r.desc[slot & r.mask];
        if (!DescRoom(r, slot, &dst, &room)) {
          *bad = true;
          return 0;
        }
        w = 0;
      }
      const uint32_t take = std::min(len, room - w);
      std::memcpy(dst + w, src, take);
      w += take;
      src += take;
      len -= take;
    }
  }
  d->length = w;
  d->flags = 0;
  return used;
}

// Where a copy-mode transmit slot's bytes go and how many fit.
bool Memif::DescRoom(Ring& r, uint16_t slot, uint8_t** dst, uint32_t* room) {
  Desc& d = r.desc[slot & r.mask];
  if (!server_) {
    d.region = 0;
    d.offset = r.buffers + (slot & r.mask) * buffer_size_;
    *dst = regions_[0].addr + d.offset;
    *room = buffer_size_;
    return true;
  }
  const uint32_t len = d.length;  // the room the client gave
  Desc copy = d;
  copy.length = len;
  const uint8_t* at = DescData(copy);
  if (at == nullptr || len == 0) return false;
  *dst = const_cast<uint8_t*>(at);
  *room = len;
  return true;
}

uint32_t Memif::TxFail(Lane& L, uint32_t taken, uint32_t done_n) {
  L.pool->state[kStDone] = done_n;
  L.fault = "Invalid descriptor in a receive ring of the client";
  return taken;
}

// memifReclaim(handle): moves up to done_cap orphaned buffers into `done`; returns how many.
Napi::Value Memif::ReclaimJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!pool_bound_) return Napi::Number::New(env, 0);
  uint32_t n = 0;
  while (!orphans_.empty() && n < pool_.done_cap) {
    pool_.done[n++] = orphans_.back();
    orphans_.pop_back();
  }
  pool_.state[kStDone] = n;
  pool_.state[kStOrphans] = static_cast<uint32_t>(orphans_.size());
  return Napi::Number::New(env, n);
}

Napi::Value Memif::PollNow(const Napi::CallbackInfo& info) {
  if (pool_.state != nullptr) pool_.state[kStDone] = 0;
  Poll();
  if (zc_ && phase_ == Phase::kConnected) ReclaimAll();
  return Napi::Boolean::New(info.Env(), connected());
}

}  // namespace memifimpl
}  // namespace rg
