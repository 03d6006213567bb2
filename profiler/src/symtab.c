/* In-process symbolizer: return addresses -> frame strings, with no malloc on lookup.
 *
 * It mirrors the offline symbolizer (pipeline/symbolize.py) without DWARF inline
 * frames, so a model trained offline sees the same frame strings online:
 *   - address -> module (latest loaded first) -> virtual address (address - 1 - bias:
 *     every captured address is a return address);
 *   - function symbols of .symtab, then .dynsym; where symbols nest the innermost wins
 *     (latest start, then smallest); equal ranges keep the best binding, then fewer
 *     leading underscores, then the smaller name;
 *   - C++ names demangled with libiberty's cplus_demangle_v3_callback (the demangler
 *     behind __cxa_demangle, which cxxfilt calls offline), whose callback form uses
 *     only the stack;
 *   - an unnamed frame is "<basename+?>", an unmapped one "<unknown+?>";
 *   - allocator frames are stripped from the top by the rules of
 *     symbolize.strip_allocator_frames (rules 1-4; there are no inline frames here).
 *
 * Indexing (lt_symtab_refresh) runs at start-up and after each dlopen, never inside
 * an allocation: it maps each module's file read-only and builds sorted symbol arrays
 * in mmap'd memory.  Lookups only read that memory.  Modules are appended, never
 * removed (a dlclose'd module's file mapping stays valid), and published with a
 * release store of the count, so lookups take no lock.
 */
#include "common.h"

#include <elf.h>
#include <fcntl.h>
#include <libiberty/demangle.h>
#include <link.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LT_SYM_MODULES 1024

struct lt_sym {
  uint64_t start, size, max_end; /* max_end: max end over entries [0..i] */
  uint32_t name;                 /* offset in the table's string section */
  uint32_t rank;
};

struct lt_symtable {
  const struct lt_sym *syms;
  size_t n;
  const char *str;
  size_t str_size;
};

struct lt_module {
  uintptr_t bias;
  uintptr_t lo, hi;              /* span of the PT_LOAD segments, in process addresses */
  char path[PATH_MAX];
  const char *base;              /* basename of path */
  struct lt_symtable tab[2];     /* .symtab, .dynsym */
};

static struct lt_module *modules; /* LT_SYM_MODULES entries, mmap'd */
static _Atomic size_t module_count;
static lt_lock index_lock;        /* serializes refreshes, never held by lookups */

/* ---------------- building ---------------- */

static int sym_less(const struct lt_sym *a, const struct lt_sym *b, const char *str) {
  if (a->start != b->start) return a->start < b->start;
  if (a->size != b->size) return a->size < b->size;
  if (a->rank != b->rank) return a->rank < b->rank;
  return strcmp(str + a->name, str + b->name) < 0;
}

static void sift(struct lt_sym *v, size_t i, size_t n, const char *str) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && sym_less(&v[c], &v[c + 1], str)) c++;
    if (!sym_less(&v[i], &v[c], str)) return;
    struct lt_sym t = v[i]; v[i] = v[c]; v[c] = t;
    i = c;
  }
}

static void heapsort_syms(struct lt_sym *v, size_t n, const char *str) {
  for (size_t i = n / 2; i-- > 0;) sift(v, i, n, str);
  for (size_t k = n; k-- > 1;) {
    struct lt_sym t = v[0]; v[0] = v[k]; v[k] = t;
    sift(v, 0, k, str);
  }
}

static uint32_t rank_of(const char *name, int bind) {
  uint32_t b = bind == STB_GLOBAL ? 0 : (bind == STB_WEAK || bind == STB_GNU_UNIQUE) ? 1
             : bind == STB_LOCAL ? 2 : 3;
  uint32_t u = 0;
  while (name[u] == '_' && u < 15) u++;
  return b * 16 + u;
}

/* Reads one symbol section of a mapped ELF file into a sorted, de-duplicated table. */
static void read_table(const uint8_t *file, size_t len, const Elf64_Shdr *sh, int nsec, int type,
                       struct lt_symtable *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < nsec; i++) {
    if (sh[i].sh_type != (Elf64_Word)type || sh[i].sh_entsize != sizeof(Elf64_Sym)) continue;
    if (sh[i].sh_link >= (Elf64_Word)nsec) return;
    const Elf64_Shdr *strs = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > len || strs->sh_offset + strs->sh_size > len) return;
    const Elf64_Sym *syms = (const Elf64_Sym *)(file + sh[i].sh_offset);
    size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
    const char *str = (const char *)file + strs->sh_offset;
    size_t str_size = strs->sh_size;
    if (str_size == 0 || str[str_size - 1] != 0) return;
    size_t keep = 0;
    for (size_t k = 0; k < count; k++) {
      int t = ELF64_ST_TYPE(syms[k].st_info);
      if ((t == STT_FUNC || t == STT_GNU_IFUNC) && syms[k].st_shndx != SHN_UNDEF &&
          syms[k].st_size && syms[k].st_name && syms[k].st_name < str_size)
        keep++;
    }
    if (!keep) return;
    struct lt_sym *v = lt_map(keep * sizeof *v);
    if (!v) return;
    size_t n = 0;
    for (size_t k = 0; k < count; k++) {
      int t = ELF64_ST_TYPE(syms[k].st_info);
      if (!((t == STT_FUNC || t == STT_GNU_IFUNC) && syms[k].st_shndx != SHN_UNDEF &&
            syms[k].st_size && syms[k].st_name && syms[k].st_name < str_size))
        continue;
      v[n++] = (struct lt_sym){.start = syms[k].st_value, .size = syms[k].st_size,
                               .name = syms[k].st_name,
                               .rank = rank_of(str + syms[k].st_name,
                                               ELF64_ST_BIND(syms[k].st_info))};
    }
    heapsort_syms(v, n, str);
    size_t m = 0; /* equal (start, size): the first (best rank, then name) stays */
    for (size_t k = 0; k < n; k++)
      if (!m || v[k].start != v[m - 1].start || v[k].size != v[m - 1].size) v[m++] = v[k];
    uint64_t max_end = 0;
    for (size_t k = 0; k < m; k++) {
      if (v[k].start + v[k].size > max_end) max_end = v[k].start + v[k].size;
      v[k].max_end = max_end;
    }
    *out = (struct lt_symtable){.syms = v, .n = m, .str = str, .str_size = str_size};
    return;
  }
}

