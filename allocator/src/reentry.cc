#include "reentry.h"

#include <sys/mman.h>

#include <atomic>

#include "lock.h"

namespace lalloc::reentry {

namespace {

constexpr size_t kReserve = size_t(1) << 30;  // address space, touched as used
constexpr size_t kHdr = 16;
constexpr unsigned kMinShift = 5, kMaxShift = 30;
constexpr uint32_t kMagic = 0x5349474e;
struct Hdr { uintptr_t block; uint32_t shift; uint32_t magic; };
struct FreeBlock { FreeBlock* next; };

std::atomic<char*> g_base{nullptr};
std::atomic<size_t> g_bump{0};
std::atomic<void*> g_deferred{nullptr};
std::atomic<uint64_t> g_allocs{0}, g_frees{0}, g_reused{0}, g_leaked{0}, g_deferred_frees{0};
// Freed blocks by power of two, behind a try-lock: a request that finds it taken (by the
// code its handler interrupted, or another thread) bumps instead, a free leaks its block
// (counted): nothing here ever waits.
TryLock g_lists_lock{ATOMIC_FLAG_INIT};
FreeBlock* g_free[kMaxShift + 1] GUARDED_BY(g_lists_lock);

char* base() {
  char* b = g_base.load(std::memory_order_acquire);
  if (b) return b;
  // mmap is a system call (async-signal-safe in practice); a thread that loses the race
  // gives its reservation back.
  void* m = mmap(nullptr, kReserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* expect = nullptr;
  if (!g_base.compare_exchange_strong(expect, static_cast<char*>(m), std::memory_order_acq_rel)) {
    munmap(m, kReserve);
    return expect;
  }
  return static_cast<char*>(m);
}

}  // namespace

void* alloc(size_t size, size_t align) {
  char* b = base();
  if (!b || size > kReserve / 2 || align > kReserve / 2) return nullptr;
  if (align < kHdr) align = kHdr;
  const size_t need = size + kHdr + (align > kHdr ? align - kHdr : 0);
  unsigned s = kMinShift;
  while ((size_t(1) << s) < need) ++s;
  if (s > kMaxShift) return nullptr;
  char* block = nullptr;
  if (g_lists_lock.try_lock()) {
    if (FreeBlock* f = g_free[s]) {
      g_free[s] = f->next;
      block = reinterpret_cast<char*>(f);
    }
    g_lists_lock.unlock();
  }
  if (block) {
    g_reused.fetch_add(1, std::memory_order_relaxed);
  } else {
    const size_t bytes = size_t(1) << s;
    const size_t at = g_bump.fetch_add(bytes, std::memory_order_relaxed);  // 32 B aligned at least
    if (at + bytes > kReserve) return nullptr;
    block = b + at;
  }
  const uintptr_t user = (uintptr_t(block) + kHdr + align - 1) & ~uintptr_t(align - 1);
  *reinterpret_cast<Hdr*>(user - kHdr) = {uintptr_t(block), s, kMagic};
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<void*>(user);
}

bool owns(const void* p) {
  const char* b = g_base.load(std::memory_order_acquire);
  return b && static_cast<const char*>(p) >= b && static_cast<const char*>(p) < b + kReserve;
}

void free(void* p) {
  const Hdr* h = reinterpret_cast<const Hdr*>(static_cast<char*>(p) - kHdr);
  g_frees.fetch_add(1, std::memory_order_relaxed);
  if (h->magic != kMagic || h->shift < kMinShift || h->shift > kMaxShift) return;  // not ours: leave it
  const unsigned s = h->shift;
  auto* f = reinterpret_cast<FreeBlock*>(h->block);
  if (!g_lists_lock.try_lock()) {
    g_leaked.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  f->next = g_free[s];
  g_free[s] = f;
  g_lists_lock.unlock();
}

size_t usable(const void* p) {
  const Hdr* h = reinterpret_cast<const Hdr*>(static_cast<const char*>(p) - kHdr);
  return h->block + (size_t(1) << h->shift) - reinterpret_cast<uintptr_t>(p);
}

void defer(void* p) {
  // Push only; take_deferred swaps the whole list out (no ABA).
  void* head = g_deferred.load(std::memory_order_relaxed);
  do {
    *static_cast<void**>(p) = head;
  } while (!g_deferred.compare_exchange_weak(head, p, std::memory_order_release, std::memory_order_relaxed));
  g_deferred_frees.fetch_add(1, std::memory_order_relaxed);
}

bool deferred_pending() { return g_deferred.load(std::memory_order_relaxed) != nullptr; }

void* take_deferred() { return g_deferred.exchange(nullptr, std::memory_order_acquire); }

Counts counts() {
  return {g_allocs.load(std::memory_order_relaxed), g_frees.load(std::memory_order_relaxed),
          g_reused.load(std::memory_order_relaxed), g_leaked.load(std::memory_order_relaxed),
          g_bump.load(std::memory_order_relaxed), g_deferred_frees.load(std::memory_order_relaxed)};
}

}  // namespace lalloc::reentry
