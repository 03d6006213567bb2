#include "json.h"

#include <cmath>
#include <cstdio>

namespace sim {

void JsonWriter::value_double(double v) {
  sep();
  if (!std::isfinite(v)) { out_ += "null"; return; }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  out_ += buf;
}

void JsonWriter::str_raw(const std::string& s) {
  out_ += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out_ += '\\'; out_ += char(c); }
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out_ += buf;
    } else out_ += char(c);
  }
  out_ += '"';
}

}  // namespace sim
