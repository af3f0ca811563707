/*
 * A small libibverbs program for test/verbs-mr-overlap.test.ts: registers memory as a program
 * with a registration cache does (the same pages in several MRs, overlapping, sub-page, pages
 * freed and mapped again under a live MR) and answers commands on stdin, so the test can write
 * and read through every rkey from a peer and compare with what the program sees. Linked
 * against libibverbs like any verbs program; run with librdmagraph-verbs.so preloaded.
 * Addresses and lengths are decimal; every answer is one line.
 *
 *   "map N"                  -> "map ADDR": N bytes of fresh anonymous pages (mmap)
 *   "malloc N"               -> "malloc ADDR": N bytes from malloc
 *   "remap ADDR N BYTE"      -> "remap 0": the pages munmapped and new anonymous ones mapped at the
 *                               same address (MAP_FIXED), filled with BYTE (a cache's lazy dereg)
 *   "unmap ADDR N"           -> "unmap RC": munmap
 *   "reg ADDR LEN"           -> "reg K lkey L rkey R" or "reg K errno E": MR number K, all access
 *   "dereg K"                -> "dereg K RC"
 *   "fill ADDR LEN BYTE"     -> "fill 0": the program writes its memory
 *   "show ADDR LEN"          -> the bytes as hex (at most 4096)
 *   "shm N"                  -> "shm ADDR ID": a new System V segment of N bytes (IPC_PRIVATE, 0600),
 *                               attached and marked for removal (as UCX makes its own)
 *   "shmat ADDR ID"          -> "shmat 0": segment ID attached again at ADDR over what is there
 *                               (SHM_REMAP), or "shmat ERRNO"
 *   "peek ID OFF LEN"        -> segment ID's bytes [OFF, OFF + LEN) as hex, through an attachment
 *                               of its own made for it (what another process sharing it sees)
 *   "nattch ID"              -> "nattch N", or "nattch -ERRNO" when the segment is gone
 *   "race ROUNDS"            -> "race LOST WRITES": a thread writes fresh 64 KiB pages without pause
 *                               (a counter into each 8-byte word in turn, what it wrote kept apart)
 *                               while this one registers and deregisters them ROUNDS times (and
 *                               makes them private pages again after each, the writer held, so
 *                               that each registration moves them onto a new memfd); LOST is
 *                               the writes found gone when the word came round again, or at the
 *                               end (0 expected), WRITES how many it made
 *   "share KIND N"           -> "share ADDR": N bytes of shared memory, mapped MAP_SHARED: KIND
 *                               posix (shm_open, its name unlinked, the descriptor kept open, as UCX
 *                               keeps its own), file (a file in /dev/shm, its descriptor closed:
 *                               reachable by its path), disk (the same in $TMPDIR, which may be on
 *                               a disk filesystem), memfd (not sealed, descriptor kept),
 *                               anon (MAP_SHARED | MAP_ANONYMOUS: what a forked child would share)
 *   "other ADDR OFF LEN"     -> the shared memory at ADDR's bytes [OFF, OFF + LEN) as hex, through a
 *                               second mapping of its own (what another process sharing it sees)
 *   "otherfill ADDR OFF LEN BYTE" -> "otherfill 0": written through that second mapping
 *   "shrink ADDR"            -> "shrink RC": the file under the shared memory at ADDR truncated to 0
 *   "qp A.B.C.D QPN PSN"     -> "qp QPN rts rc 0": an RC QP in RTS towards that peer, remote
 *                               read and write allowed (rq_psn PSN, sq_psn PSN + 1)
 *   "backing ADDR"           -> "backing INODE MEMFDS": the inode of the mapping at ADDR (0 when
 *                               none), and how many descriptors this process holds on the library's
 *                               memfds (the ones registered pages are moved onto)
 *   "exit"
 * An answer with "errno E" reports a failed system call.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#define MAX_MRS 256

static struct ibv_mr* mrs[MAX_MRS];
static int nmrs;

/* "share": the shared mappings made, each with its descriptor (or path) and its size. */
#define MAX_SHARED 16
static struct shared {
  uintptr_t addr;
  size_t len;
  int fd; /* -1: reopened by path (file) or through /proc/self/map_files (anon) */
  char path[256];
} shared[MAX_SHARED];
static int nshared;

/* The files made, removed at exit. */
static char made[MAX_SHARED][256];
static int nmade;
static void unlink_made(void) {
  for (int i = 0; i < nmade; i++) unlink(made[i]);
}
static void unlink_at_exit(const char* path) {
  if (nmade == 0) atexit(unlink_made);
  snprintf(made[nmade++], sizeof made[0], "%s", path);
}

