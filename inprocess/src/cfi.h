/* The unwind rule of a return address from DWARF call frame information (.eh_frame),
 * for the stack walk in unwind.c, which caches the rules it gets from here. */
#ifndef LIFETIME_CFI_H_
#define LIFETIME_CFI_H_

#include <stdint.h>

enum { R_RBP = 6, R_RSP = 7, R_RA = 16 };
enum { HOW_SAME = 0, HOW_UNDEF, HOW_OFFSET, HOW_ADDR_EXPR, HOW_OTHER };
enum { RULE_NORMAL = 1, RULE_END, RULE_SIGNAL, RULE_BAD };

struct rule {
  int kind;
  int cfa_reg;
  int64_t cfa_off;
  int cfa_deref;
  int rbp_how;
  int rbp_reg;
  int64_t rbp_off;
  int64_t ra_off;
};

/* Finds the FDE covering `ip` (glibc's _dl_find_object and the .eh_frame_hdr table) and
 * computes the rule there; r->kind is RULE_BAD where the rule is not one the walk
 * supports.  Never allocates, takes no locks. */
void lt_cfi_rule(uintptr_t ip, struct rule *r);

#endif  /* LIFETIME_CFI_H_ */
