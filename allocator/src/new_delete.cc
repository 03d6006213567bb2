// Every replaceable operator new / delete form (C++17), on the same heap as malloc.
// Throwing forms call the new_handler until it gives up, then throw std::bad_alloc.
#include <dlfcn.h>

#include <cstdint>
#include <new>

#include "fatal.h"
#include "heap.h"

#define LALLOC_API __attribute__((visibility("default")))
#define CALLER uintptr_t(__builtin_return_address(0))

namespace {

constexpr size_t kDefault = 16;

// The program's C++ runtime: this library's own libstdc++ is a static, hidden copy
// (CMakeLists.txt), and its libgcc (the unwinder) is static too, so that a C program need
// not map libgcc_s.  What crosses into the program goes through the program's runtime
// instead, looked up on the first failure only:
// - the new_handler: std::set_new_handler sets it there (our copy's answered null);
// - std::bad_alloc: thrown by the runtime's std::__throw_bad_alloc, so the program's own
//   unwinder and __cxa_* raise what its catch expects (ours would unwind with another copy);
// - a nothrow form whose handler throws: the runtime's own nothrow form, which calls back
//   the throwing one here inside its try and turns the throw into null.
// A program without a shared C++ runtime (C, or libstdc++ linked statically) calls its own
// operator new, not this one, and sets no handler here.
template <typename F>
F runtime(const char* name, void* scope = RTLD_DEFAULT) {
  return reinterpret_cast<F>(dlsym(scope, name));
}

std::new_handler program_new_handler() {
  static const auto get = runtime<std::new_handler (*)()>("_ZSt15get_new_handlerv");
  return get ? get() : nullptr;
}

[[noreturn]] void throw_bad_alloc() {
  static const auto raise = runtime<void (*)()>("_ZSt17__throw_bad_allocv");
  if (raise) raise();
  lalloc::fatal("operator new: out of memory, and no C++ runtime in the program to throw std::bad_alloc");
}

void* must(size_t size, size_t align, uintptr_t caller) {
  for (;;) {
    if (void* p = lalloc::allocate(size, align < kDefault ? kDefault : align, caller)) return p;
    std::new_handler h = program_new_handler();
    if (!h) throw_bad_alloc();
    h();  // may throw (through these frames: the program's unwinder; nothing here to clean up)
  }
}

void* may(size_t size, size_t align, uintptr_t caller) noexcept {
  if (void* p = lalloc::allocate(size, align < kDefault ? kDefault : align, caller)) return p;
  if (!program_new_handler()) return nullptr;
  // The handler may free memory, or throw: the runtime's nothrow form runs it in its try.
  using Plain = void* (*)(size_t, const std::nothrow_t&) noexcept;
  using Aligned = void* (*)(size_t, std::align_val_t, const std::nothrow_t&) noexcept;
  static const auto plain = runtime<Plain>("_ZnwmRKSt9nothrow_t", RTLD_NEXT);
  static const auto aligned = runtime<Aligned>("_ZnwmSt11align_val_tRKSt9nothrow_t", RTLD_NEXT);
  if (align <= kDefault) return plain ? plain(size, std::nothrow) : nullptr;
  return aligned ? aligned(size, std::align_val_t(align), std::nothrow) : nullptr;
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
