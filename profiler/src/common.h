/* Internal declarations shared by the sampler's translation units (the in-process
 * runtime it links, inprocess/src, has headers of its own, included here).
 *
 * Nothing here allocates with malloc or uses stdio: every table is a fixed-size
 * mmap'd region (sizes below), every lock is a small futex lock that a forked child
 * can re-initialise by storing 0, and file output goes through open/write/close.
 */
#ifndef LT_COMMON_H
#define LT_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "context.h"
#include "online_sampler.h"
#include "runtime.h"
#include "symtab.h"
#include "unwind.h"

#define LT_SAMPLER_VERSION "lifetime-sampler 1.0"

/* ---- limits (all memory is mmap'd once, lazily touched; see README in report) ---- */
#define LT_FOLD_BYTES (64 * 1024)  /* per-thread bytes folded into the global clock */

/* Live sampled objects: 2^18 entries (64 B each: 16 MiB virtual), 2^18 hash buckets
 * (1 MiB), a 2^19-bit pre-filter (64 KiB) read by every free(), 64 lock stripes.
 * Full-trace mode (LIFETIME_FULL_TRACE=1) sizes the table from
 * LIFETIME_FULL_TRACE_CAPACITY instead (lt_live_cap; buckets: the next power of two),
 * see live.c. */
#define LT_LIVE_BITS 18
#define LT_LIVE_CAP (1u << LT_LIVE_BITS)
#define LT_LIVE_BUCKETS (1u << LT_LIVE_BITS)
#define LT_FILTER_BITS 19
#define LT_STRIPES 64
#define LT_FULL_DEFAULT_CAPACITY (1u << 22) /* live objects of a full trace: 4,194,304 */
#define LT_FULL_MAX_CAPACITY (1u << 28)

/* Distinct stacks: 2^17 stacks, 2^22 frames (32 MiB virtual), 2^18 index slots; a
 * full trace (every allocation's stack) gets 2^20 stacks and 2^25 frames (256 MiB
 * virtual, touched as used).  The caps in use are lt_stack_cap / lt_frame_cap. */
#define LT_STACK_CAP (1u << 17)
#define LT_FRAME_CAP (1u << 22)
#define LT_FULL_STACK_CAP (1u << 20)
#define LT_FULL_FRAME_CAP (1u << 25)

/* Completed samples waiting for the next flush: two buffers of 2^16 records (2^17 in
 * a full trace).  A host thread that completes a sample flushes (if no other thread
 * is flushing) once LT_FLUSH_PENDING of them are waiting, whatever the time, so the
 * buffer never fills in a steady state and one inline flush encodes a bounded amount
 * (~0.5 MiB).  In a full trace a thread that finds the buffer full waits for the
 * flush lock and flushes itself (back-pressure) rather than dropping the record. */
#define LT_DONE_CAP (1u << 16)
#define LT_FULL_DONE_CAP (1u << 17) /* LIFETIME_FULL_TRACE_BUFFER: 16..2^24 */
#define LT_FLUSH_PENDING 4096u

/* One chunk is encoded into a 4 MiB buffer; bigger flushes write several chunks. */
#define LT_CHUNK_CAP (4u << 20)

/* Executable mappings already written to this file. */
#define LT_MAP_CAP 8192

/* ---- enums mirroring profile.proto ----
 * AllocFunction: the one enum of allocator entry points; alloc_slow (hooks_malloc.c)
 * picks the glibc function by it too.  Values are the wire values. */
enum { LT_MALLOC = 1, LT_CALLOC = 2, LT_REALLOC = 3, LT_POSIX_MEMALIGN = 4,
       LT_ALIGNED_ALLOC = 5, LT_MEMALIGN = 6, LT_VALLOC = 7, LT_REALLOCARRAY = 8,
       LT_PVALLOC = 9 };
enum { LT_FREE = 1, LT_FREED_BY_REALLOC = 2, LT_FREED_BY_REALLOCARRAY = 3 };
enum { LT_END_EXIT = 1, LT_END_IMMEDIATE_EXIT = 2, LT_END_EXEC = 3 };

/* ---- process state ---- */
enum { LT_UNINIT = 0, LT_INITIALIZING = 1, LT_ACTIVE = 2, LT_DISABLED = 3,
       LT_FINISHING = 4, LT_FINISHED = 5 };

