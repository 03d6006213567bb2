/* DWARF call frame information (.eh_frame) for x86-64: the CIE and FDE readers and the
 * CFA program interpreter behind lt_cfi_rule (cfi.h).  The supported rules are listed in
 * unwind.c, which walks stacks with them. */
#include <dlfcn.h>
#include <string.h>

#include "cfi.h"

struct reg_rule {
  uint8_t how;
  uint8_t reg;  /* HOW_ADDR_EXPR: saved at reg + off */
  int64_t off;
};
struct cfa_state {
  int cfa_reg;  /* -1: unsupported */
  int64_t cfa_off;
  int cfa_deref;
  struct reg_rule rbp, ra;
};

static uint64_t uleb(const uint8_t **pp, const uint8_t *end) {
  const uint8_t *p = *pp;
  uint64_t v = 0;
  int shift = 0;
  while (p < end) {
    uint8_t b = *p++;
    if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
    if (!(b & 0x80)) break;
  }
  *pp = p;
  return v;
}

static int64_t sleb(const uint8_t **pp, const uint8_t *end) {
  const uint8_t *p = *pp;
  int64_t v = 0;
  int shift = 0;
  uint8_t b = 0;
  while (p < end) {
    b = *p++;
    if (shift < 64) v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
    shift += 7;
    if (!(b & 0x80)) break;
  }
  if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
  *pp = p;
  return v;
}

/* Reads a DW_EH_PE-encoded pointer; returns 0 on an unsupported encoding. */
static int read_encoded(const uint8_t **pp, const uint8_t *end, uint8_t enc, uintptr_t datarel,
                        uintptr_t *out) {
  const uint8_t *p = *pp;
  if (enc == 0xff) { *out = 0; return 1; }
  uintptr_t base;
  switch (enc & 0x70) {
    case 0x00: base = 0; break;
    case 0x10: base = (uintptr_t)p; break;
    case 0x30: base = datarel; break;
    default: return 0;
  }
  uint64_t v;
  switch (enc & 0x0f) {
    case 0x00: case 0x04: { uint64_t x; memcpy(&x, p, 8); p += 8; v = x; break; }
    case 0x01: v = uleb(&p, end); break;
    case 0x02: { uint16_t x; memcpy(&x, p, 2); p += 2; v = x; break; }
    case 0x03: { uint32_t x; memcpy(&x, p, 4); p += 4; v = x; break; }
    case 0x09: v = (uint64_t)sleb(&p, end); break;
    case 0x0a: { int16_t x; memcpy(&x, p, 2); p += 2; v = (uint64_t)(int64_t)x; break; }
    case 0x0b: { int32_t x; memcpy(&x, p, 4); p += 4; v = (uint64_t)(int64_t)x; break; }
    case 0x0c: { int64_t x; memcpy(&x, p, 8); p += 8; v = (uint64_t)x; break; }
    default: return 0;
  }
  uintptr_t r = base + (uintptr_t)v;
  if (enc & 0x80) {
    if (!r) return 0;
    memcpy(&r, (const void *)r, sizeof r);
  }
  *pp = p;
  *out = r;
  return 1;
}

struct cie_info {
  const uint8_t *insns, *end;
  uint64_t code_align;
  int64_t data_align;
  uint64_t ra_reg;
  uint8_t fde_enc;
  int has_z, signal;
};

static int parse_cie(const uint8_t *cie, struct cie_info *ci) {
  uint32_t len;
  memcpy(&len, cie, 4);
  if (len == 0 || len == 0xffffffffu) return 0;
  const uint8_t *p = cie + 4, *end = cie + 4 + len;
  uint32_t id;
  memcpy(&id, p, 4);
  p += 4;
  if (id != 0) return 0;
  uint8_t version = *p++;
  if (version != 1 && version != 3) return 0;
  const char *aug = (const char *)p;
  p += strlen(aug) + 1;
  if (aug[0] == 'e' && aug[1] == 'h') return 0;
  ci->code_align = uleb(&p, end);
  ci->data_align = sleb(&p, end);
  ci->ra_reg = version == 1 ? *p++ : uleb(&p, end);
  ci->fde_enc = 0;
  ci->has_z = aug[0] == 'z';
  ci->signal = 0;
  if (ci->has_z) {
    uint64_t alen = uleb(&p, end);
    const uint8_t *aend = p + alen;
    for (const char *a = aug + 1; *a; a++) {
      if (*a == 'R') {
        ci->fde_enc = *p++;
      } else if (*a == 'P') {
        uint8_t penc = *p++;
        uintptr_t ignored;
        if (!read_encoded(&p, aend, penc & 0x7f, 0, &ignored)) return 0;
      } else if (*a == 'L') {
        p++;
      } else if (*a == 'S') {
        ci->signal = 1;
      } else if (*a == 'B' || *a == 'G') {
        /* no data */
      } else {
        break;
      }
    }
    p = aend;
  }
  ci->insns = p;
  ci->end = end;
  return 1;
}

/* Recognises "DW_OP_bregN off" (optionally followed by DW_OP_deref); returns 1 with
 * reg/off/deref filled, 0 for any other expression. */
