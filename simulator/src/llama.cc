#include "llama.h"

#include <algorithm>

#include "json.h"

namespace sim {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
uint64_t sat_add(uint64_t a, uint64_t b) { return a > kNever - b ? kNever : a + b; }
}  // namespace

Llama::Llama(std::string name, const ClassScheme& classes, unsigned deadline_k,
             bool recycle_spans_immediately)
    : name_(std::move(name)), classes_(classes), k_(deadline_k),
      recycle_now_(recycle_spans_immediately), nclasses_(classes.num_classes()) {
  open_.assign(nclasses_, -1);
  bucket_head_.resize(nclasses_);
  for (auto& h : bucket_head_) h.fill(kNone);
  bucket_mask_.resize(nclasses_);
  recycle_.resize(nclasses_);
}

// ---------------------------------------------------------------- huge pages

uint32_t Llama::new_page(uint64_t id, uint64_t count) {
  uint32_t hp;
  if (!free_slots_.empty()) {
    hp = free_slots_.back();
    free_slots_.pop_back();
  } else {
    hp = uint32_t(pages_.size());
    pages_.emplace_back();
  }
  Page& p = pages_[hp];
  uint32_t gen = p.gen;
  p = Page();
  p.gen = gen + 1;
  p.id = id;
  p.count = count;
  p.span_at.fill(kNone);
  slot_by_id_.emplace(id, hp);
  live_pages_ += count;
  c_acquired_ += count;
  return hp;
}

void Llama::release_page(uint32_t hp) {
  Page& p = pages_[hp];
  if (p.linked) unlink(hp);
  if (p.state == kOpen && open_[p.lc] == int64_t(hp)) open_[p.lc] = -1;
  p.state = kFree;
  p.deadline = kNever;
  ++p.gen;
  live_pages_ -= p.count;
  c_released_ += p.count;
  ids_.release(p.id, p.count);
  slot_by_id_.erase(p.id);
  free_slots_.push_back(hp);
}

uint32_t Llama::slot_of(uint64_t id) const {
  auto it = slot_by_id_.upper_bound(id);
  if (it == slot_by_id_.begin()) return kNone;
  --it;
  return id - it->first < pages_[it->second].count ? it->second : kNone;
}

void Llama::set_deadline(uint64_t hp, uint64_t now) {
  Page& p = pages_[hp];
  ++p.gen;
  uint64_t bound = classes_.bound_ns(p.lc);
  if (bound == kNever) {
    p.deadline = kNever;
    return;
  }
  p.deadline = sat_add(now, bound > kNever / k_ ? kNever : bound * k_);
  if (p.deadline != kNever) deadlines_.push({p.deadline, p.id, uint32_t(hp), p.gen});
}

void Llama::make_active(uint64_t hp, uint64_t now) {
  Page& p = pages_[hp];
  if (p.state == kOpen && open_[p.lc] == int64_t(hp)) open_[p.lc] = -1;
  p.state = kActive;
  ++c_open_to_active_;
  set_deadline(hp, now);
  link(hp);
}

// Active pages are kept per class in buckets by their longest free run.
void Llama::link(uint64_t hp) {
  Page& p = pages_[hp];
  p.lfr = longest_free_run(p.live);
  if (p.lfr == 0) return;
  auto& head = bucket_head_[p.lc][p.lfr - 1];
  p.prev = kNone;
  p.next = head;
  if (head != kNone) pages_[head].prev = uint32_t(hp);
  head = uint32_t(hp);
  bucket_mask_[p.lc].set(p.lfr - 1);
  p.linked = true;
}

void Llama::unlink(uint64_t hp) {
  Page& p = pages_[hp];
  if (!p.linked) return;
  auto& head = bucket_head_[p.lc][p.lfr - 1];
  if (p.prev != kNone) pages_[p.prev].next = p.next;
  else head = p.next;
  if (p.next != kNone) pages_[p.next].prev = p.prev;
  if (head == kNone) bucket_mask_[p.lc].clear(p.lfr - 1);
  p.prev = p.next = kNone;
  p.linked = false;
}

