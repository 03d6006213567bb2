/* glibc's malloc API beyond allocation, for tests/test_allocator_api.py: one subcommand
   per check, each printing key=value lines (then "ok"), run under the allocator and under
   glibc as the reference.  mallinfo2 with ~200 MB live; malloc_trim's RSS (statm);
   malloc_info's XML; mallopt's answers; free_sized (looked up: glibc 2.36 has none);
   aligned_alloc and the other aligned calls; free/realloc of memory no allocator gave
   (the allocator's rule; not for glibc); an invalid pointer inside the heap (aborts). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

/* read(2), not stdio: a FILE's buffer is a malloc, and a trim after it would have that
   block's page to give back. */
static long rss_bytes(void) {
  long size, resident;
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) DIE("statm");
  buf[n] = 0;
  if (sscanf(buf, "%ld %ld", &size, &resident) != 2) DIE("statm");
  return resident * sysconf(_SC_PAGESIZE);
}

static void print_mallinfo(const char* tag) {
  struct mallinfo2 m = mallinfo2();
  printf("%s.arena=%zu\n%s.ordblks=%zu\n%s.smblks=%zu\n%s.hblks=%zu\n%s.hblkhd=%zu\n%s.usmblks=%zu\n"
         "%s.fsmblks=%zu\n%s.uordblks=%zu\n%s.fordblks=%zu\n%s.keepcost=%zu\n",
         tag, m.arena, tag, m.ordblks, tag, m.smblks, tag, m.hblks, tag, m.hblkhd, tag, m.usmblks,
         tag, m.fsmblks, tag, m.uordblks, tag, m.fordblks, tag, m.keepcost);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo o = mallinfo();
#pragma GCC diagnostic pop
  printf("%s.int_uordblks=%d\n%s.int_arena=%d\n%s.int_hblkhd=%d\n", tag, o.uordblks, tag, o.arena, tag, o.hblkhd);
}

/* ~200 MB live in objects of 1..8 KiB, plus 4 objects of 3 MiB (past a huge page). */
static int cmd_mallinfo(void) {
  enum { N = 50000, BIG = 4 };
  static void* p[N];
  void* big[BIG];
  uint64_t s = 7;
  size_t requested = 0, usable = 0, big_bytes = 0;
  print_mallinfo("before");
  for (int i = 0; i < N; ++i) {
    size_t n = 1024 + rnd(&s) % 7168;
    p[i] = malloc(n);
    if (!p[i]) DIE("malloc(%zu)", n);
    memset(p[i], 1, n);
    requested += n;
    usable += malloc_usable_size(p[i]);
  }
  for (int i = 0; i < BIG; ++i) {
    big[i] = malloc(3 << 20);
    if (!big[i]) DIE("malloc(3 MiB)");
    memset(big[i], 1, 3 << 20);
    big_bytes += 3 << 20;
  }
  printf("requested=%zu\nusable=%zu\nbig_bytes=%zu\n", requested, usable, big_bytes);
  print_mallinfo("live");
  for (int i = 0; i < BIG; ++i) free(big[i]);
  for (int i = 0; i < N; ++i) free(p[i]);
  print_mallinfo("freed");
  return 0;
}

/* 96 MiB of 64 KiB objects, touched, freed: what stays committed, then malloc_trim
   (threshold >= 0: mallopt(M_TRIM_THRESHOLD, threshold) first). */
static int cmd_trim(int threshold) {
  enum { N = 1536 };
  static void* p[N];
  if (threshold >= 0) printf("mallopt=%d\n", mallopt(M_TRIM_THRESHOLD, threshold));
  long base = rss_bytes();
  for (int i = 0; i < N; ++i) {
    p[i] = malloc(64 << 10);
    if (!p[i]) DIE("malloc");
    memset(p[i], 1, 64 << 10);
  }
  long live = rss_bytes();
  for (int i = 0; i < N; ++i) free(p[i]);
  long freed = rss_bytes();
  struct mallinfo2 m = mallinfo2();
  int r = malloc_trim(0);
  long trimmed = rss_bytes();
  int again = malloc_trim(0);
  printf("rss_base=%ld\nrss_live=%ld\nrss_freed=%ld\nkeepcost=%zu\nordblks=%zu\ntrim=%d\nrss_trimmed=%ld\ntrim_again=%d\n",
         base, live, freed, m.keepcost, m.ordblks, r, trimmed, again);
  return 0;
}

