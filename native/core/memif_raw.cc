// Raw SOCK_SEQPACKET sockets: for the tests (test/memif-proto.test.ts plays a hand-written memif
// peer with them: connect, listen, accept, send and receive messages with fds, map a region fd)
// and for the daemon's verbs control socket (seqpacket*).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>

#include "memif.h"

namespace rg {
namespace memifimpl {

// ---------------------------------------------------------------- raw control sockets (tests)

// A non-blocking SOCK_SEQPACKET socket connected to (listen: bound to and listening on) info[0].
template <bool kListen>
Napi::Value RawSocket(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* fn = kListen ? "memifRawListen" : "memifRawConnect";
  if (!info[0].IsString()) throw TypeErr(env, std::string(fn) + ": socket must be a string");
  Address a = Address::Parse(env, fn, info[0].As<Napi::String>().Utf8Value());
  int fd = MakeSeqpacket();
  if (fd < 0) throw ErrnoError(env, std::string(fn) + ": socket", errno, "socket");
  sockaddr_un sa;
  socklen_t len = a.Fill(&sa);
  const sockaddr* sp = reinterpret_cast<sockaddr*>(&sa);
  if (kListen ? bind(fd, sp, len) != 0 || listen(fd, 4) != 0 : connect(fd, sp, len) != 0) {
    int err = errno;
    close(fd);
    throw ErrnoError(env, std::string(fn) + ": " + a.Text(), err, kListen ? "bind" : "connect");
  }
  return Napi::Number::New(env, fd);
}

Napi::Value RawAccept(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info, 0, "memifRawAccept");
  int c = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  return Napi::Number::New(info.Env(), c < 0 ? -1 : c);
}

// memifRawSend(fd, bytes, passFd = -1): sends bytes as one message; returns 0 or an errno.
Napi::Value RawSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "memifRawSend");
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw TypeErr(env, "memifRawSend: bytes must be a Uint8Array");
  }
  Napi::Uint8Array b = info[1].As<Napi::Uint8Array>();
  int pass = info[2].IsNumber() ? info[2].As<Napi::Number>().Int32Value() : -1;
  return Napi::Number::New(env, SendBytes(fd, b.Data(), b.ByteLength(), pass));
}

// memifRawRecv(fd): null when nothing is waiting; {eof: true} when the peer closed; else
// {data: Uint8Array, fd} (fd: a descriptor passed with the message, or -1).
Napi::Value RawRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "memifRawRecv");
  uint8_t buf[512];
  int afd = -1;
  ssize_t r = RecvMsg(fd, buf, sizeof buf, &afd);
  if (r == -EAGAIN || r == -EWOULDBLOCK) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  if (r <= 0) {
    o.Set("eof", Napi::Boolean::New(env, true));
    return o;
  }
  // RecvMsg says cap + 1 for a message longer than buf: the buffer's bytes, one past them
  // signalling the truncation by length (never read past buf).
  const size_t n = static_cast<size_t>(r);
  Napi::Uint8Array d = Napi::Uint8Array::New(env, n);
  std::memcpy(d.Data(), buf, std::min(n, sizeof buf));
  o.Set("data", d);
  o.Set("fd", Napi::Number::New(env, afd));
  return o;
}

// `size` bytes of fd mapped shared, read-write, as an ArrayBuffer that unmaps them when collected.
// Throws naming `fn` (the fd stays the caller's).
Napi::ArrayBuffer MapShared(Napi::Env env, int fd, size_t size, const char* fn) {
  void* a = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a == MAP_FAILED) throw ErrnoError(env, std::string(fn) + ": mmap", errno, "mmap");
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

// memifMapFd(fd, size): maps a region fd received by a test (a client's memfd) as an ArrayBuffer.
Napi::Value MapFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "memifMapFd");
  size_t size = static_cast<size_t>(ArgInteger(info, 1, "memifMapFd", "size", 1, 1ull << 32));
  return MapShared(env, fd, size, "memifMapFd");
}

// mapSealedFd(fd, size): maps `size` bytes of a memfd another process passed (the verbs
// library's registered memory) as an ArrayBuffer, after checking that it cannot shrink under us
// (F_SEAL_SHRINK: a peer truncating it would turn our accesses into SIGBUS) and is that large.
// Closes fd either way; the mapping lives as long as the ArrayBuffer.
Napi::Value MapSealedFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "mapSealedFd");
  size_t size = static_cast<size_t>(ArgInteger(info, 1, "mapSealedFd", "size", 1, 1ull << 32));
  const int seals = fcntl(fd, F_GET_SEALS);
  struct stat st;
  const char* bad = nullptr;
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    bad = "the memory is not sealed against shrinking (F_SEAL_SHRINK)";
  else if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size)
    bad = "the memory is smaller than the registration";
  if (bad != nullptr) {
    close(fd);
    throw Napi::Error::New(env, std::string("mapSealedFd: ") + bad);
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};  // the mapping keeps the memory
  return MapShared(env, fd, size, "mapSealedFd");
}

// seqpacketPeer(fd): the connected process (SO_PEERCRED) as {pid, uid}, or null.
Napi::Value SeqpacketPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0, "seqpacketPeer");
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", Napi::Number::New(env, cr.pid));
  o.Set("uid", Napi::Number::New(env, cr.uid));
  return o;
}

void InitMemifRaw(Napi::Env env, Napi::Object exports) {
  exports.Set("memifRawConnect", Napi::Function::New(env, RawSocket<false>, "memifRawConnect"));
  exports.Set("memifRawListen", Napi::Function::New(env, RawSocket<true>, "memifRawListen"));
  exports.Set("memifRawAccept", Napi::Function::New(env, RawAccept, "memifRawAccept"));
  exports.Set("memifRawSend", Napi::Function::New(env, RawSend, "memifRawSend"));
  exports.Set("memifRawRecv", Napi::Function::New(env, RawRecv, "memifRawRecv"));
  exports.Set("memifMapFd", Napi::Function::New(env, MapFd, "memifMapFd"));
  // The same non-blocking SOCK_SEQPACKET primitives serve the daemon's verbs control socket
  // (dataplane/verbs-server/connections.ts).
  exports.Set("seqpacketListen", Napi::Function::New(env, RawSocket<true>, "seqpacketListen"));
  exports.Set("seqpacketAccept", Napi::Function::New(env, RawAccept, "seqpacketAccept"));
  // seqpacketSend and seqpacketRecv (several fds per message): verbs_socket.cc.
  exports.Set("mapSealedFd", Napi::Function::New(env, MapSealedFd, "mapSealedFd"));
  exports.Set("seqpacketPeer", Napi::Function::New(env, SeqpacketPeer, "seqpacketPeer"));
}

}  // namespace memifimpl
}  // namespace rg
