// The allocator's lock, annotated for Clang's thread-safety analysis
// (inprocess/src/thread_annotations.h): one non-recursive mutex, heap_lock (heap.cc), that guards the
// State (state.h), the metadata arena (internal_arena.h) and the thread caches' shared
// records (heap.cc); and the try-lock of reentry.cc's free lists.
#pragma once

#include <pthread.h>

#include <atomic>

#include "thread_annotations.h"

namespace lalloc {

// A pthread mutex.  An aggregate, so a global one is constant-initialized (the first
// malloc may come before any static constructor runs): Mutex m{PTHREAD_MUTEX_INITIALIZER}.
struct CAPABILITY("mutex") Mutex {
  void lock() ACQUIRE() { pthread_mutex_lock(&m); }
  void unlock() RELEASE() { pthread_mutex_unlock(&m); }
  // For code that knows the lock is held by this thread without having taken it in
  // sight (heap.cc's t_locked flag: a nested request of the lock holder): no run-time check.
  void assert_held() const ASSERT_CAPABILITY(this) {}

  pthread_mutex_t m;
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
