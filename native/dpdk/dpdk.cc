// dpdk.node: DPDK's EAL and ethdev ports for drivers/dpdk.ts, zero copy.
//
// One EAL and one mbuf mempool per process. The mempool's memory (one contiguous chunk) is the
// graph's buffer pool: buffer i is the i-th mbuf's data room, so a received mbuf is handed to
// the graph as its index and a transmitted index is sent as its mbuf, nothing copied. The
// pool's metadata arrays (offset, length, flags, next) are bound once (bindPool); a burst is one
// call: rx writes the metadata of what arrived, tx builds the mbufs' fields from it.
//
// Ownership, enforced here: an index JavaScript holds is an mbuf out of the mempool (allocated
// by alloc or received by rx). tx hands the sent ones to the PMD, which returns them to the
// mempool when done; the ones not sent stay JavaScript's. free returns indices to the mempool.
#include <fcntl.h>
#include <napi.h>
#include <rte_bus.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_mempool.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// BufferFlag bits of graph/buffer-pool.ts (passed in bindPool so the two cannot drift).
struct Flags {
  uint32_t next_present = 0, ip4_ok = 0, l4_ok = 0, tx_ip4 = 0, tx_udp = 0;
};

struct State {
  bool eal = false;
  std::vector<std::string> eal_args;
  rte_mempool* mp = nullptr;
  uint8_t* base = nullptr;  // the chunk's start (the ArrayBuffer's byte 0)
  size_t len = 0;
  uint8_t* obj0 = nullptr;  // the lowest mbuf
  size_t stride = 0;        // bytes between consecutive mbufs
  uint32_t count = 0;
  // Bound pool metadata.
  uint32_t* offset = nullptr;
  uint32_t* length = nullptr;
  uint32_t* flags = nullptr;
  uint32_t* next = nullptr;
  Flags f;
  std::vector<Napi::Reference<Napi::Value>> refs;
  uint64_t rx_bad_cksum = 0;
};
State g;

// DPDK's log after the EAL is up: to stderr, line by line, except net_memif's "Failed to
// register mp action callback: Operation not supported". That one comes with every net_memif
// port because rdma-graph runs the EAL without shared files (--in-memory / --no-shconf), which
// turns DPDK's multi-process IPC off: no secondary process can attach to this one, and nothing
// else is lost. It is explained once, in those words, instead of shown as an error each time.
constexpr const char* kMpNoise = "Failed to register mp action callback: Operation not supported";
bool mp_explained = false;
std::string log_pending;

ssize_t LogWrite(void*, const char* buf, size_t len) {
  log_pending.append(buf, len);
  size_t nl;
  while ((nl = log_pending.find('\n')) != std::string::npos) {
    std::string line = log_pending.substr(0, nl + 1);
    log_pending.erase(0, nl + 1);
    if (line.find(kMpNoise) != std::string::npos) {
      if (mp_explained) continue;
      mp_explained = true;
      line =
          "rdma-graph: DPDK: net_memif cannot register its multi-process callback: rdma-graph runs the EAL "
          "without shared files, so DPDK's multi-process IPC is off (no secondary process can attach); "
          "harmless, said once\n";
    }
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  return static_cast<ssize_t>(len);
}

FILE* FilteredLog() {
  static FILE* f = nullptr;
  if (f == nullptr) {
    cookie_io_functions_t io{};
    io.write = LogWrite;
    f = fopencookie(nullptr, "w", io);
    if (f != nullptr) setvbuf(f, nullptr, _IONBF, 0);
  }
  return f;
}

constexpr uint16_t kMaxBurst = 256;

Napi::Error Err(Napi::Env env, const std::string& m) { return Napi::Error::New(env, m); }

std::string DpdkError(int ret) {
  int e = ret < 0 ? -ret : rte_errno;
  return std::string(rte_strerror(e));
}

inline uint32_t IndexOf(const rte_mbuf* m) {
  return static_cast<uint32_t>((reinterpret_cast<const uint8_t*>(m) - g.obj0) / g.stride);
}
inline rte_mbuf* MbufOf(uint32_t i) { return reinterpret_cast<rte_mbuf*>(g.obj0 + static_cast<size_t>(i) * g.stride); }
inline uint32_t DataStart(const rte_mbuf* m) {
  return static_cast<uint32_t>(static_cast<uint8_t*>(m->buf_addr) - g.base);
}

uint32_t* U32(Napi::Env env, Napi::Value v, const char* what, size_t min_len) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    throw Napi::TypeError::New(env, std::string(what) + " must be a Uint32Array");
  auto a = v.As<Napi::Uint32Array>();
  if (a.ElementLength() < min_len) throw Napi::RangeError::New(env, std::string(what) + " is too short");
  return a.Data();
}

