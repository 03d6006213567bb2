/* Online, counterfactual lifetime prediction (llama-paper §2.3).
 *
 * With LIFETIME_MODEL_LIB set to a shared build of an exported model (the launcher's
 * `lifetime profile --model DIR` makes one), every sampled allocation gets a predicted
 * lifetime class at allocation time, recorded in its sample; the allocation itself is
 * untouched.  The prediction goes through the model library's thread-local §2.3 cache,
 * keyed by the allocation site's return address, stack height and size; on a miss the
 * frames come from the in-process symbolizer (symtab.c), cut into the model's context
 * (context.c: allocator and the model's wrappers stripped) exactly as the offline
 * dataset cuts them, and the model runs.  A model whose context definition this
 * runtime does not implement is refused.
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
#define CONTEXT_VERSION "lifetime-context-v2" /* pipeline/context.py: CONTEXT_VERSION */

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
/* Frame strings of a context, one set per predictor, used under its pool_lock: room for
 * a whole stack (LT_MAX_FRAMES), so no model depth is ever cut short (128 KiB of bss,
 * untouched without a model; too big for a malloc caller's stack). */
static char pool_names[POOL][LT_MAX_FRAMES][NAME_CAP];
static int enabled;
/* The context's depth: the model's max_frames (its ContextDefinition, exported in
 * lifetime_model_info), exactly as the dataset cut it.  A stack holds at most
 * LT_MAX_FRAMES frames, so a deeper model reads at most that many, offline too. */
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
  if (!info->context_version || strcmp(info->context_version, CONTEXT_VERSION) != 0) {
    lt_log("LIFETIME_MODEL_LIB: the model's context definition is not ", CONTEXT_VERSION,
           "; predictions off");
    return;
  }
  if (!lt_context_set_wrappers(info->wrappers, info->num_wrappers)) {
    lt_log("LIFETIME_MODEL_LIB: too many allocation wrappers; predictions off", NULL, NULL);
    return;
  }
  if (info->max_frames < 1) {
    lt_log("LIFETIME_MODEL_LIB: the model reads no frames; predictions off", NULL, NULL);
    return;
  }
  model_frames = info->max_frames < LT_MAX_FRAMES ? info->max_frames : LT_MAX_FRAMES;
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
  int start, depth; /* the context's first frame (lt_context_start), the stack's depth */
  char (*names)[NAME_CAP];
};

/* lifetime_frames_fn: the context's frame strings. */
static int get_frames(void *opaque, const char **frames, size_t *lengths, int max_frames) {
  struct frames_ctx *c = opaque;
  int n = 0;
  if (max_frames > model_frames) max_frames = model_frames;
  for (int i = c->start; i < c->depth && n < max_frames; i++, n++) {
    const char *base;
    int resolved;
    size_t len = lt_symbolize(c->addresses[i], c->names[n], NAME_CAP, &base, &resolved);
    lengths[n] = lt_normalize_frame(c->names[n], len);
    frames[n] = c->names[n];
  }
  atomic_fetch_add_explicit(&lt_online.model_runs, 1, memory_order_relaxed);
  return n;
}

/* Each frame's kind (lt_frame_kind: allocator, wrapper), memoized per address in a
 * fixed table, so each distinct frame is symbolized once.  The context starts at
 * lt_context_start, and the cache key's return address is that frame's: malloc's own
 * caller is often operator new, a std:: container or a program's zmalloc, shared by
 * every site that allocates through it. */
#define KIND_MEMO 4096
static _Atomic uint64_t kind_memo[KIND_MEMO]; /* (address << 3) | kind; 0: empty */

static int frame_kind(uintptr_t a) {
  size_t slot = (size_t)(((uint64_t)a * 0x9E3779B97F4A7C15ull) >> 52) % KIND_MEMO;
  uint64_t e = atomic_load_explicit(&kind_memo[slot], memory_order_relaxed);
  if (e && (e >> 3) == (uint64_t)a) return (int)(e & 7);
  char name[NAME_CAP];
  const char *base;
  int resolved;
  size_t len = lt_symbolize(a, name, sizeof name, &base, &resolved);
  int kind = lt_frame_kind(name, len, base, resolved);
  atomic_store_explicit(&kind_memo[slot], ((uint64_t)a << 3) | (uint64_t)kind,
                        memory_order_relaxed);
  return kind;
}

int lt_online_predict(const uintptr_t *addresses, int depth, uintptr_t ra, uintptr_t height,
                      size_t size, int *cache_hit, uint64_t *ns) {
  if (!enabled) return -1;
  uint64_t t0 = lt_mono_ns();
  int kinds[LT_MAX_FRAMES];
  if (depth > LT_MAX_FRAMES) depth = LT_MAX_FRAMES;
  for (int i = 0; i < depth; i++) kinds[i] = frame_kind(addresses[i]);
  int start = lt_context_start(kinds, depth);
  if (start < depth) ra = addresses[start];
  unsigned slot = (unsigned)lt_tls.tid % POOL;
  struct frames_ctx ctx = {addresses, start, depth, pool_names[slot]};
  lifetime_cache *cache = api.cache_tl();
  lifetime_cache_stats before, after;
  api.cache_stats(cache, &before);
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
