/* Microbenchmark: a malloc+free pair from one call site, single-threaded, the steady
 * state (with a model: every malloc after the first is a §2.3 cache hit).  Times
 * batches of PAIRS pairs with CLOCK_MONOTONIC and prints the per-pair nanoseconds of
 * the batches' p10 / p50 / p90 (a clock read per batch, not per pair: ~0.02 ns each).
 * Run it under each allocator through LD_PRELOAD (benchmarks/allocator_pair_latency.py).
 *
 *   alloc_pair_latency [SIZE [BATCHES [PAIRS]]]     (default 32 2000 1000)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One call site: noinline, so the return address (the cache key) is the same each time. */
__attribute__((noinline)) static void pair(size_t size) {
  void *volatile p = malloc(size);
  if (!p) abort();
  *(volatile char *)p = 1;
  free(p);
}

int main(int argc, char **argv) {
  size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 32;
  int batches = argc > 2 ? atoi(argv[2]) : 2000;
  int pairs = argc > 3 ? atoi(argv[3]) : 1000;
  if (size == 0 || batches < 10 || pairs < 1) {
    fprintf(stderr, "usage: alloc_pair_latency [SIZE [BATCHES>=10 [PAIRS]]]\n");
    return 2;
  }
  for (int i = 0; i < 10000; i++) pair(size); /* warm: caches, the model's first miss */
  double *per = malloc(sizeof *per * (size_t)batches);
  for (int b = 0; b < batches; b++) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < pairs; i++) pair(size);
    per[b] = (double)(now_ns() - t0) / pairs;
  }
  qsort(per, (size_t)batches, sizeof *per, cmp);
  printf("size %zu pairs %d x %d: p10 %.2f ns p50 %.2f ns p90 %.2f ns\n", size, batches, pairs,
         per[batches / 10], per[batches / 2], per[batches * 9 / 10]);
  free(per);
  return 0;
}
