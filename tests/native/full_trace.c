/* A known allocation sequence for the sampler's full-trace mode
 * (tests/test_sampler_full_trace.py, benchmarks/full_trace_overhead.py).
 *
 *   full_trace seq N      N allocations between two marker allocations (size
 *                         MARK_BEGIN / MARK_END): sizes 1 + (i * 7919) % 5000, through
 *                         malloc, calloc, posix_memalign(64), aligned_alloc(32) and
 *                         realloc(NULL, n) in turn; then every one but each 10th freed
 *                         in a shuffled order (the 10th ones stay live: censored).
 *                         Afterwards prints the log: "a SIZE FN" per allocation in
 *                         order, "f INDEX" per free in order, "live INDEX" for each
 *                         object never freed (FN as profile.proto's AllocFunction).
 *   full_trace live M     M 16-byte objects live at once between the markers, then
 *                         freed in allocation order; prints "live M".
 *   full_trace churn M [T]  M malloc/free pairs (sizes 8..512) on T threads (default 1),
 *                         with 1024 objects live per thread: allocations/s of a tight
 *                         loop; prints "churn ALLOCS SECONDS".
 *   full_trace threads M  4 threads, each allocates M objects that another thread frees
 *                         (handed over through a mutex-protected ring); prints "threads".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MARK_BEGIN 987651
#define MARK_END 987652

static void marker(size_t n) {
  void *volatile p = malloc(n);
  free(p);
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int seq(long n) {
  void **ptrs = malloc(sizeof(void *) * (size_t)n);
  int *fns = malloc(sizeof(int) * (size_t)n);
  long *order = malloc(sizeof(long) * (size_t)n);
  if (!ptrs || !fns || !order) return 1;
  marker(MARK_BEGIN);
  for (long i = 0; i < n; i++) {
    size_t size = 1 + (size_t)((i * 7919) % 5000);
    void *p = NULL;
    switch (i % 5) {
      case 0: p = malloc(size); fns[i] = 1; break;
      case 1: p = calloc(1, size); fns[i] = 2; break;
      case 2: if (posix_memalign(&p, 64, size) != 0) p = NULL; fns[i] = 4; break;
      case 3: p = aligned_alloc(32, size); fns[i] = 5; break;
      default: p = realloc(NULL, size); fns[i] = 3; break;
    }
    if (!p) return 1;
    ptrs[i] = p;
  }
  /* free order: a Fisher-Yates shuffle of the indices, each 10th kept live */
  for (long i = 0; i < n; i++) order[i] = i;
  uint64_t s = 42;
  for (long i = n - 1; i > 0; i--) {
    long j = (long)(lcg(&s) % (uint64_t)(i + 1));
    long t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (long k = 0; k < n; k++)
    if (order[k] % 10 != 9) free(ptrs[order[k]]);
  marker(MARK_END);
  for (long i = 0; i < n; i++)
    printf("a %zu %d\n", (size_t)(1 + (size_t)((i * 7919) % 5000)), fns[i]);
  for (long k = 0; k < n; k++)
    if (order[k] % 10 != 9) printf("f %ld\n", order[k]);
  for (long i = 9; i < n; i += 10) printf("live %ld\n", i);
  return 0;
}

static int live(long m) {
  void **ptrs = malloc(sizeof(void *) * (size_t)m);
  if (!ptrs) return 1;
  marker(MARK_BEGIN);
  for (long i = 0; i < m; i++)
    if (!(ptrs[i] = malloc(16))) return 1;
  for (long i = 0; i < m; i++) free(ptrs[i]);
  marker(MARK_END);
  free(ptrs);
  printf("live %ld\n", m);
  return 0;
}

struct churn_arg {
  long m;
  unsigned seed;
};

static void *churn_thread(void *v) {
  struct churn_arg *a = v;
  enum { LIVE = 1024 };
  void *slots[LIVE] = {0};
  uint64_t s = a->seed;
  for (long i = 0; i < a->m; i++) {
    uint64_t r = lcg(&s);
    size_t k = r % LIVE;
    free(slots[k]);
    slots[k] = malloc(8 + (r >> 12) % 505);
  }
  for (int k = 0; k < LIVE; k++) free(slots[k]);
  return NULL;
}

static int churn(long m, int nthreads) {
  if (nthreads < 1 || nthreads > 64) return 1;
  pthread_t th[64];
  struct churn_arg args[64];
  double t0 = now_s();
  for (int i = 0; i < nthreads; i++) {
    args[i].m = m / nthreads;
    args[i].seed = (unsigned)i + 1;
    if (nthreads == 1) {
      churn_thread(&args[0]);
    } else if (pthread_create(&th[i], NULL, churn_thread, &args[i]) != 0) {
      return 1;
    }
  }
  if (nthreads > 1)
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  double dt = now_s() - t0;
  printf("churn %ld %.6f\n", (m / nthreads) * nthreads, dt);
  return 0;
}

/* threads: producer i hands its objects to consumer (i + 1) % 4 (no waits on a full
 * ring: a thread that cannot push drains its own input and yields) */
#define RING 256
struct ring {
  pthread_mutex_t mu;
  void *slot[RING];
  int head, tail;
};
static struct ring rings[4];
static long per_thread;

static void *xthread(void *v) {
  int id = (int)(intptr_t)v;
  struct ring *out = &rings[(id + 1) % 4], *in = &rings[id];
  long produced = 0, consumed = 0;
  void *pending = NULL;
  while (produced < per_thread || consumed < per_thread) {
    int progress = 0;
    if (produced < per_thread) {
      if (!pending) pending = malloc(32 + (size_t)(produced % 200));
      pthread_mutex_lock(&out->mu);
      if ((out->head + 1) % RING != out->tail) {
        out->slot[out->head] = pending;
        out->head = (out->head + 1) % RING;
        pending = NULL;
        produced++;
        progress = 1;
      }
      pthread_mutex_unlock(&out->mu);
    }
    pthread_mutex_lock(&in->mu);
    while (in->head != in->tail) {
      free(in->slot[in->tail]);
      in->tail = (in->tail + 1) % RING;
      consumed++;
      progress = 1;
    }
    pthread_mutex_unlock(&in->mu);
    if (!progress) sched_yield();
  }
  return NULL;
}

static int threads(long m) {
  per_thread = m;
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_mutex_init(&rings[i].mu, NULL);
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, xthread, (void *)(intptr_t)i);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  printf("threads\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: full_trace seq N | live M | churn M [T] | threads M\n");
    return 2;
  }
  long n = atol(argv[2]);
  if (!strcmp(argv[1], "seq")) return seq(n);
  if (!strcmp(argv[1], "live")) return live(n);
  if (!strcmp(argv[1], "churn")) return churn(n, argc > 3 ? atoi(argv[3]) : 1);
  if (!strcmp(argv[1], "threads")) return threads(n);
  return 2;
}
