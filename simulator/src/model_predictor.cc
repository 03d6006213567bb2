// The model predictor (see model_predictor.h).
#include "model_predictor.h"

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <unordered_map>
#include <vector>

#include "json.h"
#include "lifetime_model.h"  // export/cc: the C API's types only; no model is linked

namespace sim {

namespace {

constexpr char kFormat[] = "lifetime-model-contexts-v1";

// Latency histogram: exact below 16 ns, then 16 linear sub-buckets per power of two
// (percentiles within ~6%); the mean is exact.
class Histogram {
 public:
  void add(uint64_t ns) {
    ++count_;
    sum_ += ns;
    ++buckets_[bucket(ns)];
  }
  uint64_t count() const { return count_; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0.0; }
  double percentile(double q) const {
    if (!count_) return 0.0;
    uint64_t rank = uint64_t(q * double(count_ - 1)) + 1, seen = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      seen += buckets_[b];
      if (seen >= rank) return midpoint(b);
    }
    return midpoint(kBuckets - 1);
  }
  void describe(JsonWriter& j) const {
    j.begin_object();
    j.kv("calls", count_);
    j.kv_double("mean", mean());
    j.kv_double("p50", percentile(0.5));
    j.kv_double("p99", percentile(0.99));
    j.kv_double("total_s", double(sum_) / 1e9);
    j.end_object();
  }

 private:
  static constexpr size_t kBuckets = 16 + 60 * 16;
  static size_t bucket(uint64_t v) {
    if (v < 16) return size_t(v);
    int e = 63 - __builtin_clzll(v);  // >= 4
    size_t b = 16 + size_t(e - 4) * 16 + size_t((v >> (e - 4)) & 15);
    return std::min(b, kBuckets - 1);
  }
  static double midpoint(size_t b) {
    if (b < 16) return double(b);
    int e = int((b - 16) / 16) + 4;
    double lo = double(uint64_t(1) << e) + double((b - 16) % 16) * double(uint64_t(1) << (e - 4));
    return lo + double(uint64_t(1) << (e - 4)) / 2.0;
  }
  uint64_t count_ = 0, sum_ = 0;
  uint64_t buckets_[kBuckets] = {};
};

struct Api {
  const lifetime_model_info* (*info)(void);
  lifetime_predictor* (*create)(void);
  void (*destroy)(lifetime_predictor*);
  lifetime_cache* (*cache_tl)(void);
  int (*cache_predict)(lifetime_cache*, lifetime_predictor*, uintptr_t, uintptr_t, size_t,
                       lifetime_frames_fn, void*);
  void (*cache_stats)(const lifetime_cache*, lifetime_cache_stats*);
  void (*cache_set_revalidate_every)(lifetime_cache*, uint32_t);
  void (*cache_clear)(lifetime_cache*);
};

// Plugins in use by a predictor of this process: they share one thread-local cache.
std::set<void*>& plugins_in_use() {
  static std::set<void*> s;
  return s;
}

uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= 0xff;  // frame separator (a byte no UTF-8 text holds)
  h *= 0x100000001b3ull;
  return h;
}

class ModelPredictor final : public Predictor {
 public:
  ModelPredictor(const std::string& file, const ClassScheme& classes, const PredictorOptions& opts)
      : file_(file), num_classes_(classes.num_classes()) {
    read_contexts();
    load_plugin();
    if (opts.model_revalidate_every >= 0) {
      revalidate_every_ = uint32_t(opts.model_revalidate_every);
      api_.cache_set_revalidate_every(cache_, revalidate_every_);
    }
  }
  ~ModelPredictor() override {
    if (predictor_) api_.destroy(predictor_);
    if (handle_) plugins_in_use().erase(handle_);  // the library stays loaded
  }

