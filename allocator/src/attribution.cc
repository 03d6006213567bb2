// LIFETIME_ALLOC_ATTRIBUTE: attribution.h says what and why.
#include "attribution.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <new>
#include <set>
#include <string>
#include <utility>

#include "backing.h"
#include "config.h"
#include "fatal.h"
#include "heap_internal.h"
#include "json.h"
#include "state.h"
#include "thread_cache.h"

extern "C" {
int lalloc_attr_capture_init(void);
int lalloc_attr_capture(uintptr_t* out, int max, uintptr_t caller_ra, int* first);
void lalloc_attr_thread_end(void);
const char* lalloc_attr_exe(void);
}

namespace lalloc {
namespace attr {

std::atomic<bool> g_on{false};

namespace {

// The reservation and its table (Backing's; fixed once init has reserved it).
uintptr_t g_base = 0;
uint64_t g_total = 0;
uint32_t* g_index = nullptr;
std::atomic<bool> g_ready{false};  // start() ran and the unwinder can walk
__thread bool t_capturing __attribute__((tls_model("initial-exec"))) = false;

// The stacks: an id per distinct stack, its frames in g_frames[id].  Lookups are
// lock-free (open addressing on the stack's hash; a slot's id is stored last, with
// release, once the stack's frames and hash are written; slots are never emptied);
// inserts take g_intern.
constexpr int kMaxFrames = 64;
constexpr uint32_t kSlots = uint32_t(1) << 16;
constexpr uint32_t kMaxStacks = kSlots / 2;  // the table stays at most half full
struct Slot {
  std::atomic<uint32_t> id;
  uint64_t hash;
};
Slot* g_slots = nullptr;
uintptr_t* g_frames = nullptr;  // [kFirstStack + kMaxStacks][kMaxFrames]
uint32_t* g_depth = nullptr;
Mutex g_intern{};
uint32_t g_nstacks GUARDED_BY(g_intern) = kFirstStack;
std::atomic<uint64_t> g_counts[kFirstStack] = {};  // allocations given a reserved id

// Dumps: the signal's flag, the next interval's time, the sequence number.
std::atomic<bool> g_pending{false};
pthread_key_t g_thread_key;  // its destructor ends the thread's unwinder memo
bool g_key_made = false;
int g_signal = 0;  // LIFETIME_ALLOC_ATTRIBUTE_SIGNAL (set by setup, read by start)
uint64_t g_next_ns = 0, g_seq = 0;

uint64_t hash_frames(const uintptr_t* f, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ uint64_t(n);
  for (int i = 0; i < n; ++i) {
    h ^= f[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

bool same(uint32_t id, const uintptr_t* f, int n) {
  return g_depth[id] == uint32_t(n) && std::memcmp(g_frames + size_t(id) * kMaxFrames, f, size_t(n) * sizeof *f) == 0;
}

uint32_t find(uint64_t h, const uintptr_t* f, int n, uint32_t& i) {
  for (i = uint32_t(h) & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const uint32_t id = g_slots[i].id.load(std::memory_order_acquire);
    if (id == 0) return 0;
    if (g_slots[i].hash == h && same(id, f, n)) return id;
  }
}

uint32_t intern(const uintptr_t* f, int n) {
  const uint64_t h = hash_frames(f, n);
  uint32_t i;
  if (const uint32_t id = find(h, f, n, i)) return id;
  g_intern.lock();
  uint32_t id = find(h, f, n, i);  // (another thread may have added it since)
  if (id == 0) {
    if (g_nstacks >= kFirstStack + kMaxStacks) {
      id = kFull;
    } else {
      id = g_nstacks++;
      std::memcpy(g_frames + size_t(id) * kMaxFrames, f, size_t(n) * sizeof *f);
      g_depth[id] = uint32_t(n);
      g_slots[i].hash = h;
      g_slots[i].id.store(id, std::memory_order_release);
    }
  }
  g_intern.unlock();
  return id;
}

void* map_or_die(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fatal("LIFETIME_ALLOC_ATTRIBUTE: cannot map the table of stacks");
  return p;
}

void on_signal(int) { g_pending.store(true, std::memory_order_relaxed); }

// The process's executable mappings from /proc/self/maps (no lock taken: dl_iterate_phdr
// would take the loader's, which a thread in dlopen holds while it mallocs).
void write_mappings(sim::JsonWriter& j) {
  j.key("mappings");
  j.begin_array();
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  std::string text;
  if (fd >= 0) {
    char buf[65536];
    for (ssize_t r; (r = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, size_t(r));
    ::close(fd);
  }
  uint64_t id = 1;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    // start-limit perms offset dev inode path
    unsigned long long start = 0, limit = 0, offset = 0;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s %n", &start, &limit, perms, &offset, &path_at) < 4) continue;
    if (perms[2] != 'x' || path_at <= 0 || size_t(path_at) >= line.size() || line[size_t(path_at)] != '/') continue;
    j.begin_object();
    j.kv("id", id++);
    j.kv("start", uint64_t(start));
    j.kv("limit", uint64_t(limit));
    j.kv("file_offset", uint64_t(offset));
    j.kv("path", line.substr(size_t(path_at)));
    j.kv("build_id", "");
    j.end_object();
  }
  j.end_array();
}

const char* kReservedNames[kFirstStack] = {"", "<before start-up>", "<inside the unwinder>", "<stacks table full>"};

void dump(uint64_t now, const char* trigger) REQUIRES(heap_lock) {
  State& s = *g_state;
  // Each recorded object: its huge page (the policy's id), stack, usable size.
  struct Cell { uint64_t objects = 0, bytes = 0; };
  std::map<std::pair<uint64_t, uint32_t>, Cell> cells;
  uint64_t live = 0, objects = 0, stale = 0;
  // (read under the lock, which this function holds: the walk's callback uses them)
  const Backing* backing = &s.backing;
  const sim::HeapAllocator* policy = s.policy.get();
  backing->each_committed([&](uintptr_t real, const uint32_t* ent) {
    for (uint64_t i = 0; i < Backing::kHuge / 16; ++i) {
      const uint32_t id = __atomic_load_n(ent + i, __ATOMIC_RELAXED);
      if (id == 0) continue;
      const uint64_t abs = backing->abstract(real + i * 16);
      const uint64_t usable = policy->usable_at(abs);
      if (usable == 0) {  // (an entry the policy no longer knows as an object: not counted)
        ++stale;
        continue;
      }
      Cell& c = cells[{abs / Backing::kHuge, id}];
      ++c.objects;
      c.bytes += usable;
      live += usable;
      ++objects;
    }
  });
  tc::collect_stats();

  sim::JsonWriter j;
  j.begin_object();
  j.kv("format", "lifetime-alloc-attribution-v1");
  j.kv("pid", uint64_t(getpid()));
  j.kv("seq", g_seq);
  j.kv("trigger", trigger);
  j.kv("uptime_ns", now - s.start_ns);
  j.kv("policy", s.policy_name);
  j.kv("predictor", s.predictor->describe());
  j.key("source");
  j.begin_object();
  j.kv("executable_path", lalloc_attr_exe());
  j.end_object();
  write_mappings(j);
  // The stacks with a row, and the reserved ids.
  j.key("stacks");
  j.begin_array();
  {
    std::set<uint32_t> ids;
    for (const auto& [k, c] : cells) ids.insert(k.second);
    for (const uint32_t id : ids) {
      j.begin_object();
      j.kv("id", uint64_t(id));
      j.key("addresses");
      j.begin_array();
      if (id >= kFirstStack)
        for (uint32_t f = 0; f < g_depth[id]; ++f) j.value(uint64_t(g_frames[size_t(id) * kMaxFrames + f]));
      j.end_array();
      if (id < kFirstStack) j.kv("label", kReservedNames[id]);
      j.end_object();
    }
  }
  j.end_array();
  j.key("attribution");
  std::vector<sim::AttributionRow> rows;
  rows.reserve(cells.size());
  for (const auto& [k, c] : cells) rows.push_back({k.first, 1, k.second, 0, c.objects, c.bytes});
  sim::write_attribution_object(*policy, live, objects, rows, j);
  j.key("heap");
  j.begin_object();
  j.kv("committed_bytes", s.backing.committed_bytes());
  j.kv("held_pages", s.backing.held_pages());
  j.kv("subreleased_bytes", s.policy->subreleased_bytes());
  j.kv("policy_objects", s.c.live_objects);
  j.kv("policy_usable_bytes", s.c.live_usable);
  j.kv("thread_cache_objects", s.tc.objects);
  j.kv("thread_cache_bytes", s.tc.bytes);
  j.kv("direct_objects", s.c.direct_objects);
  j.kv("direct_bytes", s.c.direct_bytes);
  j.kv("table_bytes", s.backing.table_bytes());
  j.end_object();
  j.key("recording");
  j.begin_object();
  g_intern.lock();
  j.kv("stacks", uint64_t(g_nstacks - kFirstStack));
  g_intern.unlock();
  j.kv("stacks_capacity", uint64_t(kMaxStacks));
  j.kv("stale_entries", stale);
  j.kv("early_allocs", g_counts[kEarly].load(std::memory_order_relaxed));
  j.kv("nested_allocs", g_counts[kNested].load(std::memory_order_relaxed));
  j.kv("table_full_allocs", g_counts[kFull].load(std::memory_order_relaxed));
  j.end_object();
  j.end_object();
  j.newline();

  const std::string dir = s.cfg.attribute_dir;
  ::mkdir(dir.c_str(), 0777);  // (there already, usually: `lifetime run --attribute` makes it)
  const std::string path = dir + "/attribution." + std::to_string(getpid()) + "." + std::to_string(g_seq++) + ".json";
  write_atomically(path, j.str());
}

}  // namespace

void record(void* p, uintptr_t ra) {
  const uintptr_t a = uintptr_t(p);
  if (a - g_base >= g_total) return;  // an object past a huge page (its own mapping)
  uint32_t id;
  if (!g_ready.load(std::memory_order_acquire)) {
    id = kEarly;
  } else if (t_capturing) {
    id = kNested;
  } else {
    t_capturing = true;
    uintptr_t f[kMaxFrames];
    int first = 0;
    int n = lalloc_attr_capture(f, kMaxFrames, ra, &first);
    // (may calloc for a high key: t_capturing makes that allocation <inside the unwinder>)
    if (first && g_key_made) pthread_setspecific(g_thread_key, reinterpret_cast<void*>(1));
    if (n <= 0) {  // (a stack the unwinder cannot walk: its caller alone)
      f[0] = ra;
      n = 1;
    }
    id = intern(f, n);
    t_capturing = false;
  }
  if (id < kFirstStack) g_counts[id].fetch_add(1, std::memory_order_relaxed);
  __atomic_store_n(g_index + (a - g_base) / 16, id, __ATOMIC_RELAXED);
}

void forget(void* p) {
  const uintptr_t a = uintptr_t(p);
  if (a - g_base < g_total) __atomic_store_n(g_index + (a - g_base) / 16, 0u, __ATOMIC_RELAXED);
}

void setup(const Config& cfg, bool addr_mode, const Backing& backing) {
  if (cfg.attribute_dir.empty()) return;
  if (!addr_mode)
    fatal("LIFETIME_ALLOC_ATTRIBUTE: the policy keeps its objects' slots in the object table (LLAMA's own heap); "
          "attribution needs a policy of size-class heaps (segregated, baseline, size-classes...)");
  g_base = backing.base();
  g_total = backing.reserved_bytes();
  g_index = backing.table();
  g_slots = static_cast<Slot*>(map_or_die(sizeof(Slot) * kSlots));
  g_frames = static_cast<uintptr_t*>(map_or_die(sizeof(uintptr_t) * kMaxFrames * (kFirstStack + kMaxStacks)));
  g_depth = static_cast<uint32_t*>(map_or_die(sizeof(uint32_t) * (kFirstStack + kMaxStacks)));
  g_signal = cfg.attribute_signal;
  g_on.store(true, std::memory_order_relaxed);
}

void start() {
  built();  // (setup has run)
  if (!g_on.load(std::memory_order_relaxed)) return;
  g_key_made = pthread_key_create(&g_thread_key, [](void*) { lalloc_attr_thread_end(); }) == 0;
  if (lalloc_attr_capture_init()) g_ready.store(true, std::memory_order_release);
  if (const int sig = g_signal) {
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

void maybe_dump(uint64_t now) {
  if (g_pending.load(std::memory_order_relaxed)) {
    g_pending.store(false, std::memory_order_relaxed);
    dump(now, "signal");
  }
  if (const uint64_t every = g_state->cfg.attribute_interval_ns) {
    if (g_next_ns == 0) {
      g_next_ns = now + every;  // (the first operation after init: the clock has started)
    } else if (now >= g_next_ns) {
      g_next_ns = now + every;
      dump(now, "interval");
    }
  }
}

// (re-made in place: the analysis cannot see that as taking or letting go of it)
void fork_child() NO_THREAD_SAFETY_ANALYSIS { new (&g_intern) Mutex{}; }

void dump_final(uint64_t now) {
  if (g_on.load(std::memory_order_relaxed)) dump(now, "exit");
}

}  // namespace attr
}  // namespace lalloc
