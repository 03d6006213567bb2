/* attribution (LIFETIME_ALLOC_ATTRIBUTE): a program whose survivors pin the heap.
 * keeper() keeps one 96-B object in 32 and temp() makes the other 31, all freed; a second
 * thread frees half of big_keeper()'s 40 KiB objects (cross-thread frees through the
 * thread caches); a fork child allocates and exits.  With an argument, it raises that
 * signal half way (the allocator's dump on demand) and allocates once more.
 * tests/test_allocator_attribution.py reads the dumps. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum { N = 200000, BIG = 64 };
static void *tmp[N], *kept[N / 32], *big[BIG];

__attribute__((noinline)) void *keeper(size_t n) { void *p = malloc(n); memset(p, 1, n); return p; }
__attribute__((noinline)) void *temp(size_t n) { void *p = malloc(n); memset(p, 2, n); return p; }
__attribute__((noinline)) void *big_keeper(size_t n) { void *p = malloc(n); memset(p, 3, n); return p; }

static void *free_half(void *arg) {
  (void)arg;
  for (int i = 0; i < BIG; i += 2) free(big[i]);
  free(temp(32));  /* this thread walks a stack too (its memo goes at thread exit) */
  return NULL;
}

int main(int argc, char **argv) {
  int k = 0;
  for (int i = 0; i < N; ++i) {
    if (i % 32 == 0) kept[k++] = keeper(96);
    tmp[i] = temp(96);
  }
  for (int i = 0; i < BIG; ++i) big[i] = big_keeper(40 << 10);
  pthread_t t;
  if (pthread_create(&t, NULL, free_half, NULL) != 0 || pthread_join(t, NULL) != 0) DIE("thread");
  if (argc > 1) {
    raise(atoi(argv[1]));
    free(malloc(300000));  /* the dump is written by the next locked operation: this one,
                              past the thread caches (a cache hit takes no lock) */
  }
  for (int i = 0; i < N; ++i) free(tmp[i]);
  pid_t child = fork();
  if (child < 0) DIE("fork");
  if (child == 0) {
    for (int i = 0; i < 1000; ++i) free(temp(64));
    exit(0);  /* (exit, not _exit: the child writes its own dump) */
  }
  int status;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) DIE("child");
  free(malloc(16));
  puts("ok");
  return 0;
}
