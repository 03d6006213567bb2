/* The allocation context, in process: the C mirror of core/context.py.
 *
 * A machinery-free stack starts after the allocator frames at its top
 * (lt_is_allocator_frame on the raw names; everything after works on names without
 * clone suffixes, lt_normalize_frame); if a frame anywhere below is one of the model's allocation
 * wrappers (matched by qualified name), the context starts below the deepest such
 * frame, past any allocator frames (by name) right under it.  The model then reads
 * max_frames frames from there.  Pinned with the Python side by
 * tests/data/context_vectors.json (tests/test_context.py).
 *
 * The wrapper names come from the exported model (lifetime_model_info) and are copied
 * into static memory at start-up (lt_context_set_wrappers); lookups only read them.
 */
#include <string.h>

#include "context.h"
#include "symtab.h"

#define WRAPPER_CAP 4096
#define WRAPPER_BYTES (256 * 1024)

static char wrapper_blob[WRAPPER_BYTES];
static struct { uint32_t off, len; } wrappers[WRAPPER_CAP];
static int wrapper_count;

static int name_cmp(const char *a, size_t an, const char *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  return c ? c : (an > bn) - (an < bn);
}

int lt_context_set_wrappers(const char *const *names, int n) {
  size_t used = 0;
  wrapper_count = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(names[i]);
    if (wrapper_count == WRAPPER_CAP || used + len > WRAPPER_BYTES) return 0;
    memcpy(wrapper_blob + used, names[i], len);
    /* insertion sort: start-up only, a few hundred names */
    int j = wrapper_count++;
    while (j > 0 && name_cmp(wrapper_blob + wrappers[j - 1].off, wrappers[j - 1].len,
                             wrapper_blob + used, len) > 0) {
      wrappers[j] = wrappers[j - 1];
      j--;
    }
    wrappers[j].off = (uint32_t)used;
    wrappers[j].len = (uint32_t)len;
    used += len;
  }
  return 1;
}

static int is_wrapper_name(const char *q, size_t n) {
  int lo = 0, hi = wrapper_count;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    int c = name_cmp(wrapper_blob + wrappers[mid].off, wrappers[mid].len, q, n);
    if (c == 0) return 1;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

static int ends_with(const char *s, size_t n, const char *p) {
  size_t m = strlen(p);
  return n >= m && memcmp(s + n - m, p, m) == 0;
}

/* context.normalize_frame: the length of s without trailing clone suffixes. */
size_t lt_normalize_frame(const char *s, size_t n) {
  size_t cut = n;
  while (cut && s[cut - 1] == ']') { /* C++: " [clone .isra.0]" ... */
    size_t p = cut - 1;
    while (p && s[p - 1] != '[' && s[p - 1] != ']') p--;
    if (!p || s[p - 1] != '[' || p < 2 || s[p - 2] != ' ' ||
        cut - p < 6 || memcmp(s + p, "clone ", 6) != 0)
      break;
    cut = p - 2;
  }
  if (cut != n) return cut;
  static const char *const kinds[] = {".part", ".isra", ".constprop", ".cold", ".lto_priv",
                                      ".localalias", ".llvm", NULL};
  for (;;) { /* C: ".part.6", ".isra.0.part.1" ... */
    size_t q = cut;
    for (;;) { /* (.digits)* */
      size_t d = q;
      while (d && s[d - 1] >= '0' && s[d - 1] <= '9') d--;
      if (d == q || !d || s[d - 1] != '.') break;
      q = d - 1;
    }
    int matched = 0;
    for (int i = 0; kinds[i]; i++)
      if (ends_with(s, q, kinds[i])) {
        cut = q - strlen(kinds[i]);
        matched = 1;
        break;
      }
    if (!matched) return cut;
  }
}

int lt_frame_kind(const char *raw, size_t raw_len, const char *module_base, int resolved) {
  int kind = lt_is_allocator_frame(raw, raw_len, module_base, resolved) ? LT_FRAME_ALLOCATOR : 0;
  const char *frame = raw;
  size_t len = lt_normalize_frame(raw, raw_len);
  if (resolved) {
    if (lt_is_allocator_frame(frame, len, "", 1)) kind |= LT_FRAME_ALLOCATOR_NAME;
    size_t st;
    size_t n = lt_qualified_name(frame, len, &st);
    if (is_wrapper_name(frame + st, n)) kind |= LT_FRAME_WRAPPER;
  }
  return kind;
}

int lt_context_start(const int *kinds, int n) {
  int i = 0;
  while (i < n && (kinds[i] & LT_FRAME_ALLOCATOR)) i++;
  int deepest = -1;
  for (int j = i; j < n; j++)
    if (kinds[j] & LT_FRAME_WRAPPER) deepest = j;
  if (deepest < 0) return i;
  i = deepest + 1;
  while (i < n && (kinds[i] & LT_FRAME_ALLOCATOR_NAME)) i++;
  return i;
}
