// Every replaceable operator new / delete form (C++17), on the same heap as malloc.
// Throwing forms call the new_handler until it gives up, then throw std::bad_alloc.
#include <cstdint>
#include <new>

#include "heap.h"

#define LALLOC_API __attribute__((visibility("default")))
#define CALLER uintptr_t(__builtin_return_address(0))

namespace {

constexpr size_t kDefault = 16;

void* must(size_t size, size_t align, uintptr_t caller) {
  for (;;) {
    if (void* p = lalloc::allocate(size, align < kDefault ? kDefault : align, caller)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}

void* may(size_t size, size_t align, uintptr_t caller) noexcept {
  try {
    return must(size, align, caller);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

LALLOC_API void* operator new(size_t n) { return must(n, kDefault, CALLER); }
LALLOC_API void* operator new[](size_t n) { return must(n, kDefault, CALLER); }
LALLOC_API void* operator new(size_t n, const std::nothrow_t&) noexcept { return may(n, kDefault, CALLER); }
LALLOC_API void* operator new[](size_t n, const std::nothrow_t&) noexcept { return may(n, kDefault, CALLER); }
LALLOC_API void* operator new(size_t n, std::align_val_t a) { return must(n, size_t(a), CALLER); }
LALLOC_API void* operator new[](size_t n, std::align_val_t a) { return must(n, size_t(a), CALLER); }
LALLOC_API void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return may(n, size_t(a), CALLER);
}
LALLOC_API void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return may(n, size_t(a), CALLER);
}

LALLOC_API void operator delete(void* p) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete[](void* p) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete(void* p, size_t) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete[](void* p, size_t) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete(void* p, const std::nothrow_t&) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete[](void* p, const std::nothrow_t&) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete(void* p, std::align_val_t) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete[](void* p, std::align_val_t) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete(void* p, size_t, std::align_val_t) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete[](void* p, size_t, std::align_val_t) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { lalloc::deallocate(p); }
LALLOC_API void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { lalloc::deallocate(p); }
