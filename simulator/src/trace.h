// The object trace (.lttrace): reading and validating it, streamed.
//
// Format version 1, all integers little-endian:
//   header  (48 + 8*B bytes)
//     0  char[8] magic  "LTTRACE\0"
//     8  u32 version          = 1
//    12  u32 header_bytes     = 48 + 8*B
//    16  u32 record_bytes     = 40
//    20  u32 B                number of finite class boundaries (1..kMaxBoundaries); classes = B + 2
//    24  u64 num_records
//    32  u64 end_ns           end of the trace (>= every alloc and free time in it)
//    40  u64 reserved         = 0
//   end_ns and every boundary < 2^63; the sizes + alignments of all records <= 2^62.
//    48  u64 boundary_ns[B]   strictly increasing upper bounds: class i = lifetime < boundary[i];
//                             class B = lifetime >= boundary[B-1]; class B+1 = never freed (inf)
//   records (40 bytes each), sorted by alloc_ns (ties keep file order)
//     0  u64 alloc_ns
//     8  u64 free_ns          UINT64_MAX = never freed (still live at the end)
//    16  u64 size             bytes requested, < 16 TiB (0 is treated as 1)
//    24  u64 stack_id         opaque id of the allocation's stack (for table predictors)
//    32  u32 thread_id
//    36  u32 align            power of two (0 = default 16)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "classes.h"
#include "common.h"

namespace sim {

constexpr uint32_t kTraceVersion = 1;
constexpr uint32_t kRecordBytes = 40;
constexpr uint32_t kFixedHeaderBytes = 48;

struct ObjectRecord {
  uint64_t alloc_ns;
  uint64_t free_ns;
  uint64_t size;
  uint64_t stack_id;
  uint32_t thread_id;
  uint32_t align;
};

struct TraceHeader {
  uint32_t version = 0;
  uint64_t num_records = 0;
  uint64_t end_ns = 0;
  ClassScheme classes;
};

// Streams a trace file, validating every record; errors are SimError naming the file.
class TraceReader {
 public:
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const TraceHeader& header() const { return header_; }
  // The next record, or nullptr at the end.  The pointer is valid until the next call.
  const ObjectRecord* next();
  uint64_t index() const { return index_; }  // records returned so far

 private:
  [[noreturn]] void fail(const std::string& what) const;
  void refill();

  std::string path_;
  FILE* file_ = nullptr;
  TraceHeader header_;
  std::vector<unsigned char> buf_;
  size_t buf_pos_ = 0, buf_len_ = 0;
  uint64_t index_ = 0;
  uint64_t last_alloc_ = 0;
  uint64_t total_bytes_ = 0;  // sizes + alignments so far (bounded)
  ObjectRecord rec_{};
};

}  // namespace sim
