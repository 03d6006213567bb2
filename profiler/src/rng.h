/* The sampler's random numbers: per-thread xorshift64* streams seeded by splitmix64,
 * and the Poisson sample points drawn from them.  Static inline: used on the
 * accounting path (account.c) and to reseed a forked child (fork.c). */
#ifndef LT_RNG_H
#define LT_RNG_H

#include <math.h>
#include <stdint.h>

#include "common.h"

static inline uint64_t lt_splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline uint64_t lt_next_rand(struct lt_thread *t) { /* xorshift64* */
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Bytes to the next sample point: ceil(Exp(mean = interval)).  An allocation of n
 * bytes is sampled when the point falls inside it, i.e. with probability
 * P(ceil(T) <= n) = P(T <= n) = 1 - exp(-n / interval). */
static inline int64_t lt_draw(struct lt_thread *t) {
  double u = (double)((lt_next_rand(t) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
  double v = ceil(-log(u) * (double)lt_g.interval);
  if (v < 1) return 1;
  if (v > 4e18) return (int64_t)4e18;
  return (int64_t)v;
}

#endif
