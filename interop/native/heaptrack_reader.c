/* The hot part of `lifetime import --format heaptrack` (interop/heaptrack.py, issue 23):
 * the `+ SIZE NODE PTR` / `- PTR` lines of a raw heaptrack stream in heaptrack's exact
 * form, the live objects by pointer, the events of the open ~10 ms window, the clocks
 * of a closed window and the encoding of ProfileChunk.samples.  Python drives it
 * (ctypes) and reads every other line itself, with every check and message; a `+`/`-`
 * line of any other form, and an allocation over a bound, are handed back to Python,
 * which applies it here through ht_alloc / ht_free.
 *
 * Objects are rows [size, node, alloc_ns, alloc_bytes, ptr, bytes_b, ns_b] (the layout
 * interop/heaptrack.py documents): (ns_b, bytes_b) are the free's clocks of a freed
 * sample, the observed ages of a censored one.  Live objects at the end come out in the
 * order their pointers were first entered (a Python dict's order: an allocation over a
 * live pointer keeps the pointer's place). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE ((uint64_t)INT64_MAX)   /* PTRDIFF_MAX */
#define EMPTY UINT32_MAX

typedef struct {
    uint64_t size, node, alloc_ns, alloc_bytes, ptr, free_bytes, seq;
    uint8_t pending;   /* its allocation's window is still open (alloc_ns unset) */
    uint8_t dropped;   /* ended unobserved (address reused) while pending */
} obj_t;

typedef struct {
    /* live objects: open addressing, linear probing, pointer -> object slot */
    uint64_t *keys;
    uint32_t *vals;
    uint64_t mask, count;
    int bits;
    /* object slots */
    obj_t *objs;
    uint32_t nobjs, capobjs;
    uint32_t *freelist;
    uint32_t nfree, capfree;
    /* the open window: slot << 1 | is_free */
    uint32_t *window;
    uint64_t nwin, capwin;
    uint64_t total, unmatched, reused, seq;
} ht_state;

static inline uint64_t home(const ht_state *s, uint64_t key) {
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - s->bits);
}

static int table_init(ht_state *s, int bits) {
    uint64_t n = 1ull << bits;
    s->keys = malloc(n * sizeof(uint64_t));
    s->vals = malloc(n * sizeof(uint32_t));
    if (!s->keys || !s->vals) {
        free(s->keys);
        free(s->vals);
        return -1;
    }
    memset(s->vals, 0xff, n * sizeof(uint32_t));
    s->bits = bits;
    s->mask = n - 1;
    s->count = 0;
    return 0;
}

static int table_grow(ht_state *s) {
    uint64_t *keys = s->keys, n = s->mask + 1;
    uint32_t *vals = s->vals;
    if (table_init(s, s->bits + 1) < 0) {
        s->keys = keys;
        s->vals = vals;
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (vals[i] == EMPTY)
            continue;
        uint64_t j = home(s, keys[i]);
        while (s->vals[j] != EMPTY)
            j = (j + 1) & s->mask;
        s->keys[j] = keys[i];
        s->vals[j] = vals[i];
        s->count++;
    }
    free(keys);
    free(vals);
    return 0;
}

/* The index of key's entry, or of the empty entry where it would go. */
static inline uint64_t table_find(const ht_state *s, uint64_t key) {
    uint64_t i = home(s, key);
    while (s->vals[i] != EMPTY && s->keys[i] != key)
        i = (i + 1) & s->mask;
    return i;
}

static void table_remove(ht_state *s, uint64_t i) {
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        if (s->vals[j] == EMPTY)
            break;
        uint64_t k = home(s, s->keys[j]);
        if (((j - k) & s->mask) < ((j - i) & s->mask))
            continue;  /* its home lies in (i, j]: it stays */
        s->keys[i] = s->keys[j];
        s->vals[i] = s->vals[j];
        i = j;
    }
    s->vals[i] = EMPTY;
    s->count--;
}

static int64_t new_slot(ht_state *s) {
    if (s->nfree)
        return s->freelist[--s->nfree];
    if (s->nobjs == s->capobjs) {
        uint64_t cap = s->capobjs ? 2ull * s->capobjs : 4096;
        if (cap > INT32_MAX)  /* a window event is slot << 1 | is_free */
            cap = INT32_MAX;
        if (cap <= s->nobjs)
            return -1;
        obj_t *o = realloc(s->objs, cap * sizeof(obj_t));
        if (!o)
            return -1;
        s->objs = o;
        s->capobjs = (uint32_t)cap;
    }
    return s->nobjs++;
}

static int release(ht_state *s, uint32_t slot) {
    if (s->nfree == s->capfree) {
        uint64_t cap = s->capfree ? 2ull * s->capfree : 4096;
        uint32_t *f = realloc(s->freelist, cap * sizeof(uint32_t));
        if (!f)
            return -1;
        s->freelist = f;
        s->capfree = (uint32_t)cap;
    }
    s->freelist[s->nfree++] = slot;
    return 0;
}

