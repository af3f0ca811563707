/*
 * ecn-switch: a two-port Ethernet switch over AF_PACKET that marks ECN on the way out of its
 * second port, the early warning of a bottleneck for bench/incast.ts (issue 32). This kernel has
 * no red, fq_codel, pie or netem qdisc, so nothing on a kernel path marks CE; this is the marking
 * switch the bench puts in front of its tbf bottleneck.
 *
 *   ecn-switch A B RATE_BPS K_BYTES [GAMMA]
 *
 * Every frame received on interface A is sent out of B and every frame received on B out of A,
 * unchanged, except IPv4 frames from A to B whose ECN field says ECT(0) or ECT(1): those are
 * marked CE (and their header checksum updated, RFC 1624) when they find more than K_BYTES in a
 * virtual queue of the bytes B took from A (not those its queue refused), drained at GAMMA x
 * RATE_BPS (default 0.95). That is
 * a phantom queue (Alizadeh et al., "Less is More", NSDI 2012): it fills before the real
 * queue behind it (the tbf at RATE_BPS) does, so senders that react to CE slow down before the
 * real queue builds or drops; a non-ECT frame is never marked, only dropped by the real queue.
 *
 * Frames keep their offload state across the switch (PACKET_VNET_HDR on both sockets): a TCP
 * GSO packet of 64 KiB crosses as one, as it would cross a kernel bridge. A frame the output
 * refuses (the tbf's queue full: ENOBUFS) is dropped and counted, as the bridge would drop it.
 *
 * Prints one line "ready" once both sockets are bound, a JSON line of its counters on SIGUSR1,
 * and one more at exit (SIGTERM or SIGINT, or its parent's death). Exits 1 when one of its
 * interfaces disappears (its namespace deleted under it). Needs CAP_NET_RAW.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define VNET_HDR sizeof(struct virtio_net_hdr)
#define FRAME_MAX (65536 + 64) /* a GSO packet of 64 KiB and its Ethernet header */

struct counters {
  uint64_t frames, bytes, dropped;
};

static struct counters ab, ba;
static uint64_t ect, marked, not_ect;
static double vq, vq_max; /* the virtual queue (bytes), its largest */
static volatile sig_atomic_t stop, report;

static void on_stop(int sig) {
  (void)sig;
  stop = 1;
}
static void on_report(int sig) {
  (void)sig;
  report = 1;
}

static void usage(void) {
  fprintf(stderr, "usage: ecn-switch A B RATE_BPS K_BYTES [GAMMA]\n");
  exit(2);
}

/* A number argument, or an error that names it. */
static double number(const char* s, const char* what, double lo, double hi) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
    fprintf(stderr, "ecn-switch: %s must be a number in [%g, %g], got \"%s\"\n", what, lo, hi, s);
    exit(2);
  }
  return v;
}

/* A raw socket on interface `name` that sees every frame it receives (not those it sends). */
static int port(const char* name) {
  unsigned ix = if_nametoindex(name);
  if (ix == 0) {
    fprintf(stderr, "ecn-switch: no interface \"%s\"\n", name);
    exit(1);
  }
  int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) {
    perror("ecn-switch: socket(AF_PACKET)");
    exit(1);
  }
  int one = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) {
    perror("ecn-switch: setsockopt(PACKET_VNET_HDR, PACKET_IGNORE_OUTGOING)");
    exit(1);
  }
  struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)ix};
  if (bind(fd, (struct sockaddr*)&sll, sizeof sll) != 0) {
    fprintf(stderr, "ecn-switch: bind to %s: %s\n", name, strerror(errno));
    exit(1);
  }
  struct packet_mreq mr = {.mr_ifindex = (int)ix, .mr_type = PACKET_MR_PROMISC};
  if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) {
    perror("ecn-switch: setsockopt(PACKET_ADD_MEMBERSHIP promiscuous)");
    exit(1);
  }
  return fd;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/*
 * An A->B frame (after its virtio header) through the marker: the virtual queue drains at
 * `drain` bytes/s since `*last`, and an ECT IPv4 frame is marked CE when the queue it finds is
 * above `k`, as a switch marks at enqueue (a GSO packet by what its first segment finds: it can
 * only be marked whole). The caller adds the frame's bytes once B's queue took it (`admit`): a
 * phantom queue counts what the link carries, so the frames the tbf drops do not fill it.
 * Bounds: everything read lies inside the `len` bytes received.
 */
