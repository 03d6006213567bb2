/* 16 threads pass objects through one shared table: most are freed by a thread other
   than the one that allocated them.  Each object carries its pattern; checked at free. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common.h"

#define THREADS 16
#define CELLS 4096
struct obj { size_t n; uint64_t tag; };
static _Atomic(struct obj*) cells[CELLS];
static int rounds = 20000;

static void drop(struct obj* o) {
  verify((unsigned char*)(o + 1), o->n, o->tag, "xfree");
  free(o);
}

static void* worker(void* arg) {
  uint64_t s = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1);
  for (int i = 0; i < rounds; ++i) {
    size_t n = rnd_size(&s);
    struct obj* o = malloc(sizeof *o + n);
    if (!o) DIE("malloc(%zu) failed", n);
    if (malloc_usable_size(o) < sizeof *o + n) DIE("usable size %zu < %zu", malloc_usable_size(o), sizeof *o + n);
    o->n = n;
    o->tag = rnd(&s);
    fill((unsigned char*)(o + 1), n, o->tag);
    struct obj* old = atomic_exchange(&cells[rnd(&s) % CELLS], o);
    if (old) drop(old);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atoi(argv[1]);
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, worker, (void*)i);
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);
  for (int i = 0; i < CELLS; ++i) if (cells[i]) drop(cells[i]);
  puts("ok");
  return 0;
}
