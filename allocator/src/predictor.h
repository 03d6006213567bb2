// The seam for lifetime prediction on the allocation path.  This slice has the constant
// predictor only (LIFETIME_ALLOC_PREDICTOR=constant:C); the model predictor (stack
// capture, the exported model, the §2.3 cache keyed by return address, stack height and
// size class) is the next slice and implements the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace lalloc {

// What the allocation path knows about a request when it asks for a class.
struct AllocSite {
  uint64_t size;
  uint32_t align;
  uintptr_t return_address;  // the caller of malloc / operator new
};

class Predictor {
 public:
  virtual ~Predictor() = default;
  // A lifetime class in [0, num_classes).  Called under the allocator's lock; must not
  // call malloc (it runs inside the allocator: malloc would go to the metadata arena).
  virtual int predict(const AllocSite& site) = 0;
  virtual std::string describe() const = 0;
};

// Parses LIFETIME_ALLOC_PREDICTOR ("constant:C", 0 <= C < num_classes); fatal on a bad one.
std::unique_ptr<Predictor> make_predictor(const std::string& spec, int num_classes);

}  // namespace lalloc
