/* Realloc storms: 4 threads grow and shrink 256 objects each at random, across the
   small, page, large and past-a-huge-page sizes; the common prefix must survive.
   realloc(NULL, n) and realloc(p, 0) too. */
#include <malloc.h>
#include <pthread.h>

#include "common.h"

#define OBJS 256
static int rounds = 20000;

static void* worker(void* arg) {
  uint64_t s = 0xdeadbeefull * ((uintptr_t)arg + 7);
  unsigned char* p[OBJS] = {0};
  size_t n[OBJS] = {0};
  uint64_t tag[OBJS];
  for (int i = 0; i < OBJS; ++i) tag[i] = rnd(&s);
  for (int r = 0; r < rounds; ++r) {
    int i = (int)(rnd(&s) % OBJS);
    size_t m = rnd(&s) % 64 == 0 ? 0 : rnd_size(&s);
    if (p[i]) verify(p[i], n[i], tag[i], "before realloc");
    unsigned char* q = realloc(p[i], m);
    if (m == 0) {
      if (p[i] && q) DIE("realloc(p, 0) returned %p", (void*)q);
      if (!p[i]) { if (!q) DIE("realloc(NULL, 0) failed"); free(q); }
      p[i] = NULL;
      n[i] = 0;
      continue;
    }
    if (!q) DIE("realloc to %zu failed", m);
    if (malloc_usable_size(q) < m) DIE("usable %zu < %zu", malloc_usable_size(q), m);
    size_t keep = n[i] < m ? n[i] : m;
    verify(q, keep, tag[i], "after realloc");
    fill(q, m, tag[i]);
    p[i] = q;
    n[i] = m;
  }
  for (int i = 0; i < OBJS; ++i) free(p[i]);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atoi(argv[1]);
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
  for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  puts("ok");
  return 0;
}
