/* The table of live sampled objects, the free() pre-filter, and the buffer of
 * completed samples waiting for the next flush.
 *
 * Live table: chained hash buckets keyed by address, LT_STRIPES lock stripes, each
 * owning a contiguous range of buckets (no global lock).  Entries come from one pool
 * of LT_LIVE_CAP (atomic bump allocation; a stripe keeps the entries freed in it on
 * its own free list).
 *
 * Pre-filter, read lock-free by every free(): summary bit s = 13 bits of the pointer's
 * (folded) 4 KiB page number; filter bit f = s << 6 | 6 bits of the pointer's hash;
 * bucket = f >> 1; stripe = f >> 13 = s >> 7.  Every summary and filter bit therefore
 * belongs to exactly one stripe and is set/cleared only under that stripe's lock,
 * which keeps both levels exact (summary bits count their live entries in `scount`;
 * a filter bit is cleared when its bucket has no other entry with that bit).  A free()
 * reads the 1 KiB summary, then, if set, the 64 KiB filter; only if both are set does
 * it lock and search.  The page-based summary keeps the lines a program's frees touch
 * few and hot (frees cluster in memory).
 *
 * Visibility argument for the lock-free filter read in free(): the entry for p is
 * inserted (and its bit set) before malloc returns p, and whoever frees p got p through
 * the program's own synchronisation, so the bit store happens-before the free's load.
 *
 * Full-trace mode (lt_g.full_trace): every allocation is in the table, so the
 * pre-filter would pass (nearly) every free anyway; it is set to all ones once and
 * never touched (every free looks the address up), and the table is sized for a whole
 * heap: lt_g.live_capacity entries (LIFETIME_FULL_TRACE_CAPACITY, default 2^22),
 * buckets the next power of two >= that (chains of ~1), bucket = the top bits of the
 * pointer hash, stripe = the top 6 bucket bits.  All of it mmap'd MAP_NORESERVE and
 * touched as used: ~64 bytes of RSS per live object plus the bucket array.  A full
 * table is counted (dropped_samples), never grown.
 */
#include <string.h>
#include <sys/mman.h>

#include "common.h"

struct stripe {
  lt_lock lock;
  uint32_t free_head; /* entry index + 1; guarded by lock (C cannot name a member in GUARDED_BY) */
  char pad[64 - 8];
};
static _Atomic uint32_t pool_used; /* entries ever handed out */

static struct lt_live *entries;
static uint32_t *buckets; /* entry index + 1 */
_Atomic uint8_t lt_filter[(1u << LT_FILTER_BITS) / 8] __attribute__((aligned(4096)));
_Atomic uint8_t lt_summary[(1u << LT_SUMMARY_BITS) / 8] __attribute__((aligned(64)));
static uint32_t scount[1u << LT_SUMMARY_BITS]; /* live entries per summary bit */
static struct stripe stripes[LT_STRIPES] __attribute__((aligned(64)));

static uint32_t live_cap = LT_LIVE_CAP;     /* entries */
static uint32_t bucket_bits = LT_LIVE_BITS; /* log2 of the number of buckets */
static int full;                            /* lt_g.full_trace, read on every op */

extern lt_lock lt_done_lock;
static struct lt_done *done_buf[2];
static uint32_t done_cap = LT_DONE_CAP;
static uint32_t done_count GUARDED_BY(lt_done_lock);
static int done_cur GUARDED_BY(lt_done_lock);
lt_lock lt_done_lock;

static void filter_fill_full(void) {
  memset((void *)lt_filter, 0xff, sizeof lt_filter);
  memset((void *)lt_summary, 0xff, sizeof lt_summary);
}

int lt_live_init(void) {
  if (lt_g.full_trace) {
    full = 1;
    uint64_t cap = lt_g.live_capacity;
    if (cap < 1) cap = 1;
    if (cap > LT_FULL_MAX_CAPACITY) cap = LT_FULL_MAX_CAPACITY;
    live_cap = (uint32_t)cap;
    bucket_bits = 12; /* at least 64 buckets per stripe */
    while ((1ull << bucket_bits) < cap) bucket_bits++;
    done_cap = (uint32_t)lt_g.done_capacity;
    filter_fill_full();
  }
  lt_g.live_capacity = live_cap;
  entries = lt_map(sizeof(struct lt_live) * live_cap);
  buckets = lt_map(sizeof(uint32_t) << bucket_bits);
  done_buf[0] = lt_map(sizeof(struct lt_done) * done_cap);
  done_buf[1] = lt_map(sizeof(struct lt_done) * done_cap);
  return entries && buckets && done_buf[0] && done_buf[1];
}

