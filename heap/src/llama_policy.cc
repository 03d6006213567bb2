// LlamaPolicy: its names' parser, its description, its size-class groups.
#include "llama_policy.h"

#include <cstdio>
#include <cstdlib>

#include "common.h"

namespace sim {

std::string LlamaPolicy::describe() const {
  std::string s;
  auto add = [&](const std::string& n) { s += (s.empty() ? "" : ",") + n; };
  if (occupancy) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "occupancy:%g", occupancy_threshold);
    add(buf);
  }
  if (own_blocks) add("own-blocks");
  if (span_fit) add("span-fit");
  if (fine_lines) add("fine-lines");
  if (contain_mixed) add("contain-mixed");
  if (medium_spans) add("medium-spans");
  if (divert_mixed) add("divert-mixed");
  if (segregate_above_bytes) add("segregate-above:" + std::to_string(segregate_above_bytes >> 20));
  if (size_classes_from) add("size-classes-from:" + std::to_string(size_classes_from));
  if (size_classes) {
    std::string n = "size-classes";
    if (each_class) n += ":each";
    if (inf_apart) n += ":inf";
    for (size_t k = 0; k < size_class_bounds.size(); ++k)
      n += (k ? "/" : ":") + std::to_string(size_class_bounds[k]);
    add(n);
  }
  return s.empty() ? "paper" : s;
}

std::vector<unsigned> LlamaPolicy::size_class_groups(int num_classes) const {
  std::vector<unsigned> g(size_t(num_classes), 0);
  for (int c = 0; c < num_classes; ++c) {
    if (each_class) g[size_t(c)] = unsigned(c);
    else if (inf_apart) g[size_t(c)] = c == num_classes - 1 ? 1 : 0;
    else for (unsigned b : size_class_bounds) if (unsigned(c) >= b) ++g[size_t(c)];
  }
  return g;
}

LlamaPolicy parse_llama_policy(const std::string& names, const std::string& what) {
  LlamaPolicy p;
  size_t i = 0;
  for (;;) {
    size_t j = names.find(',', i);
    std::string n = names.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (n == "paper") {
    } else if (n == "occupancy") {
      p.occupancy = true;
    } else if (n.compare(0, 10, "occupancy:") == 0) {
      const char* v = n.c_str() + 10;
      char* end = nullptr;
      double f = std::strtod(v, &end);
      if (!*v || *end || !(f > 0.0 && f <= 1.0))
        throw SimError(what + ": occupancy threshold must be a number in (0, 1], got '" + std::string(v) + "'");
      p.occupancy = true;
      p.occupancy_threshold = f;
    } else if (n == "fine-lines") {
      p.fine_lines = true;
    } else if (n == "span-fit") {
      p.span_fit = true;
    } else if (n == "own-blocks") {
      p.own_blocks = true;
    } else if (n == "contain-mixed") {
      p.contain_mixed = true;
    } else if (n == "medium-spans") {
      p.medium_spans = true;
    } else if (n == "segregated") {  // the preset that held up on every workload (issue 21)
      p.size_classes = p.inf_apart = true;
      p.segregate_above_bytes = uint64_t(8) << 20;
    } else if (n == "tolerant") {  // the preset for contexts that mix lifetimes (issue 21)
      p.occupancy = p.own_blocks = p.span_fit = p.medium_spans = p.fine_lines = p.divert_mixed = true;
    } else if (n.compare(0, 16, "segregate-above:") == 0) {
      const std::string v = n.substr(16);
      char* end = nullptr;
      unsigned long x = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end || v[0] == '-' || x == 0 || x > (1ul << 20))
        throw SimError(what + ": segregate-above takes MiB, 1..1048576, got '" + v + "'");
      p.segregate_above_bytes = uint64_t(x) << 20;
    } else if (n == "divert-mixed") {
      p.divert_mixed = true;
    } else if (n.compare(0, 18, "size-classes-from:") == 0) {
      const std::string v = n.substr(18);
      char* end = nullptr;
      unsigned long x = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end || v[0] == '-' || x == 0 || x > 63)
        throw SimError(what + ": size-classes-from takes a class index 1..63, got '" + v + "'");
      p.size_classes_from = unsigned(x);
    } else if (n == "size-classes" || n.compare(0, 13, "size-classes:") == 0) {
      p.size_classes = true;
      std::string v = n.size() > 12 ? n.substr(13) : "each";
      if (v == "each") {
        p.each_class = true;
      } else if (v == "inf") {
        p.inf_apart = true;
      } else {
        size_t a = 0;
        for (;;) {
          size_t b = v.find('/', a);
          std::string t = v.substr(a, b == std::string::npos ? std::string::npos : b - a);
          char* end = nullptr;
          unsigned long x = std::strtoul(t.c_str(), &end, 10);
          if (t.empty() || *end || t[0] == '-' || x == 0 || x > 63 ||
              (!p.size_class_bounds.empty() && x <= p.size_class_bounds.back()))
            throw SimError(what + ": size-classes takes 'each' or increasing class indices 1..63 separated by '/', got '" + v + "'");
          p.size_class_bounds.push_back(unsigned(x));
          if (b == std::string::npos) break;
          a = b + 1;
        }
        if (p.size_class_bounds.size() > 7) throw SimError(what + ": size-classes: at most 8 heaps");
      }
    } else {
      throw SimError(what + ": unknown policy '" + n +
                     "' (paper, occupancy[:F], own-blocks, span-fit, contain-mixed, medium-spans, fine-lines, size-classes[:B1/B2...|:each|:inf], size-classes-from:B, divert-mixed, segregate-above:MIB; presets: segregated = size-classes:inf,segregate-above:8, tolerant = occupancy,own-blocks,span-fit,medium-spans,fine-lines,divert-mixed)");
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  if ((p.own_blocks || p.span_fit) && !p.occupancy)
    throw SimError(what + ": own-blocks and span-fit need occupancy");
  if (p.size_classes && (p.occupancy || p.fine_lines || p.contain_mixed || p.medium_spans || p.size_classes_from || p.divert_mixed))
    throw SimError(what + ": size-classes replaces LLAMA's heap and combines with no other switch");
  return p;
}

}  // namespace sim
