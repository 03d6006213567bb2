/* Fixed workload for the sampling-rate test: N allocations cycling through the sizes
 * given on the command line, each freed right away.
 * Usage: alloc_count N SIZE [SIZE...]   prints "allocated BYTES in N calls". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *alloc_one(size_t size) {
  char *p = malloc(size);
  if (!p) abort();
  p[0] = 1;
  return p;
}

__attribute__((noinline)) unsigned long long alloc_loop(long n, const size_t *sizes, int k) {
  unsigned long long total = 0;
  for (long i = 0; i < n; i++) {
    size_t size = sizes[i % k];
    void *volatile p = alloc_one(size);
    total += size;
    free(p);
  }
  return total;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  long n = atol(argv[1]);
  int k = argc - 2;
  size_t sizes[64];
  for (int i = 0; i < k && i < 64; i++) sizes[i] = (size_t)atol(argv[2 + i]);
  unsigned long long total = alloc_loop(n, sizes, k < 64 ? k : 64);
  printf("allocated %llu in %ld calls\n", total, n);
  return 0;
}
