// The allocator's own metadata memory.  The policy's STL containers (and our object
// table) call malloc; while a thread is inside the allocator (heap.cc's guard) those calls
// land here instead of recursing into the policy.  Power-of-two blocks on free lists,
// carved from one reserved range, so free() knows these pointers by their address.
// Callers hold the allocator's lock: the arena has no lock of its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lalloc::arena {

void* alloc(size_t size, size_t align = 16);  // nullptr when the range is spent
void free(void* p);
size_t usable(const void* p);
bool owns(const void* p);   // lock-free: the range never moves once reserved
uint64_t used_bytes();      // carved so far (bump pointer)
uint64_t held_bytes();      // carved less the freed big blocks' returned pages: >= resident

}  // namespace lalloc::arena