/* Maps an ELF file read-only; its section headers in *sh (NULL if not ELF64). */
static const uint8_t *map_elf(const char *path, size_t *len, const Elf64_Shdr **sh, int *nsec) {
  *sh = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) { close(fd); return NULL; }
  *len = (size_t)st.st_size;
  const uint8_t *file = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (file == MAP_FAILED) return NULL;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shentsize != sizeof(Elf64_Shdr) ||
      eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > *len) {
    munmap((void *)file, *len);
    return NULL;
  }
  *sh = (const Elf64_Shdr *)(file + eh->e_shoff);
  *nsec = eh->e_shnum;
  return file;
}

/* The GNU build-id note's bytes (length, 0 if none). */
static size_t build_id(const uint8_t *file, size_t len, const Elf64_Shdr *sh, int nsec,
                       const uint8_t **id) {
  for (int i = 0; i < nsec; i++) {
    if (sh[i].sh_type != SHT_NOTE || sh[i].sh_offset + sh[i].sh_size > len) continue;
    const uint8_t *p = file + sh[i].sh_offset, *end = p + sh[i].sh_size;
    while (p + sizeof(Elf64_Nhdr) <= end) {
      const Elf64_Nhdr *nh = (const Elf64_Nhdr *)p;
      const uint8_t *name = p + sizeof *nh;
      const uint8_t *desc = name + ((nh->n_namesz + 3) & ~3u);
      if (desc + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        *id = desc;
        return nh->n_descsz;
      }
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

static void index_file(struct lt_module *m) {
  size_t len;
  const Elf64_Shdr *sh;
  int nsec;
  const uint8_t *file = map_elf(m->path, &len, &sh, &nsec);
  if (!file) return;
  read_table(file, len, sh, nsec, SHT_SYMTAB, &m->tab[0]);
  read_table(file, len, sh, nsec, SHT_DYNSYM, &m->tab[1]);
  /* No .symtab: a separate debug file found by build id, as offline
   * (/usr/lib/debug/.build-id/xx/yyyy.debug, with the same build id). */
  const uint8_t *id;
  size_t idn = m->tab[0].n ? 0 : build_id(file, len, sh, nsec, &id);
  if (idn >= 2 && idn <= 64) {
    static const char hex[] = "0123456789abcdef";
    char dbg[64 + 128] = "/usr/lib/debug/.build-id/";
    size_t k = strlen(dbg);
    for (size_t i = 0; i < idn; i++) {
      dbg[k++] = hex[id[i] >> 4];
      dbg[k++] = hex[id[i] & 15];
      if (i == 0) dbg[k++] = '/';
    }
    memcpy(dbg + k, ".debug", 7);
    size_t dlen;
    const Elf64_Shdr *dsh;
    int dn;
    const uint8_t *dfile = map_elf(dbg, &dlen, &dsh, &dn);
    const uint8_t *did;
    if (dfile && build_id(dfile, dlen, dsh, dn, &did) == idn && memcmp(did, id, idn) == 0)
      read_table(dfile, dlen, dsh, dn, SHT_SYMTAB, &m->tab[0]);
    else if (dfile)
      munmap((void *)dfile, dlen);
  }
  /* The files stay mapped: the tables point at their string sections. */
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
  lt_strlcpy(m->path, path, sizeof m->path);
  const char *slash = strrchr(m->path, '/');
  m->base = slash ? slash + 1 : m->path;
  index_file(m);
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

static const char *lookup(const struct lt_symtable *t, uint64_t v) {
  size_t lo = 0, hi = t->n; /* first entry with start > v */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t->syms[mid].start <= v) lo = mid + 1; else hi = mid;
  }
  const struct lt_sym *best = NULL;
  for (size_t j = lo; j-- > 0 && t->syms[j].max_end > v;) {
    const struct lt_sym *s = &t->syms[j];
    if (v < s->start + s->size &&
        (!best || s->start > best->start || (s->start == best->start && s->size < best->size)))
      best = s;
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
  const char *name = lookup(&m->tab[0], v);
  if (!name) name = lookup(&m->tab[1], v);
  if (!name) {
    append("<", 1, &k);
    append(m->base, strlen(m->base), &k);
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

/* symbolize.qualified_name: [*start, *start + return) of s. */
static size_t qualified_name(const char *s, size_t n, size_t *start) {
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
  size_t n = qualified_name(frame, len, &st);
  const char *q = frame + st;
  if (is_allocator_name(q, n)) return 1;
  if (starts(q, n, "operator new") || starts(q, n, "operator delete")) return 1;
  if (starts(q, n, "std::") || starts(q, n, "__gnu_cxx::") || starts(q, n, "__cxxabiv1::"))
    return 1;
  return 0;
}
