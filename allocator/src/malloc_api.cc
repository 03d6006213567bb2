// The C allocation API, exported for LD_PRELOAD: argument rules and errno here, the heap
// in heap.cc.  errno is left as it was on success and set to ENOMEM (EINVAL for a bad
// alignment) on failure, as glibc does.
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstdint>

#include "heap.h"
#include "introspect.h"

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

// realloc (size > 0) of memory the allocator never handed out: a new object with as much
// of the old block as is readable (its size is unknown: bytes past it are unspecified in
// the new one anyway); the old block is left, as free leaves it.
void* realloc_foreign(void* p, size_t size, uintptr_t caller) {
  void* q = lalloc::allocate(size, 16, caller);
  if (q) lalloc::copy_readable(q, p, size);
  return q;
}

// realloc's rules (size: the new size, overflow checked by the caller).
void* do_realloc(void* p, size_t size, uintptr_t caller) {
  const int saved = errno;
  const bool foreign = p && lalloc::claim_foreign_realloc(p);
  if (p && size == 0) {  // glibc: frees, returns NULL
    if (!foreign) lalloc::deallocate(p);
    errno = saved;
    return nullptr;
  }
  if (foreign) return done(realloc_foreign(p, size, caller), saved);
  return done(lalloc::reallocate(p, size, caller), saved);
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

LALLOC_API void* malloc(size_t size) { return lalloc::malloc_entry(size, CALLER); }

LALLOC_API void free(void* p) { lalloc::free_entry(p); }

LALLOC_API void* calloc(size_t n, size_t size) {
  const int saved = errno;
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return done(lalloc::allocate_zeroed(total, CALLER), saved);
}

LALLOC_API void* realloc(void* p, size_t size) { return do_realloc(p, size, CALLER); }

LALLOC_API void* reallocarray(void* p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return do_realloc(p, total, CALLER);
}

// C23: the size (and alignment) the program passes are not needed to free.
LALLOC_API void free_sized(void* p, size_t) { free(p); }
LALLOC_API void free_aligned_sized(void* p, size_t, size_t) { free(p); }

LALLOC_API void* memalign(size_t align, size_t size) { return aligned(align, size, CALLER); }

// C17 / C23 and glibc >= 2.38: an alignment that is not a power of two (0 included) is
// EINVAL; a size that is not a multiple of it is fine.  (glibc 2.36 treats aligned_alloc
// as memalign: it rounds such an alignment up to a power of two.)
LALLOC_API void* aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1))) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned(align, size, CALLER);
}

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

// glibc's introspection API (README.md, "The glibc API", says what each figure is).
namespace {
size_t at_most_int(uint64_t v) { return v > uint64_t(INT_MAX) ? size_t(INT_MAX) : size_t(v); }
uint64_t sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
}  // namespace

LALLOC_API struct mallinfo2 mallinfo2() {
  lalloc::Usage u;
  lalloc::read_usage(u);
  struct mallinfo2 m = {};
  m.arena = u.heap_committed;
  m.ordblks = u.held_pages;
  m.smblks = u.cached_objects;
  m.hblks = u.direct_objects;
  m.hblkhd = u.direct_bytes;
  m.usmblks = 0;  // as glibc: unused
  m.fsmblks = u.cached_bytes;
  m.uordblks = u.heap_in_use + u.direct_usable;
  m.fordblks = sub0(u.heap_committed, u.heap_in_use);
  m.keepcost = u.held_pages << 21;
  return m;
}

// The int fields saturate at INT_MAX (glibc 2.36 truncates: 3 GiB reads negative).
LALLOC_API struct mallinfo mallinfo() {
  const struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m;
  m.arena = int(at_most_int(m2.arena));
  m.ordblks = int(at_most_int(m2.ordblks));
  m.smblks = int(at_most_int(m2.smblks));
  m.hblks = int(at_most_int(m2.hblks));
  m.hblkhd = int(at_most_int(m2.hblkhd));
  m.usmblks = int(at_most_int(m2.usmblks));
  m.fsmblks = int(at_most_int(m2.fsmblks));
  m.uordblks = int(at_most_int(m2.uordblks));
  m.fordblks = int(at_most_int(m2.fordblks));
  m.keepcost = int(at_most_int(m2.keepcost));
  return m;
}