// ---------------------------------------------------------------- global allocator

std::pair<uint64_t, uint32_t> Llama::alloc_blocks(int lc, uint32_t n, uint64_t now) {
  // §3.3: prefer free blocks of an active page of a longer class, the longest class first;
  // within a class the page whose longest free run fits best; first fit inside it.
  for (int c = nclasses_ - 1; c > lc; --c) {
    int idx = bucket_mask_[c].first_set_from(n - 1);
    if (idx < 0) continue;
    uint64_t hp = bucket_head_[c][idx];
    Page& p = pages_[hp];
    int b = first_fit(p.live, n);
    SIM_CHECK(b >= 0, name_ + ": recycling bucket without room");
    unlink(hp);
    p.live.set_range(unsigned(b), n);  // non-residual
    p.nlive += n;
    link(hp);
    ++c_recycled_allocs_;
    c_recycled_blocks_ += n;
    return {hp, uint32_t(b)};
  }
  // Otherwise the open page of this class (bump pointer); a page that cannot take the run is full.
  int64_t o = open_[lc];
  if (o >= 0 && kBlocks - pages_[o].cursor < n) {
    make_active(uint64_t(o), now);
    o = -1;
  }
  if (o < 0) {
    o = int64_t(new_page(ids_.take()));
    Page& p = pages_[o];
    p.state = kOpen;
    p.lc = lc;
    open_[lc] = o;
  }
  Page& p = pages_[o];
  uint32_t b = p.cursor;
  p.cursor += n;
  p.live.set_range(b, n);
  p.residual.set_range(b, n);
  p.nlive += n;
  p.nresidual += n;
  if (p.cursor == kBlocks) make_active(uint64_t(o), now);
  return {uint64_t(o), b};
}

void Llama::free_blocks(uint64_t hp, uint32_t block, uint32_t n, uint64_t now) {
  Page& p = pages_[hp];
  bool active = p.state == kActive;
  if (active) unlink(hp);
  for (uint32_t i = block; i < block + n; ++i)
    if (p.residual.test(i)) --p.nresidual;
  p.live.clear_range(block, n);
  p.residual.clear_range(block, n);
  p.nlive -= n;
  if (p.nlive == 0) {
    release_page(hp);
    return;
  }
  if (!active) return;
  if (p.nresidual == 0) {
    // §3.3: only non-residual (shorter-class) blocks are left: one class down, all live
    // blocks residual, a new deadline.
    if (p.lc > 0) {
      --p.lc;
      ++c_reclass_down_;
    }
    p.residual = p.live;
    p.nresidual = p.nlive;
    set_deadline(hp, now);
  }
  link(hp);
}

void Llama::advance(uint64_t now) {
  while (!deadlines_.empty() && deadlines_.top().t <= now) {
    Deadline d = deadlines_.top();
    deadlines_.pop();
    const Page& p = pages_[d.hp];
    if (p.state != kActive || p.gen != d.gen) continue;  // stale
    expire(d.hp, d.t);
  }
  now_ = now;
}

// §3.4: a deadline expired (under-prediction): one class up, a new deadline, and the
// closed partially free spans of the page become recyclable (§3.5).
void Llama::expire(uint64_t hp, uint64_t t) {
  Page& p = pages_[hp];
  c_expiries_ += p.count;
  unlink(hp);
  if (p.lc < nclasses_ - 1) {
    ++p.lc;
    c_class_up_ += p.count;
  }
  set_deadline(hp, t);
  link(hp);
  for (unsigned b = 0; b < kBlocks; ++b) {
    uint32_t sid = p.span_at[b];
    if (sid == kNone) continue;
    Span& s = spans_[sid];
    if (s.open || s.listed || s.nobjs == 0) continue;
    bool has_free = false;
    for (unsigned l = 0; l < kLines && !has_free; ++l) has_free = s.lines[l] == 0;
    if (has_free) list_span(sid);
  }
}

