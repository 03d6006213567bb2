/* Online lifetime prediction for a host other than the sampler: the LLAMA allocator
 * (allocator/src/predictor.cc) links online.c, unwind.c, symtab.c, context.c and
 * runtime.c (not sampler.c) and calls these.  C and C++.
 *
 * lt_online_open loads the model plugin (the one LIFETIME_MODEL_PLUGIN names) at
 * start-up, never inside an allocation: the executable's path, the builtin unwinder's
 * rule cache, the symbol indexes, the plugin's predictors and its context definition.
 * lt_online_classify is the allocation path: the plugin's thread-local §2.3 cache keyed
 * by (ra, stack height, size) (a hit can be looked up inline: lt_online_cache_inline below);
 * on a miss the stack is captured from caller_ra, cut to the model's context (context.c,
 * the one definition) and the model runs.  It never
 * calls malloc itself; the plugin's thread-local cache may, once per thread (dynamic
 * TLS), so the caller needs a recursion guard.
 */
#ifndef LT_ONLINE_H
#define LT_ONLINE_H

#include <stddef.h>
#include <stdint.h>

#include "lifetime_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LT_ONLINE_VISIBILITY __attribute__((visibility("hidden")))

/* The one environment contract for serving a model in a process (export/serve.py:
 * PLUGIN_ENV): LIFETIME_MODEL_PLUGIN=PLUGIN, the exported model's plugin (export/plugin,
 * built by export.serve.model_plugin).  The sampler predicts each sampled allocation's
 * class with it (lt_online_init), the allocator places every object by it
 * (allocator/src/predictor.cc). */
#define LT_MODEL_PLUGIN_ENV "LIFETIME_MODEL_PLUGIN"
/* Its value; NULL when it is unset or empty. */
LT_ONLINE_VISIBILITY const char *lt_online_plugin(void);

/* 1, or 0 with the reason in why (e.g. "cannot load PATH", "the model's context
 * definition is not lifetime-context-v2"). */
LT_ONLINE_VISIBILITY int lt_online_open(const char *path, char *why, size_t why_cap);
/* The loaded model's info; NULL before a successful load. */
LT_ONLINE_VISIBILITY const lifetime_model_info *lt_online_model_info(void);
/* Its size as the model's library fills it (lifetime_model_info_size): read a field
 * appended to lifetime_model_info only when LIFETIME_MODEL_INFO_HAS(this, field).  0
 * before a load, or for a model exported before the appended fields. */
LT_ONLINE_VISIBILITY size_t lt_online_model_info_size(void);

/* The size the §2.3 cache is keyed on, from an object's size: for a model keyed on the
 * size frame (lifetime_model_info.size_frame) its bucket's least size, from which the
 * library makes the same frame (core/context.py size_bucket_floor); for any other the
 * next power of two (at least 16), so requests of variable length from one site hit. */
LT_ONLINE_VISIBILITY size_t lt_online_key_size(size_t size);

/* The allocation path's hit, for a caller that inlines it (the allocator: every malloc
 * asks, and the calls into lt_online_classify cost more than the lookup itself): */
/* the model reads a size frame (lt_online_key_size's first rule), set by lt_online_open; */
LT_ONLINE_VISIBILITY extern int lt_online_size_frame_model;
/* whether the plugin's cache has the layout of the lifetime_model.h this was built with
 * (lifetime_cache_layout() == LIFETIME_CACHE_LAYOUT): a C++ caller may then make the
 * lookup inline (lifetime_model::PredictionCache::Peek on the thread's cache); 0: none,
 * no model loaded, or an export of another layout (lt_online_classify looks it up); */
LT_ONLINE_VISIBILITY extern int lt_online_cache_inline;
/* the plugin's lifetime_cache_lookup (NULL: none, or no model loaded): the call, for an
 * export of another layout; */
LT_ONLINE_VISIBILITY extern int (*lt_online_lookup)(lifetime_cache *, uintptr_t, uintptr_t, size_t);
/* and this thread's cache and stack top, zero until lt_online_thread_start has set the
 * thread up (lt_online_classify does too).  The cache key's stack height is
 * stack_hi - the caller's frame address: the caller's own, passed on to
 * lt_online_classify, so that a miss caches what the hit path will look up. */
struct lt_online_thread {
  lifetime_cache *cache;
  uintptr_t stack_hi;
};
LT_ONLINE_VISIBILITY extern __thread struct lt_online_thread lt_online_tls
    __attribute__((tls_model("initial-exec")));
/* The thread's set-up (may malloc once: the plugin's dynamic TLS; pthread_getattr_np). */
LT_ONLINE_VISIBILITY lifetime_cache *lt_online_thread_start(void);

static inline size_t lt_online_key_size_inline(size_t size) {
  if (lt_online_size_frame_model) {
    if (size < 8) return size;
    const int shift = 64 - __builtin_clzll(size) - 3; /* the leading 1 and 2 more bits */
    return (size >> shift) << shift;
  }
  return size <= 16 ? 16 : (size_t)1 << (64 - __builtin_clzll(size - 1));
}

struct lt_online_call {
  int cls;       /* the class (-1: the model ran and failed) */
  int ran;       /* 0: a cache hit; 1: a miss; 2: a revalidation (the model ran) */
  int frames;    /* frames given to the model (ran only) */
  uint64_t ns;   /* ran: capture + symbolize + model, ns */
};
LT_ONLINE_VISIBILITY int lt_online_classify(uintptr_t ra, uintptr_t height, size_t size,
                                            uintptr_t caller_ra, struct lt_online_call *out);
/* Called after each model run, under the predictor's lock: the class, the context's
 * frame strings as the model read them, and the captured stack's depth. */
typedef void (*lt_online_served_fn)(int cls, const char *const *frames, const size_t *lengths,
                                    int n, int depth);
LT_ONLINE_VISIBILITY void lt_online_set_served(lt_online_served_fn fn);
/* Every thread's cache reruns the model every n hits of an entry (0: never; -1: the
 * plugin's default, 1000), from each thread's next first classify; call it before any.
 * 0 when the plugin cannot set it. */
LT_ONLINE_VISIBILITY int lt_online_set_revalidate_every(long n);
/* The section `name` of the ELF64 file at path (symtab.c): its size in bytes, its contents
 * copied into out when they fit in cap; 0 when the file has no such section, -1 when it
 * cannot be read as ELF64.  mmap/munmap only, no malloc: the allocator reads the model
 * plugin's class boundaries with it inside its first malloc, before the plugin loads. */
LT_ONLINE_VISIBILITY long lt_elf_section(const char *path, const char *name, void *out, size_t cap);
/* fork child: the predictors' and the symbol index's locks. */
LT_ONLINE_VISIBILITY void lt_online_reset_child(void);

#ifdef __cplusplus
}
#endif

#endif
