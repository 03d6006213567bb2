#include "allocator.h"

#include <algorithm>

#include "json.h"

namespace sim {

void ShadowHeap::on_alloc(const std::string& who, uint64_t addr, uint64_t size, uint32_t slot) {
  uint64_t end = addr + size;
  auto it = objs_.lower_bound(addr);
  if (it != objs_.end() && it->first < end)
    throw InvariantError(who + ": object of slot " + std::to_string(slot) + " at " + std::to_string(addr) +
                         "+" + std::to_string(size) + " overlaps live slot " + std::to_string(it->second.slot) +
                         " at " + std::to_string(it->first));
  if (it != objs_.begin()) {
    auto p = std::prev(it);
    if (p->second.end > addr)
      throw InvariantError(who + ": object of slot " + std::to_string(slot) + " at " + std::to_string(addr) +
                           " overlaps live slot " + std::to_string(p->second.slot) + " at " +
                           std::to_string(p->first));
  }
  objs_.emplace_hint(it, addr, Obj{end, slot});
  bytes_ += size;
}

void ShadowHeap::on_free(const std::string& who, uint64_t addr, uint32_t slot) {
  auto it = objs_.find(addr);
  if (it == objs_.end() || it->second.slot != slot)
    throw InvariantError(who + ": free of slot " + std::to_string(slot) + " at " + std::to_string(addr) +
                         " matches no live object");
  bytes_ -= it->second.end - it->first;
  objs_.erase(it);
}

void HeapAllocator::snapshot(JsonWriter& j) const {
  j.begin_array();
  snapshot_pages(j);
  j.end_array();
}

void write_attribution_object(const HeapAllocator& heap, uint64_t live_bytes, uint64_t objects,
                              const std::vector<AttributionRow>& rows, JsonWriter& j) {
  j.begin_object();
  j.kv("huge_pages", heap.live_huge_pages());
  j.kv("live_bytes", live_bytes);
  j.kv("objects", objects);
  j.key("rows");
  j.begin_array();
  for (const AttributionRow& r : rows) {
    j.begin_array();
    for (uint64_t v : {r.hp, r.npages, r.stack, r.cls, r.objects, r.bytes}) j.value(v);
    j.end_array();
  }
  j.end_array();
  std::vector<std::pair<uint64_t, uint64_t>> pages;
  heap.subreleased_by_page(pages);
  std::sort(pages.begin(), pages.end());
  j.key("subreleased");
  j.begin_array();
  for (const auto& [id, bytes] : pages) {
    j.begin_array();
    j.value(id);
    j.value(bytes);
    j.end_array();
  }
  j.end_array();
  j.end_object();
}

}  // namespace sim
