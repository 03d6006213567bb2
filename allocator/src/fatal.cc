#include "fatal.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lalloc {

void fatal(const char* a, const char* b, const char* c, const char* d) {
  const char* parts[] = {"lifetime_alloc: ", a, b, c, d, "\n"};
  for (const char* s : parts) {
    size_t n = std::strlen(s);
    while (n > 0) {
      ssize_t w = ::write(2, s, n);
      if (w <= 0) break;
      s += w;
      n -= size_t(w);
    }
  }
  std::abort();
}

}  // namespace lalloc
