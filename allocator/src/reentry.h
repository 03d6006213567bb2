// Allocation from a signal handler that interrupted its thread inside the allocator ("as
// tolerated by glibc": glibc's malloc is not async-signal-safe either, and deadlocks on
// its arena lock in the same case; this allocator serves the nested request instead).
//
// The lock is one non-recursive mutex, so a handler that mallocs while its thread takes,
// holds or is about to let go of it must not take it again.  heap.cc keeps three
// thread-local flags (inside: from before the lock is taken until after it is let go;
// locked: while it is held; arena: inside the metadata arena) and serves a request that
// finds "inside" set:
//   * locked and not in the arena (the policy's own containers, or a handler that
//     interrupted the policy): the metadata arena, as always (it is idle on this thread
//     and the lock keeps other threads out);
//   * otherwise (a handler that interrupted the arena, or a thread waiting for the lock):
//     this file's arena, which never waits: power-of-two blocks, freed ones on lists
//     behind a try-lock (a request that finds it taken bumps a fresh block with one atomic
//     add; a free that finds it taken leaks its block, counted), in 1 GiB of address space
//     reserved at its first use (a request past it fails: ENOMEM).
// A handler's free of a program's pointer (never the policy's doing) is deferred on a
// lock-free list (the object's first word links it) and freed by the next thread that
// takes the lock, before its own operation.  A handler's realloc of a program's pointer
// in that window is fatal (one line): its size is in the policy, behind the lock.
// The model predictor's own window (before the lock) is guarded by its recursion flag: a
// handler's allocation there gets the fallback class (counted "nested") and the lock.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lalloc::reentry {

void* alloc(size_t size, size_t align);  // nullptr when its reservation is used up
bool owns(const void* p);
void free(void* p);  // back on its list (or leaked, counted, when the list is busy)
size_t usable(const void* p);

void defer(void* p);
bool deferred_pending();
void* take_deferred();  // the whole list (each block's first word: the next), under the lock

struct Counts {
  uint64_t allocs, frees, reused, leaked, bytes, deferred_frees;  // bytes: bumped (high-water)
};
Counts counts();

}  // namespace lalloc::reentry
