// The allocator's locked path, shared by the files that make it up: heap.cc (the state,
// the policy calls, the C API's entry points), thread_cache.cc (the caches in front of the
// size-class heaps), direct.cc (objects past a huge page), checker.cc
// (LIFETIME_ALLOC_CHECK) and fork.cc.  Nothing here is exported (hidden visibility).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>

#include "fatal.h"
#include "lock.h"
#include "predictor.h"
#include "reentry.h"
#include "state.h"

// Hidden: a declaration seen here is known to be this library's own, so the code reaches
// it directly rather than through the GOT (-fvisibility=hidden covers definitions only).
#pragma GCC visibility push(hidden)

namespace lalloc {

constexpr uint64_t kSmallAlign = 16;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxRequest = uint64_t(1) << 46;  // the trace format's limit (16 TiB) x 4

// initial-exec: reading them never calls __tls_get_addr (which may malloc).
// t_inside: from before this thread takes the lock (heap_lock) until after it lets it go;
// t_locked: while it holds it (heap_lock.assert_held() where the code relies on that);
// t_arena: while it is inside the metadata arena.  A request that finds t_inside set is
// either the policy's own containers (t_locked, the arena idle) or a signal handler that
// interrupted this thread (reentry.h says how each case is served).
extern __thread bool t_inside __attribute__((tls_model("initial-exec")));
extern __thread bool t_locked __attribute__((tls_model("initial-exec")));
extern __thread bool t_arena __attribute__((tls_model("initial-exec")));
// The flags are read by signal handlers on the same thread: compiler barriers keep their
// stores where the code puts them (no CPU fence is needed within one thread).
inline void sig_fence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// The allocator's state: built at the first allocation (init), then g_built publishes it.
extern State* g_state GUARDED_BY(heap_lock);
// g_state once built (release, after init): read without the lock by the prediction,
// which runs before the lock is taken.
extern std::atomic<State*> g_built;

void init() REQUIRES(heap_lock);
void drain_deferred() REQUIRES(heap_lock);

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
    if (!g_state) init();
    ++g_state->c.lock_acquisitions;
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
inline uint64_t asked(uint64_t size) { return (std::max<uint64_t>(size, 1) + kSmallAlign - 1) & ~(kSmallAlign - 1); }

// Time for the policy (deadlines), under the lock.
uint64_t tick() REQUIRES(heap_lock);
// The policy's clock's resolution: the kernel's tick (1-10 ms).
uint64_t policy_clock_res_ns();
// The state, built if need be (takes the lock then).
State* built() EXCLUDES(heap_lock);
// Under the lock: one object from the policy (nullptr: past the reservation).
void* alloc_locked(uint64_t usable, size_t size, size_t align, uintptr_t ra, const Prediction& pred, uint64_t now)
    REQUIRES(heap_lock);
void free_locked(void* p) REQUIRES(heap_lock);
// Address mode, under the lock: n more objects of one request at once, into out (a
// thread cache's refill; the size-class heaps' alloc_batch), and n objects the program
// freed given back at once (a flush).  alloc returns how many it placed.
uint32_t alloc_batch_locked(uint64_t usable, uintptr_t ra, const Prediction& pred, uint64_t now, uint32_t n,
                            void** out) REQUIRES(heap_lock);
void free_batch_locked(void* const* p, uint32_t n) REQUIRES(heap_lock);
// After each operation: peaks, the checker's turn, the stats' interval.
void after_op(uint64_t now) REQUIRES(heap_lock);
// The slot of the live object starting at p (inside the reservation), or kNoSlot.
uint32_t slot_of(uintptr_t p) REQUIRES(heap_lock);
// A request from inside the allocator: the metadata arena or reentry's.
void* nested_alloc(size_t size, size_t align);
void arena_free(void* p) REQUIRES(heap_lock);

// checker.cc: LIFETIME_ALLOC_CHECK.
void check_pages(uint64_t addr, uint64_t size) REQUIRES(heap_lock);
void full_check() REQUIRES(heap_lock);

// direct.cc: objects past a huge page, in their own mapping.
// Objects the policy would give fresh huge page ids (HugePageIds::take_fresh, never
// reused: a loop of them runs past any reservation) go there too.  The policy's large
// objects pad by the alignment beyond its 8 KiB blocks / pages; LLAMA's heap takes fresh
// ids past 256 blocks (2 MiB), the size-class heaps' (TcmallocBaseline) for a span of 256
// pages or more, so for them an unaligned object of more than 2 MiB - 8 KiB goes direct
// too.  g_policy_small_pad: 0 for LLAMA's heap alone, 8192 otherwise (and before init).
extern std::atomic<uint32_t> g_policy_small_pad;
inline bool fits_policy(size_t size, size_t align) {
  return size + (align > 8192 ? align : g_policy_small_pad.load(std::memory_order_relaxed)) <= Backing::kHuge;
}
void* direct_alloc(size_t size, size_t align) EXCLUDES(heap_lock);
// true: key was a direct object, now unmapped.
bool direct_free(uintptr_t key) REQUIRES(heap_lock);
// 0: not a direct object.
size_t direct_usable(uintptr_t key) REQUIRES(heap_lock);
void shrink_direct(void* p, size_t size) EXCLUDES(heap_lock);
// nullptr: not a direct object that can grow in place (the caller copies).
void* grow_direct(void* p, size_t size) EXCLUDES(heap_lock);

}  // namespace lalloc

#pragma GCC visibility pop
