/* In-process symbolizer: return addresses -> frame strings, with no malloc on lookup.
 *
 * It mirrors the offline symbolizer (core/symbolize/) without DWARF inline
 * frames, so a model trained offline sees the same frame strings online:
 *   - address -> module (latest loaded first) -> virtual address (address - 1 - bias:
 *     every captured address is a return address);
 *   - function symbols of .symtab, then .dynsym; a module without .symtab uses its
 *     separate debug file's, found as offline (symbolize.find_debug_file): by build id
 *     under LIFETIME_DEBUG_DIR (':'-separated) then /usr/lib/debug, or through
 *     .gnu_debuglink with its CRC32 checked (read at index time, never in malloc);
 *   - where symbols nest the innermost wins
 *     (latest start, then smallest); equal ranges keep the best binding, then fewer
 *     leading underscores, then the smaller name;
 *   - C++ names demangled with libiberty's cplus_demangle_v3_callback (the demangler
 *     behind __cxa_demangle, which cxxfilt calls offline), whose callback form uses
 *     only the stack;
 *   - an unnamed frame is "<name+?>" with the module's version-free name
 *     (lt_module_name, the rule of symbolize.module_name: libglib-2.0.so.0.7400.6 ->
 *     libglib), an unmapped one "<unknown+?>";
 *   - allocator frames are stripped from the top by the rules of
 *     symbolize.strip_allocator_frames (rules 1-4; there are no inline frames here).
 *
 * Indexing (lt_symtab_refresh; symtab_index.c) runs at start-up and after a dlopen
 * (the sampler's flush; the allocator's model path, at most once a second, in the
 * allocation whose model run comes due: online.c refresh_due): it reads each new
 * module's file (and its debug file) into compact tables in an index arena -- 16-byte
 * entries and front-coded names of the symbols kept -- and unmaps the files.  Lookups
 * only read the arena, with no malloc and no lock: modules are appended, never
 * removed (a dlclose'd module's index stays valid), and published with a release
 * store of the count.
 */
#include "symtab.h"

#include <libiberty/demangle.h>
#include <link.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "symtab_index.h"

#define LT_SYM_MODULES 1024

static struct lt_module *modules; /* LT_SYM_MODULES entries, mmap'd */
static _Atomic size_t module_count;
static lt_lock index_lock;        /* serializes refreshes, never held by lookups */

/* ---------------- module names (symbolize.module_name) ---------------- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* The module's name without its version, as [*start, *start + return) of path: the
 * basename (trailing '/' and " (deleted)" dropped), cut at the first ".so" that ends
 * it or is followed by '.', and at a ".cpython-", ".pypy" or ".abi3" tag; then one
 * trailing version dropped -- the run of digits and dots at the end from its first
 * digit, with the '-', '_' or '.' before it, or with none if the run holds a dot --
 * if what is left ends in an ASCII letter.  No malloc; pinned against the Python rule
 * by tests/data/module_token_vectors.json. */
size_t lt_module_name(const char *path, size_t len, const char **start) {
  size_t n = len;
  while (n > 0 && path[n - 1] == '/') n--;
  static const char deleted[] = " (deleted)";
  if (n >= sizeof deleted - 1 && memcmp(path + n - (sizeof deleted - 1), deleted,
                                        sizeof deleted - 1) == 0)
    n -= sizeof deleted - 1;
  size_t b = n;
  while (b > 0 && path[b - 1] != '/') b--;
  if (b == n) { /* nothing after the last '/': the path itself, as offline */
    *start = path;
    return len;
  }
  const char *s = path + b;
  size_t base_len = n - b, m = base_len;
  for (size_t i = 0; i + 3 <= m; i++)
    if (memcmp(s + i, ".so", 3) == 0 && (i + 3 == m || s[i + 3] == '.')) { m = i; break; }
  static const char *const tags[] = {".cpython-", ".pypy", ".abi3", NULL};
  for (int t = 0; tags[t]; t++) {
    size_t tl = strlen(tags[t]);
    for (size_t i = 0; i + tl <= m; i++)
      if (memcmp(s + i, tags[t], tl) == 0) { m = i; break; }
  }
  size_t j = m;
  while (j > 0 && (is_digit(s[j - 1]) || s[j - 1] == '.')) j--;
  size_t k = j;
  while (k < m && s[k] == '.') k++;
  if (k < m) { /* s[k, m): digits and dots, from a digit */
    int sep = k > 0 && (s[k - 1] == '-' || s[k - 1] == '_' || s[k - 1] == '.');
    size_t rest = sep ? k - 1 : k;
    if ((sep || memchr(s + k, '.', m - k)) && rest > 0 && is_letter(s[rest - 1])) m = rest;
  }
  *start = s;
  return m ? m : base_len;
}


