// Slot ids handed out lowest-first (the real allocator's object slots, SegregatedHeap's
// per-heap local ids).  A LIFO free list hands back whatever was freed last, so after a
// peak the live ids stay spread up to the peak and every per-slot array stays peak-sized;
// lowest-first keeps the live ids packed at the bottom, so end() (one past the highest
// live id) follows the live count and per-slot arrays can give back their tail.
// Three bitmap levels (bit per id taken; bit per word full; bit per word of those full):
// take() and release() touch one word per level; ~1 bit per id ever used.
#pragma once

#include <cstdint>
#include <vector>

namespace sim {

class SlotIds {
 public:
  uint32_t take() {
    while (hint_ < l2_.size() && l2_[hint_] == ~uint64_t(0)) ++hint_;
    if (hint_ == l2_.size()) l2_.push_back(0);
    const size_t w1 = hint_ * 64 + size_t(__builtin_ctzll(~l2_[hint_]));
    if (w1 >= l1_.size()) l1_.resize(w1 + 1, 0);
    const size_t w0 = w1 * 64 + size_t(__builtin_ctzll(~l1_[w1]));
    if (w0 >= l0_.size()) l0_.resize(w0 + 1, 0);
    const unsigned b = unsigned(__builtin_ctzll(~l0_[w0]));
    if ((l0_[w0] |= uint64_t(1) << b) == ~uint64_t(0))
      if ((l1_[w1] |= uint64_t(1) << (w0 % 64)) == ~uint64_t(0)) l2_[hint_] |= uint64_t(1) << (w1 % 64);
    ++count_;
    return uint32_t(w0 * 64 + b);
  }
  void release(uint32_t id) {
    const size_t w0 = id / 64, w1 = w0 / 64, w2 = w1 / 64;
    l0_[w0] &= ~(uint64_t(1) << (id % 64));
    l1_[w1] &= ~(uint64_t(1) << (w0 % 64));
    l2_[w2] &= ~(uint64_t(1) << (w1 % 64));
    if (w2 < hint_) hint_ = w2;
    --count_;
  }
  bool taken(uint32_t id) const { return id / 64 < l0_.size() && (l0_[id / 64] >> (id % 64) & 1); }
  uint64_t count() const { return count_; }   // ids taken
  uint64_t capacity() const { return l0_.size() * 64; }  // ids the bitmap covers now
  // One past the highest taken id (0: none).  Drops the empty words at the top as it
  // goes (they read as free, as words never reached do): amortized O(1).
  uint64_t end() {
    while (!l0_.empty() && !l0_.back()) l0_.pop_back();
    return l0_.empty() ? 0 : l0_.size() * 64 - uint64_t(__builtin_clzll(l0_.back()));
  }

 private:
  std::vector<uint64_t> l0_, l1_, l2_;
  size_t hint_ = 0;  // l2_ words below are all full
  uint64_t count_ = 0;
};

// Ids of a table's entries given out again last-freed-first (a LIFO of the freed ones),
// else one past the table's end, which grows by a default entry: the simulator's spans and
// huge page records (baseline.cc, llama.cc) and the engine's object slots (engine.cc).
// (SlotIds above is the lowest-first kind, for ids that must stay packed.)
class FreeIds {
 public:
  template <class Table>
  uint32_t take(Table& table) {
    if (free_.empty()) {
      // (by a quarter, not std::vector's doubling: the real allocator's arena holds the block)
      if (table.size() == table.capacity()) table.reserve(table.size() + table.size() / 4 + 16);
      table.emplace_back();
      return uint32_t(table.size() - 1);
    }
    const uint32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  void release(uint32_t id) { free_.push_back(id); }
  bool empty() const { return free_.empty(); }  // take() appends
  size_t size() const { return free_.size(); }  // ids freed and not taken again

 private:
  std::vector<uint32_t> free_;
};

// Per-slot arrays grow by a quarter, to the exact capacity (std::vector's resize would
// double it, and the real allocator's metadata arena would hold the doubled block):
// makes v.size() > slot, new entries `fill`.
template <class V, class T = typename V::value_type>
void grow_slots(V& v, size_t slot, const T& fill = T()) {
  if (slot < v.size()) return;
  const size_t n = slot + 1 + v.size() / 4;
  if (n > v.capacity()) v.reserve(n);
  v.resize(n, fill);
}

// A per-slot array whose slots at and above `end` are all dead: when it holds more than
// half again what it needs, it keeps end + 1/8 and gives the rest back (a new, smaller
// block; the real allocator's metadata arena returns a big freed block's pages).
template <class V>
void trim_slots(V& v, size_t end) {
  if (v.capacity() <= end + end / 2 + 4096) return;
  const size_t keep = end + end / 8;
  if (v.size() > keep) v.resize(keep);
  v.shrink_to_fit();
}

}  // namespace sim
