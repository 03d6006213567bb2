#include "policy_heap.h"

#include "baseline.h"
#include "segregated.h"

namespace sim {

namespace {

// The heaps of a size-classes policy (segregated.h): one size-class heap per group, or
// LLAMA's heap and one size-class heap (for the classes from size_classes_from, and for
// the stacks divert_mixed sends there).
std::unique_ptr<HeapAllocator> make_segregated(const std::string& name, const ClassScheme& classes,
                                               const LlamaPolicy& policy, unsigned deadline_k,
                                               bool recycle_now) {
  const int n = classes.num_classes();
  std::vector<unsigned> groups;
  std::vector<std::unique_ptr<HeapAllocator>> heaps;
  auto first_id = [&] { return uint64_t(heaps.size()) << SegregatedHeap::kIdShift; };
  if (policy.size_classes) {
    groups = policy.size_class_groups(n);
    if (groups.back() >= SegregatedHeap::kMaxGroups)
      throw SimError("--policy " + policy.describe() + ": " + std::to_string(groups.back() + 1) + " heaps (at most 8)");
    while (heaps.size() <= groups.back())
      heaps.push_back(std::make_unique<TcmallocBaseline>(name + "/" + std::to_string(heaps.size()), first_id()));
  } else {
    if (policy.size_classes_from && policy.size_classes_from >= unsigned(n))
      throw SimError("--policy " + policy.describe() + ": the trace has classes 0.." + std::to_string(n - 1));
    LlamaPolicy lower = policy;
    lower.size_classes_from = 0;
    lower.divert_mixed = false;
    lower.segregate_above_bytes = 0;
    for (int c = 0; c < n; ++c)
      groups.push_back(policy.size_classes_from && unsigned(c) >= policy.size_classes_from ? 1 : 0);
    heaps.push_back(std::make_unique<Llama>(name + "/llama", classes, deadline_k, recycle_now, lower, first_id()));
    heaps.push_back(std::make_unique<TcmallocBaseline>(name + "/size-classes", first_id()));
  }
  auto heap = std::make_unique<SegregatedHeap>(name, groups, std::move(heaps));
  if (policy.divert_mixed) heap->divert_mixed(classes);
  // Small: the size-class heap beside LLAMA's, or the first of the size-class heaps.
  if (policy.segregate_above_bytes) heap->segregate_above(policy.segregate_above_bytes, policy.size_classes ? 0 : 1);
  return heap;
}

}  // namespace

std::unique_ptr<HeapAllocator> make_policy_heap(const std::string& name, const ClassScheme& classes,
                                                const LlamaPolicy& policy, unsigned deadline_k,
                                                bool recycle_now, bool snapshot_spans) {
  if (policy.size_classes || policy.size_classes_from || policy.divert_mixed || policy.segregate_above_bytes)
    return make_segregated(name, classes, policy, deadline_k, recycle_now);
  auto llama = std::make_unique<Llama>(name, classes, deadline_k, recycle_now, policy);
  llama->set_snapshot_spans(snapshot_spans);
  return llama;
}

}  // namespace sim
