#include "llama.h"

#include <algorithm>

#include "json.h"
#include "slot_ids.h"

namespace sim {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
uint64_t sat_add(uint64_t a, uint64_t b) { return a > kNever - b ? kNever : a + b; }
}  // namespace

Llama::Llama(std::string name, const ClassScheme& classes, unsigned deadline_k,
             bool recycle_spans_immediately, LlamaPolicy policy, uint64_t first_id)
    : name_(std::move(name)), classes_(classes), k_(deadline_k),
      recycle_now_(recycle_spans_immediately), pol_(policy), nclasses_(classes.num_classes()), ids_(first_id) {
  open_.assign(nclasses_, -1);
  local_cache_.fill({UINT64_MAX, nullptr});
  bucket_head_.resize(nclasses_);
  for (auto& h : bucket_head_) h.fill(kNone);
  bucket_mask_.resize(nclasses_);
  recycle_.resize(2 * size_t(nclasses_));
  occ_recycle_.resize(2 * size_t(nclasses_));
  if (pol_.occupancy) {
    lo_head_.resize(nclasses_);
    for (auto& h : lo_head_) h.fill(kNone);
    lo_mask_.resize(nclasses_);
    occ_blocks_ = uint32_t(pol_.occupancy_threshold * kBlocks);
  }
}

// ---------------------------------------------------------------- huge pages

uint32_t Llama::new_page(uint64_t id, uint64_t count) {
  const uint32_t hp = free_slots_.take(pages_);
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
  free_slots_.release(hp);
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
  if (pol_.occupancy && lo_eligible(p)) link_lo(hp);
}

void Llama::unlink(uint64_t hp) {
  Page& p = pages_[hp];
  if (p.lo_linked) unlink_lo(hp);
  if (!p.linked) return;
  auto& head = bucket_head_[p.lc][p.lfr - 1];
  if (p.prev != kNone) pages_[p.prev].next = p.next;
  else head = p.next;
  if (p.next != kNone) pages_[p.next].prev = p.prev;
  if (head == kNone) bucket_mask_[p.lc].clear(p.lfr - 1);
  p.prev = p.next = kNone;
  p.linked = false;
}

// Occupancy policy: an active page of a class without a deadline (the open-ended and inf
// classes) whose live blocks are at most the threshold lends its free blocks to its own
// class; a second list per class and longest free run.  (Not finite classes: their pages
// drain in allocation order and are returned; refilling the drained ones keeps more
// pages alive at once, measured on the proxy.)
bool Llama::lo_eligible(const Page& p) const {
  return p.state == kActive && p.count == 1 && p.nlive <= occ_blocks_ &&
         (pol_.own_blocks || classes_.bound_ns(p.lc) == kNever);
}

void Llama::link_lo(uint64_t hp) {
  Page& p = pages_[hp];
  auto& head = lo_head_[p.lc][p.lfr - 1];
  p.lo_prev = kNone;
  p.lo_next = head;
  if (head != kNone) pages_[head].lo_prev = uint32_t(hp);
  head = uint32_t(hp);
  lo_mask_[p.lc].set(p.lfr - 1);
  p.lo_linked = true;
}

