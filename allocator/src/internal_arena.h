// The allocator's own metadata memory.  The policy's STL containers (and our object
// table) call malloc; while a thread is inside the allocator (heap.cc's guard) those calls
// land here instead of recursing into the policy.  Blocks of size classes on free lists,
// and big blocks of whole huge pages, carved from one reserved range, so free() knows
// these pointers by their address (internal_arena.cc says how).
// Callers hold the allocator's lock: the arena has no lock of its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lalloc::arena {

void* alloc(size_t size, size_t align = 16);  // nullptr when the range is spent
void free(void* p);
size_t usable(const void* p);
bool owns(const void* p);   // lock-free: the range never moves once reserved
uint64_t used_bytes();      // carved so far
uint64_t held_bytes();      // carved less the pages free blocks gave back: >= resident
uint64_t resident_bytes();  // what of the carved range is resident (mincore)

// What the arena holds, by block size (stats.cc): blocks carved, blocks on free lists (of
// these), live blocks' requested bytes; free_returned: free blocks' pages are returned
// (big blocks by huge pages, the last entry: that many and more).
struct ClassCensus { uint64_t block_bytes, carved, free, live_requested; bool free_returned; };
unsigned census(ClassCensus* out, unsigned max);  // classes with a block carved, ascending

}  // namespace lalloc::arena
