/* Test driver for the sampler's version-free module names (symtab.c, lt_module_name):
 * reads one mapping path per line on stdin, prints the module token "<name+?>" that
 * an unnamed frame in it gets online.  Linked with the sampler's sources
 * (-DLT_HARNESS); tests/test_online_symbolizer.py checks it against
 * tests/data/module_token_vectors.json. */
#include <stdio.h>
#include <string.h>

size_t lt_module_name(const char *path, size_t len, const char **start);

int main(void) {
  static char line[1 << 16];
  while (fgets(line, sizeof line, stdin)) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    const char *start;
    size_t len = lt_module_name(line, n, &start);
    printf("<%.*s+?>\n", (int)len, start);
  }
  return 0;
}
