// The C allocation API, exported for LD_PRELOAD: argument rules and errno here, the heap
// in heap.cc.  errno is left as it was on success and set to ENOMEM (EINVAL for a bad
// alignment) on failure, as glibc does.
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include <cstdint>

#include "heap.h"

#define LALLOC_API extern "C" __attribute__((visibility("default")))
#define CALLER uintptr_t(__builtin_return_address(0))

namespace {

constexpr size_t kPage = 4096;

// glibc's memalign rules: small alignments are malloc's, others round up to a power of 2.
bool fix_alignment(size_t& align) {
  if (align <= 16) {
    align = 16;
    return true;
  }
  if (align > (SIZE_MAX >> 1) + 1) return false;
  if (align & (align - 1)) {
    size_t a = 32;
    while (a < align) a <<= 1;
    align = a;
  }
  return true;
}

void* done(void* p, int saved) {
  errno = p ? saved : ENOMEM;
  return p;
}

void* aligned(size_t align, size_t size, uintptr_t caller) {
  const int saved = errno;
  if (!fix_alignment(align)) {
    errno = EINVAL;
    return nullptr;
  }
  return done(lalloc::allocate(size, align, caller), saved);
}

}  // namespace

LALLOC_API void* malloc(size_t size) {
  const int saved = errno;
  return done(lalloc::allocate(size, 16, CALLER), saved);
}

LALLOC_API void free(void* p) {
  const int saved = errno;
  lalloc::deallocate(p);
  errno = saved;
}

LALLOC_API void* calloc(size_t n, size_t size) {
  const int saved = errno;
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return done(lalloc::allocate_zeroed(total, CALLER), saved);
}

LALLOC_API void* realloc(void* p, size_t size) {
  const int saved = errno;
  if (p && size == 0) {  // glibc: frees, returns NULL
    lalloc::deallocate(p);
    errno = saved;
    return nullptr;
  }
  return done(lalloc::reallocate(p, size, CALLER), saved);
}

LALLOC_API void* reallocarray(void* p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  const int saved = errno;
  if (p && total == 0) {
    lalloc::deallocate(p);
    errno = saved;
    return nullptr;
  }
  return done(lalloc::reallocate(p, total, CALLER), saved);
}

LALLOC_API void* memalign(size_t align, size_t size) { return aligned(align, size, CALLER); }

LALLOC_API void* aligned_alloc(size_t align, size_t size) { return aligned(align, size, CALLER); }

LALLOC_API int posix_memalign(void** out, size_t align, size_t size) {
  if (align < sizeof(void*) || (align & (align - 1))) return EINVAL;
  const int saved = errno;
  void* p = lalloc::allocate(size, align, CALLER);
  errno = saved;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

LALLOC_API void* valloc(size_t size) { return aligned(kPage, size, CALLER); }

LALLOC_API void* pvalloc(size_t size) {
  if (size > SIZE_MAX - kPage) {
    errno = ENOMEM;
    return nullptr;
  }
  return aligned(kPage, (size + kPage - 1) & ~(kPage - 1), CALLER);
}

LALLOC_API size_t malloc_usable_size(void* p) { return lalloc::usable_size(p); }

// Fork safety: nobody is inside the heap while the child is made.
__attribute__((constructor)) static void lalloc_start() {
  pthread_atfork(lalloc::fork_prepare, lalloc::fork_release, lalloc::fork_child);
  lalloc::start_predictor();  // the model plugin, if any: here, never inside an allocation
}

__attribute__((destructor)) static void lalloc_stop() { lalloc::write_final_stats(); }
