#include "thread_cache.h"

#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <new>

#include "segregated.h"

namespace lalloc {
namespace tc {

Global g_caches;
__thread Cache* t_cache __attribute__((tls_model("initial-exec"))) = nullptr;
__thread bool t_busy __attribute__((tls_model("initial-exec"))) = false;

namespace {

void on_span_created(uint64_t addr, uint32_t npages, uint32_t cls) REQUIRES(heap_lock) {
  const uintptr_t p = g_state->backing.real(addr);
  if (!p || cls >= kClasses) return;  // past the reservation: the allocation fails
  const unsigned g = unsigned(sim::SegregatedHeap::heap_of(addr));
  const uint64_t first = (p - g_caches.base) >> kPageShift;
  for (uint32_t i = 0; i < npages; ++i)
    g_caches.map[first + i].store(cls | g << 8 | i << 16, std::memory_order_relaxed);
}
void on_span_released(uint64_t addr, uint32_t npages) REQUIRES(heap_lock) {
  const uintptr_t p = g_state->backing.real(addr);
  if (!p) return;
  const uint64_t first = (p - g_caches.base) >> kPageShift;
  for (uint32_t i = 0; i < npages; ++i) g_caches.map[first + i].store(0, std::memory_order_relaxed);
}

void thread_exit(void* v) EXCLUDES(heap_lock);

// The live caches changed: each thread's share of kAllBytes.
void set_thread_bound() REQUIRES(heap_lock) {
  const uint64_t n = g_caches.live_caches ? g_caches.live_caches : 1;
  g_caches.thread_bytes.store(std::clamp<uint64_t>(kAllBytes / n, kMinThreadBytes, kThreadBytes),
                              std::memory_order_relaxed);
}

// At init, under the lock: on for a policy of size-class heaps only (LLAMA's lines must
// see every free), with the checker off (its shadow heap must see every free).
}  // namespace

void setup(bool addr_mode) REQUIRES(heap_lock) {
  g_caches.groups = 1;
  if (!g_state->cfg.thread_cache || g_state->cfg.check_every || !addr_mode) return;
  const sim::TcmallocBaseline* b = dynamic_cast<const sim::TcmallocBaseline*>(g_state->policy.get());
  if (auto* seg = dynamic_cast<const sim::SegregatedHeap*>(g_state->policy.get())) {
    b = dynamic_cast<const sim::TcmallocBaseline*>(&seg->heap(0));
    g_caches.group_of = seg->group_of().data();
    g_caches.groups = 1;
    for (unsigned g : seg->group_of()) g_caches.groups = std::max(g_caches.groups, g + 1);
    g_caches.seg_above = seg->segregate_above_bytes();
    g_caches.shared = seg->shared_heap();
    g_caches.groups = std::max(g_caches.groups, g_caches.shared + 1);
  }
  if (!b || b->size_classes().size() > kClasses) return;
  const auto& classes = b->size_classes();
  for (size_t c = 1; c < classes.size(); ++c) {
    const uint32_t size = classes[c].size;
    g_caches.size[c] = size;
    g_caches.objs[c] = classes[c].objs;
    g_caches.max[c] = uint32_t(std::clamp<uint64_t>(kListBytes / size, 1, kMaxListObjects));
    g_caches.batch[c] = uint32_t(std::clamp<uint64_t>(kBatchBytes / size, 1, std::min(kMaxBatch, g_caches.max[c])));
    g_caches.recent[c] = uint32_t(std::clamp<uint64_t>(kRecentBytes / size, 1, kRecentObjects));
    g_caches.magic[c] = ((uint64_t(1) << 36) + size - 1) / size;
  }
  // (a request's class: TcmallocBaseline::small_class, the heap's own read-only table)
  if (b->size_class(kMaxSize, uint32_t(kSmallAlign)) == 0) return;
  const uint64_t pages = g_state->backing.reserved_bytes() >> kPageShift;
  void* m = mmap(nullptr, pages * sizeof(uint32_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return;
  madvise(m, pages * sizeof(uint32_t), MADV_NOHUGEPAGE);  // touched sparsely: 4 KiB of it maps 8 MiB of heap
  if (pthread_key_create(&g_caches.key, thread_exit) != 0) {
    munmap(m, pages * sizeof(uint32_t));
    return;
  }
  g_caches.map = static_cast<std::atomic<uint32_t>*>(m);
  g_caches.base = g_state->backing.base();
  g_caches.reserved = g_state->backing.reserved_bytes();
  sim::span_hooks = {on_span_created, on_span_released};
  set_thread_bound();
  g_caches.clock_res_ns = policy_clock_res_ns();
  g_caches.on = true;
}


// This thread's cache, made under the lock (nullptr: none, kDead: the thread is exiting).
Cache* cache_locked() REQUIRES(heap_lock) {
  if (t_cache) return t_cache;
  const size_t n = size_t(g_caches.groups) * kClasses;
  void* m = nested_alloc(sizeof(Cache) + n * sizeof(List), 64);
  if (!m) return nullptr;
  Cache* c = new (m) Cache();
  c->lists = reinterpret_cast<List*>(c + 1);
  for (size_t i = 0; i < n; ++i) c->lists[i] = {nullptr, 0, 0, nullptr, 0, uint16_t(g_caches.recent[i % kClasses]), 0, 0};
  c->next = g_caches.all;
  if (g_caches.all) g_caches.all->prev = c;
  g_caches.all = c;
  c->scavenged_ns = g_state->last_now;
  ++g_caches.live_caches;
  set_thread_bound();
  pthread_setspecific(g_caches.key, c);  // (its destructor gives the objects back at thread exit)
  t_cache = c;
  return c;
}

// Under the lock: the policy frees the n objects of class cls at p[0..n), out of cache c.
static void free_objects(Cache* c, void* const* p, uint32_t n, uint32_t cls) REQUIRES(heap_lock) {
  bump(c->objects, -int64_t(n));
  bump(c->bytes, -int64_t(uint64_t(n) * g_caches.size[cls]));
  free_batch_locked(p, n);
  g_caches.flushed_objects += n;
}

// Under the lock: the policy frees the objects of class cls linked from p (a chain cut
// from cache c's lists), in batches.
static void free_chain(Cache* c, void* p, uint32_t cls) REQUIRES(heap_lock) {
  void* batch[64];
  while (p) {
    uint32_t k = 0;
    for (; k < 64 && p; ++k) {
      batch[k] = p;
      p = *static_cast<void**>(p);
    }
    free_objects(c, batch, k, cls);
  }
}

// Under the lock: the policy frees the n objects of the list that were freed first (its
// tail), in batches.  The oldest, not the newest: the head is what the thread reuses
// next, while an object deep in a list may sit there for good, and each such object
// keeps its span, and the span's pages, from going back (on Redis 6.2.9, selection,
// giving back from the head left ~800 spans held by a few hundred stale objects).
static void give_back(Cache* c, List& l, uint32_t cls, uint32_t n) REQUIRES(heap_lock) {
  if (n == 0 || l.count == 0) return;
  if (n > l.count) n = l.count;
  void* tail;  // the first object to go
  if (n == l.count) {
    tail = l.head;
    l.head = nullptr;
  } else {
    void* last = l.head;  // the last one kept
    for (uint32_t i = 1; i < l.count - n; ++i) last = *static_cast<void**>(last);
    tail = *static_cast<void**>(last);
    *static_cast<void**>(last) = nullptr;
  }
  l.count -= n;
  if (l.low > l.count) l.low = l.count;
  free_chain(c, tail, cls);
}

// List l of class cls goes to the lock at `now`: its reuse depth follows its traffic.
// The trips since trip_ns took less than dt plus one tick of the clock (it reads the time at
// its last tick): more of them than that span holds kHotNs is a rate known to be above one
// per kHotNs, however coarse the clock.  On a 4 ms tick, a single-interval test (dt <
// kHotNs) read trips 1.2 ms apart as 0 apart and doubled the depth of a list used 5000
// times a second (alloc_cache_reuse slow kept 70 objects of 64 B on CI, 24-54 here; 12
// with this rule).
static void trip(List& l, uint32_t cls, uint64_t now) {
  const uint64_t dt = now - l.trip_ns;
  ++l.trips;
  if (uint64_t(l.trips) * kHotNs > dt + g_caches.clock_res_ns) {
    l.depth = uint16_t(std::min<uint32_t>(g_caches.max[cls], uint32_t(l.depth) * 2));
  } else if (dt > kColdNs) {
    if (l.trips == 1) l.depth = uint16_t(std::max<uint32_t>(g_caches.recent[cls], l.depth / 2));
  } else {
    return;  // not known yet: keep counting (trips stays below (kColdNs + tick) / kHotNs)
  }
  l.trip_ns = now;
  l.trips = 0;
}

// Under the lock: the policy frees the list's free buffer, in batches.
static void give_back_freed(Cache* c, List& l, uint32_t cls) REQUIRES(heap_lock) {
  if (!l.nfreed) return;
  void* p = l.freed;
  l.freed = nullptr;
  l.nfreed = 0;
  free_chain(c, p, cls);
}

void drain_locked(Cache* c) {
  for (size_t i = 0; i < size_t(g_caches.groups) * kClasses; ++i) {
    give_back_freed(c, c->lists[i], uint32_t(i % kClasses));
    give_back(c, c->lists[i], uint32_t(i % kClasses), UINT32_MAX);
  }
}

// Every kScavengeNs of the policy's clock: three quarters of what each list never went
// below since the last time back (jemalloc's tcache GC).  An object idle in a list pins
// its span, and freed objects come from anywhere: on Redis 6.2.9 (selection) lists that
// gave half back each second held 5-9 MiB of RSS beyond the policy's own.
static void scavenge(Cache* c, uint64_t now) REQUIRES(heap_lock) {
  if (now - c->scavenged_ns < kScavengeNs) return;
  c->scavenged_ns = now;
  ++g_caches.scavenges;
  for (size_t i = 0; i < size_t(g_caches.groups) * kClasses; ++i) {
    List& l = c->lists[i];
    give_back_freed(c, l, uint32_t(i % kClasses));
    if (l.low) give_back(c, l, uint32_t(i % kClasses), l.low - l.low / 4);
    l.low = l.count;
  }
}

// A free buffer at its batch: it and every other free buffer back; all of the thread's
// lists past their bound: every free buffer and half of every list.  One lock acquisition.
// noinline: kept out of the inline fast paths (with LTO it was inlined into malloc,
// whose frame then held its batch arrays: 0x1c0 bytes of stack set up on every hit).
__attribute__((noinline)) void flush(Cache* c, List& l, uint32_t cls) EXCLUDES(heap_lock) {
  const KeepErrno keep;  // (the hit paths in malloc_entry and free_entry do not save it)
  // The free buffer's objects are read off their links before the lock is taken (each
  // link read may miss the cache: rptest_sim's flushes spent 2% of its time on them).
  void* out[kMaxBatch];
  uint32_t n = 0;
  const bool at_batch = l.nfreed >= flush_at(l, cls);
  if (at_batch && l.nfreed <= kMaxBatch) {  // (always: a free buffer goes back at <= kMaxBatch)
    t_busy = true;
    sig_fence();
    for (void* p = l.freed; p; p = *static_cast<void**>(p)) out[n++] = p;
    l.freed = nullptr;
    l.nfreed = 0;
    sig_fence();
    t_busy = false;
  }
  Inside in;
  ++g_caches.flushes;
  const uint64_t now = tick();
  if (at_batch) {
    trip(l, cls, now);
    if (n) free_objects(c, out, n, cls);
    // Every other list's free buffer goes back in the same trip, whatever it holds: its
    // objects are never reused from there, so waiting for its own batch only held them
    // (on larson_sim's two threads the free buffers held ~340 KB, a third of the caches),
    // and one trip for all of them is fewer trips than one each.
    for (size_t i = 0; i < size_t(g_caches.groups) * kClasses; ++i)
      give_back_freed(c, c->lists[i], uint32_t(i % kClasses));
  }
  if (c->bytes.load(std::memory_order_relaxed) > g_caches.thread_bytes.load(std::memory_order_relaxed))
    for (size_t i = 0; i < size_t(g_caches.groups) * kClasses; ++i) {
      give_back_freed(c, c->lists[i], uint32_t(i % kClasses));
      if (c->lists[i].count) give_back(c, c->lists[i], uint32_t(i % kClasses), (c->lists[i].count + 1) / 2);
    }
  scavenge(c, now);
}

__attribute__((noinline)) void periodic(Cache* c) EXCLUDES(heap_lock) {
  const KeepErrno keep;
  Inside in;
  const uint64_t now = tick();
  scavenge(c, now);
  after_op(now);
}

namespace {
// The pthread key's destructor (the thread exits): everything back to the policy.
void thread_exit(void* v) {
  Cache* c = static_cast<Cache*>(v);
  if (!c || c == kDead) return;
  Inside in;
  drain_locked(c);
  if (c->prev) c->prev->next = c->next;
  else g_caches.all = c->next;
  if (c->next) c->next->prev = c->prev;
  ++g_caches.exited;
  --g_caches.live_caches;
  set_thread_bound();
  g_caches.dead_hits += c->hits.load(std::memory_order_relaxed);
  g_caches.dead_misses += c->misses.load(std::memory_order_relaxed);
  c->~Cache();
  arena_free(c);
  t_cache = kDead;  // later mallocs and frees of this thread (other destructors): the locked path
}
}  // namespace

// A miss: under the lock, the object asked for and a batch of the class for the list;
// after it, the batch pushed on the list.  Pushing writes each object's link, and a
// page of the batch given back since its last use faults in there: rptest_sim's refills
// took 3.7% of its CPU time in page faults, with the other thread waiting on the lock.
__attribute__((noinline)) void* refill(uint64_t usable, size_t size, uint32_t cls, const Prediction& pred, uintptr_t ra) EXCLUDES(heap_lock) {
  const KeepErrno keep;  // (the hit paths in malloc_entry and free_entry do not save it)
  void* first;
  void* more[kMaxBatch];
  List* list[kMaxBatch];  // each object's list, from the page map (segregate-above may
                          // switch the group between `first` and the batch)
  uint32_t n = 0;
  Cache* c;
  {
    Inside in;
    c = cache_locked();
    const uint64_t now = tick();
    // The class's free buffers go back first, in this same trip: the policy places the
    // batch among them, fullest span first.
    if (c && c != kDead)
      for (unsigned g = 0; g < g_caches.groups; ++g) give_back_freed(c, c->lists[g * kClasses + cls], cls);
    first = alloc_locked(usable, size, kSmallAlign, ra, pred, now);
    if (!first || !c || c == kDead) return first;
    bump(c->misses, 1);
    ++g_caches.refills;
    // The batch follows the list's traffic as its reuse depth does (trip, refill_at): a
    // list that goes to the lock more often than once per kHotNs takes more, one that does
    // not, no more than its depth.  Every object of a batch is written (the list's link) and so made resident: a
    // process that mallocs a few objects of many classes (an idle one: sleep) held 188 KiB of
    // heap, as 16 KiB batches of each class it touched, where glibc's held 16 KiB.
    uint32_t want = g_caches.batch[cls];
    {
      unsigned g = 0;
      if (class_at(first, g)) {
        List& l = c->lists[g * kClasses + cls];
        trip(l, cls, now);
        want = refill_at(l);
      }
    }
    scavenge(c, now);
    const uint32_t got = want > 1 ? alloc_batch_locked(usable, ra, pred, now, want - 1, more) : 0;
    for (uint32_t i = 0; i < got; ++i) {
      unsigned g = 0;
      const uint32_t k = class_at(more[i], g);
      if (!k) {  // (cannot happen: the policy placed it in a span of its class)
        free_batch_locked(&more[i], 1);
        continue;
      }
      more[n] = more[i];
      list[n++] = &c->lists[g * kClasses + k];
    }
    g_caches.refill_objects += n;
  }
  // Pushed last first, so that the list hands the batch out in the order the policy gave
  // it (from a span: ascending addresses, as a program's consecutive mallocs get them from
  // glibc; popped first-pushed-last they came out descending, 16 objects at a time, and
  // CPython's GC walking a tee's chain of 20 M items took twice glibc's time).
  t_busy = true;
  sig_fence();
  for (uint32_t i = n; i-- > 0;) push(c, *list[i], more[i], uint32_t(list[i] - c->lists) % kClasses);
  sig_fence();
  t_busy = false;
  return first;
}


void collect_stats() {
  ThreadCacheStats& t = g_state->tc;
  t = ThreadCacheStats();
  t.on = g_caches.on;
  t.exited = g_caches.exited;
  t.hits = g_caches.dead_hits;
  t.misses = g_caches.dead_misses;
  for (Cache* c = g_caches.all; c; c = c->next) {
    ++t.caches;
    t.objects += c->objects.load(std::memory_order_relaxed);
    t.bytes += c->bytes.load(std::memory_order_relaxed);
    t.hits += c->hits.load(std::memory_order_relaxed);
    t.misses += c->misses.load(std::memory_order_relaxed);
  }
  t.refills = g_caches.refills;
  t.refill_objects = g_caches.refill_objects;
  t.flushes = g_caches.flushes;
  t.flushed_objects = g_caches.flushed_objects;
  t.scavenges = g_caches.scavenges;
}

}  // namespace tc
}  // namespace lalloc
