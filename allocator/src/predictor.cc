#include "predictor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "classes.h"  // heap/src: sim::kMaxBoundaries, sim::kDefaultBoundsNs
#include "fatal.h"
#include "json.h"
#include "latency_histogram.h"  // inprocess/src: the project's one latency histogram
#include "parse_number.h"       // inprocess/src: the project's one integer parser
#include "online.h"  // inprocess/src: the sampler's online prediction, shared

namespace lalloc {

// The plugin's thread-local cache is dynamic TLS (a dlopen'ed library), allocated with
// malloc at a thread's first use; pthread_getattr_np (a thread's stack bounds) mallocs
// too; so may a miss's symbolization.
__thread bool t_predicting __attribute__((tls_model("initial-exec"))) = false;

const char* source_name(Source s) {
  static const char* const names[] = {"constant", "cache_hits", "misses", "revalidations",
                                      "nested", "before_load", "failures"};
  return names[size_t(s)];
}

namespace {

class ConstantPredictor final : public Predictor {
 public:
  explicit ConstantPredictor(int cls) : Predictor(cls) {}
  std::string describe() const override { return "constant:" + std::to_string(constant()); }
};

// ---------------------------------------------------------------- the model

// Latency of the model runs (capture + symbolize + context + model): log2 buckets with
// 8 linear sub-buckets (percentiles within ~6%), relaxed atomics (misses only, from any
// thread): inprocess/src/latency_histogram.h.
class RunTimes {
 public:
  void add(uint64_t ns) { lt_hist_add_atomic(&h_, ns); }
  uint64_t count() const { return lt_hist_count(&h_); }
  uint64_t total() const { return lt_hist_sum(&h_); }
  double percentile(double q) const { return lt_hist_percentile(&h_, q); }

 private:
  lt_latency_hist h_ = LT_LATENCY_HIST_INIT(3);
};

// The classes the heap was built with (predictor_class_bounds_ns; until it is called,
// the project's defaults), for start() to check the loaded model against.
uint64_t g_heap_bounds[sim::kMaxBoundaries];
int g_heap_nb = -1;  // -1: predictor_class_bounds_ns not called (sim::kDefaultBoundsNs)

std::string bounds_text(const uint64_t* b, int n) {
  std::string t;
  for (int i = 0; i < n; ++i) t += (i ? "," : "") + std::to_string(b[i]);
  return t + " ns";
}

// The first kServed model runs' contexts (class, frame strings as the model read them),
// for the stats file: what the allocator served, to be checked against the offline
// pipeline.  Static memory (bss: touched only as used; every member zero-initialized, so
// nothing is written at start-up), written under the predictor's lock in online.c,
// published per record.  The strings go one after another into one pool, so 128 records
// touch what their names take (~50 KiB), not 128 x 16 x 256 bytes; a record whose
// strings no longer fit is kept with no frames.
constexpr int kServed = 128, kServedFrames = 16, kServedName = 256;
constexpr uint32_t kServedPool = 96 * 1024;
struct Served {
  std::atomic<bool> ready{false};
  int cls = 0, n = 0, depth = 0;
  uint32_t off[kServedFrames] = {};
  uint16_t len[kServedFrames] = {};
};
Served g_served[kServed];
char g_served_text[kServedPool] = {};
std::atomic<int> g_served_count{0};
std::atomic<uint32_t> g_served_used{0};

void on_served(int cls, const char* const* frames, const size_t* lengths, int n, int depth) {
  int i = g_served_count.fetch_add(1, std::memory_order_relaxed);
  if (i >= kServed) return;
  Served& s = g_served[i];
  s.cls = cls;
  s.depth = depth;
  n = n < kServedFrames ? n : kServedFrames;
  uint32_t total = 0;
  for (int f = 0; f < n; ++f) total += uint32_t(lengths[f] < size_t(kServedName) ? lengths[f] : size_t(kServedName));
  const uint32_t at = g_served_used.fetch_add(total, std::memory_order_relaxed);
  s.n = at + total <= kServedPool ? n : 0;
  for (int f = 0, o = int(at); f < s.n; ++f) {
    const uint16_t len = uint16_t(lengths[f] < size_t(kServedName) ? lengths[f] : size_t(kServedName));
    std::memcpy(g_served_text + o, frames[f], len);
    s.off[f] = uint32_t(o);
    s.len[f] = len;
    o += len;
  }
  s.ready.store(true, std::memory_order_release);
}

class ModelPredictor final : public Predictor {
 public:
  ModelPredictor(std::string plugin, int num_classes, int64_t revalidate_every)
      : Predictor(-1), plugin_(std::move(plugin)), num_classes_(num_classes), revalidate_every_(revalidate_every) {}