static uintptr_t share(const char* kind, size_t len) {
  if (nshared == MAX_SHARED) return 0;
  struct shared* m = &shared[nshared];
  m->fd = -1;
  m->path[0] = '\0';
  void* p = MAP_FAILED;
  if (strcmp(kind, "anon") == 0) {
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  } else {
    int fd = -1;
    if (strcmp(kind, "posix") == 0) {
      char name[64];
      snprintf(name, sizeof name, "/verbs-mem-%d-%d", (int)getpid(), nshared);
      fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
      shm_unlink(name);
    } else if (strcmp(kind, "memfd") == 0) {
      fd = memfd_create("verbs-mem", MFD_CLOEXEC);
    } else if (strcmp(kind, "file") == 0 || strcmp(kind, "disk") == 0) {
      const char* dir = kind[0] == 'f' ? "/dev/shm" : getenv("TMPDIR");
      snprintf(m->path, sizeof m->path, "%s/verbs-mem-XXXXXX", dir != NULL ? dir : "/tmp");
      fd = mkstemp(m->path);
      if (fd >= 0) unlink_at_exit(m->path);
    }
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) return 0;
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m->path[0] != '\0')
      close(fd);
    else
      m->fd = fd;
  }
  if (p == MAP_FAILED) return 0;
  m->addr = (uintptr_t)p;
  m->len = len;
  nshared++;
  return m->addr;
}

/* A descriptor on the file under shared mapping `m` (closed by the caller), or -1. */
static int reopen(const struct shared* m) {
  if (m->fd >= 0) return dup(m->fd);
  if (m->path[0] != '\0') return open(m->path, O_RDWR);
  char mf[64];
  snprintf(mf, sizeof mf, "/proc/self/map_files/%lx-%lx", (unsigned long)m->addr, (unsigned long)(m->addr + m->len));
  return open(mf, O_RDWR);
}

static const struct shared* shared_at(uintptr_t addr) {
  for (int i = 0; i < nshared; i++)
    if (shared[i].addr == addr) return &shared[i];
  return NULL;
}

/* The bytes [off, off + len) of `m` through a second mapping of its file: read (byte < 0) or filled. */
static int other(const struct shared* m, size_t off, size_t len, int byte) {
  int fd = reopen(m);
  if (fd < 0) return -1;
  uint8_t* q = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (q == MAP_FAILED) return -1;
  if (byte >= 0) {
    memset(q + off, byte, len);
    printf("otherfill 0\n");
  } else {
    for (size_t i = 0; i < len; i++) printf("%02x", q[off + i]);
    printf("\n");
  }
  munmap(q, m->len);
  return 0;
}

/* "race": the buffer a thread writes while it is registered, and what it wrote (not registered). */
#define RACE_WORDS (65536 / 8)
static volatile uint64_t* race_buf;
static uint64_t race_last[RACE_WORDS];
static volatile int race_stop, race_pause, race_paused;
static uint64_t race_writes, race_lost;

/* Before each word is written again, it must still hold what was written there last time. */
static void* race_writer(void* arg) {
  (void)arg;
  uint64_t v = 0, lost = 0;
  while (!race_stop) {
    if (race_pause) { /* the main thread makes the pages private again */
      __atomic_store_n(&race_paused, 1, __ATOMIC_SEQ_CST);
      while (race_pause) sched_yield();
      __atomic_store_n(&race_paused, 0, __ATOMIC_SEQ_CST);
    }
    const size_t k = (size_t)(v % RACE_WORDS);
    if (race_buf[k] != race_last[k]) lost++;
    race_buf[k] = ++v;
    race_last[k] = v;
  }
  race_writes = v;
  race_lost = lost;
  return NULL;
}

