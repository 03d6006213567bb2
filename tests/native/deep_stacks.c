/* Allocations under deep, varied call chains without frame pointers (compiled with
 * -O2 -fomit-frame-pointer): recursion through three mutually recursive functions
 * with different frame layouts; then a phase where the main thread spins (without
 * allocating) at the bottom of a deep recursion while a SIGALRM handler allocates,
 * so those stacks go through the kernel's signal frame (__restore_rt). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static void *volatile sink;
static volatile int ticks;
__attribute__((noinline)) static int a(int d, int x);
__attribute__((noinline)) static int b(int d, int x);

__attribute__((noinline)) static int c(int d, int x) {
  char buf[64 + (unsigned)x % 64];
  memset(buf, x, sizeof buf);
  if (d <= 0) {
    sink = malloc(100 + (size_t)x % 900);
    free(sink);
    return buf[3];
  }
  return a(d - 1, x + buf[5]) + 1;
}
__attribute__((noinline)) static int b(int d, int x) {
  if (d <= 0) {
    void *p = calloc(1, 2048);
    sink = p;
    free(p);
    return x;
  }
  return (x & 1 ? c(d - 1, x * 3) : a(d - 1, x + 7)) + 2;
}
__attribute__((noinline)) static int a(int d, int x) {
  double v[4] = {x, x * 2.0, x * 3.0, d};
  if (d <= 0) {
    sink = realloc(NULL, 512 + (size_t)v[1] % 100);
    free(sink);
    return (int)v[2];
  }
  return b(d - 1, x + (int)v[3]) + 3;
}

static void on_alarm(int sig) {
  (void)sig;
  /* safe here: the interrupted code (spin) never allocates */
  void *p = malloc(3000);
  sink = p;
  free(p);
  ticks++;
}

__attribute__((noinline)) static int spin(int d, int want) {
  if (d > 0) return spin(d - 1, want) + 1;
  while (ticks < want) __asm__ volatile("" ::: "memory");
  return 0;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20000;
  long sum = 0;
  for (int i = 0; i < rounds; i++) sum += a(i % 150, i);
  signal(SIGALRM, on_alarm);
  struct itimerval it = {{0, 1000}, {0, 1000}};
  setitimer(ITIMER_REAL, &it, NULL);
  sum += spin(20, 50);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("sum %ld ticks %d\n", sum, ticks);
  return 0;
}
