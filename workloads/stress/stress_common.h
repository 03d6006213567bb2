/* Shared helpers of the stress programs (larson_sim.c, mstress_sim.c, rptest_sim.c).

   Every object carries a 16-byte header: a tag drawn from the allocating thread's
   generator and the object's size; its last byte repeats a hash of both, and one byte
   per 4 KiB page is written so its pages are resident.  Freeing an object checks the
   header and the last byte and adds a hash of (tag, size) to the thread's checksum.
   Every object is freed by the end, so the checksum is the same for a seed whichever
   thread frees what, and whatever the allocator: it depends only on what was allocated. */
#ifndef STRESS_COMMON_H
#define STRESS_COMMON_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

#define OBJ_HEADER 16u

typedef struct { uint64_t s; } rng_t;

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* splitmix64: one stream per (seed, a, b) */
static inline rng_t rng_for(uint64_t seed, uint64_t a, uint64_t b) {
  rng_t r = { mix64(seed * 0x9e3779b97f4a7c15ULL + mix64(a * 0x632be59bd9b4e019ULL + b + 1)) };
  return r;
}
static inline uint64_t rng_next(rng_t *r) {
  r->s += 0x9e3779b97f4a7c15ULL;
  return mix64(r->s);
}
/* uniform in [0, n) */
static inline uint64_t rng_below(rng_t *r, uint64_t n) { return n ? rng_next(r) % n : 0; }
static inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi) {
  return lo + rng_below(r, hi - lo + 1);
}
/* log-uniform in [lo, hi]: small sizes common, big ones rare */
static inline size_t rng_logsize(rng_t *r, size_t lo, size_t hi) {
  double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;
  double v = (double)lo * pow((double)hi / (double)lo, u);
  size_t s = (size_t)v;
  return s < lo ? lo : s > hi ? hi : s;
}

static inline uint8_t obj_mark(uint64_t tag, uint64_t size) { return (uint8_t)mix64(tag ^ (size << 7)); }

__attribute__((unused)) static void *obj_new(size_t size, uint64_t tag) {
  if (size < OBJ_HEADER + 1) size = OBJ_HEADER + 1;
  unsigned char *p = malloc(size);
  if (!p) { fprintf(stderr, "out of memory (%zu bytes)\n", size); exit(2); }
  uint64_t sz = size;
  memcpy(p, &tag, 8);
  memcpy(p + 8, &sz, 8);
  for (size_t off = 4096; off < size - 1; off += 4096) p[off] = (unsigned char)off;
  p[size - 1] = obj_mark(tag, size);
  return p;
}

typedef struct { uint64_t sum, errors, frees; } tally_t;

static void obj_free(void *obj, tally_t *t) {
  if (!obj) return;
  unsigned char *p = obj;
  uint64_t tag, size;
  memcpy(&tag, p, 8);
  memcpy(&size, p + 8, 8);
  if (size <= OBJ_HEADER || size > (1ULL << 34) || p[size - 1] != obj_mark(tag, size)) {
    t->errors++;
  } else {
    t->sum += mix64(tag + size);
  }
  t->frees++;
  free(p);
}

/* A whole-string decimal >= min into *out: 1, or 0 (not a number, or below min). */
static inline int parse_long_min(const char *v, long min, long *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < min) return 0;
  *out = x;
  return 1;
}

/* A growable array of object pointers (the thread's own; realloc'd, never shared). */
typedef struct { void **p; long n, cap; } vec_t;
static inline void vec_push(vec_t *v, void *p) {
  if (v->n == v->cap) {
    v->cap = v->cap ? v->cap * 2 : 1024;
    v->p = realloc(v->p, (size_t)v->cap * sizeof *v->p);
    if (!v->p) { fprintf(stderr, "out of memory\n"); exit(2); }
  }
  v->p[v->n++] = p;
}

/* After pthread_join: one worker's checksum, errors and operations into the totals. */
static inline void add_worker(tally_t *total, uint64_t *ops, const tally_t *t, uint64_t n) {
  total->sum += t->sum;
  total->errors += t->errors;
  *ops += n;
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { int threads; double scale; uint64_t seed; } common_args_t;

static void usage_exit(const char *prog, const char *extra) {
  fprintf(stderr, "usage: %s [-t THREADS] [-s SCALE] [-r SEED]%s\n", prog, extra);
  exit(64);
}

/* -t THREADS (default 4), -s SCALE (work multiplier, default 1), -r SEED (default 1);
   returns the index of the first unparsed argument (extra options are the caller's). */
static int parse_common(int argc, char **argv, common_args_t *a, const char *extra,
                        int (*other)(char opt, const char *val)) {
  a->threads = 4; a->scale = 1.0; a->seed = 1;
  int i = 1;
  for (; i < argc; i++) {
    const char *s = argv[i];
    if (s[0] != '-' || !s[1] || s[2] || i + 1 >= argc) usage_exit(argv[0], extra);
    const char *v = argv[++i];
    char *end;
    switch (s[1]) {
      case 't': a->threads = (int)strtol(v, &end, 10); break;
      case 's': a->scale = strtod(v, &end); break;
      case 'r': a->seed = strtoull(v, &end, 10); break;
      default:
        if (!other || !other(s[1], v)) usage_exit(argv[0], extra);
        end = (char *)v + strlen(v);
    }
    if (*end) usage_exit(argv[0], extra);
  }
  if (a->threads < 1 || a->threads > 256 || !(a->scale > 0)) usage_exit(argv[0], extra);
  return i;
}

/* The result line: NAME: key=value ... checksum=HEX errors=N */
static void report(const char *name, const common_args_t *a, uint64_t ops, double secs,
                   uint64_t checksum, uint64_t errors) {
  printf("%s: threads=%d scale=%g seed=%llu ops=%llu elapsed=%.3f ops/s=%.0f checksum=%016llx errors=%llu\n",
         name, a->threads, a->scale, (unsigned long long)a->seed, (unsigned long long)ops,
         secs, secs > 0 ? ops / secs : 0.0, (unsigned long long)checksum,
         (unsigned long long)errors);
  fflush(stdout);
}

/* A line the suite times: RSS sampled after it is the program's steady state. */
__attribute__((unused)) static void mark_steady(const char *name, const char *what) {
  printf("%s: STEADY %s\n", name, what);
  fflush(stdout);
}

#endif
