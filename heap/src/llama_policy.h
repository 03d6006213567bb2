// LLAMA's policy switches (LlamaPolicy): the named departures from the paper's heap,
// their names' parser and their description.  The heap that runs them: llama.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sim {

// Named departures from the paper's policy (§3.2-3.5), each off by default: with none
// set, LLAMA is the paper's (every figure reproduces byte for byte).  Selected with
// lifetime_simulate --policy [LABEL=]NAME[,NAME...] (see simulator/README.md).
struct LlamaPolicy {
  // "occupancy[:F]": a closed span whose occupied lines fall to <= F of its lines is
  // recyclable at once (not only after its page's deadline expires, which never happens
  // to the inf and open-ended classes), for its objects' class and shorter ones; an active
  // page of a class without a deadline whose live blocks fall to <= F of its blocks lends
  // its free blocks to its own class too (marked residual).
  bool occupancy = false;
  double occupancy_threshold = 0.9;
  // "own-blocks": with occupancy, pages of finite classes lend their free blocks to their
  // own class too (at the same threshold), and the page's deadline restarts from then.
  bool own_blocks = false;
  // "span-fit": with occupancy, an object that fits nowhere in the thread's recycled span
  // tries up to kFitTries other spans listed by occupancy (the one that takes it becomes
  // the recycled span, the others go back to their list) before a fresh span: the paper's
  // allocator (Immix's overflow rule) takes a fresh span at once.
  bool span_fit = false;
  // "contain-mixed": a stack whose objects predicted inf have mostly died (at least
  // kMixedMinObjects placed, at least half of them freed) is contained: its further inf
  // predictions go to the longest finite-or-open class's pages (>= last bound, no
  // deadline), away from the pages of contexts that do live forever.
  bool contain_mixed = false;
  // "medium-spans": objects of 8-32 KiB that are not a whole number of blocks go into
  // 64 KiB spans (8 blocks) of 128 lines of 512 B, like small objects, instead of whole
  // 8 KiB blocks each.
  bool medium_spans = false;
  // "fine-lines": small objects' 16 KiB spans have 512 lines of 32 B instead of 128 of 128 B
  // (a survivor pins 32 B, not 128 B, of a span's reusable space).
  bool fine_lines = false;
  // "size-classes[:B1/B2/...|:each|:inf]": not LLAMA's heap at all but the baseline's
  // size-class allocator with one heap (its own huge pages) per group of predicted
  // classes: [0, B1), [B1, B2), ..., [Bn, inf]; `each`: one heap per class (segregated.h).
  // Default groups: size_class_groups below.  Combines with no other switch.
  bool size_classes = false;
  std::vector<unsigned> size_class_bounds;  // B1 < B2 < ...; empty with each_class
  bool each_class = false;
  bool inf_apart = false;  // ":inf": two heaps, the never-freed class and the rest
  // "size-classes-from:B": predicted classes >= B go to one size-class heap, shorter ones
  // to LLAMA's heap (with the other switches): lines for objects that die together,
  // slots reused one at a time for those that die at scattered times.  0: off.
  unsigned size_classes_from = 0;
  // "divert-mixed": a stack whose objects mostly die before their predicted class's
  // lower bound (a context that mixes lifetimes) sends its later objects to a size-class
  // heap beside LLAMA's (segregated.h, SegregatedHeap::divert_mixed).
  bool divert_mixed = false;
  // "segregate-above:MIB": while the live bytes of the heap are below MIB MiB, new objects go
  // to one size-class heap whatever their class (a quiet process pays no per-class open
  // pages): LLAMA's size-class heap beside it, or with size-classes the first group's.
  uint64_t segregate_above_bytes = 0;
  // Presets: "tolerant" = occupancy,own-blocks,span-fit,medium-spans,fine-lines,divert-mixed;
  // "segregated" = size-classes:inf,segregate-above:8.
  bool paper() const { return !occupancy && !own_blocks && !span_fit && !contain_mixed && !medium_spans && !fine_lines && !size_classes && !size_classes_from && !divert_mixed && !segregate_above_bytes; }
  // The heap of each of `num_classes` classes (size_classes only).
  std::vector<unsigned> size_class_groups(int num_classes) const;
  std::string describe() const;  // "paper" or the names, comma-separated
};
// Parses "NAME[,NAME...]" (paper | occupancy[:F] | contain-mixed | medium-spans);
// throws SimError naming `what` on a bad name.
LlamaPolicy parse_llama_policy(const std::string& names, const std::string& what);

}  // namespace sim
