/*
 * The program's registered pages and the memfds they are on (docs/VERBS-PROTOCOL.md, REG_MR).
 *
 * A registration shares its pages with the daemon by putting them on a memfd (their contents
 * copied once, the memfd mapped over them at the same address). Pages registered again, by any
 * MR over any overlapping range, must stay one memory: so the library remembers which pages are
 * on which memfd (a region: [start, end) at `off` in a memfd) while a live MR covers them, and a
 * new registration is made of pieces: the parts of earlier regions it overlaps, passed as the
 * same memfds at the same offsets, and the pages between them (gaps), moved onto one new memfd.
 * The daemon maps the pieces one after another into one view. Nothing registered before is ever
 * moved again, so an earlier MR keeps seeing what the program sees.
 *
 * A region is checked against /proc/self/maps before it is reused: a program that unmapped
 * pages under a live MR and mapped new ones at the same address (a registration cache's lazy
 * deregistration does) gets the new pages shared, not the old memfd; the old MR keeps the old
 * pages, as on a NIC, which pins them.
 *
 * A region no live MR overlaps any more stays, idle, while its pages are still the memfd's
 * (checked at every registration and deregistration): a registration cache deregisters and
 * registers the same buffer again and again (UCX's, whenever its memory hooks saw the pages move:
 * our own remap is such a move), and each new registration must find the pages where the last
 * one put them, not copy and remap them again (which the hooks would see again).
 *
 * Bounds: regions overlapping a live MR (at most a few per MR, and their fds with them), and at
 * most RG_IDLE_REGIONS idle ones of RG_IDLE_BYTES in all (the oldest go first); idle regions whose pages the program
 * unmapped or replaced are dropped at the next registration or deregistration, so the memfd
 * does not keep memory the program gave back. One registration is at most RGV_MAX_MR_PIECES
 * pieces. Everything here runs under one mutex, held across the REG_MR call, so two threads
 * never share the same pages twice.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lib.h"

struct memfd {
  int fd;
  dev_t dev;
  ino_t ino;
  uint32_t refs; /* regions on it */
};

struct region {
  uintptr_t start, end;
  struct memfd* mem;
  uint64_t off;  /* of start in the memfd */
  uint64_t idle; /* 0 while a live MR overlaps it; else when it stopped (idle_clock's tick) */
  uint64_t seen; /* prune_idle's: bytes found still mapped from the memfd */
};

/*
 * Idle regions kept at most (each may hold a memfd's descriptor), and their bytes at most: pages
 * the program unmapped after the deregistration stay on the memfd until the next registration
 * or deregistration notices, so this much memory at most outlives the program's own free.
 */
#define RG_IDLE_REGIONS 64u
#define RG_IDLE_BYTES (256ull << 20)

struct span {
  uintptr_t start, end;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct region* regions; /* sorted by start, disjoint */
static size_t nregions, capregions;
static struct span* live; /* the page spans of the live MRs (a multiset) */
static size_t nlive, caplive;
static uint64_t idle_clock;

static int grow(void** a, size_t* cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t n = *cap < 16 ? 16 : *cap * 2;
  while (n < need) n *= 2;
  void* p = realloc(*a, n * size);
  if (p == NULL) return -1;
  *a = p;
  *cap = n;
  return 0;
}

static void unref(struct memfd* m) {
  if (--m->refs == 0) {
    close(m->fd);
    free(m);
  }
}

static int insert_region(size_t at, struct region r) {
  if (grow((void**)&regions, &capregions, nregions + 1, sizeof *regions) != 0) return -1;
  memmove(&regions[at + 1], &regions[at], (nregions - at) * sizeof *regions);
  regions[at] = r;
  nregions++;
  r.mem->refs++;
  return 0;
}

static void remove_region(size_t at) {
  struct memfd* m = regions[at].mem;
  memmove(&regions[at], &regions[at + 1], (nregions - at - 1) * sizeof *regions);
  nregions--;
  unref(m);
}

/* The first region ending after `a`. */
static size_t first_after(uintptr_t a) {
  size_t lo = 0, hi = nregions;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (regions[mid].end <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* One line of /proc/self/maps: [start, end), permissions, file offset, device, inode, path. */
struct map_line {
  unsigned long start, end, off, ino;
  unsigned maj, min;
  char perms[8];
  char* path; /* inside the line read, "" for anonymous memory */
};

/* A line as long as /proc/self/maps writes one (a path of up to PATH_MAX). */
#define MAP_LINE_MAX (512 + PATH_MAX)

/* Parses one line read from /proc/self/maps (its path's newline cut off); 0 when it is not one. */
static int parse_map_line(char* line, struct map_line* m) {
  int at = 0;
  if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %n", &m->start, &m->end, m->perms, &m->off, &m->maj, &m->min, &m->ino,
             &at) != 7)
    return 0;
  m->path = line + at;
  m->path[strcspn(m->path, "\n")] = '\0';
  return 1;
}

/* Whether the program's pages [a, b) (inside region r) are still r's memfd at r's offsets. */
static int still_mapped(const struct region* r, uintptr_t a, uintptr_t b) {
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == NULL) return 0; /* cannot tell: share them anew (the old MR keeps the old pages) */
  char line[MAP_LINE_MAX];
  uintptr_t at = a;
  struct map_line m;
  while (at < b && fgets(line, sizeof line, f) != NULL) {
    if (!parse_map_line(line, &m)) continue;
    if (m.end <= at) continue;
    if (m.start > at) break; /* a hole */
    if (m.ino != r->mem->ino || m.maj != major(r->mem->dev) || m.min != minor(r->mem->dev) ||
        m.off + (at - m.start) != r->off + (at - r->start))
      break;
    at = m.end;
  }
  fclose(f);
  return at >= b;
}

