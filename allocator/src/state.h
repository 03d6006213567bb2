// The allocator's state: the policy heap, its real memory, the object table and the
// counters.  One instance, built at the first allocation, touched only under the lock
// (heap_lock, lock.h; Clang's -Wthread-safety checks it), but for the predictor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "backing.h"
#include "config.h"
#include "lock.h"
#include "predictor.h"
#include "slot_ids.h"
#include "classes.h"

namespace lalloc {

struct Counters {
  uint64_t allocs = 0, frees = 0, failed_allocs = 0, foreign_frees = 0;
  // realloc of memory the allocator never handed out (moved into a new object);
  // malloc_trim calls and the bytes they returned to the kernel.
  uint64_t foreign_reallocs = 0, trims = 0, trimmed_bytes = 0;
  uint64_t live_objects = 0, peak_objects = 0;
  // live_/peak_requested: as asked of the policy (rounded up to 16 B); total: the program's.
  uint64_t live_requested = 0, peak_requested = 0, total_requested = 0, live_usable = 0;
  uint64_t direct_objects = 0, direct_bytes = 0, peak_direct_bytes = 0, direct_allocs = 0;
  uint64_t lock_acquisitions = 0, checks = 0, stats_writes = 0, threads = 0;
  uint64_t peak_huge_pages = 0;
  // Allocations by where their class came from (predictor.h: Source) and by class.
  static constexpr size_t kMaxClasses = sim::kMaxBoundaries + 2;  // every class of any scheme
  uint64_t by_source[size_t(Source::kCount)] = {};
  uint64_t class_allocs[kMaxClasses] = {};
};

// The thread caches (heap.cc), summed over the live threads' caches and the exited ones'
// when the stats are written.  hits/misses: cached mallocs served from / not from a
// thread's list; refills: lock acquisitions that took a batch from the policy for a miss
// (refill_objects: the objects beyond the one asked for); flushes: lock acquisitions that
// gave a list's (or every list's) surplus back to the policy (flushed_objects: how many).
struct ThreadCacheStats {
  bool on = false;
  uint64_t caches = 0, exited = 0, objects = 0, bytes = 0, hits = 0, misses = 0;
  uint64_t refills = 0, refill_objects = 0, flushes = 0, flushed_objects = 0, scavenges = 0;
};

struct State {
  Config cfg GUARDED_BY(heap_lock);
  sim::ClassScheme classes GUARDED_BY(heap_lock);
  std::string policy_name GUARDED_BY(heap_lock);  // "baseline" or the LLAMA policy's names ("paper", ...)
  std::unique_ptr<sim::HeapAllocator> policy GUARDED_BY(heap_lock);
  // Set once, while the State is built (under the lock, before heap.cc's g_built is
  // published); then used without the lock: predict() runs before the lock is taken and
  // is thread-safe itself (predictor.h).
  std::unique_ptr<Predictor> predictor;
  Backing backing GUARDED_BY(heap_lock);
  // The engine-style slot ids the policy knows objects by, lowest-first: no record of our
  // own per object (the real address -> slot table is Backing's; address and usable size
  // are the policy's where(), the size asked of it its asked_size()), and the policy's
  // per-slot records follow the live ids down (trim).
  // Not under a policy of size-class heaps only: those run in address mode
  // (HeapAllocator::enable_address_mode), where an object is its address, its span and
  // size from the heap's page index, and its liveness a bit of its span: no slot, no
  // record per object, nothing to compact.  (bytes_requested then counts placed bytes:
  // the size asked is not kept.)
  bool addr_mode GUARDED_BY(heap_lock) = false;
  sim::SlotIds slots GUARDED_BY(heap_lock);
  uint64_t frees_since_trim GUARDED_BY(heap_lock) = 0;
  // Objects beyond a huge page: their own mapping (README.md says why).
  struct Direct { uintptr_t map; uint64_t len, usable, requested; };
  std::unordered_map<uintptr_t, Direct> direct GUARDED_BY(heap_lock);
  sim::ShadowHeap shadow GUARDED_BY(heap_lock);  // LIFETIME_ALLOC_CHECK only
  uint64_t ops_since_check GUARDED_BY(heap_lock) = 0, last_now GUARDED_BY(heap_lock) = 0,
      next_stats_ns GUARDED_BY(heap_lock) = 0, start_ns GUARDED_BY(heap_lock) = 0;
  Counters c GUARDED_BY(heap_lock);
  ThreadCacheStats tc GUARDED_BY(heap_lock);  // filled before each write_stats
};

// Writes the stats JSON to cfg.stats_path ("%p" -> pid), atomically (temp file + rename).
void write_stats(const State& s, uint64_t now_ns) REQUIRES(heap_lock);
// text to path whole or not at all (a temp file, then rename); a failure is silent (the
// stats and the attribution dumps must not take the program down).
void write_atomically(const std::string& path, const std::string& text);

}  // namespace lalloc
