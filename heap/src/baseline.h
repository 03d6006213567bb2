// The baseline: a size-class allocator after TCMalloc with huge-page awareness, in
// the paper's optimistic form (a span goes back to the page heap as soon as all its
// objects are free, a huge page to the OS as soon as none of its pages is used).
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "allocator.h"
#include "slot_ids.h"

namespace sim {

// The subrelease rule every size-class heap starts with (TcmallocBaseline::set_subrelease):
// windows of 100 ms; demand remembered over a horizon of 2 to 50 of them (0.2 s .. 5 s)
// that adapts to what the releases cost (subrelease() says how).  The longest is the
// order of jemalloc's decay of dirty pages (10 s), made shorter so that a run of a minute
// sees it; the shortest is glibc's order (it trims at the free).  Not tuned on any
// workload a figure reports.  The allocator sets it from LIFETIME_ALLOC_SUBRELEASE_* before
// it builds its policy; interval 0: off.
struct SubreleaseRule {
  static constexpr unsigned kMaxWindows = 64;  // the longest horizon any rule may have
  uint64_t interval_ns = 100000000ull;
  unsigned windows = 50;      // the longest horizon
  unsigned min_windows = 2;   // the shortest (= windows: a fixed horizon)
  bool idle_places = true;    // also the idle places inside spans (release_idle_places)
};
inline SubreleaseRule subrelease_rule;

class TcmallocBaseline final : public HeapAllocator {
 public:
  static constexpr uint64_t kPageBytes = 8192;
  static constexpr uint64_t kOsPageBytes = 4096;  // what the OS gives back and faults in
  static constexpr unsigned kPagesPerHuge = 256;
  static constexpr uint64_t kMaxSmall = 256 * 1024;

  // first_id: the first huge page id it hands out (heaps side by side: disjoint ranges).
  explicit TcmallocBaseline(std::string name, uint64_t first_id = 0);
  uint64_t alloc(const AllocRequest& r) override;
  void free(uint32_t slot, uint64_t now) override;
  void prefetch_free(uint32_t slot, int stage) const override;
  uint64_t live_huge_pages() const override { return live_hps_; }
  uint64_t subreleased_bytes() const override {
    return released_pages_ * kPageBytes + released_places_ * kOsPageBytes;
  }
  void subreleased_by_page(std::vector<std::pair<uint64_t, uint64_t>>& out) const override {
    for (const auto& [id, slot] : slot_by_id_)
      if (hps_[slot].nreleased || hps_[slot].nreleased_places)
        out.push_back({id, uint64_t(hps_[slot].nreleased) * kPageBytes + uint64_t(hps_[slot].nreleased_places) * kOsPageBytes});
  }
  // Subrelease (after TCMalloc's huge-page filler): every `interval_ns` of the clock, the
  // free pages of live huge pages beyond what recent demand says will be needed again go
  // back to the OS, sparsest huge pages first.  Recent demand: the most pages in use in
  // any window of the horizon (the current one included), each window's peak in full for
  // the first half of the horizon, then weighted by (horizon - its age) / (horizon - half);
  // the free pages kept are that less what is in use now.
  // The horizon starts at min_windows and doubles, up to `windows`, while faults on the
  // pages given back take 1% or more of its time (demand comes back later than it
  // remembers); it halves after two horizons without that.  interval_ns 0: never.
  // Idle places (release_idle_places): at the same runs, once per horizon, the 4 KiB pages
  // inside spans that hold only free object places go back too, in spans no allocation
  // took from for a whole horizon.
  void set_subrelease(uint64_t interval_ns, unsigned windows, unsigned min_windows, bool idle_places = true);
  void advance(uint64_t now) override;
  Counters counters() const override;
  std::pair<uint64_t, uint64_t> where(uint32_t slot) const override;
  uint64_t asked_size(uint32_t slot) const override;
  void trim(uint32_t slot_end) override;
  uint64_t release_free() override;
  void move_slot(uint32_t from, uint32_t to) override;
  bool enable_address_mode() override { addr_mode_ = true; return true; }
  uint64_t free_at(uint64_t addr, uint64_t now) override;
  void free_batch_at(const uint64_t* addr, uint32_t n, uint64_t now, uint64_t* bytes) override;
  uint64_t usable_at(uint64_t addr) const override;
  uint64_t placed_size(uint64_t size, uint32_t align) const override;
  uint32_t alloc_batch(const AllocRequest& r, uint32_t n, uint64_t* out) override;
  void check_page(uint64_t hp, const ShadowHeap& shadow) const override;
  void check_all(const ShadowHeap& shadow) const override;
  void snapshot_pages(JsonWriter& j) const override;

