// One-line errors on stderr, then abort: bad configuration, a broken invariant, a free of
// a pointer nobody allocated.  Writes with write(2) only: safe inside the allocator.
#pragma once

namespace lalloc {

[[noreturn]] void fatal(const char* a, const char* b = "", const char* c = "", const char* d = "");

}  // namespace lalloc
