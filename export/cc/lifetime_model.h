// lifetime_model.h: the exported allocation-lifetime model (llama-paper §2.2-2.3).
//
// A model exported by `lifetime export MODEL_DIR --out DIR` is one static library,
// DIR/lib/liblifetime_model.a: the XLA AOT-compiled network, its runtime, the Abseil
// subset that runtime needs, the vocabulary and class table, and this API.  It needs
// only libstdc++, libm and libc.  Consume it with CMake:
//
//   find_package(LifetimeModel REQUIRED)            # CMAKE_PREFIX_PATH=DIR
//   target_link_libraries(app PRIVATE LifetimeModel::lifetime_model)
//
// or pkg-config (PKG_CONFIG_PATH=DIR/lib/pkgconfig): `pkg-config --cflags --libs
// lifetime_model`.
//
// Input.  A stack is a list of symbolized frames, top of stack (the allocation site)
// first.  Frame i < max_frames fills token slots [i*T, i*T+T) (T = tokens_per_frame)
// with the ids of its first T tokens; the other slots are 0 (<pad>); frames past
// max_frames are dropped.  Tokens and ids follow core/tokenizer.py exactly
// (lifetime-tokenizer-v2): a token is a maximal run of bytes that are neither ASCII
// whitespace nor one of  :()<>[]{},*&.;=+-~!%^|/\'"`?@#  ; unknown tokens get id 1.
//
// Output.  Probabilities over the lifetime classes (shortest first, "never freed"
// last) and the predicted class: their argmax, or the back-off's (model/backoff.py, issue
// 33 item 6): where the top probability is below the model's threshold, its site's class
// in the training data (the training majority for a site it never saw), and wherever the
// site is pure enough there (the model's backoff_pure), that class.
//
// Allocation.  Constructing a Predictor allocates its buffers (once).  After that,
// nothing on the prediction path allocates: tokenizing frame strings, running the
// model, and the PredictionCache (a fixed-size table with no heap memory at all).
// Nothing here throws; errors are return values.
//
// Threads.  A Predictor is thread-compatible, not thread-safe: use one per thread
// (or lock around it).  Distinct Predictors may run concurrently.  A PredictionCache
// is meant to be thread-local (see lifetime_cache_thread_local()); it is not
// thread-safe either.  The vocabulary and model constants are immutable and shared.
#ifndef LIFETIME_MODEL_H_
#define LIFETIME_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------
// C API (also what an LD_PRELOAD allocator uses).  All functions are noexcept.

// The compiled-in model's shape and metadata.
typedef struct lifetime_model_info {
  int max_frames;        // F: frames read from the top of the stack
  int tokens_per_frame;  // T: token slots per frame
  int max_tokens;        // F * T: length of the token-id input
  int num_classes;       // C: lifetime classes, shortest first
  int vocab_size;        // ids are in [0, vocab_size)
  const char* const* class_names;  // C names, e.g. "10 ms", ..., "inf"
  const char* model_id;            // sha256 of the exported model's graph and vocabulary
  const char* graph;               // "folded" or "keras": how the network was compiled
  // The context definition the model was trained with (core/context.py): frames
  // are cut below the deepest of these allocation wrappers (qualified names), then
  // max_frames are kept.  A caller that cannot apply it must not run the model.
  const char* context_version;     // "lifetime-context-v2"
  int num_wrappers;
  const char* const* wrappers;     // sorted
  // LLVM CPU the model code was compiled for: "generic" (any x86-64) or "x86-64-v3"
  // (AVX2, FMA, BMI; lifetime_predictor_create checks the running CPU).
  const char* target_cpu;
  // ---- Appended fields (ABI: new fields only ever go below, never between).  A library
  // exported before a field has no such member: read it only when
  // LIFETIME_MODEL_INFO_HAS(info_size, field) with info_size = lifetime_model_info_size()
  // (0 when that function is absent, as in exports before these fields).
  //
  // The label scheme the model was trained with (its dataset's, core/lifetimes.py):
  // class i < num_boundaries is "lifetime < boundaries[i]", class num_boundaries is
  // ">= the last", class num_boundaries + 1 "never freed"; num_classes = num_boundaries + 2.
  const char* label_clock;       // "wall" (ms of CLOCK_MONOTONIC) or "bytes" (allocated)
  int num_boundaries;            // B
  const double* boundaries;      // B bounds in the clock's unit: ms (wall) or bytes
  const uint64_t* boundaries_ns; // wall clock: the B bounds in ns (round(ms * 1e6)), the
                                 // deadlines an allocator uses; NULL on the bytes clock
  // 1: the context is keyed on the object's size too (core/context.py size_feature):
  // frame 0 is lifetime_size_frame(size), above max_frames - 1 frames of the stack.
  // lifetime_cache_predict makes it from its size argument and asks its callback for
  // max_frames - 1 frames; a caller of lifetime_predict_frames puts it first itself.
  int size_frame;
} lifetime_model_info;

