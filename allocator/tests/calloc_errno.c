/* calloc zeroes reused memory and refuses overflow with ENOMEM; errno survives every
   successful call; malloc/realloc/reallocarray failures set ENOMEM; malloc(0) is unique. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>

#include "common.h"

#define EXPECT_ERRNO(call, e) do { errno = 0; void* r_ = (void*)(call); \
  if (r_ || errno != (e)) DIE(#call ": got %p errno %d", r_, errno); } while (0)

int main(void) {
  static const size_t sizes[] = {1, 16, 100, 1000, 8192, 20000, 300000, 3 << 20};
  for (int round = 0; round < 50; ++round) {
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i) {
      unsigned char* p = malloc(sizes[i]);
      memset(p, 0xab, sizes[i]);
      free(p);
      unsigned char* q = calloc(1, sizes[i]);
      for (size_t j = 0; j < sizes[i]; ++j) if (q[j]) DIE("calloc(%zu): byte %zu not zero", sizes[i], j);
      unsigned char* z = calloc(sizes[i], 3);
      for (size_t j = 0; j < 3 * sizes[i]; ++j) if (z[j]) DIE("calloc(%zu, 3): byte %zu not zero", sizes[i], j);
      free(z);
      memset(q, 0xcd, sizes[i]);
      free(q);
    }
  }
  EXPECT_ERRNO(calloc(SIZE_MAX / 2, 3), ENOMEM);
  EXPECT_ERRNO(calloc(SIZE_MAX, SIZE_MAX), ENOMEM);
  EXPECT_ERRNO(malloc(SIZE_MAX), ENOMEM);
  EXPECT_ERRNO(malloc(SIZE_MAX / 2), ENOMEM);
  void* p = malloc(10);
  EXPECT_ERRNO(realloc(p, SIZE_MAX - 8), ENOMEM);  /* p stays valid */
  EXPECT_ERRNO(reallocarray(p, SIZE_MAX / 2, 3), ENOMEM);
  free(p);
  /* errno kept on success */
  void* keep[64];
  for (int i = 0; i < 64; ++i) {
    errno = EDOM;
    keep[i] = malloc((size_t)i * 97);
    void* c = calloc(3, (size_t)i * 11 + 1);
    void* r = realloc(NULL, 50);
    r = realloc(r, 5000);
    r = reallocarray(r, 10, 10);
    void* a;
    if (posix_memalign(&a, 256, 100)) DIE("posix_memalign failed");
    void* b = aligned_alloc(64, 640);
    void* m = memalign(4096, 10);
    free(a); free(b); free(m); free(r); free(c);
    free(NULL);
    if (errno != EDOM) DIE("errno changed to %d by a successful call", errno);
  }
  for (int i = 0; i < 64; ++i)
    for (int j = i + 1; j < 64; ++j)
      if (keep[i] == keep[j]) DIE("malloc(%d) and malloc(%d) returned the same %p", i * 97, j * 97, keep[i]);
  errno = EDOM;
  for (int i = 0; i < 64; ++i) free(keep[i]);
  if (errno != EDOM) DIE("free changed errno");
  puts("ok");
  return 0;
}
