// The allocator proper: the simulator's policy heap (sim::HeapAllocator) placing objects
// in real memory.  Every function may be called from any thread; called from inside the
// allocator (the policy's own containers), they are served by the metadata arena.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lock.h"

namespace lalloc {

// nullptr on failure; errno is the caller's business (malloc_api.cc).
void* allocate(size_t size, size_t align, uintptr_t return_address);
void* allocate_zeroed(size_t size, uintptr_t return_address);
void deallocate(void* p);
// malloc's and free's own entries: allocate / deallocate with errno kept on success
// (ENOMEM on malloc's failure), but a hit in this thread's cache never touches errno
// (only the locked paths behind it save it: two TLS calls less per pair).
void* malloc_entry(size_t size, uintptr_t return_address);
void free_entry(void* p);
size_t usable_size(const void* p);  // 0: nullptr or not ours
// nullptr on failure (p stays valid); size 0 is the caller's business.
void* reallocate(void* p, size_t size, uintptr_t return_address);

// pthread_atfork: the lock is held across fork, released on both sides.
void fork_prepare() ACQUIRE(heap_lock);
void fork_release() RELEASE(heap_lock);
void fork_child() RELEASE(heap_lock);  // fork_release, and the predictor's own locks
// The library constructor: the predictor loads what it needs (the model plugin).
void start_predictor();
// At exit: the final stats file (LIFETIME_ALLOC_STATS).
void write_final_stats();

}  // namespace lalloc