/* 16 MiB of 1 KiB objects; then every other span's objects freed, and all but the first
   object of the spans between (8 objects to an 8 KiB span: its second 4 KiB page holds
   free places only).  malloc_trim gives back the free pages and the pages of free places
   at once, not after the subrelease horizon. */
static int cmd_trim_sparse(void) {
  enum { N = 16384, PER_SPAN = 8 };
  static void* p[N];
  long base = rss_bytes();
  for (int i = 0; i < N; ++i) {
    p[i] = malloc(1000);
    if (!p[i]) DIE("malloc");
    memset(p[i], 1, 1000);
  }
  long live = rss_bytes();
  for (int i = 0; i < N; ++i)
    if ((i / PER_SPAN) % 2 == 1 || i % PER_SPAN != 0) free(p[i]);
  long freed = rss_bytes();
  int r = malloc_trim(0);
  long trimmed = rss_bytes();
  printf("rss_base=%ld\nrss_live=%ld\nrss_freed=%ld\ntrim=%d\nrss_trimmed=%ld\n", base, live, freed, r, trimmed);
  for (int i = 0; i < N; i += 2 * PER_SPAN) free(p[i]);
  return 0;
}

static int cmd_info(void) {
  void* keep[100];
  for (int i = 0; i < 100; ++i) keep[i] = malloc(100 + i);
  void* big = malloc(5 << 20);
  puts("--xml--");
  fflush(stdout);
  if (malloc_info(0, stdout) != 0) DIE("malloc_info(0) failed");
  fflush(stdout);
  puts("--end--");
  errno = 0;
  int r = malloc_info(1, stdout);
  printf("info1=%d\ninfo1_errno=%d\n", r, errno);
  malloc_stats();
  for (int i = 0; i < 100; ++i) free(keep[i]);
  free(big);
  return 0;
}

