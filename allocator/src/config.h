// The allocator's settings, read once from the environment at the first allocation.
// A bad value is fatal: one line on stderr naming the variable and the problem, then
// abort (a silently different allocator would measure the wrong thing).
#pragma once

#include <cstdint>
#include <string>

namespace lalloc {

struct Config {
  // LIFETIME_ALLOC_POLICY: simulator policy names, or "baseline".  The default, segregated,
  // was chosen on workloads no reported figure uses (benchmarks/policy_selection.py).
  std::string policy = "segregated";
  std::string predictor;  // LIFETIME_ALLOC_PREDICTOR (empty: unset; predictor.h: make_predictor)
  std::string stats_path;                // LIFETIME_ALLOC_STATS ("%p": the process id)
  uint64_t stats_interval_ns = 0;        // LIFETIME_ALLOC_STATS_INTERVAL (seconds; 0: at exit only)
  uint64_t check_every = 0;              // LIFETIME_ALLOC_CHECK (operations; 0: off)
  uint64_t reserve_bytes = uint64_t(64) << 30;  // LIFETIME_ALLOC_RESERVE_GIB: address space per heap
  // Released huge pages kept committed for a while (backing.h): LIFETIME_ALLOC_RELEASE_DELAY_MS
  // (0: returned at once, as the policy says) and LIFETIME_ALLOC_RELEASE_KEEP (at most so many).
  uint64_t release_delay_ns = 1000ull * 1000000;
  uint64_t release_keep_pages = 4;
  // LIFETIME_ALLOC_HUGE_FROM_MIB: the heap (and the metadata arena) asks for transparent
  // huge pages once the committed heap reaches this (0: from the start); Backing::set_huge_from.
  uint64_t huge_from_bytes = uint64_t(16) << 20;
  // LIFETIME_ALLOC_HUGE_COLLAPSE (0 or 1): huge pages by collapse, once the policy says a
  // huge page is dense (Backing::set_collapse), rather than at fault time (0, as before).
  bool huge_collapse = true;
  // LIFETIME_ALLOC_HUGE_GROWTH_MIB: under collapse, while the live heap grows to a new peak
  // by at least this much per 100 ms of the policy's clock, empty pages it takes are advised
  // at once and faulted as huge pages (Backing::set_growth; 0: off, the default: it cost
  // mstress and cpython 3-6% of steady RSS for 4-5x their huge pages; allocator/README.md).
  uint64_t huge_growth_bytes = 0;
  // Subrelease in the size-class heaps (sim::SubreleaseRule, heap/src/baseline.h: its
  // defaults): LIFETIME_ALLOC_SUBRELEASE_MS, the interval (0: off), and
  // LIFETIME_ALLOC_SUBRELEASE_WINDOWS and _MIN_WINDOWS, the longest and shortest horizon
  // of demand remembered, in intervals (equal: a fixed horizon).
  uint64_t subrelease_interval_ns = 0;
  unsigned subrelease_windows = 1, subrelease_min_windows = 1;
  bool idle_places = true;
  // LIFETIME_ALLOC_REVALIDATE: the model cache reruns the model every N hits of an entry
  // (0: never); -1: the model library's default (1000).
  int64_t revalidate_every = 100000;
  // LIFETIME_ALLOC_THREAD_CACHE (0 or 1): per-thread caches of freed objects in front of
  // the size-class heaps (heap.cc; policies whose heaps are all size-class heaps, checker off).
  // (-DLALLOC_THREAD_CACHE_DEFAULT=0 builds a library with it off by default: for
  // benchmarks that clear the LIFETIME_ALLOC_ environment, benchmarks/allocator_rss.py)
#ifndef LALLOC_THREAD_CACHE_DEFAULT
#define LALLOC_THREAD_CACHE_DEFAULT 1
#endif
  bool thread_cache = LALLOC_THREAD_CACHE_DEFAULT != 0;
  // Attribution (attribution.h): LIFETIME_ALLOC_ATTRIBUTE, the directory of the dumps
  // (empty: off); _INTERVAL, seconds between dumps (0: at exit and on the signal only);
  // _SIGNAL, the signal that asks for one (0: none).
  std::string attribute_dir;
  uint64_t attribute_interval_ns = 0;
  int attribute_signal = 0;
};

Config read_config();

}  // namespace lalloc
