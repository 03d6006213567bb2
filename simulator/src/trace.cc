#include "trace.h"
#include "files.h"

#include <cerrno>
#include <cstring>
#include <sstream>

namespace sim {

namespace {
uint32_t rd32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t rd64(const unsigned char* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }
constexpr size_t kChunkRecords = 16384;
constexpr uint64_t kMaxSize = uint64_t(1) << 44;  // 16 TiB: anything larger is corrupt
constexpr uint64_t kMaxTime = uint64_t(1) << 63;
// Bound on the sum of all objects' sizes and alignments: it keeps every byte count, and
// huge page ids x 2 MiB (fresh ids for every object of several huge pages), within 64 bits.
constexpr uint64_t kMaxTotalBytes = uint64_t(1) << 62;

}  // namespace

TraceReader::TraceReader(const std::string& path) : path_(path) {
  // Opened without blocking: a fifo or device is refused, never waited on.
  uint64_t file_size = 0;
  file_ = open_regular(path, &file_size);
  unsigned char fixed[kFixedHeaderBytes];
  size_t got = std::fread(fixed, 1, sizeof fixed, file_);
  if (got >= 8 && std::memcmp(fixed, "LTTRACE\0", 8) != 0)
    fail("not a trace file (bad magic; expected \"LTTRACE\\0\")");
  if (got < sizeof fixed)
    fail("truncated header (" + std::to_string(got) + " of " + std::to_string(sizeof fixed) + " bytes)");
  header_.version = rd32(fixed + 8);
  if (header_.version != kTraceVersion)
    fail("unsupported trace version " + std::to_string(header_.version) + " (this engine reads version " +
         std::to_string(kTraceVersion) + ")");
  uint32_t header_bytes = rd32(fixed + 12), record_bytes = rd32(fixed + 16), nb = rd32(fixed + 20);
  header_.num_records = rd64(fixed + 24);
  header_.end_ns = rd64(fixed + 32);
  uint64_t reserved = rd64(fixed + 40);
  if (record_bytes != kRecordBytes)
    fail("record size " + std::to_string(record_bytes) + " (version 1 has " + std::to_string(kRecordBytes) + ")");
  if (nb < 1 || nb > uint32_t(kMaxBoundaries))  // classes.h: the label scheme's limit
    fail("bad number of class boundaries " + std::to_string(nb) + " (1.." + std::to_string(kMaxBoundaries) + ")");
  if (header_bytes != kFixedHeaderBytes + 8 * nb)
    fail("header size " + std::to_string(header_bytes) + " does not match " + std::to_string(nb) + " boundaries");
  if (reserved != 0)
    fail("header (byte offset 40): reserved field is " + std::to_string(reserved) + " (must be 0)");
  // Times stay below 2^63 ns (292 years of a monotonic clock), so no time arithmetic
  // (intervals, deadlines, series) can wrap or meet the never-freed marker.
  if (header_.end_ns >= kMaxTime)
    fail("header (byte offset 32): end time " + std::to_string(header_.end_ns) + " is not below 2^63 ns");
  std::vector<unsigned char> b(8 * nb);
  if (std::fread(b.data(), 1, b.size(), file_) != b.size()) fail("truncated header (class boundaries)");
  for (uint32_t i = 0; i < nb; ++i) {
    uint64_t v = rd64(b.data() + 8 * i);
    if (v == 0 || (i > 0 && v <= header_.classes.bounds_ns.back()))
      fail("class boundaries must be positive and strictly increasing");
    if (v >= kMaxTime)
      fail("header (byte offset " + std::to_string(kFixedHeaderBytes + 8 * i) + "): class boundary " +
           std::to_string(v) + " is not below 2^63 ns");
    header_.classes.bounds_ns.push_back(v);
  }
  uint64_t body = file_size >= header_bytes ? file_size - header_bytes : 0;
  if (header_.num_records > body / kRecordBytes)
    fail("truncated: header says " + std::to_string(header_.num_records) + " records but only " +
         std::to_string(body) + " bytes follow the header (" + std::to_string(body / kRecordBytes) + " records)");
  if (body != header_.num_records * kRecordBytes)
    fail("trailing data: " + std::to_string(body - header_.num_records * kRecordBytes) +
         " bytes after the last of " + std::to_string(header_.num_records) + " records");
  buf_.resize(kChunkRecords * kRecordBytes);
}

TraceReader::~TraceReader() {
  if (file_) std::fclose(file_);
}

void TraceReader::fail(const std::string& what) const { throw SimError(path_ + ": " + what); }

void TraceReader::refill() {
  uint64_t left = header_.num_records - index_;
  size_t want = size_t(std::min<uint64_t>(left, kChunkRecords)) * kRecordBytes;
  size_t got = std::fread(buf_.data(), 1, want, file_);
  if (got != want) fail("truncated at record " + std::to_string(index_ + got / kRecordBytes) + " (read error)");
  buf_pos_ = 0;
  buf_len_ = got;
}

const ObjectRecord* TraceReader::next() {
  if (index_ >= header_.num_records) return nullptr;
  if (buf_pos_ >= buf_len_) refill();
  const unsigned char* p = buf_.data() + buf_pos_;
  buf_pos_ += kRecordBytes;
  rec_.alloc_ns = rd64(p);
  rec_.free_ns = rd64(p + 8);
  rec_.size = rd64(p + 16);
  rec_.stack_id = rd64(p + 24);
  rec_.thread_id = rd32(p + 32);
  rec_.align = rd32(p + 36);
  auto bad = [&](const std::string& what) {
    fail("record " + std::to_string(index_) + " (byte offset " +
         std::to_string(kFixedHeaderBytes + 8 * header_.classes.bounds_ns.size() + index_ * kRecordBytes) +
         "): " + what);
  };
  if (index_ > 0 && rec_.alloc_ns < last_alloc_)
    bad("alloc time " + std::to_string(rec_.alloc_ns) + " precedes the previous record's " +
        std::to_string(last_alloc_) + " (records must be sorted by alloc time)");
  if (rec_.alloc_ns > header_.end_ns)
    bad("alloc time " + std::to_string(rec_.alloc_ns) + " is after the trace end " + std::to_string(header_.end_ns));
  if (rec_.free_ns != kNever) {
    if (rec_.free_ns < rec_.alloc_ns)
      bad("free time " + std::to_string(rec_.free_ns) + " precedes alloc time " + std::to_string(rec_.alloc_ns));
    if (rec_.free_ns > header_.end_ns)
      bad("free time " + std::to_string(rec_.free_ns) + " is after the trace end " + std::to_string(header_.end_ns));
  }
  if (rec_.size >= kMaxSize) bad("implausible size " + std::to_string(rec_.size) + " (the format allows < 16 TiB)");
  if (rec_.size == 0) rec_.size = 1;
  if (rec_.align == 0) rec_.align = 16;
  if (rec_.align & (rec_.align - 1)) bad("alignment " + std::to_string(rec_.align) + " is not a power of two");
  total_bytes_ += rec_.size + rec_.align;
  if (total_bytes_ > kMaxTotalBytes) bad("the objects so far add up to more than 2^62 bytes (4 EiB)");
  last_alloc_ = rec_.alloc_ns;
  ++index_;
  return &rec_;
}

}  // namespace sim
