/* Every alignment 1 B .. 64 KiB (and 1 MiB, 4 MiB past a huge page) through
   posix_memalign, aligned_alloc and memalign, plus valloc/pvalloc, at several sizes;
   each block is written whole and kept live a while so blocks share pages. */
#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#include "common.h"

#define KEEP 64
static void* kept[KEEP];
static size_t kept_n[KEEP];
static int k;

static void check(void* p, size_t align, size_t size, const char* fn) {
  if (!p) DIE("%s(%zu, %zu) failed", fn, align, size);
  if ((uintptr_t)p % align) DIE("%s(%zu, %zu) = %p: misaligned", fn, align, size, p);
  if (malloc_usable_size(p) < size) DIE("%s: usable %zu < %zu", fn, malloc_usable_size(p), size);
  fill(p, size, align + size);
  int slot = k++ % KEEP;
  if (kept[slot]) { verify(kept[slot], kept_n[slot], 0, "kept"); free(kept[slot]); }
  fill(p, size, 0);
  kept[slot] = p;
  kept_n[slot] = size;
}

int main(void) {
  static const size_t extra[] = {1 << 20, 4 << 20};
  size_t sizes[] = {1, 7, 100, 4096, 9000, 70000};
  for (int round = 0; round < 3; ++round) {
    for (size_t a = 1; a <= (64 << 10) * 64; a <<= 1) {
      if (a > (64 << 10) && a != extra[0] && a != extra[1]) continue;
      for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i) {
        size_t n = sizes[i] + (a > 1 ? a / 2 : 0) * (size_t)round;
        void* p = NULL;
        if (a >= sizeof(void*)) {
          int rc = posix_memalign(&p, a, n);
          if (rc) DIE("posix_memalign(%zu, %zu) = %d", a, n, rc);
          check(p, a, n, "posix_memalign");
        }
        check(aligned_alloc(a, n), a, n, "aligned_alloc");
        check(memalign(a, n), a, n, "memalign");
      }
    }
    check(valloc(10), 4096, 10, "valloc");
    void* pv = pvalloc(10);
    check(pv, 4096, 4096, "pvalloc");
  }
  void* p;
  if (posix_memalign(&p, 3 * sizeof(void*), 16) != EINVAL) DIE("posix_memalign(24) should be EINVAL");
  if (posix_memalign(&p, 2, 16) != EINVAL) DIE("posix_memalign(2) should be EINVAL");
  for (int i = 0; i < KEEP; ++i) if (kept[i]) { verify(kept[i], kept_n[i], 0, "kept"); free(kept[i]); }
  puts("ok");
  return 0;
}