static inline int push_event(ht_state *s, uint32_t ev) {
    if (s->nwin == s->capwin) {
        uint64_t cap = s->capwin ? 2 * s->capwin : 65536;
        uint32_t *w = realloc(s->window, cap * sizeof(uint32_t));
        if (!w)
            return -1;
        s->window = w;
        s->capwin = cap;
    }
    s->window[s->nwin++] = ev;
    return 0;
}

ht_state *ht_new(void) {
    ht_state *s = calloc(1, sizeof(ht_state));
    if (!s)
        return NULL;
    if (table_init(s, 16) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

void ht_delete(ht_state *s) {
    if (!s)
        return;
    free(s->keys);
    free(s->vals);
    free(s->objs);
    free(s->freelist);
    free(s->window);
    free(s);
}

uint64_t ht_total(const ht_state *s) { return s->total; }
uint64_t ht_unmatched(const ht_state *s) { return s->unmatched; }
uint64_t ht_reused(const ht_state *s) { return s->reused; }
uint64_t ht_live(const ht_state *s) { return s->count; }
uint64_t ht_window(const ht_state *s) { return s->nwin; }

/* An allocation whose bounds the caller checked (size <= PTRDIFF_MAX, a defined node,
 * total + size < 2^64).  0, or -1 out of memory. */
int ht_alloc(ht_state *s, uint64_t size, uint64_t node, uint64_t ptr) {
    if (2 * (s->count + 1) > s->mask + 1 && table_grow(s) < 0)
        return -1;
    int64_t slot = new_slot(s);
    if (slot < 0)
        return -1;
    s->total += size;
    uint64_t i = table_find(s, ptr);
    obj_t *o = &s->objs[slot];
    o->size = size;
    o->node = node;
    o->alloc_ns = 0;
    o->alloc_bytes = s->total;
    o->ptr = ptr;
    o->free_bytes = 0;
    o->pending = 1;
    o->dropped = 0;
    if (s->vals[i] != EMPTY) {  /* its free was never seen: ended unobserved */
        uint32_t old = s->vals[i];
        s->reused++;
        o->seq = s->objs[old].seq;  /* the pointer keeps its place */
        if (s->objs[old].pending)
            s->objs[old].dropped = 1;
        else if (release(s, old) < 0)
            return -1;
    } else {
        o->seq = s->seq++;
        s->keys[i] = ptr;
        s->count++;
    }
    s->vals[i] = (uint32_t)slot;
    return push_event(s, (uint32_t)slot << 1);
}

int ht_free(ht_state *s, uint64_t ptr) {
    uint64_t i = table_find(s, ptr);
    if (s->vals[i] == EMPTY) {
        s->unmatched++;
        return 0;
    }
    uint32_t slot = s->vals[i];
    table_remove(s, i);
    s->objs[slot].free_bytes = s->total;
    return push_event(s, slot << 1 | 1);
}

static const int8_t HEX[256] = {
    ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7,
    ['7'] = 8, ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14,
    ['e'] = 15, ['f'] = 16,
};

/* 1 to 16 lower-case hex digits at *p, then `stop`: the value, *p past `stop`. */
static inline int hex_field(const unsigned char **p, const unsigned char *end, char stop,
                            uint64_t *value) {
    const unsigned char *q = *p;
    uint64_t v = 0;
    int n = 0;
    while (q < end && HEX[*q]) {
        if (++n > 16)
            return 0;
        v = v << 4 | (uint64_t)(HEX[*q] - 1);
        q++;
    }
    if (n == 0 || q >= end || *q != (unsigned char)stop)
        return 0;
    *value = v;
    *p = q + 1;
    return 1;
}

/* Reads the lines of buf[pos, end), each ending in '\n', while they are `+`/`-` lines
 * of heaptrack's exact form (an allocation within its bounds: below n_nodes, the
 * bytes clock below 2^64).  Returns where the first other line starts (end: none);
 * *lines: how many were read.  -1: out of memory. */
int64_t ht_feed(ht_state *s, const char *buf, int64_t pos, int64_t end, uint64_t n_nodes,
                int64_t *lines) {
    const unsigned char *p = (const unsigned char *)buf + pos;
    const unsigned char *e = (const unsigned char *)buf + end;
    int64_t n = 0;
    while (p < e) {
        const unsigned char *q = p + 2;
        if (p[0] == '+' && p + 1 < e && p[1] == ' ') {
            uint64_t size, node, ptr;
            if (!hex_field(&q, e, ' ', &size) || !hex_field(&q, e, ' ', &node) ||
                !hex_field(&q, e, '\n', &ptr))
                break;
            if (size > MAX_SIZE || node == 0 || node >= n_nodes || s->total > UINT64_MAX - size)
                break;
            if (ht_alloc(s, size, node, ptr) < 0)
                return -1;
        } else if (p[0] == '-' && p + 1 < e && p[1] == ' ') {
            uint64_t ptr;
            if (!hex_field(&q, e, '\n', &ptr))
                break;
            if (ht_free(s, ptr) < 0)
                return -1;
        } else {
            break;
        }
        p = q;
        n++;
    }
    *lines = n;
    return (int64_t)(p - (const unsigned char *)buf);
}

/* Closes the window: its k-th of n events gets t0 + span (2k + 1) // 2n (exact).  The
 * freed objects' rows go to `rows` (room for ht_window() rows), in order; returns how
 * many, or -1 out of memory. */
int64_t ht_stamp(ht_state *s, uint64_t t0, uint64_t span, uint64_t *rows) {
    uint64_t n = s->nwin, out = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t t = t0 + (uint64_t)(((unsigned __int128)span * (2 * k + 1)) / (2 * (unsigned __int128)n));
        uint32_t ev = s->window[k], slot = ev >> 1;
        obj_t *o = &s->objs[slot];
        if (!(ev & 1)) {
            o->alloc_ns = t;
            o->pending = 0;
            if (o->dropped && release(s, slot) < 0)
                return -1;
        } else {
            uint64_t *r = rows + 7 * out++;
            r[0] = o->size;
            r[1] = o->node;
            r[2] = o->alloc_ns;
            r[3] = o->alloc_bytes;
            r[4] = o->ptr;
            r[5] = o->free_bytes;
            r[6] = t;
            if (release(s, slot) < 0)
                return -1;
        }
    }
    s->nwin = 0;
    return (int64_t)out;
}

typedef struct {
    uint64_t seq;
    uint32_t slot;
} order_t;

static int by_seq(const void *a, const void *b) {
    uint64_t x = ((const order_t *)a)->seq, y = ((const order_t *)b)->seq;
    return (x > y) - (x < y);
}

/* The live objects' rows (room for ht_live() rows) in their pointers' order, with
 * their observed ages at (end_ns, the bytes clock); the window must be closed.
 * Returns how many, or -1 out of memory. */
int64_t ht_censored(ht_state *s, uint64_t end_ns, uint64_t *rows) {
    order_t *order = malloc((s->count ? s->count : 1) * sizeof(order_t));
    if (!order)
        return -1;
    uint64_t n = 0;
    for (uint64_t i = 0; i <= s->mask; i++)
        if (s->vals[i] != EMPTY) {
            order[n].slot = s->vals[i];
            order[n].seq = s->objs[s->vals[i]].seq;
            n++;
        }
    qsort(order, n, sizeof(order_t), by_seq);
    for (uint64_t k = 0; k < n; k++) {
        const obj_t *o = &s->objs[order[k].slot];
        uint64_t *r = rows + 7 * k;
        r[0] = o->size;
        r[1] = o->node;
        r[2] = o->alloc_ns;
        r[3] = o->alloc_bytes;
        r[4] = o->ptr;
        r[5] = s->total - o->alloc_bytes;
        r[6] = end_ns - o->alloc_ns;
    }
    free(order);
    return (int64_t)n;
}

static inline unsigned char *varint(unsigned char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static inline unsigned char *field(unsigned char *p, unsigned char tag, uint64_t v) {
    if (!v)
        return p;  /* proto3 leaves zeros out */
    *p++ = tag;
    return varint(p, v);
}

/* ProfileChunk.samples (field 4) for n rows, the first n_freed freed, the rest
 * censored: the bytes protobuf's deterministic serialization writes for the Sample
 * messages (fields in number order, zeros left out, weight 1.0).  `out` holds at least
 * HT_SAMPLE_MAX bytes a row; returns the bytes written. */
#define HT_SAMPLE_MAX 128
int64_t ht_sample_max(void) { return HT_SAMPLE_MAX; }

int64_t ht_encode(const uint64_t *rows, int64_t n, int64_t n_freed, unsigned char *out) {
    static const unsigned char weight[10] = {0x81, 0x01, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    unsigned char body[HT_SAMPLE_MAX];
    unsigned char *o = out;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t *r = rows + 7 * i;
        unsigned char *b = body;
        b = field(b, 0x08, r[1]);   /* stack_id 1 */
        b = field(b, 0x10, r[0]);   /* size 2 */
        b = field(b, 0x28, r[4]);   /* address 5 */
        b = field(b, 0x30, r[2]);   /* alloc_monotonic_ns 6 */
        b = field(b, 0x38, r[3]);   /* alloc_allocated_bytes 7 */
        if (i < n_freed) {
            b = field(b, 0x48, r[6]);  /* free_monotonic_ns 9 */
            b = field(b, 0x50, r[5]);  /* free_allocated_bytes 10 */
            b = field(b, 0x60, 1);     /* free_function = FREE 12 */
        } else {
            b = field(b, 0x68, 1);     /* censored 13 */
            b = field(b, 0x70, r[6]);  /* observed_age_ns 14 */
            b = field(b, 0x78, r[5]);  /* observed_age_bytes 15 */
        }
        memcpy(b, weight, sizeof weight);  /* weight 16: 1.0 */
        b += sizeof weight;
        *o++ = 0x22;
        o = varint(o, (uint64_t)(b - body));
        memcpy(o, body, (size_t)(b - body));
        o += b - body;
    }
    return (int64_t)(o - out);
}
