// The heap a LLAMA policy names (llama.h, LlamaPolicy): LLAMA's own heap, or heaps side
// by side (segregated.h) for the size-class switches.  One factory for the engine and the
// real allocator (allocator/), so both run the same heap for the same names.
#pragma once

#include <memory>
#include <string>

#include "allocator.h"
#include "llama.h"
#include "classes.h"

namespace sim {

// snapshot_spans: LLAMA's own heap lists each page's spans in snapshots (--snapshot-spans).
std::unique_ptr<HeapAllocator> make_policy_heap(const std::string& name, const ClassScheme& classes,
                                                const LlamaPolicy& policy, unsigned deadline_k,
                                                bool recycle_now, bool snapshot_spans = false);

}  // namespace sim
