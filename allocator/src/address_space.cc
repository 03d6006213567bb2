#include "address_space.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace lalloc {

namespace {

// The process's mapped bytes (statm's first field, in pages); 0 when unreadable.
uint64_t mapped_now() {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  uint64_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) pages = pages * 10 + uint64_t(buf[i] - '0');
  return pages * uint64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace

uint64_t address_space_left() {
  rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  const uint64_t used = mapped_now();
  return rl.rlim_cur > used ? rl.rlim_cur - used : 0;
}

}  // namespace lalloc
