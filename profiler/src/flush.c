/* Writing the profile file: chunks of ProfileChunk, TFRecord-framed, appended with
 * open(O_APPEND)/write/close at every flush.  The file is opened per flush rather
 * than kept open so a host that closes "all" descriptors (e.g. before exec) can never
 * make us write into a descriptor number it has reused.
 *
 * Everything here runs with lt_g.flush_lock held and the thread's in_sampler set, on
 * whichever host thread flushes (account.c, hooks_process.c): async-signal-safe calls only (open,
 * write, close, read of /proc files), no malloc, no stdio.
 *
 * Every process image writes a file, samples or not: header, mappings, trailer.
 * Before an exec the end of the file (censored samples, trailer END_EXEC) is written
 * tentatively (LT_FLUSH_TENTATIVE): stacks first named there are stamped with a
 * fresh mark_gen, not file_gen, so that if the exec fails and the caller truncates
 * the file back to lt_g.file_bytes before it, they are named again when next used.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common.h"
#include "wire.h"

#define ARGV_MAX (64 * 1024) /* header argv is cut beyond this many bytes */
#define SAMPLE_MAX 256        /* upper bound of one encoded Sample */
#define STACK_MAX (LT_MAX_FRAMES * 10 + 64)
#define FRAME_NAME_CAP 512   /* bytes of an online frame string (LIFETIME_SYMBOLIZE) */
#define STACK_FRAMES_MAX (LT_MAX_FRAMES * (FRAME_NAME_CAP + 8))

char lt_program[256];
const struct lt_done *lt_flush_extra;

static uint8_t *chunk; /* LT_TFRECORD_HEAD + LT_CHUNK_CAP + LT_TFRECORD_FOOT */
static struct lt_pb pb;
static int chunk_has_data;
/* The samples (of them censored) encoded into the chunk being built: counted in
 * samples_written / censored_written as they are encoded, taken back if it is dropped. */
static uint64_t chunk_samples, chunk_censored;
static int chunk_maps_from; /* lt_maps_emitted() when the chunk was started */
static uint64_t chunks_seen; /* chunks this image has tried to write (test_overflow_chunk) */
static char argv_buf[ARGV_MAX];

/* Full trace: the chunk's completed samples as CompactSamples rows (profile.proto),
 * appended to the chunk as ProfileChunk.compact_samples when it is written.  The
 * rows' deltas start from 0 in every chunk (each chunk decodes on its own). */
#define COMPACT_ROW_MAX (11 * 10) /* 11 varints */
#define COMPACT_TAIL 32           /* the CompactSamples framing around the rows */
static uint8_t *crows;            /* LT_CHUNK_CAP */
static size_t crows_len;
static uint64_t crows_count;
static uint64_t prev_addr, prev_free_ns, prev_free_bytes;
static uint32_t prev_tid;

int lt_flush_init(void) {
  chunk = lt_map(LT_TFRECORD_HEAD + LT_CHUNK_CAP + LT_TFRECORD_FOOT);
  crows = lt_map(LT_CHUNK_CAP);
  return chunk != NULL && crows != NULL;
}

void lt_flush_reset_child(void) {
  lt_g.header_written = 0;
  lt_g.file_failed = 0;
  lt_g.samples_written = 0;
  lt_g.censored_written = 0;
  lt_g.file_bytes = 0;
  lt_g.chunk_dropped = 0;
  chunks_seen = 0;
}

static void chunk_start(void) {
  lt_pb_init(&pb, chunk + LT_TFRECORD_HEAD, LT_CHUNK_CAP);
  chunk_has_data = 0;
  chunk_samples = chunk_censored = 0;
  chunk_maps_from = lt_maps_emitted();
  crows_len = 0;
  crows_count = 0;
  prev_addr = prev_free_ns = prev_free_bytes = 0;
  prev_tid = 0;
}

/* ProfileChunk.compact_samples = 6 { count = 1; rows = 2 }, with the length of the
 * message computed first (no reserve-and-move of the rows). */
