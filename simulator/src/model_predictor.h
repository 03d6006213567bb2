// The model predictor: an exported lifetime model (`lifetime export`), loaded at run time
// from its shared-library build (export/plugin, made by
// export.serve.model_plugin), called through the library's C API behind its §2.3
// prediction cache (lifetime_cache_predict).  The engine does not depend on any model
// at build time: the plugin is dlopen'ed when a `model:CONTEXTS` predictor is given.
//
// CONTEXTS is the "model contexts" side file written by simulator/model_input.py: the plugin
// path, the model id and context definition it was written for, and, per stack id of the
// trace, the context's frame strings exactly as the model was trained on them (the
// stack symbolized offline with the model's own context definition).  Format
// (text, one item a line, frames verbatim; '\n' and '\r' in a frame are written as ' ',
// which the tokenizer reads the same):
//
//   lifetime-model-contexts-v1
//   plugin PATH
//   model_id HEX
//   context_version lifetime-context-v2
//   max_frames F
//   wrappers N            followed by N lines, one qualified name each, sorted
//   stacks M              followed by M blocks:
//   stack STACK_ID K      followed by K frame lines, top of stack first
//   end
//
// The plugin's lifetime_model_get_info() must agree with the header (model id, context
// version, max_frames, wrappers) and have as many classes as the trace; otherwise the
// predictor is refused with one line.
//
// Cache key (what the trace records, §2.3 adapted): the allocator's key is (return
// address, stack height, size); a trace has no return address or stack pointer, so the
// engine keys on what each record carries: the stack id, mapped through the side file to
// a 64-bit FNV-1a hash of the context's frames (standing in for the return address), the
// number of context frames (standing in for the stack height), and the record's size
// class (the next power of two, at least 16 -- what the online sampler keys on,
// profiler/src/sampler.c).  So stacks with the same context share entries (the model
// input is the same), and the direct-mapped cache's collisions and evictions happen as
// they would in the allocator.
#pragma once

#include <memory>
#include <string>

#include "predictor.h"

namespace sim {

std::unique_ptr<Predictor> make_model_predictor(const std::string& contexts_file,
                                                const ClassScheme& classes,
                                                const PredictorOptions& opts);

// The size class the cache is keyed on (profiler/src/account.c, lt_record_alloc).
inline uint64_t model_size_class(uint64_t size) {
  return size <= 16 ? 16 : uint64_t(1) << (64 - __builtin_clzll(size - 1));
}

}  // namespace sim
