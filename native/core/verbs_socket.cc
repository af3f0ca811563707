// The daemon's verbs control socket (dataplane/verbs-server/listener.ts, docs/VERBS-PROTOCOL.md), what it needs beyond
// the raw SOCK_SEQPACKET primitives of memif_raw.cc:
//
//   verbsListen(path, mode)   the listener, its file never seen with the umask's mode: bound in
//                             a fresh 0700 directory next to it, chmod-ed, renamed into place
//                             (never replacing a file); "@name" is abstract. process.umask() is
//                             no answer: it is process-wide, and workers create files too.
//   verbsAccept(fd)           accept4 that survives EMFILE/ENFILE: a spare fd is kept per listener
//                             (as memif's listener does): closed, the waiting connection taken and
//                             closed, the spare reopened, so the listener does not stay readable
//                             and the loop does not spin.
//   verbsUnlisten(fd)         closes the listener and its spare.
//   fdLimit()                 RLIMIT_NOFILE (soft): the admission keeps headroom below it.
//   mapVerbsMemory(fd, size)  a program's ring: a memfd sealed against shrinking, at least `size`
//                             long, not hugetlbfs, mapped shared and never touched here (O(1)).
//   mapVerbsPieces(fds, pieces, span)
//                             a program's registration: `span` bytes of address space holding its
//                             pieces, each a range of one of the memfds (checked as above) or of a
//                             shared file of the program's (not sealed: guarded, sigbus_guard.cc),
//                             mapped in place one after another; one ArrayBuffer over them all.
//   verbsMemoryFaults()       pages of such files found shrunk (a zero page mapped in their place).
//   mapVerbsShm(shmid, offset, span, uid)
//                             a program's registration over System V shared memory (REG_SHM):
//                             the segment attached here, if `uid` owns or created it (or is root)
//                             and it holds [offset, offset + span), not hugetlb; an ArrayBuffer
//                             over those bytes, the segment detached when it is collected.
//   seqpacketRecv(fd)         one request with up to RGV_MAX_MR_PIECES passed fds (REG_MR's).
//   seqpacketSend(fd, bytes, pass)  one message, passing the fd or the fds in `pass`.
//   isStreamPair(fd)          whether fd is an AF_UNIX stream socket (a completion channel's end).
//   channelSignal(fd)         one byte to such a socket, never blocking (MSG_DONTWAIT is per call:
//                             nothing the program does to the file's flags changes it) nor raising
//                             SIGPIPE; true if sent (a full socket is readable already).
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../verbs-lib/proto.h"
#include "common.h"
#include "memif.h"
#include "sigbus_guard.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

namespace rg {

namespace {

constexpr int kBacklog = 64;

std::mutex g_spare_mu;
// Listening fd -> its spare fd (-1 while none could be opened again).
std::unordered_map<int, int> g_spare;

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

int Seqpacket() { return socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

// sun_path from `name` (a leading '@': abstract); false when it does not fit.
bool FillAddress(const std::string& name, sockaddr_un* sa, socklen_t* len) {
  std::memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (name.empty() || name.size() >= sizeof sa->sun_path) return false;
  std::memcpy(sa->sun_path, name.data(), name.size());
  const bool abstract = name[0] == '@';
  if (abstract) sa->sun_path[0] = '\0';
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 0 : 1));
  return true;
}

void Remember(int fd) {
  std::lock_guard<std::mutex> lock(g_spare_mu);
  g_spare[fd] = OpenSpare();
}

Napi::Value VerbsListen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* fn = "verbsListen";
  if (!info[0].IsString()) throw TypeErr(env, "verbsListen: path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  const mode_t mode = static_cast<mode_t>(ArgInteger(info, 1, fn, "mode", 0, 07777));
  sockaddr_un sa;
  socklen_t len;
  if (path.empty() || path.find('\0') != std::string::npos) throw RangeErr(env, "verbsListen: bad path");

  if (path[0] == '@') {
    if (!FillAddress(path, &sa, &len)) throw RangeErr(env, "verbsListen: " + path + ": name too long");
    int fd = Seqpacket();
    if (fd < 0) throw ErrnoError(env, "verbsListen: socket", errno, "socket");
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(fd, kBacklog) != 0) {
      int err = errno;
      close(fd);
      throw ErrnoError(env, "verbsListen: " + path, err, "bind");
    }
    Remember(fd);
    return Napi::Number::New(env, fd);
  }

  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") throw RangeErr(env, "verbsListen: " + path + ": not a file name");
  // A sun_path holds 107 bytes; the final path is only ever renamed to, so it may be longer
  // than the one bound (connect needs it to fit, though).
  if (path.size() >= sizeof sa.sun_path)
    throw RangeErr(env, "verbsListen: " + path + ": longer than a socket path may be (107 bytes)");