/* ---- records ---- */
struct lt_live {            /* a sampled object that is still live */
  uint64_t addr, size, align, alloc_ns, alloc_bytes;
  uint32_t stack_id, tid;
  uint32_t next;            /* bucket chain / free list: index + 1, 0 = end */
  uint8_t fn;
  int8_t pred;              /* online predicted class, -1 none */
  uint8_t pred_hit;         /* the prediction came from the cache */
  uint32_t pred_ns;         /* time the prediction took */
};
struct lt_done {            /* a finished (or, at the end, censored) sample */
  uint64_t addr, size, align, alloc_ns, alloc_bytes;
  uint64_t free_ns, free_bytes;
  uint32_t stack_id, tid, free_tid;
  uint8_t fn, free_fn;
  int8_t pred;
  uint8_t pred_hit;
  uint32_t pred_ns;
};

/* ---- global configuration and counters ---- */
struct lt_global {
  _Atomic int state;
  uint64_t interval;
  int max_frames;
  uint64_t flush_ms;
  int have_seed;
  uint64_t seed;
  int unwinder;             /* LT_UNWIND_* */
  int full_trace;           /* LIFETIME_FULL_TRACE=1: every allocation is a sample */
  uint64_t live_capacity;   /* entries of the live table (Header.live_capacity) */
  uint64_t done_capacity;   /* full trace: records per done buffer */
  char out_dir[4096];
  char version_label[1024];

  /* identity of this process image (reset in a forked child) */
  uint32_t pid, ppid, forked_from;
  int64_t start_unix_ns;
  uint64_t start_mono_ns;
  char path[4096 + 256];    /* the profile file */

  /* clocks and totals */
  _Atomic uint64_t clock_bytes;   /* the CLOCK_ALLOCATED_BYTES clock = total bytes */
  _Atomic uint64_t total_allocs;
  _Atomic uint64_t dropped_samples, dropped_stacks;
  _Atomic uint64_t samples_taken;
  _Atomic uint32_t thread_seq;
  uint32_t fork_seq;        /* forks of this image so far: each child's own stream */

  /* flush machinery (no thread of our own: host threads flush inline, see account.c) */
  lt_lock flush_lock;       /* lock order: flush < stack < stripes < done */
  _Atomic uint64_t next_flush_ns; /* CLOCK_MONOTONIC deadline of the next periodic flush */
  int header_written;
  int file_failed;
  uint64_t file_bytes;      /* bytes this image has appended to its file */
  uint64_t samples_written, censored_written;
  uint64_t chunk_dropped;   /* samples lost with chunks flush.c could not write (an
                             * overflow); also counted in dropped_samples */
  uint64_t test_overflow_chunk; /* LIFETIME_TEST_OVERFLOW_CHUNK (tests only): this
                                 * image's Nth chunk is treated as overflowed; 0: none */
  uint32_t gen_seq;         /* source of file_gen and mark_gen values, never reused */
  uint32_t file_gen;        /* per file; a stack is emitted once per gen */
  uint32_t mark_gen;        /* gen stamped on stacks emitted now: file_gen, or a fresh
                             * value while writing the tentative end of an exec */
  /* the target of a pending exec that the loader will not preload us into */
  char exec_note_path[4096];
  const char *exec_note_reason;
};
extern struct lt_global lt_g;

/* ---- stacks.c ---- */
LT_HIDDEN int lt_stacks_init(void); /* sized by lt_g.full_trace */
LT_HIDDEN uint32_t lt_stack_intern(const uintptr_t *frames, int depth, int truncated);
/* lt_stack_intern, first trying the ids in `hint` (16 slots, the thread's own: a
 * stack the thread interned lately is found without hashing it or probing the index) */
LT_HIDDEN uint32_t lt_stack_intern_hinted(uint32_t *hint, const uintptr_t *frames, int depth,
                                          int truncated);
LT_HIDDEN int lt_stack_get(uint32_t id, const uintptr_t **frames, int *depth, int *truncated,
                           uint32_t **emitted_gen);
LT_HIDDEN extern lt_lock lt_stack_lock;

