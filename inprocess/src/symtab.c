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
 * Indexing (lt_symtab_refresh) runs at start-up and after each dlopen, never inside
 * an allocation: it maps each module's file (and its debug file) read-only, sorts its
 * function symbols in a scratch mapping, then copies what lookups need -- 16-byte
 * entries (offsets from the table's lowest start) and the names of the symbols kept,
 * packed -- into an index arena, and unmaps the files and the scratch.  So a process
 * pays for the symbols it can name, not for the pages of every symbol and string
 * table the index read (issue 32: a model's per-process cost).  A .dynsym entry whose
 * range .symtab covers entirely is never consulted (.dynsym is read only where
 * .symtab names nothing) and is not kept.  Lookups only read the arena.  Modules are
 * appended, never removed (a dlclose'd module's index stays valid), and published
 * with a release store of the count, so lookups take no lock.
 */
#include "symtab.h"

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

/* An entry of a compact table: the symbol [start, end) and max_end (the max end over
 * entries [0..i]) as offsets from the table's base (its lowest start), its name as an
 * offset in the table's names.  A table whose offsets do not fit 32 bits (no real
 * module: its functions would span 4 GiB) keeps wide entries instead. */
struct lt_sym {
  uint32_t start, end, max_end;
  uint32_t name;
};

struct lt_sym_wide {
  uint64_t start, end, max_end; /* end = start + size, as the ELF file gives them */
  uint64_t name;
};

struct lt_symtable {
  const struct lt_sym *syms;       /* compact; NULL when wide (or empty) */
  const struct lt_sym_wide *wide;  /* wide; NULL when compact (or empty) */
  size_t n;
  uint64_t base;
  const uint32_t *blocks;          /* compact: each block's offset in code */
  const char *code;                /* compact: the front-coded names */
  const char *str;                 /* wide: the names; compact: the long names */
};

struct lt_module {
  uintptr_t bias;
  uintptr_t lo, hi;              /* span of the PT_LOAD segments, in process addresses */
  const char *path;              /* realpath, in the index arena */
  const char *base;              /* basename of path */
  const char *name;              /* version-free name (lt_module_name), in path */
  size_t name_len;
  struct lt_symtable tab[2];     /* .symtab, .dynsym */
};

static struct lt_module *modules; /* LT_SYM_MODULES entries, mmap'd */
static _Atomic size_t module_count;
static lt_lock index_lock;        /* serializes refreshes, never held by lookups */

/* The index arena (under index_lock): bump allocation from mmap'd chunks, never freed.
 * A chunk's untouched tail costs address space only. */
#define ARENA_CHUNK (1u << 20)
static char *arena_at, *arena_end;

static void *arena_take(size_t bytes, size_t align) {
  uintptr_t at = ((uintptr_t)arena_at + align - 1) & ~(uintptr_t)(align - 1);
  if (!arena_at || bytes > (size_t)(arena_end - (char *)at)) {
    size_t chunk = bytes + align > ARENA_CHUNK ? (bytes + align + 4095) & ~(size_t)4095
                                               : ARENA_CHUNK;
    char *p = lt_map(chunk);
    if (!p) return NULL;
    arena_at = p;
    arena_end = p + chunk;
    at = ((uintptr_t)arena_at + align - 1) & ~(uintptr_t)(align - 1);
  }
  arena_at = (char *)at + bytes;
  return (void *)at;
}

static const char *arena_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_take(n, 1);
  if (p) memcpy(p, s, n);
  return p;
}
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


/* ---------------- building ---------------- */

/* A kept symbol while a table is built (scratch memory, unmapped after): its name is
 * an offset in the mapped file's string section. */
struct scratch_sym {
  uint64_t start, size;
  uint32_t name;
  uint32_t rank;
};

/* One symbol section's function symbols, sorted and de-duplicated; v is a scratch
 * mapping of bytes bytes (unmap with scratch_free), str the file's string section. */
struct scratch {
  struct scratch_sym *v;
  size_t n, bytes;
  const char *str;
};

static void scratch_free(struct scratch *s) {
  if (s->v) munmap(s->v, s->bytes);
  *s = (struct scratch){0};
}

static int sym_less(const struct scratch_sym *a, const struct scratch_sym *b, const char *str) {
  if (a->start != b->start) return a->start < b->start;
  if (a->size != b->size) return a->size < b->size;
  if (a->rank != b->rank) return a->rank < b->rank;
  return strcmp(str + a->name, str + b->name) < 0;
}

static void sift(struct scratch_sym *v, size_t i, size_t n, const char *str) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && sym_less(&v[c], &v[c + 1], str)) c++;
    if (!sym_less(&v[i], &v[c], str)) return;
    struct scratch_sym t = v[i]; v[i] = v[c]; v[c] = t;
    i = c;
  }
}

