// LIFETIME_ALLOC_STATS: the policy's own counters beside the real allocator's.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "internal_arena.h"
#include "json.h"
#include "reentry.h"
#include "state.h"

namespace lalloc {

namespace {

std::string expand(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += std::to_string(getpid());
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace

void write_stats(const State& s, uint64_t now_ns) {
  const Counters& c = s.c;
  sim::JsonWriter j;
  j.begin_object();
  j.kv("pid", uint64_t(getpid()));
  j.kv("policy", s.policy_name);
  j.kv("predictor", s.predictor->describe());
  j.kv("uptime_ns", now_ns - s.start_ns);
  j.kv("live_huge_pages", s.policy->live_huge_pages());
  j.kv("peak_huge_pages", c.peak_huge_pages);
  j.kv("objects", c.live_objects + c.direct_objects);
  j.kv("policy_objects", c.live_objects);
  j.kv("peak_policy_objects", c.peak_objects);
  j.kv("direct_objects", c.direct_objects);
  j.kv("allocs", c.allocs);
  j.kv("frees", c.frees);
  j.kv("failed_allocs", c.failed_allocs);
  j.kv("foreign_frees", c.foreign_frees);
  j.kv("foreign_reallocs", c.foreign_reallocs);
  j.kv("trims", c.trims);
  j.kv("trimmed_bytes", c.trimmed_bytes);
  j.kv("direct_allocs", c.direct_allocs);
  j.kv("bytes_requested", c.live_requested);
  j.kv("peak_bytes_requested", c.peak_requested);
  j.kv("total_bytes_requested", c.total_requested);
  j.kv("bytes_usable", c.live_usable);
  j.kv("direct_bytes", c.direct_bytes);
  j.kv("peak_direct_bytes", c.peak_direct_bytes);
  j.kv("reserved_bytes", s.backing.reserved_bytes());
  j.kv("committed_bytes", s.backing.committed_bytes());
  j.kv("peak_committed_bytes", s.backing.peak_committed_bytes());
  j.kv("touched_bytes", s.backing.touched_bytes());
  j.kv("huge_pages_returned", s.backing.pages_returned());
  // free pages of live huge pages given back (subrelease): now, and in all
  j.kv("subreleased_bytes", s.policy->subreleased_bytes());
  j.kv("huge_pages_on", uint64_t(s.backing.huge_on()));  // LIFETIME_ALLOC_HUGE_FROM_MIB reached
  j.kv("total_subreleased_bytes", s.backing.subreleased_bytes_total());
  j.kv("broken_huge_pages", s.backing.broken_pages());  // MADV_NOHUGEPAGE after a subrelease
  j.kv("rehugified_huge_pages", s.backing.rehugified_pages());  // dense again: MADV_HUGEPAGE
  j.kv("huge_collapse", uint64_t(s.backing.collapse()));  // LIFETIME_ALLOC_HUGE_COLLAPSE
  j.kv("growth_advised_huge_pages", s.backing.growth_advised_pages());  // LIFETIME_ALLOC_HUGE_GROWTH_MIB
  j.kv("collapsed_huge_pages", s.backing.collapsed_pages());
  j.kv("collapse_failures", s.backing.collapse_failures());
  j.kv("collapse_ns", s.backing.collapse_ns());
  j.kv("collapse_max_ns", s.backing.collapse_max_ns());
  j.kv("collapse_budget_ns", s.backing.collapse_budget_ns());
  j.kv("collapse_queued", s.backing.collapse_queued());
  j.kv("collapse_deferred", s.backing.collapse_deferred());
  j.kv("collapsed_direct_huge_pages", s.backing.collapsed_foreign());  // objects past a huge page
  // released pages kept committed for the release delay, and those taken again meanwhile
  j.kv("held_free_pages", s.backing.held_pages());
  j.kv("huge_pages_reused_held", s.backing.pages_reused());
  // The allocator's metadata: the internal arena (the policy's containers: per-slot
  // records, spans, pages), resident (mincore) and held (carved less the pages its free
  // blocks gave back: an upper bound), and the object table (committed huge pages).
  j.kv("internal_arena_bytes", arena::resident_bytes());
  j.kv("internal_arena_held_bytes", arena::held_bytes());
  j.kv("object_table_bytes", s.backing.table_bytes());
  // The arena by block size: [block bytes, carved, free, live blocks' requested bytes].
  {
    arena::ClassCensus cc[160];
    const unsigned n = arena::census(cc, 160);
    j.key("internal_arena_census");
    j.begin_array();
    for (unsigned i = 0; i < n; ++i) {
      j.begin_array();
      j.value(cc[i].block_bytes);
      j.value(cc[i].carved);
      j.value(cc[i].free);
      j.value(cc[i].live_requested);
      j.end_array();
    }
    j.end_array();
  }
  j.kv("lock_acquisitions", c.lock_acquisitions);
  j.kv("threads", c.threads);
  j.kv("checks", c.checks);
  // Requests from signal handlers that interrupted their thread inside the allocator
  // (reentry.h): served from its arena that never waits (bytes: its high-water mark;
  // reused: from its free lists; leaked: frees that found them busy), and frees of the
  // program's objects deferred to the next lock holder.
  const reentry::Counts r = reentry::counts();
  j.key("reentry");
  j.begin_object();
  j.kv("allocs", r.allocs);
  j.kv("frees", r.frees);
  j.kv("reused", r.reused);
  j.kv("leaked", r.leaked);
  j.kv("bytes", r.bytes);
  j.kv("deferred_frees", r.deferred_frees);
  j.end_object();
  // Per-thread caches of freed objects (heap.cc): objects/bytes held now (live to the
  // policy, free to the program).
  j.key("thread_cache");
  j.begin_object();
  j.kv("enabled", uint64_t(s.tc.on));
  j.kv("caches", s.tc.caches);
  j.kv("exited_threads", s.tc.exited);
  j.kv("objects", s.tc.objects);
  j.kv("bytes", s.tc.bytes);
  j.kv("hits", s.tc.hits);
  j.kv("misses", s.tc.misses);
  j.kv("refills", s.tc.refills);
  j.kv("refill_objects", s.tc.refill_objects);
  j.kv("flushes", s.tc.flushes);
  j.kv("flushed_objects", s.tc.flushed_objects);
  j.kv("scavenges", s.tc.scavenges);
  j.end_object();
  j.key("prediction");
  j.begin_object();
  const auto src = [&](Source x) REQUIRES(heap_lock) { return c.by_source[size_t(x)]; };
  j.kv("lookups", src(Source::kHit) + src(Source::kMiss) + src(Source::kRevalidation));
  for (size_t i = 0; i < size_t(Source::kCount); ++i) j.kv(source_name(Source(i)), c.by_source[i]);
  j.key("class_allocs");
  j.begin_array();
  for (int k = 0; k < s.classes.num_classes() && k < int(Counters::kMaxClasses); ++k) j.value(c.class_allocs[k]);
  j.end_array();
  s.predictor->stats(j);
  j.end_object();
  j.key("counters");
  j.begin_object();
  for (const auto& [k, v] : s.policy->counters()) j.kv(k, v);
  j.end_object();
  j.end_object();
  j.newline();

  write_atomically(expand(s.cfg.stats_path), j.str());
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) return;  // an unwritable file must not take the program down
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w <= 0) break;
    off += size_t(w);
  }
  ::close(fd);
  if (off == text.size()) std::rename(tmp.c_str(), path.c_str());
  else ::unlink(tmp.c_str());
}

}  // namespace lalloc
