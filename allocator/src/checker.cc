// LIFETIME_ALLOC_CHECK: the policy's invariants against the shadow heap, and every live
// object's real address, table entry (address mode: liveness) and size against the policy's.
#include "heap_internal.h"

namespace lalloc {

void check_pages(uint64_t addr, uint64_t size) REQUIRES(heap_lock) {
  // As the engine does: an object's middle pages are its own, alike; check the ends.
  uint64_t first = addr / Backing::kHuge, last = (addr + size - 1) / Backing::kHuge;
  guarded("LIFETIME_ALLOC_CHECK: ", [&]() REQUIRES(heap_lock) {
    for (uint64_t hp = first; hp <= last; ++hp) {
      if (hp == first + 2 && last - first > 4) hp = last - 1;
      g_state->policy->check_page(hp, g_state->shadow);
    }
  });
}

void full_check() REQUIRES(heap_lock) {
  ++g_state->c.checks;
  guarded("LIFETIME_ALLOC_CHECK: ", [&]() REQUIRES(heap_lock) { g_state->policy->check_all(g_state->shadow); });
  if (g_state->addr_mode) {
    // Address mode: every live object the shadow heap knows is live at its address, with
    // its placed size (the policy's check_all has counted the bytes).
    for (const auto& [a, o] : g_state->shadow.all())
      if (g_state->policy->usable_at(a) != o.end - a || !g_state->backing.real(a))
        fatal("LIFETIME_ALLOC_CHECK: a live object's address or size disagrees with the policy's");
    if (g_state->shadow.count() != g_state->c.live_objects)
      fatal("LIFETIME_ALLOC_CHECK: live objects and shadow heap disagree in number");
    return;
  }
  // The translation: every live object's policy address maps to its real one.
  uint64_t live = 0;
  for (uint64_t slot = 0; slot < g_state->slots.capacity(); ++slot) {
    if (!g_state->slots.taken(uint32_t(slot))) continue;
    ++live;
    auto [a, size] = g_state->policy->where(uint32_t(slot));
    const uintptr_t p = g_state->backing.real(a);
    if (!p || slot_of(p) != slot || size < g_state->policy->asked_size(uint32_t(slot)))
      fatal("LIFETIME_ALLOC_CHECK: an object's table entry or size disagrees with the policy's");
  }
  if (live != g_state->shadow.count() || live != g_state->c.live_objects)
    fatal("LIFETIME_ALLOC_CHECK: slot ids and shadow heap disagree in size");
}

}  // namespace lalloc
