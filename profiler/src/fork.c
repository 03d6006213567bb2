/* fork: the pthread_atfork handlers that give a forked child its own profile. */
#include <unistd.h>

#include "common.h"
#include "rng.h"
#include "sampler.h"

/* ---------------- fork ----------------
 * prepare takes every sampler lock (in lock order), so the child starts from a
 * consistent copy; the parent releases them.  The child keeps the stack table
 * (same address space image, re-emitted lazily: file_gen changes), drops the
 * parent's live objects and pending samples (they belong to the parent's file, never
 * duplicated), resets its counters and opens a new file with forked_from_pid set. */
static int fork_locked;

/* Not analyzed: the locks are taken only while the sampler is active, and held across
 * fork() until lt_fork_parent (or reset in the child); fork_locked says whether. */
void lt_fork_prepare(void) NO_THREAD_SAFETY_ANALYSIS {
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

void lt_fork_parent(void) NO_THREAD_SAFETY_ANALYSIS { /* see lt_fork_prepare */
  if (!fork_locked) return;
  fork_locked = 0;
  lt_lock_release(&lt_done_lock);
  lt_live_unlock_all();
  lt_lock_release(&lt_stack_lock);
  lt_lock_release(&lt_g.flush_lock);
  lt_tls.in_sampler = 0;
}

void lt_make_path(void) {
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
    lt_g.seed = lt_splitmix(lt_g.seed ^ lt_splitmix(0xF0F0F0F0F0F0F0F0ull + seq));
    atomic_store(&lt_g.thread_seq, 0);
  }
  if (!t->initialized || t->countdown == UINT64_MAX) { /* thread_init seeds it */
    t->seg = t->countdown;
    return;
  }
  uint64_t x;
  if (lt_g.have_seed) {
    x = lt_splitmix(lt_g.seed + atomic_fetch_add(&lt_g.thread_seq, 1));
  } else {
    x = lt_splitmix(t->rng ^ lt_mono_ns());
    x = lt_splitmix(x ^ ((uint64_t)lt_g.pid << 32 | seq));
  }
  t->rng = x ? x : 1;
  if (lt_g.full_trace) { /* countdown stays 0: every allocation is a sample */
    t->seg = t->countdown;
    return;
  }
  t->sample_rem = lt_draw(t);
  t->fold_rem = LT_FOLD_BYTES;
  lt_set_countdown(t); /* also drops the parent's bytes since its last slow path */
}

void lt_fork_child(void) {
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
  lt_make_path();
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
  atomic_store(&lt_g.next_flush_ns, lt_next_deadline(lt_g.start_mono_ns));
  t->tid = lt_gettid();
  t->pending_bytes = 0;
  t->allocs = 0;
  reseed_child(t);
  t->in_sampler = 0;
}
