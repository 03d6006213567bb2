/* Stack capture.
 *
 * Default: a small DWARF-CFI unwinder for x86-64 that is correct without frame
 * pointers (Debian's clang, pyenv's CPython) and fast in the steady state:
 *
 *   - the unwind rule for each return address is computed once from .eh_frame
 *     (found with glibc's lock-free _dl_find_object + the .eh_frame_hdr binary search
 *     table) and cached in a global table of single 64-bit words
 *     (8-way set-associative, 256 KiB), so a warm frame costs one hash, one cache
 *     line, 1-2 stack reads;
 *   - it never allocates, takes no locks, makes no syscalls on the warm path;
 *   - every stack read is bounds-checked against the current thread's stack; reads
 *     outside it (sigaltstack, fibers) go through process_vm_readv, which fails
 *     cleanly instead of faulting, so a wrong or stale rule yields a wrong frame,
 *     never a crash.
 * Supported rules: CFA = rsp/rbp + offset, CFA = *(rbp + offset) (stack realignment),
 * return address at CFA + offset, rbp saved at CFA + offset or at rbp + offset, signal
 * frames (CIE augmentation 'S', e.g. __restore_rt: registers come from the ucontext),
 * and DW_CFA_undefined rip (outermost frame).  Anything else ends the stack there.
 *
 * LIFETIME_UNWINDER=glibc (backtrace()) and =libunwind (unw_backtrace() from
 * libunwind.so.8, dlopen'ed RTLD_LOCAL so its _Unwind_* exports cannot replace
 * libgcc's for the host's C++ exceptions) exist to compare against, see
 * benchmarks/profiler_overhead.py.
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cfi.h"
#include "unwind.h"

extern void *__libc_stack_end;

static int unwinder = LT_UNWIND_BUILTIN;
static int (*unw_backtrace_fn)(void **, int);

/* ---------------- rule cache ----------------
 * 8-way set-associative: 4096 sets of one 64-byte cache line (256 KiB in all), so a
 * lookup touches exactly one line, and the ~10-15k return addresses of a big program
 * fit in a footprint that survives in L2/L3 between sparse samples (a cold rule
 * lookup is what dominates the cost of a sample).  Each slot is one 64-bit word,
 * read and written atomically, so no locks and no torn entries:
 *   bits 0-1 type (1 CFA=rsp+off, 2 CFA=rbp+off, 3 special), 2-17 CFA offset,
 *   18-23 k where rbp is saved at CFA-8k (0: not saved), bit 24 "end of stack",
 *   bit 25 "not cacheable: recompute", bits 26-60 ip >> 12.
 * The set index is (ip ^ ip>>12 ^ ip>>24 ^ ip>>36) mod 4096, so set + tag identify the
 * 47-bit ip exactly. */
#define CACHE_SETS_BITS 12
#define CACHE_WAYS 8
#define TAG_SHIFT 26
static _Atomic uint64_t *rule_cache;

static inline uint32_t cache_set(uintptr_t ip) {
  return (uint32_t)((ip ^ (ip >> 12) ^ (ip >> 24) ^ (ip >> 36)) & ((1u << CACHE_SETS_BITS) - 1));
}

static uint64_t pack(uintptr_t ip, const struct rule *r) {
  uint64_t tag = (uint64_t)(ip >> 12) << TAG_SHIFT;
  if (r->kind == RULE_END) return tag | 3u | (1ull << 24);
  if (r->kind == RULE_NORMAL && !r->cfa_deref && r->ra_off == -8 && r->cfa_off > 0 &&
      r->cfa_off < (1 << 16)) {
    uint64_t k = 0;
    if (r->rbp_how == HOW_OFFSET) {
      if (r->rbp_off >= 0 || (-r->rbp_off) % 8 || -r->rbp_off / 8 > 63) goto complex;
      k = (uint64_t)(-r->rbp_off / 8);
    } else if (r->rbp_how != HOW_SAME) {
      goto complex;
    }
    return tag | (r->cfa_reg == R_RSP ? 1u : 2u) | ((uint64_t)r->cfa_off << 2) | (k << 18);
  }
complex:
  return tag | 3u | (1ull << 25); /* bad and signal rules are recomputed each time */
}

