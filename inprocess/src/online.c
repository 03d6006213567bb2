/* Online, counterfactual lifetime prediction (llama-paper §2.3).
 *
 * With LIFETIME_MODEL_PLUGIN naming an exported model's plugin (online.h: the one
 * contract; `lifetime profile --model DIR` builds and sets it), every sampled allocation
 * gets a predicted lifetime class at allocation time, recorded in its sample; the
 * allocation itself is untouched.  The prediction goes through the model library's thread-local §2.3 cache,
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
#include <errno.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "online_sampler.h"
#include "symtab.h"
#include "unwind.h"
#include "lifetime_model.h"
#include "online.h"

#define POOL 4
#define NAME_CAP 256   /* bytes kept of a frame string; the model reads its first tokens */
#define CONTEXT_VERSION "lifetime-context-v2" /* core/context.py: CONTEXT_VERSION */

static struct {
  const lifetime_model_info *(*info)(void);
  lifetime_predictor *(*create)(void);
  lifetime_cache *(*cache_tl)(void);
  int (*cache_predict)(lifetime_cache *, lifetime_predictor *, uintptr_t, uintptr_t, size_t,
                       lifetime_frames_fn, void *);
  void (*cache_stats)(const lifetime_cache *, lifetime_cache_stats *);
  void (*cache_set_revalidate_every)(lifetime_cache *, uint32_t); /* optional */
  int (*cache_lookup)(lifetime_cache *, uintptr_t, uintptr_t, size_t); /* optional: newer exports */
  uint32_t (*cache_layout)(void); /* optional: since LIFETIME_CACHE_LAYOUT */
  size_t (*info_size)(void); /* optional: absent in exports before the label scheme */
  size_t (*size_frame)(size_t, char *, size_t); /* optional: in exports since size_frame */
} api;

static lifetime_predictor *pool[POOL];
static lt_lock pool_lock[POOL];
/* Frame strings of a context, one set per predictor, used under its pool_lock: room for
 * a whole stack (LT_MAX_FRAMES), so no model depth is ever cut short (128 KiB of bss,
 * untouched without a model; too big for a malloc caller's stack). */
static char pool_names[POOL][LT_MAX_FRAMES][NAME_CAP];
/* The allocator's lazy path (lt_online_classify), per predictor, under its pool_lock:
 * the captured stack and the context's frame lengths and pointers (for the served hook). */
static uintptr_t pool_stack[POOL][LT_MAX_FRAMES];
static size_t pool_lengths[POOL][LT_MAX_FRAMES];
static const char *pool_ptrs[POOL][LT_MAX_FRAMES];
/* A predictor for a model run, locked: the first free one, lowest first, so that a
 * program that predicts from one thread at a time only ever runs predictor 0; when all
 * are busy, the thread's own (tid % POOL), waited for.  Any predictor gives the same
 * prediction.  Predictor 0 is made at start; the others when first needed (each cost
 * ~170 KiB of resident buffers once made: a single-threaded server paid ~500 KiB for
 * three it never ran).  A predictor that cannot be made leaves its slot to the next. */
static unsigned pool_take(uint32_t tid) NO_THREAD_SAFETY_ANALYSIS {
  for (unsigned s = 0; s < POOL; s++)
    if (lt_lock_try(&pool_lock[s])) {
      if (!pool[s]) pool[s] = api.create(); /* (its mallocs are nested: never predicted) */
      if (pool[s]) return s;
      lt_lock_release(&pool_lock[s]);
    }
  unsigned s = tid % POOL;
  for (;;) {
    lt_lock_acquire(&pool_lock[s]);
    if (pool[s]) return s;
    lt_lock_release(&pool_lock[s]);
    s = 0; /* never made: predictor 0 always is */
  }
}
static void pool_give(unsigned slot) NO_THREAD_SAFETY_ANALYSIS {
  lt_lock_release(&pool_lock[slot]);
}
static const char **pool_frame_ptrs(unsigned slot, int n) {
  for (int i = 0; i < n; i++) pool_ptrs[slot][i] = pool_names[slot][i];
  return pool_ptrs[slot];
}
static _Atomic int enabled;
static const lifetime_model_info *model_info;
/* The context's depth: the model's max_frames (its ContextDefinition, exported in
 * lifetime_model_info), exactly as the dataset cut it.  A stack holds at most
 * LT_MAX_FRAMES frames, so a deeper model reads at most that many, offline too. */
static int model_frames;
/* The hit path's state, read inline by the allocator (online.h); the first: the model's
 * frame 0 is the object's size frame. */
