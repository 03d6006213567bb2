// TCMalloc's removed lifetime rule (google/tcmalloc, 2020-2023: lifetime_predictions.h,
// lifetime_tracker.h, lifetime_based_allocator.h) as a baseline predictor, written anew
// from its description here (no code copied):
//
//   * per allocation stack, two counters, short-lived and long-lived, in a database of at
//     most 1024 stacks (least recently looked up evicted; an evicted stack starts again
//     from zero, and objects still tracked for it count for the evicted entry only);
//   * an object is tracked from its allocation: freed at an age <= 0.5 s it counts short
//     (at its free); once its age passes 0.5 s (freed later, or still live) it counts long
//     at the first tracker event (an eligible allocation or free) after that moment;
//   * prediction, made before the allocation's own tracker event: short iff
//     short > long + 10 (the "high certainty" rule TCMalloc used); else long;
//   * TCMalloc applied it to page-heap allocations of more than half a huge page and at
//     most a HugeRegion (1 GiB): 128 < ceil(size / 8 KiB) <= 131072 ("large"); "all"
//     applies the same rule to every object.  Objects outside the range get the fallback
//     class (--table-default, as the tables' missing stacks) and touch no counter.
//
// What is not modelled: TCMalloc only consulted the rule for large allocations the filler
// could not place and tracked only those that went to its lifetime region or donated a
// huge page's tail (placement-dependent); here every eligible object is predicted and
// tracked.  The key is the trace's stack id (the whole recorded stack, as TCMalloc's key
// was the raw stack), not the cut context.
//
// Classes: "short" is the first class whose bound exceeds 0.5 s (the class holding every
// lifetime <= 0.5 s: <1s under the default classes), "long" is the inf class (TCMalloc's
// long meant "no special placement"; inf never under-predicts and has no deadline).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "predictor.h"

namespace sim {

struct TcmallocRuleConfig {
  bool large_only = true;
  uint64_t threshold_ns = 500000000;  // 0.5 s
  uint64_t margin = 10;               // short iff short > long + margin
  size_t database_size = 1024;
  uint64_t page_bytes = 8192;          // TCMalloc's page
  uint64_t min_pages_exclusive = 128;  // half a huge page
  uint64_t max_pages = 131072;         // a HugeRegion, 1 GiB
};

class TcmallocRulePredictor final : public Predictor {
 public:
  TcmallocRulePredictor(const ClassScheme& classes, int fallback, TcmallocRuleConfig cfg = {});
  int predict(const ObjectRecord& r) override;
  void describe(JsonWriter& j) const override;
  bool write_served(std::FILE* f) const override;

  bool eligible(uint64_t size) const;
  int short_class() const { return short_class_; }
  int long_class() const { return long_class_; }

 private:
  struct Counts {
    uint64_t short_lived = 0, long_lived = 0;
  };
  struct Tracker {
    uint64_t deadline;
    uint32_t counts;  // index into counts_
    bool tracked;
  };
  struct PendingFree {
    uint64_t t, seq;
    bool operator>(const PendingFree& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  void expire(uint64_t now);  // every tracker whose deadline < now counts long
  uint32_t lookup(uint64_t stack);

  TcmallocRuleConfig cfg_;
  int short_class_, long_class_, fallback_, num_classes_;
  std::vector<Counts> counts_;  // every entry ever made (an evicted one stays for its trackers)
  std::list<uint64_t> lru_;     // stacks in the database, least recently looked up first
  struct Entry {
    uint32_t counts;
    std::list<uint64_t>::iterator pos;
  };
  std::unordered_map<uint64_t, Entry> db_;
  std::deque<Tracker> trackers_;  // in allocation (= deadline) order; front's seq = base_
  uint64_t base_ = 0;
  std::priority_queue<PendingFree, std::vector<PendingFree>, std::greater<PendingFree>> frees_;
  // Reported.
  uint64_t eligible_ = 0, predicted_short_ = 0, counted_short_ = 0, counted_long_ = 0,
           evictions_ = 0;
  std::unordered_map<uint64_t, std::vector<uint64_t>> served_;  // stack -> objects per class
  uint64_t last_stack_ = UINT64_MAX;
  std::vector<uint64_t>* last_served_ = nullptr;
};

}  // namespace sim
