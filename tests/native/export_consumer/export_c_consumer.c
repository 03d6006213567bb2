/* A plain C consumer of the exported model: the C API links and predicts. */
#include <stdio.h>
#include <string.h>

#include "lifetime_model.h"

static int frames_of(void* ctx, const char** frames, size_t* lengths, int max_frames) {
  const char* const* stack = (const char* const*)ctx;
  int n = 0;
  while (n < max_frames && stack[n]) {
    frames[n] = stack[n];
    lengths[n] = strlen(stack[n]);
    ++n;
  }
  return n;
}

int main(void) {
  const lifetime_model_info* info = lifetime_model_get_info();
  const char* stack[] = {"proxy::http::Parse(char const*)", "main", NULL};
  float probs[64];
  lifetime_predictor* p = lifetime_predictor_create();
  if (!p || info->num_classes > 64) return 2;
  int cls = lifetime_predict_frames(p, stack, NULL, 2, probs);
  lifetime_cache* cache = lifetime_cache_thread_local();
  /* lookup: -1 and nothing counted before the key is cached */
  int before = lifetime_cache_lookup(cache, 0x401234, 4096, 64);
  int a = lifetime_cache_predict(cache, p, 0x401234, 4096, 64, frames_of, (void*)stack);
  int b = lifetime_cache_predict(cache, p, 0x401234, 4096, 64, frames_of, (void*)stack);
  lifetime_cache_stats s;
  lifetime_cache_get_stats(cache, &s);
  /* a plain hit is counted as one; when a revalidation is due, lookup leaves it to predict */
  int c = lifetime_cache_lookup(cache, 0x401234, 4096, 64);
  lifetime_cache_stats s2, s3;
  lifetime_cache_get_stats(cache, &s2);
  lifetime_cache_set_revalidate_every(cache, 3); /* hits since the check: 2 (b, c) */
  int d = lifetime_cache_lookup(cache, 0x401234, 4096, 64);
  lifetime_cache_get_stats(cache, &s3);
  int lookup_ok = before == -1 && c == a && s2.hits == 2 && s2.misses == 1 && d == -1 &&
                  s3.hits == 2 && s3.revalidations == 0;
  printf("lookup=%d,%d,%d ok=%d\n", before, c, d, lookup_ok);
  printf("classes=%d class=%d (%s) p=%.6f cache=%d,%d hits=%llu misses=%llu\n",
         info->num_classes, cls, info->class_names[cls], probs[cls], a, b,
         (unsigned long long)s.hits, (unsigned long long)s.misses);
  lifetime_predictor_destroy(p);
  return (cls == a && a == b && s.hits == 1 && s.misses == 1 && lookup_ok) ? 0 : 1;
}