// 1: memory went back to the kernel.  pad: unused (every whole free huge page goes, as
// glibc since 2.8 releases free pages anywhere in its heap whatever the pad).
LALLOC_API int malloc_trim(size_t) { return lalloc::trim() ? 1 : 0; }

// glibc's lines, from the same figures as mallinfo2 (written after the lock is let go).
LALLOC_API void malloc_stats() {
  lalloc::Usage u;
  lalloc::read_usage(u);
  const int saved = errno;
  fprintf(stderr, "Arena 0:\n");
  fprintf(stderr, "system bytes     = %10llu\n", (unsigned long long)u.heap_committed);
  fprintf(stderr, "in use bytes     = %10llu\n", (unsigned long long)u.heap_in_use);
  fprintf(stderr, "Total (incl. mmap):\n");
  fprintf(stderr, "system bytes     = %10llu\n", (unsigned long long)(u.heap_committed + u.direct_bytes));
  fprintf(stderr, "in use bytes     = %10llu\n", (unsigned long long)(u.heap_in_use + u.direct_usable));
  fprintf(stderr, "max mmap regions = %10llu\n", (unsigned long long)u.direct_objects);
  fprintf(stderr, "max mmap bytes   = %10llu\n", (unsigned long long)u.peak_direct_bytes);
  errno = saved;
}

// glibc's XML document (one heap), from the same figures.  options != 0: -1, EINVAL.
LALLOC_API int malloc_info(int options, FILE* fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  lalloc::Usage u;
  lalloc::read_usage(u);
  const auto n = [](uint64_t v) { return (unsigned long long)v; };
  const uint64_t rest = sub0(u.heap_committed, u.heap_in_use + u.cached_bytes);
  const auto totals = [&](bool mmap) {
    fprintf(fp, "<total type=\"fast\" count=\"%llu\" size=\"%llu\"/>\n", n(u.cached_objects), n(u.cached_bytes));
    fprintf(fp, "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n", n(u.held_pages), n(rest));
    if (mmap)
      fprintf(fp, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n", n(u.direct_objects), n(u.direct_bytes));
    fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n", n(u.heap_committed));
    fprintf(fp, "<system type=\"max\" size=\"%llu\"/>\n", n(u.peak_committed));
    fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n", n(u.reserved));
    fprintf(fp, "<aspace type=\"mprotect\" size=\"%llu\"/>\n", n(u.touched));
  };
  fputs("<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n</sizes>\n", fp);
  totals(false);
  fputs("</heap>\n", fp);
  totals(true);
  fputs("</malloc>\n", fp);
  return 0;
}

// Accepted as glibc accepts them (M_MXFAST: 0 .. 160, glibc's bound), without effect but
// M_TRIM_THRESHOLD: the free huge pages kept committed (Backing's release delay) are as
// many as fit under it.  Unknown parameters: 0 (glibc 2.36 returns 1 for any).
LALLOC_API int mallopt(int param, int value) {
  switch (param) {
    case M_MXFAST:
      return value >= 0 && size_t(value) <= 80 * sizeof(size_t) / 4 ? 1 : 0;
    case M_TRIM_THRESHOLD:  // glibc reads it as a size_t: negative is "never trim"
      lalloc::set_trim_threshold(value < 0 ? UINT64_MAX : uint64_t(value));
      return 1;
    case M_TOP_PAD:
    case M_MMAP_THRESHOLD:
    case M_MMAP_MAX:
    case M_CHECK_ACTION:
    case M_PERTURB:
    case M_ARENA_TEST:
    case M_ARENA_MAX:
      return 1;
    default:
      return 0;
  }
}

// Fork safety: nobody is inside the heap while the child is made.  Registered with
// libc's __register_atfork, as libc_nonshared's pthread_atfork does: that wrapper is
// linked in as part of a whole .text that hot_text.order cannot place, and its one call
// at start-up kept a 64 KiB window of this library resident wherever it landed.
extern "C" int __register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso);
extern "C" void* __dso_handle __attribute__((weak, visibility("hidden")));
__attribute__((constructor)) static void lalloc_start() {
  __register_atfork(lalloc::fork_prepare, lalloc::fork_release, lalloc::fork_child,
                    &__dso_handle == nullptr ? nullptr : __dso_handle);
  lalloc::start_predictor();  // the model plugin, if any: here, never inside an allocation
}

__attribute__((destructor)) static void lalloc_stop() { lalloc::write_final_stats(); }