const lifetime_model_info* lifetime_model_get_info(void);

// sizeof(lifetime_model_info) of the library that fills it.  A host that loads a model
// built by another export (dlopen of its plugin) resolves this with dlsym: absent, the
// library predates the appended fields, and its info ends at target_cpu.
size_t lifetime_model_info_size(void);
#define LIFETIME_MODEL_INFO_HAS(info_size, field)   \
  ((info_size) >= offsetof(lifetime_model_info, field) + sizeof(((lifetime_model_info*)0)->field))

typedef struct lifetime_predictor lifetime_predictor;

// Allocates a predictor and its buffers; NULL when out of memory or when this CPU lacks
// the instructions the model was compiled for (info->target_cpu).
lifetime_predictor* lifetime_predictor_create(void);
void lifetime_predictor_destroy(lifetime_predictor* p);

// Predicts from frame strings (frames[i] has lengths[i] bytes; lengths may be NULL for
// NUL-terminated frames).  Writes num_classes probabilities to probs when it is not
// NULL.  Returns the predicted class, or -1 on bad arguments.
int lifetime_predict_frames(lifetime_predictor* p, const char* const* frames,
                            const size_t* lengths, int num_frames, float* probs);

// Predicts from token ids in the frame-slot layout: max_tokens ids.  Ids outside
// [0, vocab_size) are read as 1 (<unk>).  The class is the model's own (its argmax):
// the back-off (model/backoff.py) keys a site by its frame text, which ids do not carry.
int lifetime_predict_ids(lifetime_predictor* p, const int32_t* ids, float* probs);

// The size frame of an object of SIZE bytes ("<size$4096>": the least size of its
// bucket, 4 buckets per power of two; core/context.py size_frame), NUL-terminated in buf
// when cap allows (32 bytes always do).  Returns its length.
#define LIFETIME_SIZE_FRAME 1
size_t lifetime_size_frame(size_t size, char* buf, size_t cap);

// Tokenizer.  Writes the frame-slot ids of a stack (max_tokens ids); returns the number
// of frames used.
int lifetime_tokenize_frames(const char* const* frames, const size_t* lengths,
                             int num_frames, int32_t* ids);
// The id of one token string under the compiled-in vocabulary (1 when unknown).
int32_t lifetime_token_id(const char* token, size_t length);

// ---------------------------------------------------------------------------------
// Prediction cache (§2.3): a direct-mapped table keyed by a hash of the return
// address, the stack height and the object size.  On a miss the caller supplies the
// frames and the model runs; every `revalidate_every` hits of an entry the model
// runs again, and when it disagrees the entry becomes the larger (longer-lived) class.

typedef struct lifetime_cache lifetime_cache;

typedef struct lifetime_cache_stats {
  uint64_t hits;           // lookups that found their key (revalidations included)
  uint64_t misses;         // lookups that did not (the model ran)
  uint64_t revalidations;  // hits on which the model ran again
  uint64_t disagreements;  // revalidations whose class differed from the cached one
  uint64_t evictions;      // misses that replaced another key's entry
} lifetime_cache_stats;

// Fills frames[0..max_frames) (and lengths) for the current allocation; returns the
// number of frames.  Called only when the model must run.
typedef int (*lifetime_frames_fn)(void* ctx, const char** frames, size_t* lengths,
                                  int max_frames);

// The calling thread's cache (static thread-local storage, no heap memory).
lifetime_cache* lifetime_cache_thread_local(void);
uint64_t lifetime_cache_key(uintptr_t return_address, uintptr_t stack_height,
                            size_t size);
// The class for this allocation: cached, or predicted (and cached) through p and get.
// Returns -1 when the model had to run and failed (bad frames callback or predictor).
int lifetime_cache_predict(lifetime_cache* c, lifetime_predictor* p,
                           uintptr_t return_address, uintptr_t stack_height, size_t size,
                           lifetime_frames_fn get, void* ctx);
