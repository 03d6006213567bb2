// The driver: replays a trace in time order through every allocator side by side.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allocator.h"
#include "predictor.h"
#include "trace.h"

namespace sim {

struct EngineOptions {
  bool baseline = true;
  std::vector<std::string> predictors;   // one LLAMA instance each
  PredictorOptions predictor_options;
  unsigned deadline_k = 2;
  // LLAMA: when partially free closed spans are reused.  false (the paper, §3.5): only
  // after their huge page's deadline expires, for shorter classes.  true (an ablation):
  // as soon as a free leaves a free line, for the page's class and shorter ones.
  bool recycle_spans_immediately = false;
  // LLAMA's policy (llama.h, LlamaPolicy): `policy` for every instance, `policy_for`
  // (instance label -> names) for one; empty = the paper's.
  std::string policy;
  std::vector<std::pair<std::string, std::string>> policy_for;
  uint64_t series_interval_ns = 0;       // 0: automatic, about 1000 samples
  std::vector<uint64_t> snapshot_at_ns;  // huge page dumps after all events <= t
  bool snapshot_spans = false;           // LLAMA snapshots also list each page's spans
  // Fragmentation attribution (attribution.h): per allocator, the live objects' bytes per
  // (huge page, stack, class) after all events <= t, for each t.
  std::vector<uint64_t> attribute_at_ns;
  // Counterfactuals (attribution.h, IsolatedHeap): per (label, stack ids), one more
  // instance of every allocator with those stacks' objects in a heap of their own.
  std::vector<std::pair<std::string, std::vector<uint64_t>>> isolate;
  bool check_invariants = false;
  uint64_t full_check_every = 1024;      // events between whole-heap checks
};

// Per-allocator results.
struct AllocatorResult {
  std::string name, kind;
  std::string policy;              // LLAMA: its policy's names when not the paper's, else empty
  Predictor* predictor = nullptr;  // LLAMA only
  uint64_t peak_hp = 0, peak_hp_t = 0, final_hp = 0;
  double steady_hp = 0;
  // Of the huge pages' bytes, those given back below huge-page granularity (subrelease):
  // resident = huge page bytes - these; at the steady state, and at the end.
  double steady_subreleased = 0;
  uint64_t final_subreleased = 0;
  Counters counters;
  std::vector<uint64_t> series_hp;
  // Prediction quality against the oracle (LLAMA only).
  std::vector<uint64_t> predicted_objects;  // per class
  uint64_t correct = 0, under = 0, over = 0, correct_bytes = 0, total_bytes = 0;
};

struct Snapshot {
  uint64_t t;
  std::vector<std::string> pages_json;  // per allocator
};

struct Results {
  std::string trace_path;
  TraceHeader header;
  uint64_t start_ns = 0, steady_from_ns = 0, allocs = 0, frees = 0, never_freed = 0;
  uint64_t peak_live = 0, peak_live_t = 0, final_live = 0;
  double steady_live = 0;
  uint64_t interval_ns = 0;
  std::vector<uint64_t> series_t, series_live;
  std::vector<AllocatorResult> allocators;
  std::vector<Snapshot> snapshots;
  std::vector<Snapshot> attributions;  // --attribute-at-ns: write_attribution per allocator
  std::vector<std::pair<std::string, std::string>> settings;  // for the report
  double wall_s = 0;
  std::vector<std::unique_ptr<Predictor>> predictors;  // owns AllocatorResult::predictor
};

class Engine {
 public:
  explicit Engine(EngineOptions opts) : opts_(std::move(opts)) {}
  // Runs the whole trace; SimError on bad input, InvariantError when a check fails.
  Results run(const std::string& trace_path);

 private:
  EngineOptions opts_;
};

// The JSON report (deterministic: no timings, no host details).
std::string report_json(const Results& r, const EngineOptions& opts);

}  // namespace sim
