/* Distinct call stacks, each stored once and named by a small id.
 *
 * Records and frames live in append-only mmap'd arenas (LT_STACK_CAP stacks,
 * LT_FRAME_CAP frames; LT_FULL_STACK_CAP / LT_FULL_FRAME_CAP in a full trace).  Lookups are lock-free: an index slot is published with a
 * release store after its record and frames are written, and records never change
 * afterwards (except `emitted_gen`, which only a flush touches, under flush_lock).
 * Inserts take lt_stack_lock.  When an arena is full the stack is not stored and the
 * caller counts the loss (Trailer.dropped_stacks).
 */
#include <string.h>

#include "common.h"

struct stack_rec {
  uint64_t hash;
  uint32_t off;
  uint16_t depth;
  uint8_t truncated;
  uint8_t pad;
  uint32_t emitted_gen;
  uint32_t pad2;
};

static struct stack_rec *recs;
static uintptr_t *frames;
static _Atomic uint32_t *slots; /* stack index + 1, 0 = empty */
extern lt_lock lt_stack_lock;
static uint32_t nstacks GUARDED_BY(lt_stack_lock);
static uint32_t nframes GUARDED_BY(lt_stack_lock);
static uint32_t stack_cap = LT_STACK_CAP, frame_cap = LT_FRAME_CAP;
static uint32_t index_size = 2 * LT_STACK_CAP; /* open addressing, at most half full */
lt_lock lt_stack_lock;

int lt_stacks_init(void) {
  if (lt_g.full_trace) {
    stack_cap = LT_FULL_STACK_CAP;
    frame_cap = LT_FULL_FRAME_CAP;
    index_size = 2 * LT_FULL_STACK_CAP;
  }
  recs = lt_map(sizeof(struct stack_rec) * stack_cap);
  frames = lt_map(sizeof(uintptr_t) * frame_cap);
  slots = lt_map(sizeof(uint32_t) * index_size);
  return recs && frames && slots;
}

static uint64_t stack_hash(const uintptr_t *f, int depth, int truncated) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)depth ^ ((uint64_t)truncated << 40);
  for (int i = 0; i < depth; i++) {
    h ^= (uint64_t)f[i];
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  h ^= h >> 29;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 32;
  return h;
}

static int matches(uint32_t idx, uint64_t h, const uintptr_t *f, int depth, int truncated) {
  const struct stack_rec *r = &recs[idx];
  if (r->hash != h || r->depth != depth || r->truncated != truncated) return 0;
  const uintptr_t *g = &frames[r->off]; /* a loop, not memcmp: -fno-builtin makes that a call */
  for (int i = 0; i < depth; i++)
    if (g[i] != f[i]) return 0;
  return 1;
}

uint32_t lt_stack_intern(const uintptr_t *f, int depth, int truncated) {
  const uint32_t mask = index_size - 1;
  uint64_t h = stack_hash(f, depth, truncated);
  uint32_t i = (uint32_t)h & mask;
  for (uint32_t probe = 0; probe < index_size; probe++, i = (i + 1) & mask) {
    uint32_t v = atomic_load_explicit(&slots[i], memory_order_acquire);
    if (v == 0) break;
    if (matches(v - 1, h, f, depth, truncated)) return v;
  }
  lt_lock_acquire(&lt_stack_lock);
  uint32_t id = 0;
  i = (uint32_t)h & mask;
  for (uint32_t probe = 0; probe < index_size; probe++, i = (i + 1) & mask) {
    uint32_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (v != 0) {
      if (matches(v - 1, h, f, depth, truncated)) {
        id = v;
        break;
      }
      continue;
    }
    /* Keep the open-addressed index at most half full (stack_cap = index_size / 2). */
    if (nstacks >= stack_cap || nframes + (uint32_t)depth > frame_cap) break;
    uint32_t idx = nstacks++;
    struct stack_rec *r = &recs[idx];
    memcpy(&frames[nframes], f, sizeof(uintptr_t) * (size_t)depth);
    r->hash = h;
    r->off = nframes;
    r->depth = (uint16_t)depth;
    r->truncated = (uint8_t)truncated;
    r->emitted_gen = 0;
    nframes += (uint32_t)depth;
    atomic_store_explicit(&slots[i], idx + 1, memory_order_release);
    id = idx + 1;
    break;
  }
  lt_lock_release(&lt_stack_lock);
  if (id == 0) atomic_fetch_add_explicit(&lt_g.dropped_stacks, 1, memory_order_relaxed);
  return id;
}

uint32_t lt_stack_intern_hinted(uint32_t *hint, const uintptr_t *f, int depth, int truncated) {
  if (depth <= 0) return lt_stack_intern(f, depth, truncated);
  uint32_t slot = (uint32_t)((f[0] >> 4) ^ (f[0] >> 13) ^ (uintptr_t)depth) & 15u;
  uint32_t id = hint[slot];
  /* An id this thread got from lt_stack_intern names a record it has seen published,
   * and records never change: compare it with the frames in full. */
  if (id && id <= stack_cap) {
    const struct stack_rec *r = &recs[id - 1];
    if (r->depth == depth && r->truncated == truncated) {
      const uintptr_t *g = &frames[r->off];
      int i = 0;
      while (i < depth && g[i] == f[i]) i++;
      if (i == depth) return id;
    }
  }
  id = lt_stack_intern(f, depth, truncated);
  if (id) hint[slot] = id;
  return id;
}

int lt_stack_get(uint32_t id, const uintptr_t **f, int *depth, int *truncated,
                 uint32_t **emitted_gen) {
  if (id == 0 || id > stack_cap) return 0;
  struct stack_rec *r = &recs[id - 1];
  *f = &frames[r->off];
  *depth = r->depth;
  *truncated = r->truncated;
  *emitted_gen = &r->emitted_gen;
  return 1;
}
