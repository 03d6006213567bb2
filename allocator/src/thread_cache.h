// The thread caches in front of the size-class heaps.
//
// Per thread, per (heap group, size class) of the size-class heaps: a LIFO of freed
// objects (linked through their first word), served to the thread's next mallocs of that
// group and class without the lock.  Objects in a cache stay live to the policy (their
// slot, their span); it sees their free when a list passes its bound (half of it goes
// back under one lock acquisition), when the thread's caches pass their bound (half of
// every list; and every kScavengeNs, at the thread's next refill or flush, so that a list
// it no longer uses empties in seconds instead of pinning the spans, and the huge pages,
// its objects came from: with the caches on and no scavenge, Redis phases + model held
// 212 MiB of huge pages where the simulator's heap and the caches-off run held 36-40;
// the bound is a share of kAllBytes among the live caches, between
// kMinThreadBytes and kThreadBytes: all caches together hold at most kAllBytes up to 64
// threads, 256 KiB each beyond; TCMalloc's defaults halved, not swept: at 256 KiB a
// thread, rptest_sim's random sizes flushed every list again and again, 3 policy objects
// per malloc), and at thread exit (all; a pthread key's destructor).  free,
// malloc_usable_size and realloc find an object's group and class in the page map, a
// uint32 per 8 KiB page of the reservation written under the lock when the policy creates
// a span (sim::span_hooks) and cleared when it releases it: [class:8 | group:8 | page in
// span:16], 0 for pages of no small-object span (those take the locked path).
#pragma once

#include <errno.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "baseline.h"
#include "heap_internal.h"

// Hidden: a declaration seen here is known to be this library's own, so the code reaches
// it directly rather than through the GOT (-fvisibility=hidden covers definitions only).
#pragma GCC visibility push(hidden)

