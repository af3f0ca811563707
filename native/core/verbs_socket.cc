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
//   mapVerbsMemory(fd, size)  a program's registration or ring: a memfd sealed against shrinking,
//                             at least `size` long, not hugetlbfs, mapped shared and never touched
//                             here (O(1) in the size).
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common.h"

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
  struct statfs sf;
  struct stat st;
  const int seals = fcntl(fd, F_GET_SEALS);
  const char* bad = nullptr;
  if (fstatfs(fd, &sf) == 0 && static_cast<unsigned long>(sf.f_type) == HUGETLBFS_MAGIC)
    bad =
        "hugetlb memory (MFD_HUGETLB, MAP_HUGETLB or hugetlbfs) is refused: a hole punched in it faults "
        "again from the hugepage pool, which may be empty (SIGBUS in the daemon); register normal pages";
  else if (seals < 0 || !(seals & F_SEAL_SHRINK))
    bad = "the memory is not sealed against shrinking (F_SEAL_SHRINK)";
  else if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size)
    bad = "the memory is smaller than the registration";
  if (bad != nullptr) {
    close(fd);
    throw Napi::Error::New(env, std::string("mapVerbsMemory: ") + bad);
  }
  // Mapped, never touched here: the pages are the program's (no MAP_POPULATE, no copy).
  void* a = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  int err = errno;
  close(fd);  // the mapping keeps the memory
  if (a == MAP_FAILED) throw ErrnoError(env, "mapVerbsMemory: mmap", err, "mmap");
  struct Holder {
    void* a;
    size_t n;
  };
  Holder* h = new Holder{a, size};
  return Napi::ArrayBuffer::New(
      env, a, size,
      [](Napi::Env, void*, Holder* x) {
        munmap(x->a, x->n);
        delete x;
      },
      h);
}

}  // namespace

void InitVerbsSocket(Napi::Env env, Napi::Object exports) {
  exports.Set("verbsListen", Napi::Function::New(env, VerbsListen, "verbsListen"));
  exports.Set("verbsAccept", Napi::Function::New(env, VerbsAccept, "verbsAccept"));
  exports.Set("verbsUnlisten", Napi::Function::New(env, VerbsUnlisten, "verbsUnlisten"));
  exports.Set("fdLimit", Napi::Function::New(env, FdLimit, "fdLimit"));
  exports.Set("mapVerbsMemory", Napi::Function::New(env, MapVerbsMemory, "mapVerbsMemory"));
}

}  // namespace rg
