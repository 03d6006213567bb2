// Test and benchmark harness for an exported lifetime model (tests/test_export_*.py,
// benchmarks/export_latency.py).  Linked against LifetimeModel::lifetime_model through
// find_package, like any consumer.  It also interposes malloc to count allocations.
//
//   export_harness info
//   export_harness predict-frames STACKS OUT   STACKS: u32 n; n x (u32 frames; frames x
//   export_harness predict-ids IDS OUT                (u32 len, bytes)); IDS: u32 n, u32 len,
//                                                      n*len i32.  OUT: n x (i32 class, C f32)
//   export_harness tokenize VECTORS            VECTORS: u32 vocab, tokens, u32 cases, stacks
//   export_harness mallocs STACKS              allocations per prediction after warm-up
//   export_harness cache                       cache behaviour checks
//   export_harness threads STACKS              one predictor per thread gives the same answers
//   export_harness bench STACKS [ROUNDS]       latency JSON
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "lifetime_model.h"

// ---------------------------------------------------------------------------------
// Malloc interposer: counts every allocation call while g_counting is set.
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}
static std::atomic<bool> g_counting{false};
static std::atomic<long> g_allocs{0};
static inline void Count() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
extern "C" {
void* malloc(size_t n) { Count(); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { Count(); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { Count(); return __libc_realloc(p, n); }
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) { Count(); return __libc_memalign(a, n); }
void* aligned_alloc(size_t a, size_t n) { Count(); return __libc_memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  Count();
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) { Count(); return __libc_memalign(4096, n); }
}

// ---------------------------------------------------------------------------------
namespace {

using Stack = std::vector<std::string>;

uint32_t ReadU32(FILE* f) {
  uint32_t v = 0;
  if (fread(&v, 4, 1, f) != 1) { fprintf(stderr, "short read\n"); exit(2); }
  return v;
}

Stack ReadStack(FILE* f) {
  Stack s(ReadU32(f));
  for (std::string& frame : s) {
    frame.resize(ReadU32(f));
    if (!frame.empty() && fread(&frame[0], 1, frame.size(), f) != frame.size()) exit(2);
  }
  return s;
}

std::vector<Stack> ReadStacks(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  std::vector<Stack> out(ReadU32(f));
  for (Stack& s : out) s = ReadStack(f);
  fclose(f);
  return out;
}

// A stack as the pointer/length arrays the API takes (built before any timing).
struct Frames {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  explicit Frames(const Stack& s) {
    for (const std::string& f : s) { ptrs.push_back(f.data()); lens.push_back(f.size()); }
  }
  int n() const { return static_cast<int>(ptrs.size()); }
};

int Info() {
  const lifetime_model_info& i = lifetime_model::Info();
  printf("{\"max_frames\": %d, \"tokens_per_frame\": %d, \"max_tokens\": %d, "
         "\"num_classes\": %d, \"vocab_size\": %d, \"graph\": \"%s\", \"model_id\": \"%s\", "
         "\"class_names\": [", i.max_frames, i.tokens_per_frame, i.max_tokens, i.num_classes,
         i.vocab_size, i.graph, i.model_id);
  for (int c = 0; c < i.num_classes; ++c) printf("%s\"%s\"", c ? ", " : "", i.class_names[c]);
  // The appended label scheme fields (this library is this export's: they are there).
  printf("], \"info_size\": %zu, \"label_clock\": \"%s\", \"boundaries\": [",
         lifetime_model_info_size(), i.label_clock);
  for (int b = 0; b < i.num_boundaries; ++b) printf("%s%.17g", b ? ", " : "", i.boundaries[b]);
  printf("], \"boundaries_ns\": %s", i.boundaries_ns ? "[" : "null");
  for (int b = 0; i.boundaries_ns && b < i.num_boundaries; ++b)
    printf("%s%llu", b ? ", " : "", (unsigned long long)i.boundaries_ns[b]);
  printf("%s, \"size_frame\": %d}\n", i.boundaries_ns ? "]" : "", i.size_frame);
  return 0;
}

// One size per argument -> its size frame per line (tests/data/size_frame_vectors.json).
int SizeFrames(int argc, char** argv) {
  for (int a = 0; a < argc; ++a) {
    char buf[32];
    size_t n = lifetime_size_frame(strtoull(argv[a], nullptr, 10), buf, sizeof buf);
    printf("%s %zu\n", buf, n);
  }
  return 0;
}

void WriteResult(FILE* out, int cls, const float* probs) {
  int32_t c = cls;
  fwrite(&c, 4, 1, out);
  fwrite(probs, sizeof(float), lifetime_model::Info().num_classes, out);
}

int PredictFrames(const char* in, const char* outp) {
  std::vector<Stack> stacks = ReadStacks(in);
  lifetime_model::Predictor p;
  if (!p.ok()) return 3;
  FILE* out = fopen(outp, "wb");
  for (const Stack& s : stacks) {
    Frames f(s);
    int cls = p.PredictFrames(f.ptrs.data(), f.lens.data(), f.n());
    if (cls < 0) return 4;
    WriteResult(out, cls, p.probabilities());
  }
  fclose(out);
  return 0;
}

// Stacks whose frame 0 is an object's size in decimal: each predicted through the §2.3
// cache's miss path (lifetime_cache_predict, which makes the size frame of a model keyed
// on size), its class written as int32.
int CacheSized(const char* in, const char* outp) {
  std::vector<Stack> stacks = ReadStacks(in);
  lifetime_predictor* p = lifetime_predictor_create();
  if (!p) return 3;
  lifetime_cache* c = lifetime_cache_thread_local();
  FILE* out = fopen(outp, "wb");
  for (size_t k = 0; k < stacks.size(); ++k) {
    const Stack& s = stacks[k];
    if (s.empty()) return 5;
    Stack rest(s.begin() + 1, s.end());
    Frames f(rest);
    lifetime_cache_clear(c);
    auto get = [](void* ctx, const char** frames, size_t* lengths, int max_frames) -> int {
      const Frames& fr = *static_cast<const Frames*>(ctx);
      int n = fr.n() < max_frames ? fr.n() : max_frames;
      for (int i = 0; i < n; ++i) { frames[i] = fr.ptrs[i]; lengths[i] = fr.lens[i]; }
      return n;
    };
    int32_t cls = lifetime_cache_predict(c, p, k + 1, 0, strtoull(s[0].c_str(), nullptr, 10),
                                         get, &f);
    if (cls < 0) return 4;
    fwrite(&cls, 4, 1, out);
  }
  fclose(out);
  lifetime_predictor_destroy(p);
  return 0;
}

int PredictIds(const char* in, const char* outp) {
  FILE* f = fopen(in, "rb");
  if (!f) { perror(in); return 2; }
  uint32_t n = ReadU32(f), len = ReadU32(f);
  if (static_cast<int>(len) != lifetime_model::Info().max_tokens) return 5;
  std::vector<int32_t> ids(static_cast<size_t>(n) * len);
  if (fread(ids.data(), 4, ids.size(), f) != ids.size()) return 2;
  fclose(f);
  lifetime_model::Predictor p;
  FILE* out = fopen(outp, "wb");
  for (uint32_t k = 0; k < n; ++k) {
    int cls = p.PredictIds(&ids[static_cast<size_t>(k) * len]);
    if (cls < 0) return 4;
    WriteResult(out, cls, p.probabilities());
  }
  fclose(out);
  return 0;
}

// Output per case: "T<TAB>tok<TAB>tok..." (flat, <sep> between frames, as
// core.tokenizer.tokenize) and "I<TAB>id id ..." under the given vocabulary.
int Tokenize(const char* in) {
  FILE* f = fopen(in, "rb");
  if (!f) { perror(in); return 2; }
  Stack vocab = ReadStack(f);
  Frames vf(vocab);
  lifetime_model::Vocabulary v(vf.ptrs.data(), vf.lens.data(), vf.n());
  if (!v.ok()) return 3;
  uint32_t cases = ReadU32(f);
  std::vector<lifetime_model::TokenView> toks(4096);
  for (uint32_t c = 0; c < cases; ++c) {
    Stack s = ReadStack(f);
    std::vector<std::string> flat;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i) { flat.push_back("<sep>"); ids.push_back(v.Id("<sep>", 5)); }
      size_t n = lifetime_model::FrameTokens(s[i].data(), s[i].size(), toks.data(), toks.size());
      for (size_t t = 0; t < n && t < toks.size(); ++t) {
        flat.emplace_back(toks[t].data, toks[t].size);
        ids.push_back(v.Id(toks[t].data, toks[t].size));
      }
    }
    printf("T");
    for (const std::string& t : flat) printf("\t%s", t.c_str());
    printf("\nI");
    for (size_t i = 0; i < ids.size(); ++i) printf("%s%d", i ? " " : "\t", ids[i]);
    printf("\n");
  }
  fclose(f);
  return 0;
}

