/* Allocation in signal handlers: two threads malloc/free in a loop while an interval
 * timer's SIGALRM handler (run on whichever thread the kernel picks, often one inside
 * the allocator) mallocs, writes and frees, and also frees blocks the threads handed it.
 * With one non-recursive lock, a handler that interrupts its thread inside the allocator
 * would deadlock; the allocator serves such a request nested (allocator/src/reentry.h).
 * SIGALRM is process-directed and blocked only in the thread running its handler, so the
 * two threads can run the handler at once (one of them waiting on the allocator's lock for
 * many timer periods): the handler's slots are taken and put back with atomic exchanges,
 * each block owned by one handler at a time.
 * Prints the handler's runs and "ok"; a deadlock is the test's timeout.
 *
 *   alloc_signal_malloc [SECONDS]     (default 2)
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define HANDOFF 64
static _Atomic(void *) handoff[HANDOFF]; /* blocks the threads give the handler to free */
static _Atomic(void *) held[16];          /* the handler's own, freed on later runs */
static atomic_long runs, handler_frees;
static atomic_int stop;

static void on_alarm(int sig) {
  (void)sig;
  long n = atomic_fetch_add(&runs, 1);
  size_t size = 16 + (size_t)(n * 37 % 3000);
  char *p = malloc(size);
  if (!p) abort();
  memset(p, 0x5a, size);
  unsigned k = (unsigned)n % 16;
  /* this run's slot: its block (if any) is this run's alone once exchanged out; another
   * run's (a concurrent handler on the other thread) that lands there meanwhile too */
  void *old = atomic_exchange(&held[k], NULL);
  if (old) {
    if (((unsigned char *)old)[0] != 0x5a) abort();
    free(old);
  }
  old = atomic_exchange(&held[k], p);
  if (old) {
    if (((unsigned char *)old)[0] != 0x5a) abort();
    free(old);
  }
  void *q = calloc(1, 64);
  if (!q || ((char *)q)[63]) abort();
  free(q);
  for (int i = 0; i < HANDOFF; i++) {
    void *h = atomic_exchange(&handoff[i], NULL);
    if (h) {
      free(h);
      atomic_fetch_add(&handler_frees, 1);
    }
  }
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *ring[256] = {0};
  unsigned long i = 0;
  while (!atomic_load(&stop)) {
    seed = seed * 1103515245u + 12345u;
    unsigned k = (seed >> 8) % 256;
    if (ring[k]) {
      if (i % 7 == 0) { /* hand it to the handler instead of freeing it */
        void *expect = NULL;
        if (atomic_compare_exchange_strong(&handoff[(seed >> 4) % HANDOFF], &expect, ring[k])) ring[k] = NULL;
      }
      free(ring[k]);
    }
    size_t size = 8 + (seed >> 16) % 4096;
    ring[k] = malloc(size);
    if (!ring[k]) abort();
    memset(ring[k], 1, size < 64 ? size : 64);
    if (i % 1000 == 0) ring[k] = realloc(ring[k], size * 2);
    i++;
  }
  for (int k = 0; k < 256; k++) free(ring[k]);
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}}; /* every 200 us */
  setitimer(ITIMER_REAL, &it, NULL);
  pthread_t t;
  pthread_create(&t, NULL, worker, (void *)1);
  struct timespec end;
  clock_gettime(CLOCK_MONOTONIC, &end);
  end.tv_sec += (time_t)seconds;
  end.tv_nsec += (long)((seconds - (time_t)seconds) * 1e9);
  if (end.tv_nsec >= 1000000000L) end.tv_sec++, end.tv_nsec -= 1000000000L;
  /* the main thread works too, until the deadline */
  void *ring[64] = {0};
  unsigned seed = 7;
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec)) break;
    for (int j = 0; j < 1000; j++) {
      seed = seed * 1103515245u + 12345u;
      unsigned k = (seed >> 8) % 64;
      free(ring[k]);
      ring[k] = malloc(16 + (seed >> 16) % 512);
      if (!ring[k]) abort();
    }
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  for (int k = 0; k < 64; k++) free(ring[k]);
  for (int i = 0; i < 16; i++) free(atomic_exchange(&held[i], NULL)); /* (a late handler may still run) */
  printf("handler runs %ld, handler frees of handed blocks %ld\nok\n", atomic_load(&runs),
         atomic_load(&handler_frees));
  return 0;
}
