/* liblifetime_sampler.so: LD_PRELOAD allocation-lifetime sampler.
 *
 * Interposes the allocator entry points, Poisson-samples allocations by bytes (as
 * TCMalloc does), records each sampled object's stack, size and birth on two clocks,
 * and its death when it is freed (or realloc'ed), and appends the finished samples to
 * a TFRecord file of ProfileChunk messages (profiler_proto/profile.proto).
 *
 * Environment (set by profiler/launch.py):
 *   LIFETIME_OUT_DIR         required: directory for <program>.<pid>.<start_ns>.ltprof
 *   LIFETIME_INTERVAL_BYTES  mean bytes between samples (default LT_DEFAULT_INTERVAL)
 *   LIFETIME_VERSION_LABEL   free-form label for the header
 *   LIFETIME_MAX_FRAMES      stack depth, 1..128 (default 128)
 *   LIFETIME_FLUSH_MS        periodic flush period, ms (default 1000; 0: no periodic
 *                            flushes, only when LT_FLUSH_PENDING samples wait, and at
 *                            the end)
 *   LIFETIME_SEED            fixed PRNG seed (reproducible sampling decisions)
 *   LIFETIME_UNWINDER        builtin (default) | glibc | libunwind (for comparisons) |
 *                            check (builtin, verified against backtrace(); prints a
 *                            summary line at exit)
 *   LIFETIME_FULL_TRACE      1: record every allocation (full trace, below); 0 or unset:
 *                            Poisson sampling
 *   LIFETIME_FULL_TRACE_CAPACITY  live objects the full trace's table holds (default
 *                            LT_FULL_DEFAULT_CAPACITY = 4,194,304; 1..2^28)
 *   LIFETIME_FULL_TRACE_BUFFER  completed records buffered between flushes in a full
 *                            trace, per buffer (default LT_FULL_DONE_CAP = 131072;
 *                            16..2^24; small values exercise the back-pressure)
 * A bad value or an unusable directory prints one "lifetime-sampler: ..." line on
 * stderr and disables sampling; the program then runs exactly as without us.
 *
 * Hot paths.  malloc: one initial-exec TLS load, a compare and a subtract before the
 * real allocator; free: one load from a 64 KiB bitmap.  Everything else (sampling,
 * folding the per-thread byte count into the process clock every 64 KiB, thread
 * setup) happens on the slow path.  Recursion guard: while a thread is inside the
 * sampler (`in_sampler`), its countdown is 0 so every nested allocator call takes the
 * slow path, which sees the flag and goes straight to the real allocator.  Every
 * path that holds a sampler lock has the flag set, so a signal handler that
 * allocates on the same thread never waits for a lock its own thread holds.
 *
 * No thread of our own.  A helper thread would move glibc onto its multi-threaded
 * paths (arena locks: malloc in a signal handler can deadlock; setxid broadcasts:
 * setresuid/setresgid can abort; unshare(CLONE_NEWUSER) fails; CPython warns at
 * fork), so the host must only ever have the threads it created.  Flushing is done
 * inline by host threads on slow paths that already exist: the per-thread fold
 * every 64 KiB allocated (account), each sample (record_alloc) and each sampled
 * free (complete) compare CLOCK_MONOTONIC with lt_g.next_flush_ns (and complete()
 * the number of waiting samples with LT_FLUSH_PENDING); when due, the thread takes
 * flush_lock with lt_lock_try -- never waiting: if another thread is flushing it
 * goes on -- sets in_sampler, writes the encoded chunks with write(2) and restores
 * errno (host_flush).  What a SIGKILL loses: the samples completed since the last
 * flush, i.e. at most those of the last LIFETIME_FLUSH_MS (and, with a sampled free
 * checking the count, about LT_FLUSH_PENDING of them) plus the time to the next
 * slow path after the deadline (a thread that allocates 64 KiB gets there; a
 * process that stops allocating keeps its completed samples in memory until it
 * allocates again or ends), and the still-live objects (written as censored only at
 * the end).  Every process image writes a complete file, with or without samples.
 *
 * Ends of a process image: exit/return from main (destructor), _exit/_Exit (hooked),
 * quick_exit (an at_quick_exit handler registered first, so it runs last), daemon()
 * (hooked: glibc's own calls the internal _exit in the parent), exec (hooked: the
 * end of the file is written tentatively with flush_lock held across the exec
 * call; if the exec fails the file is truncated back and the profile goes on).
 * A root process that changes its effective uid (setuid, seteuid, setreuid,
 * setresuid: hooked) first gives its file to the new uid, so that it can still
 * append to it.
 *
 * Full trace (LIFETIME_FULL_TRACE=1).  Every allocation is a sample with its stack,
 * weight 1, and every free completes its record: the thread's countdown stays 0, so
 * every allocation takes the slow path and account() says "sample"; the free()
 * pre-filter is all ones, so every free looks its address up; the live table, the
 * done buffers and the stack table are sized for a whole heap (common.h, live.c).
 * The header says so (Header.full_trace, sampling_interval_bytes = 1,
 * live_capacity).  Nothing is dropped silently: a full live or stack table is
 * counted in Trailer.dropped_samples / dropped_stacks; a full done buffer makes the
 * completing thread wait for flush_lock and flush itself (back-pressure: it holds no
 * sampler lock then), except in a vfork child or with the in-process symbolizer or a
 * model loaded (a flush may take the loader lock there), where the record is
 * dropped and counted.  Flushes stay inline and bounded as in sampled mode (every
 * LT_FLUSH_PENDING completed records, ~4096 * 70 bytes).
 *
 * The real allocator is glibc's, called through its exported __libc_* entry points
 * (no dlsym bootstrap).  posix_memalign, aligned_alloc (an alias of memalign in glibc
 * 2.36) and reallocarray (__libc_reallocarray is GLIBC_PRIVATE) are implemented on
 * top of them with glibc's own argument checks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h> /* ST_NOSUID: statfs f_flags */
#ifndef ST_VALID
#define ST_VALID 0x0020 /* linux/statfs.h: f_flags is filled in */
#endif
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <elf.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "wire.h"

/* Default mean sampling interval: 512 KiB, 4x denser than TCMalloc's 2 MiB heap
 * profiler (a heap profile only needs the live heap; lifetime modelling wants many
 * samples per allocation site, short-lived ones included).  Cost model, measured by
 * benchmarks/profiler_overhead.py (perf attribution, clang-14 and CPython):
 *   - hooks: ~1-2 ns per malloc/free pair whatever the interval: 0.4% of clang-14's
 *     CPU, 1.3-1.9% for CPython with PYTHONMALLOC=malloc (~5M allocations/s);
 *   - sampling: 2-3 us per sample with warm caches, 5-8 us when samples are sparse
 *     (cold unwind-rule and stack tables), i.e. about rate/interval * 6 us: 0.5-0.7%
 *     for clang (450 MB/s) at 512 KiB, ~2x that at 256 KiB, ~3% at 64 KiB.
 * 512 KiB keeps allocation-heavy programs at or under the 2% CPU budget; pass a
 * smaller LIFETIME_INTERVAL_BYTES for more data (64 KiB stays under 15%). */