  int dirfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) throw ErrnoError(env, "verbsListen: " + dir, errno, "open");
  // The private directory: 0700, so nobody else can reach the socket before its mode is set.
  std::string tmpl = dir + "/." + base.substr(0, 32) + ".XXXXXX";
  std::string tmp;
  {
    std::string buf = tmpl;
    if (mkdtemp(&buf[0]) == nullptr) {
      int err = errno;
      close(dirfd);
      throw ErrnoError(env, "verbsListen: a private directory in " + dir, err, "mkdtemp");
    }
    tmp = buf;
  }
  const std::string tmpName = tmp.substr(tmp.rfind('/') + 1);
  int tmpfd = open(tmp.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int fd = -1;
  auto fail = [&](const std::string& what, int err, const char* syscall) -> Napi::Error {
    if (fd >= 0) close(fd);
    if (tmpfd >= 0) {
      unlinkat(tmpfd, "s", 0);
      close(tmpfd);
    }
    unlinkat(dirfd, tmpName.c_str(), AT_REMOVEDIR);
    close(dirfd);
    return ErrnoError(env, "verbsListen: " + what, err, syscall);
  };
  if (tmpfd < 0) throw fail(tmp, errno, "open");
  fd = Seqpacket();
  if (fd < 0) throw fail("socket", errno, "socket");
  // Bound through the directory's fd (a short path whatever the directory's), else its path.
  std::string at = "/proc/self/fd/" + std::to_string(tmpfd) + "/s";
  if (!FillAddress(at, &sa, &len)) throw fail(at, ENAMETOOLONG, "bind");
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    at = tmp + "/s";
    if (!FillAddress(at, &sa, &len) || bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0)
      throw fail(tmp + "/s", errno, "bind");
  }
  if (fchmodat(tmpfd, "s", mode, 0) != 0) throw fail(tmp + "/s", errno, "chmod");
  if (listen(fd, kBacklog) != 0) throw fail(path, errno, "listen");
  // Into place, never over anything (another daemon's socket, or a file planted there).
  if (renameat2(tmpfd, "s", dirfd, base.c_str(), RENAME_NOREPLACE) != 0) {
    int err = errno;
    if (err != EINVAL && err != ENOSYS) throw fail(path, err, "rename");
    // A file system without RENAME_NOREPLACE: a hard link fails the same way on an existing name.
    if (linkat(tmpfd, "s", dirfd, base.c_str(), 0) != 0) throw fail(path, errno, "link");
    unlinkat(tmpfd, "s", 0);
  }
  close(tmpfd);
  unlinkat(dirfd, tmpName.c_str(), AT_REMOVEDIR);
  close(dirfd);
  Remember(fd);
  return Napi::Number::New(env, fd);
}

// verbsAccept(fd): a connection's fd (non-blocking, close-on-exec); -1: none waiting; -2: out of
// descriptors, one waiting connection was taken off the queue and closed; -3: accept fails (out
// of descriptors and no spare, or another error): stop watching the listener for a while.
Napi::Value VerbsAccept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int lfd = ArgFd(info, 0, "verbsAccept");
  for (;;) {
    int c = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) return Napi::Number::New(env, c);
    int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return Napi::Number::New(env, -1);
    if (err != EMFILE && err != ENFILE) return Napi::Number::New(env, -3);
    std::lock_guard<std::mutex> lock(g_spare_mu);
    auto it = g_spare.find(lfd);
    if (it == g_spare.end()) return Napi::Number::New(env, -3);
    if (it->second < 0) it->second = OpenSpare();
    if (it->second < 0) return Napi::Number::New(env, -3);
    // Out of descriptors: the listener would stay readable and the loop spin. Give back the
    // spare, take the connection off the queue and close it, keep a spare again.
    close(it->second);
    it->second = -1;
    int lost = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (lost >= 0) close(lost);
    it->second = OpenSpare();
    return Napi::Number::New(env, lost >= 0 ? -2 : -3);
  }
}