  void start() override {
    char why[1024];
    if (!lt_online_open(plugin_.c_str(), why, sizeof why))
      fatal(LT_MODEL_PLUGIN_ENV ": ", plugin_.c_str(), (std::string(": ") + why).c_str());
    const lifetime_model_info* info = lt_online_model_info();
    if (info->num_classes != num_classes_)
      fatal(LT_MODEL_PLUGIN_ENV ": ", plugin_.c_str(),
            (": the model has " + std::to_string(info->num_classes) + " lifetime classes, the allocator " +
             std::to_string(num_classes_))
                .c_str());
    check_boundaries(info, lt_online_model_info_size());
    if (!lt_online_set_revalidate_every(long(revalidate_every_)))
      fatal("LIFETIME_ALLOC_REVALIDATE: the model plugin ", plugin_.c_str(), " cannot set the revalidation period");
    model_id_ = info->model_id ? info->model_id : "";
    max_frames_ = info->max_frames;
    lt_online_set_served(on_served);
    model_ready_.store(true, std::memory_order_release);
  }

  // What Predictor::predict does not answer inline: before the model is loaded, inside a
  // prediction, the thread's first prediction (its set-up: the plugin's dynamic TLS
  // and pthread_getattr_np malloc), and a miss or revalidation (the model runs).
  Prediction predict_slow(uint64_t size, uintptr_t ra, uintptr_t frame) {
    if (!model_ready_.load(std::memory_order_acquire)) return {kFallback, Source::kEarly};
    if (t_predicting) return {kFallback, Source::kNested};
    t_predicting = true;
    if (!lt_online_tls.cache) lt_online_thread_start();
    lt_online_call call;
    const int cls = lt_online_classify(ra, lt_online_tls.stack_hi - frame, lt_online_key_size_inline(size), ra, &call);
    t_predicting = false;
    if (!call.ran) return {cls, Source::kHit};  // (the thread's first, or a plugin with no lookup)
    times_.add(call.ns);
    if (cls < 0 || cls >= num_classes_) return {kFallback, Source::kFailed};
    return {cls, call.ran == 2 ? Source::kRevalidation : Source::kMiss};
  }

  // The model's own class boundaries (its info struct) must be the heap's deadlines: the
  // ones predictor_class_bounds_ns read from the plugin's file (the same export), or the
  // defaults the heap was built with when it was not asked.
  void check_boundaries(const lifetime_model_info* info, size_t info_size) const {
    if (!LIFETIME_MODEL_INFO_HAS(info_size, boundaries_ns))
      fatal(LT_MODEL_PLUGIN_ENV ": ", plugin_.c_str(),
            ": the model records no class boundaries (exported before they were): re-export it "
            "with `lifetime export`, so that the allocator's deadlines are the model's classes");
    const uint64_t* heap = g_heap_nb < 0 ? sim::kDefaultBoundsNs : g_heap_bounds;
    const int nb = g_heap_nb < 0 ? sim::kNumDefaultBounds : g_heap_nb;
    if (!info->boundaries_ns)
      fatal(LT_MODEL_PLUGIN_ENV ": ", plugin_.c_str(),
            ": the model's classes are on the bytes clock; the allocator's deadlines need "
            "wall-clock class boundaries (a model trained with --clock wall)");
    if (info->num_boundaries != nb ||
        std::memcmp(info->boundaries_ns, heap, sizeof(uint64_t) * size_t(nb)) != 0)
      fatal(LT_MODEL_PLUGIN_ENV ": ", plugin_.c_str(),
            (": the model's class boundaries (" + bounds_text(info->boundaries_ns, info->num_boundaries) +
             ") are not the heap's deadlines (" + bounds_text(heap, nb) + ")")
                .c_str());
  }

  void fork_child() override { lt_online_reset_child(); }

  std::string describe() const override { return "model:" + plugin_; }

  void stats(sim::JsonWriter& j) const override {
    j.kv("model_id", model_id_);
    j.kv("max_frames", max_frames_);
    j.kv("fallback_class", kFallback);
    j.kv("revalidate_every", revalidate_every_ < 0 ? int64_t(1000) : revalidate_every_);
    j.kv("inline_lookup", uint64_t(lt_online_cache_inline != 0));  // the plugin's cache has this build's layout
    j.kv("model_runs", times_.count());
    j.kv("model_ns_total", times_.total());
    j.kv_double("model_ns_p50", times_.percentile(0.5));
    j.kv_double("model_ns_p99", times_.percentile(0.99));
    j.key("served");
    j.begin_array();
    int n = g_served_count.load(std::memory_order_relaxed);
    for (int i = 0; i < n && i < kServed; ++i) {
      const Served& s = g_served[i];
      if (!s.ready.load(std::memory_order_acquire)) continue;
      j.begin_object();
      j.kv("class", s.cls);
      j.kv("depth", s.depth);
      j.key("frames");
      j.begin_array();
      for (int f = 0; f < s.n; ++f) j.value(std::string(g_served_text + s.off[f], s.len[f]));
      j.end_array();
      j.end_object();
    }
    j.end_array();
  }

