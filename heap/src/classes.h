// The lifetime class scheme the heap policies place objects by.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace sim {

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
};

}  // namespace sim
