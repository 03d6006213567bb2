#include "classes.h"

#include <sstream>

namespace sim {

namespace {
std::string fmt_ns(uint64_t ns) {
  std::ostringstream o;
  if (ns % 1000000000ull == 0) o << ns / 1000000000ull << "s";
  else if (ns % 1000000ull == 0) o << ns / 1000000ull << "ms";
  else if (ns % 1000ull == 0) o << ns / 1000ull << "us";
  else o << ns << "ns";
  return o.str();
}
}  // namespace

std::string ClassScheme::name(int c) const {
  if (c < int(bounds_ns.size())) return "<" + fmt_ns(bounds_ns[c]);
  if (c == int(bounds_ns.size())) return ">=" + fmt_ns(bounds_ns.back());
  return "inf";
}

}  // namespace sim
