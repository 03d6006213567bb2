#include "heap.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "baseline.h"
#include "fatal.h"
#include "internal_arena.h"
#include "llama.h"
#include "policy_heap.h"
#include "reentry.h"
#include "segregated.h"
#include "state.h"

namespace lalloc {

Mutex heap_lock{PTHREAD_MUTEX_INITIALIZER};

namespace {

constexpr uint64_t kSmallAlign = 16;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxRequest = uint64_t(1) << 46;  // the trace format's limit (16 TiB) x 4
constexpr unsigned kDeadlineK = 2;                    // the engine's default
constexpr uint64_t kMs = 1000000;

// initial-exec: reading them never calls __tls_get_addr (which may malloc).
// t_inside: from before this thread takes the lock (heap_lock) until after it lets it go;
// t_locked: while it holds it (heap_lock.assert_held() where the code relies on that);
// t_arena: while it is inside the metadata arena.  A request that finds t_inside set is
// either the policy's own containers (t_locked, the arena idle) or a signal handler that
// interrupted this thread (reentry.h says how each case is served).
__thread bool t_inside __attribute__((tls_model("initial-exec"))) = false;
__thread bool t_locked __attribute__((tls_model("initial-exec"))) = false;
__thread bool t_arena __attribute__((tls_model("initial-exec"))) = false;
__thread uint32_t t_thread __attribute__((tls_model("initial-exec"))) = 0;
// The flags are read by signal handlers on the same thread: compiler barriers keep their
// stores where the code puts them (no CPU fence is needed within one thread).
inline void sig_fence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

alignas(State) char g_mem[sizeof(State)];
State* S GUARDED_BY(heap_lock) = nullptr;
// S once built (release, after init): read without the lock by the prediction, which
// runs before the lock is taken.
std::atomic<State*> g_built{nullptr};

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
void on_taken(uint64_t first, uint64_t n) REQUIRES(heap_lock) { S->backing.taken(first, n); }
void on_released(uint64_t first, uint64_t n) REQUIRES(heap_lock) { S->backing.released(first, n); }

// ---------------------------------------------------------------- thread caches (state)
//
// Per thread, per (heap group, size class) of the size-class heaps: a LIFO of freed
// objects (linked through their first word), served to the thread's next mallocs of that
// group and class without the lock.  Objects in a cache stay live to the policy (their
// slot, their span); it sees their free when a list passes its bound (half of it goes
// back under one lock acquisition), when the thread's caches pass kThreadBytes (half of
// every list), and at thread exit (all; a pthread key's destructor).  free,
// malloc_usable_size and realloc find an object's group and class in the page map, a
// uint32 per 8 KiB page of the reservation written under the lock when the policy creates
// a span (sim::span_hooks) and cleared when it releases it: [class:8 | group:8 | page in
// span:16], 0 for pages of no small-object span (those take the locked path).
namespace tc {

constexpr unsigned kClasses = 128;  // the baseline's 96 classes (+ [0]) fit
constexpr uint64_t kMaxSize = sim::TcmallocBaseline::kMaxSmall;
constexpr uint64_t kPageShift = 13;  // the baseline's 8 KiB pages
static_assert((uint64_t(1) << kPageShift) == sim::TcmallocBaseline::kPageBytes);
constexpr uint64_t kListBytes = 64 << 10;     // a list's bound: this many bytes ...
constexpr uint32_t kMaxListObjects = 128;     // ... or objects, whichever is fewer (>= 1)
constexpr uint64_t kThreadBytes = 256 << 10;    // all of a thread's lists
constexpr uint64_t kBatchBytes = 16 << 10;    // a miss takes this many bytes ...
constexpr uint32_t kMaxBatch = 32;            // ... or objects from the policy (>= 1)

struct List {
  void* head;
  uint32_t count;
};
struct Cache {
  // Written by the owner thread only (load + store, no atomic read-modify-write), read by
  // the stats under the lock.
  std::atomic<uint64_t> objects{0}, bytes{0}, hits{0}, misses{0};
  Cache* prev GUARDED_BY(heap_lock) = nullptr;  // every live thread's cache
  Cache* next GUARDED_BY(heap_lock) = nullptr;
  List* lists = nullptr;                   // [group * kClasses + class]
};
inline void bump(std::atomic<uint64_t>& a, int64_t d) {
  a.store(a.load(std::memory_order_relaxed) + uint64_t(d), std::memory_order_relaxed);
}
Cache* const kDead = reinterpret_cast<Cache*>(uintptr_t(1));  // the thread's cache is gone (exit)

// Zero-initialized (no constructor: the first malloc may come before the library's
// static initializers run); filled by setup() under the lock at init, before g_built's
// release, and read-only after (but the fields guarded by the lock).
struct Global {
  bool on;                          // written in init, before g_built's release
  std::atomic<bool> segregating;    // segregate-above: the live bytes reached it
  unsigned groups, shared;
  uint64_t seg_above;
  const unsigned* group_of;         // by predicted class (nullptr: the baseline, one heap)
  uint8_t class_by_16[kMaxSize / 16 + 1];  // the class of a request of 16 x i bytes (align 16)
  uint32_t size[kClasses], objs[kClasses], max[kClasses], batch[kClasses];
  uint64_t magic[kClasses];  // (offset * magic) >> 36 == offset / size for a multiple
  std::atomic<uint32_t>* map;
  uintptr_t base;
  uint64_t reserved;  // the reservation's bytes from base (Backing::reserved_bytes)
  pthread_key_t key;
  Cache* all GUARDED_BY(heap_lock);
  uint64_t exited GUARDED_BY(heap_lock), dead_hits GUARDED_BY(heap_lock), dead_misses GUARDED_BY(heap_lock);
  uint64_t refills GUARDED_BY(heap_lock), refill_objects GUARDED_BY(heap_lock), flushes GUARDED_BY(heap_lock),
      flushed_objects GUARDED_BY(heap_lock);
};
Global G;
__thread Cache* t_cache __attribute__((tls_model("initial-exec"))) = nullptr;
// While this thread is in the cache's lock-free code: a signal handler's malloc or free
// that interrupts it takes the locked path (the lists are mid-update).
__thread bool t_busy __attribute__((tls_model("initial-exec"))) = false;

void on_span_created(uint64_t addr, uint32_t npages, uint32_t cls) REQUIRES(heap_lock) {
  const uintptr_t p = S->backing.real(addr);
  if (!p || cls >= kClasses) return;  // past the reservation: the allocation fails
  const unsigned g = unsigned((addr / Backing::kHuge) >> sim::SegregatedHeap::kIdShift);
  const uint64_t first = (p - G.base) >> kPageShift;
  for (uint32_t i = 0; i < npages; ++i)
    G.map[first + i].store(cls | g << 8 | i << 16, std::memory_order_relaxed);
}
void on_span_released(uint64_t addr, uint32_t npages) REQUIRES(heap_lock) {
  const uintptr_t p = S->backing.real(addr);
  if (!p) return;
  const uint64_t first = (p - G.base) >> kPageShift;
  for (uint32_t i = 0; i < npages; ++i) G.map[first + i].store(0, std::memory_order_relaxed);
}

void thread_exit(void* v) EXCLUDES(heap_lock);

// At init, under the lock: on for a policy of size-class heaps only (LLAMA's lines must
// see every free), with the checker off (its shadow heap must see every free).
void setup(bool slot_mapped) REQUIRES(heap_lock) {
  G.groups = 1;
  if (!S->cfg.thread_cache || S->cfg.check_every || !slot_mapped) return;
  const sim::TcmallocBaseline* b = dynamic_cast<const sim::TcmallocBaseline*>(S->policy.get());
  if (auto* seg = dynamic_cast<const sim::SegregatedHeap*>(S->policy.get())) {
    b = dynamic_cast<const sim::TcmallocBaseline*>(&seg->heap(0));
    G.group_of = seg->group_of().data();
    G.groups = 1;
    for (unsigned g : seg->group_of()) G.groups = std::max(G.groups, g + 1);
    G.seg_above = seg->segregate_above_bytes();
    G.shared = seg->shared_heap();
    G.groups = std::max(G.groups, G.shared + 1);
  }
  if (!b || b->size_classes().size() > kClasses) return;
  const auto& classes = b->size_classes();
  for (size_t c = 1; c < classes.size(); ++c) {
    const uint32_t size = classes[c].size;
    G.size[c] = size;
    G.objs[c] = classes[c].objs;
    G.max[c] = uint32_t(std::clamp<uint64_t>(kListBytes / size, 1, kMaxListObjects));
    G.batch[c] = uint32_t(std::clamp<uint64_t>(kBatchBytes / size, 1, std::min(kMaxBatch, G.max[c])));
    G.magic[c] = ((uint64_t(1) << 36) + size - 1) / size;
  }
  for (uint64_t i = 1; i <= kMaxSize / 16; ++i) {
    const uint32_t c = b->size_class(i * 16, uint32_t(kSmallAlign));
    if (c == 0 || c >= classes.size()) return;
    G.class_by_16[i] = uint8_t(c);
  }
  G.class_by_16[0] = G.class_by_16[1];
  const uint64_t pages = S->backing.reserved_bytes() >> kPageShift;
  void* m = mmap(nullptr, pages * sizeof(uint32_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return;
  madvise(m, pages * sizeof(uint32_t), MADV_NOHUGEPAGE);  // touched sparsely: 4 KiB of it maps 8 MiB of heap
  if (pthread_key_create(&G.key, thread_exit) != 0) {
    munmap(m, pages * sizeof(uint32_t));
    return;
  }
  G.map = static_cast<std::atomic<uint32_t>*>(m);
  G.base = S->backing.base();
  G.reserved = S->backing.reserved_bytes();
  sim::span_hooks = {on_span_created, on_span_released};
  G.on = true;
}

}  // namespace tc

// The slot of the live object starting at p (inside the reservation), or kNoSlot.
uint32_t slot_of(uintptr_t p) REQUIRES(heap_lock) {
  if (S->backing.has_table()) return S->backing.slot_at(p);
  return p % 16 ? Backing::kNoSlot : S->policy->slot_at(S->backing.abstract(p));
}
void set_slot(uintptr_t p, uint32_t slot) REQUIRES(heap_lock) {
  if (S->backing.has_table()) S->backing.set_slot(p, slot);
}

// Runs f; any exception out of the policy or the checker is fatal with its message (the
// heap may be half-updated: no way to go on).  Under the lock, as f is (the analysis
// checks a lambda's body apart: each says REQUIRES(heap_lock)).
template <class F>
void guarded(const char* what, F f) REQUIRES(heap_lock) {
  try {
    f();
  } catch (const std::exception& e) {
    fatal(what, e.what());
  }
}

// What the policy is asked for: the request rounded up to the 16-byte alignment.
uint64_t asked(uint64_t size) { return (std::max<uint64_t>(size, 1) + kSmallAlign - 1) & ~(kSmallAlign - 1); }

bool grouped(const sim::LlamaPolicy& p) {
  return p.size_classes || p.size_classes_from || p.divert_mixed || p.segregate_above_bytes;
}

void init() REQUIRES(heap_lock) {
  S = new (g_mem) State();
  S->cfg = read_config();
  // The project's default lifetime classes (simulator/trace.py): 10 ms .. 1000 s, then inf.
  S->classes.bounds_ns = {10 * kMs, 100 * kMs, 1000 * kMs, 10000 * kMs, 100000 * kMs, 1000000 * kMs};
  const bool baseline = S->cfg.policy == "baseline";
  sim::LlamaPolicy pol;
  if (!baseline) {
    try {
      pol = sim::parse_llama_policy(S->cfg.policy, "LIFETIME_ALLOC_POLICY");
    } catch (const std::exception& e) {
      fatal(e.what(), " (or baseline)");
    }
  }
  S->predictor = make_predictor(S->cfg.predictor, S->classes.num_classes(), S->cfg.revalidate_every);
  S->backing.init(!baseline && grouped(pol) ? sim::SegregatedHeap::kMaxGroups : 1, S->cfg.reserve_bytes);
  S->backing.set_release_delay(S->cfg.release_keep_pages, S->cfg.release_delay_ns);
  sim::huge_page_hooks = {on_taken, on_released};
  guarded("policy: ", [&]() REQUIRES(heap_lock) {
    if (baseline) S->policy = std::make_unique<sim::TcmallocBaseline>("baseline");
    else S->policy = sim::make_policy_heap("llama", S->classes, pol, kDeadlineK, false);
  });
  // A policy that maps addresses to slots itself (the size-class heaps) replaces the
  // object table: 4 B per object place of its live spans instead of 4 B per 16 B of heap.
  const bool slot_mapped = S->policy->enable_slot_map();
  if (slot_mapped) S->backing.no_table();
  tc::setup(slot_mapped);  // before any span is made
  S->policy_name = baseline ? "baseline" : pol.describe();
  S->start_ns = S->last_now = policy_clock_ns();  // (the stats' uptime: coarse <= precise)
  S->backing.set_now(S->last_now);
  if (S->cfg.stats_interval_ns) S->next_stats_ns = S->start_ns + S->cfg.stats_interval_ns;
  g_built.store(S, std::memory_order_release);
}

void free_locked(void* p) REQUIRES(heap_lock);

// Frees a signal handler deferred (reentry.h), under the lock.
void drain_deferred() REQUIRES(heap_lock) {
  for (void* p = reentry::take_deferred(); p;) {
    void* next = *static_cast<void**>(p);
    free_locked(p);
    p = next;
  }
}

// The lock, and "inside" for this thread: malloc from here on goes to the arena (or, from
// a signal handler that interrupts the lock's taking or the arena, to reentry.h's).
class SCOPED_CAPABILITY Inside {
 public:
  Inside() ACQUIRE(heap_lock) {
    t_inside = true;
    sig_fence();
    heap_lock.lock();
    t_locked = true;
    sig_fence();
    if (!S) init();
    ++S->c.lock_acquisitions;
    if (__builtin_expect(reentry::deferred_pending(), 0)) drain_deferred();
  }
  ~Inside() RELEASE() {
    sig_fence();
    t_locked = false;
    sig_fence();
    heap_lock.unlock();
    sig_fence();
    t_inside = false;
  }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

// Time for the policy (deadlines): monotone across threads, since it is read under the
// lock.  The policy is advanced only when the coarse clock has moved: every deadline it
// set since was set after the last advance, at that time plus >= 10 ms, so none is due.
uint64_t tick() REQUIRES(heap_lock) {
  const uint64_t now = policy_clock_ns();
  if (__builtin_expect(now <= S->last_now, 1)) return S->last_now;
  S->last_now = now;
  S->backing.set_now(now);  // held pages whose delay is over go back
  guarded("policy: ", [&]() REQUIRES(heap_lock) { S->policy->advance(now); });
  return now;
}

uint32_t thread_id() REQUIRES(heap_lock) {
  if (!t_thread) t_thread = uint32_t(++S->c.threads);
  return t_thread;
}

// ---------------------------------------------------------------- the checker

void check_pages(uint64_t addr, uint64_t size) REQUIRES(heap_lock) {
  // As the engine does: an object's middle pages are its own, alike; check the ends.
  uint64_t first = addr / Backing::kHuge, last = (addr + size - 1) / Backing::kHuge;
  guarded("LIFETIME_ALLOC_CHECK: ", [&]() REQUIRES(heap_lock) {
    for (uint64_t hp = first; hp <= last; ++hp) {
      if (hp == first + 2 && last - first > 4) hp = last - 1;
      S->policy->check_page(hp, S->shadow);
    }
  });
}

void full_check() REQUIRES(heap_lock) {
  ++S->c.checks;
  guarded("LIFETIME_ALLOC_CHECK: ", [&]() REQUIRES(heap_lock) { S->policy->check_all(S->shadow); });
  // The translation: every live object's policy address maps to its real one.
  uint64_t live = 0;
  for (uint64_t slot = 0; slot < S->slots.capacity(); ++slot) {
    if (!S->slots.taken(uint32_t(slot))) continue;
    ++live;
    auto [a, size] = S->policy->where(uint32_t(slot));
    const uintptr_t p = S->backing.real(a);
    if (!p || slot_of(p) != slot || size < S->policy->asked_size(uint32_t(slot)))
      fatal("LIFETIME_ALLOC_CHECK: an object's table entry or size disagrees with the policy's");
  }
  if (live != S->shadow.count() || live != S->c.live_objects)
    fatal("LIFETIME_ALLOC_CHECK: slot ids and shadow heap disagree in size");
}

void collect_tc_stats() REQUIRES(heap_lock);

void after_op(uint64_t now) REQUIRES(heap_lock) {
  if (tc::G.seg_above) tc::G.segregating.store(S->c.live_requested >= tc::G.seg_above, std::memory_order_relaxed);
  S->c.peak_huge_pages = std::max(S->c.peak_huge_pages, S->policy->live_huge_pages());
  if (S->cfg.check_every && ++S->ops_since_check >= S->cfg.check_every) {
    S->ops_since_check = 0;
    full_check();
  }
  if (S->next_stats_ns && now >= S->next_stats_ns) {
    S->next_stats_ns = now + S->cfg.stats_interval_ns;
    ++S->c.stats_writes;
    collect_tc_stats();
    write_stats(*S, now);
  }
}

// ---------------------------------------------------------------- objects

void* direct_alloc(size_t size, size_t align) EXCLUDES(heap_lock) {
  // Beyond a huge page: the policy's multi-huge-page objects take fresh ids that are never
  // reused (HugePageIds::take_fresh), which a long-running program would run past any
  // reservation; until the policy reuses them, such objects get their own mapping.
  if (align < kPage) align = kPage;
  const uint64_t len = ((size + kPage - 1) & ~(kPage - 1)) + align - kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t p = (uintptr_t(m) + align - 1) & ~uintptr_t(align - 1);
  Inside in;
  S->direct.emplace(p, State::Direct{uintptr_t(m), len, uintptr_t(m) + len - p, size});
  Counters& c = S->c;
  ++c.direct_objects;
  ++c.direct_allocs;
  c.direct_bytes += len;
  c.peak_direct_bytes = std::max(c.peak_direct_bytes, c.direct_bytes);
  c.total_requested += size;
  after_op(S->last_now);
  return reinterpret_cast<void*>(p);
}

uint32_t take_slot() REQUIRES(heap_lock) {
  if (S->slots.count() >= UINT32_MAX - 1) fatal("more than 2^32-2 live objects");
  return S->slots.take();
}

// After a fall in live objects the survivors' ids may stay spread up to the peak: every
// kEvery frees, when the highest id is well above the live count, up to kMoves of the
// highest live objects take the lowest free ids (the policy's move_slot, our object
// table's entry), a few per free on average; then the policy's per-slot records give
// back their tail (trim).  The objects stay where they are.
void compact_slots() REQUIRES(heap_lock) {
  constexpr uint64_t kEvery = 1024, kMoves = 1024;
  if (++S->frees_since_trim < kEvery) return;
  S->frees_since_trim = 0;
  const uint64_t live = S->slots.count();
  uint64_t end = S->slots.end();
  for (uint64_t n = 0; n < kMoves && end > live + live / 8 + 4096; ++n) {
    const uint32_t from = uint32_t(end - 1), to = S->slots.take();  // the highest live, the lowest free
    if (to >= from) {
      S->slots.release(to);
      break;
    }
    const auto [a, usable] = S->policy->where(from);
    guarded("policy: ", [&]() REQUIRES(heap_lock) { S->policy->move_slot(from, to); });
    set_slot(S->backing.real(a), to);
    if (S->cfg.check_every)
      guarded("LIFETIME_ALLOC_CHECK: ", [&, a = a]() REQUIRES(heap_lock) {
        S->shadow.on_free("lifetime_alloc", a, from);
        S->shadow.on_alloc("lifetime_alloc", a, S->policy->asked_size(to), to);
      });
    S->slots.release(from);
    end = S->slots.end();
  }
  guarded("policy: ", [&]() REQUIRES(heap_lock) { S->policy->trim(uint32_t(end)); });
}

State* built() EXCLUDES(heap_lock) {
  State* s = g_built.load(std::memory_order_acquire);
  if (__builtin_expect(!s, 0)) {
    Inside in;  // builds it
    s = S;
  }
  return s;
}

// Under the lock: one object from the policy (nullptr: past the reservation).  size: the
// program's request (0 for the extra objects of a thread cache's batch), usable: asked of
// the policy.
void* alloc_locked(uint64_t usable, size_t size, size_t align, uintptr_t ra, const Prediction& pred, uint64_t now)
    REQUIRES(heap_lock) {
  const uint32_t slot = take_slot();
  const int cls = pred.cls;
  ++S->c.by_source[size_t(pred.source)];
  ++S->c.class_allocs[size_t(cls) < Counters::kMaxClasses ? cls : Counters::kMaxClasses - 1];
  const sim::AllocRequest q{slot, usable, uint32_t(align), thread_id(), cls, now, ra};
  uint64_t a = 0;
  S->backing.clear_overflow();
  guarded("policy: ", [&]() REQUIRES(heap_lock) { a = S->policy->alloc(q); });
  const uintptr_t p = S->backing.real(a);
  if (S->backing.overflowed() || !p || !S->backing.real(a + usable - 1)) {
    // Past the reservation: give the object back and fail (ENOMEM).
    guarded("policy: ", [&]() REQUIRES(heap_lock) { S->policy->free(slot, now); });
    S->slots.release(slot);
    ++S->c.failed_allocs;
    return nullptr;
  }
  // Usable: what the policy placed (the baseline rounds up to its size class).
  const uint64_t placed = S->policy->where(slot).second;
  set_slot(p, slot);
  Counters& c = S->c;
  ++c.allocs;
  c.peak_objects = std::max(c.peak_objects, ++c.live_objects);
  c.live_requested += usable;
  c.peak_requested = std::max(c.peak_requested, c.live_requested);
  c.total_requested += size;
  c.live_usable += placed;
  if (S->cfg.check_every) {
    guarded("LIFETIME_ALLOC_CHECK: ",
            [&]() REQUIRES(heap_lock) { S->shadow.on_alloc("lifetime_alloc", a, usable, slot); });
    if (S->cfg.check_every == 1) check_pages(a, usable);  // per page: costs the page's objects
  }
  after_op(now);
  return reinterpret_cast<void*>(p);
}

void* policy_alloc(size_t size, size_t align, uintptr_t ra) EXCLUDES(heap_lock) {
  const uint64_t usable = asked(size);
  // Predict first, then lock: the model (a miss: stack, symbols, the network) runs
  // while other threads allocate.
  const Prediction pred = built()->predictor->predict({usable, uint32_t(align), ra});
  Inside in;
  return alloc_locked(usable, size, align, ra, pred, tick());
}

bool fits_policy(size_t size, size_t align) {
  // The policy's large objects pad by the alignment beyond its 8 KiB blocks / pages.
  return size + (align > 8192 ? align : 0) <= Backing::kHuge;
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

// ---------------------------------------------------------------- thread caches (operations)

namespace tc {

// This thread's cache, made under the lock (nullptr: none, kDead: the thread is exiting).
Cache* cache_locked() REQUIRES(heap_lock) {
  if (t_cache) return t_cache;
  const size_t n = size_t(G.groups) * kClasses;
  void* m = nested_alloc(sizeof(Cache) + n * sizeof(List), 64);
  if (!m) return nullptr;
  Cache* c = new (m) Cache();
  c->lists = reinterpret_cast<List*>(c + 1);
  for (size_t i = 0; i < n; ++i) c->lists[i] = {nullptr, 0};
  c->next = G.all;
  if (G.all) G.all->prev = c;
  G.all = c;
  pthread_setspecific(G.key, c);  // (its destructor gives the objects back at thread exit)
  t_cache = c;
  return c;
}

// The class of the small object at p (its page map entry's, the offset a multiple of the
// class size), and its group; 0: not one (large, free span, not an object's start, not
// ours): the locked path decides.
inline uint32_t class_at(const void* p, unsigned& g) {
  const uintptr_t off = uintptr_t(p) - G.base;
  if (off >= G.reserved) return 0;
  const uint32_t e = G.map[off >> kPageShift].load(std::memory_order_relaxed);
  if (!e) return 0;
  const uint32_t cls = e & 0xff;
  const uint64_t in_span = (off & ((uint64_t(1) << kPageShift) - 1)) + (uint64_t(e >> 16) << kPageShift);
  const uint64_t q = (in_span * G.magic[cls]) >> 36;
  if (q * G.size[cls] != in_span || q >= G.objs[cls]) return 0;
  g = (e >> 8) & 0xff;
  return cls;
}

inline void push(Cache* c, List& l, void* p, uint32_t cls) {
  *static_cast<void**>(p) = l.head;
  l.head = p;
  ++l.count;
  bump(c->objects, 1);
  bump(c->bytes, G.size[cls]);
}

// The list's head (nullptr: empty).
inline void* pop(Cache* c, List& l, uint32_t cls) {
  void* p = l.head;
  if (!p) return nullptr;
  l.head = *static_cast<void**>(p);
  --l.count;
  bump(c->objects, -1);
  bump(c->bytes, -int64_t(G.size[cls]));
  return p;
}

// Under the lock: the policy frees n objects of the list.
void give_back(Cache* c, List& l, uint32_t cls, uint32_t n) REQUIRES(heap_lock) {
  for (; n; --n) {
    void* p = pop(c, l, cls);
    if (!p) break;
    free_locked(p);
    ++G.flushed_objects;
  }
}

// A list past its bound: back to half of it; all of the thread's past kThreadBytes: half
// of every list.  One lock acquisition.
void flush(Cache* c, List& l, uint32_t cls) EXCLUDES(heap_lock) {
  Inside in;
  ++G.flushes;
  if (l.count > G.max[cls]) give_back(c, l, cls, l.count - G.max[cls] / 2);
  if (c->bytes.load(std::memory_order_relaxed) > kThreadBytes)
    for (size_t i = 0; i < size_t(G.groups) * kClasses; ++i)
      if (c->lists[i].count) give_back(c, c->lists[i], uint32_t(i % kClasses), (c->lists[i].count + 1) / 2);
}

// The pthread key's destructor (the thread exits): everything back to the policy.
void thread_exit(void* v) {
  Cache* c = static_cast<Cache*>(v);
  if (!c || c == kDead) return;
  Inside in;
  for (size_t i = 0; i < size_t(G.groups) * kClasses; ++i)
    give_back(c, c->lists[i], uint32_t(i % kClasses), UINT32_MAX);
  if (c->prev) c->prev->next = c->next;
  else G.all = c->next;
  if (c->next) c->next->prev = c->prev;
  ++G.exited;
  G.dead_hits += c->hits.load(std::memory_order_relaxed);
  G.dead_misses += c->misses.load(std::memory_order_relaxed);
  c->~Cache();
  arena_free(c);
  t_cache = kDead;  // later mallocs and frees of this thread (other destructors): the locked path
}

// A miss: under the lock, the object asked for and a batch of the class for the list.
void* refill(uint64_t usable, size_t size, uint32_t cls, const Prediction& pred, uintptr_t ra) EXCLUDES(heap_lock) {
  Inside in;
  Cache* c = cache_locked();
  const uint64_t now = tick();
  void* first = alloc_locked(usable, size, kSmallAlign, ra, pred, now);
  if (!first || !c || c == kDead) return first;
  bump(c->misses, 1);
  ++G.refills;
  for (uint32_t i = 1; i < G.batch[cls]; ++i) {
    void* q = alloc_locked(usable, 0, kSmallAlign, ra, pred, now);
    if (!q) break;
    unsigned g = 0;
    const uint32_t k = class_at(q, g);
    if (!k) {  // (cannot happen: the policy placed it in a span of its class)
      free_locked(q);
      break;
    }
    push(c, c->lists[g * kClasses + k], q, k);
    ++G.refill_objects;
  }
  return first;
}

void* cached_alloc(State* s, size_t size, uintptr_t ra) EXCLUDES(heap_lock) {
  const uint64_t usable = asked(size);
  const uint32_t cls = G.class_by_16[usable / 16];
  const Prediction pred = s->predictor->predict({usable, uint32_t(kSmallAlign), ra});
  Cache* c = t_cache;
  if (__builtin_expect(c > kDead, 1)) {
    unsigned g = 0;
    if (G.group_of)
      g = G.seg_above && !G.segregating.load(std::memory_order_relaxed) ? G.shared : G.group_of[pred.cls];
    List& l = c->lists[g * kClasses + cls];
    t_busy = true;
    sig_fence();
    void* p = pop(c, l, cls);
    if (p) bump(c->hits, 1);
    sig_fence();
    t_busy = false;
    if (p) return p;
  }
  return refill(usable, size, cls, pred, ra);
}

// true: p is in this thread's cache now.
bool cached_free(void* p) EXCLUDES(heap_lock) {
  unsigned g = 0;
  const uint32_t cls = class_at(p, g);
  if (!cls) return false;
  Cache* c = t_cache;
  if (__builtin_expect(!c, 0)) {
    Inside in;
    c = cache_locked();
  }
  if (!c || c == kDead) return false;
  List& l = c->lists[g * kClasses + cls];
  t_busy = true;
  sig_fence();
  if (__builtin_expect(l.head == p, 0)) fatal("free(): double free (thread cache)");
  push(c, l, p, cls);
  const bool over = l.count > G.max[cls] || c->bytes.load(std::memory_order_relaxed) > kThreadBytes;
  sig_fence();
  t_busy = false;
  if (over) flush(c, l, cls);
  return true;
}

// The cache is on and S built (acquire: S's fields, G's, are visible).
inline bool on() { return g_built.load(std::memory_order_acquire) && G.on; }

}  // namespace tc

void collect_tc_stats() {
  ThreadCacheStats& t = S->tc;
  t = ThreadCacheStats();
  t.on = tc::G.on;
  t.exited = tc::G.exited;
  t.hits = tc::G.dead_hits;
  t.misses = tc::G.dead_misses;
  for (tc::Cache* c = tc::G.all; c; c = c->next) {
    ++t.caches;
    t.objects += c->objects.load(std::memory_order_relaxed);
    t.bytes += c->bytes.load(std::memory_order_relaxed);
    t.hits += c->hits.load(std::memory_order_relaxed);
    t.misses += c->misses.load(std::memory_order_relaxed);
  }
  t.refills = tc::G.refills;
  t.refill_objects = tc::G.refill_objects;
  t.flushes = tc::G.flushes;
  t.flushed_objects = tc::G.flushed_objects;
}

}  // namespace

void* allocate(size_t size, size_t align, uintptr_t ra) {
  if (align < kSmallAlign) align = kSmallAlign;
  if (t_inside) return nested_alloc(size, align);
  if (size > kMaxRequest || align > kMaxRequest) return nullptr;
  if (!fits_policy(size, align)) return direct_alloc(size, align);
  if (align == kSmallAlign && size <= tc::kMaxSize && !tc::t_busy) {
    State* s = built();
    if (tc::G.on) return tc::cached_alloc(s, size, ra);
  }
  return policy_alloc(size, align, ra);
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
  if (!tc::t_busy && tc::on() && tc::cached_free(p)) return;
  Inside in;
  free_locked(p);
}

namespace {

void free_locked(void* p) {
  if (arena::owns(p)) return arena_free(p);
  const uintptr_t key = reinterpret_cast<uintptr_t>(p);
  Counters& c = S->c;
  if (S->backing.contains(p)) {
    const uint32_t slot = slot_of(key);
    if (slot == Backing::kNoSlot) fatal("free(): invalid pointer or double free");
    if (S->backing.has_table()) S->backing.clear_slot(key);
    const uint64_t now = tick();
    const auto [a, placed] = S->policy->where(slot);
    const uint64_t requested = S->policy->asked_size(slot);
    if (S->cfg.check_every)
      guarded("LIFETIME_ALLOC_CHECK: ", [&, a = a]() REQUIRES(heap_lock) { S->shadow.on_free("lifetime_alloc", a, slot); });
    guarded("policy: ", [&]() REQUIRES(heap_lock) { S->policy->free(slot, now); });
    if (S->cfg.check_every == 1) check_pages(a, requested);
    ++c.frees;
    --c.live_objects;
    c.live_requested -= requested;
    c.live_usable -= placed;
    S->slots.release(slot);
    compact_slots();
    after_op(now);
    return;
  }
  auto d = S->direct.find(key);
  if (d != S->direct.end()) {
    munmap(reinterpret_cast<void*>(d->second.map), d->second.len);
    --c.direct_objects;
    c.direct_bytes -= d->second.len;
    ++c.frees;
    S->direct.erase(d);
    after_op(S->last_now);
    return;
  }
  ++c.foreign_frees;  // memory from before the preload (the dynamic loader's own): leave it
}

}  // namespace

size_t usable_size(const void* p) {
  if (!p) return 0;
  if (reentry::owns(p)) return reentry::usable(p);
  if (arena::owns(p)) return arena::usable(p);
  if (t_inside) return 0;
  if (tc::on()) {
    unsigned g;
    if (const uint32_t cls = tc::class_at(p, g)) return tc::G.size[cls];
  }
  Inside in;
  const uintptr_t key = reinterpret_cast<uintptr_t>(p);
  if (S->backing.contains(p)) {
    const uint32_t slot = slot_of(key);
    return slot == Backing::kNoSlot ? 0 : S->policy->where(slot).second;
  }
  auto d = S->direct.find(key);
  return d == S->direct.end() ? 0 : d->second.usable;
}

namespace {

bool fits_direct_growth(size_t size) { return size <= kMaxRequest && !fits_policy(size, kSmallAlign); }

void shrink_direct(void* p, size_t size) EXCLUDES(heap_lock) {
  if (arena::owns(p) || reentry::owns(p)) return;
  Inside in;
  auto d = S->direct.find(reinterpret_cast<uintptr_t>(p));
  if (d == S->direct.end()) return;
  const uintptr_t keep_end = (reinterpret_cast<uintptr_t>(p) + std::max<size_t>(size, 1) + kPage - 1) & ~uintptr_t(kPage - 1);
  const uintptr_t end = d->second.map + d->second.len;
  if (keep_end >= end) return;
  munmap(reinterpret_cast<void*>(keep_end), end - keep_end);
  S->c.direct_bytes -= end - keep_end;
  d->second.len = keep_end - d->second.map;
  d->second.usable = keep_end - reinterpret_cast<uintptr_t>(p);
  d->second.requested = size;
}

// A direct mapping that grows (past a huge page still) moves with mremap, no copy, as
// glibc's mmapped chunks do (a buffer grown 1 MiB at a time, Redis's sds, would otherwise
// copy its whole length each time).  nullptr: not one (the caller copies).
void* grow_direct(void* p, size_t size) EXCLUDES(heap_lock) {
  if (arena::owns(p) || reentry::owns(p) || !fits_direct_growth(size)) return nullptr;
  Inside in;
  auto d = S->direct.find(reinterpret_cast<uintptr_t>(p));
  if (d == S->direct.end() || d->second.map != reinterpret_cast<uintptr_t>(p)) return nullptr;  // aligned: copy
  const State::Direct old = d->second;
  const uint64_t len = (size + kPage - 1) & ~(kPage - 1);
  void* m = mremap(reinterpret_cast<void*>(old.map), old.len, len, MREMAP_MAYMOVE);
  if (m == MAP_FAILED) return nullptr;
  S->direct.erase(d);
  S->direct.emplace(uintptr_t(m), State::Direct{uintptr_t(m), len, len, size});
  Counters& c = S->c;
  c.direct_bytes += len - old.len;
  c.peak_direct_bytes = std::max(c.peak_direct_bytes, c.direct_bytes);
  c.total_requested += size;
  return m;
}

}  // namespace

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

// Held across fork as Inside holds it (a handler that mallocs meanwhile is served nested).
void fork_prepare() {
  t_inside = true;
  heap_lock.lock();
  t_locked = true;
}
void fork_release() {
  t_locked = false;
  heap_lock.unlock();
  t_inside = false;
}
void fork_child() {
  fork_release();
  if (State* s = g_built.load(std::memory_order_acquire)) s->predictor->fork_child();
}

void start_predictor() {
  // Outside the lock: loading a model dlopens (and the loader mallocs).
  built()->predictor->start();
}

void write_final_stats() {
  // A process that never allocated still reports (an all-zero heap).
  // (g_built, not S: S is the lock's, and this reads it before taking it)
  if (t_inside || (!g_built.load(std::memory_order_acquire) && !std::getenv("LIFETIME_ALLOC_STATS"))) return;
  Inside in;
  if (S->cfg.stats_path.empty()) return;
  collect_tc_stats();
  write_stats(*S, clock_ns());
}

}  // namespace lalloc
