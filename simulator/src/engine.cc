#include "engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <set>
#include <unordered_set>

#include "attribution.h"
#include "baseline.h"
#include "free_queue.h"
#include "json.h"
#include "llama.h"
#include "policy_heap.h"

namespace sim {

namespace {

constexpr uint64_t kMaxSamples = 1000000;

// One more instance of each allocator so far per --isolate group: NAME/apart:LABEL, its
// objects of the group's stacks in a second heap of the same kind (attribution.h).
void add_isolated(const EngineOptions& opts, const ClassScheme& classes, Results& R,
                  std::vector<std::unique_ptr<HeapAllocator>>& allocs, std::vector<int>& parent) {
  const size_t n = allocs.size();
  for (const auto& [label, ids] : opts.isolate) {
    std::unordered_set<uint64_t> stacks(ids.begin(), ids.end());
    for (size_t i = 0; i < n; ++i) {
      const AllocatorResult& of = R.allocators[i];
      auto make = [&]() -> std::unique_ptr<HeapAllocator> {
        if (of.kind != "llama") return std::make_unique<TcmallocBaseline>(of.name);
        std::string names = opts.policy;
        for (const auto& [l, nm] : opts.policy_for)
          if ("llama:" + l == of.name) names = nm;
        LlamaPolicy policy = names.empty() ? LlamaPolicy() : parse_llama_policy(names, "--policy " + names);
        return make_policy_heap(of.name, classes, policy, opts.deadline_k, opts.recycle_spans_immediately);
      };
      allocs.push_back(std::make_unique<IsolatedHeap>(make(), make(), stacks));
      AllocatorResult ar;
      ar.name = of.name + "/apart:" + label;
      ar.kind = of.kind;
      ar.policy = of.policy;
      R.allocators.push_back(std::move(ar));
      parent.push_back(int(i));
    }
  }
}

}  // namespace

Results Engine::run(const std::string& trace_path) {
  auto t_start = std::chrono::steady_clock::now();
  TraceReader reader(trace_path);
  Results R;
  R.trace_path = trace_path;
  R.header = reader.header();
  const ClassScheme& classes = R.header.classes;

  // Allocators: the baseline, then one LLAMA per predictor.
  std::vector<std::unique_ptr<HeapAllocator>> allocs;
  std::vector<std::unique_ptr<Predictor>> preds;
  std::set<std::string> names;
  if (opts_.baseline) {
    allocs.push_back(std::make_unique<TcmallocBaseline>("baseline"));
    preds.push_back(nullptr);
    R.allocators.push_back({});
    R.allocators.back().name = "baseline";
    R.allocators.back().kind = "tcmalloc-hugepage";
    names.insert("baseline");
  }
  std::set<std::string> labels;
  for (const std::string& spec : opts_.predictors) {
    auto p = make_predictor(spec, classes, opts_.predictor_options);
    std::string name = "llama:" + p->label;
    if (!names.insert(name).second) throw SimError("--predictor " + spec + ": the name " + name + " is used twice (give it a LABEL=)");
    labels.insert(p->label);
    std::string policy_names = opts_.policy;
    for (const auto& [label, names_for] : opts_.policy_for)
      if (label == p->label) policy_names = names_for;
    LlamaPolicy policy = policy_names.empty() ? LlamaPolicy() : parse_llama_policy(policy_names, "--policy " + policy_names);
    allocs.push_back(make_policy_heap(name, classes, policy, opts_.deadline_k, opts_.recycle_spans_immediately,
                                      opts_.snapshot_spans));
    R.allocators.push_back({});
    if (!policy.paper()) R.allocators.back().policy = policy.describe();
    R.allocators.back().name = name;
    R.allocators.back().kind = "llama";  // every predictor-driven instance (its policy says which heap)
    R.allocators.back().predictor = p.get();
    R.allocators.back().predicted_objects.assign(classes.num_classes(), 0);
    preds.push_back(std::move(p));
  }
  if (allocs.empty()) throw SimError("nothing to simulate: no baseline and no --predictor");
  // Counterfactuals: after the allocators above, each again per --isolate group, with
  // that group's stacks in a heap of their own; it places every object with the class
  // its own allocator's predictor gave it (parent), so a predictor runs once per object.
  std::vector<int> parent(allocs.size(), -1);
  if (!opts_.isolate.empty()) {
    if (opts_.check_invariants) throw SimError("--check-invariants does not apply to --isolate heaps");
    add_isolated(opts_, classes, R, allocs, parent);
    preds.resize(allocs.size());
  }
  for (const auto& [label, names_for] : opts_.policy_for)
    if (!labels.count(label)) throw SimError("--policy " + label + "=" + names_for + ": no LLAMA instance is labelled " + label);
  const size_t A = allocs.size();

  // Time frame.
  const ObjectRecord* rec = reader.next();
  const uint64_t end = R.header.end_ns;
  const uint64_t t0 = rec ? rec->alloc_ns : end;
  R.start_ns = t0;
  R.steady_from_ns = t0 + (end - t0) / 2;
  uint64_t interval = opts_.series_interval_ns;
  if (interval == 0) interval = std::max<uint64_t>(1, (end - t0 + 999) / 1000);
  if ((end - t0) / interval + 1 > kMaxSamples)
    throw SimError("--series-interval: " + std::to_string((end - t0) / interval + 1) +
                   " samples (at most " + std::to_string(kMaxSamples) + "); give a longer interval");
  R.interval_ns = interval;
  const uint64_t nsamples = (end - t0) / interval + 1;
  std::vector<uint64_t> snaps = opts_.snapshot_at_ns;
  std::sort(snaps.begin(), snaps.end());
  size_t next_snap = 0;
  std::vector<uint64_t> attrib_at = opts_.attribute_at_ns;
  std::sort(attrib_at.begin(), attrib_at.end());
  size_t next_attrib = 0;
  SlotOwners owners;  // filled only when attribution is asked for
  std::vector<std::unordered_map<uint64_t, uint64_t>> last_stack(attrib_at.empty() ? 0 : A);  // huge page -> stack
  const bool attributing = !attrib_at.empty();
  std::vector<int> cls_of(A, 0);  // this allocation's class per allocator (parents')
  uint64_t next_sample = 0;

  // State.
  std::vector<uint64_t> slot_size;
  FreeIds free_slots;  // slot_size entries to reuse
  FreeQueue heap;
  std::vector<unsigned __int128> integral(A, 0);
  unsigned __int128 live_integral = 0;
  uint64_t live = 0, last_t = t0, events = 0;
  std::vector<ShadowHeap> shadows(opts_.check_invariants ? A : 0);
  std::vector<uint64_t> cur_hp(A, 0), cur_sub(A, 0);
  std::vector<unsigned __int128> sub_integral(A, 0);

  auto integrate = [&](uint64_t a, uint64_t b) {  // [a, b) with the current values
    uint64_t lo = std::max(a, R.steady_from_ns), hi = std::min(b, end);
    if (hi <= lo) return;
    for (size_t i = 0; i < A; ++i) {
      integral[i] += (unsigned __int128)cur_hp[i] * (hi - lo);
      sub_integral[i] += (unsigned __int128)cur_sub[i] * (hi - lo);
    }
    live_integral += (unsigned __int128)live * (hi - lo);
  };
  auto emit_until = [&](uint64_t t, bool inclusive) {  // samples and snapshots before t
    while (next_sample < nsamples && (t0 + next_sample * interval < t || (inclusive && t0 + next_sample * interval == t))) {
      R.series_t.push_back(t0 + next_sample * interval);
      R.series_live.push_back(live);
      for (size_t i = 0; i < A; ++i) R.allocators[i].series_hp.push_back(cur_hp[i]);
      ++next_sample;
    }
    while (next_snap < snaps.size() && (snaps[next_snap] < t || (inclusive && snaps[next_snap] == t))) {
      Snapshot s{snaps[next_snap], {}};
      for (auto& a : allocs) {
        a->advance(snaps[next_snap]);
        JsonWriter j;
        a->snapshot(j);
        s.pages_json.push_back(j.str());
      }
      R.snapshots.push_back(std::move(s));
      ++next_snap;
    }
    while (next_attrib < attrib_at.size() && (attrib_at[next_attrib] < t || (inclusive && attrib_at[next_attrib] == t))) {
      Snapshot s{attrib_at[next_attrib], {}};
      for (size_t i = 0; i < A; ++i) {  // not the --isolate heaps: their two heaps' ids overlap
        allocs[i]->advance(attrib_at[next_attrib]);
        JsonWriter j;
        if (parent[i] >= 0) j.null();
        else write_attribution(*allocs[i], owners, last_stack[i], j);
        s.pages_json.push_back(j.str());
      }
      R.attributions.push_back(std::move(s));
      ++next_attrib;
    }
  };
  auto at_time = [&](uint64_t t) {
    emit_until(t, false);
    integrate(last_t, t);
    last_t = t;
    for (auto& a : allocs) a->advance(t);
  };
  auto after_event = [&](uint64_t t, uint32_t slot, uint64_t size) {
    ++events;
    if (live > R.peak_live) { R.peak_live = live; R.peak_live_t = t; }
    for (size_t i = 0; i < A; ++i) {
      cur_hp[i] = allocs[i]->live_huge_pages();
      cur_sub[i] = allocs[i]->subreleased_bytes();
      if (cur_hp[i] > R.allocators[i].peak_hp) { R.allocators[i].peak_hp = cur_hp[i]; R.allocators[i].peak_hp_t = t; }
    }
    if (!opts_.check_invariants) return;
    for (size_t i = 0; i < A; ++i) {
      SIM_CHECK(shadows[i].bytes() == live, R.allocators[i].name + ": live bytes disagree with the trace");
      (void)slot;
      (void)size;
    }
    if (events % opts_.full_check_every == 0)
      for (size_t i = 0; i < A; ++i) allocs[i]->check_all(shadows[i]);
  };
  auto check_pages = [&](size_t i, uint64_t addr, uint64_t size) {
    // An object's pages past its first two and before its last two are whole pages of
    // that object alone, alike: checking them all would cost time in its size.
    uint64_t first = addr / kHugePageBytes, last = (addr + size - 1) / kHugePageBytes;
    for (uint64_t hp = first; hp <= last; ++hp) {
      if (hp == first + 2 && last - first > 4) hp = last - 1;
      allocs[i]->check_page(hp, shadows[i]);
    }
  };
  auto do_free = [&](uint64_t t, uint32_t f_slot) {
    at_time(t);
    uint64_t size = slot_size[f_slot];
    for (size_t i = 0; i < A; ++i) {
      if (opts_.check_invariants) {
        auto [addr, sz] = allocs[i]->where(f_slot);
        (void)sz;
        shadows[i].on_free(R.allocators[i].name, addr, f_slot);
        allocs[i]->free(f_slot, t);
        check_pages(i, addr, size);
      } else {
        allocs[i]->free(f_slot, t);
      }
    }
    live -= size;
    if (attributing) owners.on_free(f_slot);
    ++R.frees;
    after_event(t, f_slot, size);
  };
  auto do_alloc = [&](const ObjectRecord* rec, uint32_t slot) {
    at_time(rec->alloc_ns);
    slot_size[slot] = rec->size;
    live += rec->size;
    int true_cls = -1;
    for (size_t i = 0; i < A; ++i) {
      AllocRequest q{slot, rec->size, rec->align, rec->thread_id, 0, rec->alloc_ns, rec->stack_id};
      if (parent[i] >= 0) q.cls = cls_of[parent[i]];
      if (preds[i]) {
        q.cls = preds[i]->predict(*rec);
        if (q.cls < 0 || q.cls >= classes.num_classes())
          throw SimError(R.allocators[i].name + ": predicted class " + std::to_string(q.cls) + " out of range");
        if (true_cls < 0) true_cls = classes.classify(rec->alloc_ns, rec->free_ns);
        AllocatorResult& ar = R.allocators[i];
        ++ar.predicted_objects[q.cls];
        ar.total_bytes += rec->size;
        if (q.cls == true_cls) { ++ar.correct; ar.correct_bytes += rec->size; }
        else if (q.cls < true_cls) ++ar.under;
        else ++ar.over;
      }
      cls_of[i] = q.cls;
      uint64_t addr = allocs[i]->alloc(q);
      if (attributing && parent[i] < 0) last_stack[i][addr / kHugePageBytes] = rec->stack_id;
      if (opts_.check_invariants) {
        shadows[i].on_alloc(R.allocators[i].name, addr, rec->size, slot);
        check_pages(i, addr, rec->size);
      }
    }
    if (attributing) owners.on_alloc(slot, rec->stack_id, classes.classify(rec->alloc_ns, rec->free_ns));
    ++R.allocs;
    if (rec->free_ns == kNever) ++R.never_freed;
    after_event(rec->alloc_ns, slot, rec->size);
  };

  // The order of events (frees before the allocation that follows them, slots given to
  // allocations) depends on the trace alone, not on the heaps: a producer works it out a
  // few events ahead of the simulation, into a ring, so that the slot records of the frees
  // to come can be fetched into the cache (prefetch_free) while earlier events run --
  // the simulation is bound by cache misses on them.  The same events, in the same order,
  // as one loop would give; an error the producer meets (a bad record, too many objects)
  // is raised after the events before it have run, where the loop would have raised it.
  struct Event {
    ObjectRecord rec;  // an allocation's record; a free: rec.alloc_ns is its time
    uint32_t slot;
    bool is_free;
  };
  constexpr size_t kRing = 64, kAhead = 32, kNear = 10;  // ring size (power of two), lookahead, stage-2 distance
  Event ring[kRing];
  size_t head = 0, tail = 0;  // events [head, tail) are produced, not yet run
  bool produced_all = false;
  std::exception_ptr deferred;
  const ObjectRecord* cur = rec;  // the record whose allocation comes next
  auto stage1 = [&](const Event& e) {
    if (!e.is_free) {
      for (size_t i = 0; i < A; ++i)
        if (preds[i]) preds[i]->prefetch(e.rec);
      return;
    }
    if (e.slot < slot_size.size()) __builtin_prefetch(&slot_size[e.slot]);
    for (size_t i = 0; i < A; ++i) allocs[i]->prefetch_free(e.slot, 1);
  };
  auto produce = [&]() {  // one event into the ring, or produced_all
    try {
      Event& e = ring[tail % kRing];
      FreeQueue::Item f;
      if (cur) {
        if (heap.pop_le(cur->alloc_ns, f)) {
          free_slots.release(f.slot);
          e.rec.alloc_ns = f.t;
          e.slot = f.slot;
          e.is_free = true;
        } else {
          if (free_slots.empty() && slot_size.size() >= UINT32_MAX)
            throw SimError(trace_path + ": more than 2^32-1 objects live at once (the engine's limit)");
          e.slot = free_slots.take(slot_size);
          e.rec = *cur;
          e.is_free = false;
          if (cur->free_ns != kNever) heap.push(cur->free_ns, e.slot);
          ++tail;
          stage1(e);
          cur = reader.next();
          return;
        }
      } else if (heap.pop_le(end, f)) {
        free_slots.release(f.slot);
        e.rec.alloc_ns = f.t;
        e.slot = f.slot;
        e.is_free = true;
      } else {
        produced_all = true;
        if (!heap.empty()) throw InvariantError("free queue: frees left after the trace end");
        return;
      }
      ++tail;
      stage1(e);
    } catch (...) {
      produced_all = true;
      deferred = std::current_exception();
    }
  };
  for (;;) {
    while (!produced_all && tail - head < kAhead) produce();
    if (head == tail) break;
    if (tail - head > kNear) {
      const Event& n = ring[(head + kNear) % kRing];
      if (n.is_free)
        for (size_t i = 0; i < A; ++i) allocs[i]->prefetch_free(n.slot, 2);
    }
    const Event& e = ring[head % kRing];
    if (e.is_free) do_free(e.rec.alloc_ns, e.slot);
    else do_alloc(&e.rec, e.slot);
    ++head;
  }
  if (deferred) std::rethrow_exception(deferred);
  at_time(end);
  emit_until(end, true);
  if (opts_.check_invariants)
    for (size_t i = 0; i < A; ++i) allocs[i]->check_all(shadows[i]);

  // Results.
  R.final_live = live;
  uint64_t span = end - R.steady_from_ns;
  R.steady_live = span ? double(live_integral) / double(span) : double(live);
  for (size_t i = 0; i < A; ++i) {
    AllocatorResult& ar = R.allocators[i];
    ar.final_hp = cur_hp[i];
    ar.steady_hp = span ? double(integral[i]) / double(span) : double(cur_hp[i]);
    ar.steady_subreleased = span ? double(sub_integral[i]) / double(span) : double(cur_sub[i]);
    ar.final_subreleased = cur_sub[i];
    ar.counters = allocs[i]->counters();
  }
  for (auto& p : preds) if (p) R.predictors.push_back(std::move(p));
  R.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return R;
}

}  // namespace sim