// The fast path alone: the class of a plain hit (counted as one), or -1 when the key is
// not cached or its revalidation is due (nothing counted or changed: call
// lifetime_cache_predict then).  Needs no predictor, so a caller that shares predictors
// between threads behind a lock takes the lock only when this says -1.
#define LIFETIME_CACHE_LOOKUP 1
int lifetime_cache_lookup(lifetime_cache* c, uintptr_t return_address, uintptr_t stack_height,
                          size_t size);
// The cache's memory layout, for a C++ caller that makes the lookup inline rather than
// through a call (an allocator's hit path): a lifetime_cache is a
// lifetime_model::PredictionCache (below) at offset 0.  When this returns the
// LIFETIME_CACHE_LAYOUT the caller was compiled with, PredictionCache::Peek on
// lifetime_cache_thread_local()'s pointer is lifetime_cache_lookup; otherwise (another
// layout, or a library without this call) use lifetime_cache_lookup.  Bumped whenever
// PredictionCache's members, Slot or CacheKey change.
#define LIFETIME_CACHE_LAYOUT 2
uint32_t lifetime_cache_layout(void);
void lifetime_cache_get_stats(const lifetime_cache* c, lifetime_cache_stats* out);
void lifetime_cache_set_revalidate_every(lifetime_cache* c, uint32_t n);  // 0: never
void lifetime_cache_clear(lifetime_cache* c);  // entries and counters

#ifdef __cplusplus
}  // extern "C"

// -------------------------------------------------------------------------------------
// C++ API.
namespace lifetime_model {

inline const lifetime_model_info& Info() { return *lifetime_model_get_info(); }

// A token of a frame: a view into the frame string.
struct TokenView {
  const char* data;
  size_t size;
};

// Splits one frame into tokens (core.tokenizer.frame_tokens).  Writes at most
// max_out tokens; returns the total number of tokens in the frame.
size_t FrameTokens(const char* frame, size_t length, TokenView* out, size_t max_out) noexcept;

// Token -> id under the compiled-in vocabulary; 1 (<unk>) when absent.
int32_t TokenId(const char* token, size_t length) noexcept;

// A vocabulary other than the compiled-in one, e.g. the shared test vectors'
// (construction allocates; lookups do not).
class Vocabulary {
 public:
  Vocabulary(const char* const* tokens, const size_t* lengths, int count) noexcept;
  ~Vocabulary();
  Vocabulary(const Vocabulary&) = delete;
  Vocabulary& operator=(const Vocabulary&) = delete;
  bool ok() const noexcept { return slots_ != nullptr; }
  int32_t Id(const char* token, size_t length) const noexcept;

 private:
  char* blob_ = nullptr;
  uint32_t* offsets_ = nullptr;
  int32_t* slots_ = nullptr;
  uint32_t mask_ = 0;
  int count_ = 0;
};

// Frame-slot ids of a stack (max_tokens ids).  Returns the number of frames used.
int TokenizeFrames(const char* const* frames, const size_t* lengths, int num_frames,
                   int32_t* ids) noexcept;

// Runs the compiled model.  See the thread contract above: one per thread.
class Predictor {
 public:
  Predictor() noexcept;  // allocates the model's buffers; check ok()
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  bool ok() const noexcept { return impl_ != nullptr; }

  // Returns the predicted class (or -1 on bad arguments); probabilities() then holds
  // the num_classes probabilities until the next call.
  int PredictFrames(const char* const* frames, const size_t* lengths,
                    int num_frames) noexcept;
  int PredictIds(const int32_t* ids) noexcept;
  const float* probabilities() const noexcept;

  struct Impl;

 private:
  Impl* impl_;
};

// Cache key of §2.3: values an allocator has in registers.  One multiply per value, the
// three in parallel, xor-ed: the allocator's hit path waits on this key before it can
// load the entry, and a final mixing round (shift, multiply, shift) had doubled that
// wait.  Slot's top bits depend on every bit of each value.  Xor, not a sum: a sum is
// linear, and its constants then have short relations (K1*a + K2*b + K3*c = 0 mod 2^64
// with |a|, |b|, |c| within a program's code, stack and size ranges), so contexts that
// far apart would share a key.  The low bit is set: 0 marks an empty entry.
inline uint64_t CacheKey(uintptr_t return_address, uintptr_t stack_height,
                         size_t size) noexcept {
  const uint64_t h = (static_cast<uint64_t>(return_address) * 0x9E3779B97F4A7C15ull) ^
                     (static_cast<uint64_t>(stack_height) * 0xC2B2AE3D27D4EB4Full) ^
                     (static_cast<uint64_t>(size) * 0xFF51AFD7ED558CCDull);
  return h | 1;
}

// The prediction cache: fixed size, no heap memory, not thread-safe (one per thread).
class PredictionCache {
 public:
  static constexpr int kLogEntries = 12;
  static constexpr uint32_t kEntries = 1u << kLogEntries;  // 4096 entries, 64 KiB
  static constexpr uint32_t kDefaultRevalidateEvery = 1000;