  // Heaps side by side (segregated.h): the checker's shadow heap names objects by the
  // engine's slots, this heap by its own: own slot = (*slots)[engine slot] & mask.
  void set_shadow_slots(const std::vector<uint32_t>* slots, uint32_t mask) { shadow_slots_ = slots; shadow_mask_ = mask; }
  // recip: ceil(2^42 / size), so an offset in a span (< 2^21) divides by a multiply:
  // (off * recip) >> 42 = off / size exactly while off * size < 2^42.
  struct SizeClass { uint32_t size, pages, objs; uint64_t recip = 0; };
  const std::vector<SizeClass>& size_classes() const { return classes_; }
  // The class of a request (0: a large object of its own span).
  uint32_t size_class(uint64_t size, uint32_t align) const;
  // size_class(size, align) for 0 < size <= kMaxSmall and align 8, or a size that is a
  // multiple of 16 and align 16 (every class above 8 is a multiple of 16: checked in
  // baseline.cc): one read of the read-only table size_class reads, for the thread
  // caches' hit path (their own copy by 16 bytes had been 16 KiB of every process's RSS).
  static uint32_t small_class(uint64_t size) {
    // A branch, not the index's select: most requests are small, and the select's two
    // extra steps sat on the hit path's critical path (a malloc+free pair +0.4 ns).
    if (__builtin_expect(size <= kFineMax, 1)) return kSmallClassIndex.c[(size + 7) >> 3];
    return kSmallClassIndex.c[small_class_index(size)];
  }
  // Indexed as TCMalloc does: by 8 bytes up to kFineMax, by 128 above.
  static constexpr uint64_t kFineMax = 1024;
  static constexpr uint32_t small_class_index(uint64_t size) {
    return size <= kFineMax ? uint32_t((size + 7) >> 3) : uint32_t((size + 127 + (120 << 7)) >> 7);
  }
  struct SmallClassIndex {
    uint8_t c[((kMaxSmall + 127 + (120 << 7)) >> 7) + 1] = {};  // small_class_index(kMaxSmall) + 1
  };
  static const SmallClassIndex kSmallClassIndex;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr int kCentralBuckets = 12;
  // Huge pages live in slots of hps_ (reused); `hp` below is always a slot, a page's id
  // (its address / 2 MiB) is its own field.  The whole pages of a span of several huge
  // pages are one entry of `count` pages (they hold nothing else), so a 16 TiB object
  // costs one entry, not eight million.
  struct Span {
    uint32_t hp = 0;          // (first) huge page's slot; several: the whole pages' entry
    uint32_t tail = kNone;    // several huge pages: the partial last page's slot
    uint32_t first_page = 0;  // page within hp
    uint32_t npages = 0;      // may exceed 256 for multi-huge-page spans
    uint32_t cls = 0;         // 0: one large object
    uint32_t nlive = 0, nobjs = 0;
    uint32_t prev = kNone, next = kNone;  // central free list links
    int bucket = -1;
    // A bit per object place, set while live (and past nobjs, always); objects are taken
    // lowest free first, from word `hint` up (no word below it has a free bit): 1 bit of
    // metadata per object place, where a stack of freed indexes cost 2 B per freed object.
    std::vector<uint64_t> live_bits;
    uint32_t hint = 0;
    uint32_t took = 0;  // sr_serial_ when an object was last taken from it (idle places)
    // Bit i: the span's 4 KiB page i went back to the OS holding only free places
    // (release_idle_places); cleared as take_object hands out a place on it.
    uint64_t places_released = 0;
    union {  // (one or the other: the span stays 96 B)
      uint64_t large_size = 0;  // cls 0: the object's size and its alignment padding
      // cls > 0: idle_page_mask(*this) as release_idle_places last computed it, while
      // idle_known (cleared as an object is taken or freed), so a scan walks the bits of
      // the spans that changed only (on Redis fates the walk was 9% of the server's CPU)
      uint64_t idle_mask;
    };
    uint32_t large_pad = 0;
    bool idle_known = false;
  };
  static_assert(sizeof(Span) == 96, "a span's record grew: the metadata of every span");
  struct HugePage {
    uint64_t id = 0, count = 1;
    Bits256 used;
    uint32_t nused = 0, lfr = 0;
    uint32_t prev = kNone, next = kNone;  // filler bucket links
    bool live = false, whole = false, in_filler = false;
    bool dense_said = false;  // huge_page_hooks.dense called; false again at a subrelease
    Bits256 released;  // free pages given back to the OS (subrelease); never used ones
    uint32_t nreleased = 0;
    uint32_t nreleased_places = 0;  // 4 KiB pages given back inside its spans (idle places)
    uint32_t owner = kNone;  // whole pages and tail of a span of several huge pages: the span (checks)
    std::array<uint32_t, kPagesPerHuge> span_at;  // the span holding each page (kNone: free)
  };
  // 8 B per slot (the per-object record): a small object's size is its class's size less
  // `slack` (< 64 KiB: the classes are at most 16 KiB apart, alignment at most 8 KiB); a
  // large object's size and padding are its span's.
  struct Handle { uint32_t span; uint16_t slot_idx, slack; };