void Llama::unlink_lo(uint64_t hp) {
  Page& p = pages_[hp];
  auto& head = lo_head_[p.lc][p.lfr - 1];
  if (p.lo_prev != kNone) pages_[p.lo_prev].lo_next = p.lo_next;
  else head = p.lo_next;
  if (p.lo_next != kNone) pages_[p.lo_next].lo_prev = p.lo_prev;
  if (head == kNone) lo_mask_[p.lc].clear(p.lfr - 1);
  p.lo_prev = p.lo_next = kNone;
  p.lo_linked = false;
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
  // Occupancy policy: then free blocks of a mostly free active page of this very class
  // when it has no deadline (residual: they match its class).
  if (pol_.occupancy && (pol_.own_blocks || classes_.bound_ns(lc) == kNever)) {
    int idx = lo_mask_[lc].first_set_from(n - 1);
    if (idx >= 0) {
      uint64_t hp = lo_head_[lc][idx];
      Page& p = pages_[hp];
      int b = first_fit(p.live, n);
      SIM_CHECK(b >= 0, name_ + ": occupancy recycling list without room");
      unlink(hp);
      p.live.set_range(unsigned(b), n);
      p.residual.set_range(unsigned(b), n);
      p.nlive += n;
      p.nresidual += n;
      if (classes_.bound_ns(lc) != kNever) set_deadline(hp, now);  // own-blocks
      link(hp);
      ++c_occ_block_allocs_;
      c_occ_blocks_ += n;
      return {hp, uint32_t(b)};
    }
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

void Llama::expire_due(uint64_t now) {
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
    if (s.used_lines < s.nlines) list_span(sid);  // it has a free line
  }
}

void Llama::list_span(uint32_t sid) {
  Span& s = spans_[sid];
  s.listed = true;
  recycle_[size_t(s.kind) * nclasses_ + pages_[s.hp].lc].push_back({sid, s.gen});
  ++listed_;
}

// Occupancy policy: a closed span whose occupied lines fell to the threshold is
// recyclable at once, for its own class and shorter ones.
void Llama::maybe_list_by_occupancy(uint32_t sid) {
  Span& s = spans_[sid];
  if (s.open || s.listed || s.nobjs == 0 || s.used_lines > occ_limit(s)) return;
  s.listed = true;
  occ_recycle_[size_t(s.kind) * nclasses_ + s.lc].push_back({sid, s.gen});
  ++occ_listed_;
  ++c_occ_spans_listed_;
}

// ---------------------------------------------------------------- small objects

uint32_t Llama::open_fresh_span(int lc, int kind, uint64_t now) {
  auto [hp, block] = alloc_blocks(lc, kSpanBlocksOf[kind], now);
  const uint32_t sid = free_span_ids_.take(spans_);
  Span& s = spans_[sid];
  uint32_t gen = s.gen;
  s = Span();
  s.gen = gen + 1;
  s.hp = hp;
  s.block = block;
  s.open = true;
  s.kind = uint8_t(kind);
  s.lc = lc;
  s.cursor = 0;
  s.shift = uint8_t(kind == 0 && pol_.fine_lines ? 5 : kLineShiftOf[kind]);
  s.nlines = uint16_t((uint64_t(kSpanBlocksOf[kind]) * kBlockBytes) >> s.shift);
  s.limit = uint32_t(span_bytes(s));
  pages_[hp].span_at[block] = sid;
  ++c_spans_opened_;
  return sid;
}

uint32_t Llama::take_recycled_span(int lc, int kind) {
  if (listed_ == 0) return occ_listed_ == 0 ? kNone : take_occupancy_span(lc, kind);
  // The paper's recycling feeds shorter classes only; the immediate ablation also feeds
  // the page's own class (what a size-class allocator's free lists do).
  for (int c = nclasses_ - 1; c > lc || (recycle_now_ && c == lc); --c) {
    auto& list = recycle_[size_t(kind) * nclasses_ + c];
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
      s.lc = std::max(s.lc, lc);  // the longest class its objects may have
      ++c_span_reuses_;
      return sid;
    }
  }
  return occ_listed_ == 0 ? kNone : take_occupancy_span(lc, kind);
}

// Occupancy policy: spans listed by occupancy (by the class of their objects), of the
// longest class >= lc first.
uint32_t Llama::take_occupancy_span(int lc, int kind, int* from) {
  for (int c = nclasses_ - 1; c >= lc; --c) {
    auto& list = occ_recycle_[size_t(kind) * nclasses_ + c];
    while (!list.empty()) {
      auto [sid, gen] = list.front();
      list.pop_front();
      --occ_listed_;
      Span& s = spans_[sid];
      if (s.gen != gen || !s.listed) continue;
      s.listed = false;
      if (s.open || s.nobjs == 0) continue;
      s.open = true;
      s.cursor = s.limit = 0;
      if (from) *from = s.lc;
      s.lc = std::max(s.lc, lc);  // the longest class its objects may have
      ++c_occ_span_reuses_;
      return sid;
    }
  }
  return kNone;
}

