// LLAMA (Maas et al., §3.1-3.5): a lifetime-class-aware huge page allocator.
// Its policy switches: llama_policy.h; its invariant checks: llama_check.cc.
#pragma once

#include <array>
#include <deque>
#include <map>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "slot_ids.h"
#include "classes.h"
#include "llama_policy.h"

namespace sim {

class Llama final : public HeapAllocator {
 public:
  static constexpr unsigned kBlocks = 256;           // 8 KiB blocks per 2 MiB huge page
  static constexpr uint64_t kBlockBytes = 8192;
  static constexpr unsigned kSpanBlocks = 2;         // 16 KiB block spans for small objects
  static constexpr uint64_t kSpanBytes = kSpanBlocks * kBlockBytes;
  static constexpr uint64_t kLineBytes = 128;
  static constexpr unsigned kLines = unsigned(kSpanBytes / kLineBytes);
  static constexpr unsigned kMaxLines = 512;        // fine-lines: 16 KiB of 32 B lines

  // first_id: the first huge page id it hands out (heaps side by side: disjoint ranges).
  Llama(std::string name, const ClassScheme& classes, unsigned deadline_k,
        bool recycle_spans_immediately = false, LlamaPolicy policy = {}, uint64_t first_id = 0);
  static constexpr uint32_t kMixedMinObjects = 8;
  static constexpr int kFitTries = 8;
  uint64_t alloc(const AllocRequest& r) override;
  void free(uint32_t slot, uint64_t now) override;
  void prefetch_free(uint32_t slot, int stage) const override;
  void advance(uint64_t now) override {
    if (!deadlines_.empty() && deadlines_.top().t <= now) expire_due(now);
    now_ = now;
  }
  uint64_t live_huge_pages() const override { return live_pages_; }
  Counters counters() const override;
  std::pair<uint64_t, uint64_t> where(uint32_t slot) const override;
  uint64_t asked_size(uint32_t slot) const override { return handles_[slot].size; }
  void trim(uint32_t slot_end) override;
  void move_slot(uint32_t from, uint32_t to) override;
  void check_page(uint64_t hp, const ShadowHeap& shadow) const override;
  void check_all(const ShadowHeap& shadow) const override;
  void snapshot_pages(JsonWriter& j) const override;
  // Heaps side by side (segregated.h): the checker's shadow heap names objects by the
  // engine's slots, this heap by its own: own slot = (*slots)[engine slot] & mask.
  void set_shadow_slots(const std::vector<uint32_t>* slots, uint32_t mask) { shadow_slots_ = slots; shadow_mask_ = mask; }
  void set_snapshot_spans(bool on) { snapshot_spans_ = on; }  // --snapshot-spans

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  enum State : uint8_t { kFree, kOpen, kActive };
  // Pages live in slots of pages_ (reused); `hp` below is always a slot.  A page's id,
  // which its address is made of, is its own field: ids are handed out as if every huge
  // page were its own entry.  The whole pages of an object of several huge pages are one
  // entry of `count` pages: they change state together (class, deadline) and hold nothing
  // else, so a 16 TiB object costs one entry, not eight million.
  struct Page {
    uint64_t id = 0, count = 1;
    Bits256 live, residual;
    uint32_t nlive = 0, nresidual = 0;
    int lc = 0;
    State state = kFree;
    uint32_t cursor = 0;  // open page: bump pointer (blocks); blocks before it are not reused while open
    uint32_t lfr = 0;     // active page: longest free run, its recycling bucket
    uint32_t prev = kNone, next = kNone;
    bool linked = false;
    uint32_t lo_prev = kNone, lo_next = kNone;  // occupancy policy: own-class recycling list
    bool lo_linked = false;
    uint32_t owner = kNone;  // pages of an object of several huge pages: its slot (checks)
    uint64_t deadline = kNever;
    uint32_t gen = 0;     // bumped on every deadline change and release (stale heap entries)
    std::array<uint32_t, kBlocks> span_at;  // span whose first block this is
  };
  struct Span {
    uint32_t hp = 0;      // page slot
    uint32_t block = 0;
    uint32_t nobjs = 0;
    uint32_t gen = 0;
    bool open = false;    // held by a thread-local allocator
    bool listed = false;  // on a recycle list (closed, partially free, page deadline expired)
    uint32_t cursor = 0, limit = 0;  // bump range within the span, bytes
    uint32_t used_lines = 0;  // lines holding an object
    uint8_t kind = 0;     // 0: small (2 blocks, 128 B lines); 1: medium (8 blocks, 512 B lines)
    uint8_t shift = 7;    // log2 of its line size (fine-lines: 5 for small spans)
    uint16_t nlines = kLines;
    int lc = 0;           // class of the local allocator that last held it
    std::array<uint16_t, kMaxLines> lines{};
  };
  struct Handle {
    uint64_t addr, base;  // object address; start of its block run (large) or of its span (small)
    uint64_t size;
    uint32_t span;        // small: its span; large: kNone
    uint32_t nblocks;     // large: blocks of the run (may exceed one huge page)
    uint32_t page, tail;  // large: page slot (several huge pages: their whole pages), partial last page
  };
  // contain-mixed only (by slot, beside handles_): an inf prediction's allocating stack.
  struct InfPred { uint64_t stack = 0; bool inf_pred = false; };
  // Per kind of span (small, medium): a recycled, initially partially free span and one
  // that was fully free when opened.
  struct Local { uint32_t partial[2] = {kNone, kNone}, fresh[2] = {kNone, kNone}; };
  struct Context { uint64_t placed = 0, died = 0; bool contained = false; };  // contain-mixed: inf predictions of a stack
  static constexpr unsigned kSpanBlocksOf[2] = {kSpanBlocks, 8};
  static constexpr unsigned kLineShiftOf[2] = {7, 9};
  uint32_t occ_limit(const Span& s) const { return uint32_t(pol_.occupancy_threshold * s.nlines); }
  struct Deadline {
    uint64_t t, id;  // ties expire in page id order
    uint32_t hp, gen;
    bool operator>(const Deadline& o) const { return t != o.t ? t > o.t : id > o.id; }
  };

