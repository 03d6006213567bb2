/* Test driver for the in-process symbolizer's index (symtab.c), tests/test_symtab_index.py:
 *   lifetime_symtab_probe [LIBRARY...]
 * dlopens each library, indexes every loaded module (lt_symtab_refresh), then prints
 *   mapped-after-index<TAB>PATH   each file with more mappings after the index than
 *                                 before (it unmaps every file it read: none expected)
 *   module<TAB>PATH<TAB>BIAS      each loaded module with a path (realpath), bias in hex
 *   ready
 * and answers each line of stdin, a return address in hex, with
 *   RESOLVED<TAB>MODULE_BASE<TAB>FRAME   (lt_symbolize, frames cut to 511 bytes).
 * Linked with the sampler's sources (-DLT_HARNESS). */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symtab.h"

#define MAX_FILES 4096

static char *files[MAX_FILES];
static int counts[MAX_FILES];
static int nfiles;

/* The files mapped now (/proc/self/maps paths, each once) and how many mappings each. */
static int mapped_files(char **out, int *count, int cap) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[PATH_MAX + 128];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char *path = strchr(line, '/');
    if (!path) continue;
    path[strcspn(path, "\n")] = 0;
    int i = 0;
    while (i < n && strcmp(out[i], path) != 0) i++;
    if (i == n && n < cap) {
      out[n] = strdup(path);
      count[n++] = 0;
    }
    if (i < n) count[i]++;
  }
  fclose(f);
  return n;
}

static int print_module(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size; (void)ctx;
  const char *name = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : lt_exe;
  char path[PATH_MAX];
  if (name[0] == '/' && realpath(name, path))
    printf("module\t%s\t%lx\n", path, (unsigned long)info->dlpi_addr);
  return 0;
}

int main(int argc, char **argv) {
  const char *base;
  lt_program_name(lt_exe, sizeof lt_exe, &base);
  for (int i = 1; i < argc; i++)
    if (!dlopen(argv[i], RTLD_NOW | RTLD_LOCAL)) {
      fprintf(stderr, "cannot load %s: %s\n", argv[i], dlerror());
      return 2;
    }
  nfiles = mapped_files(files, counts, MAX_FILES);
  if (!lt_symtab_refresh()) return 3;
  static char *after[MAX_FILES];
  static int after_counts[MAX_FILES];
  int nafter = mapped_files(after, after_counts, MAX_FILES);
  for (int i = 0; i < nafter; i++) {
    int before = 0;
    for (int j = 0; j < nfiles; j++)
      if (strcmp(files[j], after[i]) == 0) before = counts[j];
    if (after_counts[i] > before) printf("mapped-after-index\t%s\n", after[i]);
  }
  dl_iterate_phdr(print_module, NULL);
  printf("ready\n");
  fflush(stdout);
  setvbuf(stdout, NULL, _IOLBF, 0); /* each answer as it is made: the test reads them while it writes */
  char line[64], frame[512];
  while (fgets(line, sizeof line, stdin)) {
    uintptr_t ra = (uintptr_t)strtoull(line, NULL, 16);
    const char *module_base;
    int resolved;
    lt_symbolize(ra, frame, sizeof frame, &module_base, &resolved);
    printf("%d\t%s\t%s\n", resolved, module_base, frame);
  }
  return 0;
}
