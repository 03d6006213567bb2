/* Ways a process ends.  Usage: exits MODE, MODE one of
 *   return      return from main          _exit     _exit(3)
 *   Exit        _Exit(4)                  thread    exit(5) from a second thread
 *   loop        allocate forever (killed by the test), prints "looping" first
 * Every mode first allocates and frees (4200..4299 bytes), and keeps one 7000-byte
 * object live. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void churn(int n) {
  for (int i = 0; i < n; i++) {
    void *volatile p = malloc(4200 + (size_t)(i % 100));
    free(p);
  }
}

static void *exiter(void *arg) {
  (void)arg;
  churn(100);
  exit(5);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "return";
  void *volatile kept = malloc(7000);
  churn(200);
  printf("mode %s\n", mode);
  fflush(stdout);
  if (!strcmp(mode, "_exit")) _exit(3);
  if (!strcmp(mode, "Exit")) _Exit(4);
  if (!strcmp(mode, "thread")) {
    pthread_t t;
    pthread_create(&t, NULL, exiter, NULL);
    for (;;) churn(10); /* keeps allocating while the other thread exits */
  }
  if (!strcmp(mode, "loop")) {
    puts("looping");
    fflush(stdout);
    for (;;) {
      churn(100);
      usleep(1000);
    }
  }
  (void)kept;
  return 0;
}