struct CacheCtx {
  const Frames* frames;
  int calls = 0;
};

int GetFrames(void* ctx, const char** frames, size_t* lengths, int max_frames) {
  CacheCtx* c = static_cast<CacheCtx*>(ctx);
  ++c->calls;
  int n = std::min(c->frames->n(), max_frames);
  for (int i = 0; i < n; ++i) { frames[i] = c->frames->ptrs[i]; lengths[i] = c->frames->lens[i]; }
  return n;
}

int Mallocs(const char* in) {
  std::vector<Stack> stacks = ReadStacks(in);
  std::vector<Frames> frames;
  for (const Stack& s : stacks) frames.emplace_back(s);
  const int tokens = lifetime_model::Info().max_tokens;
  std::vector<int32_t> ids(static_cast<size_t>(tokens) * frames.size());
  for (size_t k = 0; k < frames.size(); ++k) {
    lifetime_model::TokenizeFrames(frames[k].ptrs.data(), frames[k].lens.data(), frames[k].n(),
                                   &ids[k * tokens]);
  }
  lifetime_predictor* p = lifetime_predictor_create();
  lifetime_cache* cache = lifetime_cache_thread_local();
  lifetime_cache_set_revalidate_every(cache, 3);
  float probs[256];
  // Warm-up: one prediction of each kind, one cache call.
  lifetime_predict_frames(p, frames[0].ptrs.data(), frames[0].lens.data(), frames[0].n(), probs);
  lifetime_predict_ids(p, ids.data(), probs);
  CacheCtx warm{&frames[0]};
  lifetime_cache_predict(cache, p, 1, 2, 3, GetFrames, &warm);
  long counts[3] = {0, 0, 0};
  long n = static_cast<long>(frames.size());
  g_allocs = 0;
  g_counting = true;
  for (long k = 0; k < n; ++k) {
    lifetime_predict_frames(p, frames[k].ptrs.data(), frames[k].lens.data(), frames[k].n(), probs);
  }
  counts[0] = g_allocs.exchange(0);
  for (long k = 0; k < n; ++k) lifetime_predict_ids(p, &ids[k * tokens], probs);
  counts[1] = g_allocs.exchange(0);
  CacheCtx ctx{nullptr};
  for (int round = 0; round < 4; ++round) {  // misses, hits and revalidations
    for (long k = 0; k < n; ++k) {
      ctx.frames = &frames[k];
      lifetime_cache_predict(cache, p, 0x400000 + k * 16, 8192, 32, GetFrames, &ctx);
    }
  }
  counts[2] = g_allocs.exchange(0);
  g_counting = false;
  // A check that the interposer sees allocations at all.
  g_counting = true;
  void* probe = malloc(32);
  g_counting = false;
  free(probe);
  long seen = g_allocs.exchange(0);
  lifetime_cache_stats s;
  lifetime_cache_get_stats(cache, &s);
  printf("{\"predictions\": %ld, \"mallocs_frames\": %ld, \"mallocs_ids\": %ld, "
         "\"cache_calls\": %ld, \"mallocs_cache\": %ld, \"model_runs_in_cache\": %d, "
         "\"interposer_sees\": %ld, \"revalidations\": %llu}\n",
         n, counts[0], counts[1], 4 * n, counts[2], ctx.calls, seen,
         (unsigned long long)s.revalidations);
  lifetime_predictor_destroy(p);
  return 0;
}