#define LT_DEFAULT_INTERVAL (512 * 1024)

#ifdef LT_HARNESS
/* Test harness build (sanitizers): the hooks get an lt_ prefix and are called directly. */
#define HOOK(name) lt_##name
#define LT_EXPORT __attribute__((visibility("default")))
#else
#define HOOK(name) name
#define LT_EXPORT __attribute__((visibility("default")))
#endif

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);
extern char **environ;

struct lt_global lt_g;

static pthread_key_t thread_key;
static int have_thread_key;
static uint64_t page_size = 4096;
int lt_symbolize_stacks;

/* ---------------- random numbers ---------------- */

static inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline uint64_t next_rand(struct lt_thread *t) { /* xorshift64* */
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
static int64_t draw(struct lt_thread *t) {
  double u = (double)((next_rand(t) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
  double v = ceil(-log(u) * (double)lt_g.interval);
  if (v < 1) return 1;
  if (v > 4e18) return (int64_t)4e18;
  return (int64_t)v;
}

/* ---------------- accounting ----------------
 * Bytes since the last slow path are implicit in (seg - countdown); bring them into
 * the per-thread counters. */
static inline void sync_pending(struct lt_thread *t) {
  uint64_t used = t->seg - t->countdown;
  t->pending_bytes += used;
  t->sample_rem -= (int64_t)used;
  t->fold_rem -= (int64_t)used;
  t->seg = t->countdown;
}

/* Folds this thread's counts into the process-wide clock; returns the clock after.
 * Done at least every LT_FOLD_BYTES per thread, at every sample and sampled free, and
 * at thread exit, so the CLOCK_ALLOCATED_BYTES reading of an event lags the true
 * process total by less than 64 KiB per other running thread. */
static inline uint64_t fold(struct lt_thread *t) {
  uint64_t b = t->pending_bytes, a = t->allocs;
  t->pending_bytes = 0;
  t->allocs = 0;
  if (a) atomic_fetch_add_explicit(&lt_g.total_allocs, a, memory_order_relaxed);
  return atomic_fetch_add_explicit(&lt_g.clock_bytes, b, memory_order_relaxed) + b;
}

static void set_countdown(struct lt_thread *t) {
  int64_t next = t->sample_rem < t->fold_rem ? t->sample_rem : t->fold_rem;
  if (next < 1) next = 1;
  t->countdown = t->seg = (uint64_t)next;
}

static void global_init(struct lt_thread *t);

static int thread_init(struct lt_thread *t) {
  int st = atomic_load_explicit(&lt_g.state, memory_order_acquire);
  if (st == LT_UNINIT) {
    global_init(t);
    st = atomic_load_explicit(&lt_g.state, memory_order_acquire);
  }
  if (st != LT_ACTIVE) {
    if (st != LT_UNINIT && st != LT_INITIALIZING) {
      t->initialized = 1;
      t->countdown = t->seg = UINT64_MAX; /* disabled or finished: fast path forever */
    }
    return 0;
  }
  t->tid = lt_gettid();
  uint32_t seq = atomic_fetch_add_explicit(&lt_g.thread_seq, 1, memory_order_relaxed);
  uint64_t seed = lt_g.have_seed ? splitmix(lt_g.seed + seq)
                                 : splitmix(lt_mono_ns() ^ ((uint64_t)t->tid << 32) ^
                                            (uint64_t)(uintptr_t)t);
  t->rng = seed ? seed : 1;
  t->pending_bytes = 0;
  t->allocs = 0;
  t->sample_rem = draw(t);
  t->fold_rem = LT_FOLD_BYTES;
  t->countdown = t->seg = 0;
  t->initialized = 1;
  if (have_thread_key) pthread_setspecific(thread_key, (void *)1); /* fold at thread exit */
  return 1;
}

/* ---------------- inline flushing ---------------- */

static inline int flush_due(uint64_t now) {
  return now >= atomic_load_explicit(&lt_g.next_flush_ns, memory_order_relaxed);
}

static inline uint64_t next_deadline(uint64_t now) {
  return lt_g.flush_ms ? now + lt_g.flush_ms * 1000000ull : UINT64_MAX;
}

/* A periodic flush on the calling host thread (in_sampler set or not).  Never waits
 * for flush_lock: another thread that holds it is flushing already (or ending the
 * image, or exec'ing).  A vfork child (another pid, our memory) never writes. */
static LT_NOINLINE void host_flush(struct lt_thread *t) {
  int e = errno;
  uint8_t was = t->in_sampler;
  uint64_t saved = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  if (lt_lock_try(&lt_g.flush_lock)) {
    if (atomic_load_explicit(&lt_g.state, memory_order_acquire) == LT_ACTIVE &&
        lt_getpid() == lt_g.pid) {
      atomic_store_explicit(&lt_g.next_flush_ns, next_deadline(lt_mono_ns()),
                            memory_order_relaxed);
      lt_flush(LT_FLUSH_PERIODIC, 0);
    }
    lt_lock_release(&lt_g.flush_lock);
  }
  t->countdown = saved;
  t->in_sampler = was;
  errno = e;
}

/* Slow path of every allocation: returns 1 if this allocation is sampled, with the
 * CLOCK_ALLOCATED_BYTES reading (this allocation included) in *clock. */
static int account(struct lt_thread *t, size_t n, uint64_t *clock) {
  if (t->in_sampler) return 0;
  if (LT_UNLIKELY(!t->initialized)) {
    t->in_sampler = 1;
    int ok = thread_init(t);
    t->in_sampler = 0;
    if (!ok) return 0;
  }
  if (LT_UNLIKELY(atomic_load_explicit(&lt_g.state, memory_order_relaxed) != LT_ACTIVE)) {
    t->countdown = t->seg = UINT64_MAX;
    return 0;
  }
  uint64_t nn = n > (1ull << 48) ? (1ull << 48) : n;
  if (lt_g.full_trace) { /* every allocation; the clock is folded at each one */
    sync_pending(t);
    t->pending_bytes += nn;
    t->allocs++;
    *clock = fold(t);
    t->countdown = t->seg = 0;
    return 1;
  }
  sync_pending(t);
  t->pending_bytes += nn;
  t->sample_rem -= (int64_t)nn;
  t->fold_rem -= (int64_t)nn;
  t->allocs++;
  int sample = t->sample_rem <= 0, folded = 0;
  if (sample || t->fold_rem <= 0) {
    *clock = fold(t);
    t->fold_rem = LT_FOLD_BYTES;
    folded = 1;
  }
  if (sample) t->sample_rem = draw(t);
  set_countdown(t);
  /* a sample checks the deadline in record_alloc; a plain fold checks it here */
  if (folded && !sample && LT_UNLIKELY(flush_due(lt_mono_ns()))) host_flush(t);
  return sample;
}

/* ---------------- recording ---------------- */

static LT_NOINLINE void record_alloc(struct lt_thread *t, void *p, size_t size, size_t align,
                                     int fn, uintptr_t ra, uint64_t clock) {
  int e = errno;
  uint64_t saved = t->countdown;
  t->countdown = 0;
  t->in_sampler = 1;
  if (!t->stack_known) lt_thread_stack_bounds(t);
  uintptr_t frames[LT_MAX_FRAMES];
  int truncated = 0;
  int depth = lt_capture(frames, lt_g.max_frames, ra, &truncated, t);
  uint32_t sid = lt_stack_intern(frames, depth, truncated);
  if (sid == 0) {
    atomic_fetch_add_explicit(&lt_g.dropped_samples, 1, memory_order_relaxed);
  } else {
    struct lt_live ent = {.addr = (uint64_t)(uintptr_t)p, .size = size, .align = align,
                          .alloc_ns = lt_mono_ns(), .alloc_bytes = clock, .stack_id = sid,
                          .tid = t->tid, .fn = (uint8_t)fn, .pred = -1};
    if (lt_online_enabled()) { /* counterfactual: predicted, recorded, not acted on */
      int hit = 0;
      uint64_t ns = 0;
      uintptr_t height = t->stack_hi - (uintptr_t)__builtin_frame_address(0);
      /* Keyed on the size class (next power of two), not the exact size: requests of
       * variable length from one site would otherwise almost never hit. */
      size_t size_class = size <= 16 ? 16 : (size_t)1 << (64 - __builtin_clzll(size - 1));
      int cls = lt_online_predict(frames, depth, ra, height, size_class, &hit, &ns);
      ent.pred = (int8_t)(cls >= 0 && cls < 127 ? cls : -1);
      ent.pred_hit = (uint8_t)hit;
      ent.pred_ns = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    }
    int r = lt_live_insert(&ent);
    if (r == 0) {
      atomic_fetch_add_explicit(&lt_g.dropped_samples, 1, memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&lt_g.samples_taken, 1, memory_order_relaxed);
    }
    if (LT_UNLIKELY(flush_due(ent.alloc_ns))) host_flush(t);
  }
  t->in_sampler = 0;
  t->countdown = saved;
  errno = e;
}

/* Full trace, done buffer full: wait for flush_lock and flush here, the record d
 * written right after the buffered ones (lt_flush_extra: other threads may refill the
 * buffer while this flush encodes).  in_sampler is set and no sampler lock is held:
 * nothing we wait for can wait for us.  Returns 1 if d was written.  Not in a
 * vfork child (our memory, another pid: never touches the file) nor when a flush may
 * take the loader lock (symbolizer, model: the waiting thread may be inside the
 * loader); the caller then counts the record as dropped. */
static LT_NOINLINE int full_trace_wait_flush(struct lt_thread *t, const struct lt_done *d) {
  if (lt_symbolize_stacks || lt_online_enabled() || lt_getpid() != lt_g.pid) return 0;
  uint64_t saved = t->countdown;
  t->countdown = 0;
  lt_lock_acquire(&lt_g.flush_lock);
  int flushed = 0;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) == LT_ACTIVE) {
    atomic_store_explicit(&lt_g.next_flush_ns, next_deadline(lt_mono_ns()), memory_order_relaxed);
    lt_flush_extra = d;
    lt_flush(LT_FLUSH_PERIODIC, 0);
    flushed = lt_flush_extra == NULL && !lt_g.file_failed;
    lt_flush_extra = NULL;
  }
  lt_lock_release(&lt_g.flush_lock);
  t->countdown = saved;
  return flushed;
}

/* The object's life ended: a finished sample for the next flush.  in_sampler is set. */
static void complete(struct lt_thread *t, const struct lt_live *e, int free_fn) {
  if (!t->initialized) thread_init(t);
  if (t->initialized && t->countdown != UINT64_MAX) sync_pending(t);
  struct lt_done d = {.addr = e->addr, .size = e->size, .align = e->align,
                      .alloc_ns = e->alloc_ns, .alloc_bytes = e->alloc_bytes,
                      .stack_id = e->stack_id, .tid = e->tid, .fn = e->fn,
                      .pred = e->pred, .pred_hit = e->pred_hit, .pred_ns = e->pred_ns,
                      .free_ns = lt_mono_ns(), .free_bytes = fold(t),
                      .free_tid = t->tid ? t->tid : lt_gettid(), .free_fn = (uint8_t)free_fn};
  int fill = lt_done_append(&d);
  if (LT_UNLIKELY(fill < 0)) {
    int e = errno;
    int written = lt_g.full_trace && full_trace_wait_flush(t, &d);
    errno = e;
    if (!written) atomic_fetch_add_explicit(&lt_g.dropped_samples, 1, memory_order_relaxed);
    return;
  }
  if (LT_UNLIKELY((fill > 0 && (uint32_t)fill >= LT_FLUSH_PENDING) || flush_due(d.free_ns)))
    host_flush(t);
}

/* Ends the life of p if it is sampled; for free() and realloc().  Returns 1 with the
 * removed entry in *out (not yet completed) when it was. */
static int detach(struct lt_thread *t, void *p, struct lt_live *out) {
  if (t->in_sampler || atomic_load_explicit(&lt_g.state, memory_order_relaxed) != LT_ACTIVE)
    return 0;
  t->in_sampler = 1;
  int found = lt_live_remove((uint64_t)(uintptr_t)p, out);
  t->in_sampler = 0;
  return found;
}

static void complete_guarded(struct lt_thread *t, const struct lt_live *e, int free_fn) {
  t->in_sampler = 1;
  complete(t, e, free_fn);
  t->in_sampler = 0;
}

/* ---------------- the hooks ---------------- */

#define RA() ((uintptr_t)__builtin_return_address(0))
#define FAST(t, n) LT_LIKELY((size_t)(n) < (t)->countdown)

/* fn: the entry point (common.h's AllocFunction), recorded in the sample and choosing
 * the glibc function that does the work. */
static LT_NOINLINE void *alloc_slow(int fn, size_t n, size_t align, uintptr_t ra,
                                    size_t count, size_t size) {
  struct lt_thread *t = &lt_tls;
  uint64_t clock = 0;
  int s = account(t, n, &clock);
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
  if (s && p) record_alloc(t, p, n, align, fn, ra, clock);
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
  if (p && detach(t, p, &ent)) {
    complete_guarded(t, &ent, fn);
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
  int had = p && lt_filter_maybe(p) && detach(t, p, &old);
  uint64_t clock = 0;
  int s = (p == NULL || n != 0) ? account(t, n, &clock) : 0;
  void *q = __libc_realloc(p, n);
  int e = errno;
  if (had) {
    if (q == NULL && n != 0) { /* failed: the old block lives on */
      t->in_sampler = 1;
      lt_live_reinsert(&old);
      t->in_sampler = 0;
    } else {
      complete_guarded(t, &old, ffn);
    }
  }
  if (s && q) record_alloc(t, q, n, 0, afn, ra, clock);
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
  return alloc_slow(LT_VALLOC, n, page_size, RA(), 0, 0);
}

LT_EXPORT void *HOOK(pvalloc)(size_t n) {
  struct lt_thread *t = &lt_tls;
  if (FAST(t, n)) {
    t->countdown -= n;
    t->allocs++;
    return __libc_pvalloc(n);
  }
  return alloc_slow(LT_PVALLOC, n, page_size, RA(), 0, 0);
}

/* ---------------- the end of a process image ---------------- */

/* Final flush: censored samples, mappings, trailer.  Afterwards every hook passes
 * straight through (state FINISHED), whatever other threads are still doing. */
static void lt_finish(int reason) {
  struct lt_thread *t = &lt_tls;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE) return;
  if (t->in_sampler) {
    /* exit from a signal handler that interrupted the sampler on this thread: its
     * locks may be ours, so stop without the final chunk rather than risk a deadlock */
    atomic_store(&lt_g.state, LT_FINISHED);
    return;
  }
  uint64_t saved = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  lt_lock_acquire(&lt_g.flush_lock);
  int expected = LT_ACTIVE;
  if (atomic_compare_exchange_strong(&lt_g.state, &expected, LT_FINISHING)) {
    t->countdown = saved;
    if (t->initialized && saved != UINT64_MAX) sync_pending(t);
    fold(t);
    t->countdown = 0;
    lt_flush(LT_FLUSH_FINAL, reason);
    atomic_store(&lt_g.state, LT_FINISHED);
    lt_unwind_report();
  }
  lt_lock_release(&lt_g.flush_lock);
  t->in_sampler = 0;
  t->countdown = t->seg = UINT64_MAX;
}

static void thread_exit_fold(void *v) {
  (void)v;
  struct lt_thread *t = &lt_tls;
  if (t->initialized && t->countdown != UINT64_MAX) sync_pending(t);
  fold(t);
}

#ifndef LT_HARNESS
static int (*real_execve)(const char *, char *const[], char *const[]);
static int (*real_execvpe)(const char *, char *const[], char *const[]);
static int (*real_fexecve)(int, char *const[], char *const[]);
static int (*real_execveat)(int, const char *, char *const[], char *const[], int);
static int (*real_setuid)(uid_t);
static int (*real_seteuid)(uid_t);
static int (*real_setreuid)(uid_t, uid_t);
static int (*real_setresuid)(uid_t, uid_t, uid_t);

#define RESOLVE(var, name) \
  do { if (!var) var = (__typeof__(var))dlsym(RTLD_NEXT, name); } while (0)

static void resolve_exec(void) {
  RESOLVE(real_execve, "execve");
  RESOLVE(real_execvpe, "execvpe");
  RESOLVE(real_fexecve, "fexecve");
  RESOLVE(real_execveat, "execveat");
  RESOLVE(real_setuid, "setuid");
  RESOLVE(real_seteuid, "seteuid");
  RESOLVE(real_setreuid, "setreuid");
  RESOLVE(real_setresuid, "setresuid");
}

/* ---- programs the loader will not preload us into ----
 * Looked at before an exec (open, pread, fstat: no malloc) so that the exec'ing
 * image's trailer can say which program went unprofiled (Trailer.unprofiled_exec;
 * `lifetime profile` reports it after the run).  Nothing is printed: the host's
 * output stays its own. */
static const char *elf_problem(int fd, int depth);

static const char *file_problem(int dirfd, const char *path, int flags, int depth) {
  struct stat st;
  if (fstatat(dirfd, path, &st, flags) != 0 || !S_ISREG(st.st_mode)) return NULL;
  int fd = lt_openat_high(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
  if (fd < 0) return NULL;
  const char *why = elf_problem(fd, depth);
  close(fd);
  return why;
}

static const char *elf_problem(int fd, int depth) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
  struct statfs sf;
  int nosuid = fstatfs(fd, &sf) == 0 && (sf.f_flags & ST_VALID) && (sf.f_flags & ST_NOSUID);
  if (!nosuid) {
    /* secure-execution mode (AT_SECURE): the new effective ids differ from the real
     * ones; the loader then ignores an LD_PRELOAD path with a slash */
    uid_t ruid = getuid(), euid = (st.st_mode & S_ISUID) ? st.st_uid : geteuid();
    gid_t rgid = getgid(),
          egid = (st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) ? st.st_gid : getegid();
    if (euid != ruid || egid != rgid)
      return (st.st_mode & (S_ISUID | S_ISGID)) ? "setuid/setgid program (the loader ignores "
                                                  "LD_PRELOAD in secure-execution mode)"
                                                : "runs with changed ids (the loader ignores "
                                                  "LD_PRELOAD in secure-execution mode)";
    if (ruid != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0)
      return "has file capabilities (the loader ignores LD_PRELOAD in secure-execution mode)";
  }
  unsigned char head[256];
  ssize_t n = pread(fd, head, sizeof head - 1, 0);
  if (n < 4) return NULL;
  if (head[0] == '#' && head[1] == '!') {
    if (depth > 0) return NULL;
    head[n] = 0;
    char interp[256];
    size_t i = 2, k = 0;
    while (head[i] == ' ' || head[i] == '\t') i++;
    while (head[i] && head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && k < sizeof interp - 1)
      interp[k++] = (char)head[i++];
    interp[k] = 0;
    if (!k) return NULL;
    const char *why = file_problem(AT_FDCWD, interp, 0, 1);
    return why ? "its #! interpreter cannot be preloaded into (statically linked, setuid or "
                 "with file capabilities)"
               : NULL;
  }
  if (memcmp(head, ELFMAG, SELFMAG) != 0 || (size_t)n < sizeof(Elf64_Ehdr)) return NULL;
  if (head[EI_CLASS] != ELFCLASS64) return "32-bit program (the sampler is a 64-bit library)";
  Elf64_Ehdr eh;
  memcpy(&eh, head, sizeof eh);
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) return NULL;
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 64) return NULL;
  Elf64_Phdr ph[64];
  size_t bytes = (size_t)eh.e_phnum * sizeof(Elf64_Phdr);
  if (pread(fd, ph, bytes, (off_t)eh.e_phoff) != (ssize_t)bytes) return NULL;
  int dynamic = 0;
  for (int i = 0; i < eh.e_phnum; i++) {
    if (ph[i].p_type == PT_INTERP) return NULL; /* the dynamic loader runs: preloadable */
    if (ph[i].p_type == PT_DYNAMIC) dynamic = 1;
  }
  if (eh.e_type == ET_DYN && dynamic) return NULL; /* a shared object (ld.so run directly) */
  return "statically linked (no PT_INTERP: nothing loads LD_PRELOAD)";
}