/* ---- live.c ---- */
LT_HIDDEN int lt_live_init(void); /* sized by lt_g.full_trace, lt_g.live_capacity */
LT_HIDDEN void lt_live_reset_child(void);
LT_HIDDEN int lt_live_insert(const struct lt_live *e); /* 0 full, 1 ok, 2 replaced stale */
LT_HIDDEN int lt_live_remove(uint64_t addr, struct lt_live *out);
LT_HIDDEN void lt_live_reinsert(const struct lt_live *e);
/* Two-level pre-filter read by every free(): a 1 KiB summary (2^13 bits) in front of
 * the 64 KiB filter (2^19 bits).  Both are exact: a bit is set while at least one
 * live entry maps to it (see live.c).  The summary is indexed by the 4 KiB page
 * (folded), so frees close together in memory read the same cache line, and the 64
 * filter bits under one summary bit share a line too. */
#define LT_SUMMARY_BITS 13
LT_HIDDEN extern _Atomic uint8_t lt_filter[(1u << LT_FILTER_BITS) / 8]; /* in .bss */
LT_HIDDEN extern _Atomic uint8_t lt_summary[(1u << LT_SUMMARY_BITS) / 8];
LT_HIDDEN void lt_live_lock_all(void);   /* fork prepare: in lock order */
LT_HIDDEN void lt_live_unlock_all(void);
LT_HIDDEN void lt_live_reset_locks(void);
static inline uint64_t lt_ptr_hash(uint64_t a) { return (a >> 4) * 0x9E3779B97F4A7C15ull; }
static inline uint32_t lt_summary_bit(uint64_t a) {
  return (uint32_t)(((a >> 12) ^ (a >> 25)) & ((1u << LT_SUMMARY_BITS) - 1));
}
static inline uint32_t lt_filter_bit(uint64_t a, uint32_t s) {
  return (s << (LT_FILTER_BITS - LT_SUMMARY_BITS)) |
         (uint32_t)(lt_ptr_hash(a) >> (64 - (LT_FILTER_BITS - LT_SUMMARY_BITS)));
}
static inline int lt_filter_maybe(const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  uint32_t s = lt_summary_bit(a);
  if (LT_LIKELY(!(atomic_load_explicit(&lt_summary[s >> 3], memory_order_relaxed) &
                  (1u << (s & 7)))))
    return 0;
  uint32_t f = lt_filter_bit(a, s);
  return atomic_load_explicit(&lt_filter[f >> 3], memory_order_relaxed) & (1u << (f & 7));
}
/* Iterates every live entry with its stripe locked; used by the final flush. */
typedef void (*lt_live_fn)(const struct lt_live *e, void *ctx);
LT_HIDDEN void lt_live_for_each_stripe(int stripe, lt_live_fn fn, void *ctx);

/* ---- done buffer (live.c) ---- */
LT_HIDDEN extern lt_lock lt_done_lock;
/* Returns the fill count, or -1 if the buffer is full (the caller counts the drop). */
LT_HIDDEN int lt_done_append(const struct lt_done *d);
LT_HIDDEN size_t lt_done_swap(struct lt_done **out);  /* takes done_lock itself */
LT_HIDDEN void lt_done_reset_child(void);

/* ---- procinfo.c ---- */
LT_HIDDEN size_t lt_read_file(const char *path, char *buf, size_t cap);
struct lt_pb;
LT_HIDDEN void lt_maps_reset(void);
LT_HIDDEN int lt_maps_emitted(void);
LT_HIDDEN void lt_maps_forget(int kept);
/* Encodes every executable file-backed mapping not yet written to this file as
 * ProfileChunk.mappings; calls ensure(bytes) before each so the caller can start a
 * new chunk when the current one is full. */
LT_HIDDEN void lt_maps_emit(struct lt_pb *pb, void (*ensure)(size_t));

/* ---- flush.c ---- */
enum {
  LT_FLUSH_PERIODIC = 0,  /* header (first time), new mappings, completed samples */
  LT_FLUSH_FINAL = 1,     /* + censored samples and the trailer: the file is complete */
  LT_FLUSH_COMMIT = 2,    /* like PERIODIC, but always header and mappings */
  LT_FLUSH_TENTATIVE = 3  /* only censored samples and the trailer, as the last chunks
                           * before an exec; undone (truncated) if the exec fails */
};
LT_HIDDEN void lt_flush(int mode, int reason); /* caller holds flush_lock, in_sampler */
/* Set (under flush_lock) to a completed record that found the done buffer full (full
 * trace): the next non-tentative lt_flush writes it after the buffered ones and clears
 * it. */
LT_HIDDEN extern const struct lt_done *lt_flush_extra;
LT_HIDDEN void lt_flush_reset_child(void);
LT_HIDDEN int lt_flush_init(void);
LT_HIDDEN extern char lt_program[256];

#endif