int lt_online_size_frame_model;
int lt_online_cache_inline;
int (*lt_online_lookup)(lifetime_cache *, uintptr_t, uintptr_t, size_t);
__thread struct lt_online_thread lt_online_tls __attribute__((tls_model("initial-exec")));
struct lt_online_stats lt_online;
char lt_model_path[4096];
char lt_model_id[128];

/* The reason a load failed, for the caller's one line: "<name> not found", ... */
static int refuse(char *why, size_t cap, const char *a, const char *b, const char *c) {
  size_t n = 0;
  const char *parts[3] = {a, b, c};
  for (int i = 0; i < 3 && cap; i++)
    if (parts[i] && n < cap - 1) n += lt_strlcpy(why + n, parts[i], cap - n);
  return 0;
}

#define RESOLVE(field, name)                                    \
  do {                                                          \
    *(void **)&api.field = dlsym(h, name);                      \
    if (!api.field) return refuse(why, why_cap, name, " not found", NULL); \
  } while (0)

int lt_online_load(const char *path, char *why, size_t why_cap) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return refuse(why, why_cap, "cannot load ", path, NULL);
  RESOLVE(info, "lifetime_model_get_info");
  RESOLVE(create, "lifetime_predictor_create");
  RESOLVE(cache_tl, "lifetime_cache_thread_local");
  RESOLVE(cache_predict, "lifetime_cache_predict");
  RESOLVE(cache_stats, "lifetime_cache_get_stats");
  *(void **)&api.cache_set_revalidate_every = dlsym(h, "lifetime_cache_set_revalidate_every");
  *(void **)&api.info_size = dlsym(h, "lifetime_model_info_size");
  *(void **)&api.size_frame = dlsym(h, "lifetime_size_frame");
  *(void **)&api.cache_lookup = dlsym(h, "lifetime_cache_lookup");
  *(void **)&api.cache_layout = dlsym(h, "lifetime_cache_layout");
  pool[0] = api.create(); /* the others when first needed: pool_take */
  if (!pool[0])
    return refuse(why, why_cap, "cannot create a predictor (out of memory, or this CPU lacks ",
                  "the instructions the model was compiled for: target_cpu in ",
                  "export_manifest.json)");
  if (!lt_symtab_refresh()) return refuse(why, why_cap, "cannot index symbols", NULL, NULL);
  const lifetime_model_info *info = api.info();
  if (!info->context_version || strcmp(info->context_version, CONTEXT_VERSION) != 0)
    return refuse(why, why_cap, "the model's context definition is not ", CONTEXT_VERSION, NULL);
  if (!lt_context_set_wrappers(info->wrappers, info->num_wrappers))
    return refuse(why, why_cap, "too many allocation wrappers", NULL, NULL);
  if (info->max_frames < 1) return refuse(why, why_cap, "the model reads no frames", NULL, NULL);
  model_frames = info->max_frames < LT_MAX_FRAMES ? info->max_frames : LT_MAX_FRAMES;
  lt_strlcpy(lt_model_path, path, sizeof lt_model_path);
  lt_strlcpy(lt_model_id, info->model_id ? info->model_id : "", sizeof lt_model_id);
  model_info = info;
  lt_online_size_frame_model = api.info_size && LIFETIME_MODEL_INFO_HAS(api.info_size(), size_frame) &&
                     info->size_frame;
  if (lt_online_size_frame_model && !api.size_frame)
    return refuse(why, why_cap, "the model reads a size frame its library cannot make", NULL,
                  NULL);
  lt_online_lookup = api.cache_lookup;
  lt_online_cache_inline = api.cache_lookup && api.cache_layout && api.cache_layout() == LIFETIME_CACHE_LAYOUT;
  atomic_store_explicit(&enabled, 1, memory_order_release);
  return 1;
}

const char *lt_online_plugin(void) {
  const char *path = getenv(LT_MODEL_PLUGIN_ENV);
  return path && *path ? path : NULL;
}

void lt_online_init(void) {
  const char *path = lt_online_plugin();
  if (!path) {
    if (getenv("LIFETIME_MODEL_LIB")) /* the sampler's old name: say so, never guess */
      lt_log("LIFETIME_MODEL_LIB: renamed " LT_MODEL_PLUGIN_ENV, "; predictions off", NULL);
    return;
  }
  char why[600];
  if (!lt_online_load(path, why, sizeof why))
    lt_log(LT_MODEL_PLUGIN_ENV ": ", why, "; predictions off");
}

