// Shared constants and small helpers of the heap policies (the simulator and the
// allocator both run them).
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

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

// Bits set in a word, without libgcc: __builtin_popcountll is a call to libgcc's
// __popcountdi2 on x86-64 before popcnt (-march=x86-64), which the allocator links
// statically (allocator/CMakeLists.txt), away from its other code that runs: one call
// at start-up put another 64 KiB of its text in every process.
inline unsigned popcount64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return unsigned((x * 0x0101010101010101ull) >> 56);
}

// Bit helpers for 256-bit block/page maps (4 x 64).
struct Bits256 {
  uint64_t w[4] = {0, 0, 0, 0};
  bool test(unsigned i) const { return (w[i >> 6] >> (i & 63)) & 1; }
  void set(unsigned i) { w[i >> 6] |= uint64_t(1) << (i & 63); }
  void clear(unsigned i) { w[i >> 6] &= ~(uint64_t(1) << (i & 63)); }
  void set_range(unsigned b, unsigned n) { for (unsigned i = b; i < b + n; ++i) set(i); }
  void clear_range(unsigned b, unsigned n) { for (unsigned i = b; i < b + n; ++i) clear(i); }
  unsigned count() const {
    return popcount64(w[0]) + popcount64(w[1]) + popcount64(w[2]) + popcount64(w[3]);
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

// Who backs huge page ids with memory: the real allocator (allocator/) sets these to
// commit a page when its id is taken and return it to the OS when released; the simulator
// leaves them null.  Called with [first, first + n).
struct HugePageHooks {
  void (*taken)(uint64_t first, uint64_t n) = nullptr;
  void (*released)(uint64_t first, uint64_t n) = nullptr;
  // Free pages inside a live huge page go back to the OS (subrelease): [offset, offset +
  // bytes) of huge page id.  They come back by being used (a fault), no call.
  void (*subreleased)(uint64_t id, uint64_t offset, uint64_t bytes) = nullptr;
  // A huge page became dense: none of its pages is released and at least kDensePages are
  // in use, so backing it with a huge page costs little resident memory (the allocator
  // has the kernel collapse it).  Once per episode: again only after a subrelease.
  void (*dense)(uint64_t id) = nullptr;
  // Whether huge page id is backed whole now, or queued to be (the allocator's collapse):
  // its idle places stay (TcmallocBaseline::release_idle_places; giving them back would
  // break the huge page, and a later collapse would fault them in again).  Null: never.
  bool (*whole)(uint64_t id) = nullptr;
  static constexpr unsigned kDensePages = 240;  // of 256 8 KiB pages: <= 1/16 free
  // A huge page is backed whole (collapsed) only while at most this many of its 512 4 KiB
  // pages are not resident (a collapse faults in the rest: at most 1/64 of it in RSS).
  // So the heap gives back idle places inside its spans only where that leaves more than
  // this many missing: fewer would cost the huge page and save less than the collapse
  // puts back.
  static constexpr unsigned kCollapseMaxMissing = 8;
};
inline HugePageHooks huge_page_hooks;

// The size-class heap's spans of small objects (sim::TcmallocBaseline), for the real
// allocator's page map (its thread caches find an object's class without the lock):
// created before any of its objects is handed out, released after the last is freed.
// addr: the span's first byte (huge page id x 2 MiB + offset); the simulator leaves them null.
struct SpanHooks {
  void (*created)(uint64_t addr, uint32_t npages, uint32_t cls) = nullptr;
  void (*released)(uint64_t addr, uint32_t npages) = nullptr;
};
inline SpanHooks span_hooks;

// Huge page ids (an address is id x 2 MiB + offset), shared by both allocators' rules:
// take() reuses the most recently released id (LIFO), else a fresh one; take_fresh(n)
// gives n fresh contiguous ids (an object of several huge pages).  Released ids are kept
// as ranges, so a freed 16 TiB object is one entry, not eight million.
class HugePageIds {
 public:
  // Ids start at `base` (a heap of several side by side: disjoint id ranges).
  explicit HugePageIds(uint64_t base = 0) : next_(base) {}
  uint64_t take() {
    uint64_t id;
    if (free_.empty()) {
      id = next_++;
    } else {
      Range& r = free_.back();
      id = r.first + --r.n;
      if (r.n == 0) free_.pop_back();
    }
    if (huge_page_hooks.taken) huge_page_hooks.taken(id, 1);
    return id;
  }
  uint64_t take_fresh(uint64_t n) {
    uint64_t id = next_;
    next_ += n;
    if (huge_page_hooks.taken) huge_page_hooks.taken(id, n);
    return id;
  }
  // Releases first, first+1, ..., first+n-1 in that order: first+n-1 is reused first.
  void release(uint64_t first, uint64_t n) {
    if (huge_page_hooks.released) huge_page_hooks.released(first, n);
    if (!free_.empty() && free_.back().first + free_.back().n == first) free_.back().n += n;
    else free_.push_back({first, n});
  }

 private:
  struct Range { uint64_t first, n; };
  std::vector<Range> free_;
  uint64_t next_ = 0;
};

// Free runs in a 256-bit "used" map: the first (lowest) run of >= n free bits, or -1.
int first_fit(const Bits256& used, unsigned n);
// The longest run of free bits.
unsigned longest_free_run(const Bits256& used);
// Best fit: the shortest free run of >= n bits (lowest on ties), or -1.
int best_fit(const Bits256& used, unsigned n);

}  // namespace sim