static void heapsort_syms(struct scratch_sym *v, size_t n, const char *str) {
  for (size_t i = n / 2; i-- > 0;) sift(v, i, n, str);
  for (size_t k = n; k-- > 1;) {
    struct scratch_sym t = v[0]; v[0] = v[k]; v[k] = t;
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

static int is_function(const Elf64_Sym *s, size_t str_size) {
  int t = ELF64_ST_TYPE(s->st_info);
  return (t == STT_FUNC || t == STT_GNU_IFUNC) && s->st_shndx != SHN_UNDEF && s->st_size &&
         s->st_name && s->st_name < str_size;
}

/* Reads the first symbol section of type `type` of a mapped ELF file into out: its
 * function symbols sorted by (start, size, rank, name), equal (start, size) keeping
 * the first.  Empty when there is none or it is malformed. */
static void collect(const uint8_t *file, size_t len, const Elf64_Shdr *sh, int nsec, int type,
                    struct scratch *out) {
  *out = (struct scratch){0};
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
    for (size_t k = 0; k < count; k++) keep += is_function(&syms[k], str_size);
    if (!keep) return;
    size_t bytes = (keep * sizeof(struct scratch_sym) + 4095) & ~(size_t)4095;
    struct scratch_sym *v = lt_map(bytes);
    if (!v) return;
    size_t n = 0;
    for (size_t k = 0; k < count; k++) {
      if (!is_function(&syms[k], str_size)) continue;
      v[n++] = (struct scratch_sym){.start = syms[k].st_value, .size = syms[k].st_size,
                                    .name = syms[k].st_name,
                                    .rank = rank_of(str + syms[k].st_name,
                                                    ELF64_ST_BIND(syms[k].st_info))};
    }
    heapsort_syms(v, n, str);
    size_t m = 0; /* equal (start, size): the first (best rank, then name) stays */
    for (size_t k = 0; k < n; k++)
      if (!m || v[k].start != v[m - 1].start || v[k].size != v[m - 1].size) v[m++] = v[k];
    *out = (struct scratch){.v = v, .n = m, .bytes = bytes, .str = str};
    return;
  }
}

/* The union of a table's ranges, as sorted disjoint [start, end) runs in a scratch
 * mapping (*bytes of it); an entry whose end wraps contains no address.  NULL: none. */
struct run { uint64_t start, end; };

static struct run *coverage(const struct scratch *t, size_t *count, size_t *bytes) {
  *count = 0;
  *bytes = (t->n * sizeof(struct run) + 4095) & ~(size_t)4095;
  struct run *r = t->n ? lt_map(*bytes) : NULL;
  if (!r) return NULL;
  size_t n = 0;
  for (size_t k = 0; k < t->n; k++) { /* sorted by start */
    uint64_t a = t->v[k].start, b = a + t->v[k].size;
    if (b <= a) continue;
    if (n && a <= r[n - 1].end) {
      if (b > r[n - 1].end) r[n - 1].end = b;
    } else {
      r[n++] = (struct run){a, b};
    }
  }
  *count = n;
  return r;
}

/* 1 if [a, b) lies inside one of the runs. */
static int covered(const struct run *r, size_t n, uint64_t a, uint64_t b) {
  size_t lo = 0, hi = n; /* first run with start > a */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r[mid].start <= a) lo = mid + 1; else hi = mid;
  }
  return lo > 0 && b <= r[lo - 1].end && b > a;
}

/* Names of a compact table, front-coded: the distinct names of the symbols kept, in
 * strcmp order, in blocks of FC_BLOCK; a block's first name whole, each next one as
 * the length it shares with the one before (a byte, at most 255) and the rest, each
 * NUL-terminated.  An entry's name is the name's rank; decoding it copies at most
 * FC_BLOCK names of at most FC_MAX bytes into the caller's buffer.  A longer name is
 * kept whole in the table's long names (its entry's name: FC_LONG | offset).  Mangled
 * C++ names share long prefixes: the names of the idle python's modules take ~360 KiB
 * so against ~730 KiB packed whole (blocks of 16: ~330 KiB, but twice the names to
 * decode on each lookup). */