 private:
  static constexpr int kFallback = 0;  // the shortest class, constant:0's
  std::string plugin_, model_id_;
  int num_classes_, max_frames_ = 0;
  int64_t revalidate_every_;
  RunTimes times_;
};

}  // namespace

Prediction Predictor::predict_model(uint64_t size, uintptr_t ra, uintptr_t frame) {
  return static_cast<ModelPredictor*>(this)->predict_slow(size, ra, frame);  // (constant_ < 0: the model's)
}

std::unique_ptr<Predictor> make_predictor(const std::string& spec, int num_classes, int64_t revalidate_every) {
  // A model: the one variable that serves a model in a process (inprocess/src/online.h).
  if (const char* plugin = lt_online_plugin()) {
    if (!spec.empty())
      fatal(LT_MODEL_PLUGIN_ENV " and LIFETIME_ALLOC_PREDICTOR both choose the predictor: set one");
    return std::make_unique<ModelPredictor>(plugin, num_classes, revalidate_every);
  }
  if (spec.empty()) return std::make_unique<ConstantPredictor>(0);
  if (spec.compare(0, 9, "constant:") == 0) {
    const std::string v = spec.substr(9);
    uint64_t c = 0;
    if (lt_parse_u64(v.c_str(), &c) != LT_NUMBER_OK || c >= uint64_t(num_classes))
      fatal(("LIFETIME_ALLOC_PREDICTOR: constant:C takes a class index 0.." + std::to_string(num_classes - 1) +
             ", got '" + v + "'").c_str());
    return std::make_unique<ConstantPredictor>(int(c));
  }
  if (spec.compare(0, 6, "model:") == 0)  // the old spelling: one contract, say which
    fatal("LIFETIME_ALLOC_PREDICTOR: model:PLUGIN is now " LT_MODEL_PLUGIN_ENV
          "=PLUGIN (the sampler's and the allocator's one variable; lifetime run --model EXPORT_DIR sets it)");
  fatal("LIFETIME_ALLOC_PREDICTOR: unknown predictor '", spec.c_str(),
        "' (constant:C; a model: " LT_MODEL_PLUGIN_ENV "=PLUGIN)");
}

namespace {

// The words of the section export/codegen.py writes (LABELS_SECTION): magic, version,
// classes, B, clock (0: wall), then the B boundaries in ns.
constexpr char kLabelsSection[] = "lifetime_labels";
constexpr uint64_t kLabelsMagic = 0x314c4542414c544cull;  // "LTLABEL1", little-endian
constexpr int kLabelsHead = 5;

// The kLabelsSection of an ELF64 file as words into out[cap]: how many the section holds
// (read only when at most cap), 0 when the file has no such section, -1 when it cannot be
// read as ELF64 or the section is not whole words.  Nothing allocated (lt_elf_section).
int read_labels_section(const char* path, uint64_t* out, int cap) {
  const long bytes = lt_elf_section(path, kLabelsSection, out, sizeof(uint64_t) * size_t(cap));
  if (bytes < 0 || bytes % 8 || bytes / 8 > 1l << 20) return -1;
  return int(bytes / 8);
}

}  // namespace

std::vector<uint64_t> predictor_class_bounds_ns() {
  const uint64_t* bounds = sim::kDefaultBoundsNs;
  int nb = sim::kNumDefaultBounds;
  uint64_t words[kLabelsHead + sim::kMaxBoundaries];
  const char* plugin = lt_online_plugin();
  const int cap = kLabelsHead + sim::kMaxBoundaries;
  const int n = plugin ? read_labels_section(plugin, words, cap) : 0;
  // Not an ELF64 file, or one without the section (an older export): the defaults here,
  // and start() refuses the model when it loads (or cannot load it).
  if (n > 0) {
    auto bad = [&](const std::string& what) {
      fatal(LT_MODEL_PLUGIN_ENV ": ", plugin, (": " + what).c_str());
    };
    if (n > cap)
      bad("the model records " + std::to_string(n - kLabelsHead) + " class boundaries (1.." +
          std::to_string(sim::kMaxBoundaries) + ")");
    if (n < kLabelsHead || words[0] != kLabelsMagic || words[1] != 1)
      bad(std::string("its ") + kLabelsSection + " section is not one `lifetime export` writes");
    if (words[4] != 0)
      bad("the model's classes are on the bytes clock; the allocator's deadlines need wall-clock "
          "class boundaries (a model trained with --clock wall)");
    if (words[3] < 1 || words[3] > uint64_t(sim::kMaxBoundaries))
      bad("the model records " + std::to_string(words[3]) + " class boundaries (1.." +
          std::to_string(sim::kMaxBoundaries) + ")");
    if (uint64_t(n) != kLabelsHead + words[3])
      bad(std::string("its ") + kLabelsSection + " section is not one `lifetime export` writes");
    if (words[2] != words[3] + 2)
      bad("the model has " + std::to_string(words[2]) + " lifetime classes but " +
          std::to_string(words[3]) + " class boundaries (classes = boundaries + 2)");
    for (int i = kLabelsHead; i < n; ++i)
      if (words[i] == 0 || words[i] >= uint64_t(1) << 63 || (i > kLabelsHead && words[i] <= words[i - 1]))
        bad("the model's class boundaries are not increasing ns below 2^63");
    bounds = words + kLabelsHead;
    nb = n - kLabelsHead;
  }
  std::memcpy(g_heap_bounds, bounds, sizeof(uint64_t) * size_t(nb));
  g_heap_nb = nb;
  return std::vector<uint64_t>(bounds, bounds + nb);
}

}  // namespace lalloc