Napi::Value VerbsUnlisten(const Napi::CallbackInfo& info) {
  int lfd = ArgFd(info, 0, "verbsUnlisten");
  {
    std::lock_guard<std::mutex> lock(g_spare_mu);
    auto it = g_spare.find(lfd);
    if (it != g_spare.end()) {
      if (it->second >= 0) close(it->second);
      g_spare.erase(it);
    }
  }
  close(lfd);
  return info.Env().Undefined();
}

Napi::Value FdLimit(const Napi::CallbackInfo& info) {
  struct rlimit r;
  double v = 1024;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0) v = r.rlim_cur == RLIM_INFINITY ? double(INT_MAX) : double(r.rlim_cur);
  return Napi::Number::New(info.Env(), v);
}

// Why a program's memory may not be mapped for `need` bytes (from offset 0), or null. A file not
// sealed against shrinking is refused unless `shrinkable` is given: then a tmpfs file (a shared
// mapping's, which the daemon maps guarded: sigbus_guard.cc) is taken and *shrinkable set.
const char* BadMemory(int fd, uint64_t need, bool* shrinkable = nullptr) {
  struct statfs sf;
  struct stat st;
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstatfs(fd, &sf) != 0) return "the memory's filesystem cannot be told (fstatfs)";
  if (static_cast<unsigned long>(sf.f_type) == HUGETLBFS_MAGIC)
    return "hugetlb memory (MFD_HUGETLB, MAP_HUGETLB or hugetlbfs) is refused: a hole punched in it faults "
           "again from the hugepage pool, which may be empty (SIGBUS in the daemon); register normal pages";
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "the memory is not a memfd or a regular file";
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    if (shrinkable == nullptr) return "the memory is not sealed against shrinking (F_SEAL_SHRINK)";
    // Shared memory only: a fault on a disk file's page waits on the disk, or on a FUSE server
    // (the program itself, stalling the data path at will).
    if (static_cast<unsigned long>(sf.f_type) != TMPFS_MAGIC)
      return "a file not sealed against shrinking that is not shared memory (tmpfs) is refused";
    *shrinkable = true;
  }
  if (static_cast<uint64_t>(st.st_size) < need) return "the memory is smaller than the registration";
  return nullptr;
}

// An ArrayBuffer over `n` mapped bytes at `a`, unmapped when collected.
Napi::ArrayBuffer Unmapping(Napi::Env env, void* a, size_t n) {
  struct Holder {
    void* a;
    size_t n;
  };
  Holder* h = new Holder{a, n};
  return Napi::ArrayBuffer::New(
      env, a, n,
      [](Napi::Env, void*, Holder* x) {
        munmap(x->a, x->n);
        delete x;
      },
      h);
}

// mapVerbsMemory(fd, size): closes fd either way; throws "mapVerbsMemory: <what is wrong>".
Napi::Value MapVerbsMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "mapVerbsMemory");
  size_t size;
  try {
    size = static_cast<size_t>(ArgInteger(info, 1, "mapVerbsMemory", "size", 1, 1ull << 32));
  } catch (...) {
    close(fd);
    throw;
  }
  const char* bad = BadMemory(fd, size);
  if (bad != nullptr) {
    close(fd);
    throw Napi::Error::New(env, std::string("mapVerbsMemory: ") + bad);
  }
  // Mapped, never touched here: the pages are the program's (no MAP_POPULATE, no copy).
  void* a = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  int err = errno;
  close(fd);  // the mapping keeps the memory
  if (a == MAP_FAILED) throw ErrnoError(env, "mapVerbsMemory: mmap", err, "mmap");
  return Unmapping(env, a, size);
}

