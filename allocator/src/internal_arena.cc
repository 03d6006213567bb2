#include "internal_arena.h"

#include <sys/mman.h>

#include "fatal.h"

namespace lalloc::arena {

namespace {

constexpr size_t kHdr = 16;         // in front of every pointer
constexpr unsigned kMinShift = 5;   // 32-byte blocks
constexpr unsigned kMaxShift = 40;
constexpr uint32_t kMagic = 0x4c4c4d41;
constexpr size_t kPage = 4096;
constexpr size_t kGiveBackBytes = size_t(1) << 20;  // freed blocks this big return their pages

struct Hdr { uintptr_t block; uint32_t shift; uint32_t magic; };
struct FreeBlock { FreeBlock* next; };

char* base_ = nullptr;
size_t reserved_ = 0, bump_ = 0;
FreeBlock* free_[kMaxShift + 1];

void reserve() {
  // Address space only (MAP_NORESERVE): pages are backed as they are touched.
  for (size_t sz = size_t(64) << 30; sz >= (size_t(1) << 30); sz /= 2) {
    void* p = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      base_ = static_cast<char*>(p);
      reserved_ = sz;
      return;
    }
  }
  fatal("internal arena: cannot reserve address space for the allocator's metadata");
}

unsigned shift_for(size_t need) {
  unsigned s = kMinShift;
  while ((size_t(1) << s) < need) ++s;
  return s;
}

}  // namespace

void* alloc(size_t size, size_t align) {
  if (!base_) reserve();
  if (align < kHdr) align = kHdr;
  if (size > (size_t(1) << (kMaxShift - 1))) return nullptr;
  const size_t need = size + kHdr + (align > kHdr ? align - kHdr : 0);
  const unsigned s = shift_for(need);
  if (s > kMaxShift) return nullptr;
  char* block;
  if (free_[s]) {
    block = reinterpret_cast<char*>(free_[s]);
    free_[s] = free_[s]->next;
  } else {
    const size_t bytes = size_t(1) << s, a = bytes < kPage ? bytes : kPage;
    size_t at = (bump_ + a - 1) & ~(a - 1);
    if (at + bytes > reserved_) return nullptr;
    block = base_ + at;
    bump_ = at + bytes;
  }
  uintptr_t user = (reinterpret_cast<uintptr_t>(block) + kHdr + align - 1) & ~uintptr_t(align - 1);
  Hdr* h = reinterpret_cast<Hdr*>(user - kHdr);
  *h = {reinterpret_cast<uintptr_t>(block), s, kMagic};
  return reinterpret_cast<void*>(user);
}

void free(void* p) {
  const Hdr* h = reinterpret_cast<const Hdr*>(static_cast<char*>(p) - kHdr);
  if (h->magic != kMagic) fatal("internal arena: free of a pointer it did not hand out");
  const unsigned s = h->shift;
  char* block = reinterpret_cast<char*>(h->block);
  const size_t bytes = size_t(1) << s;
  if (bytes >= kGiveBackBytes) madvise(block + kPage, bytes - kPage, MADV_DONTNEED);  // big vectors that grew
  auto* f = reinterpret_cast<FreeBlock*>(block);
  f->next = free_[s];
  free_[s] = f;
}

size_t usable(const void* p) {
  const Hdr* h = reinterpret_cast<const Hdr*>(static_cast<const char*>(p) - kHdr);
  return h->block + (size_t(1) << h->shift) - reinterpret_cast<uintptr_t>(p);
}

bool owns(const void* p) {
  return base_ && static_cast<const char*>(p) >= base_ && static_cast<const char*>(p) < base_ + reserved_;
}

uint64_t used_bytes() { return bump_; }

}  // namespace lalloc::arena
