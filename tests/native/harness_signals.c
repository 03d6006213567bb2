/* Sanitizer harness (profiler/CMakeLists.txt): the sampler's sources linked in, hooks
 * called as lt_malloc/lt_free.  A SIGALRM handler allocates past the tcache (glibc's
 * arena lock when the process is multi-threaded) while the main thread allocates
 * (and samples, and flushes every LIFETIME_FLUSH_MS: the handler interrupts the
 * sampler's own slow paths); the process must finish and never gain a thread.  Usage: lifetime_sampler_signals N; prints
 * "signals ok THREADS_BEFORE THREADS_AFTER HANDLED". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

void *lt_malloc(size_t);
void lt_free(void *);
void lt_harness_finish(void);

static volatile sig_atomic_t handled;

static void on_alarm(int sig) {
  (void)sig;
  void *volatile p = lt_malloc(2000 + (size_t)(handled % 2000));
  lt_free(p);
  handled++;
}

static int threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  int before = threads();
  for (size_t n = 1; n <= 1000; n++) { /* every tcache bin the loop uses holds a chunk */
    void *volatile p = lt_malloc(n);
    lt_free(p);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &it, NULL);
  unsigned x = 1;
  for (long i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    /* tcache sizes only: glibc's malloc is not async-signal-safe, and a handler that
     * re-entered the arena code this thread was in could corrupt it (seen under ASan);
     * the handler's sizes are past the tcache and the bins are warm, so the two
     * never share state */
    void *volatile p = lt_malloc(1 + (x >> 16) % 1000);
    lt_free(p);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  int after = threads();
  lt_harness_finish();
  printf("signals ok %d %d %d\n", before, after, handled > 0);
  return 0;
}
