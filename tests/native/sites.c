/* Functions whose addresses synthetic profiles point at (tests/test_dataset.py). */
#include <stdlib.h>
__attribute__((noinline)) void *parse_request(size_t n) { return malloc(n); }
__attribute__((noinline)) void *cache_insert(size_t n) { return malloc(n + 1); }
__attribute__((noinline)) void *registry_add(size_t n) { return malloc(n + 2); }
__attribute__((noinline)) void *session_open(size_t n) { return malloc(n + 3); }
int main(void) {
  free(parse_request(8)); free(cache_insert(8)); free(session_open(8));
  return registry_add(8) == NULL;
}