// mapVerbsPieces(fds, pieces, span): `pieces` is [fdIndex, offset, length] x n, in address
// order; each offset and length a multiple of the page size, the lengths adding up to `span`,
// every fd used. Closes every fd either way; throws "mapVerbsPieces: <what is wrong>".
Napi::Value MapVerbsPieces(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<int> fds;
  if (info[0].IsArray()) {
    Napi::Array a = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length() && i < RGV_MAX_MR_PIECES; i++) {
      Napi::Value v = a.Get(i);
      if (v.IsNumber() && v.As<Napi::Number>().Int32Value() >= 0) fds.push_back(v.As<Napi::Number>().Int32Value());
    }
  }
  struct Closer {
    std::vector<int>& fds;
    ~Closer() {
      for (int f : fds) close(f);
    }
  } closer{fds};  // the mappings keep the memory
  auto fail = [&](const std::string& why) { return Napi::Error::New(env, "mapVerbsPieces: " + why); };
  if (!info[0].IsArray() || fds.size() != info[0].As<Napi::Array>().Length() || fds.empty())
    throw fail("fds must be 1.." + std::to_string(RGV_MAX_MR_PIECES) + " descriptors");
  if (!info[1].IsArray()) throw fail("pieces must be an array");
  Napi::Array p = info[1].As<Napi::Array>();
  const uint32_t n = p.Length() / 3;
  if (p.Length() % 3 != 0 || n < 1 || n > RGV_MAX_MR_PIECES)
    throw fail("pieces must be 1..64 [fd, offset, length] triples");
  const double span = ArgInteger(info, 2, "mapVerbsPieces", "span", 1, 1ull << 32);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  struct Piece {
    uint32_t fd;
    uint64_t off, len;
  };
  std::vector<Piece> ps(n);
  std::vector<bool> used(fds.size(), false);
  std::vector<std::pair<uint64_t, uint64_t>> guard;  // [offset in the view, length] of shrinkable pieces
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    Napi::Value f = p.Get(3 * i), o = p.Get(3 * i + 1), l = p.Get(3 * i + 2);
    if (!f.IsNumber() || !o.IsNumber() || !l.IsNumber()) throw fail("piece " + std::to_string(i) + " is not numbers");
    const double fv = f.As<Napi::Number>().DoubleValue(), ov = o.As<Napi::Number>().DoubleValue(),
                 lv = l.As<Napi::Number>().DoubleValue();
    if (!(fv >= 0 && fv < fds.size() && fv == static_cast<uint32_t>(fv)))
      throw fail("piece " + std::to_string(i) + " names fd " + std::to_string(fv) + " of " +
                 std::to_string(fds.size()));
    if (!(ov >= 0 && ov <= 0x1p52 && lv >= 1 && lv <= 0x1p32) || static_cast<uint64_t>(ov) % page != 0 ||
        static_cast<uint64_t>(lv) % page != 0)
      throw fail("piece " + std::to_string(i) + ": offset and length must be multiples of the page size");
    ps[i] = {static_cast<uint32_t>(fv), static_cast<uint64_t>(ov), static_cast<uint64_t>(lv)};
    used[ps[i].fd] = true;
    total += ps[i].len;
    if (total > static_cast<uint64_t>(span)) throw fail("the pieces are longer than the span");
    bool shrinkable = false;
    const char* bad = BadMemory(fds[ps[i].fd], ps[i].off + ps[i].len, &shrinkable);
    if (bad != nullptr) throw fail("piece " + std::to_string(i) + ": " + bad);
    if (shrinkable) guard.emplace_back(total - ps[i].len, ps[i].len);
  }
  if (total != static_cast<uint64_t>(span)) throw fail("the pieces do not cover the span");
  for (size_t k = 0; k < used.size(); k++)
    if (!used[k]) throw fail("fd " + std::to_string(k) + " is in no piece");
  // The span reserved (no memory), then each piece mapped over its place: one contiguous view.
  uint8_t* base =
      static_cast<uint8_t*>(mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (base == MAP_FAILED) throw ErrnoError(env, "mapVerbsPieces: mmap", errno, "mmap");
  uint64_t at = 0;
  for (const Piece& x : ps) {
    if (mmap(base + at, x.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fds[x.fd],
             static_cast<off_t>(x.off)) == MAP_FAILED) {
      int err = errno;
      munmap(base, total);
      throw ErrnoError(env, "mapVerbsPieces: mmap", err, "mmap");
    }
    at += x.len;
  }
  if (guard.empty()) return Unmapping(env, base, total);
  // Files that may shrink under us: each piece of theirs guarded until the view is unmapped.
  struct Guarded {
    void* a;
    size_t n;
    std::vector<int> slots;
  };
  Guarded* g = new Guarded{base, total, {}};
  for (const auto& [from, len] : guard) {
    const int slot = SigbusGuardAdd(base + from, len);
    if (slot < 0) {
      for (int k : g->slots) SigbusGuardRemove(k);
      munmap(base, total);
      delete g;
      throw fail("more than " + std::to_string(kSigbusGuardSlots) +
                 " pieces of shared files are registered: unregister some first");
    }
    g->slots.push_back(slot);
  }
  return Napi::ArrayBuffer::New(
      env, base, total,
      [](Napi::Env, void*, Guarded* x) {
        for (int k : x->slots) SigbusGuardRemove(k);
        munmap(x->a, x->n);
        delete x;
      },
      g);
}