void Llama::list_span(uint32_t sid) {
  Span& s = spans_[sid];
  s.listed = true;
  recycle_[pages_[s.hp].lc].push_back({sid, s.gen});
  ++listed_;
}

// ---------------------------------------------------------------- small objects

uint32_t Llama::open_fresh_span(int lc, uint64_t now) {
  auto [hp, block] = alloc_blocks(lc, kSpanBlocks, now);
  uint32_t sid;
  if (!free_span_ids_.empty()) {
    sid = free_span_ids_.back();
    free_span_ids_.pop_back();
  } else {
    sid = uint32_t(spans_.size());
    spans_.emplace_back();
  }
  Span& s = spans_[sid];
  uint32_t gen = s.gen;
  s = Span();
  s.gen = gen + 1;
  s.hp = hp;
  s.block = block;
  s.open = true;
  s.cursor = 0;
  s.limit = kSpanBytes;
  pages_[hp].span_at[block] = sid;
  ++c_spans_opened_;
  return sid;
}

uint32_t Llama::take_recycled_span(int lc) {
  if (listed_ == 0) return kNone;
  // The paper's recycling feeds shorter classes only; the immediate ablation also feeds
  // the page's own class (what a size-class allocator's free lists do).
  for (int c = nclasses_ - 1; c > lc || (recycle_now_ && c == lc); --c) {
    auto& list = recycle_[c];
    while (!list.empty()) {
      auto [sid, gen] = list.back();
      list.pop_back();
      --listed_;
      Span& s = spans_[sid];
      if (s.gen != gen || !s.listed) continue;
      s.listed = false;
      if (s.open || s.nobjs == 0) continue;
      s.open = true;
      s.cursor = s.limit = 0;  // search free lines from the start
      ++c_span_reuses_;
      return sid;
    }
  }
  return kNone;
}

// Immix-style bump allocation into the free line ranges of a span.  `exhausted`: the
// span has no free range left after its cursor.  A failed medium object (> one line)
// leaves the span's cursor where it was.
bool Llama::place(uint32_t sid, uint64_t size, uint32_t align, uint64_t& addr, bool& exhausted) {
  Span& s = spans_[sid];
  uint64_t base = span_base(s);
  uint32_t cur = s.cursor, lim = s.limit;
  exhausted = false;
  for (;;) {
    uint64_t start = align_up(base + cur, align) - base;
    if (start + size <= lim) {
      for (uint64_t l = start / kLineBytes; l <= (start + size - 1) / kLineBytes; ++l) ++s.lines[l];
      ++s.nobjs;
      s.cursor = uint32_t(start + size);
      s.limit = lim;
      addr = base + start;
      return true;
    }
    unsigned l = unsigned(lim / kLineBytes);
    while (l < kLines && s.lines[l] != 0) ++l;
    if (l >= kLines) {
      // No range takes it.  The span is used up only if nothing is left after its limit
      // and less than a line before it; otherwise it is kept for smaller objects.
      unsigned m = unsigned(s.limit / kLineBytes);
      while (m < kLines && s.lines[m] != 0) ++m;
      if (m < kLines || s.limit - s.cursor >= kLineBytes) return false;
      s.cursor = s.limit = uint32_t(kSpanBytes);
      exhausted = true;
      return false;
    }
    unsigned e = l;
    while (e < kLines && s.lines[e] == 0) ++e;
    cur = uint32_t(l * kLineBytes);
    lim = uint32_t(e * kLineBytes);
  }
}

void Llama::close_span(uint32_t sid, uint64_t now) {
  Span& s = spans_[sid];
  s.open = false;
  if (s.nobjs == 0) release_span(sid, now);
}

void Llama::release_span(uint32_t sid, uint64_t now) {
  Span& s = spans_[sid];
  ++s.gen;
  s.listed = false;
  s.open = false;
  pages_[s.hp].span_at[s.block] = kNone;
  free_span_ids_.push_back(sid);
  ++c_spans_released_;
  free_blocks(s.hp, s.block, kSpanBlocks, now);
}

