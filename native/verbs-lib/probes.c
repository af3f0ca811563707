/*
 * The probe paths of librdmagraph-verbs.so: /dev/infiniband, /sys/class/infiniband and
 * /sys/class/infiniband_verbs as a program run with `rdma-graph exec` sees them, showing the
 * daemon's devices. RDMA software looks there before it calls a verb: /dev/infiniband/uverbsN
 * (UCX lists a device only if /dev/infiniband/<its dev_name> is a character device it may read
 * and write), /sys/class/infiniband/<device>/ (Open MPI, hwloc; UCX reads
 * ports/1/gid_attrs/types/0 for the RoCE version and device/numa_node) and
 * /sys/class/infiniband_verbs/uverbsN/. There is no kernel device behind ours, so the library
 * answers these paths itself, from the daemon's DEVICES reply, without root and without touching
 * the host's /dev or /sys: it builds a private tree of the same paths (a mkdtemp directory under
 * $XDG_RUNTIME_DIR, $TMPDIR or /tmp, mode 0700, removed at exit; a tree left behind by a process
 * that was killed is removed by the next one) and the path-taking libc calls it exports (open,
 * openat, fopen, the stat family, statx, access, faccessat, opendir, scandir, readlink,
 * realpath, with glibc's symbol versions: verbs.map) look a probed path up there. A stat of a
 * uverbsN file says S_IFCHR (major 231, minor 192 + N, as the kernel's uverbs); nothing else is
 * faked. An open of /dev/infiniband/rdma_cm is ucma.c's (librdmacm's kernel interface). Every other path goes
 * to libc untouched, and so does a path whose "." and ".." components lead out of the probed
 * ones (they are resolved first, as the kernel would: the tree has no symbolic links).
 *
 * The device names (rg_<interface>, at most 15 characters) and every value written are the
 * daemon's (dataplane/rdma-devices.ts), checked by verbs.c's query_devices; paths are built in
 * bounded buffers (a longer one is ENAMETOOLONG, as the kernel says).
 */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE /* our open() and openat() are the functions themselves, not fortify's wrappers */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "lib.h"

/* glibc's pre-2.33 stat entry points (still exported): older binaries call these. */
int __xstat(int ver, const char* path, struct stat* buf);
int __xstat64(int ver, const char* path, struct stat64* buf);
int __lxstat(int ver, const char* path, struct stat* buf);
int __lxstat64(int ver, const char* path, struct stat64* buf);
int __fxstatat(int ver, int dirfd, const char* path, struct stat* buf, int flags);
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* buf, int flags);
int __open_2(const char* path, int flags);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
int __openat64_2(int dirfd, const char* path, int flags);