// ---------------------------------------------------------------------------------
int g_failures = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      printf("FAIL %s:%d: %s\n", __func__, __LINE__, #cond);             \
      ++g_failures;                                                      \
    }                                                                    \
  } while (0)

using lifetime_model::PredictionCache;

void TestHitMiss() {
  static PredictionCache c;
  c.Clear();
  int runs = 0;
  auto model = [&runs]() { ++runs; return 3; };
  uint64_t k = lifetime_model::CacheKey(0x401000, 4096, 48);
  CHECK(c.Get(k, model) == 3);  // miss: the model runs
  CHECK(runs == 1);
  for (int i = 0; i < 10; ++i) CHECK(c.Get(k, model) == 3);  // hits: it does not
  CHECK(runs == 1);
  CHECK(c.stats().misses == 1 && c.stats().hits == 10);
  uint64_t other = lifetime_model::CacheKey(0x401000, 4096, 64);  // another size
  CHECK(other != k);
  CHECK(c.Get(other, [&runs]() { ++runs; return 5; }) == 5);
  CHECK(runs == 2 && c.stats().misses == 2);
  CHECK(c.Find(lifetime_model::CacheKey(0x401000, 4160, 48)).status == PredictionCache::kMiss);
  printf("PASS hit_miss\n");
}

