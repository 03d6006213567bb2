/* The in-process symbolizer's index (symtab_index.h): each module's ELF file (and
 * separate debug file) read into compact tables for symtab.c's lookups.
 *
 * A module's function symbols are sorted in a scratch mapping, then what lookups need
 * is copied into the index arena -- 16-byte entries (offsets from the table's lowest
 * start) and the names of the symbols kept, front-coded -- and the files and the
 * scratch are unmapped.  So a process pays for the symbols it can name, not for the
 * pages of every symbol and string table the index read (issue 32: a model's cost in
 * each process).  A .dynsym entry whose range .symtab covers entirely is never
 * consulted (.dynsym is read only where .symtab names nothing) and is not kept.
 * Everything here runs under symtab.c's index lock, at start-up and after a dlopen;
 * lookups read a module only once symtab.c has published it.
 */
#include "symtab_index.h"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "online.h"

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

const char *lt_symtab_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_take(n, 1);
  if (p) memcpy(p, s, n);
  return p;
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

/* A scratch symbol emit() drops.  With cover (the .symtab's runs, when this is the
 * .dynsym): an empty or wrapping range, or one the runs cover; without: none. */
static int dropped(const struct scratch_sym *s, const struct run *cover, size_t ncover) {
  uint64_t end = s->start + s->size;
  return cover && (end <= s->start || covered(cover, ncover, s->start, end));
}

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
    if (dropped(s, cover, ncover)) continue;
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
      if (dropped(s, cover, ncover)) continue;
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
    if (dropped(s, cover, ncover)) continue;
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
void lt_symtab_index(struct lt_module *m) {
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
