#include "common.h"

namespace sim {

namespace {
// Calls f(start, length) for every maximal free run, in address order; stops if f returns true.
template <class F>
void for_each_free_run(const Bits256& used, F f) {
  unsigned i = 0;
  while (i < 256) {
    // skip used bits
    uint64_t word = used.w[i >> 6] >> (i & 63);
    if (word & 1) {
      uint64_t inv = ~word;  // find first free bit from i
      unsigned skip = inv ? unsigned(__builtin_ctzll(inv)) : 64 - (i & 63);
      if (skip > 64 - (i & 63)) skip = 64 - (i & 63);
      i += skip;
      continue;
    }
    unsigned start = i;
    while (i < 256) {
      uint64_t wd = used.w[i >> 6] >> (i & 63);
      if (wd == 0) {
        i += 64 - (i & 63);
        continue;
      }
      i += unsigned(__builtin_ctzll(wd));
      break;
    }
    if (i > 256) i = 256;
    if (f(start, i - start)) return;
  }
}
}  // namespace

int first_fit(const Bits256& used, unsigned n) {
  int found = -1;
  for_each_free_run(used, [&](unsigned s, unsigned len) {
    if (len >= n) { found = int(s); return true; }
    return false;
  });
  return found;
}

unsigned longest_free_run(const Bits256& used) {
  unsigned best = 0;
  for_each_free_run(used, [&](unsigned, unsigned len) {
    if (len > best) best = len;
    return false;
  });
  return best;
}

int best_fit(const Bits256& used, unsigned n) {
  int found = -1;
  unsigned best = 257;
  for_each_free_run(used, [&](unsigned s, unsigned len) {
    if (len >= n && len < best) { best = len; found = int(s); if (len == n) return true; }
    return false;
  });
  return found;
}

}  // namespace sim