void TestRevalidation() {
  static PredictionCache c;
  c.Clear();
  CHECK(c.revalidate_every() == 1000);  // the default
  c.set_revalidate_every(4);
  uint64_t k = lifetime_model::CacheKey(0x402000, 1024, 16);
  int runs = 0, answer = 2;
  auto model = [&]() { ++runs; return answer; };
  CHECK(c.Get(k, model) == 2);                   // miss -> 2
  for (int i = 0; i < 3; ++i) CHECK(c.Get(k, model) == 2);
  CHECK(runs == 1);
  CHECK(c.Get(k, model) == 2);                   // 4th hit: revalidation, agrees
  CHECK(runs == 2 && c.stats().revalidations == 1 && c.stats().disagreements == 0);
  answer = 6;                                    // the model now says longer-lived
  for (int i = 0; i < 3; ++i) CHECK(c.Get(k, model) == 2);
  CHECK(c.Get(k, model) == 6);                   // revalidation: max(2, 6)
  CHECK(runs == 3 && c.stats().disagreements == 1);
  answer = 1;                                    // shorter: the entry keeps the max
  for (int i = 0; i < 3; ++i) CHECK(c.Get(k, model) == 6);
  CHECK(c.Get(k, model) == 6);
  CHECK(runs == 4 && c.stats().disagreements == 2);
  CHECK(c.stats().hits == 12 && c.stats().misses == 1 && c.stats().revalidations == 3);
  c.set_revalidate_every(0);                     // never
  for (int i = 0; i < 5000; ++i) c.Get(k, model);
  CHECK(runs == 4);
  // Default period: exactly one model run per 1000 hits.
  c.Clear();
  c.set_revalidate_every(PredictionCache::kDefaultRevalidateEvery);
  runs = 0;
  answer = 2;
  c.Get(k, model);
  for (int i = 0; i < 3000; ++i) c.Get(k, model);
  CHECK(runs == 1 + 3);
  // PeekUncounted (the allocator's inline hit): Peek's answer and its revalidation
  // count, nothing in stats().hits.
  c.Clear();
  c.set_revalidate_every(3);
  runs = 0;
  c.Get(k, model);                               // miss -> 2
  const uint64_t hits = c.stats().hits;
  CHECK(c.PeekUncounted(k) == 2 && c.PeekUncounted(k) == 2);
  CHECK(c.stats().hits == hits);
  CHECK(c.PeekUncounted(k) == -1 && c.Peek(k) == -1);  // 3rd hit since the check: revalidation due
  CHECK(c.PeekUncounted(lifetime_model::CacheKey(0x403000, 1024, 16)) == -1);  // not cached
  CHECK(c.Get(k, model) == 2 && runs == 2 && c.stats().revalidations == 1);
  printf("PASS revalidation_max_on_disagree\n");
}

