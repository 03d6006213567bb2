// The allocator's lock, annotated for Clang's thread-safety analysis
// (inprocess/src/thread_annotations.h): one non-recursive mutex, heap_lock (heap.cc), that guards the
// State (state.h), the metadata arena (internal_arena.h) and the thread caches' shared
// records (heap.cc); and the try-lock of reentry.cc's free lists.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "thread_annotations.h"

namespace lalloc {

// A futex mutex that spins before it sleeps (Drepper, "Futexes Are Tricky", mutex 2).
// Why not a pthread mutex: glibc's adaptive one spins ~100 tries and then sleeps, and a
// thread-cache refill or flush holds the lock longer than that (a span made or released);
// on rptest_sim's two threads it put 27k sleeps and wakes (each a futex round trip:
// 20 us one way in this VM) in a 2.5 s run.  A holder is on another CPU nearly always, so
// a waiter spins first, for about what one sleep and wake costs, so spinning never costs
// more than twice the best of spinning and sleeping (the classic competitive bound):
// kSpins pauses, 800 x 25 ns (Zen; ~45 ns on Intel since Skylake) = 20-36 us, the sleep
// and wake measured here.  It was 200 (5 us, a bare-metal futex's order) until a stop
// found the VM's cost; 800, 10 runs each in turn: rptest_sim -t 2 0.93x 200's time (every
// run faster or equal), larson_sim 0.92x, mstress_sim 0.87x, rptest_sim -t 8 0.92x; and on
// programs no figure reports, the 16-thread test driver (alloc_threads_xfree) 0.94x,
// sort --parallel=2 and alloc_pair_threads unchanged.
// An aggregate with a constant initializer: the first malloc may come before any static
// constructor runs.  State: 0 free, 1 held, 2 held and a waiter may sleep.
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

struct CAPABILITY("mutex") Mutex {
  static constexpr int kSpins = 800;

  void lock() ACQUIRE() {
    uint32_t c = 0;
    if (!s.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) lock_slow();
  }
  void unlock() RELEASE() {
    if (s.exchange(0, std::memory_order_release) == 2) wake();
  }
  // For code that knows the lock is held by this thread without having taken it in
  // sight (heap.cc's t_locked flag: a nested request of the lock holder): no run-time check.
  void assert_held() const ASSERT_CAPABILITY(this) {}

  std::atomic<uint32_t> s{0};

 private:
  __attribute__((noinline)) void lock_slow() {
    for (int i = 0; i < kSpins; i++) {
      relax();
      uint32_t c = 0;
      if (s.load(std::memory_order_relaxed) == 0 &&
          s.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
        return;
    }
    // Sleep with the state at 2, so the holder's unlock wakes one waiter.
    while (s.exchange(2, std::memory_order_acquire) != 0)
      syscall(SYS_futex, &s, FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
  }
  __attribute__((noinline)) void wake() { syscall(SYS_futex, &s, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0); }
};

// The lock (heap.cc).  Whoever holds it is "inside" the allocator (heap.cc's Inside).
extern Mutex heap_lock;

// A try-lock that never waits (reentry.cc: a signal handler may interrupt its holder).
// An aggregate, constant-initialized: TryLock l{ATOMIC_FLAG_INIT}.
struct CAPABILITY("spin lock") TryLock {
  bool try_lock() TRY_ACQUIRE(true) { return !f.test_and_set(std::memory_order_acquire); }
  void unlock() RELEASE() { f.clear(std::memory_order_release); }

  std::atomic_flag f;
};

}  // namespace lalloc