static void compact_append(void) {
  if (!crows_count) return;
  uint8_t tmp[10];
  size_t body = 1 + lt_varint_into(tmp, crows_count) + 1 + lt_varint_into(tmp, crows_len) +
                crows_len;
  lt_pb_tag(&pb, 6, LT_WT_LEN);
  lt_pb_raw_varint(&pb, body);
  lt_pb_tag(&pb, 1, LT_WT_VARINT);
  lt_pb_raw_varint(&pb, crows_count);
  lt_pb_tag(&pb, 2, LT_WT_LEN);
  lt_pb_raw_varint(&pb, crows_len);
  lt_pb_raw(&pb, crows, crows_len);
}

static void write_all(const uint8_t *p, size_t n) {
  if (lt_g.file_failed) return;
  int fd = lt_open_high(lt_g.path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) {
    lt_g.file_failed = 1;
    lt_log("cannot open ", lt_g.path, "; no more samples are written");
    return;
  }
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      lt_g.file_failed = 1;
      lt_log("cannot write ", lt_g.path, "; no more samples are written");
      break;
    }
    p += w;
    n -= (size_t)w;
  }
  close(fd);
}

static void encode_header(void);

/* A chunk that overflowed is never written (a bad record would end the file for a
 * reader).  What it held is accounted for: its samples leave samples_written (and
 * censored_written) for dropped_samples; the stacks it named are named again when next
 * used (fresh generations: a stack named twice in one file is read once); a header it
 * held is encoded again into the next chunk; the mappings it held are emitted again by
 * the next flush that emits mappings (one with samples; a final one; lt_flush's
 * rewritten end). */
static void chunk_drop(void) {
  lt_log("internal error: chunk overflow in ", lt_g.path,
         "; chunk dropped, its samples counted as dropped");
  lt_g.samples_written -= chunk_samples;
  lt_g.censored_written -= chunk_censored;
  lt_g.chunk_dropped += chunk_samples;
  atomic_fetch_add_explicit(&lt_g.dropped_samples, chunk_samples, memory_order_relaxed);
  int tentative = lt_g.mark_gen != lt_g.file_gen; /* the end before an exec */
  lt_g.file_gen = ++lt_g.gen_seq;
  lt_g.mark_gen = tentative ? ++lt_g.gen_seq : lt_g.file_gen;
  lt_maps_forget(chunk_maps_from);
}

/* Writes the chunk and starts the next; 0 when it was dropped (an overflow). */
static int chunk_write(void) {
  compact_append();
  if (pb.len == 0) return 1;
  if (lt_g.test_overflow_chunk && ++chunks_seen == lt_g.test_overflow_chunk) pb.overflow = 1;
  int written = !pb.overflow;
  if (!written) {
    /* cannot happen with the size bounds used by ensure() */
    chunk_drop();
  } else {
    size_t n = lt_tfrecord_frame(chunk, pb.len);
    write_all(chunk, n);
    if (!lt_g.file_failed) lt_g.file_bytes += n;
    lt_g.header_written = 1;
  }
  chunk_start();
  if (!lt_g.header_written) encode_header(); /* it was in the dropped chunk */
  return written;
}

static void ensure(size_t need) {
  if (lt_pb_room(&pb) < need + crows_len + (crows_count ? COMPACT_TAIL : 0)) (void)chunk_write();
  chunk_has_data = 1;
}

