/* Per-thread accounting and sampling decisions (the slow path of every allocation),
 * recording a sample and the end of its object's life, and the inline flushes done
 * by host threads.  The overview: sampler.h. */
#include <errno.h>
#include <pthread.h>

#include "common.h"
#include "rng.h"
#include "sampler.h"

static int thread_init(struct lt_thread *t) {
  int st = atomic_load_explicit(&lt_g.state, memory_order_acquire);
  if (st == LT_UNINIT) {
    lt_global_init(t);
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
  uint64_t seed = lt_g.have_seed ? lt_splitmix(lt_g.seed + seq)
                                 : lt_splitmix(lt_mono_ns() ^ ((uint64_t)t->tid << 32) ^
                                               (uint64_t)(uintptr_t)t);
  t->rng = seed ? seed : 1;
  t->pending_bytes = 0;
  t->allocs = 0;
  t->sample_rem = lt_draw(t);
  t->fold_rem = LT_FOLD_BYTES;
  t->countdown = t->seg = 0;
  t->initialized = 1;
  if (lt_have_thread_key) pthread_setspecific(lt_thread_key, (void *)1); /* fold at thread exit */
  return 1;
}

/* ---------------- inline flushing ---------------- */

static inline int flush_due(uint64_t now) {
  return now >= atomic_load_explicit(&lt_g.next_flush_ns, memory_order_relaxed);
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
      atomic_store_explicit(&lt_g.next_flush_ns, lt_next_deadline(lt_mono_ns()),
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
int lt_account(struct lt_thread *t, size_t n, uint64_t *clock) {
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
    lt_sync_pending(t);
    t->pending_bytes += nn;
    t->allocs++;
    *clock = lt_fold(t);
    t->countdown = t->seg = 0;
    return 1;
  }
  lt_sync_pending(t);
  t->pending_bytes += nn;
  t->sample_rem -= (int64_t)nn;
  t->fold_rem -= (int64_t)nn;
  t->allocs++;
  int sample = t->sample_rem <= 0, folded = 0;
  if (sample || t->fold_rem <= 0) {
    *clock = lt_fold(t);
    t->fold_rem = LT_FOLD_BYTES;
    folded = 1;
  }
  if (sample) t->sample_rem = lt_draw(t);
  lt_set_countdown(t);
  /* a sample checks the deadline in lt_record_alloc; a plain fold checks it here */
  if (folded && !sample && LT_UNLIKELY(flush_due(lt_mono_ns()))) host_flush(t);
  return sample;
}

/* ---------------- recording ---------------- */

LT_NOINLINE void lt_record_alloc(struct lt_thread *t, void *p, size_t size, size_t align,
                                     int fn, uintptr_t ra, uint64_t clock) {
  int e = errno;
  uint64_t saved = t->countdown;
  t->countdown = 0;
  t->in_sampler = 1;
  if (!t->stack_known) lt_thread_stack_bounds(t);
  if (LT_UNLIKELY(!t->memo_tried) && lt_g.full_trace) lt_unwind_memo_start(t);
  uintptr_t frames[LT_MAX_FRAMES];
  int truncated = 0;
  int depth = lt_capture(frames, lt_g.max_frames, ra, &truncated, t);
  uint32_t sid = lt_g.full_trace ? lt_stack_intern_hinted(t->stack_hint, frames, depth, truncated)
                                 : lt_stack_intern(frames, depth, truncated);
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
      int cls = lt_online_predict(frames, depth, ra, height, lt_online_key_size(size), &hit,
                                  &ns);
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
    atomic_store_explicit(&lt_g.next_flush_ns, lt_next_deadline(lt_mono_ns()),
                          memory_order_relaxed);
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
  if (t->initialized && t->countdown != UINT64_MAX) lt_sync_pending(t);
  struct lt_done d = {.addr = e->addr, .size = e->size, .align = e->align,
                      .alloc_ns = e->alloc_ns, .alloc_bytes = e->alloc_bytes,
                      .stack_id = e->stack_id, .tid = e->tid, .fn = e->fn,
                      .pred = e->pred, .pred_hit = e->pred_hit, .pred_ns = e->pred_ns,
                      .free_ns = lt_mono_ns(), .free_bytes = lt_fold(t),
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
int lt_detach(struct lt_thread *t, void *p, struct lt_live *out) {
  if (t->in_sampler || atomic_load_explicit(&lt_g.state, memory_order_relaxed) != LT_ACTIVE)
    return 0;
  t->in_sampler = 1;
  int found = lt_live_remove((uint64_t)(uintptr_t)p, out);
  t->in_sampler = 0;
  return found;
}

void lt_complete_guarded(struct lt_thread *t, const struct lt_live *e, int free_fn) {
  t->in_sampler = 1;
  complete(t, e, free_fn);
  t->in_sampler = 0;
}
