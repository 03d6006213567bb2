/* The project's one integer parser in C: a decimal uint64 that is the whole string.
 * Header only (static inline), no malloc, no locale, no errno: safe inside malloc and a
 * signal handler.  C11 and C++17.  Used by the sampler's settings (profiler/src/sampler.c),
 * the allocator's (allocator/src/config.cc, predictor.cc) and the simulator's options
 * (simulator/src/main.cc, model_predictor.cc); each caller keeps its own message.
 *
 * Stricter than strtoull on purpose: digits only, at least one; no sign, no leading
 * space, no base prefix ("0x10" is not a number, "010" is ten). */
#ifndef LT_PARSE_NUMBER_H
#define LT_PARSE_NUMBER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  LT_NUMBER_OK = 0,     /* *out holds the value */
  LT_NUMBER_BAD = 1,    /* empty, NULL, or a byte that is not a decimal digit */
  LT_NUMBER_RANGE = 2,  /* digits only, but more than UINT64_MAX */
};

/* LT_NUMBER_OK with the value in *out (untouched otherwise), LT_NUMBER_BAD or
 * LT_NUMBER_RANGE.  A string of digits too large is LT_NUMBER_RANGE, whatever follows
 * it is checked too: "99999999999999999999x" is LT_NUMBER_BAD. */
static inline int lt_parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return LT_NUMBER_BAD;
  uint64_t v = 0;
  int over = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return LT_NUMBER_BAD;
    uint64_t d = (uint64_t)(*p - '0');
    if (over || v > (UINT64_MAX - d) / 10)
      over = 1;
    else
      v = v * 10 + d;
  }
  if (over) return LT_NUMBER_RANGE;
  *out = v;
  return LT_NUMBER_OK;
}

#ifdef __cplusplus
}
#endif

#endif
