// lifetime_simulate: the command line of the trace-driven heap simulator.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "baseline.h"  // heap/src: sim::SubreleaseRule
#include "engine.h"
#include "llama.h"
#include "files.h"
#include "parse_number.h"  // inprocess/src: the project's one integer parser

namespace {

const char kUsage[] =
    "usage: lifetime_simulate TRACE [options]\n"
    "Replays an object trace (.lttrace) through a TCMalloc-like baseline and one LLAMA\n"
    "instance per predictor, side by side, and writes a JSON report.\n"
    "  --predictor SPEC        [LABEL=]oracle | table:FILE | objects:FILE | constant:CLASS | model:CONTEXTS\n"
    "                          | tcmalloc-rule:large | tcmalloc-rule:all (repeatable)\n"
    "  --table-default CLASS   class of stacks missing from a table, and of objects the\n"
    "                          TCMalloc rule does not cover (default: inf)\n"
    "  --model-revalidate-every N  model cache: rerun the model every N hits of an entry\n"
    "                          (0: never; default: the model library's, 1000)\n"
    "  --model-served OUT      per model (or TCMalloc rule) predictor and stack, the classes\n"
    "                          it was given\n"
    "                          (\"LABEL STACK_ID CLASS OBJECTS\" lines)\n"
    "  --no-baseline           do not run the baseline allocator\n"
    "  --deadline-k K          LLAMA deadline = now + K x class bound (default 2)\n"
    "  --recycle-spans-immediately  ablation: reuse a closed span's free lines at once\n"
    "                          (the paper waits for its page's deadline to expire)\n"
    "  --policy [LABEL=]NAME[,NAME...]  LLAMA's policy for every instance, or for the one\n"
    "                          labelled LABEL (repeatable; default: paper, the paper's):\n"
    "                          occupancy[:F]  closed spans at most F live (default 0.9)\n"
    "                            are recycled at once, own class too; pages of the inf and\n"
    "                            open-ended classes lend free blocks to their own class\n"
    "                          own-blocks     (with occupancy) so do pages of every class\n"
    "                          span-fit       (with occupancy) an object that fits nowhere\n"
    "                            in the recycled span tries 8 listed spans before a fresh one\n"
    "                          contain-mixed  stacks whose inf objects mostly died go to\n"
    "                            the longest other class\n"
    "                          medium-spans   8-32 KiB objects in 64 KiB spans, 512 B lines\n"
    "                          fine-lines     small objects' spans have 32 B lines\n"
    "  --subrelease MS:LONGEST:SHORTEST  the size-class heaps' subrelease rule: windows of\n"
    "                          MS ms (0: off), a horizon of SHORTEST..LONGEST windows\n"
    "                          (default 100:50:2; heap/src/baseline.h)\n"
    "  --series-interval-ms N  time series sampling interval (default: ~1000 samples)\n"
    "  --series-interval-ns N  the same in ns\n"
    "  --snapshot-at-ns T      dump every live huge page after all events <= T (repeatable)\n"
    "  --snapshot-spans        LLAMA snapshots also list each page's spans (class, used\n"
    "                          lines, open/listed/closed)\n"
    "  --attribute-at-ns T     per allocator, live bytes per (huge page, stack, class)\n"
    "                          after all events <= T (repeatable; lifetime fragmentation)\n"
    "  --isolate LABEL=ID[,ID...]  one more instance of every allocator, the objects of\n"
    "                          these stack ids in a heap of their own (repeatable)\n"
    "  --check-invariants      check heap invariants after every event (slow)\n"
    "  --check-every N         events between whole-heap checks (default 1024)\n"
    "  --json OUT              write the report to OUT (default: stdout)\n"
    "  --timing                print events/s to stderr\n"
    "  --check                 only validate the trace (header and every record) and exit\n"
    "exit status: 0 ok, 2 bad input or usage, 3 invariant violated, 4 out of memory\n";

uint64_t parse_u64(const std::string& opt, const char* s) {
  uint64_t v = 0;
  if (lt_parse_u64(s, &v) != LT_NUMBER_OK)
    throw sim::SimError(opt + ": expected a non-negative integer, got '" + s + "'");
  return v;
}

// --isolate LABEL=ID[,ID...]: a group of stack ids (decimal or 0x-hex) under a label.
std::pair<std::string, std::vector<uint64_t>> parse_isolate(const std::string& v) {
  size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
    throw sim::SimError("--isolate " + v + ": expected LABEL=ID[,ID...]");
  std::vector<uint64_t> ids;
  size_t pos = eq + 1;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos) comma = v.size();
    std::string id = v.substr(pos, comma - pos);
    char* endp = nullptr;
    errno = 0;
    unsigned long long x = std::strtoull(id.c_str(), &endp, 0);
    if (id.empty() || id[0] == '-' || errno || *endp) throw sim::SimError("--isolate " + v + ": bad stack id '" + id + "'");
    ids.push_back(x);
    pos = comma + 1;
  }
  return {v.substr(0, eq), ids};
}