/* execvp's search: the first PATH entry with an executable regular file. */
static const char *search_problem(const char *file, char *found, size_t cap) {
  if (strchr(file, '/')) {
    lt_strlcpy(found, file, cap);
    return file_problem(AT_FDCWD, file, 0, 0);
  }
  const char *path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";
  size_t flen = strlen(file);
  for (const char *p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t dlen = end ? (size_t)(end - p) : strlen(p);
    if (dlen + flen + 2 < cap) {
      size_t n = 0;
      if (dlen == 0) found[n++] = '.';
      memcpy(found + n, p, dlen);
      n += dlen;
      found[n++] = '/';
      memcpy(found + n, file, flen + 1);
      struct stat st;
      if (access(found, X_OK) == 0 && stat(found, &st) == 0 && S_ISREG(st.st_mode))
        return file_problem(AT_FDCWD, found, 0, 0);
    }
    if (!end) break;
    p = end;
  }
  found[0] = 0;
  return NULL;
}

/* ---- exec ----
 * exec replaces the image: its file gets its end (censored samples, trailer
 * END_EXEC) first.  That end is tentative: flush_lock stays held across the exec
 * call (other threads' flushes skip, an exit or fork waits), and if the exec fails
 * -- a shell tries execve on each PATH entry -- the file is truncated back to where
 * the end began and the profile goes on, nothing lost or written twice: completed
 * samples were committed before the end (LT_FLUSH_COMMIT), the censored ones are
 * still live, and stacks first named in the end are named again (mark_gen).  A
 * vfork child (or a raw clone) shares our memory but has another pid: it must not
 * touch the parent's profile, so it execs without flushing.  posix_spawn needs no
 * hook: its child runs only glibc-internal code before exec, and the new image
 * profiles itself. */