static inline int get_rule(uintptr_t ip, struct rule *r) {
  if (LT_LIKELY(rule_cache && (ip >> 47) == 0)) {
    _Atomic uint64_t *set = &rule_cache[(size_t)cache_set(ip) * CACHE_WAYS];
    uint64_t want = (uint64_t)(ip >> 12);
    for (int way = 0; way < CACHE_WAYS; way++) {
      uint64_t w = atomic_load_explicit(&set[way], memory_order_relaxed);
      if (!w || (w >> TAG_SHIFT) != want) continue;
      uint32_t type = w & 3;
      if (type != 3) {
        r->kind = RULE_NORMAL;
        r->cfa_reg = type == 1 ? R_RSP : R_RBP;
        r->cfa_off = (int64_t)((w >> 2) & 0xffff);
        r->cfa_deref = 0;
        uint64_t k = (w >> 18) & 63;
        r->rbp_how = k ? HOW_OFFSET : HOW_SAME;
        r->rbp_off = -(int64_t)(k * 8);
        r->ra_off = -8;
        return 1;
      }
      if (w & (1ull << 24)) {
        r->kind = RULE_END;
        return 1;
      }
      lt_cfi_rule(ip, r); /* not cacheable */
      return r->kind != RULE_BAD;
    }
    lt_cfi_rule(ip, r);
    uint64_t packed = pack(ip, r);
    int victim = -1;
    for (int way = 0; way < CACHE_WAYS && victim < 0; way++)
      if (!atomic_load_explicit(&set[way], memory_order_relaxed)) victim = way;
    if (victim < 0) victim = (int)((ip >> 2) ^ (ip >> 9)) & (CACHE_WAYS - 1);
    atomic_store_explicit(&set[victim], packed, memory_order_relaxed);
    return r->kind != RULE_BAD;
  }
  lt_cfi_rule(ip, r);
  return r->kind != RULE_BAD;
}

/* ---------------- the walk ---------------- */

struct bounds {
  uintptr_t lo, hi; /* reads inside [lo, hi) are direct */
};

LT_NO_SANITIZE static inline int rd(const struct bounds *b, uintptr_t addr, uintptr_t *out) {
  if (LT_LIKELY(b->hi >= 8 && addr >= b->lo && addr <= b->hi - 8)) {
    __builtin_memcpy(out, (const void *)addr, 8); /* inlined: the library has -fno-builtin */
    return 1;
  }
  struct iovec local = {out, 8}, remote = {(void *)addr, 8};
  return syscall(SYS_process_vm_readv, (long)lt_getpid(), &local, 1L, &remote, 1L, 0L) == 8;
}

/* rd() reads addr directly (no syscall). */
static inline int in_bounds(const struct bounds *b, uintptr_t addr) {
  return b->hi >= 8 && addr >= b->lo && addr <= b->hi - 8;
}

static void set_bounds(struct bounds *b, const struct lt_thread *t, uintptr_t sp) {
  if (t->stack_known && sp >= t->stack_lo && sp < t->stack_hi) {
    b->lo = sp;
    b->hi = t->stack_hi;
  } else {
    b->lo = b->hi = 0; /* everything through the checked path */
  }
}

/* ---------------- the walk's memo ----------------
 * A full trace unwinds at every allocation, and consecutive walks of a thread share
 * most of their frames (the callers of the allocating function).  Each step of a walk
 * maps a state (ip, sp, bp, exact) to the next one through the ip's rule (which
 * depends on ip alone) and one or two words read from the stack (the return address,
 * the saved rbp).  The memo keeps, for every step of the thread's previous walk, that
 * state, the addresses read and the values they held.  A step whose state equals a
 * kept one reads the same addresses again and, if they still hold the same values,
 * takes the kept next state: exactly what the rule would compute, without looking it
 * up.  Anything else (another state, a changed word, a signal frame, a CFA read
 * through memory, a read outside the thread's stack) is a normal step.  Kept steps
 * are in the order of the walk (sp increasing), so a walk finds its matches by
 * merging. */
