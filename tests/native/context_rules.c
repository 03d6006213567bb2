/* Test driver for the sampler's in-process context rules (context.c), against
 * tests/data/context_vectors.json (tests/test_context.py).  Reads lines on stdin:
 *   W<TAB>name                        a wrapper of the next cases
 *   F<TAB>module_base<TAB>resolved<TAB>frame   a frame of the current stack, leaf first
 *   E                                 end of a case: prints its context's start index
 *   N<TAB>frame                       prints the frame without clone suffixes
 * Each case has its own wrappers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lt_context_set_wrappers(const char *const *names, int n);
int lt_frame_kind(const char *frame, size_t len, const char *module_base, int resolved);
int lt_context_start(const int *kinds, int n);
size_t lt_normalize_frame(const char *s, size_t n);

#define MAX_FRAMES 1024

int main(void) {
  static char line[1 << 16];
  static char *wrappers[4096];
  static int kinds[MAX_FRAMES];
  int nw = 0, n = 0;
  while (fgets(line, sizeof line, stdin)) {
    size_t len = strlen(line);
    if (len && line[len - 1] == '\n') line[--len] = 0;
    if (line[0] == 'W' && line[1] == '\t') {
      if (nw == 4096) return 2;
      wrappers[nw++] = strdup(line + 2);
      lt_context_set_wrappers((const char *const *)wrappers, nw);
    } else if (line[0] == 'F' && line[1] == '\t') {
      char *base = line + 2;
      char *t1 = strchr(base, '\t');
      char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
      if (!t2 || n == MAX_FRAMES) return 2;
      *t1 = *t2 = 0;
      const char *frame = t2 + 1;
      kinds[n++] = lt_frame_kind(frame, strlen(frame), base, t1[1] == '1');
    } else if (line[0] == 'N' && line[1] == '\t') {
      printf("%.*s\n", (int)lt_normalize_frame(line + 2, len - 2), line + 2);
    } else if (line[0] == 'E') {
      printf("%d\n", lt_context_start(kinds, n));
      n = 0;
      for (int i = 0; i < nw; i++) free(wrappers[i]);
      nw = 0;
      lt_context_set_wrappers(NULL, 0);
    }
  }
  return 0;
}