int lt_online_open(const char *path, char *why, size_t why_cap) {
  const char *base;
  if (!lt_exe[0]) lt_program_name(lt_exe, sizeof lt_exe, &base);
  if (!lt_unwind_prepare()) return refuse(why, why_cap, "cannot map the unwinder's rule cache", NULL, NULL);
  lt_unwind_init(LT_UNWIND_BUILTIN);
  return lt_online_load(path, why, why_cap);
}

size_t lt_online_model_info_size(void) {
  return atomic_load_explicit(&enabled, memory_order_acquire) && api.info_size ? api.info_size() : 0;
}

const lifetime_model_info *lt_online_model_info(void) {
  return atomic_load_explicit(&enabled, memory_order_acquire) ? model_info : NULL;
}

int lt_online_enabled(void) { return atomic_load_explicit(&enabled, memory_order_relaxed); }

void lt_online_reset_child(void) {
  for (int i = 0; i < POOL; i++) lt_lock_reset(&pool_lock[i]);
  lt_symtab_reset_child();
}

struct frames_ctx {
  const uintptr_t *addresses; /* NULL: captured in get_frames (lt_online_classify) */
  int start, depth; /* the context's first frame (lt_context_start), the stack's depth */
  char (*names)[NAME_CAP];
  size_t *lengths;  /* the context's frame lengths, for the served hook */
  int frames;       /* frames given to the model; -1: get_frames did not run */
  uintptr_t caller_ra;  /* lazy: where the capture starts (the allocator's caller) */
  uint64_t t0;          /* lazy: when get_frames started */
  unsigned slot;        /* lazy: the pool entry (its stack buffer) */
};

static int context_of(const uintptr_t *addresses, int depth);
static void refresh_due(uint64_t now);

