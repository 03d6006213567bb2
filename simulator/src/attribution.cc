#include "attribution.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

namespace sim {

namespace {

// The live huge pages (id, count) of a heap, read from its own snapshot (allocator.h:
// snapshot_pages writes objects that start {"id":N and may go on ,"count":C).
std::vector<std::pair<uint64_t, uint64_t>> live_pages(const HeapAllocator& heap) {
  JsonWriter w;
  heap.snapshot_pages(w);
  const std::string& s = w.str();
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const std::string id_key = "{\"id\":", count_key = ",\"count\":";
  for (size_t pos = s.find(id_key); pos != std::string::npos; pos = s.find(id_key, pos)) {
    pos += id_key.size();
    char* end = nullptr;
    uint64_t id = std::strtoull(s.c_str() + pos, &end, 10);
    pos = size_t(end - s.c_str());
    uint64_t count = 1;
    if (s.compare(pos, count_key.size(), count_key) == 0) {
      pos += count_key.size();
      count = std::strtoull(s.c_str() + pos, &end, 10);
      pos = size_t(end - s.c_str());
    }
    out.push_back({id, count});
  }
  return out;
}

}  // namespace

void write_attribution(const HeapAllocator& heap, const SlotOwners& owners,
                       const std::unordered_map<uint64_t, uint64_t>& last_stack, JsonWriter& j) {
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
  // Live huge pages no object touches: a row each, for the stack that last allocated there.
  {
    std::vector<std::pair<uint64_t, uint64_t>> covered;  // [first, end) of each row's pages
    for (const auto& [k, c] : cells) covered.push_back({std::get<0>(k), std::get<0>(k) + c.npages});
    std::sort(covered.begin(), covered.end());
    auto is_covered = [&](uint64_t hp) {
      auto it = std::upper_bound(covered.begin(), covered.end(), std::make_pair(hp, UINT64_MAX));
      return it != covered.begin() && std::prev(it)->second > hp;
    };
    constexpr uint64_t kNoStack = UINT64_MAX;
    for (const auto& [id, count] : live_pages(heap)) {
      // An entry of several huge pages is one object's (and its padding): look at its
      // first and last two pages only (its middle is the object's, whole).
      for (uint64_t hp = id; hp < id + count; ++hp) {
        if (hp == id + 2 && count > 4) hp = id + count - 2;
        if (is_covered(hp)) continue;
        auto it = last_stack.find(hp);
        Cell& c = cells[{hp, it == last_stack.end() ? kNoStack : it->second, uint8_t(255)}];
        c.npages = 1;
      }
    }
  }
  std::vector<AttributionRow> rows;
  rows.reserve(cells.size());
  for (const auto& [k, c] : cells)
    rows.push_back({std::get<0>(k), c.npages, std::get<1>(k), std::get<2>(k), c.objects, c.bytes});
  write_attribution_object(heap, live, objects, rows, j);
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