struct exec_undo {
  int held;
  uint64_t offset, samples, censored, countdown;
};

enum { EXEC_PATH, EXEC_SEARCH, EXEC_FD, EXEC_AT };

static void before_exec(struct exec_undo *u, int how, int dirfd, const char *path, int flags) {
  struct lt_thread *t = &lt_tls;
  u->held = 0;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE || t->in_sampler)
    return;
  if (lt_getpid() != lt_g.pid) return;
  int e = errno;
  u->countdown = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  lt_lock_acquire(&lt_g.flush_lock);
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE) {
    lt_lock_release(&lt_g.flush_lock);
    t->countdown = u->countdown;
    t->in_sampler = 0;
    errno = e;
    return;
  }
  t->countdown = u->countdown;
  if (t->initialized && t->countdown != UINT64_MAX) sync_pending(t);
  fold(t);
  t->countdown = 0;
  lt_flush(LT_FLUSH_COMMIT, 0);
  u->offset = lt_g.file_bytes;
  u->samples = lt_g.samples_written;
  u->censored = lt_g.censored_written;
  const char *why = NULL;
  char *note = lt_g.exec_note_path;
  size_t cap = sizeof lt_g.exec_note_path;
  if (how == EXEC_SEARCH) {
    why = search_problem(path, note, cap);
  } else if (how == EXEC_FD) {
    char link[32], num[24];
    size_t n = lt_strlcpy(link, "/proc/self/fd/", sizeof link);
    lt_strlcpy(link + n, lt_utoa((uint64_t)(unsigned)dirfd, num), sizeof link - n);
    ssize_t len = readlink(link, note, cap - 1);
    note[len > 0 ? len : 0] = 0;
    why = elf_problem(dirfd, 0);
  } else {
    lt_strlcpy(note, path, cap);
    int empty = how == EXEC_AT && (flags & AT_EMPTY_PATH) && !path[0];
    why = empty ? elf_problem(dirfd, 0)
                : file_problem(how == EXEC_AT ? dirfd : AT_FDCWD, path,
                               how == EXEC_AT ? (flags & AT_SYMLINK_NOFOLLOW) : 0, 0);
  }
  lt_g.exec_note_reason = why;
  lt_g.mark_gen = ++lt_g.gen_seq;
  lt_flush(LT_FLUSH_TENTATIVE, LT_END_EXEC);
  lt_g.mark_gen = lt_g.file_gen;
  u->held = 1; /* flush_lock and in_sampler stay until the exec returns */
  errno = e;
}

