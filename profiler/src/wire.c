/* Protobuf wire-format encoder and TFRecord framing (see wire.h). */
#include "wire.h"

#include <string.h>

void lt_pb_init(struct lt_pb *pb, uint8_t *buf, size_t cap) {
  pb->buf = buf;
  pb->cap = cap;
  pb->len = 0;
  pb->overflow = 0;
  pb->depth = 0;
}

static inline int need(struct lt_pb *pb, size_t n) {
  if (LT_UNLIKELY(pb->overflow || pb->cap - pb->len < n)) {
    pb->overflow = 1;
    return 0;
  }
  return 1;
}

void lt_pb_raw_varint(struct lt_pb *pb, uint64_t v) {
  if (need(pb, 10)) pb->len += lt_varint_into(pb->buf + pb->len, v);
}

void lt_pb_raw(struct lt_pb *pb, const void *p, size_t n) {
  if (need(pb, n)) {
    if (n) memcpy(pb->buf + pb->len, p, n);
    pb->len += n;
  }
}

void lt_pb_tag(struct lt_pb *pb, uint32_t field, int wiretype) {
  lt_pb_raw_varint(pb, ((uint64_t)field << 3) | (uint64_t)wiretype);
}

void lt_pb_uint(struct lt_pb *pb, uint32_t field, uint64_t v) {
  if (v == 0) return;
  lt_pb_tag(pb, field, LT_WT_VARINT);
  lt_pb_raw_varint(pb, v);
}

void lt_pb_int(struct lt_pb *pb, uint32_t field, int64_t v) {
  lt_pb_uint(pb, field, (uint64_t)v); /* int64: two's complement varint */
}

void lt_pb_bool(struct lt_pb *pb, uint32_t field, int v) { lt_pb_uint(pb, field, v ? 1 : 0); }

void lt_pb_double(struct lt_pb *pb, uint32_t field, double v) {
  if (v == 0.0) return;
  lt_pb_tag(pb, field, LT_WT_I64);
  if (need(pb, 8)) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    for (int i = 0; i < 8; i++) pb->buf[pb->len++] = (uint8_t)(bits >> (8 * i));
  }
}

void lt_pb_bytes_always(struct lt_pb *pb, uint32_t field, const void *p, size_t n) {
  lt_pb_tag(pb, field, LT_WT_LEN);
  lt_pb_raw_varint(pb, n);
  if (need(pb, n)) {
    if (n) memcpy(pb->buf + pb->len, p, n);
    pb->len += n;
  }
}

void lt_pb_bytes(struct lt_pb *pb, uint32_t field, const void *p, size_t n) {
  if (n) lt_pb_bytes_always(pb, field, p, n);
}

void lt_pb_string(struct lt_pb *pb, uint32_t field, const char *s) {
  if (s) lt_pb_bytes(pb, field, s, strlen(s));
}

void lt_pb_packed_u64(struct lt_pb *pb, uint32_t field, const uint64_t *v, size_t n) {
  if (n == 0) return;
  size_t body = 0;
  uint8_t tmp[10];
  for (size_t i = 0; i < n; i++) body += lt_varint_into(tmp, v[i]);
  lt_pb_tag(pb, field, LT_WT_LEN);
  lt_pb_raw_varint(pb, body);
  if (!need(pb, body)) return;
  for (size_t i = 0; i < n; i++) pb->len += lt_varint_into(pb->buf + pb->len, v[i]);
}

void lt_pb_begin(struct lt_pb *pb, uint32_t field) {
  lt_pb_tag(pb, field, LT_WT_LEN);
  if (pb->depth >= LT_PB_MAX_DEPTH) {
    pb->overflow = 1;
    return;
  }
  if (!need(pb, 5)) return;
  pb->open[pb->depth++] = pb->len;
  pb->len += 5;
}

void lt_pb_end(struct lt_pb *pb) {
  if (pb->overflow || pb->depth == 0) {
    pb->overflow = 1;
    return;
  }
  size_t at = pb->open[--pb->depth];
  size_t body = pb->len - at - 5;
  uint8_t tmp[10];
  size_t k = lt_varint_into(tmp, body);
  memmove(pb->buf + at + k, pb->buf + at + 5, body);
  memcpy(pb->buf + at, tmp, k);
  pb->len -= 5 - k;
}

/* ---- CRC-32C (Castagnoli), hardware when SSE4.2 is there ---- */

static uint32_t crc_table[256];
static int crc_hw;

void lt_crc32c_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[i] = c;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                             size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8); /* inlined (-fno-builtin): one load */
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

uint32_t lt_crc32c(const void *data, size_t n) {
  const uint8_t *p = data;
  uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__)
  if (crc_hw) return crc32c_hw(c, p, n) ^ 0xFFFFFFFFu;
#endif
  while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t lt_masked_crc32c(const void *data, size_t n) {
  uint32_t crc = lt_crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

size_t lt_tfrecord_frame(uint8_t *rec, size_t datalen) {
  uint64_t len = datalen;
  for (int i = 0; i < 8; i++) rec[i] = (uint8_t)(len >> (8 * i));
  uint32_t lc = lt_masked_crc32c(rec, 8);
  for (int i = 0; i < 4; i++) rec[8 + i] = (uint8_t)(lc >> (8 * i));
  uint32_t dc = lt_masked_crc32c(rec + LT_TFRECORD_HEAD, datalen);
  uint8_t *foot = rec + LT_TFRECORD_HEAD + datalen;
  for (int i = 0; i < 4; i++) foot[i] = (uint8_t)(dc >> (8 * i));
  return LT_TFRECORD_HEAD + datalen + LT_TFRECORD_FOOT;
}
