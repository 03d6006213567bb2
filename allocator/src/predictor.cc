#include "predictor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "fatal.h"
#include "json.h"
#include "online.h"  // inprocess/src: the sampler's online prediction, shared

namespace lalloc {

const char* source_name(Source s) {
  static const char* const names[] = {"constant", "cache_hits", "misses", "revalidations",
                                      "nested", "before_load", "failures"};
  return names[size_t(s)];
}

namespace {

class ConstantPredictor final : public Predictor {
 public:
  explicit ConstantPredictor(int cls) : cls_(cls) {}
  Prediction predict(const AllocSite&) override { return {cls_, Source::kConstant}; }
  std::string describe() const override { return "constant:" + std::to_string(cls_); }

 private:
  int cls_;
};

// ---------------------------------------------------------------- the model

// Latency of the model runs (capture + symbolize + context + model): log2 buckets with
// 8 linear sub-buckets (percentiles within ~6%), atomics (misses only).
class RunTimes {
 public:
  void add(uint64_t ns) {
    n_.fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(ns, std::memory_order_relaxed);
    b_[bucket(ns)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t count() const { return n_.load(std::memory_order_relaxed); }
  uint64_t total() const { return sum_.load(std::memory_order_relaxed); }
  double percentile(double q) const {
    uint64_t n = 0;
    for (const auto& b : b_) n += b.load(std::memory_order_relaxed);
    if (!n) return 0;
    uint64_t rank = uint64_t(q * double(n - 1)) + 1, seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += b_[i].load(std::memory_order_relaxed);
      if (seen >= rank) return mid(i);
    }
    return mid(kBuckets - 1);
  }

 private:
  static constexpr size_t kBuckets = 8 + 61 * 8;
  static size_t bucket(uint64_t v) {
    if (v < 8) return size_t(v);
    int e = 63 - __builtin_clzll(v);  // >= 3
    size_t b = 8 + size_t(e - 3) * 8 + size_t((v >> (e - 3)) & 7);
    return b < kBuckets ? b : kBuckets - 1;
  }
  static double mid(size_t b) {
    if (b < 8) return double(b);
    int e = int((b - 8) / 8) + 3;
    double w = double(uint64_t(1) << (e - 3));
    return double(uint64_t(1) << e) + double((b - 8) % 8) * w + w / 2;
  }
  std::atomic<uint64_t> n_{0}, sum_{0};
  std::atomic<uint64_t> b_[kBuckets] = {};
};

// The first kServed model runs' contexts (class, frame strings as the model read them),
// for the stats file: what the allocator served, to be checked against the offline
// pipeline.  Static memory (bss: touched only as used), written under the predictor's
// lock in online.c, published per record.
constexpr int kServed = 128, kServedFrames = 16, kServedName = 256;
struct Served {
  std::atomic<bool> ready{false};
  int cls, n, depth;
  uint16_t len[kServedFrames];
  char text[kServedFrames][kServedName];
};
Served g_served[kServed];
std::atomic<int> g_served_count{0};

void on_served(int cls, const char* const* frames, const size_t* lengths, int n, int depth) {
  int i = g_served_count.fetch_add(1, std::memory_order_relaxed);
  if (i >= kServed) return;
  Served& s = g_served[i];
  s.cls = cls;
  s.depth = depth;
  s.n = n < kServedFrames ? n : kServedFrames;
  for (int f = 0; f < s.n; ++f) {
    size_t len = lengths[f] < size_t(kServedName) ? lengths[f] : size_t(kServedName);
    std::memcpy(s.text[f], frames[f], len);
    s.len[f] = uint16_t(len);
  }
  s.ready.store(true, std::memory_order_release);
}

// Recursion guard: the plugin's thread-local cache is dynamic TLS (a dlopen'ed
// library), allocated with malloc at a thread's first use; pthread_getattr_np (a
// thread's stack bounds) mallocs too.  Those nested allocations get the fallback class.
__thread bool t_predicting __attribute__((tls_model("initial-exec"))) = false;

class ModelPredictor final : public Predictor {
 public:
  ModelPredictor(std::string plugin, int num_classes, int64_t revalidate_every)
      : plugin_(std::move(plugin)), num_classes_(num_classes), revalidate_every_(revalidate_every) {}

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
    if (!lt_online_set_revalidate_every(long(revalidate_every_)))
      fatal("LIFETIME_ALLOC_REVALIDATE: the model plugin ", plugin_.c_str(), " cannot set the revalidation period");
    model_id_ = info->model_id ? info->model_id : "";
    max_frames_ = info->max_frames;
    lt_online_set_served(on_served);
    ready_.store(true, std::memory_order_release);
  }

  Prediction predict(const AllocSite& site) override {
    if (__builtin_expect(!ready_.load(std::memory_order_acquire), 0)) return {kFallback, Source::kEarly};
    if (__builtin_expect(t_predicting, 0)) return {kFallback, Source::kNested};
    t_predicting = true;
    // The size class (next power of two, as the sampler keys it): requests of variable
    // length from one site would otherwise almost never hit.
    const uint64_t n = site.size;
    const size_t size_class = n <= 16 ? 16 : size_t(1) << (64 - __builtin_clzll(n - 1));
    lt_online_call call;
    int cls = lt_online_classify(site.return_address, size_class, site.return_address, &call);
    t_predicting = false;
    if (__builtin_expect(!call.ran, 1)) return {cls, Source::kHit};
    times_.add(call.ns);
    if (cls < 0 || cls >= num_classes_) return {kFallback, Source::kFailed};
    return {cls, call.ran == 2 ? Source::kRevalidation : Source::kMiss};
  }

  void fork_child() override { lt_online_reset_child(); }

  std::string describe() const override { return "model:" + plugin_; }

  void stats(sim::JsonWriter& j) const override {
    j.kv("model_id", model_id_);
    j.kv("max_frames", max_frames_);
    j.kv("fallback_class", kFallback);
    j.kv("revalidate_every", revalidate_every_ < 0 ? int64_t(1000) : revalidate_every_);
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
      for (int f = 0; f < s.n; ++f) j.value(std::string(s.text[f], s.len[f]));
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
  std::atomic<bool> ready_{false};
  RunTimes times_;
};

}  // namespace

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
    char* end = nullptr;
    long c = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || v[0] == '-' || v[0] == '+' || c >= num_classes)
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

}  // namespace lalloc