static void encode_header(void) {
  lt_pb_begin(&pb, 1);
  /* SCHEMA_VERSION, or SCHEMA_VERSION_COMPACT_SAMPLES when chunks may hold compact rows */
  lt_pb_uint(&pb, 1, lt_g.full_trace ? 2 : 1);
  lt_pb_string(&pb, 2, lt_program);
  lt_pb_string(&pb, 3, lt_exe);
  lt_pb_string(&pb, 4, lt_g.version_label);
  size_t n = lt_read_file("/proc/self/cmdline", argv_buf, sizeof argv_buf);
  for (size_t i = 0; i < n;) {
    size_t len = strnlen(argv_buf + i, n - i);
    lt_pb_bytes_always(&pb, 5, argv_buf + i, len);
    i += len + 1;
  }
  struct utsname u;
  if (uname(&u) == 0) lt_pb_string(&pb, 6, u.nodename);
  lt_pb_uint(&pb, 7, lt_g.pid);
  lt_pb_uint(&pb, 8, lt_g.ppid);
  lt_pb_uint(&pb, 9, lt_g.forked_from);
  lt_pb_int(&pb, 10, lt_g.start_unix_ns);
  lt_pb_uint(&pb, 11, lt_g.start_mono_ns);
  lt_pb_uint(&pb, 12, lt_g.interval);
  const uint64_t clocks[2] = {1 /* CLOCK_MONOTONIC_NS */, 2 /* CLOCK_ALLOCATED_BYTES */};
  lt_pb_packed_u64(&pb, 13, clocks, 2);
  lt_pb_uint(&pb, 14, (uint64_t)lt_g.max_frames);
  lt_pb_string(&pb, 15, LT_SAMPLER_VERSION);
  if (lt_online_enabled()) {
    lt_pb_string(&pb, 16, lt_model_path);
    lt_pb_string(&pb, 17, lt_model_id);
  }
  lt_pb_bool(&pb, 18, lt_g.full_trace);       /* Header.full_trace */
  lt_pb_uint(&pb, 19, lt_g.live_capacity);    /* Header.live_capacity */
  lt_pb_end(&pb);
  chunk_has_data = 1;
}

static double weight(uint64_t size) {
  if (size == 0 || lt_g.full_trace) return 1.0; /* a full trace: each sample is itself */
  double p = -expm1(-(double)size / (double)lt_g.interval);
  return p > 0 ? 1.0 / p : 1.0;
}

