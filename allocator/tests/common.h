/* Shared by the stress drivers: a fill pattern derived from (tag, size) and a checker. */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

/* Writes the tag and size in front and a byte pattern over the rest. */
static inline void fill(unsigned char* p, size_t n, uint64_t tag) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(tag * 131 + i * 7);
}
static inline void verify(const unsigned char* p, size_t n, uint64_t tag, const char* where) {
  /* The first, last and a stride of bytes: cheap, still catches overlap. */
  for (size_t i = 0; i < n; i += (i < 256 ? 1 : 61))
    if (p[i] != (unsigned char)(tag * 131 + i * 7)) DIE("%s: byte %zu of %zu corrupted", where, i, n);
  if (n && p[n - 1] != (unsigned char)(tag * 131 + (n - 1) * 7)) DIE("%s: last byte corrupted", where);
}
static inline uint64_t rnd(uint64_t* s) {
  *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
  return *s;
}
/* Mostly small, some page-sized, a few past a huge page. */
static inline size_t rnd_size(uint64_t* s) {
  uint64_t r = rnd(s) % 1000;
  if (r < 700) return 1 + rnd(s) % 256;
  if (r < 950) return 1 + rnd(s) % 8192;
  if (r < 998) return 1 + rnd(s) % (256 << 10);
  return (2 << 20) + rnd(s) % (2 << 20);
}
