/* 8 threads with cross-thread frees: 4 producers malloc objects of sizes
 * 3000..3099 bytes and push them on a bounded queue, 4 consumers pop and free them.
 * Usage: threads_xfree [objects_per_producer]
 * Prints "produced N consumed N" and exits 0 when the counts agree.
 *
 * Built two ways: as a normal program (the sampler is LD_PRELOADed) and, with
 * -DLT_HARNESS, linked with the sampler's sources under a sanitizer, calling the
 * renamed hooks lt_malloc/lt_free directly (see profiler/CMakeLists.txt). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LT_HARNESS
void *lt_malloc(size_t);
void lt_free(void *);
void lt_harness_finish(void);
#define ALLOC lt_malloc
#define FREE lt_free
#else
#define ALLOC malloc
#define FREE free
#endif

#define PRODUCERS 4
#define CONSUMERS 4
#define QCAP 1024

static void *queue[QCAP];
static int qhead, qtail, qcount, producers_left = PRODUCERS;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static long per_producer = 10000;
static long consumed_total;

static void *producer(void *arg) {
  long id = (long)(intptr_t)arg;
  for (long i = 0; i < per_producer; i++) {
    size_t size = 3000 + (size_t)((i * 7 + id) % 100);
    unsigned char *p = ALLOC(size);
    if (!p) abort();
    memset(p, (int)(id + 1), size);
    pthread_mutex_lock(&mu);
    while (qcount == QCAP) pthread_cond_wait(&not_full, &mu);
    queue[qtail] = p;
    qtail = (qtail + 1) % QCAP;
    qcount++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&mu);
  }
  pthread_mutex_lock(&mu);
  producers_left--;
  pthread_cond_broadcast(&not_empty);
  pthread_mutex_unlock(&mu);
  return NULL;
}

static void *consumer(void *arg) {
  (void)arg;
  long mine = 0;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (qcount == 0 && producers_left > 0) pthread_cond_wait(&not_empty, &mu);
    if (qcount == 0) {
      pthread_mutex_unlock(&mu);
      break;
    }
    unsigned char *p = queue[qhead];
    qhead = (qhead + 1) % QCAP;
    qcount--;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&mu);
    if (p[0] == 0) abort();
    FREE(p);
    mine++;
  }
  pthread_mutex_lock(&mu);
  consumed_total += mine;
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) per_producer = atol(argv[1]);
  pthread_t th[PRODUCERS + CONSUMERS];
  for (long i = 0; i < CONSUMERS; i++) pthread_create(&th[i], NULL, consumer, NULL);
  for (long i = 0; i < PRODUCERS; i++)
    pthread_create(&th[CONSUMERS + i], NULL, producer, (void *)(intptr_t)i);
  for (int i = 0; i < PRODUCERS + CONSUMERS; i++) pthread_join(th[i], NULL);
  long produced = per_producer * PRODUCERS;
  printf("produced %ld consumed %ld\n", produced, consumed_total);
#ifdef LT_HARNESS
  lt_harness_finish();
#endif
  return produced == consumed_total ? 0 : 1;
}
