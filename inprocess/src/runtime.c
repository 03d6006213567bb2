/* The in-process runtime shared by the sampler and the allocator (runtime.h). */
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread struct lt_thread lt_tls __attribute__((tls_model("initial-exec")));
char lt_exe[4096];

/* ---------------- locks, clocks, strings ---------------- */

void lt_lock_wait(lt_lock *l) NO_THREAD_SAFETY_ANALYSIS { /* the primitive: not analyzed */
  for (int spin = 0; spin < 100; spin++) {
    int expected = 0;
    if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_weak_explicit(&l->v, &expected, 1, memory_order_acquire,
                                              memory_order_relaxed))
      return;
    __builtin_ia32_pause();
  }
  while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
    syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void lt_lock_wake(lt_lock *l) { syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

uint64_t lt_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t lt_unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

uint32_t lt_gettid(void) { return (uint32_t)syscall(SYS_gettid); }
uint32_t lt_getpid(void) { return (uint32_t)syscall(SYS_getpid); }

void *lt_map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

size_t lt_strlcpy(char *dst, const char *src, size_t cap) {
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = 0;
  return n;
}

char *lt_utoa(uint64_t v, char *buf) {
  char *p = buf + 23;
  *p = 0;
  do {
    *--p = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return p;
}

/* One line on stderr, "lifetime-sampler: " a b c. */
void lt_log(const char *a, const char *b, const char *c) {
  char line[1024];
  size_t n = lt_strlcpy(line, "lifetime-sampler: ", sizeof line);
  const char *parts[3] = {a, b, c};
  for (int i = 0; i < 3; i++)
    if (parts[i] && n < sizeof line - 2) n += lt_strlcpy(line + n, parts[i], sizeof line - 1 - n);
  line[n++] = '\n';
  int e = errno;
  while (write(2, line, n) < 0 && errno == EINTR) {
  }
  errno = e;
}

/* ---------------- descriptors ----------------
 * open() takes the lowest free number.  A host that closed stdout and writes to fd 1
 * from one thread while another flushes would otherwise write into the profile (and
 * see its writes succeed); a host's own open() expects the low numbers.  So closed
 * descriptors among 0..2 are first plugged with O_PATH descriptors of "/" (read and
 * write on them fail with EBADF, as on a closed one), the file is opened (at 3 or
 * above), moved up with F_DUPFD_CLOEXEC and its low copy closed, then the plugs: a
 * low number is held only for those few system calls, never while we read or write.
 * The floor: above most programs' descriptors, under the usual soft limit of 1024
 * (F_DUPFD fails at or above the limit), and low enough that the kernel grows the
 * host's descriptor table only to 1024 entries (8 KiB).  No malloc, no locks. */
static int fd_floor(void) {
  struct rlimit rl;
  uint64_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 1024;
  if (soft >= LT_FD_FLOOR + 16) return LT_FD_FLOOR;
  return soft > 19 ? (int)soft - 16 : 3;
}

int lt_openat_high(int dirfd, const char *path, int flags, mode_t mode) {
  int plugs[3], n = 0, fd;
  while (n < 3 && (fd = open("/", O_PATH | O_CLOEXEC)) >= 0) {
    if (fd >= 3) {
      close(fd);
      break;
    }
    plugs[n++] = fd;
  }
  fd = openat(dirfd, path, flags | O_CLOEXEC, mode);
  int e = errno;
  int floor = fd_floor();
  if (fd >= 0 && fd < floor) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high >= 0 || fd < 3) { /* < 3: plugging failed or raced with the host */
      close(fd);
      fd = high;
      if (high < 0) e = errno;
    }
  }
  while (n) close(plugs[--n]);
  errno = e;
  return fd;
}

int lt_open_high(const char *path, int flags, mode_t mode) {
  return lt_openat_high(AT_FDCWD, path, flags, mode);
}

/* ---------------- the executable ---------------- */

void lt_program_name(char *exe, size_t cap, const char **base) {
  ssize_t n = readlink("/proc/self/exe", exe, cap - 1);
  if (n < 0) n = 0;
  exe[n] = 0;
  const char *slash = strrchr(exe, '/');
  *base = slash ? slash + 1 : exe;
}