static int simple_expr(const uint8_t *p, uint64_t n, int *reg, int64_t *off, int *deref) {
  const uint8_t *end = p + n;
  if (n < 2 || p[0] < 0x70 || p[0] > 0x8f) return 0;
  *reg = p[0] - 0x70;
  p++;
  *off = sleb(&p, end);
  *deref = 0;
  if (p < end && *p == 0x06) {
    *deref = 1;
    p++;
  }
  return p == end;
}

static void set_reg(struct cfa_state *s, uint64_t reg, struct reg_rule r) {
  if (reg == R_RBP) s->rbp = r;
  else if (reg == R_RA) s->ra = r;
}

/* Runs CFA instructions [p, end) until the location passes `target`. */
static int run_cfa(const uint8_t *p, const uint8_t *end, const struct cie_info *ci,
                   uintptr_t loc, uintptr_t target, struct cfa_state *s,
                   const struct cfa_state *init) {
  struct cfa_state stack[8];
  int sp = 0;
  while (p < end) {
    uint8_t op = *p++;
    uint8_t hi = op & 0xc0, low = op & 0x3f;
    if (hi == 0x40) {
      loc += low * ci->code_align;
      if (loc > target) return 1;
      continue;
    }
    if (hi == 0x80) {
      int64_t off = (int64_t)uleb(&p, end) * ci->data_align;
      set_reg(s, low, (struct reg_rule){HOW_OFFSET, 0, off});
      continue;
    }
    if (hi == 0xc0) {
      if (!init) return 0;
      if (low == R_RBP) s->rbp = init->rbp;
      else if (low == R_RA) s->ra = init->ra;
      continue;
    }
    switch (op) {
      case 0x00: break; /* nop */
      case 0x01: {      /* set_loc */
        uintptr_t nloc;
        if (!read_encoded(&p, end, ci->fde_enc, 0, &nloc)) return 0;
        loc = nloc;
        if (loc > target) return 1;
        break;
      }
      case 0x02:
        loc += *p++ * ci->code_align;
        if (loc > target) return 1;
        break;
      case 0x03: {
        uint16_t d;
        memcpy(&d, p, 2);
        p += 2;
        loc += d * ci->code_align;
        if (loc > target) return 1;
        break;
      }
      case 0x04: {
        uint32_t d;
        memcpy(&d, p, 4);
        p += 4;
        loc += d * ci->code_align;
        if (loc > target) return 1;
        break;
      }
      case 0x05: { uint64_t r = uleb(&p, end); int64_t off = (int64_t)uleb(&p, end) * ci->data_align;
                   set_reg(s, r, (struct reg_rule){HOW_OFFSET, 0, off}); break; }
      case 0x06: { uint64_t r = uleb(&p, end);
                   if (!init) return 0;
                   if (r == R_RBP) s->rbp = init->rbp; else if (r == R_RA) s->ra = init->ra;
                   break; }
      case 0x07: set_reg(s, uleb(&p, end), (struct reg_rule){HOW_UNDEF, 0, 0}); break;
      case 0x08: set_reg(s, uleb(&p, end), (struct reg_rule){HOW_SAME, 0, 0}); break;
      case 0x09: { uint64_t r = uleb(&p, end); (void)uleb(&p, end);
                   set_reg(s, r, (struct reg_rule){HOW_OTHER, 0, 0}); break; }
      case 0x0a: if (sp == 8) return 0; stack[sp++] = *s; break;
      case 0x0b: { if (sp == 0) return 0;
                   /* the whole row, CFA included, as libgcc and LLVM's unwinder do */
                   *s = stack[--sp]; break; }
      case 0x0c: s->cfa_reg = (int)uleb(&p, end); s->cfa_off = (int64_t)uleb(&p, end);
                 s->cfa_deref = 0; break;
      case 0x0d: s->cfa_reg = (int)uleb(&p, end); s->cfa_deref = 0; break;
      case 0x0e: s->cfa_off = (int64_t)uleb(&p, end); break;
      case 0x0f: { uint64_t n = uleb(&p, end); int reg, deref; int64_t off;
                   if (simple_expr(p, n, &reg, &off, &deref) && deref) {
                     s->cfa_reg = reg; s->cfa_off = off; s->cfa_deref = 1;
                   } else {
                     s->cfa_reg = -1;
                   }
                   p += n; break; }
      case 0x10: { uint64_t r = uleb(&p, end); uint64_t n = uleb(&p, end); int reg, deref;
                   int64_t off;
                   if (simple_expr(p, n, &reg, &off, &deref) && !deref)
                     set_reg(s, r, (struct reg_rule){HOW_ADDR_EXPR, (uint8_t)reg, off});
                   else
                     set_reg(s, r, (struct reg_rule){HOW_OTHER, 0, 0});
                   p += n; break; }
      case 0x11: { uint64_t r = uleb(&p, end); int64_t off = sleb(&p, end) * ci->data_align;
                   set_reg(s, r, (struct reg_rule){HOW_OFFSET, 0, off}); break; }
      case 0x12: s->cfa_reg = (int)uleb(&p, end); s->cfa_off = sleb(&p, end) * ci->data_align;
                 s->cfa_deref = 0; break;
      case 0x13: s->cfa_off = sleb(&p, end) * ci->data_align; break;
      case 0x14: { uint64_t r = uleb(&p, end); (void)uleb(&p, end);
                   set_reg(s, r, (struct reg_rule){HOW_OTHER, 0, 0}); break; }
      case 0x15: { uint64_t r = uleb(&p, end); (void)sleb(&p, end);
                   set_reg(s, r, (struct reg_rule){HOW_OTHER, 0, 0}); break; }
      case 0x16: { uint64_t r = uleb(&p, end); uint64_t n = uleb(&p, end); p += n;
                   set_reg(s, r, (struct reg_rule){HOW_OTHER, 0, 0}); break; }
      case 0x2e: (void)uleb(&p, end); break; /* GNU_args_size */
      case 0x2f: { uint64_t r = uleb(&p, end); int64_t off = -(int64_t)uleb(&p, end) * ci->data_align;
                   set_reg(s, r, (struct reg_rule){HOW_OFFSET, 0, off}); break; }
      default: return 0;
    }
  }
  return 1;
}

