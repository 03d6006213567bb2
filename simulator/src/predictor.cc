#include "predictor.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "json.h"
#include "model_predictor.h"
#include "tcmalloc_rule.h"
#include "files.h"

namespace sim {

namespace {

class OraclePredictor final : public Predictor {
 public:
  explicit OraclePredictor(const ClassScheme& c) : classes_(c) {}
  int predict(const ObjectRecord& r) override { return classes_.classify(r.alloc_ns, r.free_ns); }
  void describe(JsonWriter& j) const override { j.kv("kind", "oracle"); }

 private:
  ClassScheme classes_;
};

class ConstantPredictor final : public Predictor {
 public:
  explicit ConstantPredictor(int c) : c_(c) {}
  int predict(const ObjectRecord&) override { return c_; }
  void describe(JsonWriter& j) const override {
    j.kv("kind", "constant");
    j.kv("class", c_);
  }

 private:
  int c_;
};

class TablePredictor final : public Predictor {
 public:
  TablePredictor(std::string path, std::unordered_map<uint64_t, int> table, int def)
      : path_(std::move(path)), table_(std::move(table)), default_(def) {}
  int predict(const ObjectRecord& r) override {
    if (r.stack_id == last_stack_) return last_class_;
    auto it = table_.find(r.stack_id);
    int c = it == table_.end() ? default_ : it->second;
    if (it == table_.end()) ++misses_;
    last_stack_ = r.stack_id;
    last_class_ = c;
    return c;
  }
  void describe(JsonWriter& j) const override {
    j.kv("kind", "table");
    j.kv("file", path_);
    j.kv("entries", uint64_t(table_.size()));
    j.kv("default_class", default_);
  }

 private:
  std::string path_;
  std::unordered_map<uint64_t, int> table_;
  int default_;
  uint64_t misses_ = 0;
  uint64_t last_stack_ = UINT64_MAX;
  int last_class_ = 0;
};

// objects:FILE -- one class per record of the trace, in the trace's order (a feature
// oracle, simulator/features.py): "LTOBJCLS" magic, u64 count, then `count` u8 classes.
// The engine asks each predictor once per record, in record order (engine.cc's do_alloc),
// so the n-th call gets the n-th class; the policy still sees the record's own stack id.
class ObjectClassPredictor final : public Predictor {
 public:
  ObjectClassPredictor(std::string path, int num_classes) : path_(std::move(path)) {
    refuse_irregular(path_, "cannot open object class file");
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw SimError(path_ + ": cannot open object class file: " + std::strerror(errno));
    char magic[8];
    uint64_t n = 0;
    if (!in.read(magic, 8) || std::memcmp(magic, "LTOBJCLS", 8) != 0 ||
        !in.read(reinterpret_cast<char*>(&n), 8))
      throw SimError(path_ + ": not an object class file (magic LTOBJCLS, u64 count)");
    if (n > (uint64_t(1) << 40)) throw SimError(path_ + ": object count " + std::to_string(n) + " out of range");
    cls_.resize(n);
    if (n && !in.read(reinterpret_cast<char*>(cls_.data()), std::streamsize(n)))
      throw SimError(path_ + ": holds fewer than its " + std::to_string(n) + " classes");
    if (in.peek() != std::char_traits<char>::eof())
      throw SimError(path_ + ": bytes after its " + std::to_string(n) + " classes");
    for (uint64_t i = 0; i < n; ++i)
      if (cls_[i] >= num_classes)
        throw SimError(path_ + ": object " + std::to_string(i) + ": class " + std::to_string(int(cls_[i])) +
                       " out of range (expected 0.." + std::to_string(num_classes - 1) + ")");
  }
  int predict(const ObjectRecord&) override {
    if (next_ >= cls_.size())
      throw SimError(path_ + ": the trace has more records than its " + std::to_string(cls_.size()) + " classes");
    return cls_[next_++];
  }
  void describe(JsonWriter& j) const override {
    j.kv("kind", "objects");
    j.kv("file", path_);
    j.kv("objects", uint64_t(cls_.size()));
    j.kv("objects_predicted", uint64_t(next_));
  }

 private:
  std::string path_;
  std::vector<uint8_t> cls_;
  uint64_t next_ = 0;
};

int parse_class(const std::string& s, int num_classes, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || errno || v < 0 || v >= num_classes)
    throw SimError(what + ": bad class '" + s + "' (expected 0.." + std::to_string(num_classes - 1) + ")");
  return int(v);
}

}  // namespace

