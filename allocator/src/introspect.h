// glibc's malloc API beyond allocation (malloc_api.cc exports it): what the allocator
// holds (mallinfo/mallinfo2, malloc_stats, malloc_info), malloc_trim, mallopt, and
// realloc of memory the allocator never handed out.  README.md ("The glibc API") says what
// each figure means.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lock.h"

#pragma GCC visibility push(hidden)

namespace lalloc {

// One consistent reading, taken under the lock.
struct Usage {
  uint64_t heap_committed = 0;   // the policy's huge pages committed: live + held (free, kept)
  uint64_t heap_in_use = 0;      // usable bytes of the program's policy objects (thread caches' excluded)
  uint64_t held_pages = 0;       // released huge pages kept committed (the release delay)
  uint64_t cached_objects = 0, cached_bytes = 0;  // free objects in the threads' caches
  uint64_t direct_objects = 0, direct_bytes = 0;  // objects past a huge page: count, mapped bytes
  uint64_t direct_usable = 0;    // ... their usable bytes
  uint64_t peak_committed = 0;   // the policy's peak committed huge pages, bytes
  uint64_t peak_direct_bytes = 0;
  uint64_t reserved = 0, touched = 0;  // address space of the heaps; made read/write
  uint64_t metadata = 0;         // the metadata arena (held) and the object table
};

// false (usage zero): called from inside the allocator (a signal handler), where the
// lock cannot be taken.
bool read_usage(Usage& u) EXCLUDES(heap_lock);
// malloc_trim: the calling thread's cached objects back to the policy, then every held
// free huge page back to the kernel.  The bytes returned to the kernel.
uint64_t trim() EXCLUDES(heap_lock);
// mallopt's parameters that map onto the allocator (M_TRIM_THRESHOLD: the held pages).
void set_trim_threshold(uint64_t bytes) EXCLUDES(heap_lock);

// realloc of memory the allocator never handed out (outside its reservation, metadata
// and signal arenas, no direct mapping there: the dynamic loader's from before the
// preload).  true (counted): p is such memory.
bool claim_foreign_realloc(const void* p) EXCLUDES(heap_lock);
// Copies up to n bytes from src as far as they are readable (src's block size is
// unknown); the bytes copied.
size_t copy_readable(void* dst, const void* src, size_t n);

}  // namespace lalloc

#pragma GCC visibility pop
