// memif-hostile: a memif client that speaks the protocol (version 2.0) and then misbehaves, for
// the tests (test/hostile-memif.test.ts). It attacks a server on SOCKET in one way:
//
//   flip SOCKET SECONDS       handshake, then publish valid 64-byte frames on the C2S ring while
//                             a second thread rewrites every descriptor (length 64 <-> 32 MiB,
//                             region and offset to garbage): a double fetch reads the bad values
//   deferflip SOCKET SECONDS  the same with 1500-byte frames whose first byte is 0xaa, and the
//                             frames' bytes rewritten too: a server that leaves such frames'
//                             payload in our memory until it reads them (its rx pattern)
//   blocking SOCKET SECONDS   interrupt fds are eventfd(0, 0) (blocking); after CONNECT the
//                             client also clears O_NONBLOCK on them, then idles
//   pipe SOCKET               a pipe as the C2S ring's interrupt fd
//   unsealed SOCKET SECONDS   region 0 is a memfd without F_SEAL_SHRINK; after CONNECT the client
//                             truncates it to 0 and publishes a frame (the server would fault)
//   jump SOCKET               after CONNECT, C2S head jumps 0x8000 past tail
//   jump1 SOCKET              the same on queue 1 (its rings are added as index 1, none as 0):
//                             a server whose queue 1 another thread polls (cpu.workers)
//   noinit SOCKET N SECONDS   opens N connections that read HELLO and never send INIT
//   trickle SOCKET N          (not hostile: a well-behaved sender) N single frames, each after a
//                             random pause of 0-300 us and kicked unless the ring says MASK_INT,
//                             each waited for (the server's tail) up to 250 ms; prints
//                             "stalls S of N" (S frames the server left in its ring that long:
//                             a lost wake-up) and "stuck" if one was never taken
//
// It prints what the server said (DISCONNECT reasons) on stdout, one line each, and exits 0 when
// it ran its course (the test judges the server, not this program). Not part of rdma-graph.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum { ACK = 1, HELLO = 2, INIT = 3, ADD_REGION = 4, ADD_RING = 5, CONNECT = 6, CONNECTED = 7, DISCONNECT = 8 };
enum { LOG2 = 6, SLOTS = 1 << LOG2, RING_HDR = 128, DESC = 16, BUF = 2048 };
#define COOKIE 0x3E31F20u

static int sock_connect(const char* path) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  socklen_t len;
  if (path[0] == '@') {
    strncpy(sa.sun_path + 1, path + 1, sizeof sa.sun_path - 2);
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(path + 1));
  } else {
    strncpy(sa.sun_path, path, sizeof sa.sun_path - 1);
    len = sizeof sa;
  }
  if (fd < 0 || connect(fd, (struct sockaddr*)&sa, len) != 0) {
    perror("connect");
    exit(2);
  }
  return fd;
}

static void send_msg(int sock, uint8_t* m, int pass) {
  struct iovec io = {m, 128};
  struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1};
  char cbuf[CMSG_SPACE(sizeof(int))];
  if (pass >= 0) {
    memset(cbuf, 0, sizeof cbuf);
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass, sizeof(int));
  }
  if (sendmsg(sock, &mh, MSG_NOSIGNAL) != 128) printf("send failed: %s\n", strerror(errno));
}

// The next message's type (0 on end of file); prints DISCONNECT reasons.
static int recv_msg(int sock) {
  uint8_t m[128];
  ssize_t r = recv(sock, m, sizeof m, 0);
  if (r <= 0) return 0;
  uint16_t type;
  memcpy(&type, m, 2);
  if (type == DISCONNECT) printf("disconnect: %.96s\n", (char*)m + 6);
  fflush(stdout);
  return type;
}

static void expect(int sock, int type) {
  int t = recv_msg(sock);
  if (t != type) {
    printf("expected message %d, got %d\n", type, t);
    exit(0);
  }
}

static uint8_t* msg(uint16_t type) {
  static uint8_t m[128];
  memset(m, 0, sizeof m);
  memcpy(m, &type, 2);
  return m;
}