uint32_t Int(const Napi::CallbackInfo& info, size_t i, const char* what, double lo, double hi) {
  if (!info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a number");
  double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= lo && d <= hi) || d != static_cast<double>(static_cast<int64_t>(d)))
    throw Napi::RangeError::New(info.Env(), std::string(what) + " must be an integer in " +
                                                std::to_string(static_cast<int64_t>(lo)) + ".." +
                                                std::to_string(static_cast<int64_t>(hi)));
  return static_cast<uint32_t>(d);
}

// ealInit(args: string[]) -> {ports}. Once per process; the same arguments again are a no-op.
Napi::Value EalInit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "ealInit: expects a list of arguments");
  auto a = info[0].As<Napi::Array>();
  std::vector<std::string> args;
  for (uint32_t i = 0; i < a.Length(); i++) args.push_back(a.Get(i).ToString().Utf8Value());
  if (g.eal) {
    if (args != g.eal_args) throw Err(env, "the DPDK EAL is already initialised in this process with other arguments");
  } else {
    std::vector<char*> argv;
    std::vector<std::string> store = args;
    store.insert(store.begin(), "rdma-graph");
    for (auto& s : store) argv.push_back(s.data());
    // DPDK's own words go into the error: its log is captured while the EAL initialises (and
    // passed on to stderr when it succeeds); its usage text on a bad option (stdout) is dropped.
    char* logText = nullptr;
    size_t logLen = 0;
    FILE* mem = open_memstream(&logText, &logLen);
    if (mem != nullptr) rte_openlog_stream(mem);
    std::fflush(stdout);
    int savedOut = dup(STDOUT_FILENO), devNull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (savedOut >= 0 && devNull >= 0) dup2(devNull, STDOUT_FILENO);
    int ret = rte_eal_init(static_cast<int>(argv.size()), argv.data());
    int err = rte_errno;
    std::fflush(stdout);
    if (savedOut >= 0) {
      dup2(savedOut, STDOUT_FILENO);
      close(savedOut);
    }
    if (devNull >= 0) close(devNull);
    std::string said;
    if (mem != nullptr) {
      rte_openlog_stream(FilteredLog());
      std::fclose(mem);
      said.assign(logText != nullptr ? logText : "", logLen);
      std::free(logText);
    }
    if (ret < 0) {
      // "EAL: Invalid 'command line' arguments.\n..." -> one line, newest last.
      std::string words;
      size_t at = 0;
      while (at < said.size()) {
        size_t nl = said.find('\n', at);
        std::string line = said.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        at = nl == std::string::npos ? said.size() : nl + 1;
        if (line.rfind("EAL: ", 0) == 0) line = line.substr(5);
        while (!line.empty() && (line.back() == ' ' || line.back() == '.')) line.pop_back();
        if (line.empty() || words.find(line) != std::string::npos) continue;
        words += (words.empty() ? "" : "; ") + line;
      }
      throw Err(env, "rte_eal_init: " + (words.empty() ? std::string(rte_strerror(err)) : words));
    }
    if (!said.empty()) LogWrite(nullptr, said.data(), said.size());
    g.eal = true;
    g.eal_args = args;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("ports", Napi::Number::New(env, rte_eth_dev_count_avail()));
  return o;
}

