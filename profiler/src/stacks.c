/* Distinct call stacks, each stored once and named by a small id.
 *
 * Records and frames live in append-only mmap'd arenas (LT_STACK_CAP stacks,
 * LT_FRAME_CAP frames).  Lookups are lock-free: an index slot is published with a
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
static uint32_t nstacks;        /* guarded by lt_stack_lock */
static uint32_t nframes;        /* guarded by lt_stack_lock */
lt_lock lt_stack_lock;

int lt_stacks_init(void) {
  recs = lt_map(sizeof(struct stack_rec) * LT_STACK_CAP);
  frames = lt_map(sizeof(uintptr_t) * LT_FRAME_CAP);
  slots = lt_map(sizeof(uint32_t) * LT_STACK_INDEX);
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
  return r->hash == h && r->depth == depth && r->truncated == truncated &&
         memcmp(&frames[r->off], f, sizeof(uintptr_t) * (size_t)depth) == 0;
}

uint32_t lt_stack_intern(const uintptr_t *f, int depth, int truncated) {
  const uint32_t mask = LT_STACK_INDEX - 1;
  uint64_t h = stack_hash(f, depth, truncated);
  uint32_t i = (uint32_t)h & mask;
  for (uint32_t probe = 0; probe < LT_STACK_INDEX; probe++, i = (i + 1) & mask) {
    uint32_t v = atomic_load_explicit(&slots[i], memory_order_acquire);
    if (v == 0) break;
    if (matches(v - 1, h, f, depth, truncated)) return v;
  }
  lt_lock_acquire(&lt_stack_lock);
  uint32_t id = 0;
  i = (uint32_t)h & mask;
  for (uint32_t probe = 0; probe < LT_STACK_INDEX; probe++, i = (i + 1) & mask) {
    uint32_t v = atomic_load_explicit(&slots[i], memory_order_relaxed);
    if (v != 0) {
      if (matches(v - 1, h, f, depth, truncated)) {
        id = v;
        break;
      }
      continue;
    }
    /* Keep the open-addressed index at most half full (LT_STACK_CAP = INDEX / 2). */
    if (nstacks >= LT_STACK_CAP || nframes + (uint32_t)depth > LT_FRAME_CAP) break;
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

int lt_stack_get(uint32_t id, const uintptr_t **f, int *depth, int *truncated,
                 uint32_t **emitted_gen) {
  if (id == 0 || id > LT_STACK_CAP) return 0;
  struct stack_rec *r = &recs[id - 1];
  *f = &frames[r->off];
  *depth = r->depth;
  *truncated = r->truncated;
  *emitted_gen = &r->emitted_gen;
  return 1;
}
