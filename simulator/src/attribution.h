// Fragmentation attribution (`lifetime fragmentation`, issue 34): which allocation stacks'
// live objects sit on each huge page an allocator holds, and a heap that keeps some
// stacks' objects apart (the per-context counterfactual).  Kept apart from engine.cc so
// that the engine only calls in here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator.h"
#include "json.h"

namespace sim {

// What the engine knows of each live slot, kept only while attribution is asked for.
struct SlotOwners {
  std::vector<uint64_t> stack;  // the record's stack id
  std::vector<uint8_t> cls;     // its true lifetime class (the trace's free time)
  std::vector<uint8_t> live;    // 1 while the slot holds a live object
  void on_alloc(uint32_t slot, uint64_t stack_id, int true_cls) {
    if (slot >= live.size()) {
      stack.resize(slot + 1, 0);
      cls.resize(slot + 1, 0);
      live.resize(slot + 1, 0);
    }
    stack[slot] = stack_id;
    cls[slot] = uint8_t(true_cls);
    live[slot] = 1;
  }
  void on_free(uint32_t slot) { live[slot] = 0; }
};

// Writes one allocator's attribution as a JSON object:
//   {"huge_pages": H, "live_bytes": L, "objects": N,
//    "rows": [[HP, NPAGES, STACK, CLASS, OBJECTS, BYTES], ...],
//    "subreleased": [[HP, BYTES], ...]}   (free bytes of live huge page HP given back)
// One row per (huge page, stack, class) with live bytes on it: BYTES = the bytes of those
// objects' requested extents [addr, addr + size) that fall on huge page HP (NPAGES = 1);
// OBJECTS = how many of them start there (an object is counted once, on its first page).
// The whole huge pages strictly inside one object's extent are one row of their own
// (HP = the first, NPAGES = how many, BYTES = NPAGES x 2 MiB: nothing free on them).
// H = the allocator's live huge pages (the heap the simulator reports); huge pages
// that appear in no row hold no live object (alignment padding, open spans whose
// objects all died).  Rows are sorted (deterministic).
// Huge pages the heap holds with no live object on them (LLAMA's open pages and the
// spans a thread still holds whose objects all died; alignment padding) are one row
// each, [HP, 1, STACK, 255, 0, 0]: STACK = the stack that last allocated on that huge
// page (`last_stack`, which the engine keeps while attributing), or 2^64-1 when none did.
void write_attribution(const HeapAllocator& heap, const SlotOwners& owners,
                       const std::unordered_map<uint64_t, uint64_t>& last_stack, JsonWriter& j);

// The policy's heap with the objects of some stacks placed apart, in a second heap of the
// same policy (the counterfactual of `lifetime fragmentation --rerun`): every allocation
// of a stack in `stacks` goes to `apart`, every other one to `main`; memory is the sum.
// The two heaps number their huge pages independently, so addresses may coincide: the
// invariant checker and snapshots do not apply (the engine refuses --check-invariants
// with isolated heaps; snapshots list main's pages, then apart's).
class IsolatedHeap : public HeapAllocator {
 public:
  IsolatedHeap(std::unique_ptr<HeapAllocator> main, std::unique_ptr<HeapAllocator> apart,
               std::unordered_set<uint64_t> stacks)
      : main_(std::move(main)), apart_(std::move(apart)), stacks_(std::move(stacks)) {}
  uint64_t alloc(const AllocRequest& r) override;
  void free(uint32_t slot, uint64_t now) override { heap(slot).free(slot, now); }
  void advance(uint64_t now) override { main_->advance(now); apart_->advance(now); }
  uint64_t live_huge_pages() const override { return main_->live_huge_pages() + apart_->live_huge_pages(); }
  uint64_t subreleased_bytes() const override { return main_->subreleased_bytes() + apart_->subreleased_bytes(); }
  void subreleased_by_page(std::vector<std::pair<uint64_t, uint64_t>>& out) const override {
    main_->subreleased_by_page(out);
    apart_->subreleased_by_page(out);
  }
  Counters counters() const override;
  std::pair<uint64_t, uint64_t> where(uint32_t slot) const override { return heap(slot).where(slot); }
  uint64_t asked_size(uint32_t slot) const override { return heap(slot).asked_size(slot); }
  void move_slot(uint32_t, uint32_t) override { throw SimError("IsolatedHeap: move_slot is not supported"); }
  void check_page(uint64_t, const ShadowHeap&) const override {}
  void check_all(const ShadowHeap&) const override {}
  void snapshot_pages(JsonWriter& j) const override { main_->snapshot_pages(j); apart_->snapshot_pages(j); }

 private:
  HeapAllocator& heap(uint32_t slot) const { return slot < apart_slot_.size() && apart_slot_[slot] ? *apart_ : *main_; }
  std::unique_ptr<HeapAllocator> main_, apart_;
  std::unordered_set<uint64_t> stacks_;
  std::vector<uint8_t> apart_slot_;  // 1: the slot's object is in apart_
  uint64_t apart_allocs_ = 0;
};

}  // namespace sim