struct Client {
  int sock;
  int memfd;
  uint8_t* mem;
  size_t size;
  int ef_c2s, ef_s2c;
};

static const size_t kC2S = 0, kS2C = RING_HDR + DESC * SLOTS, kBufs = 2 * (RING_HDR + DESC * SLOTS);

static volatile uint16_t* head_of(struct Client* c, size_t ring) { return (volatile uint16_t*)(c->mem + ring + 6); }
static volatile uint16_t* tail_of(struct Client* c, size_t ring) { return (volatile uint16_t*)(c->mem + ring + 64); }
static uint8_t* desc_of(struct Client* c, size_t ring, unsigned slot) {
  return c->mem + ring + RING_HDR + (slot & (SLOTS - 1)) * DESC;
}

static void set_desc(uint8_t* d, uint16_t flags, uint16_t region, uint32_t length, uint32_t offset) {
  memcpy(d, &flags, 2);
  memcpy(d + 2, &region, 2);
  memcpy(d + 4, &length, 4);
  memcpy(d + 8, &offset, 4);
}

// The queue index the rings are added as (jump1: 1).
static uint16_t g_ring_index = 0;

// INIT, region 0 (rings then buffers), one C2S and one S2C ring, CONNECT; waits for CONNECTED.
static void handshake(struct Client* c, const char* path, int sealed, int ef_c2s, int ef_s2c) {
  c->sock = sock_connect(path);
  expect(c->sock, HELLO);
  uint8_t* m = msg(INIT);
  uint16_t ver = 0x0200;
  memcpy(m + 2, &ver, 2);
  strcpy((char*)m + 33, "memif-hostile");
  send_msg(c->sock, m, -1);
  expect(c->sock, ACK);
  c->size = kBufs + 2 * SLOTS * BUF;
  c->memfd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ftruncate(c->memfd, (off_t)c->size) != 0) exit(2);
  if (sealed) fcntl(c->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  c->mem = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
  memset(c->mem, 0, kBufs);
  uint32_t cookie = COOKIE;
  memcpy(c->mem + kC2S, &cookie, 4);
  memcpy(c->mem + kS2C, &cookie, 4);
  m = msg(ADD_REGION);
  uint64_t size = c->size;
  memcpy(m + 4, &size, 8);
  send_msg(c->sock, m, c->memfd);
  expect(c->sock, ACK);
  c->ef_c2s = ef_c2s;
  c->ef_s2c = ef_s2c;
  for (int dir = 0; dir < 2; dir++) {
    m = msg(ADD_RING);
    uint16_t flags = dir == 0 ? 1 : 0;
    uint32_t off = dir == 0 ? (uint32_t)kC2S : (uint32_t)kS2C;
    memcpy(m + 2, &flags, 2);
    memcpy(m + 4, &g_ring_index, 2);
    memcpy(m + 8, &off, 4);
    m[12] = LOG2;
    send_msg(c->sock, m, dir == 0 ? ef_c2s : ef_s2c);
    expect(c->sock, ACK);
  }
  m = msg(CONNECT);
  strcpy((char*)m + 2, "hostile0");
  send_msg(c->sock, m, -1);
  expect(c->sock, CONNECTED);
  printf("connected\n");
  fflush(stdout);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

// Publishes frames of `len` bytes on C2S as fast as the server takes them, until `until`.
static void pump(struct Client* c, double until, uint32_t len) {
  uint16_t head = *head_of(c, kC2S);
  while (now_s() < until) {
    uint16_t tail = __atomic_load_n(tail_of(c, kC2S), __ATOMIC_ACQUIRE);
    while ((uint16_t)(head - tail) < SLOTS) {
      set_desc(desc_of(c, kC2S, head), 0, 0, len, (uint32_t)(kBufs + (head & (SLOTS - 1)) * BUF));
      head++;
    }
    __atomic_store_n(head_of(c, kC2S), head, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(c->ef_c2s, &one, 8) < 0) { /* full or blocking: fine */
    }
  }
}

static atomic_int flipping = 1;
// deferflip: the flipper also rewrites the frames' bytes (the first one 0xaa half the time, the
// pattern the victim's server receives in place) while the server may still be reading them.
static int g_scribble = 0;

static void* flipper(void* arg) {
  struct Client* c = arg;
  uint32_t x = 12345;
  while (atomic_load(&flipping)) {
    for (unsigned s = 0; s < SLOTS; s++) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      uint8_t* d = desc_of(c, kC2S, s);
      uint32_t len = (x & 1) ? 64 : 32u << 20;
      uint16_t region = (x & 6) ? 0 : (uint16_t)(x >> 8);
      uint32_t off = (x & 8) ? (uint32_t)(kBufs + s * BUF) : x;
      uint16_t flags = (x & 0x30) == 0x30 ? 1 : 0;
      memcpy(d, &flags, 2);
      memcpy(d + 2, &region, 2);
      memcpy(d + 4, &len, 4);
      memcpy(d + 8, &off, 4);
      if (g_scribble) {
        uint8_t* b = c->mem + kBufs + s * BUF;
        b[0] = (x & 0x40) ? 0xaa : (uint8_t)x;
        memset(b + 1 + (x >> 24) % 1024, (int)(x >> 16), 256);
      }
    }
  }
  return NULL;
}