#define MEMO_STEPS (LT_MAX_FRAMES + 64)
enum { MEMO_STEP = 0, MEMO_END = 1 };
struct memo_step {
  uintptr_t ip, sp, bp;
  uintptr_t ra_at, bp_at;  /* addresses read (bp_at 0: rbp unchanged) */
  uintptr_t nip, nsp, nbp; /* the next state (nbp: when bp_at) */
  uint32_t exact, kind;
  uint32_t uses_bp;        /* the rule reads rbp: bp is part of the state */
  uint32_t rel;            /* REL_SP / REL_BP: every address of the step is that
                            * register plus a constant (the rule's), else REL_NONE */
};
enum { REL_NONE = 0, REL_SP = 1, REL_BP = 2 };
struct lt_unwind_memo {
  int n;                               /* steps of the previous walk */
  struct memo_step steps[MEMO_STEPS];  /* the previous walk */
  struct memo_step fresh[MEMO_STEPS];  /* this walk's own steps, put together at its end */
};

void lt_unwind_memo_start(struct lt_thread *t) {
  if (t->memo_tried) return;
  t->memo_tried = 1;
  t->unwind_memo = lt_map(sizeof(struct lt_unwind_memo));
}

void lt_unwind_memo_end(struct lt_thread *t) {
  struct lt_unwind_memo *m = t->unwind_memo;
  t->unwind_memo = NULL; /* memo_tried stays set: not mapped again on this thread */
  if (m) munmap(m, sizeof *m);
}

static inline int in_bounds(const struct bounds *b, uintptr_t addr);

/* Once the walk records frames (recording) and reaches a kept state, the rest of the
 * previous walk is checked in one tight loop (replay_run): step by step, the words it
 * read must hold the same values and each kept step must start where the one before
 * it ended; every such step's return address is appended as the walk would.  It
 * returns the kept steps used; the walk goes on normally after them. */
LT_NO_SANITIZE static inline int replay_run(const struct memo_step *o, int avail,
                                            const struct bounds *b, uintptr_t *bp,
                                            uintptr_t *out, int *n, int max, int *truncated,
                                            int *steps_left, int *stop) {
  int k = 0;
  uintptr_t cur_bp = *bp;
  while (k < avail && *steps_left > 0) {
    const struct memo_step *e = &o[k];
    if (e->kind == MEMO_END) {
      k++;
      *stop = 1;
      break;
    }
    uintptr_t v;
    if (!in_bounds(b, e->ra_at)) break;
    __builtin_memcpy(&v, (const void *)e->ra_at, 8);
    if (v != e->nip) break;
    if (e->bp_at) { /* the saved rbp: whatever it holds now is the next rbp */
      if (!in_bounds(b, e->bp_at)) break;
      __builtin_memcpy(&cur_bp, (const void *)e->bp_at, 8);
    }
    k++;
    (*steps_left)--;
    if (e->nip < 4096) {
      *stop = 1;
      break;
    }
    if (*n == max) {
      *truncated = 1;
      *stop = 1;
      break;
    }
    out[(*n)++] = e->nip;
    if (k < avail) { /* the next kept step must start from this one's end */
      const struct memo_step *f = &o[k];
      if (f->sp != e->nsp || f->ip != e->nip || f->exact || (f->uses_bp && f->bp != cur_bp))
        break;
    }
  }
  *bp = cur_bp;
  return k;
}

