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
#include "latency_histogram.h"  // inprocess/src: the project's one latency histogram
#include "lifetime_model.h"  // export/cc: the C API's types only; no model is linked
#include "files.h"
#include "parse_number.h"  // inprocess/src: the project's one integer parser

namespace sim {

namespace {

constexpr char kFormat[] = "lifetime-model-contexts-v1";

// Latency histogram (inprocess/src/latency_histogram.h): exact below 16 ns, then 16
// linear sub-buckets per power of two (percentiles within ~6%); the mean is exact.
class Histogram {
 public:
  void add(uint64_t ns) { lt_hist_add(&h_, ns); }
  // untimed: calls of this kind that were not timed (their cost taken as the mean).
  void describe(JsonWriter& j, uint64_t untimed = 0) const {
    const uint64_t count = lt_hist_count(&h_);
    const double mean = lt_hist_mean(&h_);
    j.begin_object();
    j.kv("calls", count + untimed);
    j.kv("timed_calls", count);
    j.kv_double("mean", mean);
    j.kv_double("p50", lt_hist_percentile(&h_, 0.5));
    j.kv_double("p99", lt_hist_percentile(&h_, 0.99));
    j.kv_double("total_s", (double(lt_hist_sum(&h_)) + mean * double(untimed)) / 1e9);
    j.end_object();
  }

 private:
  lt_latency_hist h_ = LT_LATENCY_HIST_INIT(4);
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
      : file_(file), num_classes_(classes.num_classes()), bounds_ns_(classes.bounds_ns) {
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

  // The hit path: the stack's hot data (key hash, frame count) by array index, no clock
  // read on most calls.  Wall-clock timing: every model call (from the frames callback,
  // where the model's run starts, to the return: the cache lookup before it, tens of ns,
  // is outside unless the call is also a sampled one), and every kHitSampleEvery-th call
  // (all of the first kHitSampleFirst) from before the lookup: the hits' histogram is over
  // those sampled hits, its "calls" all hits, its total_s the sampled mean times all hits.
  int predict(const ObjectRecord& r) override {
    uint64_t* row = &rows_[size_t(stack_index(r.stack_id)) * row_words_];
    const Hot s{row[0], uint32_t(row[1]), uint32_t(row[1] >> 32)};
    Call call{this, &s, 0};
    const bool sampled = calls_ < kHitSampleFirst || (calls_ & (kHitSampleEvery - 1)) == 0;
    ++calls_;
    uint64_t t0 = sampled ? now_ns() : 0;
    int cls = api_.cache_predict(cache_, predictor_, uintptr_t(s.hash), uintptr_t(s.num_frames),
                                 size_t(model_size_class(r.size)), &ModelPredictor::frames_cb, &call);
    if (call.t_model) {
      model_calls_.add(now_ns() - (sampled ? t0 : call.t_model));
    } else if (sampled) {
      hits_.add(now_ns() - t0);
    } else {
      ++untimed_hits_;
    }
    if (cls < 0 || cls >= num_classes_)
      throw SimError(file_ + ": the model failed on stack " + std::to_string(r.stack_id) +
                     " (class " + std::to_string(cls) + ")");
    ++row[2 + size_t(cls)];
    return cls;
  }

  void prefetch(const ObjectRecord& r) const override {
    if (r.stack_id < dense_.size()) {
      uint32_t i = dense_[size_t(r.stack_id)];
      if (i != kNoStack) __builtin_prefetch(&rows_[size_t(i) * row_words_]);
    }
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
    j.key("cache_hit");  // lifetime_cache_predict calls that did not run the model (sampled)
    hits_.describe(j, untimed_hits_);
    j.key("model_call");  // calls that ran the model (misses and revalidations)
    model_calls_.describe(j);
    // What one clock read costs here (a sampled hit's interval holds about one): the
    // hit's own cost is about cache_hit's mean less this.
    j.kv_double("clock_read", clock_read_ns());
    j.end_object();
  }

  bool write_served(std::FILE* f) const override {
    for (size_t i = 0; i < stacks_.size(); ++i)
      for (int c = 0; c < num_classes_; ++c)
        if (uint64_t n = rows_[i * row_words_ + 2 + size_t(c)])
          std::fprintf(f, "%s %llu %d %llu\n", label.c_str(), (unsigned long long)stacks_[i].id, c,
                       (unsigned long long)n);
    return true;
  }

 private:
  struct Stack {
    uint64_t id = 0, hash = 0;
    uint32_t first = 0, num_frames = 0;  // into frames_
  };
  // What a prediction reads: the first 2 words of the stack's row (rows_).
  struct Hot {
    uint64_t hash;
    uint32_t first, num_frames;
  };
  struct Call {
    ModelPredictor* self;
    const Hot* stack;
    uint64_t t_model;  // when the model's run started (0: it did not run)
  };
  static constexpr uint64_t kHitSampleEvery = 16;  // a power of two
  static constexpr uint64_t kHitSampleFirst = 4096;
  static constexpr uint32_t kNoStack = UINT32_MAX;

  static uint64_t now_ns() {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch()).count());
  }

