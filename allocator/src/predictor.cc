#include "predictor.h"

#include <cstdlib>

#include "fatal.h"

namespace lalloc {

namespace {

class ConstantPredictor final : public Predictor {
 public:
  explicit ConstantPredictor(int cls) : cls_(cls) {}
  int predict(const AllocSite&) override { return cls_; }
  std::string describe() const override { return "constant:" + std::to_string(cls_); }

 private:
  int cls_;
};

}  // namespace

std::unique_ptr<Predictor> make_predictor(const std::string& spec, int num_classes) {
  if (spec.compare(0, 9, "constant:") == 0) {
    const std::string v = spec.substr(9);
    char* end = nullptr;
    long c = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || v[0] == '-' || v[0] == '+' || c >= num_classes)
      fatal(("LIFETIME_ALLOC_PREDICTOR: constant:C takes a class index 0.." + std::to_string(num_classes - 1) +
             ", got '" + v + "'").c_str());
    return std::make_unique<ConstantPredictor>(int(c));
  }
  fatal("LIFETIME_ALLOC_PREDICTOR: unknown predictor '", spec.c_str(),
        "' (this build has constant:C; the model predictor is the next slice)");
}

}  // namespace lalloc
