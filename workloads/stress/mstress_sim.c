/* mstress_sim: threads allocating and freeing with a mix of lifetimes, in the manner of
   mimalloc's stress test.

   Each round a thread makes N objects (sizes mostly small, some of a few KiB, a few up
   to 1 MiB); each is
     short-lived (75%): freed at the end of the round, in shuffled order;
     medium (20%):      kept 4 rounds in the thread's own ring, then freed;
     transferred (5%):  swapped into a random cell of a table shared by all threads; what
                        was there (another thread's object, usually) is freed here.
   At round ROUNDS/4 every thread builds a big retained set (RETAIN MiB in all, objects of
   64 B..4 KiB) and holds it for 4 rounds; then it is freed, all but nothing.  After the
   release a barrier and the line "mstress_sim: STEADY released" (the suite's steady-state
   marker); the remaining rounds run at the small working set.  A thread's choices come
   from (seed, thread, round), so the objects made, and the checksum, are the same for a
   seed whichever thread frees them.

   mstress_sim [-t THREADS=4] [-s SCALE=1] [-r SEED=1] [-R RETAIN_MIB=256]
   40 rounds of 150000 * SCALE objects per thread. */
#include "stress_common.h"
#include <stdatomic.h>

#define RING 4
#define TABLE 8192

static long g_retain_mib = 256;
static _Atomic(void *) g_table[TABLE];

static int other_opt(char opt, const char *v) {
  return opt == 'R' && parse_long_min(v, 0, &g_retain_mib);
}

static void vec_free_all(vec_t *v, rng_t *shuffle, tally_t *t) {
  if (shuffle)
    for (long i = v->n - 1; i > 0; i--) {
      long j = (long)rng_below(shuffle, (uint64_t)i + 1);
      void *x = v->p[i]; v->p[i] = v->p[j]; v->p[j] = x;
    }
  for (long i = 0; i < v->n; i++) obj_free(v->p[i], t);
  v->n = 0;
}

typedef struct {
  int id;
  common_args_t *args;
  long rounds, per_round;
  pthread_barrier_t *barrier;
  tally_t tally;
  uint64_t ops;
} worker_t;

static size_t pick_size(rng_t *r) {
  uint64_t u = rng_below(r, 1000);
  if (u < 700) return (size_t)rng_range(r, 16, 128);
  if (u < 950) return (size_t)rng_range(r, 129, 2048);
  if (u < 999) return (size_t)rng_range(r, 2049, 32768);
  return (size_t)rng_range(r, 65536, 1 << 20);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  int T = w->args->threads;
  long retain_at = w->rounds / 4, release_at = retain_at + RING;
  vec_t shortv = {0}, ring[RING] = {{0}}, retained = {0};
  for (long round = 0; round < w->rounds; round++) {
    rng_t r = rng_for(w->args->seed, (uint64_t)w->id, (uint64_t)round);
    vec_t *medium = &ring[round % RING];
    vec_free_all(medium, &r, &w->tally);  /* made RING rounds ago */
    if (round == retain_at) {
      size_t goal = (size_t)g_retain_mib * 1024 * 1024 / (size_t)T, made = 0;
      while (made < goal) {
        size_t sz = (size_t)rng_range(&r, 64, 4096);
        vec_push(&retained, obj_new(sz, rng_next(&r)));
        made += sz;
        w->ops++;
      }
    }
    if (round == release_at) {
      vec_free_all(&retained, &r, &w->tally);
      pthread_barrier_wait(w->barrier);
      if (w->id == 0) mark_steady("mstress_sim", "released");
    }
    for (long k = 0; k < w->per_round; k++) {
      size_t sz = pick_size(&r);
      uint64_t tag = rng_next(&r);
      uint64_t fate = rng_below(&r, 100);
      void *p = obj_new(sz, tag);
      if (fate < 75) {
        vec_push(&shortv, p);
      } else if (fate < 95) {
        vec_push(medium, p);
      } else {
        void *old = atomic_exchange(&g_table[rng_below(&r, TABLE)], p);
        obj_free(old, &w->tally);
      }
    }
    w->ops += (uint64_t)w->per_round;
    vec_free_all(&shortv, &r, &w->tally);
  }
  for (int i = 0; i < RING; i++) { vec_free_all(&ring[i], NULL, &w->tally); free(ring[i].p); }
  vec_free_all(&retained, NULL, &w->tally);
  free(shortv.p); free(retained.p);
  return NULL;
}

int main(int argc, char **argv) {
  common_args_t a;
  parse_common(argc, argv, &a, " [-R RETAIN_MIB]", other_opt);
  int T = a.threads;
  long rounds = 40;
  long per_round = (long)(150000 * a.scale + 0.5);
  if (per_round < 10) per_round = 10;
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)T);
  worker_t *ws = calloc((size_t)T, sizeof *ws);
  pthread_t *th = calloc((size_t)T, sizeof *th);
  double t0 = now_s();
  for (int t = 0; t < T; t++) {
    ws[t] = (worker_t){ .id = t, .args = &a, .rounds = rounds, .per_round = per_round,
                        .barrier = &barrier };
    pthread_create(&th[t], NULL, worker, &ws[t]);
  }
  tally_t total = {0, 0, 0};
  uint64_t ops = 0;
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    add_worker(&total, &ops, &ws[t].tally, ws[t].ops);
  }
  for (long i = 0; i < TABLE; i++) obj_free(atomic_exchange(&g_table[i], NULL), &total);
  double secs = now_s() - t0;
  report("mstress_sim", &a, ops, secs, total.sum, total.errors);
  free(ws); free(th);
  pthread_barrier_destroy(&barrier);
  return total.errors ? 1 : 0;
}