static int add_module(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size; (void)ctx;
  const char *name = info->dlpi_name;
  char path[PATH_MAX];
  if (!name || !*name) {
    if (info->dlpi_addr != 0 && lt_exe[0] == 0) return 0;
    /* the main program (bias 0 for a non-PIE executable) */
    if (!lt_exe[0]) return 0;
    lt_strlcpy(path, lt_exe, sizeof path);
  } else if (name[0] != '/' || !realpath(name, path)) {
    return 0; /* linux-vdso.so.1 and the like: not a file, so unmapped offline too */
  }
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
    if (a < lo) lo = a;
    if (b > hi) hi = b;
  }
  if (lo >= hi) return 0;
  size_t n = atomic_load_explicit(&module_count, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) /* already indexed (same place, same file) */
    if (modules[i].bias == info->dlpi_addr && modules[i].lo == lo &&
        strcmp(modules[i].path, path) == 0)
      return 0;
  if (n >= LT_SYM_MODULES) return 0;
  struct lt_module *m = &modules[n];
  memset(m, 0, sizeof *m);
  m->bias = info->dlpi_addr;
  m->lo = lo;
  m->hi = hi;
  m->path = lt_symtab_strdup(path);
  if (!m->path) return 0;
  const char *slash = strrchr(m->path, '/');
  m->base = slash ? slash + 1 : m->path;
  m->name_len = lt_module_name(m->path, strlen(m->path), &m->name);
  lt_symtab_index(m);
  atomic_store_explicit(&module_count, n + 1, memory_order_release);
  return 0;
}

int lt_symtab_refresh(void) {
  if (!modules) {
    modules = lt_map(LT_SYM_MODULES * sizeof *modules);
    if (!modules) return 0;
  }
  lt_lock_acquire(&index_lock);
  dl_iterate_phdr(add_module, NULL);
  lt_lock_release(&index_lock);
  return 1;
}

void lt_symtab_reset_child(void) { lt_lock_reset(&index_lock); }

/* ---------------- lookup ---------------- */

static const struct lt_module *module_of(uintptr_t a) {
  size_t n = atomic_load_explicit(&module_count, memory_order_acquire);
  for (size_t i = n; i-- > 0;) /* latest first, like overlapping mappings offline */
    if (a >= modules[i].lo && a < modules[i].hi) return &modules[i];
  return NULL;
}

/* The innermost symbol containing v: among the entries that contain it, the latest
 * start, then the smallest (entries are sorted by start, then size, and no two have
 * the same range).  The walk back from the last start <= v ends where max_end says no
 * earlier entry reaches v, or at a start below the best found. */
/* A compact table's name: the long name, or its block decoded up to it into buf
 * (FC_MAX + 1 bytes). */
static const char *name_of(const struct lt_symtable *t, uint32_t name, char *buf) {
  if (name & FC_LONG) return t->str + (name & ~FC_LONG);
  const char *p = t->code + t->blocks[name / FC_BLOCK];
  uint32_t k = name % FC_BLOCK;
  if (!k) return p;
  size_t len = strlen(p);
  memcpy(buf, p, len + 1);
  p += len + 1;
  while (k--) {
    size_t shared = (unsigned char)*p++;
    len = strlen(p);
    memcpy(buf + shared, p, len + 1);
    p += len + 1;
  }
  return buf;
}

