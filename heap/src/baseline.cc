#include "baseline.h"

#include <algorithm>
#include <iterator>

#include "json.h"
#include "slot_ids.h"

namespace sim {

namespace {
// TCMalloc's classic size classes for 8 KiB pages, up to 256 KiB, and one class just
// above each power of two from 4 KiB to 64 KiB (2^k + 2^k/32: 4224 ... 67584, "fit
// classes"), for the buffers programs ask for as 2^k plus a header (z3's 8200 bytes,
// Ghostscript's 65584), which the classic table rounds up by 12-16% (8200 -> 9472).
constexpr uint32_t kClassSizes[] = {
    8,      16,     32,     48,     64,     80,     96,     112,    128,    144,    160,    176,
    192,    208,    224,    240,    256,    272,    288,    304,    320,    336,    352,    368,
    384,    400,    416,    448,    480,    512,    576,    640,    704,    768,    896,    1024,
    1152,   1280,   1408,   1536,   1792,   2048,   2304,   2688,   2816,   3200,   3456,   3584,
    4096,   4224,   4736,   5376,   6144,   6528,   7168,   8192,   8448,   9472,   10240,  12288,
    13568,  14336,  16384,  16896,  20480,  24576,  28672,  32768,  33792,  40960,  49152,  57344,
    65536,  67584,  73728,  81920,  90112,
    98304,  106496, 114688, 131072, 139264, 147456, 155648, 163840, 172032, 180224, 188416, 196608,
    204800, 212992, 221184, 229376, 237568, 245760, 253952, 262144};

int bit_width(uint32_t v) { return v ? 32 - __builtin_clz(v) : 0; }

// A fit class: 33/32 of a power of two.
bool fit_class(uint32_t size) { return size % 33 == 0 && popcount64(size / 33) == 1; }

// A request's size -> the smallest class that fits, in one read-only table made by the
// compiler (shared by every heap of every process), indexed as TCMalloc does: by 8 bytes
// up to 1 KiB, by 128 above (every class above 1 KiB is a multiple of 128: checked
// below).  2.2 KB, where a table by 8 bytes to 256 KiB took 32 KiB of every process's
// resident file pages (the kernel maps them 64 KiB around each read).
constexpr TcmallocBaseline::SmallClassIndex make_class_index() {
  TcmallocBaseline::SmallClassIndex t;
  const uint32_t n = uint32_t(sizeof kClassSizes / sizeof kClassSizes[0]);
  uint32_t c = 0;  // index into kClassSizes; class c + 1
  for (uint32_t size = 0; size <= TcmallocBaseline::kMaxSmall; size += size < TcmallocBaseline::kFineMax ? 8 : 128) {
    while (c < n && kClassSizes[c] < size) ++c;
    t.c[TcmallocBaseline::small_class_index(size)] = uint8_t(c + 1);
  }
  return t;
}
constexpr bool classes_index_exactly() {
  for (uint32_t size : kClassSizes)
    if (size % (size <= TcmallocBaseline::kFineMax ? 8 : 128) != 0) return false;
  return true;
}
static_assert(classes_index_exactly(), "a class above 1 KiB not a multiple of 128 (or below, of 8)");
// small_class serves align 16 too: the smallest class >= a multiple of 16 is one.
constexpr bool classes_above_8_align_16() {
  for (uint32_t size : kClassSizes)
    if (size > 8 && size % 16 != 0) return false;
  return true;
}
static_assert(classes_above_8_align_16(), "a class above 8 bytes not a multiple of 16");
static_assert(sizeof(TcmallocBaseline::SmallClassIndex) == TcmallocBaseline::small_class_index(TcmallocBaseline::kMaxSmall) + 1);
}  // namespace

constexpr TcmallocBaseline::SmallClassIndex TcmallocBaseline::kSmallClassIndex = make_class_index();

TcmallocBaseline::TcmallocBaseline(std::string name, uint64_t first_id)
    : name_(std::move(name)), ids_(first_id), first_id_(first_id) {
  build_size_classes();
  set_subrelease(subrelease_rule.interval_ns, subrelease_rule.windows, subrelease_rule.min_windows,
                 subrelease_rule.idle_places);
}

void TcmallocBaseline::set_subrelease(uint64_t interval_ns, unsigned windows, unsigned min_windows, bool idle_places) {
  SIM_CHECK(windows >= 1 && windows <= kMaxWindows, name_ + ": subrelease windows");
  SIM_CHECK(min_windows >= 1 && min_windows <= windows, name_ + ": subrelease min windows");
  sr_interval_ns_ = interval_ns;
  sr_windows_ = windows;
  sr_min_windows_ = min_windows;
  sr_places_ = idle_places;
  sr_horizon_ = min_windows;
  sr_calm_ = 0;
  sr_at_ = 0;
  sr_next_ns_ = 0;
  sr_peak_.fill(used_pages_);
  sr_refaulted_.fill(0);
}

void TcmallocBaseline::note_used(uint32_t hp, unsigned first, unsigned n) {
  HugePage& h = hps_[hp];
  used_pages_ += n;
  if (sr_peak_[sr_at_] < used_pages_) sr_peak_[sr_at_] = used_pages_;
  if (h.nreleased)
    for (unsigned p = first; p < first + n; ++p)
      if (h.released.test(p)) {  // back from the OS by being touched
        h.released.clear(p);
        --h.nreleased;
        --released_pages_;
        sr_refaulted_[sr_at_] += kOsPerPage;
        ++c_refaulted_;
      }
  say_if_dense(h);
}

void TcmallocBaseline::say_if_dense(HugePage& h) {
  if (!h.dense_said && !h.nreleased && !h.nreleased_places && h.nused >= HugePageHooks::kDensePages) {
    h.dense_said = true;
    if (huge_page_hooks.dense) huge_page_hooks.dense(h.id);
  }
}

void TcmallocBaseline::advance(uint64_t now) {
  if (!sr_interval_ns_ || now < sr_next_ns_) return;
  if (sr_next_ns_ == 0) {  // the first time: the clock starts here
    sr_next_ns_ = now + sr_interval_ns_;
    return;
  }
  // Intervals over: each a new window whose demand starts at what is in use now.
  // The horizon first, from the window that ends now (the ones skipped saw no operation).
  const uint64_t k = (now - sr_next_ns_) / sr_interval_ns_ + 1;
  adapt_horizon();
  sr_calm_ += unsigned(std::min<uint64_t>(k, kMaxWindows)) - 1;
  for (uint64_t i = 0; i < std::min<uint64_t>(k, sr_windows_); ++i) {
    sr_at_ = (sr_at_ + 1) % sr_windows_;
    sr_peak_[sr_at_] = used_pages_;
    sr_refaulted_[sr_at_] = 0;
  }
  sr_next_ns_ += k * sr_interval_ns_;
  sr_serial_ += k;
  subrelease();
  if (sr_places_ && sr_serial_ >= sr_places_next_) {
    release_idle_places();
    sr_places_next_ = sr_serial_ + sr_horizon_;
  }
}

// Idle places.  A size-class heap's free object places can be reused only by objects of
// their class, and the fullest span is filled first, so a sparse span's free places wait
// while the heap's other spans of the class have room: on z3 and Ghostscript (read at a
// stats write) 1.1 and 1.9 MiB sat free in spans that also held live objects, 0.8 and 1.8
// MiB of it as whole 4 KiB pages, where glibc's best fit reuses any freed chunk.  Those
// pages go back to the OS here: a place is a bit in its span's live_bits, never a link
// written in the free object, so a page of free places holds nothing the heap reads, and
// when a place on it is handed out again the kernel faults in a zeroed page
// (refault_places counts it against the horizon, as a refaulted free page is).
// Which: the spans no allocation took from for a whole horizon (recent demand did not
// need their places), on huge pages
// - the allocator does not back whole, nor has queued to (HugePageHooks::whole),
// - that are not dense once their idle pages count as free (the policy's own rule,
//   kDensePages: at most 1/16 free costs little backed whole),
// - and where more than kCollapseMaxMissing small pages end up missing (fewer cost the
//   huge page for less than a collapse would fault in again).
// (Given back everywhere, Ghostscript's dense regions went from 93% to 43% in huge
// pages: collapsed, broken for their idle places, collapsed again as they refilled.)
uint64_t TcmallocBaseline::idle_page_mask(const Span& s) const {
  const uint64_t size = classes_[s.cls].size, n = uint64_t(s.npages) * kOsPerPage;
  uint64_t mask = 0;
  for (uint64_t p = 0; p < n; ++p) {
    const uint64_t lo = p * kOsPageBytes / size, hi = std::min<uint64_t>((p * kOsPageBytes + kOsPageBytes - 1) / size, s.nobjs - 1);
    bool live = false;
    for (uint64_t i = lo; i <= hi && !live && lo < s.nobjs;) {  // word by word
      const uint64_t w = i / 64, last = std::min<uint64_t>(hi, w * 64 + 63);
      const uint64_t bits = s.live_bits[w] >> (i % 64);
      const uint64_t width = last - i + 1;
      live = (width == 64 ? bits : bits & ((uint64_t(1) << width) - 1)) != 0;
      i = last + 1;
    }
    if (!live) mask |= uint64_t(1) << p;
  }
  return mask;
}

void TcmallocBaseline::release_idle_places(bool all) {
  if (central_head_.empty()) return;  // (nothing allocated yet)
  const uint64_t horizon = all ? 0 : sr_horizon_;
  place_cand_.assign(hps_.size(), 0);
  idle_spans_.clear();  // (span, its idle pages not given back yet)
  // The spans of the central lists (bucket >= 0: neither full nor released), read in
  // the order they lie in memory: following the lists' links took a cache miss a span,
  // and the walk was 10% of Redis fates' CPU.  (The order only orders the hook's calls.)
  for (uint32_t sid = 0; sid < spans_.size(); ++sid) {
    Span& sp = spans_[sid];
    if (sp.bucket < 0 || sp.cls == 0 || sr_serial_ - sp.took < horizon ||
        classes_[sp.cls].pages * kOsPerPage > 64)  // (places_released: 64 bits)
      continue;
    if (!sp.idle_known) {
      sp.idle_mask = idle_page_mask(sp);
      sp.idle_known = true;
    }
    if (const uint64_t m = sp.idle_mask & ~sp.places_released) {
      idle_spans_.push_back({sid, m});
      place_cand_[sp.hp] += uint32_t(popcount64(m));
    }
  }
  // Each huge page decided once, on what it holds before this run (place_cand_: 1 = go).
  for (uint32_t hp = 0; hp < place_cand_.size(); ++hp) {
    if (!place_cand_[hp]) continue;
    const HugePage& h = hps_[hp];
    const uint64_t idle = h.nreleased_places + place_cand_[hp];
    place_cand_[hp] = all || !(h.nreleased * kOsPerPage + idle <= HugePageHooks::kCollapseMaxMissing ||
                               h.nused * kOsPerPage >= HugePageHooks::kDensePages * kOsPerPage + idle ||
                               (huge_page_hooks.whole && huge_page_hooks.whole(h.id)));
  }
  for (const auto& [sid, m] : idle_spans_) {
    Span& sp = spans_[sid];
    HugePage& h = hps_[sp.hp];
    if (!place_cand_[sp.hp]) continue;
    for (unsigned p = 0; p < 64;) {  // each run of idle pages: one call
      if (!(m >> p & 1)) { ++p; continue; }
      unsigned e = p;
      while (e < 64 && (m >> e & 1)) ++e;
      if (huge_page_hooks.subreleased)
        huge_page_hooks.subreleased(h.id, sp.first_page * kPageBytes + p * kOsPageBytes, (e - p) * kOsPageBytes);
      p = e;
    }
    const unsigned n = unsigned(popcount64(m));
    sp.places_released |= m;
    h.nreleased_places += n;
    h.dense_said = false;
    released_places_ += n;
    c_places_released_ += n;
  }
}

void TcmallocBaseline::refault_places(Span& s, uint32_t idx) {
  const uint64_t size = classes_[s.cls].size, at = uint64_t(idx) * size;
  HugePage& h = hps_[s.hp];
  for (uint64_t p = at / kOsPageBytes; p <= (at + size - 1) / kOsPageBytes; ++p)
    if (s.places_released >> p & 1) {
      s.places_released &= ~(uint64_t(1) << p);
      --h.nreleased_places;
      --released_places_;
      ++sr_refaulted_[sr_at_];
      ++c_places_refaulted_;
    }
  say_if_dense(h);
}

// Span s's pages go back to the page heap: a page whose 4 KiB halves both went back is a
// released free page from here on; one half of one is forgotten (counted resident).
void TcmallocBaseline::forget_places(Span& s) {
  HugePage& h = hps_[s.hp];
  for (unsigned j = 0; j < s.npages; ++j)
    if ((s.places_released >> (j * kOsPerPage) & ((uint64_t(1) << kOsPerPage) - 1)) == (uint64_t(1) << kOsPerPage) - 1 &&
        !h.released.test(s.first_page + j)) {
      h.released.set(s.first_page + j);
      ++h.nreleased;
      ++released_pages_;
    }
  const unsigned n = unsigned(popcount64(s.places_released));
  h.nreleased_places -= n;
  released_places_ -= n;
  s.places_released = 0;
}

void TcmallocBaseline::adapt_horizon() {
  // Pages given back and touched again within the horizon saved nothing and cost a fault
  // each (kRefaultNs).  When those faults took 1% or more of the horizon's time, demand
  // comes back later than the horizon remembers, so it doubles; after two horizons
  // without that, demand has likely stayed down, and it halves (demand that swings with a
  // period near the horizon pays one period's faults each time, then doubles again).
  uint64_t back = 0;
  for (unsigned a = 0; a < sr_horizon_; ++a) back += sr_refaulted_[(sr_at_ + sr_windows_ - a) % sr_windows_];
  unsigned h = sr_horizon_;
  if (back * kRefaultNs * 100 >= sr_horizon_ * sr_interval_ns_) {
    h = std::min(2 * sr_horizon_, sr_windows_);
    sr_calm_ = 0;
  } else if (++sr_calm_ >= 2 * sr_horizon_) {
    h = std::max(sr_horizon_ / 2, sr_min_windows_);
    sr_calm_ = 0;
  }
  if (h != sr_horizon_) ++c_horizon_changes_;
  sr_horizon_ = h;
}

void TcmallocBaseline::subrelease() {
  // Recent demand, remembered with decay: the peak of the window a intervals old counts in
  // full for the first half of the horizon (demand that came back within it stays), then
  // for (horizon - a) / (horizon - half) of itself, so pages freed by a drop in demand go
  // back a share at a time over the second half, not all at once after it (jemalloc's
  // decay of dirty pages has the same shape).
  const unsigned h = sr_horizon_, half = h / 2;
  uint64_t peak = 0, whole = 0;  // decayed; and in full (no window decayed)
  for (unsigned a = 0; a < h; ++a) {
    const uint64_t p = sr_peak_[(sr_at_ + sr_windows_ - a) % sr_windows_];
    peak = std::max(peak, a < half ? p : p * (h - a) / (h - half));
    whole = std::max(whole, p);
  }
  const uint64_t free = live_hps_ * kPagesPerHuge - released_pages_ - used_pages_;
  const uint64_t keep = peak - std::min(peak, used_pages_);
  // A share of less than half a huge page is not worth the faults, unless no window
  // remembers the demand any more (then the rest goes too: the last share is not kept).
  if (free <= keep || (free - keep < kPagesPerHuge / 2 && free <= whole - std::min(whole, used_pages_))) return;
  uint64_t want = free - keep;
  // Sparsest first: their pages are the least likely to fill again (the filler prefers
  // the fullest), and the most likely to empty and go back whole.
  std::vector<std::pair<uint32_t, uint32_t>> order;  // (pages used, huge page slot)
  for (const auto& [id, hp] : slot_by_id_) {
    const HugePage& h = hps_[hp];
    if (!h.whole && h.nused + h.nreleased < kPagesPerHuge) order.push_back({h.nused, hp});
  }
  std::sort(order.begin(), order.end());
  ++c_subrelease_runs_;
  for (const auto& [nused, hp] : order) {
    release_free_pages(hps_[hp], want);
    if (!want) break;
  }
}

void TcmallocBaseline::release_free_pages(HugePage& h, uint64_t& want) {
  for (unsigned p = 0; p < kPagesPerHuge && want;) {
    if (h.used.test(p) || h.released.test(p)) { ++p; continue; }
    unsigned e = p;
    while (e < kPagesPerHuge && !h.used.test(e) && !h.released.test(e)) h.released.set(e++);
    const unsigned n = e - p;
    if (huge_page_hooks.subreleased) huge_page_hooks.subreleased(h.id, uint64_t(p) * kPageBytes, uint64_t(n) * kPageBytes);
    h.nreleased += n;
    h.dense_said = false;
    released_pages_ += n;
    c_subreleased_ += n;
    want -= std::min<uint64_t>(want, n);
    p = e;
  }
}

uint64_t TcmallocBaseline::release_free() {
  const uint64_t before = subreleased_bytes();
  for (const auto& [id, hp] : slot_by_id_) {
    HugePage& h = hps_[hp];
    uint64_t want = UINT64_MAX;
    if (!h.whole) release_free_pages(h, want);
  }
  release_idle_places(true);
  return subreleased_bytes() - before;
}

void TcmallocBaseline::build_size_classes() {
  classes_.reserve(std::size(kClassSizes) + 1);  // (no grown copies left in the arena)
  classes_.push_back({0, 0, 0});
  for (uint32_t size : kClassSizes) {
    // The fewest pages whose tail waste is at most 1/8 of the span (TCMalloc's rule); a
    // fit class at most 1/64 (32 pages at most), or a 1/8 tail would undo its fit.
    const uint32_t tail = fit_class(size) ? 64 : 8;
    uint32_t pages = uint32_t((size + kPageBytes - 1) / kPageBytes);
    while ((pages * kPageBytes) % size > (pages * kPageBytes) / tail && pages < 32) ++pages;
    classes_.push_back({size, pages, uint32_t(pages * kPageBytes / size), ((uint64_t(1) << 42) + size - 1) / size});
  }
}

uint32_t TcmallocBaseline::size_class(uint64_t size, uint32_t align) const {
  if (size > kMaxSmall || align > kPageBytes) return 0;
  uint32_t c = small_class(size);
  if (align > 8)
    while (c < classes_.size() && classes_[c].size % align != 0) ++c;
  return c < classes_.size() ? c : 0;
}

uint32_t TcmallocBaseline::new_span() {
  const uint32_t id = free_span_ids_.take(spans_);
  spans_[id] = Span();  // (a reused entry's old span; a new one is this already)
  ++c_spans_created_;
  return id;
}

uint32_t TcmallocBaseline::new_huge_page(uint64_t id, uint64_t count) {
  const uint32_t hp = free_slots_.take(hps_);
  HugePage& h = hps_[hp];
  h = HugePage();
  h.id = id;
  h.count = count;
  h.span_at.fill(kNone);
  h.live = true;
  slot_by_id_.emplace(id, hp);
  if (addr_mode_) {
    if (hp_by_id_.size() < id - first_id_ + count) hp_by_id_.resize(id - first_id_ + count, kNone);
    for (uint64_t i = 0; i < count; ++i) hp_by_id_[id - first_id_ + i] = hp;
  }
  live_hps_ += count;
  c_hp_acquired_ += count;
  return hp;
}

void TcmallocBaseline::release_huge_page(uint32_t hp) {
  HugePage& h = hps_[hp];
  if (h.in_filler) filler_remove(hp);
  h.live = false;
  h.whole = false;
  released_pages_ -= h.nreleased;
  live_hps_ -= h.count;
  c_hp_released_ += h.count;
  ids_.release(h.id, h.count);
  slot_by_id_.erase(h.id);
  if (addr_mode_)
    for (uint64_t i = 0; i < h.count; ++i) hp_by_id_[h.id - first_id_ + i] = kNone;
  free_slots_.release(hp);
}

uint32_t TcmallocBaseline::slot_of(uint64_t id) const {
  auto it = slot_by_id_.upper_bound(id);
  if (it == slot_by_id_.begin()) return kNone;
  --it;
  return id - it->first < hps_[it->second].count ? it->second : kNone;
}

void TcmallocBaseline::filler_insert(uint64_t hp) {
  HugePage& h = hps_[hp];
  h.lfr = longest_free_run(h.used);
  h.in_filler = true;
  h.prev = h.next = kNone;
  if (h.lfr == 0) return;  // full: not findable
  auto& row = filler_head_[h.lfr - 1];
  if (row.empty()) row.assign(kPagesPerHuge, kNone);
  else if (!filler_lfr_.test(h.lfr - 1)) --empty_rows_;  // a spare row in use again
  h.next = row[h.nused];
  if (h.next != kNone) hps_[h.next].prev = uint32_t(hp);
  row[h.nused] = uint32_t(hp);
  filler_lfr_.set(h.lfr - 1);
  filler_used_[h.lfr - 1].set(h.nused);
}

void TcmallocBaseline::filler_remove(uint64_t hp) {
  HugePage& h = hps_[hp];
  h.in_filler = false;
  if (h.lfr == 0) return;
  auto& row = filler_head_[h.lfr - 1];
  if (h.prev != kNone) hps_[h.prev].next = h.next;
  else row[h.nused] = h.next;
  if (h.next != kNone) hps_[h.next].prev = h.prev;
  if (row[h.nused] == kNone) {
    filler_used_[h.lfr - 1].clear(h.nused);
    if (!filler_used_[h.lfr - 1].any()) {
      filler_lfr_.clear(h.lfr - 1);
      // Empty rows go once more than kSpareRows wait: a heap holds rows for the longest
      // free ranges its huge pages have now (a few for a small process), not for every one
      // they ever had (z3 had all 256, 256 KiB per heap, for 9 huge pages).  Not at once:
      // a span made or freed takes its huge page out and puts it back, often in the row it
      // left, and rptest_sim spent 1.6% of its time (under the allocator's lock) freeing
      // and remaking such rows.
      if (++empty_rows_ > kSpareRows) {
        for (unsigned i = 0; i < kPagesPerHuge; ++i)
          if (!filler_lfr_.test(i) && !filler_head_[i].empty()) std::vector<uint32_t>().swap(filler_head_[i]);
        empty_rows_ = 0;
      }
    }
  }
  h.prev = h.next = kNone;
}

// HugePageFiller: the huge page with the smallest longest-free-range that fits, and among
// those the most used one; within it the best-fitting free range.  A new huge page if none.
void TcmallocBaseline::pageheap_alloc(uint32_t npages, Span& s) {
  s.npages = npages;
  if (npages >= kPagesPerHuge) {
    // Whole huge pages, contiguous (fresh ids); the tail of the last one is donated to the filler.
    uint32_t whole = npages / kPagesPerHuge, tail = npages % kPagesPerHuge;
    uint64_t first = ids_.take_fresh(whole + (tail ? 1 : 0));
    const uint32_t sid = uint32_t(&s - spans_.data());
    s.hp = new_huge_page(first, whole);
    HugePage& h = hps_[s.hp];
    h.whole = true;
    h.owner = sid;
    h.used.set_range(0, kPagesPerHuge);
    h.nused = kPagesPerHuge;
    used_pages_ += uint64_t(whole) * kPagesPerHuge;  // (fresh ids: nothing released)
    sr_peak_[sr_at_] = std::max(sr_peak_[sr_at_], used_pages_);
    if (tail) {
      s.tail = new_huge_page(first + whole);
      HugePage& last = hps_[s.tail];
      last.used.set_range(0, tail);
      last.nused = tail;
      last.owner = sid;
      note_used(s.tail, 0, tail);
      filler_insert(s.tail);
    }
    s.first_page = 0;
    if (npages > kPagesPerHuge) ++c_multi_hp_allocs_;
    return;
  }
  int lfr_idx = filler_lfr_.first_set_from(npages - 1);
  uint64_t hp;
  if (lfr_idx < 0) {
    hp = new_huge_page(ids_.take());
  } else {
    int nused = filler_used_[lfr_idx].last_set();
    hp = filler_head_[unsigned(lfr_idx)][unsigned(nused)];
    filler_remove(hp);
  }
  HugePage& h = hps_[hp];
  int at = best_fit(h.used, npages);
  SIM_CHECK(at >= 0, name_ + ": filler chose a huge page without room");
  h.used.set_range(unsigned(at), npages);
  h.nused += npages;
  note_used(uint32_t(hp), unsigned(at), npages);
  filler_insert(hp);
  s.hp = hp;
  s.first_page = unsigned(at);
}

void TcmallocBaseline::pageheap_free(uint64_t hp, uint32_t first, uint32_t n) {
  HugePage& h = hps_[hp];
  filler_remove(hp);
  h.used.clear_range(first, n);
  h.nused -= n;
  used_pages_ -= n;
  if (h.nused == 0) release_huge_page(hp);
  else filler_insert(hp);
}

void TcmallocBaseline::central_link(uint32_t sid) {
  Span& s = spans_[sid];
  int b = std::min(bit_width(s.nlive), kCentralBuckets - 1);
  s.bucket = b;
  s.prev = kNone;
  s.next = central_head_[s.cls][b];
  if (s.next != kNone) spans_[s.next].prev = sid;
  central_head_[s.cls][b] = sid;
  central_mask_[s.cls] |= 1u << b;
}

void TcmallocBaseline::central_unlink(uint32_t sid) {
  Span& s = spans_[sid];
  if (s.bucket < 0) return;
  if (s.prev != kNone) spans_[s.prev].next = s.next;
  else central_head_[s.cls][s.bucket] = s.next;
  if (s.next != kNone) spans_[s.next].prev = s.prev;
  if (central_head_[s.cls][s.bucket] == kNone) central_mask_[s.cls] &= ~(1u << s.bucket);
  s.bucket = -1;
  s.prev = s.next = kNone;
}

uint64_t TcmallocBaseline::alloc(const AllocRequest& r) {
  init_on_first_alloc();
  if (!addr_mode_) grow_slots(handles_, r.slot);
  uint32_t cls = size_class(r.size, r.align);
  // (address mode: the placed size; the caller knows no other at the free)
  live_bytes_ += addr_mode_ && cls ? classes_[cls].size : r.size;
  if (cls == 0) {
    // A large object: its own span of whole pages (padded for alignment beyond a page).
    uint64_t bytes = r.size + (r.align > kPageBytes ? r.align - kPageBytes : 0);
    uint32_t npages = uint32_t((bytes + kPageBytes - 1) / kPageBytes);
    uint32_t sid = new_span();
    pageheap_alloc(npages, spans_[sid]);
    Span& s = spans_[sid];
    s.cls = 0;
    s.nobjs = s.nlive = 1;
    if (npages < kPagesPerHuge) set_span_at(s, sid);
    ++c_large_allocs_;
    uint64_t base = hps_[s.hp].id * kHugePageBytes + s.first_page * kPageBytes;
    uint64_t addr = (base + r.align - 1) & ~uint64_t(r.align - 1);
    s.large_size = r.size;
    s.large_pad = uint32_t(addr - base);  // padding < align <= 2^31
    if (!addr_mode_) handles_[r.slot] = {sid, 0, 0};
    return addr;
  }
  const uint32_t sid = take_span(cls);
  Span& s = spans_[sid];
  const uint32_t idx = take_object(s);
  if (s.nlive < s.nobjs) central_link(sid);
  SIM_CHECK(classes_[cls].size - r.size <= UINT16_MAX, name_ + ": size class slack");
  if (!addr_mode_) handles_[r.slot] = {sid, uint16_t(idx), uint16_t(classes_[cls].size - r.size)};
  return hps_[s.hp].id * kHugePageBytes + s.first_page * kPageBytes + uint64_t(idx) * classes_[cls].size;
}

void TcmallocBaseline::set_span_at(const Span& s, uint32_t sid) {
  auto& at = hps_[s.hp].span_at;
  for (uint32_t p = s.first_page; p < s.first_page + s.npages; ++p) at[p] = sid;
}

// What only allocation reads, made at the first: a heap that never allocates (a
// segregated policy's group no prediction falls in) costs no more than its class table
// (these had been 24 KiB of every process's metadata per such heap).
void TcmallocBaseline::init_on_first_alloc() {
  if (!central_head_.empty()) return;
  filler_head_.resize(kPagesPerHuge);
  filler_used_.resize(kPagesPerHuge);
  spare_bits_.resize(classes_.size());
  central_head_.resize(classes_.size());
  for (auto& a : central_head_) a.fill(kNone);
  central_mask_.assign(classes_.size(), 0);
}

// Central free list: the span with the most live objects among those not full (off the
// list: the caller links it back if it is still not full), or a new span.
uint32_t TcmallocBaseline::take_span(uint32_t cls) {
  if (central_mask_[cls]) {
    const int b = 31 - __builtin_clz(central_mask_[cls]);
    const uint32_t sid = central_head_[cls][b];
    central_unlink(sid);
    return sid;
  }
  const uint32_t sid = new_span();
  pageheap_alloc(classes_[cls].pages, spans_[sid]);
  Span& s = spans_[sid];
  s.cls = cls;
  s.nobjs = classes_[cls].objs;
  s.live_bits.swap(spare_bits_[cls]);  // (a released span's: only the bits past nobjs set)
  if (s.live_bits.empty()) {
    s.live_bits.assign((s.nobjs + 63) / 64, 0);
    if (s.nobjs % 64) s.live_bits.back() = ~uint64_t(0) << (s.nobjs % 64);
  }
  s.hint = 0;
  set_span_at(s, sid);
  if (span_hooks.created)
    span_hooks.created(hps_[s.hp].id * kHugePageBytes + s.first_page * kPageBytes, s.npages, cls);
  return sid;
}

// A free object of a span that is not full: the lowest.
uint32_t TcmallocBaseline::take_object(Span& s) {
  while (s.live_bits[s.hint] == ~uint64_t(0)) ++s.hint;  // (nlive < nobjs: a free bit exists)
  uint64_t& w = s.live_bits[s.hint];
  const uint32_t idx = s.hint * 64 + uint32_t(__builtin_ctzll(~w));
  w |= uint64_t(1) << (idx % 64);
  ++s.nlive;
  s.took = uint32_t(sr_serial_);
  s.idle_known = false;
  if (__builtin_expect(s.places_released != 0, 0)) refault_places(s, idx);
  return idx;
}

uint32_t TcmallocBaseline::alloc_batch(const AllocRequest& r, uint32_t n, uint64_t* out) {
  const uint32_t cls = size_class(r.size, r.align);
  if (!addr_mode_ || cls == 0) return HeapAllocator::alloc_batch(r, n, out);
  init_on_first_alloc();
  const uint64_t size = classes_[cls].size;
  uint32_t got = 0;
  while (got < n) {  // as n calls of alloc: each takes from the fullest span until it is full
    const uint32_t sid = take_span(cls);
    Span& s = spans_[sid];
    const uint64_t base = hps_[s.hp].id * kHugePageBytes + s.first_page * kPageBytes;
    while (got < n && s.nlive < s.nobjs) out[got++] = base + uint64_t(take_object(s)) * size;
    if (s.nlive < s.nobjs) central_link(sid);
  }
  live_bytes_ += uint64_t(got) * size;
  return got;
}

void TcmallocBaseline::prefetch_free(uint32_t slot, int stage) const {
  if (slot >= handles_.size()) return;
  if (stage == 1) {
    __builtin_prefetch(&handles_[slot]);
  } else if (handles_[slot].span < spans_.size()) {
    __builtin_prefetch(&spans_[handles_[slot].span]);
  }
}

void TcmallocBaseline::free(uint32_t slot, uint64_t) {
  const Handle hd = handles_[slot];
  const Span& s = spans_[hd.span];
  live_bytes_ -= s.cls == 0 ? s.large_size : classes_[s.cls].size - hd.slack;
  free_obj(hd.span, hd.slot_idx);
}

uint64_t TcmallocBaseline::free_at(uint64_t addr, uint64_t) {
  uint32_t idx = 0;
  const uint32_t sid = span_of(addr, idx);
  if (sid == kNone) return 0;
  const Span& s = spans_[sid];
  const uint64_t bytes = s.cls == 0 ? s.large_size : classes_[s.cls].size;
  live_bytes_ -= bytes;
  free_obj(sid, idx);
  return bytes;
}

const void* TcmallocBaseline::ahead_of(uint64_t addr, int stage) const {
  const uint64_t id = addr / kHugePageBytes;
  if (id < first_id_ || id - first_id_ >= hp_by_id_.size()) return nullptr;
  const uint32_t hp = hp_by_id_[id - first_id_];
  if (hp == kNone) return nullptr;
  const HugePage& h = hps_[hp];
  const uint32_t* at = &h.span_at[addr % kHugePageBytes / kPageBytes];
  if (stage == 0) return at;
  if (h.whole || *at >= spans_.size()) return nullptr;
  const Span& s = spans_[*at];
  if (stage == 1) return &s;
  if (s.cls == 0 || s.hp != hp) return nullptr;
  const uint64_t off = addr % kHugePageBytes - uint64_t(s.first_page) * kPageBytes;
  const uint64_t w = ((off * classes_[s.cls].recip) >> 42) / 64;
  return w < s.live_bits.size() ? &s.live_bits[w] : nullptr;
}

// Each object's lookup is three dependent loads (span index, span, live bits), mostly
// cache misses in a flush of objects freed in no particular order: fetched ahead in
// stages, kAhead objects apart, so that the misses of several objects overlap.  (The
// prefetch is here, not in ahead_of: GCC takes a function whose only effect is a
// prefetch for pure and drops its calls.)
void TcmallocBaseline::free_batch_at(const uint64_t* addr, uint32_t n, uint64_t now, uint64_t* bytes) {
  constexpr int64_t kAhead = 4;
  for (int64_t i = -3 * kAhead; i < int64_t(n); ++i) {
    for (int stage = 0; stage < 3; ++stage) {
      const int64_t j = i + (3 - stage) * kAhead;
      if (j >= 0 && j < int64_t(n))
        if (const void* p = ahead_of(addr[j], stage)) __builtin_prefetch(p);
    }
    if (i >= 0) bytes[i] = free_at(addr[i], now);
  }
}

uint64_t TcmallocBaseline::placed_size(uint64_t size, uint32_t align) const {
  const uint32_t cls = size_class(size, align);
  return cls ? classes_[cls].size : size;
}

uint64_t TcmallocBaseline::usable_at(uint64_t addr) const {
  uint32_t idx = 0;
  const uint32_t sid = span_of(addr, idx);
  if (sid == kNone) return 0;
  return spans_[sid].cls == 0 ? spans_[sid].large_size : classes_[spans_[sid].cls].size;
}

void TcmallocBaseline::free_obj(uint32_t sid, uint32_t idx) {
  Span& s = spans_[sid];
  if (s.cls == 0) {
    uint32_t n = s.npages;
    if (n >= kPagesPerHuge) {
      used_pages_ -= uint64_t(n / kPagesPerHuge) * kPagesPerHuge;
      release_huge_page(s.hp);  // the whole pages (their ids go back in order, then the tail's)
      if (s.tail != kNone) {
        hps_[s.tail].owner = kNone;
        pageheap_free(s.tail, 0, n % kPagesPerHuge);
      }
    } else {
      set_span_at(s, kNone);
      pageheap_free(s.hp, s.first_page, n);
    }
    free_span_ids_.release(sid);
    ++c_spans_released_;
    return;
  }
  s.live_bits[idx / 64] &= ~(uint64_t(1) << (idx % 64));
  if (idx / 64 < s.hint) s.hint = idx / 64;
  --s.nlive;
  s.idle_known = false;
  if (s.nlive == 0) {
    central_unlink(sid);
    if (span_hooks.released) span_hooks.released(hps_[s.hp].id * kHugePageBytes + s.first_page * kPageBytes, s.npages);
    if (s.places_released) forget_places(s);
    set_span_at(s, kNone);
    pageheap_free(s.hp, s.first_page, s.npages);
    if (spare_bits_[s.cls].empty()) spare_bits_[s.cls].swap(s.live_bits);  // (the next span of its class)
    std::vector<uint64_t>().swap(s.live_bits);
    free_span_ids_.release(sid);
    ++c_spans_released_;
  } else if (s.bucket != std::min(bit_width(s.nlive), kCentralBuckets - 1)) {
    // Moved only when its bucket changes (nlive crosses a power of two, or the span was
    // full): most frees leave the central lists, and the neighbours' cache lines, alone.
    central_unlink(sid);
    central_link(sid);
  }
}

std::pair<uint64_t, uint64_t> TcmallocBaseline::where(uint32_t slot) const {
  Handle hd = handles_[slot];
  const Span& s = spans_[hd.span];
  uint64_t base = hps_[s.hp].id * kHugePageBytes + s.first_page * kPageBytes;
  if (s.cls == 0) return {base + s.large_pad, s.large_size};
  return {base + uint64_t(hd.slot_idx) * classes_[s.cls].size, classes_[s.cls].size};
}

uint64_t TcmallocBaseline::asked_size(uint32_t slot) const {
  const Handle hd = handles_[slot];
  const Span& s = spans_[hd.span];
  return s.cls == 0 ? s.large_size : classes_[s.cls].size - hd.slack;
}

void TcmallocBaseline::trim(uint32_t slot_end) { trim_slots(handles_, slot_end); }

void TcmallocBaseline::move_slot(uint32_t from, uint32_t to) {
  grow_slots(handles_, to);
  handles_[to] = handles_[from];  // nothing else names a slot
}

uint32_t TcmallocBaseline::span_holding(uint64_t addr) const {
  const uint64_t id = addr / kHugePageBytes;
  if (id < first_id_ || id - first_id_ >= hp_by_id_.size()) return kNone;
  uint32_t hp = hp_by_id_[id - first_id_];
  if (hp == kNone) return kNone;
  const HugePage& h = hps_[hp];
  uint32_t sid;
  if (h.whole) {
    if (id != h.id) return kNone;  // an object starts in the first of its whole pages
    sid = h.owner;
  } else {
    // The span holding the page (a multi-huge-page span's tail page holds no object
    // start: none there).
    sid = h.span_at[addr % kHugePageBytes / kPageBytes];
    if (sid == kNone) return kNone;
  }
  const Span& s = spans_[sid];
  const uint64_t base = hps_[s.hp].id * kHugePageBytes + uint64_t(s.first_page) * kPageBytes;
  if (addr < base || addr >= base + uint64_t(s.npages) * kPageBytes) return kNone;
  return sid;
}

uint32_t TcmallocBaseline::span_of(uint64_t addr, uint32_t& idx) const {
  const uint32_t sid = span_holding(addr);
  if (sid == kNone) return kNone;
  const Span& s = spans_[sid];
  const uint64_t base = hps_[s.hp].id * kHugePageBytes + uint64_t(s.first_page) * kPageBytes;
  if (s.cls == 0) {
    idx = 0;
    return addr == base + s.large_pad && s.nlive == 1 ? sid : kNone;
  }
  const SizeClass& c = classes_[s.cls];
  const uint64_t off = addr - base, q = (off * c.recip) >> 42;  // off / size: off < 2^21, size < 2^21
  if (q * c.size != off || q >= s.nobjs) return kNone;
  idx = uint32_t(q);
  return (s.live_bits[idx / 64] >> (idx % 64)) & 1 ? sid : kNone;
}

uint32_t TcmallocBaseline::span_of_shadow(uint64_t addr, uint32_t slot) const {
  if (!addr_mode_) return handles_[own_slot(slot)].span;
  uint32_t idx = 0;
  return span_of(addr, idx);
}

Counters TcmallocBaseline::counters() const {
  // Where the heap's pages go, beyond its objects (read here, at a stats write, not kept):
  // free object places in spans that hold some live object, and free pages the huge pages
  // keep (neither used by a span nor given back).
  uint64_t span_free = 0;
  for (const Span& s : spans_)
    if (s.cls && s.nlive) span_free += uint64_t(s.nobjs - s.nlive) * classes_[s.cls].size;
  const uint64_t kept = live_hps_ * kPagesPerHuge - released_pages_ - used_pages_;
  return {{"span_free_object_bytes", span_free}, {"free_pages_kept_bytes", kept * kPageBytes},
          {"idle_place_pages_released", c_places_released_}, {"idle_place_pages_refaulted", c_places_refaulted_},
          {"idle_place_bytes_released", released_places_ * kOsPageBytes},
          {"huge_pages_acquired", c_hp_acquired_}, {"huge_pages_released", c_hp_released_},
          {"spans_created", c_spans_created_},     {"spans_released", c_spans_released_},
          {"large_allocs", c_large_allocs_},       {"multi_huge_page_allocs", c_multi_hp_allocs_},
          {"pages_subreleased", c_subreleased_},   {"subrelease_runs", c_subrelease_runs_},
          {"subreleased_pages_refaulted", c_refaulted_}, {"subrelease_horizon_changes", c_horizon_changes_},
          {"subrelease_horizon_windows", sr_horizon_},
          {"subreleased_bytes", subreleased_bytes()}};
}

void TcmallocBaseline::check_page(uint64_t hp, const ShadowHeap& shadow) const {
  const std::string where = name_ + ": huge page " + std::to_string(hp) + ": ";
  uint64_t lo = hp * kHugePageBytes, hi = lo + kHugePageBytes;
  const uint32_t slot = slot_of(hp);
  if (slot == kNone) {
    bool any = false;
    shadow.for_range(lo, hi, [&](uint64_t, const ShadowHeap::Obj&) { any = true; });
    SIM_CHECK(!any, where + "released but holds live objects");
    return;
  }
  const HugePage& h = hps_[slot];
  SIM_CHECK(h.live && (h.count == 1 || h.whole), where + "page entry state");
  if (h.whole) {
    SIM_CHECK(h.nused == kPagesPerHuge && !h.in_filler, where + "whole page state");
    // Its span's object is live (it need not reach this page: alignment padding may
    // cover whole pages), and nothing else is here.
    SIM_CHECK(h.owner != kNone && spans_[h.owner].hp == slot && spans_[h.owner].cls == 0 &&
              spans_[h.owner].nlive == 1, where + "whole page of a large object with no live object");
    shadow.for_range(lo, hi, [&](uint64_t a, const ShadowHeap::Obj& o) {
      SIM_CHECK(span_of_shadow(a, o.slot) == h.owner, where + "whole page holds another span's object");
    });
    return;
  }
  // Pages used = spans starting here + a multi-huge-page span's tail (pages [0, t)).
  Bits256 expect;
  if (h.owner != kNone) {
    const Span& s = spans_[h.owner];
    SIM_CHECK(s.cls == 0 && s.npages > kPagesPerHuge && s.tail == slot && s.nlive == 1, where + "tail page owner");
    expect.set_range(0, s.npages % kPagesPerHuge);
  }
  shadow.for_range(lo, hi, [&](uint64_t a, const ShadowHeap::Obj& o) {
    if (a < lo)  // a multi-huge-page object ending here: its span's tail page
      SIM_CHECK(span_of_shadow(a, o.slot) == h.owner, where + "object straddles huge pages");
  });
  uint64_t places = 0;  // 4 KiB pages given back inside its spans
  for (unsigned p = 0; p < kPagesPerHuge; ++p) {
    uint32_t sid = h.span_at[p];
    if (sid == kNone) continue;
    const Span& s = spans_[sid];
    SIM_CHECK(s.hp == slot && s.first_page <= p && p < s.first_page + s.npages && s.npages < kPagesPerHuge,
              where + "span index");
    if (p != s.first_page) continue;  // (every page of a span names it; checked from its first)
    for (unsigned q = p; q < p + s.npages; ++q) SIM_CHECK(h.span_at[q] == sid, where + "span index of a page");
    expect.set_range(p, s.npages);
    uint64_t sb = lo + uint64_t(p) * kPageBytes, se = sb + uint64_t(s.npages) * kPageBytes;
    uint32_t n = 0;
    shadow.for_range(sb, se, [&](uint64_t a, const ShadowHeap::Obj& o) {
      SIM_CHECK(a >= sb && o.end <= se, where + "object straddles a span boundary");
      ++n;
    });
    SIM_CHECK(n == s.nlive && n > 0, where + "span live count disagrees with its objects");
    if (s.cls) {
      uint64_t set = 0;
      for (uint64_t w : s.live_bits) set += popcount64(w);
      const uint64_t tail = s.live_bits.size() * 64 - s.nobjs;
      bool hint_ok = true;
      for (uint32_t k = 0; k < s.hint && k < s.live_bits.size(); ++k) hint_ok &= s.live_bits[k] == ~uint64_t(0);
      SIM_CHECK(set == s.nlive + tail && hint_ok, where + "span slot accounting");
      SIM_CHECK((s.places_released & ~idle_page_mask(s)) == 0, where + "a page given back holds a live object");
      SIM_CHECK(!s.idle_known || s.idle_mask == idle_page_mask(s), where + "a span's idle pages known stale");
      places += popcount64(s.places_released);
    } else {
      SIM_CHECK(s.places_released == 0, where + "places given back in a large object's span");
    }
    SIM_CHECK((s.nlive < s.nobjs) == (s.bucket >= 0) || s.cls == 0, where + "central list membership");
  }
  SIM_CHECK(expect == h.used, where + "used pages disagree with its spans");
  Bits256 both = h.used;
  for (int i = 0; i < 4; ++i) both.w[i] &= h.released.w[i];
  SIM_CHECK(!both.any() && h.nreleased == h.released.count(), where + "subreleased pages in use or miscounted");
  SIM_CHECK(places == h.nreleased_places, where + "idle place pages miscounted");
  SIM_CHECK(h.nused == h.used.count() && h.nused > 0, where + "used page count");
  SIM_CHECK(h.in_filler && h.lfr == longest_free_run(h.used), where + "filler bucket");
}

void TcmallocBaseline::check_all(const ShadowHeap& shadow) const {
  uint64_t live = 0;
  for (const auto& [id, slot] : slot_by_id_) {
    const HugePage& h = hps_[slot];
    SIM_CHECK(h.id == id && h.live, name_ + ": huge page index");
    live += h.count;
    check_page(id, shadow);
    if (h.count > 1) check_page(id + h.count - 1, shadow);  // the pages between are alike
  }
  SIM_CHECK(slot_by_id_.size() + free_slots_.size() == hps_.size(), name_ + ": huge page slots");
  // No live object on a released page (the pages between an object's first and last
  // are its own).
  for (const auto& [a, o] : shadow.all())
    SIM_CHECK(slot_of(a / kHugePageBytes) != kNone && slot_of((o.end - 1) / kHugePageBytes) != kNone,
              name_ + ": live object at " + std::to_string(a) + " on a released huge page");
  SIM_CHECK(live == live_hps_, name_ + ": live huge page count");
  uint64_t used = 0, released = 0, places = 0;
  for (const auto& [id, slot] : slot_by_id_) {
    used += hps_[slot].whole ? hps_[slot].count * kPagesPerHuge : hps_[slot].nused;
    released += hps_[slot].nreleased;
    places += hps_[slot].nreleased_places;
  }
  SIM_CHECK(used == used_pages_ && released == released_pages_ && places == released_places_,
            name_ + ": used or subreleased page count");
  SIM_CHECK(shadow.bytes() == live_bytes_, name_ + ": bytes not conserved");
  SIM_CHECK(live_bytes_ <= live_hps_ * kHugePageBytes, name_ + ": more live bytes than huge pages hold");
}

void TcmallocBaseline::snapshot_pages(JsonWriter& j) const {
  for (const auto& [id, slot] : slot_by_id_) {
    const HugePage& h = hps_[slot];
    j.begin_object();
    j.kv("id", id);
    if (h.count > 1) j.kv("count", h.count);  // ids id .. id+count-1, all alike
    std::string pages(kPagesPerHuge, '.');
    for (unsigned p = 0; p < kPagesPerHuge; ++p) if (h.used.test(p)) pages[p] = '#';
    j.kv("pages", pages);
    j.end_object();
  }
}

}  // namespace sim