void TestAliasing() {
  static PredictionCache c;
  c.Clear();
  int runs = 0;
  // Two contexts with the same return address, stack height and size share one entry
  // (the key cannot tell them apart): the second gets the first one's class, and
  // revalidation settles on the max of the two.
  uint64_t k = lifetime_model::CacheKey(0x403000, 2048, 128);
  c.set_revalidate_every(2);
  CHECK(c.Get(k, [&]() { ++runs; return 1; }) == 1);  // context A
  CHECK(c.Get(k, [&]() { ++runs; return 7; }) == 1);  // context B aliases A: a hit
  CHECK(c.Get(k, [&]() { ++runs; return 7; }) == 7);  // revalidated by B: max(1, 7)
  CHECK(c.Get(k, [&]() { ++runs; return 1; }) == 7);  // A now also gets 7
  CHECK(runs == 2);
  // Different keys in the same slot evict each other (direct-mapped): find two.
  c.Clear();
  uint64_t a = lifetime_model::CacheKey(0x500000, 4096, 32), b = 0;
  for (uintptr_t ra = 0x500010; !b; ra += 16) {
    uint64_t cand = lifetime_model::CacheKey(ra, 4096, 32);
    if (PredictionCache::Slot(cand) == PredictionCache::Slot(a)) b = cand;
  }
  CHECK(c.Get(a, []() { return 2; }) == 2);
  CHECK(c.Get(b, []() { return 5; }) == 5);  // evicts a
  CHECK(c.stats().evictions == 1);
  CHECK(c.Find(a).status == PredictionCache::kMiss);  // a is gone, not answered with 5
  CHECK(c.Get(a, []() { return 2; }) == 2);
  // A failing model run caches nothing.
  c.Clear();
  CHECK(c.Get(a, []() { return -1; }) == -1);
  CHECK(c.Find(a).status == PredictionCache::kMiss);
  printf("PASS aliasing\n");
}

void TestKeysSpread() {
  // Nearby return addresses, stack heights and sizes land in different slots.
  std::vector<int> used(PredictionCache::kEntries, 0);
  int n = 0;
  for (uintptr_t ra = 0x401000; ra < 0x401000 + 64 * 16; ra += 16)
    for (uintptr_t sh = 4096; sh < 4096 + 8 * 64; sh += 64) {
      used[PredictionCache::Slot(lifetime_model::CacheKey(ra, sh, 32))]++;
      ++n;
    }
  int distinct = 0;
  for (int u : used) distinct += u > 0;
  CHECK(distinct > n * 7 / 10);  // 512 keys in 4096 slots: ~94% expected distinct
  printf("PASS keys_spread (%d of %d keys in distinct slots)\n", distinct, n);
}

void TestCApiThreadLocal() {
  lifetime_cache* mine = lifetime_cache_thread_local();
  lifetime_cache* theirs = nullptr;
  std::thread t([&theirs]() { theirs = lifetime_cache_thread_local(); });
  t.join();
  CHECK(mine != theirs && mine == lifetime_cache_thread_local());
  lifetime_cache_clear(mine);
  lifetime_cache_stats s;
  lifetime_cache_get_stats(mine, &s);
  CHECK(s.hits == 0 && s.misses == 0);
  // Predictor failure and bad arguments: errors, not crashes.
  CHECK(lifetime_cache_predict(mine, nullptr, 1, 2, 3, GetFrames, nullptr) == -1);
  CHECK(lifetime_predict_frames(nullptr, nullptr, nullptr, 0, nullptr) == -1);
  lifetime_predictor* p = lifetime_predictor_create();
  CHECK(p != nullptr);
  CHECK(lifetime_predict_frames(p, nullptr, nullptr, 3, nullptr) == -1);
  CHECK(lifetime_predict_frames(p, nullptr, nullptr, 0, nullptr) >= 0);  // empty stack
  lifetime_predictor_destroy(p);
  printf("PASS c_api_thread_local\n");
}

// LIFETIME_CACHE_LAYOUT: the C API's cache is a PredictionCache, so an inline Peek (the
// allocator's hit path) answers and counts as lifetime_cache_lookup does.
void TestInlineLayout() {
  CHECK(lifetime_cache_layout() == LIFETIME_CACHE_LAYOUT);
  lifetime_cache* c = lifetime_cache_thread_local();
  lifetime_cache_clear(c);
  auto* inl = reinterpret_cast<PredictionCache*>(c);
  lifetime_predictor* p = lifetime_predictor_create();
  auto one_frame = [](void*, const char** frames, size_t* lengths, int max_frames) {
    if (max_frames < 1) return 0;
    frames[0] = "main";
    lengths[0] = 4;
    return 1;
  };
  CHECK(p != nullptr);
  CHECK(inl->Peek(lifetime_model::CacheKey(0x404000, 512, 64)) == -1);
  const int cls = lifetime_cache_predict(c, p, 0x404000, 512, 64, one_frame, nullptr);
  CHECK(cls >= 0);
  CHECK(inl->Peek(lifetime_model::CacheKey(0x404000, 512, 64)) == cls);
  CHECK(lifetime_cache_lookup(c, 0x404000, 512, 64) == cls);
  lifetime_cache_stats s;
  lifetime_cache_get_stats(c, &s);
  CHECK(s.hits == 2 && s.misses == 1);
  lifetime_predictor_destroy(p);
  lifetime_cache_clear(c);
  printf("PASS inline_layout\n");
}