/* Takes [a, b) out of region k (it no longer holds the program's pages there). */
static int cut(size_t k, uintptr_t a, uintptr_t b) {
  struct region r = regions[k];
  if (b < r.end) {
    struct region right = {b, r.end, r.mem, r.off + (b - r.start), r.idle, 0};
    if (insert_region(k + 1, right) != 0) return -1;
  }
  if (a > r.start)
    regions[k].end = a;
  else
    remove_region(k);
  return 0;
}

/*
 * Regions overlapping [a, b): live again when a live MR overlaps them, else idle from now on;
 * then the oldest idle regions beyond RG_IDLE_REGIONS or RG_IDLE_BYTES dropped (their fds closed
 * with the last).
 */
static void collect(uintptr_t a, uintptr_t b) {
  for (size_t k = first_after(a); k < nregions && regions[k].start < b; k++) {
    int used = 0;
    for (size_t i = 0; i < nlive && !used; i++) used = live[i].start < regions[k].end && regions[k].start < live[i].end;
    if (used)
      regions[k].idle = 0;
    else if (regions[k].idle == 0)
      regions[k].idle = ++idle_clock;
  }
  for (;;) {
    size_t n = 0, oldest = 0;
    uint64_t bytes = 0;
    for (size_t k = 0; k < nregions; k++) {
      if (regions[k].idle == 0) continue;
      bytes += regions[k].end - regions[k].start;
      if (n++ == 0 || regions[k].idle < regions[oldest].idle) oldest = k;
    }
    if (n <= RG_IDLE_REGIONS && bytes <= RG_IDLE_BYTES) break;
    remove_region(oldest);
  }
}

/*
 * Idle regions whose pages are not all the memfd's at their offsets any more (the program
 * unmapped them, or mapped something else there): dropped, so their memfds let the memory go.
 * One read of /proc/self/maps; a region is kept only if every byte of it was seen.
 */
static void prune_idle(void) {
  size_t nidle = 0;
  for (size_t k = 0; k < nregions; k++) {
    regions[k].seen = 0;
    nidle += regions[k].idle != 0;
  }
  if (nidle == 0) return;
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == NULL) return;          /* cannot tell: kept (a registration checks its own pages again) */
  static char line[MAP_LINE_MAX]; /* under mu */
  struct map_line m;
  while (fgets(line, sizeof line, f) != NULL) {
    if (!parse_map_line(line, &m)) continue;
    for (size_t k = first_after(m.start); k < nregions && regions[k].start < m.end; k++) {
      struct region* r = &regions[k];
      if (r->idle == 0 || m.ino != r->mem->ino || m.maj != major(r->mem->dev) || m.min != minor(r->mem->dev)) continue;
      const uintptr_t lo = r->start > m.start ? r->start : m.start, hi = r->end < m.end ? r->end : m.end;
      if (m.off + (lo - m.start) == r->off + (lo - r->start)) r->seen += hi - lo;
    }
  }
  fclose(f);
  for (size_t k = 0; k < nregions;)
    if (regions[k].idle != 0 && regions[k].seen != regions[k].end - regions[k].start)
      remove_region(k);
    else
      k++;
}

