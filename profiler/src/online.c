/* Online, counterfactual lifetime prediction (llama-paper §2.3).
 *
 * With LIFETIME_MODEL_LIB set to a shared build of an exported model (the launcher's
 * `lifetime profile --model DIR` makes one), every sampled allocation gets a predicted
 * lifetime class at allocation time, recorded in its sample; the allocation itself is
 * untouched.  The prediction goes through the model library's thread-local §2.3 cache,
 * keyed by the allocation's return address, stack height and size; on a miss the
 * frames come from the in-process symbolizer (symtab.c) with allocator frames
 * stripped, exactly as the offline dataset strips them, and the model runs.
 *
 * Start-up work (dlopen, predictors, symbol indexes) happens in the constructor and
 * after dlopen, never inside an allocation.  The prediction path itself does not call
 * malloc.  Predictors are not thread-safe, so a small pool is shared under try-locks.
 * Any failure to load prints one line and leaves plain profiling running.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "lifetime_model.h"

#define POOL 4
#define NAME_CAP 256   /* bytes kept of a frame string; the model reads its first tokens */
#define FRAMES_CAP 32  /* frames handed to the model at most */

static struct {
  const lifetime_model_info *(*info)(void);
  lifetime_predictor *(*create)(void);
  lifetime_cache *(*cache_tl)(void);
  int (*cache_predict)(lifetime_cache *, lifetime_predictor *, uintptr_t, uintptr_t, size_t,
                       lifetime_frames_fn, void *);
  void (*cache_stats)(const lifetime_cache *, lifetime_cache_stats *);
} api;

static lifetime_predictor *pool[POOL];
static lt_lock pool_lock[POOL];
static int enabled;
static int model_frames;
struct lt_online_stats lt_online;
char lt_model_path[4096];
char lt_model_id[128];

#define RESOLVE(field, name)                                  \
  do {                                                        \
    *(void **)&api.field = dlsym(h, name);                    \
    if (!api.field) {                                         \
      lt_log("LIFETIME_MODEL_LIB: ", name, " not found; predictions off"); \
      return;                                                 \
    }                                                         \
  } while (0)

void lt_online_init(void) {
  const char *path = getenv("LIFETIME_MODEL_LIB");
  if (!path || !*path) return;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    lt_log("LIFETIME_MODEL_LIB: cannot load ", path, "; predictions off");
    return;
  }
  RESOLVE(info, "lifetime_model_get_info");
  RESOLVE(create, "lifetime_predictor_create");
  RESOLVE(cache_tl, "lifetime_cache_thread_local");
  RESOLVE(cache_predict, "lifetime_cache_predict");
  RESOLVE(cache_stats, "lifetime_cache_get_stats");
  for (int i = 0; i < POOL; i++) {
    pool[i] = api.create();
    if (!pool[i]) {
      lt_log("LIFETIME_MODEL_LIB: cannot create a predictor; predictions off", NULL, NULL);
      return;
    }
  }
  if (!lt_symtab_refresh()) {
    lt_log("LIFETIME_MODEL_LIB: cannot index symbols; predictions off", NULL, NULL);
    return;
  }
  const lifetime_model_info *info = api.info();
  model_frames = info->max_frames < FRAMES_CAP ? info->max_frames : FRAMES_CAP;
  lt_strlcpy(lt_model_path, path, sizeof lt_model_path);
  lt_strlcpy(lt_model_id, info->model_id ? info->model_id : "", sizeof lt_model_id);
  enabled = 1;
}

int lt_online_enabled(void) { return enabled; }

void lt_online_reset_child(void) {
  for (int i = 0; i < POOL; i++) lt_lock_reset(&pool_lock[i]);
  lt_symtab_reset_child();
}

struct frames_ctx {
  const uintptr_t *addresses;
  int depth;
  char (*names)[NAME_CAP];
};

/* lifetime_frames_fn: the stack's frame strings, allocator frames stripped. */
static int get_frames(void *opaque, const char **frames, size_t *lengths, int max_frames) {
  struct frames_ctx *c = opaque;
  int n = 0, stripping = 1;
  if (max_frames > model_frames) max_frames = model_frames;
  for (int i = 0; i < c->depth && n < max_frames; i++) {
    const char *base;
    int resolved;
    size_t len = lt_symbolize(c->addresses[i], c->names[n], NAME_CAP, &base, &resolved);
    if (stripping && lt_is_allocator_frame(c->names[n], len, base, resolved)) continue;
    stripping = 0;
    frames[n] = c->names[n];
    lengths[n] = len;
    n++;
  }
  atomic_fetch_add_explicit(&lt_online.model_runs, 1, memory_order_relaxed);
  return n;
}

int lt_online_predict(const uintptr_t *addresses, int depth, uintptr_t ra, uintptr_t height,
                      size_t size, int *cache_hit, uint64_t *ns) {
  if (!enabled) return -1;
  uint64_t t0 = lt_mono_ns();
  char names[FRAMES_CAP][NAME_CAP];
  struct frames_ctx ctx = {addresses, depth, names};
  lifetime_cache *cache = api.cache_tl();
  lifetime_cache_stats before, after;
  api.cache_stats(cache, &before);
  unsigned slot = (unsigned)lt_tls.tid % POOL;
  lt_lock_acquire(&pool_lock[slot]);
  int cls = api.cache_predict(cache, pool[slot], ra, height, size, get_frames, &ctx);
  lt_lock_release(&pool_lock[slot]);
  api.cache_stats(cache, &after);
  *cache_hit = after.misses == before.misses;
  *ns = lt_mono_ns() - t0;
  atomic_fetch_add_explicit(&lt_online.calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(*cache_hit ? &lt_online.hits : &lt_online.misses, 1,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&lt_online.revalidations, after.revalidations - before.revalidations,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&lt_online.disagreements, after.disagreements - before.disagreements,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&lt_online.total_ns, *ns, memory_order_relaxed);
  if (cls < 0) atomic_fetch_add_explicit(&lt_online.failures, 1, memory_order_relaxed);
  return cls;
}
