// memif socket helpers: UNIX seqpacket sockets with fd passing, names, eventfd and epoll.
#include "memif.h"

namespace rg {
namespace memifimpl {

int MakeSeqpacket() { return socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

// mkdir -p of the parent of `path` (mode 0755 for what it creates). 0 or an errno.
int MakeParents(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return 0;
  std::string dir = path.substr(0, slash);
  for (size_t i = 1; i <= dir.size(); i++) {
    if (i == dir.size() || dir[i] == '/') {
      std::string part = dir.substr(0, i);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return errno;
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return ENOTDIR;
  return 0;
}

// Sends `len` bytes as one message, with the `n` descriptors of `fds` (at most kMaxPassFds) in
// SCM_RIGHTS. Returns 0, or an errno.
int SendFds(int sock, const void* data, size_t len, const int* fds, size_t n) {
  if (n > kMaxPassFds) return EINVAL;
  struct iovec iov = {const_cast<void*>(data), len};
  struct msghdr mh;
  std::memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxPassFds)];
  if (n > 0) {
    std::memset(ctl, 0, sizeof ctl);
    mh.msg_control = ctl;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  }
  for (;;) {
    ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(len)) return 0;
    if (r < 0 && errno == EINTR) continue;
    return r < 0 ? errno : EMSGSIZE;
  }
}

int SendBytes(int sock, const void* data, size_t len, int fd) { return SendFds(sock, data, len, &fd, fd >= 0 ? 1 : 0); }

// Receives one message into buf (up to cap bytes). Returns the length (0: peer closed), or
// -errno. *fd gets the first descriptor passed with it (others are closed), or -1.
ssize_t RecvMsg(int sock, void* buf, size_t cap, int* fd) {
  *fd = -1;
  struct iovec iov = {buf, cap};
  struct msghdr mh;
  std::memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 8)];
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof ctl;
  ssize_t r;
  do {
    r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return -errno;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (*fd < 0)
        *fd = f;
      else
        close(f);
    }
  }
  if (mh.msg_flags & MSG_TRUNC) return static_cast<ssize_t>(cap) + 1;  // longer than a message
  return r;
}

void CopyName(uint8_t* dst, size_t cap, const std::string& s) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, s.data(), std::min(cap - 1, s.size()));
}

std::string NameOf(const uint8_t* p, size_t cap) {
  size_t n = 0;
  while (n < cap && p[n] != 0) n++;
  return std::string(reinterpret_cast<const char*>(p), n);
}

// The interrupt eventfds are shared with the peer: SCM_RIGHTS shares the open file
// description, O_NONBLOCK included, so the peer can make one blocking at any moment, and a
// pipe or a socket could be sent in its place. ADD_RING takes only eventfds (IsEventfd) and
// sets O_NONBLOCK; reads and writes never block (eventfd.cc: preadv2 RWF_NOWAIT, and a timer
// guard around a write, since the peer can clear O_NONBLOCK and fill the counter between any
// check and the write), and a peer found to have cleared O_NONBLOCK is disconnected
// (EventWrite returns -1).
bool IsEventfd(int fd) {
  char path[40], link[40];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = 0;
  return std::strcmp(link, "anon_inode:[eventfd]") == 0;
}

bool PollFd(int fd, short ev) {
  pollfd p = {fd, ev, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & ev) != 0;
}

// Takes the counter if there is one; true when it was non-zero.
bool EventRead(int fd) {
  uint64_t v;
  return EventfdTakeNoBlock(fd, &v);
}

// Adds 1; 1 when written, 0 when there was no room, -1 when the fd was made blocking (found so
// before the write, or the write blocked and its guard ended it: EventfdAddNoBlock).
int EventWrite(int fd) {
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || !(fl & O_NONBLOCK)) return -1;
  return EventfdAddNoBlock(fd);
}

void EpollAdd(int ep, int fd) {
  struct epoll_event ev;
  std::memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

void EpollDel(int ep, int fd) {
  if (ep >= 0 && fd >= 0) epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
}

}  // namespace memifimpl
}  // namespace rg