/* Finds the FDE covering `ip` and computes the rule there. */
void lt_cfi_rule(uintptr_t ip, struct rule *r) {
  r->kind = RULE_BAD;
  struct dl_find_object dfo;
  if (_dl_find_object((void *)ip, &dfo) != 0 || !dfo.dlfo_eh_frame) return;
  const uint8_t *hdr = dfo.dlfo_eh_frame;
  if (hdr[0] != 1) return;
  const uint8_t *p = hdr + 4, *far = hdr + 64;
  uintptr_t ehf, count;
  if (!read_encoded(&p, far, hdr[1], (uintptr_t)hdr, &ehf)) return;
  if (!read_encoded(&p, far, hdr[2], (uintptr_t)hdr, &count)) return;
  if (hdr[3] != 0x3b || count == 0) return; /* datarel|sdata4 table is what ld emits */
  const uint8_t *tab = p;
  size_t lo = 0, hi = count;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    int32_t start;
    memcpy(&start, tab + 8 * mid, 4);
    if ((uintptr_t)hdr + (intptr_t)start <= ip) lo = mid; else hi = mid;
  }
  int32_t start, fde_off;
  memcpy(&start, tab + 8 * lo, 4);
  memcpy(&fde_off, tab + 8 * lo + 4, 4);
  if ((uintptr_t)hdr + (intptr_t)start > ip) return;
  const uint8_t *fde = hdr + fde_off;
  uint32_t flen, cie_delta;
  memcpy(&flen, fde, 4);
  if (flen == 0 || flen == 0xffffffffu) return;
  memcpy(&cie_delta, fde + 4, 4);
  const uint8_t *fend = fde + 4 + flen;
  struct cie_info ci;
  if (!parse_cie(fde + 4 - cie_delta, &ci)) return;
  const uint8_t *q = fde + 8;
  uintptr_t pc_begin, pc_range;
  if (!read_encoded(&q, fend, ci.fde_enc, 0, &pc_begin)) return;
  if (!read_encoded(&q, fend, ci.fde_enc & 0x0f, 0, &pc_range)) return;
  if (ip < pc_begin || ip - pc_begin >= pc_range) return;
  if (ci.has_z) {
    uint64_t alen = uleb(&q, fend);
    q += alen;
  }
  if (ci.signal) {
    r->kind = RULE_SIGNAL;
    return;
  }
  if (ci.ra_reg != R_RA) return;
  struct cfa_state s = {.cfa_reg = -1, .cfa_off = 0, .cfa_deref = 0,
                        .rbp = {HOW_SAME, 0, 0}, .ra = {HOW_SAME, 0, 0}};
  if (!run_cfa(ci.insns, ci.end, &ci, 0, UINTPTR_MAX, &s, NULL)) return;
  struct cfa_state init = s;
  if (!run_cfa(q, fend, &ci, pc_begin, ip, &s, &init)) return;
  if (s.ra.how == HOW_UNDEF) {
    r->kind = RULE_END;
    return;
  }
  if (s.ra.how != HOW_OFFSET) return;
  if (s.cfa_reg != R_RSP && s.cfa_reg != R_RBP) return;
  if (s.cfa_deref && s.cfa_reg != R_RBP) return;
  int rbp_how;
  switch (s.rbp.how) {
    case HOW_SAME: case HOW_UNDEF: rbp_how = HOW_SAME; break;
    case HOW_OFFSET: rbp_how = HOW_OFFSET; break;
    case HOW_ADDR_EXPR:
      if (s.rbp.reg != R_RBP && s.rbp.reg != R_RSP) return;
      rbp_how = HOW_ADDR_EXPR;
      break;
    default: return;
  }
  r->kind = RULE_NORMAL;
  r->cfa_reg = s.cfa_reg;
  r->cfa_off = s.cfa_off;
  r->cfa_deref = s.cfa_deref;
  r->rbp_how = rbp_how;
  r->rbp_reg = s.rbp.reg;
  r->rbp_off = s.rbp.off;
  r->ra_off = s.ra.off;
}

