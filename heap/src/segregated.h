// Heaps side by side, one per group of predicted lifetime classes, each with its own
// huge pages: LLAMA's `--policy size-classes[...]` (every group a size-class heap, the
// baseline's allocator) and `size-classes-from:B` (classes < B in LLAMA's heap, the rest
// in one size-class heap), `divert-mixed` (LLAMA's heap, and one size-class heap for
// the contexts whose objects keep dying before their predicted class) and
// `segregate-above:MIB` (the size-class heap while the heap is small).
//
// Why (issue 21): LLAMA's spans are bump-allocated in 128 B lines, and a line is reused
// only once all of it is free, so a class whose objects die at scattered times (a
// context that mixes lifetimes, or a long class under random deletes) keeps sparse
// pages.  Size-class slots are reused one object at a time, whoever dies first; what the
// prediction still buys is that objects of different groups never share a huge page.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "slot_ids.h"
#include "classes.h"

namespace sim {

class SegregatedHeap final : public HeapAllocator {
 public:
  static constexpr unsigned kMaxGroups = 8;
  // Group g's huge page ids start at g << kIdShift: 2^40 ids (2^61 bytes) each, so every
  // address (id * 2 MiB) of eight groups fits 64 bits; a heap that would run past its
  // range is an error, never a wrong address.
  static constexpr unsigned kIdShift = 40;
  // The heap (group) whose huge pages hold the byte at addr.
  static uint64_t heap_of(uint64_t addr) { return (addr / kHugePageBytes) >> kIdShift; }

  // group_of[c]: the heap of predicted class c; heaps[g] was made with first huge page
  // id g << kIdShift.
  SegregatedHeap(std::string name, std::vector<unsigned> group_of,
                 std::vector<std::unique_ptr<HeapAllocator>> heaps);
  // divert-mixed: heap 0 is LLAMA's, heap 1 a size-class heap.  A stack whose objects
  // placed in heap 0 mostly died early (at least kMixedMinObjects placed, at least half
  // of them freed before their predicted class's lower bound: a context that mixes
  // lifetimes, the case LLAMA's lines cannot reuse) sends its later objects to heap 1.
  static constexpr uint32_t kMixedMinObjects = 8;
  void divert_mixed(const ClassScheme& classes);
  // segregate-above: while the live bytes of the whole heap are below `bytes`, every new
  // object goes to heap `shared` (a small heap pays no per-class open pages); at or above,
  // each to its class's heap.
  void segregate_above(uint64_t bytes, unsigned shared);

  // The real allocator's thread caches: which heap a request goes to (group_of()[class],
  // or shared_heap() while the live bytes are below segregate_above_bytes()).
  const std::vector<unsigned>& group_of() const { return group_of_; }
  uint64_t segregate_above_bytes() const { return segregate_above_; }
  unsigned shared_heap() const { return shared_; }
  const HeapAllocator& heap(unsigned g) const { return *heaps_[g]; }

  uint64_t alloc(const AllocRequest& r) override;
  void free(uint32_t slot, uint64_t now) override;
  void prefetch_free(uint32_t slot, int stage) const override;
  void advance(uint64_t now) override;
  uint64_t live_huge_pages() const override;
  uint64_t subreleased_bytes() const override;
  void subreleased_by_page(std::vector<std::pair<uint64_t, uint64_t>>& out) const override {
    for (const auto& h : heaps_) h->subreleased_by_page(out);
  }
  Counters counters() const override;
  std::pair<uint64_t, uint64_t> where(uint32_t slot) const override;
  uint64_t asked_size(uint32_t slot) const override;
  void trim(uint32_t slot_end) override;
  uint64_t release_free() override;
  void move_slot(uint32_t from, uint32_t to) override;
  // Address mode: every heap a size-class heap in address mode, no divert-mixed; the
  // heap of an address is its id range.  segregate-above counts placed bytes here (the
  // size asked is not known at the free), asked bytes in the simulator.
  bool enable_address_mode() override;
  uint64_t free_at(uint64_t addr, uint64_t now) override;
  void free_batch_at(const uint64_t* addr, uint32_t n, uint64_t now, uint64_t* bytes) override;
  uint64_t usable_at(uint64_t addr) const override;
  uint64_t placed_size(uint64_t size, uint32_t align) const override { return heaps_[0]->placed_size(size, align); }
  uint32_t alloc_batch(const AllocRequest& r, uint32_t n, uint64_t* out) override;
  void check_page(uint64_t hp, const ShadowHeap& shadow) const override;
  void check_all(const ShadowHeap& shadow) const override;
  void snapshot_pages(JsonWriter& j) const override;

 private:
  std::string name_;
  std::vector<unsigned> group_of_;                    // by predicted class
  std::vector<std::unique_ptr<HeapAllocator>> heaps_;  // by group
  // Each heap sees its own dense slot ids (its per-slot bookkeeping is sized by its own
  // peak of live objects, not the engine's): by engine slot, the heap's group in the top
  // kGroupBits bits and its local id below.  Placement never depends on a slot id's value.
  static constexpr unsigned kGroupBits = 3, kLocalBits = 32 - kGroupBits;
  static constexpr uint32_t kLocalMask = (uint32_t(1) << kLocalBits) - 1;
  std::vector<SlotIds> ids_;                          // by group: lowest-first (slot_ids.h)
  std::vector<uint32_t> local_;                       // by engine slot (kDead: none)
  static constexpr uint32_t kDead = UINT32_MAX;       // (no heap's local id reaches kLocalMask)
  static unsigned group(uint32_t l) { return l >> kLocalBits; }
  static uint32_t local(uint32_t l) { return l & kLocalMask; }
  bool addr_mode_ = false;
  // divert-mixed
  struct Placed { uint64_t alloc_ns = 0, stack = 0; int cls = -1; };  // cls -1: not counted
  struct Stack { uint32_t placed = 0, early = 0; bool diverted = false; };
  bool divert_ = false;
  std::vector<uint64_t> lower_ns_;                    // by class: lifetimes below are early
  std::vector<Placed> placed_;                        // by engine slot
  std::unordered_map<uint64_t, Stack> stacks_;
  uint64_t c_diverted_ = 0, c_stacks_diverted_ = 0;
  // segregate-above
  // (an object's size, at its free: its heap's asked_size, no record here)
  uint64_t segregate_above_ = 0, live_bytes_ = 0, c_small_heap_ = 0;
  unsigned shared_ = 0;
};

}  // namespace sim
