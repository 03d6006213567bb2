/* liblifetime_sampler.so: the process-wide state and start-up (environment, the
 * constructor and destructor).  What the sampler does and how: sampler.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "parse_number.h"
#include "sampler.h"
#include "wire.h"

/* Default mean sampling interval: 512 KiB, 4x denser than TCMalloc's 2 MiB heap
 * profiler (a heap profile only needs the live heap; lifetime modelling wants many
 * samples per allocation site, short-lived ones included).  Cost model, measured by
 * benchmarks/profiler_overhead.py (perf attribution, clang-14 and CPython):
 *   - hooks: ~1-2 ns per malloc/free pair whatever the interval: 0.4% of clang-14's
 *     CPU, 1.3-1.9% for CPython with PYTHONMALLOC=malloc (~5M allocations/s);
 *   - sampling: 2-3 us per sample with warm caches, 5-8 us when samples are sparse
 *     (cold unwind-rule and stack tables), i.e. about rate/interval * 6 us: 0.5-0.7%
 *     for clang (450 MB/s) at 512 KiB, ~2x that at 256 KiB, ~3% at 64 KiB.
 * 512 KiB keeps allocation-heavy programs at or under the 2% CPU budget; pass a
 * smaller LIFETIME_INTERVAL_BYTES for more data (64 KiB stays under 15%). */
#define LT_DEFAULT_INTERVAL (512 * 1024)

struct lt_global lt_g;

pthread_key_t lt_thread_key;
int lt_have_thread_key;
uint64_t lt_page_size = 4096;
int lt_symbolize_stacks;

/* ---------------- initialisation ---------------- */

static void disable(const char *a, const char *b, const char *c) {
  lt_log(a, b, c);
  atomic_store(&lt_g.state, LT_DISABLED);
}

static int env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out, const char *what) {
  const char *s = getenv(name);
  if (!s) return 1;
  uint64_t v;
  if (lt_parse_u64(s, &v) != LT_NUMBER_OK || v < lo || v > hi) {
    char msg[512];
    size_t n = lt_strlcpy(msg, name, sizeof msg);
    n += lt_strlcpy(msg + n, "='", sizeof msg - n);
    n += lt_strlcpy(msg + n, s, sizeof msg - n > 64 ? 64 : sizeof msg - n);
    n += lt_strlcpy(msg + n, "' is not ", sizeof msg - n);
    lt_strlcpy(msg + n, what, sizeof msg - n);
    disable(msg, "; sampling disabled", NULL);
    return 0;
  }
  *out = v;
  return 1;
}

