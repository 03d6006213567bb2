#include "internal_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>

#include "address_space.h"
#include "fatal.h"

namespace lalloc::arena {

namespace {

constexpr size_t kHdr = 16;  // in front of every pointer
constexpr uint32_t kMagic = 0x4c4c0000;  // in Hdr::cls's top half
constexpr size_t kPage = 4096;
// The range is 2 MiB aligned but never MADV_HUGEPAGE: the pages free blocks give back
// would come back whole through khugepaged (it collapses a range with one page present),
// and a metadata arena of 3.5 MiB held 6 MiB of huge pages on Redis mixed.
constexpr size_t kHuge = size_t(2) << 20;
// Small blocks: size classes 4 per doubling (32, 48, 64, 80, 96, 112, 128, 160, ...,
// 1.75 MiB), 16-byte multiples, carved upward from the range's bottom, on a free list
// per class when freed (the list's link in the block).  The header counts in the size a
// block is chosen by, and the classes are 16 B past the usual ones (2^k + 16, ...), so a
// container of a power-of-two capacity (a vector) takes a block of its size, not twice.
// A free block of kReturnFrom or more gives back every whole page it covers (MADV_DONTNEED):
// its link is kept outside it, in out_free_ (a block of a vector that grew is freed at
// each growth, and z3's and larson's such blocks had held 54 and 64 KiB: the whole of
// each one under 16 KiB, the first page, holding the link, of each larger one).  When
// out_free_ is full, the block keeps its link and first page as before.
// Big blocks (over kSmallMax): whole huge pages, huge-page aligned, carved downward from
// the range's top (no alignment gaps among the small ones); a freed one returns all its
// pages and is kept (outside it: its pages stay unfaulted) for a later big block that
// fits.
constexpr size_t kSmallMax = size_t(1) << 20;
constexpr size_t kReturnFrom = kPage + 16;  // a block that can cover a whole page
constexpr unsigned kOutFree = 256;          // free blocks whose link is kept outside them
constexpr unsigned kClasses = 4 * 16 + 2;  // 32, 48, then 4 per doubling from 64 to > 1 MiB
constexpr unsigned kBigFree = 64;
constexpr unsigned kBigCensus = 64;  // big blocks counted by huge pages (last: and more)

struct Hdr { uintptr_t block; uint32_t cls; uint32_t size; };  // size: requested (census)
struct FreeBlock { FreeBlock* next; };
struct BigFree { char* block; size_t pages; };
struct OutFree { char* block; unsigned cls; };

char* base_ GUARDED_BY(heap_lock) = nullptr;
size_t bump_ GUARDED_BY(heap_lock) = 0, top_ GUARDED_BY(heap_lock) = 0;  // small blocks below bump_, big ones from top_ up
FreeBlock* free_[kClasses] GUARDED_BY(heap_lock);
BigFree big_free_[kBigFree] GUARDED_BY(heap_lock);
unsigned nbig_ GUARDED_BY(heap_lock) = 0;
OutFree out_free_[kOutFree] GUARDED_BY(heap_lock);
unsigned nout_ GUARDED_BY(heap_lock) = 0;
size_t returned_ GUARDED_BY(heap_lock) = 0;  // pages given back in free blocks (small and big)
// census: by class (small), by huge pages (big, kClasses + pages - 1)
uint64_t carved_[kClasses + kBigCensus] GUARDED_BY(heap_lock), nfree_[kClasses + kBigCensus] GUARDED_BY(heap_lock),
    live_req_[kClasses + kBigCensus] GUARDED_BY(heap_lock);
// Read without the lock (owns, usable: a free or malloc_usable_size from any thread):
// the range's size and the class sizes, written once by reserve() (under the lock)
// before the range's base is published here (release); owns() reads it (acquire) first.
size_t reserved_ = 0;
// Read/write: [0, rw_lo_) for the small blocks, [rw_hi_, reserved_) for the big ones.
size_t rw_lo_ GUARDED_BY(heap_lock) = 0, rw_hi_ GUARDED_BY(heap_lock) = 0;
size_t class_size_[kClasses];
std::atomic<char*> published_base_{nullptr};

void reserve() REQUIRES(heap_lock) {
  // Address space only (PROT_NONE, MAP_NORESERVE; made read/write as blocks are carved,
  // writable_below/from, so vm.overcommit_memory=2 charges what is used): pages are backed
  // as they are touched.  64 GiB, or under an address-space limit (RLIMIT_AS) an eighth of
  // what is left of it (the heaps take half of the rest, backing.cc); less if the kernel
  // refuses, down to 16 MiB.
  constexpr size_t kMost = size_t(64) << 30, kLeast = size_t(16) << 20;
  size_t sz = kMost;
  if (const uint64_t left = address_space_left(); left != UINT64_MAX)
    sz = std::clamp<size_t>(left / 8 & ~(kHuge - 1), kLeast, kMost);
  for (; sz >= kLeast; sz = sz / 2 & ~(kHuge - 1)) {
    void* p = mmap(nullptr, sz + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      const uintptr_t raw = uintptr_t(p), base = (raw + kHuge - 1) & ~uintptr_t(kHuge - 1);
      if (base > raw) munmap(p, base - raw);
      if (base + sz < raw + sz + kHuge) munmap(reinterpret_cast<void*>(base + sz), raw + kHuge - base);
      base_ = reinterpret_cast<char*>(base);
      reserved_ = top_ = rw_hi_ = sz;
      rw_lo_ = 0;
      class_size_[0] = 32;
      class_size_[1] = 48;
      for (unsigned c = 2; c < kClasses; ++c) {
        const size_t k = size_t(64) << ((c - 2) / 4);
        class_size_[c] = k + k / 4 * ((c - 2) % 4) + kHdr;
      }
      published_base_.store(base_, std::memory_order_release);
      return;
    }
  }
  fatal("internal arena: cannot reserve address space for the allocator's metadata");
}

unsigned class_for(size_t need) {
  if (need <= 48) return need <= 32 ? 0 : 1;
  // Class 2 + 4 (b - 6) + j is 2^b + j 2^b/4 + 16: the smallest holding m = need - 16.
  const size_t m = need - kHdr;
  if (m <= 64) return 2;
  const unsigned b = 63 - unsigned(__builtin_clzll(m - 1));  // 2^b < m <= 2^(b+1)
  const size_t step = (size_t(1) << b) / 4;
  unsigned c = 2 + 4 * (b - 6) + unsigned((m - (size_t(1) << b) + step - 1) / step);
  while (class_size_[c] < need) ++c;  // (never: the formula is exact)
  return c;
}

// The whole pages of [lo, hi): their first byte; how many bytes.
uintptr_t first_whole_page(char* lo) { return (uintptr_t(lo) + kPage - 1) & ~uintptr_t(kPage - 1); }
size_t whole_pages(char* lo, char* hi) {
  const uintptr_t a = first_whole_page(lo), b = uintptr_t(hi) & ~uintptr_t(kPage - 1);
  return b > a ? b - a : 0;
}

// Whole pages of [lo, hi) back to the OS.
size_t give_back(char* lo, char* hi) {
  const size_t n = whole_pages(lo, hi);
  if (n) madvise(reinterpret_cast<void*>(first_whole_page(lo)), n, MADV_DONTNEED);
  return n;
}

// The range read/write before it is carved: small blocks up to `end`, by 2 MiB steps
// from the bottom; big ones from `start` (huge pages) up, from the top.  false: the kernel
// refused (a commit limit).
bool writable_below(size_t end) REQUIRES(heap_lock) {
  if (end <= rw_lo_) return true;
  const size_t to = std::min((end + kHuge - 1) & ~(kHuge - 1), reserved_);
  if (mprotect(base_ + rw_lo_, to - rw_lo_, PROT_READ | PROT_WRITE) != 0) return false;
  rw_lo_ = to;
  return true;
}
bool writable_from(size_t start) REQUIRES(heap_lock) {
  if (start >= rw_hi_) return true;
  if (mprotect(base_ + start, rw_hi_ - start, PROT_READ | PROT_WRITE) != 0) return false;
  rw_hi_ = start;
  return true;
}

// fresh: carved now (not a kept free block).
char* big_alloc(size_t& pages, bool& fresh) REQUIRES(heap_lock) {
  // The smallest kept free block that fits (its pages are unfaulted; a bigger one's
  // excess is address space only, and the block keeps its size).
  unsigned best = kBigFree;
  for (unsigned i = 0; i < nbig_; ++i)
    if (big_free_[i].pages >= pages && (best == kBigFree || big_free_[i].pages < big_free_[best].pages)) best = i;
  fresh = best == kBigFree;
  if (!fresh) {
    const BigFree f = big_free_[best];
    big_free_[best] = big_free_[--nbig_];
    returned_ -= f.pages * kHuge;
    pages = f.pages;
    return f.block;
  }
  const size_t bytes = pages * kHuge;
  if (top_ < bump_ + bytes || !writable_from(top_ - bytes)) return nullptr;
  top_ -= bytes;
  return base_ + top_;
}

// Hdr::cls: a small block's class, or kClasses + huge pages - 1 (big); the census index.
unsigned census_index(unsigned cls) { return cls < kClasses + kBigCensus ? cls : kClasses + kBigCensus - 1; }
size_t big_pages(unsigned cls) { return cls - kClasses + 1; }

}  // namespace

void* alloc(size_t size, size_t align) {
  if (!base_) reserve();
  if (align < kHdr) align = kHdr;
  if (size > (size_t(1) << 40) || align > (size_t(1) << 30)) return nullptr;
  const size_t need = size + kHdr + (align > kHdr ? align - kHdr : 0);
  char* block;
  uint32_t cls;
  if (need > kSmallMax) {
    size_t pages = (need + kHuge - 1) / kHuge;
    if (pages > 0xffff - kClasses) return nullptr;
    bool fresh;
    block = big_alloc(pages, fresh);
    if (!block) return nullptr;
    cls = uint32_t(kClasses + pages - 1);
    if (fresh) ++carved_[census_index(cls)], ++nfree_[census_index(cls)];
  } else {
    cls = class_for(need);
    unsigned out = class_size_[cls] >= kReturnFrom ? 0 : nout_;  // (nout_: none)
    while (out < nout_ && out_free_[out].cls != cls) ++out;
    if (out < nout_) {  // (its pages come back zeroed as they are touched)
      block = out_free_[out].block;
      out_free_[out] = out_free_[--nout_];
      returned_ -= whole_pages(block, block + class_size_[cls]);
    } else if (free_[cls]) {
      block = reinterpret_cast<char*>(free_[cls]);
      free_[cls] = free_[cls]->next;
      if (class_size_[cls] >= kReturnFrom) returned_ -= whole_pages(block + kPage, block + class_size_[cls]);
    } else {
      const size_t bytes = class_size_[cls];
      if (bump_ + bytes > top_ || !writable_below(bump_ + bytes)) return nullptr;
      block = base_ + bump_;
      bump_ += bytes;
      ++carved_[cls];
      ++nfree_[cls];
    }
  }
  --nfree_[census_index(cls)];
  live_req_[census_index(cls)] += size;
  uintptr_t user = (reinterpret_cast<uintptr_t>(block) + kHdr + align - 1) & ~uintptr_t(align - 1);
  Hdr* h = reinterpret_cast<Hdr*>(user - kHdr);
  *h = {reinterpret_cast<uintptr_t>(block), kMagic | cls, uint32_t(size > UINT32_MAX ? UINT32_MAX : size)};
  return reinterpret_cast<void*>(user);
}

void free(void* p) {
  const Hdr* h = reinterpret_cast<const Hdr*>(static_cast<char*>(p) - kHdr);
  if ((h->cls & 0xffff0000u) != kMagic) fatal("internal arena: free of a pointer it did not hand out");
  const unsigned cls = h->cls & 0xffff;
  char* block = reinterpret_cast<char*>(h->block);
  ++nfree_[census_index(cls)];
  live_req_[census_index(cls)] -= h->size;
  if (cls >= kClasses) {  // big vectors that grew, or shrank (trim)
    const size_t pages = big_pages(cls);
    madvise(block, pages * kHuge, MADV_DONTNEED);
    returned_ += pages * kHuge;
    if (nbig_ < kBigFree) big_free_[nbig_++] = {block, pages};
    // else its address space stays unused (the range is 64 GiB)
    return;
  }
  if (class_size_[cls] >= kReturnFrom && nout_ < kOutFree) {
    out_free_[nout_++] = {block, cls};
    returned_ += give_back(block, block + class_size_[cls]);
    return;
  }
  auto* f = reinterpret_cast<FreeBlock*>(block);
  f->next = free_[cls];
  free_[cls] = f;
  if (class_size_[cls] >= kReturnFrom)
    returned_ += give_back(block + kPage, block + class_size_[cls]);
}

size_t usable(const void* p) {
  const Hdr* h = reinterpret_cast<const Hdr*>(static_cast<const char*>(p) - kHdr);
  const unsigned cls = h->cls & 0xffff;
  return h->block + (cls < kClasses ? class_size_[cls] : big_pages(cls) * kHuge) - reinterpret_cast<uintptr_t>(p);
}

bool owns(const void* p) {
  const char* b = published_base_.load(std::memory_order_acquire);
  return b && static_cast<const char*>(p) >= b && static_cast<const char*>(p) < b + reserved_;
}

uint64_t used_bytes() { return bump_ + (reserved_ - top_); }
uint64_t held_bytes() { return used_bytes() - returned_; }

uint64_t resident_bytes() {
  if (!base_) return 0;
  // mincore over what was carved: the truth (huge pages count whole once touched).
  static unsigned char vec[4096];
  uint64_t n = 0;
  auto count = [&](size_t lo, size_t hi) REQUIRES(heap_lock) {
    for (size_t at = lo; at < hi;) {
      const size_t len = hi - at < sizeof vec * kPage ? hi - at : sizeof vec * kPage;
      if (mincore(base_ + at, len, vec) != 0) return;
      for (size_t i = 0; i < (len + kPage - 1) / kPage; ++i) n += vec[i] & 1;
      at += len;
    }
  };
  count(0, (bump_ + kPage - 1) & ~(kPage - 1));
  count(top_, reserved_);
  return n * kPage;
}

unsigned census(ClassCensus* out, unsigned max) {
  unsigned n = 0;
  for (unsigned c = 0; c < kClasses + kBigCensus && n < max; ++c)
    if (carved_[c])
      out[n++] = {c < kClasses ? class_size_[c] : (c - kClasses + 1) * kHuge, carved_[c], nfree_[c], live_req_[c],
                  c >= kClasses || class_size_[c] >= kReturnFrom};
  return n;
}

}  // namespace lalloc::arena