LT_NOINLINE LT_NO_SANITIZE static int capture_builtin(uintptr_t *out, int max,
                                                      uintptr_t caller_ra, int *truncated,
                                                      struct lt_thread *t) {
  uintptr_t ip, sp, bp;
  __asm__ volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2"
                   : "=r"(ip), "=r"(sp), "=r"(bp));
  struct bounds b;
  set_bounds(&b, t, sp);
  int exact = 1; /* ip is not a return address (first frame, after a signal frame) */
  int recording = caller_ra == 0, n = 0, skipped = 0;
  *truncated = 0;
  /* The memo (above): this walk's steps go to memo->fresh, except the first `same`
   * ones, replayed kept steps at their own place (left where they are), and a run
   * replayed from the previous walk (kept steps [run_at, run_at + run_len), after the
   * first run_pos steps); put together at the end. */
  struct lt_unwind_memo *memo = t->unwind_memo;
  int old_n = memo ? memo->n : 0, oi = 0, fresh_n = 0, same = 0;
  int run_at = 0, run_len = 0, run_pos = 0, use_memo = memo != NULL;
  for (int step = 0; step < max + 64; step++) {
    uintptr_t nip, nsp, nbp = bp;
    if (use_memo) {
      const struct memo_step *old = memo->steps;
      while (oi < old_n && old[oi].sp < sp) oi++;
      const struct memo_step *o = &old[oi];
      if (oi < old_n && o->sp == sp && o->ip == ip && o->exact == (uint32_t)exact &&
          (!o->uses_bp || o->bp == bp)) {
        if (recording) { /* the rest of the previous walk, in one go */
          int left = max + 64 - step, stop = 0;
          uintptr_t nb = bp;
          int used = replay_run(o, old_n - oi, &b, &nb, out, &n, max, truncated, &left, &stop);
          if (used) {
            run_at = oi;
            run_len = used;
            run_pos = fresh_n;
            use_memo = 0; /* one run a walk */
            if (stop) break;
            const struct memo_step *e = &old[oi + used - 1];
            sp = e->nsp;
            ip = e->nip;
            bp = nb;
            exact = 0;
            step = max + 64 - left - 1; /* the loop's ++ makes it the next step */
            continue;
          }
        } else if (o->kind == MEMO_END) { /* the end: a matter of ip alone */
          if (fresh_n < MEMO_STEPS) memo->fresh[fresh_n++] = *o;
          break;
        } else {
          uintptr_t v;
          if (in_bounds(&b, o->ra_at) &&
              (__builtin_memcpy(&v, (const void *)o->ra_at, 8), v == o->nip) &&
              (!o->bp_at || in_bounds(&b, o->bp_at))) {
            /* the same step as last time: the rule would give o's next state (the
             * saved rbp, if any, read again: only a step that uses rbp needs it equal) */
            if (o->bp_at) __builtin_memcpy(&nbp, (const void *)o->bp_at, 8);
            if (fresh_n == same && oi == same) { /* in place: stays as it is */
              fresh_n = ++same;
            } else if (fresh_n < MEMO_STEPS) {
              memo->fresh[fresh_n] = *o;
              memo->fresh[fresh_n].bp = bp;
              memo->fresh[fresh_n++].nbp = nbp;
            }
            oi++;
            nip = o->nip;
            nsp = o->nsp;
            exact = 0;
            goto next;
          }
        }
      }
      /* Not the same state, but the same ip at the same step of the walk as last time
       * (typically our own frames and the allocating function's, at another stack
       * depth): a rule that does not read rbp moves sp by constants and reads at
       * constant offsets from it, so the kept step gives them without a rule lookup.
       * The words are read, not compared: this is the rule's own computation. */
      if (step < old_n) {
        const struct memo_step *q = &old[step];
        if (q->kind == MEMO_STEP && q->rel && q->ip == ip && q->exact == (uint32_t)exact) {
          uintptr_t from = q->rel == REL_SP ? q->sp : q->bp, base = q->rel == REL_SP ? sp : bp;
          uintptr_t ra_at = base + (q->ra_at - from), bp_at = q->bp_at ? base + (q->bp_at - from) : 0;
          if (in_bounds(&b, ra_at) && (!bp_at || in_bounds(&b, bp_at))) {
            nsp = base + (q->nsp - from);
            if (nsp <= sp) break; /* as the rule's step: the stack only grows upwards */
            __builtin_memcpy(&nip, (const void *)ra_at, 8);
            if (bp_at) __builtin_memcpy(&nbp, (const void *)bp_at, 8);
            if (fresh_n < MEMO_STEPS)
              memo->fresh[fresh_n++] = (struct memo_step){
                  .ip = ip, .sp = sp, .bp = bp, .ra_at = ra_at, .bp_at = bp_at, .nip = nip,
                  .nsp = nsp, .nbp = nbp, .exact = (uint32_t)exact, .kind = MEMO_STEP,
                  .uses_bp = q->uses_bp, .rel = q->rel};
            exact = 0;
            goto next;
          }
        }
      }
    }
    struct rule r;
    int have = get_rule(exact ? ip : ip - 1, &r);
    if (!have || r.kind == RULE_END) {
      /* the end of the stack is kept (the rule cache keeps it too); a failed rule
       * lookup is not (the rule cache computes it again each time) */
      if (have && memo && fresh_n < MEMO_STEPS)
        memo->fresh[fresh_n++] = (struct memo_step){.ip = ip, .sp = sp, .bp = bp,
                                                    .exact = (uint32_t)exact, .kind = MEMO_END};
      break;
    }
    if (r.kind == RULE_SIGNAL) {
      uintptr_t uc = sp; /* __restore_rt runs with rsp at the ucontext */
      if (!rd(&b, uc + offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]), &nip) ||
          !rd(&b, uc + offsetof(ucontext_t, uc_mcontext.gregs[REG_RSP]), &nsp) ||
          !rd(&b, uc + offsetof(ucontext_t, uc_mcontext.gregs[REG_RBP]), &nbp))
        break;
      set_bounds(&b, t, nsp);
      exact = 1;
    } else {
      uintptr_t cfa = (r.cfa_reg == R_RSP ? sp : bp) + (uintptr_t)r.cfa_off;
      if (r.cfa_deref && !rd(&b, cfa, &cfa)) break;
      if (!rd(&b, cfa + (uintptr_t)r.ra_off, &nip)) break;
      if (r.rbp_how == HOW_OFFSET) {
        if (!rd(&b, cfa + (uintptr_t)r.rbp_off, &nbp)) break;
      } else if (r.rbp_how == HOW_ADDR_EXPR) {
        uintptr_t base = r.rbp_reg == R_RBP ? bp : sp;
        if (!rd(&b, base + (uintptr_t)r.rbp_off, &nbp)) break;
      }
      nsp = cfa;
      if (nsp <= sp) break; /* the stack only grows towards the callers */
      if (memo && !r.cfa_deref && fresh_n < MEMO_STEPS) {
        uintptr_t ra_at = cfa + (uintptr_t)r.ra_off, bp_at = 0;
        if (r.rbp_how == HOW_OFFSET)
          bp_at = cfa + (uintptr_t)r.rbp_off;
        else if (r.rbp_how == HOW_ADDR_EXPR)
          bp_at = (r.rbp_reg == R_RBP ? bp : sp) + (uintptr_t)r.rbp_off;
        if (in_bounds(&b, ra_at) && (!bp_at || in_bounds(&b, bp_at)))
          memo->fresh[fresh_n++] = (struct memo_step){
              .ip = ip, .sp = sp, .bp = bp, .ra_at = ra_at, .bp_at = bp_at, .nip = nip,
              .nsp = nsp, .nbp = nbp, .exact = (uint32_t)exact, .kind = MEMO_STEP,
              .uses_bp = r.cfa_reg == R_RBP || (r.rbp_how == HOW_ADDR_EXPR && r.rbp_reg == R_RBP),
              .rel = r.rbp_how == HOW_ADDR_EXPR && r.rbp_reg != r.cfa_reg ? REL_NONE
                     : r.cfa_reg == R_RSP ? REL_SP : REL_BP};
      }
      exact = 0;
    }
  next:
    sp = nsp;
    bp = nbp;
    ip = nip;
    if (ip < 4096) break;
    if (!recording) {
      if (ip == caller_ra) {
        recording = 1;
      } else if (++skipped > 16) {
        return 0; /* our own frames did not lead to the hook's caller (memo unchanged) */
      } else {
        continue;
      }
    }
    if (n == max) {
      *truncated = 1;
      break;
    }
    out[n++] = ip;
  }
  if (memo) { /* the kept walk: steps[0, same) as they are, fresh[same, run_pos), the
                * run, fresh[run_pos, fresh_n) */
    if (!run_len) run_pos = fresh_n;
    int after = fresh_n - run_pos;
    if (run_len + fresh_n > MEMO_STEPS) run_len = MEMO_STEPS - fresh_n;
    if (run_len < 0) run_len = 0;
    if (run_len && run_at != run_pos)
      memmove(&memo->steps[run_pos], &memo->steps[run_at], sizeof(struct memo_step) * (size_t)run_len);
    if (run_pos > same)
      memcpy(&memo->steps[same], &memo->fresh[same], sizeof(struct memo_step) * (size_t)(run_pos - same));
    if (after)
      memcpy(&memo->steps[run_pos + run_len], &memo->fresh[run_pos],
             sizeof(struct memo_step) * (size_t)after);
    memo->n = run_pos + run_len + after;
  }
  return n;
}

