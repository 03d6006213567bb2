#include "attribution.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace sim {

void write_attribution(const HeapAllocator& heap, const SlotOwners& owners, JsonWriter& j) {
  // (huge page, stack, class) -> (pages, objects, bytes)
  struct Cell { uint64_t npages = 1, objects = 0, bytes = 0; };
  std::map<std::tuple<uint64_t, uint64_t, uint8_t>, Cell> cells;
  uint64_t live = 0, objects = 0;
  for (uint32_t slot = 0; slot < owners.live.size(); ++slot) {
    if (!owners.live[slot]) continue;
    const uint64_t addr = heap.where(slot).first, size = std::max<uint64_t>(1, heap.asked_size(slot));
    const uint64_t stack = owners.stack[slot];
    const uint8_t cls = owners.cls[slot];
    live += size;
    ++objects;
    const uint64_t end = addr + size, first = addr / kHugePageBytes, last = (end - 1) / kHugePageBytes;
    auto add = [&](uint64_t hp, uint64_t npages, uint64_t obj, uint64_t bytes) {
      Cell& c = cells[{hp, stack, cls}];
      c.npages = npages;
      c.objects += obj;
      c.bytes += bytes;
    };
    if (first == last) { add(first, 1, 1, size); continue; }
    add(first, 1, 1, (first + 1) * kHugePageBytes - addr);
    if (last > first + 1) add(first + 1, last - first - 1, 0, (last - first - 1) * kHugePageBytes);
    add(last, 1, 0, end - last * kHugePageBytes);
  }
  j.begin_object();
  j.kv("huge_pages", heap.live_huge_pages());
  j.kv("live_bytes", live);
  j.kv("objects", objects);
  j.key("rows");
  j.begin_array();
  for (const auto& [k, c] : cells) {
    j.begin_array();
    j.value(std::get<0>(k));
    j.value(c.npages);
    j.value(std::get<1>(k));
    j.value(unsigned(std::get<2>(k)));
    j.value(c.objects);
    j.value(c.bytes);
    j.end_array();
  }
  j.end_array();
  j.end_object();
}

uint64_t IsolatedHeap::alloc(const AllocRequest& r) {
  const bool apart = stacks_.count(r.stack) != 0;
  if (r.slot >= apart_slot_.size()) apart_slot_.resize(size_t(r.slot) + 1, 0);
  apart_slot_[r.slot] = apart;
  if (apart) ++apart_allocs_;
  return (apart ? apart_ : main_)->alloc(r);
}

Counters IsolatedHeap::counters() const {
  Counters c;
  c.push_back({"apart_allocs", apart_allocs_});
  c.push_back({"apart_huge_pages", apart_->live_huge_pages()});
  for (const auto& [k, v] : main_->counters()) c.push_back({k, v});
  return c;
}

}  // namespace sim
