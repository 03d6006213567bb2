/* N children forked in a loop, each making the same M allocations: allocation i has
 * size BASE + i (so a sample's size names its index) and is freed right away.  Under
 * the sampler every child must draw its own sample points (tests/test_sampler_fork.py).
 * Usage: fork_many N M BASE [thread]   prints "parent PID" once all children have
 * exited; "thread": each child allocates on a thread it creates. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void allocate(int m, size_t base) {
  for (int i = 0; i < m; i++) {
    char *volatile p = malloc(base + (size_t)i);
    if (!p) abort();
    p[0] = 1;
    free(p);
  }
}

static int m_;
static size_t base_;

static void *thread_main(void *arg) {
  (void)arg;
  allocate(m_, base_);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  int n = atoi(argv[1]), m = atoi(argv[2]);
  size_t base = (size_t)atol(argv[3]);
  int threaded = argc > 4 && strcmp(argv[4], "thread") == 0;
  m_ = m;
  base_ = base;
  allocate(m, base + (size_t)m); /* the parent's own, outside the children's sizes */
  for (int k = 0; k < n; k++) {
    pid_t pid = fork();
    if (pid < 0) return 3;
    if (pid == 0) {
      pthread_t th;
      if (!threaded) allocate(m, base);
      else if (pthread_create(&th, NULL, thread_main, NULL) != 0 || pthread_join(th, NULL) != 0)
        exit(4);
      exit(0);
    }
  }
  int status, failed = 0;
  while (wait(&status) > 0)
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  printf("parent %d\n", (int)getpid());
  return failed;
}