/* ROUNDS registrations of the pages a thread is writing; the words that lost their last write. */
static int race(struct ibv_pd* pd, unsigned rounds) {
  void* p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  race_buf = p;
  race_stop = 0;
  memset(race_last, 0, sizeof race_last);
  pthread_t t;
  if (pthread_create(&t, NULL, race_writer, NULL) != 0) return -1;
  for (unsigned r = 0; r < rounds; r++) {
    struct ibv_mr* mr = ibv_reg_mr(pd, p, 65536, IBV_ACCESS_LOCAL_WRITE);
    if (mr != NULL) ibv_dereg_mr(mr);
    /* The pages private again (the writer held meanwhile), so the next registration moves them
       again under the writer: the library keeps pages it moved where they are otherwise. */
    __atomic_store_n(&race_pause, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&race_paused, __ATOMIC_SEQ_CST)) sched_yield();
    void* q = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q != MAP_FAILED) {
      memcpy(q, p, 65536);
      if (mremap(q, 65536, 65536, MREMAP_MAYMOVE | MREMAP_FIXED, p) == MAP_FAILED) munmap(q, 65536);
    }
    __atomic_store_n(&race_pause, 0, __ATOMIC_SEQ_CST);
  }
  race_stop = 1;
  pthread_join(t, NULL);
  uint64_t lost = race_lost;
  for (size_t k = 0; k < RACE_WORDS; k++) lost += race_buf[k] != race_last[k];
  munmap(p, 65536);
  return (int)(lost > 1000000 ? 1000000 : lost);
}

static int to_rts(struct ibv_qp* qp, unsigned a, unsigned b, unsigned c, unsigned d, unsigned peer, unsigned psn) {
  struct ibv_qp_attr at = {
      .qp_state = IBV_QPS_INIT,
      .port_num = 1,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
  int rc = ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) return rc;
  memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = IBV_MTU_1024;
  at.dest_qp_num = peer;
  at.rq_psn = psn;
  at.max_dest_rd_atomic = 4;
  at.ah_attr.is_global = 1;
  at.ah_attr.port_num = 1;
  at.ah_attr.grh.dgid.raw[10] = 0xff;
  at.ah_attr.grh.dgid.raw[11] = 0xff;
  at.ah_attr.grh.dgid.raw[12] = (uint8_t)a;
  at.ah_attr.grh.dgid.raw[13] = (uint8_t)b;
  at.ah_attr.grh.dgid.raw[14] = (uint8_t)c;
  at.ah_attr.grh.dgid.raw[15] = (uint8_t)d;
  rc = ibv_modify_qp(qp, &at,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) return rc;
  memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_RTS;
  at.timeout = 14;
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  at.sq_psn = psn + 1;
  at.max_rd_atomic = 4;
  return ibv_modify_qp(
      qp, &at,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* The inode of the mapping at `a` in /proc/self/maps, or 0. */
static unsigned long backing_inode(uintptr_t a) {
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == NULL) return 0;
  char line[4096 + 512];
  unsigned long ino = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long s, e, off, i;
    unsigned maj, min;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &s, &e, perms, &off, &maj, &min, &i) == 7 && s <= a && a < e) {
      ino = i;
      break;
    }
  }
  fclose(f);
  return ino;
}