/* lifetime_frames_fn: the context's frame strings. */
static int get_frames(void *opaque, const char **frames, size_t *lengths, int max_frames) {
  struct frames_ctx *c = opaque;
  if (!c->addresses) { /* lazy: the stack only now that the model must run */
    c->t0 = lt_mono_ns();
    refresh_due(c->t0);
    uintptr_t *stack = pool_stack[c->slot];
    int truncated = 0;
    c->depth = lt_capture(stack, LT_MAX_FRAMES, c->caller_ra, &truncated, &lt_tls);
    c->start = context_of(stack, c->depth);
    c->addresses = stack;
  }
  int n = 0;
  if (max_frames > model_frames) max_frames = model_frames;
  for (int i = c->start; i < c->depth && n < max_frames; i++, n++) {
    const char *base;
    int resolved;
    size_t len = lt_symbolize(c->addresses[i], c->names[n], NAME_CAP, &base, &resolved);
    lengths[n] = lt_normalize_frame(c->names[n], len);
    frames[n] = c->names[n];
    if (c->lengths) c->lengths[n] = lengths[n];
  }
  c->frames = n;
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
  if (depth > LT_MAX_FRAMES) depth = LT_MAX_FRAMES;
  int start = context_of(addresses, depth);
  if (start < depth) ra = addresses[start];
  lifetime_cache *cache = api.cache_tl();
  lifetime_cache_stats before, after;
  api.cache_stats(cache, &before);
  unsigned slot = pool_take(lt_tls.tid);
  struct frames_ctx ctx = {addresses, start, depth, pool_names[slot], NULL, -1, 0, 0, slot};
  int cls = api.cache_predict(cache, pool[slot], ra, height, size, get_frames, &ctx);
  pool_give(slot);
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

/* The context's first frame in a captured stack (kinds memoized per address). */
static int context_of(const uintptr_t *addresses, int depth) {
  int kinds[LT_MAX_FRAMES];
  if (depth > LT_MAX_FRAMES) depth = LT_MAX_FRAMES;
  for (int i = 0; i < depth; i++) kinds[i] = frame_kind(addresses[i]);
  return lt_context_start(kinds, depth);
}

/* ---------------- on the allocation path (the LLAMA allocator) ----------------
 * The §2.3 order: the cache first, keyed by what the allocator has in registers (its
 * caller's return address, the stack height, the size class); only a miss (or a
 * revalidation) captures the stack, cuts the context and runs the model, all inside
 * get_frames.  Modules dlopen'ed since the last index become known here, at most once
 * per LT_REFRESH_NS, as the sampler's periodic flush does it. */
#define LT_REFRESH_NS 1000000000ull
static _Atomic uint64_t next_refresh_ns;
static __thread uint64_t seen_revalidations __attribute__((tls_model("initial-exec")));
/* The allocator's revalidation period for every thread's cache (-1: the plugin's own),
 * applied to a thread's cache at its first classify (the sampler never sets it). */
static long revalidate_every = -1;

int lt_online_set_revalidate_every(long n) {
  if (n >= 0 && !api.cache_set_revalidate_every) return 0;
  revalidate_every = n;
  return 1;
}
static lt_online_served_fn served_hook;

static void refresh_due(uint64_t now) {
  uint64_t due = atomic_load_explicit(&next_refresh_ns, memory_order_relaxed);
  if (now >= due && atomic_compare_exchange_strong(&next_refresh_ns, &due, now + LT_REFRESH_NS) &&
      due)
    lt_symtab_refresh(); /* the first miss only arms it: indexed at load */
}

void lt_online_set_served(lt_online_served_fn fn) { served_hook = fn; }

size_t lt_online_key_size(size_t size) { return lt_online_key_size_inline(size); }

/* A thread's first classify: its stack bounds and the plugin's cache of this thread
 * (dynamic TLS: looked up once), published to the inline hit path last. */
lifetime_cache *lt_online_thread_start(void) {
  struct lt_thread *t = &lt_tls;
  if (!t->stack_known) {
    if (!t->tid) t->tid = lt_gettid();
    lt_thread_stack_bounds(t);
  }
  lifetime_cache *cache = lt_online_tls.cache;
  if (!cache) {
    cache = api.cache_tl();
    if (revalidate_every >= 0) api.cache_set_revalidate_every(cache, (uint32_t)revalidate_every);
  }
  lt_online_tls.stack_hi = t->stack_hi;
  lt_online_tls.cache = cache;
  return cache;
}

/* A miss or a due revalidation: the model runs (symbolizing, maybe reading files), under
 * a predictor of the pool.  Out of line, with its frame (the frame arrays: 2 KiB), so
 * that a hit sets up none of it. */
static __attribute__((noinline)) int classify_model(struct lt_thread *t, lifetime_cache *cache,
                                                    uintptr_t ra, uintptr_t height, size_t size,
                                                    uintptr_t caller_ra,
                                                    struct lt_online_call *out) {
  /* errno stays the caller's, for the allocator's hit path does not save it. */
  const int saved_errno = errno;
  unsigned slot = pool_take(t->tid);
  struct frames_ctx ctx = {NULL, 0, 0, pool_names[slot], pool_lengths[slot], -1, caller_ra, 0, slot};
  int cls = api.cache_predict(cache, pool[slot], ra, height, size, get_frames, &ctx);
  if (LT_UNLIKELY(ctx.frames >= 0) && served_hook) {
    if (lt_online_size_frame_model) { /* what the model read: the library's size frame first */
      const char *ptrs[LT_MAX_FRAMES + 1];
      size_t lens[LT_MAX_FRAMES + 1];
      char frame0[32];
      lens[0] = api.size_frame(size, frame0, sizeof frame0);
      ptrs[0] = frame0;
      for (int i = 0; i < ctx.frames; i++) {
        ptrs[i + 1] = pool_names[slot][i];
        lens[i + 1] = ctx.lengths[i];
      }
      served_hook(cls, ptrs, lens, ctx.frames + 1, ctx.depth);
    } else {
      served_hook(cls, (const char *const *)pool_frame_ptrs(slot, ctx.frames), ctx.lengths,
                  ctx.frames, ctx.depth);
    }
  }
  pool_give(slot);
  out->cls = cls;
  out->frames = ctx.frames;
  errno = saved_errno;
  if (LT_LIKELY(ctx.frames < 0)) return cls;
  /* the model ran: a miss, or a revalidation of a cached entry */
  lifetime_cache_stats st;
  api.cache_stats(cache, &st);
  out->ran = st.revalidations != seen_revalidations ? 2 : 1;
  seen_revalidations = st.revalidations;
  out->ns = lt_mono_ns() - ctx.t0;
  return cls;
}

int lt_online_classify(uintptr_t ra, uintptr_t height, size_t size, uintptr_t caller_ra,
                       struct lt_online_call *out) {
  struct lt_thread *t = &lt_tls;
  lifetime_cache *cache = lt_online_tls.cache;
  if (LT_UNLIKELY(!cache)) cache = lt_online_thread_start();
  out->ran = 0;
  out->ns = 0;
  out->frames = -1;
  /* A plain hit needs no predictor: no pool lock (it is shared by threads). */
  if (LT_LIKELY(api.cache_lookup != NULL)) {
    int cls = api.cache_lookup(cache, ra, height, size);
    if (LT_LIKELY(cls >= 0)) return out->cls = cls;
  }
  return classify_model(t, cache, ra, height, size, caller_ra, out);
}
