/* What the profile says about the process: executable, mappings and build ids.
 * Runs only on the flush path (flush_lock held, in_sampler set); uses fixed buffers. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "wire.h"

size_t lt_read_file(const char *path, char *buf, size_t cap) {
  if (cap == 0) return 0;
  int fd = lt_open_high(path, O_RDONLY, 0);
  size_t n = 0;
  if (fd >= 0) {
    while (n < cap - 1) {
      ssize_t r = read(fd, buf + n, cap - 1 - n);
      if (r < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (r == 0) break;
      n += (size_t)r;
    }
    close(fd);
  }
  buf[n] = 0;
  return n;
}

/* ---- build ids of loaded objects, by load segment ---- */

#define SEG_CAP 4096
#define BID_MAX 64
struct seg {
  uintptr_t start, end;
  uint8_t bid[BID_MAX];
  uint32_t bid_len;
};
static struct seg segs[SEG_CAP];
static int nsegs;

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size;
  (void)ctx;
  uint8_t bid[BID_MAX];
  uint32_t bid_len = 0;
  for (int i = 0; i < info->dlpi_phnum && !bid_len; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
    const uint8_t *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      size_t name_sz = (nh->n_namesz + 3) & ~3u, desc_sz = (nh->n_descsz + 3) & ~3u;
      const uint8_t *name = p + sizeof(ElfW(Nhdr));
      const uint8_t *desc = name + name_sz;
      if (desc + desc_sz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
          nh->n_descsz <= BID_MAX) {
        memcpy(bid, desc, nh->n_descsz);
        bid_len = nh->n_descsz;
        break;
      }
      p = desc + desc_sz;
    }
  }
  for (int i = 0; i < info->dlpi_phnum && nsegs < SEG_CAP; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    struct seg *s = &segs[nsegs++];
    s->start = info->dlpi_addr + ph->p_vaddr;
    s->end = s->start + ph->p_memsz;
    s->bid_len = bid_len;
    if (bid_len) memcpy(s->bid, bid, bid_len);
  }
  return 0;
}

/* ---- mappings already in this file ---- */

struct done_map {
  uint64_t start, limit, offset, path_hash;
};
static struct done_map done_maps[LT_MAP_CAP];
static int ndone;
static uint64_t next_map_id = 1;

void lt_maps_reset(void) {
  ndone = 0;
  next_map_id = 1;
}

/* How many mappings this file has been given; forgetting all but the first `kept`
 * (the chunk that held the others was dropped: they are emitted again next time). */
int lt_maps_emitted(void) { return ndone; }
void lt_maps_forget(int kept) {
  if (kept < ndone) ndone = kept;
}

static uint64_t hash_str(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static uint64_t hexnum(const char **pp) {
  const char *p = *pp;
  uint64_t v = 0;
  for (;; p++) {
    char c = *p;
    if (c >= '0' && c <= '9') v = v * 16 + (uint64_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + (uint64_t)(c - 'a' + 10);
    else break;
  }
  *pp = p;
  return v;
}

static int segs_loaded;

/* One /proc/self/maps line: "start-limit perms offset dev inode    path". */
static void one_line(char *line, size_t len, struct lt_pb *pb, void (*ensure)(size_t)) {
  line[len] = 0;
  const char *p = line;
  uint64_t start = hexnum(&p);
  if (*p++ != '-') return;
  uint64_t limit = hexnum(&p);
  if (*p++ != ' ') return;
  const char *perms = p;
  if (strlen(perms) < 5 || perms[2] != 'x') return;
  p += 5;
  uint64_t offset = hexnum(&p);
  const char *path = strchr(p, '/');
  if (!path) return; /* anonymous, [vdso], [stack], ... */
  size_t plen = strlen(path);
  uint64_t ph = hash_str(path, plen);
  for (int i = 0; i < ndone; i++)
    if (done_maps[i].start == start && done_maps[i].limit == limit &&
        done_maps[i].offset == offset && done_maps[i].path_hash == ph)
      return;
  if (ndone == LT_MAP_CAP) return;
  if (!segs_loaded) {
    nsegs = 0;
    dl_iterate_phdr(phdr_cb, NULL);
    segs_loaded = 1;
  }
  const struct seg *bid = NULL;
  for (int i = 0; i < nsegs; i++)
    if (segs[i].bid_len && segs[i].start < limit && segs[i].end > start) {
      bid = &segs[i];
      break;
    }
  ensure(plen + BID_MAX + 96);
  done_maps[ndone++] = (struct done_map){start, limit, offset, ph};
  lt_pb_begin(pb, 2); /* ProfileChunk.mappings */
  lt_pb_uint(pb, 1, next_map_id++);
  lt_pb_uint(pb, 2, start);
  lt_pb_uint(pb, 3, limit);
  lt_pb_uint(pb, 4, offset);
  lt_pb_bytes(pb, 5, path, plen);
  if (bid) lt_pb_bytes(pb, 6, bid->bid, bid->bid_len);
  lt_pb_end(pb);
}

void lt_maps_emit(struct lt_pb *pb, void (*ensure)(size_t)) {
  static char buf[65536 + 4096];
  segs_loaded = 0;
  int fd = lt_open_high("/proc/self/maps", O_RDONLY, 0);
  if (fd < 0) return;
  size_t have = 0;
  for (;;) {
    ssize_t r = read(fd, buf + have, 65536 - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    have += (size_t)r;
    size_t from = 0;
    for (size_t i = 0; i < have; i++) {
      if (buf[i] != '\n') continue;
      one_line(buf + from, i - from, pb, ensure);
      from = i + 1;
    }
    if (from == 0 && have == 65536) have = 0; /* absurdly long line: drop it */
    memmove(buf, buf + from, have - from);
    have -= from;
  }
  if (have) one_line(buf, have, pb, ensure);
  close(fd);
}