  // Huge pages.
  uint32_t new_page(uint64_t id, uint64_t count = 1);
  void release_page(uint32_t hp);
  uint32_t slot_of(uint64_t id) const;  // the slot holding page id, or kNone (free)
  void make_active(uint64_t hp, uint64_t now);
  void set_deadline(uint64_t hp, uint64_t now);
  void link(uint64_t hp);
  void unlink(uint64_t hp);
  // Global allocator: n contiguous blocks for class lc (recycling first, then the open page).
  std::pair<uint64_t, uint32_t> alloc_blocks(int lc, uint32_t n, uint64_t now);
  void free_blocks(uint64_t hp, uint32_t block, uint32_t n, uint64_t now);
  void expire(uint64_t hp, uint64_t t);
  void expire_due(uint64_t now);  // advance(): the deadlines <= now
  // Small objects.
  uint32_t open_fresh_span(int lc, int kind, uint64_t now);
  uint32_t take_recycled_span(int lc, int kind);
  uint32_t take_occupancy_span(int lc, int kind, int* from = nullptr);
  void requeue_span(uint32_t sid, int cls, uint64_t now);
  void list_span(uint32_t sid);
  void maybe_list_by_occupancy(uint32_t sid);
  bool lo_eligible(const Page& p) const;
  void link_lo(uint64_t hp);
  void unlink_lo(uint64_t hp);
  uint64_t alloc_in_spans(const AllocRequest& r, int lc, int kind, Handle& h);
  bool place(uint32_t sid, uint64_t size, uint32_t align, uint64_t& addr, bool& exhausted);
  void close_span(uint32_t sid, uint64_t now);
  void release_span(uint32_t sid, uint64_t now);
  uint64_t span_base(const Span& s) const { return pages_[s.hp].id * kHugePageBytes + s.block * kBlockBytes; }
  static uint64_t span_bytes(const Span& s) { return uint64_t(s.nlines) << s.shift; }

  std::string name_;
  ClassScheme classes_;
  unsigned k_;
  bool recycle_now_;  // EngineOptions::recycle_spans_immediately
  LlamaPolicy pol_;
  bool snapshot_spans_ = false;
  uint32_t occ_blocks_ = 0;  // occupancy policy: threshold in blocks
  int nclasses_;
  std::vector<Page> pages_;
  FreeIds free_slots_;  // pages_ entries to reuse
  std::map<uint64_t, uint32_t> slot_by_id_;        // live pages by id (checks, snapshots)
  HugePageIds ids_;
  std::vector<int64_t> open_;                      // per class: its open page or -1
  std::vector<std::array<uint32_t, kBlocks>> bucket_head_;  // per class, per lfr-1
  std::vector<Bits256> bucket_mask_;
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<Deadline>> deadlines_;
  std::vector<Span> spans_;
  FreeIds free_span_ids_;  // spans_ entries to reuse
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> recycle_;  // per kind x page class: (span, gen)
  uint64_t listed_ = 0;
  std::vector<std::deque<std::pair<uint32_t, uint32_t>>> occ_recycle_;  // per kind x span class
  uint64_t occ_listed_ = 0;
  std::vector<std::array<uint32_t, kBlocks>> lo_head_;  // occupancy: per class, per lfr-1
  std::vector<Bits256> lo_mask_;
  std::unordered_map<uint64_t, Context> contexts_;
  std::unordered_map<uint64_t, Local> locals_;
  static constexpr uint32_t kLocalCache = 256;  // a power of two
  std::array<std::pair<uint64_t, Local*>, kLocalCache> local_cache_;  // alloc_in_spans
  std::vector<Handle> handles_;
  const std::vector<uint32_t>* shadow_slots_ = nullptr;  // set_shadow_slots
  uint32_t shadow_mask_ = 0;
  uint32_t own_slot(uint32_t s) const { return shadow_slots_ ? (*shadow_slots_)[s] & shadow_mask_ : s; }
  std::vector<InfPred> inf_preds_;  // contain-mixed only
  uint64_t live_pages_ = 0, live_bytes_ = 0, now_ = 0;
  // Counters.
  uint64_t c_acquired_ = 0, c_released_ = 0, c_open_to_active_ = 0, c_reclass_down_ = 0, c_expiries_ = 0,
           c_class_up_ = 0, c_recycled_allocs_ = 0, c_recycled_blocks_ = 0, c_span_reuses_ = 0,
           c_spans_opened_ = 0, c_spans_released_ = 0, c_small_ = 0, c_large_ = 0, c_multi_ = 0;
  // Policy counters (reported only with their policy).
  uint64_t c_occ_spans_listed_ = 0, c_occ_span_reuses_ = 0, c_occ_block_allocs_ = 0, c_occ_blocks_ = 0,
           c_contained_ = 0, c_fresh_no_fit_ = 0, c_fit_swaps_ = 0, c_contexts_contained_ = 0, c_medium_ = 0;
};

}  // namespace sim