static const char *lookup(const struct lt_symtable *t, uint64_t v, char *buf) {
  if (t->syms) {
    if (v < t->base || v - t->base > UINT32_MAX) return NULL; /* no entry reaches v */
    uint32_t r = (uint32_t)(v - t->base);
    const struct lt_sym *s = t->syms;
    size_t lo = 0, hi = t->n; /* first entry with start > r */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (s[mid].start <= r) lo = mid + 1; else hi = mid;
    }
    const struct lt_sym *best = NULL;
    for (size_t j = lo; j-- > 0 && s[j].max_end > r;) {
      if (best && s[j].start < best->start) break;
      if (r < s[j].end && (!best || s[j].end < best->end)) best = &s[j];
    }
    return best ? name_of(t, best->name, buf) : NULL;
  }
  const struct lt_sym_wide *s = t->wide;
  size_t lo = 0, hi = s ? t->n : 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s[mid].start <= v) lo = mid + 1; else hi = mid;
  }
  const struct lt_sym_wide *best = NULL;
  for (size_t j = lo; j-- > 0 && s[j].max_end > v;) {
    if (best && s[j].start < best->start) break;
    if (v < s[j].end && (!best || s[j].end - s[j].start < best->end - best->start)) best = &s[j];
  }
  return best ? t->str + best->name : NULL;
}

struct sink { char *buf; size_t cap, len; };

static void append(const char *s, size_t n, void *opaque) {
  struct sink *k = opaque;
  if (k->len + 1 >= k->cap) return;
  size_t room = k->cap - 1 - k->len;
  if (n > room) n = room;
  memcpy(k->buf + k->len, s, n);
  k->len += n;
  k->buf[k->len] = 0;
}

size_t lt_symbolize(uintptr_t return_address, char *buf, size_t cap, const char **module_base,
                    int *resolved) {
  struct sink k = {buf, cap, 0};
  if (cap) buf[0] = 0;
  *resolved = 0;
  const struct lt_module *m = module_of(return_address - 1);
  *module_base = m ? m->base : "";
  if (!m) { append("<unknown+?>", 11, &k); return k.len; }
  uint64_t v = (uint64_t)(return_address - 1 - m->bias);
  char decoded[FC_MAX + 1];
  const char *name = lookup(&m->tab[0], v, decoded);
  if (!name) name = lookup(&m->tab[1], v, decoded);
  if (!name) {
    append("<", 1, &k);
    append(m->name, m->name_len, &k);
    append("+?>", 3, &k);
    return k.len;
  }
  *resolved = 1;
  if (name[0] == '_' && name[1] == 'Z' &&
      cplus_demangle_v3_callback(name, DMGL_PARAMS | DMGL_TYPES, append, &k) && k.len)
    return k.len;
  k.len = 0;
  append(name, strlen(name), &k);
  return k.len;
}

/* ---------------- allocator frames (symbolize.allocator_rule) ---------------- */

static int starts(const char *s, size_t n, const char *p) {
  size_t m = strlen(p);
  return n >= m && memcmp(s, p, m) == 0;
}

static int is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static size_t match_close(const char *s, size_t n, size_t i) {
  int depth = 0;
  for (size_t j = i; j < n; j++) {
    char c = s[j];
    if (c == '(' || c == '[' || c == '{' || c == '<') depth++;
    else if ((c == ')' || c == ']' || c == '}' || c == '>') && --depth == 0) return j;
  }
  return n ? n - 1 : 0;
}

static size_t skip_operator(const char *s, size_t n, size_t i) {
  if (i + 1 < n && ((s[i] == '(' && s[i + 1] == ')') || (s[i] == '[' && s[i + 1] == ']')))
    return i + 2;
  if (i + 1 < n && s[i] == '"' && s[i + 1] == '"') {
    size_t j = i + 2;
    while (j < n && (s[j] == ' ' || is_alnum(s[j]) || s[j] == '_')) j++;
    return j;
  }
  if (i < n && s[i] == ' ') {
    size_t j = i;
    int depth = 0;
    while (j < n && !(depth == 0 && s[j] == '(')) {
      if (s[j] == '<' || s[j] == '[') depth++;
      else if (s[j] == '>' || s[j] == ']') depth--;
      j++;
    }
    return j;
  }
  size_t j = i;
  while (j < n && s[j] && strchr("<>=!+-*/%^&|~,", s[j])) j++;
  if (j + 1 < n && s[j] == ' ' && s[j + 1] == '<') j++;
  return j;
}