/* libc's own function `fn` (the next definition after ours); NULL only if libc has none. */
#define REAL(fn)                                                                            \
  static __typeof__(fn)* real_##fn;                                                         \
  if (__atomic_load_n(&real_##fn, __ATOMIC_RELAXED) == NULL)                                \
    __atomic_store_n(&real_##fn, (__typeof__(fn)*)dlsym(RTLD_NEXT, #fn), __ATOMIC_RELAXED); \
  if (real_##fn == NULL) {                                                                  \
    errno = ENOSYS;                                                                         \
    return -1;                                                                              \
  }

#define UVERBS_MAJOR 231 /* the kernel's uverbs character devices: 231, 192 + N */
#define UVERBS_MINOR 192
#define ROOT_MAX 200 /* our tree's directory: a path no longer than this */

static const struct {
  const char* path;
  size_t len;
} PROBED[] = {{"/dev/infiniband", 15}, {"/sys/class/infiniband", 21}, {"/sys/class/infiniband_verbs", 27}};

/* The tree: built once a probed path is asked for or the device list is made, for this process. */
static pthread_mutex_t tree_lock = PTHREAD_MUTEX_INITIALIZER;
static int tree_state; /* 0: none yet; 1: built; -1: could not be made (probed paths go to libc) */
static char tree_root[ROOT_MAX + 1];
static size_t tree_root_len;
static pid_t tree_pid; /* whose: a forked child makes its own, and removes only its own */
static dev_t tree_dev;
static int tree_count;
static ino_t tree_uverbs[RGV_MAX_DEVICES];
static struct rgv_device tree_devs[RGV_MAX_DEVICES]; /* what it shows */
static __thread int building;                        /* this thread is making the tree: its own calls go to libc */

/* ------------------------------------------------------------------ libc, unrewritten */

static int sys_openat(int dirfd, const char* path, int flags, mode_t mode) {
  REAL(openat);
  return real_openat(dirfd, path, flags, mode);
}

static int sys_fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  REAL(fstatat);
  return real_fstatat(dirfd, path, st, flags);
}

static DIR* sys_opendir(const char* path) {
  static __typeof__(opendir)* real;
  if (real == NULL) real = (__typeof__(opendir)*)dlsym(RTLD_NEXT, "opendir");
  if (real == NULL) {
    errno = ENOSYS;
    return NULL;
  }
  return real(path);
}

static char* sys_realpath(const char* path, char* resolved) {
  static __typeof__(realpath)* real;
  if (real == NULL) real = (__typeof__(realpath)*)dlsym(RTLD_NEXT, "realpath");
  if (real == NULL) {
    errno = ENOSYS;
    return NULL;
  }
  return real(path, resolved);
}

/* ------------------------------------------------------------------ the tree */

/* Removes directory `name` of `dirfd` and everything in it, following no symbolic link; depth bounded. */
static void remove_tree_at(int dirfd, const char* name, int depth) {
  if (depth > 12) return;
  int fd = sys_openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    unlinkat(dirfd, name, 0);
    return;
  }
  DIR* d = fdopendir(fd);
  if (d == NULL) {
    close(fd);
    return;
  }
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (e->d_type == DT_DIR)
      remove_tree_at(fd, e->d_name, depth + 1);
    else if (unlinkat(fd, e->d_name, 0) != 0 && errno == EISDIR)
      remove_tree_at(fd, e->d_name, depth + 1);
  }
  closedir(d);
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

static void remove_tree(const char* root) {
  char dir[ROOT_MAX + 1];
  snprintf(dir, sizeof dir, "%s", root);
  char* slash = strrchr(dir, '/');
  if (slash == NULL || slash == dir) return;
  *slash = '\0';
  int fd = sys_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return;
  remove_tree_at(fd, slash + 1, 0);
  close(fd);
}

static void remove_at_exit(void) {
  pthread_mutex_lock(&tree_lock);
  if (tree_state == 1 && tree_pid == getpid()) remove_tree(tree_root);
  tree_state = 0;
  pthread_mutex_unlock(&tree_lock);
}

/* A forked child has its parent's tree, which goes when the parent exits: it makes its own. */
static void forget_in_child(void) {
  pthread_mutex_init(&tree_lock, NULL);
  tree_state = 0;
}

static void once_per_process(void) {
  atexit(remove_at_exit);
  pthread_atfork(NULL, NULL, forget_in_child);
}

/* Trees of this user's processes that are gone (killed before their atexit): removed, a few at most. */
static void remove_stale(const char* base) {
  DIR* d = sys_opendir(base);
  if (d == NULL) return;
  int removed = 0;
  for (struct dirent* e; removed < 16 && (e = readdir(d)) != NULL;) {
    long pid;
    int used = 0;
    if (sscanf(e->d_name, "rdma-graph-probes.%ld.%*6[A-Za-z0-9]%n", &pid, &used) != 1 || used == 0 ||
        e->d_name[used] != '\0' || pid <= 0 || pid > INT_MAX || pid == getpid())
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to ask */
    struct stat st;
    if (sys_fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    remove_tree_at(dirfd(d), e->d_name, 0);
    removed++;
  }
  closedir(d);
}

/* printf into out (cap bytes): 0, or -1 + ENAMETOOLONG when it does not fit. */
__attribute__((format(printf, 3, 4))) static int pathf(char* out, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(out, cap, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < cap) return 0;
  errno = ENAMETOOLONG;
  return -1;
}

/* `rel` under the tree (rootfd): a directory; 0 or -1. */
static int put_dir(int rootfd, const char* rel) { return mkdirat(rootfd, rel, 0755) == 0 || errno == EEXIST ? 0 : -1; }

/* `rel` under the tree: a file of `text` (printf's format), mode `mode`; its inode in *ino (may be NULL); 0 or -1. */
__attribute__((format(printf, 4, 5))) static int put_file(int rootfd, const char* rel, mode_t mode, const char* fmt,
                                                          ...) {
  char text[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof text) return -1;
  int fd = sys_openat(rootfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  int ok = write(fd, text, (size_t)n) == n && fchmod(fd, mode) == 0;
  close(fd);
  return ok ? 0 : -1;
}

/* What the daemon sent, for a file: printable characters only. */
static void printable(char* out, size_t cap, const char* in) {
  size_t k = 0;
  for (; k + 1 < cap && in[k] != '\0'; k++) out[k] = in[k] >= 0x20 && in[k] < 0x7f ? in[k] : '?';
  out[k] = '\0';
}

/* Device `i` (`d`) in the tree at rootfd, its uverbs file's inode in *ino; 0 or -1. */
static int put_device(int rootfd, int i, const struct rgv_device* d, ino_t* ino) {
  char p[160], q[160], ifname[sizeof d->ifname], fw[sizeof d->fw_ver];
  printable(ifname, sizeof ifname, d->ifname);
  printable(fw, sizeof fw, d->fw_ver);
  const uint8_t* g = d->node_guid;
  char guid[40];
  snprintf(guid, sizeof guid, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
  const int up = d->link_up != 0;
  int r = 0;
  /* /dev/infiniband/uverbsN, and what the kernel's uverbs class says of it. */
  r |= pathf(p, sizeof p, "dev/infiniband/uverbs%d", i);
  r |= put_file(rootfd, p, 0666, "%s", "");
  struct stat st;
  if (r == 0) r |= sys_fstatat(rootfd, p, &st, AT_SYMLINK_NOFOLLOW);
  if (r == 0) *ino = st.st_ino;
  r |= pathf(p, sizeof p, "sys/class/infiniband_verbs/uverbs%d", i);
  r |= put_dir(rootfd, p);
#define FILE_IN(dir, name, ...) (pathf(q, sizeof q, "%s/%s", dir, name) || put_file(rootfd, q, 0444, __VA_ARGS__))
  r |= FILE_IN(p, "ibdev", "%s\n", d->name);
  r |= FILE_IN(p, "abi_version", "1\n");
  r |= FILE_IN(p, "dev", "%d:%d\n", UVERBS_MAJOR, UVERBS_MINOR + i);
  /* /sys/class/infiniband/<name>/: as the kernel shows a RoCE device. */
  r |= pathf(p, sizeof p, "sys/class/infiniband/%s", d->name);
  r |= put_dir(rootfd, p);
  r |= FILE_IN(p, "node_type", "1: CA\n");
  r |= FILE_IN(p, "node_guid", "%s\n", guid);
  r |= FILE_IN(p, "sys_image_guid", "%s\n", guid);
  r |= FILE_IN(p, "fw_ver", "%s\n", fw);
  r |= FILE_IN(p, "hca_type", "rdma-graph\n");
  r |= FILE_IN(p, "hw_rev", "0x%x\n", d->hw_ver);
  r |= FILE_IN(p, "board_id", "rdma-graph\n");
  r |= FILE_IN(p, "node_desc", "rdma-graph %s\n", ifname);
  r |= pathf(p, sizeof p, "sys/class/infiniband/%s/device", d->name);
  r |= put_dir(rootfd, p);
  r |= FILE_IN(p, "numa_node", "-1\n"); /* no NUMA node: every CPU is as near */
  r |= FILE_IN(p, "vendor", "0x%04x\n", d->vendor_id);
  r |= FILE_IN(p, "device", "0x%04x\n", d->vendor_part_id);
  const char* dirs[] = {"ports",
                        "ports/1",
                        "ports/1/gids",
                        "ports/1/gid_attrs",
                        "ports/1/gid_attrs/types",
                        "ports/1/gid_attrs/ndevs",
                        "ports/1/pkeys"};
  for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
    r |= pathf(q, sizeof q, "sys/class/infiniband/%s/%s", d->name, dirs[k]) || put_dir(rootfd, q);
  }
  r |= pathf(p, sizeof p, "sys/class/infiniband/%s/ports/1", d->name);
  r |= FILE_IN(p, "state", "%s\n", up ? "4: ACTIVE" : "1: DOWN");
  r |= FILE_IN(p, "phys_state", "%s\n", up ? "5: LinkUp" : "3: Disabled");
  r |= FILE_IN(p, "link_layer", "Ethernet\n");
  r |= FILE_IN(p, "rate", "25 Gb/sec (1X EDR)\n"); /* what ibv_query_port says: 1X, EDR */
  r |= FILE_IN(p, "lid", "0x0\n");
  r |= FILE_IN(p, "sm_lid", "0x0\n");
  r |= FILE_IN(p, "lid_mask_count", "0\n");
  r |= FILE_IN(p, "sm_sl", "0\n");
  r |= FILE_IN(p, "cap_mask", "0x00000000\n");
  r |= FILE_IN(p, "gids/0", "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n", d->ipv4[0], d->ipv4[1], d->ipv4[2],
               d->ipv4[3]);
  r |= FILE_IN(p, "gid_attrs/types/0", "RoCE v2\n");
  r |= FILE_IN(p, "gid_attrs/ndevs/0", "%s\n", ifname);
  r |= FILE_IN(p, "pkeys/0", "0xffff\n");
#undef FILE_IN
  return r;
}

/* The base our tree goes in: $XDG_RUNTIME_DIR, $TMPDIR or /tmp, resolved (realpath compares against it). */
static int tree_base(char* out, size_t cap) {
  const char* env[] = {getenv("XDG_RUNTIME_DIR"), getenv("TMPDIR"), "/tmp"};
  for (size_t k = 0; k < sizeof env / sizeof env[0]; k++) {
    const char* b = env[k];
    char resolved[PATH_MAX];
    struct stat st;
    if (b == NULL || b[0] != '/' || sys_realpath(b, resolved) == NULL) continue;
    if (strlen(resolved) + sizeof "/rdma-graph-probes.2147483647.XXXXXX" > cap) continue;
    if (sys_fstatat(AT_FDCWD, resolved, &st, 0) != 0 || !S_ISDIR(st.st_mode) || access(resolved, W_OK | X_OK) != 0)
      continue;
    snprintf(out, cap, "%s", resolved);
    return 0;
  }
  return -1;
}

/* A new tree of these devices in place of the old (tree_lock held); 0 or -1 (tree_state says). */
static int build(const struct rgv_device* devs, int n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, once_per_process);
  char base[ROOT_MAX + 1], root[ROOT_MAX + 1];
  if (tree_base(base, sizeof base) != 0) {
    rg_say("no directory to answer /dev/infiniband and /sys/class/infiniband from (XDG_RUNTIME_DIR, TMPDIR, /tmp)");
    tree_state = -1;
    return -1;
  }
  if (tree_state != 1) remove_stale(base);
  if (pathf(root, sizeof root, "%s/rdma-graph-probes.%d.XXXXXX", base, (int)getpid()) != 0 || mkdtemp(root) == NULL) {
    rg_say("cannot make %s to answer /dev/infiniband and /sys/class/infiniband from: %s", root, strerror(errno));
    tree_state = tree_state == 1 ? 1 : -1;
    return -1;
  }
  int rootfd = sys_openat(AT_FDCWD, root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
  struct stat st;
  int r = rootfd < 0 || fstat(rootfd, &st) != 0 ? -1 : 0;
  const char* dirs[] = {"dev",       "dev/infiniband",       "sys",
                        "sys/class", "sys/class/infiniband", "sys/class/infiniband_verbs"};
  for (size_t k = 0; r == 0 && k < sizeof dirs / sizeof dirs[0]; k++) r |= put_dir(rootfd, dirs[k]);
  if (r == 0) r |= put_file(rootfd, "sys/class/infiniband_verbs/abi_version", 0444, "6\n");
  ino_t uverbs[RGV_MAX_DEVICES];
  for (int i = 0; r == 0 && i < n; i++) r |= put_device(rootfd, i, &devs[i], &uverbs[i]);
  if (rootfd >= 0) close(rootfd);
  if (r != 0) {
    rg_say("cannot fill %s to answer /dev/infiniband and /sys/class/infiniband from: %s", root, strerror(errno));
    remove_tree(root);
    tree_state = tree_state == 1 ? 1 : -1;
    return -1;
  }
  /* The new tree in place; the old one goes (a thread still reading it may see it vanish). */
  char old[ROOT_MAX + 1];
  const int had = tree_state == 1 && tree_pid == getpid();
  snprintf(old, sizeof old, "%s", tree_root);
  snprintf(tree_root, sizeof tree_root, "%s", root);
  tree_root_len = strlen(root);
  tree_dev = st.st_dev;
  tree_count = n;
  for (int i = 0; i < n; i++) tree_uverbs[i] = uverbs[i];
  if (n > 0) memcpy(tree_devs, devs, (size_t)n * sizeof *devs);
  tree_pid = getpid();
  __atomic_store_n(&tree_state, 1, __ATOMIC_RELEASE);
  if (had) remove_tree(old);
  return 0;
}

/* Whether the tree shows exactly these devices, as they are now (link state included; tree_lock held). */
static int tree_shows(const struct rgv_device* devs, int n) {
  if (tree_state != 1 || tree_pid != getpid() || tree_count != n) return 0;
  return n == 0 || memcmp(tree_devs, devs, (size_t)n * sizeof *devs) == 0;
}

void rg_probes_devices(const struct rgv_device* devs, int n) {
  if (n < 0 || n > (int)RGV_MAX_DEVICES) return;
  pthread_mutex_lock(&tree_lock);
  building = 1;
  if (!tree_shows(devs, n)) build(devs, n);
  building = 0;
  pthread_mutex_unlock(&tree_lock);
}

/* The tree, made from the daemon's devices if there is none yet for this process; 0, or -1 (none). */
static int ensure_tree(void) {
  if (__atomic_load_n(&tree_state, __ATOMIC_ACQUIRE) == 1 && tree_pid == getpid()) return 0;
  if (building) return -1; /* making it: our own calls (the daemon's socket path) go to libc */
  pthread_mutex_lock(&tree_lock);
  building = 1;
  if (tree_state == 0 || (tree_state == 1 && tree_pid != getpid())) {
    struct rgv_device devs[RGV_MAX_DEVICES];
    int n = rg_query_devices(devs);
    build(devs, n < 0 ? 0 : n); /* no daemon: no devices (the host's are not ours to show either) */
  }
  const int st = tree_state;
  building = 0;
  pthread_mutex_unlock(&tree_lock);
  return st == 1 ? 0 : -1;
}

/* ------------------------------------------------------------------ paths */

/* Whether `path` (normalized) is one of the probed trees or under one. */
static int probed(const char* path) {
  for (size_t k = 0; k < sizeof PROBED / sizeof PROBED[0]; k++) {
    const size_t n = PROBED[k].len;
    if (strncmp(path, PROBED[k].path, n) == 0 && (path[n] == '\0' || path[n] == '/')) return 1;
  }
  return 0;
}

/*
 * Absolute `path` without empty, "." and ".." components (as the kernel walks it where there is
 * no symbolic link, which our tree has none of), a trailing slash kept; 0, or -1 when it does
 * not fit `cap` bytes.
 */
static int normalize(const char* path, char* out, size_t cap) {
  size_t n = 0;
  const char* c = path;
  while (*c != '\0') {
    while (*c == '/') c++;
    const char* end = c;
    while (*end != '\0' && *end != '/') end++;
    const size_t len = (size_t)(end - c);
    if (len == 0 || (len == 1 && c[0] == '.')) {
      /* nothing */
    } else if (len == 2 && c[0] == '.' && c[1] == '.') {
      while (n > 0 && out[n - 1] != '/') n--;
      if (n > 0) n--; /* the slash before it; ".." of / is / */
    } else {
      if (n + 1 + len + 1 > cap) return -1;
      out[n++] = '/';
      memcpy(out + n, c, len);
      n += len;
    }
    c = end;
  }
  if (n == 0 || (c > path && c[-1] == '/' && n > 0)) {
    if (n + 2 > cap) return -1;
    out[n++] = '/';
  }
  out[n] = '\0';
  return 0;
}

/*
 * `path` in our tree, when it names a probed one: 1 (the path in `out`, `cap` bytes); 0: not
 * ours, give libc `path` as it is; -1 + ENAMETOOLONG.
 */
static int rewrite(const char* path, char* out, size_t cap) {
  if (path == NULL || path[0] != '/' || strstr(path, "infiniband") == NULL) return 0;
  char norm[PATH_MAX];
  if (strnlen(path, PATH_MAX) >= PATH_MAX || normalize(path, norm, sizeof norm) != 0)
    return 0; /* libc says ENAMETOOLONG */
  if (!probed(norm) || ensure_tree() != 0) return 0;
  const size_t n = strlen(norm);
  if (tree_root_len + n + 1 > cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(out, tree_root, tree_root_len);
  memcpy(out + tree_root_len, norm, n + 1);
  return 1;
}

/* For a call taking `path`: the path to give libc (`path` itself, or its place in our tree in `buf`). */
#define TAKE_PATH(path, buf, fail)                   \
  char buf[PATH_MAX];                                \
  const char* use_##buf = (path);                    \
  {                                                  \
    const int r_ = rewrite((path), buf, sizeof buf); \
    if (r_ < 0) return fail;                         \
    if (r_ > 0) use_##buf = buf;                     \
  }

/* Index of the uverbs file with this inode, or -1. */
static int uverbs_of(dev_t dev, ino_t ino) {
  if (__atomic_load_n(&tree_state, __ATOMIC_ACQUIRE) != 1 || dev != tree_dev) return -1;
  for (int i = 0; i < tree_count; i++)
    if (tree_uverbs[i] == ino) return i;
  return -1;
}

/* A stat result: one of our uverbs files is a character device (231, 192 + N), crw-rw-rw-. */
#define FIX_STAT(r, st)                                                  \
  do {                                                                   \
    int i_;                                                              \
    if ((r) == 0 && (i_ = uverbs_of((st)->st_dev, (st)->st_ino)) >= 0) { \
      (st)->st_mode = S_IFCHR | 0666;                                    \
      (st)->st_rdev = makedev(UVERBS_MAJOR, UVERBS_MINOR + i_);          \
    }                                                                    \
  } while (0)

/* Opening a probed path: read only, but for a uverbs file (as the kernel's, read and write). */
static int refuse_write(const char* rewritten, const char* path, int flags) {
  if (rewritten == path) return 0;
  if (strncmp(rewritten + tree_root_len, "/dev/infiniband/", 16) == 0) return 0;
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0) {
    errno = EACCES;
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ open */

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

/* The mode argument of a variadic open call whose last named argument is `flags`. */
#define TAKE_MODE(flags, mode)  \
  mode_t mode;                  \
  {                             \
    va_list ap;                 \
    va_start(ap, flags);        \
    mode = mode_arg(flags, ap); \
    va_end(ap);                 \
  }

/* ucma.c: an open of /dev/infiniband/rdma_cm (a channel of the daemon's connection manager). */
int rg_ucma_open(int flags);

/* Whether absolute `path` is /dev/infiniband/rdma_cm ("." and ".." resolved). */
static int is_rdma_cm(const char* path) {
  char norm[64];
  if (path == NULL || path[0] != '/' || strstr(path, "rdma_cm") == NULL || strnlen(path, PATH_MAX) >= PATH_MAX)
    return 0;
  return normalize(path, norm, sizeof norm) == 0 && strcmp(norm, "/dev/infiniband/rdma_cm") == 0;
}

/* Every open: an absolute probed path is rewritten (dirfd does not count then); libc's openat
   opens it (open and open64 are openat of AT_FDCWD; x86_64 has no separate 64-bit calls).
   /dev/infiniband/rdma_cm is ucma.c's. */
static int open_in(int dirfd, const char* path, int flags, mode_t mode) {
  REAL(openat);
  if (is_rdma_cm(path)) return rg_ucma_open(flags);
  TAKE_PATH(path, p, -1);
  if (refuse_write(use_p, path, flags)) return -1;
  return real_openat(dirfd, use_p, flags, mode);
}

EXPORT int open(const char* path, int flags, ...) {
  TAKE_MODE(flags, mode);
  return open_in(AT_FDCWD, path, flags, mode);
}

EXPORT int open64(const char* path, int flags, ...) {
  TAKE_MODE(flags, mode);
  return open_in(AT_FDCWD, path, flags, mode);
}

EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  TAKE_MODE(flags, mode);
  return open_in(dirfd, path, flags, mode);
}

EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  TAKE_MODE(flags, mode);
  return open_in(dirfd, path, flags, mode);
}

EXPORT int __open_2(const char* path, int flags) { return open_in(AT_FDCWD, path, flags, 0); }
EXPORT int __open64_2(const char* path, int flags) { return open_in(AT_FDCWD, path, flags, 0); }
EXPORT int __openat_2(int dirfd, const char* path, int flags) { return open_in(dirfd, path, flags, 0); }
EXPORT int __openat64_2(int dirfd, const char* path, int flags) { return open_in(dirfd, path, flags, 0); }

/* fopen's mode as open's flags, for refuse_write. */
static int fopen_flags(const char* mode) {
  if (mode == NULL) return O_RDONLY;
  return mode[0] != 'r' || strchr(mode, '+') != NULL ? O_RDWR : O_RDONLY;
}

EXPORT FILE* fopen(const char* path, const char* mode) {
  static __typeof__(fopen)* real;
  if (real == NULL) real = (__typeof__(fopen)*)dlsym(RTLD_NEXT, "fopen");
  if (real == NULL) {
    errno = ENOSYS;
    return NULL;
  }
  TAKE_PATH(path, p, NULL);
  if (refuse_write(use_p, path, fopen_flags(mode))) return NULL;
  return real(use_p, mode);
}

EXPORT FILE* fopen64(const char* path, const char* mode) { return fopen(path, mode); }

/* ------------------------------------------------------------------ stat */

/* A stat-family call `name` (params, then libc's call with the path in our tree as use_p):
   its result's uverbs files are character devices. A relative path (of a dirfd) is libc's,
   and its result is checked all the same (the dirfd may be in our tree). */
#define STAT_CALL(name, st, params, args) \
  EXPORT int name params {                \
    REAL(name);                           \
    TAKE_PATH(path, p, -1);               \
    const int r = real_##name args;       \
    FIX_STAT(r, st);                      \
    return r;                             \
  }

STAT_CALL(stat, st, (const char* restrict path, struct stat* restrict st), (use_p, st))
STAT_CALL(stat64, st, (const char* restrict path, struct stat64* restrict st), (use_p, st))
STAT_CALL(lstat, st, (const char* restrict path, struct stat* restrict st), (use_p, st))
STAT_CALL(lstat64, st, (const char* restrict path, struct stat64* restrict st), (use_p, st))
STAT_CALL(fstatat, st, (int dirfd, const char* restrict path, struct stat* restrict st, int flags),
          (dirfd, use_p, st, flags))
STAT_CALL(fstatat64, st, (int dirfd, const char* restrict path, struct stat64* restrict st, int flags),
          (dirfd, use_p, st, flags))
STAT_CALL(__xstat, st, (int ver, const char* path, struct stat* st), (ver, use_p, st))
STAT_CALL(__xstat64, st, (int ver, const char* path, struct stat64* st), (ver, use_p, st))
STAT_CALL(__lxstat, st, (int ver, const char* path, struct stat* st), (ver, use_p, st))
STAT_CALL(__lxstat64, st, (int ver, const char* path, struct stat64* st), (ver, use_p, st))
STAT_CALL(__fxstatat, st, (int ver, int dirfd, const char* path, struct stat* st, int flags),
          (ver, dirfd, use_p, st, flags))
STAT_CALL(__fxstatat64, st, (int ver, int dirfd, const char* path, struct stat64* st, int flags),
          (ver, dirfd, use_p, st, flags))

EXPORT int statx(int dirfd, const char* restrict path, int flags, unsigned int mask, struct statx* restrict stx) {
  REAL(statx);
  TAKE_PATH(path, p, -1);
  const int r = real_statx(dirfd, use_p, flags, mask, stx);
  int i;
  if (r == 0 && (i = uverbs_of(makedev(stx->stx_dev_major, stx->stx_dev_minor), stx->stx_ino)) >= 0) {
    stx->stx_mode = (uint16_t)(S_IFCHR | 0666);
    stx->stx_rdev_major = UVERBS_MAJOR;
    stx->stx_rdev_minor = (uint32_t)(UVERBS_MINOR + i);
  }
  return r;
}

/* ------------------------------------------------------------------ access, directories, links */

/* A call `name` taking `path`: libc's, with the path in our tree as use_p. */
#define PATH_CALL(type, name, params, args) \
  EXPORT type name params {                 \
    REAL(name);                             \
    TAKE_PATH(path, p, -1);                 \
    return real_##name args;                \
  }

PATH_CALL(int, access, (const char* path, int mode), (use_p, mode))
PATH_CALL(int, euidaccess, (const char* path, int mode), (use_p, mode))
EXPORT int eaccess(const char* path, int mode) { return euidaccess(path, mode); }
PATH_CALL(int, faccessat, (int dirfd, const char* path, int mode, int flags), (dirfd, use_p, mode, flags))
PATH_CALL(int, scandir,
          (const char* restrict path, struct dirent*** restrict list, int (*filter)(const struct dirent*),
           int (*compar)(const struct dirent**, const struct dirent**)),
          (use_p, list, filter, compar))
PATH_CALL(int, scandir64,
          (const char* restrict path, struct dirent64*** restrict list, int (*filter)(const struct dirent64*),
           int (*compar)(const struct dirent64**, const struct dirent64**)),
          (use_p, list, filter, compar))
PATH_CALL(ssize_t, readlink, (const char* restrict path, char* restrict buf, size_t size), (use_p, buf, size))
PATH_CALL(ssize_t, readlinkat, (int dirfd, const char* restrict path, char* restrict buf, size_t size),
          (dirfd, use_p, buf, size))
/* Extended attributes (ls -l asks for the SELinux label): our tree's, none. */
PATH_CALL(ssize_t, getxattr, (const char* path, const char* name, void* value, size_t size), (use_p, name, value, size))
PATH_CALL(ssize_t, lgetxattr, (const char* path, const char* name, void* value, size_t size),
          (use_p, name, value, size))
PATH_CALL(ssize_t, listxattr, (const char* path, char* list, size_t size), (use_p, list, size))
PATH_CALL(ssize_t, llistxattr, (const char* path, char* list, size_t size), (use_p, list, size))

EXPORT DIR* opendir(const char* path) {
  TAKE_PATH(path, p, NULL);
  return sys_opendir(use_p);
}

/* A probed path resolves to itself (less `.`, `//`), as it would where the kernel has it. */
EXPORT char* realpath(const char* restrict path, char* restrict resolved) {
  TAKE_PATH(path, p, NULL);
  if (use_p == path) return sys_realpath(path, resolved);
  char* r = sys_realpath(use_p, NULL);
  if (r == NULL) return NULL;
  const char* mine = r;
  if (strncmp(r, tree_root, tree_root_len) == 0 && r[tree_root_len] == '/') mine = r + tree_root_len;
  const size_t n = strlen(mine);
  if (resolved == NULL) {
    memmove(r, mine, n + 1);
    return r;
  }
  if (n >= PATH_MAX) {
    free(r);
    errno = ENAMETOOLONG;
    return NULL;
  }
  memcpy(resolved, mine, n + 1);
  free(r);
  return resolved;
}

/* libibverbs' sysfs reader: `dir`/`file` (a probed path from our tree), its trailing newline cut. */
EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[PATH_MAX];
  const int n = snprintf(path, sizeof path, "%s/%s", dir, file);
  if (n < 0 || (size_t)n >= sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t len = read(fd, buf, size);
  const int e = errno;
  close(fd);
  if (len < 0) {
    errno = e;
    return -1;
  }
  if (len > 0 && buf[len - 1] == '\n') {
    buf[len - 1] = '\0';
    return (int)len - 1;
  }
  if ((size_t)len < size) {
    buf[len] = '\0';
    return (int)len;
  }
  errno = EOVERFLOW; /* no room for its NUL, as libibverbs' own fails */
  return -1;
}