// The kernel page size of the mapping that starts at `a` (/proc/self/smaps), or 0 if not found.
static uint64_t MappingPageSize(const void* a) {
  FILE* f = fopen("/proc/self/smaps", "re");
  if (f == nullptr) return 0;
  char line[512];
  bool in = false;
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != nullptr && line[0] != ' ') {
      if (in) break;
      in = lo == reinterpret_cast<uintptr_t>(a);
    } else if (in && sscanf(line, "KernelPageSize: %lu kB", &lo) == 1) {
      kb = lo;
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

// mapVerbsShm(shmid, offset, span, uid): attaches System V segment `shmid` if `uid` (the
// program's, SO_PEERCRED) is root, its owner or its creator, and [offset, offset + span) lies in
// it (page multiples); hugetlb segments are refused (a hole punched in one faults again from the
// hugepage pool: SIGBUS here). A segment cannot shrink. The ArrayBuffer over the bytes detaches
// it when collected. Throws "mapVerbsShm: <what is wrong>".
Napi::Value MapVerbsShm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto fail = [&](const std::string& why) { return Napi::Error::New(env, "mapVerbsShm: " + why); };
  const int shmid = static_cast<int>(ArgInteger(info, 0, "mapVerbsShm", "shmid", 0, INT_MAX));
  const uint64_t off = static_cast<uint64_t>(ArgInteger(info, 1, "mapVerbsShm", "offset", 0, 0x1p52));
  const uint64_t span = static_cast<uint64_t>(ArgInteger(info, 2, "mapVerbsShm", "span", 1, 0x1p32));
  const uid_t uid = static_cast<uid_t>(ArgInteger(info, 3, "mapVerbsShm", "uid", 0, UINT32_MAX));
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (off % page != 0 || span % page != 0) throw fail("offset and span must be multiples of the page size");
  struct shmid_ds ds;
  if (shmctl(shmid, IPC_STAT, &ds) != 0)
    throw fail("segment " + std::to_string(shmid) + ": " + std::string(strerror(errno)));
  if (uid != 0 && ds.shm_perm.uid != uid && ds.shm_perm.cuid != uid)
    throw fail("segment " + std::to_string(shmid) + " is uid " + std::to_string(ds.shm_perm.uid) +
               "'s (created by uid " + std::to_string(ds.shm_perm.cuid) + "), not the program's uid " +
               std::to_string(uid) + "'s");
  const uint64_t size = (static_cast<uint64_t>(ds.shm_segsz) + page - 1) / page * page;
  if (off > size || span > size - off)
    throw fail("[" + std::to_string(off) + ", " + std::to_string(off + span) + ") is not in segment " +
               std::to_string(shmid) + " of " + std::to_string(ds.shm_segsz) + " bytes");
  void* a = shmat(shmid, nullptr, 0);
  if (a == reinterpret_cast<void*>(-1)) throw ErrnoError(env, "mapVerbsShm: shmat", errno, "shmat");
  if (MappingPageSize(a) != page) {
    shmdt(a);
    throw fail("segment " + std::to_string(shmid) +
               " is hugetlb memory (SHM_HUGETLB), refused: a hole punched in it faults again from the hugepage "
               "pool, which may be empty (SIGBUS in the daemon); register normal pages");
  }
  uint8_t* at = static_cast<uint8_t*>(a) + off;
  return Napi::ArrayBuffer::New(
      env, at, span, [](Napi::Env, void*, void* base) { shmdt(base); }, a);
}

// seqpacketRecv(fd): null when nothing is waiting; {eof: true} when the peer closed; else
// {data, fd, fds, truncated}: fds are those passed (at most RGV_MAX_MR_PIECES: more are closed
// by the kernel and `truncated` is set, as for a message longer than the buffer); fd the first or -1.
Napi::Value SeqpacketRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sock = ArgFd(info, 0, "seqpacketRecv");
  static thread_local uint8_t buf[8192];
  struct iovec iov = {buf, sizeof buf};
  struct msghdr mh;
  std::memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * RGV_MAX_MR_PIECES)];
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof ctl;
  ssize_t r;
  do {
    r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  if (r <= 0) {
    o.Set("eof", Napi::Boolean::New(env, true));
    return o;
  }
  Napi::Array fds = Napi::Array::New(env);
  uint32_t k = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      fds.Set(k++, Napi::Number::New(env, f));
    }
  }
  const size_t len = std::min(static_cast<size_t>(r), sizeof buf);
  Napi::Uint8Array d = Napi::Uint8Array::New(env, len);
  std::memcpy(d.Data(), buf, len);
  o.Set("data", d);
  o.Set("fds", fds);
  o.Set("fd", k > 0 ? fds.Get(0u) : Napi::Number::New(env, -1));
  o.Set("truncated", Napi::Boolean::New(env, (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0));
  return o;
}

