// Real memory behind the policy's abstract addresses.  The simulator's heaps place an
// object at huge page id x 2 MiB + offset (SegregatedHeap: group g's ids from
// g << kIdShift); here each group owns one 2 MiB-aligned reservation (PROT_NONE,
// MAP_NORESERVE), and address = base_g + local id x 2 MiB + offset.  The policy says when
// an id is taken and released (sim::huge_page_hooks): taken ids are made read/write with
// MADV_HUGEPAGE, released ones go back to the OS with MADV_DONTNEED, after a short delay:
// the last few released pages (keep, LIFETIME_ALLOC_RELEASE_KEEP) stay committed for
// LIFETIME_ALLOC_RELEASE_DELAY_MS, and a page the policy takes again meanwhile (its ids
// are reused LIFO, so the same page often comes back) is used as it is, with no kernel
// work.  The policy's own accounting (live pages, the simulator's figures) is unchanged:
// held pages are counted apart (held_pages), committed but free.
#pragma once

#include <cstdint>
#include "common.h"  // sim::HugePageHooks (heap/src)

namespace lalloc {

class Backing {
 public:
  static constexpr uint64_t kHuge = uint64_t(2) << 20;
  // groups heaps of reserve_bytes each (rounded down to huge pages; less under an
  // address-space limit or when the kernel refuses), with the object table or without it
  // (table false: the policy knows objects by address, HeapAllocator::enable_address_mode);
  // fatal if not even a few huge pages fit.
  void init(unsigned groups, uint64_t reserve_bytes, bool table);
  // Huge pages (MADV_HUGEPAGE) once the committed heap reaches `pages` huge pages (0: from
  // the start): below, the kernel backs the heap with 4 KiB pages as they are touched, so
  // a small process (a PostgreSQL backend, a short program) holds what it touches, not
  // whole 2 MiB pages; at the switch every committed range is advised too (khugepaged
  // collapses it later).  huge_on(): the switch has happened.
  void set_huge_from(uint64_t pages) { huge_from_ = pages; huge_on_ = pages == 0; }
  bool huge_on() const { return huge_on_; }
  // Huge pages by collapse (LIFETIME_ALLOC_HUGE_COLLAPSE, the default): taken ranges are
  // not advised, so the kernel backs them with 4 KiB pages as they are touched (a fault
  // zeroes 4 KiB, not 2 MiB, and a sparse huge page holds what is used); a huge page the
  // policy says is dense (dense()) is queued, and every
  // kCollapseEveryNs of the policy's clock up to kCollapsePerTick queued pages are
  // made MADV_HUGEPAGE and collapsed (MADV_COLLAPSE, Linux 6.1+: one copy into a huge
  // page; where the kernel lacks it, probed at start, dense pages are advised at once and
  // khugepaged collapses them at its own pace).  Off: taken ranges
  // are MADV_HUGEPAGE (past huge_from) and faulted as huge pages.
  void set_collapse(bool on);
  bool collapse() const { return collapse_; }
  // Under collapse, a heap that is growing gets huge pages at fault time: while the live
  // pages reach a new peak, having grown by at least `pages` since the start of this
  // kGrowthWindowNs of the policy's clock, an empty page the policy takes (never
  // touched, or given back) is advised MADV_HUGEPAGE at once, so its first touch faults a whole huge page (a zeroed
  // 2 MiB, ~0.1 ms) rather than 512 small ones that a collapse would copy later (0.5-6
  // ms each, within a 1% budget: mstress, rptest and lua had 2-60% of their dense regions
  // in huge pages).  The policy fills the fullest huge page first, so a growing heap fills
  // each new page before the next; what a growth spurt can leave sparse is the page each
  // heap was filling when it stopped.  But a program may not write all it allocates (a
  // 64 KiB buffer of which it uses a line): a huge page faulted whole would hold what
  // 4 KiB faults never touch.  So every kGrowthProbe-th empty page a heap takes is left
  // to 4 KiB faults, a probe, and the pages after it are advised only while the heap's
  // probe before the last is resident as a collapse requires (at most kCollapseMaxMissing
  // of its small pages missing: what the program wrote, not what a huge page made resident).
  // Even so it cost mstress and cpython 3-6% of steady RSS (allocator/README.md), so it is
  // off unless asked for (LIFETIME_ALLOC_HUGE_GROWTH_MIB; 0: off).  Only past huge_from.
  void set_growth(uint64_t pages) { growth_pages_ = pages; }
  static constexpr uint64_t kGrowthWindowNs = 100000000;  // 100 ms
  static constexpr unsigned kGrowthProbe = 4;
  uint64_t growth_advised_pages() const { return growth_advised_; }
  static constexpr uint64_t kCollapseEveryNs = 100000000;  // 100 ms
  static constexpr unsigned kCollapsePerTick = 4;           // at most 80 MiB/s copied
  // A page is collapsed once it has been dense this long (still advised then): a program
  // that churns through memory (a stress test, a GC cycle) frees most dense pages before
  // a copy would pay off.
  static constexpr uint64_t kCollapseAfterNs = 1000000000;  // 1 s
  // ... and only once at most this many of its 512 small pages are not resident: a
  // collapse faults in the rest, so it costs at most 1/64 of a huge page in RSS (a page
  // the policy calls dense may hold spans whose objects were never written).
  static constexpr unsigned kCollapseMaxMissing = sim::HugePageHooks::kCollapseMaxMissing;
  uint64_t collapse_deferred() const { return collapse_deferred_; }
  // A collapse runs in whichever thread moves the clock (under the lock) and costs it
  // 2.5-5 ms on the development VM (the copy, and compaction to find a free huge page),
  // not the 0.2 ms of a bare 2 MiB copy: collapses spend at most 1 / kCollapseShareInv of
  // the policy's clock, measured, with at most kCollapseBurstNs saved up while idle.
  static constexpr uint64_t kCollapseShareInv = 100;
  static constexpr int64_t kCollapseBurstNs = 20000000;  // 20 ms
  uint64_t collapsed_pages() const { return collapsed_; }
  uint64_t collapse_ns() const { return collapse_ns_; }
  uint64_t collapse_max_ns() const { return collapse_max_ns_; }  // the longest one (the budget's overrun, at most)
  uint64_t collapse_failures() const { return collapse_failed_; }
  // What the budget held at the last tick (<= 0: it ran out), and pages still queued.
  int64_t collapse_budget_ns() const { return collapse_budget_ns_; }
  unsigned collapse_queued() const { return nqueued_; }
  // Whole huge pages of a mapping outside the heap (an object past a huge page, direct.cc):
  // looked at as queued heap pages are (from kCollapseAfterNs after, every kCollapseEveryNs,
  // within the same budget) and each collapsed once at most kCollapseMaxMissing of its
  // small pages are not resident: a big array the program has filled gets huge pages, one
  // it touches sparsely does not.  At most kForeign mappings at once (the oldest give way).
  // Nothing under fault mode (such a mapping is never advised) or without MADV_COLLAPSE.
  void queue_foreign(uintptr_t start, uintptr_t end);
  void unqueue_foreign(uintptr_t start);  // its object freed, or moved (mremap)
  void trim_foreign(uintptr_t start, uintptr_t end);  // its mapping now ends at end (shrunk)
  uint64_t collapsed_foreign() const { return collapsed_foreign_; }
  // The release delay (keep 0 or delay 0: at once); now: the policy's clock, for it.
  void set_release_delay(uint64_t keep_pages, uint64_t delay_ns) { keep_ = keep_pages; delay_ns_ = delay_ns; }
  // Returns held pages whose delay is over (heap.cc, when the policy's clock moves).
  void set_now(uint64_t now) {
    now_ = now;
    if (nheld_ && held_[0].at + delay_ns_ <= now) expire();
    if (now >= next_collapse_ns_ && collapsing()) collapse_some();
  }
  // Returns every held page now, whatever its delay (malloc_trim).
  void release_held() {
    while (nheld_) {
      give_back(held_[0].first, held_[0].n);
      drop_held(0);
    }
  }
  // The real address of an abstract one, or 0 when it lies outside the reservation.
  uintptr_t real(uint64_t abstract) const;
  bool contains(const void* p) const {
    return uintptr_t(p) - base_ < total_;  // base_ = 0 before init: total_ = 0, never
  }
  // sim::huge_page_hooks, through heap.cc.
  void taken(uint64_t first, uint64_t n);
  bool extend(unsigned g, uint64_t to);
  void released(uint64_t first, uint64_t n);
  // Free pages inside a live huge page: [offset, offset + bytes) of id, MADV_DONTNEED now
  // (the kernel splits the huge page; touched again, they come back as small pages).
  // The huge page is first marked MADV_NOHUGEPAGE (broken): khugepaged collapses any
  // MADV_HUGEPAGE range with at least one page present under the default max_ptes_none
  // (511), faulting every released page back in; measured on Redis mixed, about 6 MiB
  // of 10 subreleased came back that way.  A broken page is advised MADV_HUGEPAGE again
  // once it goes back whole (give_back), so it is faulted as a huge page when next used.
  // At most kMaxBroken at once (each may split the mapping: vm.max_map_count).
  void subreleased(uint64_t id, uint64_t offset, uint64_t bytes);
  // The policy says a huge page is dense (sim::HugePageHooks::dense: at most 1/16 of it
  // in free pages): a broken one is MADV_HUGEPAGE again; under collapse, any is queued
  // for collapse_some().
  void dense(uint64_t id);
  // Page id is a huge page now (advised: collapsed, or faulted whole) or queued to be.
  bool whole(uint64_t id) const;
  uint64_t subreleased_bytes_total() const { return subreleased_; }
  uint64_t rehugified_pages() const { return rehugified_; }
  uint64_t broken_pages() const { return broken_count_; }
  static constexpr uint64_t kMaxBroken = 16384;
  // The object table (policies whose heaps keep no slot map; heap.cc): the slot of the
  // object starting at p (its policy id), or kNoSlot.
  // One uint32 per 16-byte granule of the reservation, in address space reserved beside
  // it (2 MiB aligned, MADV_HUGEPAGE: in huge pages as the heap is) and touched only where
  // objects live (4 bytes per 16 of committed heap at most).  One huge page of it covers
  // four of the heap (a chunk), and goes back once none of the four is committed.
  // Without the table (init's table false: the policy knows objects by address,
  // HeapAllocator::enable_address_mode), none of it is reserved, touched or counted.
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  bool has_table() const { return table_; }
  // The policy's address of a real one inside the reservation (real()'s inverse).
  uint64_t abstract(uintptr_t p) const;
  uint32_t slot_at(uintptr_t p) const { return p % 16 ? kNoSlot : index_[(p - base_) / 16] - 1; }
  void set_slot(uintptr_t p, uint32_t slot) { index_[(p - base_) / 16] = slot + 1; }
  void clear_slot(uintptr_t p) { index_[(p - base_) / 16] = 0; }
  // Attribution (attribution.h) keeps stack ids in the table under address mode: the
  // table, and f(real address, its kHuge / 16 entries) for each committed heap page.
  uint32_t* table() const { return index_; }
  template <class F>
  void each_committed(F f) const {
    for (unsigned g = 0; g < groups_; ++g)
      for (uint64_t local = 0; local < hw_[g]; ++local) {
        const uint64_t page = g * per_group_pages_ + local;
        if (committed_[page / 64] >> (page % 64) & 1) f(base_ + page * kHuge, index_ + page * (kHuge / 16));
      }
  }
  // A taken id fell outside its reservation since the last clear (the allocation fails).
  bool overflowed() const { return overflowed_; }
  void clear_overflow() { overflowed_ = false; }