std::unordered_map<uint64_t, int> read_class_table(const std::string& path, int num_classes) {
  refuse_irregular(path, "cannot open class table");  // an ifstream would block on a fifo
  std::ifstream in(path);
  if (!in) throw SimError(path + ": cannot open class table: " + std::strerror(errno));
  std::unordered_map<uint64_t, int> t;
  std::string line;
  uint64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t i = line.find_first_not_of(" \t\r");
    if (i == std::string::npos || line[i] == '#') continue;
    const char* p = line.c_str() + i;
    char* end = nullptr;
    errno = 0;
    unsigned long long id = std::strtoull(p, &end, 0);
    if (end == p || errno || !std::isspace(static_cast<unsigned char>(*end)))
      throw SimError(path + ": line " + std::to_string(lineno) + ": expected 'STACK_ID CLASS'");
    char* end2 = nullptr;
    long c = std::strtol(end, &end2, 10);
    while (*end2 && std::isspace(static_cast<unsigned char>(*end2))) ++end2;
    if (end2 == end || *end2 || c < 0 || c >= num_classes)
      throw SimError(path + ": line " + std::to_string(lineno) + ": bad class (expected 0.." +
                     std::to_string(num_classes - 1) + ")");
    if (!t.emplace(uint64_t(id), int(c)).second)
      throw SimError(path + ": line " + std::to_string(lineno) + ": stack id " + std::to_string(id) + " listed twice");
  }
  return t;
}

std::unique_ptr<Predictor> make_predictor(const std::string& spec, const ClassScheme& classes,
                                          const PredictorOptions& opts) {
  std::string label, body = spec;
  size_t eq = spec.find('=');
  size_t colon = spec.find(':');
  if (eq != std::string::npos && (colon == std::string::npos || eq < colon)) {
    label = spec.substr(0, eq);
    body = spec.substr(eq + 1);
    for (char ch : label)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.')
        throw SimError("--predictor " + spec + ": a label has letters, digits, '_', '-', '.'");
    if (label.empty()) throw SimError("--predictor " + spec + ": empty label");
  }
  colon = body.find(':');
  std::string kind = body.substr(0, colon), arg = colon == std::string::npos ? "" : body.substr(colon + 1);
  std::unique_ptr<Predictor> p;
  if (kind == "oracle" && colon == std::string::npos) {
    p = std::make_unique<OraclePredictor>(classes);
  } else if (kind == "constant") {
    p = std::make_unique<ConstantPredictor>(parse_class(arg, classes.num_classes(), "--predictor " + spec));
  } else if (kind == "table" && !arg.empty()) {
    int def = opts.table_default < 0 ? classes.inf_class() : opts.table_default;
    if (def >= classes.num_classes())
      throw SimError("--table-default " + std::to_string(def) + ": the trace has " +
                     std::to_string(classes.num_classes()) + " classes");
    p = std::make_unique<TablePredictor>(arg, read_class_table(arg, classes.num_classes()), def);
  } else if (kind == "objects" && !arg.empty()) {
    p = std::make_unique<ObjectClassPredictor>(arg, classes.num_classes());
  } else if (kind == "model" && !arg.empty()) {
    p = make_model_predictor(arg, classes, opts);
  } else if (kind == "tcmalloc-rule" && (arg == "large" || arg == "all")) {
    // Objects the rule does not cover get the tables' fallback (--table-default).
    int def = opts.table_default < 0 ? classes.inf_class() : opts.table_default;
    if (def >= classes.num_classes())
      throw SimError("--table-default " + std::to_string(def) + ": the trace has " +
                     std::to_string(classes.num_classes()) + " classes");
    TcmallocRuleConfig cfg;
    cfg.large_only = arg == "large";
    p = std::make_unique<TcmallocRulePredictor>(classes, def, cfg);
  } else {
    throw SimError("--predictor " + spec + ": expected oracle, table:FILE, objects:FILE, constant:CLASS, model:CONTEXTS, "
                   "tcmalloc-rule:large|all (optionally LABEL=...)");
  }
  if (label.empty()) {
    label = kind;
    if (kind == "constant" || kind == "tcmalloc-rule") label += ":" + arg;
    if (kind == "table" || kind == "objects") {
      size_t slash = arg.find_last_of('/');
      label += ":" + (slash == std::string::npos ? arg : arg.substr(slash + 1));
    }
  }
  p->label = label;
  return p;
}

}  // namespace sim