int Cache() {
  TestHitMiss();
  TestRevalidation();
  TestAliasing();
  TestKeysSpread();
  TestCApiThreadLocal();
  TestInlineLayout();
  printf("%s\n", g_failures ? "FAILED" : "OK");
  return g_failures ? 1 : 0;
}

int Threads(const char* in) {
  std::vector<Stack> stacks = ReadStacks(in);
  std::vector<Frames> frames;
  for (const Stack& s : stacks) frames.emplace_back(s);
  std::vector<int> want(frames.size());
  {
    lifetime_model::Predictor p;
    for (size_t k = 0; k < frames.size(); ++k)
      want[k] = p.PredictFrames(frames[k].ptrs.data(), frames[k].lens.data(), frames[k].n());
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t]() {
      lifetime_model::Predictor p;  // one predictor per thread
      for (int r = 0; r < 3; ++r)
        for (size_t k = t; k < frames.size(); k += 1) {
          if (p.PredictFrames(frames[k].ptrs.data(), frames[k].lens.data(), frames[k].n()) !=
              want[k])
            ++bad;
        }
    });
  }
  for (std::thread& t : ts) t.join();
  printf("{\"mismatches\": %d}\n", bad.load());
  return bad ? 1 : 0;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

int Bench(const char* in, int rounds) {
  std::vector<Stack> stacks = ReadStacks(in);
  std::vector<Frames> frames;
  for (const Stack& s : stacks) frames.emplace_back(s);
  const int tokens = lifetime_model::Info().max_tokens;
  std::vector<int32_t> ids(static_cast<size_t>(tokens) * frames.size());
  for (size_t k = 0; k < frames.size(); ++k)
    lifetime_model::TokenizeFrames(frames[k].ptrs.data(), frames[k].lens.data(), frames[k].n(),
                                   &ids[k * tokens]);
  lifetime_model::Predictor p;
  using Clock = std::chrono::steady_clock;
  std::vector<double> t_frames, t_ids, t_first;
  volatile int sink = 0;
  // Round 0 is the warm-up, and it is also timed on its own: a fresh predictor meets
  // each frame string there for the first time (its frame memo is cold).
  for (int r = 0; r < rounds + 1; ++r) {
    for (size_t k = 0; k < frames.size(); ++k) {
      auto t0 = Clock::now();
      sink = sink + p.PredictFrames(frames[k].ptrs.data(), frames[k].lens.data(), frames[k].n());
      auto t1 = Clock::now();
      sink = sink + p.PredictIds(&ids[k * tokens]);
      auto t2 = Clock::now();
      if (!r) t_first.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (r) {
        t_frames.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        t_ids.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      }
    }
  }
  // Cache hits: 256 hot allocation sites in distinct slots (colliding keys would evict
  // each other, direct-mapped, and time the model instead of the hit path).
  struct Site { uintptr_t ra, height; size_t size; };
  std::vector<Site> sites;
  std::vector<uint64_t> keys;
  std::vector<bool> taken(PredictionCache::kEntries, false);
  for (int i = 0; sites.size() < 256; ++i) {
    Site s{0x401000 + 48u * i, 8192u + 64u * (i % 7), 16u + 8u * (i % 5)};
    uint64_t k = lifetime_model::CacheKey(s.ra, s.height, s.size);
    if (taken[PredictionCache::Slot(k)]) continue;
    taken[PredictionCache::Slot(k)] = true;
    sites.push_back(s);
    keys.push_back(k);
  }
  static PredictionCache cache;
  size_t next = 0;
  auto model = [&]() { const Frames& f = frames[next++ % frames.size()];
                       return p.PredictFrames(f.ptrs.data(), f.lens.data(), f.n()); };
  for (uint64_t k : keys) cache.Get(k, model);
  const long hits = 20000000;
  double best_cpp = 1e30, best_c = 1e30, best_key = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    cache.set_revalidate_every(0);  // pure hit path
    auto t0 = Clock::now();
    for (long i = 0; i < hits; ++i) sink = sink + cache.Get(keys[i & 255], model);
    auto t1 = Clock::now();
    best_cpp = std::min(best_cpp, std::chrono::duration<double, std::nano>(t1 - t0).count() / hits);
    // With the key computed from (return address, stack height, size) on each call.
    t0 = Clock::now();
    for (long i = 0; i < hits; ++i) {
      const Site& s = sites[i & 255];
      sink = sink + cache.Get(lifetime_model::CacheKey(s.ra, s.height, s.size), model);
    }
    t1 = Clock::now();
    best_key = std::min(best_key, std::chrono::duration<double, std::nano>(t1 - t0).count() / hits);
  }
  const uint64_t misses_in_hit_loops = cache.stats().misses - keys.size();
  // C API through the thread-local cache.
  lifetime_predictor* cp = lifetime_predictor_create();
  lifetime_cache* tls = lifetime_cache_thread_local();
  CacheCtx ctx{&frames[0]};
  auto c_call = [&](long i) {
    const Site& s = sites[i & 255];
    return lifetime_cache_predict(tls, cp, s.ra, s.height, s.size, GetFrames, &ctx);
  };
  for (int i = 0; i < 256; ++i) c_call(i);
  lifetime_cache_set_revalidate_every(tls, 0);
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    for (long i = 0; i < hits; ++i) sink = sink + c_call(i);
    auto t1 = Clock::now();
    best_c = std::min(best_c, std::chrono::duration<double, std::nano>(t1 - t0).count() / hits);
  }
  // Default revalidation: the model runs again once per 1000 hits of an entry.
  lifetime_cache_set_revalidate_every(tls, 1000);
  lifetime_cache_clear(tls);
  for (int i = 0; i < 256; ++i) c_call(i);
  auto t0 = Clock::now();
  for (long i = 0; i < 2000000; ++i) sink = sink + c_call(i);
  auto t1 = Clock::now();
  double amortized = std::chrono::duration<double, std::nano>(t1 - t0).count() / 2000000;
  lifetime_predictor_destroy(cp);
  printf("{\"examples\": %zu, \"rounds\": %d, "
         "\"frames_p50_us\": %.2f, \"frames_p99_us\": %.2f, \"frames_mean_us\": %.2f, "
         "\"ids_p50_us\": %.2f, \"ids_p99_us\": %.2f, "
         "\"frames_first_sight_p50_us\": %.2f, \"frames_first_sight_p99_us\": %.2f, "
         "\"cache_hit_ns\": %.2f, \"cache_hit_with_key_ns\": %.2f, \"cache_hit_c_api_ns\": %.2f, "
         "\"cache_c_api_revalidate_1000_ns\": %.2f, \"misses_in_hit_loops\": %llu}\n",
         frames.size(), rounds, Percentile(t_frames, 0.5), Percentile(t_frames, 0.99),
         [&]() { double s = 0; for (double x : t_frames) s += x; return s / t_frames.size(); }(),
         Percentile(t_ids, 0.5), Percentile(t_ids, 0.99), Percentile(t_first, 0.5),
         Percentile(t_first, 0.99), best_cpp, best_key, best_c, amortized,
         (unsigned long long)misses_in_hit_loops);
  return sink == 42 ? 0 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "info") return Info();
  if (mode == "predict-frames" && argc == 4) return PredictFrames(argv[2], argv[3]);
  if (mode == "predict-ids" && argc == 4) return PredictIds(argv[2], argv[3]);
  if (mode == "tokenize" && argc == 3) return Tokenize(argv[2]);
  if (mode == "mallocs" && argc == 3) return Mallocs(argv[2]);
  if (mode == "cache") return Cache();
  if (mode == "size-frames") return SizeFrames(argc - 2, argv + 2);
  if (mode == "cache-sized" && argc == 4) return CacheSized(argv[2], argv[3]);
  if (mode == "threads" && argc == 3) return Threads(argv[2]);
  if (mode == "bench" && argc >= 3) return Bench(argv[2], argc > 3 ? atoi(argv[3]) : 5);
  fprintf(stderr, "usage: export_harness info|predict-frames|predict-ids|tokenize|mallocs|"
                  "cache|size-frames|cache-sized|threads|bench ...\n");
  return 2;
}
