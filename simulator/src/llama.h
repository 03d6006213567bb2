// LLAMA (Maas et al., §3.1-3.5): a lifetime-class-aware huge page allocator.
#pragma once

#include <array>
#include <map>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "trace.h"

namespace sim {

class Llama final : public HeapAllocator {
 public:
  static constexpr unsigned kBlocks = 256;           // 8 KiB blocks per 2 MiB huge page
  static constexpr uint64_t kBlockBytes = 8192;
  static constexpr unsigned kSpanBlocks = 2;         // 16 KiB block spans for small objects
  static constexpr uint64_t kSpanBytes = kSpanBlocks * kBlockBytes;
  static constexpr uint64_t kLineBytes = 128;
  static constexpr unsigned kLines = unsigned(kSpanBytes / kLineBytes);

  Llama(std::string name, const ClassScheme& classes, unsigned deadline_k,
        bool recycle_spans_immediately = false);
  uint64_t alloc(const AllocRequest& r) override;
  void free(uint32_t slot, uint64_t now) override;
  void advance(uint64_t now) override;
  uint64_t live_huge_pages() const override { return live_pages_; }
  Counters counters() const override;
  std::pair<uint64_t, uint64_t> where(uint32_t slot) const override;
  void check_page(uint64_t hp, const ShadowHeap& shadow) const override;
  void check_all(const ShadowHeap& shadow) const override;
  void snapshot(JsonWriter& j) const override;

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
    std::array<uint16_t, kLines> lines{};
  };
  struct Handle {
    uint64_t addr, base;  // object address; start of its block run (large)
    uint64_t size;
    uint32_t span;        // small: its span; large: kNone
    uint32_t nblocks;     // large: blocks of the run (may exceed one huge page)
    uint32_t page, tail;  // large: page slot (several huge pages: their whole pages), partial last page
  };
  struct Local { uint32_t partial = kNone, fresh = kNone; };
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
  // Small objects.
  uint32_t open_fresh_span(int lc, uint64_t now);
  uint32_t take_recycled_span(int lc);
  void list_span(uint32_t sid);
  bool place(uint32_t sid, uint64_t size, uint32_t align, uint64_t& addr, bool& exhausted);
  void close_span(uint32_t sid, uint64_t now);
  void release_span(uint32_t sid, uint64_t now);
  uint64_t span_base(const Span& s) const { return pages_[s.hp].id * kHugePageBytes + s.block * kBlockBytes; }

  std::string name_;
  ClassScheme classes_;
  unsigned k_;
  bool recycle_now_;  // EngineOptions::recycle_spans_immediately
  int nclasses_;
  std::vector<Page> pages_;
  std::vector<uint32_t> free_slots_;
  std::map<uint64_t, uint32_t> slot_by_id_;        // live pages by id (checks, snapshots)
  HugePageIds ids_;
  std::vector<int64_t> open_;                      // per class: its open page or -1
  std::vector<std::array<uint32_t, kBlocks>> bucket_head_;  // per class, per lfr-1
  std::vector<Bits256> bucket_mask_;
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<Deadline>> deadlines_;
  std::vector<Span> spans_;
  std::vector<uint32_t> free_span_ids_;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> recycle_;  // per page class: (span, gen)
  uint64_t listed_ = 0;
  std::unordered_map<uint64_t, Local> locals_;
  uint64_t last_local_key_ = UINT64_MAX;
  Local* last_local_ = nullptr;
  std::vector<Handle> handles_;
  uint64_t live_pages_ = 0, live_bytes_ = 0, now_ = 0;
  // Counters.
  uint64_t c_acquired_ = 0, c_released_ = 0, c_open_to_active_ = 0, c_reclass_down_ = 0, c_expiries_ = 0,
           c_class_up_ = 0, c_recycled_allocs_ = 0, c_recycled_blocks_ = 0, c_span_reuses_ = 0,
           c_spans_opened_ = 0, c_spans_released_ = 0, c_small_ = 0, c_large_ = 0, c_multi_ = 0;
};

}  // namespace sim
