/* liblifetime_sampler.so: LD_PRELOAD allocation-lifetime sampler.
 *
 * Interposes the allocator entry points, Poisson-samples allocations by bytes (as
 * TCMalloc does), records each sampled object's stack, size and birth on two clocks,
 * and its death when it is freed (or realloc'ed), and appends the finished samples to
 * a TFRecord file of ProfileChunk messages (profile_format/profile.proto).
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
 * every 64 KiB allocated (lt_account), each sample (lt_record_alloc) and each sampled
 * free (complete) compare CLOCK_MONOTONIC with lt_g.next_flush_ns (and complete()
 * the number of waiting samples with LT_FLUSH_PENDING); when due, the thread takes
 * flush_lock with lt_lock_try -- never waiting: if another thread is flushing it
 * goes on -- sets in_sampler, writes the encoded chunks with write(2) and restores
 * errno (host_flush; all in account.c).  What a SIGKILL loses: the samples completed
 * since the last flush, i.e. at most those of the last LIFETIME_FLUSH_MS (and, with a
 * sampled free checking the count, about LT_FLUSH_PENDING of them) plus the time to
 * the next slow path after the deadline (a thread that allocates 64 KiB gets there; a
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
 * every allocation takes the slow path and lt_account() says "sample"; the free()
 * pre-filter is all ones, so every free looks its address up; the live table, the
 * done buffers and the stack table are sized for a whole heap (common.h, live.c).
 * The header says so (Header.full_trace, sampling_interval_bytes = 1,
 * live_capacity).  Nothing is dropped silently: a full live or stack table is
 * counted in Trailer.dropped_samples / dropped_stacks; a full done buffer makes the
 * completing thread wait for flush_lock and flush itself (back-pressure: it holds no
 * sampler lock then), except in a vfork child or with the in-process symbolizer or a
 * model loaded (a flush may take the loader lock there), where the record is
 * dropped and counted.  Flushes stay inline and bounded as in sampled mode (every
 * LT_FLUSH_PENDING completed records).  Completed records are written as
 * ProfileChunk.compact_samples rows (flush.c; ~20-25 bytes each instead of ~62 as a
 * Sample message; censored ones, and all with a model loaded, stay Sample messages).
 * Each thread keeps its last stack walk and replays the part the next one shares with
 * it, word by word checked (unwind.c: the walk's memo), and the ids of the stacks it
 * interned lately (stacks.c: lt_stack_intern_hinted).
 *
 * The real allocator is glibc's, called through its exported __libc_* entry points
 * (no dlsym bootstrap).  posix_memalign, aligned_alloc (an alias of memalign in glibc
 * 2.36) and reallocarray (__libc_reallocarray is GLIBC_PRIVATE) are implemented on
 * top of them with glibc's own argument checks.
 */
#ifndef LT_SAMPLER_H
#define LT_SAMPLER_H

/* Declarations shared by the sampler's core files (all in liblifetime_sampler.so, none
 * in the allocator):
 *   account.c        per-thread accounting, sampling decisions, recording a sample and
 *                    its end, the inline (host-thread) flushes
 *   hooks_malloc.c   the allocator entry points (malloc, free, realloc, ...)
 *   hooks_process.c  the end of a process image (final flush; exit, _exit, quick_exit,
 *                    daemon, exec) and effective-uid changes
 *   fork.c           pthread_atfork handlers: a forked child's own profile
 *   sampler.c        the process-wide state and start-up (environment, constructor)
 * and rng.h (random numbers).  Lock order (common.h): flush < stack < stripes < done;
 * every path holding one of them has in_sampler set. */
#include <pthread.h>
#include <stdint.h>

#include "common.h"

#ifdef LT_HARNESS
/* Test harness build (sanitizers): the hooks get an lt_ prefix and are called directly. */
#define HOOK(name) lt_##name
#define LT_EXPORT __attribute__((visibility("default")))
#else
#define HOOK(name) name
#define LT_EXPORT __attribute__((visibility("default")))
#endif

extern char **environ;

/* ---- sampler.c: process-wide state and start-up ---- */
LT_HIDDEN extern pthread_key_t lt_thread_key; /* its destructor folds at thread exit */
LT_HIDDEN extern int lt_have_thread_key;
LT_HIDDEN extern uint64_t lt_page_size;
LT_HIDDEN void lt_global_init(struct lt_thread *t); /* first allocation or constructor */

/* ---- per-thread accounting (inline: the hooks, the ends and fork use them) ---- */
/* Bytes since the last slow path are implicit in (seg - countdown); bring them into
 * the per-thread counters. */
static inline void lt_sync_pending(struct lt_thread *t) {
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
static inline uint64_t lt_fold(struct lt_thread *t) {
  uint64_t b = t->pending_bytes, a = t->allocs;
  t->pending_bytes = 0;
  t->allocs = 0;
  if (a) atomic_fetch_add_explicit(&lt_g.total_allocs, a, memory_order_relaxed);
  return atomic_fetch_add_explicit(&lt_g.clock_bytes, b, memory_order_relaxed) + b;
}

static inline void lt_set_countdown(struct lt_thread *t) {
  int64_t next = t->sample_rem < t->fold_rem ? t->sample_rem : t->fold_rem;
  if (next < 1) next = 1;
  t->countdown = t->seg = (uint64_t)next;
}

static inline uint64_t lt_next_deadline(uint64_t now) {
  return lt_g.flush_ms ? now + lt_g.flush_ms * 1000000ull : UINT64_MAX;
}

/* ---- account.c ---- */
LT_HIDDEN int lt_account(struct lt_thread *t, size_t n, uint64_t *clock);
LT_HIDDEN LT_NOINLINE void lt_record_alloc(struct lt_thread *t, void *p, size_t size,
                                           size_t align, int fn, uintptr_t ra, uint64_t clock);
LT_HIDDEN int lt_detach(struct lt_thread *t, void *p, struct lt_live *out);
LT_HIDDEN void lt_complete_guarded(struct lt_thread *t, const struct lt_live *e, int free_fn);

/* ---- hooks_process.c ---- */
LT_HIDDEN void lt_finish(int reason); /* the final flush of this image */
LT_HIDDEN void lt_thread_exit_fold(void *v);
#ifndef LT_HARNESS
LT_HIDDEN void lt_resolve_exec(void);
LT_HIDDEN void lt_quick_exit_finish(void);
#endif

/* ---- fork.c ---- */
LT_HIDDEN void lt_fork_prepare(void);
LT_HIDDEN void lt_fork_parent(void);
LT_HIDDEN void lt_fork_child(void);
LT_HIDDEN void lt_make_path(void); /* lt_g.path from out_dir, program, pid, start time */

#endif