static void after_failed_exec(struct exec_undo *u) {
  if (!u->held) return;
  struct lt_thread *t = &lt_tls;
  int e = errno;
  if (lt_g.file_bytes != u->offset && !lt_g.file_failed) {
    if (truncate(lt_g.path, (off_t)u->offset) == 0) {
      lt_g.file_bytes = u->offset;
    } else {
      lt_g.file_failed = 1; /* a trailer mid-file would make it unreadable: stop */
      lt_log("cannot truncate ", lt_g.path, " after a failed exec; no more samples are written");
    }
  }
  lt_g.samples_written = u->samples;
  lt_g.censored_written = u->censored;
  lt_g.exec_note_reason = NULL;
  lt_lock_release(&lt_g.flush_lock);
  t->countdown = u->countdown;
  t->in_sampler = 0;
  errno = e;
}

LT_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_PATH, AT_FDCWD, path, 0);
  int r = real_execve(path, argv, envp);
  after_failed_exec(&u);
  return r;
}
LT_EXPORT int execv(const char *path, char *const argv[]) {
  return execve(path, argv, environ);
}
LT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_SEARCH, AT_FDCWD, file, 0);
  int r = real_execvpe(file, argv, envp);
  after_failed_exec(&u);
  return r;
}
LT_EXPORT int execvp(const char *file, char *const argv[]) {
  return execvpe(file, argv, environ);
}
LT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
  resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_FD, fd, "", 0);
  int r = real_fexecve(fd, argv, envp);
  after_failed_exec(&u);
  return r;
}
LT_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                       int flags) {
  resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_AT, dirfd, path, flags);
  int r = real_execveat(dirfd, path, argv, envp, flags);
  after_failed_exec(&u);
  return r;
}