// --subrelease MS:LONGEST:SHORTEST (TcmallocBaseline::set_subrelease's checks apply).
sim::SubreleaseRule parse_subrelease(const std::string& opt, const std::string& v) {
  const size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
  if (b == std::string::npos) throw sim::SimError(opt + " " + v + ": expected MS:LONGEST:SHORTEST");
  sim::SubreleaseRule r;
  r.interval_ns = parse_u64(opt, v.substr(0, a).c_str()) * 1000000;
  const uint64_t longest = parse_u64(opt, v.substr(a + 1, b - a - 1).c_str());
  const uint64_t shortest = parse_u64(opt, v.substr(b + 1).c_str());
  constexpr unsigned kMost = sim::SubreleaseRule::kMaxWindows;
  if (longest < 1 || longest > kMost || shortest < 1 || shortest > longest)
    throw sim::SimError(opt + " " + v + ": need 1 <= SHORTEST <= LONGEST <= " + std::to_string(kMost));
  r.windows = unsigned(longest);
  r.min_windows = unsigned(shortest);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  sim::EngineOptions opts;
  std::string trace, json_out, served_out;
  bool timing = false, check_only = false;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto arg = [&]() -> const char* {
        if (i + 1 >= argc) throw sim::SimError(a + ": missing value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") { std::fputs(kUsage, stdout); return 0; }
      else if (a == "--predictor") opts.predictors.push_back(arg());
      else if (a == "--table-default") opts.predictor_options.table_default = int(parse_u64(a, arg()));
      else if (a == "--model-revalidate-every") {
        uint64_t v = parse_u64(a, arg());
        if (v > UINT32_MAX) throw sim::SimError(a + ": out of range");
        opts.predictor_options.model_revalidate_every = long(v);
      } else if (a == "--model-served") served_out = arg();
      else if (a == "--no-baseline") opts.baseline = false;
      else if (a == "--recycle-spans-immediately") opts.recycle_spans_immediately = true;
      else if (a == "--policy") {
        std::string v = arg();
        size_t eq = v.find('=');
        std::string names = eq == std::string::npos ? v : v.substr(eq + 1);
        sim::parse_llama_policy(names, "--policy " + v);  // checked here, before any work
        if (eq == std::string::npos) opts.policy = names;
        else if (eq == 0) throw sim::SimError("--policy " + v + ": empty label");
        else opts.policy_for.push_back({v.substr(0, eq), names});
      }
      else if (a == "--deadline-k") {
        opts.deadline_k = unsigned(parse_u64(a, arg()));
        if (opts.deadline_k == 0) throw sim::SimError("--deadline-k must be >= 1");
      } else if (a == "--series-interval-ms") {
        uint64_t v = parse_u64(a, arg());
        if (v == 0 || v > UINT64_MAX / 1000000) throw sim::SimError(a + ": out of range");
        opts.series_interval_ns = v * 1000000;
      } else if (a == "--series-interval-ns") {
        opts.series_interval_ns = parse_u64(a, arg());
        if (opts.series_interval_ns == 0) throw sim::SimError(a + ": must be positive");
      } else if (a == "--snapshot-at-ns") opts.snapshot_at_ns.push_back(parse_u64(a, arg()));
      else if (a == "--snapshot-spans") opts.snapshot_spans = true;
      else if (a == "--attribute-at-ns") opts.attribute_at_ns.push_back(parse_u64(a, arg()));
      else if (a == "--isolate") opts.isolate.push_back(parse_isolate(arg()));
      else if (a == "--subrelease") sim::subrelease_rule = parse_subrelease(a, arg());
      else if (a == "--check-invariants") opts.check_invariants = true;
      else if (a == "--check-every") {
        opts.full_check_every = parse_u64(a, arg());
        if (opts.full_check_every == 0) throw sim::SimError("--check-every must be >= 1");
      } else if (a == "--json") json_out = arg();
      else if (a == "--timing") timing = true;
      else if (a == "--check") check_only = true;
      else if (!a.empty() && a[0] == '-') throw sim::SimError("unknown option " + a + " (see --help)");
      else if (trace.empty()) trace = a;
      else throw sim::SimError("more than one trace given: " + trace + ", " + a);
    }
    if (trace.empty()) throw sim::SimError("no trace given (see --help)");
    if (check_only) {  // the reader's checks alone (fuzzing, quick validation)
      sim::TraceReader reader(trace);
      while (reader.next()) {}
      std::printf("%s: %llu records, valid\n", trace.c_str(), (unsigned long long)reader.index());
      return 0;
    }

    sim::Engine engine(opts);
    sim::Results r = engine.run(trace);
    std::string out = sim::report_json(r, opts);
    if (json_out.empty()) {
      std::fwrite(out.data(), 1, out.size(), stdout);
    } else {
      FILE* f = sim::open_output(json_out);
      bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
      ok = (std::fclose(f) == 0) && ok;
      if (!ok) throw sim::SimError(json_out + ": write failed");
    }
    if (!served_out.empty()) {
      FILE* f = sim::open_output(served_out);
      std::fputs("# LABEL STACK_ID CLASS OBJECTS: classes each model predictor gave each stack\n", f);
      for (const auto& p : r.predictors) p->write_served(f);
      if (std::fclose(f) != 0) throw sim::SimError(served_out + ": write failed");
    }
    if (timing) {
      uint64_t events = r.allocs + r.frees;
      std::fprintf(stderr, "lifetime_simulate: %llu events, %zu allocators, %.3f s, %.0f events/s\n",
                   (unsigned long long)events, r.allocators.size(), r.wall_s, r.wall_s > 0 ? events / r.wall_s : 0.0);
    }
    return 0;
  } catch (const sim::SimError& e) {
    std::fprintf(stderr, "lifetime_simulate: error: %s\n", e.what());
    return 2;
  } catch (const sim::InvariantError& e) {
    std::fprintf(stderr, "lifetime_simulate: invariant violated: %s\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    // Not the input's fault and not a bug: the machine (or its limit) is too small.
    std::fprintf(stderr, "lifetime_simulate: error: out of memory (the trace's live objects need more than this process may allocate)\n");
    return 4;
  } catch (const std::length_error&) {
    std::fprintf(stderr, "lifetime_simulate: error: out of memory (a table outgrew its maximum size)\n");
    return 4;
  }
}