// span-fit: a span taken for a try goes back, closed, to the front of its class's list
// (the back is taken first); one with no object left is returned.
void Llama::requeue_span(uint32_t sid, int cls, uint64_t now) {
  Span& s = spans_[sid];
  s.open = false;
  s.lc = cls;
  if (s.nobjs == 0) {
    release_span(sid, now);
    return;
  }
  if (s.used_lines == s.nlines) return;  // full: closed like any used-up span
  s.listed = true;
  occ_recycle_[size_t(s.kind) * nclasses_ + cls].push_back({sid, s.gen});
  ++occ_listed_;
}

// Immix-style bump allocation into the free line ranges of a span.  `exhausted`: the
// span has no free range left after its cursor.  A failed medium object (> one line)
// leaves the span's cursor where it was.
bool Llama::place(uint32_t sid, uint64_t size, uint32_t align, uint64_t& addr, bool& exhausted) {
  Span& s = spans_[sid];
  uint64_t base = span_base(s);
  const unsigned shift = s.shift, nlines = s.nlines;
  const uint64_t line_bytes = uint64_t(1) << shift;
  uint32_t cur = s.cursor, lim = s.limit;
  exhausted = false;
  for (;;) {
    uint64_t start = align_up(base + cur, align) - base;
    if (start + size <= lim) {
      for (uint64_t l = start >> shift; l <= (start + size - 1) >> shift; ++l)
        if (s.lines[l]++ == 0) ++s.used_lines;
      ++s.nobjs;
      s.cursor = uint32_t(start + size);
      s.limit = lim;
      addr = base + start;
      return true;
    }
    unsigned l = unsigned(lim >> shift);
    while (l < nlines && s.lines[l] != 0) ++l;
    if (l >= nlines) {
      // No range takes it.  The span is used up only if nothing is left after its limit
      // and less than a line before it; otherwise it is kept for smaller objects.
      unsigned m = unsigned(s.limit >> shift);
      while (m < nlines && s.lines[m] != 0) ++m;
      if (m < nlines || s.limit - s.cursor >= line_bytes) return false;
      s.cursor = s.limit = uint32_t(span_bytes(s));
      exhausted = true;
      return false;
    }
    unsigned e = l;
    while (e < nlines && s.lines[e] == 0) ++e;
    cur = uint32_t(l << shift);
    lim = uint32_t(e << shift);
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
  free_span_ids_.release(sid);
  ++c_spans_released_;
  free_blocks(s.hp, s.block, kSpanBlocksOf[s.kind], now);
}

// ---------------------------------------------------------------- objects

// Small objects (kind 0) and, with the medium-spans policy, medium ones (kind 1): the
// thread-local allocator of (thread, class) and its two spans of that kind.
uint64_t Llama::alloc_in_spans(const AllocRequest& r, int lc, int kind, Handle& h) {
  uint64_t key = uint64_t(r.thread) << 8 | uint64_t(lc);
  // A direct-mapped front of locals_ (its entries stay put: a node map, never erased).
  auto& cached = local_cache_[(uint32_t(r.thread) * 61 + uint32_t(lc)) & (kLocalCache - 1)];
  if (cached.first != key) cached = {key, &locals_[key]};
  Local& L = *cached.second;
  uint32_t& partial = L.partial[kind];
  uint32_t& fresh = L.fresh[kind];
  uint64_t addr;
  bool exhausted;
  for (;;) {  // a recycled, partially free span first
    if (partial == kNone && (partial = take_recycled_span(lc, kind)) == kNone) break;
    if (place(partial, r.size, r.align, addr, exhausted)) {
      h.addr = addr;
      h.span = partial;
      return addr;
    }
    if (!exhausted && pol_.span_fit && occ_listed_ > 0) {
      // span-fit: another listed span whose free lines take it replaces the partial one.
      std::pair<uint32_t, int> tried[kFitTries];
      int ntried = 0;
      uint32_t found = kNone;
      for (int t = 0; t < kFitTries && found == kNone; ++t) {
        int from = lc;
        uint32_t sid = take_occupancy_span(lc, kind, &from);
        if (sid == kNone) break;
        bool ex;
        if (place(sid, r.size, r.align, addr, ex)) found = sid;
        else tried[ntried++] = {sid, from};
      }
      for (int t = ntried - 1; t >= 0; --t) requeue_span(tried[t].first, tried[t].second, r.now);
      if (found != kNone) {
        ++c_fit_swaps_;
        requeue_span(partial, spans_[partial].lc, r.now);
        partial = found;
        h.addr = addr;
        h.span = found;
        return addr;
      }
    }
    if (!exhausted) break;
    close_span(partial, r.now);
    partial = kNone;
  }
  if (fresh != kNone) {  // then the span that was fully free when opened
    if (place(fresh, r.size, r.align, addr, exhausted)) {
      h.addr = addr;
      h.span = fresh;
      return addr;
    }
    close_span(fresh, r.now);
  }
  if (occ_listed_ > 0 && partial != kNone) ++c_fresh_no_fit_;
  fresh = open_fresh_span(lc, kind, r.now);
  bool ok = place(fresh, r.size, r.align, addr, exhausted);
  SIM_CHECK(ok, name_ + ": a fresh span cannot take a small object");
  h.addr = addr;
  h.span = fresh;
  return addr;
}

uint64_t Llama::alloc(const AllocRequest& r) {
  grow_slots(handles_, r.slot);
  int lc = std::clamp(r.cls, 0, nclasses_ - 1);
  live_bytes_ += r.size;
  Handle& h = handles_[r.slot];
  h.size = r.size;
  if (pol_.contain_mixed) {
    if (inf_preds_.size() <= r.slot) inf_preds_.resize(handles_.size());
    inf_preds_[r.slot].inf_pred = false;
  }
  if (pol_.contain_mixed && lc == nclasses_ - 1) {
    // A stack whose inf predictions have mostly died goes to the pages of the longest
    // non-inf class (no deadline either), away from the contexts that do live forever.
    Context& c = contexts_[r.stack];
    if (c.placed >= kMixedMinObjects && 2 * c.died >= c.placed) {
      lc = nclasses_ - 2;
      ++c_contained_;
      if (!c.contained) ++c_contexts_contained_;
      c.contained = true;
    }
    ++c.placed;
    inf_preds_[r.slot] = {r.stack, true};
  }
  if (r.size < kBlockBytes && r.align <= kBlockBytes) {
    ++c_small_;
    uint64_t addr = alloc_in_spans(r, lc, 0, h);
    h.base = span_base(spans_[h.span]);  // free() needs no page record
    return addr;
  }
  if (pol_.medium_spans && r.size < 4 * kBlockBytes && r.size % kBlockBytes != 0 && r.align <= kBlockBytes) {
    ++c_medium_;
    uint64_t addr = alloc_in_spans(r, lc, 1, h);
    h.base = span_base(spans_[h.span]);
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
      p.owner = r.slot;  // the checker finds the run from here (padding may hide the object)
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
  if (pol_.contain_mixed && inf_preds_[slot].inf_pred) {
    auto it = contexts_.find(inf_preds_[slot].stack);
    if (it != contexts_.end()) ++it->second.died;
  }
  if (h.span != kNone) {
    Span& s = spans_[h.span];
    uint64_t off = h.addr - h.base;  // h.base: span_base(s), kept from alloc
    const unsigned shift = s.shift;
    bool line_freed = false;
    for (uint64_t l = off >> shift; l <= (off + h.size - 1) >> shift; ++l)
      if (--s.lines[l] == 0) {
        line_freed = true;
        --s.used_lines;
      }
    if (--s.nobjs == 0 && !s.open) release_span(h.span, now);
    else if (recycle_now_ && line_freed && !s.open && !s.listed) list_span(h.span);
    else if (pol_.occupancy && line_freed) maybe_list_by_occupancy(h.span);
    return;
  }
  if (h.nblocks <= kBlocks) {
    free_blocks(h.page, uint32_t((h.base % kHugePageBytes) / kBlockBytes), h.nblocks, now);
    return;
  }
  release_page(h.page);  // the whole pages (their ids go back in order, then the tail's)
  if (h.tail != kNone) {
    pages_[h.tail].owner = kNone;
    free_blocks(h.tail, 0, h.nblocks % kBlocks, now);
  }
}

std::pair<uint64_t, uint64_t> Llama::where(uint32_t slot) const {
  return {handles_[slot].addr, handles_[slot].size};
}

void Llama::prefetch_free(uint32_t slot, int stage) const {
  if (slot >= handles_.size()) return;
  const Handle& h = handles_[slot];
  if (stage == 1) {
    __builtin_prefetch(&h);
    return;
  }
  if (h.span != kNone) {
    if (h.span >= spans_.size() || h.addr < h.base) return;  // not allocated yet
    const Span& s = spans_[h.span];
    __builtin_prefetch(&s);
    uint64_t line = (h.addr - h.base) >> kLineShiftOf[0];
    if (line < kLines) __builtin_prefetch(&s.lines[line]);
  } else if (h.page < pages_.size()) {
    __builtin_prefetch(&pages_[h.page]);
    __builtin_prefetch(reinterpret_cast<const char*>(&pages_[h.page]) + 64);
  }
}

void Llama::move_slot(uint32_t from, uint32_t to) {
  grow_slots(handles_, to);
  const Handle& h = handles_[to] = handles_[from];
  if (pol_.contain_mixed) {
    if (inf_preds_.size() <= to) inf_preds_.resize(handles_.size());
    inf_preds_[to] = inf_preds_[from];
  }
  if (h.span == kNone && h.nblocks > kBlocks) {  // its pages name it (checks)
    pages_[h.page].owner = to;
    if (h.tail != kNone) pages_[h.tail].owner = to;
  }
}

void Llama::trim(uint32_t slot_end) {
  trim_slots(handles_, slot_end);
  trim_slots(inf_preds_, slot_end);
}

Counters Llama::counters() const {
  Counters c = {{"huge_pages_acquired", c_acquired_},
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
  // A policy's counters only with it (the paper's report is unchanged).
  if (pol_.occupancy) {
    c.push_back({"occupancy_spans_listed", c_occ_spans_listed_});
    c.push_back({"occupancy_span_reuses", c_occ_span_reuses_});
    c.push_back({"occupancy_block_allocs", c_occ_block_allocs_});
    c.push_back({"occupancy_blocks", c_occ_blocks_});
    c.push_back({"fresh_spans_past_a_partial", c_fresh_no_fit_});
    if (pol_.span_fit) c.push_back({"span_fit_swaps", c_fit_swaps_});
  }
  if (pol_.contain_mixed) {
    c.push_back({"contained_allocs", c_contained_});
    c.push_back({"contained_contexts", c_contexts_contained_});
  }
  if (pol_.medium_spans) c.push_back({"medium_allocs", c_medium_});
  return c;
}

void Llama::snapshot_pages(JsonWriter& j) const {
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
    if (snapshot_spans_) {
      // Per span on the page: "B:K:C:U/N:S" = first block, kind (s small, m medium), its
      // class, used lines of its N lines, open (o) / listed for recycling (l) / closed (c).
      std::string spans;
      for (unsigned b = 0; b < kBlocks; ++b) {
        uint32_t sid = p.span_at[b];
        if (sid == kNone) continue;
        const Span& s = spans_[sid];
        spans += (spans.empty() ? "" : " ") + std::to_string(b) + ":" + (s.kind ? "m" : "s") + ":" +
                 std::to_string(s.lc) + ":" + std::to_string(s.used_lines) + "/" + std::to_string(s.nlines) + ":" +
                 (s.open ? "o" : s.listed ? "l" : "c");
      }
      j.kv("spans", spans);
    }
    j.end_object();
  }
}

}  // namespace sim