/* Descriptors of this process on memfds named as the library names its own. */
static int library_memfds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  struct dirent* de;
  while ((de = readdir(d)) != NULL) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
    const ssize_t k = readlink(path, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = '\0';
    n += strncmp(target, "/memfd:rdma-graph-mr", 20) == 0;
  }
  closedir(d);
  return n;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) return fprintf(stderr, "no device\n"), 2;
  struct ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == NULL) return perror("ibv_open_device"), 3;
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == NULL) return perror("ibv_alloc_pd"), 4;
  struct ibv_cq* cq = NULL;
  struct ibv_qp* qp = NULL;
  printf("ready\n");
  char line[256];
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long long addr, len, byte, off;
    char kind[16];
    const struct shared* m;
    unsigned a, b, c, d, peer, psn;
    int k;
    if (strncmp(line, "exit", 4) == 0) {
      break;
    } else if (sscanf(line, "race %d", &k) == 1 && k > 0 && k <= 100000) {
      const int lost = race(pd, (unsigned)k);
      printf("race %d %llu\n", lost, (unsigned long long)race_writes);
    } else if (sscanf(line, "map %llu", &len) == 1) {
      void* p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      printf("map %llu\n", p == MAP_FAILED ? 0ull : (unsigned long long)(uintptr_t)p);
    } else if (sscanf(line, "malloc %llu", &len) == 1) {
      printf("malloc %llu\n", (unsigned long long)(uintptr_t)malloc(len));
    } else if (sscanf(line, "remap %llu %llu %llu", &addr, &len, &byte) == 3) {
      munmap((void*)(uintptr_t)addr, len);
      void* p =
          mmap((void*)(uintptr_t)addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p != MAP_FAILED) memset(p, (int)byte, len);
      printf("remap %d\n", p == MAP_FAILED ? errno : 0);
    } else if (sscanf(line, "backing %llu", &addr) == 1) {
      printf("backing %lu %d\n", backing_inode((uintptr_t)addr), library_memfds());
    } else if (sscanf(line, "unmap %llu %llu", &addr, &len) == 2) {
      printf("unmap %d\n", munmap((void*)(uintptr_t)addr, len));
    } else if (sscanf(line, "reg %llu %llu", &addr, &len) == 2 && nmrs < MAX_MRS) {
      struct ibv_mr* mr = ibv_reg_mr(
          pd, (void*)(uintptr_t)addr, len,
          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
      if (mr == NULL) {
        printf("reg %d errno %d\n", nmrs, errno);
        continue;
      }
      mrs[nmrs] = mr;
      printf("reg %d lkey %u rkey %u\n", nmrs++, mr->lkey, mr->rkey);
    } else if (sscanf(line, "dereg %d", &k) == 1 && k >= 0 && k < nmrs && mrs[k] != NULL) {
      int rc = ibv_dereg_mr(mrs[k]);
      mrs[k] = NULL;
      printf("dereg %d %d\n", k, rc);
    } else if (sscanf(line, "fill %llu %llu %llu", &addr, &len, &byte) == 3) {
      memset((void*)(uintptr_t)addr, (int)byte, len);
      printf("fill 0\n");
    } else if (sscanf(line, "show %llu %llu", &addr, &len) == 2 && len <= 4096) {
      const uint8_t* p = (const uint8_t*)(uintptr_t)addr;
      for (unsigned long long i = 0; i < len; i++) printf("%02x", p[i]);
      printf("\n");
    } else if (sscanf(line, "shm %llu", &len) == 1) {
      int id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
      void* p = id < 0 ? (void*)-1 : shmat(id, NULL, 0);
      if (id >= 0) shmctl(id, IPC_RMID, NULL);
      printf("shm %llu %d\n", p == (void*)-1 ? 0ull : (unsigned long long)(uintptr_t)p, id);
    } else if (sscanf(line, "shmat %llu %d", &addr, &k) == 2) {
      void* p = shmat(k, (void*)(uintptr_t)addr, SHM_REMAP);
      printf("shmat %d\n", p == (void*)-1 ? errno : 0);
    } else if (sscanf(line, "peek %d %llu %llu", &k, &addr, &len) == 3 && len <= 4096) {
      const uint8_t* p = shmat(k, NULL, SHM_RDONLY);
      if (p == (void*)-1) {
        printf("peek errno %d\n", errno);
        continue;
      }
      for (unsigned long long i = 0; i < len; i++) printf("%02x", p[addr + i]);
      printf("\n");
      shmdt(p);
    } else if (sscanf(line, "nattch %d", &k) == 1) {
      struct shmid_ds ds;
      printf("nattch %ld\n", shmctl(k, IPC_STAT, &ds) == 0 ? (long)ds.shm_nattch : -(long)errno);
    } else if (sscanf(line, "share %15s %llu", kind, &len) == 2) {
      const uintptr_t p = share(kind, len);
      if (p == 0)
        printf("share errno %d\n", errno);
      else
        printf("share %llu\n", (unsigned long long)p);
    } else if (sscanf(line, "otherfill %llu %llu %llu %llu", &addr, &off, &len, &byte) == 4 &&
               (m = shared_at(addr)) != NULL && off + len <= m->len) {
      if (other(m, off, len, (int)(byte & 0xff)) != 0) printf("otherfill errno %d\n", errno);
    } else if (sscanf(line, "other %llu %llu %llu", &addr, &off, &len) == 3 && (m = shared_at(addr)) != NULL &&
               off + len <= m->len && len <= 4096) {
      if (other(m, off, len, -1) != 0) printf("other errno %d\n", errno);
    } else if (sscanf(line, "shrink %llu", &addr) == 1 && (m = shared_at(addr)) != NULL) {
      int fd = reopen(m);
      const int rc = fd < 0 || ftruncate(fd, 0) != 0 ? errno : 0;
      if (fd >= 0) close(fd);
      printf("shrink %d\n", rc);
    } else if (sscanf(line, "qp %u.%u.%u.%u %u %u", &a, &b, &c, &d, &peer, &psn) == 6 && qp == NULL) {
      cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
      struct ibv_qp_init_attr ia = {.send_cq = cq,
                                    .recv_cq = cq,
                                    .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
      qp = cq == NULL ? NULL : ibv_create_qp(pd, &ia);
      if (qp == NULL) {
        printf("qp failed %d\n", errno);
        continue;
      }
      printf("qp %u rts rc %d\n", qp->qp_num, to_rts(qp, a, b, c, d, peer, psn));
    } else {
      printf("what? %s", line);
    }
  }
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
