// Attribution in a running process (issue 34, item 1; LIFETIME_ALLOC_ATTRIBUTE): which
// allocation stacks' live objects sit on the huge pages the heap holds, on demand.
//
// Every object the policy places records its allocating stack: the stack is captured
// (the builtin unwinder, inprocess/), interned in a table of stacks (an id per distinct
// stack), and the id is written in the object table (Backing: a uint32 per 16 B of the
// reservation, as slot-mode policies keep their slots there); the free writes 0.  No
// record of our own per object, nothing on the policy's heap: the table's pages are the
// only cost (4 B per 16 B of committed heap, and the stacks' table), and a capture per
// allocation (README.md, "Attribution" says what it costs).
//
// A dump (the stats' lock held: one consistent reading) walks the table over every
// committed heap page: each recorded object's huge page, stack and usable size (the
// policy's), one row per (huge page, stack) in the simulator's attribution rows
// (simulator/src/attribution.h), with the stacks, the process's mappings and the heap's
// totals.  `lifetime fragmentation DUMP` turns it into pinned bytes per context as it
// does for a simulated heap (simulator/fragmentation.py).  Dumps are written at exit, every
// LIFETIME_ALLOC_ATTRIBUTE_INTERVAL seconds, and after LIFETIME_ALLOC_ATTRIBUTE_SIGNAL
// arrives (the next operation that takes the allocator's lock writes it: a thread cache's
// refill or flush, or an allocation or free past the caches; an idle process writes none).
//
// Only policies that know objects by address (the size-class heaps: segregated, baseline,
// size-classes...) can attribute: LLAMA's own heap keeps its slots in the same table.
#pragma once

#include <atomic>
#include <cstdint>

#include "lock.h"

#pragma GCC visibility push(hidden)

namespace lalloc {

struct Config;
class Backing;

namespace attr {

// Set once by setup (under the lock, before the state is published); read on every path.
extern std::atomic<bool> g_on;

// Reserved stack ids (no stack): the object table's 0 is "no object recorded here".
enum : uint32_t {
  kEarly = 1,   // allocated before the library's constructor (the unwinder not ready)
  kNested = 2,  // allocated while this thread was capturing a stack (the unwinder's own)
  kFull = 3,    // the stacks' table was full
  kFirstStack = 4
};

void record(void* p, uintptr_t ra);  // p: an object the policy placed (or direct: ignored)
void forget(void* p);
inline void note_alloc(void* p, uintptr_t ra) {
  if (__builtin_expect(g_on.load(std::memory_order_relaxed), 0) && p) record(p, ra);
}
inline void note_free(void* p) {
  if (__builtin_expect(g_on.load(std::memory_order_relaxed), 0)) forget(p);
}

// init (heap.cc), under the lock: cfg's LIFETIME_ALLOC_ATTRIBUTE on, the policy in address
// mode (else one line, abort), the backing built with its table.  Maps the stacks' table.
void setup(const Config& cfg, bool addr_mode, const Backing& backing) REQUIRES(heap_lock);
// The library's constructor: the unwinder, the signal handler.
void start();
// After each operation (heap.cc after_op): a dump when the signal came or the interval is over.
void maybe_dump(uint64_t now) REQUIRES(heap_lock);
// At exit.
void dump_final(uint64_t now) REQUIRES(heap_lock);
// fork child: the stacks' lock, which another thread may have held across fork, is free.
void fork_child();

}  // namespace attr
}  // namespace lalloc

#pragma GCC visibility pop
