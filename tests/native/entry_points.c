/* Calls every allocator entry point once with a distinctive size (see
 * tests/test_sampler_sampling.py for the expected samples) and frees everything. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

int main(void) {
  void *p;
  p = malloc(1111);                 sink = p; free(p);             /* MALLOC / FREE */
  p = calloc(7, 77);                sink = p; free(p);             /* CALLOC 539 */
  p = malloc(2222);                 sink = p;
  p = realloc(p, 3333);             sink = p;                      /* 2222 FREED_BY_REALLOC */
  p = reallocarray(p, 3, 1111);     sink = p; free(p);             /* 3333 FREED_BY_REALLOCARRAY, REALLOCARRAY 3333 */
  if (posix_memalign(&p, 64, 4444)) return 1; sink = p; free(p);   /* POSIX_MEMALIGN 64 */
  p = aligned_alloc(128, 5120);     sink = p; free(p);             /* ALIGNED_ALLOC 128 */
  p = memalign(256, 6666);          sink = p; free(p);             /* MEMALIGN 256 */
  p = valloc(7777);                 sink = p; free(p);             /* VALLOC page */
  p = pvalloc(8888);                sink = p; free(p);             /* PVALLOC page */
  p = realloc(NULL, 9999);          sink = p;                      /* REALLOC from NULL */
  p = realloc(p, 0);                sink = p;                      /* 9999 FREED_BY_REALLOC */
  /* error paths must behave exactly as glibc's */
  if (posix_memalign(&p, 3, 100) != 22) return 3;                  /* EINVAL */
  if (reallocarray(NULL, (size_t)1 << 40, (size_t)1 << 40) != NULL) return 4;
  puts("entry points done");
  return 0;
}