// Reads control messages (DISCONNECT) without blocking for `secs` seconds.
static void linger(int sock, double secs) {
  double until = now_s() + secs;
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  while (now_s() < until) {
    if (recv_msg(sock) == 0 && errno != EAGAIN) break;
    usleep(5000);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: memif-hostile flip|deferflip|blocking|pipe|unsealed|jump|noinit|trickle SOCKET [ARGS]\n");
    return 2;
  }
  const char* mode = argv[1];
  const char* path = argv[2];
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct Client c;
  if (!strcmp(mode, "flip") || !strcmp(mode, "deferflip")) {
    double secs = argc > 3 ? atof(argv[3]) : 1;
    handshake(&c, path, 1, eventfd(0, EFD_NONBLOCK), eventfd(0, EFD_NONBLOCK));
    g_scribble = mode[0] == 'd';
    for (unsigned s = 0; s < SLOTS && g_scribble; s++) c.mem[kBufs + s * BUF] = 0xaa;
    pthread_t t;
    pthread_create(&t, NULL, flipper, &c);
    pump(&c, now_s() + secs, g_scribble ? 1500 : 64);
    atomic_store(&flipping, 0);
    pthread_join(t, NULL);
    linger(c.sock, 0.2);
  } else if (!strcmp(mode, "blocking")) {
    double secs = argc > 3 ? atof(argv[3]) : 1;
    handshake(&c, path, 1, eventfd(0, 0), eventfd(0, 0));
    // The server may have made them non-blocking (shared file description): undo it.
    fcntl(c.ef_c2s, F_SETFL, fcntl(c.ef_c2s, F_GETFL) & ~O_NONBLOCK);
    fcntl(c.ef_s2c, F_SETFL, fcntl(c.ef_s2c, F_GETFL) & ~O_NONBLOCK);
    // Fill the S2C ring with empty buffers (interrupts on: the server kicks when it sends).
    for (unsigned s = 0; s < SLOTS; s++)
      set_desc(desc_of(&c, kS2C, s), 0, 0, BUF, (uint32_t)(kBufs + (SLOTS + s) * BUF));
    __atomic_store_n(head_of(&c, kS2C), (uint16_t)SLOTS, __ATOMIC_RELEASE);
    // Make the S2C eventfd full, so a blocking write would block forever.
    uint64_t big = 0xfffffffffffffffeULL;
    if (write(c.ef_s2c, &big, 8) != 8) printf("could not fill the eventfd\n");
    printf("fds made blocking\n");
    linger(c.sock, secs);
  } else if (!strcmp(mode, "pipe")) {
    int p[2];
    if (pipe(p) != 0) return 2;
    handshake(&c, path, 1, p[1], eventfd(0, EFD_NONBLOCK));
    linger(c.sock, 0.5);
  } else if (!strcmp(mode, "unsealed")) {
    double secs = argc > 3 ? atof(argv[3]) : 1;
    handshake(&c, path, 0, eventfd(0, EFD_NONBLOCK), eventfd(0, EFD_NONBLOCK));
    munmap(c.mem, c.size);
    if (ftruncate(c.memfd, 0) != 0) printf("ftruncate: %s\n", strerror(errno));
    printf("truncated\n");
    linger(c.sock, secs);
  } else if (!strcmp(mode, "jump") || !strcmp(mode, "jump1")) {
    if (mode[4] == '1') g_ring_index = 1;
    handshake(&c, path, 1, eventfd(0, EFD_NONBLOCK), eventfd(0, EFD_NONBLOCK));
    __atomic_store_n(head_of(&c, kC2S), (uint16_t)(*tail_of(&c, kC2S) + 0x8000), __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(c.ef_c2s, &one, 8) != 8) printf("kick failed\n");
    linger(c.sock, 1);
  } else if (!strcmp(mode, "trickle")) {
    int n = argc > 3 ? atoi(argv[3]) : 200;
    handshake(&c, path, 1, eventfd(0, EFD_NONBLOCK), eventfd(0, EFD_NONBLOCK));
    uint16_t head = *head_of(&c, kC2S);
    int stalls = 0;
    uint32_t x = 2463534242u;
    for (int k = 0; k < n; k++) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      usleep(x % 300);
      set_desc(desc_of(&c, kC2S, head), 0, 0, 64, (uint32_t)(kBufs + (head & (SLOTS - 1)) * BUF));
      head++;
      __atomic_store_n(head_of(&c, kC2S), head, __ATOMIC_RELEASE);
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      uint16_t flags = __atomic_load_n((volatile uint16_t*)(c.mem + kC2S + 4), __ATOMIC_ACQUIRE);
      uint64_t one = 1;
      if (!(flags & 1) && write(c.ef_c2s, &one, 8) < 0) { /* counter full: readable already */
      }
      double t0 = now_s(), waited = 0;
      while (__atomic_load_n(tail_of(&c, kC2S), __ATOMIC_ACQUIRE) != head && (waited = now_s() - t0) < 2.0) usleep(50);
      if (waited >= 0.25) stalls++;
      if (__atomic_load_n(tail_of(&c, kC2S), __ATOMIC_ACQUIRE) != head) {
        printf("stuck at frame %d\n", k);
        break;
      }
    }
    printf("stalls %d of %d\n", stalls, n);
    linger(c.sock, 0.1);
  } else if (!strcmp(mode, "noinit")) {
    int n = argc > 3 ? atoi(argv[3]) : 32;
    double secs = argc > 4 ? atof(argv[4]) : 1;
    int* fds = calloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++) fds[i] = sock_connect(path);
    printf("opened %d\n", n);
    double until = now_s() + secs;
    int hellos = 0, disconnects = 0, closed = 0;
    for (int i = 0; i < n; i++) fcntl(fds[i], F_SETFL, O_NONBLOCK);
    while (now_s() < until) {
      for (int i = 0; i < n; i++) {
        if (fds[i] < 0) continue;
        uint8_t m[128];
        ssize_t r = recv(fds[i], m, sizeof m, 0);
        if (r == 0) {
          close(fds[i]);
          fds[i] = -1;
          closed++;
        } else if (r > 0) {
          uint16_t type;
          memcpy(&type, m, 2);
          if (type == HELLO) hellos++;
          if (type == DISCONNECT) disconnects++;
        }
      }
      usleep(2000);
    }
    printf("hellos %d disconnects %d closed %d\n", hellos, disconnects, closed);
  } else {
    fprintf(stderr, "memif-hostile: unknown mode %s\n", mode);
    return 2;
  }
  return 0;
}
