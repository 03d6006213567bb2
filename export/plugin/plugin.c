/* Pulls the exported model's C API into the shared library (the static library's
 * objects are linked only when referenced); exports.map keeps only lifetime_*. */
#include "lifetime_model.h"

__attribute__((used)) static const void *const lifetime_plugin_api[] = {
    (const void *)lifetime_model_get_info,       (const void *)lifetime_predictor_create,
    (const void *)lifetime_predictor_destroy,    (const void *)lifetime_predict_frames,
    (const void *)lifetime_cache_thread_local,   (const void *)lifetime_cache_predict,
    (const void *)lifetime_cache_get_stats,      (const void *)lifetime_cache_set_revalidate_every,
#ifdef LIFETIME_CACHE_LOOKUP /* (exports made before it have no lookup: callers go without) */
    (const void *)lifetime_cache_lookup,
#endif
#ifdef LIFETIME_CACHE_LAYOUT
    (const void *)lifetime_cache_layout,
#endif
#ifdef LIFETIME_SIZE_FRAME
    (const void *)lifetime_size_frame,
#endif
};