/* A sample and, the first time this file names it, its stack, in the same chunk. */
static void emit_sample(const struct lt_done *d, int censored, uint64_t end_ns,
                        uint64_t end_bytes) {
  const uintptr_t *frames;
  int depth, truncated;
  uint32_t *gen;
  if (!lt_stack_get(d->stack_id, &frames, &depth, &truncated, &gen)) return;
  int need_stack = *gen != lt_g.file_gen && *gen != lt_g.mark_gen;
  int compact = !censored && lt_g.full_trace && d->pred < 0 && !lt_online_enabled();
  ensure(SAMPLE_MAX + (compact ? COMPACT_ROW_MAX + COMPACT_TAIL : 0) +
         (need_stack ? STACK_MAX : 0) +
         (need_stack && lt_symbolize_stacks ? STACK_FRAMES_MAX : 0));
  if (need_stack) {
    lt_pb_begin(&pb, 3);
    lt_pb_uint(&pb, 1, d->stack_id);
    lt_pb_packed_u64(&pb, 2, (const uint64_t *)frames, (size_t)depth);
    lt_pb_bool(&pb, 3, truncated);
    for (int i = 0; lt_symbolize_stacks && i < depth; i++) { /* Stack.frames, one per address */
      char name[FRAME_NAME_CAP];
      const char *base;
      int resolved;
      size_t len = lt_symbolize(frames[i], name, sizeof name, &base, &resolved);
      lt_pb_begin(&pb, 4);
      lt_pb_bytes(&pb, 1, name, len);
      lt_pb_end(&pb);
    }
    lt_pb_end(&pb);
    *gen = lt_g.mark_gen;
  }
  if (compact) { /* a CompactSamples row (profile.proto), weight 1 implied */
    uint8_t *o = crows + crows_len;
    size_t n = 0;
    n += lt_varint_into(o + n, d->stack_id);
    n += lt_varint_into(o + n, d->size);
    n += lt_varint_into(o + n, d->align);
    n += lt_varint_into(o + n, (uint64_t)d->fn | (uint64_t)d->free_fn << 4);
    n += lt_varint_into(o + n, lt_zigzag(d->addr - prev_addr));
    n += lt_varint_into(o + n, lt_zigzag(d->free_ns - prev_free_ns));
    n += lt_varint_into(o + n, d->free_ns - d->alloc_ns);
    n += lt_varint_into(o + n, lt_zigzag(d->free_bytes - prev_free_bytes));
    n += lt_varint_into(o + n, d->free_bytes - d->alloc_bytes);
    n += lt_varint_into(o + n, lt_zigzag((uint64_t)d->tid - prev_tid));
    n += lt_varint_into(o + n, lt_zigzag((uint64_t)d->free_tid - d->tid));
    prev_addr = d->addr;
    prev_free_ns = d->free_ns;
    prev_free_bytes = d->free_bytes;
    prev_tid = d->tid;
    crows_len += n;
    crows_count++;
    lt_g.samples_written++;
    chunk_samples++;
    return;
  }
  /* The Sample, encoded inline into a scratch buffer (the hottest message: one per
   * allocation in a full trace); the bytes lt_pb_begin/uint/.../end would give. */
  uint8_t body[SAMPLE_MAX];
  size_t n = 0;
  n += lt_field_uint_into(body + n, 1, d->stack_id);
  n += lt_field_uint_into(body + n, 2, d->size);
  n += lt_field_uint_into(body + n, 3, d->align);
  n += lt_field_uint_into(body + n, 4, d->fn);
  n += lt_field_uint_into(body + n, 5, d->addr);
  n += lt_field_uint_into(body + n, 6, d->alloc_ns);
  n += lt_field_uint_into(body + n, 7, d->alloc_bytes);
  n += lt_field_uint_into(body + n, 8, d->tid);
  if (censored) {
    n += lt_field_uint_into(body + n, 13, 1);
    n += lt_field_uint_into(body + n, 14, end_ns > d->alloc_ns ? end_ns - d->alloc_ns : 0);
    n += lt_field_uint_into(body + n, 15,
                            end_bytes > d->alloc_bytes ? end_bytes - d->alloc_bytes : 0);
  } else {
    n += lt_field_uint_into(body + n, 9, d->free_ns);
    n += lt_field_uint_into(body + n, 10, d->free_bytes);
    n += lt_field_uint_into(body + n, 11, d->free_tid);
    n += lt_field_uint_into(body + n, 12, d->free_fn);
  }
  double w = weight(d->size);
  if (w != 0.0) {
    uint64_t bits;
    memcpy(&bits, &w, 8);
    body[n++] = (uint8_t)((16 << 3) | LT_WT_I64);
    body[n++] = (uint8_t)((16 << 3) >> 7);
    for (int i = 0; i < 8; i++) body[n++] = (uint8_t)(bits >> (8 * i));
  }
  if (d->pred >= 0) {
    n += lt_field_uint_into(body + n, 17, 1);
    n += lt_field_uint_into(body + n, 18, (uint64_t)d->pred);
    n += lt_field_uint_into(body + n, 19, d->pred_hit);
    n += lt_field_uint_into(body + n, 20, d->pred_ns);
  }
  uint8_t head[12];
  size_t h = lt_varint_into(head, (4u << 3) | LT_WT_LEN); /* ProfileChunk.samples */
  h += lt_varint_into(head + h, n);
  lt_pb_raw(&pb, head, h);
  lt_pb_raw(&pb, body, n);
  lt_g.samples_written++;
  chunk_samples++;
  if (censored) {
    lt_g.censored_written++;
    chunk_censored++;
  }
}

struct censor_ctx {
  uint64_t end_ns, end_bytes;
};

static void emit_censored(const struct lt_live *e, void *vctx) {
  const struct censor_ctx *c = vctx;
  struct lt_done d = {.addr = e->addr, .size = e->size, .align = e->align,
                      .alloc_ns = e->alloc_ns, .alloc_bytes = e->alloc_bytes,
                      .stack_id = e->stack_id, .tid = e->tid, .fn = e->fn,
                      .pred = e->pred, .pred_hit = e->pred_hit, .pred_ns = e->pred_ns};
  emit_sample(&d, 1, c->end_ns, c->end_bytes);
}

