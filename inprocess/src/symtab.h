/* The in-process symbolizer (symtab.c): frame strings of return addresses from the
 * loaded modules' symbol tables, the same strings the offline symbolizer writes. */
#ifndef LT_SYMTAB_H
#define LT_SYMTAB_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* ---- symtab.c: in-process symbolizer (no malloc on lookup) ---- */
LT_HIDDEN int lt_symtab_refresh(void);   /* index loaded modules; start-up and dlopen */
LT_HIDDEN void lt_symtab_reset_child(void);
/* The frame string of a return address (function, or <module+?>), cut to cap - 1. */
LT_HIDDEN size_t lt_symbolize(uintptr_t return_address, char *buf, size_t cap,
                              const char **module_base, int *resolved);
/* symbolize.allocator_rule: 1 if the frame is allocation machinery. */
LT_HIDDEN int lt_is_allocator_frame(const char *frame, size_t len, const char *module_base,
                                    int resolved);
LT_HIDDEN extern int lt_symbolize_stacks; /* LIFETIME_SYMBOLIZE=1: Stack.frames online */
/* symbolize.qualified_name: the qualified name is [*start, *start + return) of s. */
LT_HIDDEN size_t lt_qualified_name(const char *s, size_t n, size_t *start);

#endif