/*
 * Other threads' writes while pages move. Between the copy and the remap a write by another
 * thread of the program to those pages would be lost with the private page (UCX's async thread
 * writes its endpoints' pages while the main thread registers them). So the pages are made
 * read-only first: such a write faults, and this handler holds the writer until the memfd is
 * mapped there, then lets it write again (the instruction runs again, on the new page). Faults
 * elsewhere, or by the moving thread itself, go to the handler that was there before. The
 * handler stays once set (a thread may be on its way into it): it is set again, chaining to
 * the program's, when the program replaced it between two moves. A system call writing there
 * meanwhile gets EFAULT, as on memory a NIC driver is pinning at that moment would not; rare.
 */
static const struct span* moving;
static size_t nmoving;
static volatile int move_on; /* 1 while pages are read-only for a move */
static pid_t mover;
static struct sigaction prev_segv;

static void on_segv(int sig, siginfo_t* si, void* uc) {
  if (__atomic_load_n(&move_on, __ATOMIC_ACQUIRE) && gettid() != mover) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    int ours = 0;
    for (size_t k = 0; k < nmoving && !ours; k++) ours = a >= moving[k].start && a < moving[k].end;
    if (ours) {
      while (__atomic_load_n(&move_on, __ATOMIC_ACQUIRE)) sched_yield();
      return; /* the write again, on the memfd's page */
    }
  }
  if (prev_segv.sa_flags & SA_SIGINFO) {
    if (prev_segv.sa_sigaction != NULL) prev_segv.sa_sigaction(sig, si, uc);
  } else if (prev_segv.sa_handler != SIG_DFL && prev_segv.sa_handler != SIG_IGN) {
    prev_segv.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL); /* the fault again, now with the default action */
  }
}

/* Our handler in place (the program's kept to chain to); 0, or -1 when it cannot be set. */
static int hold_writers(void) {
  struct sigaction cur;
  if (sigaction(SIGSEGV, NULL, &cur) != 0) return -1;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv) return 0;
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_sigaction = on_segv;
  a.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&a.sa_mask);
  prev_segv = cur;
  return sigaction(SIGSEGV, &a, NULL);
}

/* Copies the program's bytes at `src` into `dst` without faulting on unmapped pages: EFAULT. */
static int copy_in(void* dst, uintptr_t src, size_t n) {
  struct iovec l = {dst, n}, r = {(void*)src, n};
  ssize_t got = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
  if (got == (ssize_t)n) return 0;
  if (got < 0 && (errno == ENOSYS || errno == EPERM)) {
    memcpy(dst, (void*)src, n);
    return 0;
  }
  errno = EFAULT; /* memory the program does not have: as a NIC's registration says */
  return -1;
}

/* Gaps [from, ro) writable again (they were made read-only), and writers let go. */
static void release_writers(const struct span* gaps, size_t from, size_t ro) {
  int e = errno;
  for (size_t g = from; g < ro; g++)
    mprotect((void*)gaps[g].start, gaps[g].end - gaps[g].start, PROT_READ | PROT_WRITE);
  __atomic_store_n(&move_on, 0, __ATOMIC_RELEASE);
  errno = e;
}

/*
 * The gaps (pages on no region) onto one new memfd: contents copied, the memfd mapped over them,
 * each a new region. Returns the memfd (its refs held by the regions), or NULL.
 *
 * Between the copy and the remap nothing of ours is written: the gaps may hold this library's
 * own heap (the bookkeeping here is malloc'ed, and a program's malloc'ed buffer shares pages with
 * it), and a write there in that window would be lost with the private page.
 */