  static double clock_read_ns() {
    constexpr int kReads = 4096;
    uint64_t first = now_ns(), last = first;
    for (int i = 1; i < kReads; ++i) last = now_ns();
    return double(last - first) / double(kReads - 1);
  }

  uint32_t stack_index(uint64_t id) const {
    if (id < dense_.size()) {
      uint32_t i = dense_[size_t(id)];
      if (i != kNoStack) return i;
    } else if (dense_.empty()) {
      auto it = index_.find(id);
      if (it != index_.end()) return it->second;
    }
    throw SimError(file_ + ": stack id " + std::to_string(id) +
                   " of the trace has no context in this file (written for another trace?)");
  }

  static int frames_cb(void* opaque, const char** frames, size_t* lengths, int max_frames) {
    Call* c = static_cast<Call*>(opaque);
    c->t_model = now_ns() | 1;  // never 0
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
                   " (not a " + kFormat + " file written by simulator/model_input.py?)");
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
      uint64_t v = 0;
      if (lt_parse_u64(s.c_str(), &v) != LT_NUMBER_OK) bad(lineno, "bad number '" + s + "'");
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
      if (!index_.emplace(s.id, uint32_t(stacks_.size())).second)
        bad(lineno, "stack id " + std::to_string(s.id) + " listed twice");
      by_hash.emplace(s.hash, 0);
      stacks_.push_back(std::move(s));
    }
    if (next() != "end") bad(lineno, "expected 'end'");
    distinct_contexts_ = by_hash.size();
    row_words_ = 2 + size_t(num_classes_);
    rows_.assign(stacks_.size() * row_words_, 0);
    uint64_t max_id = 0;
    for (size_t i = 0; i < stacks_.size(); ++i) {
      const Stack& s = stacks_[i];
      rows_[i * row_words_] = s.hash;
      rows_[i * row_words_ + 1] = uint64_t(s.first) | uint64_t(s.num_frames) << 32;
      max_id = std::max(max_id, s.id);
    }
    // Stack ids of a trace are usually dense (0..N-1): look them up by array index; sparse
    // ids keep the hash map.
    if (!stacks_.empty() && max_id < 8 * uint64_t(stacks_.size()) + 65536) {
      dense_.assign(size_t(max_id) + 1, kNoStack);
      for (size_t i = 0; i < stacks_.size(); ++i) dense_[size_t(stacks_[i].id)] = uint32_t(i);
    }
  }

  template <class F>
  void resolve(F& fn, const char* name) {
    *reinterpret_cast<void**>(&fn) = dlsym(handle_, name);
    if (!fn) throw SimError(plugin_ + ": " + name + " not found: not a model plugin (build it with "
                            "export.serve.model_plugin)");
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
    // The class boundaries too, when the model records them (exports since
    // lifetime_model_info_size; an older one has only its class count checked).
    size_t (*info_size)(void) = nullptr;
    *reinterpret_cast<void**>(&info_size) = dlsym(handle_, "lifetime_model_info_size");
    if (info_size && LIFETIME_MODEL_INFO_HAS(info_size(), boundaries_ns)) {
      if (!info->boundaries_ns)
        throw SimError(plugin_ + ": the model's classes are on the bytes clock, the trace's on the "
                       "wall clock (train the model on the dataset's label scheme)");
      if (std::vector<uint64_t>(info->boundaries_ns, info->boundaries_ns + info->num_boundaries) != bounds_ns_)
        throw SimError(plugin_ + ": the model's class boundaries are not the trace's"
                       " (train the model on the dataset's label scheme)");
    }
    predictor_ = api_.create();
    if (!predictor_)
      throw SimError(plugin_ + ": cannot create a predictor (out of memory, or this CPU lacks "
                     "the instructions the model was compiled for: target_cpu in "
                     "export_manifest.json)");
    cache_ = api_.cache_tl();
    api_.cache_clear(cache_);
    revalidate_every_ = lifetime_model::PredictionCache::kDefaultRevalidateEvery;
    api_.cache_set_revalidate_every(cache_, revalidate_every_);
  }

  std::string file_, plugin_, model_id_, context_version_;
  int max_frames_ = 0, num_classes_;
  std::vector<uint64_t> bounds_ns_;  // the trace's class boundaries
  std::vector<std::string> wrappers_, frames_;
  std::vector<Stack> stacks_;
  std::unordered_map<uint64_t, uint32_t> index_;
  uint64_t distinct_contexts_ = 0;
  void* handle_ = nullptr;
  Api api_{};
  lifetime_predictor* predictor_ = nullptr;
  lifetime_cache* cache_ = nullptr;
  uint32_t revalidate_every_ = 0;
  // Per stack (indexed like stacks_), one row of row_words_ words: the Hot fields (2
  // words), then the objects served per class: what a prediction touches, adjacent.
  std::vector<uint64_t> rows_;
  size_t row_words_ = 0;
  std::vector<uint32_t> dense_;   // stack id -> index into stacks_, when ids are dense
  uint64_t calls_ = 0, untimed_hits_ = 0;
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