#define FC_BLOCK 8
#define FC_MAX 1023
#define FC_LONG 0x80000000u

/* A name to code: key holds its first 8 bytes (big-endian, NUL-padded), so most
 * comparisons need no strcmp; k is its entry's index; once sorted, dup says it equals
 * the name before and shared how many bytes it shares with the short name coded
 * before it. */
struct name_ref {
  uint64_t key;
  const char *s;
  size_t len;
  uint32_t k;
  uint8_t dup, shared;
};

static uint64_t prefix_key(const char *s) {
  uint64_t key = 0;
  int i = 0;
  for (; i < 8 && s[i]; i++) key = key << 8 | (unsigned char)s[i];
  return i == 0 ? 0 : i == 8 ? key : key << (8 * (8 - i));
}

static int ref_less(const struct name_ref *a, const struct name_ref *b) {
  if (a->key != b->key) return a->key < b->key;
  int c = a->len >= 8 && b->len >= 8 ? strcmp(a->s + 8, b->s + 8) : 0;
  return c ? c < 0 : a->k < b->k;
}

/* Sorts v[0..n) (strcmp order, then k) with tmp[0..n) as room: bottom-up merges.
 * Returns the array that holds the result (v or tmp). */
static struct name_ref *sort_refs(struct name_ref *v, struct name_ref *tmp, size_t n) {
  for (size_t w = 1; w < n; w *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * w) {
      size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      size_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) tmp[o++] = ref_less(&v[j], &v[i]) ? v[j++] : v[i++];
      while (i < mid) tmp[o++] = v[i++];
      while (j < hi) tmp[o++] = v[j++];
    }
    struct name_ref *t = v; v = tmp; tmp = t;
  }
  return v;
}

static size_t shared_prefix(const char *a, const char *b) {
  size_t n = 0;
  while (n < 255 && a[n] && a[n] == b[n]) n++;
  return n;
}

/* The entries' names, front-coded into the arena (entries v[0..n) get their name
 * field); 0 if they do not fit the compact form or memory runs out. */
static int emit_names(struct name_ref *r, size_t n, struct lt_sym *v, struct lt_symtable *out) {
  size_t distinct = 0, blob = 0, longs = 0;
  const struct name_ref *prev = NULL, *last_short = NULL;
  for (size_t i = 0; i < n; i++) {
    struct name_ref *x = &r[i];
    x->dup = prev && prev->key == x->key && prev->len == x->len &&
             (x->len < 8 || strcmp(prev->s + 8, x->s + 8) == 0);
    prev = x;
    if (x->dup) continue;
    if (x->len > FC_MAX) {
      longs += x->len + 1;
      continue;
    }
    if (distinct++ % FC_BLOCK == 0) {
      x->shared = 0;
      blob += x->len + 1;
    } else {
      x->shared = (uint8_t)shared_prefix(last_short->s, x->s);
      blob += 2 + x->len - x->shared;
    }
    last_short = x;
  }
  if (distinct >= FC_LONG || longs >= FC_LONG || blob > UINT32_MAX) return 0;
  size_t nblocks = (distinct + FC_BLOCK - 1) / FC_BLOCK;
  uint32_t *blocks = arena_take(nblocks * sizeof *blocks + 1, 4);
  char *code = arena_take(blob + 1, 1);
  char *lng = arena_take(longs + 1, 1);
  if (!blocks || !code || !lng) return 0;
  size_t id = 0, at = 0, lat = 0;
  uint32_t name = 0;
  for (size_t i = 0; i < n; i++) {
    const struct name_ref *x = &r[i];
    if (x->dup) {
      /* the name of the one before */
    } else if (x->len > FC_MAX) {
      name = FC_LONG | (uint32_t)lat;
      memcpy(lng + lat, x->s, x->len + 1);
      lat += x->len + 1;
    } else {
      if (id % FC_BLOCK == 0) {
        blocks[id / FC_BLOCK] = (uint32_t)at;
      } else {
        code[at++] = (char)x->shared;
      }
      memcpy(code + at, x->s + x->shared, x->len - x->shared + 1);
      at += x->len - x->shared + 1;
      name = (uint32_t)id++;
    }
    v[x->k].name = name;
  }
  out->blocks = blocks;
  out->code = code;
  out->str = lng;
  return 1;
}

