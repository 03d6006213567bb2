/* The allocation context cut (context.c), the C mirror of core/context.py. */
#ifndef LT_CONTEXT_H
#define LT_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* ---- context.c: the allocation context (core/context.py) ---- */
enum {
  LT_FRAME_ALLOCATOR = 1,      /* allocator_rule: stripped from the top of the stack */
  LT_FRAME_WRAPPER = 2,        /* one of the model's allocation wrappers */
  LT_FRAME_ALLOCATOR_NAME = 4  /* allocator by name alone: stripped right below a wrapper */
};
LT_HIDDEN int lt_context_set_wrappers(const char *const *names, int n); /* start-up */
/* context.normalize_frame: the length of the frame string without clone suffixes. */
LT_HIDDEN size_t lt_normalize_frame(const char *s, size_t n);
LT_HIDDEN int lt_frame_kind(const char *frame, size_t len, const char *module_base,
                            int resolved);
/* Index of the context's first frame in a stack of n frames of these kinds. */
LT_HIDDEN int lt_context_start(const int *kinds, int n);

#endif