void lt_global_init(struct lt_thread *t) {
  (void)t;
  if (!environ) return; /* too early (inside the dynamic loader): try again later */
  int expected = LT_UNINIT;
  if (!atomic_compare_exchange_strong(&lt_g.state, &expected, LT_INITIALIZING)) return;
  lt_crc32c_init();
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0) lt_page_size = (uint64_t)ps;

  const char *dir = getenv("LIFETIME_OUT_DIR");
  if (!dir || !*dir) {
    disable("LIFETIME_OUT_DIR is not set; sampling disabled", NULL, NULL);
    return;
  }
  uint64_t interval = LT_DEFAULT_INTERVAL, frames = LT_MAX_FRAMES, flush_ms = 1000, seed = 0;
  uint64_t full_trace = 0, capacity = LT_FULL_DEFAULT_CAPACITY, buffer = LT_FULL_DONE_CAP;
  if (!env_u64("LIFETIME_INTERVAL_BYTES", 1, 1ull << 40, &interval, "a positive integer (bytes)"))
    return;
  if (!env_u64("LIFETIME_MAX_FRAMES", 1, LT_MAX_FRAMES, &frames, "an integer in 1..128")) return;
  if (!env_u64("LIFETIME_FLUSH_MS", 0, 86400000, &flush_ms, "an integer in 0..86400000 (ms)"))
    return;
  if (!env_u64("LIFETIME_FULL_TRACE", 0, 1, &full_trace, "0 or 1")) return;
  if (!env_u64("LIFETIME_FULL_TRACE_CAPACITY", 1, LT_FULL_MAX_CAPACITY, &capacity,
               "an integer in 1..268435456 (live objects)"))
    return;
  if (!env_u64("LIFETIME_FULL_TRACE_BUFFER", 16, 1u << 24, &buffer,
               "an integer in 16..16777216 (records)"))
    return;
  /* Fault injection for tests (tests/test_sampler_full_trace.py): a chunk overflow
   * cannot happen with flush.c's size bounds, so its accounting is tested by this. */
  uint64_t overflow_chunk = 0;
  if (!env_u64("LIFETIME_TEST_OVERFLOW_CHUNK", 0, UINT64_MAX, &overflow_chunk,
               "an unsigned integer (a chunk number)"))
    return;
  lt_g.test_overflow_chunk = overflow_chunk;
  const char *seed_s = getenv("LIFETIME_SEED");
  if (seed_s && !env_u64("LIFETIME_SEED", 0, UINT64_MAX, &seed, "an unsigned integer")) return;
  const char *unw = getenv("LIFETIME_UNWINDER");
  int unwinder = LT_UNWIND_BUILTIN;
  if (unw && *unw) {
    if (strcmp(unw, "builtin") == 0) unwinder = LT_UNWIND_BUILTIN;
    else if (strcmp(unw, "glibc") == 0) unwinder = LT_UNWIND_GLIBC;
    else if (strcmp(unw, "libunwind") == 0) unwinder = LT_UNWIND_LIBUNWIND;
    else if (strcmp(unw, "check") == 0) unwinder = LT_UNWIND_CHECK;
    else {
      disable("LIFETIME_UNWINDER='", unw,
              "' is not builtin, glibc, libunwind or check; sampling disabled");
      return;
    }
  }
  const char *label = getenv("LIFETIME_VERSION_LABEL");
  lt_strlcpy(lt_g.version_label, label ? label : "", sizeof lt_g.version_label);

  /* The directory must exist and take a new file: probe by creating one. */
  if (dir[0] == '/') {
    lt_strlcpy(lt_g.out_dir, dir, sizeof lt_g.out_dir);
  } else {
    if (!getcwd(lt_g.out_dir, sizeof lt_g.out_dir - 2)) lt_g.out_dir[0] = 0;
    size_t n = strlen(lt_g.out_dir);
    lt_strlcpy(lt_g.out_dir + n, "/", sizeof lt_g.out_dir - n);
    lt_strlcpy(lt_g.out_dir + n + 1, dir, sizeof lt_g.out_dir - n - 1);
  }
  struct stat st;
  if (stat(lt_g.out_dir, &st) != 0) {
    disable("LIFETIME_OUT_DIR=", lt_g.out_dir,
            errno == ENOENT ? " does not exist; sampling disabled"
                            : " cannot be accessed; sampling disabled");
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    disable("LIFETIME_OUT_DIR=", lt_g.out_dir, " is not a directory; sampling disabled");
    return;
  }
  lt_g.pid = lt_getpid();
  lt_g.ppid = (uint32_t)getppid();
  char probe[4096 + 64], num[24];
  size_t pn = lt_strlcpy(probe, lt_g.out_dir, sizeof probe);
  pn += lt_strlcpy(probe + pn, "/.lifetime-probe.", sizeof probe - pn);
  lt_strlcpy(probe + pn, lt_utoa(lt_g.pid, num), sizeof probe - pn);
  int fd = lt_open_high(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) { /* stale probe of a dead process with our pid */
    unlink(probe);
    fd = lt_open_high(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) {
    disable("LIFETIME_OUT_DIR=", lt_g.out_dir, " is not writable; sampling disabled");
    return;
  }
  close(fd);
  unlink(probe);

  lt_g.full_trace = (int)full_trace;
  lt_g.live_capacity = full_trace ? capacity : LT_LIVE_CAP;
  lt_g.done_capacity = full_trace ? buffer : LT_DONE_CAP;
  if (!lt_stacks_init() || !lt_live_init() || !lt_flush_init() || !lt_unwind_prepare()) {
    disable("cannot map the sampler's tables; sampling disabled", NULL, NULL);
    return;
  }
  lt_g.interval = full_trace ? 1 : interval; /* a full trace: every byte a sample point */
  lt_g.max_frames = (int)frames;
  lt_g.flush_ms = flush_ms;
  lt_g.have_seed = seed_s != NULL;
  lt_g.seed = seed;
  lt_g.unwinder = unwinder;
  lt_g.start_unix_ns = lt_unix_ns();
  lt_g.start_mono_ns = lt_mono_ns();
  const char *base;
  lt_program_name(lt_exe, sizeof lt_exe, &base);
  lt_strlcpy(lt_program, base, sizeof lt_program);
  lt_make_path();
  lt_g.file_gen = lt_g.mark_gen = lt_g.gen_seq = 1;
  atomic_store(&lt_g.next_flush_ns, lt_next_deadline(lt_g.start_mono_ns));
  lt_have_thread_key = pthread_key_create(&lt_thread_key, lt_thread_exit_fold) == 0;
  atomic_store_explicit(&lt_g.state, LT_ACTIVE, memory_order_release);
}

#ifdef LT_HARNESS
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
#endif

__attribute__((constructor(101))) static void lt_constructor(void) {
#ifdef LT_HARNESS
  /* glibc's malloc sets itself up on its first call (malloc.c: ptmalloc_init, glibc
   * 2.36) without a lock, giving the calling thread main_arena on main_arena's one
   * attachment; it counts on that call coming before a second thread exists.  Under a
   * sanitizer nothing calls glibc's malloc but these hooks (the sanitizer has its own),
   * so the harness's threads made the first calls together: two could both take
   * main_arena on that one count, and the second to exit aborted in glibc
   * ("__malloc_arena_thread_freeres: a->attached_threads > 0", about 1 ASan run of the
   * stress harness in 30).  Set it up here, in the main thread, before main. */
  __libc_free(__libc_malloc(1));
#endif
  struct lt_thread *t = &lt_tls;
  uint64_t saved = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  if (atomic_load(&lt_g.state) == LT_UNINIT) lt_global_init(t);
  if (atomic_load(&lt_g.state) == LT_ACTIVE) {
#ifndef LT_HARNESS
    lt_resolve_exec();
#endif
    pthread_atfork(lt_fork_prepare, lt_fork_parent, lt_fork_child);
#ifndef LT_HARNESS
    at_quick_exit(lt_quick_exit_finish);
#endif
    if (!lt_unwind_init(lt_g.unwinder))
      lt_log("LIFETIME_UNWINDER: cannot load that unwinder; using the builtin one", NULL, NULL);
#ifndef LT_HARNESS
    const char *sym = getenv("LIFETIME_SYMBOLIZE");
    if (sym && strcmp(sym, "1") == 0 && lt_symtab_refresh()) lt_symbolize_stacks = 1;
    lt_online_init();
#endif
  }
  t->countdown = saved;
  t->in_sampler = 0;
}

__attribute__((destructor)) static void lt_destructor(void) { lt_finish(LT_END_EXIT); }

#ifdef LT_HARNESS
/* For the sanitizer harness: the end of the "process" on demand. */
LT_EXPORT void lt_harness_finish(void) { lt_finish(LT_END_EXIT); }
#endif
