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
// The range is 2 MiB aligned and MADV_HUGEPAGE: the metadata (the policy's per-slot
// arrays, the bulk of it) sits in huge pages as the heap does.  Blocks of a huge page or
// more are huge-page aligned and return all their pages when freed (whole huge pages, none
// split); their free lists are kept outside them (a pointer inside would fault a huge page
// back in), at most kBigFree per size; one more is left unmapped-in-effect, its address
// space unused (the range is 64 GiB).
constexpr size_t kHuge = size_t(2) << 20;
constexpr unsigned kHugeShift = 21;
constexpr unsigned kBigFree = 16;

struct Hdr { uintptr_t block; uint32_t shift; uint32_t magic; };
struct FreeBlock { FreeBlock* next; };

char* base_ = nullptr;
size_t reserved_ = 0, bump_ = 0, returned_ = 0;
FreeBlock* free_[kMaxShift + 1];
char* big_free_[kMaxShift + 1][kBigFree];  // freed blocks >= kHuge, by shift
unsigned nbig_[kMaxShift + 1];

void reserve() {
  // Address space only (MAP_NORESERVE): pages are backed as they are touched.
  for (size_t sz = size_t(64) << 30; sz >= (size_t(1) << 30); sz /= 2) {
    void* p = mmap(nullptr, sz + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      const uintptr_t raw = uintptr_t(p), base = (raw + kHuge - 1) & ~uintptr_t(kHuge - 1);
      if (base > raw) munmap(p, base - raw);
      if (base + sz < raw + sz + kHuge) munmap(reinterpret_cast<void*>(base + sz), raw + kHuge - base);
      base_ = reinterpret_cast<char*>(base);
      reserved_ = sz;
      madvise(base_, reserved_, MADV_HUGEPAGE);
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
  if (s >= kHugeShift && nbig_[s]) {
    block = big_free_[s][--nbig_[s]];
    returned_ -= size_t(1) << s;
  } else if (s < kHugeShift && free_[s]) {
    block = reinterpret_cast<char*>(free_[s]);
    free_[s] = free_[s]->next;
  } else {
    const size_t bytes = size_t(1) << s, a = bytes < kPage ? bytes : bytes < kHuge ? kPage : kHuge;
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
  if (s >= kHugeShift) {  // big vectors that grew, or shrank (trim)
    madvise(block, size_t(1) << s, MADV_DONTNEED);
    returned_ += size_t(1) << s;
    if (nbig_[s] < kBigFree) big_free_[s][nbig_[s]++] = block;
    return;
  }
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
uint64_t held_bytes() { return bump_ - returned_; }

}  // namespace lalloc::arena