/* Copies a scratch table's symbols into the arena as *out, dropping those whose range
 * the runs cover (.dynsym under .symtab: never consulted), with their names (compact:
 * front-coded; wide: packed whole).  Under index_lock. */
static void emit(const struct scratch *t, const struct run *cover, size_t ncover,
                 struct lt_symtable *out) {
  *out = (struct lt_symtable){0};
  size_t n = 0, names = 0;
  uint64_t base = 0, top = 0;
  int wide = 0;
  for (size_t k = 0; k < t->n; k++) {
    const struct scratch_sym *s = &t->v[k];
    uint64_t end = s->start + s->size;
    if (cover && (end <= s->start || covered(cover, ncover, s->start, end))) continue;
    if (!n) base = s->start;
    if (end < s->start) wide = 1; /* wraps: contains nothing, as offline */
    else if (end > top) top = end;
    names += strlen(t->str + s->name) + 1;
    n++;
  }
  if (!n) return;
  if (top - base > UINT32_MAX || n > UINT32_MAX) wide = 1;
  if (!wide) {
    struct lt_sym *v = arena_take(n * sizeof *v, 8);
    size_t ref_bytes = (2 * n * sizeof(struct name_ref) + 4095) & ~(size_t)4095;
    struct name_ref *refs = v ? lt_map(ref_bytes) : NULL; /* the names, and room to sort */
    if (!refs) return;
    struct name_ref *r = refs;
    size_t i = 0;
    uint64_t max_end = 0;
    for (size_t k = 0; k < t->n; k++) {
      const struct scratch_sym *s = &t->v[k];
      uint64_t end = s->start + s->size;
      if (cover && (end <= s->start || covered(cover, ncover, s->start, end))) continue;
      if (end > max_end) max_end = end;
      v[i] = (struct lt_sym){(uint32_t)(s->start - base), (uint32_t)(end - base),
                             (uint32_t)(max_end - base), 0};
      const char *name = t->str + s->name;
      r[i] = (struct name_ref){prefix_key(name), name, strlen(name), (uint32_t)i, 0, 0};
      i++;
    }
    int ok = emit_names(sort_refs(r, r + n, n), n, v, out);
    munmap(refs, ref_bytes);
    if (ok) {
      out->syms = v;
      out->n = n;
      out->base = base;
      return;
    }
    *out = (struct lt_symtable){0}; /* (the entries stay in the arena, unused) */
  }
  struct lt_sym_wide *v = arena_take(n * sizeof *v, 8);
  char *str = v ? arena_take(names, 1) : NULL;
  if (!str) return;
  size_t i = 0, at = 0;
  uint64_t max_end = 0;
  for (size_t k = 0; k < t->n; k++) {
    const struct scratch_sym *s = &t->v[k];
    uint64_t end = s->start + s->size;
    if (cover && (end <= s->start || covered(cover, ncover, s->start, end))) continue;
    if (end > max_end) max_end = end;
    v[i++] = (struct lt_sym_wide){s->start, end, max_end, at};
    size_t len = strlen(t->str + s->name) + 1;
    memcpy(str + at, t->str + s->name, len);
    at += len;
  }
  *out = (struct lt_symtable){.wide = v, .n = n, .base = base, .str = str};
}