// createPool(count, dataRoom) -> {memory, firstOffset, stride, headroom, dataSize, count}.
Napi::Value CreatePool(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!g.eal) throw Err(env, "createPool: the EAL is not initialised");
  if (g.mp != nullptr) throw Err(env, "createPool: this process already has its mempool");
  uint32_t count = Int(info, 0, "count", 64, 1 << 22);
  uint32_t data_room = Int(info, 1, "dataRoom", RTE_PKTMBUF_HEADROOM + 64, 65535);
  // rte_pktmbuf_pool_create keeps each mbuf inside one page, which leaves gaps; the buffer pool
  // needs them evenly spaced, and vdevs and IOVA-as-VA do not need page-contiguous objects.
  rte_mempool* mp =
      rte_mempool_create_empty("rdma_graph", count, sizeof(rte_mbuf) + data_room, 256, sizeof(rte_pktmbuf_pool_private),
                               static_cast<int>(rte_socket_id()), RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (mp == nullptr) throw Err(env, "rte_mempool_create_empty: " + DpdkError(0));
  rte_pktmbuf_pool_private priv;
  std::memset(&priv, 0, sizeof priv);
  priv.mbuf_data_room_size = static_cast<uint16_t>(data_room);
  int ret = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr);
  if (ret != 0) {
    rte_mempool_free(mp);
    throw Err(env, "rte_mempool_set_ops_byname: " + DpdkError(ret));
  }
  rte_pktmbuf_pool_init(mp, &priv);
  // One chunk of our own, one object stride longer than the objects need: the buffer pool sees
  // buffer i as stride bytes from its data start, and the last one's must stay inside.
  size_t stride0 = mp->header_size + mp->elt_size + mp->trailer_size;
  size_t chunk = (static_cast<size_t>(count) + 1) * stride0 + RTE_CACHE_LINE_SIZE;
  char* area = static_cast<char*>(
      rte_zmalloc_socket("rdma_graph_pool", chunk, RTE_CACHE_LINE_SIZE, static_cast<int>(rte_socket_id())));
  if (area == nullptr) {
    rte_mempool_free(mp);
    throw Err(env, "createPool: no " + std::to_string(chunk >> 20) + " MiB for " + std::to_string(count) +
                       " mbufs in DPDK's memory (reserve hugepages, or give the EAL more with -m in dpdk.eal-args)");
  }
  ret = rte_mempool_populate_iova(
      mp, area, RTE_BAD_IOVA, chunk, [](rte_mempool_memhdr*, void* a) { rte_free(a); }, area);
  if (ret < 0 || static_cast<uint32_t>(ret) != count) {
    rte_mempool_free(mp);
    if (ret < 0) rte_free(area);
    throw Err(env, "rte_mempool_populate_iova: " +
                       (ret < 0 ? DpdkError(ret)
                                : "only " + std::to_string(ret) + " of " + std::to_string(count) + " mbufs"));
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  struct Chunks {
    unsigned n = 0;
    uint8_t* addr = nullptr;
    size_t len = 0;
  } ch;
  rte_mempool_mem_iter(
      mp,
      [](rte_mempool*, void* arg, rte_mempool_memhdr* h, unsigned) {
        auto* c = static_cast<Chunks*>(arg);
        c->n++;
        c->addr = static_cast<uint8_t*>(h->addr);
        c->len = h->len;
      },
      &ch);
  if (ch.n != 1) {
    rte_mempool_free(mp);
    throw Err(env, "createPool: the mempool is in " + std::to_string(ch.n) +
                       " pieces; the buffer pool needs one (reserve hugepages, or give -m more memory)");
  }
  struct Objs {
    uint8_t* lo = nullptr;
    uint8_t* hi = nullptr;
    unsigned n = 0;
  } ob;
  rte_mempool_obj_iter(
      mp,
      [](rte_mempool*, void* arg, void* obj, unsigned) {
        auto* o = static_cast<Objs*>(arg);
        auto* p = static_cast<uint8_t*>(obj);
        if (o->lo == nullptr || p < o->lo) o->lo = p;
        if (o->hi == nullptr || p > o->hi) o->hi = p;
        o->n++;
      },
      &ob);
  size_t stride = mp->header_size + mp->elt_size + mp->trailer_size;
  if (ob.n != count || static_cast<size_t>(ob.hi - ob.lo) != static_cast<size_t>(count - 1) * stride) {
    rte_mempool_free(mp);
    throw Err(env, "createPool: the mbufs are not evenly spaced in the mempool");
  }
  g.mp = mp;
  g.base = ch.addr;
  g.len = ch.len;
  g.obj0 = ob.lo;
  g.stride = stride;
  g.count = count;
  const rte_mbuf* m0 = reinterpret_cast<const rte_mbuf*>(ob.lo);
  Napi::Object o = Napi::Object::New(env);
  o.Set("memory", Napi::ArrayBuffer::New(env, ch.addr, ch.len));
  o.Set("firstOffset", Napi::Number::New(env, DataStart(m0)));
  o.Set("stride", Napi::Number::New(env, static_cast<double>(stride)));
  o.Set("headroom", Napi::Number::New(env, RTE_PKTMBUF_HEADROOM));
  o.Set("dataSize", Napi::Number::New(env, m0->buf_len - RTE_PKTMBUF_HEADROOM));
  o.Set("count", Napi::Number::New(env, count));
  return o;
}