static int cmd_mallopt(void) {
  static const struct { const char* name; int param, value; } opts[] = {
      {"M_MXFAST", M_MXFAST, 64},           {"M_MXFAST_big", M_MXFAST, 1000},
      {"M_MXFAST_neg", M_MXFAST, -1},       {"M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, 128 << 10},
      {"M_TRIM_THRESHOLD_never", M_TRIM_THRESHOLD, -1}, {"M_TOP_PAD", M_TOP_PAD, 0},
      {"M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, 1 << 20}, {"M_MMAP_MAX", M_MMAP_MAX, 65536},
      {"M_CHECK_ACTION", M_CHECK_ACTION, 3}, {"M_PERTURB", M_PERTURB, 0},
      {"M_ARENA_TEST", M_ARENA_TEST, 8},    {"M_ARENA_MAX", M_ARENA_MAX, 2},
      {"unknown_12345", 12345, 1},          {"unknown_M_GRAIN", 3, 1}};
  for (size_t i = 0; i < sizeof opts / sizeof *opts; ++i)
    printf("%s=%d\n", opts[i].name, mallopt(opts[i].param, opts[i].value));
  void* p = malloc(10);  /* the allocator still works */
  free(p);
  return 0;
}

/* C23's sized frees: glibc 2.36 has neither, so they are looked up. */
static int cmd_sized(void) {
  void (*fs)(void*, size_t) = (void (*)(void*, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  void (*fas)(void*, size_t, size_t) = (void (*)(void*, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
  printf("free_sized=%s\nfree_aligned_sized=%s\n", fs ? "present" : "absent", fas ? "present" : "absent");
  if (!fs || !fas) return 0;
  size_t start = mallinfo2().uordblks;
  for (int i = 0; i < 200000; ++i) {
    void* p = malloc(1000);
    memset(p, 1, 1000);
    fs(p, 1000);
    void* q = aligned_alloc(256, 5000);
    memset(q, 1, 5000);
    fas(q, 256, 5000);
  }
  /* 200 000 x 6 KB pairs: had they leaked, 1.2 GB */
  printf("uordblks_growth=%zd\n", (ssize_t)(mallinfo2().uordblks - start));
  return 0;
}

static void report(const char* name, void* p, size_t align) {
  int e = errno;
  printf("%s=%s errno=%d aligned=%d usable_ge=%zu\n", name, p ? "ptr" : "null", p ? 0 : e,
         p ? (int)((uintptr_t)p % align == 0) : -1, p ? malloc_usable_size(p) : 0);
  free(p);
}

static int cmd_aligned(void) {
  void* p;
  errno = 0; report("aligned_alloc_24_100", aligned_alloc(24, 100), 32);
  errno = 0; report("aligned_alloc_0_100", aligned_alloc(0, 100), 16);
  errno = 0; report("aligned_alloc_3_100", aligned_alloc(3, 100), 4);
  errno = 0; report("aligned_alloc_64_100", aligned_alloc(64, 100), 64);   /* size not a multiple */
  errno = 0; report("aligned_alloc_4096_1", aligned_alloc(4096, 1), 4096);
  errno = 0; report("aligned_alloc_1_10", aligned_alloc(1, 10), 1);
  errno = 0; report("aligned_alloc_huge_align", aligned_alloc(((size_t)1 << 63) + 1, 10), 1);
  errno = 0; report("memalign_24_100", memalign(24, 100), 32);
  errno = 0; report("memalign_0_100", memalign(0, 100), 16);
  errno = 0; report("valloc_10", valloc(10), 4096);
  errno = 0; report("pvalloc_10", pvalloc(10), 4096);
  printf("pvalloc_usable_page=%d\n", (p = pvalloc(10)) && malloc_usable_size(p) >= 4096);
  free(p);
  p = NULL;
  printf("posix_memalign_24=%d\n", posix_memalign(&p, 24, 16));
  printf("posix_memalign_4=%d\n", posix_memalign(&p, 4, 16));
  printf("posix_memalign_0=%d\n", posix_memalign(&p, 0, 16));
  int r = posix_memalign(&p, 64, 100);
  printf("posix_memalign_64=%d aligned=%d\n", r, r == 0 && (uintptr_t)p % 64 == 0);
  if (r == 0) free(p);
  return 0;
}

/* Memory no allocator handed out: free leaves it, realloc moves it (as much of it as is
   readable: here the page before an unmapped one). */
static int cmd_foreign(void) {
  unsigned char* m = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) DIE("mmap");
  munmap(m + 4096, 4096);
  fill(m, 4096, 3);
  free(m);  /* left */
  verify(m, 4096, 3, "after free");
  unsigned char* q = realloc(m, 100);
  if (!q || q == m) DIE("realloc(foreign, 100) = %p", (void*)q);
  verify(q, 100, 3, "realloc 100");
  unsigned char* r = realloc(m + 16, 8192);  /* runs into the unmapped page: copies 4080 */
  if (!r) DIE("realloc(foreign, 8192)");
  for (size_t i = 0; i < 4080; ++i)
    if (r[i] != (unsigned char)(3 * 131 + (i + 16) * 7)) DIE("realloc 8192: byte %zu", i);
  memset(r, 0, 8192);
  verify(m, 4096, 3, "the old block is left");
  errno = 0;
  void* z = realloc(m, 0);
  printf("realloc_zero=%s errno=%d\n", z ? "ptr" : "null", errno);
  void* n = reallocarray(m, 10, 10);
  if (!n) DIE("reallocarray(foreign)");
  verify(n, 100, 3, "reallocarray 100");
  free(q);
  free(r);
  free(n);
  printf("usable_foreign=%zu\n", malloc_usable_size(m));
  return 0;
}

static int cmd_invalid(const char* how) {
  char* p = malloc(100);
  memset(p, 1, 100);
  if (!strcmp(how, "free")) free(p + 16);
  else if (!strcmp(how, "realloc")) p = realloc(p + 16, 10);
  else DIE("invalid: free or realloc");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) DIE("usage: alloc_api mallinfo|trim [THRESHOLD]|info|mallopt|sized|aligned|foreign|invalid free|realloc");
  const char* c = argv[1];
  int rc;
  if (!strcmp(c, "mallinfo")) rc = cmd_mallinfo();
  else if (!strcmp(c, "trim")) rc = cmd_trim(argc > 2 ? atoi(argv[2]) : -1);
  else if (!strcmp(c, "trim_sparse")) rc = cmd_trim_sparse();
  else if (!strcmp(c, "info")) rc = cmd_info();
  else if (!strcmp(c, "mallopt")) rc = cmd_mallopt();
  else if (!strcmp(c, "sized")) rc = cmd_sized();
  else if (!strcmp(c, "aligned")) rc = cmd_aligned();
  else if (!strcmp(c, "foreign")) rc = cmd_foreign();
  else if (!strcmp(c, "invalid") && argc > 2) rc = cmd_invalid(argv[2]);
  else DIE("unknown subcommand %s", c);
  puts("ok");
  return rc;
}
