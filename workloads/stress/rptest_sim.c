/* rptest_sim: random sizes up to a peak, a drain to a few scattered survivors, then a
   steady tail, in the manner of rpmalloc's benchmark (rptest).

   Phases, each thread on its own share (barriers between phases):
     grow    allocate objects of 16 B..16 KB (log-uniform: small ones common) until the
             thread holds PEAK/THREADS MiB; one step in four frees a random held object
             instead of allocating
     swap    every thread frees every other object of its neighbour's set (freed on
             another thread than the one that made it)
     drain   each thread frees its remaining objects in random order but 1 in 20, whose
             survivors are scattered over the pages of the peak; then
             "rptest_sim: STEADY drained" (the suite's steady-state marker)
     tail    churn at the small working set: free a random survivor, put a new object
             of random size in its place, 12M * SCALE times per thread
   What each thread does is drawn from (seed, thread, phase): the same for a seed.

   rptest_sim [-t THREADS=4] [-s SCALE=1] [-r SEED=1] [-p PEAK_MIB=512] */
#include "stress_common.h"

static long g_peak_mib = 512;

static int other_opt(char opt, const char *v) {
  return opt == 'p' && parse_long_min(v, 1, &g_peak_mib);
}

typedef struct worker {
  int id;
  common_args_t *args;
  struct worker *all;
  pthread_barrier_t *barrier;
  vec_t held;
  long tail_ops;
  tally_t tally;
  uint64_t ops;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  int T = w->args->threads;
  uint64_t seed = w->args->seed, id = (uint64_t)w->id;
  /* grow */
  rng_t r = rng_for(seed, id, 1);
  size_t goal = (size_t)g_peak_mib * 1024 * 1024 / (size_t)T, held_bytes = 0;
  while (held_bytes < goal) {
    if (w->held.n > 0 && rng_below(&r, 4) == 0) {
      long i = (long)rng_below(&r, (uint64_t)w->held.n);
      uint64_t sz;
      memcpy(&sz, (char *)w->held.p[i] + 8, 8);
      held_bytes -= sz;
      obj_free(w->held.p[i], &w->tally);
      w->held.p[i] = w->held.p[--w->held.n];
    } else {
      size_t sz = rng_logsize(&r, OBJ_HEADER + 1, 16000);
      vec_push(&w->held, obj_new(sz, rng_next(&r)));
      held_bytes += sz;
    }
    w->ops++;
  }
  pthread_barrier_wait(w->barrier);
  /* swap: free the odd-indexed half of the next thread's set, compacting it */
  worker_t *next = &w->all[(w->id + 1) % T];
  if (next != w) {
    long k = 0;
    for (long i = 0; i < next->held.n; i++) {
      if (i & 1) { obj_free(next->held.p[i], &w->tally); w->ops++; }
      else next->held.p[k++] = next->held.p[i];
    }
    pthread_barrier_wait(w->barrier);
    next->held.n = k;  /* nobody touches next's set until the barrier below */
  }
  pthread_barrier_wait(w->barrier);
  /* drain: keep 1 in 20, scattered */
  r = rng_for(seed, id, 2);
  long k = 0;
  for (long i = 0; i < w->held.n; i++) {
    if (rng_below(&r, 20) == 0) w->held.p[k++] = w->held.p[i];
    else { obj_free(w->held.p[i], &w->tally); w->ops++; }
  }
  w->held.n = k;
  pthread_barrier_wait(w->barrier);
  if (w->id == 0) mark_steady("rptest_sim", "drained");
  /* tail: churn at the small working set */
  r = rng_for(seed, id, 3);
  if (w->held.n == 0) vec_push(&w->held, obj_new(64, rng_next(&r)));
  for (long op = 0; op < w->tail_ops; op++) {
    long i = (long)rng_below(&r, (uint64_t)w->held.n);
    obj_free(w->held.p[i], &w->tally);
    size_t sz = rng_logsize(&r, OBJ_HEADER + 1, 16000);
    w->held.p[i] = obj_new(sz, rng_next(&r));
    w->ops++;
  }
  for (long i = 0; i < w->held.n; i++) obj_free(w->held.p[i], &w->tally);
  w->held.n = 0;
  return NULL;
}

int main(int argc, char **argv) {
  common_args_t a;
  parse_common(argc, argv, &a, " [-p PEAK_MIB]", other_opt);
  int T = a.threads;
  long tail_ops = (long)(12000000 * a.scale + 0.5);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)T);
  worker_t *ws = calloc((size_t)T, sizeof *ws);
  pthread_t *th = calloc((size_t)T, sizeof *th);
  double t0 = now_s();
  for (int t = 0; t < T; t++) {
    ws[t] = (worker_t){ .id = t, .args = &a, .all = ws, .barrier = &barrier,
                        .tail_ops = tail_ops };
  }
  for (int t = 0; t < T; t++) pthread_create(&th[t], NULL, worker, &ws[t]);
  tally_t total = {0, 0, 0};
  uint64_t ops = 0;
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < T; t++) {
    total.sum += ws[t].tally.sum;
    total.errors += ws[t].tally.errors;
    ops += ws[t].ops;
    free(ws[t].held.p);
  }
  double secs = now_s() - t0;
  report("rptest_sim", &a, ops, secs, total.sum, total.errors);
  free(ws); free(th);
  pthread_barrier_destroy(&barrier);
  return total.errors ? 1 : 0;
}
