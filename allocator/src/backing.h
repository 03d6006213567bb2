// Real memory behind the policy's abstract addresses.  The simulator's heaps place an
// object at huge page id x 2 MiB + offset (SegregatedHeap: group g's ids from
// g << kIdShift); here each group owns one 2 MiB-aligned reservation (PROT_NONE,
// MAP_NORESERVE), and address = base_g + local id x 2 MiB + offset.  The policy says when
// an id is taken and released (sim::huge_page_hooks): taken ids are made read/write with
// MADV_HUGEPAGE, released ones go back to the OS with MADV_DONTNEED at once (the policy
// decides when; a delay is the policy's business, see README.md).
#pragma once

#include <cstdint>

namespace lalloc {

class Backing {
 public:
  static constexpr uint64_t kHuge = uint64_t(2) << 20;
  // groups heaps of reserve_bytes each (rounded down to huge pages); fatal if no room.
  void init(unsigned groups, uint64_t reserve_bytes);
  // The real address of an abstract one, or 0 when it lies outside the reservation.
  uintptr_t real(uint64_t abstract) const;
  bool contains(const void* p) const {
    return uintptr_t(p) - base_ < total_;  // base_ = 0 before init: total_ = 0, never
  }
  // sim::huge_page_hooks, through heap.cc.
  void taken(uint64_t first, uint64_t n);
  void released(uint64_t first, uint64_t n);
  // The object table: the slot of the object starting at p (its policy id), or kNoSlot.
  // One uint32 per 16-byte granule of the reservation, in address space reserved beside
  // it and touched only where objects live (4 bytes per 16 of touched heap at most);
  // a released huge page's entries go back with it.
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  uint32_t slot_at(uintptr_t p) const { return p % 16 ? kNoSlot : index_[(p - base_) / 16] - 1; }
  void set_slot(uintptr_t p, uint32_t slot) { index_[(p - base_) / 16] = slot + 1; }
  void clear_slot(uintptr_t p) { index_[(p - base_) / 16] = 0; }
  // A taken id fell outside its reservation since the last clear (the allocation fails).
  bool overflowed() const { return overflowed_; }
  void clear_overflow() { overflowed_ = false; }

  uint64_t reserved_bytes() const { return total_; }
  uint64_t committed_bytes() const { return live_pages_ * kHuge; }      // taken, not released
  uint64_t peak_committed_bytes() const { return peak_pages_ * kHuge; }
  uint64_t touched_bytes() const;  // ever made read/write (the high-water marks)
  uint64_t pages_returned() const { return returned_; }

 private:
  static constexpr unsigned kMaxGroups = 8;
  bool locate(uint64_t id, unsigned& g, uint64_t& local) const;
  uintptr_t base_ = 0;
  uint32_t* index_ = nullptr;
  uint64_t total_ = 0, per_group_pages_ = 0;
  unsigned groups_ = 0;
  uint64_t hw_[kMaxGroups] = {};  // local ids below are read/write
  uint64_t live_pages_ = 0, peak_pages_ = 0, returned_ = 0;
  bool overflowed_ = false;
};

}  // namespace lalloc
