// The seam for lifetime prediction on the allocation path: constant:C, and the exported
// model's plugin (LIFETIME_MODEL_PLUGIN, inprocess/src/online.h; export.serve.model_plugin
// builds it; describe() says model:PLUGIN).  The
// allocator asks for a class before it takes its lock (heap.cc: predict first, then
// lock), so predict() is thread-safe and must not call malloc (see ModelPredictor for
// the one place the model's plugin may, and how that is guarded).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "online.h"  // inprocess/src: the served model's cache, looked up inline here

namespace sim {
class JsonWriter;
}

namespace lalloc {

// What the allocation path knows about a request when it asks for a class.
struct AllocSite {
  uint64_t size;  // as asked (the sampler records that size: a model keyed on it reads it)
  uint32_t align;
  uintptr_t return_address;  // the caller of malloc / operator new
};

// Where a class came from (counted per allocation under the allocator's lock).
enum class Source : uint8_t {
  kConstant,      // constant:C
  kHit,           // the model's §2.3 cache
  kMiss,          // not cached: stack captured, context cut, model run
  kRevalidation,  // cached, but the model ran again (the cache's revalidate_every)
  kNested,        // an allocation made while this thread was predicting: the fallback
  kEarly,         // before the model was loaded (the library constructor): the fallback
  kFailed,        // the model ran and failed: the fallback
  kCount
};
const char* source_name(Source s);

struct Prediction {
  int cls;
  Source source;
};

// Recursion guard: the model's set-up and misses may malloc (predictor.cc says where);
// those nested allocations get the fallback class.
extern __thread bool t_predicting __attribute__((tls_model("initial-exec")));

class Predictor {
 public:
  virtual ~Predictor() = default;
  // A lifetime class in [0, num_classes).  Called outside the allocator's lock, from any
  // thread.  Not virtual, and inline: every malloc asks.  constant:C is answered here,
  // and so is a hit of the model's §2.3 cache (the plugin's lookup, keyed on this
  // frame's stack height: the calls around it had cost more than the lookup, a malloc+
  // free pair 18.6 -> 15.6-16.2 ns); the thread's first prediction and a miss go out of line.
  __attribute__((always_inline)) Prediction predict(const AllocSite& site) {
    if (constant_ >= 0) return {constant_, Source::kConstant};
    const uintptr_t frame = uintptr_t(__builtin_frame_address(0));
    const lt_online_thread& t = lt_online_tls;
    // (t.cache is set only by predict_model, once it has seen model_ready_: no need to
    // read model_ready_ here.)
    if (__builtin_expect(!t_predicting && t.cache, 1)) {
      const uintptr_t height = t.stack_hi - frame;
      const size_t key_size = lt_online_key_size_inline(site.size);
      // The plugin's lifetime_cache_lookup made here when its cache has this build's
      // layout (checked at load: LIFETIME_CACHE_LAYOUT): the call into the plugin had
      // cost 0.6-0.9 ns of the pair's 15.6-16.2.  An export made before: the call.
      // Uncounted: the allocator counts hits itself (its stats' thread_cache.hits and
      // prediction.cache_hits), and nothing reads the plugin cache's own count here.
      const int cls = __builtin_expect(lt_online_cache_inline, 1)
                          ? reinterpret_cast<lifetime_model::PredictionCache*>(t.cache)->PeekUncounted(
                                lifetime_model::CacheKey(site.return_address, height, key_size))
                          : lt_online_lookup ? lt_online_lookup(t.cache, site.return_address, height, key_size) : -1;
      if (__builtin_expect(cls >= 0, 1)) return {cls, Source::kHit};
    }
    return predict_model(site.size, site.return_address, frame);
  }
  // The library constructor (never inside an allocation): load what predict needs.
  // A predictor that cannot serve is fatal here (one line, abort).
  virtual void start() {}
  // fork child (the lock-free parts of the prediction path reset their locks).
  virtual void fork_child() {}
  virtual std::string describe() const = 0;
  // Predictor-specific stats (a JSON object's members).
  virtual void stats(sim::JsonWriter&) const {}

 protected:
  explicit Predictor(int constant) : constant_(constant) {}
  int constant() const { return constant_; }
  std::atomic<bool> model_ready_{false};  // the model's predictor: loaded (start)

 private:
  // predictor.cc: the model's predictor, all but a hit (frame: the caller's frame
  // address, whose stack height the cache is keyed on).
  __attribute__((noinline)) Prediction predict_model(uint64_t size, uintptr_t ra, uintptr_t frame);
  const int constant_;  // constant:C's class; -1: the model's predictor
};

// The model of LIFETIME_MODEL_PLUGIN when it is set (spec must then be empty), else
// LIFETIME_ALLOC_PREDICTOR's spec ("constant:C", 0 <= C < num_classes; empty: constant:0);
// fatal on a bad one.
// revalidate_every: the model cache's period (LIFETIME_ALLOC_REVALIDATE; -1: the plugin's).
std::unique_ptr<Predictor> make_predictor(const std::string& spec, int num_classes, int64_t revalidate_every);

// The lifetime class boundaries (ns) the heap must be built with, the deadlines of the
// predictor make_predictor will give: LIFETIME_MODEL_PLUGIN's model's, read from the
// plugin's file (its "lifetime_labels" section, export/codegen.py) without loading it,
// or the project's defaults (sim::kDefaultBoundsNs) for constant:C.  For the heap's
// init, inside the first malloc and before make_predictor: only open/pread/close into
// fixed buffers (the vector returned is the one allocation, the caller's).  Fatal (one
// line) for a model whose class count does not match its boundaries, with more than
// sim::kMaxBoundaries, or on the bytes clock.  A file it cannot read as ELF, or an export
// older than the section, gives the defaults here; the model's start() then refuses it
// (it cannot load it, or it records no boundaries).  start() checks the loaded model's
// own info (lifetime_model_info.boundaries_ns) against what this returned (or against
// the defaults when this was never called).
std::vector<uint64_t> predictor_class_bounds_ns();

}  // namespace lalloc
