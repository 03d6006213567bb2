/* The thread cache's reuse depth (allocator/src/thread_cache.h, List): a thread that
 * allocates and frees a class now and then keeps only a few of its frees for reuse (the
 * rest go back to the policy a batch at a time), while one that recycles a class at a
 * high rate keeps up to the class's cap and stops taking the lock.
 *
 *   alloc_cache_reuse slow    300 objects of 64 B, one malloc then one free per 0.2 ms;
 *                             prints the bytes left in the cache (mallinfo2's fsmblks)
 *   alloc_cache_reuse hot     20,000 rounds of 100 mallocs of 64 B, then their frees
 *                             (the lock count is in the stats file)
 *   alloc_cache_reuse double  one object of 64 B freed twice while its list is full of a
 *                             refill's batch (the free goes to the free buffer): aborts
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  enum { kSlow = 300, kRound = 100, kRounds = 20000 };
  static void *p[kSlow];
  if (argc != 2) return 2;
  if (!strcmp(argv[1], "slow")) {
    for (int i = 0; i < kSlow; i++) {
      if (!(p[i] = malloc(64))) abort();
      pause_us(200);
    }
    for (int i = 0; i < kSlow; i++) {
      free(p[i]);
      pause_us(200);
    }
    printf("cached %zu\n", mallinfo2().fsmblks);
  } else if (!strcmp(argv[1], "hot")) {
    for (int r = 0; r < kRounds; r++) {
      for (int i = 0; i < kRound; i++)
        if (!(p[i] = malloc(64))) abort();
      for (int i = 0; i < kRound; i++) free(p[i]);
    }
  } else if (!strcmp(argv[1], "double")) {
    void *q = malloc(64); /* a miss: the rest of the refill's batch stays in the list */
    if (!q) abort();
    free(q);
    free(q); /* must abort */
  } else {
    return 2;
  }
  puts("ok");
  return 0;
}
