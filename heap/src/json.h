// A minimal streaming JSON writer with deterministic formatting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sim {

class JsonWriter {
 public:
  void begin_object() { sep(); out_ += '{'; first_ = true; }
  void end_object() { out_ += '}'; first_ = false; }
  void begin_array() { sep(); out_ += '['; first_ = true; }
  void end_array() { out_ += ']'; first_ = false; }
  void key(const std::string& k) { sep(); str_raw(k); out_ += ':'; first_ = true; }
  void value(const std::string& s) { sep(); str_raw(s); }
  void value(const char* s) { value(std::string(s)); }
  void value(uint64_t v) { sep(); out_ += std::to_string(v); }
  void value(int64_t v) { sep(); out_ += std::to_string(v); }
  void value(int v) { value(int64_t(v)); }
  void value(unsigned v) { value(uint64_t(v)); }
  void value(bool v) { sep(); out_ += v ? "true" : "false"; }
  void value_double(double v);  // fixed 6 significant decimals, "null" if not finite
  void raw(const std::string& json) { sep(); out_ += json; }  // a pre-written value
  void null() { sep(); out_ += "null"; }
  template <class T> void kv(const std::string& k, const T& v) { key(k); value(v); }
  void kv_double(const std::string& k, double v) { key(k); value_double(v); }
  void newline() { out_ += '\n'; }
  const std::string& str() const { return out_; }

 private:
  void sep() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void str_raw(const std::string& s);
  std::string out_;
  bool first_ = true;
};

}  // namespace sim