// ---------------------------------------------------------------- objects

uint64_t Llama::alloc(const AllocRequest& r) {
  if (handles_.size() <= r.slot) handles_.resize(r.slot + 1 + handles_.size() / 2);
  int lc = std::clamp(r.cls, 0, nclasses_ - 1);
  live_bytes_ += r.size;
  Handle& h = handles_[r.slot];
  h.size = r.size;
  if (r.size < kBlockBytes && r.align <= kBlockBytes) {
    ++c_small_;
    uint64_t key = uint64_t(r.thread) << 8 | uint64_t(lc);
    if (key != last_local_key_) {
      last_local_ = &locals_[key];
      last_local_key_ = key;
    }
    Local& L = *last_local_;
    uint64_t addr;
    bool exhausted;
    for (;;) {  // a recycled, partially free span first
      if (L.partial == kNone && (L.partial = take_recycled_span(lc)) == kNone) break;
      if (place(L.partial, r.size, r.align, addr, exhausted)) {
        h.addr = addr;
        h.span = L.partial;
        return addr;
      }
      if (!exhausted) break;
      close_span(L.partial, r.now);
      L.partial = kNone;
    }
    if (L.fresh != kNone) {  // then the span that was fully free when opened
      if (place(L.fresh, r.size, r.align, addr, exhausted)) {
        h.addr = addr;
        h.span = L.fresh;
        return addr;
      }
      close_span(L.fresh, r.now);
    }
    L.fresh = open_fresh_span(lc, r.now);
    bool ok = place(L.fresh, r.size, r.align, addr, exhausted);
    SIM_CHECK(ok, name_ + ": a fresh span cannot take a small object");
    h.addr = addr;
    h.span = L.fresh;
    return addr;
  }
  // Large objects: contiguous blocks (padded for alignment beyond a block).
  ++c_large_;
  uint64_t bytes = r.size + (r.align > kBlockBytes ? r.align - kBlockBytes : 0);
  uint32_t n = uint32_t((bytes + kBlockBytes - 1) / kBlockBytes);
  h.span = kNone;
  h.nblocks = n;
  h.tail = kNone;
  if (n <= kBlocks) {
    auto [hp, b] = alloc_blocks(lc, n, r.now);
    h.page = uint32_t(hp);
    h.base = pages_[hp].id * kHugePageBytes + b * kBlockBytes;
  } else {
    // Several fresh contiguous huge pages of the object's class, active from the start:
    // its whole pages as one entry, a partial last page as its own.
    ++c_multi_;
    uint32_t whole = n / kBlocks, rest = n % kBlocks;
    uint64_t first = ids_.take_fresh(whole + (rest ? 1 : 0));
    auto add = [&](uint64_t id, uint64_t count, uint32_t m) {
      uint32_t hp = new_page(id, count);
      Page& p = pages_[hp];
      p.lc = lc;
      p.state = kActive;
      p.live.set_range(0, m);
      p.residual.set_range(0, m);
      p.nlive = p.nresidual = m;
      set_deadline(hp, r.now);
      link(hp);
      return hp;
    };
    h.page = add(first, whole, kBlocks);
    if (rest) h.tail = add(first + whole, 1, rest);
    h.base = first * kHugePageBytes;
  }
  h.addr = align_up(h.base, r.align);
  return h.addr;
}

void Llama::free(uint32_t slot, uint64_t now) {
  Handle& h = handles_[slot];
  live_bytes_ -= h.size;
  if (h.span != kNone) {
    Span& s = spans_[h.span];
    uint64_t off = h.addr - span_base(s);
    bool line_freed = false;
    for (uint64_t l = off / kLineBytes; l <= (off + h.size - 1) / kLineBytes; ++l)
      line_freed |= --s.lines[l] == 0;
    if (--s.nobjs == 0 && !s.open) release_span(h.span, now);
    else if (recycle_now_ && line_freed && !s.open && !s.listed) list_span(h.span);
    return;
  }
  if (h.nblocks <= kBlocks) {
    free_blocks(h.page, uint32_t((h.base % kHugePageBytes) / kBlockBytes), h.nblocks, now);
    return;
  }
  release_page(h.page);  // the whole pages (their ids go back in order, then the tail's)
  if (h.tail != kNone) free_blocks(h.tail, 0, h.nblocks % kBlocks, now);
}

