/* Sanitizer harness (profiler/CMakeLists.txt): the sampler's sources linked in, hooks
 * called as lt_malloc/lt_free.  The SIGALRM allocation loop of alarm_loop.h runs on
 * the hooks: the handler interrupts the main thread while it allocates, samples and
 * flushes (every LIFETIME_FLUSH_MS: the sampler's own slow paths); the process must
 * finish and never gain a thread.  Usage: lifetime_sampler_signals N; prints
 * "signals ok THREADS_BEFORE THREADS_AFTER HANDLED". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>

void *lt_malloc(size_t);
void lt_free(void *);
void lt_harness_finish(void);

#define ALARM_MALLOC lt_malloc
#define ALARM_FREE lt_free
#include "alarm_loop.h"

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  int before = proc_threads();
  /* tcache sizes only in the main loop (alarm_loop.h) */
  int handled = alarm_loop(n, 1000);
  int after = proc_threads();
  lt_harness_finish();
  printf("signals ok %d %d %d\n", before, after, handled);
  return 0;
}
