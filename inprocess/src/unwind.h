/* The stack walk (unwind.c; DWARF CFI rules from cfi.c): the builtin unwinder, or
 * glibc's / libunwind's for comparison.  No malloc on the walk. */
#ifndef LT_UNWIND_H
#define LT_UNWIND_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* The most frames a stack holds (Header.max_stack_depth upper bound). */
#define LT_MAX_FRAMES 128

/* ---- unwind.c ---- */
enum { LT_UNWIND_BUILTIN = 0, LT_UNWIND_GLIBC = 1, LT_UNWIND_LIBUNWIND = 2, LT_UNWIND_CHECK = 3 };
LT_HIDDEN void lt_unwind_report(void);
LT_HIDDEN int lt_unwind_prepare(void);       /* maps the rule cache (global init) */
LT_HIDDEN int lt_unwind_init(int which); /* constructor time; 0 on failure */
LT_HIDDEN int lt_capture(uintptr_t *out, int max, uintptr_t caller_ra, int *truncated,
                         struct lt_thread *t);
LT_HIDDEN void lt_thread_stack_bounds(struct lt_thread *t);

#endif
