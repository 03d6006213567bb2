// Unit checks of the 256-bit map helpers the allocators rely on.  Exit 0 when all pass.
#include <cstdio>
#include <random>

#include "common.h"
#include "free_queue.h"

#include <algorithm>
#include <queue>

using sim::Bits256;

static int failures = 0;
#define EXPECT(c) do { if (!(c)) { std::fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, #c); ++failures; } } while (0)

// Reference implementations on a plain bool array.
static int ref_first_fit(const Bits256& u, unsigned n) {
  for (unsigned s = 0; s + n <= 256; ++s) {
    bool ok = true;
    for (unsigned i = s; i < s + n && ok; ++i) ok = !u.test(i);
    if (ok) return int(s);
  }
  return -1;
}
static unsigned ref_lfr(const Bits256& u) {
  unsigned best = 0, run = 0;
  for (unsigned i = 0; i < 256; ++i) { run = u.test(i) ? 0 : run + 1; if (run > best) best = run; }
  return best;
}

int main() {
  Bits256 u;
  EXPECT(sim::first_fit(u, 256) == 0 && sim::longest_free_run(u) == 256);
  u.set_range(0, 256);
  EXPECT(sim::first_fit(u, 1) == -1 && sim::longest_free_run(u) == 0 && u.count() == 256);
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 20000; ++iter) {
    Bits256 b;
    unsigned density = unsigned(rng() % 100);
    for (unsigned i = 0; i < 256; ++i) if (rng() % 100 < density) b.set(i);
    unsigned n = 1 + unsigned(rng() % 64);
    EXPECT(sim::first_fit(b, n) == ref_first_fit(b, n));
    EXPECT(sim::longest_free_run(b) == ref_lfr(b));
    int bf = sim::best_fit(b, n);
    EXPECT((bf < 0) == (ref_first_fit(b, n) < 0));
    unsigned from = unsigned(rng() % 256);
    int fs = b.first_set_from(from), ref = -1;
    for (unsigned i = from; i < 256; ++i) if (b.test(i)) { ref = int(i); break; }
    EXPECT(fs == ref);
  }
  // FreeQueue pops exactly the times a priority queue would, under monotone limits.
  for (int round = 0; round < 50; ++round) {
    sim::FreeQueue q;
    std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> ref;
    uint64_t now = rng() % 1000;
    for (int step = 0; step < 5000; ++step) {
      now += rng() % (round % 2 ? 1000 : 3);
      for (int k = int(rng() % 4); k > 0; --k) {
        uint64_t life = (rng() % 3 == 0) ? rng() % (uint64_t(1) << (rng() % 62)) : rng() % 5;
        q.push(now + life, uint32_t(step));
        ref.push(now + life);
      }
      sim::FreeQueue::Item it;
      while (q.pop_le(now, it)) {
        EXPECT(!ref.empty() && ref.top() == it.t && it.t <= now);
        if (!ref.empty()) ref.pop();
      }
      EXPECT(ref.empty() || ref.top() > now);
      EXPECT(q.size() == ref.size());
    }
  }
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
