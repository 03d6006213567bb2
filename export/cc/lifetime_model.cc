// Implementation of lifetime_model.h over the XLA AOT-compiled class.
//
// Compiled by `lifetime export` together with two generated files:
//   lifetime_model_xla.h   tfcompile's header (class lifetime_model_aot::LifetimeModelXla)
//   lifetime_model_data.cc the vocabulary hash table, class names and model info
#include "lifetime_model.h"

#include <new>
#include <type_traits>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lifetime_model_data.h"
#include "lifetime_model_xla.h"

namespace lifetime_model {
namespace {

// core/tokenizer.py: DELIMITERS plus ASCII whitespace " \t\n\r\f\v".
struct DelimiterTable {
  bool is[256];
  constexpr DelimiterTable() : is() {
    const char* d = ":()<>[]{},*&.;=+-~!%^|/\\'\"`?@# \t\n\r\f\v";
    for (; *d; ++d) is[static_cast<unsigned char>(*d)] = true;
  }
};
constexpr DelimiterTable kDelimiters;

inline bool IsDelimiter(char c) { return kDelimiters.is[static_cast<unsigned char>(c)]; }

// The vocabulary's hash: 8 bytes at a time (little-endian words, the last one zero-
// padded, the length mixed in), a multiply and a shift per word, a final mix.  Byte-at-
// a-time FNV-1a cost 4 cycles a byte in its multiply chain; clang frames hash about
// 1.2 KB a stack.  export/codegen.py builds the compiled-in table with the same function
// (`token_hash`); x86-64 only, like the compiled model.
inline uint64_t HashBytes(const char* s, size_t n) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  uint64_t h = n * kMul;
  for (; n >= 8; s += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  if (n) {
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

// Open addressing, linear probing; slots hold ids, -1 = empty.
inline int32_t LookupId(const char* blob, const uint32_t* offsets, const int32_t* slots,
                        uint32_t mask, const char* token, size_t length) {
  for (uint32_t i = static_cast<uint32_t>(HashBytes(token, length)) & mask;;
       i = (i + 1) & mask) {
    int32_t id = slots[i];
    if (id < 0) return 1;  // <unk>
    size_t n = offsets[id + 1] - offsets[id];
    if (n == length && memcmp(blob + offsets[id], token, length) == 0) return id;
  }
}

inline size_t Length(const char* const* frames, const size_t* lengths, int i) {
  return lengths ? lengths[i] : (frames[i] ? strlen(frames[i]) : 0);
}

// Writes the token ids of one frame into slot[0, T).
void FillFrame(const char* s, size_t n, int32_t* slot) {
  size_t i = 0;
  for (int t = 0; t < generated::kTokensPerFrame;) {
    while (i < n && IsDelimiter(s[i])) ++i;
    if (i == n) break;
    size_t start = i;
    while (i < n && !IsDelimiter(s[i])) ++i;
    slot[t++] = TokenId(s + start, i - start);
  }
}

// A predictor's memo of frame string -> token ids.  Frames recur across the stacks a
// program predicts (the same functions in many contexts), and tokenizing a clang frame
// costs about 60 cycles a token, mostly misses in the vocabulary table; the memo costs
// one hash of the string.  Direct-mapped, keyed by the string's hash and length (a false
// hit needs a 64-bit collision); mapped with the predictor (Predictor::Impl), so the
// prediction path still never allocates.  Frames over kMaxBytes are tokenized every time.
struct FrameMemo {
  static constexpr int kEntries = 4096;
  static constexpr size_t kMaxBytes = 512;
  // Ids fit 16 bits for vocabularies up to 65536 tokens: 40-byte entries.
  using Id = typename std::conditional<(generated::kVocabSize <= 65536), uint16_t,
                                       int32_t>::type;
  struct Entry {
    uint64_t key;  // 0: empty
    Id ids[generated::kTokensPerFrame];
  };
  Entry entries[kEntries];

  void Fill(const char* s, size_t n, int32_t* slot) {
    if (n > kMaxBytes) return FillFrame(s, n, slot);
    uint64_t key = HashBytes(s, n) | 1;
    Entry& e = entries[(key >> 40) & (kEntries - 1)];
    if (e.key == key) {
      for (int t = 0; t < generated::kTokensPerFrame; ++t) slot[t] = e.ids[t];
      return;
    }
    FillFrame(s, n, slot);
    e.key = key;
    for (int t = 0; t < generated::kTokensPerFrame; ++t) e.ids[t] = static_cast<Id>(slot[t]);
  }
};

// Writes the frame-slot ids of a stack into ids[0, F*T), through `memo` when given.
int FillSlots(const char* const* frames, const size_t* lengths, int num_frames,
              int32_t* ids, FrameMemo* memo = nullptr) {
  const int f_max = generated::kMaxFrames, t_max = generated::kTokensPerFrame;
  memset(ids, 0, sizeof(int32_t) * f_max * t_max);
  int used = num_frames < f_max ? num_frames : f_max;
  for (int f = 0; f < used; ++f) {
    const char* s = frames[f];
    if (!s) continue;
    size_t n = Length(frames, lengths, f);
    if (memo) {
      memo->Fill(s, n, ids + f * t_max);
    } else {
      FillFrame(s, n, ids + f * t_max);
    }
  }
  return used;
}

}  // namespace

size_t FrameTokens(const char* frame, size_t length, TokenView* out,
                   size_t max_out) noexcept {
  size_t count = 0, i = 0;
  while (frame) {
    while (i < length && IsDelimiter(frame[i])) ++i;
    if (i == length) break;
    size_t start = i;
    while (i < length && !IsDelimiter(frame[i])) ++i;
    if (count < max_out) out[count] = TokenView{frame + start, i - start};
    ++count;
  }
  return count;
}

int32_t TokenId(const char* token, size_t length) noexcept {
  return LookupId(reinterpret_cast<const char*>(generated::kVocabBlob),
                  generated::kVocabOffsets, generated::kVocabSlots, generated::kVocabSlotMask,
                  token, length);
}

int TokenizeFrames(const char* const* frames, const size_t* lengths, int num_frames,
                   int32_t* ids) noexcept {
  if (!ids || num_frames < 0 || (num_frames > 0 && !frames)) return -1;
  return FillSlots(frames, lengths, num_frames, ids);
}

Vocabulary::Vocabulary(const char* const* tokens, const size_t* lengths, int count) noexcept {
  if (count <= 0 || !tokens) return;
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += Length(tokens, lengths, i);
  uint32_t size = 2;
  while (size < 2u * static_cast<uint32_t>(count)) size <<= 1;
  blob_ = static_cast<char*>(malloc(total + 1));
  offsets_ = static_cast<uint32_t*>(malloc(sizeof(uint32_t) * (count + 1)));
  int32_t* slots = static_cast<int32_t*>(malloc(sizeof(int32_t) * size));
  if (!blob_ || !offsets_ || !slots) {
    free(slots);
    return;
  }
  mask_ = size - 1;
  count_ = count;
  memset(slots, 0xff, sizeof(int32_t) * size);
  uint32_t off = 0;
  for (int id = 0; id < count; ++id) {
    size_t n = Length(tokens, lengths, id);
    offsets_[id] = off;
    if (n) memcpy(blob_ + off, tokens[id], n);
    off += static_cast<uint32_t>(n);
    uint32_t i = static_cast<uint32_t>(HashBytes(tokens[id], n)) & mask_;
    while (slots[i] >= 0) i = (i + 1) & mask_;
    slots[i] = id;
  }
  offsets_[count] = off;
  slots_ = slots;
}

Vocabulary::~Vocabulary() {
  free(blob_);
  free(offsets_);
  free(slots_);
}

int32_t Vocabulary::Id(const char* token, size_t length) const noexcept {
  if (!slots_) return 1;
  return LookupId(blob_, offsets_, slots_, mask_, token, length);
}

struct Predictor::Impl {
  ::lifetime_model_aot::LifetimeModelXla fn;
  float probs[generated::kNumClasses];
  // The memo in its own anonymous mapping, whose pages stay unbacked until a prediction
  // writes them: a process pays for the memo of a predictor it uses (the in-process
  // runtime creates 4 at start-up and a single-threaded program uses one), not 160 KiB
  // of zeroes for each.  Without the mapping, predictions go without a memo (the same
  // ids, tokenized each time).
  FrameMemo* memo = nullptr;
  static_assert(std::is_trivially_default_constructible<FrameMemo>::value,
                "constructing the memo must not write its pages");
  Impl() : fn(::lifetime_model_aot::LifetimeModelXla::AllocMode::ARGS_VARIABLES_RESULTS_PROFILES_AND_TEMPS) {
    void* p = mmap(nullptr, sizeof(FrameMemo), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) memo = new (p) FrameMemo;  // all zero: every entry empty
  }
  ~Impl() {
    if (memo) munmap(memo, sizeof(FrameMemo));
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // SITE: the back-off's key of the context's site (SiteKey); the ids route, which has
  // no frame text to key it by, passes none and serves the model alone.
  int Run(const uint64_t* site) {
    if (!fn.Run()) return -1;
    const float* p = fn.result_fetch_probabilities_data();
    int best = 0;
    for (int c = 0; c < generated::kNumClasses; ++c) {
      probs[c] = p[c];
      if (p[c] > p[best]) best = c;
    }
    const bool unsure = p[best] < generated::kBackoffBelow;
    if (!site || (!unsure && !(generated::kBackoffPure > 0.0f))) return best;
    // The back-off (model/backoff.py): the site's class in the training data where the
    // model is unsure (the training majority for a site it never saw), or where the site
    // is pure enough there.
    const uint64_t key = *site;
    uint32_t lo = 0, hi = generated::kBackoffCount;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (generated::kBackoffKeys[mid] < key) lo = mid + 1; else hi = mid;
    }
    const bool found = lo < generated::kBackoffCount && generated::kBackoffKeys[lo] == key;
    if (found && generated::kBackoffPure > 0.0f && generated::kBackoffPurity[lo] >= generated::kBackoffPure)
      return generated::kBackoffClasses[lo];
    if (!unsure) return best;
    return found ? generated::kBackoffClasses[lo] : generated::kBackoffFallback;
  }
};

namespace {
// The back-off's key of a context's site (model/backoff.py `site_key`): the hash of its
// first frame's text, or with two site slots (a size frame first) the hash of the first
// two frames' hashes, 8 bytes each, little-endian (x86-64 only, as the model); 0 for a
// context with no frame.
uint64_t FrameHash(const char* const* frames, const size_t* lengths, int i) {
  return frames[i] ? HashBytes(frames[i], Length(frames, lengths, i)) : HashBytes("", 0);
}
uint64_t SiteKey(const char* const* frames, const size_t* lengths, int n) {
  if (n <= 0) return 0;
  const uint64_t first = FrameHash(frames, lengths, 0);
  if (generated::kBackoffSlots < 2 || n < 2) return first;
  const uint64_t both[2] = {first, FrameHash(frames, lengths, 1)};
  return HashBytes(reinterpret_cast<const char*>(both), sizeof both);
}

// The CPU can run code compiled for x86-64-v3 (what `lifetime export` targets by default).
bool CpuRunsModel() {
  if (!generated::kNeedsX86_64_V3) return true;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}
}  // namespace

Predictor::Predictor() noexcept
    : impl_(CpuRunsModel() ? new (std::nothrow) Impl() : nullptr) {
  if (impl_ && !impl_->fn.arg_feed_token_ids_data()) {
    delete impl_;
    impl_ = nullptr;
  }
}

Predictor::~Predictor() { delete impl_; }

int Predictor::PredictFrames(const char* const* frames, const size_t* lengths,
                             int num_frames) noexcept {
  if (!impl_ || num_frames < 0 || (num_frames > 0 && !frames)) return -1;
  FillSlots(frames, lengths, num_frames, impl_->fn.arg_feed_token_ids_data(), impl_->memo);
  const uint64_t site = SiteKey(frames, lengths, num_frames);
  return impl_->Run(&site);
}

int Predictor::PredictIds(const int32_t* ids) noexcept {
  if (!impl_ || !ids) return -1;
  int32_t* in = impl_->fn.arg_feed_token_ids_data();
  for (int i = 0; i < generated::kMaxFrames * generated::kTokensPerFrame; ++i) {
    in[i] = (ids[i] >= 0 && ids[i] < generated::kVocabSize) ? ids[i] : 1;
  }
  return impl_->Run(nullptr);
}

const float* Predictor::probabilities() const noexcept {
  return impl_ ? impl_->probs : nullptr;
}

}  // namespace lifetime_model

// ---------------------------------------------------------------------------------
// C API.
struct lifetime_predictor {
  lifetime_model::Predictor predictor;
  // Frame buffers for lifetime_cache_predict's callback, preallocated.
  const char* frames[lifetime_model::generated::kMaxFrames];
  size_t lengths[lifetime_model::generated::kMaxFrames];
  char size_frame[32];  // frames[0] under kSizeFrame
};

struct lifetime_cache {
  lifetime_model::PredictionCache cache;
};
// LIFETIME_CACHE_LAYOUT's promise: a lifetime_cache* is a PredictionCache*.
static_assert(std::is_standard_layout<lifetime_cache>::value && offsetof(lifetime_cache, cache) == 0);

namespace {
thread_local lifetime_cache tls_cache;

int CopyOut(const lifetime_model::Predictor& p, int cls, float* probs) {
  if (cls >= 0 && probs) {
    memcpy(probs, p.probabilities(), sizeof(float) * lifetime_model::generated::kNumClasses);
  }
  return cls;
}
}  // namespace

extern "C" {

const lifetime_model_info* lifetime_model_get_info(void) {
  return &lifetime_model::generated::kInfo;
}

size_t lifetime_model_info_size(void) { return sizeof(lifetime_model_info); }

lifetime_predictor* lifetime_predictor_create(void) {
  lifetime_predictor* p = new (std::nothrow) lifetime_predictor();
  if (p && !p->predictor.ok()) {
    delete p;
    return nullptr;
  }
  return p;
}

void lifetime_predictor_destroy(lifetime_predictor* p) { delete p; }

int lifetime_predict_frames(lifetime_predictor* p, const char* const* frames,
                            const size_t* lengths, int num_frames, float* probs) {
  if (!p) return -1;
  return CopyOut(p->predictor, p->predictor.PredictFrames(frames, lengths, num_frames), probs);
}

int lifetime_predict_ids(lifetime_predictor* p, const int32_t* ids, float* probs) {
  if (!p) return -1;
  return CopyOut(p->predictor, p->predictor.PredictIds(ids), probs);
}

size_t lifetime_size_frame(size_t size, char* buf, size_t cap) {
  // core/context.py size_bucket_floor: below 8 the size itself; else the leading 1 and
  // the next 2 bits.
  uint64_t floor = size;
  if (size >= 8) {
    const int shift = 64 - __builtin_clzll(size) - 3;
    floor = (size >> shift) << shift;
  }
  char digits[24];
  int nd = 0;
  do {
    digits[nd++] = char('0' + floor % 10);
    floor /= 10;
  } while (floor);
  char tmp[32] = "<size$";
  size_t n = 6;
  while (nd) tmp[n++] = digits[--nd];
  tmp[n++] = '>';
  if (buf && cap) {
    const size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(buf, tmp, k);
    buf[k] = 0;
  }
  return n;
}

int lifetime_tokenize_frames(const char* const* frames, const size_t* lengths,
                             int num_frames, int32_t* ids) {
  return lifetime_model::TokenizeFrames(frames, lengths, num_frames, ids);
}

int32_t lifetime_token_id(const char* token, size_t length) {
  return token || !length ? lifetime_model::TokenId(token, length) : 1;
}

lifetime_cache* lifetime_cache_thread_local(void) { return &tls_cache; }

uint64_t lifetime_cache_key(uintptr_t return_address, uintptr_t stack_height, size_t size) {
  return lifetime_model::CacheKey(return_address, stack_height, size);
}

int lifetime_cache_predict(lifetime_cache* c, lifetime_predictor* p, uintptr_t return_address,
                           uintptr_t stack_height, size_t size, lifetime_frames_fn get,
                           void* ctx) {
  if (!c) return -1;
  uint64_t key = lifetime_model::CacheKey(return_address, stack_height, size);
  return c->cache.Get(key, [&]() -> int32_t {
    if (!p || !get) return -1;
    constexpr int kMax = lifetime_model::generated::kMaxFrames;
    constexpr int kFirst = lifetime_model::generated::kSizeFrame ? 1 : 0;  // the size frame
    if (kFirst) {
      p->lengths[0] = lifetime_size_frame(size, p->size_frame, sizeof p->size_frame);
      p->frames[0] = p->size_frame;
    }
    int n = get(ctx, p->frames + kFirst, p->lengths + kFirst, kMax - kFirst);
    if (n < 0) return -1;
    if (n > kMax - kFirst) n = kMax - kFirst;
    return p->predictor.PredictFrames(p->frames, p->lengths, n + kFirst);
  });
}

int lifetime_cache_lookup(lifetime_cache* c, uintptr_t return_address, uintptr_t stack_height,
                          size_t size) {
  if (!c) return -1;
  return c->cache.Peek(lifetime_model::CacheKey(return_address, stack_height, size));
}

uint32_t lifetime_cache_layout(void) { return LIFETIME_CACHE_LAYOUT; }

void lifetime_cache_get_stats(const lifetime_cache* c, lifetime_cache_stats* out) {
  if (c && out) *out = c->cache.stats();
}

void lifetime_cache_set_revalidate_every(lifetime_cache* c, uint32_t n) {
  if (c) c->cache.set_revalidate_every(n);
}

void lifetime_cache_clear(lifetime_cache* c) {
  if (c) c->cache.Clear();
}

}  // extern "C"
