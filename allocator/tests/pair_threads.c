/* Microbenchmark: THREADS threads each doing PAIRS malloc+free pairs of SIZE bytes from
 * one call site (alloc_pair_latency's loop, no shared objects), started together; prints
 * the wall time and the total pairs per second (compare THREADS=1 and 2 under each
 * allocator: how the allocator scales).
 *
 *   alloc_pair_threads [THREADS [PAIRS [SIZE]]]     (default 2 2000000 32)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long pairs;
static size_t size;
static pthread_barrier_t go;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void pair(size_t n) {
  void *volatile p = malloc(n);
  if (!p) abort();
  *(volatile char *)p = 1;
  free(p);
}

static void *run(void *arg) {
  (void)arg;
  for (int i = 0; i < 10000; i++) pair(size);
  pthread_barrier_wait(&go);
  for (long i = 0; i < pairs; i++) pair(size);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  pairs = argc > 2 ? atol(argv[2]) : 2000000;
  size = argc > 3 ? strtoul(argv[3], NULL, 10) : 32;
  if (threads < 1 || threads > 64 || pairs < 1 || size == 0) {
    fprintf(stderr, "usage: alloc_pair_threads [THREADS [PAIRS [SIZE]]]\n");
    return 2;
  }
  pthread_t t[64];
  pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, NULL);
  pthread_barrier_wait(&go);
  uint64_t t0 = now_ns();
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double s = (double)(now_ns() - t0) / 1e9;
  printf("threads %d pairs %ld each: %.3f s, %.2f M pairs/s total\n", threads, pairs, s,
         (double)threads * (double)pairs / s / 1e6);
  return 0;
}
