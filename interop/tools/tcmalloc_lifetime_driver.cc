// A small program that records a real TCMalloc lifetime profile (ProfileType
// kLifetimes) of its own allocations and writes it with TCMalloc's own profile
// builder (tcmalloc::Marshal: MakeProfileProto + gzip) to argv[1].
//
// Built and run by interop/tools/tcmalloc_lifetime_profile.sh against the TCMalloc
// sources vendored in the libtcmalloc-sys crate.  Each site below has a designed
// lifetime, so the importer's derived labels can be checked against it:
//   short_lived   freed at once                      (well under 10 ms)
//   medium_lived  freed after ~20 ms                 (10 ms .. 100 ms)
//   long_lived    freed after ~300 ms                (100 ms .. 1 s)
//   leaked        still live when the session stops  (censored)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "tcmalloc/malloc_extension.h"
#include "tcmalloc/profile_marshaler.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Held {
  void* p;
  Clock::time_point free_at;
};

__attribute__((noinline)) void* short_lived_alloc(size_t n) { return malloc(n); }
__attribute__((noinline)) void* medium_lived_alloc(size_t n) { return malloc(n); }
__attribute__((noinline)) void* long_lived_alloc(size_t n) { return malloc(n); }
__attribute__((noinline)) void* leaked_alloc(size_t n) { return malloc(n); }
__attribute__((noinline)) void release(void* p) { free(p); }

// Touch the block so the allocation is not optimized away.
void use(void* p, size_t n) {
  std::memset(p, 1, n);
  asm volatile("" : : "r"(p) : "memory");
}

void drain(std::deque<Held>& q, Clock::time_point now) {
  while (!q.empty() && q.front().free_at <= now) {
    release(q.front().p);
    q.pop_front();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.pb.gz\n", argv[0]);
    return 2;
  }
  // A small sampling interval so a short run has enough samples per site.
  tcmalloc::MallocExtension::SetProfileSamplingInterval(16 << 10);
  auto token = tcmalloc::MallocExtension::StartLifetimeProfiling();

  std::deque<Held> medium, lng;
  std::vector<void*> leaks;
  long shorts = 0, mediums = 0, longs = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::milliseconds(1500);
  for (int round = 0; Clock::now() < end; ++round) {
    const auto now = Clock::now();
    for (int i = 0; i < 64; ++i) {
      void* p = short_lived_alloc(4096);
      use(p, 4096);
      release(p);
    }
    shorts += 64;
    ++mediums;
    void* m = medium_lived_alloc(8192);
    use(m, 8192);
    medium.push_back({m, now + std::chrono::milliseconds(20)});
    if (round % 4 == 0) {
      ++longs;
      void* l = long_lived_alloc(16384);
      use(l, 16384);
      lng.push_back({l, now + std::chrono::milliseconds(300)});
    }
    if (round % 8 == 0) {
      void* k = leaked_alloc(32768);
      use(k, 32768);
      leaks.push_back(k);
    }
    drain(medium, now);
    drain(lng, now);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Let the last medium and long objects die inside the session.
  std::this_thread::sleep_for(std::chrono::milliseconds(320));
  drain(medium, Clock::now());
  drain(lng, Clock::now());

  tcmalloc::Profile profile = std::move(token).Stop();
  if (profile.Type() != tcmalloc::ProfileType::kLifetimes) {
    std::fprintf(stderr, "not a lifetime profile: is TCMalloc linked in?\n");
    return 1;
  }
  auto marshaled = tcmalloc::Marshal(profile);
  if (!marshaled.ok()) {
    std::fprintf(stderr, "Marshal: %s\n", std::string(marshaled.status().message()).c_str());
    return 1;
  }
  FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr || std::fwrite(marshaled->data(), 1, marshaled->size(), f) != marshaled->size() ||
      std::fclose(f) != 0) {
    std::perror(argv[1]);
    return 1;
  }
  // What really happened, to compare with TCMalloc's estimated counts.
  std::printf("%s: %zu bytes; allocated: short_lived %ld, medium_lived %ld, long_lived %ld, "
              "leaked %zu (live at the end)\n",
              argv[1], marshaled->size(), shorts, mediums, longs, leaks.size());
  return 0;
}
