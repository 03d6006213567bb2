// lifetime_consumer: what an allocator does with an exported model.
//   lifetime_consumer [STACKS.txt]
// STACKS.txt: one stack per line, frames separated by " | ", allocation site first.
// Without it, a few stacks of the bundled proxy workload (v2 names) are used.
// For each stack it prints the predicted class and its probability, then serves the
// same allocations through the thread-local prediction cache (§2.3) and reports the
// hit rate and the cost of a model run against a cache hit.
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "lifetime_model.h"

namespace {

using Stack = std::vector<std::string>;

const char* kDefaultStacks[] = {  // site | caller, as the symbolizer names them
    "proxy::net::FrameReader::Fill(unsigned long, std::__cxx11::basic_string<char, "
    "std::char_traits<char>, std::allocator<char> >*) | "
    "proxy::net::Listener::PollKeepAlive(unsigned long, proxy::net::Request*)",
    "proxy::server::RequestTracker::Track(proxy::net::Request const&, "
    "proxy::http::ParsedRequest const&) | proxy::route::HandleApi(proxy::net::Request&, long)",
    "proxy::session::SessionTable::Create(proxy::http::ParsedRequest const&) | "
    "proxy::route::HandleLogin(proxy::net::Request&, long)",
    "proxy::server::ConnectionRegistry::Admit(unsigned long) | "
    "proxy::server::Acceptor::TerminateTls(unsigned long)",
};

Stack Split(const std::string& line) {
  Stack out;
  size_t start = 0;
  for (;;) {
    size_t bar = line.find(" | ", start);
    out.push_back(line.substr(start, bar == std::string::npos ? bar : bar - start));
    if (bar == std::string::npos) return out;
    start = bar + 3;
  }
}

struct Frames {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
};

int CopyFrames(void* ctx, const char** frames, size_t* lengths, int max_frames) {
  const Frames* f = static_cast<const Frames*>(ctx);
  int n = static_cast<int>(f->ptrs.size()) < max_frames ? static_cast<int>(f->ptrs.size())
                                                        : max_frames;
  for (int i = 0; i < n; ++i) {
    frames[i] = f->ptrs[i];
    lengths[i] = f->lens[i];
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Stack> stacks;
  if (argc > 1) {
    std::ifstream in(argv[1]);
    if (!in) {
      std::cerr << "lifetime_consumer: cannot read " << argv[1] << "\n";
      return 2;
    }
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) stacks.push_back(Split(line));
  } else {
    for (const char* s : kDefaultStacks) stacks.push_back(Split(s));
  }
  const lifetime_model_info& info = lifetime_model::Info();
  std::cout << "model " << info.model_id << ": " << info.num_classes << " classes, vocabulary "
            << info.vocab_size << ", " << info.max_frames << " frames x "
            << info.tokens_per_frame << " tokens, graph " << info.graph << "\n";

  lifetime_model::Predictor predictor;  // allocates its buffers once, here
  if (!predictor.ok()) {
    std::cerr << "lifetime_consumer: cannot create a predictor\n";
    return 3;
  }
  std::vector<Frames> frames(stacks.size());
  for (size_t k = 0; k < stacks.size(); ++k) {
    for (const std::string& f : stacks[k]) {
      frames[k].ptrs.push_back(f.c_str());
      frames[k].lens.push_back(f.size());
    }
    int cls = predictor.PredictFrames(frames[k].ptrs.data(), frames[k].lens.data(),
                                      static_cast<int>(frames[k].ptrs.size()));
    if (cls < 0) return 4;
    std::cout << "  " << info.class_names[cls] << " (p=" << predictor.probabilities()[cls]
              << ")  " << stacks[k][0] << "\n";
  }

  // An allocator's hot path: every allocation asks the cache; only misses (and one
  // revalidation per 1000 hits) run the model.  Keys stand in for (return address,
  // stack height, size).
  lifetime_cache* cache = lifetime_cache_thread_local();
  lifetime_predictor* p = lifetime_predictor_create();
  const long allocations = 1000000;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  long checksum = 0;
  for (long i = 0; i < allocations; ++i) {
    size_t k = static_cast<size_t>(i) % stacks.size();
    checksum += lifetime_cache_predict(cache, p, 0x401000 + 64 * k, 8192, 32 << (i & 3),
                                       CopyFrames, &frames[k]);
  }
  double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  lifetime_cache_stats s;
  lifetime_cache_get_stats(cache, &s);
  lifetime_predictor_destroy(p);
  std::cout << "cache: " << allocations << " allocations, " << s.hits << " hits, " << s.misses
            << " misses, " << s.revalidations << " revalidations; " << ns / allocations
            << " ns per allocation on average (checksum " << checksum << ")\n";
  return s.hits + s.misses == static_cast<uint64_t>(allocations) ? 0 : 1;
}
