// Objects past a huge page (size + alignment > 2 MiB): each in its own mapping, outside
// the policy (README.md says why); its whole huge pages collapsed once the program has
// filled them (Backing::queue_foreign).
#include <sys/mman.h>

#include <algorithm>

#include "heap_internal.h"
#include "internal_arena.h"

namespace lalloc {

void* direct_alloc(size_t size, size_t align) EXCLUDES(heap_lock) {
  // Beyond a huge page: the policy's multi-huge-page objects take fresh ids that are never
  // reused (HugePageIds::take_fresh), which a long-running program would run past any
  // reservation; until the policy reuses them, such objects get their own mapping.
  if (align < kPage) align = kPage;
  // On a huge-page boundary (unless asked for more), so that all its whole huge pages can
  // be collapsed once filled (Backing::queue_foreign); the slack is unmapped at once.
  const uint64_t need = (size + kPage - 1) & ~(kPage - 1);
  const uint64_t start_align = std::max<uint64_t>(align, Backing::kHuge);
  const uint64_t len = need + start_align - kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t p = (uintptr_t(m) + start_align - 1) & ~uintptr_t(start_align - 1);
  if (p > uintptr_t(m)) munmap(m, p - uintptr_t(m));
  if (uintptr_t(m) + len > p + need) munmap(reinterpret_cast<void*>(p + need), uintptr_t(m) + len - (p + need));
  Inside in;
  g_state->direct.emplace(p, State::Direct{p, need, need, size});
  g_state->backing.queue_foreign(p, p + need);  // its huge pages, once filled
  Counters& c = g_state->c;
  ++c.direct_objects;
  ++c.direct_allocs;
  c.direct_bytes += need;
  c.peak_direct_bytes = std::max(c.peak_direct_bytes, c.direct_bytes);
  c.total_requested += size;
  after_op(g_state->last_now);
  return reinterpret_cast<void*>(p);
}

bool direct_free(uintptr_t key) {
  auto d = g_state->direct.find(key);
  if (d != g_state->direct.end()) {
    munmap(reinterpret_cast<void*>(d->second.map), d->second.len);
    g_state->backing.unqueue_foreign(d->second.map);
    Counters& c = g_state->c;
    --c.direct_objects;
    c.direct_bytes -= d->second.len;
    ++c.frees;
    g_state->direct.erase(d);
    after_op(g_state->last_now);
    return true;
  }
  return false;
}

size_t direct_usable(uintptr_t key) {
  auto d = g_state->direct.find(key);
  return d == g_state->direct.end() ? 0 : d->second.usable;
}

namespace {
bool fits_direct_growth(size_t size) { return size <= kMaxRequest && !fits_policy(size, kSmallAlign); }
}  // namespace

void shrink_direct(void* p, size_t size) EXCLUDES(heap_lock) {
  if (arena::owns(p) || reentry::owns(p)) return;
  Inside in;
  auto d = g_state->direct.find(reinterpret_cast<uintptr_t>(p));
  if (d == g_state->direct.end()) return;
  const uintptr_t keep_end = (reinterpret_cast<uintptr_t>(p) + std::max<size_t>(size, 1) + kPage - 1) & ~uintptr_t(kPage - 1);
  const uintptr_t end = d->second.map + d->second.len;
  if (keep_end >= end) return;
  munmap(reinterpret_cast<void*>(keep_end), end - keep_end);
  g_state->backing.trim_foreign(d->second.map, keep_end);
  g_state->c.direct_bytes -= end - keep_end;
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
  auto d = g_state->direct.find(reinterpret_cast<uintptr_t>(p));
  if (d == g_state->direct.end() || d->second.map != reinterpret_cast<uintptr_t>(p)) return nullptr;  // aligned: copy
  const State::Direct old = d->second;
  const uint64_t len = (size + kPage - 1) & ~(kPage - 1);
  void* m = mremap(reinterpret_cast<void*>(old.map), old.len, len, MREMAP_MAYMOVE);
  if (m == MAP_FAILED) return nullptr;
  g_state->direct.erase(d);
  g_state->direct.emplace(uintptr_t(m), State::Direct{uintptr_t(m), len, len, size});
  g_state->backing.unqueue_foreign(old.map);
  g_state->backing.queue_foreign(uintptr_t(m), uintptr_t(m) + len);
  Counters& c = g_state->c;
  c.direct_bytes += len - old.len;
  c.peak_direct_bytes = std::max(c.peak_direct_bytes, c.direct_bytes);
  c.total_requested += size;
  return m;
}

}  // namespace lalloc