size_t lt_qualified_name(const char *s, size_t n, size_t *start) {
  for (;;) { /* drop trailing " [clone ...]" suffixes */
    if (n == 0 || s[n - 1] != ']') break;
    size_t p = n - 1; /* the '[' that opens this suffix: no ']' in between */
    while (p > 0 && s[p - 1] != '[' && s[p - 1] != ']') p--;
    if (p == 0 || s[p - 1] != '[') break;
    p--;
    if (p == 0 || s[p - 1] != ' ' || !starts(s + p, n - p, "[clone ")) break;
    n = p - 1;
  }
  int depth = 0;
  size_t st = 0, i = 0;
  while (i < n) {
    char c = s[i];
    if (depth == 0 && starts(s + i, n - i, "operator") && (i == 0 || s[i - 1] == ':' ||
        s[i - 1] == ' ') && !(i + 8 < n && (is_alnum(s[i + 8]) || s[i + 8] == '_'))) {
      i = skip_operator(s, n, i + 8);
      continue;
    }
    if (c == '<' || c == '(' || c == '[' || c == '{') {
      if (depth == 0 && c == '(') {
        size_t close = match_close(s, n, i);
        if (starts(s + close + 1, n - close - 1, "::")) {
          i = close + 1;
          continue;
        }
        *start = st;
        return i - st;
      }
      depth++;
    } else if (c == '>' || c == ')' || c == ']' || c == '}') {
      depth = depth > 0 ? depth - 1 : 0;
    } else if (c == ' ' && depth == 0) {
      st = i + 1;
    }
    i++;
  }
  *start = st;
  return n - st;
}

static const char *const allocator_functions[] = {
    "malloc", "calloc", "realloc", "free", "cfree", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "reallocarray", "malloc_usable_size", "strdup",
    "strndup", "wcsdup", "asprintf", "vasprintf", "__strdup", "__strndup", "__asprintf",
    "__vasprintf_internal", "__cxa_allocate_exception", "__cxa_allocate_dependent_exception",
    /* symbolize._GLIBC_INTERNAL, spelled out */
    "_int_malloc", "_int_free", "_int_realloc", "_int_memalign", "_mid_memalign",
    "tcache_init", "malloc_hook_ini", NULL};
static const char *const glibc_entry[] = {"malloc", "calloc", "realloc", "free", "memalign",
                                          "valloc", "pvalloc", "posix_memalign",
                                          "aligned_alloc", "reallocarray", NULL};

static int equals(const char *s, size_t n, const char *p) {
  return strlen(p) == n && memcmp(s, p, n) == 0;
}

static int is_allocator_name(const char *q, size_t n) {
  for (int i = 0; allocator_functions[i]; i++)
    if (equals(q, n, allocator_functions[i])) return 1;
  /* ^(?:__GI_)?(?:__libc_|__)(?:malloc|...)$ */
  if (starts(q, n, "__GI_")) { q += 5; n -= 5; }
  if (starts(q, n, "__libc_")) { q += 7; n -= 7; }
  else if (starts(q, n, "__")) { q += 2; n -= 2; }
  else return 0;
  for (int i = 0; glibc_entry[i]; i++)
    if (equals(q, n, glibc_entry[i])) return 1;
  return 0;
}

int lt_is_allocator_frame(const char *frame, size_t len, const char *module_base, int resolved) {
  if (starts(module_base, strlen(module_base), "liblifetime_sampler")) return 1;
  if (!resolved) {
    static const char *const runtime[] = {"libc.so", "libc-", "libstdc++.so", "ld-linux",
                                          "libgcc_s.so", "libpthread.so", NULL};
    for (int i = 0; runtime[i]; i++)
      if (starts(module_base, strlen(module_base), runtime[i])) return 1;
    return 0;
  }
  size_t st;
  size_t n = lt_qualified_name(frame, len, &st);
  const char *q = frame + st;
  if (is_allocator_name(q, n)) return 1;
  if (starts(q, n, "operator new") || starts(q, n, "operator delete")) return 1;
  /* symbolize.ALLOCATOR_PREFIXES */
  if (starts(q, n, "tcmalloc::") || starts(q, n, "TCMallocInternal")) return 1;
  if (starts(q, n, "std::") || starts(q, n, "__gnu_cxx::") || starts(q, n, "__cxxabiv1::"))
    return 1;
  return 0;
}