static struct memfd* share_gaps(const struct span* gaps, size_t ngaps) {
  size_t total = 0;
  for (size_t g = 0; g < ngaps; g++) total += gaps[g].end - gaps[g].start;
  /* Everything we will write, made first: the memfd record and room for the regions. */
  struct memfd* m = calloc(1, sizeof *m);
  if (m == NULL) return NULL;
  if (grow((void**)&regions, &capregions, nregions + ngaps, sizeof *regions) != 0) {
    free(m);
    return NULL;
  }
  m->fd = memfd_create("rdma-graph-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* tmp = MAP_FAILED;
  struct stat st;
  if (m->fd < 0) goto fail;
  if (ftruncate(m->fd, (off_t)total) != 0 ||
      fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 || fstat(m->fd, &st) != 0 ||
      (tmp = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0)) == MAP_FAILED)
    goto fail;
  m->dev = st.st_dev;
  m->ino = st.st_ino;
  /* Other threads' writes wait from here until the memfd is mapped (above). */
  size_t ro = 0;
  if (hold_writers() == 0) {
    moving = gaps;
    nmoving = ngaps;
    mover = gettid();
    __atomic_store_n(&move_on, 1, __ATOMIC_RELEASE);
    for (; ro < ngaps; ro++)
      if (mprotect((void*)gaps[ro].start, gaps[ro].end - gaps[ro].start, PROT_READ) != 0) break;
  }
  size_t off = 0;
  for (size_t g = 0; g < ngaps; g++) {
    size_t n = gaps[g].end - gaps[g].start;
    if (copy_in((uint8_t*)tmp + off, gaps[g].start, n) != 0) {
      release_writers(gaps, 0, ro);
      goto fail;
    }
    off += n;
  }
  /* The same bytes, now on the memfd: the program reads what it had. */
  off = 0;
  size_t mapped = 0;
  for (; mapped < ngaps; mapped++) {
    size_t n = gaps[mapped].end - gaps[mapped].start;
    if (mmap((void*)gaps[mapped].start, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m->fd, (off_t)off) ==
        MAP_FAILED)
      break;
    off += n;
  }
  int err = errno;
  /* The gaps not remapped (a failure) are writable again; the remapped ones are already. */
  release_writers(gaps, mapped, ro);
  munmap(tmp, total);
  tmp = MAP_FAILED;
  /* The remapped ones are regions (room made above: no allocation); a failure leaves the rest private. */
  off = 0;
  for (size_t g = 0; g < mapped; g++) {
    struct region r = {gaps[g].start, gaps[g].end, m, off, 0, 0};
    insert_region(first_after(gaps[g].start), r);
    off += gaps[g].end - gaps[g].start;
  }
  if (mapped == ngaps) return m;
  errno = err;
fail:
  err = errno;
  if (tmp != MAP_FAILED) munmap(tmp, total);
  if (m->refs == 0) {
    if (m->fd >= 0) close(m->fd);
    free(m);
  }
  errno = err;
  return NULL;
}

/*
 * Shared mappings. A POSIX shared memory object, a file mapped MAP_SHARED, a memfd of the
 * program's own, anonymous MAP_SHARED memory a forked child shares: moving such pages onto a
 * memfd would end their sharing (other processes would no longer see the program's writes, nor it
 * theirs). So they stay where they are and the file under them is passed as it is, a region on
 * it at the file's offsets. The file is a read-write descriptor the program has open on it, else
 * its path opened anew, else /proc/self/map_files (which needs CAP_SYS_ADMIN or
 * CAP_CHECKPOINT_RESTORE); with none of them the registration is refused (EINVAL, a line), never
 * moved off the file. Only shared memory (tmpfs: memfds, /dev/shm, anonymous shared memory) is
 * taken: a page fault on a disk file's page can wait on the disk (or on a FUSE server: a program
 * could stall the daemon at will), so a disk file is refused too. The daemon maps such a file guarded: a file shrunk
 * under it gives it zero pages where the bytes were, not SIGBUS (docs/VERBS-PROTOCOL.md, REG_MR). Our own memfds (pages
 * moved before whose regions were dropped) and System V segments (REG_SHM) are not such.
 */
static int same_file(int fd, unsigned maj, unsigned min, unsigned long ino) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && major(st.st_dev) == maj && minor(st.st_dev) == min &&
         st.st_ino == ino && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR;
}

/* A new read-write descriptor on the file mapped at [a, b) (device maj:min, inode ino), or -1. */
static int open_shared(const char* path, uintptr_t a, uintptr_t b, unsigned maj, unsigned min, unsigned long ino) {
  DIR* d = opendir("/proc/self/fd");
  if (d != NULL) {
    struct dirent* de;
    int found = -1;
    while (found < 0 && (de = readdir(d)) != NULL) {
      char* end;
      const long fd = strtol(de->d_name, &end, 10);
      if (*end == '\0' && end != de->d_name && fd != dirfd(d) && fd >= 0 && fd <= INT32_MAX &&
          same_file((int)fd, maj, min, ino))
        found = fcntl((int)fd, F_DUPFD_CLOEXEC, 0);
    }
    closedir(d);
    if (found >= 0) return found;
  }
  const size_t n = strlen(path);
  if (path[0] == '/' && !(n >= 10 && strcmp(path + n - 10, " (deleted)") == 0)) {
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0 && same_file(fd, maj, min, ino)) return fd;
    if (fd >= 0) close(fd);
  }
  char mf[64];
  snprintf(mf, sizeof mf, "/proc/self/map_files/%lx-%lx", (unsigned long)a, (unsigned long)b);
  int fd = open(mf, O_RDWR | O_CLOEXEC);
  if (fd >= 0 && same_file(fd, maj, min, ino)) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

