/* malloc/free pairs of one near-huge-page size (issue 32, item 4): the policy gave such
 * objects fresh huge page ids that it never reused, so a loop of them ran past the
 * allocator's reservation (NULL at pair 32,767) and left the process unable to allocate.
 *   alloc_big_pairs SIZE ALIGN PAIRS
 * Each pair allocates SIZE bytes (posix_memalign when ALIGN > 16), writes its first and
 * last byte, frees it.  Then one 2 MiB and 100,000 200-byte objects (kept live) must
 * succeed.  Prints "pairs N rss_kib R" (R: VmHWM) and "ok"; on a failure the pair it
 * failed at, exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long hwm_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) v = strtol(line + 6, NULL, 10);
  fclose(f);
  return v;
}

static void* get(size_t size, size_t align) {
  if (align <= 16) return malloc(size);
  void* p = NULL;
  return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: alloc_big_pairs SIZE ALIGN PAIRS\n");
    return 2;
  }
  const size_t size = strtoull(argv[1], NULL, 0), align = strtoull(argv[2], NULL, 0);
  const long pairs = strtol(argv[3], NULL, 0);
  for (long i = 0; i < pairs; ++i) {
    unsigned char* p = get(size, align);
    if (!p) {
      printf("pairs %ld rss_kib %ld\n", i, hwm_kib());
      void* two = malloc(2u << 20);
      long small = 0;
      while (small < 100000 && malloc(200)) ++small;
      printf("failed at pair %ld; then malloc(2 MiB) %s, malloc(200) %ld of 100000\n", i,
             two ? "ok" : "NULL", small);
      return 1;
    }
    if (align > 16 && (size_t)p % align) {
      fprintf(stderr, "pair %ld: %p not aligned to %zu\n", i, (void*)p, align);
      return 1;
    }
    p[0] = 1;
    p[size - 1] = 2;
    free(p);
  }
  void* two = malloc(2u << 20);
  if (!two) {
    fprintf(stderr, "malloc(2 MiB) failed after the pairs\n");
    return 1;
  }
  for (long i = 0; i < 100000; ++i)
    if (!malloc(200)) {
      fprintf(stderr, "malloc(200) failed at %ld after the pairs\n", i);
      return 1;
    }
  printf("pairs %ld rss_kib %ld\n", pairs, hwm_kib());
  printf("ok\n");
  return 0;
}
