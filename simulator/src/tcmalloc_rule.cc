#include "tcmalloc_rule.h"

#include <algorithm>

#include "json.h"

namespace sim {

TcmallocRulePredictor::TcmallocRulePredictor(const ClassScheme& classes, int fallback,
                                             TcmallocRuleConfig cfg)
    : cfg_(cfg), fallback_(fallback), num_classes_(classes.num_classes()) {
  // short: the first class whose bound exceeds the threshold (it holds every lifetime
  // <= threshold); the open-ended class if no finite bound does.
  short_class_ = int(classes.bounds_ns.size());
  for (size_t i = 0; i < classes.bounds_ns.size(); ++i)
    if (classes.bounds_ns[i] > cfg_.threshold_ns) { short_class_ = int(i); break; }
  long_class_ = classes.inf_class();
}

bool TcmallocRulePredictor::eligible(uint64_t size) const {
  if (!cfg_.large_only) return true;
  uint64_t pages = size / cfg_.page_bytes + (size % cfg_.page_bytes != 0);
  return pages > cfg_.min_pages_exclusive && pages <= cfg_.max_pages;
}

void TcmallocRulePredictor::expire(uint64_t now) {
  while (!trackers_.empty()) {
    Tracker& t = trackers_.front();
    if (t.tracked) {
      if (!(t.deadline < now)) break;
      ++counts_[t.counts].long_lived;
      ++counted_long_;
    }
    trackers_.pop_front();
    ++base_;
  }
}

uint32_t TcmallocRulePredictor::lookup(uint64_t stack) {
  auto it = db_.find(stack);
  if (it != db_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.pos);
    return it->second.counts;
  }
  if (db_.size() >= cfg_.database_size) {  // evict the least recently looked up
    db_.erase(lru_.front());
    lru_.pop_front();
    ++evictions_;
  }
  counts_.push_back({});
  lru_.push_back(stack);
  db_.emplace(stack, Entry{uint32_t(counts_.size() - 1), std::prev(lru_.end())});
  return uint32_t(counts_.size() - 1);
}

int TcmallocRulePredictor::predict(const ObjectRecord& r) {
  const uint64_t now = r.alloc_ns;
  // The frees up to now, in time order: each is a tracker event (expirations first), and a
  // still-tracked object counts short.
  while (!frees_.empty() && frees_.top().t <= now) {
    PendingFree f = frees_.top();
    frees_.pop();
    expire(f.t);
    if (f.seq >= base_) {
      Tracker& t = trackers_[f.seq - base_];
      if (t.tracked) {
        t.tracked = false;
        ++counts_[t.counts].short_lived;
        ++counted_short_;
      }
    }
  }
  int cls = fallback_;
  if (eligible(r.size)) {
    ++eligible_;
    uint32_t c = lookup(r.stack_id);
    const Counts& n = counts_[c];
    bool is_short = n.short_lived > n.long_lived + cfg_.margin;
    cls = is_short ? short_class_ : long_class_;
    predicted_short_ += is_short;
    expire(now);  // the allocation's own tracker event, after the prediction
    uint64_t seq = base_ + trackers_.size();
    trackers_.push_back({now + cfg_.threshold_ns, c, true});
    // A free later than the deadline only advances the expirations; one never freed has
    // no free event at all.
    if (r.free_ns != kNever) frees_.push({r.free_ns, seq});
  }
  if (r.stack_id != last_stack_) {
    auto& v = served_[r.stack_id];
    if (v.empty()) v.assign(size_t(num_classes_), 0);
    last_stack_ = r.stack_id;
    last_served_ = &v;
  }
  ++(*last_served_)[size_t(cls)];
  return cls;
}

void TcmallocRulePredictor::describe(JsonWriter& j) const {
  j.kv("kind", "tcmalloc_rule");
  j.kv("sizes", cfg_.large_only ? "large" : "all");
  if (cfg_.large_only) {
    j.kv("min_bytes_exclusive", cfg_.min_pages_exclusive * cfg_.page_bytes);
    j.kv("max_bytes", cfg_.max_pages * cfg_.page_bytes);
  }
  j.kv("threshold_ns", cfg_.threshold_ns);
  j.kv("margin", cfg_.margin);
  j.kv("database_size", uint64_t(cfg_.database_size));
  j.kv("short_class", short_class_);
  j.kv("long_class", long_class_);
  j.kv("fallback_class", fallback_);
  j.kv("eligible_objects", eligible_);
  j.kv("predicted_short", predicted_short_);
  j.kv("predicted_long", eligible_ - predicted_short_);
  j.kv("counted_short", counted_short_);
  j.kv("counted_long", counted_long_);
  j.kv("database_entries", uint64_t(db_.size()));
  j.kv("database_evictions", evictions_);
}

bool TcmallocRulePredictor::write_served(std::FILE* f) const {
  std::vector<uint64_t> stacks;
  stacks.reserve(served_.size());
  for (const auto& kv : served_) stacks.push_back(kv.first);
  std::sort(stacks.begin(), stacks.end());
  for (uint64_t s : stacks) {
    const auto& v = served_.at(s);
    for (int c = 0; c < num_classes_; ++c)
      if (v[size_t(c)])
        std::fprintf(f, "%s %llu %d %llu\n", label.c_str(), (unsigned long long)s, c,
                     (unsigned long long)v[size_t(c)]);
  }
  return true;
}

}  // namespace sim