  void build_size_classes();
  uint32_t new_span();
  uint32_t new_huge_page(uint64_t id, uint64_t count = 1);
  void release_huge_page(uint32_t hp);
  uint32_t slot_of(uint64_t id) const;  // the slot holding page id, or kNone (released)
  // Page heap.
  void pageheap_alloc(uint32_t npages, Span& s);
  void pageheap_free(uint64_t hp, uint32_t first, uint32_t n);
  void filler_insert(uint64_t hp);
  void filler_remove(uint64_t hp);
  // Central free lists.
  void central_link(uint32_t sid);
  void central_unlink(uint32_t sid);

  std::string name_;
  std::vector<SizeClass> classes_;       // [0] unused
  std::vector<Span> spans_;
  FreeIds free_span_ids_;  // spans_ entries to reuse
  std::vector<HugePage> hps_;
  FreeIds free_slots_;     // hps_ entries to reuse
  std::map<uint64_t, uint32_t> slot_by_id_;  // live huge pages by id (checks, snapshots)
  HugePageIds ids_;
  // [lfr-1][nused]: a row of 256 list heads (1 KiB) made when a huge page has that longest
  // free range and none other does, freed after the last one leaves it: not 256 KiB up
  // front, nor kept: a small process (a PostgreSQL backend, two heaps) holds the rows it
  // uses now.
  std::vector<std::vector<uint32_t>> filler_head_;
  static constexpr unsigned kSpareRows = 4;  // empty rows kept (filler_remove)
  unsigned empty_rows_ = 0;                  // rows kept with no huge page in them
  Bits256 filler_lfr_;                   // bit lfr-1: some page with that lfr
  std::vector<Bits256> filler_used_;     // per lfr-1: bit nused
  std::vector<std::array<uint32_t, kCentralBuckets>> central_head_;
  std::vector<uint32_t> central_mask_;
  const std::vector<uint32_t>* shadow_slots_ = nullptr;  // set_shadow_slots
  uint32_t shadow_mask_ = 0;
  uint32_t own_slot(uint32_t s) const { return shadow_slots_ ? (*shadow_slots_)[s] & shadow_mask_ : s; }
  std::vector<Handle> handles_;
  // Address mode: huge page slot by id - first id (kNone: not live).
  uint64_t first_id_ = 0;
  std::vector<uint32_t> hp_by_id_;
  // A released span's free-index stack and slot map kept for the next span of its class
  // (one each per class: a class whose span empties and comes back, as a malloc/free pair
  // does, allocates neither again).
  std::vector<std::vector<uint64_t>> spare_bits_;
  // Address mode (enable_address_mode): no handles; a live object is its span's bit.
  bool addr_mode_ = false;
  // The span of the live object starting at addr and its index there (kNone: none).
  uint32_t span_of(uint64_t addr, uint32_t& idx) const;
  // The span holding the page of addr (kNone: none).
  uint32_t span_holding(uint64_t addr) const;
  // What free_batch_at fetches ahead for the object at addr (nullptr: nothing): stage 0
  // the page's span index entry, 1 the span, 2 the object's word of live bits (each
  // reads what the one before fetched).
  const void* ahead_of(uint64_t addr, int stage) const;
  void init_on_first_alloc();
  void set_span_at(const Span& s, uint32_t sid);  // every page of a span (< a huge page)
  uint32_t take_span(uint32_t cls);  // off the central list (or new)
  uint32_t take_object(Span& s);     // its index
  // Frees object idx of span sid (both modes; the byte count is the caller's).
  void free_obj(uint32_t sid, uint32_t idx);
  // The span of a shadow heap's object (the checks): by its slot, or by its address.
  uint32_t span_of_shadow(uint64_t addr, uint32_t slot) const;
  uint64_t live_hps_ = 0;
  uint64_t live_bytes_ = 0;
  // Subrelease: pages in use (spans, whole pages included), pages given back.
  void note_used(uint32_t hp, unsigned first, unsigned n);  // released pages reused
  void subrelease();
  void release_idle_places(bool all = false);  // all: every page of free places (malloc_trim)
  void release_free_pages(HugePage& h, uint64_t& want);  // its free pages, up to want
  void refault_places(Span& s, uint32_t idx);  // take_object, on a span with places released
  void forget_places(Span& s);                 // the span goes back to the page heap
  void say_if_dense(HugePage& h);
  // 4 KiB pages of span s that hold no live object place (its tail past nobjs included).
  uint64_t idle_page_mask(const Span& s) const;
  static constexpr unsigned kOsPerPage = unsigned(kPageBytes / kOsPageBytes);
  uint64_t released_places_ = 0, c_places_released_ = 0, c_places_refaulted_ = 0;
  uint64_t sr_serial_ = 0, sr_places_next_ = 0;  // windows since the start; the next idle-place run
  bool sr_places_ = true;
  std::vector<uint32_t> place_cand_;  // release_idle_places: idle pages found, by huge page slot
  std::vector<std::pair<uint32_t, uint64_t>> idle_spans_;  // ... and the spans holding them, with their pages
  uint64_t used_pages_ = 0, released_pages_ = 0, c_subreleased_ = 0, c_subrelease_runs_ = 0, c_refaulted_ = 0,
           c_horizon_changes_ = 0;
  static constexpr unsigned kMaxWindows = SubreleaseRule::kMaxWindows;
  // What a 4 KiB page given back costs when it is touched again: a fault, zeroed (2.5-2.8
  // us per 8 KiB page measured on the 2-core development box).  sr_refaulted_ counts them.
  static constexpr uint64_t kRefaultNs = 1250;
  uint64_t sr_interval_ns_ = 0, sr_next_ns_ = 0;
  unsigned sr_windows_ = 0, sr_min_windows_ = 0, sr_at_ = 0;
  unsigned sr_horizon_ = 0, sr_calm_ = 0;  // the horizon now; windows since it last changed
  // Per window, a ring: the most pages in use; pages given back and touched again in it.
  std::array<uint64_t, kMaxWindows> sr_peak_{}, sr_refaulted_{};
  void adapt_horizon();
  uint64_t c_hp_acquired_ = 0, c_hp_released_ = 0, c_spans_created_ = 0, c_spans_released_ = 0,
           c_large_allocs_ = 0, c_multi_hp_allocs_ = 0;
};

}  // namespace sim
