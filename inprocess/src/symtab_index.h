/* The in-process symbolizer's index (symtab_index.c), as symtab.c looks symbols up in
 * it: per module, compact symbol tables in an index arena.  Private to symtab.c and
 * symtab_index.c. */
#ifndef LT_SYMTAB_INDEX_H
#define LT_SYMTAB_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* An entry of a compact table: the symbol [start, end) and max_end (the max end over
 * entries [0..i]) as offsets from the table's base (its lowest start); its name, the
 * name's rank among the table's front-coded names (or FC_LONG | its offset in the long
 * names).  Entries are sorted by start, then size, and no two have the same range.  A
 * table whose offsets do not fit 32 bits (no real module: its functions would span 4
 * GiB) keeps wide entries instead, their names whole (name: the offset in str). */
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

/* Indexes m (its path set) into the arena: its .symtab (or its debug file's) and its
 * .dynsym; the files it reads are unmapped after.  Under symtab.c's index lock. */
LT_HIDDEN void lt_symtab_index(struct lt_module *m);
/* A copy of s in the index arena (NULL: out of memory).  Under the index lock. */
LT_HIDDEN const char *lt_symtab_strdup(const char *s);

#endif
