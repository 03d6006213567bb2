// Shared constants and small helpers of the LLAMA heap simulator.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace sim {

constexpr uint64_t kHugePageBytes = 2u << 20;  // 2 MiB
constexpr uint64_t kNever = UINT64_MAX;        // free time of an object never freed

// A user-facing error (bad input, bad option): printed as one line, exit status 2.
struct SimError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An internal invariant violated (--check-invariants): exit status 3.
struct InvariantError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define SIM_CHECK(cond, msg)                                                   \
  do {                                                                         \
    if (!(cond)) throw ::sim::InvariantError(std::string(msg) + " [" #cond "]"); \
  } while (0)

// Bit helpers for 256-bit block/page maps (4 x 64).
struct Bits256 {
  uint64_t w[4] = {0, 0, 0, 0};
  bool test(unsigned i) const { return (w[i >> 6] >> (i & 63)) & 1; }
  void set(unsigned i) { w[i >> 6] |= uint64_t(1) << (i & 63); }
  void clear(unsigned i) { w[i >> 6] &= ~(uint64_t(1) << (i & 63)); }
  void set_range(unsigned b, unsigned n) { for (unsigned i = b; i < b + n; ++i) set(i); }
  void clear_range(unsigned b, unsigned n) { for (unsigned i = b; i < b + n; ++i) clear(i); }
  unsigned count() const {
    return unsigned(__builtin_popcountll(w[0]) + __builtin_popcountll(w[1]) +
                    __builtin_popcountll(w[2]) + __builtin_popcountll(w[3]));
  }
  bool any() const { return (w[0] | w[1] | w[2] | w[3]) != 0; }
  bool operator==(const Bits256& o) const {
    return w[0] == o.w[0] && w[1] == o.w[1] && w[2] == o.w[2] && w[3] == o.w[3];
  }
  // The lowest set bit >= i, or -1.
  int first_set_from(unsigned i) const {
    while (i < 256) {
      uint64_t x = w[i >> 6] >> (i & 63);
      if (x) return int(i + unsigned(__builtin_ctzll(x)));
      i = (i | 63) + 1;
    }
    return -1;
  }
  // The highest set bit, or -1.
  int last_set() const {
    for (int k = 3; k >= 0; --k)
      if (w[k]) return k * 64 + 63 - __builtin_clzll(w[k]);
    return -1;
  }
  bool subset_of(const Bits256& o) const {
    for (int i = 0; i < 4; ++i) if (w[i] & ~o.w[i]) return false;
    return true;
  }
};

// Free runs in a 256-bit "used" map: the first (lowest) run of >= n free bits, or -1.
int first_fit(const Bits256& used, unsigned n);
// The longest run of free bits.
unsigned longest_free_run(const Bits256& used);
// Best fit: the shortest free run of >= n bits (lowest on ties), or -1.
int best_fit(const Bits256& used, unsigned n);

}  // namespace sim
