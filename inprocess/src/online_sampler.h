/* The sampler's side of online.c: counterfactual predictions for sampled allocations
 * (LIFETIME_MODEL_PLUGIN, online.h) and their counters.  C only (atomics). */
#ifndef LT_ONLINE_SAMPLER_H
#define LT_ONLINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* ---- online.c: counterfactual predictions ---- */
struct lt_online_stats {
  _Atomic uint64_t calls, hits, misses, model_runs, revalidations, disagreements, failures,
      total_ns;
};
LT_HIDDEN extern struct lt_online_stats lt_online;
LT_HIDDEN extern char lt_model_path[4096];
LT_HIDDEN extern char lt_model_id[128];
LT_HIDDEN void lt_online_init(void);      /* constructor time */
LT_HIDDEN int lt_online_enabled(void);
LT_HIDDEN void lt_online_reset_child(void);
/* The size the cache is keyed on (online.h). */
LT_HIDDEN size_t lt_online_key_size(size_t size);
/* The predicted class (-1: none) of a sampled allocation. */
LT_HIDDEN int lt_online_predict(const uintptr_t *addresses, int depth, uintptr_t ra,
                                uintptr_t height, size_t size, int *cache_hit, uint64_t *ns);

#endif