  int predict(const ObjectRecord& r) override {
    if (r.stack_id != last_stack_id_ || !last_) {
      auto it = index_.find(r.stack_id);
      if (it == index_.end())
        throw SimError(file_ + ": stack id " + std::to_string(r.stack_id) +
                       " of the trace has no context in this file (written for another trace?)");
      last_stack_id_ = r.stack_id;
      last_ = &stacks_[it->second];
    }
    Stack* s = last_;
    Call call{this, s, false};
    auto t0 = std::chrono::steady_clock::now();
    int cls = api_.cache_predict(cache_, predictor_, uintptr_t(s->hash), uintptr_t(s->num_frames),
                                 size_t(model_size_class(r.size)), &ModelPredictor::frames_cb, &call);
    uint64_t ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - t0).count());
    (call.ran ? model_calls_ : hits_).add(ns);
    if (cls < 0 || cls >= num_classes_)
      throw SimError(file_ + ": the model failed on stack " + std::to_string(r.stack_id) +
                     " (class " + std::to_string(cls) + ")");
    ++s->served[size_t(cls)];
    return cls;
  }

  void describe(JsonWriter& j) const override {
    lifetime_cache_stats st{};
    api_.cache_stats(cache_, &st);
    j.kv("kind", "model");
    j.kv("contexts_file", file_);
    j.kv("plugin", plugin_);
    j.kv("model_id", model_id_);
    j.kv("context_version", context_version_);
    j.kv("max_frames", max_frames_);
    j.kv("stacks", uint64_t(stacks_.size()));
    j.kv("distinct_contexts", distinct_contexts_);
    j.kv("cache_key", "lifetime_cache_key(FNV-1a 64 of the context frames of the record's "
                      "stack id, number of context frames, size class = next power of two >= 16)");
    j.key("cache");
    j.begin_object();
    j.kv("entries", uint64_t(lifetime_model::PredictionCache::kEntries));
    j.kv("revalidate_every", revalidate_every_);
    j.kv("lookups", st.hits + st.misses);
    j.kv("hits", st.hits);
    j.kv("misses", st.misses);
    j.kv("revalidations", st.revalidations);
    j.kv("disagreements", st.disagreements);
    j.kv("evictions", st.evictions);
    j.kv_double("hit_rate", st.hits + st.misses ? double(st.hits) / double(st.hits + st.misses) : 0.0);
    j.end_object();
    j.kv("model_runs", model_runs_);
    // Wall-clock costs: the only part of the report that is not deterministic.
    j.key("timing_ns");
    j.begin_object();
    j.key("cache_hit");  // lifetime_cache_predict calls that did not run the model
    hits_.describe(j);
    j.key("model_call");  // calls that ran the model (misses and revalidations)
    model_calls_.describe(j);
    j.end_object();
  }

  bool write_served(std::FILE* f) const override {
    for (const Stack& s : stacks_)
      for (int c = 0; c < num_classes_; ++c)
        if (s.served[size_t(c)])
          std::fprintf(f, "%s %llu %d %llu\n", label.c_str(), (unsigned long long)s.id, c,
                       (unsigned long long)s.served[size_t(c)]);
    return true;
  }

 private:
  struct Stack {
    uint64_t id = 0, hash = 0;
    uint32_t first = 0, num_frames = 0;  // into frames_
    std::vector<uint64_t> served;        // objects per class served
  };
  struct Call {
    ModelPredictor* self;
    const Stack* stack;
    bool ran;
  };

  static int frames_cb(void* opaque, const char** frames, size_t* lengths, int max_frames) {
    Call* c = static_cast<Call*>(opaque);
    c->ran = true;
    ++c->self->model_runs_;
    int n = std::min<int>(int(c->stack->num_frames), max_frames);
    for (int i = 0; i < n; ++i) {
      const std::string& s = c->self->frames_[c->stack->first + uint32_t(i)];
      frames[i] = s.data();
      lengths[i] = s.size();
    }
    return n;
  }

  [[noreturn]] void bad(uint64_t lineno, const std::string& what) const {
    throw SimError(file_ + ": line " + std::to_string(lineno) + ": " + what +
                   " (not a " + kFormat + " file written by simulator/model.py?)");
  }

  void read_contexts() {
    refuse_irregular(file_, "cannot open the model contexts file");  // never block on a fifo
    std::ifstream in(file_, std::ios::binary);
    if (!in) throw SimError(file_ + ": cannot open the model contexts file: " + std::strerror(errno));
    std::string line;
    uint64_t lineno = 0;
    auto next = [&]() -> std::string& {
      if (!std::getline(in, line)) bad(lineno + 1, "unexpected end of file");
      ++lineno;
      return line;
    };
    auto field = [&](const char* name) -> std::string {
      std::string& l = next();
      size_t n = std::strlen(name);
      if (l.compare(0, n, name) != 0 || l.size() <= n || l[n] != ' ') bad(lineno, std::string("expected '") + name + " ...'");
      return l.substr(n + 1);
    };
    auto number = [&](const std::string& s) -> uint64_t {
      char* end = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end || errno || s[0] == '-') bad(lineno, "bad number '" + s + "'");
      return v;
    };
    if (next() != kFormat) bad(lineno, std::string("expected the format line '") + kFormat + "'");
    plugin_ = field("plugin");
    model_id_ = field("model_id");
    context_version_ = field("context_version");
    max_frames_ = int(number(field("max_frames")));
    uint64_t nw = number(field("wrappers"));
    for (uint64_t i = 0; i < nw; ++i) wrappers_.push_back(next());
    uint64_t ns = number(field("stacks"));
    stacks_.reserve(ns);
    std::unordered_map<uint64_t, uint32_t> by_hash;
    for (uint64_t i = 0; i < ns; ++i) {
      std::string rest = field("stack");
      size_t sp = rest.find(' ');
      if (sp == std::string::npos) bad(lineno, "expected 'stack STACK_ID FRAMES'");
      Stack s;
      s.id = number(rest.substr(0, sp));
      s.num_frames = uint32_t(number(rest.substr(sp + 1)));
      s.first = uint32_t(frames_.size());
      uint64_t h = 0xcbf29ce484222325ull;
      for (uint32_t k = 0; k < s.num_frames; ++k) {
        frames_.push_back(next());
        h = fnv1a(h, frames_.back());
      }
      s.hash = h ? h : 1;
      s.served.assign(size_t(num_classes_), 0);
      if (!index_.emplace(s.id, uint32_t(stacks_.size())).second)
        bad(lineno, "stack id " + std::to_string(s.id) + " listed twice");
      by_hash.emplace(s.hash, 0);
      stacks_.push_back(std::move(s));
    }
    if (next() != "end") bad(lineno, "expected 'end'");
    distinct_contexts_ = by_hash.size();
  }

  template <class F>
  void resolve(F& fn, const char* name) {
    *reinterpret_cast<void**>(&fn) = dlsym(handle_, name);
    if (!fn) throw SimError(plugin_ + ": " + name + " not found: not a model plugin (build it with "
                            "profiler.launch.model_plugin)");
  }

  void load_plugin() {
    refuse_irregular(plugin_, "cannot load the model plugin");
    void* h = dlopen(plugin_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      throw SimError(file_ + ": cannot load the model plugin " + plugin_ + ": " + (e ? e : "?"));
    }
    if (!plugins_in_use().insert(h).second)
      throw SimError(plugin_ + ": this model plugin is already used by another model predictor "
                     "(they would share its thread-local cache); give one per plugin");
    handle_ = h;
    resolve(api_.info, "lifetime_model_get_info");
    resolve(api_.create, "lifetime_predictor_create");
    resolve(api_.destroy, "lifetime_predictor_destroy");
    resolve(api_.cache_tl, "lifetime_cache_thread_local");
    resolve(api_.cache_predict, "lifetime_cache_predict");
    resolve(api_.cache_stats, "lifetime_cache_get_stats");
    resolve(api_.cache_set_revalidate_every, "lifetime_cache_set_revalidate_every");
    resolve(api_.cache_clear, "lifetime_cache_clear");
    const lifetime_model_info* info = api_.info();
    auto refuse = [&](const std::string& what) {
      throw SimError(plugin_ + ": " + what + "; the contexts in " + file_ +
                     " were not made for this model (re-run lifetime simulate --model)");
    };
    if (!info->model_id || model_id_ != info->model_id)
      refuse("model id " + std::string(info->model_id ? info->model_id : "?") + ", expected " + model_id_);
    if (!info->context_version || context_version_ != info->context_version)
      refuse("context definition " + std::string(info->context_version ? info->context_version : "none") +
             ", the contexts file's is " + context_version_);
    std::vector<std::string> w;
    for (int i = 0; i < info->num_wrappers; ++i) w.push_back(info->wrappers[i]);
    if (w != wrappers_ || info->max_frames != max_frames_)
      refuse("the model's context definition (wrappers, max_frames) differs from the contexts file's");
    if (info->num_classes != num_classes_)
      throw SimError(plugin_ + ": the model has " + std::to_string(info->num_classes) +
                     " lifetime classes, the trace " + std::to_string(num_classes_) +
                     " (train the model on the dataset's label scheme)");
    predictor_ = api_.create();
    if (!predictor_) throw SimError(plugin_ + ": cannot create a predictor (out of memory)");
    cache_ = api_.cache_tl();
    api_.cache_clear(cache_);
    revalidate_every_ = lifetime_model::PredictionCache::kDefaultRevalidateEvery;
    api_.cache_set_revalidate_every(cache_, revalidate_every_);
  }

  std::string file_, plugin_, model_id_, context_version_;
  int max_frames_ = 0, num_classes_;
  std::vector<std::string> wrappers_, frames_;
  std::vector<Stack> stacks_;
  std::unordered_map<uint64_t, uint32_t> index_;
  uint64_t distinct_contexts_ = 0;
  void* handle_ = nullptr;
  Api api_{};
  lifetime_predictor* predictor_ = nullptr;
  lifetime_cache* cache_ = nullptr;
  uint32_t revalidate_every_ = 0;
  uint64_t last_stack_id_ = UINT64_MAX;
  Stack* last_ = nullptr;
  uint64_t model_runs_ = 0;
  Histogram hits_, model_calls_;
};

}  // namespace

std::unique_ptr<Predictor> make_model_predictor(const std::string& contexts_file,
                                                const ClassScheme& classes,
                                                const PredictorOptions& opts) {
  return std::make_unique<ModelPredictor>(contexts_file, classes, opts);
}

}  // namespace sim