LT_NOINLINE static int capture_buffer(uintptr_t *out, int max, uintptr_t caller_ra,
                                      int *truncated) {
  void *buf[LT_MAX_FRAMES + 24];
  int cap = max + 24, k;
  if (unwinder == LT_UNWIND_LIBUNWIND && unw_backtrace_fn)
    k = unw_backtrace_fn(buf, cap);
  else
    k = backtrace(buf, cap);
  int i = 0;
  while (i < k && i < 24 && (uintptr_t)buf[i] != caller_ra) i++;
  if (i == k || i == 24) return 0;
  int n = 0;
  *truncated = 0;
  for (; i < k; i++) {
    if (n == max) {
      *truncated = 1;
      break;
    }
    out[n++] = (uintptr_t)buf[i];
  }
  if (k == cap && n < max) *truncated = 1; /* the buffer ran out first */
  return n;
}

static int ready; /* set by lt_unwind_init (constructor); before it only builtin runs */
static _Atomic uint64_t check_total, check_differ, check_frames, check_frames_differ;
static _Atomic uint64_t memo_checked, memo_differ;

/* LIFETIME_UNWINDER=check: record the builtin stack, and compare it frame by frame
 * with glibc's backtrace() of the same allocation (a correctness check on real
 * binaries; lt_unwind_report prints the result at exit). */
