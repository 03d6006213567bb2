// How much address space the process may still map (RLIMIT_AS, `ulimit -v`): the
// allocator's reservations (the heaps', backing.cc; the metadata arena's) take a share of
// it instead of a fixed size, so a program starts under a batch scheduler's limit as it
// does under glibc.  Read without allocating (inside malloc).
#pragma once

#include <cstdint>

namespace lalloc {

// RLIMIT_AS's soft limit less what the process maps now (/proc/self/statm), or
// UINT64_MAX when there is no limit.
uint64_t address_space_left();

}  // namespace lalloc
