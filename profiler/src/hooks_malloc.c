/* The allocator entry points: malloc, calloc, free, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc.  Fast path: a compare and
 * a subtract (allocations), one filter load (frees); everything else goes to
 * account.c.  The real allocator is glibc's, through its __libc_* entry points. */
#include <errno.h>

#include "common.h"
#include "sampler.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

#define RA() ((uintptr_t)__builtin_return_address(0))
#define FAST(t, n) LT_LIKELY((size_t)(n) < (t)->countdown)

/* fn: the entry point (common.h's AllocFunction), recorded in the sample and choosing
 * the glibc function that does the work. */
static LT_NOINLINE void *alloc_slow(int fn, size_t n, size_t align, uintptr_t ra,
                                    size_t count, size_t size) {
  struct lt_thread *t = &lt_tls;
  uint64_t clock = 0;
  int s = lt_account(t, n, &clock);
  void *p;
  switch (fn) {
    case LT_CALLOC: p = __libc_calloc(count, size); break;
    case LT_POSIX_MEMALIGN:
    case LT_ALIGNED_ALLOC:
    case LT_MEMALIGN: p = __libc_memalign(align, n); break;
    case LT_VALLOC: p = __libc_valloc(n); break;
    case LT_PVALLOC: p = __libc_pvalloc(n); break;
    default: p = __libc_malloc(n); break;
  }
  if (s && p) lt_record_alloc(t, p, n, align, fn, ra, clock);
  return p;
}

LT_EXPORT void *HOOK(malloc)(size_t n) {
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_malloc(n);
  }
  return alloc_slow(LT_MALLOC, n, 0, RA(), 0, 0);
}

LT_EXPORT void *HOOK(calloc)(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return __libc_calloc(count, size); /* ENOMEM */
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_calloc(count, size);
  }
  return alloc_slow(LT_CALLOC, n, 0, RA(), count, size);
}

static LT_NOINLINE void free_slow(void *p, int fn) {
  struct lt_thread *t = &lt_tls;
  int e = errno;
  struct lt_live ent;
  if (p && lt_detach(t, p, &ent)) {
    lt_complete_guarded(t, &ent, fn);
  }
  __libc_free(p);
  errno = e;
}

LT_EXPORT void HOOK(free)(void *p) {
  if (LT_LIKELY(!lt_filter_maybe(p))) {
    __libc_free(p);
    return;
  }
  free_slow(p, LT_FREE);
}

static LT_NOINLINE void *realloc_slow(void *p, size_t n, uintptr_t ra, int afn, int ffn) {
  struct lt_thread *t = &lt_tls;
  struct lt_live old;
  int had = p && lt_filter_maybe(p) && lt_detach(t, p, &old);
  uint64_t clock = 0;
  int s = (p == NULL || n != 0) ? lt_account(t, n, &clock) : 0;
  void *q = __libc_realloc(p, n);
  int e = errno;
  if (had) {
    if (q == NULL && n != 0) { /* failed: the old block lives on */
      t->in_sampler = 1;
      lt_live_reinsert(&old);
      t->in_sampler = 0;
    } else {
      lt_complete_guarded(t, &old, ffn);
    }
  }
  if (s && q) lt_record_alloc(t, q, n, 0, afn, ra, clock);
  errno = e;
  return q;
}

LT_EXPORT void *HOOK(realloc)(void *p, size_t n) {
  struct lt_thread *t = &lt_tls;
  /* realloc(NULL, n) allocates; realloc(p, 0) only frees (glibc) */
  if (LT_LIKELY(!lt_filter_maybe(p)) && FAST(t, n)) {
    t->countdown -= n;
    t->allocs += (p == NULL || n != 0);
    return __libc_realloc(p, n);
  }
  return realloc_slow(p, n, RA(), LT_REALLOC, LT_FREED_BY_REALLOC);
}

LT_EXPORT void *HOOK(reallocarray)(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  struct lt_thread *t = &lt_tls;
  if (LT_LIKELY(!lt_filter_maybe(p)) && FAST(t, n)) {
    t->countdown -= n;
    t->allocs += (p == NULL || n != 0);
    return __libc_realloc(p, n);
  }
  return realloc_slow(p, n, RA(), LT_REALLOCARRAY, LT_FREED_BY_REALLOCARRAY);
}

LT_EXPORT int HOOK(posix_memalign)(void **out, size_t align, size_t n) {
  /* glibc's checks: a power-of-two multiple of sizeof(void *) */
  if (align % sizeof(void *) != 0 || align == 0 || (align & (align - 1)) != 0) return EINVAL;
  struct lt_thread *t = &lt_tls;
  void *p;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    p = __libc_memalign(align, n);
  } else {
    p = alloc_slow(LT_POSIX_MEMALIGN, n, align, RA(), 0, 0);
  }
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

LT_EXPORT void *HOOK(aligned_alloc)(size_t align, size_t n) {
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_memalign(align, n);
  }
  return alloc_slow(LT_ALIGNED_ALLOC, n, align, RA(), 0, 0);
}

LT_EXPORT void *HOOK(memalign)(size_t align, size_t n) {
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_memalign(align, n);
  }
  return alloc_slow(LT_MEMALIGN, n, align, RA(), 0, 0);
}

LT_EXPORT void *HOOK(valloc)(size_t n) {
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_valloc(n);
  }
  return alloc_slow(LT_VALLOC, n, lt_page_size, RA(), 0, 0);
}

LT_EXPORT void *HOOK(pvalloc)(size_t n) {
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_pvalloc(n);
  }
  return alloc_slow(LT_PVALLOC, n, lt_page_size, RA(), 0, 0);
}
