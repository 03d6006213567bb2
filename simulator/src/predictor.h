// Predictors: where each LLAMA instance gets an object's lifetime class.
//
//   oracle            the object's true class from its recorded lifetime (never freed = inf)
//   table:FILE        a stack id -> class table (exact-stack or allocation-site table: which
//                     stacks map to which class is the caller's business); stacks missing
//                     from it get the default class (--table-default, default: inf)
//   objects:FILE      one class per record, in trace order (binary: "LTOBJCLS", u64 count,
//                     u8 classes; simulator/trace.py write_object_classes): the feature
//                     oracles of simulator/features.py
//   constant:C        every object in class C
//   model:CONTEXTS    the exported model through its C API, behind the paper's
//                     prediction cache (§2.3); CONTEXTS names the model plugin and holds
//                     each stack's context frames (model_predictor.h)
//   tcmalloc-rule:large|all  TCMalloc's removed online lifetime rule (tcmalloc_rule.h):
//                     per-stack short/long counters, short iff short > long + 10 (0.5 s);
//                     large: objects over 1 MiB only, the rest get --table-default; all:
//                     every object
//
// A spec may carry a label for the report: LABEL=KIND[:ARG], e.g. exact=table:stacks.tbl.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace.h"

namespace sim {

class JsonWriter;

class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual int predict(const ObjectRecord& r) = 0;
  // A hint, no effect on the result: predict(r) comes soon (the engine looks a few events
  // ahead): what it will read may be fetched into the cache.
  virtual void prefetch(const ObjectRecord& r) const { (void)r; }
  virtual void describe(JsonWriter& j) const = 0;  // key/value pairs inside an object
  // Per stack, the classes it was given ("LABEL STACK_ID CLASS OBJECTS" lines), for the
  // predictors that keep them (the model predictor); returns false if it keeps none.
  virtual bool write_served(std::FILE*) const { return false; }
  std::string label;
};

struct PredictorOptions {
  int table_default = -1;  // -1: the inf class
  long model_revalidate_every = -1;  // -1: the model library's default (1000)
};

// Parses a --predictor spec; SimError on a bad one.
std::unique_ptr<Predictor> make_predictor(const std::string& spec, const ClassScheme& classes,
                                          const PredictorOptions& opts);

// Class-table file (text, written by simulator/trace.py): optional comment lines starting
// with '#'; then one "STACK_ID CLASS" pair per line (decimal or 0x-hex stack id).
std::unordered_map<uint64_t, int> read_class_table(const std::string& path, int num_classes);

}  // namespace sim