namespace lalloc {
namespace tc {

constexpr unsigned kClasses = 128;  // the baseline's 97 classes (+ [0]) fit
constexpr uint64_t kMaxSize = sim::TcmallocBaseline::kMaxSmall;
constexpr uint64_t kPageShift = 13;  // the baseline's 8 KiB pages
static_assert((uint64_t(1) << kPageShift) == sim::TcmallocBaseline::kPageBytes);
constexpr uint64_t kListBytes = 64 << 10;     // a list's bound: this many bytes ...
constexpr uint32_t kMaxListObjects = 128;     // ... or objects, whichever is fewer (>= 1; List::depth is 16 bits)
constexpr uint64_t kThreadBytes = 2 << 20;      // all of a thread's lists, at most
constexpr uint64_t kMinThreadBytes = 256 << 10; // ... at least
constexpr uint64_t kAllBytes = 16 << 20;        // all threads' lists (up to 64 threads)
constexpr uint64_t kScavengeNs = 100000000;   // a thread's lists give back what went unused this often
constexpr uint64_t kBatchBytes = 16 << 10;    // a miss takes this many bytes ...
constexpr uint32_t kMaxBatch = 32;            // ... or objects from the policy (>= 1)
constexpr uint64_t kRecentBytes = 4 << 10;    // frees a list keeps for reuse: this many bytes ...
constexpr uint32_t kRecentObjects = 6;        // ... or objects, whichever is fewer (>= 1)
constexpr uint64_t kHotNs = 1000000;          // a list back at the lock sooner: more reuse
constexpr uint64_t kColdNs = 100000000;       // ... later than this: less
constexpr uint64_t kTickHits = 4096;          // a thread's hits between visits to the clock (2^k)

// A class's objects in one thread: `head`, what its mallocs pop (a refill's batch, and
// frees while it holds fewer than its `depth`), and `freed`, the frees past that depth,
// which go back to the policy a batch at a time, never reused from here.
// Why: an object reused from deep in a list is put wherever some earlier free left a hole
// (and one idle there holds its span), where the policy would place it in its fullest
// span; on Redis 6.2.9 (selection) lists reused up to 128 deep held 5-9 MiB of RSS more
// than lists of 6.  The free buffer keeps the lock to one trip per batch of frees.
// The reuse bound adapts to the list's traffic: a list that goes to the lock more often
// than once per kHotNs (a batch per millisecond or faster: a thread recycling objects at a
// high rate, a producer and consumer) doubles it, up to the class's cap, so its objects
// cycle without the lock; one that waited longer than kColdNs halves it, down to `recent`
// again.  The rate is counted over trips (trip()), not read off one interval: the policy's
// clock is the kernel's coarse one, whose tick is 1-10 ms (4 ms where HZ=250), so two trips
// in one tick read as 0 ns apart however far apart they were.
struct List {
  void* head;
  uint32_t count;
  uint32_t low;     // the fewest objects head held since the last scavenge (went unused)
  void* freed;
  uint32_t nfreed;
  uint16_t depth;   // frees kept in head while it holds fewer (recent .. max of the class)
  uint16_t trips;   // refills and flushes since trip_ns
  uint64_t trip_ns; // the policy's clock when depth was last looked at (trip())
};
struct Cache {
  // Written by the owner thread only (load + store, no atomic read-modify-write), read by
  // the stats under the lock.
  std::atomic<uint64_t> objects{0}, bytes{0}, hits{0}, misses{0};
  uint64_t scavenged_ns GUARDED_BY(heap_lock) = 0;  // the policy's clock at the last scavenge
  Cache* prev GUARDED_BY(heap_lock) = nullptr;  // every live thread's cache
  Cache* next GUARDED_BY(heap_lock) = nullptr;
  List* lists = nullptr;                   // [group * kClasses + class]
};
inline void bump(std::atomic<uint64_t>& a, int64_t d) {
  a.store(a.load(std::memory_order_relaxed) + uint64_t(d), std::memory_order_relaxed);
}
inline Cache* const kDead = reinterpret_cast<Cache*>(uintptr_t(1));  // the thread's cache is gone (exit)

// Zero-initialized (no constructor: the first malloc may come before the library's
// static initializers run); filled by setup() under the lock at init, before g_built's
// release, and read-only after (but the fields guarded by the lock).
struct Global {
  bool on;                          // written in init, before g_built's release
  std::atomic<bool> segregating;    // segregate-above: the live bytes reached it
  std::atomic<uint64_t> thread_bytes;  // a thread's bound: kAllBytes / live caches, clamped
  unsigned groups, shared;
  uint64_t seg_above;
  const unsigned* group_of;         // by predicted class (nullptr: the baseline, one heap)
  uint32_t size[kClasses], objs[kClasses], max[kClasses], batch[kClasses], recent[kClasses];
  uint64_t clock_res_ns;  // the policy's clock's resolution (its tick)
  uint64_t magic[kClasses];  // (offset * magic) >> 36 == offset / size for a multiple
  std::atomic<uint32_t>* map;
  uintptr_t base;
  uint64_t reserved;  // the reservation's bytes from base (Backing::reserved_bytes)
  pthread_key_t key;
  Cache* all GUARDED_BY(heap_lock);
  uint64_t live_caches GUARDED_BY(heap_lock);
  uint64_t exited GUARDED_BY(heap_lock), dead_hits GUARDED_BY(heap_lock), dead_misses GUARDED_BY(heap_lock);
  uint64_t refills GUARDED_BY(heap_lock), refill_objects GUARDED_BY(heap_lock), flushes GUARDED_BY(heap_lock),
      flushed_objects GUARDED_BY(heap_lock), scavenges GUARDED_BY(heap_lock);
};
extern Global g_caches;
extern __thread Cache* t_cache __attribute__((tls_model("initial-exec")));
// While this thread is in the cache's lock-free code: a signal handler's malloc or free
// that interrupts it takes the locked path (the lists are mid-update).
extern __thread bool t_busy __attribute__((tls_model("initial-exec")));

// At init, under the lock (tc::setup in thread_cache.cc says when the caches are on).
void setup(bool addr_mode) REQUIRES(heap_lock);
// The class of the small object at p (its page map entry's, the offset a multiple of the
// class size), and its group; 0: not one (large, free span, not an object's start, not
// ours): the locked path decides.
inline uint32_t class_at(const void* p, unsigned& g) {
  const uintptr_t off = uintptr_t(p) - g_caches.base;
  if (off >= g_caches.reserved) return 0;
  const uint32_t e = g_caches.map[off >> kPageShift].load(std::memory_order_relaxed);
  if (!e) return 0;
  const uint32_t cls = e & 0xff;
  const uint64_t in_span = (off & ((uint64_t(1) << kPageShift) - 1)) + (uint64_t(e >> 16) << kPageShift);
  const uint64_t q = (in_span * g_caches.magic[cls]) >> 36;
  if (q * g_caches.size[cls] != in_span || q >= g_caches.objs[cls]) return 0;
  g = (e >> 8) & 0xff;
  return cls;
}
// errno as it was when made, again when destroyed (the slow paths behind a cache hit).
struct KeepErrno {
  const int saved = errno;
  ~KeepErrno() { errno = saved; }
};
// This thread's cache, made under the lock (nullptr: none, kDead: the thread is exiting).
Cache* cache_locked() REQUIRES(heap_lock);
// A miss: under the lock, the object asked for and a batch of the class for the list.
void* refill(uint64_t usable, size_t size, uint32_t cls, const Prediction& pred, uintptr_t ra) EXCLUDES(heap_lock);
// A list past its bound, or the thread's lists past theirs: some back to the policy.
void flush(Cache* c, List& l, uint32_t cls) EXCLUDES(heap_lock);
// Every kTickHits hits: the policy's clock and this thread's scavenge, as a trip to the
// lock would (a program whose mallocs all hit its caches would otherwise stop the clock:
// no held page given back, no huge page collapsed, no stats written, no list scavenged).
void periodic(Cache* c) EXCLUDES(heap_lock);

// The lock-free paths, inline at their callers (heap.cc's malloc and free).
inline void push(Cache* c, List& l, void* p, uint32_t cls) {
  *static_cast<void**>(p) = l.head;
  l.head = p;
  ++l.count;
  bump(c->objects, 1);
  bump(c->bytes, g_caches.size[cls]);
}

// The list's head (nullptr: empty).
inline void* pop(Cache* c, List& l, uint32_t cls) {
  void* p = l.head;
  if (!p) return nullptr;
  l.head = *static_cast<void**>(p);
  if (--l.count < l.low) l.low = l.count;
  bump(c->objects, -1);
  bump(c->bytes, -int64_t(g_caches.size[cls]));
  return p;
}

__attribute__((always_inline)) inline void* cached_alloc(State* s, size_t size, uintptr_t ra) EXCLUDES(heap_lock) {
  const uint64_t usable = asked(size);
  const uint32_t cls = sim::TcmallocBaseline::small_class(usable);
  const Prediction pred = s->predictor->predict({size, uint32_t(kSmallAlign), ra});
  Cache* c = t_cache;
  if (__builtin_expect(c > kDead, 1)) {
    unsigned g = 0;
    if (g_caches.group_of)
      g = g_caches.seg_above && !g_caches.segregating.load(std::memory_order_relaxed) ? g_caches.shared : g_caches.group_of[pred.cls];
    List& l = c->lists[g * kClasses + cls];
    t_busy = true;
    sig_fence();
    void* p = pop(c, l, cls);
    uint64_t hits = 0;
    if (p) {
      hits = c->hits.load(std::memory_order_relaxed) + 1;
      c->hits.store(hits, std::memory_order_relaxed);
    }
    sig_fence();
    t_busy = false;
    if (p) {
      if (__builtin_expect((hits & (kTickHits - 1)) == 0, 0)) periodic(c);
      return p;
    }
  }
  return refill(usable, size, cls, pred, ra);
}

// A list's batch: how many objects a refill takes and its free buffer gives back at a
// time.  It follows the list's reuse depth (trip): at most the depth and 32 objects on a
// refill (every object taken is written, its link: resident), and for the free buffer at
// least the class's batch (16 KiB).  A list that cycles fast, whose depth has doubled up
// to its 64 KiB bound, so moves up to 64 KiB per trip to the lock rather than 16.
inline uint32_t refill_at(const List& l) { return std::min<uint32_t>(kMaxBatch, l.depth); }
inline uint32_t flush_at(const List& l, uint32_t cls) { return std::max(g_caches.batch[cls], refill_at(l)); }

// true: p is in this thread's cache now.
__attribute__((always_inline)) inline bool cached_free(void* p) EXCLUDES(heap_lock) {
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
  if (__builtin_expect(l.head == p || l.freed == p, 0)) fatal("free(): double free (thread cache)");
  if (l.count < l.depth) {
    push(c, l, p, cls);
  } else {
    *static_cast<void**>(p) = l.freed;
    l.freed = p;
    ++l.nfreed;
    bump(c->objects, 1);
    bump(c->bytes, g_caches.size[cls]);
  }
  const bool over = l.nfreed >= flush_at(l, cls) ||
                    c->bytes.load(std::memory_order_relaxed) > g_caches.thread_bytes.load(std::memory_order_relaxed);
  sig_fence();
  t_busy = false;
  if (over) flush(c, l, cls);
  return true;
}
// The cache is on and g_state built (acquire: g_state's fields, g_caches's, are visible).
inline bool on() { return g_built.load(std::memory_order_acquire) && g_caches.on; }
// segregate-above: whether the live bytes have reached it (after each operation).
inline void note_live_bytes(uint64_t live) {
  if (g_caches.seg_above) g_caches.segregating.store(live >= g_caches.seg_above, std::memory_order_relaxed);
}
// Under the lock: every object of cache c back to the policy (thread exit, malloc_trim).
void drain_locked(Cache* c) REQUIRES(heap_lock);
// The caches' figures for the stats (g_state->tc), under the lock.
void collect_stats() REQUIRES(heap_lock);

}  // namespace tc
}  // namespace lalloc

#pragma GCC visibility pop
