/* The in-process runtime shared by the sampler (liblifetime_sampler.so) and the LLAMA
 * allocator (liblifetime_alloc.so): small locks, clocks, fixed-buffer string helpers,
 * descriptors out of the host's range, one-line messages, the per-thread state the
 * unwinder reads (stack bounds, tid), and the executable's path the symbolizer indexes.
 *
 * The unwinder (unwind.c), the symbolizer (symtab.c), the context cut (context.c) and
 * the online model (online.c) need only this file, so the allocator links them without
 * the sampler's hooks and start-up (sampler.h: sampler.c, account.c, hooks_malloc.c,
 * hooks_process.c, fork.c).  Nothing here calls malloc or stdio.
 */
#ifndef LT_RUNTIME_H
#define LT_RUNTIME_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "thread_annotations.h"

#define LT_HIDDEN __attribute__((visibility("hidden")))
#define LT_LIKELY(x) __builtin_expect(!!(x), 1)
#define LT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LT_NOINLINE __attribute__((noinline))
#define LT_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

/* ---- futex lock: 0 free, 1 held, 2 held with waiters ----
 * A capability for Clang's thread-safety analysis (thread_annotations.h): what each lock
 * guards is annotated where the data is; the primitives themselves are not analyzed (the
 * analysis cannot see an atomic exchange take a lock). */
typedef struct CAPABILITY("mutex") { _Atomic int v; } lt_lock;
LT_HIDDEN void lt_lock_wait(lt_lock *l) ACQUIRE(l);
LT_HIDDEN void lt_lock_wake(lt_lock *l);
static inline void lt_lock_acquire(lt_lock *l) ACQUIRE(l) NO_THREAD_SAFETY_ANALYSIS {
  int expected = 0;
  if (LT_LIKELY(atomic_compare_exchange_strong_explicit(&l->v, &expected, 1,
                                                        memory_order_acquire,
                                                        memory_order_relaxed)))
    return;
  lt_lock_wait(l);
}
static inline int lt_lock_try(lt_lock *l) TRY_ACQUIRE(1, l) NO_THREAD_SAFETY_ANALYSIS {
  int expected = 0;
  return atomic_compare_exchange_strong_explicit(&l->v, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}
static inline void lt_lock_release(lt_lock *l) RELEASE(l) NO_THREAD_SAFETY_ANALYSIS {
  if (LT_UNLIKELY(atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2))
    lt_lock_wake(l);
}
/* In a fork child: the lock the parent held across fork() is free again. */
static inline void lt_lock_reset(lt_lock *l) NO_THREAD_SAFETY_ANALYSIS {
  atomic_store_explicit(&l->v, 0, memory_order_relaxed);
}

/* ---- per-thread state (initial-exec TLS: one %fs-relative access) ----
 * The sampler's counters and the unwinder's view of the thread; the allocator uses
 * only tid and the stack bounds (lt_thread_stack_bounds, unwind.c). */
struct lt_thread {
  uint64_t countdown;      /* fast path: sample/fold work once this many bytes are gone */
  uint64_t seg;            /* countdown at the start of the current segment */
  int64_t sample_rem;      /* bytes to the next Poisson sample point */
  int64_t fold_rem;        /* bytes to the next fold into the global clock */
  uint64_t pending_bytes;  /* allocated bytes not yet folded */
  uint64_t allocs;         /* allocations not yet folded */
  uint64_t rng;
  uintptr_t stack_lo, stack_hi; /* this thread's stack, for the unwinder's bounds */
  uint32_t tid;
  uint8_t in_sampler;      /* recursion guard: nested calls go to the real allocator */
  uint8_t initialized;
  uint8_t stack_known;
  uint8_t memo_tried;      /* unwind_memo was asked for (once per thread) */
  struct lt_unwind_memo *unwind_memo; /* the last walk (unwind.c); NULL: none kept */
  uint32_t stack_hint[16]; /* stack ids this thread interned lately (stacks.c) */
};
extern __thread struct lt_thread lt_tls __attribute__((tls_model("initial-exec")));
/* unwind.c: keep each walk of this thread, so that the next one replays the frames it
 * shares with it (full trace: every allocation unwinds).  Start: maps the thread's
 * memo (once; no memo if that fails); end: unmaps it (thread exit). */
LT_HIDDEN void lt_unwind_memo_start(struct lt_thread *t);
LT_HIDDEN void lt_unwind_memo_end(struct lt_thread *t);

/* ---- helpers ---- */
LT_HIDDEN uint64_t lt_mono_ns(void);
LT_HIDDEN int64_t lt_unix_ns(void);
LT_HIDDEN void lt_log(const char *a, const char *b, const char *c);
LT_HIDDEN void *lt_map(size_t bytes);
LT_HIDDEN uint32_t lt_gettid(void);
LT_HIDDEN uint32_t lt_getpid(void);
LT_HIDDEN size_t lt_strlcpy(char *dst, const char *src, size_t cap);
LT_HIDDEN char *lt_utoa(uint64_t v, char *buf); /* returns pointer to digits in buf[24] */
/* open/openat for every descriptor the sampler opens: the result is O_CLOEXEC and at
 * or above LT_FD_FLOOR (bounded by RLIMIT_NOFILE), never in the host's low range. */
#define LT_FD_FLOOR 1000
LT_HIDDEN int lt_open_high(const char *path, int flags, mode_t mode);
LT_HIDDEN int lt_openat_high(int dirfd, const char *path, int flags, mode_t mode);

/* The executable's path (readlink /proc/self/exe): the symbolizer's main-program module.
 * Set at start-up with lt_program_name(lt_exe, sizeof lt_exe, &base). */
LT_HIDDEN extern char lt_exe[4096];
LT_HIDDEN void lt_program_name(char *exe, size_t exe_cap, const char **base);

#endif