/* The pages [x, y) of a shared mapping as a region on its file (at offset off): 0, or -1. */
static int adopt(uintptr_t x, uintptr_t y, uint64_t off, const char* path, uintptr_t ms, uintptr_t me, unsigned maj,
                 unsigned min, unsigned long ino) {
  struct memfd* m = NULL;
  for (size_t k = 0; k < nregions && m == NULL; k++)
    if (regions[k].mem->ino == ino && regions[k].mem->dev == makedev(maj, min)) m = regions[k].mem;
  int fresh = m == NULL;
  if (fresh) {
    m = calloc(1, sizeof *m);
    if (m == NULL) return -1;
    m->fd = open_shared(path, ms, me, maj, min, ino);
    if (m->fd < 0) {
      free(m);
      rg_say(
          "ibv_reg_mr: [%p, %p) is a shared mapping of %s, and this process has no read-write descriptor on "
          "it (keep one open, or map a file it can open): refused (EINVAL); moving it would end its sharing",
          (void*)x, (void*)y, path[0] ? path : "anonymous memory");
      errno = EINVAL;
      return -1;
    }
    m->dev = makedev(maj, min);
    m->ino = ino;
  }
  struct statfs sf;
  if (fresh && (fstatfs(m->fd, &sf) != 0 || sf.f_type != TMPFS_MAGIC)) {
    rg_say(
        "ibv_reg_mr: [%p, %p) is a shared mapping of %s, a file on a disk filesystem: refused (EINVAL); the "
        "daemon's data path would wait on its page faults. Register memory of /dev/shm, a memfd or private memory",
        (void*)x, (void*)y, path);
    close(m->fd);
    free(m);
    errno = EINVAL;
    return -1;
  }
  struct region r = {x, y, m, off, 0, 0};
  if (insert_region(first_after(x), r) != 0) {
    if (fresh) {
      close(m->fd);
      free(m);
    }
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

/* Every shared mapping's pages in [s, e) that no region holds made regions on their files. */
static int adopt_shared(uintptr_t s, uintptr_t e) {
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == NULL) return 0;        /* cannot tell: shared as private memory */
  static char line[MAP_LINE_MAX]; /* under mu */
  int rc = 0;
  struct map_line m;
  while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
    if (!parse_map_line(line, &m)) continue;
    const unsigned long ms = m.start, me = m.end, off = m.off;
    if (me <= s) continue;
    if (ms >= e) break;
    const char* path = m.path;
    if (m.perms[3] != 's' || strncmp(path, "/SYSV", 5) == 0 || strncmp(path, "/memfd:rdma-graph-mr", 20) == 0) continue;
    /* The parts of [lo, hi) between the regions already there. */
    const uintptr_t lo = ms > s ? ms : s, hi = me < e ? me : e;
    for (uintptr_t x = lo; rc == 0 && x < hi;) {
      const size_t k = first_after(x);
      const uintptr_t next = k < nregions && regions[k].start < hi ? regions[k].start : hi;
      if (next > x) {
        rc = adopt(x, next, off + (x - ms), path, ms, me, m.maj, m.min, m.ino);
        x = next;
      } else {
        x = regions[k].end;
      }
    }
  }
  fclose(f);
  return rc;
}