/* Maps an ELF file read-only; its section headers in *sh (NULL if not ELF64). */
static const uint8_t *map_elf(const char *path, size_t *len, const Elf64_Shdr **sh, int *nsec) {
  *sh = NULL;
  int fd = lt_open_high(path, O_RDONLY, 0);
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

/* CRC-32 (zlib's, as .gnu_debuglink records it); the table is built under index_lock. */
static uint32_t crc32_of(const uint8_t *p, size_t n) {
  static uint32_t table[256];
  static int ready;
  if (!ready) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

/* The first section with contents named `wanted`, inside the mapping; NULL if there is
 * none (or it runs past the file's end). */
static const Elf64_Shdr *find_section(const uint8_t *file, size_t len, const Elf64_Shdr *sh,
                                      int nsec, const char *wanted) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
  if (eh->e_shstrndx >= nsec) return NULL;
  const Elf64_Shdr *names = &sh[eh->e_shstrndx];
  if (names->sh_offset + names->sh_size > len) return NULL;
  for (int i = 0; i < nsec; i++) {
    if (sh[i].sh_name >= names->sh_size || sh[i].sh_type == SHT_NOBITS) continue;
    const char *sname = (const char *)file + names->sh_offset + sh[i].sh_name;
    if (strncmp(sname, wanted, names->sh_size - sh[i].sh_name) != 0) continue;
    return sh[i].sh_offset + sh[i].sh_size > len ? NULL : &sh[i];
  }
  return NULL;
}

/* .gnu_debuglink: the file name (NUL-terminated in the mapping) and its CRC32. */
static const char *debuglink(const uint8_t *file, size_t len, const Elf64_Shdr *sh, int nsec,
                             uint32_t *crc) {
  const Elf64_Shdr *s = find_section(file, len, sh, nsec, ".gnu_debuglink");
  if (!s) return NULL;
  const char *name = (const char *)file + s->sh_offset;
  size_t n = strnlen(name, s->sh_size);
  size_t at = (n + 4) & ~(size_t)3;
  if (n == 0 || at + 4 > s->sh_size || memchr(name, '/', n)) return NULL;
  memcpy(crc, name + at, 4); /* little-endian, like the file (x86-64) */
  return name;
}

long lt_elf_section(const char *path, const char *name, void *out, size_t cap) {
  size_t len = 0;
  const Elf64_Shdr *sh;
  int nsec = 0;
  const uint8_t *file = map_elf(path, &len, &sh, &nsec);
  if (!file) return -1;
  const Elf64_Shdr *s = find_section(file, len, sh, nsec, name);
  long size = s ? (long)s->sh_size : 0;
  if (s && s->sh_size <= cap) memcpy(out, file + s->sh_offset, s->sh_size);
  munmap((void *)file, len);
  return size;
}

/* A separate debug file in use while a module is indexed: its mapping and its .symtab. */
struct debug_use {
  const uint8_t *file;
  size_t len;
  struct scratch symtab;
};

/* Uses path's .symtab for m if it is the module's debug file: the same build id (where
 * the module has one; required for a build-id path), and the recorded CRC32 for a
 * debuglink.  Returns 1 if used (the file stays mapped in *use until indexed). */
static int try_debug_file(struct lt_module *m, const char *path, const uint8_t *id, size_t idn,
                          int by_link, uint32_t crc, struct debug_use *use) {
  size_t dlen;
  const Elf64_Shdr *dsh;
  int dn;
  if (strcmp(path, m->path) == 0) return 0;
  const uint8_t *dfile = map_elf(path, &dlen, &dsh, &dn);
  if (!dfile) return 0;
  const uint8_t *did;
  size_t didn = build_id(dfile, dlen, dsh, dn, &did);
  int ok = by_link ? crc32_of(dfile, dlen) == crc : 1;
  if (ok && (!by_link || didn) && idn && (didn != idn || memcmp(did, id, idn) != 0)) ok = 0;
  if (ok) collect(dfile, dlen, dsh, dn, SHT_SYMTAB, &use->symtab);
  if (ok && use->symtab.n) {
    use->file = dfile;
    use->len = dlen;
    return 1;
  }
  scratch_free(&use->symtab);
  munmap((void *)dfile, dlen);
  return 0;
}

struct debug_query {
  const uint8_t *id;
  size_t idn;
  const char *link;
  uint32_t crc;
  struct debug_use *use;
};

/* The debug directories: LIFETIME_DEBUG_DIR (':'-separated), then /usr/lib/debug --
 * what `--debug-dir` gives the offline symbolizer.  Calls fn for each until it
 * returns 1. */
static int each_debug_dir(int (*fn)(struct lt_module *, const char *, size_t, void *),
                          struct lt_module *m, void *ctx) {
  const char *env = getenv("LIFETIME_DEBUG_DIR");
  for (const char *p = env; p && *p;) {
    const char *e = strchr(p, ':');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n && fn(m, p, n, ctx)) return 1;
    p = e ? e + 1 : p + n;
  }
  return fn(m, "/usr/lib/debug", 14, ctx);
}

