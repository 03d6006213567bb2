#include "segregated.h"

#include <algorithm>

#include "baseline.h"
#include "json.h"
#include "llama.h"

namespace sim {

SegregatedHeap::SegregatedHeap(std::string name, std::vector<unsigned> group_of,
                               std::vector<std::unique_ptr<HeapAllocator>> heaps)
    : name_(std::move(name)), group_of_(std::move(group_of)), heaps_(std::move(heaps)) {
  SIM_CHECK(!heaps_.empty() && heaps_.size() <= kMaxGroups, name_ + ": 1 to 8 heaps");
  for (unsigned g : group_of_) SIM_CHECK(g < heaps_.size(), name_ + ": a class of no heap");
  static_assert(kMaxGroups <= (1u << kGroupBits));
  ids_.resize(heaps_.size());
  // The checker's shadow heaps name objects by engine slot: each heap looks its own up.
  for (auto& h : heaps_) {
    if (auto* l = dynamic_cast<Llama*>(h.get())) l->set_shadow_slots(&local_, kLocalMask);
    else if (auto* b = dynamic_cast<TcmallocBaseline*>(h.get())) b->set_shadow_slots(&local_, kLocalMask);
    else SIM_CHECK(false, name_ + ": a heap of unknown kind");
  }
}

void SegregatedHeap::divert_mixed(const ClassScheme& classes) {
  SIM_CHECK(heaps_.size() == 2, name_ + ": divert-mixed needs LLAMA's heap and a size-class heap");
  divert_ = true;
  // Early: below the predicted class's lower bound (inf: below the last bound).
  const auto& b = classes.bounds_ns;
  lower_ns_.assign(size_t(classes.num_classes()), 0);
  for (int c = 1; c < classes.num_classes(); ++c) lower_ns_[size_t(c)] = b[std::min(size_t(c), b.size()) - 1];
}

void SegregatedHeap::segregate_above(uint64_t bytes, unsigned shared) {
  SIM_CHECK(shared < heaps_.size(), name_ + ": segregate-above: no such heap");
  segregate_above_ = bytes;
  shared_ = shared;
}

uint64_t SegregatedHeap::alloc(const AllocRequest& r) {
  unsigned g = group_of_[size_t(r.cls)];
  const unsigned by_class = g;
  if (segregate_above_) {
    if (live_bytes_ < segregate_above_) {
      if (g != shared_) ++c_small_heap_;
      g = shared_;
    }
    if (!addr_mode_) live_bytes_ += r.size;
  }
  if (addr_mode_) {
    const uint64_t addr = heaps_[g]->alloc(r);
    SIM_CHECK(heap_of(addr + r.size - 1) == g,
              name_ + ": heap " + std::to_string(g) + " ran out of huge page ids");
    if (segregate_above_) live_bytes_ += heaps_[g]->placed_size(r.size, r.align);
    return addr;
  }
  if (divert_) {
    grow_slots(placed_, r.slot);
    Placed& p = placed_[r.slot];
    p.cls = -1;
    if (g == 0 && by_class == 0) {
      Stack& s = stacks_[r.stack];
      if (s.diverted) {
        g = 1;
        ++c_diverted_;
      } else {
        ++s.placed;
        p = {r.now, r.stack, r.cls};
      }
    }
  }
  const uint32_t l = ids_[g].take();
  SIM_CHECK(l < kLocalMask, name_ + ": heap " + std::to_string(g) + " ran out of slot ids");
  grow_slots(local_, r.slot, kDead);
  local_[r.slot] = uint32_t(g) << kLocalBits | l;
  AllocRequest lr = r;
  lr.slot = l;
  const uint64_t addr = heaps_[g]->alloc(lr);
  SIM_CHECK(heap_of(addr + r.size - 1) == g,
            name_ + ": heap " + std::to_string(g) + " ran out of huge page ids");
  return addr;
}

void SegregatedHeap::prefetch_free(uint32_t slot, int stage) const {
  if (slot >= local_.size()) return;
  if (stage == 1) {
    __builtin_prefetch(&local_[slot]);
    if (divert_ && slot < placed_.size()) __builtin_prefetch(&placed_[slot]);
    return;
  }
  const uint32_t gl = local_[slot];  // the slot's heap and its id there: its record next
  if (gl != kDead && group(gl) < heaps_.size()) heaps_[group(gl)]->prefetch_free(local(gl), 1);
}

void SegregatedHeap::free(uint32_t slot, uint64_t now) {
  const uint32_t gl = local_[slot];
  if (segregate_above_) live_bytes_ -= heaps_[group(gl)]->asked_size(local(gl));
  if (divert_ && placed_[slot].cls >= 0) {
    const Placed& p = placed_[slot];
    Stack& s = stacks_[p.stack];
    if (now - p.alloc_ns < lower_ns_[size_t(p.cls)] && !s.diverted) {
      ++s.early;
      if (s.placed >= kMixedMinObjects && 2 * s.early >= s.placed) {
        s.diverted = true;
        ++c_stacks_diverted_;
      }
    }
  }
  heaps_[group(gl)]->free(local(gl), now);
  ids_[group(gl)].release(local(gl));
  local_[slot] = kDead;
}

void SegregatedHeap::advance(uint64_t now) {
  for (auto& h : heaps_) h->advance(now);
}

uint64_t SegregatedHeap::release_free() {
  uint64_t n = 0;
  for (auto& h : heaps_) n += h->release_free();
  return n;
}

uint64_t SegregatedHeap::subreleased_bytes() const {
  uint64_t n = 0;
  for (const auto& h : heaps_) n += h->subreleased_bytes();
  return n;
}

uint64_t SegregatedHeap::live_huge_pages() const {
  uint64_t n = 0;
  for (const auto& h : heaps_) n += h->live_huge_pages();
  return n;
}

Counters SegregatedHeap::counters() const {
  Counters out;
  for (const auto& h : heaps_) {  // summed by name, in first-seen order
    for (const auto& [k, v] : h->counters()) {
      auto it = std::find_if(out.begin(), out.end(), [&k = k](const auto& o) { return o.first == k; });
      if (it == out.end()) out.push_back({k, v});
      else it->second += v;
    }
  }
  for (size_t g = 0; g < heaps_.size(); ++g)
    out.push_back({"heap" + std::to_string(g) + "_live_huge_pages", heaps_[g]->live_huge_pages()});
  if (segregate_above_) out.push_back({"small_heap_allocs", c_small_heap_});
  if (divert_) {
    out.push_back({"diverted_allocs", c_diverted_});
    out.push_back({"diverted_stacks", c_stacks_diverted_});
  }
  return out;
}

std::pair<uint64_t, uint64_t> SegregatedHeap::where(uint32_t slot) const {
  const uint32_t gl = local_[slot];
  return heaps_[group(gl)]->where(local(gl));
}

uint64_t SegregatedHeap::asked_size(uint32_t slot) const {
  const uint32_t gl = local_[slot];
  return heaps_[group(gl)]->asked_size(local(gl));
}

void SegregatedHeap::move_slot(uint32_t from, uint32_t to) {
  grow_slots(local_, to, kDead);
  const uint32_t gl = local_[from];
  const unsigned g = group(gl);
  // Its heap's own id moves down too when a lower one is free (each heap's ids packed).
  uint32_t l = local(gl);
  const uint32_t lower = ids_[g].take();
  if (lower < l) {
    heaps_[g]->move_slot(l, lower);
    ids_[g].release(l);
    l = lower;
  } else {
    ids_[g].release(lower);
  }
  local_[to] = uint32_t(g) << kLocalBits | l;
  local_[from] = kDead;
  if (divert_) {
    grow_slots(placed_, to);
    placed_[to] = placed_[from];
  }
}

void SegregatedHeap::trim(uint32_t slot_end) {
  // A heap's own ids move down with the engine's (move_slot) only when the engine moves
  // that object: the survivors of a fall that kept low engine ids keep their high local
  // ones, and the heap's per-slot records stay sized by its peak.  When a heap's highest
  // id is well above its live count, one pass over the engine's slots moves each of its
  // objects above that count to the lowest free id (amortized: the pass follows a fall of
  // at least an eighth of the heap's ids).
  std::vector<uint32_t> above(heaps_.size(), kLocalMask);
  bool any = false;
  for (size_t g = 0; g < heaps_.size(); ++g) {
    const uint64_t live = ids_[g].count();
    if (ids_[g].end() > live + live / 8 + 4096) above[g] = uint32_t(live), any = true;
  }
  if (any) {
    for (uint32_t s = 0; s < slot_end && s < local_.size(); ++s) {
      const uint32_t gl = local_[s];
      if (gl == kDead) continue;
      const unsigned g = group(gl);
      const uint32_t l = local(gl);
      if (l < above[g]) continue;
      const uint32_t lower = ids_[g].take();
      if (lower < l) {
        heaps_[g]->move_slot(l, lower);
        ids_[g].release(l);
        local_[s] = uint32_t(g) << kLocalBits | lower;
      } else {
        ids_[g].release(lower);
      }
    }
  }
  trim_slots(local_, slot_end);
  trim_slots(placed_, slot_end);
  for (size_t g = 0; g < heaps_.size(); ++g) {
    heaps_[g]->trim(uint32_t(ids_[g].end()));
  }
}

bool SegregatedHeap::enable_address_mode() {
  if (divert_) return false;
  for (auto& h : heaps_)
    if (!dynamic_cast<TcmallocBaseline*>(h.get())) return false;  // LLAMA's heap cannot
  for (auto& h : heaps_) h->enable_address_mode();
  addr_mode_ = true;
  return true;
}

uint64_t SegregatedHeap::free_at(uint64_t addr, uint64_t now) {
  const uint64_t g = heap_of(addr);
  if (g >= heaps_.size()) return 0;
  const uint64_t bytes = heaps_[g]->free_at(addr, now);
  if (segregate_above_) live_bytes_ -= bytes;
  return bytes;
}

void SegregatedHeap::free_batch_at(const uint64_t* addr, uint32_t n, uint64_t now, uint64_t* bytes) {
  // A run of objects of one heap (a flush's are all of one) goes to it at once.
  for (uint32_t i = 0; i < n;) {
    const uint64_t g = heap_of(addr[i]);
    uint32_t e = i + 1;
    while (e < n && heap_of(addr[e]) == g) ++e;
    if (g >= heaps_.size()) {
      std::fill(bytes + i, bytes + e, 0);
    } else {
      heaps_[g]->free_batch_at(addr + i, e - i, now, bytes + i);
      if (segregate_above_)
        for (uint32_t k = i; k < e; ++k) live_bytes_ -= bytes[k];
    }
    i = e;
  }
}

uint32_t SegregatedHeap::alloc_batch(const AllocRequest& r, uint32_t n, uint64_t* out) {
  // (one heap for the batch: the live bytes decide it for the whole batch)
  if (!addr_mode_ || n == 0) return HeapAllocator::alloc_batch(r, n, out);
  unsigned g = group_of_[size_t(r.cls)];
  if (segregate_above_ && live_bytes_ < segregate_above_) {
    if (g != shared_) c_small_heap_ += n;
    g = shared_;
  }
  const uint32_t got = heaps_[g]->alloc_batch(r, n, out);
  for (uint32_t i = 0; i < got; ++i)
    SIM_CHECK(heap_of(out[i] + r.size - 1) == g,
              name_ + ": heap " + std::to_string(g) + " ran out of huge page ids");
  if (segregate_above_) live_bytes_ += got * heaps_[g]->placed_size(r.size, r.align);
  return got;
}

uint64_t SegregatedHeap::usable_at(uint64_t addr) const {
  const uint64_t g = heap_of(addr);
  return g < heaps_.size() ? heaps_[g]->usable_at(addr) : 0;
}

void SegregatedHeap::check_page(uint64_t hp, const ShadowHeap& shadow) const {
  const uint64_t g = hp >> kIdShift;
  SIM_CHECK(g < heaps_.size(), name_ + ": huge page " + std::to_string(hp) + " of no heap");
  heaps_[g]->check_page(hp, shadow);  // it finds its objects' own slots in local_
}

void SegregatedHeap::check_all(const ShadowHeap& shadow) const {
  // Each heap checks its own objects: the shadow split by address range.
  std::vector<ShadowHeap> parts(heaps_.size());
  for (const auto& [a, o] : shadow.all()) {
    const uint64_t g = heap_of(a);
    SIM_CHECK(g < heaps_.size() && (addr_mode_ || g == group(local_[o.slot])),
              name_ + ": object at " + std::to_string(a) + " outside its heap's huge pages");
    parts[g].on_alloc(name_, a, o.end - a, o.slot);
  }
  for (size_t g = 0; g < heaps_.size() && !addr_mode_; ++g) {
    SIM_CHECK(parts[g].count() == ids_[g].count(), name_ + ": heap " + std::to_string(g) + "'s slot ids");
  }
  for (size_t g = 0; g < heaps_.size(); ++g) heaps_[g]->check_all(parts[g]);
}

void SegregatedHeap::snapshot_pages(JsonWriter& j) const {
  for (const auto& h : heaps_) h->snapshot_pages(j);  // ids ascending: heap g's from g << kIdShift
}

}  // namespace sim