  uintptr_t base() const { return base_; }
  uint64_t reserved_bytes() const { return total_; }
  uint64_t committed_bytes() const { return live_pages_ * kHuge; }      // taken, not released
  uint64_t peak_committed_bytes() const { return peak_pages_ * kHuge; }
  uint64_t touched_bytes() const;  // ever made read/write (the high-water marks)
  uint64_t pages_returned() const { return returned_; }
  uint64_t held_pages() const { return held_pages_; }     // released, kept committed for now
  uint64_t pages_reused() const { return reused_; }        // taken again while held
  uint64_t table_bytes() const { return table_chunks_ * kHuge; }  // object table, committed

 private:
  static constexpr unsigned kMaxGroups = 8;
  bool reserve(unsigned groups, uint64_t per_group_pages);  // false: the kernel refused
  bool locate(uint64_t id, unsigned& g, uint64_t& local) const;
  void give_back(uint64_t first, uint64_t n);  // MADV_DONTNEED now
  void expire();
  void drop_held(unsigned i);
  struct Held { uint64_t first, n, at; };
  static constexpr unsigned kMaxHeld = 64;
  Held held_[kMaxHeld];  // oldest first
  unsigned nheld_ = 0;
  uint64_t held_pages_ = 0, reused_ = 0, keep_ = 0, delay_ns_ = 0, now_ = 0;
  uintptr_t base_ = 0;
  uint32_t* index_ = nullptr;
  static constexpr uint64_t kChunkPages = 4;  // heap pages per huge page of the table
  // The global page (group x per-group pages + local id) of huge page id; false: the id
  // never had memory (past its heap's high-water mark, or outside the reservation).
  bool touched_page(uint64_t id, uint64_t& page) const;
  char* page_at(uint64_t page) const { return reinterpret_cast<char*>(base_ + page * kHuge); }
  // MADV_NOHUGEPAGE, the page broken and no longer advised (unless it is broken already or
  // kMaxBroken are); and MADV_HUGEPAGE, no longer broken (false: the kernel refused).
  void break_huge(uint64_t page);
  bool unbreak_huge(uint64_t page);
  void commit(uint64_t page);     // a page (global: group x per-group pages + local id) is committed
  void decommit(uint64_t page);   // ... given back; its table chunk too when it was the last
  uint64_t* committed_ = nullptr;   // bit per heap page
  uint64_t* broken_ = nullptr;      // bit per heap page: MADV_NOHUGEPAGE (subreleased)
  uint64_t broken_count_ = 0, rehugified_ = 0;
  uint64_t* advised_ = nullptr;     // bit per heap page: MADV_HUGEPAGE by dense() (collapse)
  uint64_t* queued_ = nullptr;      // bit per heap page: in queue_, not advised yet (collapse)
  uint64_t collapse_deferred_ = 0;  // looks at a queued page found too sparse to collapse
  bool collapse_ = false, collapse_works_ = true;
  bool collapsing() const { return collapse_ && collapse_works_; }  // by MADV_COLLAPSE, here
  static constexpr unsigned kQueue = 256;
  struct Queued { uint64_t page, at; uint32_t deferred = 0; };  // deferred: times found too sparse
  Queued queue_[kQueue];            // global heap pages to collapse, oldest first
  unsigned nqueued_ = 0;
  uint64_t next_collapse_ns_ = 0, collapsed_ = 0, collapse_failed_ = 0, collapse_ns_ = 0, collapse_max_ns_ = 0;
  int64_t collapse_budget_ns_ = 0;  // may go below 0 by one collapse
  uint64_t budget_at_ = 0;          // the clock when the budget was last topped up
  void collapse_some();
  bool advise(uint64_t page);  // MADV_HUGEPAGE, no longer broken (false: the kernel refused)
  void unqueue(uint64_t page);  // out of the collapse queue (released, subreleased, evicted)
  unsigned missing_small_pages(uint64_t page) const;  // 4 KiB pages of the huge page not resident (mincore)
  static unsigned missing_small_pages_at(const void* huge_page);
  // Collapses the huge page at addr (MADV_COLLAPSE), within the budget: false if it failed.
  bool collapse_at(void* addr);
  static constexpr unsigned kForeign = 64;
  struct Foreign { uintptr_t start, end, next; uint64_t at; };  // next: the first huge page not yet collapsed
  Foreign foreign_[kForeign];  // oldest first
  unsigned nforeign_ = 0;
  uint64_t collapsed_foreign_ = 0;
  void foreign_some(unsigned& done);
  // Heap pages the policy has not called dense but that are all but resident (free pages
  // subrelease has not given back, which a busy program reuses): a huge page there costs
  // no RSS either, so they are queued too.  kScanPerTick committed pages looked at (mincore)
  // a tick, round each heap from scan_at_.
  static constexpr unsigned kScanPerTick = 8;
  uint64_t scan_at_ = 0;  // global page
  void scan_resident();
  uint8_t* chunk_pages_ = nullptr;  // committed heap pages per table chunk
  uint64_t table_chunks_ = 0;       // chunks with a committed heap page
  uint64_t total_ = 0, per_group_pages_ = 0;
  unsigned groups_ = 0;
  uint64_t hw_[kMaxGroups] = {};  // local ids below are read/write
  uint64_t live_pages_ = 0, peak_pages_ = 0, returned_ = 0, subreleased_ = 0;
  bool overflowed_ = false;
  bool table_ = true;
  uint64_t huge_from_ = 0;
  bool huge_on_ = true;
  uint64_t growth_pages_ = 0, growth_at_ = 0, growth_base_ = 0, growth_advised_ = 0;
  uint64_t probe_[kMaxGroups][2] = {};  // a heap's probe pages before the last and last, + 1 (0: none)
  unsigned fresh_[kMaxGroups] = {};   // empty pages the heap took while growing
  bool growth_advises(unsigned g, uint64_t page);
};

}  // namespace lalloc
