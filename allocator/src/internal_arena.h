// The allocator's own metadata memory.  The policy's STL containers (and our object
// table) call malloc; while a thread is inside the allocator (heap.cc's guard) those calls
// land here instead of recursing into the policy.  Blocks of size classes on free lists,
// and big blocks of whole huge pages, carved from one reserved range, so free() knows
// these pointers by their address (internal_arena.cc says how).
// Callers hold the allocator's lock (heap_lock, lock.h): the arena has no lock of its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lock.h"

namespace lalloc::arena {

void* alloc(size_t size, size_t align = 16) REQUIRES(heap_lock);  // nullptr when the range is spent
void free(void* p) REQUIRES(heap_lock);
size_t usable(const void* p);  // lock-free: reads p's header and the class sizes (fixed)
bool owns(const void* p);      // lock-free: the range never moves once reserved
uint64_t used_bytes() REQUIRES(heap_lock);      // carved so far
uint64_t held_bytes() REQUIRES(heap_lock);      // carved less the pages free blocks gave back: >= resident
uint64_t resident_bytes() REQUIRES(heap_lock);  // what of the carved range is resident (mincore)

// What the arena holds, by block size (stats.cc): blocks carved, blocks on free lists (of
// these), live blocks' requested bytes; free_returned: free blocks' pages are returned
// (big blocks by huge pages, the last entry: that many and more).
struct ClassCensus { uint64_t block_bytes, carved, free, live_requested; bool free_returned; };
unsigned census(ClassCensus* out, unsigned max) REQUIRES(heap_lock);  // classes with a block carved, ascending

}  // namespace lalloc::arena
