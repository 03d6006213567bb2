/* fork from a multi-threaded program: 8 threads churn the heap while the main thread
   forks 30 times; each child mallocs, frees and exits 0 (the lock was not left held). */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static atomic_int stop;

static void* churn(void* arg) {
  uint64_t s = 12345 + (uintptr_t)arg;
  void* keep[32] = {0};
  while (!atomic_load(&stop)) {
    int i = (int)(rnd(&s) % 32);
    free(keep[i]);
    keep[i] = malloc(rnd_size(&s) % 100000 + 1);
  }
  for (int i = 0; i < 32; ++i) free(keep[i]);
  return NULL;
}

int main(void) {
  pthread_t t[8];
  for (uintptr_t i = 0; i < 8; ++i) pthread_create(&t[i], NULL, churn, (void*)i);
  for (int f = 0; f < 30; ++f) {
    pid_t pid = fork();
    if (pid < 0) DIE("fork failed");
    if (pid == 0) {
      uint64_t s = 99 + (uint64_t)f;
      void* p[100];
      for (int i = 0; i < 100; ++i) { size_t n = rnd_size(&s); p[i] = malloc(n); fill(p[i], n, 1); }
      for (int i = 0; i < 100; ++i) free(p[i]);
      exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      DIE("child %d: status %#x", f, status);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 8; ++i) pthread_join(t[i], NULL);
  puts("ok");
  return 0;
}
