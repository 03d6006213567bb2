/* larson_sim: a server simulation in the manner of Larson and Krishnan's benchmark.

   Each of T threads owns an array of slots during a round; an operation picks a random
   slot, frees what it holds and puts a new object of random size there.  Between
   rounds (a barrier) every array moves on to the next thread, so most objects are freed
   by another thread than the one that allocated them, as a server's requests are
   answered on other threads than the ones that built them.  What each thread does in a
   round is drawn from (seed, thread, round): the run is the same for a seed.

   larson_sim [-t THREADS=4] [-s SCALE=1] [-r SEED=1] [-n SLOTS=5000] [-m MIN=8] [-M MAX=1000]
   100 rounds, each of 200000 * SCALE operations (at least 100) per thread. */
#include "stress_common.h"

static long g_slots = 5000, g_min = 8, g_max = 1000;

static int other_opt(char opt, const char *v) {
  long *to = opt == 'n' ? &g_slots : opt == 'm' ? &g_min : opt == 'M' ? &g_max : NULL;
  return to && parse_long_min(v, 1, to);
}

typedef struct {
  int id;
  common_args_t *args;
  void ***arrays;  /* arrays[a][slot] */
  long rounds, ops_per_round;
  pthread_barrier_t *barrier;
  tally_t tally;
  uint64_t ops;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  int T = w->args->threads;
  /* round -1: fill our own array */
  rng_t r0 = rng_for(w->args->seed, (uint64_t)w->id, 0);
  void **mine = w->arrays[w->id];
  for (long i = 0; i < g_slots; i++)
    mine[i] = obj_new((size_t)rng_range(&r0, (uint64_t)g_min, (uint64_t)g_max), rng_next(&r0));
  pthread_barrier_wait(w->barrier);
  for (long round = 1; round <= w->rounds; round++) {
    void **arr = w->arrays[(w->id + round) % T];
    rng_t r = rng_for(w->args->seed, (uint64_t)w->id, (uint64_t)round);
    for (long k = 0; k < w->ops_per_round; k++) {
      long i = (long)rng_below(&r, (uint64_t)g_slots);
      obj_free(arr[i], &w->tally);
      arr[i] = obj_new((size_t)rng_range(&r, (uint64_t)g_min, (uint64_t)g_max), rng_next(&r));
    }
    w->ops += (uint64_t)w->ops_per_round;
    pthread_barrier_wait(w->barrier);
  }
  return NULL;
}

int main(int argc, char **argv) {
  common_args_t a;
  parse_common(argc, argv, &a, " [-n SLOTS] [-m MIN] [-M MAX]", other_opt);
  if (g_min > g_max) usage_exit(argv[0], " [-n SLOTS] [-m MIN] [-M MAX]");
  int T = a.threads;
  long rounds = 100;
  long ops_per_round = (long)(200000 * a.scale + 0.5);
  if (ops_per_round < 100) ops_per_round = 100;
  void ***arrays = calloc((size_t)T, sizeof *arrays);
  for (int t = 0; t < T; t++) arrays[t] = calloc((size_t)g_slots, sizeof **arrays);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)T);
  worker_t *ws = calloc((size_t)T, sizeof *ws);
  pthread_t *th = calloc((size_t)T, sizeof *th);
  double t0 = now_s();
  for (int t = 0; t < T; t++) {
    ws[t] = (worker_t){ .id = t, .args = &a, .arrays = arrays, .rounds = rounds,
                        .ops_per_round = ops_per_round, .barrier = &barrier };
    pthread_create(&th[t], NULL, worker, &ws[t]);
  }
  tally_t total = {0, 0, 0};
  uint64_t ops = 0;
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    add_worker(&total, &ops, &ws[t].tally, ws[t].ops);
  }
  for (int t = 0; t < T; t++) {
    for (long i = 0; i < g_slots; i++) obj_free(arrays[t][i], &total);
    free(arrays[t]);
  }
  double secs = now_s() - t0;
  report("larson_sim", &a, ops, secs, total.sum, total.errors);
  free(arrays); free(ws); free(th);
  pthread_barrier_destroy(&barrier);
  return total.errors ? 1 : 0;
}
