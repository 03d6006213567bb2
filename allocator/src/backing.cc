#include "backing.h"

#include <sys/mman.h>
#include <time.h>

#include <cerrno>

#include <algorithm>
#include <iterator>
#include <string>

#include "address_space.h"
#include "fatal.h"
#include "segregated.h"

namespace lalloc {

namespace {
constexpr uint64_t kLocalMask = (uint64_t(1) << sim::SegregatedHeap::kIdShift) - 1;
// The bitmaps' bit of a (global) heap page.
bool bit_of(const uint64_t* m, uint64_t page) { return m[page / 64] >> (page % 64) & 1; }
void set_bit(uint64_t* m, uint64_t page, bool on) {
  const uint64_t b = uint64_t(1) << (page % 64);
  m[page / 64] = on ? m[page / 64] | b : m[page / 64] & ~b;
}
uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
}  // namespace

void Backing::init(unsigned groups, uint64_t reserve_bytes, bool table) {
  if (groups == 0 || groups > kMaxGroups) fatal("backing: 1 to 8 heaps");
  table_ = table;
  // Per heap: reserve_bytes (LIFETIME_ALLOC_RESERVE_GIB, 64 GiB), or under an
  // address-space limit (RLIMIT_AS, `ulimit -v`) at most half of what is left of it,
  // shared by the heaps and their object table (a quarter of a heap's size); the rest is
  // the program's (its objects past a huge page, stacks, libraries).  Less when the kernel
  // refuses, down to kLeastPages per heap.  An id past the reservation fails its
  // allocation (ENOMEM), as before.
  constexpr uint64_t kLeastPages = 2;
  uint64_t per = reserve_bytes / kHuge;
  if (const uint64_t left = address_space_left(); left != UINT64_MAX) {
    const uint64_t share = left / 2 / groups / kHuge;
    per = std::min(per, std::max(table ? share * 4 / 5 : share, kLeastPages));
  }
  for (; per >= kLeastPages; per /= 2)
    if (reserve(groups, per)) return;
  fatal(("cannot reserve " + std::to_string(groups * kLeastPages * (kHuge >> 20)) +
         " MiB of address space (LIFETIME_ALLOC_RESERVE_GIB; ulimit -v)").c_str());
}

bool Backing::reserve(unsigned groups, uint64_t per_group_pages) {
  const uint64_t want = groups * per_group_pages * kHuge;
  // Over-reserve by one huge page and trim, so the base is 2 MiB aligned.  PROT_NONE:
  // under vm.overcommit_memory=2 (which ignores MAP_NORESERVE) an inaccessible private
  // mapping is not charged; taken() charges what it makes read/write.
  void* p = mmap(nullptr, want + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  uintptr_t raw = uintptr_t(p), base = (raw + kHuge - 1) & ~(kHuge - 1);
  // The object table (2 MiB aligned, huge pages; PROT_NONE, made read/write as the heap
  // grows: taken()), then a bit per heap page and a count per chunk (read/write).
  const uint64_t pages = want / kHuge, chunks = (pages + kChunkPages - 1) / kChunkPages;
  const uint64_t table = table_ ? chunks * kHuge : 0, bits = (pages + 63) / 64 * 8;
  const uint64_t len = table + kHuge + 4 * bits + chunks;
  void* idx = mmap(nullptr, len, table_ ? PROT_NONE : PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (idx == MAP_FAILED) {
    munmap(p, want + kHuge);
    return false;
  }
  const uintptr_t t = (uintptr_t(idx) + kHuge - 1) & ~(kHuge - 1);
  // (the bitmap and counts after the table, in the slack the alignment left or beyond)
  if (table_ && mprotect(reinterpret_cast<void*>(t + table), uintptr_t(idx) + len - (t + table), PROT_READ | PROT_WRITE) != 0) {
    munmap(p, want + kHuge);
    munmap(idx, len);
    return false;
  }
  if (base > raw) munmap(p, base - raw);
  if (base + want < raw + want + kHuge) munmap(reinterpret_cast<void*>(base + want), raw + want + kHuge - base - want);
  if (table_) madvise(reinterpret_cast<void*>(t), table, MADV_HUGEPAGE);
  index_ = reinterpret_cast<uint32_t*>(t);
  committed_ = reinterpret_cast<uint64_t*>(t + table);
  broken_ = reinterpret_cast<uint64_t*>(t + table + bits);
  advised_ = reinterpret_cast<uint64_t*>(t + table + 2 * bits);
  queued_ = reinterpret_cast<uint64_t*>(t + table + 3 * bits);
  chunk_pages_ = reinterpret_cast<uint8_t*>(t + table + 4 * bits);
  base_ = base;
  total_ = want;
  per_group_pages_ = per_group_pages;
  groups_ = groups;
  return true;
}

bool Backing::locate(uint64_t id, unsigned& g, uint64_t& local) const {
  const uint64_t grp = id >> sim::SegregatedHeap::kIdShift;
  local = id & kLocalMask;
  g = unsigned(grp);
  return grp < groups_ && local < per_group_pages_;
}

uintptr_t Backing::real(uint64_t abstract) const {
  unsigned g;
  uint64_t local;
  if (!locate(abstract / kHuge, g, local)) return 0;
  return base_ + (g * per_group_pages_ + local) * kHuge + abstract % kHuge;
}

uint64_t Backing::abstract(uintptr_t p) const {
  const uint64_t off = p - base_, page = off / kHuge;
  return ((uint64_t(page / per_group_pages_) << sim::SegregatedHeap::kIdShift) | page % per_group_pages_) * kHuge + off % kHuge;
}

void Backing::drop_held(unsigned i) {
  held_pages_ -= held_[i].n;
  for (unsigned j = i + 1; j < nheld_; ++j) held_[j - 1] = held_[j];
  --nheld_;
}

void Backing::expire() {
  while (nheld_ && held_[0].at + delay_ns_ <= now_) {
    give_back(held_[0].first, held_[0].n);
    drop_held(0);
  }
}

void Backing::taken(uint64_t first, uint64_t n) {
  if (now_ - growth_at_ >= kGrowthWindowNs) {  // a new window: growth counted from here
    growth_at_ = now_;
    growth_base_ = live_pages_;
  }
  live_pages_ += n;
  // Growth is a new peak, not churn: a heap that fills and drains each round (mstress)
  // grows by tens of MiB in 100 ms over and over, on pages it had already.
  const bool new_peak = live_pages_ > peak_pages_;
  if (live_pages_ > peak_pages_) peak_pages_ = live_pages_;
  // Held pages among these: still committed (and their object table all zero): used as
  // they are.  Newest first: the policy reuses its ids LIFO.
  for (unsigned i = nheld_; i-- > 0;) {
    const Held& h = held_[i];
    if (h.first < first + n && first < h.first + h.n) {
      reused_ += h.n;
      drop_held(i);
    }
  }
  unsigned g;
  uint64_t local;
  if (!locate(first, g, local) || local + n > per_group_pages_) {
    overflowed_ = true;
    return;
  }
  // Empty pages among these (not committed: never touched, or given back), to advise at
  // once while the heap grows (set_growth), after extend() has made them read/write (the
  // policy takes a few at a time; past 8 of one take, the rest are left to collapse).
  const bool growing = growth_pages_ && collapse_ && new_peak && live_pages_ >= growth_base_ + growth_pages_;
  uint64_t empty[8];
  unsigned nempty = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t page = g * per_group_pages_ + local + i;
    if (growing && nempty < std::size(empty) && !bit_of(committed_, page)) empty[nempty++] = page;
    commit(page);
  }
  if (!huge_on_ && live_pages_ >= huge_from_) {
    huge_on_ = true;
    for (unsigned k = 0; k < groups_ && !collapse_; ++k)
      if (hw_[k]) madvise(reinterpret_cast<void*>(base_ + k * per_group_pages_ * kHuge), hw_[k] * kHuge, MADV_HUGEPAGE);
  }
  if (local + n > hw_[g] && !extend(g, local + n)) return;
  for (unsigned i = 0; i < nempty; ++i)
    if (huge_on_ && growth_advises(g, empty[i]) && advise(empty[i])) ++growth_advised_;
}

// An empty page heap g takes while growing: a probe (left to 4 KiB faults), or advised
// when the heap's probe before the last is as resident as a collapse requires
// (set_growth): the heap has filled a few pages since that one was taken, where the
// last may still be filling.
bool Backing::growth_advises(unsigned g, uint64_t page) {
  if (fresh_[g]++ % kGrowthProbe == 0) {
    probe_[g][0] = probe_[g][1];
    probe_[g][1] = page + 1;
    return false;
  }
  const uint64_t probe = probe_[g][0];
  return probe && probe - 1 != page && bit_of(committed_, probe - 1) &&
         missing_small_pages(probe - 1) <= kCollapseMaxMissing;
}

// Heap g read/write up to local id `to` (its new high-water mark); false: refused.
bool Backing::extend(unsigned g, uint64_t to) {
  // Read/write up to the new high-water mark: one growing mapping per heap, no holes.
  uintptr_t lo = base_ + (g * per_group_pages_ + hw_[g]) * kHuge;
  uint64_t len = (to - hw_[g]) * kHuge;
  if (mprotect(reinterpret_cast<void*>(lo), len, PROT_READ | PROT_WRITE) != 0) {
    overflowed_ = true;  // the kernel refused (map count, overcommit): this allocation fails
    return false;
  }
  if (huge_on_ && !collapse_) madvise(reinterpret_cast<void*>(lo), len, MADV_HUGEPAGE);
  if (table_) {
    // The object table's chunks over the new pages: read/write too (charged as they are).
    const uint64_t from = (g * per_group_pages_ + hw_[g]) / kChunkPages;
    const uint64_t last = (g * per_group_pages_ + to + kChunkPages - 1) / kChunkPages;
    if (mprotect(index_ + from * (kHuge / 4), (last - from) * kHuge, PROT_READ | PROT_WRITE) != 0) {
      overflowed_ = true;
      return false;
    }
  }
  hw_[g] = to;
  return true;
}

void Backing::released(uint64_t first, uint64_t n) {
  live_pages_ -= n;
  if (keep_ && delay_ns_ && n <= keep_) {
    while (nheld_ && (held_pages_ + n > keep_ || nheld_ == kMaxHeld)) {  // the oldest go first
      give_back(held_[0].first, held_[0].n);
      drop_held(0);
    }
    held_[nheld_++] = {first, n, now_};
    held_pages_ += n;
    return;
  }
  give_back(first, n);
}

bool Backing::touched_page(uint64_t id, uint64_t& page) const {
  unsigned g;
  uint64_t local;
  if (!locate(id, g, local) || local >= hw_[g]) return false;  // an id that never got memory
  page = g * per_group_pages_ + local;
  return true;
}

void Backing::break_huge(uint64_t page) {
  if (bit_of(broken_, page) || broken_count_ >= kMaxBroken || madvise(page_at(page), kHuge, MADV_NOHUGEPAGE) != 0)
    return;
  set_bit(broken_, page, true);
  ++broken_count_;
  set_bit(advised_, page, false);
}

bool Backing::unbreak_huge(uint64_t page) {
  if (madvise(page_at(page), kHuge, MADV_HUGEPAGE) != 0) return false;
  if (bit_of(broken_, page)) {
    set_bit(broken_, page, false);
    --broken_count_;
  }
  return true;
}

void Backing::subreleased(uint64_t id, uint64_t offset, uint64_t bytes) {
  uint64_t page;
  if (!touched_page(id, page)) return;
  if (huge_on_) break_huge(page);
  unqueue(page);  // no longer dense: the policy says so again when it is
  madvise(page_at(page) + offset, bytes, MADV_DONTNEED);
  subreleased_ += bytes;
}

bool Backing::whole(uint64_t id) const {
  uint64_t page;
  if (!huge_on_ || !touched_page(id, page)) return false;
  // (fault mode: every page past the switch is advised but the broken ones)
  return collapse_ ? bit_of(advised_, page) || bit_of(queued_, page) : !bit_of(broken_, page);
}

void Backing::dense(uint64_t id) {
  uint64_t page;
  if (!huge_on_ || !touched_page(id, page)) return;
  if (collapsing()) {
    // Queued only: advised (and unbroken) when collapse_some() finds it resident enough.
    if (bit_of(advised_, page) || bit_of(queued_, page)) return;
    if (nqueued_ == kQueue) {  // full: a page found too sparse before makes room
      unsigned j = 0;
      while (j < nqueued_ && !queue_[j].deferred) ++j;
      if (j == nqueued_) return;
      unqueue(queue_[j].page);
    }
    set_bit(queued_, page, true);
    queue_[nqueued_++] = {page, now_};
    return;
  }
  // Fault mode: a page not broken is advised already.  Collapse where the kernel lacks
  // MADV_COLLAPSE: advised for khugepaged, at most kMaxBroken at once too (each may split
  // the mapping).
  const bool broken = bit_of(broken_, page);
  if (collapse_ ? bit_of(advised_, page) || (!broken && broken_count_ >= kMaxBroken) : !broken) return;
  advise(page);
}

void Backing::unqueue(uint64_t page) {
  if (!bit_of(queued_, page)) return;
  set_bit(queued_, page, false);
  for (unsigned j = 0; j < nqueued_; ++j)
    if (queue_[j].page == page) {
      for (; j + 1 < nqueued_; ++j) queue_[j] = queue_[j + 1];
      --nqueued_;
      return;
    }
}

bool Backing::advise(uint64_t page) {
  const bool broken = bit_of(broken_, page);
  if (!unbreak_huge(page)) return false;
  if (broken) ++rehugified_;
  if (collapse_) set_bit(advised_, page, true);
  return true;
}

unsigned Backing::missing_small_pages(uint64_t page) const { return missing_small_pages_at(page_at(page)); }

unsigned Backing::missing_small_pages_at(const void* huge_page) {
  unsigned char vec[kHuge / 4096];
  if (mincore(const_cast<void*>(huge_page), kHuge, vec) != 0) return kHuge / 4096;
  unsigned missing = 0;
  for (unsigned char v : vec) missing += !(v & 1);
  return missing;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

void Backing::set_collapse(bool on) {
  collapse_ = on;
  // Whether the kernel knows MADV_COLLAPSE: the advice is checked before the range, so an
  // empty range answers 0 or EINVAL.  (A real call's EINVAL also means a range with no
  // page table, e.g. never touched: a failure of that page, not of the method.)
  collapse_works_ = on && madvise(reinterpret_cast<void*>(base_), 0, MADV_COLLAPSE) == 0;
}

void Backing::collapse_some() {
  next_collapse_ns_ = now_ + kCollapseEveryNs;
  if (budget_at_)
    collapse_budget_ns_ = std::min<int64_t>(kCollapseBurstNs,
                                            collapse_budget_ns_ + int64_t((now_ - budget_at_) / kCollapseShareInv));
  budget_at_ = now_;
  unsigned done = 0, i = 0, nagain = 0;
  Queued again[kCollapsePerTick * 4];
  for (; i < nqueued_ && done < kCollapsePerTick && nagain < kCollapsePerTick * 4 && collapse_budget_ns_ > 0 &&
         queue_[i].at + kCollapseAfterNs <= now_;
       ++i) {
    const uint64_t page = queue_[i].page;
    if (!bit_of(queued_, page)) continue;  // (unqueue() removes a released page's entry)
    // A collapse faults in every 4 KiB page of the range: only a page that is already
    // (nearly) all resident is worth a huge page; a sparse one waits and is looked at again.
    if (missing_small_pages(page) > kCollapseMaxMissing) {
      ++collapse_deferred_;
      again[nagain++] = {page, now_, queue_[i].deferred + 1};
      continue;
    }
    set_bit(queued_, page, false);
    if (!advise(page)) continue;
    ++done;
    collapse_at(page_at(page));
  }
  for (unsigned j = i; j < nqueued_; ++j) queue_[j - i] = queue_[j];
  nqueued_ -= i;
  for (unsigned j = 0; j < nagain; ++j) queue_[nqueued_++] = again[j];  // (i >= nagain: room)
  foreign_some(done);
  scan_resident();
}

void Backing::scan_resident() {
  if (!huge_on_ || !groups_) return;
  const uint64_t all = uint64_t(groups_) * per_group_pages_;
  unsigned looked = 0;
  // At most a heap's worth of pages a tick, kScanPerTick of them committed and looked at.
  for (uint64_t n = 0; n < per_group_pages_ && looked < kScanPerTick && nqueued_ < kQueue; ++n) {
    const uint64_t page = scan_at_;
    scan_at_ = scan_at_ + 1 < all ? scan_at_ + 1 : 0;
    const uint64_t local = page % per_group_pages_;
    if (local >= hw_[page / per_group_pages_]) {  // past its heap's high water: the next heap
      scan_at_ = (page / per_group_pages_ + 1) * per_group_pages_ % all;
      continue;
    }
    if (!bit_of(committed_, page) || bit_of(advised_, page) || bit_of(queued_, page)) continue;
    ++looked;
    if (missing_small_pages(page) > kCollapseMaxMissing) continue;
    set_bit(queued_, page, true);
    queue_[nqueued_++] = {page, now_};
  }
}

bool Backing::collapse_at(void* addr) {
  const uint64_t t0 = monotonic_ns();
  const int rc = madvise(addr, kHuge, MADV_COLLAPSE);
  const uint64_t took = monotonic_ns() - t0;
  collapse_ns_ += took;
  collapse_max_ns_ = std::max(collapse_max_ns_, took);
  collapse_budget_ns_ -= int64_t(took);
  if (rc == 0) {
    ++collapsed_;
    return true;
  }
  ++collapse_failed_;
  return false;
}

void Backing::queue_foreign(uintptr_t start, uintptr_t end) {
  if (!collapsing()) return;
  const uintptr_t first = (start + kHuge - 1) & ~(kHuge - 1);
  if (first + kHuge > end) return;  // no whole huge page in it
  if (nforeign_ == kForeign) unqueue_foreign(foreign_[0].start);
  foreign_[nforeign_++] = {start, end, first, now_};
}

void Backing::unqueue_foreign(uintptr_t start) {
  for (unsigned j = 0; j < nforeign_; ++j)
    if (foreign_[j].start == start) {
      for (; j + 1 < nforeign_; ++j) foreign_[j] = foreign_[j + 1];
      --nforeign_;
      return;
    }
}

void Backing::trim_foreign(uintptr_t start, uintptr_t end) {
  for (unsigned j = 0; j < nforeign_; ++j)
    if (foreign_[j].start == start) {
      foreign_[j].end = end;  // (what it collapsed so far stays so)
      if (foreign_[j].next + kHuge > end) unqueue_foreign(start);
      return;
    }
}

void Backing::foreign_some(unsigned& done) {
  unsigned j = 0;
  while (j < nforeign_ && done < kCollapsePerTick && collapse_budget_ns_ > 0 &&
         foreign_[j].at + kCollapseAfterNs <= now_) {
    Foreign& f = foreign_[j];
    // Its huge pages in order, each once it is resident enough; a sparse one waits (and
    // so do those after it) until the next tick.
    while (f.next + kHuge <= f.end && done < kCollapsePerTick && collapse_budget_ns_ > 0) {
      void* hp = reinterpret_cast<void*>(f.next);
      if (missing_small_pages_at(hp) > kCollapseMaxMissing) {
        ++collapse_deferred_;
        break;
      }
      ++done;
      if (collapse_at(hp)) ++collapsed_foreign_;
      f.next += kHuge;
    }
    if (f.next + kHuge > f.end) {
      unqueue_foreign(f.start);  // all of it collapsed (or tried)
    } else {
      ++j;
    }
  }
}

void Backing::give_back(uint64_t first, uint64_t n) {
  unsigned g;
  uint64_t local;
  if (!locate(first, g, local)) return;  // an id that never got memory
  uint64_t end = local + n < hw_[g] ? local + n : hw_[g];
  if (end <= local) return;
  const uint64_t off = (g * per_group_pages_ + local) * kHuge, len = (end - local) * kHuge;
  madvise(reinterpret_cast<void*>(base_ + off), len, MADV_DONTNEED);
  for (uint64_t p = local; p < end; ++p) {
    const uint64_t page = g * per_group_pages_ + p;
    decommit(page);
    unqueue(page);
    if (collapse_) {
      // Empty: touched again, it is faulted in 4 KiB pages until dense() again.
      if (bit_of(advised_, page)) break_huge(page);
      set_bit(advised_, page, false);
    } else if (bit_of(broken_, page)) {  // empty now: a huge page again when next touched
      unbreak_huge(page);
    }
  }
  returned_ += end - local;
}

void Backing::commit(uint64_t page) {
  if (bit_of(committed_, page)) return;  // (a held page taken again)
  set_bit(committed_, page, true);
  if (table_ && chunk_pages_[page / kChunkPages]++ == 0) ++table_chunks_;
}

void Backing::decommit(uint64_t page) {
  if (!bit_of(committed_, page)) return;
  set_bit(committed_, page, false);
  if (!table_) return;
  // The chunk's table entries are all zero (no object lives on its pages): give back its
  // whole huge page, never part of one (a partial MADV_DONTNEED would split it).
  if (--chunk_pages_[page / kChunkPages] == 0) {
    madvise(index_ + page / kChunkPages * (kHuge / 4), kHuge, MADV_DONTNEED);
    --table_chunks_;
  }
}

uint64_t Backing::touched_bytes() const {
  uint64_t pages = 0;
  for (unsigned g = 0; g < groups_; ++g) pages += hw_[g];
  return pages * kHuge;
}

}  // namespace lalloc