/* execl, execlp, execle: collect the variadic arguments, as glibc does. */
#define COLLECT_ARGS(arg0, ap, argv, envp_out, with_env)                      \
  size_t argc_ = 1;                                                          \
  {                                                                          \
    va_list cnt;                                                             \
    va_copy(cnt, ap);                                                        \
    while (va_arg(cnt, const char *)) argc_++;                               \
    va_end(cnt);                                                             \
  }                                                                          \
  if (argc_ >= INT_MAX / sizeof(char *) - 1) {                               \
    errno = E2BIG;                                                           \
    return -1;                                                               \
  }                                                                          \
  const char *argv[argc_ + 1];                                               \
  argv[0] = arg0;                                                            \
  for (size_t i_ = 1; i_ <= argc_; i_++) argv[i_] = va_arg(ap, const char *); \
  if (with_env) envp_out = va_arg(ap, char *const *);

LT_EXPORT int execl(const char *path, const char *arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char *const *envp = environ;
  COLLECT_ARGS(arg, ap, argv, envp, 0);
  va_end(ap);
  return execve(path, (char *const *)argv, envp);
}
LT_EXPORT int execle(const char *path, const char *arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char *const *envp = NULL;
  COLLECT_ARGS(arg, ap, argv, envp, 1);
  va_end(ap);
  return execve(path, (char *const *)argv, envp);
}
LT_EXPORT int execlp(const char *file, const char *arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char *const *envp = environ;
  COLLECT_ARGS(arg, ap, argv, envp, 0);
  va_end(ap);
  return execvpe(file, (char *const *)argv, envp);
}

/* _exit/_Exit skip atexit handlers and destructors: flush here (END_IMMEDIATE_EXIT),
 * unless we are a vfork child sharing the parent's memory. */
static __attribute__((noreturn)) void exit_now(int status) {
  for (;;) {
    syscall(SYS_exit_group, status);
    syscall(SYS_exit, status);
  }
}
static __attribute__((noreturn)) void immediate_exit(int status) {
  if (lt_getpid() == lt_g.pid) lt_finish(LT_END_IMMEDIATE_EXIT);
  exit_now(status);
}
LT_EXPORT void _exit(int status) { immediate_exit(status); }
LT_EXPORT void _Exit(int status) { immediate_exit(status); }

/* quick_exit runs the at_quick_exit handlers and then glibc's internal _exit, which
 * no hook sees.  This handler is registered at start-up, before any of the host's,
 * so it runs after all of them. */
static void quick_exit_finish(void) {
  if (lt_getpid() == lt_g.pid) lt_finish(LT_END_IMMEDIATE_EXIT);
}

/* daemon(): glibc's calls its internal fork and _exit, so the parent's profile would
 * never be finished.  The same function, as glibc 2.36's misc/daemon.c, with the
 * parent leaving through our _exit. */
static void close_keep_errno(int fd) {
  int e = errno;
  syscall(SYS_close, fd);
  errno = e;
}

LT_EXPORT int daemon(int nochdir, int noclose) {
  switch (fork()) {
    case -1: return -1;
    case 0: break;
    default: immediate_exit(0);
  }
  if (setsid() == -1) return -1;
  if (!nochdir) (void)chdir("/");
  if (!noclose) {
    struct stat st;
    int fd = open("/dev/null", O_RDWR, 0);
    if (fd != -1 && fstat(fd, &st) == 0) {
      if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)) {
        (void)dup2(fd, STDIN_FILENO);
        (void)dup2(fd, STDOUT_FILENO);
        (void)dup2(fd, STDERR_FILENO);
        if (fd > 2) (void)close(fd);
      } else {
        close_keep_errno(fd);
        errno = ENODEV; /* no call failed: glibc sets one */
        return -1;
      }
    } else {
      close_keep_errno(fd);
      return -1;
    }
  }
  return 0;
}

/* ---- effective uid changes ----
 * The file is created by the image's first flush with the ids of that moment, and
 * reopened by path at every flush.  A root process that drops to another uid
 * (setpriv, servers) could then no longer append to it: before the change, commit
 * the file (create it if needed) and give it to the new uid. */
static void before_uid_change(uid_t new_euid) {
  struct lt_thread *t = &lt_tls;
  if (new_euid == (uid_t)-1 || new_euid == 0 || t->in_sampler) return;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE) return;
  int e = errno;
  if (geteuid() == 0 && lt_getpid() == lt_g.pid) {
    uint64_t saved = t->countdown;
    t->in_sampler = 1;
    t->countdown = 0;
    lt_lock_acquire(&lt_g.flush_lock);
    if (atomic_load_explicit(&lt_g.state, memory_order_acquire) == LT_ACTIVE) {
      lt_flush(LT_FLUSH_COMMIT, 0);
      if (!lt_g.file_failed) (void)chown(lt_g.path, new_euid, (gid_t)-1);
    }
    lt_lock_release(&lt_g.flush_lock);
    t->countdown = saved;
    t->in_sampler = 0;
  }
  errno = e;
}

LT_EXPORT int setuid(uid_t uid) {
  resolve_exec();
  before_uid_change(uid);
  return real_setuid(uid);
}
LT_EXPORT int seteuid(uid_t euid) {
  resolve_exec();
  before_uid_change(euid);
  return real_seteuid(euid);
}
LT_EXPORT int setreuid(uid_t ruid, uid_t euid) {
  resolve_exec();
  before_uid_change(euid);
  return real_setreuid(ruid, euid);
}
LT_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  resolve_exec();
  before_uid_change(euid);
  return real_setresuid(ruid, euid, suid);
}
#endif

/* ---------------- fork ----------------
 * prepare takes every sampler lock (in lock order), so the child starts from a
 * consistent copy; the parent releases them.  The child keeps the stack table
 * (same address space image, re-emitted lazily: file_gen changes), drops the
 * parent's live objects and pending samples (they belong to the parent's file, never
 * duplicated), resets its counters and opens a new file with forked_from_pid set. */
static int fork_locked;

static void fork_prepare(void) {
  struct lt_thread *t = &lt_tls;
  fork_locked = 0;
  if (atomic_load(&lt_g.state) != LT_ACTIVE || t->in_sampler) return;
  t->in_sampler = 1;
  lt_lock_acquire(&lt_g.flush_lock);
  lt_lock_acquire(&lt_stack_lock);
  lt_live_lock_all();
  lt_lock_acquire(&lt_done_lock);
  lt_g.fork_seq++; /* under flush_lock: siblings get distinct values, in fork order */
  fork_locked = 1;
}