int rg_pages_share(uintptr_t s, uintptr_t e, struct rg_pieces* out) {
  pthread_mutex_lock(&mu);
  out->n = out->nfds = 0;
  prune_idle();
  /* Earlier regions over these pages that do not hold them any more: cut away. */
  for (size_t k = first_after(s); k < nregions && regions[k].start < e;) {
    uintptr_t a = regions[k].start > s ? regions[k].start : s, b = regions[k].end < e ? regions[k].end : e;
    if (still_mapped(&regions[k], a, b)) {
      k++;
      continue;
    }
    const uintptr_t was = regions[k].start;
    if (cut(k, a, b) != 0) goto fail;
    if (a > was) k++; /* its left part stays, before s (a split's right part starts at e) */
  }
  if (adopt_shared(s, e) != 0) goto fail;
  /* The pieces in address order: regions' parts and the gaps between them. */
  struct span gaps[RGV_MAX_MR_PIECES];
  size_t ngaps = 0, npieces = 0;
  uintptr_t at = s;
  for (size_t k = first_after(s);; k++) {
    uintptr_t next = k < nregions && regions[k].start < e ? regions[k].start : e;
    if (next > at) {
      if (npieces == RGV_MAX_MR_PIECES) goto too_many;
      gaps[ngaps++] = (struct span){at, next};
      npieces++;
    }
    if (next == e) break;
    if (npieces == RGV_MAX_MR_PIECES) goto too_many;
    npieces++;
    at = regions[k].end < e ? regions[k].end : e;
  }
  if (ngaps > 0 && share_gaps(gaps, ngaps) == NULL) goto fail;
  /* Every page is on a region now: one piece each, the memfds numbered as first met. */
  for (size_t k = first_after(s); k < nregions && regions[k].start < e; k++) {
    const struct region* r = &regions[k];
    uintptr_t a = r->start > s ? r->start : s, b = r->end < e ? r->end : e;
    uint32_t f = 0;
    while (f < out->nfds && out->mems[f] != (void*)r->mem) f++;
    if (f == out->nfds) {
      out->mems[f] = r->mem;
      out->fds[out->nfds++] = r->mem->fd;
    }
    out->p[out->n++] = (struct rgv_mr_piece){.offset = r->off + (a - r->start), .length = b - a, .fd = f, .pad = 0};
  }
  return 0; /* the lock stays held until rg_pages_done */
too_many:
  rg_say("a registration over more than %u earlier registrations' pieces of memory is refused (ENOMEM)",
         RGV_MAX_MR_PIECES);
  errno = ENOMEM;
fail:;
  int err = errno;
  collect(s, e);
  pthread_mutex_unlock(&mu);
  errno = err;
  return -1;
}

void rg_pages_done(uintptr_t s, uintptr_t e, int registered) {
  if (registered && grow((void**)&live, &caplive, nlive + 1, sizeof *live) == 0) live[nlive++] = (struct span){s, e};
  /* (Out of memory for the list: the regions are collected; a later registration shares anew.) */
  collect(s, e);
  pthread_mutex_unlock(&mu);
}

/*
 * A System V segment attached by shmat is a shared mapping of "/SYSV<key> (deleted)" whose inode
 * number in /proc/self/maps is the segment's id. Moving such pages onto a memfd (what
 * rg_pages_share does) would detach the segment (destroying it if it was marked for removal,
 * as UCX marks its own) and end its sharing: the daemon attaches it itself instead (REG_SHM).
 */
int rg_pages_sysv(uintptr_t s, uintptr_t e, uint32_t* shmid, uint64_t* offset) {
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == NULL) return 0; /* cannot tell: shared as any memory */
  char line[MAP_LINE_MAX];
  uintptr_t at = s;
  int sysv = 0, other = 0;
  unsigned long id = 0, first_off = 0;
  struct map_line m;
  while (at < e && fgets(line, sizeof line, f) != NULL) {
    if (!parse_map_line(line, &m)) continue;
    const unsigned long a = m.start, b = m.end, off = m.off, ino = m.ino;
    if (b <= at) continue;
    if (a > at) { /* a hole: not memory the program has (rg_pages_share says EFAULT) */
      other = 1;
      if (a >= e) break;
    }
    const int is_sysv = strncmp(m.path, "/SYSV", 5) == 0 && m.perms[3] == 's';
    if (is_sysv) {
      const unsigned long here = off + ((a > s ? a : s) - a);
      if (sysv == 0) {
        id = ino;
        first_off = here;
      } else if (ino != id || here != first_off + ((a > s ? a : s) - s)) {
        other = 1; /* another segment, or this one out of order */
      }
      sysv = 1;
    } else {
      other = 1;
    }
    at = b;
  }
  fclose(f);
  if (!sysv) return 0;
  if (other || at < e || id > UINT32_MAX) {
    rg_say(
        "ibv_reg_mr: [%p, %p) is partly System V shared memory: refused (EINVAL); register the segment's pages "
        "apart from other memory",
        (void*)s, (void*)e);
    errno = EINVAL;
    return -1;
  }
  *shmid = (uint32_t)id;
  *offset = first_off;
  return 1;
}

void rg_pages_release(uintptr_t s, uintptr_t e) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nlive; i++)
    if (live[i].start == s && live[i].end == e) {
      live[i] = live[--nlive];
      break;
    }
  collect(s, e);
  prune_idle();
  pthread_mutex_unlock(&mu);
}
