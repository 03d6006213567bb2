// pthread_atfork (malloc_api.cc): the allocator's lock is held across fork.
#include "heap.h"
#include "attribution.h"
#include "heap_internal.h"

namespace lalloc {

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
  attr::fork_child();
}

}  // namespace lalloc
