// The pending frees, ordered by time: a radix heap (keys are monotone: every free time
// pushed is >= the current trace time), O(1) push, amortized O(log range) pop.  Equal
// times pop in a fixed (deterministic) order.  Memory: 16 bytes per live object.
#pragma once

#include <cstdint>
#include <vector>

namespace sim {

class FreeQueue {
 public:
  struct Item { uint64_t t; uint32_t slot; };

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  // Precondition: t >= every time passed to pop_le so far.
  void push(uint64_t t, uint32_t slot) {
    unsigned b = bucket(t);
    buckets_[b].push_back({t, slot});
    set_bit(b);
    ++size_;
  }

  // Pops an item with time <= limit (the earliest one), or returns false.
  bool pop_le(uint64_t limit, Item& out) {
    for (;;) {
      if (!buckets_[0].empty()) {
        out = buckets_[0].back();
        buckets_[0].pop_back();
        if (buckets_[0].empty()) mask_ &= ~uint64_t(1);
        --size_;
        return true;
      }
      unsigned i = first_nonempty();
      if (i == 0) return false;  // empty
      // The smallest key bucket i can hold: last's bits above i-1, then bit i-1 set.
      uint64_t lb = (i == 64 ? 0 : (last_ >> i) << i) | (uint64_t(1) << (i - 1));
      if (lb > limit) return false;
      // Redistribute bucket i around a new reference: its minimum, or the limit if that
      // is smaller (every key stays >= the reference, so buckets above i stay valid).
      std::vector<Item>& src = buckets_[i];
      uint64_t m = UINT64_MAX;
      for (const Item& it : src) m = it.t < m ? it.t : m;
      last_ = m <= limit ? m : limit;
      std::vector<Item> moving;
      moving.swap(src);
      clear_bit(i);
      for (const Item& it : moving) {
        unsigned b = bucket(it.t);
        buckets_[b].push_back(it);
        set_bit(b);
      }
      moving.clear();
      src.swap(moving);  // keep the capacity
    }
  }

 private:
  unsigned bucket(uint64_t t) const { return t == last_ ? 0 : 64 - unsigned(__builtin_clzll(t ^ last_)); }
  void set_bit(unsigned b) {
    if (b == 64) top_nonempty_ = true;
    else mask_ |= uint64_t(1) << b;
  }
  void clear_bit(unsigned b) {
    if (b == 64) top_nonempty_ = false;
    else mask_ &= ~(uint64_t(1) << b);
  }
  unsigned first_nonempty() const {
    if (mask_) return unsigned(__builtin_ctzll(mask_));
    return top_nonempty_ ? 64 : 0;
  }

  std::vector<Item> buckets_[65];
  uint64_t mask_ = 0;  // bit b: bucket b (0..63) non-empty
  bool top_nonempty_ = false;
  uint64_t last_ = 0;
  size_t size_ = 0;
};

}  // namespace sim
