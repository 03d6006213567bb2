/* The stack walk for attribution.cc, in C: inprocess/'s runtime headers are C (stdatomic),
 * so the allocator's C++ reaches the unwinder through these two calls. */
#include <stdint.h>

#include "runtime.h"
#include "unwind.h"

#define LT_ATTR_API __attribute__((visibility("hidden")))

/* The unwinder's rule cache and the executable's path: once, from the library's
 * constructor.  0: the unwinder cannot run (attribution records no stacks). */
LT_ATTR_API int lalloc_attr_capture_init(void) {
  const char *base;
  if (!lt_exe[0]) lt_program_name(lt_exe, sizeof lt_exe, &base);
  if (!lt_unwind_prepare()) return 0;
  lt_unwind_init(LT_UNWIND_BUILTIN);
  return 1;
}

/* The stack of the allocation whose caller returns to caller_ra: up to max return
 * addresses, the program's first.  May malloc once per thread (the stack's bounds).
 * Each thread keeps its last walk (the unwinder's memo: the next walk replays the frames
 * it shares with it, 58 -> 33 ns a malloc+free pair on one stack); *first is set on the
 * thread's first call, so that the caller can arrange lalloc_attr_thread_end. */
LT_ATTR_API int lalloc_attr_capture(uintptr_t *out, int max, uintptr_t caller_ra, int *first) {
  struct lt_thread *t = &lt_tls;
  *first = !t->memo_tried;
  if (LT_UNLIKELY(!t->stack_known)) {
    if (!t->tid) t->tid = lt_gettid();
    lt_thread_stack_bounds(t);
  }
  if (LT_UNLIKELY(!t->memo_tried)) lt_unwind_memo_start(t);
  int truncated = 0;
  return lt_capture(out, max, caller_ra, &truncated, t);
}

/* Thread exit: the memo's mapping goes back. */
LT_ATTR_API void lalloc_attr_thread_end(void) { lt_unwind_memo_end(&lt_tls); }

LT_ATTR_API const char *lalloc_attr_exe(void) { return lt_exe; }
