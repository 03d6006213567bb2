// The interface every simulated allocator implements, and the shadow heap that the
// invariant checker (--check-invariants) keeps per allocator.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace sim {

class JsonWriter;

// One allocation request, as the engine hands it to every allocator.
struct AllocRequest {
  uint32_t slot;    // engine's id of the live object (reused after its free)
  uint64_t size;    // bytes (>= 1)
  uint32_t align;   // power of two
  uint32_t thread;  // trace thread id
  int cls;          // predicted lifetime class (LLAMA); ignored by the baseline
  uint64_t now;     // trace time, ns
  uint64_t stack = 0;  // the trace's stack id (LLAMA's contain-mixed policy)
};

// Every live object of one allocator by address: the checker's independent record.
class ShadowHeap {
 public:
  struct Obj { uint64_t end; uint32_t slot; };
  void on_alloc(const std::string& who, uint64_t addr, uint64_t size, uint32_t slot);
  void on_free(const std::string& who, uint64_t addr, uint32_t slot);
  uint64_t bytes() const { return bytes_; }
  size_t count() const { return objs_.size(); }
  // Objects overlapping [lo, hi), in address order.
  template <class F> void for_range(uint64_t lo, uint64_t hi, F f) const {
    auto it = objs_.upper_bound(lo);
    if (it != objs_.begin()) {
      auto p = std::prev(it);
      if (p->second.end > lo) f(p->first, p->second);
    }
    for (; it != objs_.end() && it->first < hi; ++it) f(it->first, it->second);
  }
  const std::map<uint64_t, Obj>& all() const { return objs_; }

 private:
  std::map<uint64_t, Obj> objs_;
  uint64_t bytes_ = 0;
};

using Counters = std::vector<std::pair<std::string, uint64_t>>;

class HeapAllocator {
 public:
  virtual ~HeapAllocator() = default;
  // Places the object; returns its address (huge page id * 2 MiB + offset).
  virtual uint64_t alloc(const AllocRequest& r) = 0;
  // Frees the live object of this slot.
  virtual void free(uint32_t slot, uint64_t now) = 0;
  // A hint, no effect on the result: `slot` will be freed soon (the engine looks a few
  // events ahead).  stage 1: its per-slot record may be fetched into the cache; stage 2
  // (later, closer to the free): what that record points to.  The slot may not be live
  // yet (its allocation may still be ahead): only bounds-checked reads.
  virtual void prefetch_free(uint32_t slot, int stage) const { (void)slot; (void)stage; }
  // Time advances to `now` (LLAMA: deadlines expire).  Monotone.
  virtual void advance(uint64_t now) { (void)now; }
  virtual uint64_t live_huge_pages() const = 0;
  // Of those, bytes of free pages given back to the OS (subrelease): resident memory is
  // live_huge_pages() x 2 MiB less this.
  virtual uint64_t subreleased_bytes() const { return 0; }
  // Those bytes per live huge page, (id, bytes) for each page with some: what a page
  // held costs in memory is 2 MiB less them (the attributions' resident figures).
  virtual void subreleased_by_page(std::vector<std::pair<uint64_t, uint64_t>>& out) const { (void)out; }
  virtual Counters counters() const = 0;
  // Address and size of a live slot (for the checker).
  virtual std::pair<uint64_t, uint64_t> where(uint32_t slot) const = 0;
  // The size a live slot was allocated with (AllocRequest::size; where() may say more).
  virtual uint64_t asked_size(uint32_t slot) const = 0;
  // No slot at or above slot_end is live: per-slot records may give back their tail (the
  // real allocator, whose ids are handed out lowest-first, calls it now and then).
  virtual void trim(uint32_t slot_end) { (void)slot_end; }
  // malloc_trim: every free page inside a live huge page, and every page of free places
  // inside a span, back to the OS now, whatever recent demand says; the bytes given back.
  virtual uint64_t release_free() { return 0; }
  // The live object of slot `from` is known as `to` (a free slot) from now on, in the same
  // place: the real allocator packs live ids low so that trim can give records back.
  virtual void move_slot(uint32_t from, uint32_t to) = 0;
  // Address mode (the real allocator under size-class heaps): objects are known by their
  // address alone.  enable_address_mode(): from now on (before any allocation), alloc
  // ignores AllocRequest::slot and the heap keeps no record per object, only per span (a
  // bit per object place); free_at frees the live object starting at addr, usable_at says
  // its placed size (0: no live object starts there).  where/asked_size/move_slot do
  // not apply.  false: this heap cannot (LLAMA's; the simulator never asks).
  virtual bool enable_address_mode() { return false; }
  // (returns the placed bytes freed; 0: no live object starts at addr, nothing done)
  virtual uint64_t free_at(uint64_t addr, uint64_t now) { (void)addr; (void)now; return 0; }
  // n calls of free_at in order (a thread cache's flush), bytes[i] what each returned; a
  // heap may fetch the records of later objects while it frees earlier ones.
  virtual void free_batch_at(const uint64_t* addr, uint32_t n, uint64_t now, uint64_t* bytes) {
    for (uint32_t i = 0; i < n; ++i) bytes[i] = free_at(addr[i], now);
  }
  virtual uint64_t usable_at(uint64_t addr) const { (void)addr; return 0; }
  // The placed size of a request (what usable_at will say of it).
  virtual uint64_t placed_size(uint64_t size, uint32_t align) const { (void)align; return size; }
  // n objects of one request's kind at once (the thread caches' refill): their addresses
  // in out, as n calls of alloc would place them; returns how many.
  virtual uint32_t alloc_batch(const AllocRequest& r, uint32_t n, uint64_t* out) {
    for (uint32_t i = 0; i < n; ++i) out[i] = alloc(r);
    return n;
  }
  // Invariants: the huge page `hp` agrees with the shadow heap (and its own bookkeeping);
  // check_all checks every live huge page and the global counters.
  virtual void check_page(uint64_t hp, const ShadowHeap& shadow) const = 0;
  virtual void check_all(const ShadowHeap& shadow) const = 0;
  // Writes the live huge pages (sorted by id) as the elements of a JSON array;
  // snapshot() writes the array (allocator.cc).
  virtual void snapshot_pages(JsonWriter& j) const = 0;
  void snapshot(JsonWriter& j) const;
};

// An attribution (simulator/src/attribution.h says what each field means; the allocator's
// dump writes the same): the JSON object {"huge_pages", "live_bytes", "objects", "rows":
// [[HP, NPAGES, STACK, CLASS, OBJECTS, BYTES], ...] (as given, sorted), "subreleased":
// [[HP, bytes given back], ...] (sorted, from heap)}.
struct AttributionRow { uint64_t hp, npages, stack, cls, objects, bytes; };
void write_attribution_object(const HeapAllocator& heap, uint64_t live_bytes, uint64_t objects,
                              const std::vector<AttributionRow>& rows, JsonWriter& j);

}  // namespace sim
