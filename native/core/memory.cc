// Packet-buffer memory: one shareable memfd mapping per pool, hugepage-backed when possible,
// seen by JavaScript as one external ArrayBuffer whose finalizer unmaps it and closes the fd.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "common.h"

#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << MFD_HUGE_SHIFT)
#endif

namespace rg {

namespace {

constexpr uint64_t kHugePage = 2ull << 20;
constexpr uint64_t kMaxBytes = 64ull << 30;
constexpr size_t kMaxMemfdName = 249;  // memfd_create(2): 249 bytes plus the "memfd:" prefix
const char* const kHugeDir = "/sys/kernel/mm/hugepages/hugepages-2048kB/";

std::mutex g_owned_mu;
std::unordered_set<int> g_owned_fds;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// Reads one unsigned number from a sysfs file; false if the file is missing or unparsable.
bool ReadSysfsU64(const std::string& path, uint64_t* out) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  unsigned long long v = 0;
  bool ok = std::fscanf(f, "%llu", &v) == 1;
  std::fclose(f);
  if (ok) *out = v;
  return ok;
}

// The 2 MiB pool (the default-size counters in /proc/meminfo may describe 1 GiB pages).
struct HugePool {
  bool present = false;
  uint64_t total = 0, free = 0, reserved = 0, overcommit = 0, surplus = 0;
  // Pages a new mapping can still get: free pages not promised to existing mappings, plus
  // surplus pages the kernel may still allocate under nr_overcommit_hugepages.
  uint64_t Available() const {
    uint64_t unpromised = free > reserved ? free - reserved : 0;
    uint64_t extra = overcommit > surplus ? overcommit - surplus : 0;
    return unpromised + extra;
  }
};

HugePool ReadHugePool() {
  HugePool p;
  std::string d(kHugeDir);
  p.present = ReadSysfsU64(d + "nr_hugepages", &p.total) && ReadSysfsU64(d + "free_hugepages", &p.free) &&
              ReadSysfsU64(d + "resv_hugepages", &p.reserved);
  if (p.present) {
    ReadSysfsU64(d + "nr_overcommit_hugepages", &p.overcommit);
    ReadSysfsU64(d + "surplus_hugepages", &p.surplus);
  }
  return p;
}

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  int fd = -1;
};

struct MapError {
  const char* syscall = nullptr;
  int err = 0;
  std::string Text(uint64_t size, bool huge) const {
    return std::string(syscall) + " of " + std::to_string(size) + " bytes on a " + (huge ? "hugetlb" : "shmem") +
           " memfd failed: " + std::strerror(err);
  }
};

// memfd_create + ftruncate + seal the size + mmap(MAP_SHARED|MAP_POPULATE). On failure
// everything is undone and *error says which call failed.
bool MapMemfd(const std::string& name, uint64_t size, bool huge, Mapping* out, MapError* error) {
  unsigned int flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (huge) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
  int fd = memfd_create(name.c_str(), flags);
  bool sealing = true;
  if (fd < 0 && errno == EINVAL && huge) {
    // Kernels before 4.16 reject sealing on hugetlb memfds.
    sealing = false;
    fd = memfd_create(name.c_str(), flags & ~MFD_ALLOW_SEALING);
  }
  if (fd < 0) {
    *error = {"memfd_create", errno};
    return false;
  }
  auto fail = [&](const char* syscall) {
    *error = {syscall, errno};
    close(fd);
    return false;
  };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) return fail("ftruncate");
  // A peer that receives the fd (memif) must not be able to shrink it under our mapping,
  // which would turn our accesses into SIGBUS.
  if (sealing && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return fail("fcntl(F_ADD_SEALS)");
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED) return fail("mmap");
  out->addr = addr;
  out->size = size;
  out->fd = fd;
  return true;
}

void ReleaseMapping(Napi::Env, void*, Mapping* m) {
  munmap(m->addr, m->size);
  {
    // Unregister and close under the lock, so the number cannot be reused (and registered by
    // another thread's allocMemory) between the two.
    std::lock_guard<std::mutex> lock(g_owned_mu);
    g_owned_fds.erase(m->fd);
    close(m->fd);
  }
  delete m;
}

std::string OptString(Napi::Object opts, const char* key, const char* fallback) {
  Napi::Value v = opts.Get(key);
  if (v.IsUndefined()) return fallback;
  if (!v.IsString()) {
    throw TypeErr(opts.Env(), std::string("allocMemory: opts.") + key + " must be a string");
  }
  return v.As<Napi::String>().Utf8Value();
}