static void remap_zero(void *p, size_t bytes) {
  /* Fresh zero pages over the old ones: O(touched pages), no memset of the region. */
  if (mmap(p, bytes, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    memset(p, 0, bytes);
}

void lt_live_reset_child(void) {
  remap_zero(entries, sizeof(struct lt_live) * live_cap);
  remap_zero(buckets, sizeof(uint32_t) << bucket_bits);
  if (full) {
    filter_fill_full();
  } else {
    memset((void *)lt_filter, 0, sizeof lt_filter);
    memset((void *)lt_summary, 0, sizeof lt_summary);
    memset(scount, 0, sizeof scount);
  }
  for (int s = 0; s < LT_STRIPES; s++) stripes[s].free_head = 0;
  atomic_store(&pool_used, 0);
}

/* Not analyzed: a loop over the stripes' locks, held across fork() (fork.c). */
void lt_live_lock_all(void) NO_THREAD_SAFETY_ANALYSIS {
  for (int s = 0; s < LT_STRIPES; s++) lt_lock_acquire(&stripes[s].lock);
}
void lt_live_unlock_all(void) NO_THREAD_SAFETY_ANALYSIS {
  for (int s = LT_STRIPES - 1; s >= 0; s--) lt_lock_release(&stripes[s].lock);
}
void lt_live_reset_locks(void) {
  for (int s = 0; s < LT_STRIPES; s++) lt_lock_reset(&stripes[s].lock);
  lt_lock_reset(&lt_done_lock);
}

#define BUCKET_BITS (LT_FILTER_BITS - 1)
_Static_assert(LT_LIVE_BUCKETS == 1u << BUCKET_BITS, "one bucket per two filter bits");
_Static_assert(LT_STRIPES == 64, "stripe = the top 6 bucket bits");
#define SUMMARY_SHIFT (LT_FILTER_BITS - LT_SUMMARY_BITS)

/* Sampled mode: bucket = filter bit / 2 (BUCKET_BITS); full trace: the top
 * bucket_bits of the pointer hash (fbit unused).  Stripe: the top 6 bucket bits. */
static inline void where(uint64_t addr, uint32_t *fbit, uint32_t *bucket, uint32_t *stripe) {
  if (full) {
    *fbit = 0;
    *bucket = (uint32_t)(lt_ptr_hash(addr) >> (64 - bucket_bits));
    *stripe = *bucket >> (bucket_bits - 6);
    return;
  }
  *fbit = lt_filter_bit(addr, lt_summary_bit(addr));
  *bucket = *fbit >> 1;
  *stripe = *bucket >> (BUCKET_BITS - 6);
}

/* Called with the stripe of f locked.  Sets the filter bit before the summary bit, so
 * a reader that sees the summary bit also finds the filter bit. */
static inline void filter_set(uint32_t f) {
  atomic_fetch_or_explicit(&lt_filter[f >> 3], (uint8_t)(1u << (f & 7)), memory_order_relaxed);
  uint32_t s = f >> SUMMARY_SHIFT;
  if (scount[s]++ == 0)
    atomic_fetch_or_explicit(&lt_summary[s >> 3], (uint8_t)(1u << (s & 7)), memory_order_release);
}
/* One live entry hashing to f is gone (stripe of f locked); `last` when it was the
 * bucket's last entry with filter bit f. */
static inline void filter_drop(uint32_t f, int last) {
  if (last)
    atomic_fetch_and_explicit(&lt_filter[f >> 3], (uint8_t) ~(1u << (f & 7)),
                              memory_order_relaxed);
  uint32_t s = f >> SUMMARY_SHIFT;
  if (--scount[s] == 0)
    atomic_fetch_and_explicit(&lt_summary[s >> 3], (uint8_t) ~(1u << (s & 7)),
                              memory_order_relaxed);
}

int lt_live_insert(const struct lt_live *e) {
  uint32_t f, b, s;
  where(e->addr, &f, &b, &s);
  struct stripe *st = &stripes[s];
  int result = 1;
  lt_lock_acquire(&st->lock);
  /* The same address live twice means its free was missed (e.g. freed from a signal
   * handler while this thread was inside the sampler): replace the stale entry. */
  for (uint32_t i = buckets[b]; i; i = entries[i - 1].next) {
    if (entries[i - 1].addr == e->addr) {
      uint32_t next = entries[i - 1].next;
      entries[i - 1] = *e;
      entries[i - 1].next = next;
      lt_lock_release(&st->lock);
      atomic_fetch_add_explicit(&lt_g.dropped_samples, 1, memory_order_relaxed);
      return 2;
    }
  }
  uint32_t idx;
  if (st->free_head) {
    idx = st->free_head - 1;
    st->free_head = entries[idx].next;
  } else if ((idx = atomic_fetch_add_explicit(&pool_used, 1, memory_order_relaxed)) <
             live_cap) {
    /* a fresh entry from the shared pool */
  } else {
    atomic_store_explicit(&pool_used, live_cap, memory_order_relaxed);
    lt_lock_release(&st->lock);
    return 0;
  }
  entries[idx] = *e;
  entries[idx].next = buckets[b];
  buckets[b] = idx + 1;
  if (!full) filter_set(f);
  lt_lock_release(&st->lock);
  (void)result;
  return 1;
}

int lt_live_remove(uint64_t addr, struct lt_live *out) {
  uint32_t f, b, s;
  where(addr, &f, &b, &s);
  struct stripe *st = &stripes[s];
  int found = 0;
  lt_lock_acquire(&st->lock);
  uint32_t *link = &buckets[b];
  for (uint32_t i = *link; i; link = &entries[i - 1].next, i = *link) {
    struct lt_live *e = &entries[i - 1];
    if (e->addr != addr) continue;
    *out = *e;
    *link = e->next;
    e->next = st->free_head;
    st->free_head = i;
    found = 1;
    break;
  }
  if (found && !full) {
    int still = 0;
    for (uint32_t i = buckets[b]; i && !still; i = entries[i - 1].next) {
      uint32_t f2, b2, s2;
      where(entries[i - 1].addr, &f2, &b2, &s2);
      still = (f2 == f);
    }
    filter_drop(f, !still);
  }
  lt_lock_release(&st->lock);
  return found;
}

void lt_live_reinsert(const struct lt_live *e) {
  if (!lt_live_insert(e)) atomic_fetch_add_explicit(&lt_g.dropped_samples, 1, memory_order_relaxed);
}

void lt_live_for_each_stripe(int s, lt_live_fn fn, void *ctx) {
  struct stripe *st = &stripes[s];
  lt_lock_acquire(&st->lock);
  uint32_t shift = (full ? bucket_bits : BUCKET_BITS) - 6;
  uint32_t first = (uint32_t)s << shift, end = first + (1u << shift);
  for (uint32_t b = first; b < end; b++)
    for (uint32_t i = buckets[b]; i; i = entries[i - 1].next) fn(&entries[i - 1], ctx);
  lt_lock_release(&st->lock);
}

int lt_done_append(const struct lt_done *d) {
  lt_lock_acquire(&lt_done_lock);
  if (done_count >= done_cap) {
    lt_lock_release(&lt_done_lock);
    return -1;
  }
  done_buf[done_cur][done_count++] = *d;
  int n = (int)done_count;
  lt_lock_release(&lt_done_lock);
  return n;
}

size_t lt_done_swap(struct lt_done **out) {
  lt_lock_acquire(&lt_done_lock);
  *out = done_buf[done_cur];
  size_t n = done_count;
  done_cur ^= 1;
  done_count = 0;
  lt_lock_release(&lt_done_lock);
  return n;
}

/* Not analyzed: the fork child's only thread, before it can start another. */
void lt_done_reset_child(void) NO_THREAD_SAFETY_ANALYSIS {
  done_count = 0;
}
