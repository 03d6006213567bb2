/* The project's one latency histogram in C: log2 buckets of nanoseconds, each cut into
 * 2^sub_bits linear sub-buckets (exact below 2^sub_bits ns; percentiles within about
 * 2^-sub_bits of the value), an exact count and sum.  Header only (static inline), fixed
 * size, no malloc: it lives in static memory or inside its owner.  C11 and C++17.
 *
 * Used by the allocator's model runs (allocator/src/predictor.cc, 3 sub-bits, several
 * threads adding: lt_hist_add_atomic) and the simulator's model calls and cache hits
 * (simulator/src/model_predictor.cc, 4 sub-bits, one thread: lt_hist_add).  Readers load
 * with relaxed atomics, so a report may run while other threads add.
 *
 *   lt_latency_hist h = LT_LATENCY_HIST_INIT(4);
 *   lt_hist_add(&h, ns);
 *   double p99 = lt_hist_percentile(&h, 0.99);  // a bucket's midpoint, in ns
 */
#ifndef LT_LATENCY_HISTOGRAM_H
#define LT_LATENCY_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_HIST_MAX_SUB_BITS 4
/* Buckets for sub_bits S: 2^S exact ones (0 .. 2^S - 1 ns), then 2^S for each power of
 * two from 2^S to 2^63. */
#define LT_HIST_BUCKETS(sub_bits) (((size_t)1 << (sub_bits)) * (size_t)(65 - (sub_bits)))

typedef struct lt_latency_hist {
  unsigned sub_bits; /* 1 .. LT_HIST_MAX_SUB_BITS, fixed at initialization */
  uint64_t count, sum;
  uint64_t buckets[LT_HIST_BUCKETS(LT_HIST_MAX_SUB_BITS)];
} lt_latency_hist;

/* An empty histogram (an initializer, C and C++). */
#define LT_LATENCY_HIST_INIT(sub_bits) {(sub_bits), 0, 0, {0}}

static inline size_t lt_hist_bucket(unsigned sub_bits, uint64_t v) {
  const uint64_t exact = (uint64_t)1 << sub_bits;
  if (v < exact) return (size_t)v;
  int e = 63 - __builtin_clzll(v); /* >= sub_bits */
  size_t b = (size_t)exact + (size_t)(e - (int)sub_bits) * (size_t)exact +
             (size_t)((v >> (e - (int)sub_bits)) & (exact - 1));
  size_t last = LT_HIST_BUCKETS(sub_bits) - 1;
  return b < last ? b : last;
}

/* The midpoint of a bucket, in ns. */
static inline double lt_hist_midpoint(unsigned sub_bits, size_t b) {
  const size_t exact = (size_t)1 << sub_bits;
  if (b < exact) return (double)b;
  int e = (int)((b - exact) / exact) + (int)sub_bits;
  double w = (double)((uint64_t)1 << (e - (int)sub_bits));
  double lo = (double)((uint64_t)1 << e) + (double)((b - exact) % exact) * w;
  return lo + w / 2;
}

/* One writer at a time. */
static inline void lt_hist_add(lt_latency_hist *h, uint64_t ns) {
  ++h->count;
  h->sum += ns;
  ++h->buckets[lt_hist_bucket(h->sub_bits, ns)];
}

/* Any number of writers (relaxed atomic adds). */
static inline void lt_hist_add_atomic(lt_latency_hist *h, uint64_t ns) {
  __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->sum, ns, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->buckets[lt_hist_bucket(h->sub_bits, ns)], 1, __ATOMIC_RELAXED);
}

static inline uint64_t lt_hist_count(const lt_latency_hist *h) {
  return __atomic_load_n(&h->count, __ATOMIC_RELAXED);
}

static inline uint64_t lt_hist_sum(const lt_latency_hist *h) {
  return __atomic_load_n(&h->sum, __ATOMIC_RELAXED);
}

static inline double lt_hist_mean(const lt_latency_hist *h) {
  uint64_t n = lt_hist_count(h);
  return n ? (double)lt_hist_sum(h) / (double)n : 0.0;
}

/* The midpoint of the bucket that holds the q-quantile (rank floor(q * (n - 1)) + 1 of
 * the n values the buckets hold); 0 when empty. */
static inline double lt_hist_percentile(const lt_latency_hist *h, double q) {
  const size_t nb = LT_HIST_BUCKETS(h->sub_bits);
  uint64_t n = 0;
  for (size_t i = 0; i < nb; i++) n += __atomic_load_n(&h->buckets[i], __ATOMIC_RELAXED);
  if (!n) return 0.0;
  uint64_t rank = (uint64_t)(q * (double)(n - 1)) + 1, seen = 0;
  for (size_t i = 0; i < nb; i++) {
    seen += __atomic_load_n(&h->buckets[i], __ATOMIC_RELAXED);
    if (seen >= rank) return lt_hist_midpoint(h->sub_bits, i);
  }
  return lt_hist_midpoint(h->sub_bits, nb - 1);
}

#ifdef __cplusplus
}
#endif

#endif
