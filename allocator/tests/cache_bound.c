/* The thread caches' global bound: THREADS threads each allocate and free objects of 24
 * classes (1-16 KiB: each class's list can hold 64 KiB, far more than a thread's share),
 * all started first (each thread's share is the bound's over all of them),
 * then wait while the main thread prints the bytes in every thread's cache (mallinfo2's
 * fsmblks under the allocator) with every cache still full.
 *
 *   alloc_cache_bound [THREADS]     (default 32)
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t started, filled, done;

static void *run(void *arg) {
  (void)arg;
  enum { kClasses = 24, kPer = 64 };
  void *p[kClasses][kPer];
  free(malloc(16));  /* this thread's cache exists: the bound counts it */
  pthread_barrier_wait(&started);
  for (int c = 0; c < kClasses; c++)
    for (int i = 0; i < kPer; i++)
      if (!(p[c][i] = malloc(1024 + (size_t)c * 640))) abort();
  for (int c = 0; c < kClasses; c++)
    for (int i = 0; i < kPer; i++) free(p[c][i]);
  pthread_barrier_wait(&filled);
  pthread_barrier_wait(&done);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 32;
  pthread_t t[256];
  if (threads < 1 || threads > 256) return 2;
  pthread_barrier_init(&started, NULL, (unsigned)threads);
  pthread_barrier_init(&filled, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, NULL);
  pthread_barrier_wait(&filled);
  printf("cached %zu\n", mallinfo2().fsmblks);
  pthread_barrier_wait(&done);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  puts("ok");
  return 0;
}
