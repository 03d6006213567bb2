// LLAMA's invariants (--check-invariants): each huge page against the checker's shadow
// heap, then the heap's own tables.
#include "llama.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace sim {

void Llama::check_page(uint64_t hp, const ShadowHeap& shadow) const {
  const std::string where = name_ + ": huge page " + std::to_string(hp) + ": ";
  uint64_t lo = hp * kHugePageBytes, hi = lo + kHugePageBytes;
  const uint32_t slot = slot_of(hp);
  if (slot == kNone) {
    bool any = false;
    shadow.for_range(lo, hi, [&](uint64_t, const ShadowHeap::Obj&) { any = true; });
    SIM_CHECK(!any, where + "free but holds live objects");
    return;
  }
  const Page& p = pages_[slot];
  SIM_CHECK(p.state != kFree && (p.count == 1 || (p.nlive == kBlocks && p.state == kActive)),
            where + "page entry state");
  Bits256 expect;
  std::vector<std::array<uint16_t, kMaxLines>> lines;
  std::vector<uint32_t> sids, nobjs;
  std::array<int, kBlocks> span_index;
  span_index.fill(-1);
  for (unsigned b = 0; b < kBlocks; ++b) {
    uint32_t sid = p.span_at[b];
    if (sid == kNone) continue;
    const Span& s = spans_[sid];
    const unsigned nb = kSpanBlocksOf[s.kind];
    SIM_CHECK(s.hp == slot && s.block == b && b + nb <= kBlocks, where + "span index");
    for (unsigned i = b; i < b + nb; ++i) {
      SIM_CHECK(!expect.test(i), where + "spans overlap");
      span_index[i] = int(sids.size());
    }
    SIM_CHECK(s.open || s.nobjs > 0, where + "closed empty span not returned");
    unsigned used = 0;
    SIM_CHECK(s.shift == (s.kind == 0 && pol_.fine_lines ? 5u : kLineShiftOf[s.kind]) &&
                  s.nlines == (uint64_t(nb) * kBlockBytes) >> s.shift, where + "span line size");
    for (unsigned l = 0; l < s.nlines; ++l) used += s.lines[l] != 0;
    SIM_CHECK(s.used_lines == used, where + "span's count of used lines");
    SIM_CHECK(!s.listed || s.used_lines < s.nlines, where + "listed span without a free line");
    expect.set_range(b, nb);
    sids.push_back(sid);
    lines.emplace_back();
    lines.back().fill(0);
    nobjs.push_back(0);
  }
  // The page of an object of several huge pages: its run, whether or not the object
  // itself reaches this page (alignment padding may cover whole pages).
  auto run_blocks = [&](const Handle& h) {
    uint64_t rs = std::max(h.base, lo), re = std::min(h.base + uint64_t(h.nblocks) * kBlockBytes, hi);
    for (uint64_t b = (rs - lo) / kBlockBytes; b < (re - lo) / kBlockBytes; ++b) {
      SIM_CHECK(!expect.test(unsigned(b)), where + "large object overlaps another run");
      expect.set(unsigned(b));
    }
  };
  if (p.owner != kNone) {
    const Handle& h = handles_[p.owner];
    SIM_CHECK(h.span == kNone && h.nblocks > kBlocks && (h.page == slot || h.tail == slot) &&
              h.base < hi && h.base + uint64_t(h.nblocks) * kBlockBytes > lo, where + "owner of a multi-page run");
    run_blocks(h);
  }
  shadow.for_range(lo, hi, [&](uint64_t a, const ShadowHeap::Obj& o) {
    const uint32_t own = own_slot(o.slot);
    const Handle& h = handles_[own];
    SIM_CHECK(h.addr == a, where + "handle address");
    if (h.span == kNone && own == p.owner) {
      SIM_CHECK(a >= h.base && o.end <= h.base + uint64_t(h.nblocks) * kBlockBytes, where + "object outside its run");
    } else if (h.span == kNone) {
      uint64_t rs = std::max(h.base, lo), re = std::min(h.base + uint64_t(h.nblocks) * kBlockBytes, hi);
      SIM_CHECK(a >= h.base && o.end <= h.base + uint64_t(h.nblocks) * kBlockBytes, where + "object outside its run");
      for (uint64_t b = (rs - lo) / kBlockBytes; b < (re - lo) / kBlockBytes; ++b) {
        SIM_CHECK(!expect.test(unsigned(b)), where + "large object overlaps another run");
        expect.set(unsigned(b));
      }
    } else {
      SIM_CHECK(a >= lo && o.end <= hi, where + "small object straddles huge pages");
      int si = span_index[(a - lo) / kBlockBytes];
      SIM_CHECK(si >= 0 && sids[si] == h.span, where + "small object outside its span");
      const Span& s = spans_[h.span];
      uint64_t sb = span_base(s);
      SIM_CHECK(o.end <= sb + span_bytes(s), where + "small object straddles its span");
      const unsigned shift = s.shift;
      for (uint64_t l = (a - sb) >> shift; l <= (o.end - 1 - sb) >> shift; ++l) ++lines[si][l];
      ++nobjs[si];
    }
  });
  for (size_t i = 0; i < sids.size(); ++i) {
    const Span& s = spans_[sids[i]];
    SIM_CHECK(s.nobjs == nobjs[i], where + "span object count");
    SIM_CHECK(s.lines == lines[i], where + "span line counters disagree with its objects");
  }
  SIM_CHECK(expect == p.live, where + "live blocks disagree with its objects and spans");
  SIM_CHECK(p.nlive == p.live.count() && p.nlive > 0, where + "live block count");
  SIM_CHECK(p.residual.subset_of(p.live) && p.nresidual == p.residual.count(), where + "residual blocks");
  SIM_CHECK(p.lc >= 0 && p.lc < nclasses_, where + "class");
  if (p.state == kOpen) {
    SIM_CHECK(open_[p.lc] == int64_t(slot) && !p.linked && p.cursor < kBlocks, where + "open page state");
    SIM_CHECK(p.residual == p.live, where + "open page with a non-residual block");
    for (unsigned b = p.cursor; b < kBlocks; ++b) SIM_CHECK(!p.live.test(b), where + "live block past the bump pointer");
  } else {
    SIM_CHECK(open_[p.lc] != int64_t(slot), where + "active page registered as open");
    SIM_CHECK(p.nresidual > 0, where + "active page without residual blocks not reclassified");
    unsigned lfr = longest_free_run(p.live);
    SIM_CHECK(p.linked == (lfr > 0) && (!p.linked || p.lfr == lfr), where + "recycling bucket");
    SIM_CHECK(p.lo_linked == (pol_.occupancy && p.linked && lo_eligible(p)), where + "occupancy recycling list");
    SIM_CHECK((p.deadline == kNever) == (classes_.bound_ns(p.lc) == kNever) || p.deadline == kNever,
              where + "deadline");
    SIM_CHECK(p.deadline == kNever || p.deadline > now_, where + "deadline passed without expiry");
  }
}

