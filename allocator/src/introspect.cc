// glibc's malloc API beyond allocation (introspect.h): the figures behind mallinfo2,
// malloc_stats and malloc_info, malloc_trim, mallopt's M_TRIM_THRESHOLD, and realloc of
// memory the allocator never handed out.  Everything that reads or changes the state
// does it under the lock (Inside), and allocates nothing there (the program's FILE
// output is written by the caller after the lock is let go).
#include "introspect.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "heap_internal.h"
#include "internal_arena.h"
#include "thread_cache.h"

namespace lalloc {

namespace {

// The reservation as first seen under the lock (claim_foreign_realloc's lock-free test):
// set once, len after lo (release), read len first (acquire).  A pointer past it (were
// the reservation to grow) takes the locked test, which reads Backing itself.
std::atomic<uintptr_t> g_lo{0}, g_len{0};

uint64_t sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

bool read_usage(Usage& u) EXCLUDES(heap_lock) {
  u = Usage();
  if (t_inside) return false;  // a signal handler inside the allocator: the lock is taken
  Inside in;
  State& s = *g_state;
  tc::collect_stats();  // s.tc: the objects the threads' caches hold (live to the policy)
  const Backing& b = s.backing;
  u.held_pages = b.held_pages();
  u.heap_committed = b.committed_bytes() + u.held_pages * Backing::kHuge;
  u.cached_objects = s.tc.objects;
  u.cached_bytes = s.tc.bytes;
  u.heap_in_use = sub0(s.c.live_usable, u.cached_bytes);
  u.direct_objects = s.c.direct_objects;
  u.direct_bytes = s.c.direct_bytes;
  for (const auto& [p, d] : s.direct) u.direct_usable += d.usable;
  u.peak_committed = std::max(b.peak_committed_bytes(), u.heap_committed);
  u.peak_direct_bytes = s.c.peak_direct_bytes;
  u.reserved = b.reserved_bytes();
  u.touched = b.touched_bytes();
  u.metadata = arena::held_bytes() + b.table_bytes();
  return true;
}

uint64_t trim() EXCLUDES(heap_lock) {
  if (t_inside) return 0;
  Inside in;
  State& s = *g_state;
  // The calling thread's cache: every object back to the policy (other threads' lists are
  // theirs alone, lock-free; they flush at their bounds and at exit).  Under the lock a
  // signal handler never touches the lists (it is served nested), so no busy flag.
  tc::Cache* c = tc::t_cache;
  if (c && c != tc::kDead) {
    ++tc::g_caches.flushes;
    tc::drain_locked(c);
  }
  // The policy's per-slot records give back their tail (as every 1024 frees do).
  const uint64_t meta_before = arena::held_bytes();
  // Then every free page and page of free places inside the heap's huge pages, and every
  // held free huge page, back to the kernel now (glibc's malloc_trim gives back the free
  // pages inside its heap too).
  uint64_t freed = 0;
  guarded("policy: ", [&]() REQUIRES(heap_lock) {
    s.policy->trim(uint32_t(s.slots.end()));
    freed = s.policy->release_free();
  });
  Backing& b = s.backing;
  const uint64_t returned_before = b.pages_returned();
  b.release_held();
  const uint64_t bytes =
      freed + (b.pages_returned() - returned_before) * Backing::kHuge + sub0(meta_before, arena::held_bytes());
  ++s.c.trims;
  s.c.trimmed_bytes += bytes;
  return bytes;
}

void set_trim_threshold(uint64_t bytes) EXCLUDES(heap_lock) {
  if (t_inside) return;
  Inside in;
  State& s = *g_state;
  // Free huge pages kept committed: as many as fit under the threshold (backing.h keeps
  // at most 64).  Pages held now past the new bound go at their delay's end.
  s.cfg.release_keep_pages = std::min<uint64_t>(bytes / Backing::kHuge, 64);
  s.backing.set_release_delay(s.cfg.release_keep_pages, s.cfg.release_delay_ns);
}

bool claim_foreign_realloc(const void* p) EXCLUDES(heap_lock) {
  if (t_inside) return false;  // heap.cc's reallocate says what a signal handler gets
  if (arena::owns(p) || reentry::owns(p)) return false;
  const uintptr_t x = uintptr_t(p);
  const uintptr_t len = g_len.load(std::memory_order_acquire);
  if (x - g_lo.load(std::memory_order_relaxed) < len) return false;  // the heap's: the common case
  Inside in;
  State& s = *g_state;
  if (!len && s.backing.reserved_bytes()) {
    g_lo.store(s.backing.base(), std::memory_order_relaxed);
    g_len.store(s.backing.reserved_bytes(), std::memory_order_release);
  }
  if (s.backing.contains(p) || s.direct.count(x)) return false;
  ++s.c.foreign_reallocs;
  return true;
}

size_t copy_readable(void* dst, const void* src, size_t n) {
  // process_vm_readv on this process: a page that cannot be read ends the copy (EFAULT)
  // instead of a fault.  One remote iovec per page, so a partial copy stops at a page.
  const pid_t pid = getpid();
  size_t done = 0;
  while (done < n) {
    iovec remote[64];
    unsigned k = 0;
    size_t batch = 0;
    const uintptr_t at = uintptr_t(src) + done;
    while (k < 64 && done + batch < n) {
      const size_t len = std::min<size_t>(kPage - (at + batch) % kPage, n - done - batch);
      remote[k++] = {reinterpret_cast<void*>(at + batch), len};
      batch += len;
    }
    iovec local = {static_cast<char*>(dst) + done, batch};
    const ssize_t r = process_vm_readv(pid, &local, 1, remote, k, 0);
    if (r < 0) {
      if (errno != EFAULT && done == 0) {
        // No such call here (a seccomp filter): the rest of the block's first page, which
        // the program's pointer says is its memory.
        const size_t len = std::min<size_t>(kPage - uintptr_t(src) % kPage, n);
        std::memcpy(dst, src, len);
        return len;
      }
      break;
    }
    done += size_t(r);
    if (size_t(r) < batch) break;
  }
  return done;
}

}  // namespace lalloc
