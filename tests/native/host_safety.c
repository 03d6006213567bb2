/* Host behaviours the sampler must not change (tests/test_host_safety.py).
 * Usage: host_safety MODE [ARGS], MODE one of
 *   alarm N        N malloc/free of 1..2000 bytes while a 200 us SIGALRM timer's
 *                  handler mallocs and frees too (alarm_loop.h); prints
 *                  "alarm ok HANDLED"
 *   setxid         allocates, then setresgid/setresuid to 65534 (as root), prints
 *                  "setxid ok"
 *   threads        allocates; prints "threads N" (Threads: of /proc/self/status)
 *   loop           forever: malloc+free of 4200 bytes; every 10 ms prints
 *                  "ALLOCS MONO_NS" (allocations so far, CLOCK_MONOTONIC)
 *   none           nothing at all (no allocation): a zero-sample process
 *   daemon FILE    20000 x malloc+free of 3000 bytes, a live 7777-byte object, then
 *                  daemon(0, 0); the child writes its pid to FILE, allocates 5000 x
 *                  6000 bytes and exits
 *   quick          at_quick_exit handler that allocates 100 x 4500 bytes, then
 *                  churn (4200..4299) and quick_exit(6)
 *   execfail SELF  churn A (1100 B), a live 1234-byte object, execv of a missing
 *                  file, execvp of a missing command (3-entry PATH), churn B
 *                  (2200 B); then, if SELF is "-", returns 0, else execv(SELF, image)
 *   image          churn C (5500 B), returns 0
 *   exec PROG      churn A (1100 B), then execv(PROG, {PROG, NULL})
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alarm_loop.h"

static void churn(int n, size_t size) {
  for (int i = 0; i < n; i++) {
    void *volatile p = malloc(size + (size_t)(i % 100));
    free(p);
  }
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void quick_handler(void) { churn(100, 4500); }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "none";
  if (!strcmp(mode, "none")) return 0;
  if (!strcmp(mode, "alarm")) {
    long n = argc > 2 ? atol(argv[2]) : 2000000;
    printf("alarm ok %d\n", alarm_loop(n, 2000));
    return 0;
  }
  if (!strcmp(mode, "setxid")) {
    churn(2000, 3000);
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) {
      perror("setres*id");
      return 1;
    }
    churn(2000, 3000);
    puts("setxid ok");
    return 0;
  }
  if (!strcmp(mode, "threads")) {
    churn(20000, 3000);
    printf("threads %d\n", proc_threads());
    return 0;
  }
  if (!strcmp(mode, "loop")) {
    uint64_t allocs = 0, next = 0;
    for (;;) {
      void *volatile p = malloc(4200);
      free(p);
      allocs++;
      if (allocs % 8 == 0) usleep(100); /* a bounded sample rate: a modest file */
      uint64_t now = mono_ns();
      if (now >= next) {
        printf("%llu %llu %d\n", (unsigned long long)allocs, (unsigned long long)now, proc_threads());
        fflush(stdout);
        next = now + 10000000;
      }
    }
  }
  if (!strcmp(mode, "daemon")) {
    churn(20000, 3000);
    void *volatile kept = malloc(7777);
    (void)kept;
    fflush(stdout);
    if (daemon(0, 0) != 0) {
      perror("daemon");
      return 1;
    }
    churn(5000, 6000);
    FILE *f = fopen(argv[2], "w");
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    return 0;
  }
  if (!strcmp(mode, "quick")) {
    at_quick_exit(quick_handler);
    churn(200, 4200);
    puts("quick");
    fflush(stdout);
    quick_exit(6);
  }
  if (!strcmp(mode, "image")) {
    churn(200, 5500);
    return 0;
  }
  if (!strcmp(mode, "execfail") || !strcmp(mode, "exec")) {
    churn(200, 1100);
    void *volatile kept = malloc(1234);
    (void)kept;
    fflush(stdout);
    if (!strcmp(mode, "exec")) {
      execv(argv[2], (char *const[]){argv[2], NULL});
      perror("execv");
      return 127;
    }
    char *const av[] = {"nope", NULL};
    if (execv("/nonexistent/dir/prog", av) != -1 || errno != ENOENT) return 2;
    setenv("PATH", "/nonexistent/a:/nonexistent/b:/nonexistent/c", 1);
    if (execvp("lifetime-no-such-command", av) != -1 || errno != ENOENT) return 3;
    churn(200, 2200);
    printf("execfail continued errno %d\n", errno);
    fflush(stdout);
    if (argc > 2 && strcmp(argv[2], "-") != 0) {
      execv(argv[2], (char *const[]){argv[2], "image", NULL});
      return 4;
    }
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