std::pair<uint64_t, uint64_t> Llama::where(uint32_t slot) const {
  return {handles_[slot].addr, handles_[slot].size};
}

Counters Llama::counters() const {
  return {{"huge_pages_acquired", c_acquired_},
          {"huge_pages_released", c_released_},
          {"open_to_active", c_open_to_active_},
          {"reclassifications_down", c_reclass_down_},
          {"deadline_expiries", c_expiries_},
          {"class_increases", c_class_up_},
          {"recycled_block_allocs", c_recycled_allocs_},
          {"recycled_blocks", c_recycled_blocks_},
          {"recycled_span_reuses", c_span_reuses_},
          {"spans_opened", c_spans_opened_},
          {"spans_released", c_spans_released_},
          {"small_allocs", c_small_},
          {"large_allocs", c_large_},
          {"multi_huge_page_allocs", c_multi_}};
}

// ---------------------------------------------------------------- invariants

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
  std::vector<std::array<uint16_t, kLines>> lines;
  std::vector<uint32_t> sids, nobjs;
  std::array<int, kBlocks> span_index;
  span_index.fill(-1);
  for (unsigned b = 0; b < kBlocks; ++b) {
    uint32_t sid = p.span_at[b];
    if (sid == kNone) continue;
    const Span& s = spans_[sid];
    SIM_CHECK(s.hp == slot && s.block == b && b + kSpanBlocks <= kBlocks, where + "span index");
    SIM_CHECK(!expect.test(b) && !expect.test(b + 1), where + "spans overlap");
    SIM_CHECK(s.open || s.nobjs > 0, where + "closed empty span not returned");
    expect.set_range(b, kSpanBlocks);
    span_index[b] = span_index[b + 1] = int(sids.size());
    sids.push_back(sid);
    lines.emplace_back();
    lines.back().fill(0);
    nobjs.push_back(0);
  }
  shadow.for_range(lo, hi, [&](uint64_t a, const ShadowHeap::Obj& o) {
    const Handle& h = handles_[o.slot];
    SIM_CHECK(h.addr == a, where + "handle address");
    if (h.span == kNone) {
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
      SIM_CHECK(o.end <= sb + kSpanBytes, where + "small object straddles its span");
      for (uint64_t l = (a - sb) / kLineBytes; l <= (o.end - 1 - sb) / kLineBytes; ++l) ++lines[si][l];
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
    for (uint32_t sid : {L.partial, L.fresh})
      if (sid != kNone)
        SIM_CHECK(spans_[sid].open && pages_[spans_[sid].hp].span_at[spans_[sid].block] == sid,
                  name_ + ": thread-local span not open");
  }
}

void Llama::snapshot(JsonWriter& j) const {
  j.begin_array();
  for (const auto& [id, slot] : slot_by_id_) {
    const Page& p = pages_[slot];
    j.begin_object();
    j.kv("id", id);
    if (p.count > 1) j.kv("count", p.count);  // ids id .. id+count-1, all alike
    j.kv("state", p.state == kOpen ? "open" : "active");
    j.kv("lc", p.lc);
    j.key("deadline_ns");
    if (p.deadline == kNever) j.null(); else j.value(p.deadline);
    std::string blocks(kBlocks, '.');
    for (unsigned b = 0; b < kBlocks; ++b)
      if (p.live.test(b)) blocks[b] = p.residual.test(b) ? 'R' : 'n';
    j.kv("blocks", blocks);
    j.end_object();
  }
  j.end_array();
}

}  // namespace sim
