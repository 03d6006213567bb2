/* The allocation loop under a SIGALRM timer, shared by host_safety.c (`alarm`, the real
 * sampler preloaded) and harness_signals.c (the sampler's sources linked in, hooks
 * called as lt_malloc/lt_free).  Define ALARM_MALLOC and ALARM_FREE before including
 * it to allocate through something other than malloc/free.
 *
 * A 200 us timer's handler allocates past the tcache (2000..3999 bytes: glibc's arena,
 * its lock when the process is multi-threaded) while the main thread allocates
 * 1..max_size bytes; the sampler under test must let the program finish and add no
 * thread (proc_threads). */
#ifndef LIFETIME_ALARM_LOOP_H
#define LIFETIME_ALARM_LOOP_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#ifndef ALARM_MALLOC
#define ALARM_MALLOC malloc
#define ALARM_FREE free
#endif

static volatile sig_atomic_t alarm_handled;

static void alarm_allocate(int sig) {
  (void)sig;
  void *volatile p = ALARM_MALLOC(2000 + (size_t)(alarm_handled % 2000));
  ALARM_FREE(p);
  alarm_handled++;
}

/* Threads: of /proc/self/status (-1 if unreadable). */
static int proc_threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

/* n allocations of 1..max_size bytes under the timer; returns 1 if the handler ran.
 * glibc's malloc is not async-signal-safe: a handler that re-entered the arena code
 * the main thread was in (sysmalloc growing the heap, or a bin the main thread was
 * using) could corrupt it, with or without a sampler (seen under ASan, and when every
 * allocation is traced).  So every size either side uses is warmed and the heap grown
 * once before the timer starts.  With max_size within the tcache (<= 1032 bytes, as
 * harness_signals.c, where ASan showed the corruption) the two never share state. */
static int alarm_loop(long n, size_t max_size) {
  for (size_t w = 1; w <= 4000; w++) {
    void *volatile q = ALARM_MALLOC(w);
    ALARM_FREE(q);
  }
  void *volatile big = ALARM_MALLOC(1 << 20);
  ALARM_FREE(big);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = alarm_allocate;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &it, NULL);
  unsigned x = 1;
  for (long i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    void *volatile p = ALARM_MALLOC(1 + (x >> 16) % max_size);
    ALARM_FREE(p);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  return alarm_handled > 0;
}

#endif
