/* Test driver for the sampler's in-process allocator-frame rule (symtab.c):
 * reads "module_base<TAB>resolved<TAB>frame" lines on stdin, prints 1 (allocation
 * machinery) or 0 per line.  Linked with the sampler's sources (-DLT_HARNESS). */
#include <stdio.h>
#include <string.h>

int lt_is_allocator_frame(const char *frame, size_t len, const char *module_base, int resolved);

int main(void) {
  static char line[1 << 16];
  while (fgets(line, sizeof line, stdin)) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    char *t1 = strchr(line, '\t');
    char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (!t2) { puts("?"); continue; }
    *t1 = *t2 = 0;
    const char *frame = t2 + 1;
    printf("%d\n", lt_is_allocator_frame(frame, strlen(frame), line, t1[1] == '1'));
  }
  return 0;
}
