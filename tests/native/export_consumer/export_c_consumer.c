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
  int a = lifetime_cache_predict(cache, p, 0x401234, 4096, 64, frames_of, (void*)stack);
  int b = lifetime_cache_predict(cache, p, 0x401234, 4096, 64, frames_of, (void*)stack);
  lifetime_cache_stats s;
  lifetime_cache_get_stats(cache, &s);
  printf("classes=%d class=%d (%s) p=%.6f cache=%d,%d hits=%llu misses=%llu\n",
         info->num_classes, cls, info->class_names[cls], probs[cls], a, b,
         (unsigned long long)s.hits, (unsigned long long)s.misses);
  lifetime_predictor_destroy(p);
  return (cls == a && a == b && s.hits == 1 && s.misses == 1) ? 0 : 1;
}