static void fork_parent(void) {
  if (!fork_locked) return;
  fork_locked = 0;
  lt_lock_release(&lt_done_lock);
  lt_live_unlock_all();
  lt_lock_release(&lt_stack_lock);
  lt_lock_release(&lt_g.flush_lock);
  lt_tls.in_sampler = 0;
}

static void make_path(void) {
  char num[24], *p;
  size_t n = lt_strlcpy(lt_g.path, lt_g.out_dir, sizeof lt_g.path);
  const char *parts[7];
  parts[0] = "/";
  parts[1] = lt_program[0] ? lt_program : "unknown";
  parts[2] = ".";
  char pid_s[24], ns_s[24];
  p = lt_utoa(lt_g.pid, num);
  lt_strlcpy(pid_s, p, sizeof pid_s);
  p = lt_utoa((uint64_t)lt_g.start_unix_ns, num);
  lt_strlcpy(ns_s, p, sizeof ns_s);
  parts[3] = pid_s;
  parts[4] = ".";
  parts[5] = ns_s;
  parts[6] = ".ltprof";
  for (int i = 0; i < 7; i++) n += lt_strlcpy(lt_g.path + n, parts[i], sizeof lt_g.path - n);
}

/* A forked child copies the parent's random state and its distance to the next
 * sample point: without a new stream of its own every child of one parent would
 * sample the same allocations.  Unseeded, the stream mixes the parent's state, the
 * child's pid, the time and the parent's fork count; with LIFETIME_SEED, only the seed
 * and the fork count (reproducible: the same program forks in the same order), and
 * the child's later threads derive from its own seed (thread_seq restarts), not the
 * parent's, which its siblings share.  The next sample point is drawn afresh. */
static void reseed_child(struct lt_thread *t) {
  uint32_t seq = lt_g.fork_seq;
  lt_g.fork_seq = 0;
  if (lt_g.have_seed) {
    lt_g.seed = splitmix(lt_g.seed ^ splitmix(0xF0F0F0F0F0F0F0F0ull + seq));
    atomic_store(&lt_g.thread_seq, 0);
  }
  if (!t->initialized || t->countdown == UINT64_MAX) { /* thread_init seeds it */
    t->seg = t->countdown;
    return;
  }
  uint64_t x;
  if (lt_g.have_seed) {
    x = splitmix(lt_g.seed + atomic_fetch_add(&lt_g.thread_seq, 1));
  } else {
    x = splitmix(t->rng ^ lt_mono_ns());
    x = splitmix(x ^ ((uint64_t)lt_g.pid << 32 | seq));
  }
  t->rng = x ? x : 1;
  if (lt_g.full_trace) { /* countdown stays 0: every allocation is a sample */
    t->seg = t->countdown;
    return;
  }
  t->sample_rem = draw(t);
  t->fold_rem = LT_FOLD_BYTES;
  set_countdown(t); /* also drops the parent's bytes since its last slow path */
}

static void fork_child(void) {
  struct lt_thread *t = &lt_tls;
  if (!fork_locked) {
    /* forked from inside the sampler (a signal handler): the state may be torn */
    if (atomic_load(&lt_g.state) == LT_ACTIVE) atomic_store(&lt_g.state, LT_DISABLED);
    return;
  }
  fork_locked = 0;
  lt_lock_reset(&lt_g.flush_lock);
  lt_lock_reset(&lt_stack_lock);
  lt_live_reset_locks();
  lt_g.forked_from = lt_g.pid;
  lt_g.pid = lt_getpid();
  lt_g.ppid = (uint32_t)getppid();
  lt_g.start_unix_ns = lt_unix_ns();
  lt_g.start_mono_ns = lt_mono_ns();
  make_path();
  lt_live_reset_child();
  lt_done_reset_child();
  lt_maps_reset();
  lt_flush_reset_child();
  lt_online_reset_child();
  lt_g.file_gen = lt_g.mark_gen = ++lt_g.gen_seq;
  lt_g.exec_note_reason = NULL;
  atomic_store(&lt_g.clock_bytes, 0);
  atomic_store(&lt_g.total_allocs, 0);
  atomic_store(&lt_g.dropped_samples, 0);
  atomic_store(&lt_g.dropped_stacks, 0);
  atomic_store(&lt_g.samples_taken, 0);
  atomic_store(&lt_g.next_flush_ns, next_deadline(lt_g.start_mono_ns));
  t->tid = lt_gettid();
  t->pending_bytes = 0;
  t->allocs = 0;
  reseed_child(t);
  t->in_sampler = 0;
}

/* ---------------- initialisation ---------------- */

static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return 0;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    if (v > (UINT64_MAX - 9) / 10) return 0;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v;
  return 1;
}

static void disable(const char *a, const char *b, const char *c) {
  lt_log(a, b, c);
  atomic_store(&lt_g.state, LT_DISABLED);
}

static int env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out, const char *what) {
  const char *s = getenv(name);
  if (!s) return 1;
  uint64_t v;
  if (!parse_u64(s, &v) || v < lo || v > hi) {
    char msg[512];
    size_t n = lt_strlcpy(msg, name, sizeof msg);
    n += lt_strlcpy(msg + n, "='", sizeof msg - n);
    n += lt_strlcpy(msg + n, s, sizeof msg - n > 64 ? 64 : sizeof msg - n);
    n += lt_strlcpy(msg + n, "' is not ", sizeof msg - n);
    lt_strlcpy(msg + n, what, sizeof msg - n);
    disable(msg, "; sampling disabled", NULL);
    return 0;
  }
  *out = v;
  return 1;
}