#define TRAILER_MAX (512 + sizeof lt_g.exec_note_path)

/* The Trailer (ProfileChunk field 5), with the counts as they are now. */
static void encode_trailer(int mode, int reason, const struct censor_ctx *c) {
  ensure(TRAILER_MAX);
  lt_pb_begin(&pb, 5);
  lt_pb_uint(&pb, 1, (uint64_t)reason);
  lt_pb_int(&pb, 2, lt_unix_ns());
  lt_pb_uint(&pb, 3, c->end_ns);
  lt_pb_uint(&pb, 4, c->end_bytes);
  lt_pb_uint(&pb, 5, atomic_load(&lt_g.total_allocs));
  lt_pb_uint(&pb, 6, atomic_load(&lt_g.clock_bytes));
  lt_pb_uint(&pb, 7, lt_g.samples_written);
  lt_pb_uint(&pb, 8, lt_g.censored_written);
  lt_pb_uint(&pb, 9, atomic_load(&lt_g.dropped_samples));
  lt_pb_uint(&pb, 10, atomic_load(&lt_g.dropped_stacks));
  if (lt_online_enabled()) {
    lt_pb_begin(&pb, 11);
    lt_pb_uint(&pb, 1, atomic_load(&lt_online.calls));
    lt_pb_uint(&pb, 2, atomic_load(&lt_online.hits));
    lt_pb_uint(&pb, 3, atomic_load(&lt_online.misses));
    lt_pb_uint(&pb, 4, atomic_load(&lt_online.model_runs));
    lt_pb_uint(&pb, 5, atomic_load(&lt_online.revalidations));
    lt_pb_uint(&pb, 6, atomic_load(&lt_online.disagreements));
    lt_pb_uint(&pb, 7, atomic_load(&lt_online.failures));
    lt_pb_uint(&pb, 8, atomic_load(&lt_online.total_ns));
    lt_pb_end(&pb);
  }
  if (mode == LT_FLUSH_TENTATIVE && lt_g.exec_note_reason) {
    lt_pb_begin(&pb, 12); /* Trailer.unprofiled_exec */
    lt_pb_string(&pb, 1, lt_g.exec_note_path);
    lt_pb_string(&pb, 2, lt_g.exec_note_reason);
    lt_pb_end(&pb);
  }
  lt_pb_end(&pb);
}

void lt_flush(int mode, int reason) {
  if (lt_g.file_failed || !chunk) return;
  int final = mode == LT_FLUSH_FINAL || mode == LT_FLUSH_TENTATIVE;
  /* Modules dlopen'ed since the last flush become known to the online symbolizer. */
  if (lt_symbolize_stacks || lt_online_enabled()) lt_symtab_refresh();
  chunk_start();
  int first = !lt_g.header_written;
  if (first) encode_header();
  if (mode != LT_FLUSH_TENTATIVE) {
    struct lt_done *done;
    size_t n = lt_done_swap(&done);
    if (first || n || mode != LT_FLUSH_PERIODIC) lt_maps_emit(&pb, ensure);
    for (size_t i = 0; i < n; i++) emit_sample(&done[i], 0, 0, 0);
    if (lt_flush_extra) {
      emit_sample(lt_flush_extra, 0, 0, 0);
      lt_flush_extra = NULL;
    }
  }
  struct censor_ctx c = {0, 0};
  if (final) {
    c.end_ns = lt_mono_ns();
    c.end_bytes = atomic_load(&lt_g.clock_bytes);
    for (int s = 0; s < LT_STRIPES; s++) lt_live_for_each_stripe(s, emit_censored, &c);
    encode_trailer(mode, reason, &c);
    chunk_has_data = 1;
  }
  if (chunk_has_data && !chunk_write() && final) {
    /* The trailer went with a dropped chunk: write it again (after the header and the
     * mappings if they went too), counting that chunk's samples as dropped. */
    if (mode != LT_FLUSH_TENTATIVE) lt_maps_emit(&pb, ensure);
    encode_trailer(mode, reason, &c);
    (void)chunk_write();
  }
}