static void mark(uint8_t* f, size_t len, double drain, double k, double* last) {
  double t = now_s();
  vq -= (t - *last) * drain;
  if (vq < 0) vq = 0;
  *last = t;
  const int above = vq > k;
  if (len < ETH_HLEN + 20 || f[12] != 0x08 || f[13] != 0x00) return; /* IPv4 only */
  uint8_t* ip = f + ETH_HLEN;
  if ((ip[0] >> 4) != 4 || (ip[0] & 15) < 5 || len < ETH_HLEN + (size_t)(ip[0] & 15) * 4) return;
  unsigned ecn = ip[1] & 3;
  if (ecn == 0) {
    not_ect++;
    return;
  }
  if (ecn == 3) return; /* CE already */
  ect++;
  if (!above) return;
  /* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m the 16-bit word holding the TOS byte. */
  uint16_t old = (uint16_t)(ip[0] << 8 | ip[1]);
  ip[1] |= 3;
  uint16_t new = (uint16_t)(ip[0] << 8 | ip[1]);
  uint32_t sum = (uint16_t) ~(ip[10] << 8 | ip[11]);
  sum += (uint16_t)~old;
  sum += new;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  uint16_t hc = (uint16_t)~sum;
  ip[10] = (uint8_t)(hc >> 8);
  ip[11] = (uint8_t)hc;
  marked++;
}

static void admit(size_t len) {
  vq += (double)len;
  if (vq > vq_max) vq_max = vq;
}

static void print_counters(void) {
  printf(
      "{\"ab\":{\"frames\":%llu,\"bytes\":%llu,\"dropped\":%llu},\"ba\":{\"frames\":%llu,\"bytes\":%llu,"
      "\"dropped\":%llu},\"ect\":%llu,\"marked\":%llu,\"notEct\":%llu,\"vqMaxBytes\":%.0f}\n",
      (unsigned long long)ab.frames, (unsigned long long)ab.bytes, (unsigned long long)ab.dropped,
      (unsigned long long)ba.frames, (unsigned long long)ba.bytes, (unsigned long long)ba.dropped,
      (unsigned long long)ect, (unsigned long long)marked, (unsigned long long)not_ect, vq_max);
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) usage();
  const double rate = number(argv[3], "RATE_BPS", 1e3, 1e12);
  const double k = number(argv[4], "K_BYTES", 0, 1e9);
  const double gamma = argc == 6 ? number(argv[5], "GAMMA", 0.01, 1) : 0.95;
  const double drain = gamma * rate / 8;
  prctl(PR_SET_PDEATHSIG, SIGTERM); /* not left running by a parent that died */
  const unsigned ifindex[2] = {if_nametoindex(argv[1]), if_nametoindex(argv[2])};
  int fd[2] = {port(argv[1]), port(argv[2])};
  struct sigaction sa = {.sa_handler = on_stop};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = on_report;
  sigaction(SIGUSR1, &sa, NULL);
  static uint8_t buf[VNET_HDR + FRAME_MAX];
  double last = now_s();
  printf("ready\n");
  fflush(stdout);
  struct pollfd pfd[2] = {{.fd = fd[0], .events = POLLIN}, {.fd = fd[1], .events = POLLIN}};
  while (!stop) {
    if (report) {
      report = 0;
      print_counters();
    }
    if (poll(pfd, 2, 100) < 0 && errno != EINTR) {
      perror("ecn-switch: poll");
      return 1;
    }
    for (int from = 0; from < 2; from++) {
      if (pfd[from].revents & (POLLERR | POLLHUP | POLLNVAL)) {
        /* A link going down reports an error once (ENETDOWN); an interface gone is the end. */
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(fd[from], SOL_SOCKET, SO_ERROR, &e, &el);
        char name[IF_NAMESIZE];
        if ((pfd[from].revents & POLLNVAL) || if_indextoname(ifindex[from], name) == NULL) {
          fprintf(stderr, "ecn-switch: interface %s is gone (%s)\n", argv[1 + from], strerror(e));
          print_counters();
          return 1;
        }
      }
      if (!(pfd[from].revents & POLLIN)) continue;
      /* At most 64 frames from one side before looking at the other. */
      for (int n = 0; n < 64; n++) {
        ssize_t got = recv(fd[from], buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
        if (got < 0) break;
        if ((size_t)got > sizeof buf || (size_t)got < VNET_HDR + ETH_HLEN) continue; /* truncated or runt */
        size_t len = (size_t)got - VNET_HDR;
        struct counters* c = from == 0 ? &ab : &ba;
        if (from == 0) mark(buf + VNET_HDR, len, drain, k, &last);
        c->frames++;
        c->bytes += len;
        if (send(fd[1 - from], buf, (size_t)got, MSG_DONTWAIT) < 0)
          c->dropped++;
        else if (from == 0)
          admit(len);
      }
    }
  }
  print_counters();
  return 0;
}