static void global_init(struct lt_thread *t) {
  (void)t;
  if (!environ) return; /* too early (inside the dynamic loader): try again later */
  int expected = LT_UNINIT;
  if (!atomic_compare_exchange_strong(&lt_g.state, &expected, LT_INITIALIZING)) return;
  lt_crc32c_init();
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0) page_size = (uint64_t)ps;

  const char *dir = getenv("LIFETIME_OUT_DIR");
  if (!dir || !*dir) {
    disable("LIFETIME_OUT_DIR is not set; sampling disabled", NULL, NULL);
    return;
  }
  uint64_t interval = LT_DEFAULT_INTERVAL, frames = LT_MAX_FRAMES, flush_ms = 1000, seed = 0;
  uint64_t full_trace = 0, capacity = LT_FULL_DEFAULT_CAPACITY, buffer = LT_FULL_DONE_CAP;
  if (!env_u64("LIFETIME_INTERVAL_BYTES", 1, 1ull << 40, &interval, "a positive integer (bytes)"))
    return;
  if (!env_u64("LIFETIME_MAX_FRAMES", 1, LT_MAX_FRAMES, &frames, "an integer in 1..128")) return;
  if (!env_u64("LIFETIME_FLUSH_MS", 0, 86400000, &flush_ms, "an integer in 0..86400000 (ms)"))
    return;
  if (!env_u64("LIFETIME_FULL_TRACE", 0, 1, &full_trace, "0 or 1")) return;
  if (!env_u64("LIFETIME_FULL_TRACE_CAPACITY", 1, LT_FULL_MAX_CAPACITY, &capacity,
               "an integer in 1..268435456 (live objects)"))
    return;
  if (!env_u64("LIFETIME_FULL_TRACE_BUFFER", 16, 1u << 24, &buffer,
               "an integer in 16..16777216 (records)"))
    return;
  const char *seed_s = getenv("LIFETIME_SEED");
  if (seed_s && !env_u64("LIFETIME_SEED", 0, UINT64_MAX, &seed, "an unsigned integer")) return;
  const char *unw = getenv("LIFETIME_UNWINDER");
  int unwinder = LT_UNWIND_BUILTIN;
  if (unw && *unw) {
    if (strcmp(unw, "builtin") == 0) unwinder = LT_UNWIND_BUILTIN;
    else if (strcmp(unw, "glibc") == 0) unwinder = LT_UNWIND_GLIBC;
    else if (strcmp(unw, "libunwind") == 0) unwinder = LT_UNWIND_LIBUNWIND;
    else if (strcmp(unw, "check") == 0) unwinder = LT_UNWIND_CHECK;
    else {
      disable("LIFETIME_UNWINDER='", unw,
              "' is not builtin, glibc, libunwind or check; sampling disabled");
      return;
    }
  }
  const char *label = getenv("LIFETIME_VERSION_LABEL");
  lt_strlcpy(lt_g.version_label, label ? label : "", sizeof lt_g.version_label);

  /* The directory must exist and take a new file: probe by creating one. */
  if (dir[0] == '/') {
    lt_strlcpy(lt_g.out_dir, dir, sizeof lt_g.out_dir);
  } else {
    if (!getcwd(lt_g.out_dir, sizeof lt_g.out_dir - 2)) lt_g.out_dir[0] = 0;
    size_t n = strlen(lt_g.out_dir);
    lt_strlcpy(lt_g.out_dir + n, "/", sizeof lt_g.out_dir - n);
    lt_strlcpy(lt_g.out_dir + n + 1, dir, sizeof lt_g.out_dir - n - 1);
  }
  struct stat st;
  if (stat(lt_g.out_dir, &st) != 0) {
    disable("LIFETIME_OUT_DIR=", lt_g.out_dir,
            errno == ENOENT ? " does not exist; sampling disabled"
                            : " cannot be accessed; sampling disabled");
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    disable("LIFETIME_OUT_DIR=", lt_g.out_dir, " is not a directory; sampling disabled");
    return;
  }
  lt_g.pid = lt_getpid();
  lt_g.ppid = (uint32_t)getppid();
  char probe[4096 + 64], num[24];
  size_t pn = lt_strlcpy(probe, lt_g.out_dir, sizeof probe);
  pn += lt_strlcpy(probe + pn, "/.lifetime-probe.", sizeof probe - pn);
  lt_strlcpy(probe + pn, lt_utoa(lt_g.pid, num), sizeof probe - pn);
  int fd = lt_open_high(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) { /* stale probe of a dead process with our pid */
    unlink(probe);
    fd = lt_open_high(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) {
    disable("LIFETIME_OUT_DIR=", lt_g.out_dir, " is not writable; sampling disabled");
    return;
  }
  close(fd);
  unlink(probe);

  lt_g.full_trace = (int)full_trace;
  lt_g.live_capacity = full_trace ? capacity : LT_LIVE_CAP;
  lt_g.done_capacity = full_trace ? buffer : LT_DONE_CAP;
  if (!lt_stacks_init() || !lt_live_init() || !lt_flush_init() || !lt_unwind_prepare()) {
    disable("cannot map the sampler's tables; sampling disabled", NULL, NULL);
    return;
  }
  lt_g.interval = full_trace ? 1 : interval; /* a full trace: every byte a sample point */
  lt_g.max_frames = (int)frames;
  lt_g.flush_ms = flush_ms;
  lt_g.have_seed = seed_s != NULL;
  lt_g.seed = seed;
  lt_g.unwinder = unwinder;
  lt_g.start_unix_ns = lt_unix_ns();
  lt_g.start_mono_ns = lt_mono_ns();
  const char *base;
  lt_program_name(lt_exe, sizeof lt_exe, &base);
  lt_strlcpy(lt_program, base, sizeof lt_program);
  make_path();
  lt_g.file_gen = lt_g.mark_gen = lt_g.gen_seq = 1;
  atomic_store(&lt_g.next_flush_ns, next_deadline(lt_g.start_mono_ns));
  have_thread_key = pthread_key_create(&thread_key, thread_exit_fold) == 0;
  atomic_store_explicit(&lt_g.state, LT_ACTIVE, memory_order_release);
}

__attribute__((constructor(101))) static void lt_constructor(void) {
  struct lt_thread *t = &lt_tls;
  uint64_t saved = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  if (atomic_load(&lt_g.state) == LT_UNINIT) global_init(t);
  if (atomic_load(&lt_g.state) == LT_ACTIVE) {
#ifndef LT_HARNESS
    resolve_exec();
#endif
    pthread_atfork(fork_prepare, fork_parent, fork_child);
#ifndef LT_HARNESS
    at_quick_exit(quick_exit_finish);
#endif
    if (!lt_unwind_init(lt_g.unwinder))
      lt_log("LIFETIME_UNWINDER: cannot load that unwinder; using the builtin one", NULL, NULL);
#ifndef LT_HARNESS
    const char *sym = getenv("LIFETIME_SYMBOLIZE");
    if (sym && strcmp(sym, "1") == 0 && lt_symtab_refresh()) lt_symbolize_stacks = 1;
    lt_online_init();
#endif
  }
  t->countdown = saved;
  t->in_sampler = 0;
}

__attribute__((destructor)) static void lt_destructor(void) { lt_finish(LT_END_EXIT); }

#ifdef LT_HARNESS
/* For the sanitizer harness: the end of the "process" on demand. */
LT_EXPORT void lt_harness_finish(void) { lt_finish(LT_END_EXIT); }
#endif
