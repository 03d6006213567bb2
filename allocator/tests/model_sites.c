/* Known allocation sites for the model predictor's tests (tests/test_allocator_model.py):
 * three functions, each its own context, called from main in a loop; short-lived,
 * medium and kept objects.  Prints "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 20000
#define KEPT 512

/* Not tail calls: each site's frame is on the stack when malloc runs. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
__attribute__((noinline)) char *site_short_lived(size_t n) { char *p = malloc(n); KEEP(p); return p; }
__attribute__((noinline)) char *site_medium(size_t n) { char *p = calloc(1, n); KEEP(p); return p; }
__attribute__((noinline)) char *site_kept(size_t n) { char *p = malloc(n); KEEP(p); return p; }

int main(void) {
  static char *kept[KEPT];
  char *ring[64] = {0};
  for (int i = 0; i < ROUNDS; i++) {
    char *s = site_short_lived(24 + (size_t)(i % 3) * 8);
    memset(s, 1, 24);
    free(s);
    int r = i % 64;
    free(ring[r]);
    ring[r] = site_medium(200);
    if (i % (ROUNDS / KEPT) == 0 && i / (ROUNDS / KEPT) < KEPT) kept[i / (ROUNDS / KEPT)] = site_kept(5000);
  }
  for (int r = 0; r < 64; r++) free(ring[r]);
  size_t live = 0;
  for (int k = 0; k < KEPT; k++) live += kept[k] != NULL;
  printf("ok %zu\n", live);
  return 0;
}
