// The JSON report of a run.
#include "engine.h"
#include "json.h"

namespace sim {

std::string report_json(const Results& r, const EngineOptions& opts) {
  const ClassScheme& cs = r.header.classes;
  const double hpb = double(kHugePageBytes);
  JsonWriter j;
  j.begin_object();
  j.kv("format", "lifetime-simulate");
  j.kv("version", 1);

  j.key("trace");
  j.begin_object();
  j.kv("file", r.trace_path);
  j.kv("trace_version", r.header.version);
  j.kv("records", r.header.num_records);
  j.kv("start_ns", r.start_ns);
  j.kv("end_ns", r.header.end_ns);
  j.key("classes");
  j.begin_array();
  for (int c = 0; c < cs.num_classes(); ++c) j.value(cs.name(c));
  j.end_array();
  j.key("class_bounds_ns");
  j.begin_array();
  for (uint64_t b : cs.bounds_ns) j.value(b);
  j.end_array();
  j.end_object();

  j.key("settings");
  j.begin_object();
  j.kv("huge_page_bytes", kHugePageBytes);
  j.kv("llama_block_bytes", uint64_t(8192));
  j.kv("llama_span_bytes", uint64_t(16384));
  j.kv("llama_line_bytes", uint64_t(128));
  j.kv("deadline_k", opts.deadline_k);
  j.kv("recycle_spans_immediately", opts.recycle_spans_immediately);
  bool any_policy = false;  // the key only when some LLAMA runs a policy other than the paper's
  for (const auto& a : r.allocators) any_policy |= !a.policy.empty();
  if (any_policy) {
    j.key("llama_policy");
    j.begin_object();
    for (const auto& a : r.allocators)
      if (a.kind == "llama") j.kv(a.name, a.policy.empty() ? std::string("paper") : a.policy);
    j.end_object();
  }
  j.kv("baseline_page_bytes", uint64_t(8192));
  j.kv("series_interval_ns", r.interval_ns);
  j.kv("steady_state_from_ns", r.steady_from_ns);
  j.kv("steady_state", "time-weighted mean over the second half of the trace [start + (end-start)/2, end]");
  j.kv("check_invariants", opts.check_invariants);
  j.end_object();

  j.key("events");
  j.begin_object();
  j.kv("allocs", r.allocs);
  j.kv("frees", r.frees);
  j.kv("never_freed", r.never_freed);
  j.end_object();

  j.key("live");
  j.begin_object();
  j.kv("peak_bytes", r.peak_live);
  j.kv("peak_t_ns", r.peak_live_t);
  j.kv_double("steady_state_bytes", r.steady_live);
  j.kv("final_bytes", r.final_live);
  j.end_object();

  const AllocatorResult* base = nullptr;
  for (const auto& a : r.allocators) if (a.kind != "llama") base = &a;
  j.key("allocators");
  j.begin_array();
  for (const auto& a : r.allocators) {
    j.begin_object();
    j.kv("name", a.name);
    j.kv("kind", a.kind);
    j.key("predictor");
    if (a.predictor) {
      j.begin_object();
      j.kv("label", a.predictor->label);
      a.predictor->describe(j);
      uint64_t n = a.correct + a.under + a.over;
      j.kv("objects", n);
      j.kv("correct", a.correct);
      j.kv("under_predicted", a.under);
      j.kv("over_predicted", a.over);
      j.kv_double("accuracy", n ? double(a.correct) / double(n) : 0.0);
      j.kv_double("accuracy_by_bytes", a.total_bytes ? double(a.correct_bytes) / double(a.total_bytes) : 0.0);
      j.key("predicted_per_class");
      j.begin_array();
      for (uint64_t c : a.predicted_objects) j.value(c);
      j.end_array();
      j.end_object();
    } else {
      j.null();
    }
    j.kv("peak_huge_pages", a.peak_hp);
    j.kv("peak_t_ns", a.peak_hp_t);
    j.kv("peak_bytes", a.peak_hp * kHugePageBytes);
    j.kv_double("steady_state_huge_pages", a.steady_hp);
    j.kv_double("steady_state_bytes", a.steady_hp * hpb);
    j.kv("final_huge_pages", a.final_hp);
    j.kv("final_bytes", a.final_hp * kHugePageBytes);
    j.kv_double("steady_state_fragmentation_bytes", a.steady_hp * hpb - r.steady_live);
    j.key("fragmentation_reduction_vs_baseline");
    if (base && &a != base && base->steady_hp * hpb - r.steady_live > 0)
      j.value_double((base->steady_hp - a.steady_hp) * hpb / (base->steady_hp * hpb - r.steady_live));
    else
      j.null();
    // Resident memory: huge pages less the free pages given back inside them (subrelease).
    const double res = a.steady_hp * hpb - a.steady_subreleased;
    j.kv_double("steady_state_resident_bytes", res);
    j.kv("final_resident_bytes", a.final_hp * kHugePageBytes - a.final_subreleased);
    j.key("resident_fragmentation_reduction_vs_baseline");
    const double base_res = base ? base->steady_hp * hpb - base->steady_subreleased : 0;
    if (base && &a != base && base_res - r.steady_live > 0)
      j.value_double((base_res - res) / (base_res - r.steady_live));
    else
      j.null();
    j.key("counters");
    j.begin_object();
    for (const auto& [k, v] : a.counters) j.kv(k, v);
    j.end_object();
    j.end_object();
  }
  j.end_array();

  j.key("series");
  j.begin_object();
  j.key("t_ns");
  j.begin_array();
  for (uint64_t t : r.series_t) j.value(t);
  j.end_array();
  j.key("live_bytes");
  j.begin_array();
  for (uint64_t v : r.series_live) j.value(v);
  j.end_array();
  j.key("huge_page_bytes");
  j.begin_object();
  for (const auto& a : r.allocators) {
    j.key(a.name);
    j.begin_array();
    for (uint64_t v : a.series_hp) j.value(v * kHugePageBytes);
    j.end_array();
  }
  j.end_object();
  j.end_object();

  // Per time, per allocator, a JSON text the engine made (page snapshots, attributions).
  auto per_time = [&](const char* key, const auto& list, const char* inner) {
    j.key(key);
    j.begin_array();
    for (const auto& s : list) {
      j.begin_object();
      j.kv("t_ns", s.t);
      j.key(inner);
      j.begin_object();
      for (size_t i = 0; i < r.allocators.size(); ++i) {
        j.key(r.allocators[i].name);
        j.raw(s.pages_json[i]);
      }
      j.end_object();
      j.end_object();
    }
    j.end_array();
  };
  per_time("snapshots", r.snapshots, "huge_pages");
  // Only when asked for (the report is otherwise as it was): fragmentation attribution
  // and the counterfactual heaps' groups (attribution.h).
  if (!opts.attribute_at_ns.empty()) per_time("attributions", r.attributions, "allocators");
  if (!opts.isolate.empty()) {
    j.key("isolate");
    j.begin_object();
    for (const auto& [label, ids] : opts.isolate) {
      j.key(label);
      j.begin_array();
      for (uint64_t id : ids) j.value(id);
      j.end_array();
    }
    j.end_object();
  }
  j.end_object();
  j.newline();
  return j.str();
}

}  // namespace sim