// bindPool(offset, length, flags, next, {nextPresent, ip4Ok, l4Ok})
Napi::Value BindPool(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (g.mp == nullptr) throw Err(env, "bindPool: no mempool yet");
  g.offset = U32(env, info[0], "offset", g.count);
  g.length = U32(env, info[1], "length", g.count);
  g.flags = U32(env, info[2], "flags", g.count);
  g.next = U32(env, info[3], "next", g.count);
  Napi::Object f = info[4].As<Napi::Object>();
  g.f.next_present = f.Get("nextPresent").As<Napi::Number>().Uint32Value();
  g.f.ip4_ok = f.Get("ip4Ok").As<Napi::Number>().Uint32Value();
  g.f.l4_ok = f.Get("l4Ok").As<Napi::Number>().Uint32Value();
  g.f.tx_ip4 = f.Get("txIp4").As<Napi::Number>().Uint32Value();
  g.f.tx_udp = f.Get("txUdp").As<Napi::Number>().Uint32Value();
  g.refs.clear();
  for (int i = 0; i < 4; i++) g.refs.push_back(Napi::Persistent(info[i]));
  return env.Undefined();
}

// alloc(out, off, n) -> how many (all or as many as the mempool has).
Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t off = Int(info, 1, "off", 0, 1u << 30), n = Int(info, 2, "n", 0, 1u << 20);
  uint32_t* out = U32(env, info[0], "out", static_cast<size_t>(off) + n);
  rte_mbuf* ms[kMaxBurst];
  uint32_t done = 0;
  while (done < n) {
    unsigned k = std::min<uint32_t>(n - done, kMaxBurst);
    unsigned have = rte_mempool_avail_count(g.mp);
    if (have == 0) break;
    k = std::min(k, have);
    if (rte_pktmbuf_alloc_bulk(g.mp, ms, k) != 0) break;
    for (unsigned i = 0; i < k; i++) out[off + done + i] = IndexOf(ms[i]);
    done += k;
  }
  return Napi::Number::New(env, done);
}

// free(src, off, n): single segments (the pool walks chains itself).
Napi::Value Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t off = Int(info, 1, "off", 0, 1u << 30), n = Int(info, 2, "n", 0, 1u << 20);
  uint32_t* src = U32(env, info[0], "src", static_cast<size_t>(off) + n);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t bi = src[off + i];
    if (bi >= g.count)
      throw Napi::RangeError::New(env, "free: buffer index " + std::to_string(bi) + " is not in the pool");
    rte_mbuf* m = MbufOf(bi);
    m->next = nullptr;
    m->nb_segs = 1;
    rte_pktmbuf_free_seg(m);
  }
  return env.Undefined();
}

Napi::Value Avail(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), g.mp ? rte_mempool_avail_count(g.mp) : 0);
}

// probe(devargs) -> port id (rte_dev_probe: no direct vdev-init symbol).
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string devargs = info[0].As<Napi::String>().Utf8Value();
  std::string name = devargs.substr(0, devargs.find(','));
  uint16_t port;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) == 0) return Napi::Number::New(env, port);
  int ret = rte_dev_probe(devargs.c_str());
  if (ret < 0) throw Err(env, "rte_dev_probe(\"" + devargs + "\"): " + DpdkError(ret));
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0)
    throw Err(env, "\"" + devargs + "\" was probed but is not an ethdev port");
  return Napi::Number::New(env, port);
}