static_assert(memifimpl::kMaxPassFds == RGV_MAX_MR_PIECES, "one message passes every piece's memfd");

Napi::Value IsStreamPair(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "isStreamPair");
  int domain = 0, type = 0;
  socklen_t dl = sizeof domain, tl = sizeof type;
  const bool yes = getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 &&
                   getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && domain == AF_UNIX && type == SOCK_STREAM;
  return Napi::Boolean::New(info.Env(), yes);
}

// channelSignal(fd, {blockingForTest}): blockingForTest (tests) first makes the file blocking, as
// a program that kept a copy of the daemon's end can.
Napi::Value ChannelSignal(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "channelSignal");
  if (info[1].IsObject() && info[1].As<Napi::Object>().Get("blockingForTest").ToBoolean().Value()) {
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  const char one = 1;
  ssize_t r;
  do {
    r = send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  return Napi::Boolean::New(info.Env(), r == 1);
}

// seqpacketSend(fd, bytes, pass = -1): one message, passing the fd `pass` (a number) or the fds
// in it (an array, at most RGV_MAX_MR_PIECES); 0 or an errno.
Napi::Value SeqpacketSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int sock = ArgFd(info, 0, "seqpacketSend");
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw TypeErr(env, "seqpacketSend: bytes must be a Uint8Array");
  Napi::Uint8Array b = info[1].As<Napi::Uint8Array>();
  int pass[RGV_MAX_MR_PIECES];
  size_t n = 0;
  if (info[2].IsNumber()) {
    if (info[2].As<Napi::Number>().Int32Value() >= 0) pass[n++] = info[2].As<Napi::Number>().Int32Value();
  } else if (info[2].IsArray()) {
    Napi::Array a = info[2].As<Napi::Array>();
    if (a.Length() > RGV_MAX_MR_PIECES) throw TypeErr(env, "seqpacketSend: at most 64 fds");
    for (uint32_t i = 0; i < a.Length(); i++) pass[n++] = a.Get(i).As<Napi::Number>().Int32Value();
  }
  return Napi::Number::New(env, memifimpl::SendFds(sock, b.Data(), b.ByteLength(), pass, n));
}

}  // namespace

void InitVerbsSocket(Napi::Env env, Napi::Object exports) {
  exports.Set("verbsListen", Napi::Function::New(env, VerbsListen, "verbsListen"));
  exports.Set("verbsAccept", Napi::Function::New(env, VerbsAccept, "verbsAccept"));
  exports.Set("verbsUnlisten", Napi::Function::New(env, VerbsUnlisten, "verbsUnlisten"));
  exports.Set("fdLimit", Napi::Function::New(env, FdLimit, "fdLimit"));
  exports.Set("mapVerbsMemory", Napi::Function::New(env, MapVerbsMemory, "mapVerbsMemory"));
  exports.Set("mapVerbsPieces", Napi::Function::New(env, MapVerbsPieces, "mapVerbsPieces"));
  exports.Set(
      "verbsMemoryFaults",
      Napi::Function::New(
          env, [](const Napi::CallbackInfo& i) { return Napi::Number::New(i.Env(), double(SigbusGuardFaults())); },
          "verbsMemoryFaults"));
  exports.Set("mapVerbsShm", Napi::Function::New(env, MapVerbsShm, "mapVerbsShm"));
  exports.Set("seqpacketRecv", Napi::Function::New(env, SeqpacketRecv, "seqpacketRecv"));
  exports.Set("seqpacketSend", Napi::Function::New(env, SeqpacketSend, "seqpacketSend"));
  exports.Set("isStreamPair", Napi::Function::New(env, IsStreamPair, "isStreamPair"));
  exports.Set("channelSignal", Napi::Function::New(env, ChannelSignal, "channelSignal"));
}

}  // namespace rg
