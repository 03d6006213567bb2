// The seam for lifetime prediction on the allocation path: constant:C, and the exported
// model's plugin (LIFETIME_MODEL_PLUGIN, inprocess/src/online.h; export.serve.model_plugin
// builds it; describe() says model:PLUGIN).  The
// allocator asks for a class before it takes its lock (heap.cc: predict first, then
// lock), so predict() is thread-safe and must not call malloc (see ModelPredictor for
// the one place the model's plugin may, and how that is guarded).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

class Predictor {
 public:
  virtual ~Predictor() = default;
  // A lifetime class in [0, num_classes).  Called outside the allocator's lock, from any
  // thread.  Not virtual: every malloc asks, so constant:C is answered inline and the
  // model (the one other predictor) called directly.
  Prediction predict(const AllocSite& site) {
    if (constant_ >= 0) return {constant_, Source::kConstant};
    return predict_model(site);
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

 private:
  Prediction predict_model(const AllocSite& site);  // predictor.cc: the model's plugin
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
