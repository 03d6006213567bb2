// The lifetime class scheme the heap policies place objects by.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace sim {

// The label scheme's limit and defaults, the native copies of core/lifetimes.py's
// (MAX_BOUNDARIES; DEFAULT_BOUNDARIES["wall"] in ns), pinned to them by
// tests/test_label_scheme.py.  A trace (simulator/src/trace.cc) or a model carries 1 to
// kMaxBoundaries boundaries (kMaxBoundaries + 2 classes with the tail and inf).
constexpr int kMaxBoundaries = 30;
// The project's default classes: 10 ms, 100 ms, 1 s, 10 s, 100 s, 1000 s (in ns).
constexpr uint64_t kDefaultBoundsNs[] = {10000000ull,    100000000ull,    1000000000ull,
                                         10000000000ull, 100000000000ull, 1000000000000ull};
constexpr int kNumDefaultBounds = int(sizeof kDefaultBoundsNs / sizeof kDefaultBoundsNs[0]);

// The lifetime classes: a trace's (boundaries from its header) or a model's (its
// export's boundaries).  Class i = lifetime < bounds_ns[i]; class B = lifetime >=
// bounds_ns[B-1]; class B+1 = never freed.
struct ClassScheme {
  std::vector<uint64_t> bounds_ns;  // finite upper bounds
  int num_classes() const { return int(bounds_ns.size()) + 2; }
  int inf_class() const { return int(bounds_ns.size()) + 1; }
  int max_class() const { return inf_class(); }
  // The true class of a lifetime (kNever = never freed).
  int classify(uint64_t alloc_ns, uint64_t free_ns) const {
    if (free_ns == kNever) return inf_class();
    uint64_t life = free_ns - alloc_ns;
    for (size_t i = 0; i < bounds_ns.size(); ++i)
      if (life < bounds_ns[i]) return int(i);
    return int(bounds_ns.size());
  }
  // The upper bound of a class in ns; kNever for the open-ended tail and inf classes.
  uint64_t bound_ns(int c) const { return c < int(bounds_ns.size()) ? bounds_ns[c] : kNever; }
  std::string name(int c) const;
  // The project's default classes (kDefaultBoundsNs).
  static ClassScheme defaults() {
    return ClassScheme{std::vector<uint64_t>(kDefaultBoundsNs, kDefaultBoundsNs + kNumDefaultBounds)};
  }
};

}  // namespace sim