void Llama::check_all(const ShadowHeap& shadow) const {
  uint64_t live = 0, blocks = 0;
  for (const auto& [id, slot] : slot_by_id_) {
    const Page& p = pages_[slot];
    SIM_CHECK(p.id == id && p.state != kFree, name_ + ": page index");
    live += p.count;
    blocks += p.nlive * p.count;
    check_page(id, shadow);
    if (p.count > 1) check_page(id + p.count - 1, shadow);  // the pages between are alike
  }
  SIM_CHECK(slot_by_id_.size() + free_slots_.size() == pages_.size(), name_ + ": page slots");
  // No live object on a released page (the pages between an object's first and last
  // are its own).
  for (const auto& [a, o] : shadow.all())
    SIM_CHECK(slot_of(a / kHugePageBytes) != kNone && slot_of((o.end - 1) / kHugePageBytes) != kNone,
              name_ + ": live object at " + std::to_string(a) + " on a released huge page");
  for (int c = 0; c < nclasses_; ++c)
    if (open_[c] >= 0)
      SIM_CHECK(pages_[open_[c]].state == kOpen && pages_[open_[c]].lc == c, name_ + ": open page table");
  SIM_CHECK(live == live_pages_, name_ + ": live huge page count");
  SIM_CHECK(shadow.bytes() == live_bytes_, name_ + ": bytes not conserved");
  SIM_CHECK(live_bytes_ <= blocks * kBlockBytes && blocks * kBlockBytes <= live * kHugePageBytes,
            name_ + ": live bytes <= live blocks <= huge pages");
  for (const auto& [key, L] : locals_) {
    for (int kind = 0; kind < 2; ++kind)
      for (uint32_t sid : {L.partial[kind], L.fresh[kind]})
        if (sid != kNone)
          SIM_CHECK(spans_[sid].open && spans_[sid].kind == kind &&
                        pages_[spans_[sid].hp].span_at[spans_[sid].block] == sid,
                    name_ + ": thread-local span not open");
  }
}

}  // namespace sim