// portStart(port, {rxQueues, txQueues, rxDesc, txDesc, mtu, promisc}) -> {mac, driver}
Napi::Value PortStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint16_t port = static_cast<uint16_t>(Int(info, 0, "port", 0, RTE_MAX_ETHPORTS - 1));
  Napi::Object o = info[1].As<Napi::Object>();
  auto num = [&](const char* k) { return o.Get(k).As<Napi::Number>().Uint32Value(); };
  uint16_t nrx = static_cast<uint16_t>(num("rxQueues")), ntx = static_cast<uint16_t>(num("txQueues"));
  rte_eth_dev_info di;
  int ret = rte_eth_dev_info_get(port, &di);
  if (ret != 0) throw Err(env, "rte_eth_dev_info_get: " + DpdkError(ret));
  if (nrx > di.max_rx_queues || ntx > di.max_tx_queues)
    throw Err(env, std::string(di.driver_name) + " has at most " + std::to_string(di.max_rx_queues) + " rx and " +
                       std::to_string(di.max_tx_queues) + " tx queues");
  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof conf);
  if (di.rx_offload_capa & RTE_ETH_RX_OFFLOAD_CHECKSUM)
    conf.rxmode.offloads |= (di.rx_offload_capa & RTE_ETH_RX_OFFLOAD_CHECKSUM);
  // Transmit checksums the port can compute: the graph then leaves them to it (TX_*_CKSUM flags).
  conf.txmode.offloads |= di.tx_offload_capa & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM |
                                                RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
  ret = rte_eth_dev_configure(port, nrx, ntx, &conf);
  if (ret != 0) throw Err(env, "rte_eth_dev_configure: " + DpdkError(ret));
  uint16_t rxd = static_cast<uint16_t>(num("rxDesc")), txd = static_cast<uint16_t>(num("txDesc"));
  rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd);
  int socket = rte_eth_dev_socket_id(port);
  for (uint16_t q = 0; q < nrx; q++) {
    ret = rte_eth_rx_queue_setup(port, q, rxd, socket < 0 ? 0 : socket, nullptr, g.mp);
    if (ret != 0) throw Err(env, "rte_eth_rx_queue_setup: " + DpdkError(ret));
  }
  for (uint16_t q = 0; q < ntx; q++) {
    ret = rte_eth_tx_queue_setup(port, q, txd, socket < 0 ? 0 : socket, nullptr);
    if (ret != 0) throw Err(env, "rte_eth_tx_queue_setup: " + DpdkError(ret));
  }
  uint32_t mtu = num("mtu");
  ret = rte_eth_dev_set_mtu(port, static_cast<uint16_t>(mtu));
  if (ret != 0 && ret != -ENOTSUP)
    throw Err(env, "rte_eth_dev_set_mtu(" + std::to_string(mtu) + "): " + DpdkError(ret));
  ret = rte_eth_dev_start(port);
  if (ret != 0) throw Err(env, "rte_eth_dev_start: " + DpdkError(ret));
  if (o.Get("promisc").ToBoolean()) rte_eth_promiscuous_enable(port);
  rte_ether_addr mac;
  rte_eth_macaddr_get(port, &mac);
  Napi::Object r = Napi::Object::New(env);
  r.Set("mac", Napi::Buffer<uint8_t>::Copy(env, mac.addr_bytes, 6));
  r.Set("driver", Napi::String::New(env, di.driver_name));
  r.Set("rxDesc", Napi::Number::New(env, rxd));
  r.Set("txDesc", Napi::Number::New(env, txd));
  r.Set("txIp4Cksum", Napi::Boolean::New(env, (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0));
  r.Set("txUdpCksum", Napi::Boolean::New(env, (conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0));
  std::string rxNames, txNames;
  for (int b = 0; b < 64; b++) {
    uint64_t bit = 1ULL << b;
    if (conf.rxmode.offloads & bit)
      rxNames += (rxNames.empty() ? "" : " ") + std::string(rte_eth_dev_rx_offload_name(bit));
    if (conf.txmode.offloads & bit)
      txNames += (txNames.empty() ? "" : " ") + std::string(rte_eth_dev_tx_offload_name(bit));
  }
  r.Set("rxOffloads", Napi::String::New(env, rxNames));
  r.Set("txOffloads", Napi::String::New(env, txNames));
  return r;
}

// rx(port, queue, out, max) -> n: what arrived, as buffer indices with their metadata written.
Napi::Value Rx(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  uint16_t q = static_cast<uint16_t>(info[1].As<Napi::Number>().Uint32Value());
  uint32_t max = std::min<uint32_t>(info[3].As<Napi::Number>().Uint32Value(), kMaxBurst);
  uint32_t* out = U32(env, info[2], "out", max);
  rte_mbuf* ms[kMaxBurst];
  uint16_t n = rte_eth_rx_burst(port, q, ms, static_cast<uint16_t>(max));
  uint32_t k = 0;
  for (uint16_t i = 0; i < n; i++) {
    rte_mbuf* m = ms[i];
    uint64_t ol = m->ol_flags;
    if ((ol & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_BAD ||
        (ol & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD) {
      g.rx_bad_cksum++;
      rte_pktmbuf_free(m);
      continue;
    }
    uint32_t extra = 0;
    if ((ol & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD) extra |= g.f.ip4_ok;
    if ((ol & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD) extra |= g.f.l4_ok;
    out[k++] = IndexOf(m);
    for (rte_mbuf* s = m; s != nullptr; s = s->next) {
      uint32_t bi = IndexOf(s);
      g.offset[bi] = DataStart(s) + s->data_off;
      g.length[bi] = s->data_len;
      g.flags[bi] = extra | (s->next ? g.f.next_present : 0);
      g.next[bi] = s->next ? IndexOf(s->next) : 0;
    }
  }
  return Napi::Number::New(env, k);
}

// tx(port, queue, bufs, off, n) -> how many the PMD took (they go back to the mempool when sent).
Napi::Value Tx(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  uint16_t q = static_cast<uint16_t>(info[1].As<Napi::Number>().Uint32Value());
  uint32_t off = info[3].As<Napi::Number>().Uint32Value();
  uint32_t n = std::min<uint32_t>(info[4].As<Napi::Number>().Uint32Value(), kMaxBurst);
  uint32_t* bufs = U32(env, info[2], "bufs", static_cast<size_t>(off) + n);
  rte_mbuf* ms[kMaxBurst];
  uint32_t k = 0, offloads = 0;
  for (; k < n; k++) {
    uint32_t bi = bufs[off + k];
    rte_mbuf* head = nullptr;
    rte_mbuf* prev = nullptr;
    uint32_t pkt = 0, segs = 0;
    bool ok = true;
    for (uint32_t s = bi;; s = g.next[s]) {
      if (s >= g.count || segs >= 64) {
        ok = false;
        break;
      }
      rte_mbuf* m = MbufOf(s);
      uint32_t start = DataStart(m);
      if (g.offset[s] < start || g.offset[s] - start + g.length[s] > m->buf_len) {
        ok = false;
        break;
      }
      m->data_off = static_cast<uint16_t>(g.offset[s] - start);
      m->data_len = static_cast<uint16_t>(g.length[s]);
      m->next = nullptr;
      m->ol_flags = 0;
      if (prev)
        prev->next = m;
      else
        head = m;
      prev = m;
      pkt += g.length[s];
      segs++;
      if (!(g.flags[s] & g.f.next_present)) break;
    }
    if (!ok) break;  // a malformed chain stays the caller's (it drops and counts it)
    head->pkt_len = pkt;
    head->nb_segs = static_cast<uint16_t>(segs);
    uint32_t fl = g.flags[bi];
    if (fl & (g.f.tx_ip4 | g.f.tx_udp)) {
      // Set only for a port that enabled these offloads (ip4-rewrite, udp4-encap): Ethernet + a
      // 20-byte IPv4 header, the UDP field holding the pseudo-header sum.
      head->ol_flags = RTE_MBUF_F_TX_IPV4 | ((fl & g.f.tx_ip4) ? RTE_MBUF_F_TX_IP_CKSUM : 0) |
                       ((fl & g.f.tx_udp) ? RTE_MBUF_F_TX_UDP_CKSUM : 0);
      head->l2_len = RTE_ETHER_HDR_LEN;
      head->l3_len = 20;
      offloads++;
    }
    ms[k] = head;
  }
  // tx_prepare checks (and for some PMDs fixes up) offload requests; what it refuses stays ours.
  if (offloads != 0) k = rte_eth_tx_prepare(port, q, ms, static_cast<uint16_t>(k));
  uint16_t sent = k ? rte_eth_tx_burst(port, q, ms, static_cast<uint16_t>(k)) : 0;
  return Napi::Number::New(env, sent);
}

Napi::Value LinkUp(const Napi::CallbackInfo& info) {
  uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  rte_eth_link l;
  std::memset(&l, 0, sizeof l);
  if (rte_eth_link_get_nowait(port, &l) != 0) return Napi::Boolean::New(info.Env(), false);
  return Napi::Boolean::New(info.Env(), l.link_status == RTE_ETH_LINK_UP);
}

// stats(port) -> rte_eth_stats and every xstat by name.
Napi::Value Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  rte_eth_stats s;
  std::memset(&s, 0, sizeof s);
  rte_eth_stats_get(port, &s);
  Napi::Object o = Napi::Object::New(env);
  o.Set("ipackets", Napi::Number::New(env, static_cast<double>(s.ipackets)));
  o.Set("opackets", Napi::Number::New(env, static_cast<double>(s.opackets)));
  o.Set("ibytes", Napi::Number::New(env, static_cast<double>(s.ibytes)));
  o.Set("obytes", Napi::Number::New(env, static_cast<double>(s.obytes)));
  o.Set("imissed", Napi::Number::New(env, static_cast<double>(s.imissed)));
  o.Set("ierrors", Napi::Number::New(env, static_cast<double>(s.ierrors)));
  o.Set("oerrors", Napi::Number::New(env, static_cast<double>(s.oerrors)));
  o.Set("rxNombuf", Napi::Number::New(env, static_cast<double>(s.rx_nombuf)));
  o.Set("rxBadChecksum", Napi::Number::New(env, static_cast<double>(g.rx_bad_cksum)));
  Napi::Object x = Napi::Object::New(env);
  int nx = rte_eth_xstats_get_names(port, nullptr, 0);
  if (nx > 0) {
    std::vector<rte_eth_xstat_name> names(nx);
    std::vector<rte_eth_xstat> vals(nx);
    if (rte_eth_xstats_get_names(port, names.data(), nx) == nx && rte_eth_xstats_get(port, vals.data(), nx) == nx) {
      for (int i = 0; i < nx; i++)
        x.Set(names[vals[i].id].name, Napi::Number::New(env, static_cast<double>(vals[i].value)));
    }
  }
  o.Set("xstats", x);
  return o;
}

// forward(port, queue, ms) -> { packets, ns }: for the benchmark's baseline only (`npm run bench
// -- dpdk`, case d): rx_burst straight into tx_burst on one port, in C, for `ms` milliseconds —
// the cost of the same loop the graph runs (input node -> output -> tx) without JavaScript.
// What the device refuses is freed. The time bound is ours, not the device's.
Napi::Value Forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  uint16_t q = static_cast<uint16_t>(info[1].As<Napi::Number>().Uint32Value());
  double ms = info[2].As<Napi::Number>().DoubleValue();
  if (!(ms > 0 && ms <= 60000)) throw Err(env, "forward: ms must be in (0, 60000]");
  rte_mbuf* ms_[kMaxBurst];
  uint64_t hz = rte_get_tsc_hz(), t0 = rte_rdtsc(), end = t0 + static_cast<uint64_t>(ms * 1e-3 * hz);
  double packets = 0;
  uint64_t now = t0;
  while (now < end) {
    for (int k = 0; k < 64; k++) {
      uint16_t n = rte_eth_rx_burst(port, q, ms_, kMaxBurst);
      if (n == 0) continue;
      uint16_t sent = rte_eth_tx_burst(port, q, ms_, n);
      for (uint16_t i = sent; i < n; i++) rte_pktmbuf_free(ms_[i]);
      packets += sent;
    }
    now = rte_rdtsc();
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("packets", Napi::Number::New(env, packets));
  o.Set("ns", Napi::Number::New(env, static_cast<double>(now - t0) * 1e9 / static_cast<double>(hz)));
  return o;
}

// portMulticast(port, macs) -> "list" | "all" | "promiscuous" | "none": the multicast MACs (a
// Uint8Array of 6-byte MACs, at most kMaxMulticast) the port is to receive. Its filter takes the
// list where the PMD has one (rte_eth_dev_set_mc_addr_list); where it has none (ENOTSUP), all
// multicast is received while the list is not empty (allmulticast, off again when it empties)
// and ethernet-input drops what no group wants. A port already promiscuous needs neither; a PMD
// with neither (net_af_packet) gets "none": what reaches it is what its device passes. Throws
// any other error the device returns.
Napi::Value PortMulticast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsTypedArray() ||
      info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Err(env, "portMulticast(port, macs): port a number, macs a Uint8Array of 6-byte MACs");
  const uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  const Napi::Uint8Array a = info[1].As<Napi::Uint8Array>();
  constexpr size_t kMaxMulticast = 64;
  const size_t n = a.ElementLength() / RTE_ETHER_ADDR_LEN;
  if (a.ElementLength() % RTE_ETHER_ADDR_LEN != 0 || n > kMaxMulticast)
    throw Err(env, "portMulticast: " + std::to_string(a.ElementLength()) + " bytes is not a list of at most " +
                       std::to_string(kMaxMulticast) + " MACs");
  if (rte_eth_promiscuous_get(port) == 1) return Napi::String::New(env, "promiscuous");
  rte_ether_addr list[kMaxMulticast];
  for (size_t k = 0; k < n; k++) std::memcpy(list[k].addr_bytes, a.Data() + k * RTE_ETHER_ADDR_LEN, RTE_ETHER_ADDR_LEN);
  int rc = rte_eth_dev_set_mc_addr_list(port, n > 0 ? list : nullptr, static_cast<uint32_t>(n));
  if (rc == 0) return Napi::String::New(env, "list");
  if (rc != -ENOTSUP) throw Err(env, "rte_eth_dev_set_mc_addr_list: " + DpdkError(rc));
  rc = n > 0 ? rte_eth_allmulticast_enable(port) : rte_eth_allmulticast_disable(port);
  if (rc == -ENOTSUP) return Napi::String::New(env, "none");
  if (rc != 0)
    throw Err(env, std::string(n > 0 ? "rte_eth_allmulticast_enable" : "rte_eth_allmulticast_disable") +
                       " (the port has no multicast list): " + DpdkError(rc));
  return Napi::String::New(env, "all");
}

// portClose(port): drain what is still queued for us, stop, close, and remove the device (so its
// name can be probed again). Draining matters for loopback PMDs (net_ring): their close frees the
// ring but not the mbufs in it, which would be lost to the mempool for the rest of the process.
// The drain is bounded by the mempool's size, not by what the device keeps returning.
Napi::Value PortClose(const Napi::CallbackInfo& info) {
  uint16_t port = static_cast<uint16_t>(info[0].As<Napi::Number>().Uint32Value());
  rte_eth_dev_info di;
  bool have = rte_eth_dev_info_get(port, &di) == 0;
  rte_device* dev = have ? di.device : nullptr;
  if (have) {
    rte_mbuf* ms[kMaxBurst];
    for (uint16_t q = 0; q < di.nb_tx_queues; q++) rte_eth_tx_done_cleanup(port, q, 0);
    for (uint16_t q = 0; q < di.nb_rx_queues; q++) {
      for (uint32_t drained = 0; drained <= g.count;) {
        uint16_t n = rte_eth_rx_burst(port, q, ms, kMaxBurst);
        if (n == 0) break;
        for (uint16_t i = 0; i < n; i++) rte_pktmbuf_free(ms[i]);
        drained += n;
      }
    }
  }
  rte_eth_dev_stop(port);
  rte_eth_dev_close(port);
  if (dev != nullptr) rte_dev_remove(dev);
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("ealInit", Napi::Function::New(env, EalInit, "ealInit"));
  exports.Set("createPool", Napi::Function::New(env, CreatePool, "createPool"));
  exports.Set("bindPool", Napi::Function::New(env, BindPool, "bindPool"));
  exports.Set("alloc", Napi::Function::New(env, Alloc, "alloc"));
  exports.Set("free", Napi::Function::New(env, Free, "free"));
  exports.Set("avail", Napi::Function::New(env, Avail, "avail"));
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("portStart", Napi::Function::New(env, PortStart, "portStart"));
  exports.Set("rx", Napi::Function::New(env, Rx, "rx"));
  exports.Set("tx", Napi::Function::New(env, Tx, "tx"));
  exports.Set("linkUp", Napi::Function::New(env, LinkUp, "linkUp"));
  exports.Set("stats", Napi::Function::New(env, Stats, "stats"));
  exports.Set("portClose", Napi::Function::New(env, PortClose, "portClose"));
  exports.Set("portMulticast", Napi::Function::New(env, PortMulticast, "portMulticast"));
  exports.Set("forward", Napi::Function::New(env, Forward, "forward"));
  return exports;
}

}  // namespace

NODE_API_MODULE(dpdk, Init)