Napi::Value AllocMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint64_t bytes = static_cast<uint64_t>(ArgInteger(info, 0, "allocMemory", "bytes", 1, double(kMaxBytes)));

  Napi::Object opts = Napi::Object::New(env);
  if (!info[1].IsUndefined()) {
    if (!info[1].IsObject() || info[1].IsArray() || info[1].IsFunction()) {
      throw TypeErr(env, "allocMemory: opts must be an object like { hugepages: 'auto', name: 'pool' }");
    }
    opts = info[1].As<Napi::Object>();
  }
  const std::string mode = OptString(opts, "hugepages", "auto");
  if (mode != "auto" && mode != "never" && mode != "require") {
    throw RangeErr(env, "allocMemory: opts.hugepages must be 'auto', 'never' or 'require', got '" + mode + "'");
  }
  const std::string name = OptString(opts, "name", "rdma-graph");
  if (name.empty() || name.size() > kMaxMemfdName || name.find('\0') != std::string::npos) {
    throw RangeErr(env, "allocMemory: opts.name must be 1 to 249 bytes without NUL characters");
  }

  Mapping map;
  bool huge = false;
  std::string fallback_reason;
  const uint64_t huge_size = RoundUp(bytes, kHugePage);
  if (mode != "never") {
    const HugePool pool = ReadHugePool();
    const uint64_t need = huge_size / kHugePage;
    std::string reason;
    if (!pool.present) {
      reason = std::string("the kernel has no 2 MiB hugepage pool (") + kHugeDir + " is missing)";
    } else if (pool.Available() < need) {
      reason = "only " + std::to_string(pool.Available()) + " free 2 MiB pages (need " + std::to_string(need) +
               "); reserve with: echo " + std::to_string(pool.total + (need - pool.Available())) +
               " > /proc/sys/vm/nr_hugepages";
    } else {
      MapError err;
      huge = MapMemfd(name, huge_size, true, &map, &err);
      if (!huge) reason = err.Text(huge_size, true);
    }
    if (!huge) {
      if (mode == "require") {
        Napi::Error e = Napi::Error::New(env, "allocMemory: hugepages required but " + reason);
        e.Set("code", Napi::String::New(env, "ERR_HUGEPAGES_UNAVAILABLE"));
        throw e;
      }
      fallback_reason = reason;
    }
  }
  if (!huge) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t size = RoundUp(bytes, page);
    MapError err;
    if (!MapMemfd(name, size, false, &map, &err)) {
      throw ErrnoError(env, "allocMemory: " + err.Text(size, false), err.err, err.syscall);
    }
  }

  {
    std::lock_guard<std::mutex> lock(g_owned_mu);
    g_owned_fds.insert(map.fd);
  }
  Mapping* owned = new Mapping(map);
  Napi::ArrayBuffer buffer;
  try {
    buffer = Napi::ArrayBuffer::New(env, owned->addr, owned->size, ReleaseMapping, owned);
  } catch (...) {
    ReleaseMapping(env, nullptr, owned);
    throw;
  }

  Napi::Object result = Napi::Object::New(env);
  result.Set("buffer", buffer);
  result.Set("fd", Napi::Number::New(env, map.fd));
  result.Set("hugepages", Napi::Boolean::New(env, huge));
  result.Set("pageSize", Napi::Number::New(env, huge ? double(kHugePage) : double(sysconf(_SC_PAGESIZE))));
  result.Set("size", Napi::Number::New(env, double(map.size)));
  result.Set("fallbackReason", fallback_reason.empty() ? env.Null() : Napi::String::New(env, fallback_reason));
  return result;
}

Napi::Value HugepageInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) throw ErrnoError(env, "hugepageInfo: cannot open /proc/meminfo", errno, "open");
  double total = 0, free = 0, reserved = 0, surplus = 0, page_kb = 0;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    char key[64];
    unsigned long long v;
    if (std::sscanf(line, "%63[^:]: %llu", key, &v) != 2) continue;
    std::string k(key);
    if (k == "HugePages_Total")
      total = double(v);
    else if (k == "HugePages_Free")
      free = double(v);
    else if (k == "HugePages_Rsvd")
      reserved = double(v);
    else if (k == "HugePages_Surp")
      surplus = double(v);
    else if (k == "Hugepagesize")
      page_kb = double(v);
  }
  std::fclose(f);
  Napi::Object result = Napi::Object::New(env);
  result.Set("total", Napi::Number::New(env, total));
  result.Set("free", Napi::Number::New(env, free));
  result.Set("reserved", Napi::Number::New(env, reserved));
  result.Set("surplus", Napi::Number::New(env, surplus));
  result.Set("pageSize", Napi::Number::New(env, page_kb * 1024));
  return result;
}

}  // namespace

bool IsOwnedFd(int fd) {
  std::lock_guard<std::mutex> lock(g_owned_mu);
  return g_owned_fds.count(fd) != 0;
}

void InitMemory(Napi::Env env, Napi::Object exports) {
  exports.Set("allocMemory", Napi::Function::New(env, AllocMemory, "allocMemory"));
  exports.Set("hugepageInfo", Napi::Function::New(env, HugepageInfo, "hugepageInfo"));
}

}  // namespace rg
