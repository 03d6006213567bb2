#include "config.h"

#include <algorithm>
#include <cstdlib>

#include "baseline.h"  // heap/src: sim::SubreleaseRule
#include "fatal.h"
#include "parse_number.h"  // inprocess/src: the project's one integer parser

namespace lalloc {

namespace {

// A decimal integer in [lo, hi], or fatal naming the variable.
uint64_t parse_uint(const char* var, const char* v, uint64_t lo, uint64_t hi) {
  uint64_t x = 0;
  const int got = lt_parse_u64(v, &x);
  if (got == LT_NUMBER_BAD) fatal(var, ": not a number: '", v, "'");
  if (got == LT_NUMBER_RANGE || x < lo || x > hi) fatal(var, ": out of range: '", v, "'");
  return x;
}

}  // namespace

Config read_config() {
  Config c;
  if (const char* v = std::getenv("LIFETIME_ALLOC_POLICY")) {
    if (!*v) fatal("LIFETIME_ALLOC_POLICY: empty (give policy names, e.g. paper or baseline)");
    c.policy = v;
  }
  if (const char* v = std::getenv("LIFETIME_ALLOC_PREDICTOR")) c.predictor = v;
  if (const char* v = std::getenv("LIFETIME_ALLOC_STATS")) c.stats_path = v;
  if (const char* v = std::getenv("LIFETIME_ALLOC_STATS_INTERVAL"))
    c.stats_interval_ns = parse_uint("LIFETIME_ALLOC_STATS_INTERVAL", v, 1, 86400) * 1000000000ull;
  if (c.stats_interval_ns && c.stats_path.empty())
    fatal("LIFETIME_ALLOC_STATS_INTERVAL: set without LIFETIME_ALLOC_STATS (where to write)");
  if (const char* v = std::getenv("LIFETIME_ALLOC_ATTRIBUTE")) c.attribute_dir = v;
  if (const char* v = std::getenv("LIFETIME_ALLOC_ATTRIBUTE_INTERVAL"))
    c.attribute_interval_ns = parse_uint("LIFETIME_ALLOC_ATTRIBUTE_INTERVAL", v, 1, 86400) * 1000000000ull;
  if (const char* v = std::getenv("LIFETIME_ALLOC_ATTRIBUTE_SIGNAL"))
    c.attribute_signal = int(parse_uint("LIFETIME_ALLOC_ATTRIBUTE_SIGNAL", v, 1, 64));
  if ((c.attribute_interval_ns || c.attribute_signal) && c.attribute_dir.empty())
    fatal("LIFETIME_ALLOC_ATTRIBUTE_INTERVAL/_SIGNAL: set without LIFETIME_ALLOC_ATTRIBUTE (where to write)");
  if (const char* v = std::getenv("LIFETIME_ALLOC_CHECK"))
    c.check_every = parse_uint("LIFETIME_ALLOC_CHECK", v, 0, uint64_t(1) << 40);
  if (const char* v = std::getenv("LIFETIME_ALLOC_RESERVE_GIB"))
    c.reserve_bytes = parse_uint("LIFETIME_ALLOC_RESERVE_GIB", v, 1, 4096) << 30;
  if (const char* v = std::getenv("LIFETIME_ALLOC_RELEASE_DELAY_MS"))
    c.release_delay_ns = parse_uint("LIFETIME_ALLOC_RELEASE_DELAY_MS", v, 0, 3600 * 1000) * 1000000;
  if (const char* v = std::getenv("LIFETIME_ALLOC_RELEASE_KEEP"))
    c.release_keep_pages = parse_uint("LIFETIME_ALLOC_RELEASE_KEEP", v, 0, 64);
  c.subrelease_interval_ns = sim::SubreleaseRule{}.interval_ns;
  c.subrelease_windows = sim::SubreleaseRule{}.windows;
  c.subrelease_min_windows = sim::SubreleaseRule{}.min_windows;
  if (const char* v = std::getenv("LIFETIME_ALLOC_SUBRELEASE_MS"))
    c.subrelease_interval_ns = parse_uint("LIFETIME_ALLOC_SUBRELEASE_MS", v, 0, 3600 * 1000) * 1000000;
  if (const char* v = std::getenv("LIFETIME_ALLOC_SUBRELEASE_WINDOWS"))
    c.subrelease_windows = unsigned(parse_uint("LIFETIME_ALLOC_SUBRELEASE_WINDOWS", v, 1, sim::SubreleaseRule::kMaxWindows));
  if (const char* v = std::getenv("LIFETIME_ALLOC_SUBRELEASE_MIN_WINDOWS"))
    c.subrelease_min_windows = unsigned(parse_uint("LIFETIME_ALLOC_SUBRELEASE_MIN_WINDOWS", v, 1, sim::SubreleaseRule::kMaxWindows));
  // The shortest horizon is at most the longest (both equal: a fixed horizon).
  c.subrelease_min_windows = std::min(c.subrelease_min_windows, c.subrelease_windows);
  if (const char* v = std::getenv("LIFETIME_ALLOC_IDLE_PLACES"))
    c.idle_places = parse_uint("LIFETIME_ALLOC_IDLE_PLACES", v, 0, 1) != 0;
  if (const char* v = std::getenv("LIFETIME_ALLOC_HUGE_FROM_MIB"))
    c.huge_from_bytes = parse_uint("LIFETIME_ALLOC_HUGE_FROM_MIB", v, 0, 1 << 20) << 20;
  if (const char* v = std::getenv("LIFETIME_ALLOC_HUGE_COLLAPSE"))
    c.huge_collapse = parse_uint("LIFETIME_ALLOC_HUGE_COLLAPSE", v, 0, 1) != 0;
  if (const char* v = std::getenv("LIFETIME_ALLOC_HUGE_GROWTH_MIB"))
    c.huge_growth_bytes = parse_uint("LIFETIME_ALLOC_HUGE_GROWTH_MIB", v, 0, 1 << 20) << 20;
  if (const char* v = std::getenv("LIFETIME_ALLOC_REVALIDATE"))
    c.revalidate_every = int64_t(parse_uint("LIFETIME_ALLOC_REVALIDATE", v, 0, UINT32_MAX));
  if (const char* v = std::getenv("LIFETIME_ALLOC_THREAD_CACHE"))
    c.thread_cache = parse_uint("LIFETIME_ALLOC_THREAD_CACHE", v, 0, 1) != 0;
  return c;
}

}  // namespace lalloc
