// Every replaceable operator new / delete form (C++17), on the same heap as malloc.
// Throwing forms call the new_handler until it gives up, then throw std::bad_alloc.
#include <dlfcn.h>

#include <cstdint>
#include <new>

#include "heap.h"

#define LALLOC_API __attribute__((visibility("default")))
#define CALLER uintptr_t(__builtin_return_address(0))

namespace {

constexpr size_t kDefault = 16;

// The program's new_handler.  std::set_new_handler sets it in the program's C++ runtime;
// this library's own libstdc++ is a static, hidden copy (CMakeLists.txt), whose
// std::get_new_handler never sees it (it answered null, so a program's handler was never
// called).  So ask the program's runtime (looked up once, on the first failure only); a
// program without a shared one (C, or libstdc++ linked statically) has none to give.
std::new_handler program_new_handler() {
  using Get = std::new_handler (*)();
  static const Get get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv"));
  return get ? get() : nullptr;
}

void* must(size_t size, size_t align, uintptr_t caller) {
  for (;;) {
    if (void* p = lalloc::allocate(size, align < kDefault ? kDefault : align, caller)) return p;
    std::new_handler h = program_new_handler();
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