static int capture_check(uintptr_t *out, int max, uintptr_t caller_ra, int *truncated,
                         struct lt_thread *t) {
  uintptr_t other[LT_MAX_FRAMES];
  int other_trunc = 0;
  int n = capture_builtin(out, max, caller_ra, truncated, t);
  if (t && t->unwind_memo) { /* the memo's walk against a walk without it */
    struct lt_unwind_memo *memo = t->unwind_memo;
    int plain_trunc = 0;
    t->unwind_memo = NULL;
    int p = capture_builtin(other, max, caller_ra, &plain_trunc, t);
    t->unwind_memo = memo;
    int differ = p != n || plain_trunc != *truncated;
    for (int i = 0; !differ && i < n; i++) differ = other[i] != out[i];
    atomic_fetch_add(&memo_checked, 1);
    if (differ) atomic_fetch_add(&memo_differ, 1);
  }
  int m = capture_buffer(other, max, caller_ra, &other_trunc);
  int k = n > m ? n : m, bad = 0;
  for (int i = 0; i < k; i++) bad += i >= n || i >= m || out[i] != other[i];
  atomic_fetch_add(&check_total, 1);
  atomic_fetch_add(&check_frames, (uint64_t)k);
  atomic_fetch_add(&check_frames_differ, (uint64_t)bad);
  if (bad) atomic_fetch_add(&check_differ, 1);
  return n;
}