  enum Status : int32_t { kHit = 0, kMiss = 1, kRevalidate = 2 };
  struct Lookup {
    Status status;
    int32_t cached_class;  // valid for kHit and kRevalidate
    uint64_t key;
  };

  constexpr PredictionCache() noexcept = default;

  // The fast path: a hash-indexed load and compare.  kRevalidate means the caller
  // should run the model and call Update() (cached_class is still usable meanwhile).
  Lookup Find(uint64_t key) noexcept {
    Entry& e = entries_[Slot(key)];
    if (__builtin_expect(e.key == key, 1)) {
      ++stats_.hits;
      if (__builtin_expect(++e.hits_since_check < revalidate_every_ || revalidate_every_ == 0,
                           1)) {
        return {kHit, e.cls, key};
      }
      e.hits_since_check = 0;
      ++stats_.revalidations;
      return {kRevalidate, e.cls, key};
    }
    ++stats_.misses;
    return {kMiss, -1, key};
  }

  // Find's plain hit only: the class (counted as a hit), or -1 with nothing changed when
  // Find would say kMiss or kRevalidate.
  int32_t Peek(uint64_t key) noexcept {
    const int32_t cls = PeekUncounted(key);
    if (cls >= 0) ++stats_.hits;
    return cls;
  }
  // Peek but not counted in stats().hits: for a caller that counts its own hits (the
  // allocator's hit path, whose malloc+free pair the count's store had cost 0.3 ns of
  // 14.2).  The entry's revalidation count goes on as Peek's.
  int32_t PeekUncounted(uint64_t key) noexcept {
    Entry& e = entries_[Slot(key)];
    if (__builtin_expect(e.key != key, 0)) return -1;
    if (revalidate_every_ != 0 && e.hits_since_check + 1 >= revalidate_every_) return -1;
    ++e.hits_since_check;
    return e.cls;
  }

  // Records the model's class for a key after a miss or a revalidation; returns the class
  // to use: the new one on a miss, max(cached, new) on a revalidation.
  int32_t Update(uint64_t key, int32_t model_class) noexcept {
    Entry& e = entries_[Slot(key)];
    if (e.key == key) {
      if (model_class != e.cls) {
        ++stats_.disagreements;
        if (model_class > e.cls) e.cls = model_class;
      }
      return e.cls;
    }
    if (e.key != 0) ++stats_.evictions;
    e.key = key;
    e.cls = model_class;
    e.hits_since_check = 0;
    return model_class;
  }

  // Find + (on a miss or revalidation) `predict()` + Update.  predict returns the model's
  // class, or < 0 on failure (then nothing is cached and that value is returned).
  template <class PredictFn>
  int32_t Get(uint64_t key, PredictFn&& predict) noexcept {
    Lookup l = Find(key);
    if (__builtin_expect(l.status == kHit, 1)) return l.cached_class;
    int32_t model_class = predict();
    if (model_class < 0) return l.status == kRevalidate ? l.cached_class : model_class;
    return Update(key, model_class);
  }

  const lifetime_cache_stats& stats() const noexcept { return stats_; }
  void set_revalidate_every(uint32_t n) noexcept { revalidate_every_ = n; }
  uint32_t revalidate_every() const noexcept { return revalidate_every_; }
  void Clear() noexcept {
    for (Entry& e : entries_) e = Entry();
    stats_ = lifetime_cache_stats();
  }
  static uint32_t Slot(uint64_t key) noexcept {
    return static_cast<uint32_t>(key >> (64 - kLogEntries));
  }

 private:
  struct Entry {
    uint64_t key = 0;
    int32_t cls = 0;
    uint32_t hits_since_check = 0;
  };
  Entry entries_[kEntries] = {};
  lifetime_cache_stats stats_ = {};
  uint32_t revalidate_every_ = kDefaultRevalidateEvery;
};

}  // namespace lifetime_model
#endif  // __cplusplus
#endif  // LIFETIME_MODEL_H_
