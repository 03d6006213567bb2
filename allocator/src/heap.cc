// The allocator proper (heap.h): the policy heap's state and the locked path (init, the
// policy's clock, slots, one object in and out), and the C API's entry points, which
// route each request: a thread cache (thread_cache.cc), the policy, or its own mapping
// (direct.cc).
#include "heap.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "baseline.h"
#include "heap_internal.h"
#include "attribution.h"
#include "internal_arena.h"
#include "llama.h"
#include "policy_heap.h"
#include "segregated.h"
#include "thread_cache.h"

namespace lalloc {

// A thread that finds it taken spins up to a few microseconds before it sleeps (lock.h:
// the critical sections are a refill or a flush, microseconds; a futex sleep and wake
// costs more).
Mutex heap_lock{};

__thread bool t_inside __attribute__((tls_model("initial-exec"))) = false;
__thread bool t_locked __attribute__((tls_model("initial-exec"))) = false;
__thread bool t_arena __attribute__((tls_model("initial-exec"))) = false;

State* g_state GUARDED_BY(heap_lock) = nullptr;
std::atomic<State*> g_built{nullptr};
std::atomic<uint32_t> g_policy_small_pad{8192};

namespace {

constexpr unsigned kDeadlineK = 2;                    // the engine's default

// The thread's number for the policy (AllocRequest::thread_id), from 1.
__thread uint32_t t_thread __attribute__((tls_model("initial-exec"))) = 0;

alignas(State) char g_mem[sizeof(State)];

uint64_t clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The policy's clock.  Its deadlines are lifetime classes of >= 10 ms (the first bound;
// the rest are 100 ms .. 1000 s), so a resolution of a few ms is enough: the coarse
// monotonic clock (the kernel's tick, 1-4 ms; a vDSO read of one variable, ~5 ns on the
// 2-core box against ~23 ns for CLOCK_MONOTONIC, which the policy read twice per pair).
uint64_t policy_clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The policy calls these (sim::huge_page_hooks, sim::span_hooks) under the lock.
void on_taken(uint64_t first, uint64_t n) REQUIRES(heap_lock) { g_state->backing.taken(first, n); }
void on_released(uint64_t first, uint64_t n) REQUIRES(heap_lock) { g_state->backing.released(first, n); }
void on_subreleased(uint64_t id, uint64_t offset, uint64_t bytes) REQUIRES(heap_lock) {
  g_state->backing.subreleased(id, offset, bytes);
}
void on_dense(uint64_t id) REQUIRES(heap_lock) { g_state->backing.dense(id); }
bool on_whole(uint64_t id) REQUIRES(heap_lock) { return g_state->backing.whole(id); }

bool grouped(const sim::LlamaPolicy& p) {
  return p.size_classes || p.size_classes_from || p.divert_mixed || p.segregate_above_bytes;
}

// The heaps of the policy (sim::make_policy_heap's rule): LLAMA's alone; a size-class heap
// per group of classes; or LLAMA's and one size-class heap.  Group g's ids start at
// g << SegregatedHeap::kIdShift; an id of a heap past these would fail its allocation.
unsigned heap_count(const sim::LlamaPolicy& p, int num_classes) {
  if (!grouped(p)) return 1;
  if (!p.size_classes) return 2;
  const std::vector<unsigned> g = p.size_class_groups(num_classes);
  return std::min<unsigned>(g.empty() ? 1 : g.back() + 1, sim::SegregatedHeap::kMaxGroups);
}

uint32_t thread_id() REQUIRES(heap_lock) {
  if (!t_thread) t_thread = uint32_t(++g_state->c.threads);
  return t_thread;
}

// The slot of the live object starting at p (inside the reservation), or kNoSlot.
void set_slot(uintptr_t p, uint32_t slot) REQUIRES(heap_lock) {
  if (g_state->backing.has_table()) g_state->backing.set_slot(p, slot);
}

uint32_t take_slot() REQUIRES(heap_lock) {
  if (g_state->slots.count() >= UINT32_MAX - 1) fatal("more than 2^32-2 live objects");
  return g_state->slots.take();
}

// After a fall in live objects the survivors' ids may stay spread up to the peak: every
// kEvery frees, when the highest id is well above the live count, up to kMoves of the
// highest live objects take the lowest free ids (the policy's move_slot, our object
// table's entry), a few per free on average; then the policy's per-slot records give
// back their tail (trim).  The objects stay where they are.
void compact_slots() REQUIRES(heap_lock) {
  constexpr uint64_t kEvery = 1024, kMoves = 1024;
  if (++g_state->frees_since_trim < kEvery) return;
  g_state->frees_since_trim = 0;
  const uint64_t live = g_state->slots.count();
  uint64_t end = g_state->slots.end();
  for (uint64_t n = 0; n < kMoves && end > live + live / 8 + 4096; ++n) {
    const uint32_t from = uint32_t(end - 1), to = g_state->slots.take();  // the highest live, the lowest free
    if (to >= from) {
      g_state->slots.release(to);
      break;
    }
    const auto [a, usable] = g_state->policy->where(from);
    guarded("policy: ", [&]() REQUIRES(heap_lock) { g_state->policy->move_slot(from, to); });
    set_slot(g_state->backing.real(a), to);
    if (g_state->cfg.check_every)
      guarded("LIFETIME_ALLOC_CHECK: ", [&, a = a]() REQUIRES(heap_lock) {
        g_state->shadow.on_free("lifetime_alloc", a, from);
        g_state->shadow.on_alloc("lifetime_alloc", a, g_state->policy->asked_size(to), to);
      });
    g_state->slots.release(from);
    end = g_state->slots.end();
  }
  guarded("policy: ", [&]() REQUIRES(heap_lock) { g_state->policy->trim(uint32_t(end)); });
}

}  // namespace

uint64_t policy_clock_res_ns() {
  timespec ts;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0) return 10000000;  // (HZ=100's tick)
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint32_t slot_of(uintptr_t p) { return g_state->backing.slot_at(p); }

void init() REQUIRES(heap_lock) {
  g_state = new (g_mem) State();
  g_state->cfg = read_config();
  // The served model's classes (its plugin's lifetime_labels section), or the project's
  // defaults (core/lifetimes.py, heap/src/classes.h) for constant:C: the deadlines follow.
  g_state->classes.bounds_ns = predictor_class_bounds_ns();
  const bool baseline = g_state->cfg.policy == "baseline";
  sim::LlamaPolicy pol;
  if (!baseline) {
    try {
      pol = sim::parse_llama_policy(g_state->cfg.policy, "LIFETIME_ALLOC_POLICY");
    } catch (const std::exception& e) {
      fatal(e.what(), " (or baseline)");
    }
  }
  // The size-class heaps give a span of 256 pages fresh ids (heap_internal.h: fits_policy).
  g_policy_small_pad.store(!baseline && !grouped(pol) ? 0 : 8192, std::memory_order_relaxed);
  g_state->predictor = make_predictor(g_state->cfg.predictor, g_state->classes.num_classes(), g_state->cfg.revalidate_every);
  sim::subrelease_rule = {g_state->cfg.subrelease_interval_ns, g_state->cfg.subrelease_windows,
                         g_state->cfg.subrelease_min_windows, g_state->cfg.idle_places};
  guarded("policy: ", [&]() REQUIRES(heap_lock) {
    if (baseline) g_state->policy = std::make_unique<sim::TcmallocBaseline>("baseline");
    else g_state->policy = sim::make_policy_heap("llama", g_state->classes, pol, kDeadlineK, false);
  });
  // The size-class heaps know objects by address (address mode: no slot, no table);
  // LLAMA's heap by slot, through the object table (4 B per 16 B of committed heap).
  g_state->addr_mode = g_state->policy->enable_address_mode();
  // The reservation, once the policy says whether it needs the table (no id is taken
  // before its first allocation): a heap per heap of the policy.
  g_state->backing.init(baseline ? 1 : heap_count(pol, g_state->classes.num_classes()), g_state->cfg.reserve_bytes,
                        !g_state->addr_mode || !g_state->cfg.attribute_dir.empty());
  attr::setup(g_state->cfg, g_state->addr_mode, g_state->backing);
  g_state->backing.set_release_delay(g_state->cfg.release_keep_pages, g_state->cfg.release_delay_ns);
  g_state->backing.set_huge_from((g_state->cfg.huge_from_bytes + Backing::kHuge - 1) / Backing::kHuge);
  g_state->backing.set_collapse(g_state->cfg.huge_collapse);
  g_state->backing.set_growth((g_state->cfg.huge_growth_bytes + Backing::kHuge - 1) / Backing::kHuge);
  sim::huge_page_hooks = {on_taken, on_released, on_subreleased, on_dense, on_whole};
  tc::setup(g_state->addr_mode);  // before any span is made
  g_state->policy_name = baseline ? "baseline" : pol.describe();
  g_state->start_ns = g_state->last_now = policy_clock_ns();  // (the stats' uptime: coarse <= precise)
  g_state->backing.set_now(g_state->last_now);
  if (g_state->cfg.stats_interval_ns) g_state->next_stats_ns = g_state->start_ns + g_state->cfg.stats_interval_ns;
  g_built.store(g_state, std::memory_order_release);
}

// Frees a signal handler deferred (reentry.h), under the lock.
void drain_deferred() REQUIRES(heap_lock) {
  for (void* p = reentry::take_deferred(); p;) {
    void* next = *static_cast<void**>(p);
    free_locked(p);
    p = next;
  }
}

// Time for the policy (deadlines): monotone across threads, since it is read under the
// lock.  The policy is advanced only when the coarse clock has moved: every deadline it
// set since was set after the last advance, at that time plus >= 10 ms, so none is due.
uint64_t tick() REQUIRES(heap_lock) {
  const uint64_t now = policy_clock_ns();
  if (__builtin_expect(now <= g_state->last_now, 1)) return g_state->last_now;
  g_state->last_now = now;
  g_state->backing.set_now(now);  // held pages whose delay is over go back
  guarded("policy: ", [&]() REQUIRES(heap_lock) { g_state->policy->advance(now); });
  return now;
}

void after_op(uint64_t now) REQUIRES(heap_lock) {
  tc::note_live_bytes(g_state->c.live_requested);
  g_state->c.peak_huge_pages = std::max(g_state->c.peak_huge_pages, g_state->policy->live_huge_pages());
  if (g_state->cfg.check_every && ++g_state->ops_since_check >= g_state->cfg.check_every) {
    g_state->ops_since_check = 0;
    full_check();
  }
  if (g_state->next_stats_ns && now >= g_state->next_stats_ns) {
    g_state->next_stats_ns = now + g_state->cfg.stats_interval_ns;
    ++g_state->c.stats_writes;
    tc::collect_stats();
    write_stats(*g_state, now);
  }
  attr::maybe_dump(now);
}

State* built() EXCLUDES(heap_lock) {
  State* s = g_built.load(std::memory_order_acquire);
  if (__builtin_expect(!s, 0)) {
    Inside in;  // builds it
    s = g_state;
  }
  return s;
}

// The counters of allocation and free, one place for the single and the batch paths.
static void count_predicted(const Prediction& pred, uint64_t n) REQUIRES(heap_lock) {
  Counters& c = g_state->c;
  c.by_source[size_t(pred.source)] += n;
  c.class_allocs[size_t(pred.cls) < Counters::kMaxClasses ? pred.cls : Counters::kMaxClasses - 1] += n;
}
// n objects placed, each `usable` bytes asked of the policy and `placed` placed;
// `requested`: the program's sizes, all of them.
static void count_placed(uint64_t n, uint64_t usable, uint64_t placed, uint64_t requested) REQUIRES(heap_lock) {
  Counters& c = g_state->c;
  c.allocs += n;
  c.live_objects += n;
  c.peak_objects = std::max(c.peak_objects, c.live_objects);
  c.live_requested += n * usable;
  c.peak_requested = std::max(c.peak_requested, c.live_requested);
  c.total_requested += requested;
  c.live_usable += n * placed;
}
static void count_freed(uint64_t usable, uint64_t placed) REQUIRES(heap_lock) {
  Counters& c = g_state->c;
  ++c.frees;
  --c.live_objects;
  c.live_requested -= usable;
  c.live_usable -= placed;
}

// size: the program's request (0 for the extra objects of a thread cache's batch), usable: asked of
// the policy.
void* alloc_locked(uint64_t usable, size_t size, size_t align, uintptr_t ra, const Prediction& pred, uint64_t now)
    REQUIRES(heap_lock) {
  const uint32_t slot = g_state->addr_mode ? 0 : take_slot();
  count_predicted(pred, 1);
  const sim::AllocRequest q{slot, usable, uint32_t(align), thread_id(), pred.cls, now, ra};
  uint64_t a = 0;
  g_state->backing.clear_overflow();
  guarded("policy: ", [&]() REQUIRES(heap_lock) { a = g_state->policy->alloc(q); });
  const uintptr_t p = g_state->backing.real(a);
  if (g_state->backing.overflowed() || !p || !g_state->backing.real(a + usable - 1)) {
    // Past the reservation: give the object back and fail (ENOMEM).
    guarded("policy: ", [&]() REQUIRES(heap_lock) {
      if (g_state->addr_mode) g_state->policy->free_at(a, now);
      else g_state->policy->free(slot, now);
    });
    if (!g_state->addr_mode) g_state->slots.release(slot);
    ++g_state->c.failed_allocs;
    return nullptr;
  }
  // Usable: what the policy placed (the size-class heaps round up to their class).
  const uint64_t placed = g_state->addr_mode ? g_state->policy->placed_size(usable, uint32_t(align))
                                             : g_state->policy->where(slot).second;
  if (g_state->addr_mode) usable = placed;  // (the size asked is not kept: placed bytes)
  set_slot(p, slot);
  count_placed(1, usable, placed, size);
  if (g_state->cfg.check_every) {
    guarded("LIFETIME_ALLOC_CHECK: ",
            [&]() REQUIRES(heap_lock) { g_state->shadow.on_alloc("lifetime_alloc", a, usable, slot); });
    if (g_state->cfg.check_every == 1) check_pages(a, usable);  // per page: costs the page's objects
  }
  after_op(now);
  return reinterpret_cast<void*>(p);
}

static void* policy_alloc(size_t size, size_t align, uintptr_t ra) EXCLUDES(heap_lock) {
  const uint64_t usable = asked(size);
  // Predict first, then lock: the model (a miss: stack, symbols, the network) runs
  // while other threads allocate.
  const Prediction pred = built()->predictor->predict({size, uint32_t(align), ra});
  Inside in;
  return alloc_locked(usable, size, align, ra, pred, tick());
}

// Inside the allocator: the metadata arena when this thread holds the lock and is not in
// the arena already (the policy's containers; or a signal handler that interrupted the
// policy: the arena is idle), else the signal handler's lock-free arena (reentry.h).
void* nested_alloc(size_t size, size_t align) {
  if (t_locked && !t_arena) {
    heap_lock.assert_held();  // t_locked: this thread holds it (a nested request)
    t_arena = true;
    sig_fence();
    void* p = arena::alloc(size, align);
    sig_fence();
    t_arena = false;
    return p;
  }
  return reentry::alloc(size, align);
}

void arena_free(void* p) REQUIRES(heap_lock) {
  t_arena = true;
  sig_fence();
  arena::free(p);
  sig_fence();
  t_arena = false;
}

static void* allocate_unrecorded(size_t size, size_t align, uintptr_t ra) {
  if (align < kSmallAlign) align = kSmallAlign;
  if (t_inside) return nested_alloc(size, align);
  if (size > kMaxRequest || align > kMaxRequest) return nullptr;
  if (!fits_policy(size, align)) return direct_alloc(size, align);
  if (align == kSmallAlign && size <= tc::kMaxSize && !tc::t_busy) {
    State* s = built();
    if (tc::g_caches.on) return tc::cached_alloc(s, size, ra);
  }
  return policy_alloc(size, align, ra);
}

void* allocate(size_t size, size_t align, uintptr_t ra) {
  void* p = allocate_unrecorded(size, align, ra);
  if (!t_inside) attr::note_alloc(p, ra);
  return p;
}

void* allocate_zeroed(size_t size, uintptr_t ra) {
  void* p = allocate(size, kSmallAlign, ra);
  // Policy memory is reused; a direct mapping is fresh from the kernel (zero).
  // (the reentry arena is fresh too, but a memset is cheap there)
  if (p && (t_inside || fits_policy(size, kSmallAlign))) std::memset(p, 0, size);
  return p;
}

void deallocate(void* p) {
  if (!p) return;
  if (reentry::owns(p)) return reentry::free(p);
  if (t_inside) {
    // The policy never frees a program's pointer: this is a signal handler's free that
    // interrupted this thread inside the allocator.  The arena's own blocks are freed now
    // when that is safe; anything else is freed by the next thread to take the lock.
    if (arena::owns(p) && t_locked && !t_arena) {
      heap_lock.assert_held();  // t_locked: this thread holds it
      return arena_free(p);
    }
    return reentry::defer(p);
  }
  attr::note_free(p);
  if (!tc::t_busy && tc::on() && tc::cached_free(p)) return;
  Inside in;
  free_locked(p);
}

void* malloc_entry(size_t size, uintptr_t ra) {
  // A live cache means the heap is built and the caches on (tc::cache_locked).
  if (__builtin_expect(tc::t_cache > tc::kDead && size <= tc::kMaxSize && !t_inside && !tc::t_busy, 1)) {
    void* p = tc::cached_alloc(built(), size, ra);  // (a miss's refill keeps errno)
    if (__builtin_expect(!p, 0)) errno = ENOMEM;
    attr::note_alloc(p, ra);
    return p;
  }
  const int saved = errno;
  void* p = allocate(size, kSmallAlign, ra);
  errno = p ? saved : ENOMEM;
  return p;
}

void free_entry(void* p) {
  if (!p) return;
  if (__builtin_expect(tc::t_cache > tc::kDead && !t_inside && !tc::t_busy, 1) && !reentry::owns(p)) {
    attr::note_free(p);
    if (tc::cached_free(p)) return;  // (a flush keeps errno)
  }
  const int saved = errno;
  deallocate(p);
  errno = saved;
}

// Address mode: the program's object at real address key goes back to the policy.
static void free_at_locked(uintptr_t key, uint64_t now) REQUIRES(heap_lock) {
  const uint64_t a = g_state->backing.abstract(key);
  uint64_t placed = 0;
  if (key % 16 == 0) guarded("policy: ", [&]() REQUIRES(heap_lock) { placed = g_state->policy->free_at(a, now); });
  if (!placed) fatal("free(): invalid pointer or double free");
  if (g_state->cfg.check_every) {
    guarded("LIFETIME_ALLOC_CHECK: ", [&]() REQUIRES(heap_lock) { g_state->shadow.on_free("lifetime_alloc", a, 0); });
    if (g_state->cfg.check_every == 1) check_pages(a, placed);
  }
  count_freed(placed, placed);
}

void free_batch_locked(void* const* p, uint32_t n) {
  const uint64_t now = tick();
  if (g_state->cfg.check_every) {  // the checker looks at each object as it goes
    for (uint32_t i = 0; i < n; ++i) free_at_locked(reinterpret_cast<uintptr_t>(p[i]), now);
    after_op(now);
    return;
  }
  // The policy frees them together (free_batch_at: it fetches ahead).
  constexpr uint32_t kChunk = 64;
  uint64_t a[kChunk], placed[kChunk];
  for (uint32_t done = 0; done < n;) {
    const uint32_t k = std::min(n - done, kChunk);
    for (uint32_t i = 0; i < k; ++i) {
      const uintptr_t key = reinterpret_cast<uintptr_t>(p[done + i]);
      if (key % 16) fatal("free(): invalid pointer or double free");
      a[i] = g_state->backing.abstract(key);
    }
    guarded("policy: ", [&]() REQUIRES(heap_lock) { g_state->policy->free_batch_at(a, k, now, placed); });
    for (uint32_t i = 0; i < k; ++i) {
      if (!placed[i]) fatal("free(): invalid pointer or double free");
      count_freed(placed[i], placed[i]);
    }
    done += k;
  }
  after_op(now);
}

uint32_t alloc_batch_locked(uint64_t usable, uintptr_t ra, const Prediction& pred, uint64_t now, uint32_t n,
                            void** out) {
  uint64_t a[tc::kMaxBatch];
  n = std::min<uint32_t>(n, tc::kMaxBatch);
  const sim::AllocRequest q{0, usable, uint32_t(kSmallAlign), thread_id(), pred.cls, now, ra};
  uint32_t got = 0;
  g_state->backing.clear_overflow();
  guarded("policy: ", [&]() REQUIRES(heap_lock) { got = g_state->policy->alloc_batch(q, n, a); });
  const uint64_t placed = g_state->policy->placed_size(usable, uint32_t(kSmallAlign));
  const bool over = g_state->backing.overflowed();
  uint32_t ok = 0;
  for (uint32_t i = 0; i < got; ++i) {
    const uintptr_t p = g_state->backing.real(a[i]);
    if (over || !p || !g_state->backing.real(a[i] + placed - 1)) {  // past the reservation: back
      guarded("policy: ", [&]() REQUIRES(heap_lock) { g_state->policy->free_at(a[i], now); });
      continue;
    }
    if (g_state->cfg.check_every)
      guarded("LIFETIME_ALLOC_CHECK: ",
              [&]() REQUIRES(heap_lock) { g_state->shadow.on_alloc("lifetime_alloc", a[i], placed, 0); });
    out[ok++] = reinterpret_cast<void*>(p);
  }
  count_predicted(pred, ok);
  count_placed(ok, placed, placed, 0);
  if (got > ok) g_state->c.failed_allocs += got - ok;
  after_op(now);
  return ok;
}

void free_locked(void* p) {
  if (arena::owns(p)) return arena_free(p);
  const uintptr_t key = reinterpret_cast<uintptr_t>(p);
  Counters& c = g_state->c;
  if (g_state->backing.contains(p) && g_state->addr_mode) {
    const uint64_t now = tick();
    free_at_locked(key, now);
    after_op(now);
    return;
  }
  if (g_state->backing.contains(p)) {
    const uint32_t slot = slot_of(key);
    if (slot == Backing::kNoSlot) fatal("free(): invalid pointer or double free");
    if (g_state->backing.has_table()) g_state->backing.clear_slot(key);
    const uint64_t now = tick();
    const auto [a, placed] = g_state->policy->where(slot);
    const uint64_t requested = g_state->policy->asked_size(slot);
    if (g_state->cfg.check_every)
      guarded("LIFETIME_ALLOC_CHECK: ", [&, a = a]() REQUIRES(heap_lock) { g_state->shadow.on_free("lifetime_alloc", a, slot); });
    guarded("policy: ", [&]() REQUIRES(heap_lock) { g_state->policy->free(slot, now); });
    if (g_state->cfg.check_every == 1) check_pages(a, requested);
    count_freed(requested, placed);
    g_state->slots.release(slot);
    compact_slots();
    after_op(now);
    return;
  }
  if (direct_free(key)) return;
  ++c.foreign_frees;  // memory from before the preload (the dynamic loader's own): leave it
}

size_t usable_size(const void* p) {
  if (!p) return 0;
  if (reentry::owns(p)) return reentry::usable(p);
  if (arena::owns(p)) return arena::usable(p);
  if (t_inside) return 0;
  if (tc::on()) {
    unsigned g;
    if (const uint32_t cls = tc::class_at(p, g)) return tc::g_caches.size[cls];
  }
  Inside in;
  const uintptr_t key = reinterpret_cast<uintptr_t>(p);
  if (g_state->backing.contains(p)) {
    if (g_state->addr_mode) return key % 16 ? 0 : g_state->policy->usable_at(g_state->backing.abstract(key));
    const uint32_t slot = slot_of(key);
    return slot == Backing::kNoSlot ? 0 : g_state->policy->where(slot).second;
  }
  return direct_usable(key);
}

void* reallocate(void* p, size_t size, uintptr_t ra) {
  if (!p) return allocate(size, kSmallAlign, ra);
  const size_t old = usable_size(p);
  if (old == 0 && t_inside) fatal("realloc() of a program's pointer from a signal handler that interrupted the allocator");
  if (old == 0) fatal("realloc(): invalid pointer");
  // Keep the block when the new size fits and wastes at most half of it; a direct mapping
  // gives back its whole pages past the new size, as glibc's mremap does (programs that
  // account memory by malloc_usable_size, Redis's used_memory, see a shrink).
  if (size <= old && size >= old / 2) {
    if (old > Backing::kHuge && !t_inside) shrink_direct(p, size);
    return p;
  }
  if (size > old && old > Backing::kHuge && !t_inside)
    if (void* m = grow_direct(p, size)) return m;
  void* q = allocate(size, kSmallAlign, ra);
  if (!q) return nullptr;
  std::memcpy(q, p, std::min(old, size));
  deallocate(p);
  return q;
}

void start_predictor() {
  // Outside the lock: loading a model dlopens (and the loader mallocs).
  built()->predictor->start();
  attr::start();
}

void write_final_stats() {
  // A process that never allocated still reports (an all-zero heap).
  // (g_built, not g_state: g_state is the lock's, and this reads it before taking it)
  if (t_inside || (!g_built.load(std::memory_order_acquire) && !std::getenv("LIFETIME_ALLOC_STATS"))) return;
  Inside in;
  attr::dump_final(tick());
  if (g_state->cfg.stats_path.empty()) return;
  tc::collect_stats();
  write_stats(*g_state, clock_ns());
}

}  // namespace lalloc
