/* Hand-written protobuf wire-format encoder and TFRecord framing.
 *
 * Encodes into a caller-provided fixed buffer; never allocates.  Callers make sure
 * there is room for a whole item before encoding it (lt_pb_room); if a write would
 * still overflow, `overflow` is set and later writes are ignored, so a bad size
 * estimate yields a detectably dropped chunk, never a buffer overrun.
 */
#ifndef LT_WIRE_H
#define LT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define LT_PB_MAX_DEPTH 8
#define LT_TFRECORD_HEAD 12 /* uint64 length + uint32 masked crc of the length */
#define LT_TFRECORD_FOOT 4  /* uint32 masked crc of the data */

enum { LT_WT_VARINT = 0, LT_WT_I64 = 1, LT_WT_LEN = 2 };

struct lt_pb {
  uint8_t *buf;
  size_t cap;
  size_t len;
  int overflow;
  int depth;
  size_t open[LT_PB_MAX_DEPTH]; /* where each open submessage's length goes */
};

LT_HIDDEN void lt_pb_init(struct lt_pb *pb, uint8_t *buf, size_t cap);
static inline size_t lt_pb_room(const struct lt_pb *pb) {
  return pb->overflow ? 0 : pb->cap - pb->len;
}
LT_HIDDEN void lt_pb_raw_varint(struct lt_pb *pb, uint64_t v);
LT_HIDDEN void lt_pb_tag(struct lt_pb *pb, uint32_t field, int wiretype);
/* Scalar fields skip proto3 default values (0, false, empty), as protoc does. */
LT_HIDDEN void lt_pb_uint(struct lt_pb *pb, uint32_t field, uint64_t v);
LT_HIDDEN void lt_pb_int(struct lt_pb *pb, uint32_t field, int64_t v);
LT_HIDDEN void lt_pb_bool(struct lt_pb *pb, uint32_t field, int v);
LT_HIDDEN void lt_pb_double(struct lt_pb *pb, uint32_t field, double v);
LT_HIDDEN void lt_pb_bytes(struct lt_pb *pb, uint32_t field, const void *p, size_t n);
LT_HIDDEN void lt_pb_string(struct lt_pb *pb, uint32_t field, const char *s);
/* Always written, even when empty (repeated string elements). */
LT_HIDDEN void lt_pb_bytes_always(struct lt_pb *pb, uint32_t field, const void *p, size_t n);
LT_HIDDEN void lt_pb_packed_u64(struct lt_pb *pb, uint32_t field, const uint64_t *v, size_t n);
/* Length-delimited submessage: begin reserves 5 bytes for the length, end writes the
 * minimal varint and moves the body down. */
LT_HIDDEN void lt_pb_begin(struct lt_pb *pb, uint32_t field);
LT_HIDDEN void lt_pb_end(struct lt_pb *pb);

/* Raw bytes (an already-encoded field or message body). */
LT_HIDDEN void lt_pb_raw(struct lt_pb *pb, const void *p, size_t n);
/* Encoding into a caller's scratch buffer (no bounds checks: the caller sizes it,
 * at most 10 bytes a varint), for hot messages encoded field by field inline. */
static inline size_t lt_varint_into(uint8_t *out, uint64_t v) {
  size_t i = 0;
  while (v >= 0x80) {
    out[i++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[i++] = (uint8_t)v;
  return i;
}
/* zigzag (sint64): the two's complement difference of two uint64 values */
static inline uint64_t lt_zigzag(uint64_t v) {
  return (v << 1) ^ (uint64_t)((int64_t)v >> 63);
}
/* A varint field, skipped when 0 (proto3 default), as lt_pb_uint. */
static inline size_t lt_field_uint_into(uint8_t *out, uint32_t field, uint64_t v) {
  if (v == 0) return 0;
  size_t n = lt_varint_into(out, (uint64_t)field << 3);
  return n + lt_varint_into(out + n, v);
}

LT_HIDDEN void lt_crc32c_init(void);
LT_HIDDEN uint32_t lt_crc32c(const void *data, size_t n);
LT_HIDDEN uint32_t lt_masked_crc32c(const void *data, size_t n);
/* `rec` holds LT_TFRECORD_HEAD reserved bytes, then `datalen` data bytes, then room for
 * LT_TFRECORD_FOOT; fills head and foot, returns the record's total length. */
LT_HIDDEN size_t lt_tfrecord_frame(uint8_t *rec, size_t datalen);

#endif