static int by_build_id(struct lt_module *m, const char *dir, size_t n, void *ctx) {
  const struct debug_query *q = ctx;
  static const char hex[] = "0123456789abcdef";
  char path[PATH_MAX];
  if (n + 12 + 2 * q->idn + 8 >= sizeof path) return 0;
  memcpy(path, dir, n);
  memcpy(path + n, "/.build-id/", 11);
  size_t k = n + 11;
  for (size_t i = 0; i < q->idn; i++) {
    path[k++] = hex[q->id[i] >> 4];
    path[k++] = hex[q->id[i] & 15];
    if (i == 0) path[k++] = '/';
  }
  memcpy(path + k, ".debug", 7);
  return try_debug_file(m, path, q->id, q->idn, 0, 0, q->use);
}

static int by_link_global(struct lt_module *m, const char *dir, size_t n, void *ctx) {
  const struct debug_query *q = ctx; /* DIR/<module's dir>/name */
  char path[PATH_MAX];
  size_t dl = (size_t)(m->base - m->path); /* the module's dir, with its trailing '/' */
  size_t ln = strlen(q->link);
  if (n + dl + ln + 1 >= sizeof path) return 0;
  memcpy(path, dir, n);
  memcpy(path + n, m->path, dl);
  memcpy(path + n + dl, q->link, ln + 1);
  return try_debug_file(m, path, q->id, q->idn, 1, q->crc, q->use);
}

/* No .symtab in the module: its separate debug file, looked up as offline
 * (symbolize.find_debug_file): by build id under the debug directories
 * (D/.build-id/xx/yyyy.debug), then by .gnu_debuglink (beside the module, in .debug/
 * beside it, D/<module's dir>/name).  1 if found (in *use). */
static int find_debug_file(struct lt_module *m, const uint8_t *file, size_t len,
                           const Elf64_Shdr *sh, int nsec, struct debug_use *use) {
  struct debug_query q = {0};
  q.use = use;
  q.idn = build_id(file, len, sh, nsec, &q.id);
  if (q.idn > 64) q.idn = 0;
  if (q.idn >= 2 && each_debug_dir(by_build_id, m, &q)) return 1;
  q.link = debuglink(file, len, sh, nsec, &q.crc);
  if (!q.link) return 0;
  char path[PATH_MAX];
  size_t dl = (size_t)(m->base - m->path), ln = strlen(q.link);
  if (dl + ln + 8 < sizeof path) {
    memcpy(path, m->path, dl);
    memcpy(path + dl, q.link, ln + 1);
    if (try_debug_file(m, path, q.id, q.idn, 1, q.crc, use)) return 1;
    memcpy(path + dl, ".debug/", 7);
    memcpy(path + dl + 7, q.link, ln + 1);
    if (try_debug_file(m, path, q.id, q.idn, 1, q.crc, use)) return 1;
  }
  return each_debug_dir(by_link_global, m, &q);
}

/* Indexes m's symbols into the arena; the files and scratch are unmapped after. */
static void index_file(struct lt_module *m) {
  size_t len;
  const Elf64_Shdr *sh;
  int nsec;
  const uint8_t *file = map_elf(m->path, &len, &sh, &nsec);
  if (!file) return;
  struct scratch symtab, dynsym;
  struct debug_use use = {0};
  collect(file, len, sh, nsec, SHT_SYMTAB, &symtab);
  collect(file, len, sh, nsec, SHT_DYNSYM, &dynsym);
  if (!symtab.n && find_debug_file(m, file, len, sh, nsec, &use)) {
    scratch_free(&symtab);
    symtab = use.symtab;
    use.symtab = (struct scratch){0};
  }
  emit(&symtab, NULL, 0, &m->tab[0]);
  /* .dynsym is read only where .symtab names nothing: its entries inside .symtab's
   * ranges are never consulted. */
  size_t nruns = 0, run_bytes = 0;
  struct run *runs = m->tab[0].n ? coverage(&symtab, &nruns, &run_bytes) : NULL;
  emit(&dynsym, runs, nruns, &m->tab[1]);
  if (runs) munmap(runs, run_bytes);
  scratch_free(&symtab);
  scratch_free(&dynsym);
  if (use.file) munmap((void *)use.file, use.len);
  munmap((void *)file, len);
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
  m->path = arena_strdup(path);
  if (!m->path) return 0;
  const char *slash = strrchr(m->path, '/');
  m->base = slash ? slash + 1 : m->path;
  m->name_len = lt_module_name(m->path, strlen(m->path), &m->name);
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