void lt_unwind_report(void) {
  if (unwinder != LT_UNWIND_CHECK) return;
  char a[24], b[24], c[24], d[24], line[300];
  size_t n = lt_strlcpy(line, "unwinder check: ", sizeof line);
  n += lt_strlcpy(line + n, lt_utoa(atomic_load(&check_differ), a), sizeof line - n);
  n += lt_strlcpy(line + n, " of ", sizeof line - n);
  n += lt_strlcpy(line + n, lt_utoa(atomic_load(&check_total), b), sizeof line - n);
  n += lt_strlcpy(line + n, " stacks differ from backtrace(), ", sizeof line - n);
  n += lt_strlcpy(line + n, lt_utoa(atomic_load(&check_frames_differ), c), sizeof line - n);
  n += lt_strlcpy(line + n, " of ", sizeof line - n);
  n += lt_strlcpy(line + n, lt_utoa(atomic_load(&check_frames), d), sizeof line - n);
  n += lt_strlcpy(line + n, " frames", sizeof line - n);
  if (atomic_load(&memo_checked)) { /* full trace: the walks replayed from the memo */
    n += lt_strlcpy(line + n, "; memo: ", sizeof line - n);
    n += lt_strlcpy(line + n, lt_utoa(atomic_load(&memo_differ), a), sizeof line - n);
    n += lt_strlcpy(line + n, " of ", sizeof line - n);
    n += lt_strlcpy(line + n, lt_utoa(atomic_load(&memo_checked), b), sizeof line - n);
    lt_strlcpy(line + n, " walks differ from a walk without it", sizeof line - n);
  }
  lt_log(line, NULL, NULL);
}

int lt_capture(uintptr_t *out, int max, uintptr_t caller_ra, int *truncated,
               struct lt_thread *t) {
  if (LT_LIKELY(unwinder == LT_UNWIND_BUILTIN || !ready))
    return capture_builtin(out, max, caller_ra, truncated, t);
  if (unwinder == LT_UNWIND_CHECK) return capture_check(out, max, caller_ra, truncated, t);
  return capture_buffer(out, max, caller_ra, truncated);
}

void lt_thread_stack_bounds(struct lt_thread *t) {
  t->stack_known = 1;
  t->stack_lo = t->stack_hi = 0;
  if (t->tid == lt_getpid()) {
    uintptr_t hi = (uintptr_t)__libc_stack_end + 64; /* argc/argv lie above it */
    struct rlimit rl;
    uintptr_t size = 1ull << 30;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < size)
      size = rl.rlim_cur;
    t->stack_lo = hi - size;
    t->stack_hi = hi;
    return;
  }
  pthread_attr_t a;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    void *addr;
    size_t size;
    if (pthread_attr_getstack(&a, &addr, &size) == 0) {
      t->stack_lo = (uintptr_t)addr;
      t->stack_hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&a);
  }
}

int lt_unwind_prepare(void) {
  if (!rule_cache) rule_cache = lt_map(sizeof(uint64_t) * CACHE_WAYS << CACHE_SETS_BITS);
  return rule_cache != NULL;
}

int lt_unwind_init(int which) {
  unwinder = which;
  int ok = 1;
  if (which == LT_UNWIND_GLIBC || which == LT_UNWIND_CHECK) {
    void *buf[4];
    backtrace(buf, 4); /* loads libgcc_s now, not inside a later malloc */
  } else if (which == LT_UNWIND_LIBUNWIND) {
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) {
      unw_backtrace_fn = (int (*)(void **, int))dlsym(h, "unw_backtrace");
      int (*policy)(void *, int) = (int (*)(void *, int))dlsym(h, "_ULx86_64_set_caching_policy");
      void **as = (void **)dlsym(h, "_ULx86_64_local_addr_space");
      if (policy && as) policy(*as, 2 /* UNW_CACHE_PER_THREAD */);
    }
    if (!unw_backtrace_fn) {
      unwinder = LT_UNWIND_BUILTIN;
      ok = 0;
    }
  }
  ready = 1;
  return ok;
}
